//! `migratory-replay`: run, verify, check, inspect, diff, extract, synthesise, view and
//! benchmark recordings. Exit status: 0 all good, 1 a divergence or mismatch was found, 2 the
//! command could not run (bad arguments, unreadable or corrupted file).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use migratory_kernel::ScriptConfig;
use migratory_kernel::WorldConfig;
use migratory_replay::divergence::ChunkDiff;
use migratory_replay::format::WriterOptions;
use migratory_replay::tools::{Divergence, SynthOptions};

/// `println!` that exits quietly when stdout is gone (`migratory-replay ... | head`),
/// as a Unix tool killed by SIGPIPE would, instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout().lock(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

mod inspect_cli;
mod make_cli;
mod rules_cli;
mod sim_cli;
mod verify_cli;
#[cfg(feature = "viewer")]
mod view_cli;

#[derive(Parser, Debug)]
#[command(
    name = "migratory-replay",
    version,
    about = "Replay, verify and dissect Migratory recordings (.mrec)"
)]
struct Cli {
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a recording; print the final root and ticks/s.
    Run {
        rec: PathBuf,
        #[arg(long, default_value_t = 1)]
        shards: usize,
        /// Stop after this tick.
        #[arg(long)]
        until: Option<u32>,
    },
    /// Replay at several shard counts and compare every tick with the recording and across
    /// runs. Given several recordings (a world's segments, oldest first), also check that
    /// each resumes at the tick and from the state the one before it recorded last.
    Verify {
        #[arg(required = true, num_args = 1.., value_name = "REC")]
        recs: Vec<PathBuf>,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,7")]
        shards: Vec<usize>,
        /// Threads verifying spans between checkpoints side by side (default: one per
        /// core); 1 replays every shard count in lockstep from the start.
        #[arg(long)]
        jobs: Option<usize>,
        /// Test only: SHARDS:TICK:ENTITY nudges one boid in the run on SHARDS shards.
        #[arg(long, hide = true)]
        inject_fault: Option<String>,
    },
    /// Verify every recording in a folder at 1 and N shards.
    Check {
        dir: PathBuf,
        #[arg(long, default_value_t = 4)]
        shards: usize,
        /// Accept an intended behaviour change: rewrite the stored roots.
        #[arg(long)]
        bless: bool,
        /// Also write a JUnit XML report here: one test case per recording.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Summarise a recording (a replay of it: ticks, duration, checkpoints, clients over
    /// time, rules), or show the state at a tick, or one entity field by field.
    Inspect {
        rec: PathBuf,
        /// The tick to show (without it: a summary of the whole recording).
        #[arg(long)]
        tick: Option<u32>,
        /// One entity at that tick, field by field: a boid id, or an avatar's id
        /// (boid count + slot).
        #[arg(long, requires = "tick")]
        entity: Option<u32>,
    },
    /// One field of an entity or a client over a range of ticks (`tick value` lines, CSV or
    /// JSON), and the first tick where a condition holds (`--first changes`, `--first '>30'`).
    Probe(inspect_cli::ProbeArgs),
    /// Find the first tick where two recordings differ, then the chunk, entity and field.
    Diff { a: PathBuf, b: PathBuf },
    /// Cut a self-contained recording of ticks FROM..=TO out of a longer one.
    Extract {
        rec: PathBuf,
        #[arg(long)]
        from: u32,
        #[arg(long)]
        to: u32,
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Generate a recording from seeded scripted players.
    Synth {
        #[arg(short = 'o', long)]
        out: PathBuf,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Hunt divergences: run seeded random cases (world, session, shard counts,
    /// checkpoint, recording, tear) against the determinism oracles until the time is up.
    /// Prints the run's seed; `--seed S` alone reruns the one case of seed S.
    Sim(sim_cli::SimArgs),
    /// Export every tick's entity states of a recording's replay under this build's
    /// rules (a behaviour trace, `.mtrc`), for `rules-diff` in a later build.
    Trace(rules_cli::TraceArgs),
    /// Replay a recording's inputs under this build's rules and report the first tick,
    /// entity and field where behaviour differs from a trace an earlier build made, and
    /// how far it spreads. Exit 1 when it differs.
    RulesDiff(rules_cli::RulesDiffArgs),
    /// Replay a recording's inputs under this build's rules (whatever rules made it) and
    /// record them afresh, with this build's roots.
    Rerecord(rules_cli::RerecordArgs),
    /// Open the browser viewer on a recording (god view, timeline, seek, markers,
    /// inspector, as-a-client view) until SIGINT/SIGTERM.
    #[cfg(feature = "viewer")]
    View(view_cli::ViewArgs),
    /// Replay speed side by side at several shard counts.
    Bench {
        #[command(flatten)]
        session: SessionArgs,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        shards: Vec<usize>,
    },
}

#[derive(Args, Debug)]
struct SessionArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 1_800)]
    ticks: u32,
    #[arg(long, default_value_t = 32)]
    clients: u32,
    #[arg(long, default_value_t = 5_000)]
    boids: u32,
    /// Chance per second, per mille, that a bot leaves (and later rejoins).
    #[arg(long, default_value_t = 0)]
    churn: u32,
    /// Largest ack lag, in ticks.
    #[arg(long, default_value_t = 12)]
    ack_lag: u32,
    /// Snapshots lost on the way, per mille.
    #[arg(long, default_value_t = 20)]
    drop: u32,
    /// Bots that spectate (a camera, no avatar), per mille.
    #[arg(long, default_value_t = 0)]
    spectators: u32,
    /// Ticks per input block.
    #[arg(long, default_value_t = 60)]
    block_ticks: u32,
    /// Ticks between checkpoints.
    #[arg(long, default_value_t = 600)]
    checkpoint_interval: u32,
}

impl SessionArgs {
    fn options(&self, shards: usize) -> SynthOptions {
        let config = WorldConfig {
            seed: self.seed,
            boid_count: self.boids,
            ..WorldConfig::default()
        };
        SynthOptions {
            script: ScriptConfig {
                seed: self.seed,
                clients: self.clients,
                churn_per_mille_per_s: self.churn,
                ack_lag_ticks_max: self.ack_lag,
                drop_per_mille: self.drop,
                spectator_per_mille: self.spectators,
                tick_rate_hz: config.tick_rate_hz,
                ..ScriptConfig::default()
            },
            config,
            ticks: self.ticks,
            shards,
            writer: WriterOptions {
                block_ticks: self.block_ticks,
                checkpoint_interval_ticks: self.checkpoint_interval,
                fsync_every_blocks: 0,
            },
        }
    }
}

/// A progress line on stderr, only when it is a terminal, at most 4 times a second.
fn progress() -> impl FnMut(u32, u32) {
    let tty = std::io::stderr().is_terminal();
    let mut last = Instant::now();
    move |done, total| {
        if tty && (last.elapsed() > Duration::from_millis(250) || done == total) {
            last = Instant::now();
            let pct = done as u64 * 100 / total.max(1) as u64;
            eprint!("\r{done}/{total} ticks ({pct}%)");
            if done == total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        }
    }
}

fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => out!("{s}"),
        Err(e) => eprintln!("error: cannot encode the report as JSON: {e}"),
    }
}

/// The differing leaves of the state tree, then the entities and fields inside them.
fn print_chunks(chunks: &[ChunkDiff]) {
    for c in chunks {
        let step = if c.stride > 1 {
            format!(" every {}th", c.stride)
        } else {
            String::new()
        };
        out!(
            "  chunk {} #{} (items {}..{}{step})",
            c.kind,
            c.index,
            c.items.0,
            c.items.1
        );
        for f in &c.fields {
            out!("    {} {}: {} vs {}", f.entity, f.field, f.a, f.b);
        }
    }
}

fn print_divergence(d: &Divergence) {
    out!(
        "DIVERGED at tick {} ({}): {} {} vs {} {}",
        d.tick,
        d.root,
        d.a,
        d.a_root,
        d.b,
        d.b_root
    );
    if let Some(t) = d.explained_at_tick {
        out!("  states compared at tick {t}:");
    }
    print_chunks(&d.chunks);
    if !d.clients.is_empty() {
        out!("  snapshots differ for clients {:?}", d.clients);
    }
}

/// 0 when all is good, 1 when a divergence or mismatch was found.
fn ok(good: bool) -> ExitCode {
    if good {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    // Verify and check step a world per shard count in lockstep on one thread. When their
    // shard threads and it outnumber the cores, the waiting ones park at once instead of
    // spinning on cores the others need: `verify corpora/default.mrec --shards 1,2,4` on
    // 2 cores took 0.51x the wall time and 0.39x the CPU; at 1,2 (fits) spinning stays,
    // parking there cost 7% wall (farm-bench medians, pairs of 5 runs).
    let worker_threads = |counts: &[usize]| counts.iter().map(|n| n.saturating_sub(1)).sum::<usize>();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = 1 + match &cli.command {
        // Parallel verify runs up to `jobs` worlds at once, each with its shard threads.
        Command::Verify { shards, jobs, .. } if jobs.unwrap_or(cores) > 1 => {
            jobs.unwrap_or(cores) * shards.iter().copied().max().unwrap_or(1) - 1
        }
        Command::Verify { shards, .. } => worker_threads(shards),
        Command::Check { shards, .. } => worker_threads(&[1, *shards]),
        _ => 0,
    };
    if threads > cores {
        migratory_kernel::set_spin_rounds(0);
    }
    // Test builds only: MIGRATORY_SYNTHETIC_RULES=1 makes this process a build of the
    // synthetic next rules, to test the rules-change commands across two "builds".
    #[cfg(feature = "synthetic-rules")]
    if std::env::var_os("MIGRATORY_SYNTHETIC_RULES").is_some_and(|v| v == "1") {
        migratory_kernel::follow_synthetic_rules_everywhere(true);
    }
    match cli.command {
        Command::Run { rec, shards, until } => verify_cli::run(json, &rec, shards, until),
        Command::Verify {
            recs,
            shards,
            jobs,
            inject_fault,
        } if recs.len() > 1 => {
            anyhow::ensure!(inject_fault.is_none(), "--inject-fault takes one recording");
            verify_cli::verify_chain(json, &recs, &shards, jobs.unwrap_or(cores))
        }
        Command::Verify {
            recs,
            shards,
            jobs,
            inject_fault,
        } => {
            let rec = recs.into_iter().next().unwrap_or_default();
            verify_cli::verify(json, &rec, &shards, jobs.unwrap_or(cores), inject_fault)
        }
        Command::Check {
            dir,
            shards,
            bless,
            junit,
        } => verify_cli::check(json, &dir, shards, bless, junit.as_deref()),
        Command::Inspect { rec, tick, entity } => inspect_cli::inspect(json, &rec, tick, entity),
        Command::Probe(args) => inspect_cli::probe(json, &args),
        Command::Diff { a, b } => make_cli::diff(json, &a, &b),
        Command::Extract { rec, from, to, out } => make_cli::extract(json, &rec, (from, to), &out),
        Command::Synth { out, session } => make_cli::synth(json, &out, &session),
        Command::Sim(args) => sim_cli::sim(json, &args),
        #[cfg(feature = "viewer")]
        Command::View(args) => view_cli::view(args).map(|()| ExitCode::SUCCESS),
        Command::Trace(args) => rules_cli::trace(json, &args),
        Command::RulesDiff(args) => rules_cli::rules_diff(json, &args),
        Command::Rerecord(args) => rules_cli::rerecord(json, &args),
        Command::Bench { session, shards } => make_cli::bench(json, &session, &shards),
    }
}

/// Writes a JUnit XML report of `cases` to `path`.
fn write_junit(
    path: &std::path::Path,
    suite: &str,
    cases: &[migratory_replay::junit::Case],
) -> anyhow::Result<()> {
    std::fs::write(path, migratory_replay::junit::document(suite, cases))
        .map_err(|e| anyhow::anyhow!("writing the JUnit report {}: {e}", path.display()))
}
