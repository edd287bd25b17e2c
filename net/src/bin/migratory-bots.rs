//! `migratory-bots`: a load generator. N WebSocket bots over a few tokio tasks join a
//! running `migratory-server`, steer, ack every snapshot and PING once a second, then print
//! one JSON line: joins, snapshots, bytes/s per client (mean, p95), RTT (p50, p99), drops,
//! and, when the server's `/metrics` is reachable, its tick loop figures.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use migratory_net::client::bots::{self, BotOptions};
use migratory_net::server::metrics::sample;

#[derive(Debug, Parser)]
#[command(
    name = "migratory-bots",
    version,
    about = "Bot load generator for migratory-server"
)]
struct Args {
    /// The server's WebSocket URL.
    #[arg(long, default_value = "ws://127.0.0.1:7400/ws")]
    url: String,
    /// Number of bots.
    #[arg(long, default_value_t = 10)]
    clients: u32,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Tokio tasks (and runtime threads, at most 4) the bots share.
    #[arg(long, default_value_t = 2)]
    tasks: u32,
    /// INPUT messages per second per bot.
    #[arg(long, default_value_t = 10)]
    input_hz: u32,
    /// Seconds between PINGs per bot.
    #[arg(long, default_value_t = 1.0)]
    ping_seconds: f64,
    /// Spread the connects over this many seconds.
    #[arg(long, default_value_t = 1.0)]
    connect_spread_seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Connect but never send HELLO (measures a bare connection's cost; raise the server's
    /// `hello_timeout_seconds` above the run's length).
    #[arg(long)]
    no_hello: bool,
    /// Do not read the server's /metrics at the end.
    #[arg(long)]
    no_server_metrics: bool,
}

fn seconds(what: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).with_context(|| format!("--{what} must be a non-negative number, is {v}"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let options = BotOptions {
        url: args.url.clone(),
        clients: args.clients,
        duration: seconds("seconds", args.seconds)?,
        tasks: args.tasks.max(1),
        input_hz: args.input_hz,
        ping_interval: seconds("ping-seconds", args.ping_seconds.max(0.001))?,
        connect_spread: seconds("connect-spread-seconds", args.connect_spread_seconds)?,
        seed: args.seed,
        hello: !args.no_hello,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.tasks.clamp(1, 4) as usize)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let report = bots::run(&options).await;
        let mut json = serde_json::to_value(&report).expect("a report of plain numbers serializes");
        if !args.no_server_metrics {
            if let Some(host) = bots::host_of(&args.url) {
                if let Ok((200, text)) = bots::http_get(host, "/metrics").await {
                    let q = |name: &str, labels: &str| sample(&text, name, labels);
                    let ms = |name: &str, labels: &str| q(name, labels).map(|s| s * 1e3);
                    json["server"] = serde_json::json!({
                        "ticks": q("migratory_ticks_total", ""),
                        "loop_p50_ms": ms("migratory_tick_loop_seconds", "{quantile=\"0.5\"}"),
                        "loop_p99_ms": ms("migratory_tick_loop_seconds", "{quantile=\"0.99\"}"),
                        "loop_max_ms": ms("migratory_tick_loop_seconds", "{quantile=\"1\"}"),
                        "step_p99_ms": ms("migratory_tick_phase_seconds", "{phase=\"step\",quantile=\"0.99\"}"),
                        "overruns": q("migratory_tick_overruns_total", ""),
                        "skipped": q("migratory_ticks_skipped_total", ""),
                        "state_updates_dropped": q("migratory_state_updates_dropped_total", ""),
                        "evictions": q("migratory_evictions_total", ""),
                        "clients": q("migratory_clients", ""),
                    });
                }
            }
        }
        println!("{json}");
    });
    Ok(())
}
