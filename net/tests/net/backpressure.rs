//! Slow clients: one that stops reading is evicted (1013) after the configured overflows,
//! or at once when it cannot take the terrain in time, and neither the tick nor the other
//! clients notice.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use migratory_server::config::ServerConfig;
use migratory_wire::protocol::{self, PROTOCOL_VERSION};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, Witness};

/// A world with a big terrain (1024 x 1024 cells, about 2 MB on the wire), so a client that
/// does not read blocks the server's writes long before it has it all.
fn big_terrain_config() -> ServerConfig {
    let mut c = common::small_config();
    // A bounded kernel send buffer: otherwise loopback autotuning swallows megabytes.
    c.server.tcp_send_buffer_bytes = 16 * 1024;
    c.world.terrain_grid_cells = 1024;
    c.world.world_size_mm = 1_024_000;
    c
}

/// Connects with a 4 KiB receive buffer and sends HELLO; then reads nothing when
/// `read_until_snapshot` is false, or reads up to its first SNAPSHOT (so the terrain is
/// delivered) and then nothing more.
async fn stalled_client(url: &str, read_until_snapshot: bool) -> common::Ws {
    let host = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap_or_default();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let tcp = socket
        .connect(host.parse().expect("addr"))
        .await
        .expect("connect");
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(tcp);
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let (mut ws, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
        .await
        .expect("handshake");
    ws.send(Message::Binary(
        protocol::encode_hello(PROTOCOL_VERSION, "sloth", None).into(),
    ))
    .await
    .expect("HELLO");
    if read_until_snapshot {
        loop {
            let Some(Ok(Message::Binary(b))) = ws.next().await else {
                panic!("the connection ended before a snapshot");
            };
            if let Ok(protocol::ServerMessage::Snapshot { .. }) = protocol::decode_server(&b) {
                break;
            }
        }
    }
    ws
}

/// A small terrain the client takes, then a stall: only the snapshots back up, into a
/// queue of 4, and 5 overflows in a row evict.
fn overflow_config() -> ServerConfig {
    let mut config = common::small_config();
    config.server.tcp_send_buffer_bytes = 16 * 1024;
    let bp = &mut config.server.client_backpressure;
    bp.send_queue_max_messages = 4;
    bp.grace_overflow_events = 5;
    bp.terrain_enqueue_timeout_seconds = 60.0;
    bp.log_overflow_at_warn = false;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_evicted_after_the_grace_overflows() {
    let server = common::start(overflow_config()).await;
    let m = server.metrics().clone();
    let witness = Witness::join(&server.ws_url()).await;
    let ticks_before = m.ticks_total.load(Relaxed);
    let sloth = stalled_client(&server.ws_url(), true).await;
    // Full snapshots (the sloth acks nothing) fill the socket buffers within seconds; then
    // a queue of 4 and 5 overflows in a row at 20 snapshots per second.
    assert!(
        common::wait_until(Duration::from_secs(20), || m.evictions_total.load(Relaxed) == 1).await,
        "the stalled client was not evicted: {}",
        m.render()
    );
    // The tick counts the eviction and asks the connection task to close; the task counts
    // the close code when it sends the frame, a moment later.
    assert!(
        common::wait_until(Duration::from_secs(3), || m.closes_with(1013) == 1).await,
        "the evicted client got no 1013 close: {}",
        m.render()
    );
    assert_eq!(m.state_updates_dropped_total.load(Relaxed), 5);
    assert_eq!(m.terrain_evictions_total.load(Relaxed), 0);
    // The close handshake cannot complete (the client reads nothing), so after the close
    // timeout the transport is dropped and the connection task ends.
    assert!(
        common::wait_until(Duration::from_secs(3), || m.connections.load(Relaxed) == 1).await,
        "the evicted connection's task did not end"
    );
    // The tick never waited on the stalled client: the world went on and the witness was
    // served throughout (the tick rate under a stalled client is the soak's figure).
    witness.assert_receiving().await;
    assert!(m.ticks_total.load(Relaxed) > ticks_before);
    drop(sloth);
    witness.stop().await;
    server.shutdown().await.expect("clean stop");
}

/// A client that stops reading while the terrain is on its way is evicted by the terrain
/// timeout, as PROTOCOL.md says, not by the snapshot overflow rule: snapshots wait for the
/// terrain, so none is queued, dropped or counted meanwhile (even with a grace of a few
/// overflows, which the snapshots due in the timeout would otherwise exceed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_during_the_terrain_is_evicted_by_the_terrain_timeout() {
    let mut config = big_terrain_config();
    let bp = &mut config.server.client_backpressure;
    bp.send_queue_max_messages = 4;
    bp.grace_overflow_events = 5;
    bp.terrain_enqueue_timeout_seconds = 1.0;
    bp.log_overflow_at_warn = false;
    let server = common::start(config).await;
    let m = server.metrics().clone();
    let witness = Witness::join(&server.ws_url()).await;
    let sloth = stalled_client(&server.ws_url(), false).await;
    assert!(
        common::wait_until(Duration::from_secs(6), || m.terrain_evictions_total.load(Relaxed)
            == 1)
        .await,
        "the client that could not take the terrain was not evicted by the terrain timeout: {}",
        m.render()
    );
    assert_eq!(m.evictions_total.load(Relaxed), 1, "{}", m.render());
    assert_eq!(m.state_updates_dropped_total.load(Relaxed), 0, "{}", m.render());
    // Counted when the close frame goes out, just after the eviction.
    assert!(
        common::wait_until(Duration::from_secs(3), || m.closes_with(1013) == 1).await,
        "the evicted client got no 1013 close: {}",
        m.render()
    );
    assert!(common::wait_until(Duration::from_secs(3), || m.connections.load(Relaxed) == 1).await);
    witness.assert_receiving().await;
    drop(sloth);
    witness.stop().await;
    server.shutdown().await.expect("clean stop");
}

/// An evicted client that is slow but still reading gets what was pending, then the close
/// frame with the eviction code and its reason (PROTOCOL.md section 5): the server sends it
/// whenever the socket can take it within `eviction_close_timeout_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_client_that_reads_again_gets_the_close_frame_with_its_reason() {
    let mut config = overflow_config();
    config.server.client_backpressure.eviction_close_timeout_seconds = 10.0;
    let server = common::start(config).await;
    let m = server.metrics().clone();
    let mut sloth = stalled_client(&server.ws_url(), true).await;
    assert!(
        common::wait_until(Duration::from_secs(20), || m.evictions_total.load(Relaxed) == 1).await,
        "the stalled client was not evicted: {}",
        m.render()
    );
    // Read again: the snapshots that were on their way, then the close frame.
    let close = tokio::time::timeout(Duration::from_secs(8), common::close_of(&mut sloth))
        .await
        .expect("the close frame within the close timeout");
    let (code, reason) = close.expect("a close frame, not a dropped connection");
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("too slow"), "{reason}");
    server.shutdown().await.expect("clean stop");
}
