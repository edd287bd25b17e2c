//! The `sim` command of the `migratory-replay` binary (not part of the library): its
//! arguments, a timed run or one case, and the text, JSON and JUnit reports.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use migratory_replay::sim;

use crate::{print_json, write_junit};

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Run for this many seconds (without it: the one case `--seed` names).
    #[arg(long)]
    seconds: Option<f64>,
    /// The run's seed (default: drawn from the clock, and printed), or with no
    /// `--seconds` the case's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Threads running cases (default: one per CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// Stop at the first failing case.
    #[arg(long)]
    stop_at_failure: bool,
    /// Plant one of the kernel's deliberate determinism bugs in every world, to see the
    /// simulator find it: shard-order, hash-tie, checkpoint-field, stale-scratch,
    /// stale-baseline or debug-wrap (builds with `--features planted-faults` only);
    /// `all` for each in turn.
    #[arg(long, value_name = "KIND")]
    plant: Option<String>,
    /// With `--plant`: this many runs of `--seconds` each, from fresh seeds, each stopping
    /// at its first failure; prints how many found the fault and how fast (the table of
    /// `replay/bench/planted.sh`).
    #[arg(long, default_value_t = 1, value_name = "N")]
    trials: u32,
    /// Also write a JUnit XML report here: one test case per failing seed (or one
    /// passing case for the whole run).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Where a failing case's shrunken recording goes (`sim-failure-SEED.mrec`).
    #[arg(long, value_name = "DIR", default_value = ".")]
    failures_dir: PathBuf,
}

/// `sim`: a timed run (its tally, exit 1 on any failure), or the one case of `--seed`.
pub(crate) fn sim(json: bool, args: &SimArgs) -> anyhow::Result<ExitCode> {
    // A case's worlds run more shard threads than there are cores (see `sim::run`).
    migratory_kernel::set_spin_rounds(0);
    sim::quiet_panics();
    let mut options = sim::SimOptions {
        stop_at_failure: args.stop_at_failure,
        failures_dir: Some(args.failures_dir.clone()),
        ..sim::SimOptions::default()
    };
    let faults = planted(args.plant.as_deref())?;
    if faults.len() > 1 || args.trials > 1 {
        return trials(json, args, &faults);
    }
    #[cfg(feature = "planted-faults")]
    if let Some(&fault) = faults.first() {
        sim::plant(Some(fault));
        options.plant = Some(fault);
    }
    let Some(seconds) = args.seconds else {
        let Some(seed) = args.seed else {
            anyhow::bail!("give --seconds N for a run, or --seed S to rerun one case");
        };
        return one_case(json, seed, &args.failures_dir);
    };
    options.duration = Duration::try_from_secs_f64(seconds)
        .map_err(|_| anyhow::anyhow!("--seconds must be a non-negative number, is {seconds}"))?;
    options.seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    options.jobs = args.jobs.unwrap_or_else(default_jobs);
    eprintln!(
        "sim: seed {}, {seconds} s on {} threads (rerun a failing case with --seed CASE_SEED)",
        options.seed, options.jobs
    );
    let tty = std::io::stderr().is_terminal();
    let last = std::sync::Mutex::new(Instant::now());
    let progress = |cases: u64, failures: usize| {
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if tty && last.elapsed() > Duration::from_millis(250) {
            *last = Instant::now();
            eprint!("\r{cases} cases, {failures} failures");
            let _ = std::io::stderr().flush();
        }
    };
    let t = sim::run(&options, &progress);
    if tty {
        eprintln!();
    }
    if let Some(path) = &args.junit {
        junit(path, &t)?;
    }
    if json {
        print_json(&t);
    } else {
        text(&t);
    }
    Ok(if t.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One job per CPU.
fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(feature = "planted-faults")]
type Fault = sim::PlantedFault;
#[cfg(not(feature = "planted-faults"))]
type Fault = std::convert::Infallible;

/// The faults `--plant` names (`all`: every kind; none without the option).
#[cfg(feature = "planted-faults")]
fn planted(name: Option<&str>) -> anyhow::Result<Vec<Fault>> {
    match name {
        None => Ok(Vec::new()),
        Some("all") => Ok(Fault::ALL.to_vec()),
        Some(name) => {
            let fault = Fault::from_name(name).ok_or_else(|| {
                let kinds: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                anyhow::anyhow!(
                    "no planted fault {name:?}; the kinds are {} (or all)",
                    kinds.join(", ")
                )
            })?;
            eprintln!("sim: planted fault {name} in every world");
            Ok(vec![fault])
        }
    }
}

#[cfg(not(feature = "planted-faults"))]
fn planted(name: Option<&str>) -> anyhow::Result<Vec<Fault>> {
    match name {
        None => Ok(Vec::new()),
        Some(_) => anyhow::bail!(
            "this build has no planted faults: build with `cargo build --release -p migratory-replay --features planted-faults`"
        ),
    }
}

/// One row of the planted-fault table.
#[cfg(feature = "planted-faults")]
#[derive(serde::Serialize)]
struct TrialRow {
    fault: &'static str,
    trials: u32,
    seconds_max: f64,
    /// Runs that found it in time, and when each found it.
    found: u32,
    found_after_seconds: Vec<f64>,
    /// The oracle of each finding.
    oracles: Vec<&'static str>,
    /// Set when the build cannot show this kind (`debug-wrap` without overflow checks).
    skipped: Option<&'static str>,
}

/// `--trials N`: N runs per fault from fresh seeds, each stopping at its first failure.
#[cfg(feature = "planted-faults")]
fn trials(json: bool, args: &SimArgs, faults: &[Fault]) -> anyhow::Result<ExitCode> {
    let Some(seconds) = args.seconds else {
        anyhow::bail!("--trials needs --seconds (the time each run has to find the fault)");
    };
    if faults.is_empty() {
        anyhow::bail!("--trials needs --plant KIND (or all)");
    }
    let duration = Duration::try_from_secs_f64(seconds)
        .map_err(|_| anyhow::anyhow!("--seconds must be a non-negative number, is {seconds}"))?;
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut rows = Vec::new();
    for (k, &fault) in faults.iter().enumerate() {
        let mut row = TrialRow {
            fault: fault.name(),
            trials: args.trials,
            seconds_max: seconds,
            found: 0,
            found_after_seconds: Vec::new(),
            oracles: Vec::new(),
            skipped: None,
        };
        if fault == Fault::DebugWrap && !cfg!(debug_assertions) {
            row.skipped = Some("wraps silently without overflow checks: run a debug build");
            rows.push(row);
            continue;
        }
        for trial in 0..args.trials {
            let options = sim::SimOptions {
                seed: sim::case_seed(base, (k as u64) << 32 | u64::from(trial)),
                duration,
                jobs: args.jobs.unwrap_or_else(default_jobs),
                stop_at_failure: true,
                failures_dir: None,
                plant: Some(fault),
            };
            let t = sim::run(&options, &|_, _| {});
            if let (Some(s), Some(f)) = (t.first_failure_seconds, t.failures.first()) {
                row.found += 1;
                row.found_after_seconds.push(s);
                row.oracles.push(f.oracle.name());
            }
            eprintln!(
                "{}: trial {} of {} (seed {}): {}",
                fault.name(),
                trial + 1,
                args.trials,
                options.seed,
                t.first_failure_seconds
                    .map_or("not found".to_string(), |s| format!("found after {s:.1} s"))
            );
        }
        rows.push(row);
    }
    if json {
        print_json(&rows);
    } else {
        out!("| fault | found within {seconds} s | median s | slowest s | found by |");
        out!("|---|---|---|---|---|");
        for r in &rows {
            if let Some(why) = r.skipped {
                out!("| {} | skipped: {why} | | | |", r.fault);
                continue;
            }
            let mut times = r.found_after_seconds.clone();
            times.sort_by(f64::total_cmp);
            let median = times
                .get(times.len() / 2)
                .map_or("-".into(), |s| format!("{s:.1}"));
            let slowest = times.last().map_or("-".into(), |s| format!("{s:.1}"));
            let mut by: Vec<&str> = r.oracles.clone();
            by.sort_unstable();
            by.dedup();
            out!(
                "| {} | {} of {} | {median} | {slowest} | {} |",
                r.fault,
                r.found,
                r.trials,
                by.join(", ")
            );
        }
    }
    let missed = rows.iter().any(|r| r.skipped.is_none() && r.found < r.trials);
    Ok(if missed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(not(feature = "planted-faults"))]
fn trials(_: bool, _: &SimArgs, _: &[Fault]) -> anyhow::Result<ExitCode> {
    anyhow::bail!("--trials runs planted faults: build with --features planted-faults")
}

/// Reruns the one case of `seed`.
fn one_case(json: bool, seed: u64, failures_dir: &Path) -> anyhow::Result<ExitCode> {
    let case = sim::Case::from_seed(seed);
    let result = sim::run_case(&case).map_err(|f| sim::shrunk(&case, f, Some(failures_dir)));
    if json {
        print_json(&serde_json::json!({
            "seed": seed,
            "cases": 1,
            "failures": result.as_ref().err().into_iter().collect::<Vec<_>>(),
        }));
    } else {
        out!("case {seed}: {case:?}");
        match &result {
            Ok(r) if r.unbuildable.is_some() => {
                out!("unbuildable world: {}", r.unbuildable.as_deref().unwrap_or(""))
            }
            Ok(r) => out!("passed every oracle ({} ticks)", r.ticks),
            Err(f) => {
                out!("FAILED {f}");
                print_shrunk(f);
            }
        }
    }
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The tally as text.
fn text(t: &sim::Tally) {
    out!(
        "{} cases in {:.1} s ({:.1} cases/s), {} failures, {} unbuildable worlds; seed {}",
        t.cases,
        t.seconds,
        t.cases_per_s,
        t.failures.len(),
        t.unbuildable,
        t.seed
    );
    out!(
        "case sizes (min/median/max): ticks {:?}, boids {:?}, clients {:?}",
        t.ticks,
        t.boids,
        t.clients
    );
    for (oracle, ms) in &t.ms_by_oracle {
        out!("  {oracle}: {ms:.0} ms in all");
    }
    if let Some(s) = t.first_failure_seconds {
        out!("first failure after {s:.1} s");
    }
    for f in &t.failures {
        out!(
            "FAILED case seed {}: {f} (rerun: migratory-replay sim --seed {})",
            f.seed,
            f.seed
        );
        print_shrunk(f);
    }
}

/// One JUnit test case per failing seed, or one passing case for the whole run.
fn junit(path: &Path, t: &sim::Tally) -> anyhow::Result<()> {
    let mut cases: Vec<migratory_replay::junit::Case> = t
        .failures
        .iter()
        .map(|f| migratory_replay::junit::Case {
            name: format!("case seed {}", f.seed),
            seconds: 0.0,
            failure: Some(format!(
                "{f} (rerun: migratory-replay sim --seed {}){}",
                f.seed,
                f.shrunk
                    .as_ref()
                    .and_then(|s| s.recording.as_ref())
                    .map_or(String::new(), |p| format!("\nshrunken run: {}", p.display()))
            )),
        })
        .collect();
    if cases.is_empty() {
        cases.push(migratory_replay::junit::Case {
            name: format!("{} cases from seed {}", t.cases, t.seed),
            seconds: t.seconds,
            failure: None,
        });
    }
    write_junit(path, "migratory-replay sim", &cases)
}

/// What a failure shrank to, and where its recording is.
fn print_shrunk(f: &sim::Failure) {
    if let Some(s) = &f.shrunk {
        out!(
            "  shrunk to {} ticks, {} players, {} boids (failing at tick {:?}){}",
            s.ticks,
            s.clients,
            s.boids,
            s.tick,
            s.recording
                .as_ref()
                .map_or(String::new(), |p| format!("; its run: {}", p.display()))
        );
    }
}
