//! Starting and stopping the server: the world, the terrain messages, the recording, the
//! tick thread, and one port serving `/ws` (WebSocket), `/healthz`, `/metrics`, `/status`
//! and the browser viewer at `/`.
//!
//! Shutdown runs in the order the issue asks for: stop accepting, close every client with
//! 1001 (bounded by `shutdown_timeout_seconds`), then stop the tick thread, which writes the
//! recording's end record.

use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use migratory_kernel::World;
use migratory_record::{RecordingWriter, WriterOptions};
use thiserror::Error;
use tokio_tungstenite::tungstenite::Bytes;

use migratory_wire::protocol::{WireTerrainDescriptor, WireZone, WorldFacts, ZoneKind};
use migratory_wire::terrain_wire::{self, TerrainConfigError, TerrainDescriptor};

use crate::accept;
use crate::board::TickBoard;
use crate::config::ServerConfig;
use crate::connection_ctx::ConnectionWiring;
use crate::lifecycle::{Lifecycle, StopCause, Stopper};
use crate::metrics::Metrics;
use crate::recorder::Recorder;
use crate::resume;
use crate::routes::{app_state, router, WS_PATH};
use crate::tick::{Carried, TickLoop, TickReport, TickSettings, TickWiring, WelcomeBase};
use crate::watchdog;

/// Why the server could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("building the world: {0}")]
    World(#[from] migratory_kernel::WorldError),
    #[error("encoding the terrain for the wire: {0}")]
    Terrain(#[from] TerrainConfigError),
    #[error("creating the recording {path}: {source}")]
    Recording {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("starting the {what} thread: {source}")]
    Thread {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the tick thread panicked")]
    TickPanicked,
    #[error("the HTTP server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Resume(#[from] resume::ResumeError),
    #[error("stopped by a signal while the world was being built")]
    StoppedWhileBuilding,
}

/// Options that are not part of the world's config.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// `MIGRATORY_DEBUG=1`: stall watchdog and per-phase timings at DEBUG.
    pub debug: bool,
    /// Stop by itself after this many ticks (for benchmarks and corpus recordings).
    pub run_ticks: Option<u64>,
    /// Resume the world from this earlier session's recording (its last durable tick)
    /// instead of building it fresh from the config.
    pub resume_from: Option<PathBuf>,
    /// Ship the recording to a fleet's shared store (and stop when the fleet fences us).
    pub ship: Option<crate::ship::ShipTarget>,
    /// Shared with a signal handler that may end the process while the world is built.
    pub phase: Option<Arc<StartPhase>>,
}

/// Where `start` is, for a signal handler that wants to end the process at once: that is
/// safe only while the world is being built, before `start` creates anything a stop must
/// close (the recording, the shipments, the tick thread, the listener). Whichever of
/// `commit` (by `start`) and `abandon` (by the handler) comes first wins.
#[derive(Debug, Default)]
pub struct StartPhase(std::sync::atomic::AtomicU8);

impl StartPhase {
    const BUILDING: u8 = 0;
    const COMMITTED: u8 = 1;
    const ABANDONED: u8 = 2;

    /// Called by `start` once the world is built; false when the process is ending.
    fn commit(&self) -> bool {
        self.0
            .compare_exchange(
                Self::BUILDING,
                Self::COMMITTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_or_else(|now| now == Self::COMMITTED, |_| true)
    }

    /// True when the world is still being built: the caller may end the process, and
    /// `start` will not go on past the build.
    pub fn abandon(&self) -> bool {
        self.0
            .compare_exchange(
                Self::BUILDING,
                Self::ABANDONED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// How the session ended.
#[derive(Clone, Debug)]
pub struct ShutdownReport {
    pub tick: TickReport,
    /// Connections still open when the shutdown timeout ran out (0 normally).
    pub connections_left: i64,
    /// Why the fleet fenced this server, when that is what stopped it.
    pub fenced: Option<String>,
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    recording_path: Option<PathBuf>,
    terrain: TerrainDescriptor,
    metrics: Arc<Metrics>,
    board: Arc<TickBoard>,
    lifecycle: Arc<Lifecycle>,
    task: tokio::task::JoinHandle<Result<ShutdownReport, ServerError>>,
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `ws://ADDR/ws`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}{WS_PATH}", self.local_addr)
    }

    pub fn recording_path(&self) -> Option<&Path> {
        self.recording_path.as_deref()
    }

    pub fn terrain(&self) -> &TerrainDescriptor {
        &self.terrain
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// What the tick thread publishes besides the counters.
    pub fn board(&self) -> &Arc<TickBoard> {
        &self.board
    }

    /// Starts the shutdown without waiting for it.
    pub fn trigger_shutdown(&self) {
        self.lifecycle.ask_stop();
    }

    /// A handle that can start the shutdown while `wait` holds the server.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.lifecycle.clone())
    }

    /// Shuts down and waits until everything has stopped.
    pub async fn shutdown(self) -> Result<ShutdownReport, ServerError> {
        self.trigger_shutdown();
        self.wait().await
    }

    /// Waits until the server stops (after `trigger_shutdown`, or `run_ticks`).
    pub async fn wait(self) -> Result<ShutdownReport, ServerError> {
        self.task.await?
    }
}

/// Builds the world and starts serving. Must be called inside a tokio runtime.
pub async fn start(config: ServerConfig, options: ServeOptions) -> Result<ServerHandle, ServerError> {
    config.validate()?;
    let epoch = Instant::now();
    let s = &config.server;
    let world_config = config.world.clone();
    let (world, carried) = build_world(&config, &options)?;
    if options.phase.as_ref().is_some_and(|p| !p.commit()) {
        return Err(ServerError::StoppedWhileBuilding);
    }
    let start_tick = world.tick();
    let (descriptor, terrain_messages, viewer_terrain) = encode_terrain(&config, &world)?;

    let metrics = Metrics::new(world_config.tick_rate_hz);
    let board = Arc::new(TickBoard::default());
    let recorder = s
        .recording
        .enabled
        .then(|| open_recording(&config, &world, &metrics))
        .transpose()?;
    let recording_path = recorder.as_ref().map(|r| r.path.clone());

    let (listener, local_addr) = listen(&config)?;
    let lifecycle = Lifecycle::new();
    // Shipping starts with the recording, before the first tick is recorded.
    let ship = options
        .ship
        .as_ref()
        .zip(recording_path.as_ref())
        .map(|(target, path)| {
            crate::ship::spawn(target.clone(), path.clone(), lifecycle.clone(), metrics.clone())
        });

    let (events_tx, events_rx) = mpsc::channel();
    // Client ids of the new session start above those still in a resumed world.
    let next_client_id = carried.clients.iter().max().map_or(1, |c| c + 1);
    let (tick_thread, watchdog) = start_ticking(
        (world, carried),
        (&config, &options, &descriptor),
        TickWiring {
            events: events_rx,
            metrics: metrics.clone(),
            board: board.clone(),
            recorder,
            lifecycle: lifecycle.clone(),
            epoch,
        },
    )?;
    let ctx = app_state(
        &config,
        (terrain_messages, descriptor.content_hash),
        ConnectionWiring {
            metrics: metrics.clone(),
            board: board.clone(),
            events: events_tx,
            shutdown: lifecycle.closing(),
            fence: lifecycle.fence().clone(),
        },
        (options.ship.as_ref().map(|t| t.token.as_str()), &lifecycle),
        (
            start_tick,
            recording_path.clone(),
            options.resume_from.clone(),
            next_client_id,
        ),
    );
    let http = tokio::spawn(accept::serve(
        listener,
        router(ctx, viewer_terrain),
        accept_limits(&config),
        metrics.clone(),
        lifecycle.closing(),
    ));

    log_started(local_addr, &config, &descriptor, recording_path.as_deref());
    let running = Running {
        lifecycle: lifecycle.clone(),
        shutdown_timeout: Duration::from_secs_f64(s.shutdown_timeout_seconds)
            + s.client_backpressure.eviction_close_timeout(),
        metrics: metrics.clone(),
        board: board.clone(),
        tick_thread,
        watchdog,
        http,
        debug: options.debug,
        epoch,
        ship,
    };
    let task = tokio::spawn(running.until_stopped());
    Ok(ServerHandle {
        local_addr,
        recording_path,
        terrain: descriptor,
        metrics,
        board,
        lifecycle,
        task,
    })
}

/// The terrain as the wire carries it (encoded once for every client), and the viewer's
/// shaded image of it.
fn encode_terrain(
    config: &ServerConfig,
    world: &World,
) -> Result<(TerrainDescriptor, Arc<Vec<Bytes>>, Bytes), ServerError> {
    let w = &config.world;
    let terrain = terrain_wire::encode(world.terrain(), &config.server.terrain_wire)?;
    let viewer_terrain = Bytes::from(migratory_view::terrain_image(
        world.terrain(),
        w.world_size_mm,
        w.water_level_mm,
        &terrain.descriptor.content_hash,
    ));
    let messages = Arc::new(terrain.messages.into_iter().map(Bytes::from).collect());
    Ok((terrain.descriptor, messages, viewer_terrain))
}

/// The accept loop's caps and timeout, from the config.
fn accept_limits(config: &ServerConfig) -> accept::AcceptLimits {
    let s = &config.server;
    accept::AcceptLimits {
        connections_max: s.connections_max as usize,
        connections_per_ip_max: s.connections_per_ip_max as usize,
        per_ip_exempt_loopback: s.connections_per_ip_exempt_loopback,
        header_timeout: Duration::from_secs_f64(s.http_header_timeout_seconds),
    }
}

/// The one line that says the server is up, and with what.
fn log_started(
    local_addr: SocketAddr,
    config: &ServerConfig,
    descriptor: &TerrainDescriptor,
    recording: Option<&std::path::Path>,
) {
    tracing::info!(
        %local_addr,
        shards = config.server.shard_count(),
        boids = config.world.boid_count,
        tick_rate_hz = config.world.tick_rate_hz,
        terrain_cells = descriptor.cells,
        terrain_bytes = descriptor.total_bytes,
        terrain_chunks = descriptor.chunk_count,
        recording = ?recording,
        "server started"
    );
}

/// The listening socket on the configured address, and the address it got.
fn listen(config: &ServerConfig) -> Result<(tokio::net::TcpListener, SocketAddr), ServerError> {
    let addr = config.listen_addr()?;
    let listener = bind(addr, config.server.tcp_send_buffer_bytes)
        .map_err(|source| ServerError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;
    Ok((listener, local_addr))
}

/// What every WELCOME of this session carries besides who the client is.
fn welcome_base(world: &World, descriptor: &TerrainDescriptor) -> WelcomeBase {
    let c = world.config();
    WelcomeBase {
        tick_rate_hz: c.tick_rate_hz as u16,
        snapshot_interval_ticks: c.snapshot_interval_ticks as u16,
        world_size_mm: c.world_size_mm,
        terrain: WireTerrainDescriptor::from_descriptor(descriptor),
        world: world_facts(world),
    }
}

/// What the tick loop runs by, from the config and the options.
fn tick_settings(config: &ServerConfig, options: &ServeOptions) -> TickSettings {
    let s = &config.server;
    TickSettings {
        pin_shard_threads: s.pin_shard_threads,
        catch_up_ticks_max: s.tick_loop.catch_up_ticks_max,
        backpressure: s.client_backpressure.clone(),
        run_ticks: options.run_ticks,
        debug: options.debug,
        reconnect_grace_ticks: (s.reconnect_grace_seconds * f64::from(config.world.tick_rate_hz)).ceil()
            as u32,
    }
}

/// The tick thread and, in debug, the watchdog over it.
type TickThreads = (
    std::thread::JoinHandle<TickReport>,
    Option<std::thread::JoinHandle<()>>,
);

/// Starts the tick thread on `world` (and, in debug, the watchdog over it).
fn start_ticking(
    (world, carried): (World, Carried),
    (config, options, descriptor): (&ServerConfig, &ServeOptions, &TerrainDescriptor),
    wiring: TickWiring,
) -> Result<TickThreads, ServerError> {
    let (board, epoch, lifecycle) = (wiring.board.clone(), wiring.epoch, wiring.lifecycle.clone());
    let welcome = welcome_base(&world, descriptor);
    let tick_loop = TickLoop::new(world, carried, tick_settings(config, options), welcome, wiring);
    let tick_thread = spawn_tick_thread(tick_loop, lifecycle.clone())?;
    let watchdog = options
        .debug
        .then(|| watchdog::start(board, epoch, lifecycle))
        .transpose()
        .map_err(|source| ServerError::Thread {
            what: "watchdog",
            source,
        })?;
    Ok((tick_thread, watchdog))
}

/// Runs the tick loop on a thread of its own, which tells `lifecycle` when its loop ends.
fn spawn_tick_thread(
    tick_loop: TickLoop,
    lifecycle: Arc<Lifecycle>,
) -> Result<std::thread::JoinHandle<TickReport>, ServerError> {
    std::thread::Builder::new()
        .name("migratory-tick".into())
        .spawn(move || {
            let report = tick_loop.run();
            lifecycle.tick_loop_ended();
            report
        })
        .map_err(|source| ServerError::Thread { what: "tick", source })
}

/// The world to serve: resumed from an earlier session's recording, or new from the config,
/// with the clients of the resumed session and their reconnect tokens.
fn build_world(config: &ServerConfig, options: &ServeOptions) -> Result<(World, Carried), ServerError> {
    let shards = config.server.shard_count();
    let Some(path) = &options.resume_from else {
        return Ok((World::new(config.world.clone(), shards)?, Carried::default()));
    };
    let r = resume::resume(path, &config.world, shards)?;
    tracing::info!(
        from = %r.from.display(),
        tick = r.tick,
        ended_cleanly = r.ended_cleanly,
        clients = r.clients.len(),
        reclaimable = r.tokens.len(),
        "world resumed"
    );
    Ok((
        r.world,
        Carried {
            clients: r.clients,
            tokens: r.tokens,
            ended_cleanly: r.ended_cleanly,
        },
    ))
}

/// What a started server holds until it stops, and the order it stops in.
struct Running {
    lifecycle: Arc<Lifecycle>,
    shutdown_timeout: Duration,
    metrics: Arc<Metrics>,
    board: Arc<TickBoard>,
    tick_thread: std::thread::JoinHandle<TickReport>,
    watchdog: Option<std::thread::JoinHandle<()>>,
    http: tokio::task::JoinHandle<()>,
    debug: bool,
    epoch: Instant,
    ship: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Waits for a stop (asked for, the tick loop's own end, or a fence), then runs the
    /// lifecycle's stages in order: close the clients (bounded wait), stop the tick thread
    /// (it finishes the recording), ship the rest, then end the HTTP side.
    async fn until_stopped(self) -> Result<ShutdownReport, ServerError> {
        let heartbeat = self
            .debug
            .then(|| tokio::spawn(watchdog::runtime_heartbeat(self.board.clone(), self.epoch)));
        let lifecycle = &self.lifecycle;
        match lifecycle.until_stop().await {
            StopCause::Asked => tracing::info!("shutting down"),
            StopCause::TickLoopEnded => tracing::info!("tick loop finished; shutting down"),
            // Another server owns the world now: the ticking stopped before anything else,
            // so no input is taken after the fleet refused us.
            StopCause::Fenced => tracing::warn!("fenced; the tick loop stopped at once"),
        }
        let fence = lifecycle.fence();
        if let Some(ship) = self.ship.as_ref().filter(|_| fence.is_set()) {
            // Fenced: nothing more of ours may reach the store.
            ship.abort();
        }
        // 1. Stop accepting and ask every connection to close (1001, or REJOIN when fenced).
        lifecycle.close_clients();
        // 2. Wait (bounded) for the connections to finish their close handshakes.
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        while self.metrics.connections.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
            if fence.is_set() {
                // Fenced meanwhile (the shipments go on during the close): no more input.
                lifecycle.stop_ticking();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let connections_left = self.metrics.connections.load(Ordering::Relaxed);
        // 2. Stop the tick thread; it finishes the recording with its end record.
        lifecycle.stop_ticking();
        let tick_thread = self.tick_thread;
        let report = tokio::task::spawn_blocking(move || tick_thread.join())
            .await
            .map_err(|_| ServerError::TickPanicked)?
            .map_err(|_| ServerError::TickPanicked)?;
        if let Some(w) = self.watchdog {
            let _ = tokio::task::spawn_blocking(move || w.join()).await;
        }
        // The recording is finished: its last bytes (and the final reclaim file) go to the
        // fleet now, so a server that shares no disk with its node loses nothing. Bounded:
        // a node that does not answer ships the rest itself once this process has exited.
        // 3. The last shipment.
        if let Some(ship) = self.ship {
            lifecycle.ship_last();
            if tokio::time::timeout(Duration::from_secs(5), ship).await.is_err() {
                tracing::warn!("the last shipment did not finish in 5 s");
            }
        }
        if let Some(h) = heartbeat {
            h.abort();
        }
        match tokio::time::timeout(Duration::from_secs(2), self.http).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(e)) => return Err(ServerError::Task(e)),
        }
        tracing::info!(
            ticks = report.ticks,
            final_tick = report.final_tick,
            connections_left,
            recording = ?report.recording,
            "server stopped"
        );
        Ok(ShutdownReport {
            tick: report,
            connections_left,
            fenced: lifecycle.fence().reason(),
        })
    }
}

/// The listening socket. Accepted connections inherit its send buffer size, so a set
/// `tcp_send_buffer_bytes` bounds what the kernel holds for a client that stops reading
/// (0 keeps the OS's autotuning, which may grow it to megabytes).
fn bind(addr: SocketAddr, send_buffer_bytes: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if send_buffer_bytes > 0 {
        socket.set_send_buffer_size(send_buffer_bytes)?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Creates the session's recording file and writes its header.
fn open_recording(
    config: &ServerConfig,
    world: &World,
    metrics: &Arc<Metrics>,
) -> Result<Recorder, ServerError> {
    let r = &config.server.recording;
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ServerError::Recording { path, source }
    };
    std::fs::create_dir_all(&r.dir).map_err(err(&r.dir))?;
    let (path, file) = crate::recorder::create_session_file(&r.dir).map_err(err(&r.dir))?;
    let writer = RecordingWriter::new(
        BufWriter::new(file),
        world,
        world.shard_count() as u32,
        WriterOptions {
            block_ticks: r.block_ticks,
            checkpoint_interval_ticks: r.checkpoint_interval_ticks,
            fsync_every_blocks: r.fsync_every_blocks,
        },
    )
    .map_err(err(&path))?;
    Recorder::start(path.clone(), writer, metrics.clone()).map_err(err(&path))
}

/// What WELCOME tells every client about the world it joins.
fn world_facts(world: &World) -> WorldFacts {
    let c = world.config();
    let zones = world.zones();
    // Zones are placed inside the world, so their centres are never negative.
    let zone = |kind, z: &migratory_kernel::Zone| WireZone {
        kind,
        x_mm: z.x_mm.max(0) as u32,
        y_mm: z.y_mm.max(0) as u32,
        radius_mm: z.radius_mm,
    };
    WorldFacts {
        view_radius_mm: c.view_radius_mm,
        view_entities_max: migratory_kernel::VIEW_ENTITIES_MAX as u16,
        baseline_window_snapshots: migratory_kernel::BASELINE_RING_LEN as u16,
        cast_radius_mm: c.player.cast_radius_mm,
        cast_cooldown_ticks: c.player.cast_cooldown_ticks,
        avatar_speed_max_mm_per_tick: c.player.speed_max_mm_per_tick,
        zones: std::iter::once(zone(ZoneKind::Town, &zones.town))
            .chain(
                zones
                    .hunting_fields
                    .iter()
                    .map(|z| zone(ZoneKind::HuntingField, z)),
            )
            .collect(),
    }
}
