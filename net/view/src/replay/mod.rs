//! `migratory-server view REC.mrec`: the browser viewer over a recording. `reader` answers
//! questions about one tick from a cursor world (god view, one entity, one client's view);
//! `analysis` works out, in the background, the timeline's markers and (with `--compare`)
//! the first divergence from another recording or shard count.
//!
//! Routes: `/` and `/viewer/*` (the viewer's files, which switch to replay mode when
//! `/replay/info` answers), `/viewer/terrain`, `/replay/info` (JSON: `start_tick`,
//! `last_tick`, `tick_rate_hz`, `world_size_mm`, `boid_count`, `view_radius_mm`,
//! `snapshot_interval_ticks`, `zones`), `/replay/markers?from=N` (JSON, grows while the
//! scan runs: `complete`, `scanned_tick`, `total`, `markers` from index N on as `[tick,
//! kind, client, n]` with the kinds of `analysis::marker`, `clients`), `/replay/divergence` (JSON `status`: `off`,
//! `pending`, `none`, `found` with `tick` and `entities`, or `error`),
//! `/replay/entity?tick=T&id=ID` (JSON: the entity as `migratory-replay inspect` prints
//! it, and its `track` as `[tick, x_mm, y_mm]` over the last `reader::TRACK_SECONDS`; an
//! avatar id whose slot is free at T answers `kind: "absent"` with `why`),
//! `/replay/client?tick=T&client=C` (JSON: the view C's newest snapshot at or before T gave
//! it, that snapshot's tick, baseline and size, and C's acked tick; a client not in the
//! world at T, or with no snapshot yet, answers `{"absent": why}`: the page asks tick
//! after tick, and a refusal would be an error in the console each time), and
//! `/replay/state?tick=T`, the world at tick T:
//!
//! | offset | size | field                                                  |
//! |--------|------|--------------------------------------------------------|
//! | 0      | 4    | tick (u32, little-endian)                              |
//! | 4      | 4    | n, the entity count (u32)                              |
//! | 8      | 16 n | per entity: id u32, x_mm i32, y_mm i32, vx i16, vy i16 (mm/tick); ids below `boid_count` are boids, the others avatars |

mod analysis;
mod error;
mod reader;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use migratory_kernel::World;
use migratory_replay::Recording;
use serde_json::Value;
use tokio::sync::oneshot;

pub use analysis::{marker, Compare};
pub use error::{QuestionError, ViewError};
pub use reader::{state_layout, REPLAY_ENTITY_BYTES, TRACK_SECONDS};
use reader::{Answer, Question, Request};

use crate::assets;

#[derive(Debug)]
struct ViewState {
    info: Value,
    requests: Mutex<mpsc::Sender<Request>>,
    markers: Arc<Mutex<analysis::Markers>>,
    divergence: Arc<Mutex<Value>>,
}

/// A recording being served.
#[derive(Debug)]
pub struct ViewHandle {
    pub local_addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, serde::Deserialize)]
struct TickQuery {
    tick: u32,
    id: Option<u32>,
    client: Option<u32>,
}

#[derive(Debug, serde::Deserialize)]
struct FromQuery {
    from: Option<usize>,
}

async fn ask(s: &ViewState, question: Question) -> Response {
    let (tx, rx) = oneshot::channel();
    let sent = s
        .requests
        .lock()
        .map(|r| r.send((question, tx)).is_ok())
        .unwrap_or(false);
    let stopped = || {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the recording reader stopped\n",
        )
            .into_response()
    };
    if !sent {
        return stopped();
    }
    match rx.await {
        Ok(Ok(Answer::Bytes(bytes))) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(Ok(Answer::Json(v))) => axum::Json(v).into_response(),
        Ok(Err(e)) => (status_of(&e), format!("{e}\n")).into_response(),
        Err(_) => stopped(),
    }
}

/// A question the recording does not hold the answer to is the asker's error (422); a
/// recording that cannot be read, the server's (500).
fn status_of(e: &QuestionError) -> StatusCode {
    if e.is_bad_question() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

async fn state(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    ask(&s, Question::State { tick: q.tick }).await
}

async fn entity(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    let Some(id) = q.id else {
        return (StatusCode::BAD_REQUEST, "id= is required\n").into_response();
    };
    ask(&s, Question::Entity { tick: q.tick, id }).await
}

async fn client(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    let Some(client) = q.client else {
        return (StatusCode::BAD_REQUEST, "client= is required\n").into_response();
    };
    ask(&s, Question::Client { tick: q.tick, client }).await
}

/// What the reader thread sends back once the recording is open: `/replay/info` and the
/// terrain image.
type Opened = Result<(Value, Vec<u8>), ViewError>;

/// Opens the recording (on the reader thread, which keeps it), describes it.
fn open(path: &std::path::Path) -> Result<(Recording, World, Value, Vec<u8>), ViewError> {
    let err = |source| ViewError::Open {
        path: path.to_path_buf(),
        source,
    };
    let rec = Recording::open(path).map_err(err)?;
    let world = rec.start_world(1).map_err(err)?;
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
        "snapshot_interval_ticks": c.snapshot_interval_ticks,
        "track_seconds": TRACK_SECONDS,
        "zones": std::iter::once(zone(0, &zones.town))
            .chain(zones.hunting_fields.iter().map(|z| zone(1, z)))
            .collect::<Vec<_>>(),
    });
    let terrain = assets::terrain_image(
        world.terrain(),
        c.world_size_mm,
        c.water_level_mm,
        &world.terrain().content_hash(),
    );
    Ok((rec, world, info, terrain))
}

fn spawn(name: &'static str, f: impl FnOnce() + Send + 'static) -> Result<(), ViewError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|source| ViewError::Thread { what: name, source })
}

/// Opens `path` and serves the viewer over it on `listen`, comparing it with `compare`
/// when given. Must run inside a tokio runtime.
pub async fn view(
    path: PathBuf,
    listen: SocketAddr,
    compare: Option<Compare>,
) -> Result<ViewHandle, ViewError> {
    if let Some(Compare::Recording(other)) = &compare {
        let other = other.clone();
        tokio::task::spawn_blocking(move || {
            Recording::open(&other)
                .map(drop)
                .map_err(|source| ViewError::Compare { path: other, source })
        })
        .await
        .map_err(|_| ViewError::ReaderStopped)??;
    }
    let (tx, rx) = mpsc::channel::<Request>();
    let (opened_tx, opened_rx) = mpsc::channel::<Opened>();
    let reader_path = path.clone();
    spawn("replay-reader", move || match open(&reader_path) {
        Ok((rec, world, info, terrain)) => {
            let _ = opened_tx.send(Ok((info, terrain)));
            reader::serve(rec, world, rx);
        }
        Err(e) => {
            let _ = opened_tx.send(Err(e));
        }
    })?;
    let (info, terrain) = tokio::task::spawn_blocking(move || opened_rx.recv())
        .await
        .map_err(|_| ViewError::ReaderStopped)?
        .map_err(|_| ViewError::ReaderStopped)??;
    let markers = Arc::new(Mutex::new(analysis::Markers::default()));
    let (scan_path, scan_out) = (path.clone(), markers.clone());
    spawn("replay-markers", move || {
        analysis::scan_markers(scan_path, scan_out)
    })?;
    let divergence = Arc::new(Mutex::new(match compare {
        Some(_) => analysis::pending(),
        None => analysis::not_asked(),
    }));
    if let Some(against) = compare {
        let (out, boid_count) = (
            divergence.clone(),
            info["boid_count"].as_u64().unwrap_or(0) as u32,
        );
        spawn("replay-compare", move || {
            let found = analysis::find_divergence(&path, &against, boid_count);
            if let Ok(mut d) = out.lock() {
                *d = found;
            }
        })?;
    }
    let terrain = axum::body::Bytes::from(terrain);
    let state_ = Arc::new(ViewState {
        info,
        requests: Mutex::new(tx),
        markers,
        divergence,
    });
    let app = Router::new()
        .route(
            "/replay/info",
            get(|State(s): State<Arc<ViewState>>| async move { axum::Json(s.info.clone()) }),
        )
        .route(
            "/replay/markers",
            get(
                |State(s): State<Arc<ViewState>>, Query(q): Query<FromQuery>| async move {
                    let from = q.from.unwrap_or(0);
                    let v = s.markers.lock().map(|m| m.to_json(from)).unwrap_or_default();
                    axum::Json(v)
                },
            ),
        )
        .route(
            "/replay/divergence",
            get(|State(s): State<Arc<ViewState>>| async move {
                let v = s.divergence.lock().map(|d| d.clone()).unwrap_or_default();
                axum::Json(v)
            }),
        )
        .route("/replay/state", get(state))
        .route("/replay/entity", get(entity))
        .route("/replay/client", get(client))
        .with_state(state_)
        .merge(assets::live_routes(terrain));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ViewError::Bind { addr: listen, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ViewError::Bind { addr: listen, source })?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(ViewHandle { local_addr, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_questions_are_422_and_unreadable_recordings_500() {
        let bad = [
            QuestionError::TickOutside {
                tick: 9,
                first: 0,
                last: 5,
            },
            QuestionError::NoEntity { id: 1, tick: 2 },
            QuestionError::ClientAbsent { client: 1, tick: 2 },
            QuestionError::NoSnapshot { client: 1, tick: 2 },
        ];
        for e in &bad {
            assert_eq!(status_of(e), StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        }
        let corrupt = QuestionError::Recording(migratory_replay::RecordingError::Corrupted {
            offset: 64,
            ticks: Some((60, 119)),
            reason: "block payload does not decode".into(),
        });
        assert_eq!(status_of(&corrupt), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(corrupt.to_string().contains("cannot be read"), "{corrupt}");
    }
}
