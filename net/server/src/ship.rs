//! Shipping the session recording to the fleet's store as it is written, for a fleet whose
//! store is shared between machines: every `interval`, the bytes the recorder has flushed
//! since the last shipment go to the fleet (`migratory_wire::fleet::segment_url`, this
//! server's token as Bearer), and the reclaim file whole when it changed (`reclaim_url`).
//! A machine that dies loses at most what was not shipped yet.
//!
//! The fleet stores an append only while the world's epoch is still this server's. A 409
//! (another node took the world over), a token the fleet no longer knows (401, 403), an
//! offset past what the store holds (422: something of ours was lost), or no shipment
//! taken for the deadline (the node cannot show it still holds the world) fences this
//! server: it stops stepping at once, closes its clients with `close_code::REJOIN` and
//! exits, so no segment ever holds two servers' ticks.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use migratory_http as http;
use migratory_wire::fleet::{read_shipment, reclaim_path, reclaim_url, segment_url};

use crate::lifecycle::{Fence, Lifecycle};
use crate::metrics::Metrics;

/// Longest wait for one shipment's answer.
const SHIP_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how often to ship.
#[derive(Clone)]
pub struct ShipTarget {
    pub fleet_url: String,
    pub world_id: String,
    pub token: String,
    pub interval: Duration,
    /// Stop as if fenced when no shipment has been taken for this long.
    pub deadline: Option<Duration>,
}

impl std::fmt::Debug for ShipTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("ShipTarget")
            .field("fleet_url", &self.fleet_url)
            .field("world_id", &self.world_id)
            .field("interval", &self.interval)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Ships `path` (and the reclaim file beside it, whenever it changed) until the task is
/// aborted or the server is fenced (raising the lifecycle's fence). The lifecycle's
/// `ship_last` makes the task ship everything left (the recording is finished then) and
/// end.
pub(crate) fn spawn(
    target: ShipTarget,
    path: PathBuf,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let fence = lifecycle.fence();
        let mut shipped: u64 = 0;
        let mut reclaim_shipped: Option<Vec<u8>> = None;
        let mut last_taken = std::time::Instant::now();
        let mut every = tokio::time::interval(target.interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut finishing = false;
        loop {
            if !finishing {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = lifecycle.last_shipment_asked() => finishing = true,
                }
            }
            let read = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    let reclaim = std::fs::read(reclaim_path(&path)).ok();
                    (read_shipment(&path, shipped), reclaim)
                })
                .await
            };
            if let Some(limit) = target.deadline.filter(|d| last_taken.elapsed() > *d) {
                let reason = format!(
                    "no shipment of the recording was taken for {:.1} s",
                    limit.as_secs_f64()
                );
                tracing::error!(%reason, "fenced: this server's node cannot show it still holds the world; stopping");
                fence.set(reason);
                return;
            }
            let Ok((recording, reclaim)) = read else { continue };
            // The reclaim file first: a player's token is then stored before the ticks
            // that follow its WELCOME.
            if let Some(r) = reclaim.filter(|r| reclaim_shipped.as_ref() != Some(r)) {
                let url = reclaim_url(&target.fleet_url, &target.world_id);
                match post(&target, url, r.clone(), last_taken).await {
                    Shipped::Taken => reclaim_shipped = Some(r),
                    Shipped::Refused(reason) => return fenced(fence, reason),
                    Shipped::Failed => {
                        metrics.recording_ship_failures_total.fetch_add(1, Relaxed);
                        if finishing {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
            }
            let bytes = match recording {
                // Everything is shipped: the last pass is over.
                Ok(b) if b.is_empty() && finishing => return,
                Ok(b) if b.is_empty() => continue,
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "reading the recording to ship failed");
                    continue;
                }
            };
            let n = bytes.len() as u64;
            let url = segment_url(&target.fleet_url, &target.world_id, shipped);
            match post(&target, url, bytes, last_taken).await {
                Shipped::Taken => {
                    shipped += n;
                    last_taken = std::time::Instant::now();
                    metrics.recording_shipped_bytes.store(shipped, Relaxed);
                }
                Shipped::Refused(reason) => {
                    return fenced(
                        fence,
                        format!("the fleet refused the recording's bytes from offset {shipped} ({reason})"),
                    )
                }
                Shipped::Failed => {
                    metrics.recording_ship_failures_total.fetch_add(1, Relaxed);
                    if finishing {
                        // Tried again until the shutdown's budget ends the wait: a server
                        // that shares no disk with its node has no one to ship it later.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    })
}

/// The fleet refused a shipment: this server may not write the world any more.
fn fenced(fence: &Fence, reason: String) {
    tracing::error!(%reason, "fenced: another server owns this world now; stopping");
    fence.set(reason);
}

/// How one shipment went.
enum Shipped {
    Taken,
    /// 401, 403, 409 or 422: this server may not write the world any more.
    Refused(String),
    /// Anything else (the fleet restarting, a timeout): tried again next time, the bytes
    /// stay in the file.
    Failed,
}

/// POSTs `bytes` to `url` with the server's token; the wait ends with the deadline.
async fn post(target: &ShipTarget, url: String, bytes: Vec<u8>, last_taken: std::time::Instant) -> Shipped {
    let sent = http::Request::new(http::Method::POST, url)
        .bearer(target.token.clone())
        .octet_body(bytes)
        // A node that does not answer before the deadline cannot vouch for us: the
        // wait ends when the deadline does, and the loop fences at once.
        .timeout(
            target
                .deadline
                .map_or(SHIP_TIMEOUT, |d| d.saturating_sub(last_taken.elapsed()))
                .clamp(Duration::from_millis(1), SHIP_TIMEOUT),
        )
        .send()
        .await;
    match sent {
        Ok(r) if r.is_success() => Shipped::Taken,
        Ok(r) if matches!(r.status, 401 | 403 | 409 | 422) => {
            Shipped::Refused(format!("{}: {}", r.status, r.text().trim()))
        }
        Ok(r) => {
            tracing::warn!(status = r.status, body = %r.text().trim(), "shipping to the fleet failed");
            Shipped::Failed
        }
        Err(e) => {
            tracing::warn!(error = %e, "shipping to the fleet failed");
            Shipped::Failed
        }
    }
}
