//! The replay viewer's errors: why it could not start, and why a question got no answer.
//! The HTTP status is decided by variant: a question about something the recording does
//! not hold is the asker's (422), a recording that cannot be read is the server's (500).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::RecordingError;
use migratory_kernel::{CheckpointError, DecodeError};
use thiserror::Error;

/// Why `migratory-replay view` could not start.
#[derive(Debug, Error)]
pub enum ViewError {
    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: RecordingError,
    },
    #[error("starting the {what} thread: {source}")]
    Thread {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The recording `--compare` names cannot be opened: refused at start-up, not shown
    /// only in the page.
    #[error("--compare {path}: {source}")]
    Compare {
        path: PathBuf,
        #[source]
        source: RecordingError,
    },
    #[error("the recording reader stopped before it opened the recording")]
    ReaderStopped,
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why one question about a tick got no answer.
#[derive(Debug, Error)]
pub enum QuestionError {
    #[error("tick {tick} is outside the recording ({first}..={last})")]
    TickOutside { tick: u32, first: u32, last: u32 },
    #[error("entity {id} does not exist at tick {tick}")]
    NoEntity { id: u32, tick: u32 },
    #[error("client {client} is not in the world at tick {tick}")]
    ClientAbsent { client: u32, tick: u32 },
    #[error("client {client} has no snapshot at or before tick {tick} here")]
    NoSnapshot { client: u32, tick: u32 },
    #[error("the recording cannot be read: {0}")]
    Recording(#[from] RecordingError),
    /// A checkpoint the seek index made in this process would not restore (a bug, not
    /// bad input: the index holds only what this build saved).
    #[error("the in-memory checkpoint of tick {tick} does not restore: {source}")]
    Seek {
        tick: u32,
        #[source]
        source: CheckpointError,
    },
    #[error("client {client}'s snapshot of tick {tick} does not decode: {source}")]
    Snapshot {
        client: u32,
        tick: u32,
        #[source]
        source: DecodeError,
    },
}

impl QuestionError {
    /// Whether the question was at fault (the recording does not hold what it asks for),
    /// rather than the recording or the reader.
    pub fn is_bad_question(&self) -> bool {
        match self {
            QuestionError::TickOutside { .. }
            | QuestionError::NoEntity { .. }
            | QuestionError::ClientAbsent { .. }
            | QuestionError::NoSnapshot { .. } => true,
            QuestionError::Recording(_) | QuestionError::Snapshot { .. } | QuestionError::Seek { .. } => {
                false
            }
        }
    }
}
