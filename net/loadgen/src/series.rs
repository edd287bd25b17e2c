//! The soak's data model, shared by the run that fills it (`soak`) and the chart that
//! draws it (`chart`): one sample per second, and the thresholds it is judged by.

use serde::{Deserialize, Serialize};

/// The pass/fail limits of a soak, with the reference's names (snake case) and defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Tick loop p99 during the hold (reference `loopP99Ms`).
    pub loop_p99_ms: f64,
    /// Mean downstream per bot during the hold (reference `avgDownstreamBps`).
    pub avg_downstream_bytes_per_s: f64,
    /// No bot may receive more than this in any second (reference `hardCapBps`).
    pub hard_cap_bytes_per_s: f64,
    /// Server RSS growth over the hold, in percent of its start (reference `memoryDriftPercent`).
    pub memory_drift_percent: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            loop_p99_ms: 15.0,
            avg_downstream_bytes_per_s: 12_000.0,
            hard_cap_bytes_per_s: 32_000.0,
            memory_drift_percent: 1.0,
        }
    }
}

/// One second of the run. Read back from `metrics.json` to redraw a chart (`chart DIR`),
/// where older soaks lack the later series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sample {
    pub t_s: f64,
    /// `ramp` or `hold`.
    pub phase: std::borrow::Cow<'static, str>,
    pub target_bots: u32,
    pub joined_bots: u32,
    pub down_mean_bytes_per_s: Option<f64>,
    pub down_p95_bytes_per_s: Option<f64>,
    pub down_max_bytes_per_s: Option<f64>,
    pub rtt_p50_ms: Option<f64>,
    pub rtt_p99_ms: Option<f64>,
    pub loop_p50_ms: Option<f64>,
    pub loop_p99_ms: Option<f64>,
    pub overruns_total: Option<f64>,
    pub skipped_ticks_total: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub cpu_ms_per_tick: Option<f64>,
    /// The system (OS kernel) part of `cpu_ms_per_tick`.
    pub cpu_system_ms_per_tick: Option<f64>,
    /// TCP segments per tick on the server's connections: sent, the sent ones without
    /// data (pure ACKs), received (`segments`; a server on this machine only).
    pub segments_out_per_tick: Option<f64>,
    pub pure_acks_out_per_tick: Option<f64>,
    pub segments_in_per_tick: Option<f64>,
    /// The ticks `loop_p99_ms` covers held a recording checkpoint (None: the server's
    /// `/metrics` does not say).
    pub checkpoint: Option<bool>,
}
