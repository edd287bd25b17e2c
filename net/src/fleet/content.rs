//! What a world server started by the fleet reads from the fleet's internal API, with
//! its token: its world and where its session goes. Both sides use these types.

use std::path::PathBuf;

/// Environment-free contract between the fleet and its children: the child is started
/// as `migratory-server serve --fleet-url URL --world-id ID ...` and reads its token as
/// the first line of stdin.
pub const CONTENT_PATH_PREFIX: &str = "/internal/worlds/";

/// `GET /internal/worlds/{id}/content`, answered only to that world's live token.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorldContent {
    pub world_id: String,
    /// The server's `[world]` table as JSON (keys left out take their defaults).
    pub config: serde_json::Value,
    /// Where the session's recording goes.
    pub record_dir: PathBuf,
    /// The previous segment to resume from (None: a fresh world).
    pub resume_from: Option<PathBuf>,
}

/// The content URL for a world.
pub fn content_url(fleet_url: &str, world_id: &str) -> String {
    format!(
        "{}{CONTENT_PATH_PREFIX}{world_id}/content",
        fleet_url.trim_end_matches('/')
    )
}
