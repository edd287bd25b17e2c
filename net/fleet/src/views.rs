//! The replay viewers this node serves over worlds' histories (opened by `history`), kept
//! in `Fleet`: a leaf, so the fleet's state does not import the code that fills it.

use std::path::PathBuf;

/// A world's replay viewer served by this node.
#[derive(Debug)]
pub(crate) struct OpenView {
    /// The history it shows: (lineage, last segment's seq, its last tick).
    pub key: (i64, i64, Option<i64>),
    pub url: String,
    /// The last tick it shows: a bookmark past it is not linked to it.
    pub last_tick: i64,
    pub file: PathBuf,
    pub handle: migratory_view::ViewHandle,
}

impl Drop for OpenView {
    fn drop(&mut self) {
        self.handle.task.abort();
        let _ = std::fs::remove_file(&self.file);
    }
}
