//! What the tick thread pays to instrument one tick, with the server's hand-written
//! metrics against the two well-kept Prometheus libraries (prometheus-client, and metrics
//! with metrics-exporter-prometheus): five latency samples (loop and four phases) and one
//! counter, as `TickLoop::tick_once` records them. Measured quiet, and with a second
//! thread scraping (rendering the exposition) in a loop, which is the worst case for a
//! library that locks. Also the cost of one scrape.
//!
//! `cargo bench -p migratory-benches --bench metrics`. The figures and the decision are in
//! ARCHITECTURE.md ("Metrics").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;

use criterion::{criterion_group, criterion_main, Criterion};
use migratory_server::metrics::Metrics;

/// Latency samples of one tick, in microseconds (loop, ingest, step, record, handoff),
/// varied so the histograms see a spread of buckets.
fn samples(i: u64) -> [u64; 5] {
    let j = i % 97;
    [900 + j * 13, 20 + j, 700 + j * 11, 40 + j % 7, 120 + j * 3]
}

const PHASES: [&str; 4] = ["ingest", "step", "record", "handoff"];

trait Instruments: Send + Sync + 'static {
    fn tick(&self, i: u64);
    fn scrape(&self) -> usize;
}

impl Instruments for Metrics {
    fn tick(&self, i: u64) {
        let s = samples(i);
        self.loop_us.record(s[0]);
        self.ingest_us.record(s[1]);
        self.step_us.record(s[2]);
        self.record_us.record(s[3]);
        self.handoff_us.record(s[4]);
        self.ticks_total.fetch_add(1, Relaxed);
    }

    fn scrape(&self) -> usize {
        self.render().len()
    }
}

struct PromClient {
    registry: prometheus_client::registry::Registry,
    loop_s: prometheus_client::metrics::histogram::Histogram,
    phases: Vec<prometheus_client::metrics::histogram::Histogram>,
    ticks: prometheus_client::metrics::counter::Counter,
}

impl PromClient {
    fn new() -> PromClient {
        use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
        let mut registry = prometheus_client::registry::Registry::default();
        // 10 us .. 0.3 s in doubling buckets: the resolution a tick loop needs.
        let buckets = || exponential_buckets(1e-5, 2.0, 16);
        let loop_s = Histogram::new(buckets());
        registry.register("migratory_tick_loop_seconds", "Work per tick.", loop_s.clone());
        let phases: Vec<Histogram> = PHASES
            .iter()
            .map(|p| {
                let h = Histogram::new(buckets());
                registry.register(
                    format!("migratory_tick_{p}_seconds"),
                    "Work per tick phase.",
                    h.clone(),
                );
                h
            })
            .collect();
        let ticks = prometheus_client::metrics::counter::Counter::default();
        registry.register("migratory_ticks", "Ticks simulated.", ticks.clone());
        PromClient {
            registry,
            loop_s,
            phases,
            ticks,
        }
    }
}

impl Instruments for PromClient {
    fn tick(&self, i: u64) {
        let s = samples(i);
        self.loop_s.observe(s[0] as f64 * 1e-6);
        for (h, v) in self.phases.iter().zip(&s[1..]) {
            h.observe(*v as f64 * 1e-6);
        }
        self.ticks.inc();
    }

    fn scrape(&self) -> usize {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding into a String");
        out.len()
    }
}

struct MetricsRs {
    handle: metrics_exporter_prometheus::PrometheusHandle,
    loop_s: metrics::Histogram,
    phases: Vec<metrics::Histogram>,
    ticks: metrics::Counter,
}

impl MetricsRs {
    fn new() -> MetricsRs {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
            .set_quantiles(&[0.5, 0.99, 1.0])
            .expect("valid quantiles")
            .build_recorder();
        let handle = recorder.handle();
        let (loop_s, phases, ticks) = metrics::with_local_recorder(&recorder, || {
            let loop_s = metrics::histogram!("migratory_tick_loop_seconds");
            let phases = PHASES
                .iter()
                .map(|p| metrics::histogram!("migratory_tick_phase_seconds", "phase" => *p))
                .collect();
            (loop_s, phases, metrics::counter!("migratory_ticks_total"))
        });
        // The handles keep the recorder's storage alive; the recorder itself may go.
        std::mem::forget(recorder);
        MetricsRs {
            handle,
            loop_s,
            phases,
            ticks,
        }
    }
}

impl Instruments for MetricsRs {
    fn tick(&self, i: u64) {
        let s = samples(i);
        self.loop_s.record(s[0] as f64 * 1e-6);
        for (h, v) in self.phases.iter().zip(&s[1..]) {
            h.record(*v as f64 * 1e-6);
        }
        self.ticks.increment(1);
    }

    fn scrape(&self) -> usize {
        self.handle.render().len()
    }
}

fn bench_one<I: Instruments>(c: &mut Criterion, name: &str, instruments: Arc<I>) {
    let mut group = c.benchmark_group("metrics");
    let i = AtomicU64::new(0);
    // Warm: a minute of ticks already recorded, as on a running server.
    for _ in 0..3_600 {
        instruments.tick(i.fetch_add(1, Relaxed));
    }
    group.bench_function(format!("{name}/tick"), |b| {
        b.iter(|| instruments.tick(i.fetch_add(1, Relaxed)));
    });
    group.bench_function(format!("{name}/scrape"), |b| {
        b.iter(|| instruments.scrape());
    });
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (stop, instruments) = (stop.clone(), instruments.clone());
        thread::spawn(move || {
            let mut scrapes = 0u64;
            while !stop.load(Relaxed) {
                std::hint::black_box(instruments.scrape());
                scrapes += 1;
            }
            scrapes
        })
    };
    group.bench_function(format!("{name}/tick-while-scraping"), |b| {
        b.iter(|| instruments.tick(i.fetch_add(1, Relaxed)));
    });
    stop.store(true, Relaxed);
    let scrapes = scraper.join().expect("the scraper thread");
    assert!(scrapes > 0, "the scraper never ran");
    group.finish();
}

fn metrics_benches(c: &mut Criterion) {
    bench_one(c, "hand-written", Metrics::new(60));
    bench_one(c, "prometheus-client", Arc::new(PromClient::new()));
    bench_one(c, "metrics-exporter-prometheus", Arc::new(MetricsRs::new()));
}

criterion_group!(benches, metrics_benches);
criterion_main!(benches);
