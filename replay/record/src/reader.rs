//! `Recording`: opens a recording, validates every checksum and the tick order up front,
//! reports a torn tail, and reads ticks and checkpoints on demand.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use std::sync::Arc;

use migratory_kernel::{restore_checkpoint_with_terrain, CheckpointError, Terrain, TickInputs, World};
use rkyv::rancor;

use super::layout::{
    decode_bookmark, le_u32, FileHeader, RecordHeader, END_CHAIN_OFFSET, END_PAYLOAD_BYTES, END_ROOT_OFFSET,
    END_TICKS_OFFSET, FILE_HEADER_BYTES, RECORD_HEADER_BYTES,
};
use super::{
    corrupted, io_err, Bookmark, RecordKind, RecordingError, RecordingMeta, BLOCK_TICKS_MAX, FORMAT_VERSION,
    FORMAT_VERSION_PACKED_INPUTS, FORMAT_VERSION_READ_MIN, HEADER_BODY_BYTES_MAX, MAGIC,
    RECORD_PAYLOAD_BYTES_MAX, ROOTS_BYTES_PER_TICK,
};

/// One record found in a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RecordInfo {
    pub kind: RecordKind,
    /// Byte offset of the record header.
    pub offset: u64,
    pub first_tick: u32,
    pub tick_count: u32,
    pub payload_bytes: u32,
}

/// A recording's terrain and the config that generated it, which threads can share.
#[derive(Clone, Debug)]
pub struct SharedTerrain {
    config: migratory_kernel::WorldConfig,
    terrain: Arc<Terrain>,
}

/// The end record's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndRecord {
    pub final_tick: u32,
    pub ticks_recorded: u32,
    pub final_root: [u8; 32],
    pub chain: [u8; 32],
}

/// Where and why reading stopped early.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TornTail {
    /// Offset of the incomplete record (or of the end of the file when the end record is missing).
    pub offset: u64,
    /// Bytes after `offset` that could not be used.
    pub bytes_lost: u64,
    /// The bytes lost failed their checksums rather than ending early: a crash left
    /// garbage at the end of the file (only `open_after_crash` accepts that).
    pub damaged: bool,
}

/// The most bytes after a damaged record `open_after_crash` searches for an intact one
/// (past it, the damage counts as corruption): a crash leaves at most the pages it was
/// writing, far less than this.
pub const CRASH_TAIL_BYTES_MAX: u64 = 16 << 20;

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
    pub records: Vec<RecordInfo>,
    pub end: Option<EndRecord>,
    /// Set when the file ends early: the writer was killed or the file was cut.
    pub torn_tail: Option<TornTail>,
    /// Total file length.
    pub file_bytes: u64,
    source: std::cell::RefCell<Box<dyn Source>>,
    /// The config's terrain, generated once (about 200 ms for the default world) and
    /// shared by every world this recording builds.
    terrain: std::cell::OnceCell<Arc<Terrain>>,
}

/// How `scan` takes damage at the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tail {
    /// Corruption, wherever it is.
    Strict,
    /// A torn tail when nothing intact follows it (`open_after_crash`).
    AfterCrash,
}

/// Whether a record header with a valid checksum starts anywhere in `from..end` (false
/// when the region is past `CRASH_TAIL_BYTES_MAX` to search: then it counts as intact,
/// and the damage as corruption).
fn intact_record_after(src: &mut dyn Source, from: u64, end: u64) -> bool {
    if end.saturating_sub(from) > CRASH_TAIL_BYTES_MAX {
        return true;
    }
    let mut buf = vec![0u8; end.saturating_sub(from) as usize];
    if read_exact_at(src, from, &mut buf).is_err() {
        return true;
    }
    buf.windows(RECORD_HEADER_BYTES).any(|w| {
        let h: &[u8; RECORD_HEADER_BYTES] = w.try_into().unwrap_or(&[0; RECORD_HEADER_BYTES]);
        RecordHeader::header_sum_matches(h) && RecordHeader::reserved_is_zero(h)
    })
}

fn read_exact_at(src: &mut dyn Source, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    src.seek(SeekFrom::Start(offset))?;
    src.read_exact(buf)
}

impl Recording {
    /// Opens and validates a recording file: any byte that fails its checksum is
    /// `Corrupted`; a file that ends early has a torn tail.
    pub fn open(path: &Path) -> Result<Recording, RecordingError> {
        let file = File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
        Recording::from_source(Box::new(BufReader::new(file)), Tail::Strict)
    }

    /// Opens a recording held in memory (as `open`).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Recording, RecordingError> {
        Recording::from_source(Box::new(io::Cursor::new(bytes)), Tail::Strict)
    }

    /// Opens a recording whose writer may have crashed, as a resume does: as `open`, but
    /// damage that runs to the end of the file (no intact record after it within
    /// `CRASH_TAIL_BYTES_MAX`) is a torn tail marked `damaged`, not corruption, because a
    /// crash can leave the pages it was writing full of garbage. Damage followed by an
    /// intact record is still `Corrupted`.
    pub fn open_after_crash(path: &Path) -> Result<Recording, RecordingError> {
        let file = File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
        Recording::from_source(Box::new(BufReader::new(file)), Tail::AfterCrash)
    }

    /// `open_after_crash` of a recording held in memory.
    pub fn from_bytes_after_crash(bytes: Vec<u8>) -> Result<Recording, RecordingError> {
        Recording::from_source(Box::new(io::Cursor::new(bytes)), Tail::AfterCrash)
    }

    fn from_source(mut src: Box<dyn Source>, tail: Tail) -> Result<Recording, RecordingError> {
        let file_bytes = src
            .seek(SeekFrom::End(0))
            .map_err(io_err("reading the recording"))?;
        let mut head = [0u8; FILE_HEADER_BYTES];
        let have = file_bytes.min(FILE_HEADER_BYTES as u64) as usize;
        read_exact_at(src.as_mut(), 0, &mut head[..have]).map_err(io_err("reading the header"))?;
        let magic_len = have.min(MAGIC.len());
        if head[..magic_len] != MAGIC[..magic_len] || have == 0 {
            return Err(RecordingError::NotARecording {
                found: head[..magic_len].to_vec(),
            });
        }
        if have < FILE_HEADER_BYTES {
            return Err(corrupted(
                0,
                None,
                format!("file of {file_bytes} bytes ends inside the 56-byte header"),
            ));
        }
        let fixed = FileHeader::decode(&head);
        let version = fixed.version;
        if version < FORMAT_VERSION_READ_MIN {
            return Err(RecordingError::UpgradeRequired {
                found: version,
                supported: FORMAT_VERSION_READ_MIN,
            });
        }
        if version > FORMAT_VERSION {
            return Err(RecordingError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let body_len = fixed.body_len;
        if body_len > HEADER_BODY_BYTES_MAX || (FILE_HEADER_BYTES + body_len as usize) as u64 > file_bytes {
            return Err(corrupted(
                super::layout::FILE_BODY_LEN_OFFSET as u64,
                None,
                format!("header body length {body_len} does not fit the file"),
            ));
        }
        let mut body = vec![0u8; body_len as usize];
        read_exact_at(src.as_mut(), FILE_HEADER_BYTES as u64, &mut body)
            .map_err(io_err("reading the header"))?;
        if !FileHeader::checksum_matches(&head, &body) {
            return Err(corrupted(0, None, "header checksum mismatch"));
        }
        let meta = rkyv::from_bytes::<RecordingMeta, rancor::Error>(&aligned(&body)).map_err(|e| {
            corrupted(
                FILE_HEADER_BYTES as u64,
                None,
                format!("header body invalid: {e}"),
            )
        })?;
        if meta.config.validate().is_err() || meta.config.content_hash() != meta.config_hash {
            return Err(corrupted(
                FILE_HEADER_BYTES as u64,
                None,
                "world config invalid or its hash does not match",
            ));
        }
        // The first replayed tick is `start_tick + 1`: a (forged) start tick of u32::MAX
        // has none and would overflow every tick computation below.
        if meta.start_tick == u32::MAX {
            return Err(corrupted(
                FILE_HEADER_BYTES as u64,
                None,
                "start tick out of range",
            ));
        }
        let mut rec = Recording {
            format_version: version,
            rules_version: fixed.rules_version,
            recorded_shard_count: fixed.shard_count,
            records: Vec::new(),
            end: None,
            torn_tail: None,
            file_bytes,
            source: std::cell::RefCell::new(src),
            terrain: std::cell::OnceCell::new(),
            meta,
        };
        rec.scan((FILE_HEADER_BYTES + body_len as usize) as u64, tail)?;
        Ok(rec)
    }

    /// Walks the records, checking every checksum and the tick order.
    fn scan(&mut self, mut offset: u64, tail: Tail) -> Result<(), RecordingError> {
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
                        damaged: false,
                    });
                }
                break;
            }
            if self.end.is_some() {
                return Err(corrupted(
                    offset,
                    None,
                    format!("{remaining} bytes after the end record"),
                ));
            }
            if remaining < RECORD_HEADER_BYTES as u64 {
                self.torn_tail = Some(TornTail {
                    offset,
                    bytes_lost: remaining,
                    damaged: false,
                });
                break;
            }
            let mut h = [0u8; RECORD_HEADER_BYTES];
            read_exact_at(src.as_mut(), offset, &mut h).map_err(io_err("reading a record header"))?;
            let header = RecordHeader::decode(&h);
            let (first, count, len) = (header.first_tick, header.tick_count, header.payload_len);
            let claimed = Some((first, first.saturating_add(count.saturating_sub(1))));
            // After a crash, damage from here to the end of the file is its torn tail.
            let crash_tail = |src: &mut Box<dyn Source>| {
                (tail == Tail::AfterCrash && !intact_record_after(src.as_mut(), offset + 1, self.file_bytes))
                    .then_some(TornTail {
                        offset,
                        bytes_lost: remaining,
                        damaged: true,
                    })
            };
            if !RecordHeader::header_sum_matches(&h) {
                if let Some(t) = crash_tail(&mut src) {
                    self.torn_tail = Some(t);
                    break;
                }
                return Err(corrupted(
                    offset,
                    Some((next_tick, next_tick)),
                    "record header checksum mismatch",
                ));
            }
            if len > RECORD_PAYLOAD_BYTES_MAX || !RecordHeader::reserved_is_zero(&h) {
                return Err(corrupted(offset, claimed, "record header fields out of range"));
            }
            if remaining - (RECORD_HEADER_BYTES as u64) < len as u64 {
                self.torn_tail = Some(TornTail {
                    offset,
                    bytes_lost: remaining,
                    damaged: false,
                });
                break;
            }
            payload.resize(len as usize, 0);
            read_exact_at(src.as_mut(), offset + RECORD_HEADER_BYTES as u64, &mut payload)
                .map_err(io_err("reading a record"))?;
            if !header.payload_sum_matches(&payload) {
                if let Some(t) = crash_tail(&mut src) {
                    self.torn_tail = Some(t);
                    break;
                }
                return Err(corrupted(offset, claimed, "record payload checksum mismatch"));
            }
            let kind = match header.kind {
                1 => RecordKind::Block,
                2 => RecordKind::Checkpoint,
                3 => RecordKind::End,
                4 if self.format_version >= 2 => RecordKind::Bookmark,
                k => return Err(corrupted(offset, claimed, format!("unknown record kind {k}"))),
            };
            match kind {
                RecordKind::Block => {
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
                RecordKind::Checkpoint => {
                    if first != next_tick - 1 || count != 0 {
                        return Err(corrupted(
                            offset,
                            claimed,
                            format!("checkpoint of tick {first} after tick {}", next_tick - 1),
                        ));
                    }
                    expect_start_checkpoint = false;
                }
                RecordKind::Bookmark => {
                    // A bookmark marks a tick already recorded.
                    if first >= next_tick || first < self.meta.start_tick || count != 0 {
                        return Err(corrupted(
                            offset,
                            claimed,
                            format!("bookmark of tick {first} before that tick was recorded"),
                        ));
                    }
                    decode_bookmark(&payload).map_err(|why| corrupted(offset, claimed, why.to_string()))?;
                }
                RecordKind::End => {
                    if payload.len() != END_PAYLOAD_BYTES || first != next_tick - 1 {
                        return Err(corrupted(offset, claimed, "end record malformed"));
                    }
                    let mut root = [0u8; 32];
                    let mut chain = [0u8; 32];
                    root.copy_from_slice(&payload[END_ROOT_OFFSET..END_CHAIN_OFFSET]);
                    chain.copy_from_slice(&payload[END_CHAIN_OFFSET..END_PAYLOAD_BYTES]);
                    self.end = Some(EndRecord {
                        final_tick: first,
                        ticks_recorded: le_u32(&payload, END_TICKS_OFFSET),
                        final_root: root,
                        chain,
                    });
                }
            }
            self.records.push(RecordInfo {
                kind,
                offset,
                first_tick: first,
                tick_count: count,
                payload_bytes: len,
            });
            offset += RECORD_HEADER_BYTES as u64 + len as u64;
        }
        Ok(())
    }

    /// The first tick a replay steps (the tick after the start state).
    pub fn first_tick(&self) -> u32 {
        self.meta.start_tick + 1
    }

    /// The last tick whose inputs are readable (the start tick when none are).
    pub fn last_tick(&self) -> u32 {
        self.records
            .iter()
            .filter(|f| f.kind == RecordKind::Block)
            .map(|f| f.first_tick + f.tick_count - 1)
            .next_back()
            .unwrap_or(self.meta.start_tick)
    }

    /// The state root recorded for `last_tick()`: the last durable tick's (or, with no
    /// tick recorded, the start state's). What a resumed world must match.
    pub fn last_recorded_root(&self) -> Result<[u8; 32], RecordingError> {
        let last = self.last_tick();
        if last == self.meta.start_tick {
            return Ok(self.start_world(1)?.state_root());
        }
        match self.ticks_from(last).last() {
            Some(t) => Ok(t?.state_root),
            None => Err(corrupted(
                0,
                Some((last, last)),
                "the last block's tick is missing",
            )),
        }
    }

    /// Ticks whose inputs are readable.
    pub fn ticks_recovered(&self) -> u32 {
        self.last_tick() - self.meta.start_tick
    }

    fn payload(&self, f: &RecordInfo) -> Result<Vec<u8>, RecordingError> {
        let mut buf = vec![0u8; f.payload_bytes as usize];
        read_exact_at(
            self.source.borrow_mut().as_mut(),
            f.offset + RECORD_HEADER_BYTES as u64,
            &mut buf,
        )
        .map_err(io_err("reading a record"))?;
        Ok(buf)
    }

    /// Decodes one block's ticks.
    pub fn block(&self, f: &RecordInfo) -> Result<Vec<RecordedTick>, RecordingError> {
        let ticks = Some((f.first_tick, f.first_tick + f.tick_count - 1));
        let payload = self.payload(f)?;
        let c = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
        let bad = |reason: String| corrupted(f.offset, ticks, reason);
        // The decompressed size is bounded so a hostile block cannot exhaust memory.
        let limit = (f.tick_count as usize)
            .saturating_mul(1 << 16)
            .min(RECORD_PAYLOAD_BYTES_MAX as usize);
        let archived = zstd::bulk::decompress(&payload[4..4 + c], limit)
            .map_err(|e| bad(format!("inputs do not decompress: {e}")))?;
        let inputs = if self.format_version >= FORMAT_VERSION_PACKED_INPUTS {
            super::packed::decode_inputs(&archived, f.first_tick, f.tick_count)
                .map_err(|e| bad(format!("packed inputs invalid: {e}")))?
        } else {
            rkyv::from_bytes::<Vec<TickInputs>, rancor::Error>(&aligned(&archived))
                .map_err(|e| bad(format!("inputs archive invalid: {e}")))?
        };
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
        self.records
            .iter()
            .filter(move |f| f.kind == RecordKind::Block && f.first_tick + f.tick_count > from)
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
    pub fn checkpoints(&self) -> impl Iterator<Item = &RecordInfo> {
        self.records.iter().filter(|f| f.kind == RecordKind::Checkpoint)
    }

    /// Every bookmark, in the order written (by tick within a block).
    pub fn bookmarks(&self) -> Result<Vec<Bookmark>, RecordingError> {
        self.records
            .iter()
            .filter(|f| f.kind == RecordKind::Bookmark)
            .map(|f| {
                let payload = self.payload(f)?;
                let (client, note) = decode_bookmark(&payload).map_err(|why| {
                    corrupted(f.offset, Some((f.first_tick, f.first_tick)), why.to_string())
                })?;
                Ok(Bookmark {
                    tick: f.first_tick,
                    client,
                    note,
                })
            })
            .collect()
    }

    /// Restores the checkpoint stored in record `f`.
    pub fn restore_checkpoint(&self, f: &RecordInfo, shard_count: usize) -> Result<World, RecordingError> {
        let payload = self.payload(f)?;
        let bad = |reason: String| corrupted(f.offset, Some((f.first_tick, f.first_tick)), reason);
        let bytes = zstd::bulk::decompress(&payload, RECORD_PAYLOAD_BYTES_MAX as usize)
            .map_err(|e| bad(format!("checkpoint does not decompress: {e}")))?;
        let world =
            restore_checkpoint_with_terrain(&bytes, self.terrain()?, shard_count).map_err(|e| match e {
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

    /// The terrain the recording's config generates (made on first use, then shared).
    pub fn terrain(&self) -> Result<Arc<Terrain>, RecordingError> {
        if let Some(t) = self.terrain.get() {
            return Ok(t.clone());
        }
        let rejected = |e: String| {
            corrupted(
                FILE_HEADER_BYTES as u64,
                None,
                format!("world config rejected: {e}"),
            )
        };
        self.meta.config.validate().map_err(|e| rejected(e.to_string()))?;
        let t = Terrain::generate(&self.meta.config)
            .map(Arc::new)
            .map_err(|e| rejected(e.to_string()))?;
        Ok(self.terrain.get_or_init(|| t).clone())
    }

    /// The terrain with the config it was generated from, to hand to another `Recording`
    /// of the same world on another thread (`adopt_terrain`) instead of generating it again.
    pub fn shared_terrain(&self) -> Result<SharedTerrain, RecordingError> {
        Ok(SharedTerrain {
            config: self.meta.config.clone(),
            terrain: self.terrain()?,
        })
    }

    /// Uses `shared`'s terrain from now on if it was generated from this recording's
    /// config (and none is held yet); says whether it did.
    pub fn adopt_terrain(&self, shared: &SharedTerrain) -> bool {
        shared.config == self.meta.config && self.terrain.set(shared.terrain.clone()).is_ok()
    }

    /// The world the recording starts from.
    pub fn start_world(&self, shard_count: usize) -> Result<World, RecordingError> {
        if self.meta.start_tick == 0 {
            let terrain = self.terrain()?;
            return World::with_terrain(self.meta.config.clone(), terrain, shard_count).map_err(|e| {
                corrupted(
                    FILE_HEADER_BYTES as u64,
                    None,
                    format!("world config rejected: {e}"),
                )
            });
        }
        let first = self.checkpoints().next().copied();
        match first {
            Some(f) if f.first_tick == self.meta.start_tick => self.restore_checkpoint(&f, shard_count),
            _ => Err(corrupted(
                FILE_HEADER_BYTES as u64,
                None,
                "the start checkpoint is missing",
            )),
        }
    }

    /// The world the recording starts from, following this build's rules whatever rules
    /// recorded it: to replay its inputs under new rules (`rerecord`, `rules-diff`).
    pub fn start_world_any_rules(&self, shard_count: usize) -> Result<World, RecordingError> {
        let first = self.checkpoints().next().copied();
        match first {
            Some(f) if self.meta.start_tick != 0 && f.first_tick == self.meta.start_tick => {
                let payload = self.payload(&f)?;
                let bad = |reason: String| corrupted(f.offset, Some((f.first_tick, f.first_tick)), reason);
                let bytes = zstd::bulk::decompress(&payload, RECORD_PAYLOAD_BYTES_MAX as usize)
                    .map_err(|e| bad(format!("checkpoint does not decompress: {e}")))?;
                let world = migratory_kernel::restore_checkpoint_any_rules(&bytes, shard_count).map_err(
                    |e| match e {
                        CheckpointError::UpgradeRequired { .. }
                        | CheckpointError::UnsupportedVersion { .. } => {
                            RecordingError::CheckpointIncompatible {
                                offset: f.offset,
                                tick: f.first_tick,
                                reason: e.to_string(),
                            }
                        }
                        e => bad(format!("checkpoint invalid: {e}")),
                    },
                )?;
                if world.tick() != f.first_tick || world.config() != &self.meta.config {
                    return Err(bad("checkpoint tick or config differs from the recording".into()));
                }
                Ok(world)
            }
            _ => self.start_world(shard_count),
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
