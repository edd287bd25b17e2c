//! The stall watchdog (`MIGRATORY_DEBUG=1`): a thread that warns when a tick phase or the
//! async runtime has not made progress for more than 50 ms, naming the phase.
//!
//! The tick thread publishes its phase and when it began; a tokio task stamps a heartbeat
//! every 10 ms. Both are plain atomics, so watching costs the watched nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::board::TickBoard;
use crate::lifecycle::Lifecycle;
use crate::metrics::Phase;

/// A phase or the runtime silent for longer than this is reported.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(50);
const HEARTBEAT_PERIOD: Duration = Duration::from_millis(10);

/// Stamps the heartbeat from the async runtime until aborted.
pub async fn runtime_heartbeat(board: Arc<TickBoard>, epoch: Instant) {
    let mut interval = tokio::time::interval(HEARTBEAT_PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        board
            .runtime_heartbeat_us
            .store(epoch.elapsed().as_micros() as u64, Relaxed);
    }
}

/// Starts the watchdog thread; it ends when the tick thread is told to stop.
pub fn start(
    board: Arc<TickBoard>,
    epoch: Instant,
    lifecycle: Arc<Lifecycle>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    board
        .runtime_heartbeat_us
        .store(epoch.elapsed().as_micros() as u64, Relaxed);
    std::thread::Builder::new()
        .name("migratory-watchdog".into())
        .spawn(move || watch(&board, epoch, &lifecycle))
}

fn watch(board: &TickBoard, epoch: Instant, lifecycle: &Lifecycle) {
    let threshold_us = STALL_THRESHOLD.as_micros() as u64;
    // The (phase start) already reported, so one stall is logged once.
    let mut reported_phase_start = u64::MAX;
    let mut runtime_stalled = false;
    while !lifecycle.ticking_stopped() {
        std::thread::sleep(HEARTBEAT_PERIOD);
        let now_us = epoch.elapsed().as_micros() as u64;
        let phase = Phase::from_u8(board.phase.load(Relaxed));
        let started = board.phase_started_us.load(Relaxed);
        if phase != Phase::Idle
            && now_us.saturating_sub(started) > threshold_us
            && started != reported_phase_start
        {
            reported_phase_start = started;
            tracing::warn!(
                phase = phase.name(),
                // The tick counter moves on as the step ends.
                tick = board.tick.load(Relaxed) + u32::from(matches!(phase, Phase::Ingest | Phase::Step)),
                stalled_ms = now_us.saturating_sub(started) / 1000,
                "tick phase stalled"
            );
        }
        let beat = board.runtime_heartbeat_us.load(Relaxed);
        let silent_us = now_us.saturating_sub(beat);
        if silent_us > threshold_us + HEARTBEAT_PERIOD.as_micros() as u64 {
            if !runtime_stalled {
                runtime_stalled = true;
                tracing::warn!(stalled_ms = silent_us / 1000, "async runtime stalled");
            }
        } else {
            runtime_stalled = false;
        }
    }
}
