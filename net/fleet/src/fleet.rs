//! Each world's life cycle: start (resume from the newest segment, wait for the child's
//! ready line, read its `/status`, open a segment row), stop, finalize (drop the token,
//! close the segment from what its recording says), the idle reaper, and `reconcile` for
//! a restarted fleet.
//!
//! Invariants:
//! - At most one server per world: every start, stop and finalisation of a world runs
//!   under that world's lock, so two racing first joins start one process.
//! - The store is the state of record: a restarted fleet reads which servers the last one
//!   ran, stops any that survived it, and closes their segments from their recordings.
//! - A token is valid exactly while its process lives: it is made at spawn, given on
//!   stdin, kept only as a hash, and dropped when the process exits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use migratory_kernel::hex;
use tokio::sync::watch;

use migratory_wire::fleet::{ServerStatus, WorldContent};
use migratory_wire::http::{self, HttpError};

use crate::error::{validate_world_id, FleetError};
use crate::metrics::FleetMetrics;
use crate::node::Node;
use crate::options::FleetOptions;
use crate::process::{self, ChildProc, ExitInfo, Spawner};
use crate::store::{Ended, Holder, SegmentEnd, Store, WorldRow};

/// Where a world's files live under the data folder: `worlds/{id}/segments/*.mrec` and
/// `worlds/{id}/server.log`. The store holds paths relative to the data folder, so an
/// object-store backend can later map the same names to keys (fetch a segment before a
/// resume, upload one after it closes) without a change to the store or the servers.
#[derive(Clone, Debug)]
pub(crate) struct WorldFiles {
    pub(crate) dir: PathBuf,
}

impl WorldFiles {
    pub(crate) fn new(data_dir: &Path, id: &str) -> WorldFiles {
        WorldFiles {
            dir: data_dir.join("worlds").join(id),
        }
    }

    pub(crate) fn segments_dir(&self) -> PathBuf {
        self.dir.join("segments")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// How long counting the running servers waits for a slot locked by someone else before
/// counting it as busy (starting or stopping, so running).
const SLOT_BUSY_WAIT: Duration = Duration::from_millis(50);

/// A world's running server.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) child: ChildProc,
    pub(crate) generation: u64,
    pub(crate) ws_url: String,
    pub(crate) status_url: String,
    /// Who holds the world for this server: this node, its epoch, the world's creation.
    pub(crate) holder: Holder,
    pub(crate) segment_seq: Option<i64>,
    /// The tick the session started from (0, or the resumed tick).
    pub(crate) start_tick: u32,
    pub(crate) players: u32,
    pub(crate) idle_since: Option<Instant>,
    /// `/status` polls in a row that got no answer.
    pub(crate) failed_polls: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) running: Option<Running>,
}

/// A live token: its hash, its world and what it may read and write.
#[derive(Debug)]
pub(crate) struct TokenEntry {
    pub(crate) generation: u64,
    pub(crate) hash: blake3::Hash,
    pub(crate) grant: Grant,
}

/// What a world server's token lets it do: read its content, and append to its segment
/// under its epoch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Grant {
    pub(crate) content: WorldContent,
    pub(crate) holder: Holder,
    pub(crate) segment_seq: i64,
}

/// What a token presented to the internal API may do.
#[derive(Debug, PartialEq)]
pub(crate) enum TokenCheck {
    Granted(Box<Grant>),
    /// A live token of another world.
    Forbidden,
    /// No live token.
    Unauthorized,
}

/// Every live token is compared (`blake3::Hash` equality is constant-time), so neither
/// the answer's timing nor its content tells how close a guess came.
fn check_token(entries: &[TokenEntry], world_id: &str, presented: &str) -> TokenCheck {
    let hash = blake3::hash(presented.as_bytes());
    let mut found = None;
    for e in entries {
        if e.hash == hash {
            found = Some(e);
        }
    }
    match found {
        Some(e) if e.grant.content.world_id == world_id => TokenCheck::Granted(Box::new(e.grant.clone())),
        Some(_) => TokenCheck::Forbidden,
        None => TokenCheck::Unauthorized,
    }
}

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

/// How long a `/status` poll waits: a world server answers from memory in well under a
/// millisecond, so a second is a server that is stopped, wedged or unreachable.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a `/status` poll got no status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("not a /status answer: {0}")]
    Json(#[from] serde_json::Error),
}

/// The fleet's shared state.
#[derive(Debug)]
pub(crate) struct Fleet {
    pub(crate) store: Store,
    pub(crate) options: FleetOptions,
    pub(crate) url: String,
    pub(crate) spawner: Spawner,
    pub(crate) slots: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    pub(crate) tokens: Mutex<Vec<TokenEntry>>,
    pub(crate) generation: AtomicU64,
    pub(crate) node: Node,
    pub(crate) metrics: FleetMetrics,
    /// Replay viewers over worlds' histories, opened by `POST /api/worlds/{id}/view`.
    pub(crate) views: tokio::sync::Mutex<BTreeMap<String, crate::views::OpenView>>,
}

/// One look at a join, under the world's lock.
enum JoinStep {
    Answer(JoinAnswer),
    /// Another node owns the world and is starting its server: ask again shortly.
    StartingOn(String),
    /// Another node claimed the world between our read and our claim: read again.
    Lost,
}

/// Waits for the exit a watch reports.
pub(crate) async fn exit_of(rx: &mut watch::Receiver<Option<ExitInfo>>) -> ExitInfo {
    loop {
        if let Some(e) = *rx.borrow_and_update() {
            return e;
        }
        if rx.changed().await.is_err() {
            return rx.borrow().unwrap_or(ExitInfo::Signal(libc::SIGKILL));
        }
    }
}

/// Reads how a segment's recording ended (blocking: it reads the file).
fn segment_end(path: &Path, first_tick: i64) -> SegmentEnd {
    let crashed = |last_tick, final_root| SegmentEnd {
        last_tick,
        final_root,
        ended: Ended::Crashed,
    };
    let Ok(rec) = migratory_replay::Recording::open_after_crash(path) else {
        return crashed(first_tick, String::new());
    };
    if let Some(end) = rec.end {
        return SegmentEnd {
            last_tick: i64::from(end.final_tick),
            final_root: hex(&end.final_root),
            ended: Ended::Stopped,
        };
    }
    let root = rec.last_recorded_root().ok().map(|r| hex(&r));
    crashed(i64::from(rec.last_tick()), root.unwrap_or_default())
}

impl Fleet {
    pub(crate) fn slot(&self, id: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(id.to_string()).or_default().clone()
    }

    /// World servers running now, besides the one of `own` (whose lock the caller holds). A
    /// slot busy starting or stopping counts as running; a slot locked only for a moment
    /// (the exit watcher of a server just stopped looks at it) is waited for up to
    /// `SLOT_BUSY_WAIT` first, so a join right after a stop is not refused for it. Two first
    /// joins of different worlds racing past the limit can start one world more than it;
    /// the next join sees them.
    pub(crate) async fn running_count(&self, own: Option<&Arc<tokio::sync::Mutex<Slot>>>) -> usize {
        let slots: Vec<Arc<tokio::sync::Mutex<Slot>>> = {
            let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            s.values().cloned().collect()
        };
        let counted = slots
            .iter()
            .filter(|slot| own.is_none_or(|own| !Arc::ptr_eq(slot, own)))
            .map(|slot| async move {
                match tokio::time::timeout(SLOT_BUSY_WAIT, slot.lock()).await {
                    Ok(s) => usize::from(s.running.as_ref().is_some_and(|r| r.child.exit_info().is_none())),
                    Err(_) => 1,
                }
            });
        futures_util::future::join_all(counted).await.into_iter().sum()
    }

    pub(crate) fn drop_token(&self, generation: u64) {
        let mut t = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|e| e.generation != generation);
    }

    pub(crate) fn content_for(&self, world_id: &str, presented: &str) -> TokenCheck {
        let t = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        check_token(&t, world_id, presented)
    }

    pub(crate) async fn world_row(&self, id: &str) -> Result<WorldRow, FleetError> {
        validate_world_id(id)?;
        self.store.world(id).await?.ok_or_else(|| FleetError::NotFound {
            world: id.to_string(),
        })
    }

    /// Ensures the world's server runs and is ready, here or on the node that owns it.
    pub(crate) async fn join(self: &Arc<Self>, id: &str) -> Result<JoinAnswer, FleetError> {
        let t0 = Instant::now();
        // An unknown world is a 404 before it gets a slot: slots are kept per world id, so
        // every distinct unknown id joined would otherwise stay in memory.
        self.world_row(id).await?;
        let deadline = t0 + self.options.ready_timeout;
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
                                self.options.ready_timeout.as_secs_f64()
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
        let own = self.slot(id);
        let mut slot = own.lock().await;
        // Read under the lock: a delete that held it before us has removed the world.
        let row = self.world_row(id).await?;
        let ours = row.owner_node.as_deref() == Some(self.node.id.as_str());
        if let Some(r) = &mut slot.running {
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
        if let Some(r) = slot.running.take() {
            self.finalize(id, r).await?;
        }
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            if self.store.node_live(owner).await? {
                let Some(ws_url) = row.ws_url.clone() else {
                    return Ok(JoinStep::StartingOn(owner.to_string()));
                };
                let segments = self.store.segments(id).await?;
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
        if self.node.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(FleetError::Unavailable {
                world: id.to_string(),
                reason: format!("node `{}` is draining: join through another node", self.node.id),
                log_tail: Vec::new(),
            });
        }
        let running_max = self.options.limits.worlds_running_max as usize;
        if self.running_count(Some(&own)).await >= running_max {
            return Err(FleetError::Unavailable {
                world: id.to_string(),
                reason: format!(
                    "this fleet runs at most {running_max} worlds at once (--worlds-running-max)"
                ),
                log_tail: Vec::new(),
            });
        }
        let Some(epoch) = self.store.claim_world(id, &self.node.id, row.epoch).await? else {
            return Ok(JoinStep::Lost);
        };
        if let Some(owner) = row.owner_node.as_deref().filter(|o| *o != self.node.id) {
            tracing::warn!(world = %id, from = %owner, epoch, "taking the world over from a node whose lease lapsed");
            self.metrics.takeovers.inc();
        }
        let holder = Holder {
            node: self.node.id.clone(),
            epoch,
            created_unix_ms: row.created_unix_ms,
        };
        let (running, start_tick, resumed_from_seq) = match self.start_server(&row, holder.clone()).await {
            Ok(x) => x,
            Err(e) => {
                // Give the world up, so the next join (on any node) tries again.
                self.store.release_world(id, &holder).await?;
                return Err(e);
            }
        };
        let answer = JoinAnswer {
            world: id.to_string(),
            ws_url: running.ws_url.clone(),
            node: self.node.id.clone(),
            epoch,
            started: true,
            start_tick,
            resumed_from_seq,
            ready_ms: t0.elapsed().as_millis() as u64,
        };
        self.watch_exit(id, &running);
        slot.running = Some(running);
        Ok(JoinStep::Answer(answer))
    }

    /// When the child exits by itself (a crash, a kill), closes its segment.
    pub(crate) fn watch_exit(self: &Arc<Self>, id: &str, running: &Running) {
        let fleet = self.clone();
        let id = id.to_string();
        let generation = running.generation;
        let mut exit = running.child.exit_watch();
        tokio::spawn(async move {
            let info = exit_of(&mut exit).await;
            let slot = fleet.slot(&id);
            let mut slot = slot.lock().await;
            if slot.running.as_ref().is_some_and(|r| r.generation == generation) {
                if let Some(r) = slot.running.take() {
                    tracing::warn!(world = %id, pid = r.child.pid, exit = %info, "world server exited by itself");
                    fleet.metrics.crashes.inc();
                    if let Err(e) = fleet.finalize(&id, r).await {
                        tracing::error!(world = %id, error = %e, "closing the segment failed");
                    }
                }
            }
        });
    }

    pub(crate) async fn status(&self, url: &str) -> Result<ServerStatus, StatusError> {
        let response = http::Request::new(http::Method::GET, url)
            .timeout(STATUS_TIMEOUT)
            .send()
            .await?;
        if !response.is_success() {
            return Err(StatusError::Status(response.status));
        }
        Ok(response.json()?)
    }

    /// After the child has exited: drop its token, ship what is left, close its segment
    /// from its recording, and give the world up (that last step whatever went wrong
    /// before it, so no other node keeps answering joins with a dead server's URL).
    pub(crate) async fn finalize(&self, id: &str, running: Running) -> Result<(), FleetError> {
        let info = running.child.wait().await;
        self.drop_token(running.generation);
        let closed = self.close_finished(id, &running, info).await;
        let released = self.store.release_world(id, &running.holder).await;
        if let Ok(false) = released {
            tracing::info!(world = %id, epoch = running.holder.epoch, "the world had moved on to another node; left as it is");
        }
        closed?;
        released?;
        Ok(())
    }

    /// Ships what the exited server left unshipped and closes its segment, unless the
    /// segment was closed already (by a node that took the world over).
    pub(crate) async fn close_finished(
        &self,
        id: &str,
        running: &Running,
        info: ExitInfo,
    ) -> Result<(), FleetError> {
        let Some(seq) = running.segment_seq else {
            return Ok(());
        };
        let segments = self.store.segments(id).await?;
        let Some(seg) = segments
            .iter()
            .find(|s| s.seq == seq && s.ended == Ended::Running)
        else {
            return Ok(());
        };
        // What the server wrote but had not shipped (its last interval, its end record)
        // goes to the store now, unless the world has moved on.
        self.ship_tail(id, seq, &running.holder, &seg.recording_path)
            .await?;
        // Ended cleanly on disk, but the process failed after: still a crash.
        let failed = !info.success();
        if let Some(end) = self
            .close_from_recording(id, seq, &seg.recording_path, seg.first_tick, failed)
            .await?
        {
            tracing::info!(world = %id, seq, last_tick = end.last_tick, ended = ?end.ended, exit = %info, "segment closed");
        }
        Ok(())
    }

    /// Closes a running segment with what its recording says (its server has exited;
    /// `failed`: the process failed, so even a clean end counts as a crash). With a shared
    /// store, what the store holds is the recording. None when it was closed already.
    pub(crate) async fn close_from_recording(
        &self,
        id: &str,
        seq: i64,
        recording_path: &str,
        first_tick: i64,
        failed: bool,
    ) -> Result<Option<SegmentEnd>, FleetError> {
        self.materialize(id, seq, recording_path).await?;
        let path = self.options.data_dir.join(recording_path);
        let mut end = tokio::task::spawn_blocking(move || segment_end(&path, first_tick))
            .await
            .map_err(|e| FleetError::Io {
                context: "reading a segment".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        if failed && end.ended == Ended::Stopped {
            end.ended = Ended::Crashed;
        }
        Ok(self.store.close_segment(id, seq, &end).await?.then_some(end))
    }

    /// Stops the world's server gracefully (SIGTERM), killing it if it is late.
    pub(crate) async fn stop_running(&self, id: &str, running: Running) -> Result<(), FleetError> {
        running.child.signal(libc::SIGTERM);
        if tokio::time::timeout(self.options.stop_timeout, running.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(world = %id, pid = running.child.pid, "world server did not stop in time; killing it");
            running.child.signal(libc::SIGKILL);
        }
        self.finalize(id, running).await
    }

    /// Stops a world's server if it runs.
    pub(crate) async fn stop(&self, id: &str) -> Result<bool, FleetError> {
        let slot = self.slot(id);
        let mut slot = slot.lock().await;
        match slot.running.take() {
            Some(r) => {
                self.stop_running(id, r).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One pass of the idle reaper: reads each server's player count, stops the idle.
    pub(crate) async fn reap_once(&self) {
        let slots: Vec<(String, Arc<tokio::sync::Mutex<Slot>>)> = {
            let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            s.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        // A world busy starting or stopping is looked at next time. The lock is not held
        // while its server answers, so a `show` meanwhile does not see it busy.
        let polled: Vec<(String, Arc<tokio::sync::Mutex<Slot>>, String, u64)> = slots
            .into_iter()
            .filter_map(|(id, slot)| {
                let (url, generation) = {
                    let s = slot.try_lock().ok()?;
                    let r = s.running.as_ref().filter(|r| r.child.exit_info().is_none())?;
                    (r.status_url.clone(), r.generation)
                };
                Some((id, slot, url, generation))
            })
            .collect();
        // All at once: a frozen server's timeout delays nobody else's poll.
        let statuses =
            futures_util::future::join_all(polled.iter().map(|(_, _, url, _)| self.status(url))).await;
        for ((id, slot, _, generation), status) in polled.into_iter().zip(statuses) {
            let Ok(mut slot) = slot.try_lock() else {
                continue;
            };
            let Some(r) = slot.running.as_mut().filter(|r| r.generation == generation) else {
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
            if r.failed_polls >= self.options.health_failed_polls_max {
                if let Some(r) = slot.running.take() {
                    tracing::error!(world = %id, pid = r.child.pid, polls = r.failed_polls, "world server not answering /status; killing it");
                    r.child.signal(libc::SIGKILL);
                    self.metrics.health_kills.inc();
                    if let Err(e) = self.finalize(&id, r).await {
                        tracing::error!(world = %id, error = %e, "finalizing a killed world server failed");
                    }
                }
                continue;
            }
            if r.idle_since
                .is_some_and(|t| t.elapsed() >= self.options.idle_timeout)
            {
                if let Some(r) = slot.running.take() {
                    tracing::info!(world = %id, idle_s = self.options.idle_timeout.as_secs_f64(), "stopping idle world");
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
                if process::is_world_server(pid, &row.id, &self.options.server_bin) {
                    tracing::warn!(world = %row.id, pid, "stopping a world server left by an earlier fleet");
                    // SAFETY: kill only sends a signal to the pid checked just above.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                    let deadline = Instant::now() + self.options.stop_timeout;
                    while process::pid_exists(pid) && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    if process::is_world_server(pid, &row.id, &self.options.server_bin) {
                        // SAFETY: as above.
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                        while process::pid_exists(pid) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }
            let holder = Holder {
                node: self.node.id.clone(),
                epoch: row.epoch,
                created_unix_ms: row.created_unix_ms,
            };
            for seg in self.store.segments(&row.id).await? {
                if seg.ended == Ended::Running {
                    self.ship_tail(&row.id, seg.seq, &holder, &seg.recording_path)
                        .await?;
                    self.close_from_recording(&row.id, seg.seq, &seg.recording_path, seg.first_tick, false)
                        .await?;
                }
            }
            if row.owner_node.is_some() {
                self.store.release_world(&row.id, &holder).await?;
            } else {
                self.store.release_legacy(&row.id).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn entry(generation: u64, world: &str, token: &str) -> TokenEntry {
        TokenEntry {
            generation,
            hash: blake3::hash(token.as_bytes()),
            grant: Grant {
                content: WorldContent {
                    world_id: world.into(),
                    config: serde_json::json!({}),
                    record_dir: PathBuf::from("/x"),
                    resume_from: None,
                    ship_interval_ms: None,
                    ship_deadline_ms: None,
                    record_block_ticks: None,
                    epoch: 1,
                },
                holder: Holder {
                    node: "n".into(),
                    epoch: 1,
                    created_unix_ms: 1,
                },
                segment_seq: 1,
            },
        }
    }

    #[test]
    pub(crate) fn a_token_reads_its_own_world_only() {
        let entries = [entry(1, "a", "t-a"), entry(2, "b", "t-b")];
        assert!(
            matches!(check_token(&entries, "a", "t-a"), TokenCheck::Granted(c) if c.content.world_id == "a")
        );
        assert_eq!(check_token(&entries, "b", "t-a"), TokenCheck::Forbidden);
        assert_eq!(check_token(&entries, "a", "t-c"), TokenCheck::Unauthorized);
        assert_eq!(check_token(&entries, "a", ""), TokenCheck::Unauthorized);
        assert_eq!(check_token(&[], "a", "t-a"), TokenCheck::Unauthorized);
    }

    #[test]
    pub(crate) fn world_ids_name_folders_safely() {
        for ok in ["a", "world-1", "z_9", &"x".repeat(64)] {
            assert!(validate_world_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "../x", "a/b", "a b", "é", &"x".repeat(65), "."] {
            assert!(validate_world_id(bad).is_err(), "{bad}");
        }
    }
}
