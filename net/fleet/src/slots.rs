//! `Slots`: one lock per world this node has touched, holding its running server if it
//! has one. Whoever holds a world's lock (`HeldWorld`) is the only one starting, stopping
//! or finalizing its server; the reaper and the listings only peek (`try_hold`), so a
//! busy world is never waited for on their account.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::process::ChildProc;
use crate::store::Holder;

/// How long counting the running servers waits for a slot locked by someone else before
/// counting it as busy (starting or stopping, so running).
const SLOT_BUSY_WAIT: Duration = Duration::from_millis(50);

/// A world's running server.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) child: ChildProc,
    /// Its token's generation.
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
struct Slot {
    running: Option<Running>,
}

/// A world held under its lock: nothing else starts, stops or finalizes it meanwhile.
#[derive(Debug)]
pub(crate) struct HeldWorld {
    id: String,
    slot: tokio::sync::OwnedMutexGuard<Slot>,
}

impl HeldWorld {
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Its server, taken out of the world's slot: the holder of this is the one to stop it.
    pub(crate) fn take_running(&mut self) -> Option<Running> {
        self.slot.running.take()
    }

    pub(crate) fn running(&self) -> Option<&Running> {
        self.slot.running.as_ref()
    }

    pub(crate) fn running_mut(&mut self) -> Option<&mut Running> {
        self.slot.running.as_mut()
    }

    /// Puts a server just started into the world's slot.
    pub(crate) fn set_running(&mut self, running: Running) {
        self.slot.running = Some(running);
    }
}

/// The per-world locks.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    map: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl Slots {
    fn slot(&self, id: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.map.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(id.to_string()).or_default().clone()
    }

    /// Takes the world's lock (waiting for whoever holds it).
    pub(crate) async fn hold(&self, id: &str) -> HeldWorld {
        HeldWorld {
            id: id.to_string(),
            slot: self.slot(id).lock_owned().await,
        }
    }

    /// Whether someone holds the world's lock right now (starting, stopping, moving it).
    pub(crate) fn is_busy(&self, id: &str) -> bool {
        self.slot(id).try_lock().is_err()
    }

    /// The worlds this node keeps a slot for (every world it has touched).
    pub(crate) fn ids(&self) -> Vec<String> {
        let slots = self.map.lock().unwrap_or_else(|e| e.into_inner());
        slots.keys().cloned().collect()
    }

    /// The world's lock if nobody holds it now.
    pub(crate) fn try_hold(&self, id: &str) -> Option<HeldWorld> {
        Some(HeldWorld {
            id: id.to_string(),
            slot: self.slot(id).try_lock_owned().ok()?,
        })
    }

    /// World servers running now, besides the one of `own` (whose lock the caller holds). A
    /// slot busy starting or stopping counts as running; a slot locked only for a moment
    /// (the exit watcher of a server just stopped looks at it) is waited for up to
    /// `SLOT_BUSY_WAIT` first, so a join right after a stop is not refused for it. Two first
    /// joins of different worlds racing past the limit can start one world more than it;
    /// the next join sees them.
    pub(crate) async fn running_count(&self, own: Option<&str>) -> usize {
        let slots: Vec<Arc<tokio::sync::Mutex<Slot>>> = {
            let s = self.map.lock().unwrap_or_else(|e| e.into_inner());
            s.iter()
                .filter(|(id, _)| own.is_none_or(|own| own != id.as_str()))
                .map(|(_, slot)| slot.clone())
                .collect()
        };
        let counted = slots.iter().map(|slot| async move {
            match tokio::time::timeout(SLOT_BUSY_WAIT, slot.lock()).await {
                Ok(s) => usize::from(s.running.as_ref().is_some_and(|r| r.child.exit_info().is_none())),
                Err(_) => 1,
            }
        });
        futures_util::future::join_all(counted).await.into_iter().sum()
    }

    /// World slots kept in memory.
    pub(crate) fn slot_count(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
