//! `Launcher`: starting and stopping world servers, forked on this node or allocated from
//! an Agones Fleet. A launch issues the server's token (given on stdin, or in the
//! allocation), waits for it to serve, reads its `/status` and hands back a `Launched`
//! with the URLs clients and this node reach it at. It knows nothing of the store: what a
//! server's run means for its world is `Worlds`' to record.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use migratory_http::{self as http, HttpError};
use migratory_wire::fleet::{parse_ready_line, ServerStatus, STATUS_PATH};

use crate::agones::AgonesOptions;
use crate::error::FleetError;
use crate::options::FleetOptions;
use crate::process::{self, ChildProc, ExitInfo, SpawnSpec, Spawner};
use crate::tokens::{Grant, Tokens};

/// How long a `/status` poll waits: a world server answers from memory in well under a
/// millisecond, so a second is a server that is stopped, wedged or unreachable.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a `/status` poll got no status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("not a /status answer: {0}")]
    Json(#[from] serde_json::Error),
}

/// Why a server that announced itself ready could not be reached.
#[derive(Debug, thiserror::Error)]
enum Unreachable {
    #[error("unexpected ready line `{0}`")]
    ReadyLine(String),
    #[error("its /status did not answer: {0}")]
    Status(#[from] StatusError),
}

/// A world server launched and serving.
#[derive(Debug)]
pub(crate) struct Launched {
    pub(crate) child: ChildProc,
    /// Its token's generation (`Launcher::forget` once the process has exited).
    pub(crate) generation: u64,
    /// The URL clients get: the server's own, with this node's advertised host.
    pub(crate) ws_url: String,
    /// Where this node reads its `/status`.
    pub(crate) status_url: String,
    /// Its first `/status`: its start tick and its recording.
    pub(crate) status: ServerStatus,
}

/// Starts and stops world servers.
#[derive(Debug)]
pub(crate) struct Launcher {
    spawner: Spawner,
    tokens: Tokens,
    /// Where world servers reach this node's internal routes.
    fleet_url: String,
    server_bin: PathBuf,
    shards: u32,
    world_bind: IpAddr,
    advertise_host: String,
    agones: Option<AgonesOptions>,
    ready_timeout: Duration,
    stop_timeout: Duration,
}

impl Launcher {
    pub(crate) fn new(options: &FleetOptions, fleet_url: String) -> std::io::Result<Launcher> {
        Ok(Launcher {
            spawner: Spawner::start()?,
            tokens: Tokens::default(),
            fleet_url,
            server_bin: options.server_bin.clone(),
            shards: options.shards,
            world_bind: options.world_bind,
            advertise_host: options.advertise_host.clone(),
            agones: options.agones.clone(),
            ready_timeout: options.ready_timeout,
            stop_timeout: options.stop_timeout,
        })
    }

    /// Whether servers are allocated from Agones (their recordings live on their pods).
    pub(crate) fn allocates(&self) -> bool {
        self.agones.is_some()
    }

    /// The live tokens of this node's servers.
    pub(crate) fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// Launches a server for `grant` (its world's content and its holder) and waits until
    /// it serves and answers `/status`. `log_path`: where a forked server's output goes.
    pub(crate) async fn launch(&self, grant: Grant, log_path: PathBuf) -> Result<Launched, FleetError> {
        let id = grant.content.world_id.clone();
        let issued = self.tokens.issue(grant)?;
        let generation = issued.generation;
        let result = match &self.agones {
            None => self.spawn_ready(&id, log_path, issued.secret, generation).await,
            Some(a) => self.allocate_ready(&id, a, issued.secret).await,
        };
        let (child, ws_url) = match result {
            Ok(x) => x,
            Err(e) => {
                self.tokens.forget(generation);
                return Err(e);
            }
        };
        match self.reach(&ws_url).await {
            Ok((ws_url, status_url, status)) => Ok(Launched {
                child,
                generation,
                ws_url,
                status_url,
                status,
            }),
            Err(unreachable) => {
                let log_tail = self.abandon(&child, generation).await;
                Err(FleetError::Unavailable {
                    world: id,
                    reason: unreachable.to_string(),
                    log_tail,
                })
            }
        }
    }

    /// Kills a launched server this node cannot account for (a server nobody records
    /// must not keep running) and forgets its token; returns its log's tail.
    pub(crate) async fn abandon(&self, child: &ChildProc, generation: u64) -> Vec<String> {
        child.signal(libc::SIGKILL);
        child.wait().await;
        self.tokens.forget(generation);
        child.log_tail()
    }

    /// The URL clients get and the status URL for the server that announced `ws_url`, and
    /// its first `/status`.
    async fn reach(&self, ws_url: &str) -> Result<(String, String, ServerStatus), Unreachable> {
        let (port, path) = ws_url
            .strip_prefix("ws://")
            .and_then(|rest| {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let port = authority.rsplit_once(':')?.1.parse::<u16>().ok()?;
                Some((port, path))
            })
            .ok_or_else(|| Unreachable::ReadyLine(ws_url.to_string()))?;
        // This node reaches its own servers on loopback when they listen on every address.
        let local = match self.world_bind {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        // An allocated server is reached where Agones says, by this node and by clients.
        let (local, public_host) = match (&self.agones, ws_host(ws_url)) {
            (Some(_), Some(pod)) => (pod.to_string(), pod.to_string()),
            _ => (local, bracketed(&self.advertise_host)),
        };
        let status_url = format!("http://{local}:{port}{STATUS_PATH}");
        let public_url = format!("ws://{public_host}:{port}{path}");
        let status = self.status(&status_url).await?;
        Ok((public_url, status_url, status))
    }

    /// One `/status` poll.
    pub(crate) async fn status(&self, url: &str) -> Result<ServerStatus, StatusError> {
        let response = http::Request::new(http::Method::GET, url)
            .timeout(STATUS_TIMEOUT)
            .send()
            .await?;
        if !response.is_success() {
            return Err(StatusError::Status(response.status));
        }
        Ok(response.json()?)
    }

    /// Stops a server with `signal` (SIGTERM: a stop; SIGUSR1: a move), killing it if it
    /// has not exited within the stop timeout; returns how it exited.
    pub(crate) async fn halt(&self, id: &str, child: &ChildProc, signal: i32) -> ExitInfo {
        child.signal(signal);
        if tokio::time::timeout(self.stop_timeout, child.wait())
            .await
            .is_err()
        {
            tracing::warn!(world = %id, pid = child.pid, signal, "world server did not stop in time; killing it");
            child.signal(libc::SIGKILL);
        }
        child.wait().await
    }

    /// Forgets the token of a server that has exited.
    pub(crate) fn forget(&self, generation: u64) {
        self.tokens.forget(generation);
    }

    /// At a restarted node's start: stops a server of world `id` an earlier incarnation
    /// left running as `pid` (SIGTERM, then SIGKILL), if that pid is still one.
    pub(crate) async fn stop_leftover(&self, id: &str, pid: u32) {
        if !process::is_world_server(pid, id, &self.server_bin) {
            return;
        }
        tracing::warn!(world = %id, pid, "stopping a world server left by an earlier fleet");
        // SAFETY: kill only sends a signal to the pid checked just above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + self.stop_timeout;
        while process::pid_exists(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if process::is_world_server(pid, id, &self.server_bin) {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            while process::pid_exists(pid) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Spawns the child and waits for its ready line; kills it if it is late.
    async fn spawn_ready(
        &self,
        id: &str,
        log_path: PathBuf,
        token: String,
        generation: u64,
    ) -> Result<(ChildProc, String), FleetError> {
        let spec = SpawnSpec {
            program: self.server_bin.clone(),
            args: vec![
                "serve".into(),
                "--listen".into(),
                std::net::SocketAddr::new(self.world_bind, 0).to_string(),
                "--shards".into(),
                self.shards.to_string(),
                "--fleet-url".into(),
                self.fleet_url.clone(),
                // One argument: an id may start with '-', which as a separate argument would
                // read as a flag.
                process::world_id_arg(id),
            ],
            stdin_secret: token,
            log_path,
        };
        let mut child = self
            .spawner
            .spawn(spec)
            .await
            .map_err(|e| FleetError::Unavailable {
                world: id.to_string(),
                reason: format!("starting {} failed: {e}", self.server_bin.display()),
                log_tail: Vec::new(),
            })?;
        tracing::debug!(world = %id, pid = child.pid, generation, "world server spawned");
        let mut exit = child.exit_watch();
        let deadline = tokio::time::sleep(self.ready_timeout);
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
                        self.ready_timeout.as_secs_f64()
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

    /// Allocates a GameServer for the world from the Agones Fleet and waits until it
    /// serves (it loads the world after the allocation): its `/status` answers.
    async fn allocate_ready(
        &self,
        id: &str,
        agones: &AgonesOptions,
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
        let deadline = tokio::time::Instant::now() + self.ready_timeout;
        while self.status(&status_url).await.is_err() {
            if tokio::time::Instant::now() >= deadline {
                if let Err(e) = agones.delete(&allocated.name).await {
                    tracing::warn!(world = %id, gameserver = %allocated.name, error = %e, "deleting a GameServer that never served failed");
                }
                return Err(unavailable(format!(
                    "GameServer `{}` was allocated but did not serve within {:.1} s (it was deleted)",
                    allocated.name,
                    self.ready_timeout.as_secs_f64()
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

/// Waits for the exit a watch reports.
pub(crate) async fn exit_of(rx: &mut watch::Receiver<Option<ExitInfo>>) -> ExitInfo {
    loop {
        if let Some(e) = *rx.borrow_and_update() {
            return e;
        }
        if rx.changed().await.is_err() {
            return rx.borrow().unwrap_or(ExitInfo::Signal(libc::SIGKILL));
        }
    }
}

/// The host of `ws://HOST:PORT/...` (brackets kept).
fn ws_host(ws_url: &str) -> Option<&str> {
    let authority = ws_url.strip_prefix("ws://")?.split('/').next()?;
    Some(authority.rsplit_once(':')?.0)
}

/// A host as it goes in a URL: an IPv6 address in brackets.
fn bracketed(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Where an allocated server's recording is kept on this node: its pod names its file as
/// every pod does (their pid is 1), so the copy here is named by its segment number.
pub(crate) fn allocated_recording(segments_dir: &Path, seq: i64) -> PathBuf {
    segments_dir.join(format!("segment-{seq}.mrec"))
}
