//! A case run against its oracles. The case is driven once at one shard (its scripted
//! players see that world's snapshots), which fixes every tick's inputs and roots; each
//! oracle then checks one way the promise could break:
//!
//! - `invariants`: after every tick, boids counted and inside the world, active players
//!   within the slots and inside the world, no snapshot over its byte budget, and scores
//!   only from catches (no score falls, the tick's gains are the boids its casts caught);
//! - `decoder`: every client's snapshots, decoded with the client's decoder
//!   (`ClientDecoder`), give exactly the view the world computed for that client;
//! - `shards`: the same inputs at the case's other shard count give every tick's state
//!   root and snapshots root (every client's snapshot bytes) equal;
//! - `checkpoint`: a checkpoint saved at a random tick, restored at another shard count
//!   and stepped with the same later inputs, equals the uninterrupted run at every tick;
//! - `recording`: the run recorded, read back, holds the same inputs and roots and
//!   replays to them;
//! - `torn`: the recording cut at a random byte, and the same file with garbage from that
//!   byte on (read as a resume reads it), opens, recovers at least every block written in
//!   full before the cut, its last tick's state equals the run's, and a world resumed
//!   there with the same later inputs equals the run at every later tick;
//! - `extract`: a random range of the recording, cut out with `extract`, verifies on its
//!   own: it starts from the run's state at its first tick and replays to the run's roots.

use std::time::{Duration, Instant};

use migratory_kernel::{restore_checkpoint, save_checkpoint, ClientDecoder, Script, TickInputs, World};

use super::case::{invalid_input, Case, Rng};
use crate::{Recording, RecordingWriter};

/// The oracles, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Oracle {
    Drive,
    Invariants,
    Decoder,
    Shards,
    Checkpoint,
    Recording,
    Torn,
    Extract,
}

impl Oracle {
    pub const ALL: [Oracle; 8] = [
        Oracle::Drive,
        Oracle::Invariants,
        Oracle::Decoder,
        Oracle::Shards,
        Oracle::Checkpoint,
        Oracle::Recording,
        Oracle::Torn,
        Oracle::Extract,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Oracle::Drive => "drive",
            Oracle::Invariants => "invariants",
            Oracle::Decoder => "decoder",
            Oracle::Shards => "shards",
            Oracle::Checkpoint => "checkpoint",
            Oracle::Recording => "recording",
            Oracle::Torn => "torn",
            Oracle::Extract => "extract",
        }
    }
}

/// A case that broke an oracle: enough to rerun it (`sim --seed`) and to start looking.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub seed: u64,
    pub oracle: Oracle,
    /// The first tick at which it broke, when the oracle goes tick by tick.
    pub tick: Option<u32>,
    /// The first entity that differs there (`boid 17`, `player slot 2 (client 5)`,
    /// `client 5's snapshot`), and its first differing field with both values, when the
    /// oracle compares states.
    pub entity: Option<String>,
    pub field: Option<String>,
    pub detail: String,
    /// After shrinking: what the smallest failing case kept, and the recording of its run
    /// at one shard (for `migratory-replay verify`, `diff`, `migratory-replay view`).
    pub shrunk: Option<Box<Shrunk>>,
}

impl std::fmt::Display for Failure {
    /// `shards at tick 20: state roots differ; first at boid 3, x_mm: 1200 (run) vs 1201`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tick {
            Some(t) => write!(f, "{} at tick {t}: {}", self.oracle.name(), self.detail),
            None => write!(f, "{}: {}", self.oracle.name(), self.detail),
        }
    }
}

/// The smallest failing case a shrink found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Shrunk {
    pub ticks: u32,
    pub clients: u32,
    pub boids: u32,
    pub tick: Option<u32>,
    pub recording: Option<std::path::PathBuf>,
}

/// What a passing case did, and how long each oracle took.
#[derive(Clone, Debug, Default)]
pub struct CaseReport {
    /// The world could not be built from the drawn config (a valid config whose terrain
    /// has nowhere to spawn, say): nothing to check, and not a failure.
    pub unbuildable: Option<String>,
    pub ticks: u32,
    pub boids: u32,
    pub clients: u32,
    pub time_by_oracle: Vec<(Oracle, Duration)>,
}

/// One tick of the driving run: its inputs and roots.
struct Driven {
    config: migratory_kernel::WorldConfig,
    inputs: Vec<TickInputs>,
    state_roots: Vec<[u8; 32]>,
    snapshots_roots: Vec<[u8; 32]>,
    recording: Vec<u8>,
    /// `(tick, bytes written once that tick was recorded)`, from `(0, the header's bytes)`.
    written: Vec<(u32, u64)>,
    checkpoint: Vec<u8>,
}

/// Runs `case` against every oracle; the first failure stops it.
pub fn run_case(case: &Case) -> Result<CaseReport, Failure> {
    run_case_with(case, &mut |_| {})
}

/// The recording of `case`'s driving run (one shard), as the `recording` oracle reads it;
/// None when the run itself broke (the shrinker then keeps the case it had).
pub fn recording_of(case: &Case) -> Option<Vec<u8>> {
    IN_CASE.with(|c| c.set(true));
    let run = std::panic::catch_unwind(|| drive(case, false));
    IN_CASE.with(|c| c.set(false));
    run.ok()?.ok().map(|d| d.recording)
}

/// `run_case` with a divergence planted in the run at the case's other shard count: boid
/// `entity` nudged by a millimetre at `tick` (to show the oracles catch one).
#[cfg(feature = "fault-injection")]
pub fn run_case_with_fault(case: &Case, tick: u32, entity: u32) -> Result<CaseReport, Failure> {
    run_case_with(case, &mut |w| w.inject_fault(tick, entity))
}

thread_local! {
    /// Whether this thread is running a case (whose panics `quiet_panics` records).
    static IN_CASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Where the last panic of a case on this thread happened.
    static PANICKED_AT: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// A caught panic's message, and where it happened when `quiet_panics` saw it.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    match PANICKED_AT.with(|p| p.take()) {
        Some(at) => format!("{message} (at {at})"),
        None => message,
    }
}

/// Makes a panic inside a case silent and names its place in the case's failure instead
/// (a run of thousands of cases prints failures, not backtraces); panics elsewhere still
/// go to the hook that was there. For the CLI: the hook is process-wide. Shard worker
/// threads are not in a case: their panic prints, and fails the case once re-raised.
pub fn quiet_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if IN_CASE.with(|c| c.get()) {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
            PANICKED_AT.with(|p| p.set(at));
        } else {
            previous(info);
        }
    }));
}

/// `run_case`, with `tamper` applied to the world at the case's other shard count before
/// it steps (tests use it to plant a divergence and see the oracle catch it). A panic
/// (an overflow check, an assertion in the kernel) fails the oracle that was running.
fn run_case_with(case: &Case, tamper: &mut dyn FnMut(&mut World)) -> Result<CaseReport, Failure> {
    let current = std::cell::Cell::new(Oracle::Drive);
    IN_CASE.with(|c| c.set(true));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_case(case, tamper, &current)
    }));
    IN_CASE.with(|c| c.set(false));
    run.unwrap_or_else(|payload| {
        let message = panic_message(&*payload);
        Err(Failure {
            seed: case.seed,
            oracle: current.get(),
            tick: None,
            entity: None,
            field: None,
            detail: format!("panicked: {message}"),
            shrunk: None,
        })
    })
}

fn check_case(
    case: &Case,
    tamper: &mut dyn FnMut(&mut World),
    current: &std::cell::Cell<Oracle>,
) -> Result<CaseReport, Failure> {
    let fail = |oracle, b: Broken| Failure {
        seed: case.seed,
        oracle,
        tick: b.tick,
        entity: b.entity,
        field: b.field,
        detail: b.detail,
        shrunk: None,
    };
    let mut report = CaseReport {
        ticks: case.ticks,
        boids: case.config.boid_count,
        clients: case.script.clients,
        ..CaseReport::default()
    };
    let mut times = Vec::new();
    let mut timed = |oracle, t0: Instant| times.push((oracle, t0.elapsed()));

    let t0 = Instant::now();
    if let Err(e) = World::new(case.config.clone(), 1) {
        report.unbuildable = Some(e.to_string());
        return Ok(report);
    }
    let driven = drive(case, true).map_err(|(oracle, b)| fail(oracle, b))?;
    timed(Oracle::Drive, t0);
    current.set(Oracle::Shards);

    let t0 = Instant::now();
    let mut other = World::new(case.config.clone(), case.shards).map_err(|e| {
        fail(
            Oracle::Shards,
            Broken::at(None, format!("world at {} shards: {e}", case.shards)),
        )
    })?;
    tamper(&mut other);
    let first = World::new(case.config.clone(), 1)
        .map_err(|e| fail(Oracle::Shards, Broken::at(None, e.to_string())))?;
    if other.state_root() != first.state_root() {
        return Err(fail(
            Oracle::Shards,
            Broken::at(Some(0), "the initial states differ").explained(&first, &other),
        ));
    }
    step_and_compare(&mut other, &driven, 0).map_err(|b| fail(Oracle::Shards, b))?;
    timed(Oracle::Shards, t0);
    current.set(Oracle::Checkpoint);

    let t0 = Instant::now();
    let at = Some(case.checkpoint_tick);
    let mut restored = restore_checkpoint(&driven.checkpoint, case.checkpoint_shards)
        .map_err(|e| fail(Oracle::Checkpoint, Broken::at(at, format!("restoring: {e}"))))?;
    if restored.state_root() != driven.state_roots[case.checkpoint_tick as usize - 1] {
        let saved = replayed(&driven, case.checkpoint_tick);
        return Err(fail(
            Oracle::Checkpoint,
            Broken::at(at, "the restored state differs from the saved one").explained(&saved, &restored),
        ));
    }
    step_and_compare(&mut restored, &driven, case.checkpoint_tick)
        .map_err(|b| fail(Oracle::Checkpoint, b))?;
    timed(Oracle::Checkpoint, t0);
    current.set(Oracle::Recording);

    let t0 = Instant::now();
    check_recording(case, &driven).map_err(|b| fail(Oracle::Recording, b))?;
    timed(Oracle::Recording, t0);
    current.set(Oracle::Torn);

    let t0 = Instant::now();
    check_torn(case, &driven).map_err(|b| fail(Oracle::Torn, b))?;
    timed(Oracle::Torn, t0);
    current.set(Oracle::Extract);

    let t0 = Instant::now();
    check_extract(case, &driven).map_err(|b| fail(Oracle::Extract, b))?;
    timed(Oracle::Extract, t0);
    report.time_by_oracle = times;
    Ok(report)
}

/// How an oracle broke: where, and (when it compares states) the first entity and field.
#[derive(Debug)]
struct Broken {
    tick: Option<u32>,
    detail: String,
    entity: Option<String>,
    field: Option<String>,
}

impl Broken {
    fn at(tick: Option<u32>, detail: impl Into<String>) -> Broken {
        Broken {
            tick,
            detail: detail.into(),
            entity: None,
            field: None,
        }
    }

    /// Names the first entity and field where `expected` (the driving run) and `actual`
    /// (the same tick reached another way) differ: their state leaf by leaf, else the
    /// tick's snapshots client by client.
    fn explained(mut self, expected: &World, actual: &World) -> Broken {
        let fields = crate::divergence::compare(expected, actual);
        if let Some(f) = fields.iter().flat_map(|c| &c.fields).next() {
            self.entity = Some(f.entity.clone());
            self.field = Some(format!("{}: {} (run) vs {}", f.field, f.a, f.b));
        } else if let Some(c) = fields.first() {
            self.entity = Some(format!("{} leaf {}", c.kind, c.index));
        } else {
            let (a, b) = (expected.output(), actual.output());
            let differs = a
                .snapshots()
                .zip(b.snapshots())
                .find(|(x, y)| x.client != y.client || x.bytes != y.bytes);
            if let Some((x, y)) = differs {
                self.entity = Some(format!("client {}'s snapshot", x.client));
                let at = x.bytes.iter().zip(y.bytes).position(|(p, q)| p != q);
                self.field = Some(match at {
                    Some(k) => format!("byte {k}: {:#04x} (run) vs {:#04x}", x.bytes[k], y.bytes[k]),
                    None => format!("length: {} (run) vs {}", x.bytes.len(), y.bytes.len()),
                });
            } else if a.snapshots().len() != b.snapshots().len() {
                self.entity = Some("the tick's snapshots".into());
                self.field = Some(format!(
                    "count: {} (run) vs {}",
                    a.snapshots().len(),
                    b.snapshots().len()
                ));
            } else {
                // The driving run, rebuilt from its inputs, is this side's state: the run
                // itself does not reproduce in this process.
                self.detail = format!(
                    "{}; the driving run rebuilt to this tick equals this side, so the run does not \
                     reproduce from its inputs (an order that differs from one world to the next?)",
                    self.detail
                );
            }
        }
        match self.entity.take() {
            Some(entity) => {
                let field = self.field.take();
                self.naming(entity, field)
            }
            None => self,
        }
    }

    /// Names the first differing entity (and field) in the detail too.
    fn naming(mut self, entity: String, field: Option<String>) -> Broken {
        self.detail = format!("{}; first at {entity}", self.detail);
        if let Some(f) = &field {
            self.detail = format!("{}, {f}", self.detail);
        }
        self.entity = Some(entity);
        self.field = field;
        self
    }
}

/// The driving run's world at `tick`, rebuilt from its inputs (to explain a difference).
fn replayed(d: &Driven, tick: u32) -> World {
    let mut world = World::new(d.config.clone(), 1).expect("the driving run built this world");
    for inputs in &d.inputs[..tick as usize] {
        world.step(inputs);
    }
    world
}

/// The driving run at one shard: the scripted players and the invalid inputs, every
/// tick's roots, the recording of it all, and the checkpoint at the case's tick. With
/// `checks`, the invariants and the decoder oracle after every tick (without: the run
/// of a failing case, recorded whatever it did).
fn drive(case: &Case, checks: bool) -> Result<Driven, (Oracle, Broken)> {
    let driving = |tick, detail: String| (Oracle::Drive, Broken::at(tick, detail));
    let mut world = World::new(case.config.clone(), 1).map_err(|e| driving(None, e.to_string()))?;
    let mut script = Script::new(case.script.clone());
    let mut r = Rng::new(case.seed ^ 0x5eed);
    let mut writer = RecordingWriter::new(Vec::new(), &world, 1, case.writer.clone())
        .map_err(|e| driving(None, format!("recording: {e}")))?;
    let mut d = Driven {
        config: case.config.clone(),
        inputs: Vec::with_capacity(case.ticks as usize),
        state_roots: Vec::new(),
        snapshots_roots: Vec::new(),
        recording: Vec::new(),
        written: Vec::new(),
        checkpoint: Vec::new(),
    };
    d.written.push((0, writer.bytes_written()));
    let mut decoders: std::collections::BTreeMap<u32, ClientDecoder> = std::collections::BTreeMap::new();
    let mut scores = std::collections::BTreeMap::new();
    let mut inputs = TickInputs::default();
    for _ in 0..case.ticks {
        script.next_inputs(&world, world.output(), &mut inputs);
        let tick = world.tick() + 1;
        if r.chance(u64::from(case.invalid_per_mille)) {
            inputs
                .inputs
                .push(invalid_input(&mut r, tick, case.script.clients));
        }
        let out = world.step(&inputs);
        d.state_roots.push(out.state_root);
        d.snapshots_roots.push(out.snapshots_root);
        let out = world.output();
        writer
            .record_tick(&inputs, out, &world)
            .map_err(|e| driving(Some(tick), format!("recording: {e}")))?;
        d.written.push((tick, writer.bytes_written()));
        if checks {
            check_invariants(&world)
                .map_err(|e| (Oracle::Invariants, Broken::at(Some(tick), e.to_string())))?;
            check_scores(&world, &mut scores)
                .map_err(|e| (Oracle::Invariants, Broken::at(Some(tick), e.to_string())))?;
            check_decoded(&world, &mut decoders).map_err(|b| (Oracle::Decoder, b))?;
        }
        if tick == case.checkpoint_tick {
            d.checkpoint = save_checkpoint(&world);
        }
        d.inputs.push(inputs.clone());
    }
    d.recording = writer
        .finish_with_checkpoint(&world)
        .map_err(|e| driving(None, format!("finishing the recording: {e}")))?;
    Ok(d)
}

/// An invariant a tick broke (the `Invariants` oracle).
#[derive(Debug, thiserror::Error)]
enum Invariant {
    #[error("{count} boids, the config says {config}")]
    BoidCount { count: usize, config: u32 },
    #[error("boid {id} outside the world at ({x_mm}, {y_mm})")]
    BoidOutside { id: usize, x_mm: i32, y_mm: i32 },
    #[error("{players} players in {slots} slots")]
    SlotsOverfull { players: usize, slots: u32 },
    #[error("client {client} outside the world at ({x_mm}, {y_mm})")]
    PlayerOutside { client: u32, x_mm: i32, y_mm: i32 },
    #[error("client {client}'s snapshot is {bytes} bytes, over its {cap}-byte budget")]
    SnapshotOverBudget { client: u32, bytes: usize, cap: usize },
    #[error("client {client}'s score fell from {before} to {after}")]
    ScoreFell { client: u32, before: u32, after: u32 },
    #[error("scores grew by {gained} this tick, but casts caught {caught} boids")]
    ScoresNotFromCatches { gained: u64, caught: u64 },
}

/// What must hold after every tick.
fn check_invariants(world: &World) -> Result<(), Invariant> {
    let c = world.config();
    let size = c.world_size_mm as i32;
    let boids = world.boids();
    if boids.len() != c.boid_count as usize {
        return Err(Invariant::BoidCount {
            count: boids.len(),
            config: c.boid_count,
        });
    }
    if let Some((id, b)) = boids
        .iter()
        .enumerate()
        .find(|(_, b)| !(0..size).contains(&b.x_mm) || !(0..size).contains(&b.y_mm))
    {
        return Err(Invariant::BoidOutside {
            id,
            x_mm: b.x_mm,
            y_mm: b.y_mm,
        });
    }
    let active: Vec<_> = world.players().iter().filter(|p| p.active).collect();
    if active.len() > c.client_slots_max as usize {
        return Err(Invariant::SlotsOverfull {
            players: active.len(),
            slots: c.client_slots_max,
        });
    }
    if let Some(p) = active
        .iter()
        .find(|p| !(0..size).contains(&p.x_mm) || !(0..size).contains(&p.y_mm))
    {
        return Err(Invariant::PlayerOutside {
            client: p.client,
            x_mm: p.x_mm,
            y_mm: p.y_mm,
        });
    }
    let cap = c.snapshot_budget_cap_bytes() as usize;
    if let Some(s) = world.output().snapshots().find(|s| s.bytes.len() > cap.max(64)) {
        return Err(Invariant::SnapshotOverBudget {
            client: s.client,
            bytes: s.bytes.len(),
            cap,
        });
    }
    Ok(())
}

/// Scores come only from catches: a player joins with none, no score goes down, and the
/// tick's gains add up to the boids its casts caught (less when a caster left in the same
/// tick, taking its score with it). `scores` holds each client's score after the last tick.
fn check_scores(world: &World, scores: &mut std::collections::BTreeMap<u32, u32>) -> Result<(), Invariant> {
    let out = world.output();
    let mut gained = 0u64;
    let mut now = std::collections::BTreeMap::new();
    for p in world.players().iter().filter(|p| p.active) {
        let before = if out.joined.iter().any(|j| j.client == p.client) {
            0
        } else {
            scores.get(&p.client).copied().unwrap_or(0)
        };
        if p.score < before {
            return Err(Invariant::ScoreFell {
                client: p.client,
                before,
                after: p.score,
            });
        }
        gained += u64::from(p.score - before);
        now.insert(p.client, p.score);
    }
    let caught = u64::from(out.casts.caught);
    if gained > caught || (gained < caught && out.left.is_empty()) {
        return Err(Invariant::ScoresNotFromCatches { gained, caught });
    }
    *scores = now;
    Ok(())
}

/// Every snapshot of the tick decoded by its client's decoder: the view must be the one
/// the world computed for that client. A client that (re)joined starts a new decoder.
fn check_decoded(
    world: &World,
    decoders: &mut std::collections::BTreeMap<u32, ClientDecoder>,
) -> Result<(), Broken> {
    let out = world.output();
    for j in &out.joined {
        decoders.insert(j.client, ClientDecoder::new());
    }
    for client in &out.left {
        decoders.remove(client);
    }
    for s in out.snapshots() {
        let decoder = decoders.entry(s.client).or_default();
        let (_, view) = decoder.decode(s.bytes).map_err(|e| {
            Broken::at(
                Some(out.tick),
                format!("client {}'s snapshot does not decode: {e}", s.client),
            )
        })?;
        let expected = world.client_view(s.client, out.tick).unwrap_or(&[]);
        if view != expected {
            let b = Broken::at(
                Some(out.tick),
                format!(
                    "client {}'s decoded view ({} entities) is not the world's ({} entities)",
                    s.client,
                    view.len(),
                    expected.len()
                ),
            );
            // The first entry that differs, in id order: missing, extra or changed.
            let at = expected.iter().zip(view).position(|(e, v)| e != v);
            let k = at.unwrap_or(expected.len().min(view.len()));
            let (e, v) = (expected.get(k), view.get(k));
            let id = e
                .zip(v)
                .map_or(e.or(v).map(|x| x.id), |(e, v)| Some(e.id.min(v.id)));
            let entity = match id {
                Some(id) => format!("entity {id} in client {}'s view", s.client),
                None => format!("client {}'s view", s.client),
            };
            return Err(b.naming(
                entity,
                Some(format!("entry {k}: {e:?} (world) vs {v:?} (decoded)")),
            ));
        }
    }
    Ok(())
}

/// Steps `world` (at tick `from`) through the driven inputs after `from`, comparing every
/// tick's roots with the driving run's.
fn step_and_compare(world: &mut World, d: &Driven, from: u32) -> Result<(), Broken> {
    for (i, inputs) in d.inputs.iter().enumerate().skip(from as usize) {
        let out = world.step(inputs);
        let tick = out.tick;
        let differs = if out.state_root != d.state_roots[i] {
            "state roots differ"
        } else if out.snapshots_root != d.snapshots_roots[i] {
            "snapshot bytes differ (snapshots roots)"
        } else {
            continue;
        };
        return Err(Broken::at(Some(tick), differs).explained(&replayed(d, tick), world));
    }
    Ok(())
}

/// The recording read back: the same inputs and roots, and a replay at the case's shard
/// count reaches them.
fn check_recording(case: &Case, d: &Driven) -> Result<(), Broken> {
    let rec = Recording::from_bytes(d.recording.clone())
        .map_err(|e| Broken::at(None, format!("reading it back: {e}")))?;
    if rec.end.is_none() || rec.last_tick() != case.ticks {
        return Err(Broken::at(
            None,
            format!("it ends at tick {} without a clean end", rec.last_tick()),
        ));
    }
    let mut world = rec
        .start_world(case.checkpoint_shards)
        .map_err(|e| Broken::at(None, e.to_string()))?;
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.map_err(|e| Broken::at(None, e.to_string()))?;
        let i = t.tick as usize - 1;
        if t.inputs != d.inputs[i]
            || t.state_root != d.state_roots[i]
            || t.snapshots_root != d.snapshots_roots[i]
        {
            return Err(Broken::at(Some(t.tick), "the recorded tick is not the one run"));
        }
        if world.step(&t.inputs).state_root != t.state_root {
            return Err(
                Broken::at(Some(t.tick), "the replay's state root is not the recorded one")
                    .explained(&replayed(d, t.tick), &world),
            );
        }
    }
    Ok(())
}

/// The recording cut at the case's byte, and (as a crash can leave it) the same file with
/// garbage from that byte to its end: each time what was written in full before the cut
/// is recovered (the cut by `Recording::from_bytes`, the damage by
/// `from_bytes_after_crash`, as a resume reads it), and the world resumed at the
/// recovered tick goes on as the run did.
fn check_torn(case: &Case, d: &Driven) -> Result<(), Broken> {
    let cut = (d.recording.len() as u64 * u64::from(case.tear_per_mille) / 1000) as usize;
    // The last tick whose block was written (the bytes grew with it) wholly before the cut.
    let complete = d
        .written
        .windows(2)
        .rev()
        .find(|w| w[1].1 > w[0].1 && w[1].1 as usize <= cut)
        .map(|w| w[1].0);
    let torn = Recording::from_bytes(d.recording[..cut].to_vec());
    recovers(
        case,
        d,
        torn,
        complete,
        &format!("cut at byte {cut} of {}", d.recording.len()),
    )?;
    let mut r = Rng::new(case.seed ^ 0xda3a6e);
    let mut damaged = d.recording.clone();
    for b in &mut damaged[cut..] {
        *b = r.next() as u8;
    }
    let damaged = Recording::from_bytes_after_crash(damaged);
    recovers(
        case,
        d,
        damaged,
        complete,
        &format!("garbage from byte {cut} of {}", d.recording.len()),
    )
}

/// What `check_torn` asks of one damaged recording.
fn recovers(
    case: &Case,
    d: &Driven,
    opened: Result<Recording, crate::RecordingError>,
    complete: Option<u32>,
    how: &str,
) -> Result<(), Broken> {
    let rec = match opened {
        Ok(rec) => rec,
        // Before its first block is complete a recording has nothing to recover.
        Err(_) if complete.is_none() => return Ok(()),
        Err(e) => return Err(Broken::at(complete, format!("{how}: {e}"))),
    };
    let last = rec.last_tick();
    if complete.is_some_and(|t| last < t) {
        return Err(Broken::at(
            Some(last),
            format!("{how}: recovered to tick {last}, but tick {complete:?} was complete"),
        ));
    }
    if last == 0 {
        return Ok(());
    }
    let mut world = rec
        .world_at(last, case.checkpoint_shards)
        .map_err(|e| Broken::at(Some(last), format!("{how}: resuming at the recovered tick: {e}")))?;
    if world.state_root() != d.state_roots[last as usize - 1] {
        return Err(
            Broken::at(Some(last), format!("{how}: the recovered state is not the run's"))
                .explained(&replayed(d, last), &world),
        );
    }
    step_and_compare(&mut world, d, last).map_err(|mut b| {
        b.detail = format!("{how}, resumed: {}", b.detail);
        b
    })
}

/// A random range of the recording, cut out with `extract` (through files, as the tool
/// works), opens on its own, starts from the run's state and replays to the run's roots.
fn check_extract(case: &Case, d: &Driven) -> Result<(), Broken> {
    let mut r = Rng::new(case.seed ^ 0xe7);
    let from = r.range(0, u64::from(case.ticks) - 1) as u32;
    let to = r.range(u64::from(from) + 1, u64::from(case.ticks)) as u32;
    // Unique per call: threads of one process may run the same case at once (tests).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "migratory-sim-{}-{}-{call}",
        std::process::id(),
        case.seed
    ));
    let err = |e: String| Broken::at(Some(from), e);
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
    let result = (|| {
        let whole = dir.join("whole.mrec");
        let part = dir.join("part.mrec");
        std::fs::write(&whole, &d.recording).map_err(|e| err(e.to_string()))?;
        crate::tools::extract(&whole, from, to, &part)
            .map_err(|e| err(format!("extract {from}..={to}: {e}")))?;
        let rec = Recording::open(&part).map_err(|e| err(format!("the extract does not open: {e}")))?;
        if rec.first_tick() != from + 1 || rec.last_tick() != to {
            return Err(err(format!(
                "the extract holds ticks {}..={}, not {}..={to}",
                rec.first_tick(),
                rec.last_tick(),
                from + 1
            )));
        }
        let mut world = rec.start_world(1).map_err(|e| err(e.to_string()))?;
        let start = if from == 0 {
            None
        } else {
            Some(d.state_roots[from as usize - 1])
        };
        if start.is_some_and(|root| root != world.state_root()) {
            return Err(err("the extract starts from another state than the run's".into()));
        }
        for t in rec.ticks_from(rec.first_tick()) {
            let t = t.map_err(|e| err(e.to_string()))?;
            let i = t.tick as usize - 1;
            let out = world.step(&t.inputs);
            if out.state_root != d.state_roots[i] || t.state_root != d.state_roots[i] {
                return Err(Broken::at(Some(t.tick), "the extract's roots are not the run's"));
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
