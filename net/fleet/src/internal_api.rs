//! The routes this node's own world servers call, each with its token (`Tokens`): their
//! content, shipping their recordings (`Segments`), and the segment they resume from.
//! Served on a listener of their own (`--internal-listen`, loopback by default), never on
//! the public port.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use migratory_wire::fleet::{RECLAIM_BYTES_MAX, SHIPMENT_BYTES_MAX};

use crate::answers::json_errors;
use crate::error::FleetError;
use crate::segments::Segments;
use crate::store::Append;
use crate::tokens::TokenCheck;
use crate::worlds::Worlds;

/// What the internal routes reach.
#[derive(Debug)]
pub(crate) struct Internal {
    pub(crate) worlds: Arc<Worlds>,
    pub(crate) segments: Arc<Segments>,
}

pub(crate) fn router(internal: Arc<Internal>) -> Router {
    Router::new()
        .route("/internal/worlds/{id}/content", get(content))
        .route(
            "/internal/worlds/{id}/segment",
            post(segment).layer(axum::extract::DefaultBodyLimit::max(SHIPMENT_BYTES_MAX)),
        )
        .route("/internal/worlds/{id}/resume", get(resume))
        .route("/internal/worlds/{id}/resume/reclaim", get(resume_reclaim))
        .route(
            "/internal/worlds/{id}/reclaim",
            post(reclaim).layer(axum::extract::DefaultBodyLimit::max(RECLAIM_BYTES_MAX)),
        )
        .with_state(internal)
        .layer(axum::middleware::map_response(json_errors))
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
async fn content(
    State(internal): State<Arc<Internal>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match internal.worlds.grant_for(&id, bearer(&headers)) {
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
    State(internal): State<Arc<Internal>>,
    Path(id): Path<String>,
    Query(q): Query<SegmentQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FleetError> {
    let grant = match internal.worlds.grant_for(&id, bearer(&headers)) {
        Ok(g) => g,
        Err(check) => return Ok(refused(check, &id)),
    };
    Ok(match internal.segments.append(&grant, q.offset, &body).await? {
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
    State(internal): State<Arc<Internal>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FleetError> {
    let grant = match internal.worlds.grant_for(&id, bearer(&headers)) {
        Ok(g) => g,
        Err(check) => return Ok(refused(check, &id)),
    };
    Ok(match internal.segments.store_reclaim(&grant, &body).await? {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(epoch_now) => fenced(&id, epoch_now, grant.holder.epoch),
    })
}

/// `GET /internal/worlds/{id}/resume` with the server's token: the segment it resumes
/// from, for a server that shares no disk with this node (an allocated GameServer); 204
/// when it starts fresh.
async fn resume(
    State(internal): State<Arc<Internal>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    resume_file(&internal, &id, &headers, |p| p.to_path_buf()).await
}

/// `GET /internal/worlds/{id}/resume/reclaim`: that segment's reclaim file (204: none).
async fn resume_reclaim(
    State(internal): State<Arc<Internal>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    resume_file(&internal, &id, &headers, migratory_wire::fleet::reclaim_path).await
}

async fn resume_file(
    internal: &Internal,
    id: &str,
    headers: &HeaderMap,
    which: impl FnOnce(&std::path::Path) -> std::path::PathBuf,
) -> Response {
    let grant = match internal.worlds.grant_for(id, bearer(headers)) {
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
