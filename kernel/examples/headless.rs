//! A headless world: scripted players for a number of ticks, then ticks/s and the final root.
//!
//! `cargo run --release -p migratory-kernel --example headless -- [ticks] [shards] [clients] [boids] [ack_lag_ticks_max]`
//!
//! The script's bots ack up to 12 ticks late by default; `ack_lag_ticks_max` 2 is a live
//! server's prompt bots (two remembered views each, which sizes a checkpoint).

// Timing and reporting happen outside the step, so the clock and floats are fine here.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::time::Instant;

use migratory_kernel::hex;
use migratory_kernel::{
    save_checkpoint, save_checkpoint_unsealed, Script, ScriptConfig, TickInputs, World, WorldConfig,
};

fn arg(n: usize, default: u32) -> u32 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let ticks = arg(1, 600);
    let shards = arg(2, 1) as usize;
    let clients = arg(3, 32);
    let config = WorldConfig {
        boid_count: arg(4, 5_000),
        ..WorldConfig::default()
    };
    let started = Instant::now();
    let mut world = match World::new(config.clone(), shards) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    println!("world built in {:?}", started.elapsed());
    // As the live server does by default (`server.pin_shard_threads`).
    if let Err(e) = world.pin_shard_threads() {
        eprintln!("warning: {e}");
    }
    let defaults = ScriptConfig::default();
    let mut script = Script::new(ScriptConfig {
        clients,
        ack_lag_ticks_max: arg(5, defaults.ack_lag_ticks_max),
        ..defaults
    });
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let (mut frame_bytes, mut frames) = (0u64, 0u64);
    let started = Instant::now();
    let mut step_time = std::time::Duration::ZERO;
    let mut step_us: Vec<u64> = Vec::with_capacity(ticks as usize);
    for _ in 0..ticks {
        script.next_inputs(&world, &last, &mut inputs);
        let t0 = Instant::now();
        let out = world.step(&inputs);
        step_time += t0.elapsed();
        step_us.push(t0.elapsed().as_micros() as u64);
        for f in out.snapshots() {
            frame_bytes += f.bytes.len() as u64;
            frames += 1;
        }
        last.clone_from(out);
    }
    let secs = started.elapsed().as_secs_f64();
    let per_snapshot = frame_bytes as f64 / frames.max(1) as f64;
    let snapshots_per_s = config.tick_rate_hz as f64 / config.snapshot_interval_ticks as f64;
    println!(
        "{ticks} ticks, {} boids, {clients} clients, {shards} shard(s): {:.0} ticks/s ({:.3} ms/tick)",
        config.boid_count,
        ticks as f64 / secs,
        secs * 1000.0 / ticks as f64
    );
    println!(
        "step alone: {:.3} ms/tick",
        step_time.as_secs_f64() * 1000.0 / ticks as f64
    );
    println!(
        "frames: {frames}, mean {per_snapshot:.1} B/snapshot = {:.0} B/s per client",
        per_snapshot * snapshots_per_s
    );
    // The spread of single steps once the clients have joined (the last three quarters).
    let warm = &mut step_us[ticks as usize / 4..];
    warm.sort_unstable();
    if let (Some(&max), n) = (warm.last(), warm.len()) {
        println!(
            "step after the first quarter: p50 {} us, p99 {} us, max {max} us",
            warm[n / 2],
            warm[n * 99 / 100]
        );
    }
    // What a recording checkpoint of this world costs the thread that saves it.
    let save_us = median_and_max_us(|| drop(std::hint::black_box(save_checkpoint(&world))));
    let unsealed_us = median_and_max_us(|| drop(std::hint::black_box(save_checkpoint_unsealed(&world))));
    println!(
        "save_checkpoint: {} bytes, median {} us, max {} us; without the checksum (the live \
         server's tick thread) median {} us, max {} us (21 saves each)",
        save_checkpoint(&world).len(),
        save_us.0,
        save_us.1,
        unsealed_us.0,
        unsealed_us.1
    );
    println!("final tick {} root {}", world.tick(), hex(&world.state_root()));
}

/// The median and the longest of 21 runs of `f`, in microseconds.
fn median_and_max_us(f: impl Fn()) -> (u64, u64) {
    let mut us: Vec<u64> = (0..21)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_micros() as u64
        })
        .collect();
    us.sort_unstable();
    (us[10], us[20])
}
