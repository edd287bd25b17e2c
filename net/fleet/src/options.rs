//! How the fleet runs, and what goes wrong: `FleetOptions`, `FleetError` (which decides
//! each HTTP answer's status by variant), and the world id rule.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::store::StoreError;

/// How the fleet runs.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub listen: SocketAddr,
    /// Worlds' recordings, logs and (by default) the SQLite store live here.
    pub data_dir: PathBuf,
    /// `postgres://...` (or `sqlite://...`); None: SQLite in `data_dir`.
    pub database_url: Option<String>,
    /// The `migratory-server` binary to run for each world.
    pub server_bin: PathBuf,
    /// Shards each world server steps on.
    pub shards: u32,
    /// A world with no players for this long is stopped.
    pub idle_timeout: Duration,
    /// A world server that has not reported ready within this time is killed.
    pub ready_timeout: Duration,
    /// A world server that has not exited this long after SIGTERM is killed.
    pub stop_timeout: Duration,
    /// How often player counts are read from the world servers.
    pub poll_interval: Duration,
    /// What one fleet accepts to run.
    pub limits: WorldLimits,
    /// The admin token's file (None: `DATA_DIR/admin-token`, made when missing).
    pub admin_token_file: Option<PathBuf>,
    /// A world server whose `/status` goes unanswered this many polls in a row is killed.
    pub health_failed_polls_max: u32,
}

/// Caps on what a world may ask for and on how many run at once: without them one PUT of
/// an 8,192-cell terrain took 15 s to start and 1.35 GB, and a million boids ran 83 ms
/// ticks against a 16.7 ms budget. The defaults are four times the default world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorldLimits {
    /// Most `terrain_grid_cells` a world may have (the grid is that squared).
    pub terrain_grid_cells_max: u32,
    /// Most `boid_count` a world may have.
    pub boid_count_max: u32,
    /// Most world servers running at once; a join that would start one more is a 503.
    pub worlds_running_max: u32,
}

impl Default for WorldLimits {
    fn default() -> Self {
        WorldLimits {
            terrain_grid_cells_max: 2048,
            boid_count_max: 20_000,
            worlds_running_max: 64,
        }
    }
}

impl FleetOptions {
    /// Defaults for `data_dir`, with the server binary next to the running one.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> FleetOptions {
        let server_bin = std::env::current_exe()
            .map(|p| p.with_file_name("migratory-server"))
            .unwrap_or_else(|_| PathBuf::from("migratory-server"));
        FleetOptions {
            listen,
            data_dir,
            database_url: None,
            server_bin,
            shards: 1,
            idle_timeout: Duration::from_secs(300),
            ready_timeout: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            limits: WorldLimits::default(),
            admin_token_file: None,
            health_failed_polls_max: 5,
        }
    }
}

/// A world id: 1 to 64 of `a-z`, `0-9`, `-` and `_` (it names a folder).
pub const WORLD_ID_BYTES_MAX: usize = 64;

/// What went wrong, by the HTTP status it is answered with.
#[derive(Debug, Error)]
pub enum FleetError {
    #[error("no world `{world}`")]
    NotFound { world: String },
    #[error("world `{world}`: {reason}")]
    Conflict { world: String, reason: String },
    #[error("{reason}")]
    Invalid { reason: String },
    #[error("world `{world}` is unavailable: {reason}")]
    Unavailable {
        world: String,
        reason: String,
        log_tail: Vec<String>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> FleetError {
    let context = context.into();
    move |source| FleetError::Io { context, source }
}

/// Checks a world id.
pub fn validate_world_id(id: &str) -> Result<(), FleetError> {
    let ok = !id.is_empty()
        && id.len() <= WORLD_ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(FleetError::Invalid {
            reason: format!(
                "world id `{}` must be 1 to {WORLD_ID_BYTES_MAX} of a-z, 0-9, '-' and '_'",
                id.escape_debug()
            ),
        })
    }
}
