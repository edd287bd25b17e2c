//! The fleet's HTTP front (JSON), as documented in `net/fleet/FLEET.md`: worlds (create, list,
//! show, delete), join, nodes, `/healthz`, and the internal routes its world servers use
//! with their tokens (their content, and shipping their recordings).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use migratory_kernel::WorldConfig;
use serde_json::json;

use migratory_kernel::hex;

use crate::auth::{require_admin, require_player, require_reader, Auth};
use crate::error::{task_failed, validate_world_id, FleetError};
use crate::fleet::{Fleet, TokenCheck, WorldFiles};
use crate::metrics::{Outcome, WorldState, WORLD_STATES};
use crate::store::{Append, WorldRow, CHUNK_BYTES_MAX};

pub(crate) fn router(fleet: Arc<Fleet>, auth: Arc<Auth>) -> Router {
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
        .with_state(fleet)
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

/// The routes this node's own world servers call, each with its token: served on a
/// listener of their own (`--internal-listen`, loopback by default), never on the public
/// port.
pub(crate) fn internal_router(fleet: Arc<Fleet>) -> Router {
    Router::new()
        .route("/internal/worlds/{id}/content", get(content))
        .route(
            "/internal/worlds/{id}/segment",
            post(segment).layer(axum::extract::DefaultBodyLimit::max(CHUNK_BYTES_MAX)),
        )
        .route("/internal/worlds/{id}/resume", get(resume))
        .route("/internal/worlds/{id}/resume/reclaim", get(resume_reclaim))
        .route(
            "/internal/worlds/{id}/reclaim",
            post(reclaim).layer(axum::extract::DefaultBodyLimit::max(
                migratory_wire::fleet::RECLAIM_BYTES_MAX,
            )),
        )
        .with_state(fleet)
        .layer(axum::middleware::map_response(json_errors))
}

/// Every error answer is JSON, as FLEET.md says, including the ones axum makes itself (an
/// unknown route 404, a wrong method 405, a body over the limit 413, a malformed path 400):
/// those come as plain text, and are wrapped here as `{"error": TEXT}`.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let error = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_string(),
        t => t.to_string(),
    };
    (status, Json(json!({ "error": error }))).into_response()
}

impl IntoResponse for FleetError {
    fn into_response(self) -> Response {
        let status = match &self {
            FleetError::NotFound { .. } => StatusCode::NOT_FOUND,
            FleetError::Conflict { .. } => StatusCode::CONFLICT,
            FleetError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            FleetError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            FleetError::NodeInUse { .. } | FleetError::OtherNode { .. } => StatusCode::CONFLICT,
            FleetError::Store(_) | FleetError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(error = %self, "request failed");
        }
        let mut body = json!({ "error": self.to_string() });
        match &self {
            FleetError::Unavailable { world, log_tail, .. } => {
                body["world"] = json!(world);
                body["log_tail"] = json!(log_tail);
            }
            FleetError::NotFound { world } | FleetError::Conflict { world, .. } => {
                body["world"] = json!(world);
            }
            _ => {}
        }
        (status, Json(body)).into_response()
    }
}

/// `PUT /api/worlds/{id}`: the body is the server's `[world]` table as JSON.
async fn create(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, FleetError> {
    validate_world_id(&id)?;
    let invalid = |reason: String| FleetError::Invalid { reason };
    let value: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(invalid(
            "the body must be a JSON object (the world config; {} takes every default)".into(),
        ));
    }
    let config: WorldConfig = serde_path_to_error::deserialize(&value)
        .map_err(|e| invalid(format!("world config key `{}`: {}", e.path(), e.inner())))?;
    config
        .validate()
        .map_err(|e| invalid(format!("world config: {e}")))?;
    fleet.options.limits.check(&config, fleet.options.shards)?;
    let config_json = value.to_string();
    let config_hash = hex(&config.content_hash());
    if fleet.store.create_world(&id, &config_json, &config_hash).await? {
        tracing::info!(world = %id, %config_hash, "world created");
        return Ok((
            StatusCode::CREATED,
            Json(json!({ "id": id, "config_hash": config_hash, "config": value })),
        )
            .into_response());
    }
    let existing = fleet.world_row(&id).await?;
    if existing.config_hash == config_hash {
        // The same world config (maybe spelled differently): answer with what is stored.
        let stored: serde_json::Value = serde_json::from_str(&existing.config_json).unwrap_or(value);
        Ok(Json(json!({ "id": id, "config_hash": config_hash, "config": stored })).into_response())
    } else {
        Err(FleetError::Conflict {
            world: id,
            reason: format!(
                "exists with another config (hash {}); delete it first",
                existing.config_hash
            ),
        })
    }
}

/// A world's server as this node sees it: from its own slot (without waiting for a busy
/// one), or from the store when another node owns the world.
enum Live {
    /// Running on this node.
    Here {
        epoch: i64,
        pid: u32,
        ws_url: String,
        players: u32,
    },
    /// This node is starting or stopping it.
    Busy,
    /// Another node with a live lease runs it (no URL yet: it is starting it).
    Elsewhere {
        node: String,
        epoch: i64,
        ws_url: Option<String>,
    },
    /// Its owner's lease has lapsed: the next join takes it over.
    Orphaned {
        node: String,
        epoch: i64,
    },
    Stopped,
}

impl Live {
    fn of(fleet: &Fleet, row: &WorldRow, live_nodes: &[String]) -> Live {
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != fleet.node.id) {
            let (node, epoch) = (owner.to_string(), row.epoch);
            return if live_nodes.iter().any(|n| n == owner) {
                Live::Elsewhere {
                    node,
                    epoch,
                    ws_url: row.ws_url.clone(),
                }
            } else {
                Live::Orphaned { node, epoch }
            };
        }
        let slot = fleet.slot(&row.id);
        let Ok(slot) = slot.try_lock() else {
            return Live::Busy;
        };
        match &slot.running {
            Some(r) if r.child.exit_info().is_none() => Live::Here {
                epoch: r.holder.epoch,
                pid: r.child.pid,
                ws_url: r.ws_url.clone(),
                players: r.players,
            },
            _ => Live::Stopped,
        }
    }

    /// As `list` and `show` answer it (FLEET.md).
    fn to_json(&self, this_node: &str) -> serde_json::Value {
        match self {
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
    fn metric_state(&self) -> &'static str {
        match self {
            // A world this node is starting or stopping counts as running here.
            Live::Here { .. } | Live::Busy => "running",
            Live::Elsewhere { .. } => "running_elsewhere",
            Live::Orphaned { .. } => "orphaned",
            Live::Stopped => "stopped",
        }
    }
}

async fn live_nodes(fleet: &Fleet) -> Result<Vec<String>, FleetError> {
    Ok(fleet
        .store
        .nodes()
        .await?
        .into_iter()
        .filter(|n| n.live)
        .map(|n| n.id)
        .collect())
}

async fn list(State(fleet): State<Arc<Fleet>>) -> Result<Json<serde_json::Value>, FleetError> {
    let rows = fleet.store.worlds().await?;
    let nodes = live_nodes(&fleet).await?;
    let worlds: Vec<serde_json::Value> = rows
        .iter()
        .map(|w| {
            json!({
                "id": w.id,
                "config_hash": w.config_hash,
                "created_unix_ms": w.created_unix_ms,
                "server": Live::of(&fleet, w, &nodes).to_json(&fleet.node.id),
            })
        })
        .collect();
    Ok(Json(json!({ "worlds": worlds })))
}

async fn show(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let w = fleet.world_row(&id).await?;
    let mut segments = Vec::new();
    for seg in fleet.store.segments(&id).await? {
        let mut v = json!(seg);
        if fleet.ships() {
            // With a shared store: how much of the segment a takeover would find.
            v["shipped_bytes"] = json!(fleet.store.shipped_bytes(&id, seg.seq).await?);
        }
        segments.push(v);
    }
    let config: serde_json::Value = serde_json::from_str(&w.config_json).unwrap_or(serde_json::Value::Null);
    Ok(Json(json!({
        "id": w.id,
        "config": config,
        "config_hash": w.config_hash,
        "created_unix_ms": w.created_unix_ms,
        "lineage": w.lineage,
        "server": Live::of(&fleet, &w, &live_nodes(&fleet).await?).to_json(&fleet.node.id),
        "segments": segments,
    })))
}

/// `DELETE /api/worlds/{id}`: stops its server, then removes its rows and files.
async fn delete(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Result<StatusCode, FleetError> {
    let row = fleet.world_row(&id).await?;
    refuse_if_elsewhere(&fleet, &id, row.owner_node, "delete").await?;
    // The world's lock is held from the stop to the delete, so no join restarts it in
    // between.
    let slot = fleet.slot(&id);
    let mut held = slot.lock().await;
    if let Some(r) = held.running.take() {
        fleet.stop_running(&id, r).await?;
    }
    if !fleet.store.delete_world(&id).await? {
        return Err(FleetError::NotFound { world: id });
    }
    let dir = WorldFiles::new(&fleet.options.data_dir, &id).dir;
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(world = %id, dir = %dir.display(), error = %e, "removing the world's files failed")
        }
    }
    tracing::info!(world = %id, "world deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn join(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Result<Response, FleetError> {
    let t0 = std::time::Instant::now();
    let answer = fleet.join(&id).await;
    let outcome = match &answer {
        Ok(a) if a.started => "started",
        Ok(a) if a.node != fleet.node.id => "elsewhere",
        Ok(_) => "running",
        Err(FleetError::NotFound { .. }) => "unknown",
        Err(_) => "failed",
    };
    fleet.metrics.joins.get_or_create(&Outcome { outcome }).inc();
    fleet.metrics.join_seconds.observe(t0.elapsed().as_secs_f64());
    Ok(Json(answer?).into_response())
}

/// `GET /metrics`: this node's series (Prometheus/OpenMetrics text).
async fn metrics(State(fleet): State<Arc<Fleet>>) -> Response {
    let slots = fleet.slots.lock().unwrap_or_else(|e| e.into_inner()).len();
    fleet.metrics.world_slots.set(slots as i64);
    fleet
        .metrics
        .servers_running
        .set(fleet.running_count(None).await as i64);
    // Worlds by state, from the store (one query a scrape).
    if let (Ok(rows), Ok(nodes)) = (fleet.store.worlds().await, live_nodes(&fleet).await) {
        for state in WORLD_STATES {
            let n = rows
                .iter()
                .filter(|row| Live::of(&fleet, row, &nodes).metric_state() == state)
                .count();
            fleet
                .metrics
                .worlds
                .get_or_create(&WorldState { state })
                .set(n as i64);
        }
    }
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        fleet.metrics.render(),
    )
        .into_response()
}

/// `GET /api/sd`: Prometheus HTTP service discovery (`http_sd_configs`): every world
/// server running on a node with a live lease, as its metrics target (the host and port of
/// its `ws_url`; `/metrics` is on the same port) with `world` and `node` labels.
async fn service_discovery(State(fleet): State<Arc<Fleet>>) -> Result<Json<serde_json::Value>, FleetError> {
    let nodes = live_nodes(&fleet).await?;
    let mut groups = Vec::new();
    for w in fleet.store.worlds().await? {
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
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let row = fleet.world_row(&id).await?;
    refuse_if_elsewhere(&fleet, &id, row.owner_node, "stop").await?;
    let stopped = fleet.stop(&id).await?;
    Ok(Json(json!({ "world": id, "stopped": stopped })))
}

/// `POST /api/worlds/{id}/move` with `{"to": NODE_ID}` or `{}` (the fleet chooses): the
/// world's server stops at a tick boundary and the target node resumes it; its clients
/// follow through the fleet's join and reclaim their avatars.
async fn move_world(
    State(fleet): State<Arc<Fleet>>,
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
    let row = fleet.world_row(&id).await?;
    refuse_if_elsewhere(&fleet, &id, row.owner_node, "move").await?;
    in_own_task(async move { fleet.move_world(&id, req.to.as_deref()).await }).await
}

/// Runs an operation in a task of its own (a client that hangs up must not cut a move or
/// an upgrade in half) and answers its report as JSON.
async fn in_own_task<T: serde::Serialize + Send + 'static>(
    operation: impl std::future::Future<Output = Result<T, FleetError>> + Send + 'static,
) -> Result<Json<serde_json::Value>, FleetError> {
    let report = tokio::spawn(operation).await.map_err(task_failed)??;
    Ok(Json(serde_json::to_value(report).unwrap_or_default()))
}

/// `POST /api/worlds/{id}/upgrade` with `{"mode": "replay"}` (the world's whole input
/// history replayed under this build's kernel rules into a new segment it resumes from)
/// or `{"mode": "fork"}` (a fresh start from its config); the old segments are kept.
async fn upgrade(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, FleetError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct UpgradeBody {
        mode: crate::upgrade::UpgradeMode,
    }
    let req: UpgradeBody = serde_json::from_slice(&body).map_err(|e| FleetError::Invalid {
        reason: format!("an upgrade's body is {{\"mode\": \"replay\"}} or {{\"mode\": \"fork\"}}: {e}"),
    })?;
    let row = fleet.world_row(&id).await?;
    refuse_if_elsewhere(&fleet, &id, row.owner_node, "upgrade").await?;
    in_own_task(async move { fleet.upgrade_world(&id, req.mode).await }).await
}

/// `GET /api/worlds/{id}/bookmarks`: the bookmarks of the world's history.
async fn bookmarks(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let marks = fleet.bookmarks(&id).await?;
    Ok(Json(serde_json::json!({ "world": id, "bookmarks": marks })))
}

/// `POST /api/worlds/{id}/view`: the replay viewer over the world's history, opened on
/// this node.
async fn view(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    in_own_task(async move { fleet.open_view(&id).await }).await
}

/// `POST /api/nodes/{id}/drain` on node `id` itself: every world it runs moves to other
/// nodes, and it starts no world from then on (until it restarts).
async fn drain(
    State(fleet): State<Arc<Fleet>>,
    Path(node): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    if node != fleet.node.id {
        return Err(FleetError::Conflict {
            world: String::new(),
            reason: format!(
                "this is node `{}`: ask node `{node}` to drain itself",
                fleet.node.id
            ),
        });
    }
    let moves = tokio::spawn(async move { fleet.drain().await })
        .await
        .map_err(task_failed)??;
    let (moved, failed): (Vec<_>, Vec<_>) = moves.into_iter().partition(Result::is_ok);
    Ok(Json(json!({
        "node": node,
        "draining": true,
        "moved": moved.into_iter().filter_map(Result::ok).collect::<Vec<_>>(),
        "failed": failed.into_iter().filter_map(Result::err).collect::<Vec<_>>(),
    })))
}

/// A stop or a delete is made by the node that runs the world: another node with a live
/// lease is named in a 409.
async fn refuse_if_elsewhere(
    fleet: &Fleet,
    id: &str,
    owner: Option<String>,
    what: &str,
) -> Result<(), FleetError> {
    if let Some(owner) = owner.filter(|o| *o != fleet.node.id) {
        if fleet.store.node_live(&owner).await? {
            return Err(FleetError::Conflict {
                world: id.to_string(),
                reason: format!("runs on node `{owner}`: ask that node to {what} it"),
            });
        }
    }
    Ok(())
}

/// `GET /api/nodes`: the nodes sharing the store, with their leases.
async fn nodes(State(fleet): State<Arc<Fleet>>) -> Result<Json<serde_json::Value>, FleetError> {
    let nodes = fleet.store.nodes().await?;
    Ok(Json(json!({ "this_node": fleet.node.id, "nodes": nodes })))
}

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// The answer to a token that grants nothing here.
fn refused(check: TokenCheck, id: &str) -> Response {
    match check {
        TokenCheck::Forbidden => (
            StatusCode::FORBIDDEN,
            Json(json!({ "error": format!("this token is not for world `{id}`") })),
        )
            .into_response(),
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Json(json!({ "error": "no live token given" })),
        )
            .into_response(),
    }
}

/// `GET /internal/worlds/{id}/content` with `Authorization: Bearer TOKEN`.
async fn content(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    match fleet.grant_for(&id, bearer(&headers)) {
        Ok(grant) => Json(grant.content).into_response(),
        Err(check) => refused(check, &id),
    }
}

#[derive(serde::Deserialize)]
struct SegmentQuery {
    offset: u64,
}

/// `POST /internal/worlds/{id}/segment?offset=N` with the server's token: the recording's
/// bytes from `offset`. 204 stored; 409 fenced (the world's epoch moved on); 422 a gap.
async fn segment(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    Query(q): Query<SegmentQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FleetError> {
    let grant = match fleet.grant_for(&id, bearer(&headers)) {
        Ok(g) => g,
        Err(check) => return Ok(refused(check, &id)),
    };
    Ok(match fleet.append(&grant, q.offset, &body).await? {
        Append::Stored => StatusCode::NO_CONTENT.into_response(),
        Append::Fenced { epoch_now } => fenced(&id, epoch_now, grant.holder.epoch),
        Append::Gap { stored_bytes } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({
                "error": format!("offset {} is past the {stored_bytes} bytes stored", q.offset),
                "stored_bytes": stored_bytes,
            })),
        )
            .into_response(),
    })
}

/// The 409 of a server whose world moved on past the epoch it ran under.
fn fenced(id: &str, epoch_now: i64, ran_under: i64) -> Response {
    (
        StatusCode::CONFLICT,
        Json(json!({
            "error": format!("fenced: world `{id}` is at epoch {epoch_now}, this server ran under {ran_under}"),
            "epoch": epoch_now,
        })),
    )
        .into_response()
}

/// `POST /internal/worlds/{id}/reclaim` with the server's token: its reclaim file, whole.
/// 204 stored; 409 fenced.
async fn reclaim(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FleetError> {
    let grant = match fleet.grant_for(&id, bearer(&headers)) {
        Ok(g) => g,
        Err(check) => return Ok(refused(check, &id)),
    };
    Ok(match fleet.store_reclaim(&grant, &body).await? {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(epoch_now) => fenced(&id, epoch_now, grant.holder.epoch),
    })
}

/// `GET /internal/worlds/{id}/resume` with the server's token: the segment it resumes
/// from, for a server that shares no disk with this node (an allocated GameServer); 204
/// when it starts fresh.
async fn resume(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    resume_file(&fleet, &id, &headers, |p| p.to_path_buf()).await
}

/// `GET /internal/worlds/{id}/resume/reclaim`: that segment's reclaim file (204: none).
async fn resume_reclaim(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    resume_file(&fleet, &id, &headers, migratory_wire::fleet::reclaim_path).await
}

async fn resume_file(
    fleet: &Fleet,
    id: &str,
    headers: &HeaderMap,
    which: impl FnOnce(&std::path::Path) -> std::path::PathBuf,
) -> Response {
    let grant = match fleet.grant_for(id, bearer(headers)) {
        Ok(g) => g,
        Err(check) => return refused(check, id),
    };
    let Some(path) = grant.content.resume_from.as_deref().map(which) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StatusCode::NO_CONTENT.into_response(),
        Err(e) => FleetError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }
        .into_response(),
    }
}
