//! The fleet's public HTTP front (JSON), as documented in `net/fleet/FLEET.md`: worlds
//! (create, list, show, delete, stop, move, upgrade, history), join, nodes, `/healthz` and
//! `/metrics`. Each handler maps its request onto one component's method (`Worlds`,
//! `Moves`, `Upgrades`, `History`) and its answer onto JSON; the work is theirs.

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;

use crate::answers::json_errors;
use crate::auth::{require_admin, require_player, require_reader, Auth};
use crate::error::{task_failed, FleetError};
use crate::history::History;
use crate::metrics::{FleetMetrics, Outcome, WorldState, WORLD_STATES};
use crate::moves::Moves;
use crate::upgrades::{UpgradeMode, Upgrades};
use crate::worlds::{Created, Live, Worlds};

/// What the public routes reach.
#[derive(Debug)]
pub(crate) struct Api {
    pub(crate) worlds: Arc<Worlds>,
    pub(crate) moves: Arc<Moves>,
    pub(crate) upgrades: Arc<Upgrades>,
    pub(crate) history: Arc<History>,
    pub(crate) metrics: Arc<FleetMetrics>,
}

pub(crate) fn router(api: Arc<Api>, auth: Arc<Auth>) -> Router {
    use axum::middleware::from_fn_with_state;
    let admin = from_fn_with_state(auth.clone(), require_admin);
    let reader = from_fn_with_state(auth.clone(), require_reader);
    let player = from_fn_with_state(auth, require_player);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/api/worlds", get(list).route_layer(reader.clone()))
        .route(
            "/api/worlds/{id}",
            put(create)
                .delete(delete)
                .route_layer(admin.clone())
                .merge(get(show).route_layer(reader.clone())),
        )
        .route("/api/worlds/{id}/stop", post(stop).route_layer(admin.clone()))
        .route(
            "/api/worlds/{id}/move",
            post(move_world).route_layer(admin.clone()),
        )
        .route(
            "/api/worlds/{id}/upgrade",
            post(upgrade).route_layer(admin.clone()),
        )
        .route("/api/worlds/{id}/view", post(view).route_layer(admin.clone()))
        .route(
            "/api/worlds/{id}/bookmarks",
            get(bookmarks).route_layer(reader.clone()),
        )
        .route("/api/nodes/{id}/drain", post(drain).route_layer(admin))
        .route("/api/worlds/{id}/join", post(join).route_layer(player))
        .route("/api/nodes", get(nodes).route_layer(reader.clone()))
        .route("/api/sd", get(service_discovery).route_layer(reader))
        .with_state(api)
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::middleware::from_fn(join_cors))
}

/// CORS for the join route only, so a browser client served by a world server (the
/// viewer) can ask the fleet where its world went after a move: a preflight is answered
/// here (before any token check, as browsers send none with it), and the answer to a
/// join from another origin may be read by it. Any origin: the token is a Bearer header
/// the page holds, never a cookie, so another site gains nothing it did not have.
async fn join_cors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let is_join = {
        let path = request.uri().path();
        path.starts_with("/api/worlds/") && path.ends_with("/join")
    };
    if !is_join {
        return next.run(request).await;
    }
    let allow_origin = (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*");
    if request.method() == axum::http::Method::OPTIONS {
        return (
            StatusCode::NO_CONTENT,
            [
                allow_origin,
                (header::ACCESS_CONTROL_ALLOW_METHODS, "POST"),
                (
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    "authorization, content-type",
                ),
                (header::ACCESS_CONTROL_MAX_AGE, "600"),
            ],
        )
            .into_response();
    }
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(allow_origin.0, header::HeaderValue::from_static(allow_origin.1));
    response
}

/// `PUT /api/worlds/{id}`: the body is the server's `[world]` table as JSON.
async fn create(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, FleetError> {
    Ok(match api.worlds.create(&id, &body).await? {
        Created::New { config_hash, config } => (
            StatusCode::CREATED,
            Json(json!({ "id": id, "config_hash": config_hash, "config": config })),
        )
            .into_response(),
        Created::Same { config_hash, stored } => {
            Json(json!({ "id": id, "config_hash": config_hash, "config": stored })).into_response()
        }
    })
}

/// A world's server as `list` and `show` answer it (FLEET.md).
fn live_json(live: &Live, this_node: &str) -> serde_json::Value {
    match live {
        Live::Here {
            epoch,
            pid,
            ws_url,
            players,
        } => json!({
            "state": "running", "node": this_node, "epoch": epoch, "pid": pid,
            "ws_url": ws_url, "players": players,
        }),
        Live::Busy => json!({ "state": "busy", "node": this_node }),
        Live::Elsewhere {
            node,
            epoch,
            ws_url: Some(url),
        } => json!({ "state": "running", "node": node, "epoch": epoch, "ws_url": url }),
        Live::Elsewhere {
            node,
            epoch,
            ws_url: None,
        } => json!({ "state": "starting", "node": node, "epoch": epoch }),
        Live::Orphaned { node, epoch } => json!({ "state": "orphaned", "node": node, "epoch": epoch }),
        Live::Stopped => json!({ "state": "stopped" }),
    }
}

/// Its `state` label in `migratory_fleet_worlds` (one of `WORLD_STATES`).
fn live_metric_state(live: &Live) -> &'static str {
    match live {
        // A world this node is starting or stopping counts as running here.
        Live::Here { .. } | Live::Busy => "running",
        Live::Elsewhere { .. } => "running_elsewhere",
        Live::Orphaned { .. } => "orphaned",
        Live::Stopped => "stopped",
    }
}

async fn list(State(api): State<Arc<Api>>) -> Result<Json<serde_json::Value>, FleetError> {
    let rows = api.worlds.rows().await?;
    let nodes = api.worlds.live_nodes().await?;
    let worlds: Vec<serde_json::Value> = rows
        .iter()
        .map(|w| {
            json!({
                "id": w.id,
                "config_hash": w.config_hash,
                "created_unix_ms": w.created_unix_ms,
                "server": live_json(&api.worlds.live(w, &nodes), api.worlds.node_id()),
            })
        })
        .collect();
    Ok(Json(json!({ "worlds": worlds })))
}

async fn show(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let w = api.worlds.world_row(&id).await?;
    let segments: Vec<serde_json::Value> = api
        .worlds
        .segments(&id)
        .await?
        .into_iter()
        .map(|(seg, shipped)| {
            let mut v = json!(seg);
            if let Some(shipped) = shipped {
                // With a shared store: how much of the segment a takeover would find.
                v["shipped_bytes"] = json!(shipped);
            }
            v
        })
        .collect();
    let config: serde_json::Value = serde_json::from_str(&w.config_json).unwrap_or(serde_json::Value::Null);
    let live = api.worlds.live(&w, &api.worlds.live_nodes().await?);
    Ok(Json(json!({
        "id": w.id,
        "config": config,
        "config_hash": w.config_hash,
        "created_unix_ms": w.created_unix_ms,
        "lineage": w.lineage,
        "server": live_json(&live, api.worlds.node_id()),
        "segments": segments,
    })))
}

/// `DELETE /api/worlds/{id}`: stops its server, then removes its rows and files.
async fn delete(State(api): State<Arc<Api>>, Path(id): Path<String>) -> Result<StatusCode, FleetError> {
    api.worlds.delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn join(State(api): State<Arc<Api>>, Path(id): Path<String>) -> Result<Response, FleetError> {
    let t0 = std::time::Instant::now();
    let answer = api.worlds.join(&id).await;
    let outcome = match &answer {
        Ok(a) if a.started => "started",
        Ok(a) if a.node != api.worlds.node_id() => "elsewhere",
        Ok(_) => "running",
        Err(FleetError::NotFound { .. }) => "unknown",
        Err(_) => "failed",
    };
    api.metrics.joins.get_or_create(&Outcome { outcome }).inc();
    api.metrics.join_seconds.observe(t0.elapsed().as_secs_f64());
    Ok(Json(answer?).into_response())
}

/// `GET /metrics`: this node's series (Prometheus/OpenMetrics text).
async fn metrics(State(api): State<Arc<Api>>) -> Response {
    let (worlds, metrics) = (&api.worlds, &api.metrics);
    metrics.world_slots.set(worlds.slot_count() as i64);
    metrics
        .servers_running
        .set(worlds.running_count(None).await as i64);
    // Worlds by state, from the store (one query a scrape).
    if let (Ok(rows), Ok(nodes)) = (worlds.rows().await, worlds.live_nodes().await) {
        for state in WORLD_STATES {
            let n = rows
                .iter()
                .filter(|row| live_metric_state(&worlds.live(row, &nodes)) == state)
                .count();
            metrics.worlds.get_or_create(&WorldState { state }).set(n as i64);
        }
    }
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        metrics.render(),
    )
        .into_response()
}

/// `GET /api/sd`: Prometheus HTTP service discovery (`http_sd_configs`): every world
/// server running on a node with a live lease, as its metrics target (the host and port of
/// its `ws_url`; `/metrics` is on the same port) with `world` and `node` labels.
async fn service_discovery(State(api): State<Arc<Api>>) -> Result<Json<serde_json::Value>, FleetError> {
    let nodes = api.worlds.live_nodes().await?;
    let mut groups = Vec::new();
    for w in api.worlds.rows().await? {
        let (Some(node), Some(url)) = (w.owner_node.as_deref(), w.ws_url.as_deref()) else {
            continue;
        };
        if !nodes.iter().any(|n| n == node) {
            continue;
        }
        let Some(target) = url.strip_prefix("ws://").and_then(|r| r.split('/').next()) else {
            continue;
        };
        groups.push(json!({
            "targets": [target],
            "labels": { "world": w.id, "node": node },
        }));
    }
    Ok(Json(serde_json::Value::Array(groups)))
}

/// `POST /api/worlds/{id}/stop`: stops its server gracefully (a final checkpoint); the
/// next join resumes it.
async fn stop(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let stopped = api.worlds.stop(&id).await?;
    Ok(Json(json!({ "world": id, "stopped": stopped })))
}

/// `POST /api/worlds/{id}/move` with `{"to": NODE_ID}` or `{}` (the fleet chooses): the
/// world's server stops at a tick boundary and the target node resumes it; its clients
/// follow through the fleet's join and reclaim their avatars.
async fn move_world(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, FleetError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct MoveBody {
        to: Option<String>,
    }
    let text = if body.is_empty() { &b"{}"[..] } else { &body[..] };
    let req: MoveBody = serde_json::from_slice(text).map_err(|e| FleetError::Invalid {
        reason: format!("a move's body is {{\"to\": NODE_ID}} or {{}}: {e}"),
    })?;
    in_own_task(async move { api.moves.move_world(&id, req.to.as_deref()).await }).await
}

/// Runs an operation in a task of its own (a client that hangs up must not cut a move or
/// an upgrade in half) and answers its report as JSON.
async fn in_own_task<T: serde::Serialize + Send + 'static>(
    operation: impl Future<Output = Result<T, FleetError>> + Send + 'static,
) -> Result<Json<serde_json::Value>, FleetError> {
    let report = tokio::spawn(operation).await.map_err(task_failed)??;
    Ok(Json(serde_json::to_value(report).unwrap_or_default()))
}

/// `POST /api/worlds/{id}/upgrade` with `{"mode": "replay"}` (the world's whole input
/// history replayed under this build's kernel rules into a new segment it resumes from)
/// or `{"mode": "fork"}` (a fresh start from its config); the old segments are kept.
async fn upgrade(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, FleetError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct UpgradeBody {
        mode: UpgradeMode,
    }
    let req: UpgradeBody = serde_json::from_slice(&body).map_err(|e| FleetError::Invalid {
        reason: format!("an upgrade's body is {{\"mode\": \"replay\"}} or {{\"mode\": \"fork\"}}: {e}"),
    })?;
    in_own_task(async move { api.upgrades.upgrade_world(&id, req.mode).await }).await
}

/// `GET /api/worlds/{id}/bookmarks`: the bookmarks of the world's history.
async fn bookmarks(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let marks = api.history.bookmarks(&id).await?;
    Ok(Json(json!({ "world": id, "bookmarks": marks })))
}

/// `POST /api/worlds/{id}/view`: the replay viewer over the world's history, opened on
/// this node.
async fn view(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    in_own_task(async move { api.history.open_view(&id).await }).await
}

/// `POST /api/nodes/{id}/drain` on node `id` itself: every world it runs moves to other
/// nodes, and it starts no world from then on (until it restarts).
async fn drain(
    State(api): State<Arc<Api>>,
    Path(node): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let moves = {
        let (api, node) = (api.clone(), node.clone());
        tokio::spawn(async move { api.moves.drain(&node).await })
            .await
            .map_err(task_failed)??
    };
    let (moved, failed): (Vec<_>, Vec<_>) = moves.into_iter().partition(Result::is_ok);
    Ok(Json(json!({
        "node": node,
        "draining": true,
        "moved": moved.into_iter().filter_map(Result::ok).collect::<Vec<_>>(),
        "failed": failed
            .into_iter()
            .filter_map(Result::err)
            .map(|(id, e)| format!("{id}: {e}"))
            .collect::<Vec<_>>(),
    })))
}

/// `GET /api/nodes`: the nodes sharing the store, with their leases.
async fn nodes(State(api): State<Arc<Api>>) -> Result<Json<serde_json::Value>, FleetError> {
    let nodes = api.worlds.nodes().await?;
    Ok(Json(json!({ "this_node": api.worlds.node_id(), "nodes": nodes })))
}
