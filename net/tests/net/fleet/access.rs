//! Who may call the fleet, and what it tells operators: every role's token against every
//! call, open joins and their rate limit, tokens from the environment, and the node's
//! `/metrics` and service discovery (unknown ids keep nothing). Each runs on the backend it
//! is given, like the scenarios it is listed with.

use migratory_fleet::Role;
use migratory_http::Method;

use super::harness::{Backend, Env, SMALL_WORLD};
use super::scenarios::{world_id, POLL};
use crate::common::runtime;

/// Admin calls need the fleet's admin token; joins do not. Without it, an anonymous DELETE
/// with a player connected had deleted every recording of the world.
pub fn every_call_needs_a_token_of_its_role(backend: Backend) {
    let id = world_id("roles", backend);
    let env = Env::new(backend, "fleet-roles");
    let reader_file = env.dir.write("reader-token", b"reader-token-for-this-test\n");
    let reader_arg = reader_file.display().to_string();
    let mut fleet = env.fleet(&[
        "--poll-interval-seconds",
        "0.1",
        "--reader-token-file",
        &reader_arg,
    ]);
    let admin = fleet.admin_token.clone().expect("the fleet made its admin token");
    for name in [
        migratory_fleet::ADMIN_TOKEN_FILE_NAME,
        migratory_fleet::PLAYER_TOKEN_FILE_NAME,
    ] {
        let mode = std::fs::metadata(env.data_dir().join(name))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .expect("token file");
        assert_eq!(mode, 0o600, "{name} is readable by others");
    }
    let player = std::fs::read_to_string(env.data_dir().join(migratory_fleet::PLAYER_TOKEN_FILE_NAME))
        .expect("player token")
        .trim()
        .to_string();
    runtime().block_on(async {
        assert_eq!(fleet.put(&id, SMALL_WORLD).await.0, 201);
        let calls = [
            (Method::GET, "/api/worlds".to_string(), Role::Reader),
            (Method::GET, format!("/api/worlds/{id}"), Role::Reader),
            (Method::GET, "/api/nodes".to_string(), Role::Reader),
            (Method::GET, "/api/sd".to_string(), Role::Reader),
            (Method::POST, format!("/api/worlds/{id}/join"), Role::Player),
            (Method::PUT, format!("/api/worlds/{id}"), Role::Admin),
            (Method::POST, format!("/api/worlds/{id}/stop"), Role::Admin),
        ];
        let tokens = [
            (None, None),
            (Some("not-any-token-of-this-fleet".to_string()), None),
            (Some("reader-token-for-this-test".to_string()), Some(Role::Reader)),
            (Some(player.clone()), Some(Role::Player)),
            (Some(admin.clone()), Some(Role::Admin)),
        ];
        for (token, role) in &tokens {
            fleet.admin_token = token.clone();
            for (method, path, needed) in &calls {
                let (s, b) = fleet.call(method.clone(), path, Some(SMALL_WORLD)).await;
                let want = match role {
                    None => 401,
                    Some(Role::Admin) => 200,
                    Some(r) if r == needed => 200,
                    Some(_) => 403,
                };
                assert_eq!(s, want, "{method} {path} as {role:?}: {b}");
                if s != 200 {
                    assert!(b["error"].is_string(), "{b}");
                }
            }
        }
        fleet.admin_token = Some(admin);
        assert_eq!(
            fleet
                .call(Method::DELETE, &format!("/api/worlds/{id}"), None)
                .await
                .0,
            204
        );
    });
}

/// `--open-joins-per-minute N` lets joins in without a token, N a minute from one
/// address; tokens still work past the limit. The admin token can come from the
/// environment instead of a file.
pub fn open_joins_are_rate_limited_and_tokens_come_from_the_environment(backend: Backend) {
    let id = world_id("open", backend);
    let env = Env::new(backend, "fleet-open");
    let admin = "admin-token-from-the-environment";
    let mut fleet = env.fleet_with_env(
        &["--open-joins-per-minute", "3"],
        &[(migratory_fleet::ADMIN_TOKEN_ENV, admin)],
    );
    assert!(
        !env.data_dir()
            .join(migratory_fleet::PLAYER_TOKEN_FILE_NAME)
            .exists(),
        "open joins make no player token"
    );
    runtime().block_on(async {
        fleet.admin_token = Some(admin.to_string());
        assert_eq!(fleet.put(&id, SMALL_WORLD).await.0, 201);
        fleet.admin_token = None;
        for _ in 0..3 {
            let (s, j) = fleet.join(&id).await;
            assert_eq!(s, 200, "{j}");
        }
        let (s, j) = fleet.join(&id).await;
        assert_eq!(s, 429, "{j}");
        assert!(
            j["error"].as_str().is_some_and(|e| e.contains("3 a minute")),
            "{j}"
        );
        fleet.admin_token = Some(admin.to_string());
        let (s, j) = fleet.join(&id).await;
        assert_eq!(s, 200, "{j}");
        // The file's token is not the admin token when the environment gives one.
        let file = env.data_dir().join(migratory_fleet::ADMIN_TOKEN_FILE_NAME);
        if let Ok(t) = std::fs::read_to_string(&file) {
            fleet.admin_token = Some(t.trim().to_string());
            assert_eq!(fleet.call(Method::GET, "/api/worlds", None).await.0, 401);
        }
    });
}

/// Joins of unknown worlds keep nothing (each distinct id used to leave a slot in memory:
/// 10.5 MB grew to 66 MB over 100k ids); the node's `/metrics` counts them; the discovery
/// list names each running world server's metrics target with its world and node.
pub fn unknown_joins_keep_nothing_and_metrics_and_discovery_tell_the_rest(backend: Backend) {
    let w = world_id("metrics", backend);
    let env = Env::new(backend, "fleet-metrics");
    let fleet = env.fleet(POLL);
    runtime().block_on(async {
        let unknown = 300;
        for i in 0..unknown {
            let (s, b) = fleet.join(&format!("nobody-{i}")).await;
            assert_eq!(s, 404, "{b}");
        }
        let metrics = fleet_metrics(&fleet).await;
        let read = |name: &str, labels: &str| {
            migratory_wire::metric::sample(&metrics, name, labels)
                .unwrap_or_else(|| panic!("{name}{labels} in:\n{metrics}"))
        };
        assert_eq!(read("migratory_fleet_world_slots", ""), 0.0);
        assert_eq!(
            read("migratory_fleet_joins_total", "{outcome=\"unknown\"}"),
            f64::from(unknown)
        );
        assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
        let (s, j) = fleet.join(&w).await;
        assert_eq!(s, 200, "{j}");
        let metrics = fleet_metrics(&fleet).await;
        let read = |name: &str, labels: &str| {
            migratory_wire::metric::sample(&metrics, name, labels)
                .unwrap_or_else(|| panic!("{name}{labels} in:\n{metrics}"))
        };
        assert_eq!(read("migratory_fleet_world_slots", ""), 1.0);
        assert_eq!(read("migratory_fleet_world_servers_running", ""), 1.0);
        assert_eq!(read("migratory_fleet_worlds", "{state=\"running\"}"), 1.0);
        assert_eq!(read("migratory_fleet_worlds", "{state=\"stopped\"}"), 0.0);
        assert_eq!(read("migratory_fleet_joins_total", "{outcome=\"started\"}"), 1.0);
        assert_eq!(
            read("migratory_fleet_join_seconds_count", ""),
            f64::from(unknown + 1)
        );
        // Discovery: admin only, and it names the server's /metrics target.
        let (s, sd) = fleet.call(Method::GET, "/api/sd", None).await;
        assert_eq!(s, 200, "{sd}");
        let groups = sd.as_array().expect("a list");
        assert_eq!(groups.len(), 1, "{sd}");
        assert_eq!(groups[0]["labels"]["world"], w.as_str());
        let target = groups[0]["targets"][0].as_str().expect("a target");
        assert!(j["ws_url"].as_str().expect("url").contains(target), "{sd} {j}");
        let scraped = migratory_http::get(&format!("http://{target}/metrics"))
            .await
            .expect("scrape");
        assert!(scraped.text().contains("migratory_tick"), "{}", scraped.text());
        let anonymous = migratory_http::get(&format!("{}/api/sd", fleet.url))
            .await
            .expect("sd");
        assert_eq!(anonymous.status, 401);
    });
}

async fn fleet_metrics(fleet: &super::harness::Fleet) -> String {
    let r = migratory_http::get(&format!("{}/metrics", fleet.url))
        .await
        .expect("metrics");
    assert_eq!(r.status, 200);
    r.text()
}
