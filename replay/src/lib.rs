//! Migratory's recordings: the `.mrec` format, replaying and verifying recordings, locating
//! divergences, and the tools behind the `migratory-replay` CLI. File I/O only: no async,
//! no network.

pub mod divergence;
pub mod format;
pub mod junit;
#[cfg(feature = "plot")]
pub mod plot;
pub mod sim;
pub mod tools;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use format::{
    Bookmark, Recording, RecordingError, RecordingMeta, RecordingWriter, TickRoots, WriterOptions,
};
