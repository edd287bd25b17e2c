//! The flusher thread: writes the snapshots the tick thread queued into the clients'
//! outlets, so the tick thread hands a tick's sends over with one wake-up instead of
//! making each `write` itself.
//!
//! Written on the tick thread, 1,000 clients' snapshots took the loop's median from 2.2 to
//! 3.9 ms and its p99 from 5.0 to 7.7 ms (`net/bench/hold_cpu.sh`), which the soak's
//! per-second 99th percentile (10 ms at most) could not afford.

use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::outlet::Outlet;

/// The tick thread's end of the flusher.
#[derive(Debug)]
pub(crate) struct Flusher {
    /// `None` when the thread could not be started: the tick thread writes itself.
    due: Option<mpsc::Sender<Vec<Arc<Outlet>>>>,
    /// Lists the thread is done with, for the next tick to fill.
    spare: Option<mpsc::Receiver<Vec<Arc<Outlet>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts the thread (or, if it cannot be started, a flusher that writes in place).
    pub fn start() -> Flusher {
        let (due, due_rx) = mpsc::channel::<Vec<Arc<Outlet>>>();
        let (spare_tx, spare) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("migratory-flusher".into())
            .spawn(move || {
                for mut outlets in due_rx {
                    for o in outlets.drain(..) {
                        o.write_waiting();
                    }
                    // The tick thread may be gone already: then the list is dropped here.
                    let _ = spare_tx.send(outlets);
                }
            });
        match started {
            Ok(thread) => Flusher {
                due: Some(due),
                spare: Some(spare),
                thread: Some(thread),
            },
            Err(e) => {
                tracing::warn!(error = %e, "no flusher thread: the tick thread writes snapshots itself");
                Flusher {
                    due: None,
                    spare: None,
                    thread: None,
                }
            }
        }
    }

    /// An empty list to fill with the outlets a tick queued into.
    pub fn list(&self) -> Vec<Arc<Outlet>> {
        self.spare
            .as_ref()
            .and_then(|s| s.try_recv().ok())
            .unwrap_or_default()
    }

    /// Writes what waits in `outlets`, on the thread (or here, without one).
    pub fn flush(&self, mut outlets: Vec<Arc<Outlet>>) {
        if outlets.is_empty() {
            return;
        }
        if let Some(due) = &self.due {
            match due.send(outlets) {
                Ok(()) => return,
                // The thread died (it cannot panic on its own): write here.
                Err(mpsc::SendError(back)) => outlets = back,
            }
        }
        for o in outlets {
            o.write_waiting();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Its channel closed, the thread writes what it was given and ends.
        self.due = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queued_snapshots_reach_the_socket_through_the_thread() {
        let (server, mut client) = tokio::io::duplex(1 << 16);
        let outlet = Outlet::new(server, 8, 2_048);
        outlet.open();
        let flusher = Flusher::start();
        for round in 0..3u8 {
            let mut list = flusher.list();
            assert!(list.is_empty());
            outlet.queue_binary(&[round], &[7; 10]).unwrap();
            list.push(outlet.clone());
            flusher.flush(list);
            let mut got = [0u8; 13];
            tokio::io::AsyncReadExt::read_exact(&mut client, &mut got)
                .await
                .unwrap();
            assert_eq!(got[..3], [0x82, 11, round]);
        }
        drop(flusher);
        assert!(outlet.take_sent_since_overflow());
    }
}
