//! Deliberate determinism bugs, one at a time, to prove the simulator finds them
//! (`migratory-replay sim --plant KIND`). Compiled only with the `planted-faults` feature,
//! which no shipped build enables; without it none of this exists.
//!
//! Each is a kind of bug that breaks replays in real engines, planted where it would
//! really occur in this kernel:
//!
//! | fault | where | what breaks |
//! |---|---|---|
//! | `shard-order` | boid rule, neighbour scan | the scan starts at a cell chosen by the shard count, so when `neighbours_max` cuts it short other neighbours are kept |
//! | `hash-tie` | input rules | a tick's inputs are applied in a per-world hash order of their clients (a `HashMap` drained), so simultaneous joins take other slots |
//! | `checkpoint-field` | checkpoint save | a player's `cast_ready_tick` is not saved: restored worlds forget cooldowns |
//! | `stale-scratch` | snapshot encoding | a snapshot's last byte's padding bits come from the shard's scratch (the previous snapshot that shard built), reaching the snapshots root |
//! | `stale-baseline` | snapshot delta | against a baseline older than four snapshots, one changed entity is left out of the delta but remembered as sent |
//! | `debug-wrap` | join placement | an add that wraps in release panics with overflow checks on (debug builds): the same results in release, a crash in debug |
//!
//! A world takes the fault planted on the thread that builds it (`plant`), so the
//! simulator's jobs and a test's threads each choose their own.

use std::cell::Cell;

/// One planted fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedFault {
    ShardOrder,
    HashTie,
    CheckpointField,
    StaleScratch,
    StaleBaseline,
    DebugWrap,
}

impl PlantedFault {
    pub const ALL: [PlantedFault; 6] = [
        PlantedFault::ShardOrder,
        PlantedFault::HashTie,
        PlantedFault::CheckpointField,
        PlantedFault::StaleScratch,
        PlantedFault::StaleBaseline,
        PlantedFault::DebugWrap,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PlantedFault::ShardOrder => "shard-order",
            PlantedFault::HashTie => "hash-tie",
            PlantedFault::CheckpointField => "checkpoint-field",
            PlantedFault::StaleScratch => "stale-scratch",
            PlantedFault::StaleBaseline => "stale-baseline",
            PlantedFault::DebugWrap => "debug-wrap",
        }
    }

    pub fn from_name(name: &str) -> Option<PlantedFault> {
        PlantedFault::ALL.into_iter().find(|f| f.name() == name)
    }
}

thread_local! {
    static PLANTED: Cell<Option<PlantedFault>> = const { Cell::new(None) };
}

/// Plants `fault` in every world this thread builds from now on (None: no fault).
pub fn plant(fault: Option<PlantedFault>) {
    PLANTED.with(|p| p.set(fault));
}

/// The fault a world built on this thread now takes.
pub(crate) fn planted() -> Option<PlantedFault> {
    PLANTED.with(Cell::get)
}
