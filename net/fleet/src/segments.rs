//! `Segments`: where a world's recording segments live, and the rows that say how each
//! ended. With SQLite (one node) a segment is the file its server writes in this node's
//! data folder. With PostgreSQL the store holds every segment: the server ships its
//! recording's bytes as it flushes them (`append`), the node ships what is left once the
//! server has exited (`ship_tail`), and any node writes the store's copy into its own data
//! folder before it reads a segment (`materialize`). Local files are then a cache, and the
//! store is what a takeover resumes from.
//!
//! Every append carries the epoch of the server's token and is refused once the world's
//! epoch has moved on, so a fenced server adds nothing to the segment it lost.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use migratory_kernel::hex;
use migratory_wire::fleet::{read_shipment, reclaim_path, SHIPMENT_BYTES_MAX};

use crate::error::{io_err, FleetError};
use crate::metrics::FleetMetrics;
use crate::node::Node;
use crate::options::FleetOptions;
use crate::process::ExitInfo;
use crate::store::{resume_chain, Append, Backend, Ended, Holder, SegmentEnd, SegmentRow, Store};
use crate::tokens::Grant;

/// Ticks per recorded block when segments are shipped: a block is flushed (and so can be
/// shipped) once complete, so a machine that dies loses at most one block and one
/// shipping interval: 0.5 s + 0.25 s at 60 Hz by default, against 1 s + 0.25 s with the
/// server's default 60-tick blocks.
pub(crate) const SHIPPED_BLOCK_TICKS: u32 = 30;

/// Where a world's files live under the data folder: `worlds/{id}/segments/*.mrec` and
/// `worlds/{id}/server.log`. The store holds paths relative to the data folder, so an
/// object-store backend can later map the same names to keys (fetch a segment before a
/// resume, upload one after it closes) without a change to the store or the servers.
#[derive(Clone, Debug)]
pub(crate) struct WorldFiles {
    pub(crate) dir: PathBuf,
}

impl WorldFiles {
    pub(crate) fn segments_dir(&self) -> PathBuf {
        self.dir.join("segments")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

/// How a world server ships its recording (all None: it does not, its segment stays on
/// this disk).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShipPlan {
    pub(crate) interval_ms: Option<u64>,
    pub(crate) deadline_ms: Option<u64>,
    pub(crate) block_ticks: Option<u32>,
}

/// The segments of every world, on this disk and in the store.
#[derive(Debug)]
pub(crate) struct Segments {
    store: Store,
    data_dir: PathBuf,
    /// Whose lease decides whether shipments are taken.
    node: Node,
    metrics: Arc<FleetMetrics>,
    ship_interval: Duration,
    lease: Duration,
}

impl Segments {
    pub(crate) fn new(
        store: Store,
        options: &FleetOptions,
        node: Node,
        metrics: Arc<FleetMetrics>,
    ) -> Segments {
        Segments {
            store,
            data_dir: options.data_dir.clone(),
            node,
            metrics,
            ship_interval: options.ship_interval,
            lease: options.lease,
        }
    }

    pub(crate) fn files(&self, id: &str) -> WorldFiles {
        WorldFiles {
            dir: self.data_dir.join("worlds").join(id),
        }
    }

    /// A recording path as the store keeps it (relative to the data folder) on this disk.
    pub(crate) fn local_path(&self, recording_path: &str) -> PathBuf {
        self.data_dir.join(recording_path)
    }

    /// A path on this disk as the store keeps it.
    pub(crate) fn stored_path(&self, path: &Path) -> String {
        path.strip_prefix(&self.data_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Whether segments are shipped to the store (PostgreSQL) or stay on this disk.
    pub(crate) fn ships(&self) -> bool {
        self.store.backend() == Backend::Postgres
    }

    /// How this node's world servers ship their recordings.
    pub(crate) fn ship_plan(&self) -> ShipPlan {
        if !self.ships() {
            return ShipPlan::default();
        }
        ShipPlan {
            interval_ms: Some(self.ship_interval.as_millis() as u64),
            // Half a lease: a node's lease lapses (and a takeover can come) two thirds of a
            // lease after its last renewal at the earliest, so a server cut off from its
            // node stops before another one starts.
            deadline_ms: Some((self.lease.as_millis() as u64 / 2).max(1000)),
            block_ticks: Some(SHIPPED_BLOCK_TICKS),
        }
    }

    /// The world's segment rows, oldest first.
    pub(crate) async fn rows(&self, id: &str) -> Result<Vec<SegmentRow>, FleetError> {
        Ok(self.store.segments(id).await?)
    }

    /// How many bytes of the segment the store holds (a takeover would find these).
    pub(crate) async fn shipped_bytes(&self, id: &str, seq: i64) -> Result<u64, FleetError> {
        Ok(self.store.shipped_bytes(id, seq).await?)
    }

    /// The number the world's next segment gets.
    pub(crate) async fn next_seq(&self, id: &str) -> Result<i64, FleetError> {
        Ok(self.store.next_segment_seq(id).await?)
    }

    /// Opens segment `seq` for `holder`'s server, whose recording is `recording` on this
    /// disk; false when the world is no longer `holder`'s.
    pub(crate) async fn open(
        &self,
        id: &str,
        (seq, resumed_from_seq): (i64, Option<i64>),
        recording: &Path,
        first_tick: u32,
        holder: &Holder,
    ) -> Result<bool, FleetError> {
        let rel = self.stored_path(recording);
        Ok(self
            .store
            .open_segment(id, seq, &rel, first_tick, resumed_from_seq, holder)
            .await?)
    }

    /// The world's history in `lineage`: the segments a resume of it stands on, oldest
    /// first (`resume_chain`).
    pub(crate) async fn history(&self, id: &str, lineage: i64) -> Result<Vec<SegmentRow>, FleetError> {
        resume_chain(&self.store.segments(id).await?, lineage).map_err(|e| FleetError::Conflict {
            world: id.to_string(),
            reason: format!("its segments do not make one history: {e}"),
        })
    }

    /// The segment a start of the world resumes from, brought to this disk: the newest of
    /// its current lineage with a durable tick. One whose recording could not be read (its
    /// server died before anything of it was shipped) has no root to resume from; a fork's
    /// new lineage has none: a fresh start.
    pub(crate) async fn resume_point(
        &self,
        id: &str,
        lineage: i64,
    ) -> Result<Option<SegmentRow>, FleetError> {
        let segments = self.store.segments(id).await?;
        let resume = segments.into_iter().rev().find(|s| {
            s.lineage == lineage
                && s.last_tick.is_some()
                && s.final_root.as_deref().is_some_and(|r| !r.is_empty())
        });
        if let Some(seg) = &resume {
            // With a shared store the segment may have been written on another machine.
            self.materialize(id, seg.seq, &seg.recording_path).await?;
        }
        Ok(resume)
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

    /// Ships what the segment's local file holds past the store's copy, under `holder`
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
        let path = self.local_path(recording_path);
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
            let bytes = match read_shipment(&path, stored) {
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

    /// Stores a whole recording written on this node (an upgrade's) as segment `seq`, in
    /// chunks, under `holder`: false when the world moved on meanwhile. Nothing to do
    /// without a shared store.
    pub(crate) async fn upload(
        &self,
        id: &str,
        seq: i64,
        holder: &Holder,
        path: &Path,
    ) -> Result<bool, FleetError> {
        if !self.ships() {
            return Ok(true);
        }
        let bytes = tokio::fs::read(path)
            .await
            .map_err(io_err(format!("reading {}", path.display())))?;
        for (k, chunk) in bytes.chunks(SHIPMENT_BYTES_MAX).enumerate() {
            let offset = (k * SHIPMENT_BYTES_MAX) as u64;
            if self.store.append_chunk(id, seq, holder, offset, chunk).await? != Append::Stored {
                return Ok(false);
            }
        }
        Ok(true)
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
        let path = self.local_path(recording_path);
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

    /// Closes every segment of the world still marked running: none has a server now (this
    /// node holds the world at a new epoch, or it is a restarted node's, and a node it was
    /// taken over from is fenced). `ship_as`: ship each one's local tail first under this
    /// holder (the node that ran its server, restarted).
    pub(crate) async fn close_open(&self, id: &str, ship_as: Option<&Holder>) -> Result<(), FleetError> {
        for seg in self.store.segments(id).await? {
            if seg.ended != Ended::Running {
                continue;
            }
            if let Some(holder) = ship_as {
                self.ship_tail(id, seg.seq, holder, &seg.recording_path).await?;
            }
            self.close_from_recording(id, seg.seq, &seg.recording_path, seg.first_tick, false)
                .await?;
        }
        Ok(())
    }

    /// Once segment `seq`'s server has exited (`exit`): ships what it left unshipped and
    /// closes the segment, unless it was closed already (by a node that took the world
    /// over).
    pub(crate) async fn close_after_exit(
        &self,
        id: &str,
        seq: i64,
        holder: &Holder,
        exit: ExitInfo,
    ) -> Result<(), FleetError> {
        let failed = !exit.success();
        let segments = self.store.segments(id).await?;
        let Some(seg) = segments
            .iter()
            .find(|s| s.seq == seq && s.ended == Ended::Running)
        else {
            return Ok(());
        };
        // What the server wrote but had not shipped (its last interval, its end record)
        // goes to the store now, unless the world has moved on.
        self.ship_tail(id, seq, holder, &seg.recording_path).await?;
        // Ended cleanly on disk, but the process failed after: still a crash.
        if let Some(end) = self
            .close_from_recording(id, seq, &seg.recording_path, seg.first_tick, failed)
            .await?
        {
            tracing::info!(world = %id, seq, last_tick = end.last_tick, ended = ?end.ended, exit = %exit, "segment closed");
        }
        Ok(())
    }

    /// Closes a running segment with what its recording says (its server has exited;
    /// `failed`: the process failed, so even a clean end counts as a crash). With a shared
    /// store, what the store holds is the recording. None when it was closed already.
    async fn close_from_recording(
        &self,
        id: &str,
        seq: i64,
        recording_path: &str,
        first_tick: i64,
        failed: bool,
    ) -> Result<Option<SegmentEnd>, FleetError> {
        self.materialize(id, seq, recording_path).await?;
        let path = self.local_path(recording_path);
        let mut end = tokio::task::spawn_blocking(move || segment_end(&path, first_tick))
            .await
            .map_err(|e| FleetError::Io {
                context: "reading a segment".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        if failed && end.ended == Ended::Stopped {
            end.ended = Ended::Crashed;
        }
        Ok(self.store.close_segment(id, seq, &end).await?.then_some(end))
    }
}

/// Reads how a segment's recording ended (blocking: it reads the file).
fn segment_end(path: &Path, first_tick: i64) -> SegmentEnd {
    let crashed = |last_tick, final_root| SegmentEnd {
        last_tick,
        final_root,
        ended: Ended::Crashed,
    };
    let Ok(rec) = migratory_record::Recording::open_after_crash(path) else {
        return crashed(first_tick, String::new());
    };
    if let Some(end) = rec.end {
        return SegmentEnd {
            last_tick: i64::from(end.final_tick),
            final_root: hex(&end.final_root),
            ended: Ended::Stopped,
        };
    }
    let root = rec.last_recorded_root().ok().map(|r| hex(&r));
    crashed(i64::from(rec.last_tick()), root.unwrap_or_default())
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
