//! A fleet that allocates its world servers from an Agones Fleet (`--allocator agones`),
//! against a stand-in cluster: an allocation API answering as Agones 1.56's does (201 with
//! `Allocated` or `UnAllocated`; a Kubernetes `Status` 404 for a namespace it does not
//! know), GameServer deletion that SIGTERMs the "pod", and an SDK sidecar per GameServer.
//! The GameServers are real `migratory-server` processes in spare mode
//! (`server.agones.await_allocation`): Ready with no world, then the world their
//! allocation's annotations name, read (and, on resume, downloaded) from the fleet. The
//! call sequence is asserted; a world stopped and joined again resumes on another
//! GameServer from the segment its first one shipped.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use migratory_fleet::agones::{AgonesOptions, AllocateError};
use serde_json::{json, Value};

use super::harness::{alive, Backend, Env, SERVER, SMALL_WORLD};
use crate::common::{runtime, Witness};

/// One stand-in GameServer: its SDK state, the annotations its allocation wrote, the
/// server process behind it and its game port.
struct GameServer {
    state: &'static str,
    annotations: Value,
    game_port: u16,
    pid: u32,
}

/// The stand-in cluster: GameServers by name, and every call made to it (which
/// listener, method, path, body).
#[derive(Default)]
struct Cluster {
    servers: BTreeMap<String, GameServer>,
    calls: Vec<(String, String, String, Value)>,
}

type Shared = Arc<Mutex<Cluster>>;

async fn body_of(req: Request) -> (String, String, Value) {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let bytes = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    (
        method,
        path,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The Kubernetes API as far as the fleet uses it.
async fn kube_api(cluster: Shared) -> String {
    let app = Router::new().fallback(move |req: Request| {
        let cluster = cluster.clone();
        async move {
            let (method, path, body) = body_of(req).await;
            let mut c = cluster.lock().unwrap();
            c.calls.push(("kube".into(), method.clone(), path.clone(), body.clone()));
            let status = |code: u16, reason: &str, message: String| {
                (
                    axum::http::StatusCode::from_u16(code).unwrap(),
                    json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": message, "reason": reason, "code": code })
                    .to_string(),
                )
            };
            let allocations = "/apis/allocation.agones.dev/v1/namespaces/default/gameserverallocations";
            if method == "POST" && path.ends_with("/gameserverallocations") {
                if path != allocations {
                    return status(404, "NotFound", "the server could not find the requested resource".into());
                }
                let notes = body["spec"]["metadata"]["annotations"].clone();
                let ready = c.servers.iter_mut().find(|(_, g)| g.state == "Ready");
                let answer = match ready {
                    Some((name, g)) => {
                        g.state = "Allocated";
                        g.annotations = notes;
                        json!({ "kind": "GameServerAllocation", "apiVersion": "allocation.agones.dev/v1",
                                "status": { "state": "Allocated", "gameServerName": name,
                                            "ports": [{ "name": "default", "port": g.game_port }],
                                            "address": "127.0.0.1", "nodeName": "node-1", "source": "local" } })
                    }
                    None => json!({ "kind": "GameServerAllocation", "apiVersion": "allocation.agones.dev/v1",
                                    "status": { "state": "UnAllocated", "gameServerName": "", "source": "local" } }),
                };
                return (axum::http::StatusCode::CREATED, answer.to_string());
            }
            if method == "GET" && path.starts_with("/apis/agones.dev/v1/namespaces/default/gameservers/") {
                let name = path.rsplit('/').next().unwrap_or("").to_string();
                // A deleted GameServer is gone once its pod has ended, as Agones' finalizer has it.
                return match c.servers.get(&name) {
                    Some(g) if g.state != "Shutdown" || alive(g.pid) => (
                        axum::http::StatusCode::OK,
                        json!({ "kind": "GameServer", "metadata": { "name": name }, "status": { "state": g.state } }).to_string(),
                    ),
                    _ => status(404, "NotFound", format!("gameservers.agones.dev \"{name}\" not found")),
                };
            }
            if method == "DELETE" {
                let name = path.rsplit('/').next().unwrap_or("").to_string();
                return match c.servers.get_mut(&name) {
                    Some(g) => {
                        g.state = "Shutdown";
                        // Agones deletes the pod: its container gets SIGTERM.
                        // SAFETY: kill(2) on a process this test started.
                        unsafe { libc::kill(g.pid as i32, libc::SIGTERM) };
                        (axum::http::StatusCode::OK, json!({ "kind": "Status", "status": "Success" }).to_string())
                    }
                    None => status(404, "NotFound", format!("gameservers.agones.dev \"{name}\" not found")),
                };
            }
            status(404, "NotFound", format!("{method} {path}"))
        }
    });
    serve(app).await
}

/// The SDK sidecar of GameServer `name`.
async fn sidecar(cluster: Shared, name: String) -> u16 {
    let app = Router::new().fallback(move |req: Request| {
        let (cluster, name) = (cluster.clone(), name.clone());
        async move {
            let (method, path, body) = body_of(req).await;
            let mut c = cluster.lock().unwrap();
            c.calls.push((name.clone(), method, path.clone(), body));
            let Some(g) = c.servers.get_mut(&name) else {
                return "{}".to_string();
            };
            match path.as_str() {
                "/ready" => {
                    g.state = "Ready";
                    "{}".into()
                }
                "/gameserver" => json!({
                    "object_meta": { "name": name, "namespace": "default", "annotations": g.annotations },
                    "status": { "state": g.state, "address": "127.0.0.1",
                                "ports": [{ "name": "default", "port": g.game_port }] }
                })
                .to_string(),
                p if p.starts_with("/v1beta1/lists/players") => {
                    json!({ "name": "players", "capacity": "1000", "values": [] }).to_string()
                }
                _ => "{}".into(),
            }
        }
    });
    let url = serve(app).await;
    url.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts GameServer `name`: a spare `migratory-server` with its own sidecar and folder.
async fn start_game_server(cluster: &Shared, env: &Env, name: &str) -> Child {
    let game_port = free_port();
    cluster.lock().unwrap().servers.insert(
        name.to_string(),
        GameServer {
            state: "Scheduled",
            annotations: json!({}),
            game_port,
            pid: 0,
        },
    );
    let sdk_port = sidecar(cluster.clone(), name.to_string()).await;
    let dir = env.dir.path().join(format!("pod-{name}"));
    std::fs::create_dir_all(&dir).expect("pod folder");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{game_port}\"\nshards = 1\n[server.recording]\ndir = \"{}\"\n\
             [server.agones]\nawait_allocation = true\nhealth_period_seconds = 0.5\nidle_shutdown_seconds = 0\n",
            dir.join("rec").display()
        ),
    )
    .expect("config");
    let child = Command::new(SERVER)
        .args(["serve", "--config"])
        .arg(&config)
        .env("AGONES_SDK_HTTP_PORT", sdk_port.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.txt")).expect("log"))
        .spawn()
        .expect("start a GameServer");
    cluster.lock().unwrap().servers.get_mut(name).expect("it").pid = child.id();
    child
}

async fn eventually_state(cluster: &Shared, name: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.lock().unwrap().servers[name].state != state {
        assert!(Instant::now() < deadline, "GameServer {name} never {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn calls_of(cluster: &Shared, who: &str) -> Vec<(String, String, Value)> {
    cluster
        .lock()
        .unwrap()
        .calls
        .iter()
        .filter(|c| c.0 == who)
        .map(|c| (c.1.clone(), c.2.clone(), c.3.clone()))
        .collect()
}

#[test]
fn a_fleet_allocates_its_worlds_from_agones_and_resumes_them_on_another_game_server() {
    let env = Env::new(Backend::Postgres, "allocation");
    let cluster: Shared = Arc::default();
    let rt = runtime();
    let api = rt.block_on(kube_api(cluster.clone()));
    let internal = free_port();
    let node = env.node(
        "a",
        &[
            "--allocator",
            "agones",
            "--agones-api-url",
            &api,
            "--internal-listen",
            &format!("127.0.0.1:{internal}"),
            "--agones-fleet-url",
            &format!("http://127.0.0.1:{internal}"),
            "--lease-seconds",
            "3",
            "--poll-interval-seconds",
            "0.2",
        ],
    );
    rt.block_on(async {
        let mut pods = vec![
            start_game_server(&cluster, &env, "gs-1").await,
            start_game_server(&cluster, &env, "gs-2").await,
        ];
        eventually_state(&cluster, "gs-1", "Ready").await;
        eventually_state(&cluster, "gs-2", "Ready").await;

        // A join allocates a GameServer, which loads the world from the fleet and serves.
        assert_eq!(node.put("ag", SMALL_WORLD).await.0, 201);
        let (s, j) = node.join("ag").await;
        assert_eq!(s, 200, "{j}");
        let first = cluster
            .lock()
            .unwrap()
            .servers
            .iter()
            .find(|(_, g)| g.state == "Allocated")
            .map(|(n, g)| (n.clone(), g.game_port))
            .expect("one allocated");
        assert_eq!(j["ws_url"], format!("ws://127.0.0.1:{}/ws", first.1), "{j}");
        let witness = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;

        // The allocation the fleet asked for, exactly.
        // (The GETs are the fleet watching its GameServer.)
        let kube: Vec<_> = calls_of(&cluster, "kube")
            .into_iter()
            .filter(|c| c.0 != "GET")
            .collect();
        assert_eq!(kube.len(), 1, "{kube:?}");
        let (method, path, body) = &kube[0];
        assert_eq!(
            (method.as_str(), path.as_str()),
            (
                "POST",
                "/apis/allocation.agones.dev/v1/namespaces/default/gameserverallocations"
            )
        );
        assert_eq!(body["kind"], "GameServerAllocation");
        assert_eq!(
            body["spec"]["selectors"][0]["matchLabels"]["agones.dev/fleet"],
            "migratory"
        );
        let notes = &body["spec"]["metadata"]["annotations"];
        assert_eq!(notes["migratory.dev/world"], "ag");
        assert_eq!(
            notes["migratory.dev/fleet-url"],
            format!("http://127.0.0.1:{internal}")
        );
        assert!(
            notes["migratory.dev/token"]
                .as_str()
                .is_some_and(|t| t.len() >= 32),
            "{notes}"
        );
        // The spare: Ready with no world, the GameServer read until Allocated, and never a
        // second Ready (which would put it back in the pool).
        let sdk: Vec<String> = calls_of(&cluster, &first.0)
            .into_iter()
            .map(|c| c.1)
            .filter(|p| p != "/health")
            .collect();
        assert_eq!(sdk.iter().filter(|p| *p == "/ready").count(), 1, "{sdk:?}");
        assert_eq!(sdk[0], "/ready", "{sdk:?}");
        assert!(sdk.iter().any(|p| p == "/gameserver"), "{sdk:?}");

        // Capacity: a second world takes the other spare, a third finds none.
        assert_eq!(node.put("ag2", SMALL_WORLD).await.0, 201);
        assert_eq!(node.join("ag2").await.0, 200);
        assert_eq!(node.put("ag3", SMALL_WORLD).await.0, 201);
        let (s, j) = node.join("ag3").await;
        assert_eq!(s, 503, "{j}");
        assert!(
            j["error"].as_str().is_some_and(|e| e.contains("UnAllocated")),
            "{j}"
        );

        // A stop deletes the GameServer; its server closes its client, finishes its
        // recording and ships the rest of it before the GameServer is gone.
        assert_eq!(node.stop("ag").await.0, 200);
        assert_eq!(*witness.close_code.lock().unwrap(), Some(1001));
        witness.stop().await;
        let kube = calls_of(&cluster, "kube");
        assert!(
            kube.iter().any(|(m, p, _)| m == "DELETE"
                && p == &format!("/apis/agones.dev/v1/namespaces/default/gameservers/{}", first.0)),
            "{kube:?}"
        );
        let shown = node.show("ag").await;
        let seg = &shown["segments"][0];
        assert_eq!(seg["ended"], "stopped", "{shown}");
        let last_tick = seg["last_tick"].as_u64().expect("a last tick");

        // A new spare (Agones would start one); the world resumes on it from the store.
        pods.push(start_game_server(&cluster, &env, "gs-3").await);
        eventually_state(&cluster, "gs-3", "Ready").await;
        let (s, j) = node.join("ag").await;
        assert_eq!(s, 200, "{j}");
        assert_eq!(j["start_tick"].as_u64(), Some(last_tick), "{j}");
        assert_eq!(j["resumed_from_seq"], 1, "{j}");
        assert_eq!(cluster.lock().unwrap().servers["gs-3"].state, "Allocated");

        // The API's errors are typed: a namespace it does not know is its 404 Status.
        let wrong = AgonesOptions {
            api_url: api.clone(),
            namespace: "elsewhere".into(),
            fleet: "migratory".into(),
            fleet_url: "http://x".into(),
        };
        match wrong.allocate("w", "t").await {
            Err(AllocateError::Api { status: 404, message }) => {
                assert!(message.contains("could not find"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        for w in ["ag", "ag2"] {
            let _ = node.stop(w).await;
        }
        for mut p in pods {
            let _ = p.kill();
            let _ = p.wait();
        }
    });
}
