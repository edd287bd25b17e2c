//! One client connection: the HELLO handshake, then reading the client's messages into
//! events for the tick thread and writing what the tick thread queued, in one task.
//!
//! PING is answered right here, never through the tick, so the round trip is the
//! transport's. Every write races the close requests (eviction, shutdown), so a client
//! that stops reading can always be closed, and the close handshake is bounded by
//! `eviction_close_timeout_seconds`, after which the transport is dropped.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::outlet::{Duplex, Outlet, WriteSide, Writer};
use crate::rate_limit::{Admit, RateLimiter};
use crate::send_queue;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::connection_ctx::ConnectionCtx;
use crate::events::{ClientShared, CloseRequest, NetEvent, Outbound};
use crate::lifecycle::Fence;
use crate::metrics::Metrics;
use crate::wake_gate::Gated;
use migratory_wire::protocol::{self, close_code, ClientMessage, HelloOptions};

/// Keeps the live-connection gauge honest: counted up when the task starts, down when it
/// ends, however it ends.
struct ConnectionGauge(Arc<Metrics>);

impl ConnectionGauge {
    fn new(metrics: &Arc<Metrics>) -> ConnectionGauge {
        metrics.connections.fetch_add(1, Relaxed);
        metrics.connections_total.fetch_add(1, Relaxed);
        ConnectionGauge(metrics.clone())
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Relaxed);
    }
}

/// How a connection ended, for the disconnect log line.
#[derive(Debug)]
enum End {
    /// The server closed it with this code and reason.
    Closed { code: u16, reason: String },
    /// The client closed it (close frame), with its code.
    ClientClosed(Option<u16>),
    /// The transport failed or ended without a close frame.
    Transport(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed { code, reason } => write!(f, "closed by server ({code}: {reason})"),
            End::ClientClosed(Some(code)) => write!(f, "closed by client ({code})"),
            End::ClientClosed(None) => write!(f, "closed by client"),
            End::Transport(e) => write!(f, "transport ended: {e}"),
        }
    }
}

/// Why the loop stops, before the close handshake.
enum Stop {
    Close { code: u16, reason: String },
    ClientClosed(Option<u16>),
    Transport(String),
}

struct Conn<R> {
    ws: WebSocketStream<Duplex<R>>,
    /// Where this connection's bytes go out: the tick thread writes snapshots into it.
    outlet: Arc<Outlet>,
    ctx: Arc<ConnectionCtx>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    shared: Option<Arc<ClientShared>>,
    limiter: RateLimiter,
    last_client_seq: Option<u32>,
    /// When this connection's last BOOKMARK was taken.
    last_bookmark: Option<Instant>,
}

/// Least time between two BOOKMARKs a connection has recorded.
const BOOKMARK_INTERVAL_MIN: Duration = Duration::from_secs(1);

/// Serves one upgraded WebSocket connection, read from `read` and written to `write`,
/// until it ends.
pub(crate) async fn run<R, W>(read: R, write: W, ctx: Arc<ConnectionCtx>, peer: Option<SocketAddr>)
where
    R: AsyncRead + Unpin,
    W: WriteSide,
{
    let _gauge = ConnectionGauge::new(&ctx.metrics);
    let limits = &ctx.input_limits;
    let outlet = Outlet::new(
        write,
        ctx.backpressure.send_queue_max_messages as usize,
        ctx.ws_frame_bytes_max,
    );
    let duplex = Duplex {
        read,
        write: Writer(outlet.clone()),
    };
    let ws = WebSocketStream::from_raw_socket(duplex, Role::Server, Some(ctx.ws_config)).await;
    let mut conn = Conn {
        outlet,
        limiter: RateLimiter::new(
            limits.messages_per_second,
            limits.burst_messages,
            limits.close_after_excess_per_second,
        ),
        shutdown: ctx.shutdown.clone(),
        ws,
        ctx,
        shared: None,
        last_client_seq: None,
        last_bookmark: None,
    };
    let stop = conn.serve().await;
    let end = conn.finish(stop).await;
    // Nothing more goes out: the tick thread's next snapshot finds the outlet closed.
    conn.outlet.close();
    let client = conn.shared.as_ref().map(|s| s.client);
    match &conn.shared {
        Some(s) => {
            if matches!(end, End::ClientClosed(_)) {
                s.closed_by_client.store(true, Relaxed);
            }
            let _ = conn.ctx.events.send(NetEvent::Gone { shared: s.clone() });
            tracing::info!(
                client = s.client,
                peer = ?peer,
                reason = %end,
                state_updates_dropped = s.state_updates_dropped.load(Relaxed),
                overflow_events = s.overflow_events.load(Relaxed),
                queue_depth_hwm = s.queue_depth_hwm.load(Relaxed),
                "client disconnected"
            );
        }
        None => {
            tracing::info!(client = ?client, peer = ?peer, reason = %end, "connection ended before HELLO")
        }
    }
}

impl<R> Conn<R>
where
    R: AsyncRead + Unpin,
{
    async fn serve(&mut self) -> Stop {
        let (name, options) = match self.handshake().await {
            Ok(hello) => hello,
            Err(stop) => return stop,
        };
        let terrain_cached = options.cached_terrain == Some(self.ctx.terrain_hash);
        let queue_len = self.ctx.backpressure.send_queue_max_messages as usize;
        let (tx, rx) = send_queue::channel(queue_len);
        if let Some(reclaim) = options.reclaim {
            return match self.reclaim(reclaim, terrain_cached, tx).await {
                Ok(()) => self.session(rx).await,
                Err(stop) => stop,
            };
        }
        let client = self.ctx.next_client_id.fetch_add(1, Relaxed);
        let shared = Arc::new(ClientShared::new(client, self.outlet.clone()));
        self.shared = Some(shared.clone());
        let hello = NetEvent::Hello {
            client,
            name,
            terrain_cached,
            spectator: options.spectate,
            want_token: options.want_token,
            shared,
            queue: tx,
        };
        if self.ctx.events.send(hello).is_err() {
            return Stop::Close {
                code: close_code::GOING_AWAY,
                reason: "server shutting down".into(),
            };
        }
        self.session(rx).await
    }

    /// Asks the tick thread for the avatar of a reconnect token; on success this
    /// connection is that client's from now on.
    async fn reclaim(
        &mut self,
        reclaim: protocol::Reclaim,
        terrain_cached: bool,
        queue: send_queue::Sender<Outbound>,
    ) -> Result<(), Stop> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let event = NetEvent::Reclaim {
            token: reclaim.token,
            terrain_cached,
            keeps_baselines: reclaim.keeps_baselines,
            queue,
            outlet: self.outlet.clone(),
            reply,
        };
        if self.ctx.events.send(event).is_err() {
            return Err(going_away(&self.ctx.fence));
        }
        tokio::pin!(answer);
        let answer = tokio::select! {
            biased;
            _ = shutdown_signal(&mut self.shutdown) => {
                // An avatar rebound to this connection just before the shutdown must be
                // given up again, or it would stay bound to a connection that never was.
                if let Ok(Ok(shared)) = answer.as_mut().try_recv() {
                    let _ = self.ctx.events.send(NetEvent::Gone { shared });
                }
                return Err(going_away(&self.ctx.fence));
            }
            a = &mut answer => a,
        };
        match answer {
            Ok(Ok(shared)) => {
                self.shared = Some(shared);
                Ok(())
            }
            Ok(Err(_refused)) => Err(Stop::Close {
                code: close_code::RECLAIM_REFUSED,
                reason: "reconnect token refused: unknown, already used, or its grace ran out".into(),
            }),
            // The tick thread is gone: the server is stopping.
            Err(_) => Err(going_away(&self.ctx.fence)),
        }
    }

    /// Waits for HELLO (answering PINGs meanwhile); returns the player name and what the
    /// HELLO asked for.
    async fn handshake(&mut self) -> Result<(String, HelloOptions), Stop> {
        let timeout = self.ctx.hello_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            let msg = tokio::select! {
                biased;
                _ = shutdown_signal(&mut self.shutdown) => return Err(going_away(&self.ctx.fence)),
                _ = tokio::time::sleep_until(deadline) => {
                    self.ctx.metrics.handshake_timeouts_total.fetch_add(1, Relaxed);
                    return Err(Stop::Close {
                        code: close_code::POLICY_VIOLATION,
                        reason: format!("no HELLO within {:.1} s", timeout.as_secs_f64()),
                    });
                }
                msg = self.ws.next() => msg,
            };
            let data = self.incoming(msg)?;
            let Some(data) = data else { continue };
            match protocol::decode_client(&data) {
                Ok(ClientMessage::Hello { name, options, .. }) => return Ok((name.to_string(), options)),
                Ok(ClientMessage::Ping { nonce }) => self.pong(nonce).await?,
                Ok(ClientMessage::Input(_)) => return Err(self.policy("INPUT before HELLO")),
                Ok(ClientMessage::InputAck { .. }) => return Err(self.policy("INPUT_ACK before HELLO")),
                Ok(ClientMessage::Camera(_)) => return Err(self.policy("CAMERA before HELLO")),
                Ok(ClientMessage::Ack { .. }) => return Err(self.policy("ACK before HELLO")),
                Ok(ClientMessage::Bookmark { .. }) => return Err(self.policy("BOOKMARK before HELLO")),
                Err(e) => return Err(self.protocol_error(e)),
            }
        }
    }

    /// Joined (or joining): client messages become events; queued messages go out.
    async fn session(&mut self, mut rx: send_queue::Receiver<Outbound>) -> Stop {
        let Some(shared) = self.shared.clone() else {
            return going_away(&self.ctx.fence);
        };
        // Made once, not per message: each new one registers with (and leaves) the close
        // notifier and the shutdown watch, thousands of times a second at 1,000 clients.
        // Behind a gate, they are polled only when one of them woke the task.
        let mut shutdown_rx = self.shutdown.clone();
        let stop = {
            let shared = shared.clone();
            Gated::new(async move {
                tokio::select! {
                    biased;
                    () = shared.close_requested() => true,
                    () = shutdown_signal(&mut shutdown_rx) => false,
                }
            })
        };
        tokio::pin!(stop);
        loop {
            tokio::select! {
                biased;
                closed = &mut stop => {
                    if !closed {
                        return going_away(&self.ctx.fence);
                    }
                    let req = shared.close_request().unwrap_or_else(|| CloseRequest {
                        code: close_code::GOING_AWAY,
                        reason: "closed".into(),
                    });
                    return Stop::Close { code: req.code, reason: req.reason };
                }
                out = rx.recv() => {
                    let r = match out {
                        None => Err(going_away(&self.ctx.fence)),
                        Some(Outbound::Welcome { message, terrain_cached }) => {
                            self.welcome_and_terrain(message, terrain_cached).await
                        }
                    };
                    if let Err(stop) = r {
                        return stop;
                    }
                }
                // Snapshots the socket could not take at once, written as it takes them.
                drained = std::future::poll_fn(|cx| self.outlet.poll_drained(cx)) => {
                    if let Err(e) = drained {
                        return Stop::Transport(e.to_string());
                    }
                }
                msg = self.ws.next() => {
                    let data = match self.incoming(msg) {
                        Ok(Some(d)) => d,
                        Ok(None) => continue,
                        Err(stop) => return stop,
                    };
                    if let Err(stop) = self.client_message(shared.client, shared.connection, &data).await {
                        return stop;
                    }
                }
            }
        }
    }

    /// One binary message from a joined client.
    async fn client_message(&mut self, client: u32, connection: u64, data: &[u8]) -> Result<(), Stop> {
        let event = match protocol::decode_client(data) {
            Ok(ClientMessage::Input(m)) => {
                if !self.in_sequence(m.seq) {
                    return Ok(());
                }
                NetEvent::Input {
                    client,
                    connection,
                    input: m,
                    ack: None,
                }
            }
            // A stale INPUT inside is dropped as any stale INPUT is; its ACK still counts.
            Ok(ClientMessage::InputAck { input, tick }) => {
                if self.in_sequence(input.seq) {
                    NetEvent::Input {
                        client,
                        connection,
                        input,
                        ack: Some(tick),
                    }
                } else {
                    NetEvent::Ack {
                        client,
                        connection,
                        tick,
                    }
                }
            }
            Ok(ClientMessage::Camera(m)) => {
                if !self.in_sequence(m.seq) {
                    return Ok(());
                }
                NetEvent::Camera {
                    client,
                    connection,
                    camera: m,
                }
            }
            Ok(ClientMessage::Ack { tick }) => NetEvent::Ack {
                client,
                connection,
                tick,
            },
            Ok(ClientMessage::Ping { nonce }) => return self.pong(nonce).await,
            Ok(ClientMessage::Bookmark { note }) => {
                // One a second per connection: a held key, or a client flooding the
                // recording, costs nothing past that.
                let now = Instant::now();
                if self
                    .last_bookmark
                    .is_some_and(|t| now - t < BOOKMARK_INTERVAL_MIN)
                {
                    self.ctx.metrics.bookmarks_dropped_total.fetch_add(1, Relaxed);
                    return Ok(());
                }
                self.last_bookmark = Some(now);
                NetEvent::Bookmark {
                    client,
                    connection,
                    note: note.to_string(),
                }
            }
            Ok(ClientMessage::Hello { .. }) => return Err(self.policy("HELLO sent twice")),
            Err(e) => return Err(self.protocol_error(e)),
        };
        if self.ctx.events.send(event).is_err() {
            return Err(going_away(&self.ctx.fence));
        }
        Ok(())
    }

    /// True for an INPUT or CAMERA whose sequence number is above the last one (which it
    /// becomes); a stale one is counted and dropped. The client's own sequence only orders
    /// its messages; the tick thread gives the kernel its own sequence numbers.
    fn in_sequence(&mut self, seq: u32) -> bool {
        if self.last_client_seq.is_some_and(|last| seq <= last) {
            self.ctx.metrics.inputs_stale_total.fetch_add(1, Relaxed);
            return false;
        }
        self.last_client_seq = Some(seq);
        true
    }

    /// Sorts out one read result: `Some(bytes)` for a binary message that passed the rate
    /// limit, `None` for something to skip, `Err` to stop.
    fn incoming(&mut self, msg: Option<Result<Message, WsError>>) -> Result<Option<Bytes>, Stop> {
        let m = &self.ctx.metrics;
        match msg {
            None => Err(Stop::Transport("connection ended".into())),
            Some(Err(e)) => Err(self.read_error(e)),
            Some(Ok(Message::Binary(data))) => {
                m.messages_received_total.fetch_add(1, Relaxed);
                m.bytes_received_total.fetch_add(data.len() as u64, Relaxed);
                match self.limiter.admit(Instant::now()) {
                    Admit::Yes => Ok(Some(data)),
                    Admit::Drop => {
                        m.inputs_rate_limited_total.fetch_add(1, Relaxed);
                        Ok(None)
                    }
                    Admit::Close => {
                        m.inputs_rate_limited_total.fetch_add(1, Relaxed);
                        Err(self.policy("input rate limit exceeded"))
                    }
                }
            }
            Some(Ok(Message::Text(_))) => {
                m.protocol_errors_total.fetch_add(1, Relaxed);
                Err(Stop::Close {
                    code: close_code::UNSUPPORTED_DATA,
                    reason: "text frames are not supported: the protocol is binary".into(),
                })
            }
            Some(Ok(Message::Close(frame))) => Err(Stop::ClientClosed(frame.map(|f| u16::from(f.code)))),
            // WebSocket pings are answered by tungstenite itself.
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => Ok(None),
        }
    }

    fn read_error(&self, e: WsError) -> Stop {
        let m = &self.ctx.metrics;
        match e {
            WsError::Capacity(c) => {
                m.protocol_errors_total.fetch_add(1, Relaxed);
                Stop::Close {
                    code: close_code::MESSAGE_TOO_BIG,
                    reason: format!(
                        "message too big (limit {} bytes): {c}",
                        self.ctx.client_message_bytes_max
                    ),
                }
            }
            WsError::Protocol(p) => {
                m.protocol_errors_total.fetch_add(1, Relaxed);
                Stop::Close {
                    code: close_code::PROTOCOL_ERROR,
                    reason: truncate_reason(format!("WebSocket protocol error: {p}")),
                }
            }
            WsError::Utf8(_) => {
                m.protocol_errors_total.fetch_add(1, Relaxed);
                Stop::Close {
                    code: close_code::UNSUPPORTED_DATA,
                    reason: "text frames are not supported: the protocol is binary".into(),
                }
            }
            other => Stop::Transport(other.to_string()),
        }
    }

    fn protocol_error(&self, e: protocol::ProtocolError) -> Stop {
        self.ctx.metrics.protocol_errors_total.fetch_add(1, Relaxed);
        Stop::Close {
            code: e.close_code(),
            reason: truncate_reason(e.to_string()),
        }
    }

    fn policy(&self, reason: &str) -> Stop {
        self.ctx.metrics.protocol_errors_total.fetch_add(1, Relaxed);
        Stop::Close {
            code: close_code::POLICY_VIOLATION,
            reason: reason.to_string(),
        }
    }

    async fn pong(&mut self, nonce: u64) -> Result<(), Stop> {
        self.ctx.metrics.pings_total.fetch_add(1, Relaxed);
        // The tick thread publishes a tick before any of its snapshots leave it, so this is
        // never older than a snapshot this client already has.
        let tick = self.ctx.board.tick.load(Relaxed);
        let pong = protocol::encode_pong(nonce, tick);
        self.send(Bytes::copy_from_slice(&pong)).await
    }

    /// WELCOME, then every terrain message (none when the client has it cached), each
    /// within the terrain timeout; then the tick may send snapshots.
    async fn welcome_and_terrain(&mut self, welcome: Bytes, terrain_cached: bool) -> Result<(), Stop> {
        self.send(welcome).await?;
        if terrain_cached {
            self.terrain_delivered();
            return Ok(());
        }
        let bp = &self.ctx.backpressure;
        let limit = bp.terrain_enqueue_timeout();
        let code = bp.eviction_close_code;
        let terrain = self.ctx.terrain.clone();
        for (i, msg) in terrain.iter().enumerate() {
            match tokio::time::timeout(limit, self.send(msg.clone())).await {
                Ok(r) => r?,
                Err(_) => {
                    // Terrain is never dropped, so a client that cannot take it goes.
                    let m = &self.ctx.metrics;
                    m.evictions_total.fetch_add(1, Relaxed);
                    m.terrain_evictions_total.fetch_add(1, Relaxed);
                    return Err(Stop::Close {
                        code,
                        reason: format!(
                            "too slow: terrain message {} of {} not taken within {:.1} s",
                            i + 1,
                            terrain.len(),
                            limit.as_secs_f64()
                        ),
                    });
                }
            }
            self.ctx
                .metrics
                .terrain_bytes_sent_total
                .fetch_add(msg.len() as u64, Relaxed);
        }
        self.terrain_delivered();
        Ok(())
    }

    /// The terrain is with the client (or waits in the outlet ahead of anything else):
    /// the tick thread writes its snapshots from now on.
    fn terrain_delivered(&self) {
        self.outlet.open();
    }

    /// Sends one binary message (in several frames when it is long), racing close
    /// requests and shutdown so a stuck write never holds the connection open.
    async fn send(&mut self, msg: Bytes) -> Result<(), Stop> {
        let len = msg.len();
        let frame_max = self.ctx.ws_frame_bytes_max;
        let shared = self.shared.clone();
        let ws = &mut self.ws;
        let write = async {
            if len <= frame_max {
                return ws.send(Message::Binary(msg)).await;
            }
            // Fragments keep the write buffer at one frame: tungstenite copies a whole
            // frame into its buffer and keeps that capacity for the connection's life.
            let mut at = 0;
            while at < len {
                let end = (at + frame_max).min(len);
                let opcode = if at == 0 { Data::Binary } else { Data::Continue };
                let frame = Frame::message(msg.slice(at..end), OpCode::Data(opcode), end == len);
                ws.send(Message::Frame(frame)).await?;
                at = end;
            }
            Ok(())
        };
        // Most writes finish at once (the socket has room): only a write that has to wait
        // races the close requests and shutdown.
        let mut write = std::pin::pin!(write);
        // (A first poll with a no-op waker: a pending write is polled again in the race,
        // which registers the real one.)
        let first = futures_util::FutureExt::now_or_never(write.as_mut());
        let shutdown = &mut self.shutdown;
        let result = if let Some(r) = first {
            r
        } else {
            tokio::select! {
                biased;
                _ = async {
                    match &shared {
                        Some(s) => s.close_requested().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let req = shared.as_ref().and_then(|s| s.close_request());
                    return Err(match req {
                        Some(r) => Stop::Close { code: r.code, reason: r.reason },
                        None => going_away(&self.ctx.fence),
                    });
                }
                _ = shutdown_signal(shutdown) => return Err(going_away(&self.ctx.fence)),
                r = write => r,
            }
        };
        match result {
            Ok(()) => {
                let m = &self.ctx.metrics;
                m.bytes_sent_total.fetch_add(len as u64, Relaxed);
                m.messages_sent_total.fetch_add(1, Relaxed);
                self.outlet.note_sent();
                Ok(())
            }
            Err(e) => Err(Stop::Transport(e.to_string())),
        }
    }

    /// The close handshake, bounded in time; afterwards the transport is dropped.
    async fn finish(&mut self, stop: Stop) -> End {
        let limit = self.ctx.backpressure.eviction_close_timeout();
        // The close frame (ours, or tungstenite's reply to the client's) is the last frame:
        // no snapshot may follow it.
        self.outlet.stop_snapshots();
        match stop {
            Stop::Close { code, reason } => {
                self.ctx.metrics.count_close(code);
                let frame = CloseFrame {
                    code: CloseCode::from(code),
                    reason: truncate_reason(reason.clone()).into(),
                };
                let ws = &mut self.ws;
                let _ = tokio::time::timeout(limit, async {
                    if ws.send(Message::Close(Some(frame))).await.is_err() {
                        return;
                    }
                    // The client's close frame ends the handshake; anything before it is ignored.
                    while let Some(Ok(m)) = ws.next().await {
                        if matches!(m, Message::Close(_)) {
                            break;
                        }
                    }
                    // Half-close and drain what the client still sends, so the socket ends
                    // with FIN: closing it with unread input would send RST, which can discard
                    // the close frame before the client has read it.
                    let io = ws.get_mut();
                    let _ = io.shutdown().await;
                    let mut sink = [0u8; 1024];
                    while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
                })
                .await;
                End::Closed { code, reason }
            }
            Stop::ClientClosed(code) => {
                // Reading on flushes tungstenite's close reply and then ends the stream.
                let ws = &mut self.ws;
                let _ = tokio::time::timeout(limit, async { while ws.next().await.is_some() {} }).await;
                End::ClientClosed(code)
            }
            Stop::Transport(e) => End::Transport(e),
        }
    }
}

/// Resolves once the server shuts down (or is gone). The value is dropped here so the
/// watch's read guard never outlives the `select!` arm.
async fn shutdown_signal(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|&s| s).await;
}

/// The close for a server that is stopping: 1001, or REJOIN when the fleet fenced it or
/// is moving the world (another server owns the world now, and the fleet's join answers
/// that one).
fn going_away(fence: &Fence) -> Stop {
    if fence.is_moving() {
        return Stop::Close {
            code: close_code::REJOIN,
            reason: "this world is moving to another server: join again through the fleet and reclaim".into(),
        };
    }
    if fence.is_set() {
        return Stop::Close {
            code: close_code::REJOIN,
            reason: "this world moved to another server: join again through the fleet".into(),
        };
    }
    Stop::Close {
        code: close_code::GOING_AWAY,
        reason: "server shutting down".into(),
    }
}

/// A close frame's reason must fit 123 bytes; cut on a character boundary.
fn truncate_reason(mut s: String) -> String {
    const MAX: usize = 123;
    if s.len() > MAX {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fit_a_close_frame() {
        let s = truncate_reason("é".repeat(100));
        assert!(s.len() <= 123 && s.chars().all(|c| c == 'é'));
    }
}
