//! Migratory's recordings: replaying and verifying recordings, locating divergences, the
//! simulator, and the tools behind the `migratory-replay` CLI. The tools do file I/O only:
//! no async, no network. `viewer` (feature `viewer`) is the exception: the browser viewer
//! over a recording, an HTTP server on a tokio runtime its caller provides.

pub mod divergence;
/// The recording format, a crate of its own (`migratory-record`) so that what only reads and
/// writes recordings links nothing of the tools.
pub use migratory_record as format;
pub mod junit;
#[cfg(feature = "plot")]
pub mod plot;
pub mod sim;
pub mod tools;
#[cfg(feature = "viewer")]
pub mod viewer;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use format::{
    Bookmark, Recording, RecordingError, RecordingMeta, RecordingWriter, TickRoots, WriterOptions,
};
