//! Moves a soak's world to another fleet node every `--move-every` seconds while the bots
//! play (they follow it by themselves), and keeps what each move reported, for
//! `metrics.json` and the marks on the chart.

use std::time::Duration;

use migratory_http as http;
use serde::Serialize;
use tokio::time::Instant;

use crate::bots::{fleet_answer, FleetTarget};

/// One move, as the soak saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Move {
    /// Seconds from the soak's start.
    pub t_s: f64,
    pub from: String,
    pub to: String,
    /// From the source's stop signal to the world being the target's (the fleet's figure).
    pub handed_over_ms: Option<u64>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// Moves the world every `every` from `start + every` until `end`; returns the moves.
pub(crate) fn spawn(
    fleet: FleetTarget,
    admin_token: Option<String>,
    every: Duration,
    start: Instant,
    end: Instant,
) -> tokio::task::JoinHandle<Vec<Move>> {
    tokio::spawn(async move {
        let mut moves = Vec::new();
        let mut at = start + every;
        while at < end {
            tokio::time::sleep_until(at).await;
            let mut m = one(&fleet, admin_token.as_deref()).await;
            m.t_s = at.duration_since(start).as_secs_f64();
            if let Some(e) = &m.error {
                eprintln!("\nmove failed: {e}");
            }
            moves.push(m);
            at += every;
        }
        moves
    })
}

/// Finds the node that runs the world and asks it to move the world (the fleet chooses
/// where).
async fn one(fleet: &FleetTarget, admin_token: Option<&str>) -> Move {
    let failed = |error: String| Move {
        error: Some(error),
        ..Move::default()
    };
    let Some(answer) = fleet_answer(fleet, 50).await else {
        return failed("the fleet answered no join".into());
    };
    let Some(from) = answer["node"].as_str().map(str::to_string) else {
        return failed(format!("a join answer without a node: {answer}"));
    };
    let base = fleet.url.trim_end_matches('/');
    let mut req =
        http::Request::new(http::Method::GET, format!("{base}/api/nodes")).timeout(Duration::from_secs(10));
    req.bearer = admin_token.map(str::to_string);
    let nodes: serde_json::Value = match req.send().await {
        Ok(r) if r.is_success() => r.json().unwrap_or_default(),
        Ok(r) => return failed(format!("GET /api/nodes: {} {}", r.status, r.text())),
        Err(e) => return failed(format!("GET /api/nodes: {e}")),
    };
    let api_url = nodes["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["id"] == from.as_str())
        .and_then(|n| n["api_url"].as_str())
        .map(str::to_string);
    let Some(api_url) = api_url else {
        return failed(format!("node `{from}` has no API URL in the store"));
    };
    let mut req = http::Request::new(
        http::Method::POST,
        format!("{api_url}/api/worlds/{}/move", fleet.world),
    )
    .timeout(Duration::from_secs(60));
    req.bearer = admin_token.map(str::to_string);
    req.body = Some(b"{}".to_vec());
    match req.send().await {
        Ok(r) if r.is_success() => {
            let j: serde_json::Value = r.json().unwrap_or_default();
            Move {
                t_s: 0.0,
                from,
                to: j["to"].as_str().unwrap_or_default().to_string(),
                handed_over_ms: j["handed_over_ms"].as_u64(),
                error: None,
            }
        }
        Ok(r) => failed(format!("move: {} {}", r.status, r.text())),
        Err(e) => failed(format!("move: {e}")),
    }
}
