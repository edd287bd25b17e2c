//! What the `migratory-replay` subcommands do, as library functions returning reports
//! (printed as text or JSON by the binary, asserted on by tests).

use std::path::{Path, PathBuf};
use std::time::Instant;

use migratory_kernel::hex;
use migratory_kernel::{Script, ScriptConfig};
use migratory_kernel::{TickInputs, World, WorldConfig};
use serde::Serialize;
use thiserror::Error;

mod chain;
mod check;
mod inspect;
mod make;
mod probe;
mod rules;
mod summary;
mod verify;
mod verify_spans;

pub use chain::*;
pub use check::*;
pub use inspect::*;
pub use make::*;
pub use probe::*;
pub use rules::*;
pub use summary::*;
pub use verify::*;
pub use verify_spans::*;

use crate::divergence::{self, ChunkDiff, RootKind, Side};
use crate::format::{Chain, RecordKind, Recording, RecordingError, RecordingWriter, TornTail, WriterOptions};

/// Why a tool could not do its job (a divergence is a finding, not an error).
#[derive(Debug, Error)]
pub enum ToolError {
    #[error("{path}: {source}")]
    Recording {
        path: String,
        #[source]
        source: RecordingError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn rec_err(path: &Path) -> impl FnOnce(RecordingError) -> ToolError + '_ {
    move |source| ToolError::Recording {
        path: path.display().to_string(),
        source,
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ToolError {
    let context = context.into();
    move |source| ToolError::Io { context, source }
}

/// Opens a recording, naming the file in any error.
pub fn open(path: &Path) -> Result<Recording, ToolError> {
    Recording::open(path).map_err(rec_err(path))
}

/// Progress callback: (ticks done, ticks total).
pub type Progress<'a> = &'a mut dyn FnMut(u32, u32);
