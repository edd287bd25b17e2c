//! Hostile and broken clients, one test each. Throughout each, a well-behaved witness
//! client keeps receiving snapshots: one bad client never costs anyone else.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::SinkExt;
use migratory_server::ServerHandle;
use migratory_wire::protocol::{self, InputMsg, PROTOCOL_VERSION};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

use crate::common::{self, Witness};

async fn server_and_witness() -> (ServerHandle, Witness) {
    let mut config = common::small_config();
    config.server.hello_timeout_seconds = 0.5;
    let server = common::start(config).await;
    let witness = Witness::join(&server.ws_url()).await;
    (server, witness)
}

async fn finish(server: ServerHandle, witness: Witness) {
    witness.assert_receiving().await;
    witness.stop().await;
    server.shutdown().await.expect("clean stop");
}

/// Sends `bytes` as one binary message on a fresh connection and returns the close.
async fn close_after(server: &ServerHandle, hello_first: bool, bytes: Vec<u8>) -> (u16, String) {
    let mut ws = if hello_first {
        common::join(&server.ws_url(), "bad").await.0
    } else {
        common::connect(&server.ws_url()).await
    };
    // The server may close before a large message is fully written; the close still comes.
    let _ = ws.send(Message::Binary(bytes.into())).await;
    common::close_of(&mut ws).await.expect("a close frame")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_close_with_1002() {
    let (server, witness) = server_and_witness().await;
    let garbage: Vec<u8> = (0..64u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80)
        .collect();
    let (code, reason) = close_after(&server, false, garbage.clone()).await;
    assert_eq!(code, 1002, "{reason}");
    let (code, reason) = close_after(&server, true, garbage).await;
    assert_eq!(code, 1002, "{reason}");
    witness.assert_receiving().await;
    // Garbage below the WebSocket framing: raw bytes on the socket after the handshake.
    let mut ws = common::connect(&server.ws_url()).await;
    if let MaybeTlsStream::Plain(tcp) = ws.get_mut() {
        tcp.write_all(&[0xff; 32]).await.expect("raw write");
    }
    let (code, reason) = common::close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1002, "{reason}");
    assert!(server.metrics().protocol_errors_total.load(Relaxed) >= 3);
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_frames_close_with_1003() {
    let (server, witness) = server_and_witness().await;
    let mut ws = common::join(&server.ws_url(), "texter").await.0;
    ws.send(Message::Text("hello".into())).await.expect("send");
    let (code, reason) = common::close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1003, "{reason}");
    assert!(reason.contains("binary"), "{reason}");
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_close_with_1009() {
    let (server, witness) = server_and_witness().await;
    let mut big = protocol::encode_input(&InputMsg::default());
    big.resize(100_000, 0);
    let (code, reason) = close_after(&server, true, big).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("too big"), "{reason}");
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_version_closes_with_1002_and_says_why() {
    let (server, witness) = server_and_witness().await;
    // A protocol 1 client's HELLO (no flags byte), and a HELLO from the future.
    let v1 = vec![0x10, 0x01, 0x00, 0x03, b'o', b'l', b'd'];
    let v3 = protocol::encode_hello(PROTOCOL_VERSION + 1, "future", None);
    for (hello, found) in [(v1, 1), (v3, PROTOCOL_VERSION + 1)] {
        let (code, reason) = close_after(&server, false, hello).await;
        assert_eq!(code, 1002, "{reason}");
        assert!(
            reason.contains(&format!(
                "unsupported protocol version {found} (this server speaks 2)"
            )),
            "{reason}"
        );
    }
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_message_types_close_with_1002() {
    let (server, witness) = server_and_witness().await;
    let (code, reason) = close_after(&server, true, vec![0x7e, 0, 0, 0]).await;
    assert_eq!(code, 1002, "{reason}");
    assert!(reason.contains("0x7e"), "{reason}");
    // A server type sent by a client is unknown too.
    let (code, _) = close_after(&server, true, vec![protocol::server_type::SNAPSHOT]).await;
    assert_eq!(code, 1002);
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_before_hello_closes_with_1008() {
    let (server, witness) = server_and_witness().await;
    let input = protocol::encode_input(&InputMsg {
        seq: 1,
        dir_x: 1,
        dir_y: 0,
        throttle: 50,
        cast: false,
    });
    let (code, reason) = close_after(&server, false, input).await;
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("before HELLO"), "{reason}");
    let input_ack = protocol::encode_input_ack(&InputMsg::default(), 0);
    let (code, reason) = close_after(&server, false, input_ack).await;
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("INPUT_ACK before HELLO"), "{reason}");
    // And a second HELLO is a state error too.
    let (code, reason) = close_after(
        &server,
        true,
        protocol::encode_hello(PROTOCOL_VERSION, "again", None),
    )
    .await;
    assert_eq!(code, 1008, "{reason}");
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_flood_is_rate_limited_then_closed_with_1008() {
    let (server, witness) = server_and_witness().await;
    let mut ws = common::join(&server.ws_url(), "flooder").await.0;
    for seq in 1..=1500u32 {
        let m = InputMsg {
            seq,
            dir_x: 100,
            dir_y: -100,
            throttle: 100,
            cast: seq % 2 == 0,
        };
        // The server closes part-way; later sends may fail, which is the point.
        if ws
            .feed(Message::Binary(protocol::encode_input(&m).into()))
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = ws.flush().await;
    let (code, reason) = common::close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("rate limit"), "{reason}");
    let limited = server.metrics().inputs_rate_limited_total.load(Relaxed);
    assert!(limited > 400, "rate-limited messages counted: {limited}");
    finish(server, witness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_says_hello_is_timed_out_with_1008() {
    let (server, witness) = server_and_witness().await;
    let started = tokio::time::Instant::now();
    let mut ws = common::connect(&server.ws_url()).await;
    // PINGs do not count as a handshake.
    common::send(&mut ws, protocol::encode_ping(1)).await;
    let (code, reason) = common::close_of(&mut ws).await.expect("a close frame");
    let waited = started.elapsed();
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("HELLO"), "{reason}");
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(server.metrics().handshake_timeouts_total.load(Relaxed), 1);
    finish(server, witness).await;
}

/// A name that would not show as itself (PROTOCOL.md, HELLO) closes with 1008, naming the
/// rule; the same name without the hidden character joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_hidden_or_line_breaking_characters_close_with_1008() {
    let (server, witness) = server_and_witness().await;
    for bad in [
        "zero\u{200B}width",
        "line\u{2028}break",
        "\u{202E}desrever",
        "nel\u{0085}",
    ] {
        let hello = protocol::encode_hello(PROTOCOL_VERSION, bad, None);
        let (code, reason) = close_after(&server, false, hello).await;
        assert_eq!(code, 1008, "{bad:?}: {reason}");
        assert!(reason.contains("name"), "{bad:?}: {reason}");
    }
    let (ws, welcome) = common::join(&server.ws_url(), "zerowidth").await;
    assert!(welcome.client_id > 0);
    drop(ws);
    finish(server, witness).await;
}
