//! Terrain on the wire: the static heightfield as one TERRAIN message or as TERRAIN_HEADER plus
//! TERRAIN_CHUNK messages, and the client-side reassembly of them.
//!
//! The server encodes once at startup ([`encode`]) and sends the same bytes to every client after
//! WELCOME. The byte layouts are specified in `net/TERRAIN_WIRE.md`, which browser clients code
//! against: a change to a layout here must change that document and [`WIRE_VERSION`] with it.
//!
//! Decoding ([`TerrainAssembler`]) treats its input as untrusted: every code, length and count is
//! checked before it is used, and what it allocates only grows with the data actually received, so
//! a short hostile header cannot make a client reserve the largest grid the format allows.

use std::borrow::Cow;
use std::io::Read;

use migratory_kernel::Terrain;
use serde::Deserialize;
use thiserror::Error;

/// A whole grid in one message.
pub const MSG_TERRAIN: u8 = 0x03;
/// One run of whole rows of a chunked grid.
pub const MSG_TERRAIN_CHUNK: u8 = 0x04;
/// Announces a chunked grid; the chunks follow in order.
pub const MSG_TERRAIN_HEADER: u8 = 0x05;

/// Layout version, byte 1 of every terrain message.
pub const WIRE_VERSION: u8 = 1;

/// Widest grid a decoder accepts. It is the kernel's own limit, so no real world is refused,
/// and it bounds what a hostile header can make a client decompress.
pub const MAX_CELLS: u32 = migratory_kernel::TERRAIN_GRID_CELLS_MAX;

/// Bytes before the payload of TERRAIN, and the first bytes of TERRAIN_HEADER.
const GRID_HEADER_LEN: usize = 72;
/// TERRAIN_HEADER is the grid header plus chunk count and rows per chunk, and nothing else.
const TERRAIN_HEADER_LEN: usize = GRID_HEADER_LEN + 8;
/// Bytes before the payload of TERRAIN_CHUNK; a multiple of 8 so a browser can view an
/// uncompressed payload as a typed array in place.
const CHUNK_HEADER_LEN: usize = 24;

/// zstd's own default: the grid is encoded once per server start, so speed matters little.
const ZSTD_LEVEL: i32 = 3;

const Q_MAX: f64 = 65535.0;

/// Height samples on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE-754 binary32, metres.
    F32,
    /// Quantised to 0..=65535 over a min/max range in metres.
    Uint16,
    /// IEEE-754 binary64, metres (exact: every millimetre height is h_mm / 1000).
    F64,
}

impl Dtype {
    /// The config spelling, also what a WELCOME message can carry.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Uint16 => "uint16",
            Dtype::F64 => "f64",
        }
    }

    /// Bytes per sample on the wire.
    pub fn sample_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Uint16 => 2,
            Dtype::F64 => 8,
        }
    }

    fn code(self) -> u8 {
        match self {
            Dtype::F32 => 0,
            Dtype::Uint16 => 1,
            Dtype::F64 => 2,
        }
    }

    fn from_code(code: u8) -> Option<Dtype> {
        match code {
            0 => Some(Dtype::F32),
            1 => Some(Dtype::Uint16),
            2 => Some(Dtype::F64),
            _ => None,
        }
    }
}

/// Codec for the grid payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The server's choice, currently zstd. Never on the wire.
    Auto,
    Zstd,
    /// Needs the cargo feature `terrain-lz4`.
    Lz4,
    None,
}

impl Compression {
    /// The config spelling, also what a WELCOME message can carry.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Auto => "auto",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
            Compression::None => "none",
        }
    }

    /// The codec `auto` stands for; every other value is itself.
    pub fn resolve(self) -> Compression {
        match self {
            Compression::Auto => Compression::Zstd,
            c => c,
        }
    }

    fn code(self) -> u8 {
        match self.resolve() {
            Compression::None => 0,
            Compression::Zstd => 1,
            // Auto resolved above; listed so the match stays exhaustive without a wildcard.
            Compression::Lz4 | Compression::Auto => 2,
        }
    }

    fn from_code(code: u8) -> Option<Compression> {
        match code {
            0 => Some(Compression::None),
            1 => Some(Compression::Zstd),
            2 => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// Where the uint16 range comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantizationRange {
    /// The grid's own min and max.
    Auto,
    /// `quantization_min` / `quantization_max`; heights outside are clamped.
    Fixed,
}

/// `[server.terrain_wire]`. Key names follow the reference Python server.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerrainWireConfig {
    pub dtype: Dtype,
    pub compression: Compression,
    /// Deliver chunked when the whole grid's compressed payload is at least this many bytes.
    pub chunk_transport_threshold_bytes: u64,
    /// Uncompressed bytes per chunk (whole rows; at least one row even if a row is larger).
    pub chunk_target_bytes: u64,
    pub quantization_range: QuantizationRange,
    /// Metres; required with `quantization_range = "fixed"`, refused otherwise.
    pub quantization_min: Option<f64>,
    /// Metres; required with `quantization_range = "fixed"`, refused otherwise.
    pub quantization_max: Option<f64>,
}

impl Default for TerrainWireConfig {
    fn default() -> Self {
        TerrainWireConfig {
            dtype: Dtype::F32,
            compression: Compression::Auto,
            chunk_transport_threshold_bytes: 4_194_304,
            chunk_target_bytes: 1_048_576,
            quantization_range: QuantizationRange::Auto,
            quantization_min: None,
            quantization_max: None,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum TerrainWireError {
    #[error("server.terrain_wire.{key}: {reason}")]
    Config { key: &'static str, reason: String },
    #[error("terrain message malformed: {0}")]
    Malformed(String),
}

fn config_err(key: &'static str, reason: impl Into<String>) -> TerrainWireError {
    TerrainWireError::Config {
        key,
        reason: reason.into(),
    }
}

fn malformed(reason: impl Into<String>) -> TerrainWireError {
    TerrainWireError::Malformed(reason.into())
}

impl TerrainWireConfig {
    /// Checks the config once at startup, so a bad value stops the server with the key's name
    /// instead of surfacing when the first client connects.
    pub fn validate(&self) -> Result<(), TerrainWireError> {
        self.validate_with(cfg!(feature = "terrain-lz4"))
    }

    /// [`validate`](Self::validate) with the lz4 feature as a parameter, so the refusal of lz4 in
    /// a build without it is testable from a build with it.
    fn validate_with(&self, lz4_built: bool) -> Result<(), TerrainWireError> {
        if self.compression == Compression::Lz4 && !lz4_built {
            return Err(config_err(
                "compression",
                "\"lz4\" needs migratory-net built with the cargo feature `terrain-lz4`, which this \
                 build lacks; use \"zstd\", \"none\" or \"auto\", or rebuild with --features terrain-lz4",
            ));
        }
        if self.chunk_target_bytes < 1024 {
            return Err(config_err(
                "chunk_target_bytes",
                format!("must be at least 1024, is {}", self.chunk_target_bytes),
            ));
        }
        if self.chunk_transport_threshold_bytes < 1 {
            return Err(config_err(
                "chunk_transport_threshold_bytes",
                "must be at least 1, is 0",
            ));
        }
        match self.quantization_range {
            QuantizationRange::Auto => {
                // Explicit beats silent: a range that would be ignored is most likely a forgotten
                // `quantization_range = "fixed"`.
                for (key, value) in [
                    ("quantization_min", self.quantization_min),
                    ("quantization_max", self.quantization_max),
                ] {
                    if value.is_some() {
                        return Err(config_err(
                            key,
                            "is set but quantization_range is \"auto\" (the grid's own min/max); \
                             remove it or set quantization_range = \"fixed\"",
                        ));
                    }
                }
            }
            QuantizationRange::Fixed => {
                if self.dtype != Dtype::Uint16 {
                    return Err(config_err(
                        "quantization_range",
                        format!(
                            "\"fixed\" only applies to dtype = \"uint16\", dtype is \"{}\"",
                            self.dtype.name()
                        ),
                    ));
                }
                let mut bounds = [0.0; 2];
                for (slot, (key, value)) in bounds.iter_mut().zip([
                    ("quantization_min", self.quantization_min),
                    ("quantization_max", self.quantization_max),
                ]) {
                    match value {
                        None => {
                            return Err(config_err(key, "is required when quantization_range = \"fixed\""))
                        }
                        Some(v) if !v.is_finite() => {
                            return Err(config_err(
                                key,
                                format!("must be a finite number of metres, is {v}"),
                            ))
                        }
                        Some(v) => *slot = v,
                    }
                }
                let [min, max] = bounds;
                if min >= max {
                    return Err(config_err(
                        "quantization_max",
                        format!("must be greater than quantization_min ({min}), is {max}"),
                    ));
                }
                if !(max - min).is_finite() {
                    return Err(config_err(
                        "quantization_max",
                        format!("quantization_max - quantization_min overflows ({max} - {min})"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What the WELCOME message announces about the terrain (the server serialises it).
#[derive(Clone, Debug, PartialEq)]
pub struct TerrainDescriptor {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: Dtype,
    /// Resolved: never `Auto`.
    pub compression: Compression,
    pub chunked: bool,
    /// Number of TERRAIN_CHUNK messages; 0 when the grid goes as one TERRAIN message.
    pub chunk_count: u32,
    /// Sum of the lengths of all messages.
    pub total_bytes: u64,
    /// `Terrain::content_hash()`.
    pub content_hash: [u8; 32],
}

/// The encoded messages, each a complete binary WebSocket message starting with its type byte:
/// either `[TERRAIN]` or `[TERRAIN_HEADER, TERRAIN_CHUNK 0, TERRAIN_CHUNK 1, ...]`.
#[derive(Clone, Debug)]
pub struct TerrainMessages {
    pub descriptor: TerrainDescriptor,
    pub messages: Vec<Vec<u8>>,
}

/// A grid as a client reassembled it.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedTerrain {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: Dtype,
    /// Row-major (`y * cells + x`), in metres, as decoded from the wire dtype.
    pub heights_m: Vec<f64>,
    /// The uint16 range (min, max) in metres; `None` for f32 / f64.
    pub quantization: Option<(f64, f64)>,
}

/// Transform applied to each payload before compression (see TERRAIN_WIRE.md, "Filter").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filter {
    None,
    /// Per-row horizontal delta of the samples as unsigned integers, then a byte-plane split.
    DeltaPlanes,
}

impl Filter {
    fn code(self) -> u8 {
        match self {
            Filter::None => 0,
            Filter::DeltaPlanes => 1,
        }
    }

    fn from_code(code: u8) -> Option<Filter> {
        match code {
            0 => Some(Filter::None),
            1 => Some(Filter::DeltaPlanes),
            _ => None,
        }
    }
}

/// Raw heightmaps barely compress (zstd ~1.09 on f32/u16); the delta makes neighbouring samples
/// small and the plane split groups their mostly-zero high bytes, which is what the codecs find.
/// Uncompressed payloads stay unfiltered so a client can view them as a typed array directly.
fn filter_for(dtype: Dtype, compression: Compression) -> Filter {
    match (compression, dtype) {
        (Compression::None, _) => Filter::None,
        (_, Dtype::Uint16 | Dtype::F32) => Filter::DeltaPlanes,
        // 64-bit deltas would need BigInt in a browser for a small gain; f64 is the exact,
        // large-anyway option.
        (_, Dtype::F64) => Filter::None,
    }
}

/// Fields shared by TERRAIN and TERRAIN_HEADER (bytes 0..72).
#[derive(Clone, Debug, PartialEq)]
struct GridHeader {
    dtype: Dtype,
    compression: Compression,
    filter: Filter,
    cells: u32,
    cell_size_mm: u32,
    quantization: Option<(f64, f64)>,
    grid_bytes: u64,
    checksum: [u8; 32],
}

impl GridHeader {
    fn row_bytes(&self) -> usize {
        self.cells as usize * self.dtype.sample_bytes()
    }

    fn write(&self, msg_type: u8, out: &mut Vec<u8>) {
        out.push(msg_type);
        out.push(WIRE_VERSION);
        out.push(self.dtype.code());
        out.push(self.compression.code());
        out.push(self.filter.code());
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&self.cells.to_le_bytes());
        out.extend_from_slice(&self.cell_size_mm.to_le_bytes());
        let (min, max) = self.quantization.unwrap_or((0.0, 0.0));
        out.extend_from_slice(&min.to_le_bytes());
        out.extend_from_slice(&max.to_le_bytes());
        out.extend_from_slice(&self.grid_bytes.to_le_bytes());
        out.extend_from_slice(&self.checksum);
    }

    /// Parses bytes 0..72 of a TERRAIN or TERRAIN_HEADER whose type byte the caller matched.
    fn parse(msg: &[u8], what: &str) -> Result<GridHeader, TerrainWireError> {
        check_version(msg, what)?;
        if msg.len() < GRID_HEADER_LEN {
            return Err(malformed(format!(
                "{what} is {} bytes, its header alone is {GRID_HEADER_LEN}",
                msg.len()
            )));
        }
        let dtype = Dtype::from_code(msg[2])
            .ok_or_else(|| malformed(format!("{what}: unknown dtype code {}", msg[2])))?;
        let compression = Compression::from_code(msg[3])
            .ok_or_else(|| malformed(format!("{what}: unknown compression code {}", msg[3])))?;
        if compression == Compression::Lz4 && !cfg!(feature = "terrain-lz4") {
            return Err(malformed(format!(
                "{what} uses lz4, which this build cannot decode (cargo feature terrain-lz4)"
            )));
        }
        let filter = Filter::from_code(msg[4])
            .ok_or_else(|| malformed(format!("{what}: unknown filter code {}", msg[4])))?;
        if msg[5..8] != [0; 3] {
            return Err(malformed(format!("{what}: reserved bytes 5..8 are not zero")));
        }
        let cells = le_u32(msg, 8);
        if !(1..=MAX_CELLS).contains(&cells) {
            return Err(malformed(format!(
                "{what}: cells is {cells}, must be 1..={MAX_CELLS}"
            )));
        }
        let cell_size_mm = le_u32(msg, 12);
        if cell_size_mm == 0 {
            return Err(malformed(format!("{what}: cell_size_mm is 0")));
        }
        let (min, max) = (le_f64(msg, 16), le_f64(msg, 24));
        let quantization = if dtype == Dtype::Uint16 {
            if !(min.is_finite() && max.is_finite() && min <= max && (max - min).is_finite()) {
                return Err(malformed(format!(
                    "{what}: uint16 range {min}..{max} is not a finite, ordered range"
                )));
            }
            Some((min, max))
        } else {
            if msg[16..32] != [0; 16] {
                return Err(malformed(format!(
                    "{what}: quantization bytes 16..32 must be zero for dtype {}",
                    dtype.name()
                )));
            }
            None
        };
        let grid_bytes = le_u64(msg, 32);
        let expected = u64::from(cells) * u64::from(cells) * dtype.sample_bytes() as u64;
        if grid_bytes != expected {
            return Err(malformed(format!(
                "{what}: grid_bytes is {grid_bytes}, a {cells}x{cells} {} grid is {expected}",
                dtype.name()
            )));
        }
        let mut checksum = [0; 32];
        checksum.copy_from_slice(&msg[40..72]);
        Ok(GridHeader {
            dtype,
            compression,
            filter,
            cells,
            cell_size_mm,
            quantization,
            grid_bytes,
            checksum,
        })
    }
}

fn check_version(msg: &[u8], what: &str) -> Result<(), TerrainWireError> {
    // The version comes before any length check: a later version may be laid out differently.
    match msg.get(1) {
        None => Err(malformed(format!("{what} is 1 byte, ends before its version"))),
        Some(&WIRE_VERSION) => Ok(()),
        Some(v) => Err(malformed(format!(
            "{what} has layout version {v}, this decoder reads {WIRE_VERSION}"
        ))),
    }
}

// The readers below are only called on offsets the caller has length-checked.
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le_f64(b: &[u8], at: usize) -> f64 {
    f64::from_bits(le_u64(b, at))
}

fn metres(h_mm: i32) -> f64 {
    f64::from(h_mm) / 1000.0
}

/// `q = round((h - min) / (max - min) * 65535)`, clamped. A flat auto range (min == max) maps
/// everything to 0, which decodes back to min exactly.
fn quantize(h_m: f64, min: f64, max: f64) -> u16 {
    let span = max - min;
    if span <= 0.0 {
        return 0;
    }
    ((h_m - min) / span * Q_MAX).round().clamp(0.0, Q_MAX) as u16
}

/// `h = min + q * (max - min) / 65535`, evaluated left to right so a JavaScript client doing
/// the same double-precision operations gets identical values.
fn dequantize(q: u16, min: f64, max: f64) -> f64 {
    min + f64::from(q) * (max - min) / Q_MAX
}

/// The grid in the wire dtype: little-endian samples, row-major.
fn grid_samples(heights_mm: &[i32], dtype: Dtype, quantization: Option<(f64, f64)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(heights_mm.len() * dtype.sample_bytes());
    match dtype {
        Dtype::F32 => {
            for &h in heights_mm {
                out.extend_from_slice(&(metres(h) as f32).to_le_bytes());
            }
        }
        Dtype::Uint16 => {
            let (min, max) = quantization.unwrap_or((0.0, 0.0));
            for &h in heights_mm {
                out.extend_from_slice(&quantize(metres(h), min, max).to_le_bytes());
            }
        }
        Dtype::F64 => {
            for &h in heights_mm {
                out.extend_from_slice(&metres(h).to_le_bytes());
            }
        }
    }
    out
}

fn mask(width: usize) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    }
}

/// Forward filter on a whole number of rows (`raw.len()` a multiple of `row_bytes`, which is a
/// multiple of `width`): per row, each sample minus its left neighbour (the first minus 0),
/// modulo 2^(8 * width); then byte plane b holds byte b of every delta.
fn filter_rows(raw: &[u8], row_bytes: usize, width: usize) -> Vec<u8> {
    let n = raw.len() / width;
    let per_row = row_bytes / width;
    let m = mask(width);
    let mut out = vec![0; raw.len()];
    let mut prev = 0u64;
    for (i, s) in raw.chunks_exact(width).enumerate() {
        if i % per_row == 0 {
            prev = 0;
        }
        let v = s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        let d = v.wrapping_sub(prev) & m;
        prev = v;
        for b in 0..width {
            out[b * n + i] = (d >> (8 * b)) as u8;
        }
    }
    out
}

/// Inverse of [`filter_rows`]; same length preconditions, which the decoder checks first.
fn unfilter_rows(filtered: &[u8], row_bytes: usize, width: usize) -> Vec<u8> {
    let n = filtered.len() / width;
    let per_row = row_bytes / width;
    let m = mask(width);
    let mut out = vec![0; filtered.len()];
    let mut prev = 0u64;
    for (i, s) in out.chunks_exact_mut(width).enumerate() {
        if i % per_row == 0 {
            prev = 0;
        }
        let d = (0..width).fold(0u64, |acc, b| acc | (u64::from(filtered[b * n + i]) << (8 * b)));
        let v = prev.wrapping_add(d) & m;
        prev = v;
        s.copy_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

/// Filters then compresses one payload of whole rows; borrows when neither applies, so an
/// uncompressed grid is not copied on its way into the message.
fn encode_payload<'a>(
    compression: Compression,
    filter: Filter,
    rows: &'a [u8],
    row_bytes: usize,
    width: usize,
) -> Result<Cow<'a, [u8]>, TerrainWireError> {
    let filtered = match filter {
        Filter::None => Cow::Borrowed(rows),
        Filter::DeltaPlanes => Cow::Owned(filter_rows(rows, row_bytes, width)),
    };
    match compression.resolve() {
        Compression::None | Compression::Auto => Ok(filtered),
        c => compress(c, &filtered).map(Cow::Owned),
    }
}

fn compress(compression: Compression, data: &[u8]) -> Result<Vec<u8>, TerrainWireError> {
    match compression.resolve() {
        Compression::None | Compression::Auto => Ok(data.to_vec()),
        Compression::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL)
            .map_err(|e| config_err("compression", format!("zstd failed on the terrain grid: {e}"))),
        Compression::Lz4 => compress_lz4(data),
    }
}

#[cfg(feature = "terrain-lz4")]
fn compress_lz4(data: &[u8]) -> Result<Vec<u8>, TerrainWireError> {
    Ok(lz4_flex::block::compress_prepend_size(data))
}

#[cfg(not(feature = "terrain-lz4"))]
fn compress_lz4(_data: &[u8]) -> Result<Vec<u8>, TerrainWireError> {
    Err(config_err(
        "compression",
        "\"lz4\" needs migratory-net built with the cargo feature `terrain-lz4`",
    ))
}

/// Decompresses a payload that must come to exactly `expected` bytes.
fn decompress(
    compression: Compression,
    payload: &[u8],
    expected: usize,
    what: &str,
) -> Result<Vec<u8>, TerrainWireError> {
    match compression {
        Compression::None | Compression::Auto => {
            if payload.len() != expected {
                return Err(malformed(format!(
                    "{what}: uncompressed payload is {} bytes, expected {expected}",
                    payload.len()
                )));
            }
            Ok(payload.to_vec())
        }
        Compression::Zstd => decompress_zstd(payload, expected, what),
        Compression::Lz4 => decompress_lz4(payload, expected, what),
    }
}

fn decompress_zstd(payload: &[u8], expected: usize, what: &str) -> Result<Vec<u8>, TerrainWireError> {
    let zstd_err = |e: std::io::Error| malformed(format!("{what}: zstd: {e}"));
    let mut decoder = zstd::stream::read::Decoder::with_buffer(payload)
        .map_err(zstd_err)?
        .single_frame();
    // Reading through `take` grows the buffer with the output actually produced, so a small
    // frame cannot make us reserve `expected` bytes; the extra byte detects a too-long frame.
    let mut out = Vec::new();
    (&mut decoder)
        .take(expected as u64 + 1)
        .read_to_end(&mut out)
        .map_err(zstd_err)?;
    if out.len() != expected {
        return Err(malformed(format!(
            "{what}: zstd frame decodes to {}{} bytes, expected {expected}",
            if out.len() > expected { "more than " } else { "" },
            out.len().min(expected)
        )));
    }
    let rest = decoder.finish();
    if !rest.is_empty() {
        return Err(malformed(format!(
            "{what}: {} bytes after the zstd frame",
            rest.len()
        )));
    }
    Ok(out)
}

#[cfg(feature = "terrain-lz4")]
fn decompress_lz4(payload: &[u8], expected: usize, what: &str) -> Result<Vec<u8>, TerrainWireError> {
    let Some((size, block)) = payload.split_first_chunk::<4>() else {
        return Err(malformed(format!(
            "{what}: lz4 payload shorter than its 4-byte size"
        )));
    };
    let size = u32::from_le_bytes(*size) as usize;
    if size != expected {
        return Err(malformed(format!(
            "{what}: lz4 size prefix is {size}, expected {expected}"
        )));
    }
    // An LZ4 block expands at most ~255x (one length byte per 255 output bytes), so a larger
    // claim is malformed; checking it before allocating keeps a tiny block from reserving a grid.
    if expected as u64 > block.len() as u64 * 256 + 64 {
        return Err(malformed(format!(
            "{what}: lz4 block of {} bytes cannot decode to {expected}",
            block.len()
        )));
    }
    let mut out = vec![0; expected];
    let n = lz4_flex::block::decompress_into(block, &mut out)
        .map_err(|e| malformed(format!("{what}: lz4: {e}")))?;
    if n != expected {
        return Err(malformed(format!(
            "{what}: lz4 block decodes to {n} bytes, expected {expected}"
        )));
    }
    Ok(out)
}

#[cfg(not(feature = "terrain-lz4"))]
fn decompress_lz4(_payload: &[u8], _expected: usize, what: &str) -> Result<Vec<u8>, TerrainWireError> {
    // GridHeader::parse already refuses lz4 in this build; kept as an error, not a panic.
    Err(malformed(format!(
        "{what} uses lz4, which this build cannot decode (cargo feature terrain-lz4)"
    )))
}

/// Encodes the terrain into the messages every client receives after WELCOME.
pub fn encode(terrain: &Terrain, cfg: &TerrainWireConfig) -> Result<TerrainMessages, TerrainWireError> {
    cfg.validate()?;
    let cells = terrain.cells();
    if !(1..=MAX_CELLS).contains(&cells) {
        // Unreachable for a terrain built from a validated WorldConfig; refused rather than sent
        // because every decoder would reject it.
        return Err(malformed(format!(
            "the terrain is {cells} cells wide, the wire format carries 1..={MAX_CELLS}"
        )));
    }
    let dtype = cfg.dtype;
    let compression = cfg.compression.resolve();
    let heights = terrain.heights_mm();
    let quantization = match (dtype, cfg.quantization_range) {
        (Dtype::Uint16, QuantizationRange::Fixed) => Some((
            cfg.quantization_min.unwrap_or(0.0),
            cfg.quantization_max.unwrap_or(0.0),
        )),
        (Dtype::Uint16, QuantizationRange::Auto) => {
            let min = heights.iter().copied().min().unwrap_or(0);
            let max = heights.iter().copied().max().unwrap_or(0);
            Some((metres(min), metres(max)))
        }
        _ => None,
    };
    let raw = grid_samples(heights, dtype, quantization);
    let width = dtype.sample_bytes();
    let row_bytes = cells as usize * width;
    let filter = filter_for(dtype, compression);
    let header = GridHeader {
        dtype,
        compression,
        filter,
        cells,
        cell_size_mm: terrain.cell_size_mm(),
        quantization,
        grid_bytes: raw.len() as u64,
        checksum: *blake3::hash(&raw).as_bytes(),
    };

    // The threshold is on the compressed grid (as in the reference server), so the whole grid is
    // compressed first even when it then goes out in chunks.
    let whole = encode_payload(compression, filter, &raw, row_bytes, width)?;
    let whole_len = whole.len();
    let mut messages = Vec::new();
    let mut chunk_count = 0u32;
    if (whole_len as u64) < cfg.chunk_transport_threshold_bytes {
        let mut msg = Vec::with_capacity(GRID_HEADER_LEN + whole.len());
        header.write(MSG_TERRAIN, &mut msg);
        msg.extend_from_slice(&whole);
        messages.push(msg);
    } else {
        drop(whole);
        let rows_per_chunk = (cfg.chunk_target_bytes / row_bytes as u64).clamp(1, u64::from(cells)) as u32;
        chunk_count = cells.div_ceil(rows_per_chunk);
        let mut msg = Vec::with_capacity(TERRAIN_HEADER_LEN);
        header.write(MSG_TERRAIN_HEADER, &mut msg);
        msg.extend_from_slice(&chunk_count.to_le_bytes());
        msg.extend_from_slice(&rows_per_chunk.to_le_bytes());
        messages.push(msg);
        for (index, rows) in raw.chunks(rows_per_chunk as usize * row_bytes).enumerate() {
            let index = index as u32;
            let row_count = (rows.len() / row_bytes) as u32;
            let payload = encode_payload(compression, filter, rows, row_bytes, width)?;
            let mut msg = Vec::with_capacity(CHUNK_HEADER_LEN + payload.len());
            msg.push(MSG_TERRAIN_CHUNK);
            msg.push(WIRE_VERSION);
            msg.extend_from_slice(&[0; 2]);
            msg.extend_from_slice(&index.to_le_bytes());
            msg.extend_from_slice(&chunk_count.to_le_bytes());
            msg.extend_from_slice(&(index * rows_per_chunk).to_le_bytes());
            msg.extend_from_slice(&row_count.to_le_bytes());
            msg.extend_from_slice(&(rows.len() as u32).to_le_bytes());
            msg.extend_from_slice(&payload);
            messages.push(msg);
        }
    }
    let total_bytes = messages.iter().map(|m| m.len() as u64).sum();
    tracing::debug!(
        cells,
        dtype = dtype.name(),
        compression = compression.name(),
        grid_bytes = raw.len(),
        compressed_bytes = whole_len,
        chunk_count,
        total_bytes,
        "terrain encoded for the wire"
    );
    Ok(TerrainMessages {
        descriptor: TerrainDescriptor {
            cells,
            cell_size_mm: terrain.cell_size_mm(),
            dtype,
            compression,
            chunked: chunk_count > 0,
            chunk_count,
            total_bytes,
            content_hash: terrain.content_hash(),
        },
        messages,
    })
}

/// A chunked grid whose header arrived and whose chunks are still coming.
#[derive(Debug)]
struct Pending {
    header: GridHeader,
    chunk_count: u32,
    rows_per_chunk: u32,
    next: u32,
    raw: Vec<u8>,
}

/// Client-side reassembly (used by tests, bots and documented for the browser): feed messages in
/// order. After any error the assembler forgets a partial grid, so the next message must start a
/// new delivery (TERRAIN or TERRAIN_HEADER).
#[derive(Debug, Default)]
pub struct TerrainAssembler {
    pending: Option<Pending>,
}

impl TerrainAssembler {
    pub fn new() -> Self {
        TerrainAssembler::default()
    }

    /// Takes the next terrain message; returns the grid once it is complete.
    pub fn push(&mut self, message: &[u8]) -> Result<Option<DecodedTerrain>, TerrainWireError> {
        let result = self.push_inner(message);
        if result.is_err() {
            self.pending = None;
        }
        result
    }

    fn push_inner(&mut self, message: &[u8]) -> Result<Option<DecodedTerrain>, TerrainWireError> {
        let Some(&msg_type) = message.first() else {
            return Err(malformed("empty message"));
        };
        match msg_type {
            MSG_TERRAIN => {
                self.refuse_if_pending("TERRAIN")?;
                let header = GridHeader::parse(message, "TERRAIN")?;
                let raw = decode_payload(&header, &message[GRID_HEADER_LEN..], header.grid_bytes, "TERRAIN")?;
                finish(&header, &raw).map(Some)
            }
            MSG_TERRAIN_HEADER => {
                self.refuse_if_pending("TERRAIN_HEADER")?;
                let header = GridHeader::parse(message, "TERRAIN_HEADER")?;
                if message.len() != TERRAIN_HEADER_LEN {
                    return Err(malformed(format!(
                        "TERRAIN_HEADER is {} bytes, must be {TERRAIN_HEADER_LEN}",
                        message.len()
                    )));
                }
                let chunk_count = le_u32(message, 72);
                let rows_per_chunk = le_u32(message, 76);
                if !(1..=header.cells).contains(&rows_per_chunk) {
                    return Err(malformed(format!(
                        "TERRAIN_HEADER: rows_per_chunk is {rows_per_chunk}, must be 1..={}",
                        header.cells
                    )));
                }
                let expected = header.cells.div_ceil(rows_per_chunk);
                if chunk_count != expected {
                    return Err(malformed(format!(
                        "TERRAIN_HEADER: chunk_count is {chunk_count}, {} rows in chunks of {rows_per_chunk} \
                         make {expected}",
                        header.cells
                    )));
                }
                self.pending = Some(Pending {
                    header,
                    chunk_count,
                    rows_per_chunk,
                    next: 0,
                    raw: Vec::new(),
                });
                Ok(None)
            }
            MSG_TERRAIN_CHUNK => self.push_chunk(message),
            other => Err(malformed(format!("0x{other:02x} is not a terrain message type"))),
        }
    }

    fn refuse_if_pending(&self, what: &str) -> Result<(), TerrainWireError> {
        match &self.pending {
            Some(p) => Err(malformed(format!(
                "{what} arrived while chunk {} of {} was expected",
                p.next, p.chunk_count
            ))),
            None => Ok(()),
        }
    }

    fn push_chunk(&mut self, msg: &[u8]) -> Result<Option<DecodedTerrain>, TerrainWireError> {
        let Some(p) = self.pending.as_mut() else {
            return Err(malformed("TERRAIN_CHUNK without a preceding TERRAIN_HEADER"));
        };
        check_version(msg, "TERRAIN_CHUNK")?;
        if msg.len() < CHUNK_HEADER_LEN {
            return Err(malformed(format!(
                "TERRAIN_CHUNK is {} bytes, its header alone is {CHUNK_HEADER_LEN}",
                msg.len()
            )));
        }
        if msg[2..4] != [0; 2] {
            return Err(malformed("TERRAIN_CHUNK: reserved bytes 2..4 are not zero"));
        }
        let (index, count) = (le_u32(msg, 4), le_u32(msg, 8));
        let (row_start, row_count, raw_bytes) = (le_u32(msg, 12), le_u32(msg, 16), le_u32(msg, 20));
        if count != p.chunk_count {
            return Err(malformed(format!(
                "TERRAIN_CHUNK says {count} chunks, TERRAIN_HEADER said {}",
                p.chunk_count
            )));
        }
        if index != p.next {
            let why = if index < p.next {
                "duplicate or out of order"
            } else {
                "chunks missing"
            };
            return Err(malformed(format!(
                "TERRAIN_CHUNK {index} arrived, chunk {} was expected ({why})",
                p.next
            )));
        }
        // index < chunk_count <= cells, so these products stay far inside u64.
        let want_start = u64::from(index) * u64::from(p.rows_per_chunk);
        let want_rows = u64::from(p.rows_per_chunk).min(u64::from(p.header.cells) - want_start);
        if u64::from(row_start) != want_start || u64::from(row_count) != want_rows {
            return Err(malformed(format!(
                "TERRAIN_CHUNK {index} covers rows {row_start}+{row_count}, expected {want_start}+{want_rows}"
            )));
        }
        let want_bytes = want_rows * p.header.row_bytes() as u64;
        if u64::from(raw_bytes) != want_bytes {
            return Err(malformed(format!(
                "TERRAIN_CHUNK {index}: raw_bytes is {raw_bytes}, {want_rows} rows are {want_bytes}"
            )));
        }
        let what = format!("TERRAIN_CHUNK {index}");
        let rows = decode_payload(&p.header, &msg[CHUNK_HEADER_LEN..], want_bytes, &what)?;
        p.raw.extend_from_slice(&rows);
        p.next += 1;
        if p.next < p.chunk_count {
            return Ok(None);
        }
        let done = self.pending.take();
        match done {
            Some(p) => finish(&p.header, &p.raw).map(Some),
            None => Err(malformed("internal: pending grid vanished")),
        }
    }
}

/// Decompresses and unfilters one payload of whole rows, `expected` bytes once decoded.
fn decode_payload(
    header: &GridHeader,
    payload: &[u8],
    expected: u64,
    what: &str,
) -> Result<Vec<u8>, TerrainWireError> {
    let expected = usize::try_from(expected)
        .map_err(|_| malformed(format!("{what}: {expected} bytes do not fit this platform")))?;
    let filtered = decompress(header.compression, payload, expected, what)?;
    // `expected` is a whole number of rows (checked against the header), which the inverse filter
    // relies on.
    Ok(match header.filter {
        Filter::None => filtered,
        Filter::DeltaPlanes => unfilter_rows(&filtered, header.row_bytes(), header.dtype.sample_bytes()),
    })
}

/// Verifies the checksum of the complete grid and converts it to metres.
fn finish(header: &GridHeader, raw: &[u8]) -> Result<DecodedTerrain, TerrainWireError> {
    if raw.len() as u64 != header.grid_bytes {
        return Err(malformed(format!(
            "reassembled grid is {} bytes, expected {}",
            raw.len(),
            header.grid_bytes
        )));
    }
    if blake3::hash(raw).as_bytes() != &header.checksum {
        return Err(malformed(
            "blake3 checksum of the reassembled grid does not match",
        ));
    }
    let cells = header.cells as usize;
    let not_finite = |i: usize| {
        malformed(format!(
            "height at cell ({}, {}) is not finite",
            i % cells,
            i / cells
        ))
    };
    let heights_m = match header.dtype {
        Dtype::F32 => raw
            .chunks_exact(4)
            .enumerate()
            .map(|(i, b)| {
                let mut a = [0; 4];
                a.copy_from_slice(b);
                let h = f64::from(f32::from_le_bytes(a));
                if h.is_finite() {
                    Ok(h)
                } else {
                    Err(not_finite(i))
                }
            })
            .collect::<Result<Vec<_>, _>>()?,
        Dtype::Uint16 => {
            let (min, max) = header.quantization.unwrap_or((0.0, 0.0));
            raw.chunks_exact(2)
                .map(|b| dequantize(u16::from_le_bytes([b[0], b[1]]), min, max))
                .collect()
        }
        Dtype::F64 => raw
            .chunks_exact(8)
            .enumerate()
            .map(|(i, b)| {
                let mut a = [0; 8];
                a.copy_from_slice(b);
                let h = f64::from_le_bytes(a);
                if h.is_finite() {
                    Ok(h)
                } else {
                    Err(not_finite(i))
                }
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(DecodedTerrain {
        cells: header.cells,
        cell_size_mm: header.cell_size_mm,
        dtype: header.dtype,
        heights_m,
        quantization: header.quantization,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use migratory_kernel::WorldConfig;
    use proptest::prelude::*;

    fn small_world() -> WorldConfig {
        WorldConfig {
            world_size_mm: 192_000,
            terrain_grid_cells: 192,
            terrain_cell_size_mm: 1000,
            hunting_field_radius_mm: 20_000,
            town_radius_mm: 15_000,
            view_radius_mm: 30_000,
            ..WorldConfig::default()
        }
    }

    fn small_terrain() -> Terrain {
        Terrain::generate(&small_world()).expect("small terrain generates")
    }

    fn world_of(cells: u32) -> WorldConfig {
        WorldConfig {
            world_size_mm: cells * 1000,
            terrain_grid_cells: cells,
            terrain_cell_size_mm: 1000,
            ..small_world()
        }
    }

    /// Smooth enough to be mostly land, varied enough that every sample is not the same.
    fn patterned_terrain(cells: u32) -> Terrain {
        let tri = |v: u32| (i64::from(v % 2000) - 1000).unsigned_abs() as i32;
        let heights = (0..cells * cells)
            .map(|i| {
                let (x, y) = (i % cells, i / cells);
                25_000 + tri(x * 3 + y * 5) + tri(x * 7)
            })
            .collect();
        Terrain::from_heights(&world_of(cells), heights).expect("patterned terrain builds")
    }

    fn cfg(dtype: Dtype, compression: Compression) -> TerrainWireConfig {
        TerrainWireConfig {
            dtype,
            compression,
            ..TerrainWireConfig::default()
        }
    }

    fn compressions() -> Vec<Compression> {
        #[allow(unused_mut)]
        let mut all = vec![Compression::Auto, Compression::Zstd, Compression::None];
        #[cfg(feature = "terrain-lz4")]
        all.push(Compression::Lz4);
        all
    }

    fn assemble(msgs: &TerrainMessages) -> DecodedTerrain {
        let mut asm = TerrainAssembler::new();
        let (last, init) = msgs.messages.split_last().expect("at least one message");
        for (i, m) in init.iter().enumerate() {
            assert_eq!(asm.push(m), Ok(None), "message {i} completed the grid early");
        }
        asm.push(last)
            .expect("last message decodes")
            .expect("last message completes the grid")
    }

    fn grid_range_m(t: &Terrain) -> (f64, f64) {
        let h = t.heights_mm();
        (metres(*h.iter().min().unwrap()), metres(*h.iter().max().unwrap()))
    }

    fn config_key(r: Result<(), TerrainWireError>) -> &'static str {
        match r {
            Err(TerrainWireError::Config { key, .. }) => key,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_every_dtype_compression_and_range() {
        let t = small_terrain();
        let (gmin, gmax) = grid_range_m(&t);
        let span = gmax - gmin;
        let (lo, hi) = (gmin + span * 0.25, gmax - span * 0.25);
        let mut clamped = (0, 0);
        for dtype in [Dtype::F32, Dtype::Uint16, Dtype::F64] {
            for compression in compressions() {
                for range in [QuantizationRange::Auto, QuantizationRange::Fixed] {
                    let mut c = cfg(dtype, compression);
                    c.quantization_range = range;
                    if range == QuantizationRange::Fixed {
                        c.quantization_min = Some(lo);
                        c.quantization_max = Some(hi);
                    }
                    let label = format!("{dtype:?}/{compression:?}/{range:?}");
                    if range == QuantizationRange::Fixed && dtype != Dtype::Uint16 {
                        let err = encode(&t, &c).map(|_| ()).unwrap_err();
                        assert!(
                            matches!(
                                err,
                                TerrainWireError::Config {
                                    key: "quantization_range",
                                    ..
                                }
                            ),
                            "{label}: {err:?}"
                        );
                        continue;
                    }
                    let msgs = encode(&t, &c).unwrap_or_else(|e| panic!("{label}: {e}"));
                    let d = &msgs.descriptor;
                    assert_eq!((d.cells, d.cell_size_mm, d.dtype), (192, 1000, dtype), "{label}");
                    assert_eq!(d.compression, compression.resolve(), "{label}");
                    assert_ne!(d.compression, Compression::Auto, "{label}");
                    assert!(!d.chunked && d.chunk_count == 0, "{label}");
                    assert_eq!(msgs.messages.len(), 1, "{label}");
                    assert_eq!(msgs.messages[0][0], MSG_TERRAIN, "{label}");
                    assert_eq!(d.total_bytes, msgs.messages[0].len() as u64, "{label}");
                    assert_eq!(d.content_hash, t.content_hash(), "{label}");

                    let out = assemble(&msgs);
                    assert_eq!(
                        (out.cells, out.cell_size_mm, out.dtype),
                        (192, 1000, dtype),
                        "{label}"
                    );
                    assert_eq!(out.heights_m.len(), t.heights_mm().len(), "{label}");
                    let (qmin, qmax) = if range == QuantizationRange::Fixed {
                        (lo, hi)
                    } else {
                        (gmin, gmax)
                    };
                    let expect_q = (dtype == Dtype::Uint16).then_some((qmin, qmax));
                    assert_eq!(out.quantization, expect_q, "{label}");
                    let step = (qmax - qmin) / 65535.0;
                    for (i, (&h_mm, &got)) in t.heights_mm().iter().zip(&out.heights_m).enumerate() {
                        let want = metres(h_mm);
                        let ok = match dtype {
                            Dtype::F64 => got == want,
                            Dtype::F32 => (got - want).abs() <= want.abs() * f64::from(f32::EPSILON) / 2.0,
                            Dtype::Uint16 if want < qmin => {
                                clamped.0 += 1;
                                (got - qmin).abs() <= 1e-9
                            }
                            Dtype::Uint16 if want > qmax => {
                                clamped.1 += 1;
                                (got - qmax).abs() <= 1e-9
                            }
                            Dtype::Uint16 => (got - want).abs() <= step / 2.0 + 1e-9,
                        };
                        assert!(ok, "{label}: cell {i}: sent {want} m, decoded {got} m");
                    }
                }
            }
        }
        // The fixed range sits inside the grid's range, so both clamps must have been exercised.
        assert!(clamped.0 > 0 && clamped.1 > 0, "{clamped:?}");
    }

    #[test]
    fn flat_grid_quantises_to_its_only_height() {
        let t = Terrain::from_heights(&small_world(), vec![30_000; 192 * 192]).unwrap();
        let out = assemble(&encode(&t, &cfg(Dtype::Uint16, Compression::Zstd)).unwrap());
        assert_eq!(out.quantization, Some((30.0, 30.0)));
        assert!(out.heights_m.iter().all(|&h| h == 30.0));
    }

    /// Reads a TERRAIN message by the offsets TERRAIN_WIRE.md gives, with its own inverse filter,
    /// so the document and the code cannot drift apart silently.
    #[test]
    fn single_shot_layout_matches_the_document() {
        let t = small_terrain();
        let (gmin, gmax) = grid_range_m(&t);
        let msgs = encode(&t, &cfg(Dtype::Uint16, Compression::Zstd)).unwrap();
        let m = &msgs.messages[0];
        assert_eq!(&m[0..8], &[MSG_TERRAIN, 1, 1, 1, 1, 0, 0, 0]);
        assert_eq!(le_u32(m, 8), 192);
        assert_eq!(le_u32(m, 12), 1000);
        assert_eq!((le_f64(m, 16), le_f64(m, 24)), (gmin, gmax));
        let n = 192 * 192;
        assert_eq!(le_u64(m, 32), n as u64 * 2);
        let planes = zstd::bulk::decompress(&m[72..], n * 2).unwrap();
        let mut q = vec![0u16; n];
        for i in 0..n {
            let d = u16::from(planes[i]) | (u16::from(planes[n + i]) << 8);
            q[i] = if i % 192 == 0 { d } else { q[i - 1].wrapping_add(d) };
        }
        let want: Vec<u16> = t
            .heights_mm()
            .iter()
            .map(|&h| quantize(metres(h), gmin, gmax))
            .collect();
        assert_eq!(q, want);
        let bytes: Vec<u8> = q.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(&m[40..72], blake3::hash(&bytes).as_bytes());

        // Uncompressed payloads are unfiltered: the samples themselves, at byte 72.
        let plain = encode(&t, &cfg(Dtype::F32, Compression::None)).unwrap();
        let p = &plain.messages[0];
        assert_eq!(&p[0..5], &[MSG_TERRAIN, 1, 0, 0, 0]);
        assert_eq!(&p[16..32], &[0; 16]);
        assert_eq!(p.len(), 72 + n * 4);
        let first = f32::from_le_bytes([p[72], p[73], p[74], p[75]]);
        assert_eq!(first, metres(t.heights_mm()[0]) as f32);
    }

    #[cfg(feature = "terrain-lz4")]
    #[test]
    fn lz4_payload_is_a_size_prepended_block() {
        let t = small_terrain();
        let m = &encode(&t, &cfg(Dtype::F64, Compression::Lz4)).unwrap().messages[0];
        assert_eq!(m[3], 2);
        assert_eq!(m[4], 0, "f64 goes unfiltered");
        let n = 192 * 192 * 8;
        assert_eq!(le_u32(m, 72) as usize, n);
        let raw = lz4_flex::block::decompress(&m[76..], n).unwrap();
        assert_eq!(raw[0..8], metres(t.heights_mm()[0]).to_le_bytes());
    }

    #[cfg(not(feature = "terrain-lz4"))]
    #[test]
    fn lz4_is_refused_by_encoder_and_decoder_without_the_feature() {
        let t = small_terrain();
        let err = encode(&t, &cfg(Dtype::F32, Compression::Lz4))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(config_key(Err(err)), "compression");
        let mut m = encode(&t, &cfg(Dtype::F32, Compression::Zstd))
            .unwrap()
            .messages
            .remove(0);
        m[3] = 2;
        expect_malformed(TerrainAssembler::new().push(&m), "cannot decode");
    }

    /// The default world's terrain, where TERRAIN_WIRE.md's ratios were measured.
    #[test]
    fn filter_round_trips_and_helps_zstd() {
        let t = Terrain::generate(&WorldConfig::default()).unwrap();
        let (gmin, gmax) = grid_range_m(&t);
        let row = t.cells() as usize;
        for dtype in [Dtype::F32, Dtype::Uint16, Dtype::F64] {
            let raw = grid_samples(t.heights_mm(), dtype, Some((gmin, gmax)));
            let w = dtype.sample_bytes();
            let f = filter_rows(&raw, row * w, w);
            assert_ne!(f, raw);
            assert_eq!(unfilter_rows(&f, row * w, w), raw, "{dtype:?}");
            if filter_for(dtype, Compression::Zstd) == Filter::DeltaPlanes {
                let with = zstd::bulk::compress(&f, ZSTD_LEVEL).unwrap().len();
                let without = zstd::bulk::compress(&raw, ZSTD_LEVEL).unwrap().len();
                assert!(
                    with * 5 < without * 4,
                    "{dtype:?}: filtered {with} vs raw {without}"
                );
            }
        }
    }

    /// Chunk header fields by the document's offsets.
    fn chunk_fields(m: &[u8]) -> (u32, u32, u32, u32, u32) {
        (
            le_u32(m, 4),
            le_u32(m, 8),
            le_u32(m, 12),
            le_u32(m, 16),
            le_u32(m, 20),
        )
    }

    #[test]
    fn large_grid_goes_chunked_on_whole_rows() {
        let t = patterned_terrain(2048);
        // f32 uncompressed: 16 MiB >= the 4 MiB default threshold.
        let c = cfg(Dtype::F32, Compression::None);
        let msgs = encode(&t, &c).unwrap();
        let d = &msgs.descriptor;
        let row_bytes = 2048 * 4;
        let rows_per_chunk = 1_048_576 / row_bytes;
        assert!(d.chunked);
        assert_eq!(d.chunk_count, 16);
        assert_eq!(msgs.messages.len(), 17);
        assert_eq!(
            d.total_bytes,
            msgs.messages.iter().map(|m| m.len() as u64).sum::<u64>()
        );
        let h = &msgs.messages[0];
        assert_eq!((h[0], h.len()), (MSG_TERRAIN_HEADER, 80));
        assert_eq!((le_u32(h, 72), le_u32(h, 76)), (16, rows_per_chunk as u32));
        for (i, m) in msgs.messages[1..].iter().enumerate() {
            let (index, count, row_start, row_count, raw_bytes) = chunk_fields(m);
            assert_eq!(m[0], MSG_TERRAIN_CHUNK);
            assert_eq!((index, count), (i as u32, 16));
            assert_eq!(
                (row_start, row_count),
                (i as u32 * rows_per_chunk as u32, rows_per_chunk as u32)
            );
            assert!(u64::from(raw_bytes) <= c.chunk_target_bytes);
            assert_eq!(m.len(), 24 + raw_bytes as usize);
        }
        let out = assemble(&msgs);
        let want: Vec<f64> = t
            .heights_mm()
            .iter()
            .map(|&h| f64::from(metres(h) as f32))
            .collect();
        assert!(out.heights_m == want, "chunked reassembly differs");

        // Compressed, with a partial last chunk: 2048 rows in chunks of 73 rows make 29.
        let c = TerrainWireConfig {
            chunk_transport_threshold_bytes: 1,
            chunk_target_bytes: 73 * 2048 * 2 + 100,
            ..cfg(Dtype::Uint16, Compression::Zstd)
        };
        let msgs = encode(&t, &c).unwrap();
        assert_eq!(msgs.descriptor.chunk_count, 29);
        let last = chunk_fields(msgs.messages.last().unwrap());
        assert_eq!(
            last,
            (28, 29, 28 * 73, 2048 - 28 * 73, (2048 - 28 * 73) * 2048 * 2)
        );
        for m in &msgs.messages[1..] {
            assert!(u64::from(chunk_fields(m).4) <= c.chunk_target_bytes);
        }
        let out = assemble(&msgs);
        let (gmin, gmax) = grid_range_m(&t);
        let step = (gmax - gmin) / 65535.0;
        for (&h, &got) in t.heights_mm().iter().zip(&out.heights_m) {
            assert!((got - metres(h)).abs() <= step / 2.0 + 1e-9);
        }
    }

    #[test]
    fn threshold_is_on_the_compressed_size() {
        let t = small_terrain();
        let c = cfg(Dtype::F32, Compression::Zstd);
        let single = encode(&t, &c).unwrap();
        let compressed = (single.messages[0].len() - 72) as u64;
        let at = TerrainWireConfig {
            chunk_transport_threshold_bytes: compressed,
            ..c.clone()
        };
        assert!(encode(&t, &at).unwrap().descriptor.chunked);
        let above = TerrainWireConfig {
            chunk_transport_threshold_bytes: compressed + 1,
            ..c
        };
        assert!(!encode(&t, &above).unwrap().descriptor.chunked);
    }

    #[test]
    fn a_row_larger_than_the_target_is_one_chunk() {
        let t = small_terrain();
        // An f64 row of 192 cells is 1536 bytes, above the 1024-byte target.
        let c = TerrainWireConfig {
            chunk_transport_threshold_bytes: 1,
            chunk_target_bytes: 1024,
            ..cfg(Dtype::F64, Compression::Zstd)
        };
        let msgs = encode(&t, &c).unwrap();
        assert_eq!(msgs.descriptor.chunk_count, 192);
        for (i, m) in msgs.messages[1..].iter().enumerate() {
            assert_eq!(chunk_fields(m), (i as u32, 192, i as u32, 1, 1536));
        }
        let out = assemble(&msgs);
        assert!(out
            .heights_m
            .iter()
            .zip(t.heights_mm())
            .all(|(&g, &h)| g == metres(h)));
    }

    /// 20 chunks of 10 rows (the last of 2) of a uint16 zstd grid.
    fn chunked_small() -> TerrainMessages {
        let c = TerrainWireConfig {
            chunk_transport_threshold_bytes: 1,
            chunk_target_bytes: 10 * 192 * 2,
            ..cfg(Dtype::Uint16, Compression::Zstd)
        };
        let msgs = encode(&small_terrain(), &c).unwrap();
        assert_eq!(msgs.descriptor.chunk_count, 20);
        msgs
    }

    fn push_all(
        asm: &mut TerrainAssembler,
        msgs: &[&Vec<u8>],
    ) -> Result<Option<DecodedTerrain>, TerrainWireError> {
        let mut last = Ok(None);
        for m in msgs {
            last = asm.push(m);
            if last.is_err() {
                break;
            }
        }
        last
    }

    fn expect_malformed(r: Result<Option<DecodedTerrain>, TerrainWireError>, needle: &str) {
        match r {
            Err(TerrainWireError::Malformed(why)) => {
                assert!(why.contains(needle), "{why:?} lacks {needle:?}")
            }
            other => panic!("expected a Malformed error containing {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn chunks_out_of_order_missing_or_duplicated_are_errors() {
        let msgs = chunked_small();
        let m: Vec<&Vec<u8>> = msgs.messages.iter().collect();
        let fresh = |seq: &[&Vec<u8>]| push_all(&mut TerrainAssembler::new(), seq);

        expect_malformed(fresh(&[m[0], m[2]]), "chunk 0 was expected");
        expect_malformed(fresh(&[m[0], m[1], m[3]]), "chunks missing");
        expect_malformed(fresh(&[m[0], m[1], m[1]]), "duplicate");
        expect_malformed(fresh(&[m[1]]), "without a preceding TERRAIN_HEADER");
        expect_malformed(fresh(&[m[0], m[1], m[0]]), "TERRAIN_HEADER arrived while chunk 1");
        let single = encode(&small_terrain(), &TerrainWireConfig::default()).unwrap();
        expect_malformed(
            fresh(&[m[0], &single.messages[0]]),
            "TERRAIN arrived while chunk 0",
        );
        // All but the last chunk: incomplete, not yet an error.
        assert_eq!(fresh(&m[..20]), Ok(None));
        // A chunk from another delivery (different row split) does not fit this header.
        let other = encode(
            &small_terrain(),
            &TerrainWireConfig {
                chunk_target_bytes: 5 * 192 * 2,
                ..chunked_small_cfg()
            },
        )
        .unwrap();
        expect_malformed(fresh(&[m[0], &other.messages[1]]), "chunks");

        // After an error the assembler starts over and takes a whole delivery.
        let mut asm = TerrainAssembler::new();
        assert!(push_all(&mut asm, &[m[0], m[2]]).is_err());
        let done = push_all(&mut asm, &m).unwrap().expect("complete after a restart");
        assert_eq!(done, assemble(&msgs));
        expect_malformed(fresh(&[&vec![0x02, 1, 2, 3]]), "not a terrain message type");
        expect_malformed(fresh(&[&Vec::new()]), "empty");
    }

    fn chunked_small_cfg() -> TerrainWireConfig {
        TerrainWireConfig {
            chunk_transport_threshold_bytes: 1,
            chunk_target_bytes: 10 * 192 * 2,
            ..cfg(Dtype::Uint16, Compression::Zstd)
        }
    }

    #[test]
    fn truncated_messages_are_errors() {
        let t = small_terrain();
        let mut cases: Vec<(Vec<Vec<u8>>, &str)> = Vec::new();
        for compression in compressions() {
            cases.push((
                encode(&t, &cfg(Dtype::Uint16, compression)).unwrap().messages,
                "single",
            ));
        }
        cases.push((chunked_small().messages, "chunked"));
        for (msgs, label) in cases {
            for (k, msg) in msgs.iter().enumerate() {
                let lens = (0..msg.len().min(120))
                    .chain((120..msg.len()).step_by(997))
                    .chain([msg.len() - 1]);
                for len in lens {
                    let mut asm = TerrainAssembler::new();
                    let before: Vec<&Vec<u8>> = msgs[..k].iter().collect();
                    push_all(&mut asm, &before).unwrap();
                    let r = asm.push(&msg[..len]);
                    assert!(
                        matches!(r, Err(TerrainWireError::Malformed(_))),
                        "{label}: message {k} cut to {len} of {} bytes gave {r:?}",
                        msg.len()
                    );
                }
            }
        }
    }

    #[test]
    fn corrupted_payloads_and_fields_are_errors() {
        let t = small_terrain();
        let plain = encode(&t, &cfg(Dtype::F32, Compression::None))
            .unwrap()
            .messages
            .remove(0);
        let mut bad = plain.clone();
        bad[72 + 1000] ^= 0x40;
        expect_malformed(TerrainAssembler::new().push(&bad), "checksum");
        let mut longer = plain.clone();
        longer.push(0);
        expect_malformed(TerrainAssembler::new().push(&longer), "uncompressed payload");

        let z = encode(&t, &cfg(Dtype::F32, Compression::Zstd))
            .unwrap()
            .messages
            .remove(0);
        let mut trailing = z.clone();
        trailing.extend_from_slice(&[0; 5]);
        expect_malformed(TerrainAssembler::new().push(&trailing), "after the zstd frame");

        let field = |at: usize, v: u8, needle: &str| {
            let mut m = z.clone();
            m[at] = v;
            expect_malformed(TerrainAssembler::new().push(&m), needle);
        };
        field(1, 2, "layout version 2");
        field(2, 9, "unknown dtype");
        field(3, 9, "unknown compression");
        field(4, 9, "unknown filter");
        field(6, 1, "reserved");
        field(9, 0x40, "cells");
        field(17, 1, "quantization bytes");
        field(33, 1, "grid_bytes");
        field(50, 0, "checksum");

        // A NaN height in an f64 grid (with a matching checksum) is refused.
        let mut nan = encode(&t, &cfg(Dtype::F64, Compression::None))
            .unwrap()
            .messages
            .remove(0);
        nan[72..80].copy_from_slice(&f64::NAN.to_le_bytes());
        let sum = *blake3::hash(&nan[72..]).as_bytes();
        nan[40..72].copy_from_slice(&sum);
        expect_malformed(TerrainAssembler::new().push(&nan), "not finite");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = TerrainAssembler::new().push(&bytes);
        }

        #[test]
        fn random_bodies_behind_valid_type_and_version_never_panic(
            ty in prop::sample::select(vec![MSG_TERRAIN, MSG_TERRAIN_CHUNK, MSG_TERRAIN_HEADER]),
            body in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut msg = vec![ty, WIRE_VERSION];
            msg.extend_from_slice(&body);
            let _ = TerrainAssembler::new().push(&msg);
            // Also behind a real header, so chunk parsing is reached.
            let mut asm = TerrainAssembler::new();
            asm.push(&CHUNKED.messages[0]).unwrap();
            let _ = asm.push(&msg);
        }

        /// A valid lz4 TERRAIN header and size prefix in front of a random block reaches the lz4
        /// decoder itself, which must report errors rather than read out of bounds.
        #[cfg(feature = "terrain-lz4")]
        #[test]
        fn random_lz4_blocks_never_panic(block in prop::collection::vec(any::<u8>(), 0..2000)) {
            let mut msg = SINGLE_LZ4.messages[0][..76].to_vec();
            msg.extend_from_slice(&block);
            prop_assert!(TerrainAssembler::new().push(&msg).is_err());
        }

        #[test]
        fn mutated_deliveries_never_panic(
            which in 0usize..4,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut msgs = match which {
                0 => SINGLE_ZSTD.messages.clone(),
                1 => SINGLE_NONE_F32.messages.clone(),
                #[cfg(feature = "terrain-lz4")]
                2 => SINGLE_LZ4.messages.clone(),
                _ => CHUNKED.messages[..4].to_vec(),
            };
            for (at, v) in &edits {
                let k = at.index(msgs.len());
                let m = &mut msgs[k];
                let i = at.index(m.len());
                m[i] = *v;
            }
            let mut asm = TerrainAssembler::new();
            for m in &msgs {
                let _ = asm.push(m);
            }
        }
    }

    #[cfg(feature = "terrain-lz4")]
    static SINGLE_LZ4: std::sync::LazyLock<TerrainMessages> =
        std::sync::LazyLock::new(|| encode(&small_terrain(), &cfg(Dtype::Uint16, Compression::Lz4)).unwrap());
    static CHUNKED: std::sync::LazyLock<TerrainMessages> = std::sync::LazyLock::new(chunked_small);
    static SINGLE_ZSTD: std::sync::LazyLock<TerrainMessages> = std::sync::LazyLock::new(|| {
        encode(&small_terrain(), &cfg(Dtype::Uint16, Compression::Zstd)).unwrap()
    });
    static SINGLE_NONE_F32: std::sync::LazyLock<TerrainMessages> =
        std::sync::LazyLock::new(|| encode(&small_terrain(), &cfg(Dtype::F32, Compression::None)).unwrap());

    #[test]
    fn validate_accepts_the_defaults_and_a_fixed_range() {
        assert_eq!(TerrainWireConfig::default().validate(), Ok(()));
        let fixed = TerrainWireConfig {
            dtype: Dtype::Uint16,
            quantization_range: QuantizationRange::Fixed,
            quantization_min: Some(-5.0),
            quantization_max: Some(120.0),
            ..TerrainWireConfig::default()
        };
        assert_eq!(fixed.validate(), Ok(()));
    }

    #[test]
    fn validate_refuses_bad_ranges() {
        let fixed = |min: Option<f64>, max: Option<f64>| TerrainWireConfig {
            dtype: Dtype::Uint16,
            quantization_range: QuantizationRange::Fixed,
            quantization_min: min,
            quantization_max: max,
            ..TerrainWireConfig::default()
        };
        assert_eq!(config_key(fixed(None, Some(1.0)).validate()), "quantization_min");
        assert_eq!(config_key(fixed(Some(0.0), None).validate()), "quantization_max");
        assert_eq!(config_key(fixed(None, None).validate()), "quantization_min");
        assert_eq!(
            config_key(fixed(Some(5.0), Some(5.0)).validate()),
            "quantization_max"
        );
        assert_eq!(
            config_key(fixed(Some(6.0), Some(5.0)).validate()),
            "quantization_max"
        );
        assert_eq!(
            config_key(fixed(Some(f64::NAN), Some(5.0)).validate()),
            "quantization_min"
        );
        assert_eq!(
            config_key(fixed(Some(0.0), Some(f64::NAN)).validate()),
            "quantization_max"
        );
        assert_eq!(
            config_key(fixed(Some(0.0), Some(f64::INFINITY)).validate()),
            "quantization_max"
        );
        assert_eq!(
            config_key(fixed(Some(-f64::MAX), Some(f64::MAX)).validate()),
            "quantization_max"
        );

        let auto_with = |min: Option<f64>, max: Option<f64>| TerrainWireConfig {
            dtype: Dtype::Uint16,
            quantization_min: min,
            quantization_max: max,
            ..TerrainWireConfig::default()
        };
        assert_eq!(
            config_key(auto_with(Some(0.0), None).validate()),
            "quantization_min"
        );
        assert_eq!(
            config_key(auto_with(None, Some(9.0)).validate()),
            "quantization_max"
        );

        let f32_fixed = TerrainWireConfig {
            dtype: Dtype::F32,
            ..fixed(Some(0.0), Some(1.0))
        };
        assert_eq!(config_key(f32_fixed.validate()), "quantization_range");
    }

    #[test]
    fn validate_refuses_bad_sizes() {
        let small = TerrainWireConfig {
            chunk_target_bytes: 1023,
            ..TerrainWireConfig::default()
        };
        assert_eq!(config_key(small.validate()), "chunk_target_bytes");
        let zero = TerrainWireConfig {
            chunk_transport_threshold_bytes: 0,
            ..TerrainWireConfig::default()
        };
        assert_eq!(config_key(zero.validate()), "chunk_transport_threshold_bytes");
        // encode validates too, so a server that skipped validate() still gets the error.
        let err = encode(&small_terrain(), &small).map(|_| ()).unwrap_err();
        assert_eq!(config_key(Err(err)), "chunk_target_bytes");
    }

    #[test]
    fn lz4_is_refused_in_a_build_without_the_feature() {
        let lz4 = cfg(Dtype::F32, Compression::Lz4);
        assert_eq!(config_key(lz4.validate_with(false)), "compression");
        let err = lz4.validate_with(false).unwrap_err().to_string();
        assert!(err.starts_with("server.terrain_wire.compression: "), "{err}");
        assert!(err.contains("terrain-lz4"), "{err}");
        assert_eq!(lz4.validate_with(true), Ok(()));
        assert_eq!(cfg(Dtype::F32, Compression::Zstd).validate_with(false), Ok(()));
        assert_eq!(lz4.validate().is_ok(), cfg!(feature = "terrain-lz4"));
    }

    #[test]
    fn toml_keys_and_values() {
        let parsed: TerrainWireConfig = toml::from_str(
            r#"
            dtype = "uint16"
            compression = "lz4"
            chunk_transport_threshold_bytes = 1000
            chunk_target_bytes = 2048
            quantization_range = "fixed"
            quantization_min = -10
            quantization_max = 100.5
            "#,
        )
        .unwrap();
        assert_eq!(
            parsed,
            TerrainWireConfig {
                dtype: Dtype::Uint16,
                compression: Compression::Lz4,
                chunk_transport_threshold_bytes: 1000,
                chunk_target_bytes: 2048,
                quantization_range: QuantizationRange::Fixed,
                quantization_min: Some(-10.0),
                quantization_max: Some(100.5),
            }
        );
        assert_eq!(
            toml::from_str::<TerrainWireConfig>("").unwrap(),
            TerrainWireConfig::default()
        );
        let d = TerrainWireConfig::default();
        assert_eq!(
            (
                d.dtype,
                d.compression,
                d.chunk_transport_threshold_bytes,
                d.chunk_target_bytes
            ),
            (Dtype::F32, Compression::Auto, 4_194_304, 1_048_576)
        );
        assert_eq!(
            (d.quantization_range, d.quantization_min, d.quantization_max),
            (QuantizationRange::Auto, None, None)
        );

        let unknown = toml::from_str::<TerrainWireConfig>("bogus = 1")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("bogus"), "{unknown}");
        let f16 = toml::from_str::<TerrainWireConfig>("dtype = \"f16\"")
            .unwrap_err()
            .to_string();
        assert!(f16.contains("f16"), "{f16}");
        for (key, bad) in [("compression", "\"gzip\""), ("quantization_range", "\"manual\"")] {
            assert!(
                toml::from_str::<TerrainWireConfig>(&format!("{key} = {bad}")).is_err(),
                "{key}"
            );
        }
    }
}
