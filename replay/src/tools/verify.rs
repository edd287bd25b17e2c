//! `run` and `verify`: replaying a recording at shard counts in lockstep, and explaining the first divergence.

use super::*;

/// What `run` found.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub file: String,
    pub shards: usize,
    pub first_tick: u32,
    pub final_tick: u32,
    pub ticks: u32,
    pub final_root: String,
    /// Whether every replayed root equals the recorded one.
    pub roots_match: bool,
    pub first_mismatch_tick: Option<u32>,
    pub ticks_per_s: f64,
    /// Replay speed as a multiple of the world's real-time tick rate.
    pub real_time_multiple: f64,
    pub torn_tail: Option<TornTail>,
}

/// Replays a recording on `shards` shards up to `until` (default: the end).
pub fn run(
    path: &Path,
    shards: usize,
    until: Option<u32>,
    progress: Progress<'_>,
) -> Result<RunReport, ToolError> {
    let rec = open(path)?;
    let last = until.unwrap_or(u32::MAX).min(rec.last_tick());
    let mut world = rec.start_world(shards).map_err(rec_err(path))?;
    let total = last.saturating_sub(world.tick());
    let mut first_mismatch = None;
    let started = Instant::now();
    for t in rec.ticks_from(world.tick() + 1) {
        let t = t.map_err(rec_err(path))?;
        if t.tick > last {
            break;
        }
        let out = world.step(&t.inputs);
        if first_mismatch.is_none()
            && (out.state_root != t.state_root || out.snapshots_root != t.snapshots_root)
        {
            first_mismatch = Some(t.tick);
        }
        progress(t.tick - rec.meta.start_tick, total);
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let ticks = world.tick() - rec.meta.start_tick;
    Ok(RunReport {
        file: path.display().to_string(),
        shards,
        first_tick: rec.first_tick(),
        final_tick: world.tick(),
        ticks,
        final_root: hex(&world.state_root()),
        roots_match: first_mismatch.is_none(),
        first_mismatch_tick: first_mismatch,
        ticks_per_s: ticks as f64 / secs,
        real_time_multiple: ticks as f64 / secs / rec.meta.config.tick_rate_hz as f64,
        torn_tail: rec.torn_tail.clone(),
    })
}

/// The first point where runs of a recording disagree.
#[derive(Debug, Serialize)]
pub struct Divergence {
    pub tick: u32,
    pub root: RootKind,
    /// The two sides: a run against another run, or the recording against the runs.
    pub a: Side,
    pub b: Side,
    pub a_root: String,
    pub b_root: String,
    /// The tick at which `chunks` compares states (the divergent tick, or for a recording
    /// the first checkpoint at or after it).
    pub explained_at_tick: Option<u32>,
    pub chunks: Vec<ChunkDiff>,
    /// For a snapshots-root divergence between runs: the clients whose snapshots differ.
    pub clients: Vec<u32>,
}

impl Divergence {
    /// Whether `check --bless` may take the replay's roots as the new truth: only when
    /// every run agreed with every other and only the recording differs. A divergence
    /// between shard counts is a determinism bug, never a behaviour change to bless.
    pub fn blessable(&self) -> bool {
        matches!((&self.a, &self.b), (Side::Recording, Side::Replay { .. }))
    }
}

/// What `verify` found.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub file: String,
    pub shard_counts: Vec<usize>,
    pub ticks: u32,
    pub ticks_recovered: u32,
    pub torn_tail: Option<TornTail>,
    /// The recording's kernel rules version differs from this build's.
    pub rules_version_differs: bool,
    pub divergence: Option<Divergence>,
    /// The end record's final root and chain agree with the replay (None: no end record).
    pub end_record_matches: Option<bool>,
    pub ticks_per_s: f64,
    /// Independent spans the recording was verified in, side by side (1: lockstep).
    pub spans: u32,
    /// A checkpoint that does not restore to the recorded state (found by a parallel
    /// verify; the lockstep replay from the start does not read checkpoints).
    pub bad_checkpoint: Option<BadCheckpoint>,
}

impl VerifyReport {
    /// True when every run agreed with the recording and each other, and every checkpoint
    /// read restored the recorded state.
    pub fn ok(&self) -> bool {
        self.divergence.is_none() && self.end_record_matches != Some(false) && self.bad_checkpoint.is_none()
    }
}

/// A deliberate divergence for testing: nudge `entity` at `tick` in the run on `shards` shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub shards: usize,
    pub tick: u32,
    pub entity: u32,
}

/// Verifies a recording at every shard count on every core (`verify_with`, one job per
/// available core).
pub fn verify(
    path: &Path,
    shard_counts: &[usize],
    fault: Option<Fault>,
    progress: Progress<'_>,
) -> Result<VerifyReport, ToolError> {
    verify_with(path, shard_counts, fault, default_jobs(), progress)
}

/// One verify job per available core.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Replays the recording at every shard count in lockstep and compares each tick's roots
/// with the recording and across runs; stops at the first divergence and explains it.
pub fn verify_lockstep(
    path: &Path,
    shard_counts: &[usize],
    fault: Option<Fault>,
    progress: Progress<'_>,
) -> Result<VerifyReport, ToolError> {
    if shard_counts.is_empty() {
        return Err(ToolError::Invalid("verify needs at least one shard count".into()));
    }
    let rec = open(path)?;
    let mut worlds = Vec::with_capacity(shard_counts.len());
    for &n in shard_counts {
        #[allow(unused_mut)]
        let mut w = rec.start_world(n).map_err(rec_err(path))?;
        #[cfg(feature = "fault-injection")]
        if let Some(f) = fault.filter(|f| f.shards == n) {
            w.inject_fault(f.tick, f.entity);
        }
        worlds.push(w);
    }
    #[cfg(not(feature = "fault-injection"))]
    if fault.is_some() {
        return Err(ToolError::Invalid(
            "this build has no fault injection (feature fault-injection)".into(),
        ));
    }
    let run = |i: usize| Side::Run {
        shards: shard_counts[i],
    };
    let total = rec.ticks_recovered();
    let mut chain = Chain::start(&rec.meta.config_hash);
    let mut divergence = None;
    let started = Instant::now();
    let mut roots: Vec<([u8; 32], [u8; 32])> = vec![([0; 32], [0; 32]); worlds.len()];
    let mut snapshots: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(); worlds.len()];
    'ticks: for t in rec.ticks_from(rec.first_tick()) {
        let t = t.map_err(rec_err(path))?;
        for (i, w) in worlds.iter_mut().enumerate() {
            let out = w.step(&t.inputs);
            roots[i] = (out.state_root, out.snapshots_root);
            snapshots[i].clear();
            snapshots[i].extend(out.snapshots().map(|f| (f.client, f.bytes.to_vec())));
        }
        chain.push(t.tick, &roots[0].0, &roots[0].1);
        progress(t.tick - rec.meta.start_tick, total);
        // Runs against each other first: their states are at hand to compare.
        for i in 1..worlds.len() {
            if roots[i] != roots[0] {
                let state = roots[i].0 != roots[0].0;
                let clients = if state {
                    Vec::new()
                } else {
                    snapshots[0]
                        .iter()
                        .filter(|f| !snapshots[i].contains(f))
                        .map(|f| f.0)
                        .chain(
                            snapshots[i]
                                .iter()
                                .filter(|f| !snapshots[0].iter().any(|g| g.0 == f.0))
                                .map(|f| f.0),
                        )
                        .collect()
                };
                divergence = Some(Divergence {
                    tick: t.tick,
                    root: if state {
                        RootKind::State
                    } else {
                        RootKind::Snapshots
                    },
                    a: run(0),
                    b: run(i),
                    a_root: hex(if state { &roots[0].0 } else { &roots[0].1 }),
                    b_root: hex(if state { &roots[i].0 } else { &roots[i].1 }),
                    explained_at_tick: state.then_some(t.tick),
                    chunks: if state {
                        divergence::compare(&worlds[0], &worlds[i])
                    } else {
                        Vec::new()
                    },
                    clients,
                });
                break 'ticks;
            }
        }
        if roots[0] != (t.state_root, t.snapshots_root) {
            let state = roots[0].0 != t.state_root;
            let (explained_at_tick, chunks) = if state {
                explain_against_recording(&rec, &mut worlds[0], t.tick).map_err(rec_err(path))?
            } else {
                (None, Vec::new())
            };
            divergence = Some(Divergence {
                tick: t.tick,
                root: if state {
                    RootKind::State
                } else {
                    RootKind::Snapshots
                },
                a: Side::Recording,
                b: Side::Replay {
                    shard_counts: shard_counts.to_vec(),
                },
                a_root: hex(if state { &t.state_root } else { &t.snapshots_root }),
                b_root: hex(if state { &roots[0].0 } else { &roots[0].1 }),
                explained_at_tick,
                chunks,
                clients: Vec::new(),
            });
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let ticks = worlds[0].tick() - rec.meta.start_tick;
    let end_record_matches = match (&divergence, rec.end) {
        (None, Some(end)) => Some(
            end.final_tick == worlds[0].tick()
                && end.final_root == worlds[0].state_root()
                && end.chain == chain.0,
        ),
        _ => None,
    };
    Ok(VerifyReport {
        file: path.display().to_string(),
        shard_counts: shard_counts.to_vec(),
        ticks,
        ticks_recovered: rec.ticks_recovered(),
        torn_tail: rec.torn_tail.clone(),
        rules_version_differs: rec.rules_version != migratory_kernel::rules_version(),
        divergence,
        end_record_matches,
        ticks_per_s: ticks as f64 * shard_counts.len() as f64 / secs,
        spans: 1,
        bad_checkpoint: None,
    })
}

/// The recorded state is only known at checkpoints: step the replay on to the first
/// checkpoint at or after `tick` and compare the two states there.
fn explain_against_recording(
    rec: &Recording,
    world: &mut World,
    tick: u32,
) -> Result<(Option<u32>, Vec<ChunkDiff>), RecordingError> {
    let Some(cp) = rec.checkpoints().find(|f| f.first_tick >= tick).copied() else {
        return Ok((None, Vec::new()));
    };
    for t in rec.ticks_from(world.tick() + 1) {
        let t = t?;
        if t.tick > cp.first_tick {
            break;
        }
        world.step(&t.inputs);
    }
    let recorded = match rec.restore_checkpoint(&cp, 1) {
        Ok(w) => w,
        // Recorded under other rules: the divergence is expected and cannot be explained
        // field by field (verify reports `rules_version_differs`).
        Err(RecordingError::CheckpointIncompatible { .. }) => return Ok((None, Vec::new())),
        Err(e) => return Err(e),
    };
    Ok((Some(cp.first_tick), divergence::compare(&recorded, world)))
}
