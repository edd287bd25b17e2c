//! The client side, for bots, the soak and tests: bots that play (`behaviour`, `bots`),
//! the stepped soak with its series (`soak`) and chart (`chart`). Nothing here is used by
//! the server.

pub mod behaviour;
pub mod bots;
pub mod chart;
pub mod soak;
