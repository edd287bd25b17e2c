//! A connection's outgoing bytes, shared by the tick thread and the connection task: the
//! tick thread writes each snapshot straight into the socket, the task writes its own
//! messages (WELCOME, terrain, PONG, close) through tungstenite, and whatever the socket
//! cannot take at once waits here, in order, until the task drains it.
//!
//! Before, every snapshot went into the connection's queue, woke its task, and was framed
//! and written there: with 1,000 clients that was about 330 task wake-ups a tick, each a
//! poll of the session loop, a tungstenite frame copied into its buffer and a flush. Now
//! a snapshot the socket takes costs a lock and one `write` on the tick thread, and the
//! task wakes only when the socket is full.
//!
//! Frames never interleave: every write here happens under the outlet's lock, a write of
//! the task's (through [`Writer`]) is taken whole or not at all, and while anything waits
//! every new write queues behind it. Snapshots go out only once the outlet is open, which
//! the task does after WELCOME and the terrain are in, and never after the close frame
//! (`stop_snapshots`).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::Bytes;

/// The socket's write side, as the outlet holds it.
type Io = Box<dyn WriteSide>;

/// A connection's write side: a byte stream, and the socket under it when it is one.
pub(crate) trait WriteSide: AsyncWrite + Send + Unpin + 'static {
    /// The socket this writes into, for writes straight to it (`write_some`); `None` for a
    /// stream that is not a socket of its own.
    fn socket_fd(&self) -> Option<RawFd> {
        None
    }
}

impl WriteSide for tokio::net::tcp::OwnedWriteHalf {
    fn socket_fd(&self) -> Option<RawFd> {
        Some(self.as_ref().as_raw_fd())
    }
}

/// A transport split behind a lock (any upgrade but hyper's own TCP stream).
impl<T: AsyncWrite + Send + 'static> WriteSide for tokio::io::WriteHalf<T> {}

#[cfg(test)]
impl WriteSide for tokio::io::DuplexStream {}

/// Why [`Outlet::queue_binary`] did not take a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `frames_max` writes are already waiting: the message was not taken.
    Full,
    /// The connection is gone (its task ended, or the socket failed).
    Closed,
}

/// One connection's write side and what waits for it.
pub(crate) struct Outlet {
    inner: Mutex<Inner>,
    /// Snapshots may be written: WELCOME and the terrain are ahead of them.
    open: AtomicBool,
    /// Set whenever a whole write reaches the socket; the tick thread clears it when it
    /// counts an overflow, so consecutive overflows are told from separated ones.
    sent_since_overflow: AtomicBool,
    /// Writes that may wait before the next message is refused as full.
    waiting_max: usize,
    /// Longest frame payload: a longer message is sent in several frames.
    frame_bytes_max: usize,
}

impl std::fmt::Debug for Outlet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outlet")
            .field("open", &self.open.load(Ordering::Relaxed))
            .field("waiting_max", &self.waiting_max)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// `None` once closed.
    io: Option<Io>,
    /// Bytes taken and not yet in the socket, oldest first; the first may be partly sent.
    waiting: VecDeque<Bytes>,
    /// The socket was full at the last write: the task drains what waits as it has room.
    blocked: bool,
    /// The task, while it waits for something to drain.
    drain_waker: Option<Waker>,
}

impl Outlet {
    /// An outlet writing into `io`; at most `waiting_max` (at least 1) writes wait. When `io`
    /// is a socket's write half, writes go straight to the socket.
    pub fn new(io: impl WriteSide, waiting_max: usize, frame_bytes_max: usize) -> Arc<Outlet> {
        assert!(
            waiting_max > 0 && frame_bytes_max > 0,
            "an outlet holds a write and a byte"
        );
        Arc::new(Outlet {
            inner: Mutex::new(Inner {
                io: Some(Box::new(io)),
                waiting: VecDeque::new(),
                blocked: false,
                drain_waker: None,
            }),
            open: AtomicBool::new(false),
            sent_since_overflow: AtomicBool::new(false),
            waiting_max,
            frame_bytes_max,
        })
    }

    /// An outlet with no connection behind it: it refuses everything as closed.
    pub fn closed() -> Arc<Outlet> {
        Arc::new(Outlet {
            inner: Mutex::new(Inner {
                io: None,
                waiting: VecDeque::new(),
                blocked: false,
                drain_waker: None,
            }),
            open: AtomicBool::new(false),
            sent_since_overflow: AtomicBool::new(false),
            waiting_max: 1,
            frame_bytes_max: 1,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the state whole, so a poisoned lock is taken as is.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets snapshots through: everything before them is written or waiting.
    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
    }

    /// Lets no more snapshots through, before the task writes its close frame: a data frame
    /// after a close frame is a protocol error the client reports (a browser logs "Data
    /// frame received after close"). Under the lock, so a snapshot queued concurrently is
    /// either in before the close frame or refused.
    pub fn stop_snapshots(&self) {
        let _s = self.lock();
        self.open.store(false, Ordering::Release);
    }

    /// Snapshots may be sent.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Clears the sent-since-overflow flag and answers whether it was set.
    pub fn take_sent_since_overflow(&self) -> bool {
        self.sent_since_overflow.swap(false, Ordering::Relaxed)
    }

    /// Marks a whole write of the task's as sent.
    pub fn note_sent(&self) {
        self.sent_since_overflow.store(true, Ordering::Relaxed);
    }

    /// Closes the outlet: what waits is dropped and the socket's write side with it.
    pub fn close(&self) {
        let mut s = self.lock();
        s.io = None;
        s.waiting = VecDeque::new();
        self.open.store(false, Ordering::Release);
        if let Some(w) = s.drain_waker.take() {
            w.wake();
        }
    }

    /// Queues the binary message `head` + `body` from any thread, never waiting, for
    /// [`Outlet::write_waiting`] (or the task) to write. Answers how many writes then wait.
    /// An outlet not open (or no longer: see [`Outlet::stop_snapshots`]) refuses it as
    /// closed.
    pub fn queue_binary(&self, head: &[u8], body: &[u8]) -> Result<usize, Refused> {
        let mut s = self.lock();
        if s.io.is_none() || !self.open.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        if s.waiting.len() >= self.waiting_max {
            return Err(Refused::Full);
        }
        let frames = binary_frames(head, body, self.frame_bytes_max);
        s.waiting.push_back(frames);
        Ok(s.waiting.len())
    }

    /// Writes what waits, from a thread that is not the connection's task, as far as the
    /// socket takes it; when it is full, the task is woken to drain the rest.
    pub fn write_waiting(&self) {
        let mut s = self.lock();
        // Blocked: the task waits on the socket and drains when it has room; a poll from
        // here would put a no-op waker in the task's place.
        if s.blocked || s.waiting.is_empty() || s.io.is_none() {
            return;
        }
        // The socket is polled with a no-op waker: when it is full, `blocked` is set and
        // the task, woken here, registers its own.
        let mut cx = Context::from_waker(Waker::noop());
        match self.drain(&mut s, &mut cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Pending => {
                if let Some(w) = s.drain_waker.take() {
                    w.wake();
                }
            }
            Poll::Ready(Err(_)) => {
                drop(s);
                self.close();
            }
        }
    }

    /// Resolves when something waited and now is all in the socket (or the socket
    /// failed); pending while nothing waits. For the connection task's loop.
    pub fn poll_drained(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.lock();
        if s.io.is_none() {
            return Poll::Ready(Err(closed_error()));
        }
        if s.waiting.is_empty() {
            match &s.drain_waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => s.drain_waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        self.drain(&mut s, cx)
    }

    /// Writes what waits until none does (ready) or the socket is full (pending and
    /// blocked, `cx` woken when it has room).
    fn drain(&self, s: &mut Inner, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(front) = s.waiting.front().cloned() {
            let n = match write_some(s, cx, &front) {
                Ok(n) => n,
                Err(e) => return Poll::Ready(Err(e)),
            };
            if n < front.len() {
                if let Some(f) = s.waiting.front_mut() {
                    *f = front.slice(n..);
                }
                s.blocked = true;
                return Poll::Pending;
            }
            s.waiting.pop_front();
            self.note_sent();
        }
        s.blocked = false;
        Poll::Ready(Ok(()))
    }
}

/// Writes as much of `buf` as the socket takes now: all of it, or less when it is full
/// (then `cx` is woken when it has room).
fn write_some(s: &mut Inner, cx: &mut Context<'_>, buf: &[u8]) -> io::Result<usize> {
    let io = s.io.as_mut().ok_or_else(closed_error)?;
    let mut at = 0;
    if let Some(fd) = io.socket_fd() {
        // Straight into the socket: through `poll_write`, each of the flusher's 330 writes a
        // tick at 1,000 clients also went through tokio's readiness and cooperative budget
        // checks. Only a full socket falls through to `poll_write`, which then finds it full
        // and registers `cx` for its room.
        while at < buf.len() {
            // SAFETY: `fd` is the socket `io` owns, and `io` is borrowed for this whole loop;
            // the buffer is valid for `buf.len() - at` bytes.
            let n = unsafe {
                libc::send(
                    fd,
                    buf[at..].as_ptr().cast(),
                    buf.len() - at,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                at += n as usize;
                continue;
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => break,
                _ => return Err(e),
            }
        }
    }
    while at < buf.len() {
        match Pin::new(&mut *io).poll_write(cx, &buf[at..]) {
            Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => at += n,
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => break,
        }
    }
    Ok(at)
}

fn closed_error() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the connection's outlet is closed")
}

/// The outlet as the byte stream tungstenite writes into (the connection task's writes).
/// Dropping it closes the outlet.
pub(crate) struct Writer(pub Arc<Outlet>);

impl AsyncWrite for Writer {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let outlet = &self.0;
        let mut s = outlet.lock();
        if s.io.is_none() {
            return Poll::Ready(Err(closed_error()));
        }
        // What waits goes first; until it is out, this write takes none of its bytes (as a
        // plain socket write would), so a stalled client holds at most one write's copy.
        std::task::ready!(outlet.drain(&mut s, cx))?;
        let sent = write_some(&mut s, cx, buf)?;
        if sent < buf.len() {
            // Taken whole: the rest waits, so no other write can cut into the frame.
            s.waiting.push_back(Bytes::copy_from_slice(&buf[sent..]));
            s.blocked = true;
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outlet = &self.0;
        let mut s = outlet.lock();
        std::task::ready!(outlet.drain(&mut s, cx))?;
        match s.io.as_mut() {
            Some(io) => Pin::new(io).poll_flush(cx),
            None => Poll::Ready(Err(closed_error())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outlet = &self.0;
        let mut s = outlet.lock();
        std::task::ready!(outlet.drain(&mut s, cx))?;
        // No snapshot may follow the shutdown.
        outlet.open.store(false, Ordering::Release);
        match s.io.as_mut() {
            Some(io) => Pin::new(io).poll_shutdown(cx),
            None => Poll::Ready(Err(closed_error())),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A connection's read side and its outlet, as one stream for tungstenite.
pub(crate) struct Duplex<R> {
    pub read: R,
    pub write: Writer,
}

impl<R: AsyncRead + Unpin> AsyncRead for Duplex<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl<R: Unpin> AsyncWrite for Duplex<R> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.write).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}

/// A read side that first yields bytes read ahead of it (what hyper read past the
/// upgrade request).
pub(crate) struct Prefixed<R> {
    pub ahead: Bytes,
    pub read: R,
}

impl<R: AsyncRead + Unpin> AsyncRead for Prefixed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.ahead.is_empty() {
            let n = self.ahead.len().min(buf.remaining());
            let head = self.ahead.split_to(n);
            buf.put_slice(&head);
            if self.ahead.is_empty() {
                // An empty view would still hold its buffer.
                self.ahead = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

/// The binary message `head` + `body` as server frames (RFC 6455 section 5.2: unmasked),
/// each carrying at most `frame_bytes_max` bytes of it, in one buffer.
///
/// | bytes | field |
/// |---|---|
/// | 0 | FIN (0x80, last frame only) \| opcode (0x2 binary first, 0x0 continuation) |
/// | 1 | payload length if < 126; else 126 (a u16 follows) or 127 (a u64 follows) |
/// | 2.. | the extended length, big-endian, then the payload |
pub(crate) fn binary_frames(head: &[u8], body: &[u8], frame_bytes_max: usize) -> Bytes {
    let len = head.len() + body.len();
    let frame_count = len.div_ceil(frame_bytes_max).max(1);
    let mut out = Vec::with_capacity(len + frame_count * FRAME_HEADER_BYTES_MAX);
    let mut parts = [head, body];
    let mut left = len;
    let mut first = true;
    loop {
        let n = left.min(frame_bytes_max);
        left -= n;
        let opcode = if first { OPCODE_BINARY } else { OPCODE_CONTINUATION };
        out.push(if left == 0 { FIN | opcode } else { opcode });
        if n < 126 {
            out.push(n as u8);
        } else if let Ok(n16) = u16::try_from(n) {
            out.push(126);
            out.extend_from_slice(&n16.to_be_bytes());
        } else {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        let mut need = n;
        for p in parts.iter_mut() {
            let take = need.min(p.len());
            out.extend_from_slice(&p[..take]);
            *p = &p[take..];
            need -= take;
        }
        first = false;
        if left == 0 {
            return Bytes::from(out);
        }
    }
}

const FIN: u8 = 0x80;
const OPCODE_BINARY: u8 = 0x2;
const OPCODE_CONTINUATION: u8 = 0x0;
/// Two bytes and an 8-byte extended length.
const FRAME_HEADER_BYTES_MAX: usize = 10;

#[cfg(test)]
mod tests;
