//! `migratory-server view REC.mrec`: the browser viewer over a recording, in god view (every
//! entity from the world state). The recording is read by one thread of its own (the
//! reader is not `Send`), which keeps a cursor world: a request for a later tick within a
//! checkpoint interval steps it forward, anything else restores the nearest checkpoint at
//! or before the tick and steps from there, so a seek costs at most one checkpoint
//! interval of steps.
//!
//! Routes: `/` and `/viewer/*` (the viewer's files, which switch to replay mode when
//! `/replay/info` answers), `/viewer/terrain`, `/replay/info` (JSON: `start_tick`,
//! `last_tick`, `tick_rate_hz`, `world_size_mm`, `boid_count`, `zones`), and
//! `/replay/state?tick=T`, the world at tick T:
//!
//! | offset | size | field                                                  |
//! |--------|------|--------------------------------------------------------|
//! | 0      | 4    | tick (u32, little-endian)                              |
//! | 4      | 4    | n, the entity count (u32)                              |
//! | 8      | 16 n | per entity: id u32, x_mm i32, y_mm i32, vx i16, vy i16 (mm/tick); ids below `boid_count` are boids, the others avatars |

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use migratory_kernel::World;
use migratory_replay::Recording;
use tokio::sync::oneshot;

use super::{viewer, ServerError};

/// Bytes of one entity record in `/replay/state`.
pub const REPLAY_ENTITY_BYTES: usize = 16;
const REPLAY_STATE_HEADER_BYTES: usize = 8;

type StateRequest = (u32, oneshot::Sender<Result<Vec<u8>, String>>);

#[derive(Debug)]
struct ViewState {
    info: serde_json::Value,
    terrain: axum::body::Bytes,
    requests: std::sync::Mutex<mpsc::Sender<StateRequest>>,
}

/// A recording being served.
#[derive(Debug)]
pub struct ViewHandle {
    pub local_addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
}

fn encode_state(world: &World) -> Vec<u8> {
    let boids = world.boids();
    let players: Vec<_> = world
        .players()
        .iter()
        .enumerate()
        .filter(|(_, p)| p.active)
        .collect();
    let n = boids.len() + players.len();
    let mut out = Vec::with_capacity(REPLAY_STATE_HEADER_BYTES + n * REPLAY_ENTITY_BYTES);
    out.extend_from_slice(&world.tick().to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let mut push = |id: u32, x: i32, y: i32, vx: i32, vy: i32| {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&x.to_le_bytes());
        out.extend_from_slice(&y.to_le_bytes());
        out.extend_from_slice(&(vx.clamp(-32768, 32767) as i16).to_le_bytes());
        out.extend_from_slice(&(vy.clamp(-32768, 32767) as i16).to_le_bytes());
    };
    for (id, b) in boids.iter().enumerate() {
        push(id as u32, b.x_mm, b.y_mm, i32::from(b.vx), i32::from(b.vy));
    }
    for (slot, p) in players {
        push(world.avatar_id(slot as u32), p.x_mm, p.y_mm, p.vx, p.vy);
    }
    debug_assert_eq!(out.len(), REPLAY_STATE_HEADER_BYTES + n * REPLAY_ENTITY_BYTES);
    out
}

/// The reader thread: answers state requests from its cursor world.
fn reader(rec: Recording, mut world: World, requests: mpsc::Receiver<StateRequest>) {
    let interval = rec
        .checkpoints()
        .nth(1)
        .map_or(600, |c| c.first_tick.saturating_sub(rec.meta.start_tick).max(1));
    for (tick, reply) in requests {
        let result = (|| -> Result<Vec<u8>, String> {
            if tick < rec.meta.start_tick || tick > rec.last_tick() {
                return Err(format!(
                    "tick {tick} is outside the recording ({}..={})",
                    rec.meta.start_tick,
                    rec.last_tick()
                ));
            }
            if tick < world.tick() || tick - world.tick() > interval {
                world = rec.world_at(tick, 1).map_err(|e| e.to_string())?;
            }
            for t in rec.ticks_from(world.tick() + 1) {
                if world.tick() >= tick {
                    break;
                }
                let t = t.map_err(|e| e.to_string())?;
                world.step(&t.inputs);
            }
            Ok(encode_state(&world))
        })();
        let _ = reply.send(result);
    }
}

#[derive(Debug, serde::Deserialize)]
struct TickQuery {
    tick: u32,
}

async fn state(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    let (tx, rx) = oneshot::channel();
    let sent = s
        .requests
        .lock()
        .map(|r| r.send((q.tick, tx)).is_ok())
        .unwrap_or(false);
    if !sent {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the recording reader stopped\n",
        )
            .into_response();
    }
    match rx.await {
        Ok(Ok(bytes)) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Ok(Err(e)) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e}\n")).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the recording reader stopped\n",
        )
            .into_response(),
    }
}

/// What the reader thread sends back once the recording is open: `/replay/info` and the
/// terrain image.
type Opened = Result<(serde_json::Value, Vec<u8>), String>;

/// Opens the recording (on the reader thread, which keeps it), describes it.
fn open(path: &std::path::Path) -> Result<(Recording, World, serde_json::Value, Vec<u8>), String> {
    let rec = Recording::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let world = rec
        .start_world(1)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let c = world.config().clone();
    let zones = world.zones();
    let zone = |kind: u8, z: &migratory_kernel::Zone| serde_json::json!({ "kind": kind, "x_mm": z.x_mm, "y_mm": z.y_mm, "radius_mm": z.radius_mm });
    let info = serde_json::json!({
        "file": path.display().to_string(),
        "start_tick": rec.meta.start_tick,
        "last_tick": rec.last_tick(),
        "tick_rate_hz": c.tick_rate_hz,
        "world_size_mm": c.world_size_mm,
        "boid_count": c.boid_count,
        "view_radius_mm": c.view_radius_mm,
        "zones": std::iter::once(zone(0, &zones.town))
            .chain(zones.hunting_fields.iter().map(|z| zone(1, z)))
            .collect::<Vec<_>>(),
    });
    let terrain = viewer::terrain_image(
        world.terrain(),
        c.world_size_mm,
        c.water_level_mm,
        &world.terrain().content_hash(),
    );
    Ok((rec, world, info, terrain))
}

/// Opens `path` and serves the viewer over it on `listen`. Must run inside a tokio runtime.
pub async fn view(path: PathBuf, listen: SocketAddr) -> Result<ViewHandle, ServerError> {
    let (tx, rx) = mpsc::channel::<StateRequest>();
    let (opened_tx, opened_rx) = mpsc::channel::<Opened>();
    std::thread::Builder::new()
        .name("replay-reader".into())
        .spawn(move || match open(&path) {
            Ok((rec, world, info, terrain)) => {
                let _ = opened_tx.send(Ok((info, terrain)));
                reader(rec, world, rx);
            }
            Err(e) => {
                let _ = opened_tx.send(Err(e));
            }
        })
        .map_err(|source| ServerError::Thread {
            what: "replay reader",
            source,
        })?;
    let (info, terrain) = tokio::task::spawn_blocking(move || opened_rx.recv())
        .await
        .map_err(|e| ServerError::Http(e.to_string()))?
        .map_err(|_| ServerError::Http("the recording reader stopped".into()))?
        .map_err(ServerError::Http)?;
    let terrain = axum::body::Bytes::from(terrain);
    let state_ = Arc::new(ViewState {
        info,
        terrain,
        requests: std::sync::Mutex::new(tx),
    });
    let app = Router::new()
        .route("/", get(viewer::index))
        .route("/viewer/{file}", get(viewer::asset))
        .route(
            "/viewer/terrain",
            get(|State(s): State<Arc<ViewState>>| async move {
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    s.terrain.clone(),
                )
            }),
        )
        .route(
            "/replay/info",
            get(|State(s): State<Arc<ViewState>>| async move { axum::Json(s.info.clone()) }),
        )
        .route("/replay/state", get(state))
        .with_state(state_);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServerError::Bind { addr: listen, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr: listen, source })?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(ViewHandle { local_addr, task })
}
