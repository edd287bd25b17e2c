//! The byte layout shared by TERRAIN and TERRAIN_HEADER (the grid header, bytes 0..72),
//! the chunk header size, and the height quantization (`net/wire/TERRAIN_WIRE.md`).

use super::config::{Compression, Dtype};
use super::filter::Filter;
use super::{malformed, TerrainDecodeError, MAX_CELLS, WIRE_VERSION};

/// The grid header TERRAIN and TERRAIN_HEADER start with (`TERRAIN_WIRE.md`), every field
/// little-endian; TERRAIN_HEADER adds two fields and ends. The page's `layout.js` carries
/// these offsets, generated from here.
///
/// | offset | size | field                                                    |
/// |--------|------|----------------------------------------------------------|
/// | 0      | 1    | message type                                             |
/// | 1      | 1    | layout version (`WIRE_VERSION`)                          |
/// | 2      | 1    | dtype code                                               |
/// | 3      | 1    | compression code                                         |
/// | 4      | 1    | filter code                                              |
/// | 5      | 3    | reserved, zero                                           |
/// | 8      | 4    | cells (the grid is cells x cells)                        |
/// | 12     | 4    | cell size, mm                                            |
/// | 16     | 8    | uint16 quantization min, f64 (zero for float grids)      |
/// | 24     | 8    | uint16 quantization max, f64 (zero for float grids)      |
/// | 32     | 8    | grid bytes, u64                                          |
/// | 40     | 32   | blake3 of the raw grid                                   |
/// | 72     | 4    | TERRAIN_HEADER only: chunk count                         |
/// | 76     | 4    | TERRAIN_HEADER only: rows per chunk                      |
pub mod grid_layout {
    pub const TYPE: usize = 0;
    pub const VERSION: usize = 1;
    pub const DTYPE: usize = 2;
    pub const COMPRESSION: usize = 3;
    pub const FILTER: usize = 4;
    pub const RESERVED: usize = 5;
    pub const CELLS: usize = 8;
    pub const CELL_SIZE_MM: usize = 12;
    pub const Q_MIN: usize = 16;
    pub const Q_MAX: usize = 24;
    pub const GRID_BYTES: usize = 32;
    pub const CHECKSUM: usize = 40;
    /// Bytes before the payload of TERRAIN, and the first bytes of TERRAIN_HEADER.
    pub const BYTES: usize = 72;
    pub const CHUNK_COUNT: usize = 72;
    pub const ROWS_PER_CHUNK: usize = 76;
    /// TERRAIN_HEADER: the grid header, chunk count and rows per chunk, and nothing else.
    pub const HEADER_MESSAGE_BYTES: usize = 80;
    const _: () = assert!(TYPE + 1 == VERSION && VERSION + 1 == DTYPE && DTYPE + 1 == COMPRESSION);
    const _: () = assert!(COMPRESSION + 1 == FILTER && FILTER + 1 == RESERVED && RESERVED + 3 == CELLS);
    const _: () = assert!(CELLS + 4 == CELL_SIZE_MM && CELL_SIZE_MM + 4 == Q_MIN && Q_MIN + 8 == Q_MAX);
    const _: () = assert!(Q_MAX + 8 == GRID_BYTES && GRID_BYTES + 8 == CHECKSUM && CHECKSUM + 32 == BYTES);
    const _: () = assert!(BYTES == CHUNK_COUNT && CHUNK_COUNT + 4 == ROWS_PER_CHUNK);
    const _: () = assert!(ROWS_PER_CHUNK + 4 == HEADER_MESSAGE_BYTES);
}

/// TERRAIN_CHUNK's header, little-endian; the payload follows at `BYTES`, a multiple of 8
/// so a browser can view an uncompressed payload as a typed array in place.
///
/// | offset | size | field                                                    |
/// |--------|------|----------------------------------------------------------|
/// | 0      | 1    | message type                                             |
/// | 1      | 1    | layout version (`WIRE_VERSION`)                          |
/// | 2      | 2    | reserved, zero                                           |
/// | 4      | 4    | chunk index                                              |
/// | 8      | 4    | chunk count                                              |
/// | 12     | 4    | first row                                                |
/// | 16     | 4    | row count                                                |
/// | 20     | 4    | raw bytes (before compression)                           |
pub mod chunk_layout {
    pub const TYPE: usize = 0;
    pub const VERSION: usize = 1;
    pub const RESERVED: usize = 2;
    pub const INDEX: usize = 4;
    pub const COUNT: usize = 8;
    pub const ROW_START: usize = 12;
    pub const ROW_COUNT: usize = 16;
    pub const RAW_BYTES: usize = 20;
    pub const BYTES: usize = 24;
    const _: () = assert!(TYPE + 1 == VERSION && VERSION + 1 == RESERVED && RESERVED + 2 == INDEX);
    const _: () = assert!(INDEX + 4 == COUNT && COUNT + 4 == ROW_START && ROW_START + 4 == ROW_COUNT);
    const _: () = assert!(ROW_COUNT + 4 == RAW_BYTES && RAW_BYTES + 4 == BYTES && BYTES % 8 == 0);
}

/// Bytes before the payload of TERRAIN, and the first bytes of TERRAIN_HEADER.
pub(super) const GRID_HEADER_LEN: usize = grid_layout::BYTES;
/// TERRAIN_HEADER is the grid header plus chunk count and rows per chunk, and nothing else.
pub(super) const TERRAIN_HEADER_LEN: usize = grid_layout::HEADER_MESSAGE_BYTES;
/// Bytes before the payload of TERRAIN_CHUNK.
pub(super) const CHUNK_HEADER_LEN: usize = chunk_layout::BYTES;

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

    /// Appends the header's bytes in `grid_layout`'s order.
    pub(super) fn write(&self, msg_type: u8, out: &mut Vec<u8>) {
        let start = out.len();
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
        debug_assert_eq!(out.len() - start, grid_layout::BYTES);
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
        use grid_layout as at;
        let dtype = Dtype::from_code(msg[at::DTYPE])
            .ok_or_else(|| malformed(format!("{what}: unknown dtype code {}", msg[at::DTYPE])))?;
        let compression = Compression::from_code(msg[at::COMPRESSION]).ok_or_else(|| {
            malformed(format!(
                "{what}: unknown compression code {}",
                msg[at::COMPRESSION]
            ))
        })?;
        if compression == Compression::Lz4 && !cfg!(feature = "terrain-lz4") {
            return Err(malformed(format!(
                "{what} uses lz4, which this build cannot decode (cargo feature terrain-lz4)"
            )));
        }
        let filter = Filter::from_code(msg[at::FILTER])
            .ok_or_else(|| malformed(format!("{what}: unknown filter code {}", msg[at::FILTER])))?;
        if msg[at::RESERVED..at::CELLS] != [0; 3] {
            return Err(malformed(format!("{what}: reserved bytes 5..8 are not zero")));
        }
        let cells = le_u32(msg, at::CELLS);
        if !(1..=MAX_CELLS).contains(&cells) {
            return Err(malformed(format!(
                "{what}: cells is {cells}, must be 1..={MAX_CELLS}"
            )));
        }
        let cell_size_mm = le_u32(msg, at::CELL_SIZE_MM);
        if cell_size_mm == 0 {
            return Err(malformed(format!("{what}: cell_size_mm is 0")));
        }
        let (min, max) = (le_f64(msg, at::Q_MIN), le_f64(msg, at::Q_MAX));
        let quantization = if dtype == Dtype::Uint16 {
            if !(min.is_finite() && max.is_finite() && min <= max && (max - min).is_finite()) {
                return Err(malformed(format!(
                    "{what}: uint16 range {min}..{max} is not a finite, ordered range"
                )));
            }
            Some((min, max))
        } else {
            if msg[at::Q_MIN..at::GRID_BYTES] != [0; 16] {
                return Err(malformed(format!(
                    "{what}: quantization bytes 16..32 must be zero for dtype {}",
                    dtype.name()
                )));
            }
            None
        };
        let grid_bytes = le_u64(msg, at::GRID_BYTES);
        let expected = u64::from(cells) * u64::from(cells) * dtype.sample_bytes() as u64;
        if grid_bytes != expected {
            return Err(malformed(format!(
                "{what}: grid_bytes is {grid_bytes}, a {cells}x{cells} {} grid is {expected}",
                dtype.name()
            )));
        }
        let mut checksum = [0; 32];
        checksum.copy_from_slice(&msg[at::CHECKSUM..at::BYTES]);
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
    match msg.get(grid_layout::VERSION) {
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
