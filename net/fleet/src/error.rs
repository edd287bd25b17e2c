//! What goes wrong in the fleet, and the small rules everything else leans on: `FleetError`
//! (which decides each HTTP answer's status by variant), the world id rule, and random
//! tokens. A leaf: it uses nothing of the fleet but the store's error.

use migratory_kernel::hex;
use thiserror::Error;

use crate::store::StoreError;

/// A random token: 256 bits, as hex.
pub(crate) fn new_token() -> Result<String, FleetError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| FleetError::Io {
        context: "making a token".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(hex(&bytes))
}

/// A world id: 1 to 64 of `a-z`, `0-9`, `-` and `_` (it names a folder).
pub use migratory_wire::fleet::WORLD_ID_BYTES_MAX;

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
    #[error(
        "node id `{node}` is held by another running fleet node (its lease has {lease_left_ms} ms \
         left): give this node another --node-id, or stop that one"
    )]
    NodeInUse { node: String, lease_left_ms: i64 },
    #[error("this is node `{here}`: ask node `{asked}` itself")]
    OtherNode { here: String, asked: String },
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
    let ok = migratory_wire::fleet::world_id_is_valid(id);
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

/// A blocking or spawned task of an operation that did not come back (it panicked).
pub(crate) fn task_failed(e: tokio::task::JoinError) -> FleetError {
    FleetError::Io {
        context: "the operation's task".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::validate_world_id;

    #[test]
    fn world_ids_name_folders_safely() {
        for ok in ["a", "world-1", "z_9", &"x".repeat(64)] {
            assert!(validate_world_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "../x", "a/b", "a b", "é", &"x".repeat(65), "."] {
            assert!(validate_world_id(bad).is_err(), "{bad}");
        }
    }
}
