//! `migratory-fleet`: one `migratory-server` process per world, started on the first
//! join, ready only when its world is loaded (or resumed and verified) and its port
//! bound, stopped when idle, and resumed from its recordings on the next join, so a stop,
//! a crash or a kill loses no state. The reference is `net/fleet/FLEET.md`.
//!
//! Modules, top-down (each uses only those below it): `cli` (the command line), `serve`
//! (`start`: store, node registration, reconcile, bind, reaper, heartbeat), `agones`
//! (world servers allocated from an Agones Fleet instead of forked), `api` (the
//! HTTP front), `auth` (roles and their tokens: admin, reader, player), `metrics` (the node's `/metrics` and
//! the world servers' discovery list), `node` (this node's lease), `limits` (what a world may ask for, and a tick cost model), `shipping`
//! (segments on this disk or in the shared store), `moving` (a live world moved to another
//! node, a node drained, and the watcher that starts worlds handed to this node), `start`
//! (a world's server started here), `fleet` (each world's life cycle),
//! `process` (spawning, output, signals, exits), `store` (the state of record, SQLite or
//! PostgreSQL), `options` (options), `error` (errors, the world id rule, random tokens).
//!
//! Invariants: the fleet never touches a world's state, only processes and bytes; the
//! store holds metadata (and, with PostgreSQL, every segment's bytes), the recordings are
//! the truth; a token lives exactly as long as its process; only a world's owner node at
//! its current epoch changes the world's row or appends to its segments. It does not link the game server: it runs it, and speaks to it only
//! through `migratory-wire`'s contracts.

pub mod agones;
mod api;
mod auth;
pub mod cli;
mod error;
mod fleet;
mod history;
mod limits;
mod metrics;
mod moving;
mod node;
mod options;
mod process;
mod serve;
mod shipping;
mod start;
pub mod store;
mod upgrade;
mod views;

pub use auth::{
    Role, ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_NAME, PLAYER_TOKEN_ENV, PLAYER_TOKEN_FILE_NAME, READER_TOKEN_ENV,
};
pub use error::{validate_world_id, FleetError, WORLD_ID_BYTES_MAX};
pub use fleet::JoinAnswer;
pub use limits::{TickCostModel, WorldLimits};
pub use options::{FleetOptions, TokenSources};
pub use serve::{start, FleetHandle};
