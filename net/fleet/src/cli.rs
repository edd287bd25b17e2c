//! The `migratory-fleet` command line: runs one `migratory-server` process per world, on demand, with a
//! durable store. `serve` needs no config: SQLite in the data folder, world servers on
//! 127.0.0.1. Prints `listening on http://ADDR` on stdout once bound; SIGINT/SIGTERM stop
//! every world server gracefully (each ends with a final checkpoint), then the fleet.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::FleetOptions;
use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "migratory-fleet",
    version,
    about = "One Migratory world server per world, on demand"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the fleet's HTTP API until SIGINT/SIGTERM.
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address of the HTTP API (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7300", value_name = "ADDR")]
    listen: SocketAddr,
    /// Address of the routes this node's world servers call (their content, their
    /// recordings); they run on this machine, so loopback serves (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    internal_listen: SocketAddr,
    /// Recordings, logs and the default SQLite store.
    #[arg(long, default_value = "fleet-data", value_name = "DIR")]
    data_dir: PathBuf,
    /// `postgres://user@host/db` to keep the store in PostgreSQL.
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// The world server binary (default: `migratory-server` next to this one).
    #[arg(long, value_name = "FILE")]
    server_bin: Option<PathBuf>,
    /// Shards each world server steps on.
    #[arg(long, default_value_t = 1, value_name = "N")]
    shards: u32,
    /// Stop a world after this long with no players.
    #[arg(long, default_value_t = 300.0, value_name = "S")]
    idle_timeout_seconds: f64,
    /// Kill a world server not ready within this time (the join gets a 503).
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    ready_timeout_seconds: f64,
    /// Kill a world server not stopped this long after SIGTERM.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    stop_timeout_seconds: f64,
    /// How often player counts are read from the world servers.
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    poll_interval_seconds: f64,
    /// The admin token (every call): $MIGRATORY_FLEET_ADMIN_TOKEN, else the first line of
    /// this file (default: DATA_DIR/admin-token, made with a random token when missing).
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// The reader token (list, show, nodes, discovery): $MIGRATORY_FLEET_READER_TOKEN, else
    /// the first line of this file; without either there is no reader role.
    #[arg(long, value_name = "FILE")]
    reader_token_file: Option<PathBuf>,
    /// The player token (joins): $MIGRATORY_FLEET_PLAYER_TOKEN, else the first line of this
    /// file (default: DATA_DIR/player-token, made when missing).
    #[arg(long, value_name = "FILE")]
    player_token_file: Option<PathBuf>,
    /// Let joins in without a token, at most N a minute from one client address.
    #[arg(long, value_name = "N")]
    open_joins_per_minute: Option<u32>,
    /// Kill a world server whose /status goes unanswered this many polls in a row (each
    /// poll waits 1 s), so joins stop handing out its URL.
    #[arg(long, default_value_t = 3, value_name = "N")]
    health_failed_polls_max: u32,
    /// Refuse worlds whose terrain grid is wider than this many cells.
    #[arg(long, default_value_t = crate::WorldLimits::default().terrain_grid_cells_max, value_name = "N")]
    world_terrain_cells_max: u32,
    /// Refuse worlds with more boids than this.
    #[arg(long, default_value_t = crate::WorldLimits::default().boid_count_max, value_name = "N")]
    world_boids_max: u32,
    /// This node's id among the nodes sharing the store (default: the host name).
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
    /// The host clients reach this node's world servers at (every ws_url's host).
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    advertise_host: String,
    /// The address world servers listen on (0.0.0.0 in deployments, with --advertise-host).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    world_bind: std::net::IpAddr,
    /// The address the replay viewers of worlds' histories listen on (they have no login:
    /// keep it loopback unless a proxy in front checks who asks).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    history_view_bind: std::net::IpAddr,
    /// A node that has not renewed its lease in the store for this long is presumed dead:
    /// the next join of one of its worlds on another node takes it over.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    lease_seconds: f64,
    /// With PostgreSQL, how often world servers ship their recordings to the store (a
    /// machine that dies loses at most this much more than the last recorded block).
    #[arg(long, default_value_t = 0.25, value_name = "S")]
    ship_interval_seconds: f64,
    /// Refuse worlds with more client slots than this.
    #[arg(long, default_value_t = crate::WorldLimits::default().client_slots_max, value_name = "N")]
    world_clients_max: u32,
    /// Refuse worlds whose estimated tick takes more than this share of the tick.
    #[arg(long, default_value_t = crate::TickCostModel::default().budget_percent, value_name = "PERCENT")]
    tick_budget_percent: u32,
    /// The cost model: microseconds a boid costs a tick on this node.
    #[arg(long, default_value_t = crate::TickCostModel::default().us_per_boid, value_name = "US")]
    tick_cost_us_per_boid: f64,
    /// The cost model: microseconds a client slot costs a tick on this node.
    #[arg(long, default_value_t = crate::TickCostModel::default().us_per_client, value_name = "US")]
    tick_cost_us_per_client: f64,
    /// Run at most this many world servers at once (a join that would start one more is a 503).
    #[arg(long, default_value_t = crate::WorldLimits::default().worlds_running_max, value_name = "N")]
    worlds_running_max: u32,
    /// Where world servers come from: `process` (forked here) or `agones` (allocated from
    /// an Agones Fleet through the Kubernetes API; needs --database-url and --agones-fleet-url).
    #[arg(long, default_value = "process", value_parser = ["process", "agones"])]
    allocator: String,
    /// The Kubernetes API over plain HTTP (a `kubectl proxy` sidecar).
    #[arg(long, default_value = "http://127.0.0.1:8001", value_name = "URL")]
    agones_api_url: String,
    /// The namespace of the Agones Fleet.
    #[arg(long, default_value = "default", value_name = "NS")]
    agones_namespace: String,
    /// The Agones Fleet whose GameServers serve worlds.
    #[arg(long, default_value = "migratory", value_name = "NAME")]
    agones_fleet: String,
    /// This node's internal routes as the GameServers reach them (e.g. http://fleet-a:7301,
    /// with --internal-listen 0.0.0.0:7301).
    #[arg(long, value_name = "URL")]
    agones_fleet_url: Option<String>,
}

fn seconds(name: &str, v: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        v.is_finite() && v > 0.0 && v <= 86_400.0,
        "--{name} must be a number of seconds in (0, 86400], not {v}"
    );
    Ok(Duration::from_secs_f64(v))
}

fn options(args: ServeArgs) -> anyhow::Result<FleetOptions> {
    let mut o = FleetOptions::new(args.listen, args.data_dir);
    o.internal_listen = args.internal_listen;
    o.database_url = args.database_url;
    anyhow::ensure!(
        args.open_joins_per_minute.is_none_or(|n| n >= 1),
        "--open-joins-per-minute must be at least 1"
    );
    o.tokens = crate::TokenSources {
        admin_file: args.admin_token_file,
        reader_file: args.reader_token_file,
        player_file: args.player_token_file,
        open_joins_per_minute: args.open_joins_per_minute,
    };
    anyhow::ensure!(
        args.health_failed_polls_max >= 1,
        "--health-failed-polls-max must be at least 1"
    );
    o.health_failed_polls_max = args.health_failed_polls_max;
    if let Some(bin) = args.server_bin {
        o.server_bin = bin;
    }
    anyhow::ensure!((1..=256).contains(&args.shards), "--shards must be 1 to 256");
    o.shards = args.shards;
    o.idle_timeout = seconds("idle-timeout-seconds", args.idle_timeout_seconds)?;
    o.ready_timeout = seconds("ready-timeout-seconds", args.ready_timeout_seconds)?;
    o.stop_timeout = seconds("stop-timeout-seconds", args.stop_timeout_seconds)?;
    o.poll_interval = seconds("poll-interval-seconds", args.poll_interval_seconds)?;
    anyhow::ensure!(
        args.worlds_running_max >= 1,
        "--worlds-running-max must be at least 1"
    );
    if let Some(id) = args.node_id {
        crate::validate_world_id(&id)
            .map_err(|_| anyhow::anyhow!("--node-id `{id}` must be 1 to 64 of a-z, 0-9, '-' and '_'"))?;
        o.node_id = id;
    }
    anyhow::ensure!(
        !args.advertise_host.is_empty() && !args.advertise_host.contains(['/', '@', ' ', '?', '#']),
        "--advertise-host must be a host name or address, not `{}`",
        args.advertise_host
    );
    anyhow::ensure!(
        args.world_bind.is_loopback() || args.advertise_host != "127.0.0.1",
        "--world-bind {} lets other machines connect, but --advertise-host is still 127.0.0.1: \
         give the host they reach this machine at",
        args.world_bind
    );
    o.advertise_host = args.advertise_host;
    o.world_bind = args.world_bind;
    o.history_view_bind = args.history_view_bind;
    anyhow::ensure!(
        args.lease_seconds >= 1.0 && args.lease_seconds <= crate::options::LEASE_SECONDS_MAX,
        "--lease-seconds must be 1 to {}, not {}",
        crate::options::LEASE_SECONDS_MAX,
        args.lease_seconds
    );
    o.lease = Duration::from_secs_f64(args.lease_seconds);
    o.ship_interval = seconds("ship-interval-seconds", args.ship_interval_seconds)?;
    if args.allocator == "agones" {
        anyhow::ensure!(
            o.database_url.is_some(),
            "--allocator agones needs --database-url: an allocated server shares no disk with this node, so its segments live in the store"
        );
        let Some(fleet_url) = args.agones_fleet_url else {
            anyhow::bail!("--allocator agones needs --agones-fleet-url: where the GameServers reach this node's internal routes");
        };
        o.agones = Some(crate::agones::AgonesOptions {
            api_url: args.agones_api_url,
            namespace: args.agones_namespace,
            fleet: args.agones_fleet,
            fleet_url,
        });
    }
    anyhow::ensure!(
        (1..=1000).contains(&args.tick_budget_percent),
        "--tick-budget-percent must be 1 to 1000"
    );
    for (name, v) in [
        ("tick-cost-us-per-boid", args.tick_cost_us_per_boid),
        ("tick-cost-us-per-client", args.tick_cost_us_per_client),
    ] {
        anyhow::ensure!(
            v.is_finite() && v >= 0.0,
            "--{name} must be a number of microseconds, not {v}"
        );
    }
    o.limits = crate::WorldLimits {
        terrain_grid_cells_max: args.world_terrain_cells_max,
        boid_count_max: args.world_boids_max,
        client_slots_max: args.world_clients_max,
        worlds_running_max: args.worlds_running_max,
        tick_cost: crate::TickCostModel {
            us_per_boid: args.tick_cost_us_per_boid,
            us_per_client: args.tick_cost_us_per_client,
            budget_percent: args.tick_budget_percent,
        },
    };
    Ok(o)
}

/// The command line, parsed and run: what `main` of the binary does.
pub fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    let options = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour only on a terminal: a log file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .try_init();
    match run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(options: FleetOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fleet-io")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let handle = crate::start(options).await?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}",
                migratory_wire::fleet::ready_line(&format!("http://{}", handle.local_addr()))
            )?;
            writeln!(out, "internal routes on http://{}", handle.internal_addr())?;
            out.flush()?;
        }
        let stop = handle.stopper();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) =
                (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
            else {
                return;
            };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = int.recv() => tracing::info!("SIGINT"),
            }
            stop.notify_one();
        });
        handle.wait().await?;
        Ok(())
    })
}
