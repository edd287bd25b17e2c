//! The bot load generator behind `migratory-bots`: N WebSocket clients driven by a few
//! tokio tasks (each task polls its share of the bots together), so the server and the
//! load run in separate processes.
//!
//! Each bot sends HELLO, steers at `input_hz`, acks every snapshot, and PINGs once per
//! `ping_interval`; the report gives joins, snapshots, snapshot bytes per second per client
//! (mean and p95), PING round trips (p50, p99) and snapshots missed (gaps in the ticks).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::protocol::{self, InputMsg, ServerMessage, PROTOCOL_VERSION};

/// What the bots do.
#[derive(Clone, Debug)]
pub struct BotOptions {
    /// `ws://HOST:PORT/ws`.
    pub url: String,
    pub clients: u32,
    pub duration: Duration,
    /// Tokio tasks the bots are spread over.
    pub tasks: u32,
    /// INPUT messages per second per bot.
    pub input_hz: u32,
    pub ping_interval: Duration,
    /// Connections are opened evenly over this time, so a join burst does not skew the start.
    pub connect_spread: Duration,
    pub seed: u64,
    /// Send HELLO (join). Without it the bots only hold their connections open, which
    /// measures what a bare connection costs the server.
    pub hello: bool,
}

impl Default for BotOptions {
    fn default() -> Self {
        BotOptions {
            url: "ws://127.0.0.1:7400/ws".into(),
            clients: 10,
            duration: Duration::from_secs(10),
            tasks: 2,
            input_hz: 10,
            ping_interval: Duration::from_secs(1),
            connect_spread: Duration::from_secs(1),
            seed: 1,
            hello: true,
        }
    }
}

/// One bot's tallies.
#[derive(Clone, Debug, Default)]
struct BotStats {
    connect_failed: bool,
    joined: bool,
    snapshots: u64,
    snapshot_bytes: u64,
    terrain_bytes: u64,
    missed_snapshots: u64,
    rtts_us: Vec<u64>,
    close_code: Option<u16>,
    /// From WELCOME to the end.
    joined_seconds: f64,
}

/// The whole run's figures (printed as one JSON object by `migratory-bots`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BotReport {
    pub clients: u32,
    pub joined: u32,
    pub connect_failures: u32,
    /// Bots the server closed (any code) before the run ended.
    pub closed_by_server: u32,
    /// Closes by code (JSON: an object keyed by the code).
    pub close_codes: std::collections::BTreeMap<u16, u32>,
    pub snapshots: u64,
    pub snapshot_bytes: u64,
    pub terrain_bytes: u64,
    pub bytes_per_s_per_client_mean: f64,
    pub bytes_per_s_per_client_p95: f64,
    pub snapshots_per_s_per_client_mean: f64,
    pub rtt_samples: u64,
    pub rtt_p50_ms: f64,
    pub rtt_p99_ms: f64,
    /// Snapshots the bots expected (by tick spacing) but never got: dropped by the server.
    pub drops: u64,
    pub seconds: f64,
}

/// Runs the bots to the end of `duration` and reports.
pub async fn run(options: &BotOptions) -> BotReport {
    let start = Instant::now();
    let tasks = options.tasks.clamp(1, options.clients.max(1));
    let mut handles = Vec::with_capacity(tasks as usize);
    for t in 0..tasks {
        let ids: Vec<u32> = (0..options.clients).filter(|i| i % tasks == t).collect();
        let opts = options.clone();
        handles.push(tokio::spawn(async move {
            futures_util::future::join_all(ids.into_iter().map(|i| bot(i, &opts, start))).await
        }));
    }
    let mut stats = Vec::with_capacity(options.clients as usize);
    for h in handles {
        if let Ok(s) = h.await {
            stats.extend(s);
        }
    }
    summarise(options, &stats, start.elapsed().as_secs_f64())
}

fn summarise(options: &BotOptions, stats: &[BotStats], seconds: f64) -> BotReport {
    let mut r = BotReport {
        clients: options.clients,
        seconds,
        ..BotReport::default()
    };
    let mut rates = Vec::new();
    let mut snap_rates = Vec::new();
    let mut rtts = Vec::new();
    for s in stats {
        r.connect_failures += s.connect_failed as u32;
        r.joined += s.joined as u32;
        r.snapshots += s.snapshots;
        r.snapshot_bytes += s.snapshot_bytes;
        r.terrain_bytes += s.terrain_bytes;
        r.drops += s.missed_snapshots;
        rtts.extend_from_slice(&s.rtts_us);
        if let Some(code) = s.close_code {
            r.closed_by_server += 1;
            *r.close_codes.entry(code).or_insert(0) += 1;
        }
        if s.joined && s.joined_seconds > 0.0 {
            rates.push(s.snapshot_bytes as f64 / s.joined_seconds);
            snap_rates.push(s.snapshots as f64 / s.joined_seconds);
        }
    }
    rates.sort_by(f64::total_cmp);
    rtts.sort_unstable();
    if !rates.is_empty() {
        r.bytes_per_s_per_client_mean = rates.iter().sum::<f64>() / rates.len() as f64;
        r.bytes_per_s_per_client_p95 = rates[((rates.len() - 1) as f64 * 0.95).round() as usize];
        r.snapshots_per_s_per_client_mean = snap_rates.iter().sum::<f64>() / snap_rates.len() as f64;
    }
    r.rtt_samples = rtts.len() as u64;
    if !rtts.is_empty() {
        let q = |p: f64| rtts[((rtts.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
        r.rtt_p50_ms = q(0.5);
        r.rtt_p99_ms = q(0.99);
    }
    r
}

/// A small deterministic generator for the bots' steering.
fn next_rand(state: &mut u64) -> u64 {
    // xorshift64*
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

async fn bot(index: u32, options: &BotOptions, start: Instant) -> BotStats {
    let mut stats = BotStats::default();
    let spread = options
        .connect_spread
        .mul_f64(index as f64 / options.clients.max(1) as f64);
    tokio::time::sleep(spread).await;
    let end = start + options.duration;
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let connect = tokio_tungstenite::connect_async_with_config(options.url.as_str(), Some(config), true);
    let mut ws = match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok((ws, _))) => ws,
        _ => {
            stats.connect_failed = true;
            return stats;
        }
    };
    let name = format!("bot{index}");
    let hello = Message::Binary(protocol::encode_hello(PROTOCOL_VERSION, &name, None).into());
    if options.hello && ws.send(hello).await.is_err() {
        stats.connect_failed = true;
        return stats;
    }
    let mut rng = options.seed ^ (u64::from(index) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let input_period = Duration::from_secs_f64(1.0 / options.input_hz.max(1) as f64);
    let mut input = tokio::time::interval(input_period);
    let mut ping = tokio::time::interval(options.ping_interval);
    input.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut joined_at = None;
    let mut interval_ticks = 1u32;
    let mut last_tick: Option<u32> = None;
    let mut seq = 0u32;
    let (mut dir_x, mut dir_y) = (1000i16, 0i16);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(end) => break,
            msg = ws.next() => {
                let data = match msg {
                    Some(Ok(Message::Binary(b))) => b,
                    Some(Ok(Message::Close(f))) => {
                        stats.close_code = Some(f.map_or(1005, |f| u16::from(f.code)));
                        break;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => break,
                };
                match protocol::decode_server(&data) {
                    Ok(ServerMessage::Welcome(w)) => {
                        stats.joined = true;
                        joined_at = Some(Instant::now());
                        interval_ticks = u32::from(w.snapshot_interval_ticks).max(1);
                    }
                    Ok(ServerMessage::Snapshot { tick, .. }) => {
                        stats.snapshots += 1;
                        stats.snapshot_bytes += data.len() as u64;
                        if let Some(last) = last_tick {
                            let gap = tick.wrapping_sub(last);
                            if gap > interval_ticks {
                                stats.missed_snapshots += u64::from(gap / interval_ticks - 1);
                            }
                        }
                        last_tick = Some(tick);
                        if ws.send(Message::Binary(protocol::encode_ack(tick).into())).await.is_err() {
                            break;
                        }
                    }
                    Ok(ServerMessage::Pong { nonce, .. }) => {
                        let now_us = start.elapsed().as_micros() as u64;
                        stats.rtts_us.push(now_us.saturating_sub(nonce));
                    }
                    Ok(ServerMessage::Terrain(m)) => stats.terrain_bytes += m.len() as u64,
                    Err(_) => {}
                }
            }
            _ = input.tick(), if joined_at.is_some() => {
                seq += 1;
                // A slow random walk of the heading, at full throttle.
                let r = next_rand(&mut rng);
                dir_x = dir_x.saturating_add((r % 401) as i16 - 200);
                dir_y = dir_y.saturating_add(((r >> 16) % 401) as i16 - 200);
                if dir_x == 0 && dir_y == 0 {
                    dir_x = 1;
                }
                let m = InputMsg { seq, dir_x, dir_y, throttle: 100, cast: (r >> 40) % 20 == 0 };
                if ws.send(Message::Binary(protocol::encode_input(&m).into())).await.is_err() {
                    break;
                }
            }
            _ = ping.tick(), if joined_at.is_some() => {
                let nonce = start.elapsed().as_micros() as u64;
                if ws.send(Message::Binary(protocol::encode_ping(nonce).into())).await.is_err() {
                    break;
                }
            }
        }
    }
    if let Some(t) = joined_at {
        stats.joined_seconds = t.elapsed().as_secs_f64();
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
    stats
}

/// A plain HTTP/1.1 GET (for `/metrics` and `/healthz`): the status code and the body.
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))?;
    Ok((status, body.to_string()))
}

/// `HOST:PORT` from `ws://HOST:PORT/...`.
pub fn host_of(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("ws://")?;
    Some(rest.split('/').next().unwrap_or(rest))
}
