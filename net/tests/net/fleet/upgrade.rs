//! A durable world across a kernel rules change: a fleet of the old rules records two
//! segments of it; a fleet of the next rules (the test programs run as a build of the
//! kernel's synthetic next rules with MIGRATORY_SYNTHETIC_RULES=1, servers included)
//! cannot resume it as it is, upgrades it by replaying its whole history, resumes it at
//! the same tick, and then forks it afresh; every old segment is kept.

use std::time::Duration;

use migratory_http::Method;
use migratory_replay::tools;
use serde_json::Value;

use super::harness::{Backend, Env, SMALL_WORLD};
use super::scenarios::{world_id, POLL};
use crate::common::{runtime, Witness};

fn segments(world: &Value) -> Vec<Value> {
    world["segments"].as_array().cloned().unwrap_or_default()
}

/// Joins `w`, keeps a player in it for `ms`, and stops it cleanly.
async fn play(fleet: &super::harness::Fleet, w: &str, ms: u64) -> Value {
    let (s, j) = fleet.join(w).await;
    assert_eq!(s, 200, "{j}\n{}", fleet.log());
    let witness = Witness::join(j["ws_url"].as_str().expect("ws_url")).await;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    witness.assert_receiving().await;
    witness.stop().await;
    assert_eq!(fleet.stop(w).await.0, 200);
    j
}

pub fn a_world_crosses_a_rules_change_by_replay_or_fork(backend: Backend) {
    let w = world_id("upgrade", backend);
    let env = Env::new(backend, "fleet-upgrade");
    let old = env.fleet(POLL);
    let last_tick = runtime().block_on(async {
        assert_eq!(old.put(&w, SMALL_WORLD).await.0, 201);
        play(&old, &w, 400).await;
        let j = play(&old, &w, 300).await;
        assert_eq!(j["resumed_from_seq"], 1, "{j}");
        let history = segments(&old.show(&w).await);
        assert_eq!(history.len(), 2, "{history:?}");
        history[1]["last_tick"].as_u64().expect("the history's last tick")
    });
    drop(old);

    let new = env.fleet_with_env(POLL, &[("MIGRATORY_SYNTHETIC_RULES", "1")]);
    runtime().block_on(async {
        // As it is, the old rules' world cannot be resumed by the new build.
        let (s, b) = new.join(&w).await;
        assert_eq!(s, 503, "{b}");
        assert!(b.to_string().contains("rules"), "{b}");

        let upgrade = |body: &'static str| {
            let path = format!("/api/worlds/{w}/upgrade");
            let new = &new;
            async move { new.call(Method::POST, &path, Some(body)).await }
        };
        let (s, r) = upgrade(r#"{"mode": "replay"}"#).await;
        assert_eq!(s, 200, "{r}\n{}", new.log());
        assert_eq!(
            (r["lineage"].as_i64(), r["previous_lineage"].as_i64()),
            (Some(1), Some(0)),
            "{r}"
        );
        assert_eq!(r["segments_replayed"], serde_json::json!([1, 2]), "{r}");
        assert_eq!(
            r["rules_version"].as_u64(),
            r["old_rules_version"].as_u64().map(|v| v + 1),
            "{r}"
        );
        assert_eq!(
            (r["last_tick"].as_u64(), r["first_changed_root_tick"].as_u64()),
            (Some(last_tick), Some(1))
        );
        let world = new.show(&w).await;
        assert_eq!(world["lineage"], 1, "{world}");
        let segs = segments(&world);
        assert_eq!(segs.len(), 3, "the old segments are kept: {segs:?}");
        let lineages: Vec<i64> = segs.iter().filter_map(|s| s["lineage"].as_i64()).collect();
        assert_eq!(lineages, [0, 0, 1]);
        let up = &segs[2];
        assert_eq!(
            (up["origin"].as_str(), up["ended"].as_str()),
            (Some("upgrade"), Some("stopped")),
            "{up}"
        );
        assert_eq!(up["last_tick"].as_u64(), Some(last_tick));
        // The upgrade's recording is the whole history under the next rules: it verifies
        // there at 1 and 2 shards (on a thread following them), from tick 1.
        let path = env.data_dir().join(up["recording_path"].as_str().expect("path"));
        let verified = std::thread::spawn(move || {
            migratory_kernel::follow_synthetic_rules(true);
            tools::verify(&path, &[1, 2], None, &mut |_, _| {}).expect("verify")
        })
        .join()
        .expect("verify thread");
        assert!(verified.ok() && !verified.rules_version_differs, "{verified:?}");
        assert_eq!(verified.ticks, last_tick as u32);

        // The next join resumes from it, at the history's last tick.
        let (s, j) = new.join(&w).await;
        assert_eq!(s, 200, "{j}\n{}", new.log());
        assert_eq!(
            (j["start_tick"].as_u64(), j["resumed_from_seq"].as_i64()),
            (Some(last_tick), Some(3)),
            "{j}\n{}",
            new.log()
        );
        let witness = Witness::join(j["ws_url"].as_str().expect("ws_url")).await;
        witness.assert_receiving().await;
        witness.stop().await;
        assert_eq!(new.stop(&w).await.0, 200);

        // A fork: a fresh start from the config, in a lineage of its own.
        let (s, r) = upgrade(r#"{"mode": "fork"}"#).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(
            (r["lineage"].as_i64(), r["segment"].as_i64()),
            (Some(2), None),
            "{r}"
        );
        let (s, j) = new.join(&w).await;
        assert_eq!(s, 200, "{j}\n{}", new.log());
        assert_eq!(
            (j["start_tick"].as_u64(), j["resumed_from_seq"].as_i64()),
            (Some(0), None),
            "{j}"
        );
        assert_eq!(new.stop(&w).await.0, 200);
        let lineages: Vec<i64> = segments(&new.show(&w).await)
            .iter()
            .filter_map(|s| s["lineage"].as_i64())
            .collect();
        assert_eq!(lineages, [0, 0, 1, 1, 2]);

        // Bad requests are refused by name, unknown worlds are 404s.
        let (s, b) = upgrade(r#"{"mode": "sideways"}"#).await;
        assert_eq!(s, 422, "{b}");
        assert!(b.to_string().contains("mode"), "{b}");
        let (s, _) = new
            .call(
                Method::POST,
                "/api/worlds/no-such-world/upgrade",
                Some(r#"{"mode": "fork"}"#),
            )
            .await;
        assert_eq!(s, 404);
    });
}

/// A bookmark a player makes in a fleet world (BOOKMARK over its WebSocket) is listed by
/// the fleet once its segment closes; the node opens a replay viewer over the world's
/// whole history (two segments), which holds the bookmark and every tick; and the listed
/// bookmark then links into that replay at its tick, as its maker saw it.
pub fn a_bookmark_is_listed_and_opens_the_worlds_replay(backend: Backend) {
    let w = world_id("bookmarks", backend);
    let env = Env::new(backend, "fleet-bookmarks");
    let fleet = env.fleet(POLL);
    runtime().block_on(async {
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        play(&fleet, &w, 300).await;
        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}");
        let (mut ws, welcome) = crate::common::join(j["ws_url"].as_str().expect("ws_url"), "marker").await;
        crate::common::send(
            &mut ws,
            migratory_wire::protocol::encode_bookmark("the flock split"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(ws);
        assert_eq!(fleet.stop(&w).await.0, 200);
        let (s, b) = fleet
            .call(Method::GET, &format!("/api/worlds/{w}/bookmarks"), None)
            .await;
        assert_eq!(s, 200, "{b}\n{}", fleet.log());
        let marks = b["bookmarks"].as_array().expect("bookmarks").clone();
        assert_eq!(marks.len(), 1, "{b}");
        assert_eq!(
            (marks[0]["segment"].as_i64(), marks[0]["client"].as_u64()),
            (Some(2), Some(u64::from(welcome.client_id))),
            "{b}"
        );
        assert_eq!(marks[0]["note"], "the flock split", "{b}");
        assert!(marks[0]["replay_url"].is_null(), "no viewer open yet: {b}");
        let tick = marks[0]["tick"].as_u64().expect("tick");

        let (s, v) = fleet
            .call(Method::POST, &format!("/api/worlds/{w}/view"), None)
            .await;
        assert_eq!(s, 200, "{v}\n{}", fleet.log());
        assert_eq!(v["segments"], serde_json::json!([1, 2]), "{v}");
        let url = v["url"].as_str().expect("url").to_string();
        let info = migratory_http::get(&format!("{url}replay/info"))
            .await
            .expect("GET info");
        let info: Value = serde_json::from_str(&info.text()).expect("JSON");
        assert_eq!(info["start_tick"], 0, "the whole history: {info}");
        assert_eq!(info["last_tick"], v["last_tick"], "{info}");
        assert_eq!(info["bookmarks"][0]["tick"], tick, "{info}");
        // Asked again with nothing new, the same viewer answers.
        let (_, again) = fleet
            .call(Method::POST, &format!("/api/worlds/{w}/view"), None)
            .await;
        assert_eq!(again["url"], v["url"]);
        let (_, b) = fleet
            .call(Method::GET, &format!("/api/worlds/{w}/bookmarks"), None)
            .await;
        assert_eq!(
            b["bookmarks"][0]["replay_url"],
            format!("{url}?tick={tick}&client={}", welcome.client_id),
            "{b}"
        );
        // The state at the bookmark's tick is the recorded world's.
        let state = migratory_http::get(&format!("{url}replay/state?tick={tick}"))
            .await
            .expect("GET state");
        assert_eq!(state.status, 200);
        assert_eq!(
            u32::from_le_bytes(state.body[..4].try_into().expect("tick")),
            tick as u32
        );
        let (s, _) = fleet
            .call(Method::GET, "/api/worlds/no-such-world/bookmarks", None)
            .await;
        assert_eq!(s, 404);
    });
}
