//! The tools as library calls: extract, check and bless, diff, inspect.

use migratory_kernel::hex;
use migratory_kernel::{Input, TickInputs, World};
use migratory_replay::divergence::{LeafKind, RootKind, Side};
use migratory_replay::format::RecordKind;
use migratory_replay::tools::{self, EntityReport, ToolError};
use migratory_replay::Recording;

use crate::{
    inputs_of, no_progress, record_with, recorded_ticks, synth_bytes, synth_options, writer_options, TempDir,
};

#[test]
fn extract_reproduces_the_original_roots() {
    let dir = TempDir::new("extract");
    let src = dir.write(
        "session.mrec",
        &synth_bytes(&synth_options(11, 150, 3, 400, 25, 50)),
    );
    let orig = Recording::open(&src).unwrap();
    let all = recorded_ticks(&orig);
    let initial = orig.start_world(1).unwrap().state_root();
    for (a, b) in [(0, 40), (37, 113), (50, 150), (149, 150)] {
        let out = dir.path().join(format!("cut-{a}-{b}.mrec"));
        let r = tools::extract(&src, a, b, &out).unwrap();
        assert_eq!((r.from, r.to), (a, b));
        assert!(r.bytes > 0);
        let v = tools::verify(&out, &[1, 2], None, &mut no_progress()).unwrap();
        assert!(v.ok(), "extract {a}..{b}: {v:?}");
        assert_eq!(v.ticks, b - a);
        assert_eq!(v.end_record_matches, Some(true));

        let ex = Recording::open(&out).unwrap();
        assert_eq!(ex.meta.config, orig.meta.config);
        assert_eq!(ex.meta.start_tick, a);
        assert_eq!((ex.first_tick(), ex.last_tick()), (a + 1, b));
        assert_eq!(ex.torn_tail, None);
        let start_root = ex.start_world(1).unwrap().state_root();
        assert_eq!(
            start_root,
            if a == 0 {
                initial
            } else {
                all[a as usize - 1].state_root
            }
        );
        let ticks = recorded_ticks(&ex);
        assert_eq!(
            ticks[..],
            all[a as usize..b as usize],
            "extract {a}..{b}: ticks, inputs and roots"
        );
        assert_eq!(ex.end.unwrap().final_root, all[b as usize - 1].state_root);
    }

    // An extract of an extract, and its own range limits.
    let cut = dir.path().join("cut-37-113.mrec");
    let again = dir.path().join("again.mrec");
    tools::extract(&cut, 60, 100, &again).unwrap();
    let ticks = recorded_ticks(&Recording::open(&again).unwrap());
    assert_eq!(ticks[..], all[60..100]);
    assert!(matches!(
        tools::extract(&cut, 10, 100, &again),
        Err(ToolError::Invalid(_))
    ));

    let bad = dir.path().join("bad.mrec");
    for (a, b) in [(40, 40), (50, 40), (0, 151), (200, 300)] {
        match tools::extract(&src, a, b, &bad) {
            Err(ToolError::Invalid(msg)) => assert!(msg.contains("from"), "{msg}"),
            other => panic!("extract {a}..{b}: {other:?}"),
        }
        assert!(!bad.exists(), "nothing is written for a bad range");
    }
    match tools::extract(&dir.path().join("missing.mrec"), 0, 1, &bad) {
        Err(ToolError::Recording { path, .. }) => assert!(path.ends_with("missing.mrec")),
        other => panic!("missing file: {other:?}"),
    }
}

#[test]
fn check_finds_changed_roots_and_bless_rewrites_only_those() {
    let dir = TempDir::new("check");
    let a_opts = synth_options(3, 100, 2, 300, 20, 50);
    let b_opts = synth_options(4, 100, 3, 300, 20, 50);
    let a = dir.write("a.mrec", &synth_bytes(&a_opts));
    let b_original = synth_bytes(&b_opts);
    let b = dir.write("b.mrec", &b_original);

    let entries = tools::check(dir.path(), 2, false, None).unwrap();
    assert_eq!(entries.len(), 2);
    for e in &entries {
        assert!(e.ok, "{e:?}");
        assert_eq!(e.ticks, 100);
        assert!(e.divergence.is_none() && e.error.is_none() && e.blessed_first_changed_tick.is_none());
    }

    // b's stored roots go wrong from tick X: same inputs, doctored outputs.
    const X: u32 = 37;
    let b_rec = Recording::open(&b).unwrap();
    let b_inputs = inputs_of(&b_rec);
    let b_ticks = recorded_ticks(&b_rec);
    drop(b_rec);
    let world = World::new(b_opts.config.clone(), 1).unwrap();
    let (doctored, _) = record_with(world, &b_inputs, writer_options(20, 50), |out| {
        if out.tick >= X {
            out.state_root[0] ^= 0x5a;
        }
    });
    std::fs::write(&b, &doctored).unwrap();
    let a_bytes = std::fs::read(&a).unwrap();

    let entries = tools::check(dir.path(), 2, false, None).unwrap();
    assert!(
        entries[0].file.ends_with("a.mrec") && entries[0].ok,
        "{:?}",
        entries[0]
    );
    let e = &entries[1];
    assert!(e.file.ends_with("b.mrec"));
    assert!(!e.ok);
    let d = e.divergence.as_ref().expect("a divergence");
    assert_eq!(d.tick, X);
    assert_eq!(d.root, RootKind::State);
    assert_eq!(d.a, Side::Recording);
    assert_eq!(
        d.a_root,
        hex(&{
            let mut r = b_ticks[X as usize - 1].state_root;
            r[0] ^= 0x5a;
            r
        })
    );
    assert_eq!(d.b_root, hex(&b_ticks[X as usize - 1].state_root));
    // Only the roots were doctored: the checkpoint after X holds the same state.
    assert_eq!(d.explained_at_tick, Some(50));
    assert!(d.chunks.is_empty(), "{:?}", d.chunks);
    assert_eq!(e.blessed_first_changed_tick, None);

    let entries = tools::check(dir.path(), 2, true, None).unwrap();
    assert!(entries[0].ok);
    assert_eq!(entries[0].blessed_first_changed_tick, None);
    assert!(entries[1].ok, "{:?}", entries[1]);
    assert_eq!(entries[1].blessed_first_changed_tick, Some(X));
    assert_eq!(std::fs::read(&a).unwrap(), a_bytes, "the good file is untouched");

    let blessed = Recording::open(&b).unwrap();
    assert_eq!(inputs_of(&blessed), b_inputs, "blessing keeps the inputs");
    assert_eq!(recorded_ticks(&blessed), b_ticks, "and restores the true roots");
    let layout = |r: &Recording| -> Vec<(RecordKind, u32, u32)> {
        r.records
            .iter()
            .map(|f| (f.kind, f.first_tick, f.tick_count))
            .collect()
    };
    assert_eq!(
        layout(&blessed),
        layout(&Recording::from_bytes(b_original).unwrap())
    );

    let entries = tools::check(dir.path(), 2, false, None).unwrap();
    assert!(entries.iter().all(|e| e.ok), "{entries:?}");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files are left: {names:?}");

    // A damaged file fails on its own; the others are still checked.
    let mut damaged = a_bytes.clone();
    let at = damaged.len() - 10;
    damaged[at] ^= 1;
    dir.write("c.mrec", &damaged);
    let entries = tools::check(dir.path(), 2, false, None).unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries[0].ok && entries[1].ok);
    assert!(!entries[2].ok);
    assert!(
        entries[2].error.as_deref().unwrap().contains("corrupted"),
        "{:?}",
        entries[2]
    );

    let empty = TempDir::new("check-empty");
    assert!(matches!(
        tools::check(empty.path(), 2, false, None),
        Err(ToolError::Invalid(_))
    ));
}

#[test]
fn diff_finds_the_first_tick_changed_inputs_affect() {
    let dir = TempDir::new("diff");
    let opts = synth_options(5, 120, 3, 300, 20, 40);
    let a_bytes = synth_bytes(&opts);
    let a = dir.write("a.mrec", &a_bytes);
    let rec = Recording::open(&a).unwrap();
    let inputs = inputs_of(&rec);
    // Drop the first steer at or after tick 40.
    let x = (40..=120u32)
        .find(|&t| crate::has_steer(&inputs[t as usize - 1]))
        .expect("a steer");
    let mut changed = inputs.clone();
    let tick_inputs: &mut TickInputs = &mut changed[x as usize - 1];
    let k = tick_inputs
        .inputs
        .iter()
        .position(|i| matches!(i, Input::Steer { .. }))
        .unwrap();
    let dropped = tick_inputs.inputs.remove(k);
    let (b_bytes, _) = record_with(
        World::new(opts.config.clone(), 1).unwrap(),
        &changed,
        writer_options(20, 40),
        |_| {},
    );
    let b = dir.write("b.mrec", &b_bytes);

    // Independently: the first tick whose recorded roots differ.
    let ta = recorded_ticks(&rec);
    let tb = recorded_ticks(&Recording::open(&b).unwrap());
    let first = ta
        .iter()
        .zip(&tb)
        .find(|(p, q)| (p.state_root, p.snapshots_root) != (q.state_root, q.snapshots_root))
        .map(|(p, _)| p.tick);
    assert_eq!(first, Some(x), "dropping a steer changes that tick's state");

    let r = tools::diff(&a, &b).unwrap();
    assert!(!r.config_differs);
    assert_eq!(r.common_ticks, (1, 120));
    assert_eq!(r.first_divergent_tick, Some(x));
    assert_eq!(r.root, Some(RootKind::State));
    assert!(r.inputs_differ);
    assert!(!r.chunks.is_empty());
    // The steering player's slot is named, with its last applied sequence number.
    let client = dropped.client();
    let players = r
        .chunks
        .iter()
        .find(|c| c.kind == LeafKind::Players)
        .expect("a players chunk");
    assert!(
        players
            .fields
            .iter()
            .any(|f| f.field == "last_seq" && f.entity.contains(&format!("(client {client})"))),
        "{players:?}"
    );

    let same = tools::diff(&a, &a).unwrap();
    assert_eq!(same.first_divergent_tick, None);
    assert!(!same.inputs_differ && same.chunks.is_empty() && same.root.is_none());
    assert_eq!(same.common_ticks, (1, 120));

    // Against an extract: only the common ticks are compared.
    let cut = dir.path().join("cut.mrec");
    tools::extract(&a, 30, 90, &cut).unwrap();
    let r = tools::diff(&a, &cut).unwrap();
    assert_eq!(r.common_ticks, (31, 90));
    assert_eq!(r.first_divergent_tick, None);
    let r = tools::diff(&cut, &b).unwrap();
    assert_eq!(r.first_divergent_tick, Some(x));

    // A recording of another world.
    let other = dir.write("other.mrec", &synth_bytes(&synth_options(6, 20, 1, 300, 20, 0)));
    let r = tools::diff(&a, &other).unwrap();
    assert!(r.config_differs);
    assert_eq!(r.first_divergent_tick, None);
}

#[test]
fn inspect_shows_the_recorded_state() {
    let dir = TempDir::new("inspect");
    let opts = synth_options(9, 90, 3, 300, 20, 40);
    let path = dir.write("s.mrec", &synth_bytes(&opts));
    let rec = Recording::open(&path).unwrap();
    let ticks = recorded_ticks(&rec);
    let boid_count = opts.config.boid_count;

    let mut world = World::new(opts.config.clone(), 1).unwrap();
    for t in 0..=90u32 {
        if t > 0 {
            world.step(&ticks[t as usize - 1].inputs);
        }
        if ![0, 1, 39, 40, 41, 77, 90].contains(&t) {
            continue;
        }
        let r = tools::inspect(&path, t, None).unwrap();
        assert_eq!(r.tick, t);
        let root = if t == 0 {
            world.state_root()
        } else {
            ticks[t as usize - 1].state_root
        };
        assert_eq!(r.state_root, hex(&root), "tick {t}");
        assert_eq!(r.boids, boid_count as usize);
        let active: Vec<(u32, i32, i32)> = world
            .players()
            .iter()
            .filter(|p| p.active)
            .map(|p| (p.client, p.x_mm, p.y_mm))
            .collect();
        let shown: Vec<(u32, i32, i32)> = r.players.iter().map(|p| (p.client, p.x_mm, p.y_mm)).collect();
        assert_eq!(shown, active, "tick {t}");

        for id in [0, 123, boid_count - 1] {
            let b = world.boids()[id as usize];
            match tools::inspect(&path, t, Some(id)).unwrap().entity {
                Some(EntityReport::Boid {
                    id: got,
                    x_mm,
                    y_mm,
                    vx,
                    vy,
                }) => {
                    assert_eq!(
                        (got, x_mm, y_mm, vx, vy),
                        (id, b.x_mm, b.y_mm, b.vx.into(), b.vy.into()),
                        "tick {t}"
                    )
                }
                other => panic!("boid {id} at tick {t}: {other:?}"),
            }
        }
    }

    // Avatars by entity id (boid count + slot), and ids that name nothing.
    let joined: Vec<(u32, u32)> = (1..=3).filter_map(|c| world.slot_of(c).map(|s| (c, s))).collect();
    assert_eq!(joined.len(), 3, "every bot joined");
    for &(client, slot) in &joined {
        let p = world.players()[slot as usize];
        match tools::inspect(&path, 90, Some(world.avatar_id(slot)))
            .unwrap()
            .entity
        {
            Some(EntityReport::Avatar {
                client: c,
                slot: s,
                x_mm,
                y_mm,
                score,
                dir_x,
                dir_y,
                throttle,
                last_seq,
                cast_ready_tick,
                acked_tick,
                ack_lag_ticks,
                remembered_ticks,
                ..
            }) => {
                assert_eq!((c, s, x_mm, y_mm, score), (client, slot, p.x_mm, p.y_mm, p.score));
                // Every field the kernel keeps for the slot, and the ack state from it.
                assert_eq!(
                    (dir_x, dir_y, throttle, last_seq, cast_ready_tick),
                    (p.dir_x, p.dir_y, p.throttle, p.last_seq, p.cast_ready_tick)
                );
                assert_eq!(acked_tick, (p.acked_tick != u32::MAX).then_some(p.acked_tick));
                assert_eq!(ack_lag_ticks, acked_tick.map(|a| 90 - a));
                let summary = world.stream_summary(slot).expect("a stream");
                assert_eq!(remembered_ticks, summary.remembered_ticks);
            }
            other => panic!("avatar of client {client}: {other:?}"),
        }
    }
    let free_slot = (0..8u32).find(|s| !world.players()[*s as usize].active).unwrap();
    for id in [boid_count + free_slot, boid_count + 8, u32::MAX] {
        assert!(
            matches!(tools::inspect(&path, 90, Some(id)), Err(ToolError::Invalid(_))),
            "entity {id}"
        );
    }
    assert!(
        matches!(tools::inspect(&path, 91, None), Err(ToolError::Invalid(_))),
        "a tick past the end is a bad argument, not a corrupted file"
    );
}

/// Rewriting a recording whose roots are right changes nothing, not even the layout of an
/// extract whose first block a checkpoint cut short.
#[test]
fn rewriting_an_unchanged_recording_keeps_its_bytes() {
    let dir = TempDir::new("rewrite");
    let src = dir.write("s.mrec", &synth_bytes(&synth_options(13, 120, 2, 200, 25, 50)));
    let cut = dir.path().join("cut.mrec");
    tools::extract(&src, 37, 113, &cut).unwrap();
    let blocks: Vec<u32> = Recording::open(&cut)
        .unwrap()
        .records
        .iter()
        .filter(|f| f.kind == RecordKind::Block)
        .map(|f| f.tick_count)
        .collect();
    // 38..=50 (cut by the checkpoint at 50), 51..=75, 76..=100, 101..=113.
    assert_eq!(blocks, vec![13, 25, 25, 13]);
    let layout = |bytes: &[u8]| -> Vec<(RecordKind, u32, u32)> {
        let r = Recording::from_bytes(bytes.to_vec()).unwrap();
        r.records
            .iter()
            .map(|f| (f.kind, f.first_tick, f.tick_count))
            .collect()
    };
    for p in [&src, &cut] {
        let before = std::fs::read(p).unwrap();
        assert_eq!(tools::rewrite_roots(p).unwrap(), None);
        let after = std::fs::read(p).unwrap();
        assert_eq!(layout(&after), layout(&before), "{}", p.display());
        assert!(after == before, "{}: the bytes changed", p.display());
    }
}
