//! The client side of the protocol, for bots and tests: load generation (`bots`).
//! Nothing here is used by the server.

pub mod bots;
