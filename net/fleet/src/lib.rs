//! `migratory-fleet`: one `migratory-server` process per world, started on the first
//! join, ready only when its world is loaded (or resumed and verified) and its port
//! bound, stopped when idle, and resumed from its recordings on the next join, so a stop,
//! a crash or a kill loses no state. The reference is `net/fleet/FLEET.md`.
//!
//! Modules, top-down (each calls only those below it; `FLEET.md` documents the API):
//! - `cli` (the command line) and `serve` (`start`: builds the components, reconciles,
//!   binds, runs the reaper, the adopter and the heartbeat);
//! - `api` (the public HTTP front: maps each route onto one component's method) and
//!   `internal_api` (the routes world servers call with their tokens), both answering
//!   errors through `answers`, with roles and their tokens checked by `auth`;
//! - the components, each owning its state behind private fields: `history` (`History`:
//!   a world's bookmarks and replay viewer), `upgrades` (`Upgrades`: a world carried
//!   across a rules change), `moves` (`Moves`: a world moved to another node, a drain, and
//!   the adopter of worlds handed here), `worlds` (`Worlds`: each world's life cycle under
//!   its lock: create, delete, join, stop, finalize, the reaper, reconcile), `slots`
//!   (`Slots`: the per-world locks and each world's running server), `launcher`
//!   (`Launcher`: a world server forked or allocated from Agones, started and stopped),
//!   `tokens` (`Tokens`: the live world-server tokens), `segments` (`Segments`: segment
//!   rows, shipping, bringing a segment to this disk, the resume chain);
//! - below them: `agones` (allocation), `process` (spawning, output, signals, exits),
//!   `node` (this node's lease), `limits` (what a world may ask for, and a tick cost
//!   model), `metrics` (the node's `/metrics`), `options`, `store` (the state of record,
//!   SQLite or PostgreSQL), `error` (errors, the world id rule, random tokens).
//!
//! Invariants: the fleet never touches a world's state, only processes and bytes; the
//! store holds metadata (and, with PostgreSQL, every segment's bytes), the recordings are
//! the truth; a token lives exactly as long as its process; only a world's owner node at
//! its current epoch changes the world's row or appends to its segments. It does not link the game server: it runs it, and speaks to it only
//! through `migratory-wire`'s contracts.

pub mod agones;
mod answers;
mod api;
mod auth;
pub mod cli;
mod error;
mod history;
mod internal_api;
mod launcher;
mod limits;
mod metrics;
mod moves;
mod node;
mod options;
mod process;
mod segments;
mod serve;
mod slots;
pub mod store;
mod tokens;
mod upgrades;
mod worlds;

pub use auth::{
    Role, ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_NAME, PLAYER_TOKEN_ENV, PLAYER_TOKEN_FILE_NAME, READER_TOKEN_ENV,
};
pub use error::{validate_world_id, FleetError, WORLD_ID_BYTES_MAX};
pub use limits::{TickCostModel, WorldLimits};
pub use options::{FleetOptions, TokenSources};
pub use serve::{start, FleetHandle};
pub use worlds::JoinAnswer;
