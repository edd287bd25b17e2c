//! The built binaries as separate processes: config errors, SIGTERM, SIGKILL (the
//! recording survives up to its last block), a thousand connect/disconnect cycles (RSS and
//! tasks back to baseline), and the bot load generator.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::http_get;
use futures_util::StreamExt;
use migratory_replay::Recording;
use migratory_wire::metric::sample;
use migratory_wire::protocol::{self, InputMsg};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, TempDir};

const SERVER: &str = env!("CARGO_BIN_EXE_test-migratory-server");
const BOTS: &str = env!("CARGO_BIN_EXE_test-migratory-bots");

/// The small test world as a TOML file.
const SMALL_WORLD_TOML: &str = r#"
[server]
listen = "127.0.0.1:0"
hello_timeout_seconds = 2.0
shutdown_timeout_seconds = 1.0

[server.client_backpressure]
eviction_close_timeout_seconds = 0.5

[world]
terrain_grid_cells = 256
world_size_mm = 256000
boid_count = 400
client_slots_max = 64
"#;

/// A server process, killed if the test ends early.
struct ServerProcess {
    child: Child,
    url: String,
    recording: Option<PathBuf>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    fn spawn(dir: &Path, config: &str, args: &[&str]) -> ServerProcess {
        Self::spawn_with(dir, config, args, Command::new(SERVER))
    }

    /// `spawn` with a prepared command (one with a resource limit, say).
    fn spawn_with(dir: &Path, config: &str, args: &[&str], mut command: Command) -> ServerProcess {
        let config_path = dir.join("server.toml");
        std::fs::write(&config_path, config).expect("write config");
        let stderr = std::fs::File::create(dir.join("stderr.txt")).expect("stderr file");
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn migratory-server");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut url = None;
        let mut recording = None;
        let no_record = args.contains(&"--no-record");
        while url.is_none() || (recording.is_none() && !no_record) {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                let err = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
                panic!("server exited before listening:\n{err}");
            }
            if let Some(u) = migratory_wire::fleet::parse_ready_line(&line) {
                url = Some(u.to_string());
            } else if let Some(p) = line.trim().strip_prefix("recording to ") {
                recording = Some(PathBuf::from(p));
            }
        }
        // Keep draining stdout so the final line never blocks the process.
        std::thread::spawn(move || for _ in out.lines() {});
        ServerProcess {
            child,
            url: url.unwrap_or_default(),
            recording,
        }
    }

    fn host(&self) -> String {
        migratory_bots::bots::host_of(&self.url)
            .unwrap_or_default()
            .to_string()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit by itself.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn metric(host: &str, name: &str) -> f64 {
    let (status, text) = http_get(host, "/metrics").await.expect("GET /metrics");
    assert_eq!(status, 200);
    sample(&text, name, "").unwrap_or_else(|| panic!("{name} missing"))
}

/// Resident set size of a process, in bytes, from /proc/PID/statm.
fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("rss field");
    pages * 4096
}

#[test]
fn config_errors_exit_2_naming_the_key() {
    let dir = TempDir::new("cfgerr");
    for (toml, args, needle) in [
        (
            "[server.client_backpressure]\nsend_queue_max = 3\n",
            vec![],
            "send_queue_max",
        ),
        (
            "[server.client_backpressure]\neviction_close_code = 999\n",
            vec![],
            "server.client_backpressure.eviction_close_code",
        ),
        ("[server.terrain_wire]\ndtype = \"f16\"\n", vec![], "f16"),
        ("", vec!["--shards", "65"], "server.shards"),
        ("", vec!["--listen", "not-an-address"], "server.listen"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, toml).expect("write");
        let out = Command::new(SERVER)
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .args(&args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{toml} {args:?}: {err}");
        assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
    }
    // The printed defaults are a valid config file.
    let out = Command::new(SERVER).arg("default-config").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let parsed = migratory_server::ServerConfig::from_toml(&text, "default-config").expect("parses");
    assert_eq!(parsed, migratory_server::ServerConfig::default());
}

/// `migratory-server view ARGS` becomes `migratory-replay view ARGS` (the server links none of
/// the replay tools): the arguments, the output and the exit status are the viewer's; and
/// a viewer that cannot be run is a clear error naming the command, with status 2.
#[test]
fn server_view_runs_the_replay_viewer() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new("view-forward");
    let fake = dir.path().join("migratory-replay");
    std::fs::write(&fake, "#!/bin/sh\necho \"replay: $*\"\nexit 7\n").expect("write");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(SERVER)
        .args([
            "view",
            "rec.mrec",
            "--listen",
            "127.0.0.1:0",
            "--compare-shards",
            "2",
        ])
        .env("MIGRATORY_REPLAY_BIN", &fake)
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "replay: view rec.mrec --listen 127.0.0.1:0 --compare-shards 2\n"
    );
    assert_eq!(out.status.code(), Some(7));
    let out = Command::new(SERVER)
        .args(["view", "rec.mrec"])
        .env("MIGRATORY_REPLAY_BIN", dir.path().join("absent"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("migratory-replay view"),
        "{err}"
    );
}

/// Threads of process `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

#[test]
fn io_threads_sets_the_runtime_threads() {
    let dir = TempDir::new("io-threads");
    // Five: not a CPU count the default would give by chance.
    let config = SMALL_WORLD_TOML.replace("[server]\n", "[server]\nio_threads = 5\n");
    let server = ServerProcess::spawn(dir.path(), &config, &["--no-record"]);
    assert_eq!(threads_named(server.pid(), "migratory-io"), 5);
}

#[test]
fn shards_zero_picks_one_per_cpu_at_most_two_and_a_count_is_kept() {
    let dir = TempDir::new("shards");
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    // Shard 0 runs on the tick thread; the others get threads "migratory-shard-N", which
    // /proc shows cut to 15 bytes.
    for (shards, workers) in [("0", cpus.min(2) - 1), ("3", 2)] {
        let server = ServerProcess::spawn(dir.path(), SMALL_WORLD_TOML, &["--no-record", "--shards", shards]);
        assert_eq!(
            threads_named(server.pid(), "migratory-shard"),
            workers,
            "--shards {shards}"
        );
    }
}

#[test]
fn sigterm_closes_clients_with_1001_finishes_the_recording_and_exits_0() {
    let dir = TempDir::new("sigterm");
    let rec_dir = dir.path().join("rec");
    let rec_arg = rec_dir.to_string_lossy().to_string();
    let mut server = ServerProcess::spawn(dir.path(), SMALL_WORLD_TOML, &["--record-dir", &rec_arg]);
    let rt = runtime();
    let (code, ticks) = rt.block_on(async {
        let (mut ws, _) = common::join(&server.url, "leaver").await;
        // Wait for a snapshot so the session has something in it.
        loop {
            if let Some(Ok(Message::Binary(b))) = ws.next().await {
                if matches!(
                    protocol::decode_server(&b),
                    Ok(protocol::ServerMessage::Snapshot { .. })
                ) {
                    break;
                }
            }
        }
        let ticks = metric(&server.host(), "migratory_ticks_total").await;
        let status = Command::new("kill")
            .args(["-TERM", &server.pid().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        (common::close_of(&mut ws).await, ticks)
    });
    let (code, reason) = code.expect("a close frame");
    assert_eq!(code, 1001, "{reason}");
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
    let path = server.recording.clone().expect("recording path");
    let rec = Recording::open(&path).expect("recording opens");
    assert!(rec.torn_tail.is_none(), "SIGTERM writes the end record");
    let end = rec.end.expect("end record");
    assert!(end.final_tick as f64 >= ticks, "{} < {ticks}", end.final_tick);
}

#[test]
fn a_recording_that_cannot_be_written_stops_and_the_world_goes_on() {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("record-fails");
    let rec_dir = dir.path().join("rec");
    let rec_arg = rec_dir.to_string_lossy().to_string();
    let mut command = Command::new(SERVER);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // Files of at most 16 KiB: the recording's writes fail a few seconds in (with
            // EFBIG, the signal ignored) while the server needs no other file.
            let limit = libc::rlimit {
                rlim_cur: 16 * 1024,
                rlim_max: 16 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut server =
        ServerProcess::spawn_with(dir.path(), SMALL_WORLD_TOML, &["--record-dir", &rec_arg], command);
    let rt = runtime();
    rt.block_on(async {
        let host = server.host();
        let deadline = Instant::now() + Duration::from_secs(20);
        while metric(&host, "migratory_recording_errors_total").await < 1.0 {
            assert!(Instant::now() < deadline, "the recording never failed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The world goes on without its recording, and still serves a player.
        let ticks = metric(&host, "migratory_ticks_total").await;
        let (mut ws, _) = common::join(&server.url, "after").await;
        loop {
            if let Some(Ok(Message::Binary(b))) = ws.next().await {
                if let Ok(protocol::ServerMessage::Snapshot { .. }) = protocol::decode_server(&b) {
                    break;
                }
            }
        }
        assert!(metric(&host, "migratory_ticks_total").await > ticks);
        assert_eq!(metric(&host, "migratory_recording_errors_total").await, 1.0);
    });
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    server.wait_exit(Duration::from_secs(10));
    let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default();
    assert!(stderr.contains("recording write failed"), "{stderr}");
    // What was written before the failure still opens, as after a crash.
    let path = server.recording.clone().expect("recording path");
    let rec = Recording::open(&path).expect("the recording opens");
    assert!(rec.end.is_none(), "no end record after a failed write");
    assert!(rec.ticks_recovered() > 0);
}

#[test]
fn sigkill_loses_at_most_the_last_block_and_the_rest_replays() {
    let dir = TempDir::new("sigkill");
    let rec_dir = dir.path().join("rec");
    let rec_arg = rec_dir.to_string_lossy().to_string();
    let mut server = ServerProcess::spawn(dir.path(), SMALL_WORLD_TOML, &["--record-dir", &rec_arg]);
    let rt = runtime();
    let ticks_run = rt.block_on(async {
        let mut clients = Vec::new();
        for i in 0..2 {
            clients.push(common::join(&server.url, &format!("doomed{i}")).await.0);
        }
        let start = tokio::time::Instant::now();
        let mut seq = 0;
        while start.elapsed() < Duration::from_millis(2500) {
            seq += 1;
            for (i, ws) in clients.iter_mut().enumerate() {
                let m = InputMsg {
                    seq,
                    dir_x: 300 + i as i16,
                    dir_y: -200,
                    throttle: 80,
                    cast: seq % 5 == 0,
                };
                common::send(ws, protocol::encode_input(&m)).await;
                // Drain what arrived so these clients are not slow.
                while let Ok(Some(Ok(Message::Binary(b)))) =
                    tokio::time::timeout(Duration::from_millis(1), ws.next()).await
                {
                    if let Ok(protocol::ServerMessage::Snapshot { tick, .. }) = protocol::decode_server(&b) {
                        common::send(ws, protocol::encode_ack(tick)).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        // Two joined clients hold 2 to 16 view regions of 128 entries x 12 bytes each.
        let arena_bytes = metric(&server.host(), "migratory_view_arena_bytes").await as usize;
        let region_bytes = 128 * 12;
        assert_eq!(arena_bytes % region_bytes, 0, "{arena_bytes}");
        assert!((4..=32).contains(&(arena_bytes / region_bytes)), "{arena_bytes}");
        metric(&server.host(), "migratory_ticks_total").await
    });
    server.child.kill().expect("SIGKILL");
    let status = server.child.wait().expect("wait");
    assert!(!status.success());
    let path = server.recording.clone().expect("recording path");
    let rec = Recording::open(&path).expect("a killed recording still opens");
    assert!(rec.torn_tail.is_some(), "no end record after SIGKILL");
    assert!(rec.end.is_none());
    let recovered = rec.ticks_recovered() as f64;
    // Blocks are 60 ticks (one second); a few more ticks ran between the metrics read
    // and the kill.
    assert!(
        recovered >= ticks_run - 60.0 && recovered <= ticks_run + 60.0,
        "recovered {recovered} of about {ticks_run} ticks"
    );
    assert!(recovered >= 60.0);
    let mut world = rec.start_world(2).expect("start world");
    let mut replayed = 0;
    let mut joins = 0;
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.expect("recovered ticks read");
        let out = world.step(&t.inputs);
        assert_eq!(out.state_root, t.state_root, "tick {}", t.tick);
        assert_eq!(out.snapshots_root, t.snapshots_root, "tick {}", t.tick);
        joins += out.joined.len();
        replayed += 1;
    }
    assert_eq!(replayed as f64, recovered);
    assert_eq!(joins, 2);
}

#[test]
fn a_thousand_connect_disconnect_cycles_leave_no_tasks_and_no_memory_behind() {
    let dir = TempDir::new("churn");
    let server = ServerProcess::spawn(dir.path(), SMALL_WORLD_TOML, &["--no-record"]);
    let rt = runtime();
    let host = server.host();
    let url = server.url.clone();
    let cycles = |n: u32| {
        let url = url.clone();
        async move {
            // Ten connections at a time; half of them join (and leave), half only connect.
            let workers = (0..10u32).map(|w| {
                let url = url.clone();
                async move {
                    for i in 0..n / 10 {
                        if (w + i) % 2 == 0 {
                            let (mut ws, _) = common::join(&url, "churn").await;
                            let _ = ws.close(None).await;
                        } else {
                            let mut ws = common::connect(&url).await;
                            let _ = ws.close(None).await;
                        }
                    }
                }
            });
            futures_util::future::join_all(workers).await;
        }
    };
    let (baseline, after, connections, clients, total) = rt.block_on(async {
        cycles(100).await;
        let settled = |host: String| async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                let c = metric(&host, "migratory_connections").await;
                let j = metric(&host, "migratory_clients").await;
                if (c == 0.0 && j == 0.0) || tokio::time::Instant::now() > deadline {
                    return (c, j);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        settled(host.clone()).await;
        let baseline = rss_bytes(server.pid());
        cycles(1000).await;
        let (c, j) = settled(host.clone()).await;
        let after = rss_bytes(server.pid());
        let total = metric(&host, "migratory_connections_total").await;
        (baseline, after, c, j, total)
    });
    assert_eq!(connections, 0.0, "connection tasks left");
    assert_eq!(clients, 0.0, "clients left in the world");
    assert!(total >= 1100.0, "{total} connections accepted");
    let grown = after.saturating_sub(baseline);
    eprintln!(
        "RSS baseline {} KiB, after 1000 cycles {} KiB",
        baseline / 1024,
        after / 1024
    );
    assert!(
        grown < 4 << 20,
        "RSS grew by {} KiB over 1000 cycles",
        grown / 1024
    );
}

#[test]
fn the_bot_generator_reports_json() {
    let dir = TempDir::new("bots");
    let server = ServerProcess::spawn(dir.path(), SMALL_WORLD_TOML, &["--no-record"]);
    let out = Command::new(BOTS)
        .args([
            "--url",
            &server.url,
            "--clients",
            "5",
            "--seconds",
            "2",
            "--tasks",
            "2",
            "--connect-spread-seconds",
            "0.2",
        ])
        .output()
        .expect("run migratory-bots");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let field = |name: &str| -> f64 {
        json.get(name)
            .or_else(|| json["server"].get(name))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{name} missing or not a number in {json}"))
    };
    assert_eq!(field("joined"), 5.0, "{json}");
    assert_eq!(field("connect_failures"), 0.0, "{json}");
    assert!(field("snapshots") >= 5.0 * 20.0, "{json}");
    assert!(field("bytes_per_s_per_client_mean") > 0.0, "{json}");
    assert!(field("rtt_samples") >= 5.0, "{json}");
    assert_eq!(field("drops"), 0.0, "{json}");
    assert!(field("loop_p99_ms") > 0.0, "{json}");
}

/// A short soak (a few bots, a few seconds): the tool writes a metrics.json that parses
/// with every per-second series filled, a chart.png of the documented size, and a
/// summary whose every figure follows from metrics.json. No timing is asserted: the exit
/// status is the verdict metrics.json gives (0 pass, 1 fail), whichever it is. The server
/// records with a checkpoint every 120 ticks, so every other second of ticks holds one:
/// the hold has seconds of both kinds, each marked.
#[test]
fn a_short_soak_writes_its_json_chart_and_summary() {
    let dir = TempDir::new("soak");
    let config = SMALL_WORLD_TOML.replace(
        "[world]\n",
        "[server.recording]\ncheckpoint_interval_ticks = 120\n\n[world]\n",
    );
    let record_dir = dir.path().join("rec");
    let server = ServerProcess::spawn(
        dir.path(),
        &config,
        &["--record-dir", record_dir.to_str().expect("UTF-8 path")],
    );
    let out_dir = dir.path().join("soak");
    let config = dir.path().join("soak.toml");
    std::fs::write(
        &config,
        "[thresholds]\nloop_p99_ms = 1000.0\nmemory_drift_percent = 1000.0\n",
    )
    .unwrap();
    let out = Command::new(BOTS)
        .args([
            "soak",
            "--url",
            &server.url,
            "--steps",
            "3,6",
            "--step-seconds",
            "2",
        ])
        .args(["--hold-seconds", "5", "--tasks", "2", "--stall-percent", "0"])
        .arg("--out")
        .arg(&out_dir)
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run migratory-bots soak");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("metrics.json")).expect("metrics.json"))
            .expect("JSON");
    let pass = json["pass"].as_bool().expect("a verdict");
    assert_eq!(
        out.status.code(),
        Some(if pass { 0 } else { 1 }),
        "the exit status is not metrics.json's verdict ({pass}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json["thresholds"]["loop_p99_ms"], 1000.0);
    assert_eq!(
        json["thresholds"]["hard_cap_bytes_per_s"], 32000.0,
        "defaults kept"
    );
    let series = json["series"].as_array().expect("a series");
    assert!(series.len() >= 6, "{} seconds sampled", series.len());
    let hold: Vec<&serde_json::Value> = series.iter().filter(|s| s["phase"] == "hold").collect();
    assert!(hold.len() >= 2, "{} hold seconds", hold.len());
    for s in &hold {
        for key in [
            "joined_bots",
            "down_mean_bytes_per_s",
            "rtt_p99_ms",
            "loop_p50_ms",
            "loop_p99_ms",
            "rss_bytes",
            "cpu_ms_per_tick",
            "cpu_system_ms_per_tick",
            "segments_out_per_tick",
            "pure_acks_out_per_tick",
            "segments_in_per_tick",
        ] {
            assert!(s[key].is_number(), "{key} missing in {s}");
        }
        // The server sends at least a snapshot per bot every three ticks (20 Hz at 60),
        // and part of what it sends may be pure ACKs.
        let sent = s["segments_out_per_tick"].as_f64().unwrap_or_default();
        assert!(sent >= 6.0 / 3.0, "{s}");
        assert!(
            s["pure_acks_out_per_tick"].as_f64().unwrap_or(f64::MAX) <= sent,
            "{s}"
        );
        assert_eq!(s["joined_bots"], 6, "{s}");
        assert!(s["checkpoint"].is_boolean(), "{s}");
    }
    let checkpoint_seconds = hold.iter().filter(|s| s["checkpoint"] == true).count();
    assert!(
        (1..hold.len()).contains(&checkpoint_seconds),
        "{checkpoint_seconds} of {} hold seconds marked with a checkpoint",
        hold.len()
    );
    assert_eq!(json["server_hold"]["checkpoint_seconds"], checkpoint_seconds);
    assert_eq!(json["totals"]["decode_errors"], 0);
    assert_eq!(json["totals"]["joined"], 6);
    let hold_figure = |key: &str| {
        json["server_hold"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("server_hold.{key} missing in {}", json["server_hold"]))
    };
    assert!(hold_figure("loop_p50_ms") <= hold_figure("loop_p99_ms"));
    // Per second the system part is at most the whole, so their medians are too.
    assert!(hold_figure("cpu_system_ms_per_tick") <= hold_figure("cpu_ms_per_tick"));
    let png = std::fs::File::open(out_dir.join("chart.png")).expect("chart.png");
    let info = png::Decoder::new(png).read_info().expect("a PNG").info().clone();
    assert_eq!((info.width, info.height), (1600, 1600));
    // The chart is a function of metrics.json: `chart DIR` draws the same bytes again.
    let drawn = std::fs::read(out_dir.join("chart.png")).expect("chart.png");
    std::fs::remove_file(out_dir.join("chart.png")).expect("remove chart.png");
    let redraw = Command::new(BOTS)
        .arg("chart")
        .arg(&out_dir)
        .output()
        .expect("run chart");
    assert!(
        redraw.status.success(),
        "{}",
        String::from_utf8_lossy(&redraw.stderr)
    );
    assert_eq!(
        std::fs::read(out_dir.join("chart.png")).expect("redrawn chart.png"),
        drawn
    );
    let summary = std::fs::read_to_string(out_dir.join("summary.txt")).expect("summary.txt");
    for name in [
        "loop_p99_ms",
        "avg_downstream_bytes_per_s",
        "hard_cap_bytes_per_s",
        "memory_drift_percent",
        "decode_errors",
        "disconnects",
    ] {
        assert!(
            summary
                .lines()
                .any(|l| (l.starts_with("PASS ") || l.starts_with("FAIL ")) && l.contains(name)),
            "{name} has no verdict in:\n{summary}"
        );
    }
    let server_line = summary
        .lines()
        .find(|l| l.starts_with("server (hold"))
        .unwrap_or_else(|| panic!("no server line in:\n{summary}"));
    assert!(!server_line.contains(" - "), "a figure is missing: {server_line}");
    summary_follows_from_the_json(&summary, &json, &hold);
}

/// Every figure of summary.txt is metrics.json's: each verdict line its verdict, the server
/// line the hold medians, and those medians the medians of the hold seconds' series.
fn summary_follows_from_the_json(summary: &str, json: &serde_json::Value, hold: &[&serde_json::Value]) {
    for v in json["verdicts"].as_array().expect("verdicts") {
        let line = format!(
            "{} {}: {:.3} (limit {:.3})",
            if v["pass"] == true { "PASS" } else { "FAIL" },
            v["name"].as_str().expect("a name"),
            v["value"].as_f64().expect("a value"),
            v["limit"].as_f64().expect("a limit")
        );
        assert!(summary.lines().any(|l| l == line), "`{line}` not in:\n{summary}");
    }
    let last = summary.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        if json["pass"] == true { "PASS" } else { "FAIL" },
        "{summary}"
    );
    // The median of the hold seconds, as the tool defines it: the middle of the sorted
    // values (the upper one of two).
    let median_where = |key: &str, keep: &dyn Fn(&serde_json::Value) -> bool| {
        let mut v: Vec<f64> = hold
            .iter()
            .filter(|s| keep(s))
            .filter_map(|s| s[key].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * 0.5).round() as usize])
    };
    let median = |key: &str| median_where(key, &|_| true).unwrap_or_else(|| panic!("no {key} in the hold"));
    let h = &json["server_hold"];
    for key in [
        "loop_p50_ms",
        "loop_p99_ms",
        "cpu_ms_per_tick",
        "cpu_system_ms_per_tick",
    ] {
        let stored = h[key].as_f64().unwrap_or_else(|| panic!("server_hold.{key}"));
        assert_eq!(
            stored,
            median(key),
            "server_hold.{key} is not the median of the hold seconds"
        );
    }
    let server_line = format!(
        "server (hold, medians of the seconds) loop p50 {:.2} p99 {:.2} ms; CPU {:.2} ms per tick, {:.2} of it system",
        median("loop_p50_ms"),
        median("loop_p99_ms"),
        median("cpu_ms_per_tick"),
        median("cpu_system_ms_per_tick")
    );
    assert!(
        summary.lines().any(|l| l == server_line),
        "`{server_line}` not in:\n{summary}"
    );
    // The loop p99 of the seconds with a checkpoint and of the others.
    let figure = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    let with = |yes: bool| median_where("loop_p99_ms", &move |s| s["checkpoint"] == yes);
    assert_eq!(h["loop_p99_ms_checkpoint_seconds"].as_f64(), with(true));
    assert_eq!(h["loop_p99_ms_other_seconds"].as_f64(), with(false));
    let checkpoint_line = format!(
        "loop p99 (hold, medians) of the {} seconds with a recording checkpoint {} ms, of the others {} ms",
        h["checkpoint_seconds"],
        figure(with(true)),
        figure(with(false))
    );
    assert!(
        summary.lines().any(|l| l == checkpoint_line),
        "`{checkpoint_line}` not in:\n{summary}"
    );
}
