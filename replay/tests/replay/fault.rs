//! Divergence localisation with the kernel's test-only fault injection: one boid nudged by
//! a millimetre in one run must be found at its tick, chunk, entity and field.

use migratory_replay::tools::{self, Fault};

use crate::{no_progress, synth_bytes, synth_options, TempDir};

#[cfg(feature = "fault-injection")]
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
        assert_eq!(r.end_frame_matches, None);
        let d = r.divergence.expect("a divergence");
        assert_eq!(d.tick, t);
        assert_eq!(d.what, "state root");
        assert_eq!((d.a.as_str(), d.b.as_str()), ("shards=1", "shards=2"));
        assert_ne!(d.a_root, d.b_root);
        assert_eq!(d.explained_at_tick, Some(t));
        let boids: Vec<_> = d.chunks.iter().filter(|c| c.kind == "boids").collect();
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
    assert_eq!((d.tick, d.a.as_str()), (t, "recording"));
    assert_eq!(d.explained_at_tick, Some(80));
    assert!(d.chunks.iter().any(|c| c.kind == "boids"), "{:?}", d.chunks);

    // A fault in a run that is not made changes nothing.
    let fault = Fault {
        shards: 3,
        tick: t,
        entity: e,
    };
    let r = tools::verify(&path, &[1, 2], Some(fault), &mut no_progress()).unwrap();
    assert!(r.ok(), "{r:?}");
}

#[cfg(not(feature = "fault-injection"))]
#[test]
fn without_the_feature_a_fault_is_refused() {
    let dir = TempDir::new("no-fault");
    let path = dir.write("s.mrec", &synth_bytes(&synth_options(8, 10, 1, 100, 20, 0)));
    let fault = Fault {
        shards: 1,
        tick: 5,
        entity: 3,
    };
    let r = tools::verify(&path, &[1], Some(fault), &mut no_progress());
    assert!(matches!(r, Err(tools::ToolError::Invalid(_))), "{r:?}");
    assert!(tools::verify(&path, &[1], None, &mut no_progress()).unwrap().ok());
}
