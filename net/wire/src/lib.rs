//! What Migratory's processes say to one another, each contract defined once and used by
//! both sides: protocol 2 between clients and the world server ([`protocol`], specified in
//! `net/wire/PROTOCOL.md`), the terrain messages ([`terrain_wire`], `net/wire/TERRAIN_WIRE.md`),
//! what the fleet and a world server it runs agree on ([`fleet`]: the ready line,
//! `/status`, a world's content), and the names of the `/metrics` series ([`metric`]).
//! The HTTP client the programs speak these with is a crate of its own, `migratory-http`.
//!
//! Invariant: nothing here runs a program. The crate holds types, codecs and names; it
//! starts no thread and binds no port, and it depends on no program crate.

pub mod fleet;
pub mod metric;
pub mod protocol;
pub mod terrain_wire;
