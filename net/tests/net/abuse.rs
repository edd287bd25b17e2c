//! Floods that try to take the server down, with a witness client that must keep being
//! served throughout: thousands of half-open sockets that never finish their HTTP request,
//! a connect/disconnect storm, and clients sending garbage, all at once; and the caps on
//! open connections, in all and per address.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, Witness};

/// Raises this process's open-file limit to its hard limit (the flood needs thousands of
/// sockets on both ends, and the server runs in this process).
#[allow(clippy::unnecessary_cast, reason = "rlim_t is not u64 on every target")]
fn raise_fd_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl);
        }
    }
    rl.rlim_cur as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_sockets_a_storm_and_garbage_cannot_lock_a_player_out() {
    let fds = raise_fd_limit();
    // Two ends per socket in this process, plus headroom.
    let half_open = if fds >= 12_000 {
        5_000
    } else {
        ((fds.saturating_sub(200)) / 2).min(5_000) as usize
    };
    assert!(half_open >= 400, "only {fds} file descriptors");
    let mut config = common::small_config();
    config.server.http_header_timeout_seconds = 1.0;
    config.server.connections_max = 1_000;
    config.server.connections_per_ip_max = 1_000;
    let server = common::start(config).await;
    let m = server.metrics().clone();
    let witness = Witness::join(&server.ws_url()).await;
    let addr = server.local_addr();

    // Half-open: connect, send nothing (or half a request line), hold.
    let mut sockets = Vec::with_capacity(half_open);
    for i in 0..half_open {
        match TcpStream::connect(addr).await {
            Ok(mut s) => {
                if i % 2 == 1 {
                    let _ = s.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n").await;
                }
                sockets.push(s);
            }
            Err(e) => panic!("connect {i}: {e}"),
        }
    }
    // A storm of connect/disconnect, and garbage senders, while the half-open ones are held.
    let storm = tokio::spawn(async move {
        for _ in 0..500 {
            if let Ok(s) = TcpStream::connect(addr).await {
                drop(s);
            }
        }
    });
    let url = server.ws_url();
    let garbage: Vec<_> = (0..50u32)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                // While the half-open sockets fill the cap, a garbage client may itself be
                // refused (503): that is the cap working, not the server failing.
                let Ok(Ok((mut ws, _))) = tokio::time::timeout(
                    Duration::from_secs(5),
                    tokio_tungstenite::connect_async(url.as_str()),
                )
                .await
                else {
                    return Some((503, String::new()));
                };
                let junk: Vec<u8> = (0..64u32).map(|k| (k * 31 + i) as u8 | 0x80).collect();
                common::send(&mut ws, junk).await;
                common::close_of(&mut ws).await
            })
        })
        .collect();
    witness.assert_receiving().await;
    storm.await.expect("the storm");
    for g in garbage {
        let close = g.await.expect("a garbage client");
        assert!(matches!(close, Some((1002 | 503, _)) | None), "{close:?}");
    }
    // Past the header timeout every held socket has been closed or refused.
    assert!(
        common::wait_until(Duration::from_secs(5), || m.tcp_connections.load(Relaxed) == 0).await,
        "half-open connections are still held: {}",
        m.render()
    );
    let timeouts = m.http_header_timeouts_total.load(Relaxed);
    let refused = m.refused_server_full_total.load(Relaxed);
    assert!(timeouts > 0, "no header timeouts: {}", m.render());
    assert!(
        timeouts + refused >= half_open as u64,
        "{timeouts} timed out + {refused} refused of {half_open} half-open sockets"
    );
    // The server closed them: reading gives end of stream (or a 503 first).
    let mut closed = 0;
    for s in sockets.iter_mut().take(50) {
        let mut buf = [0u8; 256];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
            if n == 0 || buf[..n].starts_with(b"HTTP/1.1 503") {
                closed += 1;
            }
        }
    }
    assert_eq!(closed, 50, "held sockets were not closed");
    drop(sockets);
    witness.assert_receiving().await;
    // A new player gets in.
    let (_ws, welcome) = common::join(&server.ws_url(), "newcomer").await;
    assert!(welcome.client_id > 0);
    eprintln!(
        "{half_open} half-open sockets: {timeouts} closed at the header timeout, {refused} refused (server full)"
    );
    witness.stop().await;
    server.shutdown().await.expect("clean stop");
}

/// The per-address cap refuses the connection over it with a 503 that says why, and gives
/// the place back when a connection ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_address_cap_get_a_503() {
    let mut config = common::small_config();
    config.server.connections_per_ip_max = 3;
    // The test's clients are on loopback, which is exempt by default.
    config.server.connections_per_ip_exempt_loopback = false;
    let server = common::start(config).await;
    let m = server.metrics().clone();
    let addr = server.local_addr();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    assert!(common::wait_until(Duration::from_secs(2), || m.tcp_connections.load(Relaxed) == 3).await);
    let mut over = TcpStream::connect(addr).await.expect("connect");
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(2), over.read_to_string(&mut text))
        .await
        .expect("an answer in time")
        .expect("read");
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.contains("too many open connections from this address"),
        "{text}"
    );
    assert_eq!(m.refused_address_full_total.load(Relaxed), 1);
    drop(held.pop());
    assert!(common::wait_until(Duration::from_secs(2), || m.tcp_connections.load(Relaxed) == 2).await);
    // The freed place lets a player join.
    let (_ws, welcome) = common::join(&server.ws_url(), "fits").await;
    assert!(welcome.client_id > 0);
    server.shutdown().await.expect("clean stop");
}
