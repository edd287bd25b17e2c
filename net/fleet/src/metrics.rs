//! The fleet node's own `/metrics` (Prometheus text, through the `prometheus-client`
//! crate: nothing here is on a tick path), and the Prometheus HTTP service discovery
//! list of every running world server's metrics target.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// How a join was answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Outcome {
    pub(crate) outcome: &'static str,
}

/// A world's state as this node sees it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WorldState {
    pub(crate) state: &'static str,
}

/// The states `worlds` counts, each set on every scrape (0 included).
pub(crate) const WORLD_STATES: [&str; 4] = ["running", "running_elsewhere", "orphaned", "stopped"];

/// The node's series. Counters count since the node started.
#[derive(Debug)]
pub(crate) struct FleetMetrics {
    registry: Registry,
    /// Joins by outcome: `running` (this node's server), `started` (this node started
    /// it), `elsewhere` (another node's server), `failed`.
    pub(crate) joins: Family<Outcome, Counter>,
    pub(crate) join_seconds: Histogram,
    pub(crate) resumes: Counter,
    pub(crate) takeovers: Counter,
    /// Worlds this node handed to another node (a move or a drain).
    pub(crate) moves: Counter,
    /// World servers that exited without being asked.
    pub(crate) crashes: Counter,
    pub(crate) health_misses: Counter,
    pub(crate) health_kills: Counter,
    /// Shipments refused because the world had moved on.
    pub(crate) fenced_appends: Counter,
    pub(crate) shipped_bytes: Counter,
    pub(crate) store_append_seconds: Histogram,
    pub(crate) servers_running: Gauge,
    /// World slots kept in memory (one per world this node has touched).
    pub(crate) world_slots: Gauge,
    /// Worlds in the store by state, as this node sees them at the scrape.
    pub(crate) worlds: Family<WorldState, Gauge>,
}

impl FleetMetrics {
    pub(crate) fn new() -> FleetMetrics {
        let mut registry = Registry::with_prefix("migratory_fleet");
        let m = FleetMetrics {
            joins: Family::default(),
            // 1 ms to ~33 s: a join to a running world takes a store read, one that starts
            // a world its load and resume.
            join_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            resumes: Counter::default(),
            takeovers: Counter::default(),
            moves: Counter::default(),
            crashes: Counter::default(),
            health_misses: Counter::default(),
            health_kills: Counter::default(),
            fenced_appends: Counter::default(),
            shipped_bytes: Counter::default(),
            store_append_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            servers_running: Gauge::default(),
            world_slots: Gauge::default(),
            worlds: Family::default(),
            registry: Registry::default(),
        };
        registry.register("joins", "Joins answered, by outcome", m.joins.clone());
        registry.register("join_seconds", "Time to answer a join", m.join_seconds.clone());
        registry.register(
            "resumes",
            "World servers started from an earlier segment",
            m.resumes.clone(),
        );
        registry.register(
            "takeovers",
            "Worlds taken over from a node whose lease lapsed",
            m.takeovers.clone(),
        );
        registry.register(
            "moves",
            "Worlds this node handed to another node (a move or a drain)",
            m.moves.clone(),
        );
        registry.register(
            "crashes",
            "World servers that exited without being asked",
            m.crashes.clone(),
        );
        registry.register(
            "health_misses",
            "World server /status polls that got no answer",
            m.health_misses.clone(),
        );
        registry.register(
            "health_kills",
            "World servers killed for not answering /status",
            m.health_kills.clone(),
        );
        registry.register(
            "fenced_appends",
            "Recording shipments refused because the world had moved on",
            m.fenced_appends.clone(),
        );
        registry.register(
            "shipped_bytes",
            "Recording bytes appended to the shared store",
            m.shipped_bytes.clone(),
        );
        registry.register(
            "store_append_seconds",
            "Time of one append of recording bytes to the shared store",
            m.store_append_seconds.clone(),
        );
        registry.register(
            "world_servers_running",
            "World servers running on this node (one being started or stopped counts)",
            m.servers_running.clone(),
        );
        registry.register(
            "world_slots",
            "Worlds this node keeps state for in memory",
            m.world_slots.clone(),
        );
        registry.register(
            "worlds",
            "Worlds in the store by state: running (here), running_elsewhere (on a live node), orphaned (its node's lease lapsed), stopped",
            m.worlds.clone(),
        );
        FleetMetrics { registry, ..m }
    }

    /// The exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The `Content-Type` of the exposition.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
