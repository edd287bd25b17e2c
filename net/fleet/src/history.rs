//! `History`: a world's recorded history, for the people who investigate it: the bookmarks players
//! made in it (`GET /api/worlds/{id}/bookmarks`) and the replay viewer over its whole
//! segment chain (`POST /api/worlds/{id}/view`), served by this node.
//!
//! The history is the chain a resume continues: the current lineage's closed segments,
//! in order (a segment still running joins it once its server stops). The viewer replays
//! that chain into one recording (`tools::rerecord_chain`, bookmarks included) kept under
//! the world's folder, and serves it with `migratory_replay::viewer::view` on the world servers'
//! bind address; it stays open (one per world) until the history grows or the node stops.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use migratory_replay::format::WriterOptions;
use migratory_replay::{tools, Recording};

use crate::error::{task_failed, FleetError};
use crate::options::FleetOptions;
use crate::segments::Segments;
use crate::store::SegmentRow;
use crate::worlds::Worlds;

/// One bookmark of a world's history.
#[derive(Debug, serde::Serialize)]
pub(crate) struct WorldBookmark {
    pub segment: i64,
    pub tick: u32,
    pub client: u32,
    pub note: String,
    /// Opens the world's replay at the bookmark's tick, as its maker saw it (once a viewer
    /// is open: `POST /api/worlds/{id}/view`).
    pub replay_url: Option<String>,
}

/// A world's replay viewer served by this node.
#[derive(Debug)]
struct OpenView {
    /// The history it shows: (lineage, last segment's seq, its last tick).
    key: (i64, i64, Option<i64>),
    url: String,
    /// The last tick it shows: a bookmark past it is not linked to it.
    last_tick: i64,
    file: PathBuf,
    handle: migratory_replay::viewer::ViewHandle,
}

impl Drop for OpenView {
    fn drop(&mut self) {
        self.handle.task.abort();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The replay viewers this node serves over worlds' histories, and their bookmarks.
#[derive(Debug)]
pub(crate) struct History {
    worlds: Arc<Worlds>,
    segments: Arc<Segments>,
    /// One open viewer per world, opened by `POST /api/worlds/{id}/view`.
    views: tokio::sync::Mutex<BTreeMap<String, OpenView>>,
    /// Numbers each opening's file, so a viewer still open keeps reading the one before.
    openings: AtomicU64,
    bind: IpAddr,
    advertise_host: String,
}

impl History {
    pub(crate) fn new(worlds: Arc<Worlds>, segments: Arc<Segments>, options: &FleetOptions) -> History {
        History {
            worlds,
            segments,
            views: tokio::sync::Mutex::new(BTreeMap::new()),
            openings: AtomicU64::new(0),
            bind: options.history_view_bind,
            advertise_host: options.advertise_host.clone(),
        }
    }

    /// The world's history: its current lineage's closed segments in order, on this disk.
    async fn history(&self, id: &str) -> Result<(i64, Vec<(SegmentRow, PathBuf)>), FleetError> {
        let row = self.worlds.world_row(id).await?;
        let chain = self.segments.history(id, row.lineage).await?;
        // Under the world's lock: a start or a move of the world brings the same segments
        // to this disk through the same files.
        let _held = self.worlds.hold(id).await;
        for s in &chain {
            self.segments.materialize(id, s.seq, &s.recording_path).await?;
        }
        let files = chain
            .into_iter()
            .map(|s| {
                let path = self.segments.local_path(&s.recording_path);
                (s, path)
            })
            .collect();
        Ok((row.lineage, files))
    }

    /// Every bookmark of the world's history, oldest first, with a link into its replay
    /// when a viewer is open.
    pub(crate) async fn bookmarks(&self, id: &str) -> Result<Vec<WorldBookmark>, FleetError> {
        let (_, files) = self.history(id).await?;
        let view = self
            .views
            .lock()
            .await
            .get(id)
            .map(|v| (v.url.clone(), v.last_tick));
        let read = tokio::task::spawn_blocking(move || {
            let mut all = Vec::new();
            for (seg, path) in files {
                let unreadable = |e: migratory_replay::RecordingError| FleetError::Io {
                    context: format!("reading {}", path.display()),
                    source: std::io::Error::other(e.to_string()),
                };
                let rec = Recording::open_after_crash(&path).map_err(unreadable)?;
                for b in rec.bookmarks().map_err(unreadable)? {
                    all.push(WorldBookmark {
                        segment: seg.seq,
                        tick: b.tick,
                        client: b.client,
                        note: b.note,
                        replay_url: None,
                    });
                }
            }
            Ok::<_, FleetError>(all)
        });
        let mut all = read.await.map_err(task_failed)??;
        for b in &mut all {
            b.replay_url = view
                .as_ref()
                .filter(|(_, last)| i64::from(b.tick) <= *last)
                .map(|(u, _)| format!("{u}?tick={}&client={}", b.tick, b.client));
        }
        Ok(all)
    }

    /// Opens (or returns the open) replay viewer over the world's whole history.
    pub(crate) async fn open_view(&self, id: &str) -> Result<serde_json::Value, FleetError> {
        let (lineage, files) = self.history(id).await?;
        let Some((last, _)) = files.last() else {
            return Err(FleetError::Conflict {
                world: id.to_string(),
                reason: "has no recorded history yet: play it first".into(),
            });
        };
        let key = (lineage, last.seq, last.last_tick);
        let segments: Vec<i64> = files.iter().map(|(s, _)| s.seq).collect();
        // The lock is not held while the history is replayed (minutes for a long one):
        // other worlds' views and every bookmark list go on meanwhile.
        if let Some(open) = self.views.lock().await.get(id).filter(|v| v.key == key) {
            return Ok(
                serde_json::json!({ "url": open.url, "segments": segments, "last_tick": last.last_tick }),
            );
        }
        let dir = self.segments.files(id).segments_dir();
        // A file of its own per opening: a viewer still open reads the one before.
        let out = dir.join(format!(
            "history-{lineage}-{}-{}.mrec",
            last.seq,
            self.openings.fetch_add(1, Ordering::Relaxed)
        ));
        let paths: Vec<PathBuf> = files.iter().map(|(_, p)| p.clone()).collect();
        let target = out.clone();
        tokio::task::spawn_blocking(move || {
            let paths: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
            tools::rerecord_chain(&paths, &target, 1, WriterOptions::default(), &mut |_, _| {})
        })
        .await
        .map_err(task_failed)?
        .map_err(|e| FleetError::Conflict {
            world: id.to_string(),
            reason: format!("its history could not be replayed: {e}"),
        })?;
        let listen = SocketAddr::new(self.bind, 0);
        let handle = match migratory_replay::viewer::view(out.clone(), listen, None).await {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_file(&out);
                return Err(FleetError::Io {
                    context: "opening the replay viewer".into(),
                    source: std::io::Error::other(e.to_string()),
                });
            }
        };
        let url = format!("http://{}:{}/", self.advertise_host, handle.local_addr.port());
        tracing::info!(world = %id, url = %url, segments = ?segments, "replay viewer opened");
        let open = OpenView {
            key,
            url: url.clone(),
            last_tick: last.last_tick.unwrap_or(0),
            file: out,
            handle,
        };
        // The one opened last wins; the one it replaces closes and its file goes.
        self.views.lock().await.insert(id.to_string(), open);
        Ok(serde_json::json!({ "url": url, "segments": segments, "last_tick": last.last_tick }))
    }
}
