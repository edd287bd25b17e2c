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

/// The GameServer's state as the stand-in sidecar reports it (`GET /gameserver`).
type State = Arc<Mutex<&'static str>>;

/// Starts the stand-in sidecar on `socket`, bound (so the port stayed ours while the
/// sidecar was "not up yet") but not listening until now. It answers as Agones' SDK
/// server does: `{}` for lifecycle calls, the List for List calls, the GameServer (with
/// `state`) for `GET /gameserver`.
async fn sidecar(socket: tokio::net::TcpSocket, calls: Calls, state: State) -> tokio::task::JoinHandle<()> {
    sidecar_with(socket, calls, state, true).await
}

/// `sidecar`, with the CountsAndLists feature gate on or off: off, every List call is
/// answered as Agones' SDK server answers it then (grpc-gateway's 500 for the error
/// `CountsAndLists not enabled`).
async fn sidecar_with(
    socket: tokio::net::TcpSocket,
    calls: Calls,
    state: State,
    lists_enabled: bool,
) -> tokio::task::JoinHandle<()> {
    let app = Router::new().fallback(move |req: Request| {
        let (calls, state) = (calls.clone(), state.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let body = axum::body::to_bytes(req.into_body(), 1 << 16)
                .await
                .unwrap_or_default();
            let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            calls.lock().unwrap().push((method, path.clone(), body));
            let ok = axum::http::StatusCode::OK;
            if path == "/gameserver" {
                let state = *state.lock().unwrap();
                (
                    ok,
                    serde_json::json!({ "status": { "state": state } }).to_string(),
                )
            } else if path.starts_with("/v1beta1/lists/") && !lists_enabled {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({ "code": 2, "message": "CountsAndLists not enabled", "details": [] })
                        .to_string(),
                )
            } else if path.starts_with("/v1beta1/lists/players:") {
                (
                    ok,
                    serde_json::json!({ "name": "players", "capacity": "1024", "values": [] }).to_string(),
                )
            } else {
                (ok, "{}".to_string())
            }
        }
    });
    let listener = socket.listen(64).expect("listen on the sidecar's port");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

fn sidecar_socket() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind a free port");
    let port = socket.local_addr().expect("its port").port();
    (socket, port)
}

/// The server under test with the sidecar's port in its environment.
fn spawn_server(
    config: &std::path::Path,
    sdk_port: u16,
    stdout: Stdio,
    stderr: Stdio,
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_test-migratory-server"))
        .args(["serve", "--config"])
        .arg(config)
        .env("AGONES_SDK_HTTP_PORT", sdk_port.to_string())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("spawn migratory-server")
}

/// Reads the server's ready line (its WebSocket URL) and drains the rest of its stdout.
fn ready_url(child: &mut std::process::Child) -> String {
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let url = migratory_wire::fleet::parse_ready_line(&line)
        .expect("listening line")
        .to_string();
    std::thread::spawn(move || for _ in out.lines() {});
    url
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
    let (sidecar_socket, port) = sidecar_socket();
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
    let mut child = spawn_server(&config, port, Stdio::piped(), Stdio::null());
    let url = ready_url(&mut child);

    let calls: Calls = Arc::default();
    let state: State = Arc::new(Mutex::new("Ready"));
    let rt = crate::common::runtime();
    rt.block_on(async {
        // The sidecar comes up after the server: Ready must be retried until it answers.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(paths(&calls).is_empty());
        let _sidecar = sidecar(sidecar_socket, calls.clone(), state.clone()).await;
        wait_for(&calls, "/ready", Duration::from_secs(10)).await;
        // A spare in the pool (Ready, not allocated) is never shut down for idling.
        tokio::time::sleep(Duration::from_millis(3000)).await;
        assert!(
            !paths(&calls).iter().any(|p| p == "/shutdown"),
            "{:?}",
            paths(&calls)
        );
        assert!(paths(&calls).iter().any(|p| p == "/gameserver"));
        *state.lock().unwrap() = "Allocated";
        let witness = Witness::join(&url).await;
        wait_for(&calls, "/v1beta1/lists/players:addValue", Duration::from_secs(5)).await;
        // A player keeps the server up past the idle limit.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!paths(&calls).iter().any(|p| p == "/shutdown"));
        witness.stop().await;
        wait_for(
            &calls,
            "/v1beta1/lists/players:removeValue",
            Duration::from_secs(5),
        )
        .await;
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
    // Every GET reads the GameServer; the rest are POSTs.
    assert!(
        calls
            .iter()
            .all(|c| (c.0 == "GET") == (c.1 == "/gameserver") && (c.0 == "GET" || c.0 == "POST")),
        "{calls:?}"
    );
    let lifecycle: Vec<(&str, &serde_json::Value)> = calls
        .iter()
        .filter(|c| c.1 != "/health" && c.1 != "/gameserver")
        .map(|c| (c.1.as_str(), &c.2))
        .collect();
    let empty = serde_json::json!({});
    let player = serde_json::json!({ "value": "1" });
    assert_eq!(
        lifecycle,
        vec![
            ("/ready", &empty),
            ("/v1beta1/lists/players:addValue", &player),
            ("/v1beta1/lists/players:removeValue", &player),
            ("/shutdown", &empty),
        ]
    );
    // Health calls keep their period (0.2 s over ~9 s) up to the shutdown; the state is
    // read only until the GameServer is allocated.
    let at = |p: &str| calls.iter().position(|c| c.1 == p).expect("called");
    let health: Vec<usize> = (0..calls.len()).filter(|&i| calls[i].1 == "/health").collect();
    assert!(health.len() >= 20, "{} health calls", health.len());
    assert!(health.iter().all(|&i| i < at("/shutdown")));
    let reads: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].1 == "/gameserver")
        .collect();
    assert!(
        reads
            .iter()
            .all(|&i| i < at("/v1beta1/lists/players:removeValue")),
        "{calls:?}"
    );
}

/// Health starts with the process, before the world is built (a big world takes seconds,
/// and the GameServer's health check does not wait for it); a SIGTERM while it builds ends
/// the server at once and cleanly, without Ready.
#[test]
fn under_agones_health_starts_at_once_and_sigterm_while_building_stops_the_server() {
    let dir = TempDir::new("agones-build");
    let (sidecar_socket, port) = sidecar_socket();
    // 4,096 x 4,096 cells: about 2.6 s to build on the machine this was written on.
    let config = dir.write(
        "server.toml",
        br#"
[server]
listen = "127.0.0.1:0"
[server.recording]
enabled = false
[server.agones]
health_period_seconds = 0.1
[world]
terrain_grid_cells = 4096
terrain_cell_size_mm = 1000
world_size_mm = 4096000
boid_count = 400
"#,
    );
    let calls: Calls = Arc::default();
    let state: State = Arc::new(Mutex::new("Scheduled"));
    let rt = crate::common::runtime();
    let _sidecar = rt.block_on(sidecar(sidecar_socket, calls.clone(), state));
    let mut child = spawn_server(&config, port, Stdio::piped(), Stdio::null());
    rt.block_on(wait_for(&calls, "/health", Duration::from_secs(5)));
    let health_at = Instant::now();
    rt.block_on(async {
        while paths(&calls).iter().filter(|p| *p == "/health").count() < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(
        !paths(&calls).iter().any(|p| p == "/ready"),
        "the world was built before 3 health calls: make it bigger"
    );
    // SAFETY: a signal to this test's own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(2);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "SIGTERM while building was not honoured"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // Ended by the signal, as a shell reports it: 128 + 15.
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out).expect("stdout");
    assert!(!out.contains("listening on"), "it was ready: {out}");
    assert!(!paths(&calls).iter().any(|p| p == "/ready"));
    eprintln!(
        "health calls began before the world was built; SIGTERM honoured {:.0} ms into the build's health calls",
        health_at.elapsed().as_secs_f64() * 1000.0
    );
}

/// A sidecar that never accepts Ready: the server stops (Agones then replaces the
/// GameServer) and exits with an error, instead of sending Health for ever from a
/// GameServer that can never be allocated.
#[test]
fn under_agones_a_ready_never_accepted_stops_the_server_with_an_error() {
    let dir = TempDir::new("agones-refused");
    let (socket, port) = sidecar_socket();
    let config = dir.write(
        "server.toml",
        br#"
[server]
listen = "127.0.0.1:0"
[server.recording]
enabled = false
[server.agones]
health_period_seconds = 0.2
sdk_retry_seconds = 1.0
[world]
terrain_grid_cells = 256
terrain_cell_size_mm = 1000
world_size_mm = 256000
boid_count = 400
"#,
    );
    let rt = crate::common::runtime();
    let app = Router::new().fallback(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "no") });
    let listener = rt.block_on(async move { socket.listen(16).expect("listen") });
    let _refusing = rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut child = spawn_server(&config, port, Stdio::null(), Stdio::piped());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the server kept running without Ready");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
    assert!(!status.success(), "{status}");
    assert!(err.contains("/ready"), "{err}");
}

/// With the CountsAndLists gate off (the sidecar refuses every List call), the server goes
/// on serving: a joined player is served, the List calls fail, are logged and tried again
/// about once a second (with a read-back of the List between), never in a tight loop.
#[test]
fn under_agones_with_lists_off_the_server_keeps_serving_and_retries_calmly() {
    let dir = TempDir::new("agones-gate");
    let (sidecar_socket, port) = sidecar_socket();
    let config = dir.write(
        "server.toml",
        br#"
[server]
listen = "127.0.0.1:0"
[server.recording]
enabled = false
[server.agones]
health_period_seconds = 0.5
idle_shutdown_seconds = 0
[world]
terrain_grid_cells = 256
terrain_cell_size_mm = 1000
world_size_mm = 256000
boid_count = 400
"#,
    );
    let calls: Calls = Arc::default();
    let state: State = Arc::new(Mutex::new("Allocated"));
    let rt = crate::common::runtime();
    let _sidecar = rt.block_on(sidecar_with(sidecar_socket, calls.clone(), state, false));
    let mut child = spawn_server(&config, port, Stdio::piped(), Stdio::null());
    let url = ready_url(&mut child);
    rt.block_on(async {
        let witness = Witness::join(&url).await;
        wait_for(&calls, "/v1beta1/lists/players:addValue", Duration::from_secs(5)).await;
        let adds = || paths(&calls).iter().filter(|p| p.ends_with(":addValue")).count();
        let before = adds();
        tokio::time::sleep(Duration::from_secs(3)).await;
        witness.assert_receiving().await;
        let retried = adds() - before;
        assert!((1..=5).contains(&retried), "{retried} addValue calls in 3 s");
        assert!(
            paths(&calls).iter().any(|p| p == "/v1beta1/lists/players"),
            "the List is read back after a failure"
        );
        witness.stop().await;
    });
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the server is still up"
    );
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().expect("wait").success());
}
