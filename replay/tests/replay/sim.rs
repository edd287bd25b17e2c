//! The simulator can fail: a divergence planted at one shard count (a boid nudged by a
//! millimetre) is reported by the shards oracle at the tick it was planted, with the
//! case's seed; the same case without it passes.

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
        checked += 1;
        if checked == 3 {
            return;
        }
    }
    panic!("only {checked} cases with boids in 40 seeds");
}
