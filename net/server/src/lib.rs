//! `migratory-server`, Migratory's live world server: the WebSocket front, the
//! fixed-timestep tick thread, per-client backpressure, the session recording and resume,
//! `/metrics`, and the Agones SDK. It only records and feeds inputs: everything a client
//! is sent comes out of the kernel, so a replay of the recording reproduces every
//! snapshot byte for byte.
//!
//! Entry points: [`start`] (the binary and the tests), [`ServerConfig`], and [`cli::main`]
//! (the binary itself). The wire is `migratory-wire`'s; recordings are `migratory-record`'s; the
//! browser viewer's files are `migratory-view`'s (the replay viewer is `migratory-replay
//! view`, which `migratory-server view` runs).
//!
//! Modules, top-down (each uses only those below it in this list):
//! - `cli`: the `migratory-server` command line.
//! - `agones`: the Agones SDK calls, around a running server.
//! - `serve`: `start`; `routes`: the one port's routes and the WebSocket upgrade; `lifecycle`: how a running server stops, its
//!   stages in order.
//! - `accept`, `connection`: the accept loop and one task per WebSocket (`connection_ctx`:
//!   what every connection shares; `rate_limit`: its
//!   token bucket over every message a client sends; `wake_gate`: a future polled again
//!   only on its own wake-up, for the task's rarely ready branches).
//! - `tick`: the tick thread (`tick::clients`: its roster of joins, drops, reclaims and
//!   graces); `events`: what connections and the tick thread tell each other;
//!   `flusher`: the thread that writes a tick's snapshots into the clients' outlets;
//!   `outlet`: a connection's outgoing bytes, shared by the tick thread and its task;
//!   `send_queue`: a client's bounded queue of other messages;
//!   `recorder`: the recording's writer thread; `ship`: the
//!   recording's bytes to a fleet's shared store, and the fence it may raise; `watchdog`.
//! - `resume`, `reclaim` (reconnect tokens and the reclaim file), `metrics` (the counters
//!   of `/metrics`), `board` (`TickBoard`: what the tick thread publishes besides them: the
//!   tick, its phase, the joined set, the roster), `config`: leaves.

mod accept;
pub mod agones;
pub mod board;
pub mod cli;
pub mod config;
#[cfg(test)]
mod config_reference;
mod connection;
mod connection_ctx;
mod events;
mod flusher;
pub mod lifecycle;
pub mod metrics;
mod outlet;
mod rate_limit;
pub mod reclaim;
mod recorder;
pub mod resume;
mod routes;
mod send_queue;
mod serve;
pub mod ship;
mod tick;
mod wake_gate;
mod watchdog;

pub use config::ServerConfig;
pub use lifecycle::Stopper;
pub use recorder::RecordError;
pub use routes::WS_PATH;
pub use serve::{start, ServeOptions, ServerError, ServerHandle, ShutdownReport, StartPhase};
