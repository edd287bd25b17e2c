//! The client side: `TerrainAssembler` reassembles the terrain messages into a grid,
//! treating every byte as untrusted.

use super::compression::decode_payload;
use super::config::Dtype;
use super::layout::{
    check_version, chunk_layout, dequantize, grid_layout, le_u32, GridHeader, CHUNK_HEADER_LEN,
    GRID_HEADER_LEN, TERRAIN_HEADER_LEN,
};
use super::{
    malformed, DecodedTerrain, TerrainDecodeError, MSG_TERRAIN, MSG_TERRAIN_CHUNK, MSG_TERRAIN_HEADER,
};

/// A chunked grid whose header arrived and whose chunks are still coming.
#[derive(Debug)]
pub(super) struct Pending {
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
    pub fn push(&mut self, message: &[u8]) -> Result<Option<DecodedTerrain>, TerrainDecodeError> {
        let result = self.push_inner(message);
        if result.is_err() {
            self.pending = None;
        }
        result
    }

    pub(super) fn push_inner(
        &mut self,
        message: &[u8],
    ) -> Result<Option<DecodedTerrain>, TerrainDecodeError> {
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
                let chunk_count = le_u32(message, grid_layout::CHUNK_COUNT);
                let rows_per_chunk = le_u32(message, grid_layout::ROWS_PER_CHUNK);
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

    pub(super) fn refuse_if_pending(&self, what: &str) -> Result<(), TerrainDecodeError> {
        match &self.pending {
            Some(p) => Err(malformed(format!(
                "{what} arrived while chunk {} of {} was expected",
                p.next, p.chunk_count
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn push_chunk(&mut self, msg: &[u8]) -> Result<Option<DecodedTerrain>, TerrainDecodeError> {
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
        use chunk_layout as at;
        if msg[at::RESERVED..at::INDEX] != [0; 2] {
            return Err(malformed("TERRAIN_CHUNK: reserved bytes 2..4 are not zero"));
        }
        let (index, count) = (le_u32(msg, at::INDEX), le_u32(msg, at::COUNT));
        let (row_start, row_count, raw_bytes) = (
            le_u32(msg, at::ROW_START),
            le_u32(msg, at::ROW_COUNT),
            le_u32(msg, at::RAW_BYTES),
        );
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

/// Verifies the checksum of the complete grid and converts it to metres.
pub(super) fn finish(header: &GridHeader, raw: &[u8]) -> Result<DecodedTerrain, TerrainDecodeError> {
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
