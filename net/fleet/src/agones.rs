//! World servers allocated from an Agones Fleet instead of forked here
//! (`--allocator agones`): a `GameServerAllocation` created through the Kubernetes API
//! (`POST /apis/allocation.agones.dev/v1/namespaces/{ns}/gameserverallocations`, as
//! Agones 1.56's allocation controller answers it: 201 with `status.state` `Allocated`,
//! `UnAllocated` when no GameServer of the Fleet is Ready, `Contention`; a Kubernetes
//! `Status` with its code otherwise, such as 404 when the CRD is not installed or the
//! namespace does not exist). The world id, this node's internal URL and the world's token
//! go in the allocation's `spec.metadata.annotations`, which the allocated server reads
//! back from its SDK (`net/server/src/agones.rs`, `await_allocation`).
//!
//! The fleet reaches the Kubernetes API over plain HTTP through a `kubectl proxy` sidecar
//! (its own HTTP client has no TLS; the proxy holds the service account's credentials).
//! An allocated server is driven through `process::Remote`: a stop or a kill deletes its
//! GameServer (Agones then sends the pod SIGTERM), a move asks the server itself
//! (`POST /fleet/stop?move=1` with the world's token), and its exit is seen when its
//! GameServer is gone from the API (Agones removes it once its pod has ended, after the
//! server's last shipment; a server that is merely slow to answer is not an exit). A
//! GameServer a kill could not delete is counted as exited after `KILL_GIVE_UP`: its
//! token is dropped by then, so the fleet takes nothing more from it.

use std::sync::Arc;
use std::time::Duration;

use migratory_http::{self as http, HttpError};
use migratory_wire::fleet::{ANNOTATION_FLEET_URL, ANNOTATION_TOKEN, ANNOTATION_WORLD, FLEET_STOP_PATH};
use serde_json::json;
use thiserror::Error;
use tokio::sync::watch;

use crate::process::{ExitInfo, Remote};

/// Longest wait for one Kubernetes API call.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an allocated server's GameServer is read to see that it still exists.
const EXIT_POLL: Duration = Duration::from_millis(250);
/// After a kill, the longest wait for the GameServer to go before it counts as exited.
const KILL_GIVE_UP: Duration = Duration::from_secs(30);
/// Allocations retried after a `Contention` answer (another allocation took the spare).
const CONTENTION_RETRIES: u32 = 3;

/// Where and how to allocate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgonesOptions {
    /// The Kubernetes API, over plain HTTP (`kubectl proxy`: `http://127.0.0.1:8001`).
    pub api_url: String,
    pub namespace: String,
    /// The Agones Fleet whose GameServers serve worlds (`agones.dev/fleet` label).
    pub fleet: String,
    /// This node's internal routes as the GameServers reach them.
    pub fleet_url: String,
}

/// Why an allocation (or a GameServer call) failed.
#[derive(Debug, Error)]
pub enum AllocateError {
    #[error("no Ready GameServer in Agones Fleet `{fleet}` (the allocation came back UnAllocated): the pool is empty or the Fleet is at its replicas")]
    Unallocated { fleet: String },
    #[error("the allocation came back Contention (another allocation took the GameServer): try again")]
    Contention,
    #[error("the Kubernetes API answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("the Kubernetes API: {0}")]
    Http(#[from] HttpError),
    /// (`status` is the answer's status only: the rest echoes the annotations, the token
    /// among them.)
    #[error("an allocation answer without {what}: status {status}")]
    Answer { what: &'static str, status: String },
}

/// An allocated GameServer: its name and where its game port is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocated {
    pub name: String,
    pub address: String,
    pub port: u16,
}

impl AgonesOptions {
    fn allocations_url(&self) -> String {
        format!(
            "{}/apis/allocation.agones.dev/v1/namespaces/{}/gameserverallocations",
            self.api_url.trim_end_matches('/'),
            self.namespace
        )
    }

    fn gameserver_url(&self, name: &str) -> String {
        format!(
            "{}/apis/agones.dev/v1/namespaces/{}/gameservers/{name}",
            self.api_url.trim_end_matches('/'),
            self.namespace
        )
    }

    /// The allocation's body: a Ready GameServer of the Fleet, packed, annotated with
    /// the world, this node's internal URL and the world's token.
    pub fn allocation_body(&self, world: &str, token: &str) -> serde_json::Value {
        json!({
            "apiVersion": "allocation.agones.dev/v1",
            "kind": "GameServerAllocation",
            "spec": {
                "selectors": [{ "matchLabels": { "agones.dev/fleet": self.fleet } }],
                "scheduling": "Packed",
                "metadata": {
                    "annotations": {
                        ANNOTATION_WORLD: world,
                        ANNOTATION_FLEET_URL: self.fleet_url,
                        ANNOTATION_TOKEN: token,
                    }
                }
            }
        })
    }

    /// Allocates a GameServer for `world`, trying again after a `Contention`.
    pub async fn allocate(&self, world: &str, token: &str) -> Result<Allocated, AllocateError> {
        let mut tries = 0;
        loop {
            match self.allocate_once(world, token).await {
                Err(AllocateError::Contention) if tries < CONTENTION_RETRIES => tries += 1,
                other => return other,
            }
        }
    }

    async fn allocate_once(&self, world: &str, token: &str) -> Result<Allocated, AllocateError> {
        let r = http::Request::new(http::Method::POST, self.allocations_url())
            .json_body(&self.allocation_body(world, token))
            .timeout(API_TIMEOUT)
            .send()
            .await?;
        let answer: serde_json::Value = r.json().unwrap_or(serde_json::Value::Null);
        if !r.is_success() {
            return Err(AllocateError::Api {
                status: r.status,
                message: answer["message"].as_str().unwrap_or(r.text().trim()).to_string(),
            });
        }
        let status = &answer["status"];
        match status["state"].as_str() {
            Some("Allocated") => {}
            Some("UnAllocated") => {
                return Err(AllocateError::Unallocated {
                    fleet: self.fleet.clone(),
                })
            }
            Some("Contention") => return Err(AllocateError::Contention),
            _ => {
                return Err(AllocateError::Answer {
                    what: "a state",
                    status: status.to_string(),
                })
            }
        }
        let missing = |what| AllocateError::Answer {
            what,
            status: status.to_string(),
        };
        let name = status["gameServerName"]
            .as_str()
            .ok_or_else(|| missing("gameServerName"))?;
        let address = status["address"].as_str().ok_or_else(|| missing("an address"))?;
        let port = status["ports"]
            .as_array()
            .and_then(|p| p.first())
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| missing("a port"))?;
        Ok(Allocated {
            name: name.to_string(),
            address: address.to_string(),
            port,
        })
    }

    /// Whether GameServer `name` still exists (a 404: it does not).
    pub async fn exists(&self, name: &str) -> Result<bool, AllocateError> {
        let r = http::Request::new(http::Method::GET, self.gameserver_url(name))
            .timeout(API_TIMEOUT)
            .send()
            .await?;
        match r.status {
            404 => Ok(false),
            _ if r.is_success() => Ok(true),
            status => Err(AllocateError::Api {
                status,
                message: r.text().trim().to_string(),
            }),
        }
    }

    /// Deletes GameServer `name` (Agones stops its pod with SIGTERM); one already gone is
    /// not an error.
    pub async fn delete(&self, name: &str) -> Result<(), AllocateError> {
        let r = http::Request::new(http::Method::DELETE, self.gameserver_url(name))
            .timeout(API_TIMEOUT)
            .send()
            .await?;
        if r.is_success() || r.status == 404 {
            return Ok(());
        }
        Err(AllocateError::Api {
            status: r.status,
            message: r.text().trim().to_string(),
        })
    }
}

/// An allocated server, driven as `process::Remote` says.
pub(crate) struct Pod {
    options: AgonesOptions,
    allocated: Allocated,
    token: String,
    /// When a kill was asked for (the watcher gives up on the GameServer after
    /// `KILL_GIVE_UP`).
    killed_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for Pod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Pod")
            .field("allocated", &self.allocated)
            .finish_non_exhaustive()
    }
}

impl Pod {
    /// Starts watching the allocated server; the returned receiver sees its exit: its
    /// GameServer gone from the API, or a kill given up on.
    pub(crate) fn watch(
        options: AgonesOptions,
        allocated: Allocated,
        token: String,
    ) -> (Arc<Pod>, watch::Receiver<Option<ExitInfo>>) {
        let (tx, rx) = watch::channel(None);
        let pod = Arc::new(Pod {
            options,
            allocated,
            token,
            killed_at: std::sync::Mutex::new(None),
        });
        let watched = pod.clone();
        tokio::spawn(async move {
            let name = &watched.allocated.name;
            loop {
                tokio::time::sleep(EXIT_POLL).await;
                match watched.options.exists(name).await {
                    // How it ended is the pod's to say (Kubernetes keeps it); the segment
                    // in the store says whether it ended cleanly.
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => {
                        tracing::debug!(gameserver = %name, error = %e, "reading the GameServer failed")
                    }
                }
                let killed = *watched.killed_at.lock().unwrap_or_else(|e| e.into_inner());
                if killed.is_some_and(|at| at.elapsed() > KILL_GIVE_UP) {
                    tracing::warn!(gameserver = %name, "the GameServer was not gone {KILL_GIVE_UP:?} after its deletion; counted as exited");
                    break;
                }
            }
            let _ = tx.send(Some(ExitInfo::Code(0)));
        });
        (pod, rx)
    }
}

impl Remote for Pod {
    fn signal(&self, sig: i32) {
        if sig != libc::SIGUSR1 {
            self.killed_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(std::time::Instant::now);
        }
        let (options, name, token) = (
            self.options.clone(),
            self.allocated.name.clone(),
            self.token.clone(),
        );
        let stop_url = format!(
            "http://{}:{}{FLEET_STOP_PATH}?move=1",
            host(&self.allocated.address),
            self.allocated.port
        );
        tokio::spawn(async move {
            if sig == libc::SIGUSR1 {
                // A move: the server stops itself and sends its clients back to the fleet.
                let asked = http::Request::new(http::Method::POST, stop_url)
                    .bearer(token)
                    .timeout(API_TIMEOUT)
                    .send()
                    .await;
                match asked {
                    Ok(r) if r.status == 202 => return,
                    Ok(r) => {
                        tracing::warn!(gameserver = %name, status = r.status, "the server refused the stop for a move; deleting its GameServer")
                    }
                    Err(e) => {
                        tracing::warn!(gameserver = %name, error = %e, "the stop for a move was not delivered; deleting its GameServer")
                    }
                }
            }
            // Deleted, or tried again a few times: the watcher gives up on it in the end.
            for attempt in 1..=5u32 {
                match options.delete(&name).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(gameserver = %name, sig, attempt, error = %e, "deleting an allocated world server's GameServer failed");
                        tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                    }
                }
            }
        });
    }
}

/// A host as it goes in a URL: an IPv6 address in brackets.
fn host(address: &str) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocation_names_the_fleet_and_carries_the_world() {
        let o = AgonesOptions {
            api_url: "http://127.0.0.1:8001/".into(),
            namespace: "games".into(),
            fleet: "migratory".into(),
            fleet_url: "http://fleet-a:7301".into(),
        };
        assert_eq!(
            o.allocations_url(),
            "http://127.0.0.1:8001/apis/allocation.agones.dev/v1/namespaces/games/gameserverallocations"
        );
        let b = o.allocation_body("w-1", "tok");
        assert_eq!(b["kind"], "GameServerAllocation");
        assert_eq!(
            b["spec"]["selectors"][0]["matchLabels"]["agones.dev/fleet"],
            "migratory"
        );
        let notes = &b["spec"]["metadata"]["annotations"];
        assert_eq!(notes[ANNOTATION_WORLD], "w-1");
        assert_eq!(notes[ANNOTATION_FLEET_URL], "http://fleet-a:7301");
        assert_eq!(notes[ANNOTATION_TOKEN], "tok");
        assert_eq!(
            o.gameserver_url("gs-1"),
            "http://127.0.0.1:8001/apis/agones.dev/v1/namespaces/games/gameservers/gs-1"
        );
    }
}
