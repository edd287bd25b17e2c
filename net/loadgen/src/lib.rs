//! `migratory-bots`, Migratory's load generator: WebSocket bots that play like players
//! (`behaviour`: roles, waypoints and casting from WELCOME's zones), decode every
//! snapshot with the kernel's decoder and count what they get (`bots`); and the stepped
//! soak (`soak`: ramp, hold, per-second series from the bots and the server's
//! `/metrics`, thresholds, `metrics.json`, `summary.txt`) with its chart (`chart`, over
//! the data model in `series`), and `figures`, which recomputes a finished soak's quoted
//! figures from its `metrics.json`; `mover` moves a fleet world between nodes during a
//! soak (`--move-every`); `segments` counts the TCP segments on a local server's
//! connections (from `ss`), which the soak charts per tick; `floor` moves the same
//! segments with no game in the way, to measure the system CPU no server goes under.
//!
//! Modules, top-down (each uses only those below it): `cli`, `soak`, `mover`, `chart`,
//! `series`, `segments`, `floor`, `bots`, `behaviour`. Invariant: it talks to a server only over its public
//! port (WebSocket, `/metrics`) and to a fleet over its public API, through
//! `migratory-wire`'s contracts.

pub mod behaviour;
pub mod bots;
pub mod chart;
pub mod cli;
pub mod figures;
pub mod floor;
pub mod mover;
pub mod segments;
pub mod series;
pub mod soak;
