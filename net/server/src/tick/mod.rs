//! The tick thread: a fixed timestep on a dedicated std thread, off the async runtime.
//!
//! Each tick: drain the connections' events into the tick's inputs (joins, coalesced
//! steering, casts, acks, leaves), step the kernel, append the tick to the recording, then
//! queue each client's snapshot into its bounded outlet, which the flusher thread writes
//! into the socket. The thread never waits on a client: a full outlet drops the snapshot
//! and counts it, and a client that keeps overflowing is asked to close.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::flusher::Flusher;
use crate::outlet::Refused;
use migratory_kernel::{Input, TickInputs, ViewEntry, World, VIEW_ENTITIES_MAX};

use crate::board::TickBoard;
use crate::config::BackpressureSection;
use crate::events::NetEvent;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Phase};
use crate::reclaim::{ReclaimWriter, Tokens};
use crate::recorder::{RecordError, Recorder};
use migratory_wire::protocol::{self, WireTerrainDescriptor, WorldFacts};

mod clients;

pub use clients::Carried;
use clients::{JoinState, TickClient};

/// At most this many events are taken per tick, so a burst cannot stall one tick; the
/// rest wait for the next.
const EVENTS_PER_TICK_MAX: usize = 65_536;

/// Static facts every WELCOME carries.
#[derive(Clone, Debug)]
pub struct WelcomeBase {
    pub tick_rate_hz: u16,
    pub snapshot_interval_ticks: u16,
    pub world_size_mm: u32,
    pub terrain: WireTerrainDescriptor,
    pub world: WorldFacts,
}

/// How the loop runs.
#[derive(Clone, Debug)]
pub struct TickSettings {
    /// Pin the shard threads (this thread included) to CPUs when the loop starts.
    pub pin_shard_threads: bool,
    pub catch_up_ticks_max: u32,
    pub backpressure: BackpressureSection,
    /// Stop by itself after this many ticks (None: until shut down).
    pub run_ticks: Option<u64>,
    /// Ticks a dropped player's avatar waits for a reclaim before it leaves (0: at once).
    pub reconnect_grace_ticks: u32,
    /// Per-phase timings at DEBUG once a second.
    pub debug: bool,
}

/// What the loop leaves behind.
#[derive(Clone, Debug)]
pub struct TickReport {
    pub ticks: u64,
    pub final_tick: u32,
    pub final_root: [u8; 32],
    pub recording: Option<PathBuf>,
    /// Set when the recording hit a write error (it stopped there).
    pub recording_error: Option<RecordError>,
}

/// For a tick `lateness` past its deadline: whether it runs late (at least a whole tick
/// behind, so it is a catch-up tick), and how many later deadlines to skip so that at
/// most `catch_up_ticks_max` ticks are run back to back.
fn catch_up(lateness: Duration, dt_ns: u64, catch_up_ticks_max: u32) -> (bool, u64) {
    let behind = (lateness.as_nanos() / u128::from(dt_ns.max(1))).min(u128::from(u64::MAX)) as u64;
    (behind >= 1, behind.saturating_sub(u64::from(catch_up_ticks_max)))
}

/// The time each phase of one tick's work took, and the events it ingested.
#[derive(Clone, Copy, Debug)]
struct TickTimes {
    ingest: Duration,
    events: usize,
    step: Duration,
    record: Duration,
    handoff: Duration,
}

impl TickTimes {
    fn total(&self) -> Duration {
        self.ingest + self.step + self.record + self.handoff
    }
}

/// The tick thread's state.
pub struct TickLoop {
    world: World,
    /// Clients of an earlier session still in a resumed world: they leave in the first tick.
    leaving_clients: Vec<u32>,
    /// Avatars of an earlier session kept for a reclaim: steered to a stop in the first tick.
    carried_to_stop: Vec<u32>,
    settings: TickSettings,
    events: mpsc::Receiver<NetEvent>,
    metrics: Arc<Metrics>,
    board: Arc<TickBoard>,
    recorder: Option<Recorder>,
    recording_error: Option<RecordError>,
    /// BOOKMARKs ingested this tick: (client, note), recorded with the tick.
    bookmarks: Vec<(u32, String)>,
    welcome: WelcomeBase,
    clients: BTreeMap<u32, TickClient>,
    /// The reconnect tokens issued (their hashes), and the thread keeping them on disk.
    tokens: Tokens,
    reclaim_writer: Option<ReclaimWriter>,
    inputs: TickInputs,
    lifecycle: Arc<Lifecycle>,
    epoch: Instant,
    /// Writes the snapshots this thread queues, off this thread.
    flusher: Flusher,
}

impl std::fmt::Debug for TickLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TickLoop")
            .field("tick", &self.world.tick())
            .field("clients", &self.clients.len())
            .finish_non_exhaustive()
    }
}

/// What the tick thread is wired to: where its events come from, where it publishes, its
/// recording, the flag that stops it, and the instant phase timestamps count from.
#[derive(Debug)]
pub struct TickWiring {
    pub events: mpsc::Receiver<NetEvent>,
    pub metrics: Arc<Metrics>,
    pub board: Arc<TickBoard>,
    pub recorder: Option<Recorder>,
    /// Its loop ends once `stop_ticking`.
    pub lifecycle: Arc<Lifecycle>,
    pub epoch: Instant,
}

impl TickLoop {
    pub fn new(
        world: World,
        carried: Carried,
        settings: TickSettings,
        welcome: WelcomeBase,
        wiring: TickWiring,
    ) -> TickLoop {
        let TickWiring {
            events,
            metrics,
            board,
            recorder,
            lifecycle,
            epoch,
        } = wiring;
        // The reclaim file sits beside the recording: without one there is nothing to
        // resume from, so nothing to reclaim after a crash either.
        let reclaim_writer = recorder
            .as_ref()
            .and_then(|r| match ReclaimWriter::start(&r.path) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "no reclaim file: tokens will not outlive this process");
                    None
                }
            });
        let mut l = TickLoop {
            world,
            leaving_clients: Vec::new(),
            carried_to_stop: Vec::new(),
            settings,
            events,
            metrics,
            board,
            recorder,
            recording_error: None,
            bookmarks: Vec::new(),
            welcome,
            clients: BTreeMap::new(),
            tokens: Tokens::default(),
            reclaim_writer,
            inputs: TickInputs::default(),
            lifecycle,
            epoch,
            flusher: Flusher::start(),
        };
        l.carry(carried);
        l.publish_tokens(true);
        l
    }

    /// `client`'s state when `connection` is its current one.
    fn current(&mut self, client: u32, connection: u64) -> Option<&mut TickClient> {
        self.clients
            .get_mut(&client)
            .filter(|c| c.shared.connection == connection)
    }

    /// Hands the token table to the reclaim file's writer when it changed (or `always`).
    fn publish_tokens(&mut self, always: bool) {
        if self.tokens.take_changed() || always {
            if let Some(w) = &self.reclaim_writer {
                w.publish(self.tokens.encode(self.world.tick()));
            }
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.board
            .phase_started_us
            .store(self.epoch.elapsed().as_micros() as u64, Relaxed);
        self.board.phase.store(phase as u8, Relaxed);
    }

    /// Runs until shut down (or `run_ticks`), then finishes the recording.
    pub fn run(mut self) -> TickReport {
        let hz = self.world.config().tick_rate_hz.max(1) as u64;
        let dt_ns = 1_000_000_000 / hz;
        let dt = Duration::from_nanos(dt_ns);
        // A resumed world's players (kept for their reclaim) have names before any join.
        self.publish_roster();
        if self.settings.pin_shard_threads && self.world.shard_count() > 1 {
            // From this thread: it runs shard 0 of every step.
            match self.world.pin_shard_threads() {
                Ok(cpus) => tracing::info!(?cpus, "shard threads pinned to CPUs"),
                Err(e) => tracing::warn!(error = %e, "shard threads left unpinned"),
            }
        }
        let mut next = Instant::now();
        let mut ran: u64 = 0;
        let mut last_debug = Instant::now();
        let mut last_overrun_log: Option<Instant> = None;
        while !self.lifecycle.ticking_stopped() {
            if self.settings.run_ticks.is_some_and(|n| ran >= n) {
                break;
            }
            let now = Instant::now();
            if now < next {
                // Sleep in slices so a shutdown is seen within a few milliseconds.
                std::thread::sleep((next - now).min(Duration::from_millis(5)));
                continue;
            }
            let (late, skip) = catch_up(now - next, dt_ns, self.settings.catch_up_ticks_max);
            if skip > 0 {
                // Too far behind to catch up: drop the excess deadlines. The tick number
                // stays dense, so the recording and replays do not notice.
                next += Duration::from_nanos(dt_ns.saturating_mul(skip));
                self.metrics.ticks_skipped_total.fetch_add(skip, Relaxed);
            }
            if late {
                self.metrics.ticks_caught_up_total.fetch_add(1, Relaxed);
            }
            let times = self.tick_once();
            if times.total() > dt {
                self.metrics.tick_overruns_total.fetch_add(1, Relaxed);
                // Which phase ran long tells an operator where to look (the step waits for
                // its shard threads, the handoff for the flusher's queue); at most one line a
                // second, so a server far behind does not flood its log.
                if last_overrun_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_overrun_log = Some(Instant::now());
                    tracing::warn!(
                        tick = self.world.tick(),
                        work_us = times.total().as_micros() as u64,
                        ingest_us = times.ingest.as_micros() as u64,
                        events = times.events,
                        step_us = times.step.as_micros() as u64,
                        record_us = times.record.as_micros() as u64,
                        handoff_us = times.handoff.as_micros() as u64,
                        "tick overran its period"
                    );
                }
            }
            ran += 1;
            next += dt;
            if self.settings.debug && last_debug.elapsed() >= Duration::from_secs(1) {
                last_debug = Instant::now();
                let m = &self.metrics;
                tracing::debug!(
                    tick = self.world.tick(),
                    loop_p50_us = m.loop_us.quantile(0.5),
                    loop_p99_us = m.loop_us.quantile(0.99),
                    ingest_p99_us = m.ingest_us.quantile(0.99),
                    step_p99_us = m.step_us.quantile(0.99),
                    record_p99_us = m.record_us.quantile(0.99),
                    handoff_p99_us = m.handoff_us.quantile(0.99),
                    clients = self.clients.len(),
                    "tick phase timings"
                );
            }
        }
        self.finish(ran)
    }

    /// One tick; returns the time each phase of its work took.
    fn tick_once(&mut self) -> TickTimes {
        let t0 = Instant::now();
        self.set_phase(Phase::Ingest);
        let events = self.ingest();
        let t1 = Instant::now();
        self.set_phase(Phase::Step);
        self.world.step(&self.inputs);
        // The shard threads have nothing to do until the next tick's step: they park now
        // rather than spin out their bound while this thread records and hands off.
        self.world.rest_shards();
        let out = self.world.output();
        if !out.joined.is_empty() || !out.left.is_empty() {
            self.publish_roster();
        }
        // Published before any of this tick's snapshots leave, so a PONG never names a tick
        // older than a snapshot its client already holds.
        self.board.tick.store(self.world.tick(), Relaxed);
        self.metrics.current_tick.store(self.world.tick(), Relaxed);
        let t2 = Instant::now();
        self.set_phase(Phase::Record);
        let checkpointed = self.record();
        let t3 = Instant::now();
        self.set_phase(Phase::Handoff);
        self.handoff();
        let t4 = Instant::now();
        self.set_phase(Phase::Idle);
        let m = &self.metrics;
        let us = |d: Duration| d.as_micros() as u64;
        m.ingest_us.record(us(t1 - t0));
        m.step_us.record(us(t2 - t1));
        m.record_us.record(us(t3 - t2));
        m.handoff_us.record(us(t4 - t3));
        m.loop_us.record(us(t4 - t0));
        let (tick, window_ticks) = (
            u64::from(self.world.tick()),
            u64::from(self.world.config().tick_rate_hz),
        );
        m.loop_recent_us.record(tick, window_ticks, us(t4 - t0));
        m.checkpoint_recent
            .record(tick, window_ticks, u64::from(checkpointed));
        m.ticks_total.fetch_add(1, Relaxed);
        if self.world.tick() % self.world.config().tick_rate_hz == 0 {
            let regions: usize = (0..self.world.players().len() as u32)
                .filter_map(|slot| self.world.view_arena_regions(slot))
                .sum();
            let region_bytes = VIEW_ENTITIES_MAX * std::mem::size_of::<ViewEntry>();
            m.view_arena_bytes.store((regions * region_bytes) as u64, Relaxed);
        }
        self.hand_over_recording();
        TickTimes {
            ingest: t1 - t0,
            events,
            step: t2 - t1,
            record: t3 - t2,
            handoff: t4 - t3,
        }
    }

    /// Turns the events received since the last tick into this tick's inputs; returns how
    /// many it took.
    fn ingest(&mut self) -> usize {
        let inputs = &mut self.inputs.inputs;
        inputs.clear();
        inputs.extend(
            self.leaving_clients
                .drain(..)
                .map(|client| Input::Leave { client }),
        );
        self.stop_carried();
        self.expire_grace();
        let mut taken = 0;
        for _ in 0..EVENTS_PER_TICK_MAX {
            let Ok(event) = self.events.try_recv() else {
                break;
            };
            taken += 1;
            match event {
                NetEvent::Hello {
                    client,
                    name,
                    terrain_cached,
                    spectator,
                    want_token,
                    shared,
                    queue,
                } => {
                    let mut c = TickClient::new(shared, queue);
                    c.terrain_cached = terrain_cached;
                    c.want_token = want_token;
                    self.on_hello(client, name, spectator, c);
                }
                NetEvent::Reclaim {
                    token,
                    terrain_cached,
                    keeps_baselines,
                    queue,
                    outlet,
                    reply,
                } => self.on_reclaim(&token, terrain_cached, keeps_baselines, (queue, outlet), reply),
                // A connection that a reclaim replaced no longer speaks for its client.
                NetEvent::Input {
                    client,
                    connection,
                    input,
                    ack,
                } => {
                    if let Some(c) = self.current(client, connection) {
                        c.pending_cast |= input.cast;
                        c.pending_steer = Some(input);
                        if ack.is_some_and(|tick| c.note_ack(tick)) {
                            self.tokens.confirm(client);
                        }
                    }
                }
                NetEvent::Bookmark {
                    client,
                    connection,
                    note,
                } => {
                    if self.current(client, connection).is_some() {
                        self.bookmarks.push((client, note));
                    } else {
                        // A replaced connection's: counted, as every bookmark is.
                        self.metrics.bookmarks_dropped_total.fetch_add(1, Relaxed);
                    }
                }
                NetEvent::Camera {
                    client,
                    connection,
                    camera,
                } => {
                    if let Some(c) = self.current(client, connection) {
                        c.pending_camera = Some(camera);
                    }
                }
                NetEvent::Ack {
                    client,
                    connection,
                    tick,
                } => {
                    if self.current(client, connection).is_some_and(|c| c.note_ack(tick)) {
                        self.tokens.confirm(client);
                    }
                }
                NetEvent::Gone { shared } => self.on_gone(&shared),
            }
        }
        let inputs = &mut self.inputs.inputs;
        for (&client, c) in self.clients.iter_mut() {
            if c.state != JoinState::Joined {
                continue;
            }
            // Steering and casting share the kernel's per-client sequence, and the kernel
            // applies all steers of a tick before its casts: coalescing to one steer and one
            // cast a tick keeps every cast from being stale.
            if let Some(m) = c.pending_steer.take() {
                let seq = c.next_seq();
                inputs.push(Input::Steer {
                    client,
                    seq,
                    dir_x: m.dir_x,
                    dir_y: m.dir_y,
                    throttle: m.throttle,
                });
            }
            if let Some(m) = c.pending_camera.take() {
                let seq = c.next_seq();
                inputs.push(Input::Camera {
                    client,
                    seq,
                    x_mm: m.x_mm,
                    y_mm: m.y_mm,
                });
            }
            if std::mem::take(&mut c.pending_cast) {
                let seq = c.next_seq();
                inputs.push(Input::Cast { client, seq });
            }
            if let Some(tick) = c.pending_ack.take() {
                inputs.push(Input::Ack { client, tick });
            }
        }
        taken
    }

    /// The players' names by avatar id, for the live page's labels.
    fn publish_roster(&self) {
        let roster = self
            .world
            .players()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.active && !p.spectator)
            .map(|(slot, p)| (self.world.avatar_id(slot as u32), p.name().to_string()))
            .collect();
        *self.board.roster.lock().unwrap_or_else(|e| e.into_inner()) = roster;
    }

    /// Hands the tick and its bookmarks to the recording; true when it took a checkpoint.
    fn record(&mut self) -> bool {
        let Some(rec) = self.recorder.as_mut() else {
            // Nothing keeps a bookmark without a recording.
            let dropped = self.bookmarks.drain(..).count() as u64;
            self.metrics.bookmarks_dropped_total.fetch_add(dropped, Relaxed);
            return false;
        };
        // The live world goes on when the writer fails; it has logged and counted why.
        let checkpointed = rec.record(&self.inputs, &self.world).unwrap_or_else(|e| {
            self.recording_error = Some(e);
            false
        });
        for (client, note) in self.bookmarks.drain(..) {
            match rec.bookmark(self.world.tick(), client, note) {
                Ok(()) => self.metrics.bookmarks_recorded_total.fetch_add(1, Relaxed),
                Err(_) => self.metrics.bookmarks_dropped_total.fetch_add(1, Relaxed),
            };
        }
        checkpointed
    }

    /// Wakes the recording's writer with a checkpoint's tick, once the tick's snapshots are
    /// out and its time is taken: the writer then compacts it in the tick thread's sleep,
    /// not in its work (see `recorder`).
    fn hand_over_recording(&mut self) {
        if !self.recorder.as_ref().is_some_and(Recorder::holding) {
            return;
        }
        self.set_phase(Phase::Record);
        // The live world goes on when the writer fails; it has logged and counted why.
        if let Some(Err(e)) = self.recorder.as_mut().map(Recorder::hand_over) {
            self.recording_error = Some(e);
        }
        self.set_phase(Phase::Idle);
    }

    /// WELCOMEs for this tick's joins, closes for refused ones, then every snapshot.
    fn handoff(&mut self) {
        self.count_rejections();
        self.welcome_joined();
        self.refuse_unjoined();
        self.queue_snapshots();
        self.publish_tokens(false);
    }

    /// The kernel's refusals of this tick, into `/metrics`.
    fn count_rejections(&self) {
        let (m, r) = (&self.metrics, &self.world.output().rejected);
        for (a, v) in [
            (&m.rejected_unknown_client_total, r.unknown_client),
            (&m.rejected_duplicate_join_total, r.duplicate_join),
            (&m.rejected_slots_full_total, r.slots_full),
            (&m.rejected_name_invalid_total, r.name_invalid),
            (&m.rejected_out_of_range_total, r.out_of_range),
            (&m.rejected_stale_seq_total, r.stale_seq),
            (&m.rejected_ack_from_future_total, r.ack_from_future),
            (&m.rejected_wrong_role_total, r.wrong_role),
        ] {
            if v > 0 {
                a.fetch_add(v as u64, Relaxed);
            }
        }
    }

    /// Each due snapshot into its client's outlet, never waiting, then the outlets to the
    /// flusher: a full outlet drops it, and `grace_overflow_events` drops in a row evict
    /// the client.
    fn queue_snapshots(&mut self) {
        let out = self.world.output();
        let m = &self.metrics;
        let bp = &self.settings.backpressure;
        // PONG reports the published tick: it must not be behind the snapshots queued now.
        debug_assert!(
            self.board.tick.load(Relaxed) >= out.tick,
            "tick {} handed off before it was published",
            out.tick
        );
        let mut due = self.flusher.list();
        let mut sent_bytes = 0u64;
        for f in out.snapshots() {
            let Some(c) = self.clients.get_mut(&f.client) else {
                continue;
            };
            let outlet = &c.shared.outlet;
            if c.state != JoinState::Joined || c.closing || !outlet.is_open() {
                continue;
            }
            if c.awaiting_full_snapshot {
                // After a reclaim without kept snapshots, a delta could not be decoded:
                // wait for the kernel's first full snapshot (no baseline).
                if !f.is_full() {
                    continue;
                }
                c.awaiting_full_snapshot = false;
            }
            match outlet.queue_binary(&protocol::SNAPSHOT_HEAD, f.bytes) {
                Ok(depth) => {
                    due.push(outlet.clone());
                    c.shared.queue_depth_hwm.fetch_max(depth, Relaxed);
                    sent_bytes += (protocol::SNAPSHOT_HEAD.len() + f.bytes.len()) as u64;
                }
                Err(Refused::Full) => overflowed(c, f.client, out.tick, bp, m),
                Err(Refused::Closed) => c.closing = true,
            }
        }
        // Counted once a tick: the I/O threads add to the same counters.
        let sent = due.len() as u64;
        m.snapshots_sent_total.fetch_add(sent, Relaxed);
        m.messages_sent_total.fetch_add(sent, Relaxed);
        m.bytes_sent_total.fetch_add(sent_bytes, Relaxed);
        self.flusher.flush(due);
    }

    fn finish(mut self, ran: u64) -> TickReport {
        self.set_phase(Phase::Idle);
        self.publish_tokens(true);
        if let Some(w) = self.reclaim_writer.take() {
            w.finish();
        }
        let mut path = None;
        if let Some(mut rec) = self.recorder.take() {
            // The final checkpoint lets the next session of this world resume from the
            // last tick without stepping.
            match rec.finish(&self.world) {
                Ok(()) => {
                    tracing::info!(path = %rec.path.display(), tick = self.world.tick(), "recording finished")
                }
                Err(e) => self.recording_error = Some(e),
            }
            path = Some(rec.path.clone());
        }
        TickReport {
            ticks: ran,
            final_tick: self.world.tick(),
            final_root: self.world.state_root(),
            recording: path,
            recording_error: self.recording_error,
        }
    }
}

/// A snapshot that did not fit `c`'s queue: counted, logged, and the client evicted once
/// its streak of drops with no send between reaches `grace_overflow_events`.
fn overflowed(c: &mut TickClient, client: u32, tick: u32, bp: &BackpressureSection, m: &Metrics) {
    let s = &c.shared;
    s.state_updates_dropped.fetch_add(1, Relaxed);
    s.overflow_events.fetch_add(1, Relaxed);
    m.state_updates_dropped_total.fetch_add(1, Relaxed);
    m.overflow_events_total.fetch_add(1, Relaxed);
    c.overflow_streak = if s.outlet.take_sent_since_overflow() {
        1
    } else {
        c.overflow_streak + 1
    };
    let streak = c.overflow_streak;
    if bp.log_overflow_at_warn {
        tracing::warn!(client, tick, streak, "send queue full: snapshot dropped");
    } else {
        tracing::debug!(client, tick, streak, "send queue full: snapshot dropped");
    }
    if streak >= bp.grace_overflow_events {
        c.closing = true;
        m.evictions_total.fetch_add(1, Relaxed);
        c.shared.request_close(
            bp.eviction_close_code,
            format!("too slow: {streak} snapshots in a row did not fit the send queue"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_ticks_catch_up_a_bounded_number_then_skip() {
        let dt = 16_666_666;
        let ms = Duration::from_millis;
        assert_eq!(catch_up(ms(3), dt, 4), (false, 0));
        assert_eq!(catch_up(ms(20), dt, 4), (true, 0));
        // 5 ticks behind with a cap of 4: one deadline is dropped.
        assert_eq!(catch_up(ms(84), dt, 4), (true, 1));
        assert_eq!(catch_up(Duration::from_secs(1), dt, 4), (true, 56));
        assert_eq!(catch_up(Duration::from_secs(1), dt, 0), (true, 60));
    }
}
