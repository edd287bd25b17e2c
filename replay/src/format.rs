//! The `.mrec` recording format: a streaming writer and a validating, seeking reader.
//!
//! A recording is a file header followed by frames. Everything is little-endian and every
//! byte is covered by a checksum, so damage is always detected: a cut-off last frame is
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
//! Frame (32-byte header + payload):
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 1    | kind: 1 block, 2 checkpoint, 3 end                             |
//! | 1      | 3    | zero                                                           |
//! | 4      | 4    | first tick (block: first tick covered; checkpoint: the state's tick; end: final tick) |
//! | 8      | 4    | tick count (block: ticks covered; others: 0)                   |
//! | 12     | 4    | payload length P (at most `FRAME_PAYLOAD_BYTES_MAX`)           |
//! | 16     | 12   | blake3 of the payload, first 12 bytes                          |
//! | 28     | 4    | blake3 of frame bytes 0..28, first 4 bytes                     |
//! | 32     | P    | payload                                                        |
//!
//! Payloads:
//! - block: u32 length C, then C bytes of zstd(rkyv(`Vec<TickInputs>`)), then for each
//!   tick 32 bytes state root and 32 bytes frames root.
//! - checkpoint: zstd of a kernel checkpoint (`migratory_kernel::checkpoint`), which
//!   carries its own version and checksum.
//! - end: u32 ticks recorded, 32 bytes final state root, 32 bytes chain hash, where
//!   `chain_0 = blake3("MGCHAIN" | config hash)` and
//!   `chain_t = blake3(chain_{t-1} | tick u32 | state root | frames root)`.
//!
//! Frames follow the ticks in order: blocks are contiguous from the start tick, a
//! checkpoint of tick T comes right after the block ending at T, and the end frame is last.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use migratory_kernel::{
    restore_checkpoint, save_checkpoint, CheckpointError, TickInputs, TickOutput, World, WorldConfig,
};
use rkyv::rancor;
use thiserror::Error;

/// File magic.
pub const MAGIC: &[u8; 8] = b"MIGRREC\0";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest header body accepted.
pub const HEADER_BODY_BYTES_MAX: u32 = 1 << 20;
/// Largest frame payload accepted (a checkpoint of a million boids fits).
pub const FRAME_PAYLOAD_BYTES_MAX: u32 = 256 << 20;
/// Most ticks one block may cover.
pub const BLOCK_TICKS_MAX: u32 = 1 << 16;
const FILE_HEADER_BYTES: u64 = 56;
const FRAME_HEADER_BYTES: u64 = 32;
const ROOTS_BYTES_PER_TICK: usize = 64;
const ZSTD_LEVEL: i32 = 3;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FrameKind {
    Block = 1,
    Checkpoint = 2,
    End = 3,
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
    /// it; otherwise the first frame is a checkpoint of that tick).
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

/// The first bytes of blake3.
fn check<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    let mut out = [0u8; N];
    out.copy_from_slice(&h.finalize().as_bytes()[..N]);
    out
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

/// How the writer buffers and flushes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Ticks per input block; a block is written as soon as it is complete.
    pub block_ticks: u32,
    /// A checkpoint every this many ticks (0: none).
    pub checkpoint_interval_ticks: u32,
    /// `sync_data` after every this many blocks (0: never; the OS decides).
    pub fsync_every_blocks: u32,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            block_ticks: 60,
            checkpoint_interval_ticks: 600,
            fsync_every_blocks: 0,
        }
    }
}

/// A sink that can be made durable.
pub trait Durable: Write {
    /// Flushes to stable storage.
    fn sync(&mut self) -> io::Result<()>;
}

impl Durable for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

impl Durable for Vec<u8> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Durable for io::BufWriter<File> {
    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.get_ref().sync_data()
    }
}

/// Streams a session into a recording, tick by tick, holding at most one block in memory.
#[derive(Debug)]
pub struct RecordingWriter<W: Durable> {
    out: W,
    options: WriterOptions,
    block_inputs: Vec<TickInputs>,
    block_roots: Vec<u8>,
    block_first_tick: u32,
    next_tick: u32,
    chain: Chain,
    last_root: [u8; 32],
    ticks_recorded: u32,
    blocks_since_sync: u32,
    bytes_written: u64,
}

impl<W: Durable> RecordingWriter<W> {
    /// Writes the header for a recording of `world` from its current tick (with a
    /// checkpoint first when that tick is not 0).
    pub fn new(mut out: W, world: &World, shard_count: u32, options: WriterOptions) -> io::Result<Self> {
        let meta = RecordingMeta::for_world(world);
        let body = rkyv::to_bytes::<rancor::Error>(&meta).map_err(io::Error::other)?;
        let mut head = Vec::with_capacity(FILE_HEADER_BYTES as usize + body.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        head.extend_from_slice(&migratory_kernel::KERNEL_RULES_VERSION.to_le_bytes());
        head.extend_from_slice(&shard_count.to_le_bytes());
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let sum = check::<32>(&[&head[..24], &body]);
        head.extend_from_slice(&sum);
        head.extend_from_slice(&body);
        out.write_all(&head)?;
        let options = WriterOptions {
            block_ticks: options.block_ticks.clamp(1, BLOCK_TICKS_MAX),
            ..options
        };
        let mut w = RecordingWriter {
            out,
            block_inputs: Vec::with_capacity(options.block_ticks as usize),
            block_roots: Vec::with_capacity(options.block_ticks as usize * ROOTS_BYTES_PER_TICK),
            options,
            block_first_tick: world.tick() + 1,
            next_tick: world.tick() + 1,
            chain: Chain::start(&meta.config_hash),
            last_root: world.state_root(),
            ticks_recorded: 0,
            blocks_since_sync: 0,
            bytes_written: head.len() as u64,
        };
        if world.tick() != 0 {
            w.write_checkpoint(world)?;
        }
        w.out.flush()?;
        Ok(w)
    }

    /// Records one tick: the inputs it was stepped with and what it produced. `world` is
    /// the world after the step (used for checkpoints).
    pub fn record(&mut self, inputs: &TickInputs, output: &TickOutput, world: &World) -> io::Result<()> {
        if output.tick != self.next_tick {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "recorded tick {} but tick {} was expected",
                    output.tick, self.next_tick
                ),
            ));
        }
        self.block_inputs.push(inputs.clone());
        self.block_roots.extend_from_slice(&output.state_root);
        self.block_roots.extend_from_slice(&output.snapshots_root);
        self.chain
            .push(output.tick, &output.state_root, &output.snapshots_root);
        self.last_root = output.state_root;
        self.next_tick += 1;
        self.ticks_recorded += 1;
        let k = self.options.checkpoint_interval_ticks;
        let checkpoint_due = k > 0 && output.tick % k == 0;
        if self.block_inputs.len() as u32 >= self.options.block_ticks || checkpoint_due {
            self.flush_block()?;
        }
        if checkpoint_due {
            self.write_checkpoint(world)?;
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    fn frame(
        &mut self,
        kind: FrameKind,
        first_tick: u32,
        tick_count: u32,
        payload: &[&[u8]],
    ) -> io::Result<()> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        let mut head = [0u8; FRAME_HEADER_BYTES as usize];
        head[0] = kind as u8;
        head[4..8].copy_from_slice(&first_tick.to_le_bytes());
        head[8..12].copy_from_slice(&tick_count.to_le_bytes());
        head[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        let sum = check::<12>(payload);
        head[16..28].copy_from_slice(&sum);
        let hsum = check::<4>(&[&head[..28]]);
        head[28..32].copy_from_slice(&hsum);
        self.out.write_all(&head)?;
        for p in payload {
            self.out.write_all(p)?;
        }
        self.bytes_written += FRAME_HEADER_BYTES + len as u64;
        Ok(())
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.block_inputs.is_empty() {
            return Ok(());
        }
        let archived = rkyv::to_bytes::<rancor::Error>(&self.block_inputs).map_err(io::Error::other)?;
        let compressed = zstd::bulk::compress(&archived, ZSTD_LEVEL)?;
        let count = self.block_inputs.len() as u32;
        let first = self.block_first_tick;
        let roots = std::mem::take(&mut self.block_roots);
        self.frame(
            FrameKind::Block,
            first,
            count,
            &[&(compressed.len() as u32).to_le_bytes(), &compressed, &roots],
        )?;
        self.block_roots = roots;
        self.block_roots.clear();
        self.block_inputs.clear();
        self.block_first_tick = self.next_tick;
        self.out.flush()?;
        self.blocks_since_sync += 1;
        if self.options.fsync_every_blocks > 0 && self.blocks_since_sync >= self.options.fsync_every_blocks {
            self.out.sync()?;
            self.blocks_since_sync = 0;
        }
        Ok(())
    }

    fn write_checkpoint(&mut self, world: &World) -> io::Result<()> {
        let bytes = save_checkpoint(world);
        let compressed = zstd::bulk::compress(&bytes, ZSTD_LEVEL)?;
        self.frame(FrameKind::Checkpoint, world.tick(), 0, &[&compressed])?;
        self.out.flush()
    }

    /// Writes the partial block and the end frame, syncs, and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_block()?;
        let final_tick = self.next_tick - 1;
        let (ticks, root, chain) = (self.ticks_recorded, self.last_root, self.chain.0);
        self.frame(
            FrameKind::End,
            final_tick,
            0,
            &[&ticks.to_le_bytes(), &root, &chain],
        )?;
        self.out.flush()?;
        self.out.sync()?;
        Ok(self.out)
    }
}

/// One frame found in a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FrameInfo {
    pub kind: FrameKind,
    /// Byte offset of the frame header.
    pub offset: u64,
    pub first_tick: u32,
    pub tick_count: u32,
    pub payload_bytes: u32,
}

/// The end frame's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndFrame {
    pub final_tick: u32,
    pub ticks_recorded: u32,
    pub final_root: [u8; 32],
    pub chain: [u8; 32],
}

/// Where and why reading stopped early.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TornTail {
    /// Offset of the incomplete frame (or of the end of the file when the end frame is missing).
    pub offset: u64,
    /// Bytes after `offset` that could not be used.
    pub bytes_lost: u64,
}

/// One recorded tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedTick {
    pub tick: u32,
    pub inputs: TickInputs,
    pub state_root: [u8; 32],
    pub snapshots_root: [u8; 32],
}

trait Source: Read + Seek + std::fmt::Debug {}
impl<T: Read + Seek + std::fmt::Debug> Source for T {}

/// An opened, validated recording.
#[derive(Debug)]
pub struct Recording {
    pub meta: RecordingMeta,
    pub format_version: u32,
    pub rules_version: u32,
    pub recorded_shard_count: u32,
    pub frames: Vec<FrameInfo>,
    pub end: Option<EndFrame>,
    /// Set when the file ends early: the writer was killed or the file was cut.
    pub torn_tail: Option<TornTail>,
    /// Total file length.
    pub file_bytes: u64,
    source: std::cell::RefCell<Box<dyn Source>>,
}

fn read_exact_at(src: &mut dyn Source, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    src.seek(SeekFrom::Start(offset))?;
    src.read_exact(buf)
}

impl Recording {
    /// Opens and validates a recording file.
    pub fn open(path: &Path) -> Result<Recording, RecordingError> {
        let file = File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
        Recording::from_source(Box::new(BufReader::new(file)))
    }

    /// Opens a recording held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Recording, RecordingError> {
        Recording::from_source(Box::new(io::Cursor::new(bytes)))
    }

    fn from_source(mut src: Box<dyn Source>) -> Result<Recording, RecordingError> {
        let file_bytes = src
            .seek(SeekFrom::End(0))
            .map_err(io_err("reading the recording"))?;
        let mut head = [0u8; FILE_HEADER_BYTES as usize];
        let have = file_bytes.min(FILE_HEADER_BYTES) as usize;
        read_exact_at(src.as_mut(), 0, &mut head[..have]).map_err(io_err("reading the header"))?;
        let magic_len = have.min(8);
        if head[..magic_len] != MAGIC[..magic_len] || have == 0 {
            return Err(RecordingError::NotARecording {
                found: head[..magic_len].to_vec(),
            });
        }
        if (have as u64) < FILE_HEADER_BYTES {
            return Err(corrupted(
                0,
                None,
                format!("file of {file_bytes} bytes ends inside the 56-byte header"),
            ));
        }
        let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let version = word(8);
        if version < FORMAT_VERSION {
            return Err(RecordingError::UpgradeRequired {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if version > FORMAT_VERSION {
            return Err(RecordingError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let body_len = word(20);
        if body_len > HEADER_BODY_BYTES_MAX || FILE_HEADER_BYTES + body_len as u64 > file_bytes {
            return Err(corrupted(
                20,
                None,
                format!("header body length {body_len} does not fit the file"),
            ));
        }
        let mut body = vec![0u8; body_len as usize];
        read_exact_at(src.as_mut(), FILE_HEADER_BYTES, &mut body).map_err(io_err("reading the header"))?;
        if check::<32>(&[&head[..24], &body]) != head[24..56] {
            return Err(corrupted(0, None, "header checksum mismatch"));
        }
        let meta = rkyv::from_bytes::<RecordingMeta, rancor::Error>(&aligned(&body))
            .map_err(|e| corrupted(FILE_HEADER_BYTES, None, format!("header body invalid: {e}")))?;
        if meta.config.validate().is_err() || meta.config.content_hash() != meta.config_hash {
            return Err(corrupted(
                FILE_HEADER_BYTES,
                None,
                "world config invalid or its hash does not match",
            ));
        }
        // The first replayed tick is `start_tick + 1`: a (forged) start tick of u32::MAX
        // has none and would overflow every tick computation below.
        if meta.start_tick == u32::MAX {
            return Err(corrupted(FILE_HEADER_BYTES, None, "start tick out of range"));
        }
        let mut rec = Recording {
            format_version: version,
            rules_version: word(12),
            recorded_shard_count: word(16),
            frames: Vec::new(),
            end: None,
            torn_tail: None,
            file_bytes,
            source: std::cell::RefCell::new(src),
            meta,
        };
        rec.scan(FILE_HEADER_BYTES + body_len as u64)?;
        Ok(rec)
    }

    /// Walks the frames, checking every checksum and the tick order.
    fn scan(&mut self, mut offset: u64) -> Result<(), RecordingError> {
        let mut next_tick = self.meta.start_tick + 1;
        let mut src = self.source.borrow_mut();
        let mut payload = Vec::new();
        let mut expect_start_checkpoint = self.meta.start_tick != 0;
        loop {
            let remaining = self.file_bytes - offset;
            if remaining == 0 {
                if self.end.is_none() {
                    self.torn_tail = Some(TornTail {
                        offset,
                        bytes_lost: 0,
                    });
                }
                break;
            }
            if self.end.is_some() {
                return Err(corrupted(
                    offset,
                    None,
                    format!("{remaining} bytes after the end frame"),
                ));
            }
            if remaining < FRAME_HEADER_BYTES {
                self.torn_tail = Some(TornTail {
                    offset,
                    bytes_lost: remaining,
                });
                break;
            }
            let mut h = [0u8; FRAME_HEADER_BYTES as usize];
            read_exact_at(src.as_mut(), offset, &mut h).map_err(io_err("reading a frame header"))?;
            let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
            let (first, count, len) = (word(4), word(8), word(12));
            let claimed = Some((first, first.saturating_add(count.saturating_sub(1))));
            if check::<4>(&[&h[..28]]) != h[28..32] {
                return Err(corrupted(
                    offset,
                    Some((next_tick, next_tick)),
                    "frame header checksum mismatch",
                ));
            }
            if len > FRAME_PAYLOAD_BYTES_MAX || h[1..4] != [0, 0, 0] {
                return Err(corrupted(offset, claimed, "frame header fields out of range"));
            }
            if remaining - FRAME_HEADER_BYTES < len as u64 {
                self.torn_tail = Some(TornTail {
                    offset,
                    bytes_lost: remaining,
                });
                break;
            }
            payload.resize(len as usize, 0);
            read_exact_at(src.as_mut(), offset + FRAME_HEADER_BYTES, &mut payload)
                .map_err(io_err("reading a frame"))?;
            if check::<12>(&[&payload]) != h[16..28] {
                return Err(corrupted(offset, claimed, "frame payload checksum mismatch"));
            }
            let kind = match h[0] {
                1 => FrameKind::Block,
                2 => FrameKind::Checkpoint,
                3 => FrameKind::End,
                k => return Err(corrupted(offset, claimed, format!("unknown frame kind {k}"))),
            };
            match kind {
                FrameKind::Block => {
                    let roots = count as usize * ROOTS_BYTES_PER_TICK;
                    let c = payload
                        .get(..4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    let fits = c.is_some_and(|c| 4 + c as usize + roots == payload.len());
                    if expect_start_checkpoint
                        || first != next_tick
                        || count == 0
                        || count > BLOCK_TICKS_MAX
                        || !fits
                        // A (forged) block whose ticks run past u32::MAX is corruption,
                        // not an overflow in `first + count` below.
                        || first.checked_add(count).is_none()
                    {
                        return Err(corrupted(
                            offset,
                            claimed,
                            format!("block out of order or malformed (expected tick {next_tick})"),
                        ));
                    }
                    next_tick = first + count;
                }
                FrameKind::Checkpoint => {
                    if first != next_tick - 1 || count != 0 {
                        return Err(corrupted(
                            offset,
                            claimed,
                            format!("checkpoint of tick {first} after tick {}", next_tick - 1),
                        ));
                    }
                    expect_start_checkpoint = false;
                }
                FrameKind::End => {
                    if payload.len() != 68 || first != next_tick - 1 {
                        return Err(corrupted(offset, claimed, "end frame malformed"));
                    }
                    let mut root = [0u8; 32];
                    let mut chain = [0u8; 32];
                    root.copy_from_slice(&payload[4..36]);
                    chain.copy_from_slice(&payload[36..68]);
                    self.end = Some(EndFrame {
                        final_tick: first,
                        ticks_recorded: u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]),
                        final_root: root,
                        chain,
                    });
                }
            }
            self.frames.push(FrameInfo {
                kind,
                offset,
                first_tick: first,
                tick_count: count,
                payload_bytes: len,
            });
            offset += FRAME_HEADER_BYTES + len as u64;
        }
        Ok(())
    }

    /// The first tick a replay steps (the tick after the start state).
    pub fn first_tick(&self) -> u32 {
        self.meta.start_tick + 1
    }

    /// The last tick whose inputs are readable (the start tick when none are).
    pub fn last_tick(&self) -> u32 {
        self.frames
            .iter()
            .filter(|f| f.kind == FrameKind::Block)
            .map(|f| f.first_tick + f.tick_count - 1)
            .next_back()
            .unwrap_or(self.meta.start_tick)
    }

    /// Ticks whose inputs are readable.
    pub fn ticks_recovered(&self) -> u32 {
        self.last_tick() - self.meta.start_tick
    }

    fn payload(&self, f: &FrameInfo) -> Result<Vec<u8>, RecordingError> {
        let mut buf = vec![0u8; f.payload_bytes as usize];
        read_exact_at(
            self.source.borrow_mut().as_mut(),
            f.offset + FRAME_HEADER_BYTES,
            &mut buf,
        )
        .map_err(io_err("reading a frame"))?;
        Ok(buf)
    }

    /// Decodes one block's ticks.
    pub fn block(&self, f: &FrameInfo) -> Result<Vec<RecordedTick>, RecordingError> {
        let ticks = Some((f.first_tick, f.first_tick + f.tick_count - 1));
        let payload = self.payload(f)?;
        let c = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
        let bad = |reason: String| corrupted(f.offset, ticks, reason);
        // The decompressed size is bounded so a hostile block cannot exhaust memory.
        let limit = (f.tick_count as usize)
            .saturating_mul(1 << 16)
            .min(FRAME_PAYLOAD_BYTES_MAX as usize);
        let archived = zstd::bulk::decompress(&payload[4..4 + c], limit)
            .map_err(|e| bad(format!("inputs do not decompress: {e}")))?;
        let inputs = rkyv::from_bytes::<Vec<TickInputs>, rancor::Error>(&aligned(&archived))
            .map_err(|e| bad(format!("inputs archive invalid: {e}")))?;
        if inputs.len() != f.tick_count as usize {
            return Err(bad(format!(
                "{} ticks of inputs, header says {}",
                inputs.len(),
                f.tick_count
            )));
        }
        let roots = &payload[4 + c..];
        Ok(inputs
            .into_iter()
            .enumerate()
            .map(|(i, inputs)| {
                let r = &roots[i * ROOTS_BYTES_PER_TICK..(i + 1) * ROOTS_BYTES_PER_TICK];
                let mut state_root = [0u8; 32];
                let mut snapshots_root = [0u8; 32];
                state_root.copy_from_slice(&r[..32]);
                snapshots_root.copy_from_slice(&r[32..]);
                RecordedTick {
                    tick: f.first_tick + i as u32,
                    inputs,
                    state_root,
                    snapshots_root,
                }
            })
            .collect())
    }

    /// Streams every recorded tick from `from` on, one block decoded at a time.
    pub fn ticks_from(&self, from: u32) -> impl Iterator<Item = Result<RecordedTick, RecordingError>> + '_ {
        self.frames
            .iter()
            .filter(move |f| f.kind == FrameKind::Block && f.first_tick + f.tick_count > from)
            .flat_map(move |f| match self.block(f) {
                Ok(ticks) => ticks
                    .into_iter()
                    .filter(|t| t.tick >= from)
                    .map(Ok)
                    .collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
    }

    /// Checkpoints in the recording, by tick.
    pub fn checkpoints(&self) -> impl Iterator<Item = &FrameInfo> {
        self.frames.iter().filter(|f| f.kind == FrameKind::Checkpoint)
    }

    /// Restores the checkpoint stored in frame `f`.
    pub fn restore_checkpoint(&self, f: &FrameInfo, shard_count: usize) -> Result<World, RecordingError> {
        let payload = self.payload(f)?;
        let bad = |reason: String| corrupted(f.offset, Some((f.first_tick, f.first_tick)), reason);
        let bytes = zstd::bulk::decompress(&payload, FRAME_PAYLOAD_BYTES_MAX as usize)
            .map_err(|e| bad(format!("checkpoint does not decompress: {e}")))?;
        let world = restore_checkpoint(&bytes, shard_count).map_err(|e| match e {
            // Not damage: the recording predates (or postdates) this build's rules or
            // checkpoint format.
            CheckpointError::RulesMismatch { .. }
            | CheckpointError::UpgradeRequired { .. }
            | CheckpointError::UnsupportedVersion { .. } => RecordingError::CheckpointIncompatible {
                offset: f.offset,
                tick: f.first_tick,
                reason: e.to_string(),
            },
            e => bad(format!("checkpoint invalid: {e}")),
        })?;
        if world.tick() != f.first_tick || world.config() != &self.meta.config {
            return Err(bad("checkpoint tick or config differs from the recording".into()));
        }
        Ok(world)
    }

    /// The world the recording starts from.
    pub fn start_world(&self, shard_count: usize) -> Result<World, RecordingError> {
        if self.meta.start_tick == 0 {
            return World::new(self.meta.config.clone(), shard_count)
                .map_err(|e| corrupted(FILE_HEADER_BYTES, None, format!("world config rejected: {e}")));
        }
        let first = self.checkpoints().next().copied();
        match first {
            Some(f) if f.first_tick == self.meta.start_tick => self.restore_checkpoint(&f, shard_count),
            _ => Err(corrupted(
                FILE_HEADER_BYTES,
                None,
                "the start checkpoint is missing",
            )),
        }
    }

    /// The world at `tick`: restored from the nearest checkpoint at or before it, then
    /// stepped with the recorded inputs.
    pub fn world_at(&self, tick: u32, shard_count: usize) -> Result<World, RecordingError> {
        if tick < self.meta.start_tick || tick > self.last_tick() {
            return Err(corrupted(
                0,
                Some((tick, tick)),
                format!(
                    "tick {tick} is outside the recording ({}..={})",
                    self.meta.start_tick,
                    self.last_tick()
                ),
            ));
        }
        let nearest = self
            .checkpoints()
            .filter(|f| f.first_tick <= tick)
            .last()
            .copied();
        let mut world = match nearest.map(|f| self.restore_checkpoint(&f, shard_count)) {
            Some(Ok(w)) => w,
            // Checkpoints of other kernel rules cannot be restored, but a recording that
            // starts from tick 0 can still be replayed from its start.
            Some(Err(RecordingError::CheckpointIncompatible { .. })) if self.meta.start_tick == 0 => {
                self.start_world(shard_count)?
            }
            Some(Err(e)) => return Err(e),
            None => self.start_world(shard_count)?,
        };
        for t in self.ticks_from(world.tick() + 1) {
            let t = t?;
            if t.tick > tick {
                break;
            }
            world.step(&t.inputs);
        }
        Ok(world)
    }
}

fn aligned(bytes: &[u8]) -> rkyv::util::AlignedVec<16> {
    let mut v = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}
