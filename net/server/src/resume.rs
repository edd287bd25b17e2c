//! Resuming a world from an earlier session's recording: the state at its last durable
//! tick, checked against the root that session recorded for that tick.
//!
//! A session that stopped cleanly ends with a checkpoint of its last tick, so resuming it
//! steps nothing. A session that was killed leaves a torn tail: everything up to the last
//! complete block is readable, and the world is rebuilt from the newest checkpoint before
//! it plus the recorded inputs after that checkpoint. Either way the resumed state's root
//! must equal the recorded one, or the server refuses to start.
//!
//! The players of the old session are gone with their connections. Those whose reconnect
//! token is in the reclaim file beside the recording (`reclaim.rs`) wait out the reconnect
//! grace for a HELLO with that token; the resumed session removes the others with a
//! `Leave` each in its first tick, in client order, which its own recording holds, so the
//! new recording replays on its own.

use std::path::{Path, PathBuf};

use migratory_kernel::{hex, World, WorldConfig};
use migratory_record::{Recording, RecordingError};
use thiserror::Error;

use crate::reclaim::Tokens;

/// Why a world could not be resumed from a recording.
#[derive(Debug, Error)]
pub enum ResumeError {
    #[error("reading {path}: {source}")]
    Recording {
        path: PathBuf,
        #[source]
        source: RecordingError,
    },
    #[error("{path} is a recording of another world config (hash {recorded}, this world's {expected})")]
    ConfigDiffers {
        path: PathBuf,
        recorded: String,
        expected: String,
    },
    #[error(
        "resuming {path} at tick {tick}: the rebuilt state's root {actual} differs from the recorded {expected}"
    )]
    Diverged {
        path: PathBuf,
        tick: u32,
        expected: String,
        actual: String,
    },
}

/// A world brought back from a recording.
#[derive(Debug)]
pub struct Resumed {
    pub world: World,
    /// The recording it came from.
    pub from: PathBuf,
    /// The last durable tick of that recording: the resumed world's tick.
    pub tick: u32,
    /// Whether that recording ended cleanly (an end record) or was cut off.
    pub ended_cleanly: bool,
    /// Clients still in the world, in order.
    pub clients: Vec<u32>,
    /// The reconnect tokens of the reclaim file beside the recording (empty when there is
    /// none, or when it cannot be read: then every old client leaves in the first tick).
    pub tokens: Tokens,
}

/// The world at `path`'s last durable tick, verified against its recorded root. `config`
/// is the config the world must have (the recording's own is compared to it).
pub fn resume(path: &Path, config: &WorldConfig, shard_count: usize) -> Result<Resumed, ResumeError> {
    let err = |source| ResumeError::Recording {
        path: path.to_path_buf(),
        source,
    };
    // A killed server may have left garbage, not only a cut, at the end of its file.
    let rec = Recording::open_after_crash(path).map_err(err)?;
    if rec.meta.config != *config {
        return Err(ResumeError::ConfigDiffers {
            path: path.to_path_buf(),
            recorded: hex(&rec.meta.config_hash),
            expected: hex(&config.content_hash()),
        });
    }
    let tick = rec.last_tick();
    let world = rec.world_at(tick, shard_count).map_err(err)?;
    let expected = rec.last_recorded_root().map_err(err)?;
    if expected != world.state_root() {
        return Err(ResumeError::Diverged {
            path: path.to_path_buf(),
            tick,
            expected: hex(&expected),
            actual: hex(&world.state_root()),
        });
    }
    let mut clients: Vec<u32> = world
        .players()
        .iter()
        .filter(|p| p.active)
        .map(|p| p.client)
        .collect();
    clients.sort_unstable();
    let tokens = Tokens::load_beside(path).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the reclaim file is unusable: the old players cannot reclaim their avatars");
        Tokens::default()
    });
    Ok(Resumed {
        world,
        from: path.to_path_buf(),
        tick,
        ended_cleanly: rec.end.is_some(),
        clients,
        tokens,
    })
}
