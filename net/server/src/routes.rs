//! The one port's HTTP side: the routes (`/ws`, `/healthz`, `/metrics`, `/status`,
//! `/viewer/names`, `POST /fleet/stop`, the viewer's), what their handlers share
//! (`AppState`), and the WebSocket upgrade by hand, which hands the TCP stream itself to
//! the connection task.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::Bytes;

use migratory_wire::fleet::ServerStatus;

use crate::accept;
use crate::config::ServerConfig;
use crate::connection;
use crate::connection_ctx::{ConnectionCtx, ConnectionWiring};
use crate::lifecycle::{Lifecycle, Stopper};
use crate::outlet::Prefixed;

/// The WebSocket endpoint's path.
pub const WS_PATH: &str = "/ws";

/// What the HTTP handlers share: the connections' context, and the WebSocket settings
/// the upgrade needs.
#[derive(Debug)]
pub(crate) struct AppState {
    connections: Arc<ConnectionCtx>,
    /// What `/status` reports besides the live counters (which it overwrites).
    status: ServerStatus,
    /// For a fleet's server: the hash of its fleet token, and the stopper `POST
    /// /fleet/stop` uses (a fleet that did not fork this server cannot signal it).
    fleet_stop: Option<(blake3::Hash, Stopper)>,
}

/// What the HTTP handlers share: the connections' context (the terrain every client
/// gets, and what they are wired to), the fleet's stop, and what `/status` reports
/// besides the live counters.
pub(crate) fn app_state(
    config: &ServerConfig,
    terrain: (Arc<Vec<Bytes>>, [u8; 32]),
    wiring: ConnectionWiring,
    (fleet_token, lifecycle): (Option<&str>, &Arc<Lifecycle>),
    (start_tick, recording, resumed_from, next_client_id): (u32, Option<PathBuf>, Option<PathBuf>, u32),
) -> Arc<AppState> {
    let connections = ConnectionCtx::new(config, terrain, wiring);
    connections
        .next_client_id
        .store(next_client_id, Ordering::Relaxed);
    Arc::new(AppState {
        fleet_stop: fleet_token.map(|t| (blake3::hash(t.as_bytes()), Stopper(lifecycle.clone()))),
        connections: Arc::new(connections),
        status: ServerStatus {
            tick: start_tick,
            players: 0,
            connections: 0,
            start_tick,
            recording,
            resumed_from,
        },
    })
}

/// The one port's routes: the WebSocket, health, metrics, status, and the viewer's.
pub(crate) fn router(ctx: Arc<AppState>, viewer_terrain: Bytes) -> Router {
    Router::new()
        .route(WS_PATH, get(ws_upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics_page))
        .route("/viewer/names", get(names_page))
        .route(migratory_wire::fleet::STATUS_PATH, get(status_page))
        .route(
            migratory_wire::fleet::FLEET_STOP_PATH,
            axum::routing::post(fleet_stop),
        )
        // The viewer asks; only `migratory-replay view` has a recording to show.
        .route("/replay/info", get(|| async { StatusCode::NO_CONTENT }))
        .with_state(ctx)
        .merge(migratory_view::live_routes(viewer_terrain))
}

/// `/viewer/names`: `{"AVATAR_ID": "name", ...}` of the players in the world.
async fn names_page(State(ctx): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(ctx.connections.board.roster())
}

async fn metrics_page(State(ctx): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        ctx.connections.metrics.render(),
    )
}

/// `/status`: the session at a glance, as JSON (what the fleet polls for player counts).
/// `POST /fleet/stop[?move=1]` with the fleet's token as Bearer: the graceful stop a
/// fleet asks of a server it did not fork (an allocated GameServer); with `move=1` the
/// clients are closed with REJOIN, as for SIGUSR1. 404 for a server no fleet started,
/// 401 for any other token.
async fn fleet_stop(
    State(ctx): State<Arc<AppState>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> StatusCode {
    let Some((hash, stopper)) = &ctx.fleet_stop else {
        return StatusCode::NOT_FOUND;
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // blake3::Hash compares in constant time.
    if blake3::hash(presented.as_bytes()) != *hash {
        return StatusCode::UNAUTHORIZED;
    }
    if q.get("move").is_some_and(|v| v == "1") {
        stopper.stop_moving();
    } else {
        stopper.stop();
    }
    StatusCode::ACCEPTED
}

async fn status_page(State(ctx): State<Arc<AppState>>) -> impl IntoResponse {
    let m = &ctx.connections.metrics;
    let count = |a: &std::sync::atomic::AtomicI64| {
        u32::try_from(a.load(Ordering::Relaxed).max(0)).unwrap_or(u32::MAX)
    };
    axum::Json(ServerStatus {
        tick: ctx
            .connections
            .board
            .tick
            .load(Ordering::Relaxed)
            .max(ctx.status.start_tick),
        players: count(&m.clients),
        connections: count(&m.connections),
        ..ctx.status.clone()
    })
}

fn header_has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The WebSocket handshake (RFC 6455 section 4.2), then the connection task.
async fn ws_upgrade(
    State(ctx): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let headers = req.headers();
    let is_upgrade = header_has_token(headers, header::CONNECTION, "upgrade")
        && header_has_token(headers, header::UPGRADE, "websocket")
        && headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY).filter(|_| is_upgrade) else {
        return (
            StatusCode::BAD_REQUEST,
            "expected a WebSocket upgrade (version 13)\n",
        )
            .into_response();
    };
    if *ctx.connections.shutdown.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "server shutting down\n").into_response();
    }
    let accept = derive_accept_key(key.as_bytes());
    // The connection's place under the caps goes with the WebSocket.
    let slot = req.extensions().get::<Arc<accept::ConnectionSlot>>().cloned();
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let _slot = slot;
        match on_upgrade.await {
            Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                // The socket itself, split: the tick thread writes snapshots into its write
                // half without locking out the task's reads.
                Ok(parts) => {
                    let hyper::upgrade::Parts { io, read_buf, .. } = parts;
                    let (read, write) = io.into_inner().into_split();
                    // Copied out, and the view dropped here: the bytes hyper read ahead are
                    // a view of its whole read buffer (8 KiB), which would otherwise live as
                    // long as the connection.
                    let ahead = Bytes::copy_from_slice(&read_buf);
                    drop(read_buf);
                    let read = Prefixed { ahead, read };
                    connection::run(read, write, ctx.connections.clone(), Some(peer)).await;
                }
                // Any other transport (none today) is split behind a lock.
                Err(upgraded) => {
                    let (read, write) = tokio::io::split(TokioIo::new(upgraded));
                    connection::run(read, write, ctx.connections.clone(), Some(peer)).await;
                }
            },
            Err(e) => tracing::debug!(%peer, error = %e, "WebSocket upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
