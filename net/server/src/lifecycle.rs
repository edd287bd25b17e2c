//! `Lifecycle`: how a running server stops, in one place. A stop is asked for (a signal,
//! the handle, the fleet's `POST /fleet/stop`), or comes by itself (the tick loop ended
//! after `run_ticks`; the fleet fenced this server), and then runs in stages, each a
//! method here that `serve` calls in order:
//!
//! 1. `close_clients`: stop accepting, and close every connection (1001, or REJOIN for a
//!    move or a fence), waiting a bounded time for their close handshakes;
//! 2. `stop_ticking`: the tick thread ends its loop and finishes the recording (its end
//!    record and final checkpoint) before it exits;
//! 3. `ship_last`: the recording's last bytes and reclaim file go to the fleet (bounded);
//! 4. the HTTP side ends.
//!
//! A fence stops the ticking first, before anything else, so no input is taken after the
//! fleet refused this server. Every piece `start` makes is handed this (or the part of it
//! it watches), so no piece keeps a stop flag of its own.

use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};

/// What set a stop off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// A signal, the handle, or the fleet asked.
    Asked,
    /// The tick loop ended by itself (`run_ticks`).
    TickLoopEnded,
    /// The fleet fenced this server: another one owns the world now.
    Fenced,
}

#[derive(Debug)]
pub struct Lifecycle {
    stop_asked: Notify,
    tick_loop_ended: Notify,
    fence: Arc<Fence>,
    /// Stage 1: true once the connections are to close.
    closing: watch::Sender<bool>,
    /// Stage 2: set once the tick thread is to end its loop.
    ticking_stopped: AtomicBool,
    /// Stage 3: notified once the recording is finished and its rest may ship.
    last_shipment: Notify,
}

impl Lifecycle {
    pub fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle {
            stop_asked: Notify::new(),
            tick_loop_ended: Notify::new(),
            fence: Arc::new(Fence::default()),
            closing: watch::channel(false).0,
            ticking_stopped: AtomicBool::new(false),
            last_shipment: Notify::new(),
        })
    }

    /// Asks for a graceful stop (clients closed with 1001).
    pub fn ask_stop(&self) {
        self.stop_asked.notify_one();
    }

    /// Asks for the stop of a move: as `ask_stop`, but clients are closed with REJOIN,
    /// which sends them back through the fleet to the world's next server.
    pub fn ask_stop_for_move(&self) {
        self.fence.set_moving();
        self.stop_asked.notify_one();
    }

    /// The tick thread says its loop has ended.
    pub(crate) fn tick_loop_ended(&self) {
        self.tick_loop_ended.notify_one();
    }

    /// Waits until a stop is asked for or comes by itself. A fence stops the ticking at
    /// once.
    pub(crate) async fn until_stop(&self) -> StopCause {
        let cause = tokio::select! {
            _ = self.stop_asked.notified() => StopCause::Asked,
            _ = self.tick_loop_ended.notified() => StopCause::TickLoopEnded,
            _ = self.fence.notify.notified() => StopCause::Fenced,
        };
        if cause == StopCause::Fenced {
            self.stop_ticking();
        }
        cause
    }

    /// Whether the fleet moves the world or fenced this server (clients get REJOIN), and
    /// why it was fenced.
    pub(crate) fn fence(&self) -> &Arc<Fence> {
        &self.fence
    }

    /// What connections and the accept loop watch: true once they are to close.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Stage 1: stop accepting, and ask every connection to close.
    pub(crate) fn close_clients(&self) {
        self.closing.send_replace(true);
    }

    /// Stage 2: the tick thread ends its loop (and finishes the recording).
    pub(crate) fn stop_ticking(&self) {
        self.ticking_stopped.store(true, Ordering::Release);
    }

    /// Whether the tick thread is to end its loop.
    pub(crate) fn ticking_stopped(&self) -> bool {
        self.ticking_stopped.load(Ordering::Acquire)
    }

    /// Stage 3: the recording is finished; its rest may ship.
    pub(crate) fn ship_last(&self) {
        self.last_shipment.notify_one();
    }

    /// Waits for `ship_last`.
    pub(crate) async fn last_shipment_asked(&self) {
        self.last_shipment.notified().await;
    }
}

/// Set once, when the fleet refuses this server's appends: the reason, and a wake-up for
/// whoever stops the server.
#[derive(Debug, Default)]
pub struct Fence {
    reason: Mutex<Option<String>>,
    pub(crate) notify: Notify,
    /// The fleet is moving the world to another server: the shutdown closes clients
    /// with REJOIN too, so they follow it.
    moving: std::sync::atomic::AtomicBool,
}

impl Fence {
    /// Marks the coming shutdown as a move.
    pub fn set_moving(&self) {
        self.moving.store(true, Relaxed);
    }

    pub fn is_moving(&self) -> bool {
        self.moving.load(Relaxed)
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn is_set(&self) -> bool {
        self.reason().is_some()
    }

    /// Raised by the shipping task when the fleet refuses this server.
    pub(crate) fn set(&self, reason: String) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.notify.notify_one();
    }
}

/// Starts a server's shutdown from anywhere.
#[derive(Clone, Debug)]
pub struct Stopper(pub(crate) Arc<Lifecycle>);

impl Stopper {
    pub fn stop(&self) {
        self.0.ask_stop();
    }

    /// Stops for a move: as `stop`, but clients are closed with REJOIN, which sends
    /// them back through the fleet to the world's next server.
    pub fn stop_moving(&self) {
        self.0.ask_stop_for_move();
    }
}
