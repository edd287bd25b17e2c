//! Several fleet nodes on one PostgreSQL store, each with its own data folder and process
//! group standing in for a machine: a node killed with its world servers loses its worlds
//! to joins on the others, which resume them from the segments shipped to the store; a
//! frozen node that comes back finds its server fenced. And SQLite refuses a second node.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use migratory_replay::{tools, Recording};
use serde_json::Value;

use super::harness::{eventually, Backend, Env, Fleet, FLEET, SERVER, SMALL_WORLD};
use crate::common::{runtime, Witness};

/// Short leases so a takeover comes within seconds.
const NODE_ARGS: &[&str] = &["--lease-seconds", "2", "--poll-interval-seconds", "0.2"];

fn segments(world: &Value) -> Vec<Value> {
    world["segments"].as_array().cloned().unwrap_or_default()
}

fn seg_path(node: &Fleet, seg: &Value) -> PathBuf {
    node.data_dir
        .as_ref()
        .expect("a node")
        .join(seg["recording_path"].as_str().expect("path"))
}

/// The last tick of a recording file and the root recorded for it.
fn last_root(path: &Path) -> (u32, [u8; 32]) {
    let rec = Recording::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tick = rec.last_tick();
    let root = rec.last_recorded_root().expect("a recorded root");
    (tick, root)
}

/// Joins through `node` until a node other than `dead` answers (the dead node's lease
/// must lapse first); returns the answer.
async fn join_until_taken_over(node: &Fleet, world: &str, dead: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (s, j) = node.join(world).await;
        if s == 200 && j["node"] != dead {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "no takeover of {world} within {limit:?}: {s} {j}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_killed_nodes_worlds_resume_on_the_others_at_their_shipped_roots() {
    let env = Env::new(Backend::Postgres, "nodes-kill");
    let mut a = env.node("a", NODE_ARGS);
    let b = env.node("b", NODE_ARGS);
    // C's servers are reached by a name: the URLs it hands out carry it.
    let c = env.node("c", &[NODE_ARGS, &["--advertise-host", "localhost"]].concat());
    let worlds: Vec<String> = (0..5).map(|i| format!("kill-{i}")).collect();
    runtime().block_on(async {
        let mut witnesses = Vec::new();
        for w in &worlds {
            assert_eq!(a.put(w, SMALL_WORLD).await.0, 201);
            let (s, j) = a.join(w).await;
            assert_eq!(s, 200, "{j}");
            assert_eq!(j["node"], "a");
            witnesses.push(Witness::join_moving(j["ws_url"].as_str().expect("url")).await);
        }
        // A join on another node answers the owner's server while its lease is live.
        let (s, j) = b.join(&worlds[0]).await;
        assert_eq!((s, j["node"].as_str()), (200, Some("a")), "{j}");
        assert_eq!(j["started"], false);
        // A few recorded blocks (one a second), shipped as they are flushed.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let killed = Instant::now();
        a.kill_group();
        let mut last_seen = Vec::new();
        for wi in witnesses {
            last_seen.push(wi.last_tick.load(std::sync::atomic::Ordering::Relaxed));
            let _ = tokio::time::timeout(Duration::from_secs(5), wi.stop()).await;
        }

        let mut report = Vec::new();
        // The first world is joined on B and C at once: one takes it over, and the other
        // answers the server that one started.
        let (on_b, on_c) = tokio::join!(
            join_until_taken_over(&b, &worlds[0], "a", Duration::from_secs(20)),
            join_until_taken_over(&c, &worlds[0], "a", Duration::from_secs(20)),
        );
        assert_eq!(on_b["ws_url"], on_c["ws_url"], "{on_b} {on_c}");
        assert_eq!(on_b["epoch"], on_c["epoch"], "{on_b} {on_c}");
        let starters = [&on_b, &on_c].iter().filter(|j| j["started"] == true).count();
        assert_eq!(starters, 1, "exactly one node starts the world: {on_b} {on_c}");
        let racer_won = if on_b["started"] == true { on_b } else { on_c };
        // Who runs each world from now on: the race's winner, then B and C in turn.
        let owners: Vec<&Fleet> = (0..worlds.len())
            .map(|i| match i {
                0 if racer_won["node"] == "c" => &c,
                0 => &b,
                i if i % 2 == 0 => &b,
                _ => &c,
            })
            .collect();
        for (i, w) in worlds.iter().enumerate() {
            let node = owners[i];
            let j = if i == 0 {
                racer_won.clone()
            } else {
                join_until_taken_over(node, w, "a", Duration::from_secs(20)).await
            };
            let playable_ms = killed.elapsed().as_millis();
            assert_eq!(j["started"], true, "{j}");
            assert_eq!(j["resumed_from_seq"], 1, "{j}");
            let url = j["ws_url"].as_str().expect("url");
            match j["node"].as_str() {
                Some("c") => assert!(url.starts_with("ws://localhost:"), "{j}"),
                _ => assert!(url.starts_with("ws://127.0.0.1:"), "{j}"),
            }
            let epoch = j["epoch"].as_i64().expect("epoch");
            assert!(epoch >= 2, "a takeover is a new epoch: {j}");
            // A client can play on the resumed world at once.
            let witness = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
            witness.stop().await;

            let shown = node.show(w).await;
            let segs = segments(&shown);
            assert_eq!(segs.len(), 2, "{shown}");
            assert_eq!(segs[0]["ended"], "crashed", "{shown}");
            // What A's server shipped (the taking node wrote the store's copy here) ...
            let shipped = seg_path(node, &segs[0]);
            let (tick, root) = last_root(&shipped);
            assert_eq!(segs[0]["last_tick"].as_i64(), Some(i64::from(tick)));
            assert_eq!(
                segs[0]["final_root"].as_str(),
                Some(migratory_kernel::hex(&root).as_str())
            );
            assert_eq!(j["start_tick"].as_u64(), Some(u64::from(tick)));
            // ... is where the resumed world starts: its state root at that tick is the one
            // A's server recorded.
            let resumed = seg_path(node, &segs[1]);
            let rec = Recording::open(&resumed).expect("the resumed segment");
            assert_eq!(rec.meta.start_tick, tick);
            assert_eq!(rec.start_world(1).expect("start").state_root(), root);
            // What the machine's death lost: ticks its clients saw that the store does not
            // have (the block being filled, and what was flushed but not yet shipped).
            let local = seg_path(&a, &segs[0]);
            let (local_tick, _) = last_root(&local);
            assert!(local_tick >= tick);
            let lost = last_seen[i].saturating_sub(u64::from(tick));
            report.push((w.clone(), lost, playable_ms, tick));
        }
        for (w, node) in worlds.iter().zip(owners.iter().copied()) {
            assert_eq!(node.stop(w).await.0, 200);
            let segs = segments(&node.show(w).await);
            assert_eq!(segs[1]["ended"], "stopped");
            let chain = [seg_path(node, &segs[0]), seg_path(node, &segs[1])];
            tools::verify_chain(&chain, &[1, 2], &mut |_, _| {})
                .unwrap_or_else(|e| panic!("the chain of {w} verifies: {e}"));
        }
        // Both nodes count what they took over.
        let mut takeovers = 0.0;
        for node in [&b, &c] {
            let text = migratory_http::get(&format!("{}/metrics", node.url))
                .await
                .expect("metrics")
                .text();
            takeovers += migratory_wire::metric::sample(&text, "migratory_fleet_takeovers_total", "")
                .unwrap_or_else(|| panic!("takeovers in:\n{text}"));
        }
        assert_eq!(takeovers, 5.0);
        eprintln!(
            "world, ticks lost (seen by a client on A, not in the store), ms from A's death to playable, resumed at tick"
        );
        for (w, lost, ms, tick) in &report {
            eprintln!("{w}: {lost} ticks lost, playable after {ms} ms, resumed at tick {tick}");
        }
        for (_, lost, _, _) in &report {
            // A block every 30 ticks and a shipment every 250 ms: at most 45 ticks (0.75 s),
            // and a little for the client's view of the last tick.
            assert!(*lost <= 60, "ticks lost: {report:?}");
        }
    });
}

#[test]
fn a_frozen_node_that_comes_back_is_fenced_and_its_clients_told_to_rejoin() {
    let env = Env::new(Backend::Postgres, "nodes-split");
    let a = env.node("a", NODE_ARGS);
    let b = env.node("b", NODE_ARGS);
    let w = "split";
    runtime().block_on(async {
        assert_eq!(a.put(w, SMALL_WORLD).await.0, 201);
        let (_, j) = a.join(w).await;
        assert_eq!(j["node"], "a");
        let on_a = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // Freeze A and its server past A's lease: B takes the world over.
        a.signal_group(libc::SIGSTOP);
        let j = join_until_taken_over(&b, w, "a", Duration::from_secs(20)).await;
        assert_eq!(j["node"], "b");
        let on_b = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
        let shipped_at_takeover = segments(&b.show(w).await)[0]["shipped_bytes"]
            .as_u64()
            .expect("shipped bytes");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // A comes back: its server's next shipment is refused, and it stops.
        a.signal_group(libc::SIGCONT);
        eventually(
            "A's server to tell its client to rejoin",
            Duration::from_secs(10),
            async || {
                *on_a.close_code.lock().expect("lock") == Some(migratory_wire::protocol::close_code::REJOIN)
            },
        )
        .await;
        let a_log = a
            .data_dir
            .as_ref()
            .expect("a node")
            .join("worlds")
            .join(w)
            .join("server.log");
        eventually(
            "A's server to log its fence and A to let the world go",
            Duration::from_secs(10),
            async || {
                std::fs::read_to_string(&a_log).is_ok_and(|l| l.contains("fenced"))
                    && a.log().contains("moved on to another node")
            },
        )
        .await;
        // Nothing of A's landed after B's epoch began.
        let shown = b.show(w).await;
        assert_eq!(
            segments(&shown)[0]["shipped_bytes"].as_u64(),
            Some(shipped_at_takeover),
            "{shown}"
        );
        // A join on A now answers B's server.
        let (s, j) = a.join(w).await;
        assert_eq!((s, j["node"].as_str()), (200, Some("b")), "{j}");
        on_b.assert_receiving().await;
        on_b.stop().await;
        on_a.stop().await;
        assert_eq!(b.stop(w).await.0, 200);
        let segs = segments(&b.show(w).await);
        assert_eq!(segs.len(), 2);
        let chain = [seg_path(&b, &segs[0]), seg_path(&b, &segs[1])];
        tools::verify_chain(&chain, &[1, 2], &mut |_, _| {}).expect("the chain verifies");
    });
}

/// Only the node freezes (its store connection, its process): its world server, which can
/// no longer get a shipment taken, stops by itself within half a lease, before another
/// node may take the world over, and tells its client to rejoin.
#[test]
fn a_server_whose_node_freezes_stops_before_a_takeover() {
    let env = Env::new(Backend::Postgres, "nodes-cutoff");
    // A 3 s lease: the server stops within 1.5 s and a shipping interval of its last
    // taken shipment; a takeover can come 2 s after A's last renewal at the earliest.
    let args = ["--lease-seconds", "3", "--poll-interval-seconds", "0.2"];
    let a = env.node("a", &args);
    let b = env.node("b", &args);
    let w = "cutoff";
    runtime().block_on(async {
        assert_eq!(a.put(w, SMALL_WORLD).await.0, 201);
        let (_, j) = a.join(w).await;
        assert_eq!(j["node"], "a");
        let on_a = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        a.signal(libc::SIGSTOP);
        let frozen = Instant::now();
        // Joins on B from the moment A froze: the first that takes the world over is the
        // earliest a second server could run.
        let (stopped, (j, taken)) = tokio::join!(
            async {
                eventually(
                    "A's server to stop by itself",
                    Duration::from_secs(10),
                    async || on_a.close_code.lock().expect("lock").is_some(),
                )
                .await;
                frozen.elapsed()
            },
            async {
                let j = join_until_taken_over(&b, w, "a", Duration::from_secs(20)).await;
                (j, frozen.elapsed())
            }
        );
        assert_eq!(
            *on_a.close_code.lock().expect("lock"),
            Some(migratory_wire::protocol::close_code::REJOIN)
        );
        eprintln!(
            "node frozen: its server stopped after {:.2} s, the world was taken over after {:.2} s",
            stopped.as_secs_f64(),
            taken.as_secs_f64()
        );
        assert!(stopped < taken, "the server stopped before the takeover");
        a.signal(libc::SIGCONT);
        let on_b = Witness::join_moving(j["ws_url"].as_str().expect("url")).await;
        on_b.stop().await;
        on_a.stop().await;
        assert_eq!(b.stop(w).await.0, 200);
        let segs = segments(&b.show(w).await);
        let chain = [seg_path(&b, &segs[0]), seg_path(&b, &segs[1])];
        tools::verify_chain(&chain, &[1, 2], &mut |_, _| {}).expect("the chain verifies");
    });
}

#[test]
fn a_second_node_on_one_sqlite_file_is_refused_by_name() {
    let env = Env::new(Backend::Sqlite, "nodes-sqlite");
    let _first = env.fleet(&[]);
    let out = Command::new(FLEET)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--server-bin",
            SERVER,
            "--data-dir",
        ])
        .arg(env.data_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run a second fleet");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another fleet node"), "{err}");
    assert!(err.contains("--database-url postgres://"), "{err}");
}
