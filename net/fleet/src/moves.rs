//! `Moves`: moving a live world to another node, and draining a node of its worlds.
//!
//! A move, on the node that runs the world: pick the target (named, or the live node that
//! is not draining and owns the fewest worlds), stop the server with SIGUSR1 (it ends its
//! segment at a tick boundary with a final checkpoint, keeps its players' reconnect
//! tokens in the reclaim file, and closes its clients with 4001 REJOIN), ship what is left
//! of the segment and the reclaim file, close the segment, and hand the world to the
//! target in the store (`Store::hand_over`: the target owns it at the next epoch, with no
//! server yet). The target's watcher (`spawn_adopter`) sees the world and starts it as a
//! join would: from the store's copy of the segment, checked against its root, with the
//! reclaim file beside it. Clients that were closed with 4001 join again through the
//! fleet: a join on any node waits while the target starts, then answers its URL, and
//! each client reclaims its avatar with its token. The target's first tick follows the
//! source's last: no tick is lost, and the chain of segments verifies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::FleetError;
use crate::metrics::FleetMetrics;
use crate::node::Node;
use crate::segments::Segments;
use crate::slots::Running;
use crate::store::{NodeRow, Store};
use crate::worlds::Worlds;

/// How often a node looks for worlds handed to it.
pub(crate) const ADOPT_POLL: Duration = Duration::from_millis(50);

/// What a move did.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct MoveReport {
    pub world: String,
    pub from: String,
    pub to: String,
    /// The source's last tick (the target resumes from it).
    pub last_tick: Option<i64>,
    /// From the stop signal to the world being the target's in the store.
    pub handed_over_ms: u64,
}

/// Moves worlds off this node.
#[derive(Debug)]
pub(crate) struct Moves {
    worlds: Arc<Worlds>,
    segments: Arc<Segments>,
    store: Store,
    node: Node,
    metrics: Arc<FleetMetrics>,
}

impl Moves {
    pub(crate) fn new(
        worlds: Arc<Worlds>,
        segments: Arc<Segments>,
        store: Store,
        node: Node,
        metrics: Arc<FleetMetrics>,
    ) -> Moves {
        Moves {
            worlds,
            segments,
            store,
            node,
            metrics,
        }
    }

    /// Moves world `id`, which this node runs, to node `to` (or the fleet's choice).
    pub(crate) async fn move_world(&self, id: &str, to: Option<&str>) -> Result<MoveReport, FleetError> {
        let row = self.worlds.world_row(id).await?;
        self.worlds.refuse_if_elsewhere(&row, "move").await?;
        self.move_here(id, to).await
    }

    /// Moves world `id` if this node runs its server.
    async fn move_here(&self, id: &str, to: Option<&str>) -> Result<MoveReport, FleetError> {
        let target = self.pick_target(id, to).await?;
        let mut held = self.worlds.hold(id).await;
        let Some(running) = held.take_running() else {
            return Err(FleetError::Conflict {
                world: id.to_string(),
                reason: format!(
                    "has no server on node `{}`: a stopped world starts wherever it is joined",
                    self.node.id
                ),
            });
        };
        let t0 = Instant::now();
        let holder = running.holder.clone();
        let seq = running.segment_seq;
        if let Err(e) = self.stop_for_move(id, running, &target).await {
            // As after any stop: the world is given up, and the next join anywhere
            // resumes it from what the store holds.
            if let Err(release) = self.worlds.release(id, &holder).await {
                tracing::error!(world = %id, error = %release, "giving the world up after a failed move failed");
            }
            return Err(e);
        }
        // Best effort: the move is done whatever this read says.
        let last_tick = match seq {
            Some(seq) => self
                .segments
                .rows(id)
                .await
                .ok()
                .into_iter()
                .flatten()
                .find(|s| s.seq == seq)
                .and_then(|s| s.last_tick),
            None => None,
        };
        let handed_over_ms = t0.elapsed().as_millis() as u64;
        self.metrics.moves.inc();
        tracing::info!(world = %id, to = %target, last_tick, handed_over_ms, "world handed over");
        Ok(MoveReport {
            world: id.to_string(),
            from: self.node.id.clone(),
            to: target,
            last_tick,
            handed_over_ms,
        })
    }

    /// Stops the world's server for a move (SIGUSR1: its clients are told to rejoin), ships
    /// and closes its segment, and hands the world to `target`.
    async fn stop_for_move(&self, id: &str, running: Running, target: &str) -> Result<(), FleetError> {
        let holder = running.holder.clone();
        // Joins on other nodes wait from now on instead of answering a server that stops
        // (best effort: they would otherwise get a refused connection and join again).
        if let Err(e) = self.store.clear_server(id, &holder).await {
            tracing::warn!(world = %id, error = %e, "clearing the moving world's server failed");
        }
        self.worlds.stop_server(id, &running, libc::SIGUSR1).await?;
        if !self.store.hand_over(id, &holder, target).await? {
            return Err(FleetError::Conflict {
                world: id.to_string(),
                reason: format!(
                    "could not be handed to `{target}` (it stopped, started draining, or the world moved on)"
                ),
            });
        }
        Ok(())
    }

    /// The node a move goes to: `to` when it is live, not draining and not this one;
    /// otherwise the live, non-draining node with the fewest worlds.
    async fn pick_target(&self, id: &str, to: Option<&str>) -> Result<String, FleetError> {
        let nodes = self.store.nodes().await?;
        let fit = |n: &&NodeRow| n.live && !n.draining && n.id != self.node.id;
        let unavailable = |reason: String| FleetError::Unavailable {
            world: id.to_string(),
            reason,
            log_tail: Vec::new(),
        };
        match to {
            Some(to) => nodes
                .iter()
                .filter(fit)
                .find(|n| n.id == to)
                .map(|n| n.id.clone())
                .ok_or_else(|| {
                    unavailable(format!(
                        "node `{to}` cannot take it: not a live, non-draining node other than this one"
                    ))
                }),
            None => nodes
                .iter()
                .filter(fit)
                .min_by_key(|n| (n.worlds, n.id.clone()))
                .map(|n| n.id.clone())
                .ok_or_else(|| unavailable("no other live, non-draining node to move it to".into())),
        }
    }

    /// `POST /api/nodes/{node}/drain` on node `node` itself: marks this node draining in
    /// the store (no world is started or moved here from now on) and moves every world it
    /// runs to the fleet's choice of node.
    /// Each world's move, or its id and why it failed.
    pub(crate) async fn drain(
        &self,
        node: &str,
    ) -> Result<Vec<Result<MoveReport, (String, FleetError)>>, FleetError> {
        if node != self.node.id {
            return Err(FleetError::Conflict {
                world: String::new(),
                reason: format!(
                    "this is node `{}`: ask node `{node}` to drain itself",
                    self.node.id
                ),
            });
        }
        self.node.set_draining();
        self.store.set_draining(&self.node.id, true).await?;
        let mut out = Vec::new();
        for id in self.worlds.ids() {
            if self.worlds.has_server(&id).await {
                out.push(self.move_here(&id, None).await.map_err(|e| (id, e)));
            }
        }
        Ok(out)
    }

    /// Starts, on this node, every world a move handed to it: polls the store every
    /// `ADOPT_POLL` and joins each such world (which claims and starts it here).
    pub(crate) fn spawn_adopter(
        &self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let (worlds, store, node) = (self.worlds.clone(), self.store.clone(), self.node.id.clone());
        tokio::spawn(async move {
            // Worlds being started here by this task, so a slow start is not joined again
            // on every poll.
            let in_flight: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>> = Arc::default();
            let mut every = tokio::time::interval(ADOPT_POLL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let ids = match store.handed_to(&node).await {
                    Ok(ids) => ids,
                    Err(e) => {
                        tracing::debug!(error = %e, "looking for worlds handed to this node failed");
                        continue;
                    }
                };
                for id in ids {
                    // A world this node is busy with (starting it for a join, upgrading it)
                    // was not handed to it: that work decides whether it runs.
                    if worlds.is_busy(&id) {
                        continue;
                    }
                    if !in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.clone())
                    {
                        continue;
                    }
                    let (worlds, in_flight) = (worlds.clone(), in_flight.clone());
                    tokio::spawn(async move {
                        match worlds.join(&id).await {
                            Ok(a) => {
                                tracing::info!(world = %id, ws_url = %a.ws_url, ready_ms = a.ready_ms, "world adopted after a move")
                            }
                            Err(e) => {
                                tracing::warn!(world = %id, error = %e, "starting a world handed to this node failed")
                            }
                        }
                        in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    });
                }
            }
        })
    }
}
