//! The version of the simulation rules, in a module of its own so the modules that stamp
//! it (the state root, the checkpoint header, the inspector) import a leaf, not the
//! crate's façade.

/// Version of the simulation rules. Bump it whenever the same inputs would produce a
/// different state or different snapshots, so recordings can tell they need re-blessing.
pub const KERNEL_RULES_VERSION: u32 = 5;
