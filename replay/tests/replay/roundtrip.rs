//! Writer/reader round trips of random input streams (valid and invalid inputs) with random
//! block sizes and checkpoint intervals.

use migratory_kernel::{Input, TickInputs, World, CHECKPOINT_VERSION_COMPACT, CHECKPOINT_VERSION_RAW};
use migratory_replay::format::{Chain, RecordKind, WriterOptions, FORMAT_VERSION};
use migratory_replay::{tools, Recording};
use proptest::prelude::*;

use crate::{no_progress, recorded_ticks, small_config, TempDir};

fn name() -> impl Strategy<Value = String> {
    // Valid names, empty ones, over-long ones and ones with control characters.
    let chars = prop::sample::select(vec!['a', 'b', 'z', '0', ' ', 'é', '鳥', '\n', '\u{7f}']);
    prop_oneof![
        3 => prop::collection::vec(chars.clone(), 1..10),
        1 => prop::collection::vec(chars, 0..40),
    ]
    .prop_map(String::from_iter)
}

fn input() -> impl Strategy<Value = Input> {
    let client = || 0u32..6;
    prop_oneof![
        2 => (client(), name()).prop_map(|(client, name)| Input::Join { client, name }),
        4 => (client(), 0u32..60, any::<i16>(), any::<i16>(), prop_oneof![0u8..=100, any::<u8>()]).prop_map(
            |(client, seq, dir_x, dir_y, throttle)| Input::Steer {
                client,
                seq,
                dir_x,
                dir_y,
                throttle,
            }
        ),
        1 => (client(), 0u32..60).prop_map(|(client, seq)| Input::Cast { client, seq }),
        2 => (client(), prop_oneof![0u32..120, any::<u32>()]).prop_map(|(client, tick)| Input::Ack { client, tick }),
        1 => client().prop_map(|client| Input::Leave { client }),
    ]
}

fn session() -> impl Strategy<Value = Vec<TickInputs>> {
    prop::collection::vec(
        prop::collection::vec(input(), 0..5).prop_map(|inputs| TickInputs { inputs }),
        0..100,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn random_sessions_read_back_exactly(
        session in session(),
        seed in 0u64..1000,
        block_ticks in 1u32..50,
        checkpoint_interval_ticks in prop_oneof![Just(0u32), 1u32..100],
    ) {
        let options = WriterOptions { block_ticks, checkpoint_interval_ticks, fsync_every_blocks: 0 };
        let config = small_config(seed, 300);
        let mut world = World::new(config.clone(), 2).unwrap();
        let start_root = world.state_root();
        let mut writer = migratory_replay::RecordingWriter::new(Vec::new(), &world, 2, options).unwrap();
        let mut expected = Vec::new();
        let mut chain = Chain::start(&config.content_hash());
        for inputs in &session {
            let out = world.step(inputs).clone();
            writer.record_tick(inputs, &out, &world).unwrap();
            chain.push(out.tick, &out.state_root, &out.snapshots_root);
            expected.push((out.tick, inputs.clone(), out.state_root, out.snapshots_root));
        }
        let bytes = writer.finish().unwrap();
        let n = session.len() as u32;

        let rec = Recording::from_bytes(bytes.clone()).unwrap();
        prop_assert_eq!(rec.torn_tail.clone(), None);
        prop_assert_eq!(&rec.meta.config, &config);
        prop_assert_eq!(rec.meta.start_tick, 0);
        prop_assert_eq!(rec.recorded_shard_count, 2);
        prop_assert_eq!(rec.ticks_recovered(), n);
        let got: Vec<_> = recorded_ticks(&rec)
            .into_iter()
            .map(|t| (t.tick, t.inputs, t.state_root, t.snapshots_root))
            .collect();
        prop_assert_eq!(&got, &expected);
        let end = rec.end.unwrap();
        prop_assert_eq!(end.final_tick, n);
        prop_assert_eq!(end.ticks_recorded, n);
        prop_assert_eq!(end.final_root, world.state_root());
        prop_assert_eq!(end.chain, chain.0);

        // Reading from the middle gives the tail.
        let from = n / 2 + 1;
        let tail: Vec<u32> = rec.ticks_from(from).map(|t| t.unwrap().tick).collect();
        prop_assert_eq!(tail, (from..=n).collect::<Vec<_>>());

        // Blocks: at most block_ticks each, cut short only by a checkpoint or the end.
        let is_checkpoint_tick = |t: u32| checkpoint_interval_ticks > 0 && t % checkpoint_interval_ticks == 0;
        let mut covered = 0;
        for f in rec.records.iter().filter(|f| f.kind == RecordKind::Block) {
            let last = f.first_tick + f.tick_count - 1;
            prop_assert!(f.tick_count <= block_ticks, "block {:?}", f);
            prop_assert!(f.tick_count == block_ticks || is_checkpoint_tick(last) || last == n, "block {:?}", f);
            covered += f.tick_count;
        }
        prop_assert_eq!(covered, n);

        // A checkpoint at every multiple of the interval, each restoring the recorded state
        // completely: its root matches, and it steps on to the next recorded tick.
        let checkpoint_ticks: Vec<u32> = rec.checkpoints().map(|f| f.first_tick).collect();
        prop_assert_eq!(checkpoint_ticks, (1..=n).filter(|&t| is_checkpoint_tick(t)).collect::<Vec<_>>());
        for cp in rec.checkpoints() {
            let t = cp.first_tick;
            let mut restored = rec.restore_checkpoint(cp, 1).unwrap();
            prop_assert_eq!(restored.tick(), t);
            prop_assert_eq!(restored.state_root(), expected[t as usize - 1].2);
            if t < n {
                let next = &expected[t as usize];
                let out = restored.step(&next.1);
                prop_assert_eq!((out.state_root, out.snapshots_root), (next.2, next.3), "tick {} after the checkpoint", t + 1);
            }
        }
        let start = rec.start_world(1).unwrap();
        prop_assert_eq!(start.state_root(), start_root);

        let dir = TempDir::new("roundtrip");
        let path = dir.write("session.mrec", &bytes);
        let report = tools::verify(&path, &[1, 3], None, &mut no_progress()).unwrap();
        prop_assert!(report.ok(), "{:?}", report);
        prop_assert_eq!(report.ticks, n);
        prop_assert_eq!(report.ticks_recovered, n);
        prop_assert_eq!(report.end_record_matches, Some(true));
        prop_assert!(report.divergence.is_none());
    }
}

/// The writer refuses a tick out of sequence instead of writing a broken file.
#[test]
fn the_writer_refuses_ticks_out_of_order() {
    let mut world = World::new(small_config(1, 50), 1).unwrap();
    let mut writer =
        migratory_replay::RecordingWriter::new(Vec::new(), &world, 1, WriterOptions::default()).unwrap();
    let inputs = TickInputs::default();
    let first = world.step(&inputs).clone();
    writer.record_tick(&inputs, &first, &world).unwrap();
    let err = writer.record_tick(&inputs, &first, &world).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let second = world.step(&inputs).clone();
    writer.record_tick(&inputs, &second, &world).unwrap();
    let rec = Recording::from_bytes(writer.finish().unwrap()).unwrap();
    assert_eq!(rec.ticks_recovered(), 2);
    assert_eq!(rec.end.unwrap().final_root, second.state_root);
}

/// A recording that starts from a later state begins with that state's checkpoint.
#[test]
fn a_recording_from_a_later_tick_starts_with_its_checkpoint() {
    let mut world = World::new(small_config(2, 200), 1).unwrap();
    let inputs = TickInputs {
        inputs: vec![Input::Join {
            client: 4,
            name: "late".into(),
        }],
    };
    for _ in 0..17 {
        world.step(&inputs);
    }
    let root_17 = world.state_root();
    let mut writer =
        migratory_replay::RecordingWriter::new(Vec::new(), &world, 1, WriterOptions::default()).unwrap();
    let mut roots = Vec::new();
    for _ in 0..5 {
        let out = world.step(&TickInputs::default()).clone();
        roots.push(out.state_root);
        writer.record_tick(&TickInputs::default(), &out, &world).unwrap();
    }
    let rec = Recording::from_bytes(writer.finish().unwrap()).unwrap();
    assert_eq!(rec.meta.start_tick, 17);
    assert_eq!(
        (rec.first_tick(), rec.last_tick(), rec.ticks_recovered()),
        (18, 22, 5)
    );
    assert_eq!(rec.records[0].kind, RecordKind::Checkpoint);
    assert_eq!(rec.records[0].first_tick, 17);
    let start = rec.start_world(2).unwrap();
    assert_eq!((start.tick(), start.state_root()), (17, root_17));
    let got: Vec<[u8; 32]> = recorded_ticks(&rec).iter().map(|t| t.state_root).collect();
    assert_eq!(got, roots);
    assert!(rec.world_at(16, 1).is_err(), "before the start");
    assert_eq!(rec.world_at(20, 1).unwrap().state_root(), roots[2]);
}

/// A recording finished with a checkpoint ends with the final state stored, so the world
/// at the last tick is restored without stepping; none is added when one of that tick
/// was already written.
#[test]
fn finishing_with_a_checkpoint_stores_the_final_state_once() {
    for (ticks, interval, checkpoints) in [(25u32, 10u32, 3usize), (20, 10, 2), (0, 10, 0)] {
        let mut world = World::new(small_config(3, 120), 1).unwrap();
        let options = WriterOptions {
            block_ticks: 7,
            checkpoint_interval_ticks: interval,
            fsync_every_blocks: 0,
        };
        let mut writer = migratory_replay::RecordingWriter::new(Vec::new(), &world, 1, options).unwrap();
        for _ in 0..ticks {
            let out = world.step(&TickInputs::default()).clone();
            writer.record_tick(&TickInputs::default(), &out, &world).unwrap();
        }
        let rec = Recording::from_bytes(writer.finish_with_checkpoint(&world).unwrap()).unwrap();
        let found: Vec<u32> = rec.checkpoints().map(|c| c.first_tick).collect();
        assert_eq!(
            found.len(),
            checkpoints,
            "{ticks} ticks, every {interval}: {found:?}"
        );
        if ticks > 0 {
            assert_eq!(found.last(), Some(&ticks));
            let last = rec.checkpoints().last().copied().unwrap();
            assert_eq!(
                rec.restore_checkpoint(&last, 1).unwrap().state_root(),
                world.state_root()
            );
        }
        assert_eq!(rec.end.unwrap().final_root, world.state_root());
    }
}

/// The final checkpoint must be of the last recorded tick.
#[test]
fn a_final_checkpoint_of_another_tick_is_refused() {
    let mut world = World::new(small_config(4, 60), 1).unwrap();
    let mut writer =
        migratory_replay::RecordingWriter::new(Vec::new(), &world, 1, WriterOptions::default()).unwrap();
    let out = world.step(&TickInputs::default()).clone();
    writer.record_tick(&TickInputs::default(), &out, &world).unwrap();
    world.step(&TickInputs::default());
    let err = writer.finish_with_checkpoint(&world).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

/// A recording's checkpoints as stored: each one's kernel checkpoint format version, and
/// whether it restores the state the recording's roots say it holds.
fn stored_checkpoints(bytes: &[u8]) -> Vec<(u32, bool)> {
    let rec = Recording::from_bytes(bytes.to_vec()).unwrap();
    let roots: std::collections::BTreeMap<u32, [u8; 32]> = recorded_ticks(&rec)
        .iter()
        .map(|t| (t.tick, t.state_root))
        .collect();
    rec.checkpoints()
        .zip(stored_payloads(bytes, &rec))
        .map(|(f, (tick, stored))| {
            let version = u32::from_le_bytes(stored[4..8].try_into().unwrap());
            let root = rec.restore_checkpoint(f, 2).unwrap().state_root();
            (version, roots.get(&tick) == Some(&root))
        })
        .collect()
}

/// From format 4 on a recording stores its checkpoints compact (kernel checkpoint format
/// 3); format 1 stored them raw (format 2). A raw checkpoint of the old fixture (rules 5)
/// restores the same state as this build's compact one at its tick.
#[test]
fn checkpoints_are_stored_compact_and_raw_ones_of_old_recordings_still_restore() {
    let new = crate::small_recording();
    assert_eq!(
        Recording::from_bytes(new.to_vec()).unwrap().format_version,
        FORMAT_VERSION
    );
    assert_eq!(
        stored_checkpoints(new),
        vec![(CHECKPOINT_VERSION_COMPACT, true); 2]
    );
    let path = crate::old_format_fixture();
    let old_bytes = std::fs::read(&path).unwrap();
    let old = Recording::from_bytes(old_bytes.clone()).unwrap();
    assert_eq!(old.format_version, 1);
    let stored = stored_payloads(&old_bytes, &old);
    assert!(!stored.is_empty());
    let versions: Vec<u32> = stored
        .iter()
        .map(|(_, b)| u32::from_le_bytes(b[4..8].try_into().unwrap()))
        .collect();
    assert!(
        versions.iter().all(|&v| v == CHECKPOINT_VERSION_RAW),
        "{versions:?}"
    );
    // The same session under this build's rules, checkpointed at the same ticks.
    let dir = crate::TempDir::new("raw-checkpoints");
    let out = dir.path().join("small.mrec");
    migratory_replay::tools::rerecord(&path, &out, 1, crate::writer_options(600, 600), &mut |_, _| {})
        .expect("rerecord");
    let now = Recording::open(&out).unwrap();
    let now_checkpoints: std::collections::BTreeMap<u32, _> =
        now.checkpoints().map(|f| (f.first_tick, f)).collect();
    let mut compared = 0;
    for (tick, bytes) in &stored {
        let from_raw =
            migratory_kernel::restore_checkpoint_any_rules(bytes, 2).expect("an old raw checkpoint");
        assert_eq!(from_raw.tick(), *tick);
        let Some(g) = now_checkpoints.get(tick) else {
            continue;
        };
        let from_compact = now.restore_checkpoint(g, 1).unwrap();
        assert_eq!(
            checkpoint_payload(&from_raw),
            checkpoint_payload(&from_compact),
            "state at tick {tick}"
        );
        compared += 1;
    }
    assert!(compared >= 4, "only {compared} checkpoints in common");
}

/// A world's checkpoint without its header (which names the rules and the checksum).
fn checkpoint_payload(world: &World) -> Vec<u8> {
    const HEADER_BYTES: usize = 56;
    migratory_kernel::save_checkpoint(world)[HEADER_BYTES..].to_vec()
}

/// Each checkpoint of a recording as stored, decompressed: its tick and its bytes.
fn stored_payloads(bytes: &[u8], rec: &Recording) -> Vec<(u32, Vec<u8>)> {
    rec.checkpoints()
        .map(|f| {
            let at = f.offset as usize + 32;
            let stored =
                zstd::bulk::decompress(&bytes[at..at + f.payload_bytes as usize], 256 << 20).unwrap();
            (f.first_tick, stored)
        })
        .collect()
}
