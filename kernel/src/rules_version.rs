//! The version of the simulation rules, in a module of its own so the modules that stamp
//! it (the state root, the checkpoint header, the inspector) import a leaf, not the
//! crate's façade.
//!
//! With the test-only `synthetic-rules` feature, a thread can switch the worlds it builds
//! to a synthetic next version of the rules (`follow_synthetic_rules`): version
//! `KERNEL_RULES_VERSION + 1`, whose one change is a heavier cohesion weight. It stands
//! for the next real rules change in the tests of the tools that carry recordings and
//! worlds across one (`trace`, `rules-diff`, `rerecord`, the fleet's upgrade), which
//! would otherwise need two builds.

/// Version of the simulation rules. Bump it whenever the same inputs would produce a
/// different state or different snapshots, so recordings can tell they need re-blessing.
/// Version 6 changed only the state root: a client stream's digest is xxh3-128 of its
/// gathered state (blake3 of per-view digests before), so rules 5 sessions replay under
/// it to the same snapshots.
pub const KERNEL_RULES_VERSION: u32 = 6;

/// What the synthetic next rules add to `flocking.cohesion_weight`.
#[cfg(feature = "synthetic-rules")]
pub(crate) const SYNTHETIC_COHESION_EXTRA: i64 = 64;

#[cfg(feature = "synthetic-rules")]
thread_local! {
    static SYNTHETIC: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// The process's choice, for threads that made none.
#[cfg(feature = "synthetic-rules")]
static SYNTHETIC_EVERYWHERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the worlds this thread builds from now on, and the checkpoints it restores,
/// follow the synthetic next rules (true) or this build's (false), whatever the process
/// chose.
#[cfg(feature = "synthetic-rules")]
pub fn follow_synthetic_rules(on: bool) {
    SYNTHETIC.with(|s| s.set(Some(on)));
}

/// `follow_synthetic_rules` for every thread of the process that made no choice of its
/// own: how a test program (a server, a fleet) becomes a build of the next rules.
#[cfg(feature = "synthetic-rules")]
pub fn follow_synthetic_rules_everywhere(on: bool) {
    SYNTHETIC_EVERYWHERE.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this thread follows the synthetic next rules.
#[cfg(feature = "synthetic-rules")]
pub(crate) fn synthetic() -> bool {
    SYNTHETIC
        .with(std::cell::Cell::get)
        .unwrap_or_else(|| SYNTHETIC_EVERYWHERE.load(std::sync::atomic::Ordering::Relaxed))
}

/// The rules a world built on this thread now follows: `KERNEL_RULES_VERSION`, unless
/// the synthetic next rules are on (`synthetic-rules` builds only).
pub fn rules_version() -> u32 {
    #[cfg(feature = "synthetic-rules")]
    if synthetic() {
        return KERNEL_RULES_VERSION + 1;
    }
    KERNEL_RULES_VERSION
}
