//! The simulator finds each of the kernel's planted determinism bugs (feature
//! `planted-faults`, which this crate's tests enable): for every kind, one of the first
//! few cases of a fixed run fails, by the oracle that should see that kind of bug, and the
//! case that failed passes unplanted.

use migratory_replay::sim::{case_seed, plant, run_case, Case, Oracle, PlantedFault};

/// Cases of one run tried per fault before calling it missed. A forgotten cooldown shows
/// only in a case where someone cast before the checkpoint (one case in 5 to 60 in
/// release runs): it gets more.
fn cases_max(fault: PlantedFault) -> u64 {
    match fault {
        PlantedFault::CheckpointField => 150,
        _ => 40,
    }
}

/// Plants `fault` on this thread, runs cases until one fails, and checks the oracle.
fn check(fault: PlantedFault, oracles: &[Oracle]) {
    plant(Some(fault));
    let n = cases_max(fault);
    let found = (0..n).find_map(|i| {
        run_case(&Case::from_seed(case_seed(2026, i)))
            .err()
            .map(|f| (i, f))
    });
    plant(None);
    let Some((i, f)) = found else {
        panic!("{}: no failure in {n} cases", fault.name());
    };
    assert!(
        oracles.contains(&f.oracle),
        "{} found by {:?} in case {i}, expected one of {oracles:?}: {f}",
        fault.name(),
        f.oracle
    );
    assert_eq!(f.seed, case_seed(2026, i));
    // The plant made it fail: the same case passes without it.
    if let Err(f) = run_case(&Case::from_seed(f.seed)) {
        panic!("{}: case {i} fails unplanted too: {f}", fault.name());
    }
}

#[test]
fn a_shard_count_dependent_scan_order_is_found_by_the_shards_oracle() {
    check(PlantedFault::ShardOrder, &[Oracle::Shards]);
}

/// Each world hashes with keys of its own, so whichever of the worlds a case builds first
/// takes another order than the driving run's finds it: the keys are drawn anew each run,
/// so which oracle that is varies from run to run (CI once saw `Extract` first, whose
/// replay of the original builds a world of its own).
#[test]
fn a_tie_broken_by_hash_order_is_found_by_an_oracle_comparing_worlds() {
    check(
        PlantedFault::HashTie,
        &[
            Oracle::Shards,
            Oracle::Checkpoint,
            Oracle::Recording,
            Oracle::Torn,
            Oracle::Extract,
        ],
    );
}

#[test]
fn a_checkpoint_that_forgets_a_field_is_found_by_the_checkpoint_oracle() {
    check(PlantedFault::CheckpointField, &[Oracle::Checkpoint, Oracle::Torn]);
}

#[test]
fn stale_scratch_bytes_in_a_snapshot_are_found() {
    check(PlantedFault::StaleScratch, &[Oracle::Decoder, Oracle::Shards]);
}

#[test]
fn a_delta_that_skips_an_entity_against_an_old_baseline_is_found_by_the_decoder_oracle() {
    check(PlantedFault::StaleBaseline, &[Oracle::Decoder]);
}

/// Overflow checks are on in test builds: the planted plain add panics, and the panic
/// fails the oracle that was running. (Release builds wrap it and pass: the debug tier
/// of `sim` in CI is what finds this kind.)
#[test]
fn an_add_that_overflows_with_overflow_checks_is_found_as_a_panic() {
    check(PlantedFault::DebugWrap, &[Oracle::Drive]);
    plant(Some(PlantedFault::DebugWrap));
    let f = (0..cases_max(PlantedFault::DebugWrap))
        .find_map(|i| run_case(&Case::from_seed(case_seed(2026, i))).err())
        .expect("found above");
    plant(None);
    assert!(f.detail.contains("overflow"), "{f}");
}
