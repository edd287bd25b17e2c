//! The payload filter: per-row deltas split into byte planes, which is what lets the
//! codecs find the redundancy in a heightmap (see TERRAIN_WIRE.md, "Filter").

use super::config::{Compression, Dtype};

/// Transform applied to each payload before compression (see TERRAIN_WIRE.md, "Filter").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Filter {
    None,
    /// Per-row horizontal delta of the samples as unsigned integers, then a byte-plane split.
    DeltaPlanes,
}

impl Filter {
    pub(super) fn code(self) -> u8 {
        match self {
            Filter::None => 0,
            Filter::DeltaPlanes => 1,
        }
    }

    pub(super) fn from_code(code: u8) -> Option<Filter> {
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
pub(super) fn filter_for(dtype: Dtype, compression: Compression) -> Filter {
    match (compression, dtype) {
        (Compression::None, _) => Filter::None,
        (_, Dtype::Uint16 | Dtype::F32) => Filter::DeltaPlanes,
        // 64-bit deltas would need BigInt in a browser for a small gain; f64 is the exact,
        // large-anyway option.
        (_, Dtype::F64) => Filter::None,
    }
}

pub(super) fn mask(width: usize) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    }
}

/// Forward filter on a whole number of rows (`raw.len()` a multiple of `row_bytes`, which is a
/// multiple of `width`): per row, each sample minus its left neighbour (the first minus 0),
/// modulo 2^(8 * width); then byte plane b holds byte b of every delta.
pub(super) fn filter_rows(raw: &[u8], row_bytes: usize, width: usize) -> Vec<u8> {
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
pub(super) fn unfilter_rows(filtered: &[u8], row_bytes: usize, width: usize) -> Vec<u8> {
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
