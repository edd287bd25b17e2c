//! `verify` on every core: a recording's checkpoints cut it into spans that replay
//! independently, so each (span, shard count) is a job for a pool of threads.
//!
//! A span starts from the recording's start or from a checkpoint, whose restored state
//! must have the root recorded for its tick, and every tick of it must reproduce the
//! recorded roots. When every job agrees with the recording, every run agrees with every
//! other too, and the end record is checked against the last span and the chain of the
//! recorded roots. Anything else (a mismatch, a checkpoint that will not restore) sends
//! the recording through the lockstep `verify_lockstep`, which explains the first
//! divergence tick by tick; a checkpoint the lockstep replay does not need but that does
//! not hold up is reported as `bad_checkpoint`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::format::RecordInfo;

/// A checkpoint that does not restore to the recorded state, found by a parallel verify.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadCheckpoint {
    pub tick: u32,
    pub reason: String,
}

/// One independent stretch of a recording: from its start state (the recording's start,
/// or a checkpoint) through `last_tick`.
#[derive(Clone, Copy, Debug)]
struct Span {
    checkpoint: Option<RecordInfo>,
    start_tick: u32,
    last_tick: u32,
}

/// How one (span, shard count) job ended.
enum SpanOutcome {
    /// Every tick matched; the world's final state root.
    Matched { final_root: [u8; 32] },
    /// A tick's roots differ from the recording, or the start checkpoint's root does.
    Mismatch { tick: u32 },
    /// The span could not be replayed (a checkpoint does not restore, a block is damaged).
    Failed { tick: u32, reason: String },
    /// Left off because another job failed.
    Abandoned,
}

/// The spans of `rec`: cut at every checkpoint strictly inside it.
fn spans(rec: &Recording) -> Vec<Span> {
    let (start, last) = (rec.meta.start_tick, rec.last_tick());
    let mut spans = vec![Span {
        checkpoint: None,
        start_tick: start,
        last_tick: last,
    }];
    for f in rec
        .checkpoints()
        .filter(|f| f.first_tick > start && f.first_tick < last)
    {
        let open = spans.last_mut().expect("one span at least");
        open.last_tick = f.first_tick;
        spans.push(Span {
            checkpoint: Some(*f),
            start_tick: f.first_tick,
            last_tick: last,
        });
    }
    spans
}

/// Replays one span on `shards` shards against the recorded roots; `done` counts ticks.
fn verify_span(
    rec: &Recording,
    span: &Span,
    shards: usize,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> SpanOutcome {
    let failed = |tick: u32, e: RecordingError| SpanOutcome::Failed {
        tick,
        reason: e.to_string(),
    };
    let mut world = match &span.checkpoint {
        None => match rec.start_world(shards) {
            Ok(w) => w,
            Err(e) => return failed(span.start_tick, e),
        },
        Some(f) => match rec.restore_checkpoint(f, shards) {
            Ok(w) => w,
            Err(e) => return failed(span.start_tick, e),
        },
    };
    let mut ticks = rec.ticks_from(span.start_tick + u32::from(span.checkpoint.is_none()));
    if span.checkpoint.is_some() {
        // The restored state must be the one the run before it reached at this tick.
        match ticks.next() {
            Some(Ok(t)) if t.tick == span.start_tick && t.state_root == world.state_root() => {}
            Some(Ok(_)) | None => {
                return SpanOutcome::Mismatch {
                    tick: span.start_tick,
                }
            }
            Some(Err(e)) => return failed(span.start_tick, e),
        }
    }
    for t in ticks {
        let t = match t {
            Ok(t) => t,
            Err(e) => return failed(world.tick() + 1, e),
        };
        if t.tick > span.last_tick {
            break;
        }
        let out = world.step(&t.inputs);
        if out.state_root != t.state_root || out.snapshots_root != t.snapshots_root {
            return SpanOutcome::Mismatch { tick: t.tick };
        }
        done.fetch_add(1, Relaxed);
        // Another job's mismatch sends the whole recording to the lockstep verify.
        if t.tick % 64 == 0 && stop.load(Relaxed) {
            return SpanOutcome::Abandoned;
        }
    }
    SpanOutcome::Matched {
        final_root: world.state_root(),
    }
}

/// Verifies `path` at every shard count with up to `jobs` threads (see the module
/// comment); `verify_lockstep` when there is one job, a fault to inject, a recording of
/// other rules, or a single span at a single shard count.
pub fn verify_with(
    path: &Path,
    shard_counts: &[usize],
    fault: Option<Fault>,
    jobs: usize,
    progress: Progress<'_>,
) -> Result<VerifyReport, ToolError> {
    if shard_counts.is_empty() {
        return Err(ToolError::Invalid("verify needs at least one shard count".into()));
    }
    if fault.is_some() || jobs <= 1 {
        return verify_lockstep(path, shard_counts, fault, progress);
    }
    let rec = open(path)?;
    let spans = spans(&rec);
    let work: Vec<(usize, usize)> = (0..spans.len())
        .flat_map(|s| shard_counts.iter().map(move |&n| (s, n)))
        .collect();
    if rec.rules_version != migratory_kernel::rules_version() || work.len() < 2 {
        return verify_lockstep(path, shard_counts, fault, progress);
    }
    let total = rec.ticks_recovered().saturating_mul(shard_counts.len() as u32);
    let started = Instant::now();
    let (next, done, stop, finished) = (
        AtomicUsize::new(0),
        AtomicU64::new(0),
        AtomicBool::new(false),
        AtomicUsize::new(0),
    );
    let outcomes: Mutex<Vec<(usize, SpanOutcome)>> = Mutex::new(Vec::with_capacity(work.len()));
    let threads = jobs.min(work.len());
    // A `Recording` reads through one file handle, so each thread opens its own; the
    // terrain is generated once and shared.
    let terrain = rec.shared_terrain().map_err(rec_err(path))?;
    #[cfg(feature = "synthetic-rules")]
    let synthetic = migratory_kernel::rules_version() != migratory_kernel::KERNEL_RULES_VERSION;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                // The threads follow the caller's rules (test builds can switch them).
                #[cfg(feature = "synthetic-rules")]
                migratory_kernel::follow_synthetic_rules(synthetic);
                let mine = match Recording::open(path) {
                    Ok(r) => r,
                    Err(e) => {
                        let outcome = SpanOutcome::Failed {
                            tick: spans[0].start_tick,
                            reason: e.to_string(),
                        };
                        stop.store(true, Relaxed);
                        outcomes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((0, outcome));
                        finished.fetch_add(1, Relaxed);
                        return;
                    }
                };
                mine.adopt_terrain(&terrain);
                while let Some(&(s, n)) = work.get(next.fetch_add(1, Relaxed)) {
                    if stop.load(Relaxed) {
                        break;
                    }
                    let outcome = verify_span(&mine, &spans[s], n, &done, &stop);
                    if !matches!(outcome, SpanOutcome::Matched { .. }) {
                        stop.store(true, Relaxed);
                    }
                    outcomes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((s, outcome));
                }
                finished.fetch_add(1, Relaxed);
            });
        }
        while finished.load(Relaxed) < threads {
            progress(
                (done.load(Relaxed) / shard_counts.len() as u64) as u32,
                total / shard_counts.len() as u32,
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let outcomes = outcomes.into_inner().unwrap_or_else(|p| p.into_inner());
    let all_matched = outcomes.len() == work.len()
        && outcomes
            .iter()
            .all(|(_, o)| matches!(o, SpanOutcome::Matched { .. }));
    if !all_matched {
        // The lockstep replay from the start explains the first divergence. If it finds
        // none, what failed here was a checkpoint it does not use: report the earliest.
        let mut report = verify_lockstep(path, shard_counts, None, progress)?;
        if report.ok() {
            report.bad_checkpoint = outcomes
                .iter()
                .filter(|(s, _)| spans[*s].checkpoint.is_some())
                .filter_map(|(s, o)| match o {
                    SpanOutcome::Matched { .. } | SpanOutcome::Abandoned => None,
                    SpanOutcome::Mismatch { tick } => Some(BadCheckpoint {
                        tick: spans[*s].start_tick,
                        reason: format!("replayed from this checkpoint, the roots differ from the recording at tick {tick}"),
                    }),
                    SpanOutcome::Failed { tick, reason } => Some(BadCheckpoint {
                        tick: spans[*s].start_tick,
                        reason: format!("replayed from this checkpoint, tick {tick}: {reason}"),
                    }),
                })
                .min_by_key(|b| b.tick);
        }
        return Ok(report);
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let last_span = spans.len() - 1;
    let final_root = outcomes
        .iter()
        .find_map(|(s, o)| match o {
            SpanOutcome::Matched { final_root } if *s == last_span => Some(*final_root),
            _ => None,
        })
        .expect("every job matched, the last span's among them");
    // Every replayed root equals the recorded one, so the chain of either is the same.
    let end_record_matches = match rec.end {
        Some(end) => {
            let mut chain = Chain::start(&rec.meta.config_hash);
            for t in rec.ticks_from(rec.first_tick()) {
                let t = t.map_err(rec_err(path))?;
                chain.push(t.tick, &t.state_root, &t.snapshots_root);
            }
            Some(end.final_tick == rec.last_tick() && end.final_root == final_root && end.chain == chain.0)
        }
        None => None,
    };
    let ticks = rec.last_tick() - rec.meta.start_tick;
    progress(ticks, ticks);
    Ok(VerifyReport {
        file: path.display().to_string(),
        shard_counts: shard_counts.to_vec(),
        ticks,
        ticks_recovered: rec.ticks_recovered(),
        torn_tail: rec.torn_tail.clone(),
        rules_version_differs: false,
        divergence: None,
        end_record_matches,
        ticks_per_s: ticks as f64 * shard_counts.len() as f64 / secs,
        spans: spans.len() as u32,
        bad_checkpoint: None,
    })
}
