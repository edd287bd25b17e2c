//! The outlet's framing against tungstenite's reader, and its ordering, backpressure and
//! close over a small in-memory pipe.

use super::*;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Reads every binary message a client would see on `read`, until the pipe ends.
async fn messages_read(read: tokio::io::DuplexStream) -> Vec<Vec<u8>> {
    let mut ws = WebSocketStream::from_raw_socket(read, Role::Client, None).await;
    let mut got = Vec::new();
    while let Some(m) = ws.next().await {
        match m {
            Ok(Message::Binary(b)) => got.push(b.to_vec()),
            Ok(other) => panic!("unexpected message {other:?}"),
            // The pipe's end without a close frame.
            Err(_) => break,
        }
    }
    got
}

fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[tokio::test]
async fn frames_of_every_length_class_read_back_as_the_message() {
    let lengths = [0usize, 1, 2, 124, 125, 126, 127, 1_000, 65_535, 65_536, 70_000];
    for frame_bytes_max in [1usize, 3, 125, 126, 2_048, 1 << 20] {
        let (mut server, client) = tokio::io::duplex(1 << 22);
        let mut want = Vec::new();
        for (i, &len) in lengths.iter().enumerate() {
            if frame_bytes_max < 4 && len > 2_000 {
                continue;
            }
            let m = message(i, len);
            let (head, body) = m.split_at(len.min(1));
            server
                .write_all(&binary_frames(head, body, frame_bytes_max))
                .await
                .unwrap();
            want.push(m);
        }
        drop(server);
        assert_eq!(
            messages_read(client).await,
            want,
            "frame_bytes_max {frame_bytes_max}"
        );
    }
}

#[test]
fn a_frame_header_is_as_long_as_its_length_class_needs() {
    assert_eq!(&binary_frames(&[7], &[], 10)[..], &[0x82, 1, 7]);
    let f = binary_frames(&[], &[0; 126], 1 << 20);
    assert_eq!(&f[..4], &[0x82, 126, 0, 126]);
    assert_eq!(f.len(), 4 + 126);
    let f = binary_frames(&[], &[0; 65_536], 1 << 20);
    assert_eq!(&f[..10], &[0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]);
    // Fragments: binary then continuations, FIN on the last only.
    let f = binary_frames(&[1, 2], &[3], 2);
    assert_eq!(&f[..], &[0x02, 2, 1, 2, 0x80, 1, 3]);
}

/// Drains the outlet as the connection task does, until it is closed.
async fn drain_until_closed(outlet: Arc<Outlet>) {
    while std::future::poll_fn(|cx| outlet.poll_drained(cx)).await.is_ok() {}
}

#[tokio::test]
async fn messages_from_another_thread_and_the_task_arrive_whole_and_in_order() {
    // A pipe far smaller than what is sent: most writes wait and are drained.
    let (server, client) = tokio::io::duplex(64);
    let outlet = Outlet::new(server, 1 << 20, 100);
    outlet.open();
    let reader = tokio::spawn(messages_read(client));
    let sender = {
        let outlet = outlet.clone();
        std::thread::spawn(move || {
            for i in 0..300 {
                let m = message(i, i % 250);
                outlet.queue_binary(&m[..0], &m).expect("taken");
                outlet.write_waiting();
                if i % 7 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    // The task's own writes (as tungstenite makes them) go between the thread's; each
    // drains what waits ahead of it.
    let mut writer = Writer(outlet.clone());
    let mut task_messages = Vec::new();
    for i in 1_000..1_040 {
        let m = message(i, 300);
        writer.write_all(&binary_frames(&[], &m, 100)).await.unwrap();
        writer.flush().await.unwrap();
        task_messages.push(m);
    }
    tokio::task::spawn_blocking(move || sender.join().unwrap())
        .await
        .unwrap();
    writer.flush().await.unwrap();
    drop(writer);
    let got = reader.await.unwrap();
    // Each side's messages keep their order, and nothing else arrives.
    let (theirs, ours): (Vec<_>, Vec<_>) = got.into_iter().partition(|m| m.len() != 300);
    assert_eq!(
        theirs,
        (0..300)
            .map(|i| message(i, i % 250))
            .filter(|m| m.len() != 300)
            .collect::<Vec<_>>()
    );
    assert_eq!(ours, task_messages);
}

#[tokio::test]
async fn a_full_outlet_refuses_and_a_drained_one_takes_again() {
    let (server, mut client) = tokio::io::duplex(16);
    let outlet = Outlet::new(server, 2, 2_048);
    outlet.open();
    let m = message(1, 40);
    // The first fills the pipe and waits in part; the second waits whole; the third is refused.
    assert_eq!(outlet.queue_binary(&[], &m), Ok(1));
    outlet.write_waiting();
    assert!(
        !outlet.take_sent_since_overflow(),
        "nothing reached the socket whole"
    );
    assert_eq!(outlet.queue_binary(&[], &m), Ok(2));
    outlet.write_waiting();
    assert_eq!(outlet.queue_binary(&[], &m), Err(Refused::Full));
    // The client reads; the task drains.
    let reading = tokio::spawn(async move {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        while all.len() < 2 * 42 {
            let n = tokio::io::AsyncReadExt::read(&mut client, &mut buf)
                .await
                .unwrap();
            all.extend_from_slice(&buf[..n]);
        }
        (all, client)
    });
    std::future::poll_fn(|cx| outlet.poll_drained(cx)).await.unwrap();
    assert!(outlet.take_sent_since_overflow());
    let (all, mut client) = reading.await.unwrap();
    let frame = binary_frames(&[], &m, 2_048);
    assert_eq!(all, [&frame[..], &frame[..]].concat());
    // Drained, the outlet is no longer blocked: the next write goes straight through.
    assert_eq!(outlet.queue_binary(&[], &[9; 5]), Ok(1));
    outlet.write_waiting();
    let mut got = [0u8; 7];
    tokio::io::AsyncReadExt::read_exact(&mut client, &mut got)
        .await
        .unwrap();
    assert_eq!(got, [0x82, 5, 9, 9, 9, 9, 9]);
}

#[tokio::test]
async fn a_blocked_outlet_is_left_to_the_task() {
    let (server, mut client) = tokio::io::duplex(8);
    let outlet = Outlet::new(server, 4, 2_048);
    outlet.open();
    outlet.queue_binary(&[], &[1; 20]).unwrap();
    outlet.write_waiting();
    // The task waits for room; the pipe's reader then makes some.
    let o = outlet.clone();
    let task = tokio::spawn(async move { std::future::poll_fn(|cx| o.poll_drained(cx)).await });
    tokio::task::yield_now().await;
    // Another thread's write must not take the task's place as the one woken with room.
    outlet.queue_binary(&[], &[2; 3]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| outlet.write_waiting());
    });
    let mut got = vec![0u8; 22 + 5];
    let read = tokio::io::AsyncReadExt::read_exact(&mut client, &mut got);
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the task was woken with room and wrote everything")
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the task was woken with room and drained")
        .unwrap()
        .unwrap();
    assert_eq!(&got[22..], &[0x82, 3, 2, 2, 2]);
}

#[tokio::test]
async fn a_closed_outlet_refuses_and_wakes_its_drainer() {
    let (server, _client) = tokio::io::duplex(16);
    let outlet = Outlet::new(server, 4, 2_048);
    let drainer = tokio::spawn(drain_until_closed(outlet.clone()));
    tokio::task::yield_now().await;
    assert!(!outlet.is_open());
    drop(Writer(outlet.clone()));
    tokio::time::timeout(std::time::Duration::from_secs(10), drainer)
        .await
        .expect("the close wakes the drainer")
        .unwrap();
    assert_eq!(outlet.queue_binary(&[], &[1]), Err(Refused::Closed));
    assert!(!outlet.is_open());
    assert_eq!(Outlet::closed().queue_binary(&[], &[1]), Err(Refused::Closed));
}

/// Snapshots stop before the close frame: one queued before `stop_snapshots` goes out
/// ahead of it, none after (a browser reports a data frame after a close as an error).
#[tokio::test]
async fn no_snapshot_follows_the_close_frame() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
    let (server, client) = tokio::io::duplex(1 << 16);
    let outlet = Outlet::new(server, 8, 2_048);
    outlet.open();
    assert_eq!(outlet.queue_binary(&[], &[1; 3]), Ok(1));
    outlet.stop_snapshots();
    assert!(!outlet.is_open());
    let stream = Duplex {
        read: tokio::io::empty(),
        write: Writer(outlet.clone()),
    };
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
    let close = CloseFrame {
        code: 1001.into(),
        reason: "server shutting down".into(),
    };
    ws.send(Message::Close(Some(close))).await.unwrap();
    assert_eq!(outlet.queue_binary(&[], &[2; 3]), Err(Refused::Closed));
    outlet.write_waiting();
    drop(ws);
    let mut client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    let mut got = Vec::new();
    while let Some(Ok(m)) = client.next().await {
        got.push(m);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], Message::Binary(vec![1u8; 3].into()));
    assert!(
        matches!(got[1], Message::Close(Some(ref f)) if u16::from(f.code) == 1001),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_failed_socket_closes_the_outlet() {
    let (server, client) = tokio::io::duplex(16);
    let outlet = Outlet::new(server, 4, 2_048);
    outlet.open();
    drop(client);
    assert_eq!(outlet.queue_binary(&[], &[1, 2, 3]), Ok(1));
    outlet.write_waiting();
    assert_eq!(outlet.queue_binary(&[], &[1, 2, 3]), Err(Refused::Closed));
    assert!(!outlet.is_open());
}

#[tokio::test]
async fn bytes_read_ahead_come_first() {
    let (mut a, b) = tokio::io::duplex(64);
    a.write_all(b"world").await.unwrap();
    drop(a);
    let mut r = Prefixed {
        ahead: Bytes::from_static(b"hello "),
        read: b,
    };
    let mut got = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut r, &mut got)
        .await
        .unwrap();
    assert_eq!(got, "hello world");
}

/// Over a real TCP socket written straight through its descriptor: a send buffer far
/// smaller than what is queued fills, the writes left over wait for the task, and the
/// client still reads every message whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_straight_to_a_socket_fall_back_to_the_task_when_it_is_full() {
    // Accepted sockets take the listener's send buffer (the server's own `bind` does this).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4_096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await.unwrap() });
    let (server, _) = listener.accept().await.unwrap();
    let client = client.await.unwrap();
    let (_read, write) = server.into_split();
    assert!(
        write.socket_fd().is_some(),
        "a TCP write half is written straight to its socket"
    );
    let count = 400;
    let outlet = Outlet::new(write, count, 2_048);
    outlet.open();
    let drainer = tokio::spawn(drain_until_closed(outlet.clone()));
    // The flusher's part, from a thread of its own: queue and write, never waiting.
    let o = outlet.clone();
    let flusher = std::thread::spawn(move || {
        for i in 0..count {
            o.queue_binary(&[], &message(i, 1_000)).unwrap();
            o.write_waiting();
        }
    });
    let reader = tokio::spawn(async move {
        let mut ws = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        let mut got = Vec::new();
        while got.len() < count {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => got.push(b.to_vec()),
                other => panic!("unexpected {other:?}"),
            }
        }
        got
    });
    flusher.join().unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), reader)
        .await
        .expect("every message arrived (the task drained what the socket could not take)")
        .unwrap();
    assert!(got == (0..count).map(|i| message(i, 1_000)).collect::<Vec<_>>());
    outlet.close();
    drainer.await.unwrap();
}
