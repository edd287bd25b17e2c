//! The server side: the terrain encoded once at startup into the messages every client
//! receives after WELCOME.

use migratory_kernel::Terrain;

use super::compression::encode_payload;
use super::config::{config_err, Dtype, QuantizationRange, TerrainConfigError, TerrainWireConfig};
use super::filter::filter_for;
use super::layout::{metres, quantize, GridHeader, CHUNK_HEADER_LEN, GRID_HEADER_LEN, TERRAIN_HEADER_LEN};
use super::{
    TerrainDescriptor, TerrainMessages, MAX_CELLS, MSG_TERRAIN, MSG_TERRAIN_CHUNK, MSG_TERRAIN_HEADER,
    WIRE_VERSION,
};

/// The grid in the wire dtype: little-endian samples, row-major.
pub(super) fn grid_samples(heights_mm: &[i32], dtype: Dtype, quantization: Option<(f64, f64)>) -> Vec<u8> {
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

/// Encodes the terrain into the messages every client receives after WELCOME.
pub fn encode(terrain: &Terrain, cfg: &TerrainWireConfig) -> Result<TerrainMessages, TerrainConfigError> {
    cfg.validate()?;
    let cells = terrain.cells();
    if !(1..=MAX_CELLS).contains(&cells) {
        // Unreachable for a terrain built from a validated WorldConfig; refused rather than sent
        // because every decoder would reject it.
        return Err(config_err(
            "dtype",
            format!("the terrain is {cells} cells wide, the wire format carries 1..={MAX_CELLS}"),
        ));
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
        debug_assert_eq!(msg.len(), TERRAIN_HEADER_LEN);
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
            debug_assert_eq!(msg.len(), CHUNK_HEADER_LEN);
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
