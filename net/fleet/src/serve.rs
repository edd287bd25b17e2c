//! Starting a fleet node: open the store, register the node, build its components
//! (`Segments`, `Launcher`, `Worlds`, `Moves`, `Upgrades`, `History`), reconcile the store
//! with the processes that exist, bind, then serve the API, run the idle reaper, the
//! adopter of moved worlds and the lease's heartbeat until stopped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::api::{self, Api};
use crate::auth::Auth;
use crate::error::{io_err, FleetError};
use crate::history::History;
use crate::internal_api::{self, Internal};
use crate::launcher::Launcher;
use crate::metrics::FleetMetrics;
use crate::moves::Moves;
use crate::node::{self, Node};
use crate::options::FleetOptions;
use crate::segments::Segments;
use crate::store::Store;
use crate::upgrades::Upgrades;
use crate::worlds::Worlds;

/// A running fleet.
#[derive(Debug)]
pub struct FleetHandle {
    local_addr: SocketAddr,
    internal_addr: SocketAddr,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<(), FleetError>>,
}

impl FleetHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where this node's world servers reach its internal routes.
    pub fn internal_addr(&self) -> SocketAddr {
        self.internal_addr
    }

    /// Starts the shutdown: every world server is stopped gracefully.
    pub fn stopper(&self) -> Arc<Notify> {
        self.stop.clone()
    }

    pub async fn wait(self) -> Result<(), FleetError> {
        self.task.await.map_err(|e| FleetError::Io {
            context: "the fleet task".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    }
}

/// Opens the store, reconciles it with the processes that exist, binds and serves.
pub async fn start(options: FleetOptions) -> Result<FleetHandle, FleetError> {
    std::fs::create_dir_all(&options.data_dir)
        .map_err(io_err(format!("creating {}", options.data_dir.display())))?;
    let (auth, from) = Auth::load(&options.tokens, &options.data_dir)?;
    tracing::info!(admin = %from.admin, reader = ?from.reader, player = %from.player, "tokens: where each role's comes from");
    let store = Store::open(options.database_url.as_deref(), &options.data_dir).await?;
    let node = Node::new(&options)?;
    node.register(&store).await?;
    tracing::info!(node = %node.id, advertise_host = %node.advertise_host, lease_s = node.lease.as_secs_f64(), "node registered");
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(io_err(format!("binding {}", options.listen)))?;
    let local_addr = listener
        .local_addr()
        .map_err(io_err("reading the bound address"))?;
    let host = &node.advertise_host;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    store
        .set_api_url(&node.id, &format!("http://{host}:{}", local_addr.port()))
        .await?;
    let internal = tokio::net::TcpListener::bind(options.internal_listen)
        .await
        .map_err(io_err(format!("binding {}", options.internal_listen)))?;
    let internal_addr = internal
        .local_addr()
        .map_err(io_err("reading the bound address"))?;
    let Components {
        worlds,
        segments,
        moves,
        api,
    } = build(&options, &store, &node, internal_addr)?;
    worlds.reconcile().await?;
    let stop = Arc::new(Notify::new());
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let reaper = spawn_reaper(worlds.clone(), options.poll_interval, shutdown_rx.clone());
    let adopter = moves.spawn_adopter(shutdown_rx.clone());
    let heartbeat = node::spawn_heartbeat(store.clone(), node.clone(), stop.clone(), shutdown_rx.clone());
    let app = api::router(api, Arc::new(auth));
    let internal_app = internal_api::router(Arc::new(Internal {
        worlds: worlds.clone(),
        segments,
    }));
    let stop_rx = stop.clone();
    let task = tokio::spawn(async move {
        // The peer address feeds the open-join rate limit.
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = shutdown_rx.changed().await;
        });
        let server = tokio::spawn(async move { server.await });
        // The internal routes stay up until every world server has stopped: a stopping
        // server may still ship.
        let (internal_stop_tx, mut internal_stop_rx) = watch::channel(false);
        let internal_server = tokio::spawn(async move {
            axum::serve(internal, internal_app)
                .with_graceful_shutdown(async move {
                    let _ = internal_stop_rx.changed().await;
                })
                .await
        });
        stop_rx.notified().await;
        tracing::info!("fleet stopping: stopping every world server");
        let _ = shutdown_tx.send(true);
        reaper.abort();
        worlds.stop_all().await;
        let _ = internal_stop_tx.send(true);
        heartbeat.abort();
        adopter.abort();
        // Its worlds are given up already; ending the lease lets other nodes see at once
        // that this one is gone.
        if let Err(e) = store.leave(&node.id, &node.incarnation).await {
            tracing::warn!(error = %e, "ending this node's lease failed");
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), internal_server).await;
        Ok(())
    });
    Ok(FleetHandle {
        local_addr,
        internal_addr,
        stop,
        task,
    })
}

/// This node's components, built over its store and lease (`lib.rs` names each).
struct Components {
    worlds: Arc<Worlds>,
    segments: Arc<Segments>,
    moves: Arc<Moves>,
    api: Arc<Api>,
}

/// Builds the components: `Segments` and a `Launcher` under `Worlds`, and `Moves`,
/// `Upgrades` and `History` over those; `internal_addr` is where world servers reach this
/// node.
fn build(
    options: &FleetOptions,
    store: &Store,
    node: &Node,
    internal_addr: SocketAddr,
) -> Result<Components, FleetError> {
    let metrics = Arc::new(FleetMetrics::new());
    let segments = Arc::new(Segments::new(
        store.clone(),
        options,
        node.clone(),
        metrics.clone(),
    ));
    let launcher = Launcher::new(options, format!("http://{internal_addr}"))
        .map_err(io_err("starting the spawner thread"))?;
    let worlds = Arc::new(Worlds::new(
        store.clone(),
        options,
        (node.clone(), launcher),
        segments.clone(),
        metrics.clone(),
    ));
    let moves = Arc::new(Moves::new(
        worlds.clone(),
        segments.clone(),
        store.clone(),
        node.clone(),
        metrics.clone(),
    ));
    let api = Arc::new(Api {
        worlds: worlds.clone(),
        moves: moves.clone(),
        upgrades: Arc::new(Upgrades::new(
            worlds.clone(),
            segments.clone(),
            store.clone(),
            options.shards,
        )),
        history: Arc::new(History::new(worlds.clone(), segments.clone(), options)),
        metrics,
    });
    Ok(Components {
        worlds,
        segments,
        moves,
        api,
    })
}

/// Runs the idle and health reaper every `every` until shutdown.
fn spawn_reaper(
    worlds: Arc<Worlds>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => worlds.reap_once().await,
                _ = shutdown.changed() => return,
            }
        }
    })
}
