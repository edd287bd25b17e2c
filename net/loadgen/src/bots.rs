//! The bots behind `migratory-bots`: WebSocket clients that play like players (see
//! `behaviour`), decode every snapshot with the kernel's decoder, and count what they get.
//!
//! Each bot sends HELLO, and then for each snapshot it decodes one INPUT_ACK (steering by
//! its own decoded position, and the snapshot's ACK) half a snapshot interval later
//! (`reply_after_percent`), and a PING every `ping_interval`. `run` is the plain
//! load run (a fixed number of bots for a fixed time); `soak` ramps bots in steps and
//! samples every second while they play.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use migratory_kernel::ClientDecoder;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use migratory_wire::protocol::{
    self, close_code, HelloOptions, Reclaim, ReconnectToken, ServerMessage, PROTOCOL_VERSION,
};

use crate::behaviour::{BotMix, Brain, Role};

/// Half the snapshot interval: 25 ms at 20 snapshots a second, inside Linux's 40 ms
/// delayed-ACK timer whichever way the tick loop's jitter moves the next snapshot.
pub const REPLY_AFTER_PERCENT_DEFAULT: u32 = 50;

/// What the bots do.
#[derive(Clone, Debug)]
pub struct BotOptions {
    /// `ws://HOST:PORT/ws`.
    pub url: String,
    pub clients: u32,
    pub duration: Duration,
    /// Runtime threads the bots share.
    pub tasks: u32,
    pub ping_interval: Duration,
    /// A bot answers a snapshot this far (percent) into the snapshot interval, not at
    /// once. The server's delayed ACK (40 ms on Linux) then rides on the next snapshot
    /// instead of going out as a segment of its own: answered at once, a reply arrives
    /// 50 ms before the next snapshot and costs the server a pure ACK. 0 answers at once.
    pub reply_after_percent: u32,
    /// Connections are opened evenly over this time, so a join burst does not skew the start.
    pub connect_spread: Duration,
    pub seed: u64,
    /// Send HELLO (join). Without it the bots only hold their connections open, which
    /// measures what a bare connection costs the server.
    pub hello: bool,
    pub mix: BotMix,
    /// Percent of the bots that stop reading once joined (they should be evicted).
    pub stall_percent: u32,
    /// A bot leaves after this long and reconnects at once, as a player whose connection
    /// dropped would; it names the terrain it already has in HELLO, so no terrain is sent
    /// again (None: one session for the whole run).
    pub session: Option<Duration>,
    /// Join through a fleet: each connection asks the fleet for the world's server first,
    /// so a bot follows its world when the fleet moves it (`url` is then unused).
    pub fleet: Option<FleetTarget>,
}

/// A world in a fleet, and the token its joins go with.
#[derive(Clone, Debug)]
pub struct FleetTarget {
    /// `http://HOST:PORT` of any fleet node.
    pub url: String,
    pub world: String,
    /// The player (or admin) token, when the fleet wants one.
    pub token: Option<String>,
}

impl Default for BotOptions {
    fn default() -> Self {
        BotOptions {
            url: "ws://127.0.0.1:7400/ws".into(),
            clients: 10,
            duration: Duration::from_secs(10),
            tasks: 2,
            ping_interval: Duration::from_secs(1),
            reply_after_percent: REPLY_AFTER_PERCENT_DEFAULT,
            connect_spread: Duration::from_secs(1),
            seed: 1,
            hello: true,
            mix: BotMix::default(),
            stall_percent: 0,
            session: None,
            fleet: None,
        }
    }
}

/// What a running bot shows the soak sampler, updated as it goes.
#[derive(Debug, Default)]
pub struct BotLive {
    pub joined: AtomicBool,
    pub gone: AtomicBool,
    /// SNAPSHOT bytes received.
    pub snapshot_bytes: AtomicU64,
    pub snapshots: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Snapshots missed (gaps in the ticks): dropped by the server.
    pub missed_snapshots: AtomicU64,
}

/// Where bots put their PING round trips (microseconds) for the sampler.
pub type RttSink = Arc<Mutex<Vec<u32>>>;

/// One bot's tallies at the end.
#[derive(Clone, Debug, Default)]
pub(crate) struct BotStats {
    role: Option<Role>,
    stalled: bool,
    connect_failed: bool,
    joined: bool,
    snapshots: u64,
    snapshot_bytes: u64,
    terrain_bytes: u64,
    missed_snapshots: u64,
    decode_errors: u64,
    rtts_us: Vec<u64>,
    close_code: Option<u16>,
    /// From WELCOME to the end.
    joined_seconds: f64,
    /// Sessions after the first, and the terrain bytes they were sent (0 with the cache).
    reconnects: u64,
    reconnect_terrain_bytes: u64,
    /// Connections lost (or closed with REJOIN: a move) after which the bot took its
    /// avatar back with its reconnect token; and those the server refused.
    reclaims: u64,
    reclaims_refused: u64,
    /// From the last snapshot before each reclaim to the first after it, in ms.
    pauses_ms: Vec<u64>,
}

/// The whole run's figures (printed as one JSON object by `migratory-bots`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BotReport {
    pub clients: u32,
    pub joined: u32,
    pub connect_failures: u32,
    /// Bots the server closed (any code) before the run ended.
    pub closed_by_server: u32,
    /// Bots that were reading (not told to stall) and were closed by the server.
    pub disconnects: u32,
    /// Closes by code (JSON: an object keyed by the code).
    pub close_codes: std::collections::BTreeMap<u16, u32>,
    /// Bots by role (walker, town, hunter), and how many were told to stall.
    pub roles: std::collections::BTreeMap<String, u32>,
    pub stalled: u32,
    pub snapshots: u64,
    pub snapshot_bytes: u64,
    pub terrain_bytes: u64,
    /// Snapshots the kernel's decoder refused (must be 0).
    pub decode_errors: u64,
    pub bytes_per_s_per_client_mean: f64,
    pub bytes_per_s_per_client_p95: f64,
    pub bytes_per_s_per_client_max: f64,
    pub snapshots_per_s_per_client_mean: f64,
    pub rtt_samples: u64,
    pub rtt_p50_ms: f64,
    pub rtt_p99_ms: f64,
    /// Snapshots the bots expected (by tick spacing) but never got: dropped by the server.
    pub drops: u64,
    /// Reconnects (`--session-seconds`), and the terrain bytes those sessions were sent:
    /// 0 when the server honoured the cached terrain named in HELLO.
    pub reconnects: u64,
    pub reconnect_terrain_bytes: u64,
    /// Avatars taken back with a reconnect token after a lost connection or a move, and
    /// reclaims the server refused (the bot then joined as a new avatar).
    pub reclaims: u64,
    pub reclaims_refused: u64,
    /// The world's pause as the bots saw it across their reclaims: from the last
    /// snapshot before to the first after, in ms.
    pub pause_p50_ms: f64,
    pub pause_p99_ms: f64,
    pub pause_max_ms: f64,
    pub seconds: f64,
}

/// Runs the bots to the end of `duration` and reports.
pub async fn run(options: &BotOptions) -> BotReport {
    let start = Instant::now();
    let end = start + options.duration;
    let sink: RttSink = Arc::default();
    let handles: Vec<_> = (0..options.clients)
        .map(|i| {
            let delay = options
                .connect_spread
                .mul_f64(f64::from(i) / f64::from(options.clients.max(1)));
            let live = Arc::new(BotLive::default());
            spawn_bot(i, options, start, start + delay, end, live, sink.clone())
        })
        .collect();
    let mut stats = Vec::with_capacity(options.clients as usize);
    for h in handles {
        if let Ok(s) = h.await {
            stats.push(s);
        }
    }
    summarise(options.clients, &stats, start.elapsed().as_secs_f64())
}

/// Spawns bot `index`, connecting at `connect_at` and playing until `end`.
pub(crate) fn spawn_bot(
    index: u32,
    options: &BotOptions,
    start: Instant,
    connect_at: Instant,
    end: Instant,
    live: Arc<BotLive>,
    sink: RttSink,
) -> tokio::task::JoinHandle<BotStats> {
    let opts = options.clone();
    tokio::spawn(async move { bot(index, &opts, start, connect_at, end, live, sink).await })
}

/// The report over finished bots.
pub(crate) fn summarise(clients: u32, stats: &[BotStats], seconds: f64) -> BotReport {
    let mut r = BotReport {
        clients,
        seconds,
        ..BotReport::default()
    };
    let mut rates = Vec::new();
    let mut snap_rates = Vec::new();
    let mut rtts = Vec::new();
    let mut pauses = Vec::new();
    for s in stats {
        r.reclaims += s.reclaims;
        r.reclaims_refused += s.reclaims_refused;
        pauses.extend_from_slice(&s.pauses_ms);
        r.connect_failures += s.connect_failed as u32;
        r.joined += s.joined as u32;
        r.stalled += s.stalled as u32;
        r.snapshots += s.snapshots;
        r.snapshot_bytes += s.snapshot_bytes;
        r.terrain_bytes += s.terrain_bytes;
        r.drops += s.missed_snapshots;
        r.decode_errors += s.decode_errors;
        r.reconnects += s.reconnects;
        r.reconnect_terrain_bytes += s.reconnect_terrain_bytes;
        if let Some(role) = s.role {
            let name = format!("{role:?}").to_lowercase();
            *r.roles.entry(name).or_insert(0) += 1;
        }
        rtts.extend_from_slice(&s.rtts_us);
        if let Some(code) = s.close_code {
            r.closed_by_server += 1;
            r.disconnects += u32::from(!s.stalled);
            *r.close_codes.entry(code).or_insert(0) += 1;
        }
        if s.joined && s.joined_seconds > 0.0 && !s.stalled {
            rates.push(s.snapshot_bytes as f64 / s.joined_seconds);
            snap_rates.push(s.snapshots as f64 / s.joined_seconds);
        }
    }
    rates.sort_by(f64::total_cmp);
    rtts.sort_unstable();
    if !rates.is_empty() {
        r.bytes_per_s_per_client_mean = rates.iter().sum::<f64>() / rates.len() as f64;
        r.bytes_per_s_per_client_p95 = rates[((rates.len() - 1) as f64 * 0.95).round() as usize];
        r.bytes_per_s_per_client_max = rates[rates.len() - 1];
        r.snapshots_per_s_per_client_mean = snap_rates.iter().sum::<f64>() / snap_rates.len() as f64;
    }
    pauses.sort_unstable();
    if !pauses.is_empty() {
        let q = |p: f64| pauses[((pauses.len() - 1) as f64 * p).round() as usize] as f64;
        (r.pause_p50_ms, r.pause_p99_ms, r.pause_max_ms) = (q(0.5), q(0.99), q(1.0));
    }
    r.rtt_samples = rtts.len() as u64;
    if !rtts.is_empty() {
        let q = |p: f64| rtts[((rtts.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
        r.rtt_p50_ms = q(0.5);
        r.rtt_p99_ms = q(0.99);
    }
    r
}

impl BotStats {
    /// The pauses this bot saw across its reclaims, in ms.
    pub(crate) fn pauses_ms(&self) -> &[u64] {
        &self.pauses_ms
    }
}

/// Whether bot `index` is one of the `stall_percent` % told to stop reading.
pub(crate) fn stalls(index: u32, stall_percent: u32) -> bool {
    index.wrapping_mul(53) % 100 < stall_percent
}

/// One bot's whole life: connect at `connect_at`, join, play until `end`, in one session
/// or (with `options.session`) several, each naming in HELLO the terrain it already has.
async fn bot(
    index: u32,
    options: &BotOptions,
    start: Instant,
    connect_at: Instant,
    end: Instant,
    live: Arc<BotLive>,
    sink: RttSink,
) -> BotStats {
    let stats = BotStats {
        stalled: stalls(index, options.stall_percent),
        role: options.hello.then(|| Role::of(index, &options.mix)),
        ..BotStats::default()
    };
    tokio::time::sleep_until(connect_at).await;
    let mut bot = Bot {
        index,
        options,
        start,
        live,
        sink,
        stats,
        cached_terrain: None,
        first_session: true,
        token: None,
        kept: None,
    };
    let mut reclaiming = false;
    loop {
        let session_end = match options.session {
            Some(d) if !bot.stats.stalled => (Instant::now() + d).min(end),
            _ => end,
        };
        let Some(ws) = bot.open_retrying(reclaiming, end).await else {
            bot.stats.connect_failed = true;
            break;
        };
        let ended = bot.play(ws, session_end, reclaiming).await;
        reclaiming = false;
        match ended {
            SessionEnd::Timeout if session_end < end => {
                // A new session: a new avatar.
                bot.token = None;
                bot.kept = None;
            }
            // Lost, or sent back through the fleet (a move): take the avatar back.
            SessionEnd::Lost | SessionEnd::Closed(close_code::REJOIN)
                if bot.token.is_some() && Instant::now() < end =>
            {
                // Followed, so not a disconnect.
                bot.stats.close_code = None;
                reclaiming = true;
            }
            SessionEnd::Closed(close_code::RECLAIM_REFUSED) if Instant::now() < end => {
                bot.stats.close_code = None;
                bot.stats.reclaims_refused += 1;
                bot.token = None;
                bot.kept = None;
            }
            _ => break,
        }
        bot.first_session = false;
    }
    bot.live.gone.store(true, Relaxed);
    bot.stats
}

/// Tries a bot makes to open a session (fleet join and connect) before it gives up.
const OPEN_TRIES: u32 = 5;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A bot across its sessions.
struct Bot<'a> {
    index: u32,
    options: &'a BotOptions,
    start: Instant,
    live: Arc<BotLive>,
    sink: RttSink,
    stats: BotStats,
    /// The terrain of the first WELCOME: named in the HELLO of every later session.
    cached_terrain: Option<[u8; 32]>,
    first_session: bool,
    /// The reconnect token of the avatar, from the newest WELCOME.
    token: Option<ReconnectToken>,
    /// What a lost session leaves for the reclaim: its decoder (so snapshots go on as
    /// deltas) and when its last snapshot came.
    kept: Option<(ClientDecoder, Option<Instant>)>,
}

/// How a session ended.
enum SessionEnd {
    /// Its time was up.
    Timeout,
    /// The server closed it with this code.
    Closed(u16),
    /// The connection ended without a close frame.
    Lost,
}

/// One session's state: what WELCOME said, the decoder, where the avatar is.
struct Session {
    joined_at: Option<Instant>,
    /// When the last snapshot came (for the pause a reclaim measures).
    last_snapshot_at: Option<Instant>,
    /// Set on a reclaim: the previous session's last snapshot, until the first one here.
    paused_since: Option<Instant>,
    interval_ticks: u32,
    /// The snapshot interval in time (from WELCOME), which paces the replies.
    interval: Duration,
    /// The answer to the newest snapshot (an INPUT_ACK) and when it goes out.
    reply: Option<(Instant, Vec<u8>)>,
    last_tick: Option<u32>,
    decoder: ClientDecoder,
    brain: Option<Brain>,
    avatar_id: u32,
    position: (i32, i32),
}

/// Whether a session goes on after a message.
enum Flow {
    Continue,
    Stop,
}

impl Bot<'_> {
    /// Connects (asking the fleet where, when there is one) and sends HELLO (unless the
    /// bots only hold connections): a reclaim with the bot's token when `reclaiming`.
    /// `open`, tried again as a client would: a server that just died can still be the
    /// fleet's answer until the fleet has seen it exit, and its address then refuses the
    /// connection. Up to `OPEN_TRIES` tries, 200 ms more apart each time, before `end`.
    async fn open_retrying(&mut self, reclaiming: bool, end: Instant) -> Option<Ws> {
        for attempt in 1..=OPEN_TRIES {
            if let Some(ws) = self.open(reclaiming).await {
                return Some(ws);
            }
            if attempt == OPEN_TRIES || Instant::now() >= end {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200) * attempt).await;
        }
        None
    }

    async fn open(&mut self, reclaiming: bool) -> Option<Ws> {
        let url = match &self.options.fleet {
            Some(f) => fleet_join(f).await?,
            None => self.options.url.clone(),
        };
        let connect = connect(&url, self.stats.stalled);
        let Ok(Ok(mut ws)) = tokio::time::timeout(Duration::from_secs(10), connect).await else {
            return None;
        };
        let name = format!("bot{}", self.index);
        let hello = protocol::encode_hello_with(
            PROTOCOL_VERSION,
            &name,
            &HelloOptions {
                cached_terrain: self.cached_terrain,
                want_token: true,
                reclaim: self.token.filter(|_| reclaiming).map(|token| Reclaim {
                    token,
                    keeps_baselines: self.kept.is_some(),
                }),
                ..HelloOptions::default()
            },
        );
        if self.options.hello && ws.send(Message::Binary(hello.into())).await.is_err() {
            return None;
        }
        if reclaiming {
            self.stats.reclaims += 1;
        } else if !self.first_session {
            self.stats.reconnects += 1;
        }
        Some(ws)
    }

    /// Plays one session until `session_end` or the connection ends; a reclaiming session
    /// goes on with the kept decoder.
    async fn play(&mut self, mut ws: Ws, session_end: Instant, reclaiming: bool) -> SessionEnd {
        let mut ping = tokio::time::interval(self.options.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let (decoder, paused_since) = match self.kept.take().filter(|_| reclaiming) {
            Some((d, at)) => (d, at),
            None => (ClientDecoder::new(), None),
        };
        let mut session = Session {
            joined_at: None,
            last_snapshot_at: None,
            paused_since,
            interval_ticks: 1,
            interval: Duration::ZERO,
            reply: None,
            last_tick: None,
            decoder,
            brain: None,
            avatar_id: u32::MAX,
            position: (0, 0),
        };
        // Both timers live across the loop, reset rather than made anew: a `Sleep` made in
        // the loop registers with the timer wheel, and leaves it, on every message.
        let session_timeout = tokio::time::sleep_until(session_end);
        tokio::pin!(session_timeout);
        let reply_due = tokio::time::sleep_until(session_end);
        tokio::pin!(reply_due);
        let ended = loop {
            if let Some((at, _)) = &session.reply {
                if reply_due.deadline() != *at {
                    reply_due.as_mut().reset(*at);
                }
            }
            tokio::select! {
                _ = &mut session_timeout => break SessionEnd::Timeout,
                // A stalled bot stops reading once it has joined and taken the terrain.
                msg = ws.next(), if !(self.stats.stalled && session.last_tick.is_some()) => {
                    let data = match msg {
                        Some(Ok(Message::Binary(b))) => b,
                        Some(Ok(Message::Close(f))) => {
                            let code = f.map_or(1005, |f| u16::from(f.code));
                            self.stats.close_code = Some(code);
                            break SessionEnd::Closed(code);
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(_)) | None => break SessionEnd::Lost,
                    };
                    if let Flow::Stop = self.on_message(&mut ws, &mut session, &data).await {
                        break SessionEnd::Lost;
                    }
                }
                _ = &mut reply_due, if session.reply.is_some() => {
                    if let Some((_, reply)) = session.reply.take() {
                        if ws.send(Message::Binary(reply.into())).await.is_err() {
                            break SessionEnd::Lost;
                        }
                    }
                }
                _ = ping.tick(), if session.joined_at.is_some() && !self.stats.stalled => {
                    let nonce = self.start.elapsed().as_micros() as u64;
                    if ws.send(Message::Binary(protocol::encode_ping(nonce).into())).await.is_err() {
                        break SessionEnd::Lost;
                    }
                }
            }
        };
        if matches!(ended, SessionEnd::Lost | SessionEnd::Closed(close_code::REJOIN)) {
            // Kept for a reclaim: the decoder still holds the views the server may send
            // deltas against, and the pause runs from the last snapshot.
            let since = session.last_snapshot_at.or(session.paused_since);
            self.kept = Some((std::mem::take(&mut session.decoder), since));
        }
        if let Some(t) = session.joined_at {
            self.stats.joined_seconds += t.elapsed().as_secs_f64();
        }
        if !self.stats.stalled {
            let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
        }
        ended
    }

    async fn on_message(&mut self, ws: &mut Ws, session: &mut Session, data: &[u8]) -> Flow {
        match protocol::decode_server(data) {
            Ok(ServerMessage::Welcome(w)) => {
                self.cached_terrain = Some(w.terrain.content_hash);
                self.token = w.reconnect_token;
                self.stats.joined = true;
                self.live.joined.store(true, Relaxed);
                session.joined_at = Some(Instant::now());
                session.interval_ticks = u32::from(w.snapshot_interval_ticks).max(1);
                session.interval = Duration::from_micros(
                    u64::from(session.interval_ticks) * 1_000_000 / u64::from(w.tick_rate_hz.max(1)),
                );
                session.avatar_id = w.avatar_id;
                let o = self.options;
                session.brain = Some(Brain::new(self.index, o.seed, o.mix, w.world_size_mm, &w.world));
                Flow::Continue
            }
            Ok(ServerMessage::Snapshot { tick, snapshot }) => {
                self.on_snapshot(ws, session, data.len(), tick, snapshot).await
            }
            Ok(ServerMessage::Pong { nonce, .. }) => {
                let rtt = (self.start.elapsed().as_micros() as u64).saturating_sub(nonce);
                self.stats.rtts_us.push(rtt);
                if let Ok(mut s) = self.sink.lock() {
                    s.push(rtt.min(u64::from(u32::MAX)) as u32);
                }
                Flow::Continue
            }
            Ok(ServerMessage::Terrain(m)) => {
                self.stats.terrain_bytes += m.len() as u64;
                if !self.first_session {
                    self.stats.reconnect_terrain_bytes += m.len() as u64;
                }
                Flow::Continue
            }
            Err(_) => Flow::Continue,
        }
    }

    /// Counts and decodes a snapshot, then answers it with one INPUT_ACK (at once, or paced).
    async fn on_snapshot(
        &mut self,
        ws: &mut Ws,
        session: &mut Session,
        bytes: usize,
        tick: u32,
        snapshot: &[u8],
    ) -> Flow {
        let (stats, live) = (&mut self.stats, &self.live);
        stats.snapshots += 1;
        stats.snapshot_bytes += bytes as u64;
        live.snapshots.fetch_add(1, Relaxed);
        live.snapshot_bytes.fetch_add(bytes as u64, Relaxed);
        if let Some(last) = session.last_tick {
            let gap = tick.wrapping_sub(last);
            if gap > session.interval_ticks {
                let missed = u64::from(gap / session.interval_ticks - 1);
                stats.missed_snapshots += missed;
                live.missed_snapshots.fetch_add(missed, Relaxed);
            }
        }
        session.last_tick = Some(tick);
        let now = Instant::now();
        if let Some(since) = session.paused_since.take() {
            stats.pauses_ms.push(now.duration_since(since).as_millis() as u64);
        }
        session.last_snapshot_at = Some(now);
        // A world resumed after a crash starts behind what this bot saw: its views of
        // those ticks are of another history.
        if session.decoder.newest_tick().is_some_and(|newest| tick <= newest) {
            session.decoder = ClientDecoder::new();
        }
        match session.decoder.decode(snapshot) {
            Ok((_, view)) => {
                if let Some(me) = view.iter().find(|e| e.id == session.avatar_id) {
                    session.position = (i32::from(me.qx) * 64 + 32, i32::from(me.qy) * 64 + 32);
                }
            }
            Err(_) => {
                stats.decode_errors += 1;
                live.decode_errors.fetch_add(1, Relaxed);
                return Flow::Continue;
            }
        }
        let now_ms = self.start.elapsed().as_millis() as u64;
        let Some(brain) = session.brain.as_mut() else {
            return Flow::Continue;
        };
        // One INPUT_ACK: the steering and the ACK of this snapshot in one message.
        let reply = protocol::encode_input_ack(&brain.steer(session.position, now_ms), tick);
        let delay = session.interval * self.options.reply_after_percent.min(100) / 100;
        if delay.is_zero() {
            if ws.send(Message::Binary(reply.into())).await.is_err() {
                return Flow::Stop;
            }
        } else {
            // A reply still waiting is superseded: the newer ACK and steering say more.
            session.reply = Some((now + delay, reply));
        }
        Flow::Continue
    }
}

/// Asks the fleet for the world's server (`POST /api/worlds/{id}/join`); None when it
/// does not answer one within a few tries.
async fn fleet_join(f: &FleetTarget) -> Option<String> {
    let answer = fleet_answer(f, 20).await?;
    answer["ws_url"].as_str().map(str::to_string)
}

/// The fleet's join answer for the world (its `ws_url`, `node`, ...), within `tries`
/// tries 100 ms apart.
pub(crate) async fn fleet_answer(f: &FleetTarget, tries: u32) -> Option<serde_json::Value> {
    let url = format!("{}/api/worlds/{}/join", f.url.trim_end_matches('/'), f.world);
    for _ in 0..tries {
        let mut req = migratory_http::Request::new(migratory_http::Method::POST, url.clone())
            .timeout(Duration::from_secs(30));
        req.bearer = f.token.clone();
        if let Ok(r) = req.send().await {
            if r.is_success() {
                return r.json().ok();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Opens the WebSocket. A bot that will stall gets a 4 KiB receive buffer, as a client
/// whose buffers are already full would have: with the OS default (autotuned, often a few
/// hundred KiB on loopback) it would take minutes of snapshots before the server noticed.
async fn connect(url: &str, small_receive_buffer: bool) -> Result<Ws, ConnectError> {
    let config = WebSocketConfig::default().read_buffer_size(4096);
    if !small_receive_buffer {
        return tokio_tungstenite::connect_async_with_config(url, Some(config), true)
            .await
            .map(|(ws, _)| ws)
            .map_err(ConnectError::from);
    }
    let addr: std::net::SocketAddr = host_of(url)
        .and_then(|h| h.parse().ok())
        .ok_or_else(|| ConnectError::Url(url.to_string()))?;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }?;
    socket.set_recv_buffer_size(4096)?;
    let tcp = socket.connect(addr).await?;
    tokio_tungstenite::client_async_with_config(
        url,
        tokio_tungstenite::MaybeTlsStream::Plain(tcp),
        Some(config),
    )
    .await
    .map(|(ws, _)| ws)
    .map_err(ConnectError::from)
}

/// Why a bot could not open its WebSocket.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("`{0}` is not ws://IP:PORT/...")]
    Url(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
}

/// `HOST:PORT` from `ws://HOST:PORT/...`.
pub fn host_of(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("ws://")?;
    Some(rest.split('/').next().unwrap_or(rest))
}
