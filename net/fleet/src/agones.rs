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
//! `/status` stops answering.

use std::sync::Arc;
use std::time::Duration;

use migratory_wire::fleet::{
    ANNOTATION_FLEET_URL, ANNOTATION_TOKEN, ANNOTATION_WORLD, FLEET_STOP_PATH, STATUS_PATH,
};
use migratory_wire::http::{self, HttpError};
use serde_json::json;
use thiserror::Error;
use tokio::sync::watch;

use crate::process::{ExitInfo, Remote};

/// Longest wait for one Kubernetes API call.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an allocated server's `/status` is read to see that it still runs.
const EXIT_POLL: Duration = Duration::from_millis(250);
/// `/status` unanswered this many times in a row: the server has exited.
const EXIT_MISSES: u32 = 3;

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
    #[error("an allocation answer without {what}: {answer}")]
    Answer { what: &'static str, answer: String },
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

    /// Allocates a GameServer for `world`.
    pub async fn allocate(&self, world: &str, token: &str) -> Result<Allocated, AllocateError> {
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
                    answer: answer.to_string(),
                })
            }
        }
        let missing = |what| AllocateError::Answer {
            what,
            answer: answer.to_string(),
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
#[derive(Debug)]
pub(crate) struct Pod {
    options: AgonesOptions,
    allocated: Allocated,
    token: String,
}

impl Pod {
    /// Starts watching the allocated server; the returned receiver sees its exit.
    pub(crate) fn watch(
        options: AgonesOptions,
        allocated: Allocated,
        token: String,
    ) -> (Arc<Pod>, watch::Receiver<Option<ExitInfo>>) {
        let (tx, rx) = watch::channel(None);
        let status_url = format!(
            "http://{}:{}{STATUS_PATH}",
            host(&allocated.address),
            allocated.port
        );
        tokio::spawn(async move {
            let mut misses = 0;
            loop {
                tokio::time::sleep(EXIT_POLL).await;
                let answered = http::Request::new(http::Method::GET, status_url.clone())
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await
                    .is_ok_and(|r| r.is_success());
                misses = if answered { 0 } else { misses + 1 };
                if misses >= EXIT_MISSES {
                    // How it ended is the pod's to say (Kubernetes keeps it); the segment
                    // in the store says whether it ended cleanly.
                    let _ = tx.send(Some(ExitInfo::Code(0)));
                    return;
                }
            }
        });
        (
            Arc::new(Pod {
                options,
                allocated,
                token,
            }),
            rx,
        )
    }
}

impl Remote for Pod {
    fn signal(&self, sig: i32) {
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
            let done = match sig {
                // A move: the server stops itself and sends its clients back to the fleet.
                libc::SIGUSR1 => http::Request::new(http::Method::POST, stop_url)
                    .bearer(token)
                    .timeout(API_TIMEOUT)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(AllocateError::from),
                _ => options.delete(&name).await,
            };
            if let Err(e) = done {
                tracing::warn!(gameserver = %name, sig, error = %e, "signalling an allocated world server failed");
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
