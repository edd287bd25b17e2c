//! The rules-change commands of the `migratory-replay` binary (not part of the library):
//! `trace`, `rules-diff` and `rerecord`, their arguments and their text reports.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use migratory_replay::format::WriterOptions;
use migratory_replay::tools;

use crate::{print_json, progress};

#[derive(Args, Debug)]
pub(crate) struct TraceArgs {
    rec: PathBuf,
    /// Where the trace goes (`.mtrc`).
    #[arg(short = 'o', long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    shards: usize,
}

#[derive(Args, Debug)]
pub(crate) struct RulesDiffArgs {
    /// The trace an earlier build made of REC (`migratory-replay trace`).
    trace: PathBuf,
    rec: PathBuf,
    #[arg(long, default_value_t = 1)]
    shards: usize,
}

#[derive(Args, Debug)]
pub(crate) struct RerecordArgs {
    /// The recording, or a chain of them in order (a world's segments: each starts at the
    /// tick after the one before ends), replayed into one.
    #[arg(required = true)]
    old: Vec<PathBuf>,
    #[arg(short = 'o', long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// A checkpoint every this many ticks in the new recording (0: none).
    #[arg(long, default_value_t = 600)]
    checkpoint_interval: u32,
    /// Ticks per input block in the new recording.
    #[arg(long, default_value_t = 60)]
    block_ticks: u32,
}

pub(crate) fn trace(json: bool, a: &TraceArgs) -> anyhow::Result<ExitCode> {
    let r = tools::trace(&a.rec, &a.out, a.shards, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        out!(
            "wrote {} ({} bytes): ticks {}..={} of {}, {} boids and {} slots a tick, rules {}",
            r.trace,
            r.bytes,
            r.header.first_tick,
            r.header.first_tick + r.header.tick_count - 1,
            r.file,
            r.header.boid_count,
            r.header.slot_count,
            r.header.rules_version
        );
        if let Some(t) = r.first_mismatch_tick {
            out!("note: this build's replay leaves the recorded roots at tick {t}: the trace is this build's behaviour, not the recording's");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Exit 0 when behaviour is the same, 1 when it differs.
pub(crate) fn rules_diff(json: bool, a: &RulesDiffArgs) -> anyhow::Result<ExitCode> {
    let r = tools::rules_diff(&a.trace, &a.rec, a.shards, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        out!(
            "{} under rules {} against its trace under rules {}: ticks {}..={} ({} compared)",
            r.file,
            r.rules_version,
            r.trace_rules_version,
            r.first_tick,
            r.last_tick,
            r.ticks_compared
        );
        match r.first_difference_tick {
            None => out!("same behaviour: every entity equal at every tick"),
            Some(t) => {
                out!("behaviour differs from tick {t}:");
                for f in &r.first_fields {
                    out!("  {} {}: {} (trace) -> {} (now)", f.entity, f.field, f.a, f.b);
                }
                out!(
                    "spread: {} of {} ticks differ; {} boids and {} players differ at some tick; at most {} boids and {} players at once (tick {}); at the end {} boids, {} players",
                    r.ticks_differing,
                    r.ticks_compared,
                    r.boids_ever_differing,
                    r.players_ever_differing,
                    r.most.boids,
                    r.most.players,
                    r.most.tick,
                    r.at_end.boids,
                    r.at_end.players
                );
                let points: Vec<String> = r
                    .spread
                    .iter()
                    .map(|s| format!("{}:{}", s.tick, s.boids + s.players))
                    .collect();
                out!("entities differing by tick: {}", points.join(" "));
            }
        }
    }
    Ok(if r.first_difference_tick.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(crate) fn rerecord(json: bool, a: &RerecordArgs) -> anyhow::Result<ExitCode> {
    let options = WriterOptions {
        block_ticks: a.block_ticks,
        checkpoint_interval_ticks: a.checkpoint_interval,
        ..WriterOptions::default()
    };
    let paths: Vec<&std::path::Path> = a.old.iter().map(PathBuf::as_path).collect();
    let r = tools::rerecord_chain(&paths, &a.out, a.shards, options, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        out!(
            "wrote {} ({} bytes): ticks {}..={} of {} replayed under rules {} (recorded under {})",
            r.out,
            r.bytes,
            r.first_tick,
            r.last_tick,
            r.files.join(", "),
            r.rules_version,
            r.old_rules_version
        );
        for (file, last, t) in &r.torn_tails {
            out!(
                "note: {file} ends early at byte {} ({} bytes {}): its ticks after {last} are not in the new recording",
                t.offset,
                t.bytes_lost,
                if t.damaged { "damaged" } else { "cut off" }
            );
        }
        match r.first_changed_root_tick {
            None => out!("every state root is the old one"),
            Some(t) => out!("state roots change from tick {t}; final root {}", r.final_root),
        }
    }
    Ok(ExitCode::SUCCESS)
}
