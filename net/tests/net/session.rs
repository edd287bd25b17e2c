//! Whole sessions with real WebSocket clients: live frames equal replayed frames byte for
//! byte, at 1 and 3 shards (the messages one at a time are in `messages`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use migratory_replay::Recording;
use migratory_server::ServeOptions;
use migratory_wire::protocol::{self, CameraMsg, InputMsg, ServerMessage};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, TempDir};

/// How one scripted client behaves.
#[derive(Clone, Copy, Debug)]
struct Behaviour {
    /// Ack a snapshot this long after receiving it (None: never ack).
    ack_lag: Option<Duration>,
    /// INPUT messages per second.
    input_hz: u32,
    /// Cast on every n-th INPUT (0: never).
    cast_every: u32,
    /// Join as a spectator, sending CAMERA (to random points) instead of INPUT.
    spectate: bool,
}

/// What a client saw: its id and every snapshot (tick, frame bytes without the type byte).
#[derive(Debug)]
struct Seen {
    client: u32,
    frames: Vec<(u32, Vec<u8>)>,
    close: Option<u16>,
}

async fn scripted_client(url: String, name: String, b: Behaviour, seed: u64) -> Seen {
    let (mut ws, welcome) = match b.spectate {
        false => common::join(&url, &name).await,
        true => common::spectate(&url, &name).await,
    };
    let mut frames = Vec::new();
    let mut pending_acks: Vec<(tokio::time::Instant, u32)> = Vec::new();
    let mut input = tokio::time::interval(Duration::from_secs_f64(1.0 / b.input_hz.max(1) as f64));
    let mut seq = 0u32;
    let mut rng = seed;
    let mut close = None;
    loop {
        let next_ack = pending_acks.first().map(|&(at, _)| at);
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(Message::Binary(data))) => {
                    if let Ok(ServerMessage::Snapshot { tick, snapshot: frame }) = protocol::decode_server(&data) {
                        frames.push((tick, frame.to_vec()));
                        if let Some(lag) = b.ack_lag {
                            pending_acks.push((tokio::time::Instant::now() + lag, tick));
                        }
                    }
                }
                Some(Ok(Message::Close(f))) => {
                    close = f.map(|f| u16::from(f.code));
                    break;
                }
                Some(Ok(_)) => {}
                _ => break,
            },
            _ = async { tokio::time::sleep_until(next_ack.unwrap_or_else(tokio::time::Instant::now)).await },
                if next_ack.is_some() => {
                let (_, tick) = pending_acks.remove(0);
                let _ = ws.send(Message::Binary(protocol::encode_ack(tick).into())).await;
            }
            _ = input.tick() => {
                seq += 1;
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if b.spectate {
                    let size = welcome.world_size_mm as u64;
                    let m = CameraMsg {
                        seq,
                        x_mm: ((rng >> 33) % size) as i32,
                        y_mm: ((rng >> 13) % size) as i32,
                    };
                    let _ = ws.send(Message::Binary(protocol::encode_camera(&m).into())).await;
                    continue;
                }
                let m = InputMsg {
                    seq,
                    dir_x: ((rng >> 33) % 2001) as i16 - 1000,
                    dir_y: ((rng >> 45) % 2001) as i16 - 1000,
                    throttle: ((rng >> 20) % 101) as u8,
                    cast: b.cast_every > 0 && seq % b.cast_every == 0,
                };
                let _ = ws.send(Message::Binary(protocol::encode_input(&m).into())).await;
            }
        }
    }
    Seen {
        client: welcome.client_id,
        frames,
        close,
    }
}

/// Replays `path` at `shards` and returns every frame it produces, by (client, tick),
/// checking each tick's roots against the recording on the way.
pub(crate) fn replay_frames(path: &Path, shards: usize) -> BTreeMap<(u32, u32), Vec<u8>> {
    let rec = Recording::open(path).expect("recording opens");
    let mut world = rec.start_world(shards).expect("start world");
    let mut frames = BTreeMap::new();
    let mut ticks = 0;
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.expect("tick reads");
        let out = world.step(&t.inputs);
        assert_eq!(
            out.state_root, t.state_root,
            "state root of tick {} at {shards} shards",
            t.tick
        );
        assert_eq!(
            out.snapshots_root, t.snapshots_root,
            "frames root of tick {} at {shards} shards",
            t.tick
        );
        for f in out.snapshots() {
            frames.insert((f.client, out.tick), f.bytes.to_vec());
        }
        ticks += 1;
    }
    assert_eq!(ticks, rec.ticks_recovered());
    frames
}

/// Runs a recorded session of `ticks` with five differently behaved clients (one of them
/// a spectator moving its camera), then checks
/// that a replay at 1 and 3 shards produces exactly the frames each client received.
async fn live_equals_replay(
    mut config: migratory_server::ServerConfig,
    ticks: u64,
    dir: &Path,
) -> std::path::PathBuf {
    config.server.recording.enabled = true;
    config.server.recording.dir = dir.to_path_buf();
    config.server.shards = 2;
    let server = common::start_with(
        config,
        ServeOptions {
            run_ticks: Some(ticks),
            ..ServeOptions::default()
        },
    )
    .await;
    let url = server.ws_url();
    let path = server.recording_path().expect("recording on").to_path_buf();
    let behaviours = [
        Behaviour {
            ack_lag: Some(Duration::ZERO),
            input_hz: 30,
            cast_every: 7,
            spectate: false,
        },
        Behaviour {
            ack_lag: Some(Duration::from_millis(80)),
            input_hz: 10,
            cast_every: 3,
            spectate: false,
        },
        Behaviour {
            ack_lag: Some(Duration::from_millis(400)),
            input_hz: 60,
            cast_every: 0,
            spectate: false,
        },
        Behaviour {
            ack_lag: None,
            input_hz: 5,
            cast_every: 2,
            spectate: false,
        },
        Behaviour {
            ack_lag: Some(Duration::from_millis(30)),
            input_hz: 4,
            cast_every: 0,
            spectate: true,
        },
    ];
    let mut tasks = Vec::new();
    for (i, b) in behaviours.into_iter().enumerate() {
        tasks.push(tokio::spawn(scripted_client(
            url.clone(),
            format!("p{i}"),
            b,
            i as u64 + 1,
        )));
        // Staggered joins: clients enter at different ticks.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let report = server.wait().await.expect("server stops cleanly");
    assert_eq!(report.tick.ticks, ticks);
    assert_eq!(report.connections_left, 0);
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.expect("client task"));
    }
    for s in &seen {
        assert_eq!(
            s.close,
            Some(1001),
            "client {} closed with 1001 at shutdown",
            s.client
        );
    }
    let rec = Recording::open(&path).expect("recording opens");
    assert!(rec.torn_tail.is_none(), "a clean stop writes the end record");
    assert_eq!(rec.end.map(|e| e.final_tick), Some(ticks as u32));
    for shards in [1, 3] {
        let replayed = replay_frames(&path, shards);
        for s in &seen {
            assert!(
                s.frames.len() >= 10,
                "client {} received {} frames",
                s.client,
                s.frames.len()
            );
            for (tick, frame) in &s.frames {
                let r = replayed
                    .get(&(s.client, *tick))
                    .unwrap_or_else(|| panic!("replay has no frame for client {} at tick {tick}", s.client));
                assert!(
                    r == frame,
                    "client {} tick {tick}: live and replayed frames differ",
                    s.client
                );
            }
            // Clients that read were sent every frame (none dropped) until the shutdown began.
            let produced = replayed.keys().filter(|(c, _)| *c == s.client).count();
            assert!(
                s.frames.len() + 3 >= produced,
                "client {} received {} of {produced} frames",
                s.client,
                s.frames.len()
            );
        }
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_frames_equal_replayed_frames_at_1_and_3_shards() {
    let dir = TempDir::new("equiv");
    let mut config = common::small_config();
    config.server.recording.block_ticks = 30;
    config.server.recording.checkpoint_interval_ticks = 90;
    live_equals_replay(config, 150, dir.path()).await;
}

/// Records a 1,200-tick live session of the default world into `corpora/live-session.mrec`
/// (the corpus test wants at least 1,000 ticks per file). Opt-in, and reported as ignored
/// in every other run: `cargo test -p migratory-net-tests --test net -- --ignored write_live_session_corpus`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites corpora/live-session.mrec; run it with --ignored when the protocol or rules change"]
async fn write_live_session_corpus() {
    let dir = TempDir::new("corpus");
    let mut config = common::small_config();
    config.world = migratory_kernel::WorldConfig::default();
    config.world.boid_count = 2000;
    let path = live_equals_replay(config, 1200, dir.path()).await;
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpora/live-session.mrec");
    std::fs::copy(&path, &target).expect("copy into corpora/");
    eprintln!(
        "wrote {} ({} bytes)",
        target.display(),
        std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0)
    );
}
