//! `Upgrades`: carrying a durable world across a kernel rules change, by the operator's
//! choice:
//!
//! - `replay`: the world's whole input history (its current lineage's segments, in order)
//!   replayed under this build's rules into one new segment (`tools::rerecord_chain`),
//!   which starts a new lineage; the world resumes from its end, with this build's roots.
//! - `fork`: a new lineage with no segments: the world starts afresh from its config.
//!
//! Either way the old segments stay, rows and bytes, in their lineage. The upgrade holds
//! the world (claimed at the next epoch, so nothing else starts or writes it) and stops
//! its server first if this node runs one; a world another node runs is refused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use migratory_replay::format::WriterOptions;
use migratory_replay::tools;

use crate::error::FleetError;
use crate::segments::Segments;
use crate::store::{Ended, Holder, SegmentEnd, Store};
use crate::worlds::Worlds;

/// How an upgrade carries the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum UpgradeMode {
    Replay,
    Fork,
}

/// What an upgrade did.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct UpgradeReport {
    pub world: String,
    pub mode: UpgradeMode,
    /// The lineage the world resumes from now, and the one it left.
    pub lineage: i64,
    pub previous_lineage: i64,
    /// Segments of the previous lineage replayed (replay), in order.
    pub segments_replayed: Vec<i64>,
    /// The new segment (replay).
    pub segment: Option<i64>,
    pub last_tick: Option<u32>,
    /// The rules the history was recorded under (its first segment) and this build's.
    pub old_rules_version: Option<u32>,
    pub rules_version: u32,
    /// The first tick whose state root the new rules changed (replay; None: unchanged).
    pub first_changed_root_tick: Option<u32>,
    pub ms: u64,
}

/// Upgrades worlds this node holds.
#[derive(Debug)]
pub(crate) struct Upgrades {
    worlds: Arc<Worlds>,
    segments: Arc<Segments>,
    /// The lineage and upgrade-segment statements.
    store: Store,
    /// Shards the replay steps on.
    shards: u32,
}

impl Upgrades {
    pub(crate) fn new(worlds: Arc<Worlds>, segments: Arc<Segments>, store: Store, shards: u32) -> Upgrades {
        Upgrades {
            worlds,
            segments,
            store,
            shards,
        }
    }

    /// Upgrades world `id` (see the module doc).
    pub(crate) async fn upgrade_world(
        &self,
        id: &str,
        mode: UpgradeMode,
    ) -> Result<UpgradeReport, FleetError> {
        let row = self.worlds.world_row(id).await?;
        self.worlds.refuse_if_elsewhere(&row, "upgrade").await?;
        let t0 = Instant::now();
        let mut held = self.worlds.hold(id).await;
        self.worlds.stop_held(&mut held).await?;
        let row = self.worlds.world_row(id).await?;
        let Some(holder) = self.worlds.claim(&row).await? else {
            return Err(FleetError::Conflict {
                world: id.to_string(),
                reason: format!(
                    "runs on node `{}`: stop it there (or upgrade through that node) first",
                    row.owner_node.as_deref().unwrap_or("?")
                ),
            });
        };
        let result = self.upgrade_held(id, mode, &holder, row.lineage).await;
        // Given up whatever happened: the next join starts it from what the store holds.
        if let Err(e) = self.worlds.release(id, &holder).await {
            tracing::error!(world = %id, error = %e, "releasing the world after its upgrade failed");
        }
        drop(held);
        let mut report = result?;
        report.ms = t0.elapsed().as_millis() as u64;
        tracing::info!(world = %id, mode = ?mode, lineage = report.lineage, segment = ?report.segment, last_tick = ?report.last_tick, ms = report.ms, "world upgraded");
        Ok(report)
    }

    async fn upgrade_held(
        &self,
        id: &str,
        mode: UpgradeMode,
        holder: &Holder,
        previous_lineage: i64,
    ) -> Result<UpgradeReport, FleetError> {
        let conflict = |reason: String| FleetError::Conflict {
            world: id.to_string(),
            reason,
        };
        // A segment still marked running has no server now: closed from its recording.
        self.segments.close_open(id, None).await?;
        let mut report = UpgradeReport {
            world: id.to_string(),
            mode,
            lineage: previous_lineage,
            previous_lineage,
            segments_replayed: Vec::new(),
            segment: None,
            last_tick: None,
            old_rules_version: None,
            rules_version: migratory_kernel::rules_version(),
            first_changed_root_tick: None,
            ms: 0,
        };
        // A fork needs nothing of the history: not even one that no longer makes a chain.
        if mode == UpgradeMode::Fork {
            let lineage = self.store.unused_lineage(id).await?;
            if !self.store.set_lineage(id, holder, lineage).await? {
                return Err(taken_over(id));
            }
            report.lineage = lineage;
            return Ok(report);
        }
        let history = self.segments.history(id, previous_lineage).await?;
        report.segments_replayed = history.iter().map(|s| s.seq).collect();
        if history.is_empty() {
            return Err(conflict(
                "has no recorded history to replay: start it, or fork it (mode \"fork\")".into(),
            ));
        }
        for s in &history {
            self.segments.materialize(id, s.seq, &s.recording_path).await?;
        }
        let seq = self.segments.next_seq(id).await?;
        let dir = self.segments.files(id).segments_dir();
        std::fs::create_dir_all(&dir).map_err(crate::error::io_err(format!("creating {}", dir.display())))?;
        let out = dir.join(format!("upgrade-{seq}.mrec"));
        let paths: Vec<PathBuf> = history
            .iter()
            .map(|s| self.segments.local_path(&s.recording_path))
            .collect();
        let shards = self.shards as usize;
        let target = out.clone();
        let r = tokio::task::spawn_blocking(move || {
            let paths: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
            tools::rerecord_chain(&paths, &target, shards, WriterOptions::default(), &mut |_, _| {})
        })
        .await
        .map_err(|e| FleetError::Io {
            context: "replaying the world's history".into(),
            source: std::io::Error::other(e.to_string()),
        })?
        .map_err(|e| {
            conflict(format!(
                "its history could not be replayed under this build's rules: {e}"
            ))
        })?;
        report.old_rules_version = Some(r.old_rules_version);
        report.rules_version = r.rules_version;
        report.first_changed_root_tick = r.first_changed_root_tick;
        report.last_tick = Some(r.last_tick);
        let lineage = self.store.unused_lineage(id).await?;
        if let Err(e) = self.store_upgraded(id, (seq, lineage), &out, &r, holder).await {
            // The world stays in its lineage; the uncommitted segment goes (best effort:
            // left behind, it sits in a lineage never made current, and never reused).
            if let Err(d) = self.store.discard_segment(id, seq).await {
                tracing::warn!(world = %id, seq, error = %d, "discarding an uncommitted upgrade segment failed");
            }
            return Err(e);
        }
        report.lineage = lineage;
        report.segment = Some(seq);
        Ok(report)
    }

    /// Records the upgrade's recording as the world's segment `seq` in `lineage` (its
    /// bytes in the store when segments are shipped), then, in one transaction, closes it
    /// and makes `lineage` the world's: a crash or a takeover before that leaves the world
    /// as it was.
    async fn store_upgraded(
        &self,
        id: &str,
        (seq, lineage): (i64, i64),
        out: &std::path::Path,
        r: &tools::RerecordReport,
        holder: &Holder,
    ) -> Result<(), FleetError> {
        let rel = self.segments.stored_path(out);
        if !self
            .store
            .open_upgrade_segment(id, seq, &rel, r.first_tick - 1, lineage, holder)
            .await?
        {
            return Err(taken_over(id));
        }
        if !self.segments.upload(id, seq, holder, out).await? {
            return Err(taken_over(id));
        }
        let end = SegmentEnd {
            last_tick: i64::from(r.last_tick),
            final_root: r.final_root.clone(),
            ended: Ended::Stopped,
        };
        if !self.store.commit_upgrade(id, seq, &end, holder).await? {
            return Err(taken_over(id));
        }
        Ok(())
    }
}

fn taken_over(id: &str) -> FleetError {
    FleetError::Conflict {
        world: id.to_string(),
        reason: "another node took the world over during its upgrade".into(),
    }
}
