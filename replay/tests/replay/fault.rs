//! Divergence localisation with the kernel's test-only fault injection: one boid nudged by
//! a millimetre in one run must be found at its tick, chunk, entity and field. The replay
//! crate dev-depends on itself with `fault-injection`, so `cargo test -p migratory-replay`
//! runs this.

use migratory_replay::divergence::{LeafKind, RootKind, Side};
use migratory_replay::tools::{self, Fault};

use crate::{no_progress, synth_bytes, synth_options, TempDir};

#[test]
fn an_injected_fault_is_located_to_its_tick_chunk_entity_and_field() {
    use migratory_kernel::WorldConfig;
    use migratory_kernel::{TreeLayout, BOIDS_PER_CHUNK};

    // More than one boid leaf per think group, so the chunk index is not trivially that
    // of the group.
    let dir = TempDir::new("fault");
    let think = WorldConfig::default().flocking.think_interval_ticks;
    let boids = BOIDS_PER_CHUNK as u32 * think + 200;
    let path = dir.write("s.mrec", &synth_bytes(&synth_options(8, 80, 2, boids, 20, 40)));
    // Boid e sits in the second leaf of its think group.
    let (t, e) = (50u32, BOIDS_PER_CHUNK as u32 * think + 3);
    let layout = TreeLayout::of(&crate::small_config(8, boids));

    for (faulty, sign) in [(2usize, 1i64), (1, -1)] {
        let fault = Fault {
            shards: faulty,
            tick: t,
            entity: e,
        };
        let r = tools::verify(&path, &[1, 2], Some(fault), &mut no_progress()).unwrap();
        assert!(!r.ok());
        assert_eq!(r.ticks, t, "verify stops at the divergence");
        assert_eq!(r.end_record_matches, None);
        let d = r.divergence.expect("a divergence");
        assert_eq!(d.tick, t);
        assert_eq!(d.root, RootKind::State);
        assert_eq!((&d.a, &d.b), (&Side::Run { shards: 1 }, &Side::Run { shards: 2 }));
        assert!(
            !d.blessable(),
            "a divergence between shard counts is never blessable"
        );
        assert_ne!(d.a_root, d.b_root);
        assert_eq!(d.explained_at_tick, Some(t));
        let boids: Vec<_> = d.chunks.iter().filter(|c| c.kind == LeafKind::Boids).collect();
        assert_eq!(boids.len(), 1, "only the nudged boid's chunk: {:?}", d.chunks);
        let c = boids[0];
        assert_eq!(c.index, layout.boid_chunk_of(e).index);
        assert_eq!(c.index as usize, layout.group_leaves(e % think).start + 1);
        assert!(
            c.items.0 <= e && e < c.items.1 && (e - c.items.0) % c.stride == 0,
            "{c:?}"
        );
        assert_eq!(c.stride, think);
        assert_eq!(c.fields.len(), 1, "one field of one boid: {:?}", c.fields);
        let f = &c.fields[0];
        assert_eq!((f.id, f.field.as_str()), (e, "x_mm"));
        assert_eq!(f.entity, format!("boid {e}"));
        let (a, b): (i64, i64) = (f.a.parse().unwrap(), f.b.parse().unwrap());
        assert_eq!(
            b - a,
            sign,
            "nudged by one millimetre in the run on {faulty} shards"
        );
    }

    // Against the recording alone: found at the same tick, explained at the next checkpoint.
    let fault = Fault {
        shards: 1,
        tick: t,
        entity: e,
    };
    let r = tools::verify(&path, &[1], Some(fault), &mut no_progress()).unwrap();
    let d = r.divergence.expect("a divergence");
    assert_eq!((d.tick, &d.a), (t, &Side::Recording));
    assert_eq!(
        d.b,
        Side::Replay {
            shard_counts: vec![1]
        }
    );
    assert!(d.blessable(), "the runs agree; only the recording differs");
    assert_eq!(d.explained_at_tick, Some(80));
    assert!(
        d.chunks.iter().any(|c| c.kind == LeafKind::Boids),
        "{:?}",
        d.chunks
    );

    // A fault in a run that is not made changes nothing.
    let fault = Fault {
        shards: 3,
        tick: t,
        entity: e,
    };
    let r = tools::verify(&path, &[1, 2], Some(fault), &mut no_progress()).unwrap();
    assert!(r.ok(), "{r:?}");
}

/// `check --bless` rewrites roots only when the runs agree and the recording differs: with
/// one shard count's run nudged, the divergence is between runs, and the file must come
/// out untouched however the runs are arranged.
#[test]
fn a_divergence_between_shard_counts_is_never_blessed() {
    let dir = TempDir::new("never-bless");
    let original = synth_bytes(&synth_options(9, 60, 2, 300, 20, 30));
    let path = dir.write("s.mrec", &original);
    for faulty in [1usize, 3] {
        let fault = Fault {
            shards: faulty,
            tick: 20,
            entity: 5,
        };
        let entries = tools::check(dir.path(), 3, true, Some(fault)).unwrap();
        let e = &entries[0];
        assert!(!e.ok, "{e:?}");
        assert_eq!(e.blessed_first_changed_tick, None, "{e:?}");
        let d = e.divergence.as_ref().expect("a divergence");
        assert!(
            matches!((&d.a, &d.b), (Side::Run { .. }, Side::Run { .. })),
            "{d:?}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            original,
            "fault in the {faulty}-shard run"
        );
    }
    // The same file with no fault checks clean, so the refusal above was the fault's.
    assert!(tools::check(dir.path(), 3, true, None).unwrap()[0].ok);
}
