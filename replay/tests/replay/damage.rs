//! Damaged recordings: truncation at every byte offset, single-bit flips anywhere (always
//! detected, at the right frame), forged frames with valid checksums (errors, never
//! panics), and the version and magic checks.

use migratory_replay::format::{RecordKind, RecordingMeta, FORMAT_VERSION, FORMAT_VERSION_READ_MIN, MAGIC};
use migratory_replay::{Recording, RecordingError};
use proptest::prelude::*;

use crate::{
    assert_replays, header_len, le32, raw_frames, recorded_ticks, small_config, small_recording, RawFrame,
};

fn blake3_prefix<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().as_bytes()[..N].try_into().unwrap()
}

#[test]
fn the_small_recording_is_complete_and_has_several_blocks_and_checkpoints() {
    let full = small_recording();
    let frames = raw_frames(full);
    let blocks = frames.iter().filter(|f| f.kind == 1).count();
    let checkpoints: Vec<u32> = frames
        .iter()
        .filter(|f| f.kind == 2)
        .map(|f| f.first_tick)
        .collect();
    assert_eq!(blocks, 6, "120 ticks in blocks of 20");
    assert_eq!(checkpoints, vec![60, 120]);
    assert_eq!(frames.last().unwrap().kind, 3, "the end record is last");

    let rec = Recording::from_bytes(full.to_vec()).unwrap();
    assert_eq!(rec.torn_tail, None);
    let end = rec.end.expect("end record");
    assert_eq!((end.final_tick, end.ticks_recorded), (120, 120));
    assert_eq!(rec.ticks_recovered(), 120);
    assert_eq!(rec.file_bytes, full.len() as u64);
    let offsets: Vec<u64> = rec.records.iter().map(|f| f.offset).collect();
    let raw_offsets: Vec<u64> = frames.iter().map(|f| f.offset as u64).collect();
    assert_eq!(offsets, raw_offsets);
    let ticks = recorded_ticks(&rec);
    assert_eq!(ticks.len(), 120);
    assert_replays(&rec, &ticks, 1);
    assert_eq!(end.final_root, ticks.last().unwrap().state_root);
}

/// What opening `full[..cut]` must give, from the frame layout of the full file.
fn check_cut(full: &[u8], frames: &[RawFrame], cut: usize) -> Option<Recording> {
    let head = header_len(full);
    let result = Recording::from_bytes(full[..cut].to_vec());
    if cut == 0 {
        assert!(
            matches!(&result, Err(RecordingError::NotARecording { found }) if found.is_empty()),
            "empty file: {result:?}"
        );
        return None;
    }
    if cut < head {
        // Inside the fixed header (offset 0) or its body (the body length, at 20, does not fit).
        let want = if cut < 56 { 0 } else { 20 };
        match &result {
            Err(RecordingError::Corrupted {
                offset, ticks: None, ..
            }) if *offset == want => {}
            other => panic!("cut at {cut} inside the header: {other:?}"),
        }
        return None;
    }
    let rec = result.unwrap_or_else(|e| panic!("cut at {cut} (of {}): {e}", full.len()));
    let complete: Vec<&RawFrame> = frames.iter().filter(|f| f.end() <= cut).collect();
    let ticks: u32 = complete
        .iter()
        .filter(|f| f.kind == 1)
        .map(|f| f.tick_count)
        .sum();
    assert_eq!(
        rec.ticks_recovered(),
        ticks,
        "ticks recovered from a cut at {cut}"
    );
    assert_eq!(
        rec.records.len(),
        complete.len(),
        "frames read from a cut at {cut}"
    );
    if cut == full.len() {
        assert_eq!(rec.torn_tail, None);
        assert!(rec.end.is_some());
    } else {
        let torn = rec
            .torn_tail
            .clone()
            .unwrap_or_else(|| panic!("cut at {cut}: no torn tail"));
        let good = complete.last().map_or(head, |f| f.end());
        assert_eq!(torn.offset, good as u64, "torn tail offset of a cut at {cut}");
        assert_eq!(
            torn.bytes_lost,
            (cut - good) as u64,
            "bytes lost by a cut at {cut}"
        );
        assert_eq!(rec.end, None);
    }
    Some(rec)
}

#[test]
fn truncation_at_every_offset_recovers_the_complete_blocks() {
    let full = small_recording();
    let frames = raw_frames(full);
    let full_rec = Recording::from_bytes(full.to_vec()).unwrap();
    let all = recorded_ticks(&full_rec);
    // Replaying is slow next to opening: replay the prefixes cut at, just after, and in
    // the middle of each frame (and the whole file).
    let mut sample: Vec<usize> = frames
        .iter()
        .flat_map(|f| {
            [
                f.offset,
                f.offset + 1,
                f.offset + 31,
                f.offset + 32 + f.payload_len / 2,
            ]
        })
        .chain([full.len()])
        .collect();
    sample.sort_unstable();
    let mut replayed = 0;
    for cut in 0..=full.len() {
        let Some(rec) = check_cut(full, &frames, cut) else {
            continue;
        };
        if sample.binary_search(&cut).is_err() {
            continue;
        }
        let ticks = recorded_ticks(&rec);
        let n = rec.ticks_recovered() as usize;
        assert_eq!(ticks.len(), n);
        assert_eq!(
            ticks[..],
            all[..n],
            "the recovered ticks are the first {n} of the full file"
        );
        assert_replays(&rec, &ticks, 1);
        for cp in rec.checkpoints() {
            let w = rec.restore_checkpoint(cp, 1).unwrap();
            assert_eq!(w.state_root(), all[cp.first_tick as usize - 1].state_root);
        }
        if n > 0 {
            let w = rec.world_at(n as u32, 2).unwrap();
            assert_eq!(w.state_root(), all[n - 1].state_root);
        }
        replayed += 1;
    }
    assert!(replayed >= frames.len() * 3, "replayed {replayed} prefixes");
}

/// The error opening `full` with bit `bit` of byte `at` flipped must give.
fn assert_flip_detected(full: &[u8], frames: &[RawFrame], at: usize, bit: u8) {
    let mut bytes = full.to_vec();
    bytes[at] ^= 1 << bit;
    let result = Recording::from_bytes(bytes.clone());
    let head = header_len(full);
    let ctx = format!("bit {bit} of byte {at} (header {head} bytes)");
    match at {
        0..8 => match &result {
            Err(RecordingError::NotARecording { found }) => assert_eq!(found[..], bytes[..8], "{ctx}"),
            other => panic!("{ctx}: {other:?}"),
        },
        8..12 => {
            let v = le32(&bytes, 8);
            match &result {
                Err(RecordingError::UpgradeRequired { found, supported })
                    if v < FORMAT_VERSION_READ_MIN
                        && *found == v
                        && *supported == FORMAT_VERSION_READ_MIN => {}
                Err(RecordingError::UnsupportedVersion { found, supported })
                    if v > FORMAT_VERSION && *found == v && *supported == FORMAT_VERSION => {}
                // Another version this build reads: the header's checksum catches it.
                Err(RecordingError::Corrupted { offset: 0, .. })
                    if (FORMAT_VERSION_READ_MIN..=FORMAT_VERSION).contains(&v) => {}
                other => panic!("{ctx}: version {v}: {other:?}"),
            }
        }
        _ if at < head => match &result {
            Err(RecordingError::Corrupted {
                offset: 0,
                ticks: None,
                ..
            }) => {}
            Err(RecordingError::Corrupted {
                offset: 20,
                ticks: None,
                ..
            }) if (20..24).contains(&at) => {}
            other => panic!("{ctx}: {other:?}"),
        },
        _ => {
            let f = frames.iter().find(|f| (f.offset..f.end()).contains(&at)).unwrap();
            match &result {
                Err(RecordingError::Corrupted { offset, ticks, .. }) => {
                    assert_eq!(*offset, f.offset as u64, "{ctx}: in the frame {f:?}");
                    if f.kind == RecordKind::Block as u8 {
                        let (a, _) = ticks.unwrap_or_else(|| panic!("{ctx}: no ticks named"));
                        assert_eq!(a, f.first_tick, "{ctx}: the block's first tick is named");
                    }
                }
                other => panic!("{ctx}: in the frame {f:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn every_single_bit_flip_is_detected_at_its_frame() {
    let full = small_recording();
    let frames = raw_frames(full);
    for at in 0..full.len() {
        assert_flip_detected(full, &frames, at, (at % 8) as u8);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_random_bit_flip_is_detected_at_its_frame(at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let full = small_recording();
        let frames = raw_frames(full);
        assert_flip_detected(full, &frames, at.index(full.len()), bit);
    }

    /// A flip re-sealed with valid checksums (a forged or hostile file) gets past the
    /// checksums: opening, decoding every block, restoring every checkpoint and rebuilding
    /// the last state must give errors, never panic.
    #[test]
    fn a_forged_flip_with_valid_checksums_never_panics(
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
        shards in 1usize..3,
    ) {
        let full = small_recording();
        let frames = raw_frames(full);
        let at = at.index(full.len() - 12) + 12;
        let mut bytes = full.to_vec();
        bytes[at] ^= 1 << bit;
        reseal(&mut bytes, full, &frames, at);
        // A forged file that does not even open is refused, which is all it can get; the
        // sweep below checks that most forged flips do open and reach the decoders.
        if let Ok(rec) = Recording::from_bytes(bytes) {
            read_everything(&rec, shards);
        }
    }
}

/// Decodes every block, restores every checkpoint, steps a world through the
/// readable ticks and asks for worlds in and out of range. Each may fail; none may panic.
fn read_everything(rec: &Recording, shards: usize) {
    let ticks: Vec<_> = rec.ticks_from(rec.first_tick()).collect();
    let readable = ticks.iter().take_while(|t| t.is_ok()).count();
    for cp in rec.checkpoints() {
        let _ = rec.restore_checkpoint(cp, shards);
    }
    if let Ok(mut world) = rec.start_world(shards) {
        for t in ticks.into_iter().take(readable) {
            world.step(&t.expect("readable").inputs);
        }
    }
    let _ = rec.world_at(rec.last_tick(), shards);
    let _ = rec.world_at(rec.first_tick().saturating_sub(1), shards);
}

/// The forged-flip property would pass without testing anything if forged files never
/// opened: a deterministic sweep over the file counts the flips that get past the
/// checksums into the decoders, and asserts that at least four in five do.
#[test]
fn most_forged_flips_reach_the_decoders() {
    let full = small_recording();
    let frames = raw_frames(full);
    let (mut tried, mut opened) = (0usize, 0usize);
    for at in (12..full.len()).step_by(61) {
        let mut bytes = full.to_vec();
        bytes[at] ^= 1 << (at % 8);
        reseal(&mut bytes, full, &frames, at);
        tried += 1;
        if let Ok(rec) = Recording::from_bytes(bytes) {
            opened += 1;
            read_everything(&rec, 1);
        }
    }
    eprintln!("forged flips: {opened} of {tried} opened and were decoded");
    assert!(tried >= 100, "{tried}");
    assert!(
        opened * 2 >= tried,
        "only {opened} of {tried} forged flips opened"
    );
}

/// Recomputes the checksum covering byte `at` (per the original layout) after it changed.
fn reseal(bytes: &mut [u8], full: &[u8], frames: &[RawFrame], at: usize) {
    let head = header_len(full);
    if at < head {
        if !(24..56).contains(&at) {
            let sum = blake3_prefix::<32>(&[&bytes[..24], &bytes[56..head]]);
            bytes[24..56].copy_from_slice(&sum);
        }
        return;
    }
    let f = frames.iter().find(|f| (f.offset..f.end()).contains(&at)).unwrap();
    let o = f.offset;
    if at >= o + 32 {
        let sum = blake3_prefix::<12>(&[&bytes[o + 32..f.end()]]);
        bytes[o + 16..o + 28].copy_from_slice(&sum);
    }
    if !(o + 28..o + 32).contains(&at) {
        let sum = blake3_prefix::<4>(&[&bytes[o..o + 28]]);
        bytes[o + 28..o + 32].copy_from_slice(&sum);
    }
}

/// A file header for `meta`, with a valid checksum.
fn forged_header(meta: &RecordingMeta) -> Vec<u8> {
    let body = rkyv::to_bytes::<rkyv::rancor::Error>(meta).unwrap();
    let mut head = Vec::new();
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&migratory_kernel::KERNEL_RULES_VERSION.to_le_bytes());
    head.extend_from_slice(&1u32.to_le_bytes());
    head.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let sum = blake3_prefix::<32>(&[&head[..24], &body]);
    head.extend_from_slice(&sum);
    head.extend_from_slice(&body);
    head
}

/// A frame with valid checksums.
fn forged_frame(kind: u8, first_tick: u32, tick_count: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 32];
    h[0] = kind;
    h[4..8].copy_from_slice(&first_tick.to_le_bytes());
    h[8..12].copy_from_slice(&tick_count.to_le_bytes());
    h[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let sum = blake3_prefix::<12>(&[payload]);
    h[16..28].copy_from_slice(&sum);
    let sum = blake3_prefix::<4>(&[&h[..28]]);
    h[28..32].copy_from_slice(&sum);
    h.extend_from_slice(payload);
    h
}

fn meta_starting_at(start_tick: u32) -> RecordingMeta {
    let config = small_config(1, 50);
    RecordingMeta {
        crate_version: "0".into(),
        git_commit: None,
        config_hash: config.content_hash(),
        config,
        start_tick,
    }
}

/// Tick numbers near `u32::MAX` in a well-sealed file are corruption, not an overflow.
#[test]
fn forged_ticks_near_the_end_of_the_tick_range_are_errors_not_panics() {
    // A start tick with no tick after it.
    let bytes = forged_header(&meta_starting_at(u32::MAX));
    match Recording::from_bytes(bytes) {
        Err(RecordingError::Corrupted { .. }) => {}
        other => panic!("start tick u32::MAX: {other:?}"),
    }

    // A block whose ticks run past u32::MAX (the start checkpoint is only checked for
    // its position by the scan).
    let start = u32::MAX - 1;
    let mut bytes = forged_header(&meta_starting_at(start));
    bytes.extend(forged_frame(2, start, 0, b"not a checkpoint"));
    let mut block = 0u32.to_le_bytes().to_vec();
    block.extend_from_slice(&[0u8; 2 * 64]);
    bytes.extend(forged_frame(1, u32::MAX, 2, &block));
    match Recording::from_bytes(bytes) {
        Err(RecordingError::Corrupted { offset, .. }) => {
            assert!(offset > 0, "the block is named, not the header");
        }
        other => panic!("block past u32::MAX: {other:?}"),
    }
}

/// Out-of-order, overlapping or misplaced frames with valid checksums are `Corrupted` at
/// the offending frame.
#[test]
fn forged_frames_out_of_order_are_corrupted_at_that_frame() {
    let full = small_recording();
    let frames = raw_frames(full);
    let head = header_len(full);
    let frame_bytes = |f: &RawFrame| full[f.offset..f.end()].to_vec();
    let blocks: Vec<&RawFrame> = frames.iter().filter(|f| f.kind == 1).collect();
    let end = frames.last().unwrap();

    // Header, then the second block first.
    let mut b = full[..head].to_vec();
    b.extend(frame_bytes(blocks[1]));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == head as u64
    ));

    // A block repeated.
    let mut b = full[..blocks[1].end()].to_vec();
    let at = b.len();
    b.extend(frame_bytes(blocks[1]));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == at as u64
    ));

    // A checkpoint after the wrong block.
    let cp = frames.iter().find(|f| f.kind == 2).unwrap();
    let mut b = full[..blocks[0].end()].to_vec();
    let at = b.len();
    b.extend(frame_bytes(cp));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == at as u64
    ));

    // Anything after the end record.
    let mut b = full.to_vec();
    b.extend(frame_bytes(blocks[0]));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == full.len() as u64
    ));

    // An end record that claims another final tick.
    let mut b = full[..end.offset].to_vec();
    let at = b.len();
    b.extend(forged_frame(3, 119, 0, &full[end.offset + 32..end.end()]));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == at as u64
    ));

    // An unknown frame kind.
    let mut b = full[..head].to_vec();
    b.extend(forged_frame(9, 1, 0, &[]));
    assert!(matches!(
        Recording::from_bytes(b),
        Err(RecordingError::Corrupted { offset, .. }) if offset == head as u64
    ));
}

#[test]
fn version_and_magic_are_checked_first() {
    let full = small_recording();
    let with_version = |v: u32| {
        let mut b = full.to_vec();
        b[8..12].copy_from_slice(&v.to_le_bytes());
        Recording::from_bytes(b)
    };
    match with_version(0) {
        Err(
            e @ RecordingError::UpgradeRequired {
                found: 0,
                supported: 1,
            },
        ) => {
            assert!(e.to_string().contains("upgrade required"), "{e}");
        }
        other => panic!("version 0: {other:?}"),
    }
    match with_version(99) {
        Err(
            e @ RecordingError::UnsupportedVersion {
                found: 99,
                supported: FORMAT_VERSION,
            },
        ) => {
            assert!(e.to_string().contains("99"), "{e}");
        }
        other => panic!("version 99: {other:?}"),
    }
    assert!(with_version(FORMAT_VERSION).is_ok());

    let mut b = full.to_vec();
    b[..8].copy_from_slice(b"NOTAREC\0");
    match Recording::from_bytes(b) {
        Err(RecordingError::NotARecording { found }) => assert_eq!(found, b"NOTAREC\0"),
        other => panic!("wrong magic: {other:?}"),
    }
    match Recording::from_bytes(b"hello".to_vec()) {
        Err(RecordingError::NotARecording { found }) => assert_eq!(found, b"hello"),
        other => panic!("short text file: {other:?}"),
    }
    match Recording::from_bytes(Vec::new()) {
        Err(RecordingError::NotARecording { found }) => assert!(found.is_empty()),
        other => panic!("empty file: {other:?}"),
    }

    // The same through a file on disk, and a missing file is an I/O error naming it.
    let dir = crate::TempDir::new("versions");
    let empty = dir.write("empty.mrec", &[]);
    assert!(matches!(
        Recording::open(&empty),
        Err(RecordingError::NotARecording { .. })
    ));
    let missing = dir.path().join("missing.mrec");
    match Recording::open(&missing) {
        Err(e @ RecordingError::Io { .. }) => assert!(e.to_string().contains("missing.mrec"), "{e}"),
        other => panic!("missing file: {other:?}"),
    }
}

/// `run` and `verify` replay the readable part of a torn recording and say so; blessing
/// refuses it.
#[test]
fn tools_replay_the_readable_part_of_a_torn_recording() {
    use migratory_replay::tools::{self, ToolError};

    let full = small_recording();
    let all = recorded_ticks(&Recording::from_bytes(full.to_vec()).unwrap());
    let frames = raw_frames(full);
    let torn_block = frames.iter().find(|f| f.kind == 1 && f.first_tick == 61).unwrap();
    let cut = torn_block.offset + 40;
    let dir = crate::TempDir::new("torn");
    let path = dir.write("torn.mrec", &full[..cut]);

    let r = tools::run(&path, 1, None, &mut crate::no_progress()).unwrap();
    assert_eq!((r.first_tick, r.final_tick, r.ticks), (1, 60, 60));
    assert!(r.roots_match);
    assert_eq!(r.final_root, migratory_kernel::hex(&all[59].state_root));
    let torn = r.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes_lost), (torn_block.offset as u64, 40));
    let r = tools::run(&path, 2, Some(33), &mut crate::no_progress()).unwrap();
    assert_eq!(r.final_tick, 33);
    assert_eq!(r.final_root, migratory_kernel::hex(&all[32].state_root));

    let v = tools::verify(&path, &[1, 2], None, &mut crate::no_progress()).unwrap();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.ticks, v.ticks_recovered), (60, 60));
    assert_eq!(v.end_record_matches, None);
    assert!(v.torn_tail.is_some());
    assert!(matches!(tools::rewrite_roots(&path), Err(ToolError::Invalid(_))));
    assert_eq!(std::fs::read(&path).unwrap(), full[..cut], "left as it was");
}

/// A crash can leave garbage (or zeros) where the writer was, not only a cut. From every
/// record boundary and from inside every record, garbage to the end of the file: `open`
/// calls it corruption at the damaged record; `open_after_crash` recovers every record
/// before it, as a torn tail marked `damaged`. Damage with an intact record after it stays
/// corruption for both.
#[test]
fn garbage_to_the_end_is_a_damaged_tail_after_a_crash_and_corruption_otherwise() {
    let full = small_recording();
    let frames = raw_frames(full);
    let mut garbage_seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        garbage_seed ^= garbage_seed << 13;
        garbage_seed ^= garbage_seed >> 7;
        garbage_seed ^= garbage_seed << 17;
        garbage_seed as u8
    };
    for (i, f) in frames.iter().enumerate() {
        for (from, fill) in [
            (f.offset, "garbage"),
            (f.offset + 10, "garbage"),
            (f.offset + 40, "zeros"),
        ] {
            if from >= full.len() {
                continue;
            }
            let mut bytes = full.to_vec();
            for b in &mut bytes[from..] {
                *b = if fill == "zeros" { 0 } else { next() };
            }
            let strict = Recording::from_bytes(bytes.clone());
            assert!(
                matches!(&strict, Err(RecordingError::Corrupted { offset, .. }) if *offset == f.offset as u64),
                "{fill} from {from} (record {i} at {}): {strict:?}",
                f.offset
            );
            let rec = Recording::from_bytes_after_crash(bytes)
                .unwrap_or_else(|e| panic!("{fill} from {from} after a crash: {e}"));
            let torn = rec.torn_tail.clone().expect("a torn tail");
            assert_eq!(
                (torn.offset, torn.damaged),
                (f.offset as u64, true),
                "{fill} from {from}"
            );
            assert_eq!(rec.records.len(), i, "every record before the damage");
            let ticks: u32 = frames[..i]
                .iter()
                .filter(|f| f.kind == 1)
                .map(|f| f.tick_count)
                .sum();
            assert_eq!(rec.ticks_recovered(), ticks);
        }
    }
    // A flipped byte in the middle, with intact records after it: corruption either way.
    let middle = &frames[frames.len() / 2];
    let mut bytes = full.to_vec();
    bytes[middle.offset + 40] ^= 0x10;
    for r in [
        Recording::from_bytes(bytes.clone()),
        Recording::from_bytes_after_crash(bytes),
    ] {
        assert!(
            matches!(&r, Err(RecordingError::Corrupted { offset, .. }) if *offset == middle.offset as u64),
            "{r:?}"
        );
    }
    // A plain cut is no damage.
    let cut = Recording::from_bytes_after_crash(full[..middle.offset + 40].to_vec()).unwrap();
    assert_eq!(cut.torn_tail.map(|t| t.damaged), Some(false));
}
