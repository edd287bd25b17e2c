//! The fleet scenarios; each runs on the backend it is given.

use std::time::Duration;

use migratory_http::Method;
use migratory_kernel::Input;
use migratory_replay::{tools, Recording};
use serde_json::Value;

use super::harness::{
    alive, eventually, make_executable, token_dumping_server, world_server_pids, Backend, Env, SMALL_WORLD,
};
use crate::common::{close_of, runtime, Witness};

pub use super::access::{
    every_call_needs_a_token_of_its_role, open_joins_are_rate_limited_and_tokens_come_from_the_environment,
    unknown_joins_keep_nothing_and_metrics_and_discovery_tell_the_rest,
};
pub use super::upgrade::{
    a_bookmark_is_listed_and_opens_the_worlds_replay, a_world_crosses_a_rules_change_by_replay_or_fork,
};

/// World ids are unique per scenario and backend: the scenarios run at once, and
/// `world_server_pids` finds processes by world id.
pub(super) fn world_id(scenario: &str, backend: Backend) -> String {
    format!("{scenario}-{}", format!("{backend:?}").to_lowercase())
}

fn text(v: &Value) -> String {
    v.to_string()
}

fn segments(world: &Value) -> Vec<Value> {
    world["segments"].as_array().cloned().unwrap_or_default()
}

/// Fast polling so player counts and idleness are seen quickly.
pub(super) const POLL: &[&str] = &["--poll-interval-seconds", "0.1"];

pub fn worlds_are_created_validated_and_joined(backend: Backend) {
    let w_w1 = world_id("create", backend);
    let w_w2 = world_id("create-bad", backend);
    let env = Env::new(backend, "fleet-create");
    let fleet = env.fleet(POLL);
    runtime().block_on(async {
        let (s, b) = fleet.put(&w_w1, SMALL_WORLD).await;
        assert_eq!(s, 201, "{b}");
        assert_eq!(b["config_hash"].as_str().map(str::len), Some(64));
        // The same config again is fine; another one is a conflict.
        assert_eq!(fleet.put(&w_w1, SMALL_WORLD).await.0, 200);
        let (s, b) = fleet.put(&w_w1, "{}").await;
        assert_eq!(s, 409, "{b}");
        // Bad configs are refused naming the key.
        for (body, names) in [
            (r#"{"boid_count": "many"}"#, "boid_count"),
            (
                r#"{"flocking": {"neighbours_max": 0}}"#,
                "flocking.neighbours_max",
            ),
            (r#"{"no_such_key": 1}"#, "no_such_key"),
            ("not json", "not JSON"),
            ("[1, 2]", "JSON object"),
        ] {
            let (s, b) = fleet.put(&w_w2, body).await;
            assert_eq!(s, 422, "{body}: {b}");
            assert!(text(&b).contains(names), "{body}: {b}");
        }
        assert_eq!(fleet.put("Bad.Id", "{}").await.0, 422);
        let (s, b) = fleet.join("nope").await;
        assert_eq!(s, 404, "{b}");

        let (s, first) = fleet.join(&w_w1).await;
        assert_eq!(s, 200, "{first}\n{}", fleet.log());
        assert_eq!(first["started"], true);
        assert_eq!(first["start_tick"], 0);
        let url = first["ws_url"].as_str().expect("ws_url").to_string();
        let witness = Witness::join(&url).await;
        let (s, second) = fleet.join(&w_w1).await;
        assert_eq!(s, 200);
        assert_eq!(
            (second["started"].clone(), second["ws_url"].as_str()),
            (Value::Bool(false), Some(url.as_str()))
        );
        assert_eq!(world_server_pids(&w_w1).len(), 1);
        eventually("the list to show 1 player", Duration::from_secs(10), async || {
            let (_, list) = fleet.call(Method::GET, "/api/worlds", None).await;
            list["worlds"][0]["server"]["players"] == 1
        })
        .await;
        let shown = fleet.show(&w_w1).await;
        assert_eq!(shown["server"]["state"], "running", "{shown}");
        assert_eq!(segments(&shown).len(), 1);
        assert_eq!(segments(&shown)[0]["ended"], "running");
        witness.assert_receiving().await;
        witness.stop().await;

        let (s, b) = fleet
            .call(Method::DELETE, &format!("/api/worlds/{w_w1}"), None)
            .await;
        assert_eq!(s, 204, "{b}");
        assert!(world_server_pids(&w_w1).is_empty());
        assert_eq!(
            fleet
                .call(Method::GET, &format!("/api/worlds/{w_w1}"), None)
                .await
                .0,
            404
        );
        assert!(!env.data_dir().join("worlds/w1").exists());
        assert_eq!(fleet.call(Method::GET, "/healthz", None).await.0, 200);
        // The store is where the backend says: a SQLite file in the data folder, or not.
        assert_eq!(
            env.data_dir().join("fleet.sqlite3").exists(),
            backend == Backend::Sqlite
        );
    });
}

pub fn two_first_joins_start_one_server(backend: Backend) {
    let w_race = world_id("race", backend);
    let env = Env::new(backend, "fleet-race");
    let fleet = env.fleet(&[]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w_race, SMALL_WORLD).await.0, 201);
        let (a, b) = tokio::join!(fleet.join(&w_race), fleet.join(&w_race));
        assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
        assert_eq!(a.1["ws_url"], b.1["ws_url"]);
        let started = [&a.1, &b.1].iter().filter(|j| j["started"] == true).count();
        assert_eq!(started, 1, "{a:?} {b:?}");
        assert_eq!(world_server_pids(&w_race).len(), 1);
        assert_eq!(segments(&fleet.show(&w_race).await).len(), 1);
    });
}

pub fn tokens_read_only_their_own_world_while_their_process_lives(backend: Backend) {
    let w_a = world_id("tok-a", backend);
    let w_b = world_id("tok-b", backend);
    let env = Env::new(backend, "fleet-tokens");
    let dump = env.dir.path().join("tokens");
    std::fs::create_dir_all(&dump).expect("dump folder");
    let script = token_dumping_server(&env.dir, &dump);
    let fleet = env.fleet(&["--server-bin", script.to_str().expect("utf-8 path")]);
    runtime().block_on(async {
        for id in [&w_a, &w_b] {
            assert_eq!(fleet.put(id, SMALL_WORLD).await.0, 201);
            let (s, j) = fleet.join(id).await;
            assert_eq!(s, 200, "{j}\n{}", fleet.log());
        }
        let token = |id: &str| {
            std::fs::read_to_string(dump.join(format!("{id}.token")))
                .expect("token dumped")
                .trim()
                .to_string()
        };
        let (ta, tb) = (token(&w_a), token(&w_b));
        assert_eq!(ta.len(), 64);
        assert_ne!(ta, tb);
        // The token is nowhere on the command line.
        for pid in world_server_pids(&w_a) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
            assert!(!String::from_utf8_lossy(&cmdline).contains(&ta));
        }
        assert_eq!(fleet.content(&w_a, Some(&ta)).await, 200);
        assert_eq!(fleet.content(&w_b, Some(&tb)).await, 200);
        assert_eq!(fleet.content(&w_b, Some(&ta)).await, 403);
        // The internal routes are not on the public port, even with a live token.
        let public =
            migratory_http::Request::new(Method::GET, migratory_wire::fleet::content_url(&fleet.url, &w_a))
                .bearer(ta.clone())
                .send()
                .await
                .expect("request");
        assert_eq!(public.status, 404);
        assert_eq!(fleet.content(&w_a, Some(&tb)).await, 403);
        assert_eq!(fleet.content(&w_a, None).await, 401);
        assert_eq!(fleet.content(&w_a, Some("0000")).await, 401);
        // Once its process has exited, a token is dead.
        let (s, b) = fleet.stop(&w_a).await;
        assert_eq!((s, b["stopped"].clone()), (200, Value::Bool(true)), "{b}");
        assert!(world_server_pids(&w_a).is_empty());
        assert_eq!(fleet.content(&w_a, Some(&ta)).await, 401);
        assert_eq!(fleet.content(&w_b, Some(&tb)).await, 200);
        // A new process of the same world has a new token.
        assert_eq!(fleet.join(&w_a).await.0, 200);
        let ta2 = token(&w_a);
        assert_ne!(ta, ta2);
        assert_eq!(fleet.content(&w_a, Some(&ta)).await, 401);
        assert_eq!(fleet.content(&w_a, Some(&ta2)).await, 200);
    });
}

pub fn a_server_that_exits_early_is_a_503_with_its_log_tail(backend: Backend) {
    let w = world_id("early", backend);
    let env = Env::new(backend, "fleet-early");
    let script = env.dir.write(
        "failing-server.sh",
        b"#!/bin/sh\necho 'loading world: the disk is on fire' >&2\nexit 3\n",
    );
    make_executable(&script);
    let fleet = env.fleet(&["--server-bin", script.to_str().expect("utf-8 path")]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        let (s, b) = fleet.join(&w).await;
        assert_eq!(s, 503, "{b}");
        assert!(text(&b["error"]).contains("exit status 3"), "{b}");
        let tail = text(&b["log_tail"]);
        assert!(tail.contains("the disk is on fire"), "{b}");
        assert_eq!(fleet.show(&w).await["server"]["state"], "stopped");
    });
}

pub fn a_server_never_ready_is_killed_and_the_join_is_a_503(backend: Backend) {
    let w = world_id("late", backend);
    let env = Env::new(backend, "fleet-late");
    let pid_file = env.dir.path().join("late.pid");
    let script = env.dir.write(
        "late-server.sh",
        format!(
            "#!/bin/sh\necho $$ > {}\necho 'still loading' >&2\nexec sleep 60\n",
            pid_file.display()
        )
        .as_bytes(),
    );
    make_executable(&script);
    let fleet = env.fleet(&[
        "--server-bin",
        script.to_str().expect("utf-8 path"),
        "--ready-timeout-seconds",
        "1",
    ]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        let (s, b) = fleet.join(&w).await;
        assert_eq!(s, 503, "{b}");
        assert!(text(&b["error"]).contains("not ready within 1.0 s"), "{b}");
        assert!(text(&b["log_tail"]).contains("still loading"), "{b}");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .expect("pid written")
            .trim()
            .parse()
            .expect("pid");
        assert!(!alive(pid), "the late server {pid} was not killed");
    });
}

pub fn an_idle_world_is_stopped_and_the_next_join_continues_it(backend: Backend) {
    let w = world_id("idle", backend);
    let env = Env::new(backend, "fleet-idle");
    let fleet = env.fleet(&["--idle-timeout-seconds", "1", "--poll-interval-seconds", "0.1"]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        let (_, j) = fleet.join(&w).await;
        let url = j["ws_url"].as_str().expect("ws_url").to_string();
        // A player keeps the world up past the idle timeout.
        let witness = Witness::join(&url).await;
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert_eq!(world_server_pids(&w).len(), 1, "stopped while a player was in it");
        witness.assert_receiving().await;
        witness.stop().await;
        // Without one, it is stopped: cleanly, with its final checkpoint.
        eventually("the idle world to stop", Duration::from_secs(15), async || {
            segments(&fleet.show(&w).await)
                .first()
                .is_some_and(|s| s["ended"] == "stopped")
        })
        .await;
        assert!(world_server_pids(&w).is_empty());
        let first = segments(&fleet.show(&w).await)[0].clone();
        let last_tick = first["last_tick"].as_u64().expect("last tick");
        assert!(last_tick > 60, "{first}");
        let rec = Recording::open(
            &env.data_dir()
                .join(first["recording_path"].as_str().expect("path")),
        )
        .expect("open");
        assert!(rec.end.is_some());
        assert_eq!(
            rec.checkpoints().last().map(|c| u64::from(c.first_tick)),
            Some(last_tick)
        );

        // The next join continues from it: tick and state.
        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}\n{}", fleet.log());
        assert_eq!(
            (j["start_tick"].as_u64(), j["resumed_from_seq"].as_i64()),
            (Some(last_tick), Some(1))
        );
        let second = segments(&fleet.show(&w).await)[1].clone();
        let rec2 = Recording::open(
            &env.data_dir()
                .join(second["recording_path"].as_str().expect("path")),
        )
        .expect("open");
        assert_eq!(u64::from(rec2.meta.start_tick), last_tick);
        let start = rec2.start_world(1).expect("start checkpoint");
        let hex: String = start.state_root().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(Some(hex.as_str()), first["final_root"].as_str());
    });
}

pub fn after_a_sigkill_the_next_join_resumes_at_the_recorded_root(backend: Backend) {
    let w = world_id("crash", backend);
    let env = Env::new(backend, "fleet-crash");
    let fleet = env.fleet(POLL);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        // Segment 1 is stopped cleanly, so segment 2 starts from a checkpoint; its crash
        // is then resumed from that checkpoint plus the inputs recorded after it.
        let (_, j) = fleet.join(&w).await;
        let witness = Witness::join(j["ws_url"].as_str().expect("url")).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        witness.stop().await;
        assert_eq!(fleet.stop(&w).await.0, 200);
        let (_, j) = fleet.join(&w).await;
        assert_eq!(j["resumed_from_seq"], 1);
        let witness = Witness::join(j["ws_url"].as_str().expect("url")).await;
        // Long enough for a few recorded blocks (one a second).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let pids = world_server_pids(&w);
        assert_eq!(pids.len(), 1);
        // SAFETY: a signal to the world server this test started through the fleet.
        unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGKILL) };
        // The killed server's client sees its connection drop.
        let _ = tokio::time::timeout(Duration::from_secs(5), witness.stop()).await;
        eventually(
            "the crashed segment to close",
            Duration::from_secs(15),
            async || {
                segments(&fleet.show(&w).await)
                    .get(1)
                    .is_some_and(|s| s["ended"] == "crashed")
            },
        )
        .await;
        let crashed = segments(&fleet.show(&w).await)[1].clone();
        let crashed_path = env
            .data_dir()
            .join(crashed["recording_path"].as_str().expect("path"));
        let rec = Recording::open(&crashed_path).expect("a torn recording still opens");
        assert!(rec.end.is_none());
        let tick = rec.last_tick();
        assert!(
            tick > rec.meta.start_tick + 60,
            "blocks were recorded before the kill"
        );
        let recorded_root = rec
            .ticks_from(tick)
            .last()
            .expect("last tick")
            .expect("decodes")
            .state_root;

        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}\n{}", fleet.log());
        assert_eq!(j["start_tick"].as_u64(), Some(u64::from(tick)));
        assert_eq!(j["resumed_from_seq"], 2);
        // The resumed world's state at the resume tick is the one the crashed process recorded.
        let third = segments(&fleet.show(&w).await)[2].clone();
        let third_path = env
            .data_dir()
            .join(third["recording_path"].as_str().expect("path"));
        let rec3 = Recording::open(&third_path).expect("open");
        assert_eq!(rec3.meta.start_tick, tick);
        assert_eq!(rec3.start_world(1).expect("start").state_root(), recorded_root);
        // The crashed session's player leaves in the first tick of the new one.
        let witness = Witness::join(j["ws_url"].as_str().expect("url")).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        witness.stop().await;
        assert_eq!(fleet.stop(&w).await.0, 200);
        let rec3 = Recording::open(&third_path).expect("open");
        let first = rec3
            .ticks_from(tick + 1)
            .next()
            .expect("a tick")
            .expect("decodes");
        let leaves = first
            .inputs
            .inputs
            .iter()
            .filter(|i| matches!(i, Input::Leave { .. }))
            .count();
        assert_eq!(leaves, 1, "{:?}", first.inputs);
        // The world's whole life replays: each segment on its own at 1 and 2 shards, and
        // each resumes at the tick and from the state the one before recorded last.
        let first_path = env.data_dir().join(
            segments(&fleet.show(&w).await)[0]["recording_path"]
                .as_str()
                .expect("path"),
        );
        let chain = [first_path, crashed_path, third_path];
        let report = tools::verify_chain(&chain, &[1, 2], &mut |_, _| {}).expect("verify");
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.links.len(), 2);
    });
}

pub fn a_killed_fleet_takes_its_servers_down_and_a_new_one_resumes(backend: Backend) {
    let w = world_id("restart", backend);
    let env = Env::new(backend, "fleet-restart");
    let mut fleet = env.fleet(POLL);
    let rt = runtime();
    let server_pid = rt.block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        let (_, j) = fleet.join(&w).await;
        let mut ws = crate::common::join(j["ws_url"].as_str().expect("url"), "left-behind")
            .await
            .0;
        // The client reads all along, as a real one does, so the close frame is not
        // stuck behind unread snapshots when the server goes.
        let reader = tokio::spawn(async move { close_of(&mut ws).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pids = world_server_pids(&w);
        assert_eq!(pids.len(), 1);
        fleet.kill9();
        // The world server goes down with its fleet, cleanly: its client gets 1001.
        let close = reader.await.expect("reader");
        assert_eq!(close.map(|c| c.0), Some(1001));
        pids[0]
    });
    rt.block_on(async {
        eventually(
            "the orphaned server to exit",
            Duration::from_secs(15),
            async || !alive(server_pid),
        )
        .await;
        assert!(world_server_pids(&w).is_empty());
    });
    // The server's last lines, written after its fleet was gone, are in its log.
    let log = std::fs::read_to_string(env.data_dir().join("worlds").join(&w).join("server.log"))
        .expect("server.log");
    let last = log.lines().rev().take(5).collect::<Vec<_>>();
    assert!(
        log.lines().rev().take(10).any(|l| l.contains("server stopped")),
        "the server's shutdown lines are missing from its log; its last lines: {last:?}"
    );
    // A new fleet on the same store finds the world stopped, its segment closed, and
    // resumes it on the next join.
    let mut fleet = env.fleet(POLL);
    rt.block_on(async {
        let shown = fleet.show(&w).await;
        assert_eq!(shown["server"]["state"], "stopped", "{shown}");
        let seg = segments(&shown)[0].clone();
        assert_eq!(seg["ended"], "stopped", "{shown}");
        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}");
        assert_eq!(j["resumed_from_seq"], 1);
        assert_eq!(j["start_tick"], seg["last_tick"]);
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    // Killed again, and a new fleet started at once, while the old server may still be
    // shutting down: the new one stops it if it lives, closes its segment, and never
    // runs two servers for the world.
    fleet.kill9();
    let fleet = env.fleet(POLL);
    rt.block_on(async {
        assert!(world_server_pids(&w).is_empty(), "a server outlived the restart");
        let shown = fleet.show(&w).await;
        let segs = segments(&shown);
        assert_eq!(segs.len(), 2, "{shown}");
        assert_eq!(segs[1]["ended"], "stopped", "{shown}");
        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}");
        assert_eq!(j["resumed_from_seq"], 2);
        assert_eq!(world_server_pids(&w).len(), 1);
    });
}

/// Answers are JSON whatever went wrong, a world id may start with '-', a repeated PUT
/// answers with the stored config, and a world server's log has no colour codes.
pub fn answers_are_json_and_any_valid_id_runs(backend: Backend) {
    let id = format!("-{}", world_id("dash", backend));
    let env = Env::new(backend, "fleet-json");
    let fleet = env.fleet(POLL);
    runtime().block_on(async {
        for (method, path, body, want) in [
            (Method::GET, "/no/such/route".to_string(), None, 404),
            (Method::DELETE, "/api/worlds".to_string(), None, 405),
            (Method::GET, "/api/worlds/%FF".to_string(), None, 400),
            (
                Method::PUT,
                "/api/worlds/big".to_string(),
                Some("x".repeat(3 << 20)),
                413,
            ),
        ] {
            let (s, b) = fleet.call(method.clone(), &path, body.as_deref()).await;
            assert_eq!(s, want, "{method} {path}: {b}");
            assert!(b["error"].is_string(), "{method} {path}: not a JSON error: {b}");
        }
        let (s, b) = fleet.put(&id, SMALL_WORLD).await;
        assert_eq!(s, 201, "{b}");
        let stored = b["config"].clone();
        // The same world spelled with a default written out: 200, and the stored config.
        let mut respelled: Value = serde_json::from_str(SMALL_WORLD).expect("json");
        respelled["tick_rate_hz"] = 60.into();
        let (s, b) = fleet.put(&id, &respelled.to_string()).await;
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["config"], stored, "a repeated PUT echoed its body");
        let (s, b) = fleet.join(&id).await;
        assert_eq!(
            s,
            200,
            "a world id starting with '-' did not start: {b}\n{}",
            fleet.log()
        );
        assert_eq!(world_server_pids(&id).len(), 1);
        let (s, _) = fleet.stop(&id).await;
        assert_eq!(s, 200);
    });
    let log = std::fs::read(env.data_dir().join("worlds").join(&id).join("server.log")).expect("server.log");
    assert!(!log.is_empty());
    assert!(
        !log.contains(&0x1b),
        "colour codes in a log file:\n{}",
        String::from_utf8_lossy(&log)
    );
}

/// A join counts as activity: a world joined again before its idle timeout runs out is
/// not stopped when the timeout counted from the first join would have stopped it.
pub fn a_join_resets_the_idle_clock(backend: Backend) {
    let id = world_id("idle-join", backend);
    let env = Env::new(backend, "fleet-idle-join");
    let fleet = env.fleet(&["--poll-interval-seconds", "0.1", "--idle-timeout-seconds", "3"]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&id, SMALL_WORLD).await.0, 201);
        let (s, first) = fleet.join(&id).await;
        assert_eq!((s, first["started"].clone()), (200, Value::Bool(true)), "{first}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (s, second) = fleet.join(&id).await;
        assert_eq!(
            (s, second["started"].clone()),
            (200, Value::Bool(false)),
            "{second}"
        );
        // 3.5 s after the first join, 1.5 s after the second: idle since the first would
        // have stopped it by now (3 s); idle since the second has 1.5 s to go.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (s, third) = fleet.join(&id).await;
        assert_eq!(s, 200, "{third}");
        assert_eq!(
            third["started"], false,
            "the world was stopped though joined 1.5 s ago: {third}"
        );
        assert_eq!(third["ws_url"], first["ws_url"]);
    });
}

/// A fleet refuses worlds over its limits, naming the key and the flag, and starts no more
/// world servers at once than it may (the join over the cap is a 503 saying why).
pub fn limits_refuse_big_worlds_and_cap_the_running_ones(backend: Backend) {
    let (a, b) = (world_id("limit-a", backend), world_id("limit-b", backend));
    let env = Env::new(backend, "fleet-limits");
    let fleet = env.fleet(&[
        "--poll-interval-seconds",
        "0.1",
        "--world-terrain-cells-max",
        "512",
        "--world-boids-max",
        "1000",
        "--worlds-running-max",
        "1",
    ]);
    runtime().block_on(async {
        for (body, key, flag) in [
            (
                r#"{"terrain_grid_cells": 1024, "terrain_cell_size_mm": 1000, "world_size_mm": 1024000}"#,
                "terrain_grid_cells",
                "--world-terrain-cells-max",
            ),
            (
                r#"{"terrain_grid_cells": 256, "terrain_cell_size_mm": 1000, "world_size_mm": 256000, "boid_count": 1001}"#,
                "boid_count",
                "--world-boids-max",
            ),
            (
                r#"{"terrain_grid_cells": 256, "terrain_cell_size_mm": 1000, "world_size_mm": 256000, "boid_count": 100, "client_slots_max": 2000}"#,
                "client_slots_max",
                "--world-clients-max",
            ),
            // 1,000 boids and 1,024 slots at 600 Hz: an estimated 10.3 ms a tick against
            // a budget of 1.3 ms.
            (
                r#"{"terrain_grid_cells": 256, "terrain_cell_size_mm": 1000, "world_size_mm": 256000, "boid_count": 1000, "tick_rate_hz": 600, "snapshot_interval_ticks": 30}"#,
                "estimated at 10.3 ms",
                "--tick-budget-percent",
            ),
        ] {
            let (s, r) = fleet.put(&a, body).await;
            assert_eq!(s, 422, "{body}: {r}");
            let error = r["error"].as_str().unwrap_or_default();
            assert!(error.contains(key) && error.contains(flag), "{body}: {r}");
        }
        assert_eq!(fleet.put(&a, SMALL_WORLD).await.0, 201);
        assert_eq!(fleet.put(&b, SMALL_WORLD).await.0, 201);
        let (s, r) = fleet.join(&a).await;
        assert_eq!(s, 200, "{r}");
        let (s, r) = fleet.join(&b).await;
        assert_eq!(s, 503, "{r}");
        assert!(text(&r).contains("--worlds-running-max"), "{r}");
        // The running world is still joinable, and once it stops the other may start.
        assert_eq!(fleet.join(&a).await.0, 200);
        assert_eq!(fleet.stop(&a).await.0, 200);
        let (s, r) = fleet.join(&b).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(fleet.stop(&b).await.0, 200);
    });
}

/// A world server that stops answering (SIGSTOP) is killed after a few unanswered status
/// polls, and the next join resumes the world on a new server instead of handing out the
/// URL of one that will never answer.
pub fn a_server_that_stops_answering_is_replaced(backend: Backend) {
    let id = world_id("frozen", backend);
    let env = Env::new(backend, "fleet-frozen");
    // The defaults: a poll a second, each waiting 1 s, 3 misses.
    let fleet = env.fleet(&[]);
    runtime().block_on(async {
        assert_eq!(fleet.put(&id, SMALL_WORLD).await.0, 201);
        let (s, first) = fleet.join(&id).await;
        assert_eq!(s, 200, "{first}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pids = world_server_pids(&id);
        assert_eq!(pids.len(), 1);
        // SAFETY: a signal to the world server this test's fleet started.
        unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGSTOP) };
        let frozen = std::time::Instant::now();
        eventually(
            "the frozen server to be killed",
            Duration::from_secs(20),
            async || !alive(pids[0]),
        )
        .await;
        let detected = frozen.elapsed();
        eprintln!(
            "a SIGSTOPped world server was killed {:.1} s after it froze",
            detected.as_secs_f64()
        );
        assert!(detected < Duration::from_secs(8), "detected after {detected:?}");
        let (s, next) = fleet.join(&id).await;
        assert_eq!(s, 200, "{next}");
        assert_eq!(next["started"], true, "{next}");
        assert_ne!(next["ws_url"], first["ws_url"]);
        let shown = fleet.show(&id).await;
        assert_eq!(segments(&shown)[0]["ended"], "crashed", "{shown}");
    });
}
