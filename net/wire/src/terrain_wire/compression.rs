//! Payload compression (server side) and decompression (client side, bounded by the size
//! the header promises, so a hostile payload cannot make a client allocate more).

use std::borrow::Cow;
use std::io::Read;

use super::config::{config_err, Compression, TerrainConfigError};
use super::filter::{filter_rows, unfilter_rows, Filter};
use super::layout::GridHeader;
use super::{malformed, TerrainDecodeError};

/// zstd's own default: the grid is encoded once per server start, so speed matters little.
pub(super) const ZSTD_LEVEL: i32 = 3;

/// Filters then compresses one payload of whole rows; borrows when neither applies, so an
/// uncompressed grid is not copied on its way into the message.
pub(super) fn encode_payload<'a>(
    compression: Compression,
    filter: Filter,
    rows: &'a [u8],
    row_bytes: usize,
    width: usize,
) -> Result<Cow<'a, [u8]>, TerrainConfigError> {
    let filtered = match filter {
        Filter::None => Cow::Borrowed(rows),
        Filter::DeltaPlanes => Cow::Owned(filter_rows(rows, row_bytes, width)),
    };
    match compression.resolve() {
        Compression::None | Compression::Auto => Ok(filtered),
        c => compress(c, &filtered).map(Cow::Owned),
    }
}

pub(super) fn compress(compression: Compression, data: &[u8]) -> Result<Vec<u8>, TerrainConfigError> {
    match compression.resolve() {
        Compression::None | Compression::Auto => Ok(data.to_vec()),
        Compression::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL)
            .map_err(|e| config_err("compression", format!("zstd failed on the terrain grid: {e}"))),
        Compression::Lz4 => compress_lz4(data),
    }
}

#[cfg(feature = "terrain-lz4")]
pub(super) fn compress_lz4(data: &[u8]) -> Result<Vec<u8>, TerrainConfigError> {
    Ok(lz4_flex::block::compress_prepend_size(data))
}

#[cfg(not(feature = "terrain-lz4"))]
pub(super) fn compress_lz4(_data: &[u8]) -> Result<Vec<u8>, TerrainConfigError> {
    Err(config_err(
        "compression",
        "\"lz4\" needs migratory-wire built with the cargo feature `terrain-lz4`",
    ))
}

/// Decompresses a payload that must come to exactly `expected` bytes.
pub(super) fn decompress(
    compression: Compression,
    payload: &[u8],
    expected: usize,
    what: &str,
) -> Result<Vec<u8>, TerrainDecodeError> {
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

pub(super) fn decompress_zstd(
    payload: &[u8],
    expected: usize,
    what: &str,
) -> Result<Vec<u8>, TerrainDecodeError> {
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
pub(super) fn decompress_lz4(
    payload: &[u8],
    expected: usize,
    what: &str,
) -> Result<Vec<u8>, TerrainDecodeError> {
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
pub(super) fn decompress_lz4(
    _payload: &[u8],
    _expected: usize,
    what: &str,
) -> Result<Vec<u8>, TerrainDecodeError> {
    // GridHeader::parse already refuses lz4 in this build; kept as an error, not a panic.
    Err(malformed(format!(
        "{what} uses lz4, which this build cannot decode (cargo feature terrain-lz4)"
    )))
}

/// Decompresses and unfilters one payload of whole rows, `expected` bytes once decoded.
pub(super) fn decode_payload(
    header: &GridHeader,
    payload: &[u8],
    expected: u64,
    what: &str,
) -> Result<Vec<u8>, TerrainDecodeError> {
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
