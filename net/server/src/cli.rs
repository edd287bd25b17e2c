//! `migratory-server`: runs a live world. `serve` starts it with the embedded defaults,
//! `--config FILE` (TOML) overrides them, and the flags override both.
//!
//! Prints `listening on ws://ADDR/ws` on stdout once the port is bound. SIGINT/SIGTERM
//! stop it cleanly (clients closed with 1001, recording finished, exit 0). A bad config
//! prints `error: ...` naming the key and exits with status 2.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::{ConfigError, ServerConfig, DEFAULT_CONFIG_TOML};
use crate::{ServeOptions, ServerError};
use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "migratory-server", version, about = "Migratory's live world server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a world and serve it over WebSocket until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Print the default configuration (every key) as TOML.
    DefaultConfig,
    /// Open the browser viewer on a recording: runs `migratory-replay view` (the replay
    /// viewer is the replay tools', so this server links none of them) with these
    /// arguments, found beside this binary, at MIGRATORY_REPLAY_BIN, or on PATH.
    View {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML file read over the embedded defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (`server.listen`); port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Kernel shards (`server.shards`; 0: one per CPU, at most 2).
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// Folder for the session recording (`server.recording.dir`).
    #[arg(long, value_name = "DIR")]
    record_dir: Option<PathBuf>,
    /// Do not record this session (`server.recording.enabled = false`).
    #[arg(long)]
    no_record: bool,
    /// Stop by itself after this many ticks (benchmarks, corpus recordings).
    #[arg(long, value_name = "TICKS")]
    run_ticks: Option<u64>,
    /// Resume the world from this earlier session's recording (at its last durable tick,
    /// checked against the recorded root) instead of starting it fresh.
    #[arg(long, value_name = "REC")]
    resume_from: Option<PathBuf>,
    /// Started by a fleet: read this world's content from the fleet at URL, with the token
    /// given as the first line of stdin.
    #[arg(long, value_name = "URL", requires = "world_id")]
    fleet_url: Option<String>,
    /// The world to read from the fleet.
    #[arg(long, value_name = "ID", requires = "fleet_url")]
    world_id: Option<String>,
}

/// The command line, parsed and run: what `main` of the binary does.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::DefaultConfig => {
            print!("{DEFAULT_CONFIG_TOML}");
            ExitCode::SUCCESS
        }
        Command::View { args } => {
            let e = replay_view(&args);
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Command::Serve(mut args) => {
            let mut config = match load_config(&args) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut ship = None;
            if let (Some(url), Some(world)) = (args.fleet_url.clone(), args.world_id.clone()) {
                match apply_fleet_content(&mut config, &mut args, &url, &world) {
                    Ok(s) => ship = s,
                    Err(e) => {
                        eprintln!("error: {e:#}");
                        return ExitCode::from(2);
                    }
                }
            }
            match serve(config, &args, ship) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    // A world or terrain the config describes but that cannot be built is a
                    // config error too; I/O failures (bind, recording) are not.
                    let config_error = e.downcast_ref::<ServerError>().is_some_and(|e| {
                        matches!(
                            e,
                            ServerError::Config(_) | ServerError::World(_) | ServerError::Terrain(_)
                        )
                    });
                    ExitCode::from(if config_error { 2 } else { 1 })
                }
            }
        }
    }
}

fn load_config(args: &ServeArgs) -> Result<ServerConfig, ConfigError> {
    let mut config = match &args.config {
        Some(path) => ServerConfig::from_file(path)?,
        None => ServerConfig::default(),
    };
    if let Some(listen) = &args.listen {
        config.server.listen = listen.clone();
    }
    if let Some(shards) = args.shards {
        config.server.shards = shards;
    }
    if let Some(dir) = &args.record_dir {
        config.server.recording.dir = dir.clone();
    }
    if args.no_record {
        config.server.recording.enabled = false;
    }
    // Flags are checked like file values, naming the key they set.
    config.validate()?;
    Ok(config)
}

/// Reads this world's content from the fleet (the token is stdin's first line) and
/// applies it: the world config, the recording folder, the segment to resume from. Returns
/// where to ship the recording, when the fleet's store keeps it.
fn apply_fleet_content(
    config: &mut ServerConfig,
    args: &mut ServeArgs,
    url: &str,
    world: &str,
) -> anyhow::Result<Option<crate::ship::ShipTarget>> {
    let mut token = String::new();
    std::io::stdin()
        .read_line(&mut token)
        .context("reading the fleet token from stdin")?;
    let token = token.trim();
    anyhow::ensure!(!token.is_empty(), "no fleet token on stdin");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (resume_from, ship) = runtime.block_on(load_fleet_world(config, url, world, token, true))?;
    args.resume_from = resume_from;
    Ok(ship)
}

/// Reads world `world`'s content from the fleet at `url` with `token` and applies it to
/// `config`: the world, the recording's block length, and (with `shared_disk`, a child of
/// the fleet's own node) its recording folder. Returns the segment to resume from (an
/// allocated GameServer, which shares no disk with the fleet, downloads it and its reclaim
/// file into its own recording folder) and where to ship the recording.
async fn load_fleet_world(
    config: &mut ServerConfig,
    url: &str,
    world: &str,
    token: &str,
    shared_disk: bool,
) -> anyhow::Result<(Option<PathBuf>, Option<crate::ship::ShipTarget>)> {
    use migratory_http as http;
    use migratory_wire::fleet::{content_url, reclaim_path, resume_reclaim_url, resume_url, WorldContent};
    let get = |target: String| {
        http::Request::new(http::Method::GET, target)
            .bearer(token.to_string())
            .timeout(std::time::Duration::from_secs(60))
            .send()
    };
    let response = get(content_url(url, world))
        .await
        .context("reading the world's content from the fleet")?;
    anyhow::ensure!(
        response.is_success(),
        "the fleet refused world `{world}`'s content: {} {}",
        response.status,
        response.text().trim()
    );
    let content: WorldContent = response.json().context("the fleet's world content")?;
    anyhow::ensure!(
        content.world_id == world,
        "the fleet sent world `{}`, not `{world}`",
        content.world_id
    );
    config.world = serde_json::from_value(content.config).context("the fleet's world config")?;
    if shared_disk {
        config.server.recording.dir = content.record_dir;
    }
    if let Some(ticks) = content.record_block_ticks {
        config.server.recording.block_ticks = ticks;
    }
    config.validate()?;
    let ship = content.ship_interval_ms.map(|ms| crate::ship::ShipTarget {
        fleet_url: url.to_string(),
        world_id: world.to_string(),
        token: token.to_string(),
        interval: std::time::Duration::from_millis(ms.max(1)),
        deadline: content.ship_deadline_ms.map(std::time::Duration::from_millis),
    });
    if shared_disk || content.resume_from.is_none() {
        return Ok((content.resume_from, ship));
    }
    // No shared disk: the segment comes over the wire, into this server's folder.
    let dir = &config.server.recording.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("resume-{world}.mrec"));
    for (target, file) in [
        (resume_url(url, world), path.clone()),
        (resume_reclaim_url(url, world), reclaim_path(&path)),
    ] {
        let r = get(target)
            .await
            .context("reading the segment to resume from the fleet")?;
        anyhow::ensure!(
            r.is_success(),
            "the fleet refused world `{world}`'s segment: {} {}",
            r.status,
            r.text().trim()
        );
        if r.status != 204 {
            std::fs::write(&file, &r.body).with_context(|| format!("writing {}", file.display()))?;
        }
    }
    Ok((Some(path), ship))
}

fn debug_enabled() -> bool {
    std::env::var("MIGRATORY_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn init_logging(debug: bool) {
    let default = if debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Logs go to stderr: stdout carries only the lines tools parse. A failed log write is
    // dropped, not reported on stderr: when a supervisor that read our output dies, the
    // report itself would panic (stderr is the broken pipe) and turn a clean shutdown
    // into an abrupt one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour only on a terminal: a fleet writes a world server's stderr to a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .try_init();
}

fn serve(
    config: ServerConfig,
    args: &ServeArgs,
    ship: Option<crate::ship::ShipTarget>,
) -> anyhow::Result<()> {
    // Under Agones (its sidecar sets the port), the server speaks its SDK.
    let agones = crate::agones::sdk_port_from_env()
        .map_err(|e| {
            ServerError::Config(crate::config::ConfigError::Invalid {
                key: crate::agones::SDK_PORT_ENV.to_string(),
                reason: e.to_string(),
            })
        })?
        .map(|port| (port, config.server.agones.clone()));
    raise_open_file_limit(config.server.connections_max);
    return_large_blocks();
    let debug = debug_enabled();
    init_logging(debug);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.server.io_threads > 0 {
        runtime.worker_threads(config.server.io_threads as usize);
    }
    let runtime = runtime
        .enable_all()
        .thread_name("migratory-io")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let options = ServeOptions {
            debug,
            run_ticks: args.run_ticks,
            resume_from: args.resume_from.clone(),
            ship,
            phase: None,
        };
        // Signals are taken from the start. While the world is being built there is
        // nothing to stop gracefully (`StartPhase`: no recording, no client, no tick yet),
        // so SIGTERM or SIGINT ends the process at once: a supervisor (Agones, a fleet, an
        // init system) stopping a server that is still loading must not wait for the
        // load. From the moment `start` goes past the build, a signal starts the graceful
        // shutdown instead.
        let phase = Arc::new(crate::StartPhase::default());
        let (signalled_tx, mut signalled) = tokio::sync::watch::channel(None);
        tokio::spawn({
            let phase = phase.clone();
            async move {
                match wait_for_signal().await {
                    Ok(signal) if phase.abandon() => {
                        tracing::info!(signal, "stopped while the world was being built");
                        // 128 + the signal, as a shell reports a process ended by it.
                        std::process::exit(128 + signal);
                    }
                    Ok(signal) => {
                        let _ = signalled_tx.send(Some(signal));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "no signal handling");
                        // Keep the channel open: no signal is not a signal.
                        std::future::pending::<()>().await;
                    }
                }
            }
        });
        // Under Agones, health from process start: a big world takes a while to build.
        let health = agones
            .as_ref()
            .map(|(port, settings)| crate::agones::spawn_health(*port, settings));
        let mut options = ServeOptions {
            phase: Some(phase),
            ..options
        };
        let mut config = config;
        // A spare in a fleet's pool: the world to serve comes with the allocation.
        if let Some((port, settings)) = agones.as_ref().filter(|(_, s)| s.await_allocation) {
            let a = crate::agones::await_allocation(*port, settings).await?;
            let (resume_from, ship) =
                load_fleet_world(&mut config, &a.fleet_url, &a.world_id, &a.token, false)
                    .await
                    .with_context(|| format!("loading world `{}` from the fleet", a.world_id))?;
            options.resume_from = resume_from;
            options.ship = ship;
        }
        let handle = crate::start(config, options).await?;
        say(&migratory_wire::fleet::ready_line(&handle.ws_url()));
        if let Some(p) = handle.recording_path() {
            say(&format!("recording to {}", p.display()));
        }
        let sdk_task = agones
            .as_ref()
            .map(|(port, settings)| crate::agones::spawn(&handle, *port, settings));
        let stopper = handle.stopper();
        let wait = handle.wait();
        tokio::pin!(wait);
        let report = tokio::select! {
            // `--run-ticks`: the server stops by itself.
            r = &mut wait => r?,
            Ok(()) = signalled.changed() => {
                // SIGUSR1: the fleet moves the world; clients are sent back through it.
                if *signalled.borrow() == Some(libc::SIGUSR1) {
                    stopper.stop_moving();
                } else {
                    stopper.stop();
                }
                wait.await?
            }
        };
        if let Some(h) = health {
            h.abort();
        }
        if let Some(t) = sdk_task {
            // Finished with an error (Ready never accepted) is why the server stopped.
            if t.is_finished() {
                if let Ok(Err(e)) = t.await {
                    anyhow::bail!("under Agones: {e}");
                }
            } else {
                t.abort();
            }
        }
        if let Some(reason) = &report.fenced {
            anyhow::bail!(
                "fenced: {reason}; this server's clients were told to join again through the fleet"
            );
        }
        if let Some(e) = &report.tick.recording_error {
            anyhow::bail!("the recording failed: {e}");
        }
        say(&format!(
            "stopped after {} ticks (tick {}), final root {}",
            report.tick.ticks,
            report.tick.final_tick,
            migratory_kernel::hex(&report.tick.final_root)
        ));
        Ok(())
    })
}

/// A line on stdout for the tools that read it. Nobody reading (a closed pipe: the fleet
/// that started us is gone) does not stop the server.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        tracing::warn!(error = %e, line, "stdout is gone; line dropped");
    }
}

/// Where `migratory-replay` is: MIGRATORY_REPLAY_BIN, else beside this binary when it is
/// there (a workspace build puts every program in one folder), else PATH's.
fn replay_bin() -> std::ffi::OsString {
    if let Some(bin) = std::env::var_os("MIGRATORY_REPLAY_BIN") {
        return bin;
    }
    std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("migratory-replay"))
        .filter(|p| p.is_file())
        .map_or_else(|| "migratory-replay".into(), PathBuf::into_os_string)
}

/// Becomes `migratory-replay view ARGS` (the same process, so its signals and exit status
/// are the viewer's); returns only when that could not start.
fn replay_view(args: &[std::ffi::OsString]) -> String {
    use std::os::unix::process::CommandExt as _;
    let bin = replay_bin();
    let e = std::process::Command::new(&bin).arg("view").args(args).exec();
    format!(
        "the replay viewer is `migratory-replay view`, and running {} failed: {e} (build it with \
         `cargo build --release -p migratory-replay`, or run `cargo run --release -p migratory-replay -- view ...`)",
        std::path::Path::new(&bin).display()
    )
}

/// Waits for SIGTERM, SIGINT or SIGUSR1 (a graceful stop for a move: clients are closed
/// with REJOIN); returns its number.
async fn wait_for_signal() -> anyhow::Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut usr1 = signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?;
    Ok(tokio::select! {
        _ = usr1.recv() => {
            tracing::info!("SIGUSR1: stopping for a move");
            libc::SIGUSR1
        }
        _ = term.recv() => {
            tracing::info!("SIGTERM");
            libc::SIGTERM
        }
        _ = int.recv() => {
            tracing::info!("SIGINT");
            libc::SIGINT
        }
    })
}

/// Raises the soft open-file limit towards the hard one, so `server.connections_max`
/// connections fit (each is a descriptor); says so when the hard limit is too low.
#[cfg(target_os = "linux")]
#[allow(clippy::unnecessary_cast, reason = "rlim_t is not u64 on every Linux target")]
fn raise_open_file_limit(connections_max: u32) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 };
    if !ok {
        return;
    }
    // Room for the connections plus the recording, the listener and the runtime.
    let wanted = (u64::from(connections_max) + 256).min(rl.rlim_max as u64);
    if (rl.rlim_cur as u64) < wanted {
        rl.rlim_cur = wanted as libc::rlim_t;
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) };
    }
    if (rl.rlim_max as u64) < u64::from(connections_max) + 256 {
        tracing::warn!(
            hard_limit = rl.rlim_max as u64,
            connections_max,
            "the open-file limit is below server.connections_max; connections beyond it fail at accept"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn raise_open_file_limit(_connections_max: u32) {}

/// Blocks of 1 MiB and more (a checkpoint's bytes, its compressed copy) come from their own
/// mappings, returned on free. glibc's default moves that threshold up to the largest
/// block freed, after which each checkpoint's buffers came from the heap and stayed: RSS
/// rose in steps of ~300 KiB for a minute of a 1,000-client world (1.2 % over a
/// 10-minute hold, where the heap otherwise drifted 0.2 %).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_large_blocks() {
    // SAFETY: mallopt only sets an allocator parameter; called before other threads start.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_large_blocks() {}
