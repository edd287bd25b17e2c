//! A world's recorded history, for the people who investigate it: the bookmarks players
//! made in it (`GET /api/worlds/{id}/bookmarks`) and the replay viewer over its whole
//! segment chain (`POST /api/worlds/{id}/view`), served by this node.
//!
//! The history is the chain a resume continues: the current lineage's closed segments,
//! in order (a segment still running joins it once its server stops). The viewer replays
//! that chain into one recording (`tools::rerecord_chain`, bookmarks included) kept under
//! the world's folder, and serves it with `migratory_view::view` on the world servers'
//! bind address; it stays open (one per world) until the history grows or the node stops.

use std::net::SocketAddr;
use std::path::PathBuf;

use migratory_replay::format::WriterOptions;
use migratory_replay::{tools, Recording};

use crate::error::FleetError;
use crate::fleet::{Fleet, WorldFiles};
use crate::store::SegmentRow;
use crate::upgrade::resume_chain;

/// A world's replay viewer served by this node.
#[derive(Debug)]
pub(crate) struct OpenView {
    /// The history it shows: (lineage, last segment's seq, its last tick).
    key: (i64, i64, Option<i64>),
    pub url: String,
    handle: migratory_view::ViewHandle,
}

impl Drop for OpenView {
    fn drop(&mut self) {
        self.handle.task.abort();
    }
}

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

impl Fleet {
    /// The world's history: its current lineage's closed segments in order, on this disk.
    async fn history(&self, id: &str) -> Result<(i64, Vec<(SegmentRow, PathBuf)>), FleetError> {
        let row = self.world_row(id).await?;
        let segments = self.store.segments(id).await?;
        let chain = resume_chain(&segments, row.lineage).map_err(|reason| FleetError::Conflict {
            world: id.to_string(),
            reason: format!("its segments do not make one history: {reason}"),
        })?;
        for s in &chain {
            self.materialize(id, s.seq, &s.recording_path).await?;
        }
        let files = chain
            .into_iter()
            .map(|s| {
                let path = self.options.data_dir.join(&s.recording_path);
                (s, path)
            })
            .collect();
        Ok((row.lineage, files))
    }

    /// Every bookmark of the world's history, oldest first, with a link into its replay
    /// when a viewer is open.
    pub(crate) async fn bookmarks(&self, id: &str) -> Result<Vec<WorldBookmark>, FleetError> {
        let (_, files) = self.history(id).await?;
        let view = self.views.lock().await.get(id).map(|v| v.url.clone());
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
        let mut all = read.await.map_err(crate::api::task_failed)??;
        for b in &mut all {
            b.replay_url = view
                .as_ref()
                .map(|u| format!("{u}?tick={}&client={}", b.tick, b.client));
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
        let mut views = self.views.lock().await;
        if let Some(open) = views.get(id).filter(|v| v.key == key) {
            return Ok(
                serde_json::json!({ "url": open.url, "segments": segments, "last_tick": last.last_tick }),
            );
        }
        views.remove(id);
        let dir = WorldFiles::new(&self.options.data_dir, id).segments_dir();
        let out = dir.join(format!("history-{lineage}-{}.mrec", last.seq));
        let paths: Vec<PathBuf> = files.iter().map(|(_, p)| p.clone()).collect();
        let target = out.clone();
        tokio::task::spawn_blocking(move || {
            // A history file of this very chain from an earlier view is made again.
            let _ = std::fs::remove_file(&target);
            let paths: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
            tools::rerecord_chain(&paths, &target, 1, WriterOptions::default(), &mut |_, _| {})
        })
        .await
        .map_err(crate::api::task_failed)?
        .map_err(|e| FleetError::Conflict {
            world: id.to_string(),
            reason: format!("its history could not be replayed: {e}"),
        })?;
        let listen = SocketAddr::new(self.options.world_bind, 0);
        let handle = migratory_view::view(out, listen, None)
            .await
            .map_err(|e| FleetError::Io {
                context: "opening the replay viewer".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let url = format!(
            "http://{}:{}/",
            self.options.advertise_host,
            handle.local_addr.port()
        );
        tracing::info!(world = %id, url = %url, segments = ?segments, "replay viewer opened");
        views.insert(
            id.to_string(),
            OpenView {
                key,
                url: url.clone(),
                handle,
            },
        );
        Ok(serde_json::json!({ "url": url, "segments": segments, "last_tick": last.last_tick }))
    }
}
