//! `migratory-replay view REC.mrec`: the browser viewer over a recording (the page's
//! files are `migratory-view`'s). `reader` answers
//! questions about one tick from a cursor world (god view, one entity, one client's view);
//! `analysis` works out, in the background, the timeline's markers and (with `--compare`)
//! the first divergence from another recording or shard count.
//!
//! Routes: `/` and `/viewer/*` (the viewer's files, which switch to replay mode when
//! `/replay/info` answers), `/viewer/terrain`, `/replay/info` (JSON: `start_tick`,
//! `last_tick`, `tick_rate_hz`, `world_size_mm`, `boid_count`, `view_radius_mm`,
//! `snapshot_interval_ticks`, `zones`, `bookmarks` as `{tick, client, note}`,
//! `probe_fields` and `probe_range_ticks_max`: what `/replay/probe` answers), `/replay/markers?from=N` (JSON, grows while the
//! scan runs: `complete`, `scanned_tick`, `total`, `markers` from index N on as `[tick,
//! kind, client, n, entity]` with the kinds of `migratory_view::marker` and the client's avatar id, `clients`, and `seek_index`:
//! `checkpoints`, `bytes`, `spacing_ticks` of the in-memory checkpoints seeks restore from), `/replay/divergence` (JSON `status`: `off`,
//! `pending`, `none`, `found` with `tick` and `entities`, or `error`),
//! `/replay/entity?tick=T&id=ID` (JSON: the entity as `migratory-replay inspect` prints
//! it, and its `track` as `[tick, x_mm, y_mm]` over the last `reader::TRACK_SECONDS`; an
//! avatar id whose slot is free at T answers `kind: "absent"` with `why`),
//! `/replay/probe?id=ID&field=F&from=A&to=B` (JSON: `migratory-replay probe --json`'s
//! report, `series` as `[tick, value or null]`; at most `PROBE_RANGE_TICKS_MAX` ticks),
//! `/replay/client?tick=T&client=C` (JSON: the view C's newest snapshot at or before T gave
//! it, that snapshot's tick, baseline and size, and C's acked tick; a client not in the
//! world at T, or with no snapshot yet, answers `{"absent": why}`: the page asks tick
//! after tick, and a refusal would be an error in the console each time), and
//! `/replay/state?tick=T`, the world at tick T, and `/replay/states?from=T&count=N&stride=S`
//! (what playback draws next: the world at N ticks S apart from T, those inside the
//! recording, one `/replay/state` answer after another; N at most
//! `STATES_WINDOW_FRAMES_MAX`, S at most `STATES_STRIDE_TICKS_MAX`):
//!
//! | offset | size | field                                                  |
//! |--------|------|--------------------------------------------------------|
//! | 0      | 4    | tick (u32, little-endian)                              |
//! | 4      | 4    | n, the entity count (u32)                              |
//! | 8      | 16 n | per entity: id u32, x_mm i32, y_mm i32, vx i16, vy i16 (mm/tick); ids below `boid_count` are boids, the others avatars |

mod analysis;
mod error;
mod reader;
mod seek;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};

use crate::Recording;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use migratory_kernel::World;
use serde_json::Value;
use tokio::sync::oneshot;

pub use analysis::Compare;
pub use error::{QuestionError, ViewError};
pub use migratory_view::{marker, state_layout, REPLAY_ENTITY_BYTES};
pub use reader::TRACK_SECONDS;
use reader::{Answer, Question, Request};
use seek::{SeekIndex, SEEK_INDEX_BYTES_MAX};

use migratory_view as assets;

/// Most frames one `/replay/states` answer holds (two seconds of the default world at
/// 1x: about 10 MB with 5,000 boids).
pub const STATES_WINDOW_FRAMES_MAX: u32 = 120;
/// Widest stride `/replay/states` takes, in ticks.
pub const STATES_STRIDE_TICKS_MAX: u32 = 3600;
/// Widest range `/replay/probe` replays, in ticks (about 10 s of stepping for the default
/// world on this machine).
pub const PROBE_RANGE_TICKS_MAX: u32 = 20_000;

/// The page's questions go to two readers, each with its own recording and cursor world,
/// so playback (one window of states after another) and the inspector's questions about
/// the tick shown (an entity, a client's view) do not pull one cursor back and forth,
/// and run on both cores.
#[derive(Debug)]
struct ViewState {
    info: Value,
    /// The recording's path (`/replay/probe` opens it on a thread of its own).
    path: PathBuf,
    /// One probe replays at a time; more wait their turn (each costs up to seconds of a
    /// core, and the readers need the other).
    probes: tokio::sync::Semaphore,
    /// `/replay/state` and `/replay/states`.
    playback: Mutex<mpsc::Sender<Request>>,
    /// `/replay/entity` and `/replay/client`.
    details: Mutex<mpsc::Sender<Request>>,
    markers: Arc<Mutex<analysis::Markers>>,
    index: Arc<SeekIndex>,
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
struct WindowQuery {
    from: u32,
    count: u32,
    stride: Option<u32>,
}

#[derive(Debug, serde::Deserialize)]
struct ProbeQuery {
    id: u32,
    field: String,
    from: u32,
    to: u32,
}

#[derive(Debug, serde::Deserialize)]
struct FromQuery {
    from: Option<usize>,
}

async fn ask(reader: &Mutex<mpsc::Sender<Request>>, question: Question) -> Response {
    let (tx, rx) = oneshot::channel();
    let sent = reader
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
    ask(&s.playback, Question::State { tick: q.tick }).await
}

async fn states(State(s): State<Arc<ViewState>>, Query(q): Query<WindowQuery>) -> Response {
    let stride = q.stride.unwrap_or(1);
    if !(1..=STATES_WINDOW_FRAMES_MAX).contains(&q.count) || !(1..=STATES_STRIDE_TICKS_MAX).contains(&stride)
    {
        let why = format!(
            "count must be 1..={STATES_WINDOW_FRAMES_MAX} and stride 1..={STATES_STRIDE_TICKS_MAX} (got count={}, stride={stride})\n",
            q.count
        );
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let question = Question::States {
        from: q.from,
        count: q.count,
        stride,
    };
    ask(&s.playback, question).await
}

/// `/replay/probe`: one field of one entity over a range of ticks, as `migratory-replay
/// probe` computes it (its own replay, beside the readers).
async fn probe(State(s): State<Arc<ViewState>>, Query(q): Query<ProbeQuery>) -> Response {
    if q.to < q.from || q.to - q.from >= PROBE_RANGE_TICKS_MAX {
        let why = format!(
            "from={} to={}: a range of at most {PROBE_RANGE_TICKS_MAX} ticks, from <= to\n",
            q.from, q.to
        );
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let Ok(_turn) = s.probes.acquire().await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the probe queue closed\n").into_response();
    };
    let path = s.path.clone();
    let answer = tokio::task::spawn_blocking(move || {
        crate::tools::probe(
            &path,
            crate::tools::Probed::Entity(q.id),
            &q.field,
            (Some(q.from), Some(q.to)),
            None,
            &mut |_, _| {},
        )
    })
    .await;
    match answer {
        Ok(Ok(report)) => axum::Json(report).into_response(),
        Ok(Err(e @ crate::tools::ToolError::Invalid(_))) => {
            (StatusCode::UNPROCESSABLE_ENTITY, format!("{e}\n")).into_response()
        }
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the probe stopped\n").into_response(),
    }
}

async fn entity(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    let Some(id) = q.id else {
        return (StatusCode::BAD_REQUEST, "id= is required\n").into_response();
    };
    ask(&s.details, Question::Entity { tick: q.tick, id }).await
}

async fn client(State(s): State<Arc<ViewState>>, Query(q): Query<TickQuery>) -> Response {
    let Some(client) = q.client else {
        return (StatusCode::BAD_REQUEST, "client= is required\n").into_response();
    };
    ask(&s.details, Question::Client { tick: q.tick, client }).await
}

/// What the reader thread sends back once the recording is open: `/replay/info` and the
/// terrain image.
type Opened = Result<(Value, Vec<u8>, Arc<SeekIndex>), ViewError>;

/// Opens the recording and builds its first world (on a reader thread, which keeps them).
fn open_cursor(path: &std::path::Path) -> Result<(Recording, World), ViewError> {
    let err = |source| ViewError::Open {
        path: path.to_path_buf(),
        source,
    };
    let rec = Recording::open(path).map_err(err)?;
    let world = rec.start_world(1).map_err(err)?;
    Ok((rec, world))
}

/// Opens the recording (on the reader thread, which keeps it), describes it.
fn open(path: &std::path::Path) -> Result<(Recording, World, Value, Vec<u8>), ViewError> {
    let (rec, world) = open_cursor(path)?;
    let c = world.config().clone();
    let zones = world.zones();
    let zone = |kind: u8, z: &migratory_kernel::Zone| serde_json::json!({ "kind": kind, "x_mm": z.x_mm, "y_mm": z.y_mm, "radius_mm": z.radius_mm });
    let mut info = serde_json::json!({
        "file": path.display().to_string(),
        "start_tick": rec.meta.start_tick,
        "last_tick": rec.last_tick(),
        "tick_rate_hz": c.tick_rate_hz,
        "world_size_mm": c.world_size_mm,
        "boid_count": c.boid_count,
        "view_radius_mm": c.view_radius_mm,
        "snapshot_interval_ticks": c.snapshot_interval_ticks,
        "track_seconds": TRACK_SECONDS,
        "probe_fields": crate::tools::PROBE_FIELDS,
        "probe_range_ticks_max": PROBE_RANGE_TICKS_MAX,
        "zones": std::iter::once(zone(0, &zones.town))
            .chain(zones.hunting_fields.iter().map(|z| zone(1, z)))
            .collect::<Vec<_>>(),
    });
    let bookmarks = rec.bookmarks().map_err(|source| ViewError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    info["bookmarks"] = serde_json::to_value(&bookmarks).unwrap_or_default();
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
    let (playback, playback_rx) = mpsc::channel::<Request>();
    let (details, details_rx) = mpsc::channel::<Request>();
    let (opened_tx, opened_rx) = mpsc::channel::<Opened>();
    let reader_path = path.clone();
    spawn("replay-playback", move || match open(&reader_path) {
        Ok((rec, world, info, terrain)) => {
            // Checkpoints one second of ticks apart to begin with.
            let spacing_ticks = rec.meta.config.tick_rate_hz.max(1);
            let index = Arc::new(SeekIndex::new(spacing_ticks, SEEK_INDEX_BYTES_MAX));
            let _ = opened_tx.send(Ok((info, terrain, index.clone())));
            reader::serve(rec, world, index, playback_rx);
        }
        Err(e) => {
            let _ = opened_tx.send(Err(e));
        }
    })?;
    let (info, terrain, index) = tokio::task::spawn_blocking(move || opened_rx.recv())
        .await
        .map_err(|_| ViewError::ReaderStopped)?
        .map_err(|_| ViewError::ReaderStopped)??;
    let (details_path, details_index) = (path.clone(), index.clone());
    spawn("replay-details", move || {
        // The first reader opened this file a moment ago; should it fail now, every
        // question to this reader answers "the reader stopped".
        if let Ok((rec, world)) = open_cursor(&details_path) {
            reader::serve(rec, world, details_index, details_rx);
        }
    })?;
    let markers = Arc::new(Mutex::new(analysis::Markers::default()));
    let (scan_path, scan_out) = (path.clone(), markers.clone());
    let scan_index = index.clone();
    spawn("replay-markers", move || {
        analysis::scan_markers(scan_path, scan_out, scan_index)
    })?;
    let divergence = Arc::new(Mutex::new(match compare {
        Some(_) => analysis::pending(),
        None => analysis::not_asked(),
    }));
    if let Some(against) = compare {
        let (out, boid_count, path) = (
            divergence.clone(),
            info["boid_count"].as_u64().unwrap_or(0) as u32,
            path.clone(),
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
        path: path.clone(),
        probes: tokio::sync::Semaphore::new(1),
        playback: Mutex::new(playback),
        details: Mutex::new(details),
        markers,
        index,
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
                    let mut v = s.markers.lock().map(|m| m.to_json(from)).unwrap_or_default();
                    let (checkpoints, bytes, spacing_ticks) = s.index.stats();
                    v["seek_index"] = serde_json::json!({ "checkpoints": checkpoints, "bytes": bytes, "spacing_ticks": spacing_ticks });
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
        .route("/replay/states", get(states))
        .route("/replay/entity", get(entity))
        .route("/replay/probe", get(probe))
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
        let corrupt = QuestionError::Recording(crate::RecordingError::Corrupted {
            offset: 64,
            ticks: Some((60, 119)),
            reason: "block payload does not decode".into(),
        });
        assert_eq!(status_of(&corrupt), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(corrupt.to_string().contains("cannot be read"), "{corrupt}");
    }
}
