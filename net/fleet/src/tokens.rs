//! The live tokens of this node's world servers: one per server process, made when it is
//! launched, kept only as a hash with what it grants, and forgotten when the process has
//! exited, so a token is valid exactly while its process lives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use migratory_wire::fleet::WorldContent;

use crate::error::{new_token, FleetError};
use crate::store::Holder;

/// What a world server's token lets it do: read its content, and append to its segment
/// under its epoch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Grant {
    pub(crate) content: WorldContent,
    pub(crate) holder: Holder,
    pub(crate) segment_seq: i64,
}

/// What a token presented to the internal API may do.
#[derive(Debug, PartialEq)]
pub(crate) enum TokenCheck {
    Granted(Box<Grant>),
    /// A live token of another world.
    Forbidden,
    /// No live token.
    Unauthorized,
}

/// A live token: its hash, its world and what it may read and write.
#[derive(Debug)]
struct TokenEntry {
    generation: u64,
    hash: blake3::Hash,
    grant: Grant,
}

/// A token just issued: the secret (given to its server once, never kept) and the
/// generation that names it until it is forgotten.
#[derive(Debug)]
pub(crate) struct Issued {
    pub(crate) secret: String,
    pub(crate) generation: u64,
}

/// The table of live tokens.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    entries: Mutex<Vec<TokenEntry>>,
    generation: AtomicU64,
}

impl Tokens {
    /// A new token granting `grant`, live until `forget` of its generation.
    pub(crate) fn issue(&self, grant: Grant) -> Result<Issued, FleetError> {
        let secret = new_token()?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(TokenEntry {
                generation,
                hash: blake3::hash(secret.as_bytes()),
                grant,
            });
        Ok(Issued { secret, generation })
    }

    pub(crate) fn forget(&self, generation: u64) {
        let mut t = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|e| e.generation != generation);
    }

    /// The grant of a world server's token, for a call about `world_id`.
    pub(crate) fn grant_for(&self, world_id: &str, presented: &str) -> Result<Grant, TokenCheck> {
        let t = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match check_token(&t, world_id, presented) {
            TokenCheck::Granted(g) => Ok(*g),
            other => Err(other),
        }
    }
}

/// Every live token is compared (`blake3::Hash` equality is constant-time), so neither
/// the answer's timing nor its content tells how close a guess came.
fn check_token(entries: &[TokenEntry], world_id: &str, presented: &str) -> TokenCheck {
    let hash = blake3::hash(presented.as_bytes());
    let mut found = None;
    for e in entries {
        if e.hash == hash {
            found = Some(e);
        }
    }
    match found {
        Some(e) if e.grant.content.world_id == world_id => TokenCheck::Granted(Box::new(e.grant.clone())),
        Some(_) => TokenCheck::Forbidden,
        None => TokenCheck::Unauthorized,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn entry(generation: u64, world: &str, token: &str) -> TokenEntry {
        TokenEntry {
            generation,
            hash: blake3::hash(token.as_bytes()),
            grant: Grant {
                content: WorldContent {
                    world_id: world.into(),
                    config: serde_json::json!({}),
                    record_dir: PathBuf::from("/x"),
                    resume_from: None,
                    ship_interval_ms: None,
                    ship_deadline_ms: None,
                    record_block_ticks: None,
                    epoch: 1,
                },
                holder: Holder {
                    node: "n".into(),
                    epoch: 1,
                    created_unix_ms: 1,
                },
                segment_seq: 1,
            },
        }
    }

    #[test]
    fn a_token_reads_its_own_world_only() {
        let entries = [entry(1, "a", "t-a"), entry(2, "b", "t-b")];
        assert!(
            matches!(check_token(&entries, "a", "t-a"), TokenCheck::Granted(c) if c.content.world_id == "a")
        );
        assert_eq!(check_token(&entries, "b", "t-a"), TokenCheck::Forbidden);
        assert_eq!(check_token(&entries, "a", "t-c"), TokenCheck::Unauthorized);
        assert_eq!(check_token(&entries, "a", ""), TokenCheck::Unauthorized);
        assert_eq!(check_token(&[], "a", "t-a"), TokenCheck::Unauthorized);
    }

    #[test]
    fn a_forgotten_token_grants_nothing() {
        let tokens = Tokens::default();
        let grant = entry(0, "a", "").grant;
        let issued = tokens.issue(grant).expect("issue");
        assert!(tokens.grant_for("a", &issued.secret).is_ok());
        tokens.forget(issued.generation);
        assert_eq!(
            tokens.grant_for("a", &issued.secret),
            Err(TokenCheck::Unauthorized)
        );
    }
}
