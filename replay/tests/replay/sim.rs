//! The simulator can fail: a divergence planted at one shard count (a boid nudged by a
//! millimetre) is reported by the shards oracle at the tick it was planted, with the
//! case's seed, entity and field; the same case without it passes.

use migratory_replay::sim::{case_seed, run_case, run_case_with_fault, Case, Oracle};

#[test]
fn a_planted_divergence_is_reported_at_its_tick_with_the_seed() {
    let mut checked = 0;
    for i in 0..40 {
        let case = Case::from_seed(case_seed(11, i));
        if case.config.boid_count == 0 || case.ticks < 20 {
            continue;
        }
        let report = run_case(&case).unwrap_or_else(|f| panic!("the case passes unplanted: {f:?}"));
        if report.unbuildable.is_some() {
            continue;
        }
        let tick = 5 + (i as u32 % 10);
        let entity = (i as u32 * 7) % case.config.boid_count;
        let f = run_case_with_fault(&case, tick, entity).expect_err("the planted divergence is caught");
        assert_eq!(f.oracle, Oracle::Shards, "{f:?}");
        assert_eq!(f.tick, Some(tick), "{f:?}");
        assert_eq!(f.seed, case.seed);
        // Down to the entity and the field, both values named.
        assert_eq!(
            f.entity.as_deref(),
            Some(format!("boid {entity}").as_str()),
            "{f:?}"
        );
        let field = f.field.as_deref().unwrap_or_default();
        assert!(
            field.starts_with("x_mm: ") && field.contains(" (run) vs "),
            "{f:?}"
        );
        assert!(f.to_string().contains(&format!("boid {entity}, x_mm")), "{f}");
        checked += 1;
        if checked == 3 {
            return;
        }
    }
    panic!("only {checked} cases with boids in 40 seeds");
}

#[test]
fn a_planted_divergence_shrinks_to_its_tick_and_no_players() {
    use migratory_replay::sim::{recording_of, shrink};
    let case = (0..40)
        .map(|i| Case::from_seed(case_seed(13, i)))
        .find(|c| c.config.boid_count >= 8 && c.ticks >= 30 && c.script.clients >= 2)
        .expect("a case with boids and players");
    let (tick, entity) = (20, 3);
    let failure = run_case_with_fault(&case, tick, entity).expect_err("planted");
    let (small, f) = shrink(&case, &failure, &mut |c| {
        run_case_with_fault(c, tick, entity).err()
    });
    assert_eq!(f.oracle, Oracle::Shards, "{f:?}");
    assert_eq!(f.tick, Some(tick));
    assert_eq!(small.ticks, tick, "cut at the failing tick");
    assert_eq!(small.script.clients, 0, "the players did not matter");
    assert_eq!(small.invalid_per_mille, 0);
    assert!(small.config.boid_count > entity && small.config.boid_count < case.config.boid_count);
    // The shrunken case's run is a recording of its own, replayable with the tools.
    let bytes = recording_of(&small).expect("a recording");
    let rec = migratory_replay::Recording::from_bytes(bytes).expect("it opens");
    assert_eq!(rec.last_tick(), tick);
}
