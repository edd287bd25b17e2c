//! Migratory's live world server: the WebSocket protocol, the fixed-timestep tick thread,
//! per-client backpressure, session recording, metrics, and a bot load generator.
//!
//! This is the only crate with tokio. It only records and feeds inputs: everything a
//! client is sent comes out of the kernel, and every session is recorded, so a replay of
//! the recording reproduces every snapshot byte for byte.
//!
//! Entry points: [`server::start`] (used by the `migratory-server` binary and by the
//! integration tests), [`config::ServerConfig`], and [`client::bots::run`] for load
//! generation. The wire protocol is specified in `net/PROTOCOL.md`, the terrain messages
//! in `net/TERRAIN_WIRE.md`.
//!
//! Modules, top-down (each uses only those above it): `terrain_wire`, `config`,
//! `protocol`, then the two sides, which never use each other: `server` (HTTP and
//! WebSocket front, `connection` tasks, the `tick` thread, `metrics`, `watchdog`) and
//! `client` (bots, and the client-side decoding the tests share). `fleet` runs one server
//! process per world (`migratory-fleet`); it uses neither side's code, only the processes.

pub mod client;
pub mod config;
pub mod fleet;
pub mod protocol;
pub mod server;
pub mod terrain_wire;

pub use config::ServerConfig;
pub use server::{start, ServeOptions, ServerError, ServerHandle, ShutdownReport};
