//! Where a world's segments live. With SQLite (one node) a segment is the file its server
//! writes in this node's data folder. With PostgreSQL the store holds every segment: the
//! server ships its recording's bytes as it flushes them (`append`), the node ships what
//! is left once the server has exited (`ship_tail`), and any node writes the store's copy
//! into its own data folder before it reads a segment (`materialize`). Local files are
//! then a cache, and the store is what a takeover resumes from.
//!
//! Every append carries the epoch of the server's token and is refused once the world's
//! epoch has moved on, so a fenced server adds nothing to the segment it lost.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use migratory_wire::fleet::reclaim_path;

use crate::error::{io_err, FleetError};
use crate::fleet::{Fleet, Grant, TokenCheck};
use crate::store::{Append, Backend, Holder, CHUNK_BYTES_MAX};

impl Fleet {
    /// Whether segments are shipped to the store (PostgreSQL) or stay on this disk.
    pub(crate) fn ships(&self) -> bool {
        self.store.backend() == Backend::Postgres
    }

    /// The grant of a world server's token, for an append to `world_id`.
    pub(crate) fn grant_for(&self, world_id: &str, presented: &str) -> Result<Grant, TokenCheck> {
        match self.content_for(world_id, presented) {
            TokenCheck::Granted(g) => Ok(*g),
            other => Err(other),
        }
    }

    /// Stores bytes a world server shipped, under its token's epoch and segment.
    pub(crate) async fn append(
        &self,
        grant: &Grant,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Append, FleetError> {
        if !self.takes_shipments()? {
            return Ok(Append::Fenced { epoch_now: -1 });
        }
        let world = &grant.content.world_id;
        let t0 = std::time::Instant::now();
        let done = self
            .store
            .append_chunk(world, grant.segment_seq, &grant.holder, offset, bytes)
            .await?;
        self.metrics
            .store_append_seconds
            .observe(t0.elapsed().as_secs_f64());
        match done {
            Append::Stored => self.metrics.shipped_bytes.inc_by(bytes.len() as u64),
            Append::Fenced { .. } => self.metrics.fenced_appends.inc(),
            Append::Gap { .. } => 0,
        };
        Ok(done)
    }

    /// Stores a server's reclaim file with its segment: `None` stored, `Some(epoch now)`
    /// fenced (as for `append`).
    pub(crate) async fn store_reclaim(&self, grant: &Grant, bytes: &[u8]) -> Result<Option<i64>, FleetError> {
        if !self.takes_shipments()? {
            return Ok(Some(-1));
        }
        let world = &grant.content.world_id;
        let fenced = self
            .store
            .set_reclaim(world, grant.segment_seq, &grant.holder, bytes)
            .await?;
        if fenced.is_some() {
            self.metrics.fenced_appends.inc();
        }
        Ok(fenced)
    }

    /// Whether this node takes its servers' shipments: an error without a shared store;
    /// false (counted as fenced) when its lease lapsed, since this node cannot show that it
    /// still holds its worlds (the store unreachable, or this node frozen) and another node
    /// may have taken them over, so its servers stop rather than serve a world nobody keeps.
    fn takes_shipments(&self) -> Result<bool, FleetError> {
        if !self.ships() {
            return Err(FleetError::Invalid {
                reason: "this fleet keeps segments on its own disk (SQLite); nothing is shipped".into(),
            });
        }
        if self.node.lease_lapsed() {
            self.metrics.fenced_appends.inc();
            return Ok(false);
        }
        Ok(true)
    }

    /// Ships what the segment's local file holds past the store's copy, under `epoch`
    /// (nothing when the world has moved on, or without a shared store).
    pub(crate) async fn ship_tail(
        &self,
        id: &str,
        seq: i64,
        holder: &Holder,
        recording_path: &str,
    ) -> Result<(), FleetError> {
        if !self.ships() {
            return Ok(());
        }
        let path = self.options.data_dir.join(recording_path);
        // The reclaim file as the server left it (its last write may postdate its last
        // shipment), so the players can reclaim wherever the world resumes.
        match std::fs::read(reclaim_path(&path)) {
            Ok(bytes) => {
                if let Some(epoch_now) = self.store.set_reclaim(id, seq, holder, &bytes).await? {
                    tracing::info!(world = %id, seq, epoch_now, "the world moved on; its reclaim file is not stored");
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(world = %id, error = %e, "reading the reclaim file failed"),
        }
        loop {
            let stored = self.store.shipped_bytes(id, seq).await?;
            let bytes = match read_from(&path, stored) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
            };
            if bytes.is_empty() {
                return Ok(());
            }
            match self.store.append_chunk(id, seq, holder, stored, &bytes).await? {
                Append::Stored => {}
                Append::Fenced { epoch_now } => {
                    tracing::info!(world = %id, seq, epoch = holder.epoch, epoch_now, "the world moved on; its unshipped tail is dropped");
                    return Ok(());
                }
                Append::Gap { .. } => return Ok(()),
            }
        }
    }

    /// Writes the store's copy of a segment over its file in this node's data folder.
    pub(crate) async fn materialize(
        &self,
        id: &str,
        seq: i64,
        recording_path: &str,
    ) -> Result<(), FleetError> {
        if !self.ships() {
            return Ok(());
        }
        let bytes = self.store.segment_bytes(id, seq).await?;
        let reclaim = self.store.segment_reclaim(id, seq).await?;
        let path = self.options.data_dir.join(recording_path);
        tokio::task::spawn_blocking(move || {
            write_atomically(&path, &bytes)?;
            match reclaim {
                Some(r) => write_atomically(&reclaim_path(&path), &r),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| FleetError::Io {
            context: "writing a segment".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    }
}

/// The file's bytes from `offset`, at most one chunk.
fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut out = Vec::new();
    f.take(CHUNK_BYTES_MAX as u64).read_to_end(&mut out)?;
    Ok(out)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader sees the
/// old file or the new one.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FleetError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".from-store");
    std::fs::write(&tmp, bytes).map_err(io_err(format!("writing {}", Path::new(&tmp).display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("renaming into {}", path.display())))
}
