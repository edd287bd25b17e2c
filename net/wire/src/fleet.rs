//! What the fleet and a world server agree on: the line a program prints once it is
//! ready, the server's `/status` answer, and the content a world server started by the
//! fleet reads with its token. Both sides use these types; neither spells the wire
//! shapes by hand.

use std::path::PathBuf;

/// What a program prints on stdout once its port is bound, followed by its URL:
/// `listening on ws://127.0.0.1:7400/ws` (world server) or `listening on
/// http://127.0.0.1:7500` (fleet). Supervisors and tests wait for it.
pub const READY_LINE_PREFIX: &str = "listening on ";

/// The ready line for `url`.
pub fn ready_line(url: &str) -> String {
    format!("{READY_LINE_PREFIX}{url}")
}

/// The URL a ready line announces, or None for any other line.
pub fn parse_ready_line(line: &str) -> Option<&str> {
    line.trim_end()
        .strip_prefix(READY_LINE_PREFIX)
        .filter(|url| !url.is_empty())
}

/// `GET /status` on a world server: the session at a glance (what the fleet polls for
/// player counts and reads once a server is ready).
pub const STATUS_PATH: &str = "/status";

/// The `/status` answer, as JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerStatus {
    /// The newest tick (the start tick until the first tick ran).
    pub tick: u32,
    /// Clients joined in the world.
    pub players: u32,
    /// Live connection tasks.
    pub connections: u32,
    /// The tick the session started from (0, or the resumed tick).
    pub start_tick: u32,
    /// This session's recording, if it records.
    pub recording: Option<PathBuf>,
    /// The earlier session's recording it resumed from, if any.
    pub resumed_from: Option<PathBuf>,
}

/// Environment-free contract between the fleet and its children: the child is started
/// as `migratory-server serve --fleet-url URL --world-id=ID ...` and reads its token as
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
    /// With a shared store: ship the recording to the fleet this often, in ms (see
    /// `segment_url`). None: the recording stays where it is written.
    #[serde(default)]
    pub ship_interval_ms: Option<u64>,
    /// A server none of whose shipments has been taken for this long stops as if fenced:
    /// its node cannot show it still holds the world (the node's lease), and another
    /// node may have taken the world over.
    #[serde(default)]
    pub ship_deadline_ms: Option<u64>,
    /// Ticks per recorded block, when the fleet chooses (a block is flushed, and so can
    /// be shipped, once complete). None: the server's config decides.
    #[serde(default)]
    pub record_block_ticks: Option<u32>,
    /// The fencing epoch this server runs under (for its logs: the fleet knows it by the
    /// token).
    #[serde(default)]
    pub epoch: i64,
}

/// Where a world server ships its recording: `POST` the file's bytes from `offset` on
/// (`application/octet-stream`, the token as Bearer). The fleet answers 204 when they are
/// stored, and 409 when the world has moved on to a newer epoch: the server is fenced,
/// and stops (its clients are closed with `close_code::REJOIN`).
pub fn segment_url(fleet_url: &str, world_id: &str, offset: u64) -> String {
    format!(
        "{}{CONTENT_PATH_PREFIX}{world_id}/segment?offset={offset}",
        fleet_url.trim_end_matches('/')
    )
}

/// Most bytes one shipment to `segment_url` carries: the fleet refuses more, and it stores
/// a recording in chunks of at most this size.
pub const SHIPMENT_BYTES_MAX: usize = 4 << 20;

/// A recording's bytes from `offset`, at most `SHIPMENT_BYTES_MAX` of them: the next
/// shipment of a world server, or of its fleet node once the server has exited. Empty at
/// the end of the file.
pub fn read_shipment(recording: &std::path::Path, offset: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    let mut f = std::fs::File::open(recording)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    let mut out = Vec::new();
    f.take(SHIPMENT_BYTES_MAX as u64).read_to_end(&mut out)?;
    Ok(out)
}

/// Where a world server ships its reclaim file (its players' reconnect token hashes):
/// `POST` the whole file whenever it changed, as for `segment_url`: 204 stored, 409
/// fenced.
pub fn reclaim_url(fleet_url: &str, world_id: &str) -> String {
    format!(
        "{}{CONTENT_PATH_PREFIX}{world_id}/reclaim",
        fleet_url.trim_end_matches('/')
    )
}

/// The reclaim file beside a recording: the server writes it, a fleet ships it with the
/// segment and writes it back beside the segment wherever the world resumes.
pub fn reclaim_path(recording: &std::path::Path) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(".reclaim");
    PathBuf::from(name)
}

/// Most bytes a reclaim file may have (the fleet refuses more): 36 bytes a player, far
/// above any world's slots.
pub const RECLAIM_BYTES_MAX: usize = 1 << 20;

/// Longest world id.
pub const WORLD_ID_BYTES_MAX: usize = 64;

/// Whether `id` is a world id: 1 to 64 of `a-z`, `0-9`, `-` and `_` (it names folders and
/// files, so nothing else may reach a path).
pub fn world_id_is_valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= WORLD_ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The GameServer annotations a fleet allocating through Agones writes (in the
/// GameServerAllocation's `spec.metadata`) and the allocated server reads back from its
/// SDK (`GET /gameserver`, `object_meta.annotations`): the world to serve, the fleet's
/// internal URL to read it from, and the token for it.
pub const ANNOTATION_WORLD: &str = "migratory.dev/world";
pub const ANNOTATION_FLEET_URL: &str = "migratory.dev/fleet-url";
pub const ANNOTATION_TOKEN: &str = "migratory.dev/token";

/// Where an allocated server (which shares no disk with the fleet) reads the segment it
/// resumes from (`GET`, its token as Bearer): 200 with the bytes, 204 when it starts fresh.
pub fn resume_url(fleet_url: &str, world_id: &str) -> String {
    format!(
        "{}{CONTENT_PATH_PREFIX}{world_id}/resume",
        fleet_url.trim_end_matches('/')
    )
}

/// The reclaim file of that segment, the same way (204 when there is none).
pub fn resume_reclaim_url(fleet_url: &str, world_id: &str) -> String {
    format!("{}/reclaim", resume_url(fleet_url, world_id))
}

/// `POST` on a fleet's world server, with the fleet token as Bearer: a graceful stop
/// (`?move=1`: for a move, clients closed with REJOIN). For servers the fleet cannot signal.
pub const FLEET_STOP_PATH: &str = "/fleet/stop";

/// The content URL for a world.
pub fn content_url(fleet_url: &str, world_id: &str) -> String {
    format!(
        "{}{CONTENT_PATH_PREFIX}{world_id}/content",
        fleet_url.trim_end_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_round_trip_and_nothing_else_parses() {
        let line = ready_line("ws://127.0.0.1:7400/ws");
        assert_eq!(parse_ready_line(&line), Some("ws://127.0.0.1:7400/ws"));
        assert_eq!(
            parse_ready_line(&format!("{line}\n")),
            Some("ws://127.0.0.1:7400/ws")
        );
        assert_eq!(parse_ready_line("recording to x.mrec"), None);
        assert_eq!(parse_ready_line(READY_LINE_PREFIX), None);
    }

    #[test]
    fn status_reads_what_it_writes() {
        let s = ServerStatus {
            tick: 9,
            players: 2,
            connections: 3,
            start_tick: 4,
            recording: Some("a.mrec".into()),
            resumed_from: None,
        };
        let json = serde_json::to_string(&s).expect("json");
        assert_eq!(serde_json::from_str::<ServerStatus>(&json).expect("back"), s);
    }
}
