//! Migratory's deterministic world kernel: a sans-I/O tick that turns (state, inputs) into
//! (next state, state root, per-client snapshots), byte-identical on any shard count.
//!
//! Entry points:
//! - [`World::new`] / [`World::with_terrain`] build a world from a [`WorldConfig`];
//!   [`World::step`] applies one tick's [`TickInputs`] and returns the [`TickOutput`]
//!   (state root, snapshots root, each due client's snapshot, what the inputs came to).
//! - [`save_checkpoint`] / [`restore_checkpoint`]: the whole state as versioned,
//!   checksummed bytes, and back onto any shard count.
//! - [`ClientDecoder`]: the client side of the snapshots (format: `kernel/SNAPSHOT_FORMAT.md`).
//! - [`TreeLayout`], [`World::chunk_hashes`], [`World::stream_summary`]: what a tool needs
//!   to localise a divergence to a leaf, then an entity.
//! - [`Script`]: seeded scripted players for tests, benchmarks and synthetic sessions.
//!
//! Everything else is internal. The modules depend on each other top-down in this order
//! (each uses only those above it): `rng`, `config`, `input`, `player`, `pool`, `grid`,
//! `terrain`, `zones`, `boids`, `hash`, `snapshot`, `output`, `world`, `checkpoint`,
//! `scripted`.

#![deny(clippy::float_arithmetic)]

mod boids;
mod checkpoint;
mod config;
mod grid;
mod hash;
mod input;
mod output;
#[cfg(feature = "planted-faults")]
pub mod planted;
mod player;
mod pool;
mod rng;
mod rules_version;
mod scripted;
mod snapshot;
mod terrain;
mod world;
mod zones;

pub use boids::Boid;
pub use checkpoint::{
    compact_checkpoint, restore_checkpoint, restore_checkpoint_any_rules, restore_checkpoint_with_terrain,
    save_checkpoint, save_checkpoint_unsealed, save_checkpoint_unsealed_into, CheckpointError,
    UnsealedCheckpoint, CHECKPOINT_VERSION, CHECKPOINT_VERSION_COMPACT, CHECKPOINT_VERSION_RAW,
};
pub use config::{
    ConfigError, FlockingConfig, PlayerConfig, WorldConfig, BOID_COUNT_MAX, CLIENT_SLOTS_MAX,
    HUNTING_FIELD_COUNT_MAX, SPEED_MAX_MM_PER_TICK, TERRAIN_GRID_CELLS_MAX, THINK_INTERVAL_TICKS_MAX,
    WORLD_SIZE_MAX_MM,
};
pub use hash::{hex, ChunkId, ChunkKind, ItemIds, TreeLayout, BOIDS_PER_CHUNK};
pub use input::{name_is_valid, Input, Rejections, TickInputs, NAME_BYTES_MAX, THROTTLE_MAX};
pub use output::{CastStats, ClientSnapshot, Joined, StreamSummary, TickOutput};
pub use player::{Player, PLAYER_RECORD_BYTES};
pub use pool::{set_spin_rounds, PinError, SHARD_COUNT_MAX};
#[cfg(feature = "synthetic-rules")]
pub use rules_version::{follow_synthetic_rules, follow_synthetic_rules_everywhere};
pub use rules_version::{rules_version, KERNEL_RULES_VERSION};
pub use scripted::{Script, ScriptConfig};
pub use snapshot::header_layout as snapshot_header_layout;
pub use snapshot::{
    decode_snapshot_header, snapshot_is_full, ClientDecoder, DecodeError, SnapshotHeader, ViewEntry,
    BASELINE_RING_LEN, NO_BASELINE, POS_QUANT_SHIFT, SNAPSHOT_FORMAT_VERSION, STREAM_DIGEST_BYTES,
    VEL_QUANT_SHIFT, VIEW_ENTITIES_MAX,
};
pub use terrain::{Terrain, TerrainError};
pub use world::{World, WorldError};
pub use zones::{Zone, Zones};

#[cfg(feature = "testkit")]
pub mod testkit;

/// Hooks the benchmarks time directly: the leaf hashes of one step.
#[cfg(feature = "bench-hooks")]
pub mod bench_hooks {
    pub use crate::hash::{anchor_leaf, player_chunk, PLAYERS_PER_CHUNK};
}
