//! `Worlds`: each world's life cycle on this node. Create and delete; join (answer the
//! running server, here or on the node that owns it, or claim the world and start one,
//! resumed from its newest segment); stop; finalize (forget the token, close the segment
//! from what its recording says, give the world up); the idle and health reaper; and
//! `reconcile` for a restarted node.
//!
//! Invariants:
//! - At most one server per world: every start, stop and finalisation of a world runs
//!   under that world's lock (`hold`), so two racing first joins start one process.
//! - The store is the state of record: a restarted node reads which servers the last one
//!   ran, stops any that survived it, and closes their segments from their recordings.
//! - A token is valid exactly while its process lives (`Launcher`, `Tokens`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use migratory_kernel::{hex, WorldConfig};
use migratory_wire::fleet::WorldContent;

use crate::error::{io_err, validate_world_id, FleetError};
use crate::launcher::{allocated_recording, exit_of, Launched, Launcher};
use crate::limits::WorldLimits;
use crate::metrics::FleetMetrics;
use crate::node::Node;
use crate::options::FleetOptions;
use crate::process::ExitInfo;
use crate::segments::Segments;
use crate::slots::{HeldWorld, Running, Slots};
use crate::store::{Holder, NodeRow, SegmentRow, Store, WorldRow};
use crate::tokens::{Grant, TokenCheck};

/// The answer to a join.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JoinAnswer {
    pub world: String,
    pub ws_url: String,
    /// The node running the world's server.
    pub node: String,
    /// The world's fencing epoch: a new one means a new server.
    pub epoch: i64,
    /// True when this join started the server.
    pub started: bool,
    /// The tick the running session started from (0 for a fresh world).
    pub start_tick: u32,
    /// The segment it resumed from, when it did.
    pub resumed_from_seq: Option<i64>,
    /// Milliseconds from the request to ready (0 when it was running).
    pub ready_ms: u64,
}

/// One look at a join, under the world's lock.
enum JoinStep {
    Answer(JoinAnswer),
    /// Another node owns the world and is starting its server: ask again shortly.
    StartingOn(String),
    /// Another node claimed the world between our read and our claim: read again.
    Lost,
}

/// What a create did.
#[derive(Debug)]
pub(crate) enum Created {
    /// A new world, with its config's hash and its config as given.
    New {
        config_hash: String,
        config: serde_json::Value,
    },
    /// The world exists with the same config (maybe spelled differently): the stored one.
    Same {
        config_hash: String,
        stored: serde_json::Value,
    },
}

/// A world's server as this node sees it: from its own slot (without waiting for a busy
/// one), or from the store when another node owns the world.
#[derive(Debug)]
pub(crate) enum Live {
    /// Running on this node.
    Here {
        epoch: i64,
        pid: u32,
        ws_url: String,
        players: u32,
    },
    /// This node is starting or stopping it.
    Busy,
    /// Another node with a live lease runs it (no URL yet: it is starting it).
    Elsewhere {
        node: String,
        epoch: i64,
        ws_url: Option<String>,
    },
    /// Its owner's lease has lapsed: the next join takes it over.
    Orphaned {
        node: String,
        epoch: i64,
    },
    Stopped,
}

/// The worlds this node runs, and the rules for starting and stopping them.
#[derive(Debug)]
pub(crate) struct Worlds {
    store: Store,
    node: Node,
    launcher: Launcher,
    segments: Arc<Segments>,
    metrics: Arc<FleetMetrics>,
    slots: Slots,
    limits: WorldLimits,
    shards: u32,
    ready_timeout: Duration,
    idle_timeout: Duration,
    health_failed_polls_max: u32,
}

impl Worlds {
    pub(crate) fn new(
        store: Store,
        options: &FleetOptions,
        (node, launcher): (Node, Launcher),
        segments: Arc<Segments>,
        metrics: Arc<FleetMetrics>,
    ) -> Worlds {
        Worlds {
            store,
            node,
            launcher,
            segments,
            metrics,
            slots: Slots::default(),
            limits: options.limits,
            shards: options.shards,
            ready_timeout: options.ready_timeout,
            idle_timeout: options.idle_timeout,
            health_failed_polls_max: options.health_failed_polls_max,
        }
    }

    /// This node's id.
    pub(crate) fn node_id(&self) -> &str {
        &self.node.id
    }

    /// Takes the world's lock (waiting for whoever holds it).
    pub(crate) async fn hold(&self, id: &str) -> HeldWorld {
        self.slots.hold(id).await
    }

    /// Whether someone holds the world's lock right now (starting, stopping, moving it).
    pub(crate) fn is_busy(&self, id: &str) -> bool {
        self.slots.is_busy(id)
    }

    /// The worlds this node keeps a slot for (every world it has touched).
    pub(crate) fn ids(&self) -> Vec<String> {
        self.slots.ids()
    }

    /// World servers running now, besides `own`'s (`Slots::running_count`).
    pub(crate) async fn running_count(&self, own: Option<&str>) -> usize {
        self.slots.running_count(own).await
    }

    /// World slots kept in memory.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.slot_count()
    }

    /// Whether this node runs a server of the world (waiting for its lock).
    pub(crate) async fn has_server(&self, id: &str) -> bool {
        self.hold(id).await.running().is_some()
    }

    /// The world's row; `NotFound` for an unknown (or invalid) id.
    pub(crate) async fn world_row(&self, id: &str) -> Result<WorldRow, FleetError> {
        validate_world_id(id)?;
        self.store.world(id).await?.ok_or_else(|| FleetError::NotFound {
            world: id.to_string(),
        })
    }

    /// The grant of a world server's token, for a call about `world_id`.
    pub(crate) fn grant_for(&self, world_id: &str, presented: &str) -> Result<Grant, TokenCheck> {
        self.launcher.tokens().grant_for(world_id, presented)
    }

    /// Makes this node the world's holder at the next epoch, when the world is still as
    /// `row` says and no live node holds it; None when another node got it first.
    pub(crate) async fn claim(&self, row: &WorldRow) -> Result<Option<Holder>, FleetError> {
        let Some(epoch) = self.store.claim_world(&row.id, &self.node.id, row.epoch).await? else {
            return Ok(None);
        };
        Ok(Some(Holder {
            node: self.node.id.clone(),
            epoch,
            created_unix_ms: row.created_unix_ms,
        }))
    }

    /// Gives the world up (no owner, the next epoch); false when it was no longer
    /// `holder`'s.
    pub(crate) async fn release(&self, id: &str, holder: &Holder) -> Result<bool, FleetError> {
        Ok(self.store.release_world(id, holder).await?)
    }

    /// The nodes sharing the store, with their leases.
    pub(crate) async fn nodes(&self) -> Result<Vec<NodeRow>, FleetError> {
        Ok(self.store.nodes().await?)
    }

    /// The ids of the nodes with a live lease.
    pub(crate) async fn live_nodes(&self) -> Result<Vec<String>, FleetError> {
        Ok(self
            .nodes()
            .await?
            .into_iter()
            .filter(|n| n.live)
            .map(|n| n.id)
            .collect())
    }

    /// Every world in the store.
    pub(crate) async fn rows(&self) -> Result<Vec<WorldRow>, FleetError> {
        Ok(self.store.worlds().await?)
    }

    /// The world's segments, each with how many of its bytes the store holds when
    /// segments are shipped.
    pub(crate) async fn segments(&self, id: &str) -> Result<Vec<(SegmentRow, Option<u64>)>, FleetError> {
        let mut out = Vec::new();
        for seg in self.segments.rows(id).await? {
            let shipped = match self.segments.ships() {
                true => Some(self.segments.shipped_bytes(id, seg.seq).await?),
                false => None,
            };
            out.push((seg, shipped));
        }
        Ok(out)
    }

    /// `PUT /api/worlds/{id}`: creates the world from `body` (the server's `[world]`
    /// table as JSON), checked against this fleet's limits.
    pub(crate) async fn create(&self, id: &str, body: &[u8]) -> Result<Created, FleetError> {
        validate_world_id(id)?;
        let invalid = |reason: String| FleetError::Invalid { reason };
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
        if !value.is_object() {
            return Err(invalid(
                "the body must be a JSON object (the world config; {} takes every default)".into(),
            ));
        }
        let config: WorldConfig = serde_path_to_error::deserialize(&value)
            .map_err(|e| invalid(format!("world config key `{}`: {}", e.path(), e.inner())))?;
        config
            .validate()
            .map_err(|e| invalid(format!("world config: {e}")))?;
        self.limits.check(&config, self.shards)?;
        let config_json = value.to_string();
        let config_hash = hex(&config.content_hash());
        if self.store.create_world(id, &config_json, &config_hash).await? {
            tracing::info!(world = %id, %config_hash, "world created");
            return Ok(Created::New {
                config_hash,
                config: value,
            });
        }
        let existing = self.world_row(id).await?;
        if existing.config_hash == config_hash {
            let stored = serde_json::from_str(&existing.config_json).unwrap_or(value);
            Ok(Created::Same { config_hash, stored })
        } else {
            Err(FleetError::Conflict {
                world: id.to_string(),
                reason: format!(
                    "exists with another config (hash {}); delete it first",
                    existing.config_hash
                ),
            })
        }
    }

    /// `DELETE /api/worlds/{id}`: stops its server, then removes its rows and files.
    pub(crate) async fn delete(&self, id: &str) -> Result<(), FleetError> {
        let row = self.world_row(id).await?;
        self.refuse_if_elsewhere(&row, "delete").await?;
        // The world's lock is held from the stop to the delete, so no join restarts it in
        // between.
        let mut held = self.hold(id).await;
        if let Some(r) = held.take_running() {
            self.stop_running(id, r).await?;
        }
        if !self.store.delete_world(id).await? {
            return Err(FleetError::NotFound {
                world: id.to_string(),
            });
        }
        let dir = self.segments.files(id).dir;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(world = %id, dir = %dir.display(), error = %e, "removing the world's files failed")
            }
        }
        tracing::info!(world = %id, "world deleted");
        Ok(())
    }

    /// A stop, a delete, a move or an upgrade is made by the node that runs the world:
    /// another node with a live lease is named in a 409.
    pub(crate) async fn refuse_if_elsewhere(&self, row: &WorldRow, what: &str) -> Result<(), FleetError> {
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            if self.store.node_live(owner).await? {
                return Err(FleetError::Conflict {
                    world: row.id.clone(),
                    reason: format!("runs on node `{owner}`: ask that node to {what} it"),
                });
            }
        }
        Ok(())
    }

    /// The world's server as this node sees it (`live_nodes`: the nodes with a live lease).
    pub(crate) fn live(&self, row: &WorldRow, live_nodes: &[String]) -> Live {
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            let (node, epoch) = (owner.to_string(), row.epoch);
            return if live_nodes.iter().any(|n| n == owner) {
                Live::Elsewhere {
                    node,
                    epoch,
                    ws_url: row.ws_url.clone(),
                }
            } else {
                Live::Orphaned { node, epoch }
            };
        }
        let Some(held) = self.slots.try_hold(&row.id) else {
            return Live::Busy;
        };
        match held.running() {
            Some(r) if r.child.exit_info().is_none() => Live::Here {
                epoch: r.holder.epoch,
                pid: r.child.pid,
                ws_url: r.ws_url.clone(),
                players: r.players,
            },
            _ => Live::Stopped,
        }
    }

    /// Ensures the world's server runs and is ready, here or on the node that owns it.
    pub(crate) async fn join(self: &Arc<Self>, id: &str) -> Result<JoinAnswer, FleetError> {
        let t0 = Instant::now();
        // An unknown world is a 404 before it gets a slot: slots are kept per world id, so
        // every distinct unknown id joined would otherwise stay in memory.
        self.world_row(id).await?;
        let deadline = t0 + self.ready_timeout;
        loop {
            match self.join_step(id, t0).await? {
                JoinStep::Answer(a) => return Ok(a),
                JoinStep::Lost => continue,
                JoinStep::StartingOn(node) => {
                    if Instant::now() >= deadline {
                        return Err(FleetError::Unavailable {
                            world: id.to_string(),
                            reason: format!(
                                "node `{node}` is starting its server and was not ready within {:.1} s",
                                self.ready_timeout.as_secs_f64()
                            ),
                            log_tail: Vec::new(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn join_step(self: &Arc<Self>, id: &str, t0: Instant) -> Result<JoinStep, FleetError> {
        let mut held = self.hold(id).await;
        // Read under the lock: a delete that held it before us has removed the world.
        let row = self.world_row(id).await?;
        let ours = row.owner_node.as_deref() == Some(self.node.id.as_str());
        if let Some(r) = held.running_mut() {
            if r.child.exit_info().is_none() {
                if ours && row.epoch == r.holder.epoch && row.created_unix_ms == r.holder.created_unix_ms {
                    // A join is activity: the joiner gets a whole idle timeout to connect.
                    r.idle_since = None;
                    return Ok(JoinStep::Answer(JoinAnswer {
                        world: id.to_string(),
                        ws_url: r.ws_url.clone(),
                        node: self.node.id.clone(),
                        epoch: r.holder.epoch,
                        started: false,
                        start_tick: r.start_tick,
                        resumed_from_seq: None,
                        ready_ms: 0,
                    }));
                }
                // The world moved on without this server (this node's lease lapsed and
                // another took it over): its appends are refused already; stop it now.
                tracing::warn!(world = %id, epoch = r.holder.epoch, now = row.epoch, owner = ?row.owner_node, "this node's server of the world is fenced; killing it");
                r.child.signal(libc::SIGKILL);
            }
        }
        if let Some(r) = held.take_running() {
            self.finalize(id, r).await?;
        }
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            if self.store.node_live(owner).await? {
                let Some(ws_url) = row.ws_url.clone() else {
                    return Ok(JoinStep::StartingOn(owner.to_string()));
                };
                let segments = self.segments.rows(id).await?;
                let start_tick = segments.last().map_or(0, |s| s.first_tick as u32);
                return Ok(JoinStep::Answer(JoinAnswer {
                    world: id.to_string(),
                    ws_url,
                    node: owner.to_string(),
                    epoch: row.epoch,
                    started: false,
                    start_tick,
                    resumed_from_seq: None,
                    ready_ms: 0,
                }));
            }
        }
        if self.node.is_draining() {
            return Err(FleetError::Unavailable {
                world: id.to_string(),
                reason: format!("node `{}` is draining: join through another node", self.node.id),
                log_tail: Vec::new(),
            });
        }
        let running_max = self.limits.worlds_running_max as usize;
        if self.running_count(Some(id)).await >= running_max {
            return Err(FleetError::Unavailable {
                world: id.to_string(),
                reason: format!(
                    "this fleet runs at most {running_max} worlds at once (--worlds-running-max)"
                ),
                log_tail: Vec::new(),
            });
        }
        let Some(holder) = self.claim(&row).await? else {
            return Ok(JoinStep::Lost);
        };
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            tracing::warn!(world = %id, from = %owner, epoch = holder.epoch, "taking the world over from a node whose lease lapsed");
            self.metrics.takeovers.inc();
        }
        let (running, resumed_from_seq) = match self.start_server(&row, holder.clone()).await {
            Ok(x) => x,
            Err(e) => {
                // Give the world up, so the next join (on any node) tries again.
                self.release(id, &holder).await?;
                return Err(e);
            }
        };
        let answer = JoinAnswer {
            world: id.to_string(),
            ws_url: running.ws_url.clone(),
            node: self.node.id.clone(),
            epoch: holder.epoch,
            started: true,
            start_tick: running.start_tick,
            resumed_from_seq,
            ready_ms: t0.elapsed().as_millis() as u64,
        };
        self.watch_exit(id, &running);
        held.set_running(running);
        Ok(JoinStep::Answer(answer))
    }

    /// Starts the world's server for `holder` (this node has just claimed it), resumed
    /// from its newest segment if any; opens its segment and records it in the store.
    /// Returns it and the segment it resumed from.
    async fn start_server(
        &self,
        row: &WorldRow,
        holder: Holder,
    ) -> Result<(Running, Option<i64>), FleetError> {
        let id = row.id.as_str();
        let files = self.segments.files(id);
        std::fs::create_dir_all(files.segments_dir())
            .map_err(io_err(format!("creating {}", files.segments_dir().display())))?;
        // A segment still marked running has no server: closed from its recording first,
        // so the resume starts from its end.
        self.segments.close_open(id, None).await?;
        let resume = self.segments.resume_point(id, row.lineage).await?;
        if resume.is_some() {
            self.metrics.resumes.inc();
        }
        let resumed_from_seq = resume.as_ref().map(|s| s.seq);
        let seq = self.segments.next_seq(id).await?;
        let config: serde_json::Value =
            serde_json::from_str(&row.config_json).map_err(|e| FleetError::Invalid {
                reason: format!("stored config of `{id}` is not JSON: {e}"),
            })?;
        let ship = self.segments.ship_plan();
        let grant = Grant {
            content: WorldContent {
                world_id: id.to_string(),
                config,
                record_dir: files.segments_dir(),
                resume_from: resume.map(|s| self.segments.local_path(&s.recording_path)),
                ship_interval_ms: ship.interval_ms,
                ship_deadline_ms: ship.deadline_ms,
                record_block_ticks: ship.block_ticks,
                epoch: holder.epoch,
            },
            holder: holder.clone(),
            segment_seq: seq,
        };
        let launched = self.launcher.launch(grant, files.log_path()).await?;
        let registered = self
            .register(id, &launched, &holder, (seq, resumed_from_seq))
            .await;
        let segment_seq = match registered {
            Ok(s) => s,
            Err(e) => {
                let log_tail = self.launcher.abandon(&launched.child, launched.generation).await;
                return Err(match e {
                    FleetError::Unavailable { world, reason, .. } => FleetError::Unavailable {
                        world,
                        reason,
                        log_tail,
                    },
                    e => e,
                });
            }
        };
        let start_tick = launched.status.start_tick;
        tracing::info!(world = %id, pid = launched.child.pid, ws_url = %launched.ws_url, start_tick, resumed_from_seq, "world server ready");
        let running = Running {
            child: launched.child,
            generation: launched.generation,
            ws_url: launched.ws_url,
            status_url: launched.status_url,
            holder,
            segment_seq,
            start_tick,
            players: 0,
            idle_since: None,
            failed_polls: 0,
        };
        Ok((running, resumed_from_seq))
    }

    /// Records a launched server in the store: opens its segment (`seqs`: its own and the
    /// one it resumed from) when it records, and its URL. Returns its segment; an error when
    /// the world is no longer `holder`'s (the caller kills the server).
    async fn register(
        &self,
        id: &str,
        launched: &Launched,
        holder: &Holder,
        (seq, resumed_from_seq): (i64, Option<i64>),
    ) -> Result<Option<i64>, FleetError> {
        let lost = || FleetError::Unavailable {
            world: id.to_string(),
            reason: format!(
                "another node took the world over while this one started it (epoch {})",
                holder.epoch
            ),
            log_tail: Vec::new(),
        };
        let segment_seq = match &launched.status.recording {
            Some(path) => {
                // An allocated server's recording is on its pod: the store's copy is
                // written into this node's folder for the world whenever it is needed.
                let local = match self.launcher.allocates() {
                    true => allocated_recording(&self.segments.files(id).segments_dir(), seq),
                    false => path.clone(),
                };
                let first_tick = launched.status.start_tick;
                if !self
                    .segments
                    .open(id, (seq, resumed_from_seq), &local, first_tick, holder)
                    .await?
                {
                    return Err(lost());
                }
                Some(seq)
            }
            None => None,
        };
        if !self
            .store
            .set_server(id, holder, launched.child.pid, &launched.ws_url)
            .await?
        {
            return Err(lost());
        }
        Ok(segment_seq)
    }

    /// When the child exits by itself (a crash, a kill), closes its segment.
    fn watch_exit(self: &Arc<Self>, id: &str, running: &Running) {
        let worlds = self.clone();
        let id = id.to_string();
        let generation = running.generation;
        let mut exit = running.child.exit_watch();
        tokio::spawn(async move {
            let info = exit_of(&mut exit).await;
            let mut held = worlds.hold(&id).await;
            if held.running().is_some_and(|r| r.generation == generation) {
                if let Some(r) = held.take_running() {
                    tracing::warn!(world = %id, pid = r.child.pid, exit = %info, "world server exited by itself");
                    worlds.metrics.crashes.inc();
                    if let Err(e) = worlds.finalize(&id, r).await {
                        tracing::error!(world = %id, error = %e, "closing the segment failed");
                    }
                }
            }
        });
    }

    /// Once the server has exited: forgets its token, ships what it left and closes its
    /// segment. The world stays this node's.
    async fn close(&self, id: &str, running: &Running, info: ExitInfo) -> Result<(), FleetError> {
        self.launcher.forget(running.generation);
        let Some(seq) = running.segment_seq else {
            return Ok(());
        };
        self.segments
            .close_after_exit(id, seq, &running.holder, info)
            .await
    }

    /// Stops a server of a held world with `signal` (SIGTERM: a stop; SIGUSR1: a move,
    /// whose clients are told to rejoin), killing it if it is late; then closes it as
    /// `close` does. The world stays this node's in the store: the caller gives it up or
    /// hands it over.
    pub(crate) async fn stop_server(
        &self,
        id: &str,
        running: &Running,
        signal: i32,
    ) -> Result<(), FleetError> {
        let info = self.launcher.halt(id, &running.child, signal).await;
        self.close(id, running, info).await
    }

    /// After the child has exited: close it, and give the world up (that last step
    /// whatever went wrong before it, so no other node keeps answering joins with a dead
    /// server's URL).
    async fn finalize(&self, id: &str, running: Running) -> Result<(), FleetError> {
        let info = running.child.wait().await;
        let closed = self.close(id, &running, info).await;
        let released = self.release(id, &running.holder).await;
        if let Ok(false) = released {
            tracing::info!(world = %id, epoch = running.holder.epoch, "the world had moved on to another node; left as it is");
        }
        closed?;
        released?;
        Ok(())
    }

    /// Stops the world's server gracefully (SIGTERM), killing it if it is late, and gives
    /// the world up.
    pub(crate) async fn stop_running(&self, id: &str, running: Running) -> Result<(), FleetError> {
        self.launcher.halt(id, &running.child, libc::SIGTERM).await;
        self.finalize(id, running).await
    }

    /// Stops a held world's server, if it has one.
    pub(crate) async fn stop_held(&self, held: &mut HeldWorld) -> Result<bool, FleetError> {
        match held.take_running() {
            Some(r) => {
                let id = held.id().to_string();
                self.stop_running(&id, r).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// `POST /api/worlds/{id}/stop`: stops its server gracefully (a final checkpoint); the
    /// next join resumes it. False when it had none here.
    pub(crate) async fn stop(&self, id: &str) -> Result<bool, FleetError> {
        let row = self.world_row(id).await?;
        self.refuse_if_elsewhere(&row, "stop").await?;
        self.stop_held(&mut self.hold(id).await).await
    }

    /// The node is stopping: every world server it runs stops, all at once (each waits for
    /// its own server's final checkpoint).
    pub(crate) async fn stop_all(&self) {
        let ids = self.ids();
        let stops = ids.iter().map(|id| async move {
            if let Err(e) = self.stop_held(&mut self.hold(id).await).await {
                tracing::error!(world = %id, error = %e, "stopping a world failed");
            }
        });
        futures_util::future::join_all(stops).await;
    }

    /// One pass of the idle reaper: reads each server's player count, stops the idle.
    pub(crate) async fn reap_once(&self) {
        // A world busy starting or stopping is looked at next time. The lock is not held
        // while its server answers, so a `show` meanwhile does not see it busy.
        let polled: Vec<(String, String, u64)> = self
            .slots
            .ids()
            .into_iter()
            .filter_map(|id| {
                let held = self.slots.try_hold(&id)?;
                let r = held.running().filter(|r| r.child.exit_info().is_none())?;
                let (url, generation) = (r.status_url.clone(), r.generation);
                Some((id, url, generation))
            })
            .collect();
        // All at once: a frozen server's timeout delays nobody else's poll.
        let statuses =
            futures_util::future::join_all(polled.iter().map(|(_, url, _)| self.launcher.status(url))).await;
        for ((id, _, generation), status) in polled.into_iter().zip(statuses) {
            let Some(mut held) = self.slots.try_hold(&id) else {
                continue;
            };
            let Some(r) = held.running_mut().filter(|r| r.generation == generation) else {
                continue;
            };
            match status {
                Ok(s) => {
                    r.failed_polls = 0;
                    r.players = s.players;
                    if s.players > 0 {
                        r.idle_since = None;
                    } else {
                        r.idle_since.get_or_insert_with(Instant::now);
                    }
                }
                Err(e) => {
                    r.failed_polls += 1;
                    self.metrics.health_misses.inc();
                    tracing::warn!(world = %id, failed = r.failed_polls, error = %e, "status poll failed");
                }
            }
            // A server that stopped answering (stopped, wedged) is killed, so joins stop
            // handing out its URL: the next join resumes the world from its recording.
            if r.failed_polls >= self.health_failed_polls_max {
                if let Some(r) = held.take_running() {
                    tracing::error!(world = %id, pid = r.child.pid, polls = r.failed_polls, "world server not answering /status; killing it");
                    r.child.signal(libc::SIGKILL);
                    self.metrics.health_kills.inc();
                    if let Err(e) = self.finalize(&id, r).await {
                        tracing::error!(world = %id, error = %e, "finalizing a killed world server failed");
                    }
                }
                continue;
            }
            if r.idle_since.is_some_and(|t| t.elapsed() >= self.idle_timeout) {
                if let Some(r) = held.take_running() {
                    tracing::info!(world = %id, idle_s = self.idle_timeout.as_secs_f64(), "stopping idle world");
                    if let Err(e) = self.stop_running(&id, r).await {
                        tracing::error!(world = %id, error = %e, "stopping an idle world failed");
                    }
                }
            }
        }
    }

    /// At start: servers the store says this node was running belong to an earlier
    /// incarnation of it that is gone. Any that still live are stopped (SIGTERM, then
    /// SIGKILL), every segment they left open is closed from its recording, and their
    /// worlds are given up. Other nodes' worlds are theirs.
    pub(crate) async fn reconcile(&self) -> Result<(), FleetError> {
        for row in self.store.worlds().await? {
            // A store from before nodes had owners: its worlds were this single node's.
            let ours = match row.owner_node.as_deref() {
                Some(o) => o == self.node.id,
                None => row.server_pid.is_some(),
            };
            if !ours {
                continue;
            }
            if let Some(pid) = row.server_pid.and_then(|p| u32::try_from(p).ok()) {
                self.launcher.stop_leftover(&row.id, pid).await;
            }
            let holder = Holder {
                node: self.node.id.clone(),
                epoch: row.epoch,
                created_unix_ms: row.created_unix_ms,
            };
            self.segments.close_open(&row.id, Some(&holder)).await?;
            if row.owner_node.is_some() {
                self.release(&row.id, &holder).await?;
            } else {
                self.store.release_legacy(&row.id).await?;
            }
        }
        Ok(())
    }
}
