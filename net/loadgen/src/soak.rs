//! The soak: bots ramped in steps (`--steps 100,250,500,1000`, `--step-seconds`), then held
//! (`--hold-seconds`), sampled every second from the bots and the server's `/metrics`, and
//! written to a folder: `metrics.json` (machine, harness, thresholds, totals,
//! distributions, the per-second series), `chart.png` and `summary.txt` (PASS/FAIL per
//! threshold). The thresholds keep the reference soak's names and defaults.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use migratory_http as http;
use migratory_wire::metric;

use crate::bots::{self, BotLive, BotOptions, BotReport, RttSink};
use crate::segments::Segments;
pub use crate::series::{Sample, Thresholds};

/// The `[soak]` table of a soak config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SoakConfigFile {
    #[serde(default)]
    thresholds: Thresholds,
}

/// Reads thresholds from a TOML file with a `[thresholds]` table (missing keys keep the
/// defaults; unknown keys are errors).
pub fn thresholds_from_toml(text: &str) -> Result<Thresholds, toml::de::Error> {
    toml::from_str::<SoakConfigFile>(text).map(|c| c.thresholds)
}

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub bots: BotOptions,
    /// Bots at the end of each ramp step.
    pub steps: Vec<u32>,
    pub step_seconds: f64,
    pub hold_seconds: f64,
    pub out: PathBuf,
    pub thresholds: Thresholds,
    /// Move the world to another fleet node this often (needs `bots.fleet`).
    pub move_every: Option<Duration>,
    /// The fleet's admin token, for the moves.
    pub admin_token: Option<String>,
}

/// A distribution's summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Distribution {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub samples: usize,
}

impl Distribution {
    fn of(mut v: Vec<f64>) -> Distribution {
        if v.is_empty() {
            return Distribution::default();
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Distribution {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: q(0.5),
            p95: q(0.95),
            p99: q(0.99),
            max: v[v.len() - 1],
            samples: v.len(),
        }
    }
}

/// One threshold's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub name: &'static str,
    pub value: f64,
    pub limit: f64,
    pub pass: bool,
}

/// Everything `metrics.json` holds.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub machine: serde_json::Value,
    pub harness: serde_json::Value,
    pub thresholds: Thresholds,
    pub totals: BotReport,
    /// Downstream B/s per bot over the hold, one value per bot that read.
    pub downstream_bytes_per_s_per_bot_hold: Distribution,
    /// PING round trips over the hold, ms.
    pub rtt_ms_hold: Distribution,
    /// The server over the hold: medians of its per-second figures.
    pub server_hold: ServerHold,
    pub series: Vec<Sample>,
    /// The world's moves (`--move-every`), and the pauses the bots saw across their
    /// reclaims (from the last snapshot before to the first after), in ms.
    pub moves: Vec<crate::mover::Move>,
    pub pause_ms: Distribution,
    pub verdicts: Vec<Verdict>,
    pub pass: bool,
}

/// The server's figures over the hold, each the median of its seconds (`None`: no second
/// had the figure).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerHold {
    pub loop_p50_ms: Option<f64>,
    pub loop_p99_ms: Option<f64>,
    pub cpu_ms_per_tick: Option<f64>,
    pub cpu_system_ms_per_tick: Option<f64>,
    /// TCP segments per tick on the server's connections (`segments`): sent, the sent ones
    /// that carried no data (pure ACKs), and received.
    pub segments_out_per_tick: Option<f64>,
    pub pure_acks_out_per_tick: Option<f64>,
    pub segments_in_per_tick: Option<f64>,
    /// Loop p99 (median) of the seconds in which the server took a recording checkpoint,
    /// how many there were, and of the other seconds: what a checkpoint costs the tick.
    pub loop_p99_ms_checkpoint_seconds: Option<f64>,
    pub checkpoint_seconds: usize,
    pub loop_p99_ms_other_seconds: Option<f64>,
}

impl ServerHold {
    fn of(hold: &[&Sample]) -> ServerHold {
        let median_of = |seconds: &mut dyn Iterator<Item = &&Sample>, f: fn(&Sample) -> Option<f64>| {
            let v: Vec<f64> = seconds.filter_map(|s| f(s)).collect();
            (!v.is_empty()).then(|| Distribution::of(v).p50)
        };
        let median = |f: fn(&Sample) -> Option<f64>| median_of(&mut hold.iter(), f);
        let with_checkpoint = |yes: bool| {
            median_of(&mut hold.iter().filter(|s| s.checkpoint == Some(yes)), |s| {
                s.loop_p99_ms
            })
        };
        ServerHold {
            loop_p99_ms_checkpoint_seconds: with_checkpoint(true),
            checkpoint_seconds: hold.iter().filter(|s| s.checkpoint == Some(true)).count(),
            loop_p99_ms_other_seconds: with_checkpoint(false),
            loop_p50_ms: median(|s| s.loop_p50_ms),
            loop_p99_ms: median(|s| s.loop_p99_ms),
            cpu_ms_per_tick: median(|s| s.cpu_ms_per_tick),
            cpu_system_ms_per_tick: median(|s| s.cpu_system_ms_per_tick),
            segments_out_per_tick: median(|s| s.segments_out_per_tick),
            pure_acks_out_per_tick: median(|s| s.pure_acks_out_per_tick),
            segments_in_per_tick: median(|s| s.segments_in_per_tick),
        }
    }
}

/// Why a soak could not run (a failed threshold is not an error: see `SoakReport::pass`).
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("invalid soak options: {0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Chart(#[from] crate::chart::ChartError),
}

/// The server's figures at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct ServerSample {
    ticks: Option<f64>,
    loop_p50_s: Option<f64>,
    loop_p99_s: Option<f64>,
    overruns: Option<f64>,
    skipped: Option<f64>,
    rss_bytes: Option<f64>,
    cpu_s: Option<f64>,
    cpu_system_s: Option<f64>,
    evictions: Option<f64>,
    /// Recording checkpoints in the ticks `loop_p99_s` covers.
    recent_checkpoints: Option<f64>,
    /// The server's connections' segment counters (a server on this machine only).
    segments: Option<Segments>,
}

async fn scrape(host: Option<&str>) -> ServerSample {
    let Some(host) = host else {
        return ServerSample::default();
    };
    let scraped = http::Request::new(http::Method::GET, format!("http://{host}/metrics"))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    let text = match scraped {
        Ok(r) if r.status == 200 => r.text(),
        _ => return ServerSample::default(),
    };
    ServerSample {
        ticks: metric::TICKS_TOTAL.read(&text, ""),
        loop_p50_s: metric::TICK_LOOP_RECENT_SECONDS.read(&text, metric::P50),
        loop_p99_s: metric::TICK_LOOP_RECENT_SECONDS.read(&text, metric::P99),
        overruns: metric::TICK_OVERRUNS_TOTAL.read(&text, ""),
        skipped: metric::TICKS_SKIPPED_TOTAL.read(&text, ""),
        rss_bytes: metric::PROCESS_RESIDENT_MEMORY_BYTES.read(&text, ""),
        cpu_s: metric::PROCESS_CPU_SECONDS_TOTAL.read(&text, ""),
        cpu_system_s: metric::PROCESS_CPU_SYSTEM_SECONDS_TOTAL.read(&text, ""),
        evictions: metric::EVICTIONS_TOTAL.read(&text, ""),
        recent_checkpoints: metric::TICK_LOOP_RECENT_CHECKPOINTS.read(&text, ""),
        segments: match local_port(host) {
            Some(port) => Segments::read(port).await,
            None => None,
        },
    }
}

/// The port of a server on this machine (`127.0.0.1:PORT`, `localhost:PORT`): only its
/// sockets are this machine's to count.
fn local_port(host: &str) -> Option<u16> {
    let (name, port) = host.rsplit_once(':')?;
    matches!(name, "127.0.0.1" | "localhost" | "[::1]")
        .then(|| port.parse().ok())
        .flatten()
}

/// Runs the soak and writes its folder; the report says whether every threshold passed.
pub async fn run(options: &SoakOptions) -> Result<SoakReport, SoakError> {
    check(options)?;
    std::fs::create_dir_all(&options.out).map_err(|source| SoakError::Io {
        context: format!("creating {}", options.out.display()),
        source,
    })?;
    let start = Instant::now();
    let step = Duration::from_secs_f64(options.step_seconds);
    let ramp_end = start + step * options.steps.len() as u32;
    let end = ramp_end + Duration::from_secs_f64(options.hold_seconds);
    let fleet = Fleet::spawn(options, start, end);
    let mover = match (options.move_every, &options.bots.fleet) {
        (Some(every), Some(target)) => Some(crate::mover::spawn(
            target.clone(),
            options.admin_token.clone(),
            every,
            start,
            end,
        )),
        _ => None,
    };
    let mut sampler = Sampler::new(options, &fleet).await;
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    interval.tick().await;
    let terminal = std::io::stderr().is_terminal();
    loop {
        interval.tick().await;
        let now = Instant::now();
        let sample = sampler.second(&fleet, now - start, now >= ramp_end).await;
        if terminal {
            eprint!(
                "\r{:>6.0} s {:<4} bots {:>5}/{:<5} loop p99 {:>6.2} ms  down {:>7.0} B/s  rtt p99 {:>6.2} ms   ",
                sample.t_s,
                sample.phase,
                sample.joined_bots,
                sample.target_bots,
                sample.loop_p99_ms.unwrap_or(f64::NAN),
                sample.down_mean_bytes_per_s.unwrap_or(0.0),
                sample.rtt_p99_ms.unwrap_or(f64::NAN),
            );
        }
        sampler.series.push(sample);
        if now >= end {
            break;
        }
    }
    if terminal {
        eprintln!();
    }
    let moves = match mover {
        Some(m) => m.await.unwrap_or_default(),
        None => Vec::new(),
    };
    let report = judge(options, fleet, sampler, start, moves).await;
    write_outputs(&options.out, &report)?;
    Ok(report)
}

/// Refuses options a soak cannot run with.
fn check(options: &SoakOptions) -> Result<(), SoakError> {
    if options.steps.is_empty() || options.steps.windows(2).any(|w| w[0] > w[1]) || options.steps[0] == 0 {
        return Err(SoakError::Invalid(format!(
            "--steps must be ascending bot counts above 0, is {:?}",
            options.steps
        )));
    }
    if !(options.step_seconds > 0.0 && options.hold_seconds > 0.0) {
        return Err(SoakError::Invalid(
            "--step-seconds and --hold-seconds must be above 0".into(),
        ));
    }
    if options.move_every.is_some() && options.bots.fleet.is_none() {
        return Err(SoakError::Invalid(
            "--move-every moves a fleet's world: give --fleet and --world".into(),
        ));
    }
    if options.move_every.is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(SoakError::Invalid(
            "--move-every must be at least 1 second".into(),
        ));
    }
    Ok(())
}

/// The bots of a soak: each step's new bots connect evenly over the first half of the step,
/// and all play on a little past the last sample, so it sees them all.
struct Fleet {
    lives: Vec<Arc<BotLive>>,
    handles: Vec<tokio::task::JoinHandle<bots::BotStats>>,
    sink: RttSink,
    stall_percent: u32,
}

impl Fleet {
    fn spawn(options: &SoakOptions, start: Instant, end: Instant) -> Fleet {
        let step = Duration::from_secs_f64(options.step_seconds);
        let bots_end = end + Duration::from_secs(2);
        let total = *options.steps.last().unwrap_or(&0) as usize;
        let sink: RttSink = Arc::default();
        let (mut lives, mut handles) = (Vec::with_capacity(total), Vec::with_capacity(total));
        let mut spawned = 0u32;
        for (k, &target) in options.steps.iter().enumerate() {
            let step_start = start + step * k as u32;
            let n = target - spawned;
            for j in 0..n {
                let at = step_start + (step / 2).mul_f64(f64::from(j) / f64::from(n.max(1)));
                let live = Arc::new(BotLive::default());
                lives.push(live.clone());
                handles.push(bots::spawn_bot(
                    spawned + j,
                    &options.bots,
                    start,
                    at,
                    bots_end,
                    live,
                    sink.clone(),
                ));
            }
            spawned = target;
        }
        Fleet {
            lives,
            handles,
            sink,
            stall_percent: options.bots.stall_percent,
        }
    }

    fn stalled(&self, i: usize) -> bool {
        bots::stalls(i as u32, self.stall_percent)
    }
}

/// The per-second sampling: what it keeps from one second to the next, and what the
/// verdicts need from the hold.
struct Sampler {
    host: Option<String>,
    /// With a fleet, the world's server is asked for each second (it moves).
    fleet: Option<bots::FleetTarget>,
    steps: Vec<u32>,
    step_seconds: f64,
    series: Vec<Sample>,
    last_bytes: Vec<u64>,
    last_server: ServerSample,
    hold_bytes_start: Option<Vec<u64>>,
    hold_rtts: Vec<f64>,
    hold_rss: Vec<f64>,
}

impl Sampler {
    async fn new(options: &SoakOptions, fleet: &Fleet) -> Sampler {
        let fleet_target = options.bots.fleet.clone();
        let host = match &fleet_target {
            Some(f) => world_host(f).await,
            None => bots::host_of(&options.bots.url).map(str::to_string),
        };
        let last_server = scrape(host.as_deref()).await;
        Sampler {
            host,
            fleet: fleet_target,
            steps: options.steps.clone(),
            step_seconds: options.step_seconds,
            series: Vec::new(),
            last_bytes: vec![0; fleet.lives.len()],
            last_server,
            hold_bytes_start: None,
            hold_rtts: Vec::new(),
            hold_rss: Vec::new(),
        }
    }

    /// One second's sample: the bots' downstream and round trips since the last one, and
    /// the server's figures (CPU per tick from the difference of its counters).
    async fn second(&mut self, fleet: &Fleet, since_start: Duration, in_hold: bool) -> Sample {
        let k = (since_start.as_secs_f64() / self.step_seconds) as usize;
        let target = self.steps[k.min(self.steps.len() - 1)];
        let mut rates = Vec::new();
        let mut joined = 0u32;
        for (i, live) in fleet.lives.iter().enumerate() {
            let bytes = live.snapshot_bytes.load(Relaxed);
            if live.joined.load(Relaxed) && !live.gone.load(Relaxed) {
                joined += 1;
                if !fleet.stalled(i) {
                    rates.push((bytes - self.last_bytes[i]) as f64);
                }
            }
            self.last_bytes[i] = bytes;
        }
        if in_hold && self.hold_bytes_start.is_none() {
            self.hold_bytes_start = Some(self.last_bytes.clone());
        }
        let rtts: Vec<f64> = fleet
            .sink
            .lock()
            .map(|mut s| s.drain(..).map(|us| f64::from(us) / 1000.0).collect())
            .unwrap_or_default();
        if let Some(f) = &self.fleet {
            let host = world_host(f).await;
            if host != self.host {
                // A new server: its counters start afresh, so no difference spans the move.
                self.host = host;
                self.last_server = ServerSample::default();
            }
        }
        let server = scrape(self.host.as_deref()).await;
        let before = self.last_server;
        let per_tick = |now: Option<f64>, then: Option<f64>| match (now, then, server.ticks, before.ticks) {
            (Some(c1), Some(c0), Some(t1), Some(t0)) if t1 > t0 => Some((c1 - c0) * 1000.0 / (t1 - t0)),
            _ => None,
        };
        let cpu_ms_per_tick = per_tick(server.cpu_s, before.cpu_s);
        let cpu_system_ms_per_tick = per_tick(server.cpu_system_s, before.cpu_system_s);
        let segments = match (server.segments, before.segments, server.ticks, before.ticks) {
            (Some(now), Some(then), Some(t1), Some(t0)) => crate::segments::per_tick(now, then, t1 - t0),
            _ => None,
        };
        self.last_server = server;
        if in_hold {
            self.hold_rtts.extend_from_slice(&rtts);
            self.hold_rss.extend(server.rss_bytes);
        }
        let (down, rtt) = (Distribution::of(rates), Distribution::of(rtts));
        Sample {
            t_s: since_start.as_secs_f64(),
            phase: if in_hold { "hold" } else { "ramp" }.into(),
            target_bots: target,
            joined_bots: joined,
            down_mean_bytes_per_s: (down.samples > 0).then_some(down.mean),
            down_p95_bytes_per_s: (down.samples > 0).then_some(down.p95),
            down_max_bytes_per_s: (down.samples > 0).then_some(down.max),
            rtt_p50_ms: (rtt.samples > 0).then_some(rtt.p50),
            rtt_p99_ms: (rtt.samples > 0).then_some(rtt.p99),
            loop_p50_ms: server.loop_p50_s.map(|v| v * 1000.0),
            loop_p99_ms: server.loop_p99_s.map(|v| v * 1000.0),
            overruns_total: server.overruns,
            skipped_ticks_total: server.skipped,
            rss_bytes: server.rss_bytes.map(|b| b as u64),
            cpu_ms_per_tick,
            cpu_system_ms_per_tick,
            segments_out_per_tick: segments.map(|s| s.0),
            pure_acks_out_per_tick: segments.map(|s| s.1),
            segments_in_per_tick: segments.map(|s| s.2),
            checkpoint: server.recent_checkpoints.map(|n| n > 0.0),
        }
    }
}

/// `HOST:PORT` of the world's server now, as the fleet answers it.
async fn world_host(f: &bots::FleetTarget) -> Option<String> {
    let answer = bots::fleet_answer(f, 1).await?;
    bots::host_of(answer["ws_url"].as_str()?).map(str::to_string)
}

/// Waits for the bots, then sums up the hold and judges it against the thresholds.
async fn judge(
    options: &SoakOptions,
    mut fleet: Fleet,
    sampler: Sampler,
    start: Instant,
    moves: Vec<crate::mover::Move>,
) -> SoakReport {
    let total = *options.steps.last().unwrap_or(&0);
    let mut finished = Vec::with_capacity(fleet.handles.len());
    for h in std::mem::take(&mut fleet.handles) {
        if let Ok(s) = h.await {
            finished.push(s);
        }
    }
    let totals = bots::summarise(total, &finished, start.elapsed().as_secs_f64());
    let pause_ms = Distribution::of(
        finished
            .iter()
            .flat_map(|s| s.pauses_ms().iter().map(|&ms| ms as f64))
            .collect(),
    );
    // A stalled bot reads nothing, so it never sees its close: the server counts evictions.
    let evictions = sampler.last_server.evictions.unwrap_or(0.0);
    let hold_start = sampler
        .hold_bytes_start
        .unwrap_or_else(|| vec![0; fleet.lives.len()]);
    let hold_secs = options.hold_seconds.max(1e-9);
    let per_bot_hold: Vec<f64> = fleet
        .lives
        .iter()
        .enumerate()
        .filter(|&(i, l)| !fleet.stalled(i) && l.joined.load(Relaxed))
        .map(|(i, l)| (l.snapshot_bytes.load(Relaxed) - hold_start[i]) as f64 / hold_secs)
        .collect();
    let downstream = Distribution::of(per_bot_hold);
    let series = sampler.series;
    let hold: Vec<&Sample> = series.iter().filter(|s| s.phase == "hold").collect();
    let loop_p99_hold = Distribution::of(hold.iter().filter_map(|s| s.loop_p99_ms).collect()).p99;
    let max_second = hold
        .iter()
        .filter_map(|s| s.down_max_bytes_per_s)
        .fold(0.0, f64::max);
    let drift = match (sampler.hold_rss.first(), sampler.hold_rss.last()) {
        (Some(&a), Some(&b)) if a > 0.0 => (b - a) / a * 100.0,
        _ => f64::NAN,
    };
    let t = &options.thresholds;
    let verdict = |name, value: f64, limit: f64| Verdict {
        name,
        value,
        limit,
        pass: value <= limit,
    };
    let mut verdicts = vec![
        verdict("loop_p99_ms", loop_p99_hold, t.loop_p99_ms),
        verdict(
            "avg_downstream_bytes_per_s",
            downstream.mean,
            t.avg_downstream_bytes_per_s,
        ),
        verdict("hard_cap_bytes_per_s", max_second, t.hard_cap_bytes_per_s),
        verdict("memory_drift_percent", drift, t.memory_drift_percent),
        verdict("decode_errors", totals.decode_errors as f64, 0.0),
        verdict("disconnects", f64::from(totals.disconnects), 0.0),
    ];
    if !moves.is_empty() {
        verdicts.push(verdict(
            "moves_failed",
            moves.iter().filter(|m| m.error.is_some()).count() as f64,
            0.0,
        ));
        verdicts.push(verdict("reclaims_refused", totals.reclaims_refused as f64, 0.0));
    }
    if totals.stalled > 0 {
        // Every bot told to stall must have been evicted by the end (value: those not).
        verdicts.push(verdict(
            "stalled_bots_not_evicted",
            (f64::from(totals.stalled) - evictions).max(0.0),
            0.0,
        ));
    }
    let pass = verdicts.iter().all(|v| v.pass);
    let server_hold = ServerHold::of(&hold);
    SoakReport {
        machine: serde_json::json!({
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        }),
        harness: serde_json::json!({
            "url": options.bots.url,
            "steps": options.steps,
            "step_seconds": options.step_seconds,
            "hold_seconds": options.hold_seconds,
            "tasks": options.bots.tasks,
            "seed": options.bots.seed,
            "town_percent": options.bots.mix.town_percent,
            "field_percent": options.bots.mix.field_percent,
            "stall_percent": options.bots.stall_percent,
            "move_every_seconds": options.move_every.map(|d| d.as_secs_f64()),
            "loop_p99_ms_hold": "99th percentile of the per-second loop p99 over the hold",
        }),
        thresholds: options.thresholds.clone(),
        totals,
        downstream_bytes_per_s_per_bot_hold: downstream,
        rtt_ms_hold: Distribution::of(sampler.hold_rtts),
        server_hold,
        series,
        moves,
        pause_ms,
        verdicts,
        pass,
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SoakError {
    move |source| SoakError::Io {
        context: context.into(),
        source,
    }
}

/// `metrics.json`, `chart.png`, `summary.txt`.
fn write_outputs(out: &Path, r: &SoakReport) -> Result<(), SoakError> {
    let json = serde_json::to_string_pretty(r).map_err(|e| SoakError::Invalid(e.to_string()))?;
    std::fs::write(out.join("metrics.json"), json).map_err(io("writing metrics.json"))?;
    let marks: Vec<f64> = r.moves.iter().map(|m| m.t_s).collect();
    crate::chart::draw(&out.join("chart.png"), &r.series, &r.thresholds, &marks)?;
    let mut s = String::new();
    for v in &r.verdicts {
        s.push_str(&format!(
            "{} {}: {:.3} (limit {:.3})\n",
            if v.pass { "PASS" } else { "FAIL" },
            v.name,
            v.value,
            v.limit
        ));
    }
    let t = &r.totals;
    let h = &r.server_hold;
    let figure = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    s.push_str(&format!(
        "bots {} joined {} stalled {} closed by server {} {:?} drops {} decode errors {}\n\
         downstream per bot (hold) mean {:.0} p95 {:.0} max {:.0} B/s; RTT (hold) p50 {:.2} p99 {:.2} ms\n\
         server (hold, medians of the seconds) loop p50 {} p99 {} ms; CPU {} ms per tick, {} of it system\n\
         server TCP segments per tick (hold, medians) out {} (pure ACKs {}), in {}\n\
         loop p99 (hold, medians) of the {} seconds with a recording checkpoint {} ms, of the others {} ms\n\
         {}{}\n",
        t.clients,
        t.joined,
        t.stalled,
        t.closed_by_server,
        t.close_codes,
        t.drops,
        t.decode_errors,
        r.downstream_bytes_per_s_per_bot_hold.mean,
        r.downstream_bytes_per_s_per_bot_hold.p95,
        r.downstream_bytes_per_s_per_bot_hold.max,
        r.rtt_ms_hold.p50,
        r.rtt_ms_hold.p99,
        figure(h.loop_p50_ms),
        figure(h.loop_p99_ms),
        figure(h.cpu_ms_per_tick),
        figure(h.cpu_system_ms_per_tick),
        figure(h.segments_out_per_tick),
        figure(h.pure_acks_out_per_tick),
        figure(h.segments_in_per_tick),
        h.checkpoint_seconds,
        figure(h.loop_p99_ms_checkpoint_seconds),
        figure(h.loop_p99_ms_other_seconds),
        if r.moves.is_empty() {
            String::new()
        } else {
            format!(
                "moves {} (failed {}); reclaims {} (refused {}); pause p50 {:.0} p99 {:.0} max {:.0} ms\n",
                r.moves.len(),
                r.moves.iter().filter(|m| m.error.is_some()).count(),
                t.reclaims,
                t.reclaims_refused,
                r.pause_ms.p50,
                r.pause_ms.p99,
                r.pause_ms.max
            )
        },
        if r.pass { "PASS" } else { "FAIL" }
    ));
    std::fs::write(out.join("summary.txt"), s).map_err(io("writing summary.txt"))?;
    Ok(())
}
