//! What a connection task and the tick thread tell each other: the events a connection
//! sends (HELLO, reclaim, inputs, acks, its end), the messages the tick thread queues for
//! it, and the state both sides share about one client.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::outlet::Outlet;
use crate::send_queue::Sender;
use migratory_wire::protocol::{CameraMsg, InputMsg, ReconnectToken};
use tokio::sync::{oneshot, Notify};
use tokio_tungstenite::tungstenite::Bytes;

/// Why the server asks a connection to close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseRequest {
    pub code: u16,
    pub reason: String,
}

/// Serial numbers of connections, so events from a connection that a reclaim replaced are
/// told from its successor's (both speak for the same client id).
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// What a connection task and the tick thread share about one client.
#[derive(Debug)]
pub struct ClientShared {
    pub client: u32,
    /// This connection's serial number (unique in the process).
    pub connection: u64,
    pub state_updates_dropped: AtomicU64,
    pub overflow_events: AtomicU64,
    pub queue_depth_hwm: AtomicUsize,
    /// Where the tick thread writes this connection's snapshots. It opens once the
    /// connection has delivered the terrain: snapshots due before then are not sent (nor
    /// counted as overflows), so the terrain timeout alone decides whether a client too
    /// slow to take the terrain is evicted.
    pub outlet: Arc<Outlet>,
    /// The client ended the connection with its own close frame: it left, so its avatar
    /// leaves at once instead of waiting out the reconnect grace.
    pub closed_by_client: AtomicBool,
    close: Mutex<Option<CloseRequest>>,
    /// Set once `close` holds a request: the connection checks it on every wake-up without
    /// taking the lock.
    close_set: AtomicBool,
    close_notify: Notify,
}

impl ClientShared {
    pub fn new(client: u32, outlet: Arc<Outlet>) -> ClientShared {
        ClientShared {
            client,
            connection: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            state_updates_dropped: AtomicU64::new(0),
            overflow_events: AtomicU64::new(0),
            queue_depth_hwm: AtomicUsize::new(0),
            outlet,
            closed_by_client: AtomicBool::new(false),
            close: Mutex::new(None),
            close_set: AtomicBool::new(false),
            close_notify: Notify::new(),
        }
    }

    /// Asks the connection to close; the first request wins. Callable from any thread.
    pub fn request_close(&self, code: u16, reason: impl Into<String>) {
        let mut slot = self.close.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(CloseRequest {
                code,
                reason: reason.into(),
            });
            self.close_set.store(true, Ordering::Release);
            // The connection may wait in two places at once (its session loop and a write
            // racing closes), so every waiter is woken; `notify_one` then keeps a permit
            // for a waiter that checked the flag just before it was set.
            self.close_notify.notify_waiters();
            self.close_notify.notify_one();
        }
    }

    /// The pending close request, if any.
    pub fn close_request(&self) -> Option<CloseRequest> {
        self.close.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Resolves when a close has been requested.
    pub async fn close_requested(&self) {
        loop {
            if self.close_set.load(Ordering::Acquire) {
                return;
            }
            self.close_notify.notified().await;
        }
    }
}

/// What the tick thread queues for a connection's task to send (snapshots go straight
/// into its outlet).
#[derive(Debug)]
pub enum Outbound {
    /// The join took effect: send this WELCOME, then the terrain, then snapshots.
    /// WELCOME, and whether the client has the terrain cached (nothing more to send).
    Welcome { message: Bytes, terrain_cached: bool },
}

/// What connection tasks tell the tick thread.
#[derive(Debug)]
pub enum NetEvent {
    /// A HELLO was accepted: join this client.
    Hello {
        client: u32,
        name: String,
        /// The client's HELLO named this world's terrain hash.
        terrain_cached: bool,
        /// The client's HELLO asked to spectate.
        spectator: bool,
        /// The client's HELLO asked for a reconnect token.
        want_token: bool,
        shared: Arc<ClientShared>,
        queue: Sender<Outbound>,
    },
    /// A HELLO with a reconnect token: rebind its avatar to this connection. The answer is
    /// the client's shared state (its id is the avatar's client id), or a refusal.
    Reclaim {
        token: ReconnectToken,
        terrain_cached: bool,
        /// The client still holds the snapshots it decoded before the drop.
        keeps_baselines: bool,
        queue: Sender<Outbound>,
        /// The new connection's outlet.
        outlet: Arc<Outlet>,
        reply: oneshot::Sender<Result<Arc<ClientShared>, ReclaimRefused>>,
    },
    /// INPUT, as the client sent it: the newest steering per tick wins; a cast in any of
    /// them counts. `connection` is the sender's serial: a replaced one's are dropped.
    /// `ack` is the tick an INPUT_ACK acks, handled as an ACK after the INPUT.
    Input {
        client: u32,
        connection: u64,
        input: InputMsg,
        ack: Option<u32>,
    },
    /// CAMERA, as the client sent it: the newest camera position per tick wins.
    Camera {
        client: u32,
        connection: u64,
        camera: CameraMsg,
    },
    /// BOOKMARK: recorded with the tick that follows (one a second per connection; the
    /// connection drops the rest).
    Bookmark {
        client: u32,
        connection: u64,
        note: String,
    },
    /// ACK: the newest acked tick per tick wins.
    Ack { client: u32, connection: u64, tick: u32 },
    /// The connection ended (for any reason). Its shared state tells it from a later
    /// connection that reclaimed the same client.
    Gone { shared: Arc<ClientShared> },
}

/// Why a reclaim was refused: the token is not one this world holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimRefused;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_requests_keep_the_first() {
        let s = ClientShared::new(7, Outlet::closed());
        assert_eq!(s.close_request(), None);
        s.request_close(1013, "slow");
        s.request_close(1001, "shutdown");
        assert_eq!(
            s.close_request(),
            Some(CloseRequest {
                code: 1013,
                reason: "slow".into()
            })
        );
    }
}
