//! The world server's `/metrics` series, named once: the server renders them from these
//! definitions and the bots, the soak and the tests read them through the same ones, so a
//! renamed series fails to compile instead of reading as missing.
//!
//! The exposition is Prometheus text 0.0.4. Latencies are summaries in seconds with the
//! quantiles 0.5, 0.99 and 1 (the maximum), plus `_sum` and `_count`.

/// A series' Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Summary,
    Histogram,
}

impl Kind {
    /// The word `# TYPE` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        }
    }
}

/// One series: its name, type and help text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

impl Metric {
    /// This series' value with exactly the label text `labels` (empty, or e.g.
    /// [`P99`] or `{reason="slots_full"}`) in an exposition.
    pub fn read(&self, exposition: &str, labels: &str) -> Option<f64> {
        sample(exposition, self.name, labels)
    }
}

const fn metric(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric { name, kind, help }
}

/// The label text of a summary's median.
pub const P50: &str = "{quantile=\"0.5\"}";
/// The label text of a summary's 99th percentile.
pub const P99: &str = "{quantile=\"0.99\"}";
/// The label text of a summary's maximum.
pub const MAX: &str = "{quantile=\"1\"}";

/// The label text of one phase's quantile in [`TICK_PHASE_SECONDS`] (`q` as in "0.99").
pub fn phase_quantile(phase: &str, q: &str) -> String {
    format!("{{phase=\"{phase}\",quantile=\"{q}\"}}")
}

/// The label text of one reason in [`INPUTS_REJECTED_TOTAL`] or [`CONNECTIONS_REFUSED_TOTAL`].
pub fn reason(reason: &str) -> String {
    format!("{{reason=\"{reason}\"}}")
}

/// The label text of one close code in [`CLOSES_TOTAL`] (a number, or "other").
pub fn code(code: &str) -> String {
    format!("{{code=\"{code}\"}}")
}

use Kind::{Counter, Gauge, Histogram, Summary};

pub const TICKS_TOTAL: Metric = metric("migratory_ticks_total", Counter, "Ticks simulated.");
pub const TICK: Metric = metric("migratory_tick", Gauge, "The newest tick.");
pub const TICK_RATE_HZ: Metric = metric("migratory_tick_rate_hz", Gauge, "Configured tick rate.");
pub const TICK_OVERRUNS_TOTAL: Metric = metric(
    "migratory_tick_overruns_total",
    Counter,
    "Ticks whose work took longer than the tick duration.",
);
pub const TICKS_CAUGHT_UP_TOTAL: Metric = metric(
    "migratory_ticks_caught_up_total",
    Counter,
    "Ticks run late, back to back, to catch up.",
);
pub const TICKS_SKIPPED_TOTAL: Metric = metric(
    "migratory_ticks_skipped_total",
    Counter,
    "Tick deadlines skipped (not simulated) because the loop fell too far behind.",
);
pub const TICK_LOOP_SECONDS: Metric = metric(
    "migratory_tick_loop_seconds",
    Summary,
    "Work per tick (ingest + step + record + handoff).",
);
pub const TICK_LOOP_RECENT_SECONDS: Metric = metric(
    "migratory_tick_loop_recent_seconds",
    Summary,
    "Work per tick over the last complete second of ticks.",
);
pub const TICK_LOOP_RECENT_CHECKPOINTS: Metric = metric(
    "migratory_tick_loop_recent_checkpoints",
    Gauge,
    "Recording checkpoints taken in the ticks migratory_tick_loop_recent_seconds covers (the last complete second of ticks).",
);
pub const TICK_PHASE_SECONDS: Metric =
    metric("migratory_tick_phase_seconds", Summary, "Work per tick phase.");
pub const TICK_LOOP_DURATION_SECONDS: Metric = metric(
    "migratory_tick_loop_duration_seconds",
    Histogram,
    "Work per tick as a histogram: aggregate it across worlds with histogram_quantile (a summary's quantiles cannot be combined).",
);
pub const TICK_PHASE_DURATION_SECONDS: Metric = metric(
    "migratory_tick_phase_duration_seconds",
    Histogram,
    "Work per tick phase as a histogram (see migratory_tick_loop_duration_seconds).",
);
/// The upper bounds (`le`) of the duration histograms, in seconds: 0.25 ms to 64 ms by
/// powers of two, around a 16.7 ms tick.
pub const DURATION_BUCKETS_SECONDS: [f64; 9] =
    [0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064];
pub const CLIENTS: Metric = metric("migratory_clients", Gauge, "Clients joined in the world.");
pub const CLIENTS_DETACHED: Metric = metric(
    "migratory_clients_detached",
    Gauge,
    "Players whose connection dropped, kept in the world for their reconnect token.",
);
pub const RECLAIMS_TOTAL: Metric = metric(
    "migratory_reclaims_total",
    Counter,
    "HELLOs with a reconnect token, by outcome (taken: the avatar was rebound; refused).",
);
pub const BOOKMARKS_TOTAL: Metric = metric(
    "migratory_bookmarks_total",
    Counter,
    "BOOKMARKs recorded (\"something is wrong here\" from the live viewer), by outcome (recorded; dropped: over one a second per connection, or no recording).",
);
pub const RECONNECT_GRACE_EXPIRED_TOTAL: Metric = metric(
    "migratory_reconnect_grace_expired_total",
    Counter,
    "Detached players whose grace ran out (their Leave was fed to the world then).",
);
pub const CONNECTIONS: Metric = metric("migratory_connections", Gauge, "Live connection tasks.");
pub const HTTP_CONNECTIONS: Metric = metric(
    "migratory_http_connections",
    Gauge,
    "TCP connections in their HTTP phase (before an upgrade, or serving GETs).",
);
pub const CONNECTIONS_REFUSED_TOTAL: Metric = metric(
    "migratory_connections_refused_total",
    Counter,
    "Connections refused at accept, by cap.",
);
pub const HTTP_HEADER_TIMEOUTS_TOTAL: Metric = metric(
    "migratory_http_header_timeouts_total",
    Counter,
    "Connections closed for not sending their HTTP request head in time.",
);
pub const CONNECTIONS_TOTAL: Metric = metric(
    "migratory_connections_total",
    Counter,
    "WebSocket connections accepted.",
);
pub const JOINS_REJECTED_TOTAL: Metric = metric(
    "migratory_joins_rejected_total",
    Counter,
    "Joins the kernel refused (world full).",
);
pub const HANDSHAKE_TIMEOUTS_TOTAL: Metric = metric(
    "migratory_handshake_timeouts_total",
    Counter,
    "Connections closed for not sending HELLO in time.",
);
pub const BYTES_SENT_TOTAL: Metric = metric(
    "migratory_bytes_sent_total",
    Counter,
    "Payload bytes sent to clients.",
);
pub const MESSAGES_SENT_TOTAL: Metric = metric(
    "migratory_messages_sent_total",
    Counter,
    "Messages sent to clients.",
);
pub const SNAPSHOTS_SENT_TOTAL: Metric = metric(
    "migratory_snapshots_sent_total",
    Counter,
    "SNAPSHOT messages sent.",
);
pub const TERRAIN_BYTES_SENT_TOTAL: Metric = metric(
    "migratory_terrain_bytes_sent_total",
    Counter,
    "Terrain message bytes sent.",
);
pub const BYTES_RECEIVED_TOTAL: Metric = metric(
    "migratory_bytes_received_total",
    Counter,
    "Payload bytes received from clients.",
);
pub const MESSAGES_RECEIVED_TOTAL: Metric = metric(
    "migratory_messages_received_total",
    Counter,
    "Messages received from clients.",
);
pub const PINGS_TOTAL: Metric = metric("migratory_pings_total", Counter, "PINGs answered.");
pub const STATE_UPDATES_DROPPED_TOTAL: Metric = metric(
    "migratory_state_updates_dropped_total",
    Counter,
    "SNAPSHOTs dropped because a client's send queue was full.",
);
pub const OVERFLOW_EVENTS_TOTAL: Metric = metric(
    "migratory_overflow_events_total",
    Counter,
    "Times a client's send queue was found full.",
);
pub const EVICTIONS_TOTAL: Metric = metric(
    "migratory_evictions_total",
    Counter,
    "Clients evicted as too slow (queue overflows or terrain timeout).",
);
pub const TERRAIN_EVICTIONS_TOTAL: Metric = metric(
    "migratory_terrain_evictions_total",
    Counter,
    "Clients evicted because they could not take terrain in time.",
);
pub const PROTOCOL_ERRORS_TOTAL: Metric = metric(
    "migratory_protocol_errors_total",
    Counter,
    "Connections closed for a malformed or disallowed message.",
);
pub const INPUTS_REJECTED_TOTAL: Metric = metric(
    "migratory_inputs_rejected_total",
    Counter,
    "Client inputs turned down, by reason.",
);
pub const CLOSES_TOTAL: Metric = metric(
    "migratory_closes_total",
    Counter,
    "Connections the server closed, by close code.",
);
pub const RECORDING_BYTES: Metric = metric(
    "migratory_recording_bytes",
    Gauge,
    "Bytes written to this session's recording.",
);
pub const RECORDING_ERRORS_TOTAL: Metric = metric(
    "migratory_recording_errors_total",
    Counter,
    "Recording write failures (recording stops at the first).",
);
pub const RECORDING_CHECKPOINTS_TOTAL: Metric = metric(
    "migratory_recording_checkpoints_total",
    Counter,
    "World checkpoints handed to the recording (each archives the world on the tick thread).",
);
pub const RECORDING_SHIPPED_BYTES: Metric = metric(
    "migratory_recording_shipped_bytes",
    Gauge,
    "Bytes of this session's recording the fleet's shared store has taken (0 when it keeps none).",
);
pub const RECORDING_SHIP_FAILURES_TOTAL: Metric = metric(
    "migratory_recording_ship_failures_total",
    Counter,
    "Shipments of the recording to the fleet that failed and will be tried again.",
);
pub const VIEW_ARENA_BYTES: Metric = metric(
    "migratory_view_arena_bytes",
    Gauge,
    "Bytes of the joined clients' remembered-view arenas (each grows with its client's worst ack lag); refreshed once a second.",
);
pub const PROCESS_RESIDENT_MEMORY_BYTES: Metric = metric(
    "process_resident_memory_bytes",
    Gauge,
    "Resident memory size in bytes.",
);
pub const PROCESS_CPU_SECONDS_TOTAL: Metric = metric(
    "process_cpu_seconds_total",
    Counter,
    "Total user and system CPU time spent in seconds.",
);
pub const PROCESS_CPU_SYSTEM_SECONDS_TOTAL: Metric = metric(
    "migratory_process_cpu_system_seconds_total",
    Counter,
    "The system (OS kernel) part of process_cpu_seconds_total: sends, receives, and on loopback the delivery of what was sent.",
);

/// Every series, in the order `/metrics` shows them (the process figures only on Linux).
pub const ALL: &[Metric] = &[
    TICKS_TOTAL,
    TICK,
    TICK_RATE_HZ,
    TICK_OVERRUNS_TOTAL,
    TICKS_CAUGHT_UP_TOTAL,
    TICKS_SKIPPED_TOTAL,
    TICK_LOOP_SECONDS,
    TICK_LOOP_RECENT_SECONDS,
    TICK_LOOP_RECENT_CHECKPOINTS,
    TICK_PHASE_SECONDS,
    TICK_LOOP_DURATION_SECONDS,
    TICK_PHASE_DURATION_SECONDS,
    CLIENTS,
    CLIENTS_DETACHED,
    RECLAIMS_TOTAL,
    BOOKMARKS_TOTAL,
    RECONNECT_GRACE_EXPIRED_TOTAL,
    CONNECTIONS,
    HTTP_CONNECTIONS,
    CONNECTIONS_REFUSED_TOTAL,
    HTTP_HEADER_TIMEOUTS_TOTAL,
    CONNECTIONS_TOTAL,
    JOINS_REJECTED_TOTAL,
    HANDSHAKE_TIMEOUTS_TOTAL,
    BYTES_SENT_TOTAL,
    MESSAGES_SENT_TOTAL,
    SNAPSHOTS_SENT_TOTAL,
    TERRAIN_BYTES_SENT_TOTAL,
    BYTES_RECEIVED_TOTAL,
    MESSAGES_RECEIVED_TOTAL,
    PINGS_TOTAL,
    STATE_UPDATES_DROPPED_TOTAL,
    OVERFLOW_EVENTS_TOTAL,
    EVICTIONS_TOTAL,
    TERRAIN_EVICTIONS_TOTAL,
    PROTOCOL_ERRORS_TOTAL,
    INPUTS_REJECTED_TOTAL,
    CLOSES_TOTAL,
    RECORDING_BYTES,
    RECORDING_ERRORS_TOTAL,
    RECORDING_CHECKPOINTS_TOTAL,
    RECORDING_SHIPPED_BYTES,
    RECORDING_SHIP_FAILURES_TOTAL,
    VIEW_ARENA_BYTES,
    PROCESS_RESIDENT_MEMORY_BYTES,
    PROCESS_CPU_SECONDS_TOTAL,
    PROCESS_CPU_SYSTEM_SECONDS_TOTAL,
];

/// Finds a sample in a Prometheus text exposition: `name` with exactly the label text
/// `labels` (e.g. `{quantile="0.99"}` or empty).
pub fn sample(exposition: &str, name: &str, labels: &str) -> Option<f64> {
    let key = format!("{name}{labels} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_valid() {
        let mut names: Vec<&str> = ALL.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a series is listed twice");
        for n in names {
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{n}"
            );
        }
    }

    #[test]
    fn samples_match_name_and_labels_exactly() {
        let text = "migratory_ticks_total 12\nmigratory_ticks_total_x 3\nmigratory_tick_loop_seconds{quantile=\"0.99\"} 0.5\n";
        assert_eq!(TICKS_TOTAL.read(text, ""), Some(12.0));
        assert_eq!(TICK_LOOP_SECONDS.read(text, P99), Some(0.5));
        assert_eq!(TICK_LOOP_SECONDS.read(text, P50), None);
        assert_eq!(TICK.read(text, ""), None);
    }
}
