//! `RecordingWriter`: streams a session into a recording tick by tick, holding at most one
//! block of inputs in memory.

use std::fs::File;
use std::io::{self, Write};

use migratory_kernel::{compact_checkpoint, save_checkpoint, TickInputs, TickOutput, World};
use rkyv::rancor;

use super::layout::{encode_bookmark, FileHeader, RecordHeader, FILE_HEADER_BYTES, RECORD_HEADER_BYTES};
use super::{
    Bookmark, Chain, RecordKind, RecordingMeta, BLOCK_TICKS_MAX, BOOKMARK_NOTE_BYTES_MAX, FORMAT_VERSION,
    ROOTS_BYTES_PER_TICK, ZSTD_LEVEL,
};

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

impl WriterOptions {
    /// Whether a checkpoint of the world after `tick` goes into the recording with it.
    pub fn checkpoint_due(&self, tick: u32) -> bool {
        let k = self.checkpoint_interval_ticks;
        k > 0 && tick % k == 0
    }
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

/// What a recording keeps of one tick's output besides its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickRoots {
    pub tick: u32,
    pub state_root: [u8; 32],
    pub snapshots_root: [u8; 32],
}

impl TickRoots {
    pub fn of(output: &TickOutput) -> TickRoots {
        TickRoots {
            tick: output.tick,
            state_root: output.state_root,
            snapshots_root: output.snapshots_root,
        }
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
    /// The tick of the newest checkpoint written (None: none yet).
    last_checkpoint_tick: Option<u32>,
    /// Bookmarks of ticks in the block not written yet (they follow it).
    pending_bookmarks: Vec<Bookmark>,
}

impl<W: Durable> RecordingWriter<W> {
    /// Writes the header for a recording of `world` from its current tick (with a
    /// checkpoint first when that tick is not 0).
    pub fn new(mut out: W, world: &World, shard_count: u32, options: WriterOptions) -> io::Result<Self> {
        let meta = RecordingMeta::for_world(world);
        let body = rkyv::to_bytes::<rancor::Error>(&meta).map_err(io::Error::other)?;
        let head = FileHeader {
            version: FORMAT_VERSION,
            rules_version: world.rules_version(),
            shard_count,
            body_len: body.len() as u32,
        };
        out.write_all(&head.encode(&body))?;
        out.write_all(&body)?;
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
            bytes_written: (FILE_HEADER_BYTES + body.len()) as u64,
            last_checkpoint_tick: None,
            pending_bookmarks: Vec::new(),
        };
        if world.tick() != 0 {
            w.write_checkpoint(world)?;
        }
        w.out.flush()?;
        Ok(w)
    }

    /// Records one tick: the inputs it was stepped with and what it produced. `world` is
    /// the world after the step (used for checkpoints).
    pub fn record_tick(&mut self, inputs: &TickInputs, output: &TickOutput, world: &World) -> io::Result<()> {
        let checkpoint = self
            .options
            .checkpoint_due(output.tick)
            .then(|| save_checkpoint(world));
        self.record_tick_parts(inputs.clone(), &TickRoots::of(output), checkpoint.as_deref())
    }

    /// The options in effect (`block_ticks` clamped).
    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// `record_tick` from its parts, for a writer on a thread of its own: the tick's
    /// inputs and roots, and when `WriterOptions::checkpoint_due` the world's `save_checkpoint`
    /// bytes (taken on the stepping thread; compressing and writing them happen here).
    pub fn record_tick_parts(
        &mut self,
        inputs: TickInputs,
        roots: &TickRoots,
        checkpoint: Option<&[u8]>,
    ) -> io::Result<()> {
        let tick = roots.tick;
        if tick != self.next_tick {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("recorded tick {tick} but tick {} was expected", self.next_tick),
            ));
        }
        let checkpoint_due = self.options.checkpoint_due(tick);
        if checkpoint_due != checkpoint.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tick {tick}: a checkpoint is due: {checkpoint_due}, given: {}",
                    checkpoint.is_some()
                ),
            ));
        }
        self.block_inputs.push(inputs);
        self.block_roots.extend_from_slice(&roots.state_root);
        self.block_roots.extend_from_slice(&roots.snapshots_root);
        self.chain.push(tick, &roots.state_root, &roots.snapshots_root);
        self.last_root = roots.state_root;
        self.next_tick += 1;
        self.ticks_recorded += 1;
        if self.block_inputs.len() as u32 >= self.options.block_ticks || checkpoint_due {
            self.flush_block()?;
        }
        if let Some(bytes) = checkpoint {
            self.write_checkpoint_bytes(tick, bytes)?;
        }
        if self.block_inputs.is_empty() {
            self.write_pending_bookmarks()?;
        }
        Ok(())
    }

    /// Records a bookmark of `tick` (recorded already, or the tick being recorded): after
    /// the block that holds it. A note longer than `BOOKMARK_NOTE_BYTES_MAX` or a tick not
    /// recorded yet is refused (`InvalidInput`), and nothing is written.
    pub fn bookmark(&mut self, tick: u32, client: u32, note: &str) -> io::Result<()> {
        let invalid = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if note.len() > BOOKMARK_NOTE_BYTES_MAX {
            return invalid(format!(
                "a bookmark note of {} bytes (at most {BOOKMARK_NOTE_BYTES_MAX})",
                note.len()
            ));
        }
        if tick >= self.next_tick || self.ticks_recorded == 0 || tick < self.next_tick - self.ticks_recorded {
            return invalid(format!("a bookmark of tick {tick}, which is not recorded here"));
        }
        let b = Bookmark {
            tick,
            client,
            note: note.to_string(),
        };
        if tick < self.block_first_tick {
            self.write_bookmark(&b)?;
            self.out.flush()
        } else {
            self.pending_bookmarks.push(b);
            Ok(())
        }
    }

    fn write_bookmark(&mut self, b: &Bookmark) -> io::Result<()> {
        let payload = encode_bookmark(b.client, &b.note);
        self.write_record(RecordKind::Bookmark, b.tick, 0, &[&payload])
    }

    fn write_pending_bookmarks(&mut self) -> io::Result<()> {
        for b in std::mem::take(&mut self.pending_bookmarks) {
            self.write_bookmark(&b)?;
        }
        self.out.flush()
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    fn write_record(
        &mut self,
        kind: RecordKind,
        first_tick: u32,
        tick_count: u32,
        payload: &[&[u8]],
    ) -> io::Result<()> {
        let head = RecordHeader::for_payload(kind as u8, first_tick, tick_count, payload);
        let len = head.payload_len;
        let head = head.encode();
        self.out.write_all(&head)?;
        for p in payload {
            self.out.write_all(p)?;
        }
        self.bytes_written += (RECORD_HEADER_BYTES + len as usize) as u64;
        Ok(())
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.block_inputs.is_empty() {
            return Ok(());
        }
        let packed = super::packed::encode_inputs(self.block_first_tick, &self.block_inputs);
        let compressed = zstd::bulk::compress(&packed, ZSTD_LEVEL)?;
        let count = self.block_inputs.len() as u32;
        let first = self.block_first_tick;
        let roots = std::mem::take(&mut self.block_roots);
        self.write_record(
            RecordKind::Block,
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
        self.write_checkpoint_bytes(world.tick(), &save_checkpoint(world))
    }

    /// Stores a checkpoint compact (`compact_checkpoint`): a 1,000-client checkpoint is
    /// 0.13 MB after zstd instead of 1.05 MB, and the 5.6 ms compacting takes is repaid by
    /// zstd's 14.1 ms on the raw bytes falling to 1.2 ms.
    fn write_checkpoint_bytes(&mut self, tick: u32, bytes: &[u8]) -> io::Result<()> {
        let compact = compact_checkpoint(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let compressed = zstd::bulk::compress(&compact, ZSTD_LEVEL)?;
        self.write_record(RecordKind::Checkpoint, tick, 0, &[&compressed])?;
        self.last_checkpoint_tick = Some(tick);
        self.out.flush()
    }

    /// Like `finish`, with a checkpoint of `world` (the world after the last recorded
    /// tick) first, unless one of that tick was already written: the next session of this
    /// world resumes from it without stepping a single tick.
    pub fn finish_with_checkpoint(self, world: &World) -> io::Result<W> {
        let checkpoint = self
            .final_checkpoint_needed(world.tick())
            .then(|| save_checkpoint(world));
        self.finish_with_checkpoint_bytes(world.tick(), checkpoint.as_deref())
    }

    /// Whether `finish_with_checkpoint` of the world at `tick` writes a checkpoint (none
    /// when one of that tick was written already, or nothing was recorded).
    pub fn final_checkpoint_needed(&self, tick: u32) -> bool {
        self.last_checkpoint_tick != Some(tick) && self.ticks_recorded > 0
    }

    /// `finish_with_checkpoint` from its parts: the world's tick and, when
    /// `final_checkpoint_needed(tick)`, its `save_checkpoint` bytes.
    pub fn finish_with_checkpoint_bytes(mut self, tick: u32, checkpoint: Option<&[u8]>) -> io::Result<W> {
        if tick != self.next_tick - 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "final checkpoint of tick {tick} but the last recorded tick is {}",
                    self.next_tick - 1
                ),
            ));
        }
        self.flush_block()?;
        if self.final_checkpoint_needed(tick) {
            let Some(bytes) = checkpoint else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the final checkpoint of tick {tick} is missing"),
                ));
            };
            self.write_checkpoint_bytes(tick, bytes)?;
        }
        self.finish()
    }

    /// Writes the partial block and the end record, syncs, and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_block()?;
        self.write_pending_bookmarks()?;
        let final_tick = self.next_tick - 1;
        let (ticks, root, chain) = (self.ticks_recorded, self.last_root, self.chain.0);
        self.write_record(
            RecordKind::End,
            final_tick,
            0,
            &[&ticks.to_le_bytes(), &root, &chain],
        )?;
        self.out.flush()?;
        self.out.sync()?;
        Ok(self.out)
    }
}
