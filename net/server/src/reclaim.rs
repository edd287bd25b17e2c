//! Reconnect tokens: the table of the tokens this world has issued (only their hashes), and
//! the reclaim file that keeps the table beside the recording, so a world resumed after a
//! crash or moved to another machine lets its players take their avatars back.
//!
//! A token is 128 random bits from the operating system, issued in WELCOME to a client that
//! asked for one. The server keeps `blake3(token)` and forgets the token. A token is used
//! up by the HELLO that presents it (the new WELCOME carries a new one): it dies when the
//! client acknowledges a snapshot on the new connection (proof that it has the new
//! token), or at the next reclaim, so a drop in between does not cost the avatar. Tokens
//! die with their avatar (the Leave after the grace, or a Leave of any kind). Nothing here enters the
//! kernel: the world sees only the Leave, when the grace runs out.
//!
//! # The reclaim file (`<recording>.reclaim`, little-endian)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `MGRC` |
//! | 4 | 4 | `version` (1) |
//! | 8 | 4 | `tick`: the world's tick when the table was written |
//! | 12 | 4 | `count` N |
//! | 16 | 36 N | records: `client` u32, then the 32-byte token hash; a client has one, or two right after a reclaim (its newest token first) |
//! | 16 + 36 N | 32 | blake3 of every byte before it |
//!
//! Written whole to a temporary file and renamed over the old one, at most once a tick and
//! off the tick thread, so a reader sees one table or the next, never a mix. A token issued
//! in the last moments before a crash may not have reached the file: its client is refused
//! (close 4002) and joins again as a new avatar.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use migratory_wire::protocol::{ReconnectToken, RECONNECT_TOKEN_BYTES};
use thiserror::Error;

/// The file's magic bytes.
pub const RECLAIM_MAGIC: [u8; 4] = *b"MGRC";
/// The file layout's version.
pub const RECLAIM_VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;
const RECORD_BYTES: usize = 4 + 32;
const CHECKSUM_BYTES: usize = 32;
const COUNT_OFFSET: usize = 12;
const TICK_OFFSET: usize = 8;
const VERSION_OFFSET: usize = 4;
const _: () = assert!(COUNT_OFFSET + 4 == HEADER_BYTES && TICK_OFFSET + 4 == COUNT_OFFSET);

/// A token's hash: all the server keeps of it.
pub type TokenHash = [u8; 32];

/// Why a reclaim file could not be read.
#[derive(Debug, Error)]
pub enum ReclaimFileError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is a reclaim file of version {found}; this server reads version {RECLAIM_VERSION}")]
    UpgradeRequired { path: PathBuf, found: u32 },
    #[error("{path} is not a valid reclaim file: {reason}")]
    Corrupted { path: PathBuf, reason: String },
}

pub use migratory_wire::fleet::reclaim_path;

/// The hash the server keeps of `token`.
pub fn token_hash(token: &ReconnectToken) -> TokenHash {
    *blake3::hash(token).as_bytes()
}

/// A client's token hashes: its newest token's, and after a reclaim, until the client
/// shows it received the WELCOME with that newest token (its first ACK), the one the
/// reclaim presented: a connection that drops between the reclaim and that WELCOME must
/// not cost the avatar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    current: TokenHash,
    previous: Option<TokenHash>,
}

/// The issued tokens' hashes, by client and by hash.
#[derive(Debug, Default)]
pub struct Tokens {
    by_client: BTreeMap<u32, Held>,
    by_hash: HashMap<TokenHash, u32>,
    /// Changed since the last `take_changed`.
    changed: bool,
}

impl Tokens {
    /// A new token for `client`. `used`: the hash its reclaim presented, which stays valid
    /// until `confirm`; every other hash the client held dies.
    pub fn issue(&mut self, client: u32, used: Option<TokenHash>) -> std::io::Result<ReconnectToken> {
        let mut token = [0u8; RECONNECT_TOKEN_BYTES];
        getrandom::fill(&mut token).map_err(|e| std::io::Error::other(e.to_string()))?;
        let kept = used.filter(|h| self.by_hash.get(h) == Some(&client));
        self.remove(client);
        let held = Held {
            current: token_hash(&token),
            previous: kept,
        };
        self.insert(client, held);
        Ok(token)
    }

    fn insert(&mut self, client: u32, held: Held) {
        self.by_hash.insert(held.current, client);
        if let Some(p) = held.previous {
            self.by_hash.insert(p, client);
        }
        self.by_client.insert(client, held);
        self.changed = true;
    }

    /// The client `token` was issued to, while it is valid.
    pub fn holder(&self, token: &ReconnectToken) -> Option<(u32, TokenHash)> {
        let hash = token_hash(token);
        self.by_hash.get(&hash).map(|&c| (c, hash))
    }

    /// The client got the WELCOME with its newest token: the one its reclaim used dies.
    pub fn confirm(&mut self, client: u32) {
        if let Some(held) = self.by_client.get_mut(&client) {
            if let Some(p) = held.previous.take() {
                self.by_hash.remove(&p);
                self.changed = true;
            }
        }
    }

    /// Forgets `client`'s tokens (its avatar left).
    pub fn remove(&mut self, client: u32) {
        if let Some(held) = self.by_client.remove(&client) {
            self.by_hash.remove(&held.current);
            if let Some(p) = held.previous {
                self.by_hash.remove(&p);
            }
            self.changed = true;
        }
    }

    pub fn has(&self, client: u32) -> bool {
        self.by_client.contains_key(&client)
    }

    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// Keeps only the clients `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let gone: Vec<u32> = self.by_client.keys().copied().filter(|&c| !keep(c)).collect();
        for c in gone {
            self.remove(c);
        }
    }

    /// The clients holding a token, in order.
    pub fn clients(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_client.keys().copied()
    }

    /// Whether the table changed since the last call (and resets it).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The reclaim file's bytes for this table at `tick` (layout in the module doc).
    pub fn encode(&self, tick: u32) -> Vec<u8> {
        let records = self.by_hash.len();
        let mut b = Vec::with_capacity(HEADER_BYTES + RECORD_BYTES * records + CHECKSUM_BYTES);
        b.extend_from_slice(&RECLAIM_MAGIC);
        b.extend_from_slice(&RECLAIM_VERSION.to_le_bytes());
        b.extend_from_slice(&tick.to_le_bytes());
        b.extend_from_slice(&(records as u32).to_le_bytes());
        for (client, held) in &self.by_client {
            for hash in std::iter::once(&held.current).chain(held.previous.as_ref()) {
                b.extend_from_slice(&client.to_le_bytes());
                b.extend_from_slice(hash);
            }
        }
        let sum = blake3::hash(&b);
        b.extend_from_slice(sum.as_bytes());
        b
    }

    /// A table from a reclaim file's bytes; `path` names it in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Tokens, ReclaimFileError> {
        let corrupted = |reason: String| ReclaimFileError::Corrupted {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES || bytes[..4] != RECLAIM_MAGIC {
            return Err(corrupted(format!(
                "{} bytes without the MGRC header and checksum",
                bytes.len()
            )));
        }
        let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let version = u32_at(VERSION_OFFSET);
        if version != RECLAIM_VERSION {
            return Err(ReclaimFileError::UpgradeRequired {
                path: path.to_path_buf(),
                found: version,
            });
        }
        let count = u32_at(COUNT_OFFSET) as usize;
        let expected = count
            .checked_mul(RECORD_BYTES)
            .and_then(|n| n.checked_add(HEADER_BYTES + CHECKSUM_BYTES));
        if expected != Some(bytes.len()) {
            return Err(corrupted(format!(
                "{count} records do not fit {} bytes",
                bytes.len()
            )));
        }
        let body = bytes.len() - CHECKSUM_BYTES;
        if blake3::hash(&bytes[..body]).as_bytes() != &bytes[body..] {
            return Err(corrupted("checksum mismatch".into()));
        }
        let mut t = Tokens::default();
        for r in bytes[HEADER_BYTES..body].chunks_exact(RECORD_BYTES) {
            let client = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            let mut hash = [0u8; 32];
            hash.copy_from_slice(&r[4..]);
            if t.by_hash.contains_key(&hash) {
                return Err(corrupted(format!("a hash of client {client} appears twice")));
            }
            let held = match t.by_client.get(&client) {
                None => Held {
                    current: hash,
                    previous: None,
                },
                Some(h) if h.previous.is_none() => Held {
                    previous: Some(hash),
                    ..*h
                },
                Some(_) => return Err(corrupted(format!("client {client} has more than two records"))),
            };
            t.insert(client, held);
        }
        t.changed = false;
        Ok(t)
    }

    /// The table in the reclaim file beside `recording`; an empty one when there is none.
    pub fn load_beside(recording: &Path) -> Result<Tokens, ReclaimFileError> {
        let path = reclaim_path(recording);
        match std::fs::read(&path) {
            Ok(bytes) => Tokens::decode(&bytes, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Tokens::default()),
            Err(source) => Err(ReclaimFileError::Io { path, source }),
        }
    }
}

/// Writes the newest table to the reclaim file on a thread of its own: the tick thread
/// hands over bytes and goes on; a table handed over before the previous one was written
/// replaces it.
#[derive(Debug)]
pub struct ReclaimWriter {
    path: PathBuf,
    pending: Arc<(Mutex<Pending>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Pending {
    bytes: Option<Vec<u8>>,
    stop: bool,
}

impl ReclaimWriter {
    /// Starts the writer for the reclaim file beside `recording`.
    pub fn start(recording: &Path) -> std::io::Result<ReclaimWriter> {
        let path = reclaim_path(recording);
        let pending = Arc::new((Mutex::new(Pending::default()), Condvar::new()));
        let thread = std::thread::Builder::new()
            .name("migratory-reclaim".into())
            .spawn({
                let (path, pending) = (path.clone(), pending.clone());
                move || loop {
                    let bytes = {
                        let (lock, ready) = &*pending;
                        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
                        while p.bytes.is_none() && !p.stop {
                            p = ready.wait(p).unwrap_or_else(|e| e.into_inner());
                        }
                        match p.bytes.take() {
                            Some(b) => b,
                            None => return,
                        }
                    };
                    if let Err(e) = write_atomically(&path, &bytes) {
                        tracing::warn!(path = %path.display(), error = %e, "writing the reclaim file failed");
                    }
                }
            })?;
        Ok(ReclaimWriter {
            path,
            pending,
            thread: Some(thread),
        })
    }

    /// Hands over the newest table's bytes.
    pub fn publish(&self, bytes: Vec<u8>) {
        let (lock, ready) = &*self.pending;
        lock.lock().unwrap_or_else(|e| e.into_inner()).bytes = Some(bytes);
        ready.notify_one();
    }

    /// Writes what is pending and stops the thread.
    pub fn finish(mut self) {
        {
            let (lock, ready) = &*self.pending;
            lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            ready.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        tracing::debug!(path = %self.path.display(), "reclaim file written");
    }
}

/// `bytes` into `path` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_used_up_and_die_with_their_client() {
        let mut t = Tokens::default();
        let a = t.issue(1, None).unwrap();
        let b = t.issue(2, None).unwrap();
        assert_ne!(a, b);
        assert!(t.take_changed());
        // A reclaim with `a`: a new token; `a` stays valid until the client confirms.
        let (client, used) = t.holder(&a).unwrap();
        assert_eq!(client, 1);
        let a2 = t.issue(1, Some(used)).unwrap();
        assert_eq!(t.holder(&a).map(|h| h.0), Some(1), "valid until confirmed");
        assert_eq!(t.holder(&a2).map(|h| h.0), Some(1));
        t.confirm(1);
        assert_eq!(t.holder(&a), None, "a token works once");
        // A reclaim with the previous token after a lost WELCOME: the unconfirmed newer one
        // dies, the presented one stays until confirmed.
        let (_, used) = t.holder(&a2).unwrap();
        let a3 = t.issue(1, Some(used)).unwrap();
        let (_, used) = t.holder(&a2).unwrap();
        let a4 = t.issue(1, Some(used)).unwrap();
        assert_eq!(t.holder(&a3), None);
        assert!(t.holder(&a2).is_some() && t.holder(&a4).is_some());
        // A token of another client is not kept as anyone's previous.
        let (_, bh) = t.holder(&b).unwrap();
        let a5 = t.issue(1, Some(bh)).unwrap();
        assert_eq!(t.holder(&b).map(|h| h.0), Some(2));
        assert_eq!(t.holder(&a2), None);
        t.remove(1);
        assert_eq!(t.holder(&a5), None, "tokens die with their avatar");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let mut t = Tokens::default();
        let tokens: Vec<_> = (1..=5).map(|c| t.issue(c * 10, None).unwrap()).collect();
        // Client 30 reclaimed and has not confirmed: two records.
        let (_, used) = t.holder(&tokens[2]).unwrap();
        let newer = t.issue(30, Some(used)).unwrap();
        let bytes = t.encode(777);
        assert_eq!(bytes.len(), HEADER_BYTES + 6 * RECORD_BYTES + CHECKSUM_BYTES);
        let path = Path::new("x.reclaim");
        let back = Tokens::decode(&bytes, path).unwrap();
        assert_eq!(back.clients().collect::<Vec<_>>(), vec![10, 20, 30, 40, 50]);
        assert_eq!(back.holder(&tokens[2]).map(|h| h.0), Some(30));
        assert_eq!(back.holder(&newer).map(|h| h.0), Some(30));
        assert_eq!(back.by_client[&30].current, token_hash(&newer));
        // Any flipped byte is caught; a truncated file is caught; a new version is not
        // called corrupted.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let e = Tokens::decode(&bad, path).unwrap_err();
            if (VERSION_OFFSET..VERSION_OFFSET + 4).contains(&i) {
                assert!(
                    matches!(e, ReclaimFileError::UpgradeRequired { .. }),
                    "byte {i}: {e}"
                );
            } else {
                assert!(matches!(e, ReclaimFileError::Corrupted { .. }), "byte {i}: {e}");
            }
        }
        for n in 0..bytes.len() {
            assert!(Tokens::decode(&bytes[..n], path).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn the_writer_leaves_the_newest_table() {
        let dir = std::env::temp_dir().join(format!("migratory-reclaim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rec = dir.join("s.mrec");
        let w = ReclaimWriter::start(&rec).unwrap();
        let mut t = Tokens::default();
        for c in 1..=50 {
            t.issue(c, None).unwrap();
            w.publish(t.encode(c));
        }
        w.finish();
        let back = Tokens::load_beside(&rec).unwrap();
        assert_eq!(back.len(), 50);
        assert!(Tokens::load_beside(&dir.join("none.mrec")).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
