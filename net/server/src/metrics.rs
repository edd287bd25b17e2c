//! Server metrics: lock-free counters and latency histograms, written by the tick thread
//! and the connection tasks, rendered in the Prometheus text format for `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use migratory_wire::metric::{self, Metric};

mod histogram;
pub use histogram::{Histogram, WindowHistogram};

/// Phases of a tick, for timings and the stall watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Idle = 0,
    /// Draining the connections' events into the tick's inputs.
    Ingest = 1,
    /// `World::step`.
    Step = 2,
    /// Appending the tick to the recording.
    Record = 3,
    /// Encoding SNAPSHOT messages and queueing them for the clients.
    Handoff = 4,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Ingest => "ingest",
            Phase::Step => "step",
            Phase::Record => "record",
            Phase::Handoff => "handoff",
        }
    }

    pub fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Ingest,
            2 => Phase::Step,
            3 => Phase::Record,
            4 => Phase::Handoff,
            _ => Phase::Idle,
        }
    }
}

/// Close codes counted separately (others go to "other").
pub const COUNTED_CLOSE_CODES: [u16; 7] = [1000, 1001, 1002, 1003, 1008, 1009, 1013];

/// Everything `/metrics` shows.
#[derive(Debug, Default)]
pub struct Metrics {
    pub ticks_total: AtomicU64,
    pub current_tick: AtomicU32,
    pub tick_rate_hz: AtomicU32,
    /// Ticks whose work took longer than the tick duration.
    pub tick_overruns_total: AtomicU64,
    /// Ticks run late, back to back, to catch up.
    pub ticks_caught_up_total: AtomicU64,
    /// Deadlines dropped because the loop was too far behind (never simulated).
    pub ticks_skipped_total: AtomicU64,
    pub loop_us: Histogram,
    /// The loop's work over the last complete second of ticks.
    pub loop_recent_us: WindowHistogram,
    /// 1 for a tick that took a recording checkpoint, 0 for the others, in the same
    /// windows as `loop_recent_us`: the soak tells a second holding a checkpoint by it.
    pub checkpoint_recent: WindowHistogram,
    pub ingest_us: Histogram,
    pub step_us: Histogram,
    pub record_us: Histogram,
    pub handoff_us: Histogram,

    /// Clients the kernel has joined.
    pub clients: AtomicI64,
    /// Players whose connection dropped, waiting out their reconnect grace.
    pub clients_detached: AtomicI64,
    pub reclaims_taken_total: AtomicU64,
    pub reclaims_refused_total: AtomicU64,
    pub reconnect_grace_expired_total: AtomicU64,
    pub bookmarks_recorded_total: AtomicU64,
    pub bookmarks_dropped_total: AtomicU64,
    /// Connection tasks alive (the leak check: back to 0 when everyone has gone).
    pub connections: AtomicI64,
    /// TCP connections in their HTTP phase (before an upgrade, or serving GETs).
    pub tcp_connections: AtomicI64,
    /// Connections refused because the server held `connections_max` already.
    pub refused_server_full_total: AtomicU64,
    /// Connections refused because their address held `connections_per_ip_max` already.
    pub refused_address_full_total: AtomicU64,
    /// Connections closed for not sending their HTTP request head in time.
    pub http_header_timeouts_total: AtomicU64,
    pub connections_total: AtomicU64,
    pub joins_rejected_total: AtomicU64,
    pub handshake_timeouts_total: AtomicU64,

    pub bytes_sent_total: AtomicU64,
    pub messages_sent_total: AtomicU64,
    pub snapshots_sent_total: AtomicU64,
    pub terrain_bytes_sent_total: AtomicU64,
    pub bytes_received_total: AtomicU64,
    pub messages_received_total: AtomicU64,
    pub pings_total: AtomicU64,

    pub state_updates_dropped_total: AtomicU64,
    pub overflow_events_total: AtomicU64,
    pub evictions_total: AtomicU64,
    pub terrain_evictions_total: AtomicU64,

    pub protocol_errors_total: AtomicU64,
    pub inputs_rate_limited_total: AtomicU64,
    pub inputs_stale_total: AtomicU64,
    pub rejected_unknown_client_total: AtomicU64,
    pub rejected_duplicate_join_total: AtomicU64,
    pub rejected_slots_full_total: AtomicU64,
    pub rejected_name_invalid_total: AtomicU64,
    pub rejected_out_of_range_total: AtomicU64,
    pub rejected_stale_seq_total: AtomicU64,
    pub rejected_ack_from_future_total: AtomicU64,
    pub rejected_wrong_role_total: AtomicU64,

    pub closes_total: [AtomicU64; COUNTED_CLOSE_CODES.len()],
    pub closes_other_total: AtomicU64,

    pub recording_bytes: AtomicU64,
    pub recording_errors_total: AtomicU64,
    pub recording_checkpoints_total: AtomicU64,
    pub recording_shipped_bytes: AtomicU64,
    pub recording_ship_failures_total: AtomicU64,
    /// Bytes of the joined clients' view arenas (refreshed once a second): memory that
    /// follows each client's worst ack lag.
    pub view_arena_bytes: AtomicU64,
}

impl Metrics {
    pub fn new(tick_rate_hz: u32) -> Arc<Metrics> {
        let m = Metrics::default();
        m.tick_rate_hz.store(tick_rate_hz, Relaxed);
        Arc::new(m)
    }

    /// Counts a close the server sent with `code`.
    pub fn count_close(&self, code: u16) {
        match COUNTED_CLOSE_CODES.iter().position(|&c| c == code) {
            Some(i) => self.closes_total[i].fetch_add(1, Relaxed),
            None => self.closes_other_total.fetch_add(1, Relaxed),
        };
    }

    /// Closes sent with `code` so far.
    pub fn closes_with(&self, code: u16) -> u64 {
        COUNTED_CLOSE_CODES
            .iter()
            .position(|&c| c == code)
            .map_or(0, |i| self.closes_total[i].load(Relaxed))
    }

    /// The Prometheus text exposition (version 0.0.4) of every series in
    /// `migratory_wire::metric::ALL`.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        self.render_ticks(&mut o);
        self.render_connections(&mut o);
        self.render_traffic(&mut o);
        self.render_refusals(&mut o);
        self.render_recording(&mut o);
        if let Some(p) = process_figures() {
            single(&mut o, &metric::PROCESS_RESIDENT_MEMORY_BYTES, p.resident_bytes);
            single(&mut o, &metric::PROCESS_CPU_SECONDS_TOTAL, p.cpu_seconds);
            single(
                &mut o,
                &metric::PROCESS_CPU_SYSTEM_SECONDS_TOTAL,
                p.cpu_system_seconds,
            );
        }
        o
    }

    fn render_ticks(&self, o: &mut String) {
        single(o, &metric::TICKS_TOTAL, l(&self.ticks_total));
        single(o, &metric::TICK, self.current_tick.load(Relaxed));
        single(o, &metric::TICK_RATE_HZ, self.tick_rate_hz.load(Relaxed));
        single(o, &metric::TICK_OVERRUNS_TOTAL, l(&self.tick_overruns_total));
        single(o, &metric::TICKS_CAUGHT_UP_TOTAL, l(&self.ticks_caught_up_total));
        single(o, &metric::TICKS_SKIPPED_TOTAL, l(&self.ticks_skipped_total));
        summary(o, &metric::TICK_LOOP_SECONDS, &[("", &self.loop_us)]);
        summary(
            o,
            &metric::TICK_LOOP_RECENT_SECONDS,
            &[("", self.loop_recent_us.last())],
        );
        single(
            o,
            &metric::TICK_LOOP_RECENT_CHECKPOINTS,
            self.checkpoint_recent.last().sum(),
        );
        let phases = [
            ("ingest", &self.ingest_us),
            ("step", &self.step_us),
            ("record", &self.record_us),
            ("handoff", &self.handoff_us),
        ];
        summary(o, &metric::TICK_PHASE_SECONDS, &phases);
        histogram(o, &metric::TICK_LOOP_DURATION_SECONDS, &[("", &self.loop_us)]);
        histogram(o, &metric::TICK_PHASE_DURATION_SECONDS, &phases);
    }

    fn render_connections(&self, o: &mut String) {
        single(o, &metric::CLIENTS, self.clients.load(Relaxed));
        single(o, &metric::CLIENTS_DETACHED, self.clients_detached.load(Relaxed));
        labelled(
            o,
            &metric::RECLAIMS_TOTAL,
            [
                ("{outcome=\"taken\"}".to_string(), l(&self.reclaims_taken_total)),
                (
                    "{outcome=\"refused\"}".to_string(),
                    l(&self.reclaims_refused_total),
                ),
            ],
        );
        labelled(
            o,
            &metric::BOOKMARKS_TOTAL,
            [
                (
                    "{outcome=\"recorded\"}".to_string(),
                    l(&self.bookmarks_recorded_total),
                ),
                (
                    "{outcome=\"dropped\"}".to_string(),
                    l(&self.bookmarks_dropped_total),
                ),
            ],
        );
        single(
            o,
            &metric::RECONNECT_GRACE_EXPIRED_TOTAL,
            l(&self.reconnect_grace_expired_total),
        );
        single(o, &metric::CONNECTIONS, self.connections.load(Relaxed));
        single(o, &metric::HTTP_CONNECTIONS, self.tcp_connections.load(Relaxed));
        labelled(
            o,
            &metric::CONNECTIONS_REFUSED_TOTAL,
            [
                (metric::reason("server_full"), l(&self.refused_server_full_total)),
                (
                    metric::reason("address_full"),
                    l(&self.refused_address_full_total),
                ),
            ],
        );
        single(
            o,
            &metric::HTTP_HEADER_TIMEOUTS_TOTAL,
            l(&self.http_header_timeouts_total),
        );
        single(o, &metric::CONNECTIONS_TOTAL, l(&self.connections_total));
        single(o, &metric::JOINS_REJECTED_TOTAL, l(&self.joins_rejected_total));
        single(
            o,
            &metric::HANDSHAKE_TIMEOUTS_TOTAL,
            l(&self.handshake_timeouts_total),
        );
    }

    fn render_traffic(&self, o: &mut String) {
        single(o, &metric::BYTES_SENT_TOTAL, l(&self.bytes_sent_total));
        single(o, &metric::MESSAGES_SENT_TOTAL, l(&self.messages_sent_total));
        single(o, &metric::SNAPSHOTS_SENT_TOTAL, l(&self.snapshots_sent_total));
        single(
            o,
            &metric::TERRAIN_BYTES_SENT_TOTAL,
            l(&self.terrain_bytes_sent_total),
        );
        single(o, &metric::BYTES_RECEIVED_TOTAL, l(&self.bytes_received_total));
        single(
            o,
            &metric::MESSAGES_RECEIVED_TOTAL,
            l(&self.messages_received_total),
        );
        single(o, &metric::PINGS_TOTAL, l(&self.pings_total));
        single(
            o,
            &metric::STATE_UPDATES_DROPPED_TOTAL,
            l(&self.state_updates_dropped_total),
        );
        single(o, &metric::OVERFLOW_EVENTS_TOTAL, l(&self.overflow_events_total));
        single(o, &metric::EVICTIONS_TOTAL, l(&self.evictions_total));
        single(
            o,
            &metric::TERRAIN_EVICTIONS_TOTAL,
            l(&self.terrain_evictions_total),
        );
        single(o, &metric::PROTOCOL_ERRORS_TOTAL, l(&self.protocol_errors_total));
    }

    fn render_refusals(&self, o: &mut String) {
        labelled(
            o,
            &metric::INPUTS_REJECTED_TOTAL,
            [
                ("rate_limited", &self.inputs_rate_limited_total),
                ("stale_client_seq", &self.inputs_stale_total),
                ("unknown_client", &self.rejected_unknown_client_total),
                ("duplicate_join", &self.rejected_duplicate_join_total),
                ("slots_full", &self.rejected_slots_full_total),
                ("name_invalid", &self.rejected_name_invalid_total),
                ("out_of_range", &self.rejected_out_of_range_total),
                ("stale_seq", &self.rejected_stale_seq_total),
                ("ack_from_future", &self.rejected_ack_from_future_total),
                ("wrong_role", &self.rejected_wrong_role_total),
            ]
            .map(|(reason, a)| (metric::reason(reason), l(a))),
        );
        let codes = COUNTED_CLOSE_CODES
            .iter()
            .zip(&self.closes_total)
            .map(|(code, a)| (metric::code(&code.to_string()), l(a)));
        labelled(
            o,
            &metric::CLOSES_TOTAL,
            codes.chain([(metric::code("other"), l(&self.closes_other_total))]),
        );
    }

    fn render_recording(&self, o: &mut String) {
        single(o, &metric::RECORDING_BYTES, l(&self.recording_bytes));
        single(
            o,
            &metric::RECORDING_ERRORS_TOTAL,
            l(&self.recording_errors_total),
        );
        single(
            o,
            &metric::RECORDING_CHECKPOINTS_TOTAL,
            l(&self.recording_checkpoints_total),
        );
        single(
            o,
            &metric::RECORDING_SHIPPED_BYTES,
            l(&self.recording_shipped_bytes),
        );
        single(
            o,
            &metric::RECORDING_SHIP_FAILURES_TOTAL,
            l(&self.recording_ship_failures_total),
        );
        single(o, &metric::VIEW_ARENA_BYTES, l(&self.view_arena_bytes));
    }
}

fn l(a: &AtomicU64) -> u64 {
    a.load(Relaxed)
}

/// `# HELP` and `# TYPE` of a series.
fn head(o: &mut String, m: &Metric) {
    let _ = writeln!(
        o,
        "# HELP {} {}\n# TYPE {} {}",
        m.name,
        m.help,
        m.name,
        m.kind.as_str()
    );
}

/// A series with one unlabelled sample.
fn single(o: &mut String, m: &Metric, v: impl std::fmt::Display) {
    head(o, m);
    let _ = writeln!(o, "{} {v}", m.name);
}

/// A series with one sample per label text.
fn labelled(o: &mut String, m: &Metric, samples: impl IntoIterator<Item = (String, u64)>) {
    head(o, m);
    for (labels, v) in samples {
        let _ = writeln!(o, "{}{labels} {v}", m.name);
    }
}

/// This process's resident memory and CPU time, from `/proc/self` (Linux only).
struct ProcessFigures {
    resident_bytes: u64,
    cpu_seconds: f64,
    cpu_system_seconds: f64,
}

#[cfg(target_os = "linux")]
fn process_figures() -> Option<ProcessFigures> {
    // statm: sizes in pages, the second field resident.
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // stat: utime and stime are fields 14 and 15, counted after the ")" that ends the
    // command name (which may itself hold spaces).
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // SAFETY: sysconf only reads a system constant.
    let (page, hz) = unsafe {
        (
            libc::sysconf(libc::_SC_PAGESIZE),
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    if page <= 0 || hz <= 0 {
        return None;
    }
    Some(ProcessFigures {
        resident_bytes: pages * page as u64,
        cpu_seconds: (utime + stime) as f64 / hz as f64,
        cpu_system_seconds: stime as f64 / hz as f64,
    })
}

#[cfg(not(target_os = "linux"))]
fn process_figures() -> Option<ProcessFigures> {
    None
}

/// A Prometheus histogram (cumulative `le` buckets in seconds, `_sum`, `_count`) for each
/// labelled histogram of microseconds.
fn histogram(o: &mut String, m: &Metric, parts: &[(&str, &Histogram)]) {
    head(o, m);
    let name = m.name;
    for (phase, h) in parts {
        let phase_label = if phase.is_empty() {
            String::new()
        } else {
            format!("phase=\"{phase}\",")
        };
        for le in metric::DURATION_BUCKETS_SECONDS {
            let le_us = (le * 1e6).round() as u64;
            let _ = writeln!(
                o,
                "{name}_bucket{{{phase_label}le=\"{le}\"}} {}",
                h.count_at_or_below(le_us)
            );
        }
        let _ = writeln!(o, "{name}_bucket{{{phase_label}le=\"+Inf\"}} {}", h.count());
        let plain = phase_label.trim_end_matches(',');
        let braces = if plain.is_empty() {
            String::new()
        } else {
            format!("{{{plain}}}")
        };
        let _ = writeln!(o, "{name}_sum{braces} {}", h.sum() as f64 / 1e6);
        let _ = writeln!(o, "{name}_count{braces} {}", h.count());
    }
}

/// A Prometheus summary (p50, p99, max in seconds) for each labelled histogram.
fn summary(o: &mut String, m: &Metric, parts: &[(&str, &Histogram)]) {
    head(o, m);
    let name = m.name;
    for (phase, h) in parts {
        let label = |extra: &str| {
            let mut l = Vec::new();
            if !phase.is_empty() {
                l.push(format!("phase=\"{phase}\""));
            }
            if !extra.is_empty() {
                l.push(extra.to_string());
            }
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", l.join(","))
            }
        };
        for (q, v) in [
            ("0.5", h.quantile(0.5)),
            ("0.99", h.quantile(0.99)),
            ("1", h.max()),
        ] {
            let _ = writeln!(
                o,
                "{name}{} {}",
                label(&format!("quantile=\"{q}\"")),
                v as f64 / 1e6
            );
        }
        let _ = writeln!(o, "{name}_sum{} {}", label(""), h.sum() as f64 / 1e6);
        let _ = writeln!(o, "{name}_count{} {}", label(""), h.count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use migratory_wire::metric::sample;

    #[test]
    fn histograms_are_cumulative_buckets_in_seconds() {
        let m = Metrics::new(60);
        for us in [100, 1500, 1500, 1500, 10_000, 200_000] {
            m.loop_us.record(us);
        }
        let text = m.render();
        let name = metric::TICK_LOOP_DURATION_SECONDS.name;
        let bucket = |le: &str| sample(&text, &format!("{name}_bucket"), &format!("{{le=\"{le}\"}}"));
        assert_eq!(bucket("0.00025"), Some(1.0));
        assert_eq!(bucket("0.001"), Some(1.0));
        assert_eq!(bucket("0.002"), Some(4.0));
        assert_eq!(bucket("0.016"), Some(5.0));
        assert_eq!(bucket("0.064"), Some(5.0));
        assert_eq!(bucket("+Inf"), Some(6.0));
        assert_eq!(sample(&text, &format!("{name}_count"), ""), Some(6.0));
        let phase = metric::TICK_PHASE_DURATION_SECONDS.name;
        assert_eq!(
            sample(&text, &format!("{phase}_bucket"), "{phase=\"step\",le=\"+Inf\"}"),
            Some(0.0)
        );
        assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
    }

    #[test]
    fn every_named_series_is_rendered_with_its_type() {
        let text = Metrics::new(60).render();
        for m in metric::ALL {
            if cfg!(not(target_os = "linux")) && m.name.contains("process_") {
                continue;
            }
            let type_line = format!("# TYPE {} {}", m.name, m.kind.as_str());
            assert!(
                text.lines().any(|l| l == type_line),
                "{type_line} missing from:\n{text}"
            );
        }
        let typed = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            typed,
            metric::ALL.len(),
            "a rendered series is not in metric::ALL"
        );
    }

    #[test]
    fn renders_and_parses() {
        let m = Metrics::new(60);
        m.ticks_total.store(5, Relaxed);
        m.loop_us.record(1500);
        m.count_close(1013);
        m.count_close(4000);
        let text = m.render();
        assert_eq!(sample(&text, "migratory_ticks_total", ""), Some(5.0));
        assert_eq!(
            sample(&text, "migratory_closes_total", "{code=\"1013\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "migratory_closes_total", "{code=\"other\"}"),
            Some(1.0)
        );
        #[cfg(target_os = "linux")]
        {
            assert!(sample(&text, "process_resident_memory_bytes", "").unwrap() > 1e5);
            // Some CPU time, so the counter has something to show at 10 ms resolution.
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(60) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            let text = m.render();
            let cpu = sample(&text, "process_cpu_seconds_total", "").unwrap();
            assert!(cpu >= 0.02, "{cpu}");
            let system = sample(&text, "migratory_process_cpu_system_seconds_total", "").unwrap();
            assert!((0.0..=cpu).contains(&system), "system {system} of {cpu}");
        }
        let p99 = sample(&text, "migratory_tick_loop_seconds", "{quantile=\"0.99\"}").unwrap();
        assert!((p99 - 0.0015).abs() < 0.0001, "{p99}");
        assert!(sample(
            &text,
            "migratory_tick_phase_seconds",
            "{phase=\"step\",quantile=\"0.5\"}"
        )
        .is_some());
    }
}
