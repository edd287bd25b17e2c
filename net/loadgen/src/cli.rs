//! `migratory-bots`: a load generator. N WebSocket bots join a running `migratory-server`
//! and play (walkers, town bots, hunters), decoding every snapshot, sending one INPUT_ACK
//! per snapshot and a PING a second, then print one JSON line: joins, snapshots,
//! bytes/s per client (mean, p95), RTT (p50, p99), drops, decode errors, and, when the
//! server's `/metrics` is reachable, its tick loop figures.
//!
//! `migratory-bots soak --steps A,B,.. --step-seconds S --hold-seconds H --out DIR` ramps
//! the bots in steps, holds, and writes `metrics.json`, `chart.png` and `summary.txt`; it
//! exits 1 when a threshold fails.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use migratory_http as http;
use migratory_wire::metric;

use crate::behaviour::BotMix;
use crate::bots::{self, BotOptions};
use crate::soak;

#[derive(Debug, Parser)]
#[command(
    name = "migratory-bots",
    version,
    about = "Bot load generator for migratory-server"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The server's WebSocket URL.
    #[arg(long, global = true, default_value = "ws://127.0.0.1:7400/ws")]
    url: String,
    /// Number of bots.
    #[arg(long, global = true, default_value_t = 10)]
    clients: u32,
    /// How long to run, in seconds.
    #[arg(long, global = true, default_value_t = 10.0)]
    seconds: f64,
    /// Tokio tasks (and runtime threads, at most 4) the bots share.
    #[arg(long, global = true, default_value_t = 2)]
    tasks: u32,
    /// Percent of the bots that stop reading once they have joined (to be evicted).
    #[arg(long, global = true, default_value_t = 0)]
    stall_percent: u32,
    /// Each bot leaves after this many seconds and reconnects at once, naming its cached
    /// terrain in HELLO (the report counts reconnects and the terrain bytes they got).
    #[arg(long, global = true)]
    session_seconds: Option<f64>,
    /// Percent of the bots that stay in the town.
    #[arg(long, global = true, default_value_t = 25)]
    town_percent: u32,
    /// Percent of the bots that hunt in a field.
    #[arg(long, global = true, default_value_t = 50)]
    field_percent: u32,
    /// Seconds between PINGs per bot.
    #[arg(long, global = true, default_value_t = 1.0)]
    ping_seconds: f64,
    /// Answer each snapshot this far (percent) into the snapshot interval; 0 answers at
    /// once. Half an interval lets the server's delayed ACK ride on its next snapshot.
    #[arg(long, global = true, default_value_t = crate::bots::REPLY_AFTER_PERCENT_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    reply_after_percent: u32,
    /// Spread the connects over this many seconds.
    #[arg(long, global = true, default_value_t = 1.0)]
    connect_spread_seconds: f64,
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Connect but never send HELLO (measures a bare connection's cost; raise the server's
    /// `hello_timeout_seconds` above the run's length).
    #[arg(long, global = true)]
    no_hello: bool,
    /// Do not read the server's /metrics at the end.
    #[arg(long, global = true)]
    no_server_metrics: bool,
    /// Join through this fleet node (`http://HOST:PORT`) instead of `--url`: each
    /// connection asks the fleet for the world's server, so the bots follow a move. The
    /// token comes from MIGRATORY_FLEET_PLAYER_TOKEN (or _ADMIN_TOKEN) when set.
    #[arg(long, global = true, requires = "world")]
    fleet: Option<String>,
    /// The fleet world to join (with `--fleet`).
    #[arg(long, global = true)]
    world: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Stepped ramp, then a hold; writes metrics.json, chart.png and summary.txt to --out.
    Soak {
        /// Bots at the end of each ramp step.
        #[arg(long, value_delimiter = ',', default_value = "100,250,500,1000")]
        steps: Vec<u32>,
        #[arg(long, default_value_t = 30.0)]
        step_seconds: f64,
        #[arg(long, default_value_t = 600.0)]
        hold_seconds: f64,
        /// Output folder (created).
        #[arg(long)]
        out: std::path::PathBuf,
        /// A TOML file with a [thresholds] table (loop_p99_ms, avg_downstream_bytes_per_s,
        /// hard_cap_bytes_per_s, memory_drift_percent); missing keys keep the defaults.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Move the world to another fleet node every this many seconds (with --fleet and
        /// --world; the admin token from MIGRATORY_FLEET_ADMIN_TOKEN): the bots follow,
        /// metrics.json gets each move and the pause distribution, the chart marks moves.
        #[arg(long)]
        move_every: Option<f64>,
    },
    /// The system CPU floor: the segments --clients players cost a server (one message down
    /// per snapshot interval, one reply up), moved with no game, WebSocket or runtime for
    /// --seconds; prints each side's user and system CPU per tick as one JSON line.
    Floor {
        #[arg(long, default_value_t = 60)]
        tick_rate_hz: u32,
        /// Ticks between two messages to one client.
        #[arg(long, default_value_t = 3)]
        interval_ticks: u32,
        /// Bytes of each message down (the soak's mean snapshot is about 140).
        #[arg(long, default_value_t = 140)]
        down_bytes: u32,
        /// Bytes of each reply (an INPUT_ACK frame is 24).
        #[arg(long, default_value_t = 24)]
        up_bytes: u32,
    },
    /// Draw each soak folder's chart.png again from its metrics.json (as the soak drew it).
    Chart {
        /// Soak output folders.
        #[arg(required = true)]
        dirs: Vec<std::path::PathBuf>,
    },
    /// Print, as a Markdown table, the figures of soaks already run, recomputed from each
    /// folder's metrics.json (hold medians, the 99th-percentile second, RTT, RSS, drift).
    Figures {
        /// Soak output folders.
        #[arg(required = true)]
        dirs: Vec<std::path::PathBuf>,
    },
}

fn seconds(what: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).with_context(|| format!("--{what} must be a non-negative number, is {v}"))
}

/// The command line, parsed and run: what `main` of the binary does.
pub fn main() -> std::process::ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<std::process::ExitCode> {
    let args = Args::parse();
    if let Some(Command::Chart { dirs }) = &args.command {
        for dir in dirs {
            crate::chart::redraw(dir)?;
            println!("{}", dir.join("chart.png").display());
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if let Some(Command::Figures { dirs }) = &args.command {
        println!("{}", crate::figures::HEADER);
        for dir in dirs {
            println!("{}", crate::figures::row(dir)?);
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if let Some(Command::Floor {
        tick_rate_hz,
        interval_ticks,
        down_bytes,
        up_bytes,
    }) = &args.command
    {
        // Out-of-range counts are refused by `check_options`, naming the flags.
        anyhow::ensure!(
            args.seconds.is_finite() && args.seconds > 0.0,
            "--seconds must be a positive number, is {}",
            args.seconds
        );
        let ticks = (args.seconds * f64::from(*tick_rate_hz))
            .round()
            .min(f64::from(u32::MAX)) as u32;
        let o = crate::floor::FloorOptions {
            clients: args.clients,
            ticks,
            tick_rate_hz: *tick_rate_hz,
            interval_ticks: *interval_ticks,
            down_bytes: *down_bytes,
            up_bytes: *up_bytes,
            reply_after_percent: args.reply_after_percent,
        };
        let report = crate::floor::run(&o)?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let options = BotOptions {
        url: args.url.clone(),
        clients: args.clients,
        duration: seconds("seconds", args.seconds)?,
        tasks: args.tasks.max(1),
        ping_interval: seconds("ping-seconds", args.ping_seconds.max(0.001))?,
        reply_after_percent: args.reply_after_percent,
        connect_spread: seconds("connect-spread-seconds", args.connect_spread_seconds)?,
        seed: args.seed,
        hello: !args.no_hello,
        mix: BotMix {
            town_percent: args.town_percent,
            field_percent: args.field_percent,
            ..BotMix::default()
        },
        stall_percent: args.stall_percent,
        session: args
            .session_seconds
            .map(|s| {
                anyhow::ensure!(s > 0.0, "--session-seconds must be above 0, is {s}");
                seconds("session-seconds", s)
            })
            .transpose()?,
        fleet: match (&args.fleet, &args.world) {
            (Some(url), Some(world)) => Some(bots::FleetTarget {
                url: url.clone(),
                world: world.clone(),
                token: std::env::var("MIGRATORY_FLEET_PLAYER_TOKEN")
                    .or_else(|_| std::env::var("MIGRATORY_FLEET_ADMIN_TOKEN"))
                    .ok(),
            }),
            _ => None,
        },
    };
    if args.town_percent + args.field_percent > 100 || args.stall_percent > 100 {
        anyhow::bail!("--town-percent plus --field-percent, and --stall-percent, must be at most 100");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.tasks.clamp(1, 4) as usize)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if let Some(Command::Soak {
        steps,
        step_seconds,
        hold_seconds,
        out,
        config,
        move_every,
    }) = args.command
    {
        let thresholds = match &config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                soak::thresholds_from_toml(&text).with_context(|| format!("{}", path.display()))?
            }
            None => soak::Thresholds::default(),
        };
        let soak_options = soak::SoakOptions {
            bots: options,
            steps,
            step_seconds,
            hold_seconds,
            out,
            thresholds,
            move_every: move_every.map(|s| seconds("move-every", s)).transpose()?,
            admin_token: std::env::var("MIGRATORY_FLEET_ADMIN_TOKEN").ok(),
        };
        let report = runtime.block_on(soak::run(&soak_options))?;
        let summary = std::fs::read_to_string(soak_options.out.join("summary.txt")).unwrap_or_default();
        print!("{summary}");
        return Ok(if report.pass {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::from(1)
        });
    }
    runtime.block_on(async {
        let report = bots::run(&options).await;
        let mut json = serde_json::to_value(&report).expect("a report of plain numbers serializes");
        if !args.no_server_metrics {
            if let Some(host) = bots::host_of(&args.url) {
                if let Ok(r) = http::get(&format!("http://{host}/metrics")).await {
                    let text = r.text();
                    let q = |m: metric::Metric, labels: &str| m.read(&text, labels);
                    let ms = |m: metric::Metric, labels: &str| q(m, labels).map(|s| s * 1e3);
                    json["server"] = serde_json::json!({
                        "ticks": q(metric::TICKS_TOTAL, ""),
                        "loop_p50_ms": ms(metric::TICK_LOOP_SECONDS, metric::P50),
                        "loop_p99_ms": ms(metric::TICK_LOOP_SECONDS, metric::P99),
                        "loop_max_ms": ms(metric::TICK_LOOP_SECONDS, metric::MAX),
                        "step_p99_ms": ms(metric::TICK_PHASE_SECONDS, &metric::phase_quantile("step", "0.99")),
                        "overruns": q(metric::TICK_OVERRUNS_TOTAL, ""),
                        "skipped": q(metric::TICKS_SKIPPED_TOTAL, ""),
                        "state_updates_dropped": q(metric::STATE_UPDATES_DROPPED_TOTAL, ""),
                        "evictions": q(metric::EVICTIONS_TOTAL, ""),
                        "clients": q(metric::CLIENTS, ""),
                    });
                }
            }
        }
        println!("{json}");
    });
    Ok(std::process::ExitCode::SUCCESS)
}
