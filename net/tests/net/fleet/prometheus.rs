//! A real Prometheus (Debian's `prometheus` and `promtool`) against a fleet of three
//! worlds: the world servers' exposition passes `promtool check metrics`; Prometheus finds
//! every world server through the fleet's HTTP service discovery, labelled with its world
//! and node, scrapes them and the fleet, and answers a fleet-wide p99 of the tick loop
//! with `histogram_quantile` (which summaries cannot give).

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::harness::{eventually, Backend, Env, SMALL_WORLD};
use crate::common::runtime;

/// A Prometheus server of the test's own, killed on drop.
struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

async fn query(prom: &Prometheus, q: &str) -> Vec<Value> {
    let url = format!(
        "{}/api/v1/query?query={}",
        prom.url,
        q.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    );
    let Ok(r) = migratory_http::get(&url).await else {
        return Vec::new();
    };
    let v: Value = r.json().unwrap_or(Value::Null);
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[test]
fn prometheus_discovers_scrapes_and_aggregates_a_three_world_fleet() {
    let env = Env::new(Backend::Sqlite, "fleet-prometheus");
    let fleet = env.fleet(&[]);
    let token_file = env.data_dir().join(migratory_fleet::ADMIN_TOKEN_FILE_NAME);
    runtime().block_on(async {
        let mut urls = Vec::new();
        for i in 0..3 {
            let w = format!("prom-{i}");
            assert_eq!(fleet.put(&w, SMALL_WORLD).await.0, 201);
            let (s, j) = fleet.join(&w).await;
            assert_eq!(s, 200, "{j}");
            urls.push(j["ws_url"].as_str().expect("url").to_string());
        }
        // The world servers' exposition is valid Prometheus text.
        let target = urls[0].trim_start_matches("ws://").split('/').next().expect("host");
        let text = migratory_http::get(&format!("http://{target}/metrics"))
            .await
            .expect("scrape")
            .text();
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (Debian's prometheus package; tests/run.sh installs it)");
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("feed promtool");
        let out = promtool.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let port = free_port();
        let fleet_target = fleet.url.trim_start_matches("http://");
        let config = env.dir.write(
            "prometheus.yml",
            [
                "global:".to_string(),
                "  scrape_interval: 1s".into(),
                "  evaluation_interval: 1s".into(),
                "scrape_configs:".into(),
                "  - job_name: worlds".into(),
                "    http_sd_configs:".into(),
                format!("      - url: {}/api/sd", fleet.url),
                "        refresh_interval: 1s".into(),
                "        authorization:".into(),
                // Written out: Debian's Prometheus 2.42 sends the bare credentials in
                // http_sd's Authorization header when the type is left to its default.
                "          type: Bearer".into(),
                format!("          credentials_file: {}", token_file.display()),
                "  - job_name: fleet".into(),
                "    static_configs:".into(),
                format!("      - targets: ['{fleet_target}']"),
                String::new(),
            ]
            .join("\n")
            .as_bytes(),
        );
        let data = env.dir.path().join("prometheus-data");
        let log = std::fs::File::create(env.dir.path().join("prometheus.log")).expect("log");
        let prom = Prometheus {
            child: Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("prometheus (Debian's package; tests/run.sh installs it)"),
            url: format!("http://127.0.0.1:{port}"),
        };
        let prom_log = || std::fs::read_to_string(env.dir.path().join("prometheus.log")).unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            let up = query(&prom, "sum(up)").await;
            if up.first().and_then(|r| r["value"][1].as_str()) == Some("4") {
                break;
            }
            if std::time::Instant::now() > deadline {
                let targets = migratory_http::get(&format!("{}/api/v1/targets", prom.url))
                    .await
                    .map(|r| r.text())
                    .unwrap_or_default();
                panic!("Prometheus did not scrape 3 worlds and the fleet: up = {up:?}\ntargets: {targets}\nlog:\n{}", prom_log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Each world server is one target, labelled with its world and node.
        let worlds = query(&prom, "count by (world, node) (migratory_tick)").await;
        let mut labelled: Vec<String> = worlds
            .iter()
            .map(|r| format!("{}@{}", r["metric"]["world"].as_str().unwrap_or("?"), r["metric"]["node"].as_str().unwrap_or("?")))
            .collect();
        labelled.sort();
        assert_eq!(labelled.len(), 3, "{worlds:?}\n{}", prom_log());
        assert!(labelled.iter().all(|l| l.starts_with("prom-") && !l.ends_with("@?")), "{labelled:?}");
        // A fleet-wide p99 of the tick loop, over every world's buckets at once.
        let q = "histogram_quantile(0.99, sum by (le) (rate(migratory_tick_loop_duration_seconds_bucket[5s])))";
        let mut p99 = None;
        eventually("a fleet-wide p99 of the tick loop", Duration::from_secs(20), async || {
            p99 = query(&prom, q)
                .await
                .first()
                .and_then(|r| r["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
                .filter(|v| v.is_finite() && *v > 0.0);
            p99.is_some()
        })
        .await;
        let p99 = p99.expect("a value");
        assert!(p99 < 0.064, "a small world's tick p99 is far below 64 ms: {p99}");
        eprintln!("fleet-wide tick loop p99 over 3 worlds: {:.3} ms", p99 * 1000.0);
        // The fleet's own series come through its scrape.
        let joins = query(&prom, "sum(migratory_fleet_joins_total)").await;
        assert_eq!(
            joins.first().and_then(|r| r["value"][1].as_str()),
            Some("3"),
            "{joins:?}"
        );
    });
}
