//! Shared test helpers: a small world config, temp folders, WebSocket clients that speak
//! protocol v2, and a well-behaved "witness" client that proves the server kept serving.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use migratory_server::config::ServerConfig;
use migratory_server::{ServeOptions, ServerHandle};
use migratory_wire::protocol::{self, ServerMessage, Welcome, PROTOCOL_VERSION};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A small, cheap world (256 x 256 cells, 400 boids) on an ephemeral port, not recorded.
pub fn small_config() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.server.listen = "127.0.0.1:0".into();
    c.server.recording.enabled = false;
    c.server.hello_timeout_seconds = 2.0;
    c.server.shutdown_timeout_seconds = 1.0;
    c.server.client_backpressure.eviction_close_timeout_seconds = 0.5;
    let w = &mut c.world;
    w.terrain_grid_cells = 256;
    w.terrain_cell_size_mm = 1000;
    w.world_size_mm = 256_000;
    w.boid_count = 400;
    w.client_slots_max = 64;
    c
}

pub use migratory_replay::testkit::TempDir;

/// A two-thread runtime for the tests that drive a server and a child process from a
/// plain `#[test]`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

pub async fn start(config: ServerConfig) -> ServerHandle {
    migratory_server::start(config, ServeOptions::default())
        .await
        .expect("server starts")
}

pub async fn start_with(config: ServerConfig, options: ServeOptions) -> ServerHandle {
    migratory_server::start(config, options)
        .await
        .expect("server starts")
}

/// A WebSocket connection (not yet HELLO'd), with a small read buffer like a real client.
pub async fn connect(url: &str) -> Ws {
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let (ws, _) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async_with_config(url, Some(config), true),
    )
    .await
    .expect("connect in time")
    .expect("connect");
    ws
}

pub async fn send(ws: &mut Ws, bytes: Vec<u8>) {
    ws.send(Message::Binary(bytes.into())).await.expect("send");
}

/// Connects, sends HELLO and reads up to WELCOME. Terrain and snapshots follow.
pub async fn join(url: &str, name: &str) -> (Ws, Welcome) {
    join_with(url, protocol::encode_hello(PROTOCOL_VERSION, name, None)).await
}

/// `join` as a spectator.
pub async fn spectate(url: &str, name: &str) -> (Ws, Welcome) {
    join_with(
        url,
        protocol::encode_hello_spectating(PROTOCOL_VERSION, name, None),
    )
    .await
}

async fn join_with(url: &str, hello: Vec<u8>) -> (Ws, Welcome) {
    let mut ws = connect(url).await;
    send(&mut ws, hello).await;
    let welcome = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    if let Ok(ServerMessage::Welcome(w)) = protocol::decode_server(&b) {
                        return w;
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("connection ended before WELCOME: {other:?}"),
            }
        }
    })
    .await
    .expect("WELCOME in time");
    (ws, welcome)
}

/// Reads until the server's close frame (or the end): its code and reason.
pub async fn close_of(ws: &mut Ws) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(Some(f)))) => return Some((u16::from(f.code), f.reason.to_string())),
                Some(Ok(Message::Close(None))) => return Some((1005, String::new())),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the server closes in time")
}

/// A client that joins, acks every snapshot and counts them until stopped: the proof that
/// the server keeps serving everyone else while a test misbehaves. A moving one also
/// steers (a new direction with every ack); the close code the server sent is kept.
#[derive(Debug)]
pub struct Witness {
    pub snapshots: Arc<AtomicU64>,
    /// The newest snapshot's tick.
    pub last_tick: Arc<AtomicU64>,
    pub alive: Arc<AtomicBool>,
    /// The code of the server's close frame, once one came.
    pub close_code: Arc<std::sync::Mutex<Option<u16>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Witness {
    pub async fn join(url: &str) -> Witness {
        Witness::start(url, false).await
    }

    /// A witness that steers as it goes.
    pub async fn join_moving(url: &str) -> Witness {
        Witness::start(url, true).await
    }

    async fn start(url: &str, moving: bool) -> Witness {
        let (mut ws, _) = join(url, "witness").await;
        let snapshots = Arc::new(AtomicU64::new(0));
        let last_tick = Arc::new(AtomicU64::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let close_code = Arc::new(std::sync::Mutex::new(None));
        let (s, lt, a, st, cc) = (
            snapshots.clone(),
            last_tick.clone(),
            alive.clone(),
            stop.clone(),
            close_code.clone(),
        );
        let task = tokio::spawn(async move {
            let mut seq = 0u32;
            while !st.load(Relaxed) {
                let msg = match tokio::time::timeout(Duration::from_millis(100), ws.next()).await {
                    Err(_) => continue,
                    Ok(m) => m,
                };
                match msg {
                    Some(Ok(Message::Binary(b))) => {
                        if let Ok(ServerMessage::Snapshot { tick, .. }) = protocol::decode_server(&b) {
                            s.fetch_add(1, Relaxed);
                            lt.store(u64::from(tick), Relaxed);
                            let mut out = vec![protocol::encode_ack(tick)];
                            if moving {
                                seq += 1;
                                let angle = f64::from(seq) * 0.7;
                                out.push(protocol::encode_input(&protocol::InputMsg {
                                    seq,
                                    dir_x: (angle.cos() * 30_000.0) as i16,
                                    dir_y: (angle.sin() * 30_000.0) as i16,
                                    throttle: 100,
                                    cast: seq % 10 == 0,
                                }));
                            }
                            for m in out {
                                if ws.send(Message::Binary(m.into())).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    Some(Ok(Message::Close(f))) => {
                        *cc.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(f.map_or(1005, |f| u16::from(f.code)));
                        break;
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            a.store(false, Relaxed);
            let _ = ws.close(None).await;
        });
        let w = Witness {
            snapshots,
            last_tick,
            alive,
            close_code,
            stop,
            task,
        };
        w.assert_receiving().await;
        w
    }

    /// Snapshots keep arriving (at 20 Hz, a few within 400 ms).
    pub async fn assert_receiving(&self) {
        let before = self.snapshots.load(Relaxed);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.snapshots.load(Relaxed) >= before + 3 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the witness stopped receiving snapshots"
            );
        }
        assert!(self.alive.load(Relaxed), "the witness was disconnected");
    }

    pub async fn stop(self) {
        self.stop.store(true, Relaxed);
        let _ = self.task.await;
    }
}

/// Polls `f` every 10 ms until it holds or `limit` passes.
pub async fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

/// `GET http://ADDR/PATH` through the programs' one HTTP client: the status and the body.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String), migratory_http::HttpError> {
    let r = migratory_http::get(&format!("http://{addr}{path}")).await?;
    Ok((r.status, r.text()))
}
