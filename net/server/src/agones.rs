//! The Agones SDK over REST, for a world server run as an Agones GameServer: `Ready` once
//! the server is ready (world built or resumed, port bound), `Health` on a period, each
//! joined client reported with the player-tracking calls, and `Shutdown` (then a clean
//! stop) when the world has had no players for `idle_shutdown_seconds`.
//!
//! The sidecar may start after the game server, so `Ready` and `Shutdown` are retried
//! until it answers or `sdk_retry_seconds` pass; a failed `Health` waits for the next
//! period, and a failed player call (the feature is alpha, and may be off) is logged.
//! Calls, in the order they are made:
//!
//! | call                          | when                                          |
//! |-------------------------------|-----------------------------------------------|
//! | `POST /ready`                 | once, first                                   |
//! | `POST /health`                | every `health_period_seconds` after `Ready`   |
//! | `POST /alpha/player/connect`  | a client joined (`{"playerID": "<client id>"}`) |
//! | `POST /alpha/player/disconnect` | it left                                     |
//! | `POST /shutdown`              | idle too long; the server then stops itself   |

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use thiserror::Error;

use migratory_wire::http::{self, HttpError};

use crate::config::AgonesSection;
use crate::metrics::Metrics;
use crate::serve::{ServerHandle, Stopper};

/// The environment variable the Agones sidecar sets.
pub const SDK_PORT_ENV: &str = "AGONES_SDK_HTTP_PORT";

/// How often the player list is compared with what was reported.
const PLAYER_POLL: Duration = Duration::from_millis(200);
/// Pause between retries of a call the sidecar did not answer.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Why the SDK could not be used.
#[derive(Debug, Error)]
pub enum AgonesError {
    #[error("{SDK_PORT_ENV}=`{value}` is not a port number")]
    BadPort { value: String },
    #[error("the Agones sidecar did not accept {call} within {seconds} s: {last_error}")]
    Unanswered {
        call: &'static str,
        seconds: f64,
        #[source]
        last_error: CallError,
    },
}

/// Why one SDK call failed.
#[derive(Debug, Error)]
pub enum CallError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("HTTP {status}")]
    Status { status: u16 },
}

/// The sidecar's port from the environment: None when not under Agones.
pub fn sdk_port_from_env() -> Result<Option<u16>, AgonesError> {
    match std::env::var(SDK_PORT_ENV) {
        Ok(v) => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .map(Some)
            .ok_or(AgonesError::BadPort { value: v }),
        Err(_) => Ok(None),
    }
}

struct Sdk {
    base: String,
    retry_for: Duration,
}

impl Sdk {
    async fn call_once(&self, path: &str, body: &serde_json::Value) -> Result<(), CallError> {
        let response = http::Request::new(http::Method::POST, format!("{}{path}", self.base))
            .json_body(body)
            .timeout(Duration::from_secs(5))
            .send()
            .await?;
        if response.is_success() {
            Ok(())
        } else {
            Err(CallError::Status {
                status: response.status,
            })
        }
    }

    /// Retries until the sidecar accepts the call or `retry_for` passes.
    async fn call(&self, call: &'static str, body: serde_json::Value) -> Result<(), AgonesError> {
        let deadline = Instant::now() + self.retry_for;
        loop {
            match self.call_once(call, &body).await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(AgonesError::Unanswered {
                        call,
                        seconds: self.retry_for.as_secs_f64(),
                        last_error: e,
                    })
                }
                Err(e) => {
                    tracing::debug!(call, error = %e, "Agones sidecar not answering yet; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }
}

/// Starts the SDK task for a ready server; it runs until the server stops (or, idle,
/// stops it).
pub fn spawn(handle: &ServerHandle, sdk_port: u16, settings: &AgonesSection) -> tokio::task::JoinHandle<()> {
    let sdk = Sdk {
        base: format!("http://127.0.0.1:{sdk_port}"),
        retry_for: Duration::from_secs_f64(settings.sdk_retry_seconds),
    };
    let health_period = Duration::from_secs_f64(settings.health_period_seconds);
    let idle_shutdown = (settings.idle_shutdown_seconds > 0.0)
        .then(|| Duration::from_secs_f64(settings.idle_shutdown_seconds));
    let metrics = handle.metrics().clone();
    let stopper = handle.stopper();
    tokio::spawn(async move {
        if let Err(e) = run(sdk, metrics, stopper, health_period, idle_shutdown).await {
            tracing::error!(error = %e, "Agones SDK");
        }
    })
}

async fn run(
    sdk: Sdk,
    metrics: Arc<Metrics>,
    stopper: Stopper,
    health_period: Duration,
    idle_shutdown: Option<Duration>,
) -> Result<(), AgonesError> {
    sdk.call("/ready", json!({})).await?;
    tracing::info!("Agones: Ready");
    let mut reported = BTreeSet::new();
    let mut last_health = Instant::now() - health_period;
    let mut idle_since = Some(Instant::now());
    loop {
        if last_health.elapsed() >= health_period {
            last_health = Instant::now();
            // A missed health call is retried at the next period, not in a loop: the
            // sidecar's own failure threshold decides.
            if let Err(e) = sdk.call_once("/health", &json!({})).await {
                tracing::warn!(error = %e, "Agones: Health not accepted");
            }
        }
        let now: BTreeSet<u32> = metrics
            .joined_clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Player tracking is an alpha Agones feature: where it is off the calls fail, which
        // is logged and must not stop the health calls.
        for (path, ids) in [
            ("/alpha/player/connect", now.difference(&reported)),
            ("/alpha/player/disconnect", reported.difference(&now)),
        ] {
            for id in ids {
                if let Err(e) = sdk.call_once(path, &json!({ "playerID": id.to_string() })).await {
                    tracing::warn!(path, client = id, error = %e, "Agones: player tracking call failed");
                }
            }
        }
        reported = now;
        if reported.is_empty() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if idle_shutdown.is_some_and(|limit| since.elapsed() >= limit) {
                tracing::info!("Agones: idle, calling Shutdown");
                let called = sdk.call("/shutdown", json!({})).await;
                // Idle is idle: the server stops even if the sidecar did not hear it.
                stopper.stop();
                return called;
            }
        } else {
            idle_since = None;
        }
        tokio::time::sleep(PLAYER_POLL).await;
    }
}
