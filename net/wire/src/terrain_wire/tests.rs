//! Round trips of every dtype, compression and chunking, and the decoder against hostile input.

use super::assemble::*;
use super::compression::*;
use super::config::*;
use super::encode::*;
use super::filter::*;
use super::layout::*;
use super::*;
use migratory_kernel::Terrain;
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

fn config_key(r: Result<(), TerrainConfigError>) -> &'static str {
    match r {
        Err(TerrainConfigError { key, .. }) => key,
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
                            TerrainConfigError {
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
    // f32 uncompressed: 16 MiB, far over the default threshold.
    let c = cfg(Dtype::F32, Compression::None);
    let msgs = encode(&t, &c).unwrap();
    let d = &msgs.descriptor;
    let row_bytes = 2048 * 4;
    let rows_per_chunk = c.chunk_target_bytes as usize / row_bytes;
    let chunks = (2048 / rows_per_chunk) as u32;
    assert!(d.chunked);
    assert_eq!(d.chunk_count, chunks);
    assert_eq!(msgs.messages.len(), chunks as usize + 1);
    assert_eq!(
        d.total_bytes,
        msgs.messages.iter().map(|m| m.len() as u64).sum::<u64>()
    );
    let h = &msgs.messages[0];
    assert_eq!((h[0], h.len()), (MSG_TERRAIN_HEADER, 80));
    assert_eq!((le_u32(h, 72), le_u32(h, 76)), (chunks, rows_per_chunk as u32));
    for (i, m) in msgs.messages[1..].iter().enumerate() {
        let (index, count, row_start, row_count, raw_bytes) = chunk_fields(m);
        assert_eq!(m[0], MSG_TERRAIN_CHUNK);
        assert_eq!((index, count), (i as u32, chunks));
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
) -> Result<Option<DecodedTerrain>, TerrainDecodeError> {
    let mut last = Ok(None);
    for m in msgs {
        last = asm.push(m);
        if last.is_err() {
            break;
        }
    }
    last
}

fn expect_malformed(r: Result<Option<DecodedTerrain>, TerrainDecodeError>, needle: &str) {
    match r {
        Err(TerrainDecodeError::Malformed(why)) => {
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
                    matches!(r, Err(TerrainDecodeError::Malformed(_))),
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
static SINGLE_ZSTD: std::sync::LazyLock<TerrainMessages> =
    std::sync::LazyLock::new(|| encode(&small_terrain(), &cfg(Dtype::Uint16, Compression::Zstd)).unwrap());
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
        (Dtype::F32, Compression::Auto, 524_288, 524_288)
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

/// The largest message of the default world with the default config stays under the
/// 1 MiB limit common WebSocket client libraries apply by default (PROTOCOL.md says so).
#[test]
fn the_default_terrain_goes_in_messages_under_one_mebibyte() {
    let world = WorldConfig::default();
    let t = Terrain::generate(&world).expect("the default terrain generates");
    let msgs = encode(&t, &TerrainWireConfig::default()).unwrap();
    let largest = msgs.messages.iter().map(Vec::len).max().unwrap();
    assert!(msgs.descriptor.chunked, "{:?}", msgs.descriptor);
    assert!(largest < 1 << 20, "largest terrain message {largest} bytes");
    eprintln!(
        "default terrain: {} messages, {} bytes in all, the largest {largest}",
        msgs.messages.len(),
        msgs.descriptor.total_bytes
    );
}
