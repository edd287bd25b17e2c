//! Integration tests of the live server with real WebSocket clients (one test binary).
//!
//! - `session`: live frames equal replayed frames byte for byte (1 and 3 shards), terrain,
//!   PING, full world, HTTP endpoints; and the env-gated corpus writer.
//! - `bad_input`: garbage, text frames, oversized frames, wrong version, unknown types,
//!   INPUT before HELLO, floods, handshake timeouts; a witness client is served throughout.
//! - `backpressure`: a client that stops reading is evicted without slowing anyone.
//! - `reclaim`: reconnect tokens: reclaims within the grace (live equals replay), expiry,
//!   replaced connections, refused tokens (guessed, used, another world's), resumed worlds.
//! - `process`: the binaries: config errors, SIGTERM, SIGKILL, connect churn, bots, soak.
//! - `abuse`: half-open sockets, storms and garbage at once, and the connection caps.
//! - `agones`: the Agones SDK call sequence against a recording stand-in sidecar.
//! - `viewer`: the viewer's JavaScript decoders against the Rust ones (generated vectors, node).
//! - `fleet`: `migratory-fleet` with real world server processes, on SQLite and on a
//!   throwaway PostgreSQL cluster: joins, races, tokens, failures, reaping, crash resume.

mod abuse;
mod agones;
mod backpressure;
mod bad_input;
mod common;
mod fleet;
mod messages;
mod process;
mod reclaim;
mod session;
mod viewer;
