//! Property tests: shard counts, checkpoints and hash coverage.

use super::{assert_same_run, run, scripted, small_config};
use migratory_kernel::{
    compact_checkpoint, restore_checkpoint, restore_checkpoint_with_terrain, save_checkpoint,
    save_checkpoint_unsealed, save_checkpoint_unsealed_into, CheckpointError, Input, ScriptConfig,
    TickInputs, World,
};
use proptest::prelude::*;

/// Arbitrary inputs, valid and not: few client ids so that they collide, ticks that
/// may lie in the future, names that may be too long, throttles out of range.
fn any_input() -> impl Strategy<Value = Input> {
    let client = 0u32..10;
    prop_oneof![
        2 => (client.clone(), "[a-z]{0,3}|[\\PC]{30,40}|\u{7}x").prop_map(|(client, name)| Input::Join { client, name }),
        1 => (client.clone(), "[a-z]{0,3}").prop_map(|(client, name)| Input::Spectate { client, name }),
        2 => (client.clone(), 0u32..40, -20_000i32..220_000, -20_000i32..220_000)
            .prop_map(|(client, seq, x_mm, y_mm)| Input::Camera { client, seq, x_mm, y_mm }),
        6 => (client.clone(), 0u32..40, any::<i16>(), any::<i16>(), 0u8..=120)
            .prop_map(|(client, seq, dir_x, dir_y, throttle)| Input::Steer { client, seq, dir_x, dir_y, throttle }),
        2 => (client.clone(), 0u32..40).prop_map(|(client, seq)| Input::Cast { client, seq }),
        3 => (client.clone(), 0u32..400).prop_map(|(client, tick)| Input::Ack { client, tick }),
        1 => client.prop_map(|client| Input::Leave { client }),
    ]
}

fn any_stream(ticks: usize) -> impl Strategy<Value = Vec<Vec<Input>>> {
    proptest::collection::vec(proptest::collection::vec(any_input(), 0..4), ticks)
}

/// A stream of valid inputs from scripted bots (a quarter of them spectators), with their
/// ack lags and drops.
fn scripted_stream(seed: u64, ticks: usize, clients: u32) -> Vec<Vec<Input>> {
    let script = ScriptConfig {
        seed,
        clients,
        join_spread_ticks: 20,
        churn_per_mille_per_s: 150,
        spectator_per_mille: 250,
        ..ScriptConfig::default()
    };
    scripted(small_config(seed), script, ticks)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn every_shard_count_gives_the_same_roots_and_frames(seed in 0u64..1_000, stream in any_stream(240)) {
        let mut world = World::new(small_config(seed), 1).unwrap();
        let expected = run(&mut world, &stream);
        for shards in [2, 3, 4, 7] {
            let mut world = World::new(small_config(seed), shards).unwrap();
            let actual = run(&mut world, &stream);
            assert_same_run(seed, &format!("{shards} shards vs 1"), &expected, &actual);
        }
    }

    #[test]
    fn scripted_sessions_agree_across_shard_counts(seed in 0u64..1_000) {
        let stream = scripted_stream(seed, 300, 6);
        let mut world = World::new(small_config(seed), 1).unwrap();
        let expected = run(&mut world, &stream);
        prop_assert!(expected.iter().any(|r| !r.2.is_empty()), "no frames were produced");
        for shards in [2, 3, 4, 7] {
            let mut world = World::new(small_config(seed), shards).unwrap();
            assert_same_run(seed, &format!("{shards} shards vs 1"), &expected, &run(&mut world, &stream));
        }
    }

    #[test]
    fn checkpoint_restore_changes_nothing(seed in 0u64..1_000, at in 1usize..250, shards in 1usize..5) {
        let stream = scripted_stream(seed, 300, 5);
        let mut world = World::new(small_config(seed), 1).unwrap();
        let expected = run(&mut world, &stream);
        let mut first = World::new(small_config(seed), 1).unwrap();
        run(&mut first, &stream[..at]);
        let bytes = save_checkpoint(&first);
        // The live server's split (copy on the tick thread, checksum on the writer's) gives
        // the same bytes.
        prop_assert!(save_checkpoint_unsealed(&first).seal() == bytes, "sealed bytes differ at tick {}", at);
        // Into a used buffer, small or large, the bytes are the same, and so is the size
        // it asks of the next checkpoint's buffer (a large one's capacity does not carry
        // over: a server sizing each next buffer from it grew them without end).
        let bound = save_checkpoint_unsealed(&first).buffer_bytes();
        prop_assert!(bound >= bytes.len(), "buffer bound {} below the checkpoint's {} bytes", bound, bytes.len());
        for buffer in [vec![0xab; 7], vec![0xcd; bytes.len() * 2]] {
            let checkpoint = save_checkpoint_unsealed_into(&first, buffer);
            prop_assert_eq!(checkpoint.buffer_bytes(), bound, "buffer size carried over at tick {}", at);
            prop_assert!(checkpoint.seal() == bytes, "bytes differ in a used buffer at tick {}", at);
        }
        let mut restored = restore_checkpoint(&bytes, shards).unwrap();
        prop_assert_eq!(restored.tick() as usize, at);
        prop_assert_eq!(restored.state_root(), expected[at - 1].0, "restored root differs at tick {}", at);
        let rest = run(&mut restored, &stream[at..]);
        assert_same_run(seed, &format!("restored at tick {at} on {shards} shards"), &expected[at..], &rest);
        // The compact form restores the same world: its raw checkpoint is the one it was
        // made from, byte for byte, and it goes on as the original did.
        let compact = compact_checkpoint(&bytes).unwrap();
        prop_assert_eq!(&compact[4..8], &3u32.to_le_bytes()[..]);
        prop_assert!(compact_checkpoint(&compact).unwrap() == compact, "compacting twice changed the bytes");
        prop_assert!(save_checkpoint_unsealed(&first).compact().unwrap() == compact, "the recorder's compact differs");
        let mut from_compact = restore_checkpoint(&compact, shards).unwrap();
        prop_assert!(save_checkpoint(&from_compact) == bytes, "compact checkpoint at tick {} restores another world", at);
        let rest = run(&mut from_compact, &stream[at..]);
        assert_same_run(seed, &format!("restored compact at tick {at} on {shards} shards"), &expected[at..], &rest);
    }

    #[test]
    fn damaged_compact_checkpoints_are_errors_not_panics(seed in 0u64..1_000, damage in proptest::collection::vec((any::<u32>(), 1u8..=255), 1..4)) {
        let mut world = World::new(small_config(seed), 1).unwrap();
        run(&mut world, &scripted_stream(seed, 90, 6));
        let compact = compact_checkpoint(&save_checkpoint(&world)).unwrap();
        // Damage the payload and seal it again, so the checksum lets it through to the
        // archive and the packed streams behind it.
        let mut bad = compact.clone();
        for &(at, xor) in &damage {
            let at = 56 + at as usize % (bad.len() - 56);
            bad[at] ^= xor;
        }
        let checksum = *blake3::hash(&bad[56..]).as_bytes();
        bad[24..56].copy_from_slice(&checksum);
        // Damage may still decode (a changed priority is a valid world); it must never panic.
        let _ = restore_checkpoint(&bad, 2);
        let mut flipped = compact.clone();
        let at = 56 + damage[0].0 as usize % (flipped.len() - 56);
        flipped[at] ^= damage[0].1;
        let refused = matches!(restore_checkpoint(&flipped, 1).map(|_| ()), Err(CheckpointError::Corrupted { .. }));
        prop_assert!(refused, "a flipped byte at {} passed the checksum", at);
    }

    #[test]
    fn changing_one_accepted_input_changes_the_root_at_that_tick(seed in 0u64..1_000, pick in any::<u64>(), how in 0u8..3) {
        let stream = scripted_stream(seed, 200, 5);
        let mut world = World::new(small_config(seed), 1).unwrap();
        let expected = run(&mut world, &stream);
        let positions: Vec<(usize, usize)> = stream.iter().enumerate()
            .flat_map(|(t, ins)| (0..ins.len()).map(move |i| (t, i))).collect();
        prop_assume!(!positions.is_empty());
        let (t, i) = positions[(pick % positions.len() as u64) as usize];
        // A client that leaves in the same tick takes its slot's state with it, so its
        // other inputs of that tick rightly change nothing (found by this test, seed 135).
        let client = stream[t][i].client();
        prop_assume!(!stream[t].iter().any(|x| matches!(x, Input::Leave { client: c } if *c == client)));
        let mut changed = stream.clone();
        match (&mut changed[t][i], how) {
            (Input::Steer { throttle, .. }, 0) => *throttle = if *throttle == 0 { 1 } else { *throttle - 1 },
            (Input::Steer { dir_x, .. }, 1) => *dir_x = dir_x.wrapping_add(1),
            (Input::Join { name, .. } | Input::Spectate { name, .. }, 0 | 1) => name.push('!'),
            // Into the world, so the clamp cannot hide the change.
            (Input::Camera { x_mm, .. }, 0 | 1) => *x_mm = if (1_000..100_000).contains(x_mm) { *x_mm + 64 } else { 50_000 },
            _ => { changed[t].remove(i); }
        }
        let mut world = World::new(small_config(seed), 1).unwrap();
        let actual = run(&mut world, &changed);
        prop_assert_eq!(&expected[..t], &actual[..t]);
        prop_assert_ne!(expected[t].0, actual[t].0, "seed {}: changing input {} of tick {} left the root unchanged", seed, i, t + 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Wide-open values on one shard: nothing panics, rejections are counted.
    #[test]
    fn no_input_stream_makes_the_step_panic(
        seed in any::<u64>(),
        stream in proptest::collection::vec(proptest::collection::vec(
            prop_oneof![
                any::<(u32, String)>().prop_map(|(client, name)| Input::Join { client: client % 16, name }),
                any::<(u32, u32, i16, i16, u8)>().prop_map(|(c, seq, dir_x, dir_y, throttle)| Input::Steer { client: c % 16, seq, dir_x, dir_y, throttle }),
                any::<(u32, u32)>().prop_map(|(c, seq)| Input::Cast { client: c % 16, seq }),
                any::<(u32, u32)>().prop_map(|(c, tick)| Input::Ack { client: c % 16, tick }),
                any::<u32>().prop_map(|c| Input::Leave { client: c % 16 }),
                any::<(u32, String)>().prop_map(|(client, name)| Input::Spectate { client: client % 16, name }),
                any::<(u32, u32, i32, i32)>().prop_map(|(c, seq, x_mm, y_mm)| Input::Camera { client: c % 16, seq, x_mm, y_mm }),
            ], 0..12), 60)
    ) {
        let mut world = World::new(small_config(seed), 1).unwrap();
        let mut rejected = 0;
        for inputs in &stream {
            rejected += world.step(&TickInputs { inputs: inputs.clone() }).rejected.total();
        }
        let total: usize = stream.iter().map(Vec::len).sum();
        prop_assert!(rejected as usize <= total);
    }
}

#[test]
fn delivery_order_does_not_matter() {
    let stream = scripted_stream(5, 150, 6);
    let mut world = World::new(small_config(5), 1).unwrap();
    let expected = run(&mut world, &stream);
    let reversed: Vec<Vec<Input>> = stream.iter().map(|t| t.iter().rev().cloned().collect()).collect();
    let mut world = World::new(small_config(5), 2).unwrap();
    assert_same_run(5, "reversed delivery", &expected, &run(&mut world, &reversed));
}

#[test]
fn bad_checkpoints_are_clear_errors() {
    let mut world = World::new(small_config(3), 1).unwrap();
    run(&mut world, &scripted_stream(3, 30, 3));
    let bytes = save_checkpoint(&world);
    let err = |b: &[u8]| restore_checkpoint(b, 1).map(|_| ()).unwrap_err();
    assert!(matches!(
        err(b"nope, not a checkpoint at all.........................................."),
        CheckpointError::BadMagic { .. }
    ));
    assert!(matches!(err(&bytes[..40]), CheckpointError::Corrupted { .. }));
    let mut old = bytes.clone();
    old[4] = 0;
    assert!(matches!(
        err(&old),
        CheckpointError::UpgradeRequired { found: 0, .. }
    ));
    let mut other_rules = bytes.clone();
    other_rules[8] ^= 0x7f;
    assert!(matches!(err(&other_rules), CheckpointError::RulesMismatch { .. }));
    let mut new = bytes.clone();
    new[4] = 9;
    assert!(matches!(
        err(&new),
        CheckpointError::UnsupportedVersion { found: 9, .. }
    ));
    for at in [60, bytes.len() / 2, bytes.len() - 1] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x40;
        assert!(
            matches!(err(&flipped), CheckpointError::Corrupted { .. }),
            "flip at {at}"
        );
    }
    assert!(matches!(
        err(&bytes[..bytes.len() - 1]),
        CheckpointError::Corrupted { .. }
    ));
    restore_checkpoint(&bytes, 3).unwrap();
}

#[test]
fn a_restore_on_a_held_terrain_equals_one_that_generates_it_and_refuses_another() {
    let stream = scripted_stream(4, 60, 4);
    let mut world = World::new(small_config(4), 1).unwrap();
    run(&mut world, &stream[..30]);
    let bytes = save_checkpoint(&world);
    let mut held = restore_checkpoint_with_terrain(&bytes, world.terrain().clone(), 2).unwrap();
    let mut generated = restore_checkpoint(&bytes, 1).unwrap();
    assert_eq!(held.state_root(), generated.state_root());
    let (a, b) = (run(&mut held, &stream[30..]), run(&mut generated, &stream[30..]));
    assert_same_run(4, "restored on a held terrain vs generated", &b, &a);
    let other = World::new(small_config(5), 1).unwrap();
    assert!(matches!(
        restore_checkpoint_with_terrain(&bytes, other.terrain().clone(), 1).map(|_| ()),
        Err(CheckpointError::TerrainMismatch)
    ));
}

#[test]
fn the_incremental_root_equals_a_root_recomputed_from_scratch() {
    // Every tick: a step rehashes only the think group that thought and the groups casts
    // touched, so a missed group would show here as soon as it happens.
    let stream = scripted_stream(6, 1_200, 6);
    let mut world = World::new(small_config(6), 2).unwrap();
    let mut caught = 0;
    for (t, inputs) in stream.iter().enumerate() {
        let out = world.step(&TickInputs {
            inputs: inputs.clone(),
        });
        caught += out.casts.caught;
        let root = out.state_root;
        assert_eq!(root, world.recompute_state_root(), "tick {}", t + 1);
    }
    assert!(caught > 0, "the session must respawn caught boids mid-interval");
}
