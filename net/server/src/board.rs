//! `TickBoard`: what the tick thread publishes for the rest of the server to read, apart
//! from the counters of `/metrics`: the current tick (PONG, `/status`, the watchdog), its
//! phase and since when (the watchdog), the runtime's heartbeat (stamped by a runtime task,
//! read by the watchdog), the joined clients (Agones player tracking) and the players'
//! names (`/viewer/names`). Each has one writer; readers only load or copy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct TickBoard {
    /// The last tick stepped.
    pub tick: AtomicU32,
    /// What the tick thread is doing now (`tick::Phase`), and since when (µs since start).
    pub phase: AtomicU8,
    pub phase_started_us: AtomicU64,
    /// Stamped by a runtime task every 10 ms while the watchdog runs (µs since start).
    pub runtime_heartbeat_us: AtomicU64,
    /// The joined clients' ids, detached ones included; changed only on joins and leaves.
    pub joined_clients: Mutex<BTreeSet<u32>>,
    /// The players' names by avatar id, which the live page draws over the avatars; the
    /// tick thread rewrites it in ticks with a join or leave.
    pub roster: Mutex<BTreeMap<u32, String>>,
}

impl TickBoard {
    /// Changes the joined set under its lock.
    pub fn with_joined(&self, f: impl FnOnce(&mut BTreeSet<u32>)) {
        f(&mut self.joined_clients.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// A copy of the joined set.
    pub fn joined(&self) -> BTreeSet<u32> {
        self.joined_clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A copy of the roster.
    pub fn roster(&self) -> BTreeMap<u32, String> {
        self.roster.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
