//! The reader thread of `migratory-replay view`: it owns the recording (the reader is not
//! `Send`) and a cursor world, and answers the page's questions about one tick: every
//! entity (`/replay/state`), one entity with its recent track (`/replay/entity`), and one
//! client's view as its snapshots gave it (`/replay/client`).
//!
//! A request for a later tick steps the cursor forward unless restoring a checkpoint
//! between them costs less (the cursor measures both as it goes); anything else restores
//! the nearest checkpoint at or before the tick and steps from there, so any answer costs
//! at most one checkpoint interval of steps. Questions about entities alone step the
//! entities only (`World::step_entities_only`: no snapshots, no hashing; a 1,000-client
//! tick served in 1.8 ms instead of 11.5); such a cursor no longer feeds the seek index, and a question
//! about a client's view or an avatar's stream restores a whole world first.

use std::sync::{mpsc, Arc};

use crate::format::RecordInfo;
use crate::tools::entity_report;
use crate::{Recording, RecordingError};
use migratory_kernel::{decode_snapshot_header, restore_checkpoint_with_terrain, World};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::error::QuestionError;
use super::seek::SeekIndex;
use migratory_view::state_layout;

/// What the cursor assumes a step and a restore cost before it has measured one: a step
/// of the default world and a restore from memory with the terrain held.
const STEP_US_INITIAL: u64 = 400;
const RESTORE_US_INITIAL: u64 = 2_000;
/// How far back an entity's track reaches, in seconds.
pub const TRACK_SECONDS: u32 = 3;

/// A checkpoint of the seek index: its tick and bytes.
type InMemory = (u32, Arc<Vec<u8>>);

/// What the page asks the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Question {
    /// Every entity at a tick (the binary layout in the parent module's doc).
    State { tick: u32 },
    /// Every entity at `count` ticks `stride` apart from `from` on (those inside the
    /// recording), one `State` answer after another: what playback draws next.
    States { from: u32, count: u32, stride: u32 },
    /// One entity's fields at a tick (as `migratory-replay inspect --entity` prints them)
    /// and its positions over the `TRACK_SECONDS` before.
    Entity { tick: u32, id: u32 },
    /// What client `client` held at a tick: the view its newest snapshot at or before the
    /// tick gave it, with that snapshot's header and the client's ack.
    Client { tick: u32, client: u32 },
}

/// The reader's answer: bytes or JSON, or why not.
#[derive(Debug)]
pub enum Answer {
    Bytes(Vec<u8>),
    Json(Value),
}

pub type Request = (Question, oneshot::Sender<Result<Answer, QuestionError>>);

/// The recording and the world at the cursor.
struct Cursor {
    rec: Recording,
    world: World,
    /// Checkpoints in memory, shared with the other reader and the marker scan.
    index: Arc<SeekIndex>,
    /// The client whose snapshots the cursor keeps while it steps (the page asks about one
    /// client at a time, tick after tick).
    watch: Option<Watch>,
    /// The entity whose positions the cursor keeps while it steps (the inspector's track).
    track: Option<Track>,
    /// What steps (whole, and entities only) and restores have cost here, smoothed.
    costs: Costs,
}

/// How much of the world a question needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Boids, avatars and players: what `/replay/state` draws.
    Entities,
    /// The client streams too: a client's view, an avatar's stream summary.
    Whole,
}

/// Moving averages (1/8 weight to the newest) of what the cursor's work costs, in µs.
#[derive(Debug, Clone, Copy)]
struct Costs {
    step_us: u64,
    step_entities_us: u64,
    restore_us: u64,
}

impl Costs {
    fn new() -> Costs {
        Costs {
            step_us: STEP_US_INITIAL,
            step_entities_us: STEP_US_INITIAL / 4,
            restore_us: RESTORE_US_INITIAL,
        }
    }

    fn observe(average: &mut u64, took: std::time::Duration) {
        let us = took.as_micros().min(u128::from(u32::MAX)) as u64;
        *average = (*average * 7 + us) / 8;
    }

    fn step_us(&self, entities_only: bool) -> u64 {
        if entities_only {
            self.step_entities_us
        } else {
            self.step_us
        }
        .max(1)
    }
}

/// The recent positions of one entity seen while stepping.
struct Track {
    id: u32,
    /// Every step after this tick was seen (a restore starts the track over).
    seen_after_tick: u32,
    /// `[tick, x_mm, y_mm]`, oldest first, at most `TRACK_SECONDS` of them.
    points: std::collections::VecDeque<[i64; 3]>,
    span_ticks: u32,
}

impl Track {
    /// Starts following `id` from `world` on.
    fn new(id: u32, span_ticks: u32, world: &World) -> Track {
        let mut t = Track {
            id,
            seen_after_tick: 0,
            points: Default::default(),
            span_ticks,
        };
        t.restart(world);
        t
    }

    /// The cursor jumped to `world` (a restore): nothing before it was seen.
    fn restart(&mut self, world: &World) {
        self.seen_after_tick = world.tick();
        self.points.clear();
        self.observe(world);
    }

    fn observe(&mut self, world: &World) {
        if let Some((x, y)) = position_of(world, self.id) {
            self.points.push_back([world.tick().into(), x.into(), y.into()]);
        }
        let oldest = i64::from(world.tick()) - i64::from(self.span_ticks);
        while self.points.front().is_some_and(|p| p[0] < oldest) {
            self.points.pop_front();
        }
    }
}

/// The newest snapshot of one client seen while stepping.
struct Watch {
    client: u32,
    /// Every step after this tick was seen (a restore starts the watch over).
    seen_after_tick: u32,
    /// (tick, bytes) of the newest snapshot seen.
    last: Option<(u32, Vec<u8>)>,
}

impl Watch {
    /// Starts watching `client` from `world` on.
    fn new(client: u32, world: &World) -> Watch {
        let mut w = Watch {
            client,
            seen_after_tick: 0,
            last: None,
        };
        w.restart(world);
        w
    }

    /// The cursor jumped to `world` (a restore): nothing before it was seen.
    fn restart(&mut self, world: &World) {
        self.seen_after_tick = world.tick();
        self.last = None;
    }

    fn observe(&mut self, world: &World) {
        if let Some(s) = world.output().snapshots().find(|s| s.client == self.client) {
            self.last = Some((world.tick(), s.bytes.to_vec()));
        }
    }
}

impl Cursor {
    /// Moves the world to `tick` (inside the recording) with what `need` asks of it: steps
    /// forward when that costs less than restoring the nearest checkpoint (the seek
    /// index's or the recording's) and stepping from there, else restores.
    fn goto(&mut self, tick: u32, need: Need) -> Result<(), QuestionError> {
        self.check(tick)?;
        let (in_memory, on_disk) = self.restore_points(tick);
        if !self.steps_to(tick, need, &in_memory, on_disk) {
            let started = std::time::Instant::now();
            self.world = match (in_memory, on_disk) {
                (Some((at, bytes)), f) if f.is_none_or(|f| f.first_tick <= at) => {
                    restore_checkpoint_with_terrain(&bytes, self.world.terrain().clone(), 1)
                        .map_err(|source| QuestionError::Seek { tick: at, source })?
                }
                (_, Some(f)) => match self.rec.restore_checkpoint(&f, 1) {
                    // Checkpoints of other rules cannot be restored, but a recording that
                    // starts at tick 0 can still be replayed from its start.
                    Err(RecordingError::CheckpointIncompatible { .. }) if self.rec.meta.start_tick == 0 => {
                        self.rec.start_world(1)?
                    }
                    w => w?,
                },
                (_, None) => self.rec.start_world(1)?,
            };
            Costs::observe(&mut self.costs.restore_us, started.elapsed());
            if let Some(w) = &mut self.watch {
                w.restart(&self.world);
            }
            if let Some(t) = &mut self.track {
                t.restart(&self.world);
            }
        }
        self.step_to(tick, need)
    }

    /// Steps the world up to `tick`, keeping what the watch and the track follow. With
    /// `Need::Entities` and no watch (which needs snapshots) it steps the entities only.
    fn step_to(&mut self, tick: u32, need: Need) -> Result<(), QuestionError> {
        if self.world.tick() >= tick {
            return Ok(());
        }
        let entities_only = self.steps_entities_only(need);
        debug_assert!(
            entities_only || !self.world.is_detached(),
            "goto restores a detached world"
        );
        for t in self.rec.ticks_from(self.world.tick() + 1) {
            let t = t?;
            let started = std::time::Instant::now();
            if entities_only {
                self.world.step_entities_only(&t.inputs);
                Costs::observe(&mut self.costs.step_entities_us, started.elapsed());
            } else {
                self.world.step(&t.inputs);
                Costs::observe(&mut self.costs.step_us, started.elapsed());
                self.index.offer(&self.world);
            }
            if let Some(w) = &mut self.watch {
                w.observe(&self.world);
            }
            if let Some(track) = &mut self.track {
                track.observe(&self.world);
            }
            if self.world.tick() >= tick {
                break;
            }
        }
        Ok(())
    }

    fn answer(&mut self, q: Question) -> Result<Answer, QuestionError> {
        match q {
            Question::State { tick } => {
                self.goto(tick, Need::Entities)?;
                Ok(Answer::Bytes(encode_state(&self.world)))
            }
            Question::States { from, count, stride } => {
                assert!(stride > 0 && count > 0, "the route checks the window");
                self.check(from)?;
                let last = self.rec.last_tick();
                let mut out = Vec::new();
                let ticks = (0..count).map(|k| u64::from(from) + u64::from(k) * u64::from(stride));
                for tick in ticks.take_while(|&t| t <= u64::from(last)) {
                    self.goto(tick as u32, Need::Entities)?;
                    out.extend_from_slice(&encode_state(&self.world));
                }
                Ok(Answer::Bytes(out))
            }
            Question::Entity { tick, id } => self.entity(tick, id),
            Question::Client { tick, client } => self.client_view(tick, client),
        }
    }

    /// Entity `id` at `tick` with its track over the `TRACK_SECONDS` before. Like the client
    /// watch, the cursor keeps the picked entity's positions while it steps, so following
    /// it through a playing recording only steps forward.
    fn entity(&mut self, tick: u32, id: u32) -> Result<Answer, QuestionError> {
        self.check(tick)?;
        let span_ticks = TRACK_SECONDS * self.rec.meta.config.tick_rate_hz;
        let from = tick.saturating_sub(span_ticks).max(self.rec.meta.start_tick);
        let covered = self
            .track
            .as_ref()
            .is_some_and(|t| t.id == id && t.seen_after_tick <= from);
        self.follow_to(
            from,
            tick,
            covered,
            |c| &mut c.track,
            |w| Track::new(id, span_ticks, w),
        )?;
        let cfg = &self.rec.meta.config;
        let Some(entity) = entity_report(&self.world, id) else {
            // An avatar id whose slot is free at this tick (a player not joined yet, or
            // gone) is an answer the page shows, not a failed request; other ids are errors.
            if id >= cfg.boid_count && id < cfg.boid_count + cfg.client_slots_max {
                let why = QuestionError::NoEntity { id, tick }.to_string();
                return Ok(Answer::Json(
                    json!({ "tick": tick, "entity": { "id": id, "kind": "absent", "why": why }, "track": [] }),
                ));
            }
            return Err(QuestionError::NoEntity { id, tick });
        };
        let track: Vec<[i64; 3]> = self.track.as_ref().map_or_else(Vec::new, |t| {
            t.points
                .iter()
                .filter(|p| p[0] >= i64::from(from))
                .copied()
                .collect()
        });
        Ok(Answer::Json(
            json!({ "tick": tick, "entity": entity, "track": track }),
        ))
    }

    /// Steps a whole world to `tick` with a follower (the watch or the track, in the field
    /// `slot` names) that has seen every step after `from`. When the current one has not
    /// (`covered` is false), the cursor is past `tick` or detached, it is dropped, the
    /// cursor lands on `from` and `start` makes a new one there; after that the cursor only
    /// steps, never restores, so the follower sees every tick up to `tick`.
    fn follow_to<F>(
        &mut self,
        from: u32,
        tick: u32,
        covered: bool,
        slot: fn(&mut Cursor) -> &mut Option<F>,
        start: impl FnOnce(&World) -> F,
    ) -> Result<(), QuestionError> {
        if !(covered && self.world.tick() <= tick && !self.world.is_detached()) {
            *slot(self) = None;
            self.goto(from, Need::Whole)?;
            *slot(self) = Some(start(&self.world));
        }
        self.step_to(tick, Need::Whole)
    }

    /// The checkpoints nearest at or before `tick`: the seek index's and the recording's.
    fn restore_points(&self, tick: u32) -> (Option<InMemory>, Option<RecordInfo>) {
        let on_disk = self
            .rec
            .checkpoints()
            .filter(|f| f.first_tick <= tick)
            .last()
            .copied();
        (self.index.nearest(tick), on_disk)
    }

    /// Whether stepping for `need` steps the entities only: not with a watch, which needs
    /// the snapshots.
    fn steps_entities_only(&self, need: Need) -> bool {
        need == Need::Entities && self.watch.is_none()
    }

    /// Whether going to `tick` steps from the cursor: it is at or before the tick, its
    /// world has what `need` asks (a detached one has only entities), and the nearest
    /// checkpoint ahead of it is nearer than a restore's worth of steps.
    fn steps_to(
        &self,
        tick: u32,
        need: Need,
        in_memory: &Option<InMemory>,
        on_disk: Option<RecordInfo>,
    ) -> bool {
        let now = self.world.tick();
        if now > tick || (need == Need::Whole && self.world.is_detached()) {
            return false;
        }
        let nearest = in_memory.as_ref().map(|m| m.0).max(on_disk.map(|f| f.first_tick));
        let steps_saved = nearest.map_or(0, |b| b.saturating_sub(now));
        u64::from(steps_saved) * self.costs.step_us(self.steps_entities_only(need)) <= self.costs.restore_us
    }

    /// An error for a tick outside the recording.
    fn check(&self, tick: u32) -> Result<(), QuestionError> {
        let (first, last) = (self.rec.meta.start_tick, self.rec.last_tick());
        if tick < first || tick > last {
            return Err(QuestionError::TickOutside { tick, first, last });
        }
        Ok(())
    }

    /// The view client `client` held at `tick`: from its newest snapshot in the last
    /// snapshot interval up to `tick` (a client gets one per interval). The cursor watches
    /// the client while it steps, so a page following a client tick after tick only steps
    /// forward; another client, or a tick the watch has not covered, walks that interval.
    fn client_view(&mut self, tick: u32, client: u32) -> Result<Answer, QuestionError> {
        self.check(tick)?;
        let interval = self.rec.meta.config.snapshot_interval_ticks;
        let from = tick.saturating_sub(interval).max(self.rec.meta.start_tick);
        let covered = self
            .watch
            .as_ref()
            .is_some_and(|w| w.client == client && w.seen_after_tick <= from);
        self.follow_to(from, tick, covered, |c| &mut c.watch, |w| Watch::new(client, w))?;
        // A client not in the world, or with no snapshot yet, is an answer (the page says
        // so), not a failed request.
        let absent = |why: QuestionError| {
            Ok(Answer::Json(
                json!({ "tick": tick, "client": client, "absent": why.to_string() }),
            ))
        };
        let Some(slot) = self.world.slot_of(client) else {
            return absent(QuestionError::ClientAbsent { client, tick });
        };
        let last = self.watch.as_ref().and_then(|w| w.last.as_ref());
        let Some((sent, bytes)) = last.filter(|(t, _)| *t > tick.saturating_sub(interval)) else {
            return absent(QuestionError::NoSnapshot { client, tick });
        };
        let (sent, bytes) = (*sent, bytes.clone());
        let w = &self.world;
        let header = decode_snapshot_header(&bytes).map_err(|source| QuestionError::Snapshot {
            client,
            tick: sent,
            source,
        })?;
        let view: Vec<[i64; 6]> = w
            .client_view(client, sent)
            .unwrap_or(&[])
            .iter()
            .map(|e| {
                [
                    e.id.into(),
                    e.qx.into(),
                    e.qy.into(),
                    e.qvx.into(),
                    e.qvy.into(),
                    e.kind.into(),
                ]
            })
            .collect();
        let p = w.players()[slot as usize];
        Ok(Answer::Json(json!({
            "tick": tick,
            "client": client,
            "name": p.name(),
            "spectator": p.spectator,
            "avatar_id": header.avatar_id,
            "centre": [p.x_mm, p.y_mm],
            "snapshot_tick": sent,
            "baseline_tick": header.baseline_tick,
            "snapshot_bytes": bytes.len(),
            "acked_tick": (p.acked_tick != u32::MAX).then_some(p.acked_tick),
            "view": view,
        })))
    }
}

/// Where entity `id` is in `world`, if it exists.
fn position_of(world: &World, id: u32) -> Option<(i32, i32)> {
    let boid_count = world.config().boid_count;
    if id < boid_count {
        return world.boid(id).map(|b| (b.x_mm, b.y_mm));
    }
    let p = world.players().get((id - boid_count) as usize)?;
    (p.active && !p.spectator).then_some((p.x_mm, p.y_mm))
}

/// Every entity of `world` in the `/replay/state` layout.
fn encode_state(world: &World) -> Vec<u8> {
    let boids = world.boids();
    let avatars: Vec<_> = world
        .players()
        .iter()
        .enumerate()
        .filter(|(_, p)| p.active && !p.spectator)
        .collect();
    use state_layout as at;
    let n = boids.len() + avatars.len();
    let mut out = vec![0u8; at::HEADER_BYTES + n * at::ENTITY_BYTES];
    out[at::TICK..at::TICK + 4].copy_from_slice(&world.tick().to_le_bytes());
    out[at::COUNT..at::COUNT + 4].copy_from_slice(&(n as u32).to_le_bytes());
    let records = out[at::HEADER_BYTES..].chunks_exact_mut(at::ENTITY_BYTES);
    let boid_records = boids
        .iter()
        .enumerate()
        .map(|(id, b)| (id as u32, b.x_mm, b.y_mm, i32::from(b.vx), i32::from(b.vy)));
    let avatar_records = avatars
        .into_iter()
        .map(|(slot, p)| (world.avatar_id(slot as u32), p.x_mm, p.y_mm, p.vx, p.vy));
    for (r, (id, x, y, vx, vy)) in records.zip(boid_records.chain(avatar_records)) {
        r[at::ID..at::ID + 4].copy_from_slice(&id.to_le_bytes());
        r[at::X_MM..at::X_MM + 4].copy_from_slice(&x.to_le_bytes());
        r[at::Y_MM..at::Y_MM + 4].copy_from_slice(&y.to_le_bytes());
        r[at::VX..at::VX + 2].copy_from_slice(&(vx.clamp(-32768, 32767) as i16).to_le_bytes());
        r[at::VY..at::VY + 2].copy_from_slice(&(vy.clamp(-32768, 32767) as i16).to_le_bytes());
    }
    out
}

/// The reader thread's loop: answers questions until every sender is gone.
pub fn serve(rec: Recording, world: World, index: Arc<SeekIndex>, requests: mpsc::Receiver<Request>) {
    let mut cursor = Cursor {
        rec,
        world,
        index,
        watch: None,
        track: None,
        costs: Costs::new(),
    };
    for (question, reply) in requests {
        let _ = reply.send(cursor.answer(question));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::WriterOptions;
    use crate::testkit::small_config;
    use crate::tools::{synth_into, SynthOptions};
    use migratory_kernel::ScriptConfig;

    fn recording() -> Recording {
        let config = small_config(5, 400);
        let options = SynthOptions {
            script: ScriptConfig {
                seed: 5,
                clients: 6,
                join_spread_ticks: 10,
                tick_rate_hz: config.tick_rate_hz,
                ..ScriptConfig::default()
            },
            config,
            ticks: 300,
            shards: 1,
            writer: WriterOptions {
                block_ticks: 20,
                checkpoint_interval_ticks: 100,
                fsync_every_blocks: 0,
            },
        };
        let (_, bytes) = synth_into(&options, Vec::new()).expect("synth");
        Recording::from_bytes(bytes).expect("the recording reads")
    }

    fn cursor() -> Cursor {
        let rec = recording();
        let world = rec.start_world(1).unwrap();
        Cursor {
            rec,
            world,
            index: Arc::new(SeekIndex::new(50, 1 << 24)),
            watch: None,
            track: None,
            costs: Costs::new(),
        }
    }

    fn json(a: Answer) -> Value {
        match a {
            Answer::Json(v) => v,
            Answer::Bytes(_) => panic!("bytes where JSON was expected"),
        }
    }

    /// A cursor that stepped entities only for the drawing questions answers a client's
    /// view and an avatar's stream as a cursor that never did, and draws every tick as the
    /// recording's world at that tick.
    #[test]
    fn entities_only_stepping_answers_every_question_as_whole_steps_do() {
        let mut drawing = cursor();
        let rec = recording();
        let avatar = rec.meta.config.boid_count + 2;
        for tick in [40, 41, 90, 150, 260] {
            let Answer::Bytes(state) = drawing.answer(Question::State { tick }).unwrap() else {
                panic!("state is bytes");
            };
            assert_eq!(
                state,
                encode_state(&rec.world_at(tick, 1).unwrap()),
                "tick {tick}"
            );
        }
        assert!(
            drawing.world.is_detached(),
            "the drawing questions stepped entities only"
        );
        assert!(
            drawing.index.nearest(260).is_none_or(|(t, _)| t <= 100),
            "a detached cursor feeds no checkpoints"
        );
        for (tick, client) in [(270, 1), (275, 3)] {
            let mut whole = cursor();
            let q = Question::Client { tick, client };
            assert_eq!(
                json(drawing.answer(q).unwrap()),
                json(whole.answer(q).unwrap()),
                "client {client} at {tick}"
            );
            // The whole state, client streams included, is the recording's.
            assert_eq!(
                drawing.world.state_root(),
                rec.world_at(tick, 1).unwrap().state_root(),
                "tick {tick}"
            );
            let q = Question::Entity { tick, id: avatar };
            assert_eq!(
                json(drawing.answer(q).unwrap()),
                json(whole.answer(q).unwrap()),
                "avatar at {tick}"
            );
            assert!(!drawing.world.is_detached());
        }
        let q = Question::States {
            from: 280,
            count: 3,
            stride: 5,
        };
        let Answer::Bytes(states) = drawing.answer(q).unwrap() else {
            panic!("states are bytes");
        };
        let expected: Vec<u8> = [280, 285, 290]
            .iter()
            .flat_map(|&t| encode_state(&rec.world_at(t, 1).unwrap()))
            .collect();
        assert_eq!(states, expected);
    }
}
