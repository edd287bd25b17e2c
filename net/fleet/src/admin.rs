//! Who may manage worlds: every admin call (create, list, show, delete, stop) carries
//! `Authorization: Bearer TOKEN` with the fleet's admin token. Joins stay open (players
//! call them), as do `/healthz` and the internal content route (a world server's own
//! token guards that one). Without it, anyone who reached the port could delete every
//! recording of a world with a player connected.
//!
//! The token is the first line of `--admin-token-file`; without the flag, of
//! `DATA_DIR/admin-token`, made on first start with 256 random bits and mode 0600.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::options::{io_err, FleetError};

/// The file the admin token is kept in when no `--admin-token-file` is given.
pub const ADMIN_TOKEN_FILE_NAME: &str = "admin-token";

/// The admin token, kept only as its hash: comparing hashes (`blake3::Hash` equality is
/// constant-time) tells nothing about how close a guess came.
#[derive(Debug)]
pub(crate) struct AdminToken {
    hash: blake3::Hash,
}

impl AdminToken {
    /// Reads the token from `file`, or from `data_dir`'s default file, making that one
    /// when it does not exist yet.
    pub(crate) fn load(file: Option<&Path>, data_dir: &Path) -> Result<(AdminToken, PathBuf), FleetError> {
        let path = match file {
            Some(f) => f.to_path_buf(),
            None => {
                let p = data_dir.join(ADMIN_TOKEN_FILE_NAME);
                if !p.exists() {
                    make_token_file(&p)?;
                }
                p
            }
        };
        let text = std::fs::read_to_string(&path)
            .map_err(io_err(format!("reading the admin token {}", path.display())))?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < 16 {
            return Err(FleetError::Invalid {
                reason: format!(
                    "the admin token in {} must be at least 16 characters",
                    path.display()
                ),
            });
        }
        Ok((
            AdminToken {
                hash: blake3::hash(token.as_bytes()),
            },
            path,
        ))
    }

    fn admits(&self, presented: &str) -> bool {
        blake3::hash(presented.as_bytes()) == self.hash
    }
}

fn make_token_file(path: &Path) -> Result<(), FleetError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let token = crate::fleet::new_token()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("creating the admin token {}", path.display())))?;
    writeln!(f, "{token}").map_err(io_err(format!("writing the admin token {}", path.display())))
}

/// Lets a request through only with the admin token.
pub(crate) async fn require_admin(
    State(token): State<Arc<AdminToken>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(t) if token.admits(t.trim()) => next.run(request).await,
        Some(_) => unauthorized("the admin token given is not this fleet's"),
        None => unauthorized("admin calls need Authorization: Bearer ADMIN_TOKEN"),
    }
}

fn unauthorized(error: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(json!({ "error": error })),
    )
        .into_response()
}
