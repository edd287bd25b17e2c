//! `migratory-record`: the `.mrec` recording format: a streaming writer (`writer`) and a validating, seeking
//! reader (`reader`); every byte layout below is encoded and decoded in `layout` alone.
//! (`trace` is the `.mtrc` behaviour trace, a file of its own, specified there.)
//!
//! A recording is a file header followed by records. Everything is little-endian and every
//! byte is covered by a checksum, so damage is always detected: a cut-off last record is
//! a *torn tail* (the writer was killed; everything before it is readable), any other bad
//! byte is `Corrupted` with its offset and the ticks it affects.
//!
//! File header (56 bytes + body):
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 8    | magic `MIGRREC\0`                                              |
//! | 8      | 4    | format version (`FORMAT_VERSION`)                              |
//! | 12     | 4    | kernel rules version the recording was made with               |
//! | 16     | 4    | shard count used when recording (informational only)           |
//! | 20     | 4    | body length B (at most `HEADER_BODY_BYTES_MAX`)                |
//! | 24     | 32   | blake3 of bytes 0..24 followed by the body                     |
//! | 56     | B    | body: rkyv archive of `RecordingMeta` (build identity, world config, its hash, start tick) |
//!
//! Record (32-byte header + payload):
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 1    | kind: 1 block, 2 checkpoint, 3 end, 4 bookmark (format 2 on)   |
//! | 1      | 3    | zero                                                           |
//! | 4      | 4    | first tick (block: first tick covered; checkpoint: the state's tick; end: final tick; bookmark: the tick marked) |
//! | 8      | 4    | tick count (block: ticks covered; others: 0)                   |
//! | 12     | 4    | payload length P (at most `RECORD_PAYLOAD_BYTES_MAX`)           |
//! | 16     | 12   | blake3 of the payload, first 12 bytes                          |
//! | 28     | 4    | blake3 of record bytes 0..28, first 4 bytes                     |
//! | 32     | P    | payload                                                        |
//!
//! Payloads:
//! - block: u32 length C, then C bytes of zstd of the block's inputs, then for each tick
//!   32 bytes state root and 32 bytes snapshots root. The inputs are packed against what
//!   each client sent before in the block from format 3 on (specified in `packed`), an
//!   rkyv archive of `Vec<TickInputs>` before.
//! - checkpoint: zstd of a kernel checkpoint (`migratory_kernel::checkpoint`), which
//!   carries its own version and checksum: compact (kernel checkpoint format 3) from
//!   format 4 on, raw (format 2) before.
//! - end: u32 ticks recorded, 32 bytes final state root, 32 bytes chain hash, where
//!   `chain_0 = blake3("MGCHAIN" | config hash)` and
//!   `chain_t = blake3(chain_{t-1} | tick u32 | state root | snapshots root)`.
//!
//! - bookmark (a person's "something is wrong here", made in the live viewer; the kernel
//!   never sees it, and replays are the same with or without it):
//!
//!   | offset | size | field                                                      |
//!   |--------|------|------------------------------------------------------------|
//!   | 0      | 4    | bookmark payload version (`BOOKMARK_VERSION`, 1)           |
//!   | 4      | 4    | client id of who made it                                   |
//!   | 8      | 4    | note length N (at most `BOOKMARK_NOTE_BYTES_MAX`)          |
//!   | 12     | N    | note, UTF-8                                                |
//!
//! Records follow the ticks in order: blocks are contiguous from the start tick, a
//! checkpoint of tick T comes right after the block ending at T, a bookmark of tick T
//! comes after the block holding T, and the end record is last.
//!
//! Format versions: 1 has no bookmarks; 2 adds them; 3 packs the inputs (37% of the
//! block bytes of 1,000 scripted clients); 4 stores checkpoints compact (an eighth of the
//! checkpoint bytes of 1,000 scripted clients). This build writes 4 and reads all four.

mod layout;
mod packed;
mod reader;
pub mod trace;
mod writer;

use std::io;

use migratory_kernel::{World, WorldConfig};
use thiserror::Error;

use layout::check;
pub use reader::{EndRecord, RecordInfo, RecordedTick, Recording, SharedTerrain, TornTail};
pub use writer::{Durable, RecordingWriter, TickRoots, WriterOptions};

/// File magic.
pub const MAGIC: &[u8; 8] = b"MIGRREC\0";
/// The format version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u32 = 4;
/// The first format version whose blocks pack their inputs (`packed`) instead of
/// archiving them with rkyv.
pub const FORMAT_VERSION_PACKED_INPUTS: u32 = 3;
/// The oldest format version this build reads (1: the same records, no bookmarks).
pub const FORMAT_VERSION_READ_MIN: u32 = 1;
/// Version of the bookmark record's payload.
pub const BOOKMARK_VERSION: u32 = 1;
/// Longest bookmark note, in bytes of UTF-8.
pub const BOOKMARK_NOTE_BYTES_MAX: usize = 280;
/// Largest header body accepted.
pub const HEADER_BODY_BYTES_MAX: u32 = 1 << 20;
/// Largest record payload accepted (a checkpoint of a million boids fits).
pub const RECORD_PAYLOAD_BYTES_MAX: u32 = 256 << 20;
/// Most ticks one block may cover.
pub const BLOCK_TICKS_MAX: u32 = 1 << 16;
/// Bytes of roots a block stores per tick: the state root, then the snapshots root.
const ROOTS_BYTES_PER_TICK: usize = 64;
/// Blocks and checkpoints alike. A higher level for checkpoints was measured and left: a
/// 1,000-client checkpoint (6.9 MB) is 1.12 MB at level 3 in 41 ms and 0.66 MB at 7 in
/// 99 ms (zstd's own CLI on the raw checkpoint), but the live recorder's thread shares two
/// cores with the shards, and a 1,000-bot hold recorded at level 7 had more slow seconds
/// (44 over 12 ms of 121, against 29) on a machine too noisy to pin it on the level.
/// Raising it waits for the recorder thread's priority to be settled by measurement.
const ZSTD_LEVEL: i32 = 3;

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RecordKind {
    Block = 1,
    Checkpoint = 2,
    End = 3,
    Bookmark = 4,
}

/// A bookmark in a recording: tick T, who made it, their note.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Bookmark {
    pub tick: u32,
    pub client: u32,
    pub note: String,
}

/// Who made a recording, and of what world.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct RecordingMeta {
    /// `CARGO_PKG_VERSION` of the writing crate.
    pub crate_version: String,
    /// The git commit of the writing build, when known.
    pub git_commit: Option<String>,
    pub config: WorldConfig,
    pub config_hash: [u8; 32],
    /// The tick of the state the recording starts from (0: the world as `World::new` builds
    /// it; otherwise the first record is a checkpoint of that tick).
    pub start_tick: u32,
}

impl RecordingMeta {
    /// Meta for a recording of `world` starting now, made by this build.
    pub fn for_world(world: &World) -> RecordingMeta {
        RecordingMeta {
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: option_env!("MIGRATORY_GIT_COMMIT").map(str::to_string),
            config: world.config().clone(),
            config_hash: world.config().content_hash(),
            start_tick: world.tick(),
        }
    }
}

/// Why a recording cannot be read.
#[derive(Debug, Error)]
pub enum RecordingError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("not a recording (magic {found:02x?}, expected \"MIGRREC\\0\")")]
    NotARecording { found: Vec<u8> },
    #[error(
        "recording format version {found} is older than this build reads ({supported}): upgrade required"
    )]
    UpgradeRequired { found: u32, supported: u32 },
    #[error("recording format version {found} is newer than this build supports ({supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error(
        "the checkpoint at byte offset {offset} (tick {tick}) cannot be restored by this build \
         ({reason}): replay from the start, or bless the recording"
    )]
    CheckpointIncompatible { offset: u64, tick: u32, reason: String },
    #[error("recording corrupted at byte offset {offset}{}: {reason}", ticks_text(*.ticks))]
    Corrupted {
        offset: u64,
        ticks: Option<(u32, u32)>,
        reason: String,
    },
}

fn ticks_text(ticks: Option<(u32, u32)>) -> String {
    match ticks {
        Some((a, b)) if a == b => format!(" (tick {a})"),
        Some((a, b)) => format!(" (ticks {a}..={b})"),
        None => String::new(),
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> RecordingError {
    let context = context.into();
    move |source| RecordingError::Io { context, source }
}

fn corrupted(offset: u64, ticks: Option<(u32, u32)>, reason: impl Into<String>) -> RecordingError {
    RecordingError::Corrupted {
        offset,
        ticks,
        reason: reason.into(),
    }
}

/// The running chain over every tick's roots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain(pub [u8; 32]);

impl Chain {
    pub fn start(config_hash: &[u8; 32]) -> Chain {
        Chain(check::<32>(&[b"MGCHAIN", config_hash]))
    }

    pub fn push(&mut self, tick: u32, state_root: &[u8; 32], snapshots_root: &[u8; 32]) {
        self.0 = check::<32>(&[&self.0, &tick.to_le_bytes(), state_root, snapshots_root]);
    }
}
