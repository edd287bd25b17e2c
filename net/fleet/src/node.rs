//! This fleet node in the shared store: its registration under `--node-id` with a random
//! incarnation, and the heartbeat that keeps its lease live. A node whose lease lapses
//! (killed, frozen, cut off from the store) loses its worlds to the next join on another
//! node; a node that finds its id taken by a newer incarnation stops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::error::{new_token, FleetError};
use crate::options::FleetOptions;
use crate::store::{Registration, Store};

/// Who this process is among the nodes.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) id: String,
    /// Random per process.
    pub(crate) incarnation: String,
    pub(crate) advertise_host: String,
    pub(crate) lease: Duration,
    /// Set by a drain: this node starts no world from then on.
    draining: Arc<std::sync::atomic::AtomicBool>,
    /// When the lease was last renewed (shared by the copies of this node).
    renewed: Arc<std::sync::Mutex<Instant>>,
}

impl Node {
    pub(crate) fn new(options: &FleetOptions) -> Result<Node, FleetError> {
        Ok(Node {
            id: options.node_id.clone(),
            incarnation: new_token()?[..32].to_string(),
            advertise_host: options.advertise_host.clone(),
            lease: options.lease,
            draining: Arc::default(),
            renewed: Arc::new(std::sync::Mutex::new(Instant::now())),
        })
    }

    /// Whether a whole lease has passed since this node last renewed it: other nodes may
    /// have taken its worlds over.
    pub(crate) fn lease_lapsed(&self) -> bool {
        self.renewed.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= self.lease
    }

    /// Whether a drain has begun: this node starts no world from then on.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn set_draining(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn mark_renewed(&self, at: Instant) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    fn lease_ms(&self) -> i64 {
        self.lease.as_millis() as i64
    }

    /// Registers this node. An earlier incarnation of the same id (a node restarted after a
    /// crash) may still hold a live lease: that is waited out, for at most one lease and a
    /// second. A lease renewed meanwhile belongs to a node that is alive: refused.
    pub(crate) async fn register(&self, store: &Store) -> Result<(), FleetError> {
        let deadline = Instant::now() + self.lease + Duration::from_secs(1);
        loop {
            let r = store
                .register_node(&self.id, &self.advertise_host, &self.incarnation, self.lease_ms())
                .await?;
            match r {
                Registration::Registered => {
                    self.mark_renewed(Instant::now());
                    return Ok(());
                }
                Registration::HeldElsewhere { lease_left_ms } => {
                    if Instant::now() >= deadline {
                        return Err(FleetError::NodeInUse {
                            node: self.id.clone(),
                            lease_left_ms,
                        });
                    }
                    tracing::warn!(node = %self.id, lease_left_ms, "an earlier incarnation of this node holds its lease; waiting for it to lapse");
                    let wait = Duration::from_millis(lease_left_ms.clamp(50, 500) as u64);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// How often the lease is renewed: three times a lease, so one slow store call does
    /// not lose it.
    fn heartbeat_every(&self) -> Duration {
        self.lease / 3
    }
}

/// Renews the lease until shutdown. If the id was taken by another incarnation (this
/// node's lease lapsed and a new process registered it), this node stops: its worlds are
/// someone else's now.
pub(crate) fn spawn_heartbeat(
    store: Store,
    node: Node,
    stop: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(node.heartbeat_every());
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.changed() => return,
            }
            // Taken before the call: the lease runs from when the store was asked.
            let asked = Instant::now();
            match store
                .heartbeat(&node.id, &node.incarnation, node.lease_ms())
                .await
            {
                Ok(true) => node.mark_renewed(asked),
                Ok(false) => {
                    tracing::error!(node = %node.id, "another process registered this node id; stopping");
                    stop.notify_one();
                    return;
                }
                Err(e) => tracing::warn!(node = %node.id, error = %e, "renewing the lease failed"),
            }
        }
    })
}
