//! A world server under Agones: the exact SDK call sequence, against a recording HTTP
//! listener standing in for the sidecar (started late, as a sidecar may be).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;

use crate::common::{TempDir, Witness};

/// Calls as the sidecar saw them: (method, path, JSON body).
type Calls = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

/// Starts the stand-in sidecar on `socket`, bound (so the port stayed ours while the
/// sidecar was "not up yet") but not listening until now.
async fn sidecar(socket: tokio::net::TcpSocket, calls: Calls) -> tokio::task::JoinHandle<()> {
    let app = Router::new().fallback(move |req: Request| {
        let calls = calls.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let body = axum::body::to_bytes(req.into_body(), 1 << 16)
                .await
                .unwrap_or_default();
            let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            calls.lock().unwrap().push((method, path, body));
            "{}"
        }
    });
    let listener = socket.listen(64).expect("listen on the sidecar's port");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

fn paths(calls: &Calls) -> Vec<String> {
    calls.lock().unwrap().iter().map(|c| c.1.clone()).collect()
}

async fn wait_for(calls: &Calls, path: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !paths(calls).iter().any(|p| p == path) {
        assert!(
            Instant::now() < deadline,
            "no {path} within {limit:?}: {:?}",
            paths(calls)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn under_agones_the_server_is_ready_healthy_tracks_players_and_shuts_down_when_idle() {
    let dir = TempDir::new("agones");
    // The sidecar's port is bound now and kept, but only listens once the sidecar "starts":
    // until then the server's calls are refused, as they would be by a sidecar not up yet,
    // and no other process can take the port meanwhile.
    let sidecar_socket = tokio::net::TcpSocket::new_v4().expect("socket");
    sidecar_socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind a free port");
    let port = sidecar_socket.local_addr().expect("its port").port();
    let config = dir.write(
        "server.toml",
        br#"
[server]
listen = "127.0.0.1:0"
[server.recording]
enabled = false
[server.agones]
health_period_seconds = 0.2
idle_shutdown_seconds = 2.0
sdk_retry_seconds = 20.0
[world]
terrain_grid_cells = 256
terrain_cell_size_mm = 1000
world_size_mm = 256000
boid_count = 400
"#,
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_test-migratory-server"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("AGONES_SDK_HTTP_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn migratory-server");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let url = migratory_wire::fleet::parse_ready_line(&line)
        .expect("listening line")
        .to_string();
    std::thread::spawn(move || for _ in out.lines() {});

    let calls: Calls = Arc::default();
    let rt = crate::common::runtime();
    rt.block_on(async {
        // The sidecar comes up after the server: Ready must be retried until it answers.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(paths(&calls).is_empty());
        let _sidecar = sidecar(sidecar_socket, calls.clone()).await;
        wait_for(&calls, "/ready", Duration::from_secs(10)).await;
        let witness = Witness::join(&url).await;
        wait_for(&calls, "/alpha/player/connect", Duration::from_secs(5)).await;
        // A player keeps the server up past the idle limit.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!paths(&calls).iter().any(|p| p == "/shutdown"));
        witness.stop().await;
        wait_for(&calls, "/alpha/player/disconnect", Duration::from_secs(5)).await;
        wait_for(&calls, "/shutdown", Duration::from_secs(10)).await;
    });
    // After Shutdown the server stops by itself, cleanly.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop after Shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");

    let calls = calls.lock().unwrap().clone();
    assert!(calls.iter().all(|c| c.0 == "POST"), "{calls:?}");
    let lifecycle: Vec<(&str, &serde_json::Value)> = calls
        .iter()
        .filter(|c| c.1 != "/health")
        .map(|c| (c.1.as_str(), &c.2))
        .collect();
    let empty = serde_json::json!({});
    let player = serde_json::json!({ "playerID": "1" });
    assert_eq!(
        lifecycle,
        vec![
            ("/ready", &empty),
            ("/alpha/player/connect", &player),
            ("/alpha/player/disconnect", &player),
            ("/shutdown", &empty),
        ]
    );
    // Health calls come between Ready and Shutdown, on the period (0.2 s over ~5 s).
    let at = |p: &str| calls.iter().position(|c| c.1 == p).expect("called");
    let health: Vec<usize> = (0..calls.len()).filter(|&i| calls[i].1 == "/health").collect();
    assert!(health.len() >= 10, "{} health calls", health.len());
    assert!(health.iter().all(|&i| i > at("/ready") && i < at("/shutdown")));
}
