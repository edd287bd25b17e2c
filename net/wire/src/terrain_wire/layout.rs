//! The byte layout shared by TERRAIN and TERRAIN_HEADER (the grid header, bytes 0..72),
//! the chunk header size, and the height quantization (`net/wire/TERRAIN_WIRE.md`).

use super::config::{Compression, Dtype};
use super::filter::Filter;
use super::{malformed, TerrainDecodeError, MAX_CELLS, WIRE_VERSION};

/// Bytes before the payload of TERRAIN, and the first bytes of TERRAIN_HEADER.
pub(super) const GRID_HEADER_LEN: usize = 72;
/// TERRAIN_HEADER is the grid header plus chunk count and rows per chunk, and nothing else.
pub(super) const TERRAIN_HEADER_LEN: usize = GRID_HEADER_LEN + 8;
/// Bytes before the payload of TERRAIN_CHUNK; a multiple of 8 so a browser can view an
/// uncompressed payload as a typed array in place.
pub(super) const CHUNK_HEADER_LEN: usize = 24;

pub(super) const Q_MAX: f64 = 65535.0;

/// Fields shared by TERRAIN and TERRAIN_HEADER (bytes 0..72).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct GridHeader {
    pub(super) dtype: Dtype,
    pub(super) compression: Compression,
    pub(super) filter: Filter,
    pub(super) cells: u32,
    pub(super) cell_size_mm: u32,
    pub(super) quantization: Option<(f64, f64)>,
    pub(super) grid_bytes: u64,
    pub(super) checksum: [u8; 32],
}

impl GridHeader {
    pub(super) fn row_bytes(&self) -> usize {
        self.cells as usize * self.dtype.sample_bytes()
    }

    pub(super) fn write(&self, msg_type: u8, out: &mut Vec<u8>) {
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
    pub(super) fn parse(msg: &[u8], what: &str) -> Result<GridHeader, TerrainDecodeError> {
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

pub(super) fn check_version(msg: &[u8], what: &str) -> Result<(), TerrainDecodeError> {
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
pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(super) fn le_f64(b: &[u8], at: usize) -> f64 {
    f64::from_bits(le_u64(b, at))
}

pub(super) fn metres(h_mm: i32) -> f64 {
    f64::from(h_mm) / 1000.0
}

/// `q = round((h - min) / (max - min) * 65535)`, clamped. A flat auto range (min == max) maps
/// everything to 0, which decodes back to min exactly.
pub(super) fn quantize(h_m: f64, min: f64, max: f64) -> u16 {
    let span = max - min;
    if span <= 0.0 {
        return 0;
    }
    ((h_m - min) / span * Q_MAX).round().clamp(0.0, Q_MAX) as u16
}

/// `h = min + q * (max - min) / 65535`, evaluated left to right so a JavaScript client doing
/// the same double-precision operations gets identical values.
pub(super) fn dequantize(q: u16, min: f64, max: f64) -> f64 {
    min + f64::from(q) * (max - min) / Q_MAX
}
