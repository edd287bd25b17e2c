//! `migratory-replay sim`: a seeded simulator that runs random cases (a world, a session,
//! shard counts, a checkpoint, a recording and a tear, all from one seed; `case`) against
//! the determinism oracles (`oracles`) until its time is up, on several threads, and
//! tallies them. One seed reproduces one case exactly (`sim --seed S`); a run's seeds are
//! drawn from its own seed, which it prints, so a failure in CI is a command to rerun.

mod case;
mod oracles;
mod shrink;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use case::{Case, CASE_SHARDS_MAX, CASE_TICKS_MAX};
#[cfg(feature = "fault-injection")]
pub use oracles::run_case_with_fault;
pub use oracles::{quiet_panics, recording_of, run_case, CaseReport, Failure, Oracle, Shrunk};
pub use shrink::{shrink, SHRINK_RUNS_MAX};

#[cfg(feature = "planted-faults")]
pub use migratory_kernel::planted::{plant, PlantedFault};

/// What a run does.
#[derive(Clone, Debug, Default)]
pub struct SimOptions {
    /// The run's seed: case seeds are drawn from it.
    pub seed: u64,
    pub duration: Duration,
    /// Threads running cases.
    pub jobs: usize,
    /// Stop at the first failure.
    pub stop_at_failure: bool,
    /// Where a failing case's shrunken recording is written (`sim-failure-SEED.mrec`;
    /// None: failures are shrunk but not written).
    pub failures_dir: Option<std::path::PathBuf>,
    /// A deliberate determinism bug planted in every world the run builds.
    #[cfg(feature = "planted-faults")]
    pub plant: Option<PlantedFault>,
}

/// A run's tally.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Tally {
    pub seed: u64,
    pub cases: u64,
    /// Cases whose drawn world could not be built (nothing to check; not failures).
    pub unbuildable: u64,
    pub failures: Vec<Failure>,
    pub seconds: f64,
    /// When the first failure was found, in seconds from the start.
    pub first_failure_seconds: Option<f64>,
    pub cases_per_s: f64,
    /// Case sizes: ticks, boids and clients (min, median, max).
    pub ticks: [u32; 3],
    pub boids: [u32; 3],
    pub clients: [u32; 3],
    /// Milliseconds each oracle took over all cases.
    pub ms_by_oracle: std::collections::BTreeMap<&'static str, f64>,
}

/// The seed of the run's `i`-th case.
pub fn case_seed(run_seed: u64, i: u64) -> u64 {
    case::Rng::new(run_seed ^ i.wrapping_mul(0xa076_1d64_78bd_642f)).next()
}

/// Runs cases until the time is up (or the first failure, when asked); `progress` is
/// called after each case with the cases run and failures so far.
pub fn run(options: &SimOptions, progress: &(dyn Fn(u64, usize) + Sync)) -> Tally {
    // Every job runs worlds of 2 to 16 shards: far more threads than cores, so waiting
    // shards park at once instead of spinning on the cores the others need.
    migratory_kernel::set_spin_rounds(0);
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let results: Arc<Mutex<(Vec<CaseReport>, Vec<Failure>)>> = Arc::default();
    let first_failure = Mutex::new(None::<Duration>);
    std::thread::scope(|s| {
        for _ in 0..options.jobs.max(1) {
            s.spawn(|| {
                #[cfg(feature = "planted-faults")]
                plant(options.plant);
                while !stop.load(Ordering::Relaxed) && start.elapsed() < options.duration {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let case = Case::from_seed(case_seed(options.seed, i));
                    // A failure is shrunk outside the lock: it runs the case again and again.
                    let result = run_case(&case);
                    if result.is_err() {
                        let mut first = first_failure.lock().unwrap_or_else(|e| e.into_inner());
                        first.get_or_insert(start.elapsed());
                    }
                    let result = result.map_err(|f| shrunk(&case, f, options.failures_dir.as_deref()));
                    let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
                    match result {
                        Ok(report) => r.0.push(report),
                        Err(f) => {
                            r.1.push(f);
                            if options.stop_at_failure {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    progress((r.0.len() + r.1.len()) as u64, r.1.len());
                }
            });
        }
    });
    let (reports, failures) = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    let mut t = tally(options.seed, &reports, failures, start.elapsed());
    t.first_failure_seconds = first_failure
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .map(|d| d.as_secs_f64());
    t
}

/// `failure` with the smallest case that still fails it, and (with `dir`) that case's
/// recording written there.
pub fn shrunk(case: &Case, mut failure: Failure, dir: Option<&std::path::Path>) -> Failure {
    let (small, f) = shrink(case, &failure, &mut |c| run_case(c).err());
    let recording = dir.and_then(|dir| {
        let path = dir.join(format!("sim-failure-{}.mrec", case.seed));
        let bytes = recording_of(&small)?;
        std::fs::write(&path, bytes).ok()?;
        Some(path)
    });
    failure.shrunk = Some(Box::new(Shrunk {
        ticks: small.ticks,
        clients: small.script.clients,
        boids: small.config.boid_count,
        tick: f.tick,
        recording,
    }));
    failure
}

fn tally(seed: u64, reports: &[CaseReport], failures: Vec<Failure>, elapsed: Duration) -> Tally {
    let spread = |mut v: Vec<u32>| -> [u32; 3] {
        v.sort_unstable();
        match v.len() {
            0 => [0; 3],
            n => [v[0], v[n / 2], v[n - 1]],
        }
    };
    let mut ms_by_oracle = std::collections::BTreeMap::new();
    for r in reports {
        for (o, d) in &r.time_by_oracle {
            *ms_by_oracle.entry(o.name()).or_insert(0.0) += d.as_secs_f64() * 1000.0;
        }
    }
    let cases = (reports.len() + failures.len()) as u64;
    let unbuildable = reports.iter().filter(|r| r.unbuildable.is_some()).count() as u64;
    let reports: Vec<&CaseReport> = reports.iter().filter(|r| r.unbuildable.is_none()).collect();
    let seconds = elapsed.as_secs_f64();
    Tally {
        seed,
        cases,
        unbuildable,
        seconds,
        cases_per_s: cases as f64 / seconds.max(1e-9),
        ticks: spread(reports.iter().map(|r| r.ticks).collect()),
        boids: spread(reports.iter().map(|r| r.boids).collect()),
        clients: spread(reports.iter().map(|r| r.clients).collect()),
        ms_by_oracle,
        failures,
        first_failure_seconds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_pass_every_oracle() {
        for i in 0..12 {
            let case = Case::from_seed(case_seed(7, i));
            if let Err(f) = run_case(&case) {
                panic!("case {i}: {f:?} (rerun: migratory-replay sim --seed {})", f.seed);
            }
        }
    }

    #[test]
    fn a_run_tallies_its_cases_and_seeds_are_reproducible() {
        let t = run(
            &SimOptions {
                seed: 3,
                duration: Duration::from_millis(300),
                jobs: 2,
                ..SimOptions::default()
            },
            &|_, _| {},
        );
        assert!(t.cases >= 1, "{t:?}");
        assert!(
            t.failures.is_empty(),
            "{} failures, the first {:?}",
            t.failures.len(),
            t.failures.first()
        );
        assert_eq!(case_seed(3, 5), case_seed(3, 5));
        assert_ne!(case_seed(3, 5), case_seed(3, 6));
        assert_ne!(case_seed(3, 5), case_seed(4, 5));
    }
}
