//! The floor under a game server's system CPU on this machine: the TCP segments a session
//! of N clients makes the OS kernel move (one message down to each client per snapshot
//! interval, one reply up for each), with no game, no WebSocket and no async runtime, and
//! each side's CPU read per thread.
//!
//! On loopback, a `send` carries its segment through the receiver's TCP stack in the
//! sender's system time, so a server's system CPU per tick is set by how many segments it
//! sends and reads, whatever the server does between. This measures that cost alone: one
//! thread plays the server (a paced tick loop that writes to the clients due and reads
//! what arrives until the tick ends), another all the clients (each reads its messages and
//! answers each `reply_after_percent` into the interval, as the bots do). The server's
//! system time here is what no server with one segment each way per snapshot can go
//! under; its user time is next to nothing. Linux only (per-thread CPU times).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream as StdTcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

/// Most clients a run opens (two sockets each, in one process).
pub const FLOOR_CLIENT_COUNT_MAX: u32 = 20_000;

/// Largest message either way: a read takes any message whole, so the clients count
/// messages by their bytes.
pub const FLOOR_MESSAGE_BYTES_MAX: u32 = 16 * 1024;

/// Ticks run before the measured ones, so connections are warm and replies flowing.
pub const FLOOR_WARM_TICKS: u32 = 60;

/// Descriptors besides the sockets: the listener, the pollers, their wakers, stdio.
const FILES_SPARE_COUNT: u64 = 64;

/// The clients' poller token for the server's wake-ups (socket tokens are indices).
const WAKE_TOKEN: Token = Token(usize::MAX);

/// What to move and for how long.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    pub clients: u32,
    pub ticks: u32,
    pub tick_rate_hz: u32,
    /// Each client gets one message every this many ticks, clients staggered by index.
    pub interval_ticks: u32,
    pub down_bytes: u32,
    pub up_bytes: u32,
    /// How far into the interval a client answers (0: at once).
    pub reply_after_percent: u32,
}

impl Default for FloorOptions {
    /// A 1,000-client session as the soak plays it: 60 Hz, a snapshot every 3 ticks of the
    /// soak's mean size (about 140 bytes), an INPUT_ACK of 24 bytes half an interval later.
    fn default() -> FloorOptions {
        FloorOptions {
            clients: 1000,
            ticks: 1200,
            tick_rate_hz: 60,
            interval_ticks: 3,
            down_bytes: 140,
            up_bytes: 24,
            reply_after_percent: crate::bots::REPLY_AFTER_PERCENT_DEFAULT,
        }
    }
}

/// CPU per measured tick of each side, in milliseconds, and what moved in those ticks.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FloorReport {
    pub clients: u32,
    pub ticks: u32,
    pub server_cpu_user_ms_per_tick: f64,
    pub server_cpu_system_ms_per_tick: f64,
    pub clients_cpu_user_ms_per_tick: f64,
    pub clients_cpu_system_ms_per_tick: f64,
    /// Messages the server wrote whole (one `send` each).
    pub sends_per_tick: f64,
    /// Writes the kernel refused or cut short for a full send buffer (0 when each side
    /// keeps up).
    pub sends_refused: u64,
    /// Replies the clients wrote whole, and those refused or cut short.
    pub replies_per_tick: f64,
    pub replies_refused: u64,
    /// Reads of the server's that returned data.
    pub server_reads_per_tick: f64,
    /// Seconds the measured ticks took (more than ticks / rate when the loop fell behind).
    pub wall_seconds: f64,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error("{flag} must be between {min} and {max}, is {value}")]
    OutOfRange {
        flag: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error(
        "{clients} clients need {needed} open files, and the hard limit is {limit} (raise it with ulimit -Hn)"
    )]
    TooFewFiles { clients: u32, needed: u64, limit: u64 },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the clients' thread never saw the measured ticks start")]
    ClientsNeverMeasured,
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> FloorError {
    move |source| FloorError::Io { what, source }
}

fn check(flag: &'static str, value: u32, min: u32, max: u32) -> Result<(), FloorError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(FloorError::OutOfRange {
            flag,
            value: value.into(),
            min: min.into(),
            max: max.into(),
        })
    }
}

/// The options' checks, by the `migratory-bots floor` flag each belongs to.
pub fn check_options(o: &FloorOptions) -> Result<(), FloorError> {
    check("--clients", o.clients, 1, FLOOR_CLIENT_COUNT_MAX)?;
    check("--tick-rate-hz", o.tick_rate_hz, 1, 1000)?;
    check(
        "the tick count (--seconds x --tick-rate-hz)",
        o.ticks,
        1,
        u32::MAX - FLOOR_WARM_TICKS,
    )?;
    check("--interval-ticks", o.interval_ticks, 1, 1000)?;
    check("--down-bytes", o.down_bytes, 1, FLOOR_MESSAGE_BYTES_MAX)?;
    check("--up-bytes", o.up_bytes, 1, FLOOR_MESSAGE_BYTES_MAX)?;
    check("--reply-after-percent", o.reply_after_percent, 0, 100)
}

/// User and system CPU of the calling thread so far.
#[cfg(target_os = "linux")]
fn thread_cpu() -> Result<(Duration, Duration), FloorError> {
    // SAFETY: `rusage` is plain data, zero is a valid value of it, and getrusage writes
    // only into the struct it is given; RUSAGE_THREAD names the calling thread.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return Err(io("reading the thread's CPU time")(
                std::io::Error::last_os_error(),
            ));
        }
        ru
    };
    let d = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    Ok((d(ru.ru_utime), d(ru.ru_stime)))
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu() -> Result<(Duration, Duration), FloorError> {
    Err(io("reading the thread's CPU time")(std::io::Error::from(
        ErrorKind::Unsupported,
    )))
}

/// Makes room for two sockets a client: the soft open-file limit raised as far as needed
/// (and the hard limit allows).
#[allow(clippy::unnecessary_cast, reason = "rlim_t is not u64 on every target")]
fn make_room_for_files(clients: u32) -> Result<(), FloorError> {
    let needed = 2 * u64::from(clients) + FILES_SPARE_COUNT;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct they are given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur as u64 >= needed {
        return Ok(());
    }
    if (rl.rlim_max as u64) < needed {
        return Err(FloorError::TooFewFiles {
            clients,
            needed,
            limit: rl.rlim_max as u64,
        });
    }
    rl.rlim_cur = needed as libc::rlim_t;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(io("raising the open-file limit")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Opens `clients` loopback connections: (server ends, client ends), both non-blocking
/// with Nagle off, as the game server and the bots set them.
fn connect(clients: u32) -> Result<(Vec<TcpStream>, Vec<TcpStream>), FloorError> {
    make_room_for_files(clients)?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding 127.0.0.1:0"))?;
    let addr = listener
        .local_addr()
        .map_err(io("reading the listener's address"))?;
    let (mut server, mut client) = (Vec::new(), Vec::new());
    for _ in 0..clients {
        let c = StdTcpStream::connect(addr).map_err(io("connecting"))?;
        let (s, _) = listener.accept().map_err(io("accepting"))?;
        for t in [&c, &s] {
            t.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
            t.set_nonblocking(true).map_err(io("setting O_NONBLOCK"))?;
        }
        server.push(TcpStream::from_std(s));
        client.push(TcpStream::from_std(c));
    }
    Ok((server, client))
}

fn register(poll: &Poll, streams: &mut [TcpStream]) -> Result<(), FloorError> {
    for (i, s) in streams.iter_mut().enumerate() {
        poll.registry()
            .register(s, Token(i), Interest::READABLE)
            .map_err(io("registering a socket"))?;
    }
    Ok(())
}

/// Reads what `s` holds after a readiness event, one `read` while the buffer comes back
/// full: on Linux a TCP read shorter than the buffer has emptied the socket, so the
/// `WouldBlock` read mio's edge-triggered readiness otherwise asks for is not needed (the
/// game server's reads go the same way). Returns (reads that got data, bytes).
fn drain(s: &mut TcpStream, buf: &mut [u8]) -> Result<(u64, u64), FloorError> {
    let (mut reads, mut bytes) = (0, 0);
    loop {
        match s.read(buf) {
            Ok(0) => return Ok((reads, bytes)),
            Ok(n) => {
                reads += 1;
                bytes += n as u64;
                if n < buf.len() {
                    return Ok((reads, bytes));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok((reads, bytes)),
            Err(e) => return Err(io("reading a socket")(e)),
        }
    }
}

/// What the clients' thread measured.
struct ClientsMeasured {
    cpu: (Duration, Duration),
    replies: u64,
    refused: u64,
}

/// A flag the server's side raises for the clients' thread, waking its poller.
struct Signal<'a> {
    flag: &'a AtomicBool,
    waker: &'a Waker,
}

impl Signal<'_> {
    fn raise(&self) {
        self.flag.store(true, Ordering::Release);
        // A failed wake leaves the clients' thread to see the flag within a period.
        let _ = self.waker.wake();
    }
}

/// The clients: read, then answer every whole message `reply_after` later. The CPU and
/// the replies are counted from the wake-up that brings `measuring` to the one that
/// brings `done`.
fn play_clients(
    o: &FloorOptions,
    mut clients: Vec<TcpStream>,
    mut poll: Poll,
    measuring: &AtomicBool,
    done: &AtomicBool,
) -> Result<ClientsMeasured, FloorError> {
    let period = Duration::from_secs(1) / o.tick_rate_hz;
    let reply_after = period * o.interval_ticks * o.reply_after_percent / 100;
    register(&poll, &mut clients)?;
    let up = vec![1u8; o.up_bytes as usize];
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 1 << 16];
    // Bytes of a message begun but not yet whole, per client.
    let mut partial = vec![0u64; clients.len()];
    // Replies due, oldest first: every reply waits the same time, so the queue stays in
    // order of its due times.
    let mut due: VecDeque<(Instant, usize)> = VecDeque::new();
    let mut start: Option<(Duration, Duration)> = None;
    let (mut replies, mut refused) = (0u64, 0u64);
    loop {
        let now = Instant::now();
        while let Some(&(at, i)) = due.front() {
            if at > now {
                break;
            }
            due.pop_front();
            match clients[i].write(&up) {
                Ok(n) if n == up.len() => replies += 1,
                Ok(_) | Err(_) => refused += 1,
            }
        }
        let wait = due
            .front()
            .map_or(period, |&(at, _)| at.saturating_duration_since(now));
        match poll.poll(&mut events, Some(wait.min(period))) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io("polling the clients")(e)),
        }
        if start.is_none() && measuring.load(Ordering::Acquire) {
            start = Some(thread_cpu()?);
            (replies, refused) = (0, 0);
        }
        if done.load(Ordering::Acquire) {
            break;
        }
        let now = Instant::now();
        for ev in events.iter().filter(|ev| ev.token() != WAKE_TOKEN) {
            let i = ev.token().0;
            let (_, bytes) = drain(&mut clients[i], &mut buf)?;
            partial[i] += bytes;
            for _ in 0..partial[i] / u64::from(o.down_bytes) {
                due.push_back((now + reply_after, i));
            }
            partial[i] %= u64::from(o.down_bytes);
        }
    }
    let (u0, s0) = start.ok_or(FloorError::ClientsNeverMeasured)?;
    let (u1, s1) = thread_cpu()?;
    Ok(ClientsMeasured {
        cpu: (u1.saturating_sub(u0), s1.saturating_sub(s0)),
        replies,
        refused,
    })
}

/// What the server's thread measured.
struct ServerMeasured {
    cpu: (Duration, Duration),
    sends: u64,
    refused: u64,
    reads: u64,
    wall: Duration,
}

/// The server: a paced tick loop that writes to the clients due, then reads until the
/// tick's deadline. Raises `measuring` when the warm ticks end.
fn play_server(
    o: &FloorOptions,
    mut server: Vec<TcpStream>,
    measuring: &Signal<'_>,
) -> Result<ServerMeasured, FloorError> {
    let period = Duration::from_secs(1) / o.tick_rate_hz;
    let mut poll = Poll::new().map_err(io("creating a poller"))?;
    register(&poll, &mut server)?;
    let mut events = Events::with_capacity(1024);
    let down = vec![2u8; o.down_bytes as usize];
    let mut buf = vec![0u8; 1 << 16];
    let (mut sends, mut refused, mut reads) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let mut measured_from = (thread_cpu()?, start);
    for tick in 0..FLOOR_WARM_TICKS + o.ticks {
        if tick == FLOOR_WARM_TICKS {
            measured_from = (thread_cpu()?, Instant::now());
            (sends, refused, reads) = (0, 0, 0);
            measuring.raise();
        }
        let first = (tick % o.interval_ticks) as usize;
        for s in server.iter_mut().skip(first).step_by(o.interval_ticks as usize) {
            // A short write counts as refused: the rest of it is not sent.
            match s.write(&down) {
                Ok(n) if n == down.len() => sends += 1,
                Ok(_) | Err(_) => refused += 1,
            }
        }
        let deadline = start + period * (tick + 1);
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match poll.poll(&mut events, Some(deadline - now)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io("polling the server's sockets")(e)),
            }
            for ev in &events {
                reads += drain(&mut server[ev.token().0], &mut buf)?.0;
            }
        }
    }
    let ((u0, s0), t0) = measured_from;
    let (u1, s1) = thread_cpu()?;
    Ok(ServerMeasured {
        cpu: (u1.saturating_sub(u0), s1.saturating_sub(s0)),
        sends,
        refused,
        reads,
        wall: t0.elapsed(),
    })
}

/// Runs the session and reports each side's CPU per measured tick.
pub fn run(o: &FloorOptions) -> Result<FloorReport, FloorError> {
    check_options(o)?;
    let (server, clients) = connect(o.clients)?;
    let clients_poll = Poll::new().map_err(io("creating a poller"))?;
    let waker = Waker::new(clients_poll.registry(), WAKE_TOKEN).map_err(io("creating a waker"))?;
    let (measuring, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let (served, played) = std::thread::scope(|scope| {
        let clients_side = scope.spawn(|| play_clients(o, clients, clients_poll, &measuring, &done));
        let signal = |flag| Signal { flag, waker: &waker };
        // A panic of the server's side is caught, so `done` is raised however it ends and
        // the clients' thread always stops.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            play_server(o, server, &signal(&measuring))
        }));
        signal(&done).raise();
        (served, clients_side.join())
    });
    let served = served.map_err(|_| FloorError::Panicked("server's"))??;
    let played = played.map_err(|_| FloorError::Panicked("clients'"))??;
    let ticks = f64::from(o.ticks);
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / ticks;
    Ok(FloorReport {
        clients: o.clients,
        ticks: o.ticks,
        server_cpu_user_ms_per_tick: ms(served.cpu.0),
        server_cpu_system_ms_per_tick: ms(served.cpu.1),
        clients_cpu_user_ms_per_tick: ms(played.cpu.0),
        clients_cpu_system_ms_per_tick: ms(played.cpu.1),
        sends_per_tick: served.sends as f64 / ticks,
        sends_refused: served.refused,
        replies_per_tick: played.replies as f64 / ticks,
        replies_refused: played.refused,
        server_reads_per_tick: served.reads as f64 / ticks,
        wall_seconds: served.wall.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_due_client_gets_one_message_a_tick_and_answers_each() {
        let o = FloorOptions {
            clients: 30,
            ticks: 60,
            ..FloorOptions::default()
        };
        let r = run(&o).expect("a small loopback session runs");
        // 30 clients every 3 ticks: exactly 10 sends a tick, none refused.
        assert_eq!(r.sends_per_tick, 10.0, "{r:?}");
        assert_eq!((r.sends_refused, r.replies_refused), (0, 0), "{r:?}");
        // One reply a message: those to the warm ticks' last messages come in the measured
        // ticks, those to the measured ticks' last ones after them, so about as many.
        // (A loaded machine may hold some back past the end: at least half must come.)
        assert!((5.0..=11.0).contains(&r.replies_per_tick), "{r:?}");
        assert!(r.server_reads_per_tick > 0.0, "{r:?}");
        // Both sides spent CPU in the window (user + system: the split is sampled per
        // kernel tick, so either part alone may read 0 in a short run).
        let server = r.server_cpu_user_ms_per_tick + r.server_cpu_system_ms_per_tick;
        let clients = r.clients_cpu_user_ms_per_tick + r.clients_cpu_system_ms_per_tick;
        assert!(server > 0.0 && clients > 0.0, "{r:?}");
    }

    #[test]
    fn bad_options_are_refused_by_flag_before_any_socket_opens() {
        for (o, flag) in [
            (
                FloorOptions {
                    clients: 0,
                    ..FloorOptions::default()
                },
                "--clients",
            ),
            (
                FloorOptions {
                    interval_ticks: 0,
                    ..FloorOptions::default()
                },
                "--interval-ticks",
            ),
            (
                FloorOptions {
                    down_bytes: FLOOR_MESSAGE_BYTES_MAX + 1,
                    ..FloorOptions::default()
                },
                "--down-bytes",
            ),
            (
                FloorOptions {
                    reply_after_percent: 101,
                    ..FloorOptions::default()
                },
                "--reply-after-percent",
            ),
        ] {
            match run(&o) {
                Err(FloorError::OutOfRange { flag: f, .. }) => assert_eq!(f, flag),
                other => panic!("{flag}: expected OutOfRange, got {other:?}"),
            }
        }
    }
}
