//! Migratory's deterministic world kernel: a sans-I/O tick that turns (state, inputs) into
//! (next state, state root, per-client snapshot frames), byte-identical on any shard count.
//!
//! Entry points: [`World::new`], [`World::step`], [`checkpoint::save`] / [`checkpoint::restore`],
//! and [`snapshot::ClientDecoder`] for the client side of the frames.

#![deny(clippy::float_arithmetic)]

pub mod boids;
pub mod checkpoint;
pub mod config;
pub mod grid;
pub mod hash;
pub mod input;
pub mod pool;
pub mod rng;
pub mod scripted;
pub mod snapshot;
pub mod terrain;
pub mod world;
pub mod zones;

pub use boids::Boid;
pub use config::{ConfigError, WorldConfig};
pub use input::{Input, Rejections, TickInputs};
pub use terrain::Terrain;
pub use world::{ClientFrame, Player, StreamSummary, TickOutput, World, WorldError};

/// Version of the simulation rules. Bump it whenever the same inputs would produce a
/// different state or different frames, so recordings can tell they need re-blessing.
pub const KERNEL_RULES_VERSION: u32 = 4;
