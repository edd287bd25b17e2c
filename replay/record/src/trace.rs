//! The `.mtrc` behaviour trace: every tick's canonical entity states from one replay of a
//! recording, so a later build (other kernel rules) can compare its own behaviour with
//! it tick by tick (`migratory-replay trace`, then `rules-diff`).
//!
//! Header (92 bytes), little-endian:
//!
//! | offset | size | field                                                          |
//! |--------|------|----------------------------------------------------------------|
//! | 0      | 4    | magic `MTRC`                                                   |
//! | 4      | 4    | trace version (`TRACE_VERSION`)                                |
//! | 8      | 4    | kernel rules version of the run traced                         |
//! | 12     | 4    | first tick traced                                              |
//! | 16     | 4    | ticks traced N                                                 |
//! | 20     | 4    | boids per tick                                                 |
//! | 24     | 4    | player slots per tick                                          |
//! | 28     | 32   | config hash of the world                                       |
//! | 60     | 32   | blake3 of the N frames (as laid out below)                     |
//! | 92     | ..   | the N frames, each predicted from the one before, one zstd stream |
//!
//! Frame (one tick, 4 + 12 x boids + 80 x slots bytes): the tick (u32), each boid's
//! record by id (`x_mm` i32, `y_mm` i32, `vx` i16, `vy` i16), then each slot's player
//! record (`Player::to_le_bytes`, a free slot all zeros).
//!
//! Stored, each frame is the residual of a prediction from the frame before (the first
//! from an all-zero frame): the tick and every boid's `x_mm`, `y_mm` minus the previous
//! position plus velocity and `vx`, `vy` minus the previous velocity (wrapping, in the
//! same widths), the player records XORed with the previous ones. A boid gliding between
//! thinks has residual zero, so the stream is mostly zeros: `corpora/default.mrec`'s
//! 1,800 ticks of 5,000 boids and 1,024 slots trace to 5.3 MB this way, against 36.6 MB
//! with the records only XORed and 49.8 MB with the frames compressed as they are.
//!
//! The header is written last (the writer seeks back to it), so a trace cut short by a
//! crash has a zero magic and is refused, never half-read.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use migratory_kernel::{Boid, Player, World, PLAYER_RECORD_BYTES};
use thiserror::Error;

/// Trace magic.
pub const TRACE_MAGIC: &[u8; 4] = b"MTRC";
/// The trace version this build writes and reads.
pub const TRACE_VERSION: u32 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = 4;
const RULES_VERSION_OFFSET: usize = 8;
const FIRST_TICK_OFFSET: usize = 12;
const TICK_COUNT_OFFSET: usize = 16;
const BOID_COUNT_OFFSET: usize = 20;
const SLOT_COUNT_OFFSET: usize = 24;
const CONFIG_HASH_OFFSET: usize = 28;
const CHECKSUM_OFFSET: usize = 60;
/// Bytes of the header.
pub const TRACE_HEADER_BYTES: usize = 92;
const _: () = assert!(MAGIC_OFFSET + TRACE_MAGIC.len() == VERSION_OFFSET);
const _: () = assert!(SLOT_COUNT_OFFSET + 4 == CONFIG_HASH_OFFSET);
const _: () = assert!(CONFIG_HASH_OFFSET + 32 == CHECKSUM_OFFSET);
const _: () = assert!(CHECKSUM_OFFSET + 32 == TRACE_HEADER_BYTES);

/// Bytes of one boid's record in a frame.
const BOID_BYTES: usize = 12;
const ZSTD_LEVEL: i32 = 3;

/// Why a trace cannot be read or written.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a behaviour trace (magic {found:02x?}, expected \"MTRC\"; a trace cut short by a crash has none)")]
    NotATrace { found: [u8; 4] },
    #[error("trace version {found} is older than this build reads ({supported}): export it again")]
    UpgradeRequired { found: u32, supported: u32 },
    #[error("trace version {found} is newer than this build reads ({supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("trace is corrupted: {reason}")]
    Corrupted { reason: String },
}

fn corrupted(reason: impl Into<String>) -> TraceError {
    TraceError::Corrupted {
        reason: reason.into(),
    }
}

/// What a trace's header says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceHeader {
    pub rules_version: u32,
    pub first_tick: u32,
    pub tick_count: u32,
    pub boid_count: u32,
    pub slot_count: u32,
    #[serde(with = "hex32")]
    pub config_hash: [u8; 32],
}

mod hex32 {
    pub fn serialize<S: serde::Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&migratory_kernel::hex(h))
    }
}

impl TraceHeader {
    fn frame_bytes(&self) -> usize {
        4 + self.boid_count as usize * BOID_BYTES + self.slot_count as usize * PLAYER_RECORD_BYTES
    }
}

/// Writes a trace, one frame per `push`; `finish` writes the header.
#[allow(missing_debug_implementations, reason = "a zstd stream has no Debug")]
pub struct TraceWriter {
    encoder: zstd::Encoder<'static, BufWriter<File>>,
    header: TraceHeader,
    hasher: blake3::Hasher,
    frame: Vec<u8>,
    /// The frame before, and the residual stored (`xored`: the player records' part is an XOR).
    previous: Vec<u8>,
    xored: Vec<u8>,
}

impl TraceWriter {
    /// Starts a trace of `world`'s run at `path`, from the tick after its current one.
    pub fn create(path: &Path, world: &World) -> Result<TraceWriter, TraceError> {
        let mut file = BufWriter::new(File::create(path)?);
        // Zeros until `finish`: a trace cut short has no magic.
        file.write_all(&[0; TRACE_HEADER_BYTES])?;
        Ok(TraceWriter {
            encoder: zstd::Encoder::new(file, ZSTD_LEVEL)?,
            header: TraceHeader {
                rules_version: world.rules_version(),
                first_tick: world.tick() + 1,
                tick_count: 0,
                boid_count: world.config().boid_count,
                slot_count: world.config().client_slots_max,
                config_hash: world.config().content_hash(),
            },
            hasher: blake3::Hasher::new(),
            frame: Vec::new(),
            previous: Vec::new(),
            xored: Vec::new(),
        })
    }

    /// Appends `world`'s state after its current tick (the next one the trace expects).
    pub fn push(&mut self, world: &World) -> Result<(), TraceError> {
        let expected = self.header.first_tick + self.header.tick_count;
        if world.tick() != expected {
            return Err(TraceError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("trace expects tick {expected}, the world is at {}", world.tick()),
            )));
        }
        self.frame.clear();
        self.frame.extend_from_slice(&world.tick().to_le_bytes());
        for b in world.boids().iter() {
            self.frame.extend_from_slice(&b.x_mm.to_le_bytes());
            self.frame.extend_from_slice(&b.y_mm.to_le_bytes());
            self.frame.extend_from_slice(&b.vx.to_le_bytes());
            self.frame.extend_from_slice(&b.vy.to_le_bytes());
        }
        for p in world.players() {
            self.frame.extend_from_slice(&p.to_le_bytes());
        }
        debug_assert_eq!(self.frame.len(), self.header.frame_bytes());
        self.hasher.update(&self.frame);
        self.previous.resize(self.frame.len(), 0);
        self.xored.resize(self.frame.len(), 0);
        predict(
            Way::ToResidual,
            &self.frame,
            &self.previous,
            &mut self.xored,
            self.header.boid_count as usize,
        );
        self.encoder.write_all(&self.xored)?;
        std::mem::swap(&mut self.frame, &mut self.previous);
        self.header.tick_count += 1;
        Ok(())
    }

    /// Ends the stream and writes the header; returns it.
    pub fn finish(self) -> Result<TraceHeader, TraceError> {
        let mut file = self.encoder.finish()?;
        let h = &self.header;
        let mut head = [0u8; TRACE_HEADER_BYTES];
        head[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(TRACE_MAGIC);
        head[VERSION_OFFSET..RULES_VERSION_OFFSET].copy_from_slice(&TRACE_VERSION.to_le_bytes());
        head[RULES_VERSION_OFFSET..FIRST_TICK_OFFSET].copy_from_slice(&h.rules_version.to_le_bytes());
        head[FIRST_TICK_OFFSET..TICK_COUNT_OFFSET].copy_from_slice(&h.first_tick.to_le_bytes());
        head[TICK_COUNT_OFFSET..BOID_COUNT_OFFSET].copy_from_slice(&h.tick_count.to_le_bytes());
        head[BOID_COUNT_OFFSET..SLOT_COUNT_OFFSET].copy_from_slice(&h.boid_count.to_le_bytes());
        head[SLOT_COUNT_OFFSET..CONFIG_HASH_OFFSET].copy_from_slice(&h.slot_count.to_le_bytes());
        head[CONFIG_HASH_OFFSET..CHECKSUM_OFFSET].copy_from_slice(&h.config_hash);
        head[CHECKSUM_OFFSET..TRACE_HEADER_BYTES].copy_from_slice(self.hasher.finalize().as_bytes());
        file.flush()?;
        let mut file = file.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&head)?;
        file.sync_all()?;
        Ok(self.header)
    }
}

/// One traced tick.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceFrame {
    pub tick: u32,
    pub boids: Vec<Boid>,
    pub players: Vec<Player>,
}

/// Reads a trace frame by frame; the checksum is checked when the last frame is read.
#[allow(missing_debug_implementations, reason = "a zstd stream has no Debug")]
pub struct TraceReader {
    pub header: TraceHeader,
    decoder: zstd::Decoder<'static, BufReader<File>>,
    checksum: [u8; 32],
    hasher: blake3::Hasher,
    read: u32,
    /// The frame being read, the one before it (the next is predicted from it), and the
    /// stored residual.
    buf: Vec<u8>,
    previous: Vec<u8>,
    xored: Vec<u8>,
}

impl TraceReader {
    pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
        let mut file = File::open(path)?;
        let mut head = [0u8; TRACE_HEADER_BYTES];
        file.read_exact(&mut head).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                corrupted(format!("shorter than the {TRACE_HEADER_BYTES}-byte header"))
            }
            _ => TraceError::Io(e),
        })?;
        let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let magic: [u8; 4] = [head[0], head[1], head[2], head[3]];
        if &magic != TRACE_MAGIC {
            return Err(TraceError::NotATrace { found: magic });
        }
        let version = word(VERSION_OFFSET);
        if version < TRACE_VERSION {
            return Err(TraceError::UpgradeRequired {
                found: version,
                supported: TRACE_VERSION,
            });
        }
        if version > TRACE_VERSION {
            return Err(TraceError::UnsupportedVersion {
                found: version,
                supported: TRACE_VERSION,
            });
        }
        let mut config_hash = [0u8; 32];
        config_hash.copy_from_slice(&head[CONFIG_HASH_OFFSET..CHECKSUM_OFFSET]);
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(&head[CHECKSUM_OFFSET..TRACE_HEADER_BYTES]);
        let header = TraceHeader {
            rules_version: word(RULES_VERSION_OFFSET),
            first_tick: word(FIRST_TICK_OFFSET),
            tick_count: word(TICK_COUNT_OFFSET),
            boid_count: word(BOID_COUNT_OFFSET),
            slot_count: word(SLOT_COUNT_OFFSET),
            config_hash,
        };
        if header.first_tick.checked_add(header.tick_count).is_none() {
            return Err(corrupted(format!(
                "{} ticks from tick {} run past the last tick there is",
                header.tick_count, header.first_tick
            )));
        }
        if header.boid_count > migratory_kernel::BOID_COUNT_MAX
            || header.slot_count > migratory_kernel::CLIENT_SLOTS_MAX
        {
            return Err(corrupted(format!(
                "{} boids and {} slots per tick are past the kernel's limits",
                header.boid_count, header.slot_count
            )));
        }
        Ok(TraceReader {
            buf: vec![0; header.frame_bytes()],
            previous: vec![0; header.frame_bytes()],
            xored: vec![0; header.frame_bytes()],
            header,
            decoder: zstd::Decoder::new(file)?,
            checksum,
            hasher: blake3::Hasher::new(),
            read: 0,
        })
    }

    /// The next frame into `frame` (false after the last one, once the checksum held).
    pub fn next_into(&mut self, frame: &mut TraceFrame) -> Result<bool, TraceError> {
        if self.read == self.header.tick_count {
            if *self.hasher.finalize().as_bytes() != self.checksum {
                return Err(corrupted("the frames do not match the header's checksum"));
            }
            return Ok(false);
        }
        self.decoder
            .read_exact(&mut self.xored)
            .map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => corrupted(format!(
                    "it ends after {} of its {} ticks",
                    self.read, self.header.tick_count
                )),
                _ => corrupted(format!("frame {} does not decompress: {e}", self.read)),
            })?;
        std::mem::swap(&mut self.buf, &mut self.previous);
        predict(
            Way::FromResidual,
            &self.xored,
            &self.previous,
            &mut self.buf,
            self.header.boid_count as usize,
        );
        self.hasher.update(&self.buf);
        let b = &self.buf;
        frame.tick = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let expected = self.header.first_tick + self.read;
        if frame.tick != expected {
            return Err(corrupted(format!(
                "frame {} is of tick {}, not {expected}",
                self.read, frame.tick
            )));
        }
        let boids_end = 4 + self.header.boid_count as usize * BOID_BYTES;
        frame.boids.clear();
        frame
            .boids
            .extend(b[4..boids_end].chunks_exact(BOID_BYTES).map(|r| Boid {
                x_mm: i32::from_le_bytes([r[0], r[1], r[2], r[3]]),
                y_mm: i32::from_le_bytes([r[4], r[5], r[6], r[7]]),
                vx: i16::from_le_bytes([r[8], r[9]]),
                vy: i16::from_le_bytes([r[10], r[11]]),
            }));
        frame.players.clear();
        frame.players.extend(
            b[boids_end..]
                .chunks_exact(PLAYER_RECORD_BYTES)
                .map(|r| Player::from_le_bytes(r.try_into().unwrap_or(&[0; PLAYER_RECORD_BYTES]))),
        );
        self.read += 1;
        Ok(true)
    }
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// A boid record's fields, wrapping: (x, y, vx, vy).
fn boid_at(b: &[u8], at: usize) -> (u32, u32, u16, u16) {
    (
        get_u32(b, at),
        get_u32(b, at + 4),
        get_u16(b, at + 8),
        get_u16(b, at + 10),
    )
}

/// Where a boid of `previous` is predicted next: its position plus its velocity (sign
/// extended), its velocity unchanged.
fn predicted(previous: &[u8], at: usize) -> (u32, u32, u16, u16) {
    let (x, y, vx, vy) = boid_at(previous, at);
    let ext = |v: u16| v as i16 as i32 as u32;
    (x.wrapping_add(ext(vx)), y.wrapping_add(ext(vy)), vx, vy)
}

fn put_boid(out: &mut [u8], at: usize, (x, y, vx, vy): (u32, u32, u16, u16)) {
    out[at..at + 4].copy_from_slice(&x.to_le_bytes());
    out[at + 4..at + 8].copy_from_slice(&y.to_le_bytes());
    out[at + 8..at + 10].copy_from_slice(&vx.to_le_bytes());
    out[at + 10..at + 12].copy_from_slice(&vy.to_le_bytes());
}

/// Whether `predict` takes a frame to its residual or back.
#[derive(Clone, Copy)]
enum Way {
    ToResidual,
    FromResidual,
}

/// `frame` as stored (its residual from the prediction out of `previous`, module doc), or
/// back: the same walk, subtracting the prediction one way and adding it the other.
fn predict(way: Way, input: &[u8], previous: &[u8], out: &mut [u8], boids: usize) {
    let op = |a: u32, b: u32| match way {
        Way::ToResidual => a.wrapping_sub(b),
        Way::FromResidual => a.wrapping_add(b),
    };
    let op16 = |a: u16, b: u16| op(a.into(), b.into()) as u16;
    out[..4].copy_from_slice(&op(get_u32(input, 0), get_u32(previous, 0)).to_le_bytes());
    for k in 0..boids {
        let at = 4 + k * BOID_BYTES;
        let (x, y, vx, vy) = boid_at(input, at);
        let (px, py, pvx, pvy) = predicted(previous, at);
        put_boid(out, at, (op(x, px), op(y, py), op16(vx, pvx), op16(vy, pvy)));
    }
    let rest = 4 + boids * BOID_BYTES;
    for ((o, a), b) in out[rest..].iter_mut().zip(&input[rest..]).zip(&previous[rest..]) {
        *o = a ^ b;
    }
}
