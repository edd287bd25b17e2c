//! Starting a fleet node: open the store, register the node, reconcile the store with the
//! processes that exist, bind, then serve the API, run the idle reaper and renew the
//! lease until stopped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::api;
use crate::auth::Auth;
use crate::error::{io_err, FleetError};
use crate::fleet::Fleet;
use crate::node::{self, Node};
use crate::options::FleetOptions;
use crate::process::Spawner;
use crate::store::Store;

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
    let fleet = Arc::new(Fleet {
        store,
        url: format!("http://{internal_addr}"),
        spawner: Spawner::start().map_err(io_err("starting the spawner thread"))?,
        options,
        slots: Mutex::new(BTreeMap::new()),
        tokens: Mutex::new(Vec::new()),
        generation: AtomicU64::new(0),
        node,
        metrics: crate::metrics::FleetMetrics::new(),
        views: tokio::sync::Mutex::new(BTreeMap::new()),
    });
    fleet.reconcile().await?;
    let stop = Arc::new(Notify::new());
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let reaper = {
        let fleet = fleet.clone();
        let mut shutdown = shutdown_rx.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(fleet.options.poll_interval);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => fleet.reap_once().await,
                    _ = shutdown.changed() => return,
                }
            }
        })
    };
    let adopter = crate::moving::spawn_adopter(fleet.clone(), shutdown_rx.clone());
    let heartbeat = node::spawn_heartbeat(
        fleet.store.clone(),
        fleet.node.clone(),
        stop.clone(),
        shutdown_rx.clone(),
    );
    let app = api::router(fleet.clone(), Arc::new(auth));
    let internal_app = api::internal_router(fleet.clone());
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
        let ids: Vec<String> = fleet
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        // All at once: each waits for its own server's final checkpoint.
        let stops = ids.iter().map(|id| {
            let fleet = fleet.clone();
            async move {
                if let Err(e) = fleet.stop(id).await {
                    tracing::error!(world = %id, error = %e, "stopping a world failed");
                }
            }
        });
        futures_util::future::join_all(stops).await;
        let _ = internal_stop_tx.send(true);
        heartbeat.abort();
        adopter.abort();
        // Its worlds are given up already; ending the lease lets other nodes see at once
        // that this one is gone.
        if let Err(e) = fleet.store.leave(&fleet.node.id, &fleet.node.incarnation).await {
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
