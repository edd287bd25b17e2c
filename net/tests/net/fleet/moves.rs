//! Moving live worlds between fleet nodes on one PostgreSQL store, with bots playing that
//! follow the world by themselves: every bot keeps its avatar (one join each in the whole
//! chain), the target's first tick follows the source's last, and the chain of segments
//! verifies at 1 and 2 shards. A drain moves a node's worlds away and the node then takes
//! none. And a world server killed with SIGKILL: its bots reclaim their avatars on the
//! resumed one. Prints the pauses the bots saw.

use std::path::PathBuf;
use std::time::Duration;

use migratory_bots::bots::{self, BotOptions, FleetTarget};
use migratory_http as http;
use migratory_kernel::Input;
use migratory_replay::{tools, Recording};
use serde_json::Value;

use super::harness::{Backend, Env, Fleet, SHARED_ADMIN_TOKEN, SMALL_WORLD};
use crate::common::runtime;

const NODE_ARGS: &[&str] = &["--lease-seconds", "3", "--poll-interval-seconds", "0.2"];

/// The segment's file, on whichever node wrote it (the largest copy).
fn seg_file(nodes: &[&Fleet], seg: &Value) -> PathBuf {
    let rel = seg["recording_path"].as_str().expect("path");
    nodes
        .iter()
        .filter_map(|n| n.data_dir.as_ref().map(|d| d.join(rel)))
        .filter(|p| p.exists())
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .unwrap_or_else(|| panic!("no node has {rel}"))
}

/// The Join inputs a segment's recording holds.
fn joins_in(file: &std::path::Path) -> usize {
    let rec = Recording::open(file).expect("segment");
    rec.ticks_from(rec.first_tick())
        .map(|t| {
            t.expect("tick")
                .inputs
                .inputs
                .iter()
                .filter(|i| matches!(i, Input::Join { .. }))
                .count()
        })
        .sum()
}

async fn post(node: &Fleet, path: &str, body: &str) -> (u16, Value) {
    node.call(http::Method::POST, path, Some(body)).await
}

/// The node that runs `world` now, by its id.
async fn owner(nodes: &[&Fleet], world: &str) -> String {
    let (s, j) = nodes[0].join(world).await;
    assert_eq!(s, 200, "{j}");
    j["node"].as_str().expect("node").to_string()
}

fn by_id<'a>(nodes: &[&'a Fleet], ids: &[&str], id: &str) -> &'a Fleet {
    nodes[ids.iter().position(|n| *n == id).expect("a node id")]
}

#[test]
fn moved_and_drained_worlds_keep_every_avatar_and_their_chain_verifies() {
    let env = Env::new(Backend::Postgres, "moves");
    let a = env.node("a", NODE_ARGS);
    let b = env.node("b", NODE_ARGS);
    let c = env.node("c", NODE_ARGS);
    let nodes = [&a, &b, &c];
    let ids = ["a", "b", "c"];
    const BOTS: u32 = 20;
    const MOVES: usize = 4;
    runtime().block_on(async {
        assert_eq!(a.put("mv", SMALL_WORLD).await.0, 201);
        assert_eq!(owner(&nodes, "mv").await, "a");
        let options = BotOptions {
            clients: BOTS,
            duration: Duration::from_secs(4 + 3 * (MOVES as u64 + 1)),
            connect_spread: Duration::from_millis(500),
            fleet: Some(FleetTarget {
                url: b.url.clone(),
                world: "mv".into(),
                token: Some(SHARED_ADMIN_TOKEN.into()),
            }),
            ..BotOptions::default()
        };
        let run = tokio::spawn(async move { bots::run(&options).await });
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Moves: to a named node, then the fleet's choice; each asked of the node that
        // runs the world. A move asked of another node is refused.
        let mut reports = Vec::new();
        for i in 0..MOVES {
            let from = owner(&nodes, "mv").await;
            let source = by_id(&nodes, &ids, &from);
            let other = ids.iter().find(|n| **n != from).expect("another node");
            let (s, j) = post(by_id(&nodes, &ids, other), "/api/worlds/mv/move", "{}").await;
            assert_eq!(s, 409, "a move asked of a node that does not run it: {j}");
            let body = match i % 2 {
                0 => format!(
                    r#"{{"to": "{}"}}"#,
                    ids[(ids.iter().position(|n| *n == from).unwrap() + 1) % 3]
                ),
                _ => "{}".to_string(),
            };
            let (s, j) = post(source, "/api/worlds/mv/move", &body).await;
            assert_eq!(s, 200, "move {i}: {j}");
            assert_ne!(j["to"], from.as_str(), "{j}");
            reports.push(j);
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        // A drain moves the world off its node, which then starts nothing.
        let from = owner(&nodes, "mv").await;
        let source = by_id(&nodes, &ids, &from);
        let (s, j) = post(source, &format!("/api/nodes/{from}/drain"), "").await;
        assert_eq!(s, 200, "{j}");
        assert_eq!(j["moved"].as_array().map(Vec::len), Some(1), "{j}");
        let now = owner(&nodes, "mv").await;
        assert_ne!(now, from);
        // A draining node is no move target.
        let (s, j) = post(
            by_id(&nodes, &ids, &now),
            "/api/worlds/mv/move",
            &format!(r#"{{"to": "{from}"}}"#),
        )
        .await;
        assert_eq!(s, 503, "a move to a draining node: {j}");
        let report = run.await.expect("bots");
        eprintln!("moves: {reports:?}");
        eprintln!(
            "bots: {} joined, {} reclaims ({} refused), pause p50 {} ms, p99 {} ms, max {} ms",
            report.joined,
            report.reclaims,
            report.reclaims_refused,
            report.pause_p50_ms,
            report.pause_p99_ms,
            report.pause_max_ms
        );
        assert_eq!(report.joined, BOTS);
        assert_eq!(report.decode_errors, 0, "{report:?}");
        assert_eq!(report.reclaims_refused, 0, "{report:?}");
        assert!(
            report.reclaims >= u64::from(BOTS) * (MOVES as u64 + 1),
            "every bot followed every move: {report:?}"
        );
        // The chain: each segment starts where the one before ended, verifies at 1 and
        // 2 shards, and holds one join per bot in all (no avatar was made twice).
        let shown = a.show("mv").await;
        let segs = shown["segments"].as_array().cloned().unwrap_or_default();
        assert_eq!(segs.len(), MOVES + 2, "{shown}");
        for pair in segs.windows(2) {
            assert_eq!(pair[0]["ended"], "stopped", "{shown}");
            assert_eq!(
                pair[1]["first_tick"], pair[0]["last_tick"],
                "0 ticks lost across a move: {shown}"
            );
        }
        for n in [&a, &b, &c] {
            let _ = n.stop("mv").await;
        }
        let files: Vec<PathBuf> = segs.iter().map(|s| seg_file(&nodes, s)).collect();
        tools::verify_chain(&files, &[1, 2], &mut |_, _| {})
            .unwrap_or_else(|e| panic!("the moved world's chain verifies: {e}"));
        let joins: usize = files.iter().map(|f| joins_in(f)).sum();
        assert_eq!(joins, BOTS as usize, "one join per bot across every move");
    });
}

#[test]
fn after_a_world_server_is_killed_every_bot_reclaims_its_avatar_on_the_resumed_one() {
    let env = Env::new(Backend::Sqlite, "crash-reclaim");
    let fleet = env.fleet(&["--poll-interval-seconds", "0.2"]);
    const BOTS: u32 = 20;
    runtime().block_on(async {
        assert_eq!(fleet.put("cr", SMALL_WORLD).await.0, 201);
        assert_eq!(fleet.join("cr").await.0, 200);
        let options = BotOptions {
            clients: BOTS,
            duration: Duration::from_secs(9),
            connect_spread: Duration::from_millis(500),
            fleet: Some(FleetTarget {
                url: fleet.url.clone(),
                world: "cr".into(),
                token: fleet.admin_token.clone(),
            }),
            ..BotOptions::default()
        };
        let run = tokio::spawn(async move { bots::run(&options).await });
        tokio::time::sleep(Duration::from_secs(3)).await;
        let pids = super::harness::world_server_pids("cr");
        assert_eq!(pids.len(), 1, "{pids:?}");
        // SAFETY: kill(2) on a pid this test's fleet started; no memory is involved.
        assert_eq!(unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) }, 0);
        let report = run.await.expect("bots");
        eprintln!(
            "after SIGKILL: {} reclaims ({} refused), pause p50 {} ms, p99 {} ms, max {} ms",
            report.reclaims,
            report.reclaims_refused,
            report.pause_p50_ms,
            report.pause_p99_ms,
            report.pause_max_ms
        );
        assert_eq!(report.joined, BOTS);
        assert_eq!(report.reclaims_refused, 0, "{report:?}");
        assert!(report.reclaims >= u64::from(BOTS), "{report:?}");
        assert_eq!(report.decode_errors, 0, "{report:?}");
        let _ = fleet.stop("cr").await;
        let shown = fleet.show("cr").await;
        let segs = shown["segments"].as_array().cloned().unwrap_or_default();
        assert_eq!(segs.len(), 2, "{shown}");
        assert_eq!(segs[0]["ended"], "crashed", "{shown}");
        let files: Vec<PathBuf> = segs
            .iter()
            .map(|s| env.data_dir().join(s["recording_path"].as_str().expect("path")))
            .collect();
        tools::verify_chain(&files, &[1, 2], &mut |_, _| {})
            .unwrap_or_else(|e| panic!("the chain verifies across the crash: {e}"));
        // The resumed session joined nobody: every bot took its old avatar (and score) back.
        let joins = joins_in(&files[1]);
        assert_eq!(joins, 0, "no bot joined as a new avatar after the crash");
    });
}

#[test]
fn a_soak_moves_its_world_while_holding_load_and_reports_the_pauses() {
    let env = Env::new(Backend::Postgres, "soak-moves");
    let a = env.node("a", NODE_ARGS);
    let _b = env.node("b", NODE_ARGS);
    let out_dir = env.dir.path().join("soak");
    let config = env.dir.path().join("soak.toml");
    std::fs::write(
        &config,
        "[thresholds]\nloop_p99_ms = 1000.0\nmemory_drift_percent = 1000.0\n",
    )
    .expect("config");
    runtime().block_on(async {
        assert_eq!(a.put("sk", SMALL_WORLD).await.0, 201);
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_test-migratory-bots"))
        .env("MIGRATORY_FLEET_ADMIN_TOKEN", SHARED_ADMIN_TOKEN)
        .args(["soak", "--fleet", &a.url, "--world", "sk", "--steps", "6"])
        .args(["--step-seconds", "2", "--hold-seconds", "7", "--move-every", "3"])
        .arg("--out")
        .arg(&out_dir)
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run migratory-bots soak");
    let json: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("metrics.json")).unwrap_or_else(|e| {
            panic!(
                "metrics.json: {e}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        }))
        .expect("JSON");
    let moves = json["moves"].as_array().cloned().unwrap_or_default();
    assert!(moves.len() >= 2, "{moves:?}");
    for m in &moves {
        assert!(m["error"].is_null(), "{m}");
        assert_ne!(m["from"], m["to"], "{m}");
    }
    let pauses = &json["pause_ms"];
    assert!(
        pauses["samples"].as_u64().unwrap_or(0) >= 6 * moves.len() as u64,
        "a pause per bot and move: {pauses}"
    );
    assert_eq!(json["totals"]["reclaims_refused"], 0);
    assert_eq!(json["totals"]["decode_errors"], 0);
    assert_eq!(json["totals"]["joined"], 6);
    // The bots never left: every second of the hold saw all six.
    for s in json["series"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["phase"] == "hold")
    {
        assert_eq!(s["joined_bots"], 6, "{s}");
    }
    assert!(out_dir.join("chart.png").exists());
    let summary = std::fs::read_to_string(out_dir.join("summary.txt")).expect("summary");
    assert!(summary.contains("pause p50"), "{summary}");
    eprintln!("{summary}");
    // A followed move is not a disconnect: with generous thresholds the soak passes.
    assert_eq!(json["totals"]["disconnects"], 0, "{summary}");
    assert_eq!(out.status.code(), Some(0), "{summary}");
}
