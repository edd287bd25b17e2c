//! Shipping the session recording to the fleet's store as it is written, for a fleet whose
//! store is shared between machines: every `interval`, the bytes the recorder has flushed
//! since the last shipment go to the fleet (`migratory_wire::fleet::segment_url`, this
//! server's token as Bearer). A machine that dies loses at most what was not shipped yet.
//!
//! The fleet stores an append only while the world's epoch is still this server's. A 409
//! (another node took the world over), a token the fleet no longer knows (401, 403), an
//! offset past what the store holds (422: something of ours was lost), or no shipment
//! taken for the deadline (the node cannot show it still holds the world) fences this
//! server: it stops stepping at once, closes its clients with `close_code::REJOIN` and
//! exits, so no segment ever holds two servers' ticks.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use migratory_wire::fleet::segment_url;
use migratory_wire::http;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// Longest wait for one shipment's answer.
const SHIP_TIMEOUT: Duration = Duration::from_secs(5);

/// Most bytes one shipment carries (the fleet refuses more).
pub const SHIPMENT_BYTES_MAX: usize = 4 << 20;

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

/// Set once, when the fleet refuses this server's appends: the reason, and a wake-up for
/// whoever stops the server.
#[derive(Debug, Default)]
pub struct Fence {
    reason: Mutex<Option<String>>,
    pub(crate) notify: Notify,
}

impl Fence {
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn is_set(&self) -> bool {
        self.reason().is_some()
    }

    fn set(&self, reason: String) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.notify.notify_one();
    }
}

/// Ships `path` until the task is aborted or the server is fenced.
pub(crate) fn spawn(
    target: ShipTarget,
    path: PathBuf,
    fence: Arc<Fence>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut shipped: u64 = 0;
        let mut last_taken = std::time::Instant::now();
        let mut every = tokio::time::interval(target.interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let read = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_from(&path, shipped)).await
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
            let bytes = match read {
                Ok(Ok(b)) if b.is_empty() => continue,
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "reading the recording to ship failed");
                    continue;
                }
                Err(_) => continue,
            };
            let n = bytes.len() as u64;
            let sent = http::Request::new(
                http::Method::POST,
                segment_url(&target.fleet_url, &target.world_id, shipped),
            )
            .bearer(target.token.clone())
            .octet_body(bytes)
            // A node that does not answer before the deadline cannot vouch for us: the
            // wait ends when the deadline does, and the check above fences at once.
            .timeout(
                target
                    .deadline
                    .map_or(SHIP_TIMEOUT, |d| d.saturating_sub(last_taken.elapsed()))
                    .clamp(Duration::from_millis(1), SHIP_TIMEOUT),
            )
            .send()
            .await;
            match sent {
                Ok(r) if r.is_success() => {
                    shipped += n;
                    last_taken = std::time::Instant::now();
                    metrics.recording_shipped_bytes.store(shipped, Relaxed);
                }
                Ok(r) if matches!(r.status, 401 | 403 | 409 | 422) => {
                    let reason = format!(
                        "the fleet refused the recording's bytes from offset {shipped} ({}: {})",
                        r.status,
                        r.text().trim()
                    );
                    tracing::error!(%reason, "fenced: another server owns this world now; stopping");
                    fence.set(reason);
                    return;
                }
                // Anything else (the fleet restarting, a timeout) is tried again: the
                // bytes stay in the file.
                Ok(r) => {
                    metrics.recording_ship_failures_total.fetch_add(1, Relaxed);
                    tracing::warn!(status = r.status, body = %r.text().trim(), "shipping the recording failed");
                }
                Err(e) => {
                    metrics.recording_ship_failures_total.fetch_add(1, Relaxed);
                    tracing::warn!(error = %e, "shipping the recording failed");
                }
            }
        }
    })
}

/// The file's bytes from `offset`, at most `SHIPMENT_BYTES_MAX`.
fn read_from(path: &std::path::Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut out = Vec::new();
    f.take(SHIPMENT_BYTES_MAX as u64).read_to_end(&mut out)?;
    Ok(out)
}
