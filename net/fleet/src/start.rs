//! Starting a world's server on this node: bring its newest segment here, spawn
//! `migratory-server` with a token on stdin, wait for its ready line, read its `/status`,
//! open its segment and record it (with this node's advertised host) in the store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use migratory_wire::fleet::{parse_ready_line, WorldContent, STATUS_PATH};

use crate::error::{io_err, new_token, FleetError};
use crate::fleet::{exit_of, Fleet, Grant, Running, TokenEntry, WorldFiles};
use crate::process::{self, ChildProc, SpawnSpec};
use crate::store::{Ended, Holder, WorldRow};

/// Ticks per recorded block when segments are shipped: a block is flushed (and so can be
/// shipped) once complete, so a machine that dies loses at most one block and one
/// shipping interval: 0.5 s + 0.25 s at 60 Hz by default, against 1 s + 0.25 s with the
/// server's default 60-tick blocks.
pub(crate) const SHIPPED_BLOCK_TICKS: u32 = 30;

impl Fleet {
    /// Starts the world's server for `holder` (this node has just claimed it): resume
    /// from its newest segment, if any.
    pub(crate) async fn start_server(
        &self,
        row: &WorldRow,
        holder: Holder,
    ) -> Result<(Running, u32, Option<i64>), FleetError> {
        let id = row.id.as_str();
        let files = WorldFiles::new(&self.options.data_dir, id);
        std::fs::create_dir_all(files.segments_dir())
            .map_err(io_err(format!("creating {}", files.segments_dir().display())))?;
        // A segment still marked running has no server (this node holds the world at a new
        // epoch, and none of ours runs; a node we took over from is fenced): close it from
        // its recording first, so the resume starts from its end.
        for seg in self.store.segments(id).await? {
            if seg.ended == Ended::Running {
                self.close_from_recording(id, seg.seq, &seg.recording_path, seg.first_tick, false)
                    .await?;
            }
        }
        let segments = self.store.segments(id).await?;
        // The newest segment of the world's current lineage with a durable tick: one whose
        // recording could not be read (its server died before anything of it was shipped)
        // has no root to resume from. (A fork's new lineage has none: a fresh start.)
        let resume = segments.iter().rev().find(|s| {
            s.lineage == row.lineage
                && s.last_tick.is_some()
                && s.final_root.as_deref().is_some_and(|r| !r.is_empty())
        });
        if let Some(seg) = resume {
            self.metrics.resumes.inc();
            // With a shared store the segment may have been written on another machine.
            self.materialize(id, seg.seq, &seg.recording_path).await?;
        }
        let resume_from = resume.map(|s| self.options.data_dir.join(&s.recording_path));
        let resumed_from_seq = resume.map(|s| s.seq);
        let segment_seq = self.store.next_segment_seq(id).await?;
        let config: serde_json::Value =
            serde_json::from_str(&row.config_json).map_err(|e| FleetError::Invalid {
                reason: format!("stored config of `{id}` is not JSON: {e}"),
            })?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let token = new_token()?;
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(TokenEntry {
                generation,
                hash: blake3::hash(token.as_bytes()),
                grant: Grant {
                    content: WorldContent {
                        world_id: id.to_string(),
                        config,
                        record_dir: files.segments_dir(),
                        resume_from,
                        ship_interval_ms: self
                            .ships()
                            .then_some(self.options.ship_interval.as_millis() as u64),
                        // Half a lease: a node's lease lapses (and a takeover can come)
                        // two thirds of a lease after its last renewal at the earliest, so
                        // a server cut off from its node stops before another one starts.
                        ship_deadline_ms: self
                            .ships()
                            .then_some((self.options.lease.as_millis() as u64 / 2).max(1000)),
                        record_block_ticks: self.ships().then_some(SHIPPED_BLOCK_TICKS),
                        epoch: holder.epoch,
                    },
                    holder: holder.clone(),
                    segment_seq,
                },
            });
        let result = match &self.options.agones {
            None => self.spawn_ready(id, &files, token, generation).await,
            Some(a) => self.allocate_ready(id, a, token).await,
        };
        let (child, ws_url) = match result {
            Ok(x) => x,
            Err(e) => {
                self.drop_token(generation);
                return Err(e);
            }
        };
        let registered = self
            .register(id, &child, &ws_url, &holder, (segment_seq, resumed_from_seq))
            .await;

        let (ws_url, status_url, segment_seq, start_tick) = match registered {
            Ok(r) => r,
            Err(e) => {
                // A server the fleet cannot account for must not keep running.
                child.signal(libc::SIGKILL);
                child.wait().await;
                self.drop_token(generation);
                return Err(match e {
                    FleetError::Unavailable { world, reason, .. } => FleetError::Unavailable {
                        world,
                        reason,
                        log_tail: child.log_tail(),
                    },
                    e => e,
                });
            }
        };
        tracing::info!(world = %id, pid = child.pid, %ws_url, start_tick, resumed_from_seq, "world server ready");
        Ok((
            Running {
                child,
                generation,
                ws_url,
                status_url,
                holder,
                segment_seq,
                start_tick,
                players: 0,
                idle_since: None,
                failed_polls: 0,
            },
            start_tick,
            resumed_from_seq,
        ))
    }

    /// Once a server is ready: reads its `/status`, opens its segment (`seqs`: its own,
    /// and the one it resumed from) and records it in the store. `ws_url` is the one the
    /// server announced; the store and the clients get it with this node's advertised
    /// host. Returns the URL clients get, its status URL, its segment and its start tick.
    pub(crate) async fn register(
        &self,
        id: &str,
        child: &ChildProc,
        ws_url: &str,
        holder: &Holder,
        (seq, resumed_from_seq): (i64, Option<i64>),
    ) -> Result<(String, String, Option<i64>, u32), FleetError> {
        let unavailable = |reason: String| FleetError::Unavailable {
            world: id.to_string(),
            reason,
            log_tail: Vec::new(),
        };
        let (port, path) = ws_url
            .strip_prefix("ws://")
            .and_then(|rest| {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let port = authority.rsplit_once(':')?.1.parse::<u16>().ok()?;
                Some((port, path))
            })
            .ok_or_else(|| unavailable(format!("unexpected ready line `{ws_url}`")))?;
        // This node reaches its own servers on loopback when they listen on every address.
        let local = match self.options.world_bind {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        // An allocated server is reached where Agones says, by this node and by clients.
        let (local, public_host) = match (&self.options.agones, ws_host(ws_url)) {
            (Some(_), Some(pod)) => (pod.to_string(), pod.to_string()),
            _ => (local, bracketed(&self.options.advertise_host)),
        };
        let status_url = format!("http://{local}:{port}{STATUS_PATH}");
        let public_url = format!("ws://{public_host}:{port}{path}");
        let status = self
            .status(&status_url)
            .await
            .map_err(|e| unavailable(format!("its /status did not answer: {e}")))?;
        let segment_seq = match &status.recording {
            Some(path) => {
                // An allocated server's recording is on its pod: the store's copy is
                // written into this node's folder for the world whenever it is needed.
                // Named by its segment number: pods name their files alike (their pid is 1).
                let local = match &self.options.agones {
                    Some(_) => WorldFiles::new(&self.options.data_dir, id)
                        .segments_dir()
                        .join(format!("segment-{seq}.mrec")),
                    None => path.clone(),
                };
                let rel = local
                    .strip_prefix(&self.options.data_dir)
                    .unwrap_or(&local)
                    .display()
                    .to_string();
                let opened = self
                    .store
                    .open_segment(id, seq, &rel, status.start_tick, resumed_from_seq, holder)
                    .await?;
                if !opened {
                    return Err(unavailable(format!(
                        "another node took the world over while this one started it (epoch {})",
                        holder.epoch
                    )));
                }
                Some(seq)
            }
            None => None,
        };
        if !self.store.set_server(id, holder, child.pid, &public_url).await? {
            return Err(unavailable(format!(
                "another node took the world over while this one started it (epoch {})",
                holder.epoch
            )));
        }
        Ok((public_url, status_url, segment_seq, status.start_tick))
    }

    /// Spawns the child and waits for its ready line; kills it if it is late.
    pub(crate) async fn spawn_ready(
        &self,
        id: &str,
        files: &WorldFiles,
        token: String,
        generation: u64,
    ) -> Result<(ChildProc, String), FleetError> {
        let spec = SpawnSpec {
            program: self.options.server_bin.clone(),
            args: vec![
                "serve".into(),
                "--listen".into(),
                std::net::SocketAddr::new(self.options.world_bind, 0).to_string(),
                "--shards".into(),
                self.options.shards.to_string(),
                "--fleet-url".into(),
                self.url.clone(),
                // One argument: an id may start with '-', which as a separate argument would
                // read as a flag.
                process::world_id_arg(id),
            ],
            stdin_secret: token,
            log_path: files.log_path(),
        };
        let mut child = self
            .spawner
            .spawn(spec)
            .await
            .map_err(|e| FleetError::Unavailable {
                world: id.to_string(),
                reason: format!("starting {} failed: {e}", self.options.server_bin.display()),
                log_tail: Vec::new(),
            })?;
        tracing::debug!(world = %id, pid = child.pid, generation, "world server spawned");
        let mut exit = child.exit_watch();
        let deadline = tokio::time::sleep(self.options.ready_timeout);
        tokio::pin!(deadline);
        let failure = loop {
            tokio::select! {
                line = child.stdout_lines.recv() => match line {
                    Some(l) => {
                        if let Some(url) = parse_ready_line(&l) {
                            return Ok((child, url.to_string()));
                        }
                    }
                    None => break format!("the world server exited before it was ready ({})", exit_of(&mut exit).await),
                },
                info = exit_of(&mut exit) => break format!("the world server exited before it was ready ({info})"),
                _ = &mut deadline => {
                    child.signal(libc::SIGKILL);
                    let info = child.wait().await;
                    break format!(
                        "the world server was not ready within {:.1} s and was killed ({info})",
                        self.options.ready_timeout.as_secs_f64()
                    );
                }
            }
        };
        // The output threads end with the child's pipes; give them a moment to drain.
        child.drained(Duration::from_secs(1)).await;
        Err(FleetError::Unavailable {
            world: id.to_string(),
            reason: failure,
            log_tail: child.log_tail(),
        })
    }
}

/// The host of `ws://HOST:PORT/...` (brackets kept).
fn ws_host(ws_url: &str) -> Option<&str> {
    let authority = ws_url.strip_prefix("ws://")?.split('/').next()?;
    Some(authority.rsplit_once(':')?.0)
}

impl Fleet {
    /// Allocates a GameServer for the world from the Agones Fleet and waits until it
    /// serves (it loads the world after the allocation): its `/status` answers.
    pub(crate) async fn allocate_ready(
        &self,
        id: &str,
        agones: &crate::agones::AgonesOptions,
        token: String,
    ) -> Result<(ChildProc, String), FleetError> {
        let unavailable = |reason: String| FleetError::Unavailable {
            world: id.to_string(),
            reason,
            log_tail: Vec::new(),
        };
        let allocated = agones
            .allocate(id, &token)
            .await
            .map_err(|e| unavailable(format!("allocating a GameServer: {e}")))?;
        let host = bracketed(&allocated.address);
        let status_url = format!("http://{host}:{}{STATUS_PATH}", allocated.port);
        let deadline = tokio::time::Instant::now() + self.options.ready_timeout;
        while self.status(&status_url).await.is_err() {
            if tokio::time::Instant::now() >= deadline {
                if let Err(e) = agones.delete(&allocated.name).await {
                    tracing::warn!(world = %id, gameserver = %allocated.name, error = %e, "deleting a GameServer that never served failed");
                }
                return Err(unavailable(format!(
                    "GameServer `{}` was allocated but did not serve within {:.1} s (it was deleted)",
                    allocated.name,
                    self.options.ready_timeout.as_secs_f64()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::info!(world = %id, gameserver = %allocated.name, address = %allocated.address, port = allocated.port, "GameServer allocated and serving");
        let ws_url = format!("ws://{host}:{}/ws", allocated.port);
        let (pod, exit) = crate::agones::Pod::watch(agones.clone(), allocated, token);
        Ok((ChildProc::remote(pod, exit), ws_url))
    }
}

/// A host as it goes in a URL: an IPv6 address in brackets.
fn bracketed(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
