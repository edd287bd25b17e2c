//! The Agones SDK over REST, for a world server run as an Agones GameServer: `Health` on a
//! period from the moment the process starts (a big world takes a while to build, and the
//! GameServer's health check does not wait for it), `Ready` once the server is ready (world
//! built or resumed, port bound), each joined client kept in the GameServer's `players`
//! List (Counters and Lists, beta and on by default since Agones 1.41; the alpha player
//! tracking it replaces is being retired), and `Shutdown` (then a clean stop) when the
//! world has had no players for `idle_shutdown_seconds` *after it was allocated*: an
//! unallocated replica waits in the pool, however long.
//!
//! The sidecar may start after the game server, so `Ready` and `Shutdown` are retried
//! until it answers or `sdk_retry_seconds` pass; a failed `Health` waits for the next
//! period, and a failed List call is logged. Calls, in the order they are made:
//!
//! | call                                   | when                                          |
//! |----------------------------------------|-----------------------------------------------|
//! | `POST /health`                         | every `health_period_seconds`, from the start |
//! | `POST /ready`                          | once the server is ready (a spare: at once)   |
//! | `GET /gameserver`                      | every second until the state is `Allocated` (a spare: every 100 ms, then it reads its world from the annotations) |
//! | `POST /v1beta1/lists/players:addValue` | a client joined (`{"value": "<client id>"}`)  |
//! | `POST /v1beta1/lists/players:removeValue` | it left                                    |
//! | `POST /shutdown`                       | allocated and idle too long; the server then stops itself |

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use thiserror::Error;

use migratory_http::{self as http, HttpError};

use crate::board::TickBoard;
use crate::config::AgonesSection;
use crate::lifecycle::Stopper;
use crate::serve::ServerHandle;

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
    #[error("allocated without the annotation `{annotation}`: not a Migratory fleet's allocation")]
    NotAFleetAllocation { annotation: &'static str },
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

/// The GameServer's List that holds the joined clients (`lists.players` in the manifest).
pub const PLAYERS_LIST: &str = "players";
/// How often the GameServer's state is read until it is `Allocated`.
const STATE_POLL: Duration = Duration::from_secs(1);
/// The same, for a spare waiting for its world: a join waits on it.
const ALLOCATION_POLL: Duration = Duration::from_millis(100);
/// The longest one SDK call may take: the sidecar is on the same pod, and a slow one must
/// not hold up the players List or the idle clock for long.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// After a players List call failed, the List is read back and the calls are made again
/// no sooner than this.
const LIST_RETRY: Duration = Duration::from_secs(1);

impl Sdk {
    fn new(sdk_port: u16, settings: &AgonesSection) -> Sdk {
        Sdk {
            base: format!("http://127.0.0.1:{sdk_port}"),
            retry_for: Duration::from_secs_f64(settings.sdk_retry_seconds),
        }
    }

    async fn call_once(&self, path: &str, body: &serde_json::Value) -> Result<(), CallError> {
        let response = http::Request::new(http::Method::POST, format!("{}{path}", self.base))
            .json_body(body)
            .timeout(CALL_TIMEOUT)
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

    /// The GameServer's `status.state` (`Ready`, `Allocated`, ...).
    async fn state(&self) -> Result<String, CallError> {
        let gs = self.get("/gameserver").await?;
        Ok(gs["status"]["state"].as_str().unwrap_or("").to_string())
    }

    /// The client ids in the `players` List, as the sidecar has it.
    async fn players(&self) -> Result<BTreeSet<u32>, CallError> {
        let list = self.get(&format!("/v1beta1/lists/{PLAYERS_LIST}")).await?;
        Ok(list["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str()?.parse().ok())
            .collect())
    }

    async fn get(&self, path: &str) -> Result<serde_json::Value, CallError> {
        let response = http::Request::new(http::Method::GET, format!("{}{path}", self.base))
            .timeout(CALL_TIMEOUT)
            .send()
            .await?;
        if !response.is_success() {
            return Err(CallError::Status {
                status: response.status,
            });
        }
        Ok(response.json().unwrap_or(serde_json::Value::Null))
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

/// What an allocating fleet wrote on this GameServer: the world to serve, where to read
/// it, and the token for it.
#[derive(Clone, PartialEq, Eq)]
pub struct Allocation {
    pub world_id: String,
    pub fleet_url: String,
    pub token: String,
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Allocation")
            .field("world_id", &self.world_id)
            .field("fleet_url", &self.fleet_url)
            .finish_non_exhaustive()
    }
}

/// A spare in a fleet's pool: `Ready` with no world, then waits until the GameServer is
/// `Allocated` and returns what the allocation's annotations say to serve. Missing
/// annotations are an error (the allocation was not a fleet's).
pub async fn await_allocation(sdk_port: u16, settings: &AgonesSection) -> Result<Allocation, AgonesError> {
    use migratory_wire::fleet::{ANNOTATION_FLEET_URL, ANNOTATION_TOKEN, ANNOTATION_WORLD};
    let sdk = Sdk::new(sdk_port, settings);
    sdk.call("/ready", json!({})).await?;
    tracing::info!("Agones: Ready with no world; waiting to be allocated");
    loop {
        match sdk.get("/gameserver").await {
            Ok(gs) if gs["status"]["state"] == "Allocated" => {
                let notes = &gs["object_meta"]["annotations"];
                let get = |key: &'static str| {
                    notes[key]
                        .as_str()
                        .filter(|v| !v.is_empty())
                        .map(str::to_string)
                        .ok_or(AgonesError::NotAFleetAllocation { annotation: key })
                };
                let allocation = Allocation {
                    world_id: get(ANNOTATION_WORLD)?,
                    fleet_url: get(ANNOTATION_FLEET_URL)?,
                    token: get(ANNOTATION_TOKEN)?,
                };
                tracing::info!(world = %allocation.world_id, fleet = %allocation.fleet_url, "Agones: Allocated");
                return Ok(allocation);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "Agones: reading the GameServer failed"),
        }
        tokio::time::sleep(ALLOCATION_POLL).await;
    }
}

/// Starts the `Health` calls, from process start: they run until the task is aborted
/// (the process ends). Call it before the world is built.
pub fn spawn_health(sdk_port: u16, settings: &AgonesSection) -> tokio::task::JoinHandle<()> {
    let sdk = Sdk::new(sdk_port, settings);
    let period = Duration::from_secs_f64(settings.health_period_seconds);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // A missed health call is retried at the next period, not in a loop: the
            // sidecar's own failure threshold decides.
            if let Err(e) = sdk.call_once("/health", &json!({})).await {
                tracing::debug!(error = %e, "Agones: Health not accepted");
            }
        }
    })
}

/// Starts the SDK task for a ready server; it runs until the server stops (or, idle,
/// stops it).
pub fn spawn(
    handle: &ServerHandle,
    sdk_port: u16,
    settings: &AgonesSection,
) -> tokio::task::JoinHandle<Result<(), AgonesError>> {
    // A spare that was allocated is Ready and Allocated already: a second Ready would put
    // it back in the pool.
    let ready_sent = settings.await_allocation;
    let sdk = Sdk::new(sdk_port, settings);
    let idle_shutdown = (settings.idle_shutdown_seconds > 0.0)
        .then(|| Duration::from_secs_f64(settings.idle_shutdown_seconds));
    let board = handle.board().clone();
    let stopper = handle.stopper();
    tokio::spawn(async move {
        let result = run(sdk, board, stopper.clone(), idle_shutdown, ready_sent).await;
        if let Err(e) = &result {
            // Without Ready the GameServer is never allocated; a server that still sent
            // Health would sit in the pool for ever. It stops, so Agones replaces it.
            tracing::error!(error = %e, "Agones SDK; stopping the server");
            stopper.stop();
        }
        result
    })
}

async fn run(
    sdk: Sdk,
    board: Arc<TickBoard>,
    stopper: Stopper,
    idle_shutdown: Option<Duration>,
    ready_sent: bool,
) -> Result<(), AgonesError> {
    if !ready_sent {
        sdk.call("/ready", json!({})).await?;
        tracing::info!("Agones: Ready");
    }
    let mut reported = BTreeSet::new();
    // The idle clock starts when the GameServer is allocated: before that it is a spare
    // in the Fleet's pool, and shutting it down would only make Agones start another.
    let mut allocated = false;
    let mut last_state_poll = Instant::now() - STATE_POLL;
    let mut idle_since: Option<Instant> = None;
    let mut list_retry_at = Instant::now();
    loop {
        if !allocated && last_state_poll.elapsed() >= STATE_POLL {
            last_state_poll = Instant::now();
            match sdk.state().await {
                Ok(state) if state == "Allocated" => {
                    tracing::info!("Agones: Allocated");
                    allocated = true;
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "Agones: reading the GameServer failed"),
            }
        }
        let now: BTreeSet<u32> = board.joined();
        if now != reported && Instant::now() >= list_retry_at {
            // Removes first: a full List refuses an add until a leaver is gone from it.
            let leaving: Vec<u32> = reported.difference(&now).copied().collect();
            let joining: Vec<u32> = now.difference(&reported).copied().collect();
            let mut failed = false;
            for (op, ids) in [("removeValue", leaving), ("addValue", joining)] {
                let path = format!("/v1beta1/lists/{PLAYERS_LIST}:{op}");
                for id in ids {
                    match sdk.call_once(&path, &json!({ "value": id.to_string() })).await {
                        Ok(()) if op == "addValue" => {
                            reported.insert(id);
                        }
                        Ok(()) => {
                            reported.remove(&id);
                        }
                        Err(e) => {
                            tracing::warn!(%path, client = id, error = %e, "Agones: players list call failed");
                            failed = true;
                        }
                    }
                }
            }
            if failed {
                // The sidecar answers "already there" and "not there" as errors too: what
                // it holds is the truth, and the difference is tried again a little later.
                if let Ok(listed) = sdk.players().await {
                    reported = listed;
                }
                list_retry_at = Instant::now() + LIST_RETRY;
            }
        }
        if !now.is_empty() {
            idle_since = None;
        } else if allocated {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if idle_shutdown.is_some_and(|limit| since.elapsed() >= limit) {
                tracing::info!("Agones: allocated and idle, calling Shutdown");
                let called = sdk.call("/shutdown", json!({})).await;
                // Idle is idle: the server stops even if the sidecar did not hear it.
                stopper.stop();
                return called;
            }
        }
        tokio::time::sleep(PLAYER_POLL).await;
    }
}
