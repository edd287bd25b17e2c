//! Terrain wire vectors: a small world's terrain encoded by the server's encoder in every
//! combination of dtype, compression, uint16 range and delivery (single-shot and chunked),
//! with what the Rust `TerrainAssembler` decodes (the checksum, and a blake3 over the
//! heights as little-endian f64, so the JavaScript side must match every height exactly),
//! damaged copies the Rust decoder refuses, and blake3 digests of inputs that span several
//! chunks of the hash tree.

use base64::Engine;
use migratory_kernel::{hex, World};
use migratory_wire::terrain_wire::{
    encode, Compression, Dtype, QuantizationRange, TerrainAssembler, TerrainWireConfig,
};
use serde_json::{json, Value};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Feeds `messages` to a fresh Rust decoder: the decoded terrain, or None if refused.
fn decode(messages: &[Vec<u8>]) -> Option<migratory_wire::terrain_wire::DecodedTerrain> {
    let mut a = TerrainAssembler::new();
    let mut last = None;
    for m in messages {
        last = a.push(m).ok()?;
    }
    last
}

/// Damaged copies of a delivery: each must be refused by the Rust decoder.
fn mutants(messages: &[Vec<u8>]) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let last = messages.len() - 1;
    let with = |i: usize, f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = messages.to_vec();
        f(&mut m[i]);
        m
    };
    out.push(with(last, &|m| {
        let n = m.len();
        m[n - 1] ^= 0x01;
    })); // payload
    out.push(with(0, &|m| m[40] ^= 0x80)); // checksum
    out.push(with(0, &|m| m[1] = 2)); // version
    out.push(with(0, &|m| m[5] = 1)); // reserved
    out.push(with(last, &|m| m.truncate(m.len() - 3))); // truncated payload
    if messages.len() > 2 {
        // Chunks out of order.
        let mut m = messages.to_vec();
        m.swap(1, 2);
        out.push(m);
    }
    out.retain(|m| decode(m).is_none());
    out
}

pub(super) fn vectors() -> Value {
    let mut config = migratory_kernel::testkit::small_config(5, 10);
    // The small world's 192 m in 24 x 24 cells of 8 m: a few kilobytes per delivery.
    config.terrain_grid_cells = 24;
    config.terrain_cell_size_mm = 8_000;
    let world = World::new(config, 1).expect("the test world");
    let terrain = world.terrain();
    let mut cases = Vec::new();
    for dtype in [Dtype::F32, Dtype::Uint16, Dtype::F64] {
        for compression in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let ranges: &[Option<(f64, f64)>] = match dtype {
                // A fixed range narrower than the grid, so heights are clamped at both ends.
                Dtype::Uint16 => &[None, Some((-2.0, 12.5))],
                _ => &[None],
            };
            for &range in ranges {
                for chunked in [false, true] {
                    let cfg = TerrainWireConfig {
                        dtype,
                        compression,
                        chunk_transport_threshold_bytes: if chunked { 1 } else { u64::MAX },
                        chunk_target_bytes: 1024,
                        quantization_range: if range.is_some() {
                            QuantizationRange::Fixed
                        } else {
                            QuantizationRange::Auto
                        },
                        quantization_min: range.map(|r| r.0),
                        quantization_max: range.map(|r| r.1),
                    };
                    let encoded = encode(terrain, &cfg).expect("encodes");
                    assert_eq!(encoded.descriptor.chunked, chunked);
                    let decoded = decode(&encoded.messages).expect("the Rust decoder reads its own messages");
                    let heights: Vec<u8> = decoded.heights_m.iter().flat_map(|h| h.to_le_bytes()).collect();
                    cases.push(json!({
                        "dtype": dtype.name(),
                        "compression": compression.name(),
                        "range": range.map(|r| [r.0, r.1]),
                        "chunked": chunked,
                        "messages": encoded.messages.iter().map(|m| b64(m)).collect::<Vec<_>>(),
                        "cells": decoded.cells,
                        "cell_size_mm": decoded.cell_size_mm,
                        "quantization": decoded.quantization.map(|q| [q.0, q.1]),
                        "first_heights_m": decoded.heights_m[..8],
                        "heights_blake3": hex(blake3::hash(&heights).as_bytes()),
                        // Damaged copies for the f32 cases (every codec and delivery).
                        "damaged": if dtype == Dtype::F32 { mutants(&encoded.messages) } else { Vec::new() }
                            .iter().map(|d| d.iter().map(|m| b64(m)).collect::<Vec<_>>()).collect::<Vec<_>>(),
                    }));
                }
            }
        }
    }
    let blake3_inputs: Vec<Value> = [0usize, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3073, 5000, 8193]
        .iter()
        .map(|&n| {
            let input: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            json!({ "len": n, "hex": hex(blake3::hash(&input).as_bytes()) })
        })
        .collect();
    json!({
        "about": "Generated by net/tests/net/viewer/terrain.rs (MIGRATORY_BLESS=1 rewrites it): \
                  a 24 x 24 terrain in every dtype x compression x uint16 range x delivery, \
                  messages in base64, what the Rust decoder makes of them, damaged copies it \
                  refuses; and blake3 of inputs of byte i = i mod 251.",
        "cases": cases,
        "blake3": blake3_inputs,
    })
}
