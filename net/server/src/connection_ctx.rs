//! What every connection task shares: `ConnectionCtx` (its limits, the counters it counts
//! into, what the tick thread publishes, the channel to it, the terrain every client gets,
//! the server's shutdown and fence), built once by `start` from the config and a
//! `ConnectionWiring`, and the WebSocket settings of every connection.

use std::sync::Arc;
use std::time::Duration;

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Bytes;

use crate::board::TickBoard;
use crate::config::{BackpressureSection, InputLimitsSection, ServerConfig};
use crate::events::NetEvent;
use crate::lifecycle::Fence;
use crate::metrics::Metrics;

/// What a connection task needs from the server, and nothing else: its limits, the
/// metrics it counts into, the channel to the tick thread, the encoded terrain.
#[derive(Debug)]
pub(crate) struct ConnectionCtx {
    pub input_limits: InputLimitsSection,
    pub backpressure: BackpressureSection,
    pub hello_timeout: Duration,
    pub client_message_bytes_max: u32,
    pub ws_frame_bytes_max: usize,
    pub ws_config: WebSocketConfig,
    pub metrics: Arc<Metrics>,
    /// What the tick thread publishes: the tick a PONG reports.
    pub board: Arc<TickBoard>,
    pub events: std::sync::mpsc::Sender<NetEvent>,
    pub next_client_id: std::sync::atomic::AtomicU32,
    /// The terrain messages every client gets after WELCOME, encoded once.
    pub terrain: Arc<Vec<Bytes>>,
    /// The terrain's content hash: a HELLO naming it gets no terrain messages.
    pub terrain_hash: [u8; 32],
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Raised when the fleet fences this server: the shutdown's close code is then REJOIN.
    pub fence: Arc<Fence>,
}

/// What every connection is wired to: the counters, what the tick thread publishes, the
/// channel to it, the server's shutdown and its fence.
#[derive(Debug)]
pub struct ConnectionWiring {
    pub metrics: Arc<Metrics>,
    pub board: Arc<TickBoard>,
    pub events: std::sync::mpsc::Sender<NetEvent>,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub fence: Arc<Fence>,
}

impl ConnectionCtx {
    /// The connection settings of `config`, with the terrain every client gets and the
    /// server's shared parts.
    pub fn new(
        config: &ServerConfig,
        (terrain, terrain_hash): (Arc<Vec<Bytes>>, [u8; 32]),
        wiring: ConnectionWiring,
    ) -> ConnectionCtx {
        let ConnectionWiring {
            metrics,
            board,
            events,
            shutdown,
            fence,
        } = wiring;
        let s = &config.server;
        ConnectionCtx {
            input_limits: s.input_limits.clone(),
            backpressure: s.client_backpressure.clone(),
            hello_timeout: Duration::from_secs_f64(s.hello_timeout_seconds),
            client_message_bytes_max: s.max_client_message_bytes,
            ws_frame_bytes_max: s.ws_frame_max_bytes as usize,
            ws_config: ws_config(s.ws_frame_max_bytes, s.max_client_message_bytes),
            metrics,
            board,
            events,
            next_client_id: std::sync::atomic::AtomicU32::new(1),
            terrain,
            terrain_hash,
            shutdown,
            fence,
        }
    }
}

/// The WebSocket settings of every connection.
fn ws_config(frame_max_bytes: u32, client_message_max_bytes: u32) -> WebSocketConfig {
    // A message longer than this is read over several reads, so it bounds nothing.
    const CLIENT_READ_BUFFER_BYTES: usize = 256;
    let frame_max = frame_max_bytes as usize;
    WebSocketConfig::default()
        // A small read buffer: the default 128 KiB is zero-filled per read and kept per
        // connection. A client sends one short message per snapshot (an INPUT_ACK is tens
        // of bytes), so 256 bytes holds several, and a longer one (at most
        // `max_client_message_bytes`) is read over several reads; with 1,000 clients 4 KiB
        // was 4.1 MB of heap and 1 KiB 1.0 MB (heaptrack).
        .read_buffer_size(CLIENT_READ_BUFFER_BYTES)
        // Write each message straight through; the queue upstream does the buffering.
        .write_buffer_size(0)
        // Outgoing frames are at most `frame_max` (long messages are fragmented), so this
        // bound is never hit by our own messages and caps what a stuck peer can pin.
        .max_write_buffer_size(frame_max * 2 + 64 * 1024)
        .max_message_size(Some(client_message_max_bytes as usize))
        .max_frame_size(Some(client_message_max_bytes as usize))
}
