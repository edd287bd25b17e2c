//! What the `migratory-replay` subcommands do, as library functions returning reports
//! (printed as text or JSON by the binary, asserted on by tests).

use std::path::{Path, PathBuf};
use std::time::Instant;

use migratory_kernel::hex;
use migratory_kernel::{Script, ScriptConfig};
use migratory_kernel::{TickInputs, World, WorldConfig};
use serde::Serialize;
use thiserror::Error;

use crate::divergence::{self, ChunkDiff, RootKind, Side};
use crate::format::{Chain, RecordKind, Recording, RecordingError, RecordingWriter, TornTail, WriterOptions};

/// Why a tool could not do its job (a divergence is a finding, not an error).
#[derive(Debug, Error)]
pub enum ToolError {
    #[error("{path}: {source}")]
    Recording {
        path: String,
        #[source]
        source: RecordingError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn rec_err(path: &Path) -> impl FnOnce(RecordingError) -> ToolError + '_ {
    move |source| ToolError::Recording {
        path: path.display().to_string(),
        source,
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ToolError {
    let context = context.into();
    move |source| ToolError::Io { context, source }
}

/// Opens a recording, naming the file in any error.
pub fn open(path: &Path) -> Result<Recording, ToolError> {
    Recording::open(path).map_err(rec_err(path))
}

/// Progress callback: (ticks done, ticks total).
pub type Progress<'a> = &'a mut dyn FnMut(u32, u32);

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
}

impl VerifyReport {
    /// True when every run agreed with the recording and each other.
    pub fn ok(&self) -> bool {
        self.divergence.is_none() && self.end_record_matches != Some(false)
    }
}

/// A deliberate divergence for testing: nudge `entity` at `tick` in the run on `shards` shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub shards: usize,
    pub tick: u32,
    pub entity: u32,
}

/// Replays the recording at every shard count in lockstep and compares each tick's roots
/// with the recording and across runs; stops at the first divergence and explains it.
pub fn verify(
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
        rules_version_differs: rec.rules_version != migratory_kernel::KERNEL_RULES_VERSION,
        divergence,
        end_record_matches,
        ticks_per_s: ticks as f64 * shard_counts.len() as f64 / secs,
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

/// One file's result in `check`.
#[derive(Debug, Serialize)]
pub struct CheckEntry {
    pub file: String,
    pub ok: bool,
    pub ticks: u32,
    pub divergence: Option<Divergence>,
    /// The recording was made by other kernel rules (a divergence is then expected).
    pub rules_version_differs: bool,
    /// With `--bless`: the first tick whose roots changed (None: nothing changed).
    pub blessed_first_changed_tick: Option<u32>,
    pub error: Option<String>,
}

/// Verifies every `.mrec` in `dir` at 1 and `shards` shards; with `bless`, rewrites the
/// stored roots of files that changed and says from which tick. `fault` is passed to every
/// `verify` (tests of the bless rule).
pub fn check(
    dir: &Path,
    shards: usize,
    bless: bool,
    fault: Option<Fault>,
) -> Result<Vec<CheckEntry>, ToolError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(format!("reading {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "mrec"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ToolError::Invalid(format!("no .mrec files in {}", dir.display())));
    }
    let mut entries = Vec::with_capacity(files.len());
    for path in files {
        let shard_counts: Vec<usize> = if shards > 1 { vec![1, shards] } else { vec![1] };
        let file = path.display().to_string();
        let entry = match verify(&path, &shard_counts, fault, &mut |_, _| {}) {
            Err(e) => CheckEntry {
                file,
                ok: false,
                ticks: 0,
                divergence: None,
                rules_version_differs: false,
                blessed_first_changed_tick: None,
                error: Some(e.to_string()),
            },
            Ok(report) => {
                // Bless only what a rules change explains: the recording disagreeing with
                // the replay. Runs disagreeing with each other is nondeterminism; rewriting
                // the roots from the 1-shard run would hide it.
                let blessable = report.divergence.as_ref().is_none_or(Divergence::blessable);
                let (ok, blessed, error) = match bless && !report.ok() && blessable {
                    false => (report.ok(), None, None),
                    true => match rewrite_roots(&path) {
                        Ok(changed) => (true, changed, None),
                        Err(e) => (false, None, Some(e.to_string())),
                    },
                };
                CheckEntry {
                    file,
                    ok,
                    ticks: report.ticks,
                    divergence: report.divergence,
                    rules_version_differs: report.rules_version_differs,
                    blessed_first_changed_tick: blessed,
                    error,
                }
            }
        };
        entries.push(entry);
    }
    Ok(entries)
}

/// The writer options a recording was made with, read back from its records.
fn options_of(rec: &Recording) -> WriterOptions {
    // The longest block, not the first: the first is cut short when a checkpoint comes
    // before it fills (as in an extract starting between checkpoints), and rewriting with
    // its length would change the layout of every later block.
    let block_ticks = rec
        .records
        .iter()
        .filter(|f| f.kind == RecordKind::Block)
        .map(|f| f.tick_count)
        .max()
        .unwrap_or(60);
    let ticks: Vec<u32> = rec
        .checkpoints()
        .map(|f| f.first_tick)
        .filter(|&t| t != rec.meta.start_tick)
        .collect();
    let checkpoint_interval_ticks = match ticks.as_slice() {
        [a, b, ..] => b - a,
        [a] => *a,
        [] => 0,
    };
    WriterOptions {
        block_ticks,
        checkpoint_interval_ticks,
        fsync_every_blocks: 0,
    }
}

/// Replays `path` and rewrites it with this build's roots, checkpoints and end record (same
/// inputs), through a temporary file renamed into place. Returns the first changed tick.
pub fn rewrite_roots(path: &Path) -> Result<Option<u32>, ToolError> {
    let rec = open(path)?;
    if rec.torn_tail.is_some() {
        return Err(ToolError::Invalid(format!(
            "{}: torn tail; extract the readable part first",
            path.display()
        )));
    }
    let mut world = rec.start_world(1).map_err(rec_err(path))?;
    let tmp = path.with_extension("mrec.blessing");
    let file = std::fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let mut writer = RecordingWriter::new(std::io::BufWriter::new(file), &world, 1, options_of(&rec))
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    let mut first_changed = None;
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.map_err(rec_err(path))?;
        let out = world.step(&t.inputs);
        if first_changed.is_none()
            && (out.state_root != t.state_root || out.snapshots_root != t.snapshots_root)
        {
            first_changed = Some(t.tick);
        }
        let out = out.clone();
        writer
            .record_tick(&t.inputs, &out, &world)
            .map_err(io_err(format!("writing {}", tmp.display())))?;
    }
    writer
        .finish()
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("replacing {}", path.display())))?;
    Ok(first_changed)
}

/// One entity, as `inspect --entity` shows it.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EntityReport {
    Boid {
        id: u32,
        x_mm: i32,
        y_mm: i32,
        vx: i32,
        vy: i32,
    },
    Avatar {
        id: u32,
        slot: u32,
        client: u32,
        name: String,
        x_mm: i32,
        y_mm: i32,
        vx: i32,
        vy: i32,
        score: u32,
        acked_tick: Option<u32>,
    },
}

/// A player in the `inspect` summary.
#[derive(Debug, Serialize)]
pub struct PlayerLine {
    pub slot: u32,
    pub client: u32,
    pub name: String,
    pub x_mm: i32,
    pub y_mm: i32,
    pub score: u32,
}

/// What `inspect` shows.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    pub tick: u32,
    pub state_root: String,
    pub boids: usize,
    pub players: Vec<PlayerLine>,
    pub entity: Option<EntityReport>,
}

/// The state at `tick`: a summary, or one entity.
pub fn inspect(path: &Path, tick: u32, entity: Option<u32>) -> Result<InspectReport, ToolError> {
    let rec = open(path)?;
    // A tick outside the recording is a bad argument; `world_at` would report it as a
    // `Corrupted` recording ("recording corrupted at byte offset 0"), which it is not.
    if tick < rec.meta.start_tick || tick > rec.last_tick() {
        return Err(ToolError::Invalid(format!(
            "--tick {tick} is outside the recording ({}..={})",
            rec.meta.start_tick,
            rec.last_tick()
        )));
    }
    let world = rec.world_at(tick, 1).map_err(rec_err(path))?;
    let boid_count = world.config().boid_count;
    let entity = match entity {
        None => None,
        Some(id) if id < boid_count => {
            let b = world.boid(id).expect("id below the boid count");
            Some(EntityReport::Boid {
                id,
                x_mm: b.x_mm,
                y_mm: b.y_mm,
                vx: b.vx.into(),
                vy: b.vy.into(),
            })
        }
        Some(id) => {
            let slot = id - boid_count;
            match world.players().get(slot as usize).filter(|p| p.active) {
                Some(p) => Some(EntityReport::Avatar {
                    id,
                    slot,
                    client: p.client,
                    name: p.name().to_string(),
                    x_mm: p.x_mm,
                    y_mm: p.y_mm,
                    vx: p.vx,
                    vy: p.vy,
                    score: p.score,
                    acked_tick: (p.acked_tick != u32::MAX).then_some(p.acked_tick),
                }),
                None => {
                    return Err(ToolError::Invalid(format!(
                        "entity {id} does not exist at tick {tick} (boids are 0..{boid_count}, avatars {boid_count} + slot of a joined player)"
                    )))
                }
            }
        }
    };
    Ok(InspectReport {
        tick: world.tick(),
        state_root: hex(&world.state_root()),
        boids: boid_count as usize,
        players: world
            .players()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.active)
            .map(|(s, p)| PlayerLine {
                slot: s as u32,
                client: p.client,
                name: p.name().to_string(),
                x_mm: p.x_mm,
                y_mm: p.y_mm,
                score: p.score,
            })
            .collect(),
        entity,
    })
}

/// What `diff` found.
#[derive(Debug, Serialize)]
pub struct DiffReport {
    pub a: String,
    pub b: String,
    pub config_differs: bool,
    /// Ticks both recordings cover.
    pub common_ticks: (u32, u32),
    pub first_divergent_tick: Option<u32>,
    pub root: Option<RootKind>,
    pub inputs_differ: bool,
    pub chunks: Vec<ChunkDiff>,
}

/// Compares two recordings tick by tick; at the first difference in recorded roots,
/// rebuilds both states at that tick and explains it.
pub fn diff(a: &Path, b: &Path) -> Result<DiffReport, ToolError> {
    let (ra, rb) = (open(a)?, open(b)?);
    let from = ra.first_tick().max(rb.first_tick());
    let to = ra.last_tick().min(rb.last_tick());
    let mut report = DiffReport {
        a: a.display().to_string(),
        b: b.display().to_string(),
        config_differs: ra.meta.config_hash != rb.meta.config_hash,
        common_ticks: (from, to),
        first_divergent_tick: None,
        root: None,
        inputs_differ: false,
        chunks: Vec::new(),
    };
    if report.config_differs {
        return Ok(report);
    }
    for (x, y) in ra.ticks_from(from).zip(rb.ticks_from(from)) {
        let (x, y) = (x.map_err(rec_err(a))?, y.map_err(rec_err(b))?);
        if x.tick > to {
            break;
        }
        if x.state_root != y.state_root || x.snapshots_root != y.snapshots_root {
            report.first_divergent_tick = Some(x.tick);
            report.root = Some(if x.state_root != y.state_root {
                RootKind::State
            } else {
                RootKind::Snapshots
            });
            report.inputs_differ = x.inputs != y.inputs;
            let wa = ra.world_at(x.tick, 1).map_err(rec_err(a))?;
            let wb = rb.world_at(x.tick, 1).map_err(rec_err(b))?;
            report.chunks = divergence::compare(&wa, &wb);
            break;
        }
    }
    Ok(report)
}

/// What `extract` wrote.
#[derive(Debug, Serialize)]
pub struct ExtractReport {
    pub out: String,
    pub from: u32,
    pub to: u32,
    pub bytes: u64,
}

/// Cuts ticks `from+1..=to` (starting from the state at `from`) into a new recording whose
/// roots are checked against the original on the way.
pub fn extract(path: &Path, from: u32, to: u32, out: &Path) -> Result<ExtractReport, ToolError> {
    let rec = open(path)?;
    if from >= to || to > rec.last_tick() || from < rec.meta.start_tick {
        return Err(ToolError::Invalid(format!(
            "--from {from} --to {to} must satisfy {} <= from < to <= {}",
            rec.meta.start_tick,
            rec.last_tick()
        )));
    }
    let mut world = rec.world_at(from, 1).map_err(rec_err(path))?;
    let file = std::fs::File::create(out).map_err(io_err(format!("creating {}", out.display())))?;
    let mut writer = RecordingWriter::new(std::io::BufWriter::new(file), &world, 1, options_of(&rec))
        .map_err(io_err(format!("writing {}", out.display())))?;
    for t in rec.ticks_from(from + 1) {
        let t = t.map_err(rec_err(path))?;
        if t.tick > to {
            break;
        }
        let out_tick = world.step(&t.inputs).clone();
        if out_tick.state_root != t.state_root || out_tick.snapshots_root != t.snapshots_root {
            return Err(ToolError::Invalid(format!(
                "the original does not replay on this build at tick {} (run verify)",
                t.tick
            )));
        }
        writer
            .record_tick(&t.inputs, &out_tick, &world)
            .map_err(io_err(format!("writing {}", out.display())))?;
    }
    let bytes = writer.bytes_written();
    writer
        .finish()
        .map_err(io_err(format!("writing {}", out.display())))?;
    Ok(ExtractReport {
        out: out.display().to_string(),
        from,
        to,
        bytes,
    })
}

/// How `synth` builds a session.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub config: WorldConfig,
    pub script: ScriptConfig,
    pub ticks: u32,
    pub shards: usize,
    pub writer: WriterOptions,
}

/// What `synth` wrote.
#[derive(Debug, Serialize)]
pub struct SynthReport {
    pub ticks: u32,
    pub bytes: u64,
    pub final_root: String,
    pub step_ms_per_tick: f64,
    pub record_ms_per_tick: f64,
    /// Recording cost as a fraction of the tick.
    pub record_fraction: f64,
}

/// Plays scripted bots in a fresh world and records the session into `sink`.
pub fn synth_into<W: crate::format::Durable>(
    options: &SynthOptions,
    sink: W,
) -> Result<(SynthReport, W), ToolError> {
    let mut world =
        World::new(options.config.clone(), options.shards).map_err(|e| ToolError::Invalid(e.to_string()))?;
    let mut script = Script::new(options.script.clone());
    let mut writer = RecordingWriter::new(sink, &world, options.shards as u32, options.writer.clone())
        .map_err(io_err("writing"))?;
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let (mut step_s, mut record_s) = (0.0, 0.0);
    for _ in 0..options.ticks {
        script.next_inputs(&world, &last, &mut inputs);
        let t0 = Instant::now();
        let out = world.step(&inputs);
        step_s += t0.elapsed().as_secs_f64();
        last.clone_from(out);
        let t1 = Instant::now();
        writer
            .record_tick(&inputs, &last, &world)
            .map_err(io_err("writing"))?;
        record_s += t1.elapsed().as_secs_f64();
    }
    let t1 = Instant::now();
    let bytes = writer.bytes_written();
    let sink = writer.finish().map_err(io_err("writing"))?;
    record_s += t1.elapsed().as_secs_f64();
    let n = options.ticks.max(1) as f64;
    Ok((
        SynthReport {
            ticks: options.ticks,
            bytes,
            final_root: hex(&world.state_root()),
            step_ms_per_tick: step_s * 1000.0 / n,
            record_ms_per_tick: record_s * 1000.0 / n,
            record_fraction: record_s / step_s.max(1e-9),
        },
        sink,
    ))
}

/// Synthesises a recording into a file.
pub fn synth(options: &SynthOptions, out: &Path) -> Result<SynthReport, ToolError> {
    let file = std::fs::File::create(out).map_err(io_err(format!("creating {}", out.display())))?;
    let (report, _) = synth_into(options, std::io::BufWriter::new(file))?;
    Ok(report)
}

/// One line of `bench`.
#[derive(Debug, Serialize)]
pub struct BenchLine {
    pub shards: usize,
    pub ticks_per_s: f64,
    pub real_time_multiple: f64,
    /// Ticks/s relative to the first shard count.
    pub speedup: f64,
}

/// What `bench` measured.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub boids: u32,
    pub clients: u32,
    pub ticks: u32,
    pub recording_bytes: u64,
    pub record_fraction: f64,
    pub lines: Vec<BenchLine>,
}

/// Synthesises a session in memory, then replays it at each shard count, side by side.
pub fn bench(options: &SynthOptions, shard_counts: &[usize]) -> Result<BenchReport, ToolError> {
    let (synth, bytes) = synth_into(options, Vec::new())?;
    let dir = std::env::temp_dir().join(format!("migratory-bench-{}.mrec", std::process::id()));
    std::fs::write(&dir, &bytes).map_err(io_err("writing the bench recording"))?;
    let mut lines: Vec<BenchLine> = Vec::new();
    for &n in shard_counts {
        let r = run(&dir, n, None, &mut |_, _| {});
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&dir);
                return Err(e);
            }
        };
        let base = lines.first().map_or(r.ticks_per_s, |l| l.ticks_per_s);
        lines.push(BenchLine {
            shards: n,
            ticks_per_s: r.ticks_per_s,
            real_time_multiple: r.real_time_multiple,
            speedup: r.ticks_per_s / base,
        });
    }
    let _ = std::fs::remove_file(&dir);
    Ok(BenchReport {
        boids: options.config.boid_count,
        clients: options.script.clients,
        ticks: options.ticks,
        recording_bytes: synth.bytes,
        record_fraction: synth.record_fraction,
        lines,
    })
}
