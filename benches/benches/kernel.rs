//! Kernel benchmarks: step time per tick at 5,000 and 50,000 boids with 0, 100 and 1,000
//! clients on 1 and 2 shards; hashing alone; and, printed while setting up, the bytes
//! per snapshot and per second each client receives, and the 2-shard speed-up measured
//! with the two worlds interleaved (so drift in this shared machine's speed hits both).
//!
//! Also the client side: decoding every snapshot 1,000 clients receive in 10 s of play.
//!
//! `cargo bench -p migratory-benches --bench kernel` (add `-- step/5000` to filter).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use migratory_kernel::bench_hooks::{anchor_leaf, player_chunk, PLAYERS_PER_CHUNK};
use migratory_kernel::{
    Boid, ClientDecoder, Script, ScriptConfig, TickInputs, TreeLayout, World, WorldConfig, BOIDS_PER_CHUNK,
};

/// A world with `clients` scripted players, warmed up until they have spread out.
struct Session {
    world: World,
    script: Script,
    inputs: TickInputs,
    last: migratory_kernel::TickOutput,
}

impl Session {
    fn new(boids: u32, clients: u32, shards: usize, warm_ticks: u32) -> Session {
        let config = WorldConfig {
            boid_count: boids,
            ..WorldConfig::default()
        };
        let world = World::new(config, shards).expect("default config is valid");
        // As the live server does (`server.pin_shard_threads`): this thread runs shard 0.
        if let Err(e) = world.pin_shard_threads() {
            eprintln!("shard threads left unpinned: {e}");
        }
        let script = Script::new(ScriptConfig {
            clients,
            join_spread_ticks: 120,
            ..ScriptConfig::default()
        });
        let last = world.output().clone();
        let mut s = Session {
            world,
            script,
            inputs: TickInputs::default(),
            last,
        };
        for _ in 0..warm_ticks {
            s.tick();
        }
        s
    }

    /// One tick; returns the time spent in `step` alone.
    fn tick(&mut self) -> Duration {
        self.script.next_inputs(&self.world, &self.last, &mut self.inputs);
        let t0 = Instant::now();
        let out = self.world.step(&self.inputs);
        let spent = t0.elapsed();
        self.last.clone_from(out);
        spent
    }
}

fn step(c: &mut Criterion) {
    let mut group = c.benchmark_group("step");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for boids in [5_000u32, 50_000] {
        for clients in [0u32, 100, 1_000] {
            for shards in [1usize, 2] {
                let mut s = Session::new(boids, clients, shards, 600);
                let id = BenchmarkId::new(
                    format!("{boids}boids/{clients}clients"),
                    format!("{shards}shards"),
                );
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| (0..iters).map(|_| s.tick()).sum());
                });
            }
        }
    }
    group.finish();
}

fn hashing(c: &mut Criterion) {
    let mut group = c.benchmark_group("hash");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    for (boids, clients) in [(5_000u32, 0u32), (5_000, 1_000), (50_000, 0), (50_000, 1_000)] {
        let s = Session::new(boids, clients, 1, 300);
        group.bench_function(format!("{boids}boids/{clients}clients/full-root"), |b| {
            b.iter(|| s.world.recompute_state_root());
        });
        // What a step hashes besides the per-client digests: the boid leaves of the think
        // group that thought (the others are unchanged, see `hash`), and the player leaves
        // of occupied chunks (those of free slots are cached; 1,000 clients fill 16).
        let active_chunks = clients.div_ceil(64) as usize;
        let layout = TreeLayout::of(s.world.config());
        let mut anchors = vec![Boid::default(); BOIDS_PER_CHUNK];
        group.bench_function(format!("{boids}boids/{clients}clients/step-leaves"), |b| {
            b.iter(|| {
                let tick = s.world.tick();
                let mut acc = 0u8;
                for c in layout.group_leaves(layout.group_thinking_at(tick)) {
                    let chunk = layout.chunk(c);
                    acc ^= anchor_leaf(&layout, chunk, s.world.anchors(), &mut anchors)[0];
                }
                for (c, chunk) in s
                    .world
                    .players()
                    .chunks(PLAYERS_PER_CHUNK)
                    .take(active_chunks)
                    .enumerate()
                {
                    acc ^= player_chunk(c as u32, chunk)[0];
                }
                acc
            });
        });
    }
    group.finish();
}

/// Bytes per snapshot and per second per client over 20 s of play at the defaults.
fn bandwidth(_c: &mut Criterion) {
    for clients in [32u32, 200, 1_000] {
        let mut s = Session::new(5_000, clients, 2, 600);
        let (mut bytes, mut frames, mut max) = (0u64, 0u64, 0usize);
        for _ in 0..1_200 {
            s.tick();
            for f in s.last.snapshots() {
                bytes += f.bytes.len() as u64;
                frames += 1;
                max = max.max(f.bytes.len());
            }
        }
        let cfg = s.world.config();
        let per_s = cfg.tick_rate_hz / cfg.snapshot_interval_ticks;
        println!(
            "bandwidth/5000boids/{clients}clients: mean {} B/snapshot, max {max} B, mean {} B/s per client",
            bytes / frames.max(1),
            bytes * per_s as u64 / frames.max(1)
        );
    }
}

/// The 2-shard speed-up, side by side: two identical sessions (1 and 2 shards) step the
/// same ticks in alternating rounds, and each round's per-tick time is kept. Criterion
/// measures one benchmark after the other, so on a shared machine a speed drift between
/// the two lands entirely in their ratio; interleaving spreads it over both.
fn shard_speedup(_c: &mut Criterion) {
    const ROUNDS: usize = 15;
    const ROUND_TICKS: u32 = 20;
    for boids in [5_000u32, 50_000] {
        for clients in [0u32, 100, 1_000] {
            let mut one = Session::new(boids, clients, 1, 600);
            let mut two = Session::new(boids, clients, 2, 600);
            let (mut t1, mut t2) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
            for _ in 0..ROUNDS {
                for (s, t) in [(&mut one, &mut t1), (&mut two, &mut t2)] {
                    let spent: Duration = (0..ROUND_TICKS).map(|_| s.tick()).sum();
                    t.push(spent / ROUND_TICKS);
                }
            }
            assert_eq!(
                one.world.state_root(),
                two.world.state_root(),
                "1 and 2 shards diverged by tick {}",
                one.world.tick()
            );
            let median = |t: &mut Vec<Duration>| {
                t.sort();
                t[t.len() / 2]
            };
            let (m1, m2) = (median(&mut t1), median(&mut t2));
            println!(
                "speedup/{boids}boids/{clients}clients: 1 shard {:.3} ms ({} ns/boid), 2 shards {:.3} ms, ratio {:.2}x (medians of {ROUNDS} interleaved rounds of {ROUND_TICKS} ticks)",
                m1.as_secs_f64() * 1e3,
                m1.as_nanos() / boids as u128,
                m2.as_secs_f64() * 1e3,
                m1.as_secs_f64() / m2.as_secs_f64(),
            );
        }
    }
}

/// Every snapshot of 600 ticks (10 s) of 1,000 scripted clients, decoded in order by one
/// decoder per client, as each client does (from the first tick, so each client's first
/// snapshot is a full one).
fn decode(c: &mut Criterion) {
    let mut s = Session::new(5_000, 1_000, 1, 0);
    let mut received: Vec<(u32, Vec<u8>)> = Vec::new();
    for _ in 0..600 {
        s.tick();
        received.extend(s.last.snapshots().map(|f| (f.client, f.bytes.to_vec())));
    }
    let clients = received.iter().map(|(c, _)| *c as usize + 1).max().unwrap_or(0);
    let mut group = c.benchmark_group("decode");
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    group.bench_function(format!("{}snapshots/1000clients", received.len()), |b| {
        b.iter(|| {
            let mut decoders = vec![ClientDecoder::new(); clients];
            for (client, bytes) in &received {
                let decoded = decoders[*client as usize].decode(bytes);
                assert!(decoded.is_ok(), "client {client}: {decoded:?}");
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bandwidth, shard_speedup, hashing, step, decode);
criterion_main!(benches);
