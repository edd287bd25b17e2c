//! How the fleet's HTTP listeners answer errors: every error is JSON, with its status
//! decided by `FleetError`'s variant. Shared by the public API (`api`) and the world
//! servers' internal routes (`internal_api`).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::FleetError;

/// Every error answer is JSON, as FLEET.md says, including the ones axum makes itself (an
/// unknown route 404, a wrong method 405, a body over the limit 413, a malformed path 400):
/// those come as plain text, and are wrapped here as `{"error": TEXT}`.
pub(crate) async fn json_errors(response: Response) -> Response {
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
