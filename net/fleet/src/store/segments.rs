//! A world's recording segments: one row per server run, and (with a shared store) the
//! segment's bytes as its server shipped them, in chunks appended under the world's
//! fencing epoch.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{now_unix_ms, q, Store, StoreError};

/// How a segment ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// Its server is (or was last known to be) running.
    Running,
    /// Stopped cleanly: an end record and a final checkpoint.
    Stopped,
    /// Killed or failed: the recording has a torn tail or no end record.
    Crashed,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Running => "running",
            Ended::Stopped => "stopped",
            Ended::Crashed => "crashed",
        }
    }

    fn parse(s: &str) -> Ended {
        match s {
            "stopped" => Ended::Stopped,
            "crashed" => Ended::Crashed,
            _ => Ended::Running,
        }
    }
}

/// One recording segment of a world.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SegmentRow {
    pub seq: i64,
    /// Relative to the fleet's data folder.
    pub recording_path: String,
    pub first_tick: i64,
    pub last_tick: Option<i64>,
    pub final_root: Option<String>,
    pub ended: Ended,
    pub resumed_from_seq: Option<i64>,
    pub started_unix_ms: i64,
    pub ended_unix_ms: Option<i64>,
    /// The fencing epoch its server ran under.
    pub epoch: i64,
}

/// How a segment's recording ended, as read from the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentEnd {
    pub last_tick: i64,
    pub final_root: String,
    pub ended: Ended,
}

/// What an append of shipped bytes did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Append {
    /// Stored (or already there: a retried append is harmless).
    Stored,
    /// The world has moved on to `epoch_now`: this server is fenced.
    Fenced { epoch_now: i64 },
    /// The bytes start past the end of what is stored (`stored_bytes`): one was lost.
    Gap { stored_bytes: u64 },
}

/// Largest chunk one append may carry.
pub const CHUNK_BYTES_MAX: usize = 4 << 20;

impl Store {
    pub async fn segments(&self, world_id: &str) -> Result<Vec<SegmentRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, recording_path, first_tick, last_tick, final_root, ended, resumed_from_seq, \
             started_unix_ms, ended_unix_ms, epoch FROM segments WHERE world_id = $1 ORDER BY seq",
        )
        .bind(world_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list segments"))?;
        rows.iter()
            .map(segment_row)
            .collect::<Result<_, _>>()
            .map_err(q("decode segment"))
    }

    /// The sequence number the world's next segment gets. Only the world's owner at the
    /// current epoch opens segments, so no two servers are given the same one.
    pub async fn next_segment_seq(&self, world_id: &str) -> Result<i64, StoreError> {
        sqlx::query("SELECT COALESCE(MAX(seq), 0) + 1 FROM segments WHERE world_id = $1")
            .bind(world_id)
            .fetch_one(&self.pool)
            .await
            .and_then(|r| r.try_get::<i64, _>(0))
            .map_err(q("next segment"))
    }

    /// Opens segment `seq` of the world, run under `epoch`.
    pub async fn open_segment(
        &self,
        world_id: &str,
        seq: i64,
        recording_path: &str,
        first_tick: u32,
        resumed_from_seq: Option<i64>,
        epoch: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO segments (world_id, seq, recording_path, first_tick, ended, resumed_from_seq, \
             started_unix_ms, epoch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(world_id)
        .bind(seq)
        .bind(recording_path)
        .bind(i64::from(first_tick))
        .bind(Ended::Running.as_str())
        .bind(resumed_from_seq)
        .bind(now_unix_ms())
        .bind(epoch)
        .execute(&self.pool)
        .await
        .map_err(q("open segment"))?;
        Ok(())
    }

    /// Closes a running segment with what its recording says; false (and nothing
    /// changed) when it was closed already, by this node or by one that took it over.
    pub async fn close_segment(
        &self,
        world_id: &str,
        seq: i64,
        end: &SegmentEnd,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE segments SET last_tick = $1, final_root = $2, ended = $3, ended_unix_ms = $4 \
             WHERE world_id = $5 AND seq = $6 AND ended = 'running'",
        )
        .bind(end.last_tick)
        .bind(end.final_root.clone())
        .bind(end.ended.as_str())
        .bind(now_unix_ms())
        .bind(world_id)
        .bind(seq)
        .execute(&self.pool)
        .await
        .map_err(q("close segment"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks a closed segment as crashed after all (its process failed after a clean end).
    pub async fn mark_crashed(&self, world_id: &str, seq: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE segments SET ended = 'crashed' WHERE world_id = $1 AND seq = $2")
            .bind(world_id)
            .bind(seq)
            .execute(&self.pool)
            .await
            .map_err(q("mark crashed"))?;
        Ok(())
    }

    /// Appends bytes of segment `seq` at `offset` for the server running under `epoch`.
    /// The world's row is locked (an UPDATE that changes nothing) for the transaction, so
    /// a takeover's epoch increment and an append are ordered: once a takeover has
    /// committed, no append of the old epoch lands, and a takeover that waited for an
    /// append reads its bytes.
    pub async fn append_chunk(
        &self,
        world_id: &str,
        seq: i64,
        epoch: i64,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Append, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        let held = sqlx::query("UPDATE worlds SET epoch = epoch WHERE id = $1 AND epoch = $2")
            .bind(world_id)
            .bind(epoch)
            .execute(&mut *tx)
            .await
            .map_err(q("fence check"))?;
        if held.rows_affected() != 1 {
            let now: Option<i64> = sqlx::query("SELECT epoch FROM worlds WHERE id = $1")
                .bind(world_id)
                .fetch_optional(&mut *tx)
                .await
                .and_then(|r| r.map(|r| r.try_get(0)).transpose())
                .map_err(q("read epoch"))?;
            return Ok(Append::Fenced {
                epoch_now: now.unwrap_or(-1),
            });
        }
        let stored = stored_bytes(&mut tx, world_id, seq).await?;
        if offset > stored {
            return Ok(Append::Gap { stored_bytes: stored });
        }
        sqlx::query(
            "INSERT INTO segment_chunks (world_id, seq, offset_bytes, epoch, bytes) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (world_id, seq, offset_bytes) DO UPDATE SET bytes = excluded.bytes \
             WHERE length(excluded.bytes) > length(segment_chunks.bytes)",
        )
        .bind(world_id)
        .bind(seq)
        .bind(offset as i64)
        .bind(epoch)
        .bind(bytes.to_vec())
        .execute(&mut *tx)
        .await
        .map_err(q("append chunk"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(Append::Stored)
    }

    /// How many bytes of the segment are stored, from offset 0 without a gap.
    pub async fn shipped_bytes(&self, world_id: &str, seq: i64) -> Result<u64, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(q("connect"))?;
        stored_bytes(&mut conn, world_id, seq).await
    }

    /// The segment's stored bytes, from offset 0 up to the first gap.
    pub async fn segment_bytes(&self, world_id: &str, seq: i64) -> Result<Vec<u8>, StoreError> {
        let rows = sqlx::query(
            "SELECT offset_bytes, bytes FROM segment_chunks WHERE world_id = $1 AND seq = $2 ORDER BY offset_bytes",
        )
        .bind(world_id)
        .bind(seq)
        .fetch_all(&self.pool)
        .await
        .map_err(q("read chunks"))?;
        let mut out = Vec::new();
        for r in rows {
            let offset = r.try_get::<i64, _>(0).map_err(q("decode chunk"))? as u64;
            let bytes: Vec<u8> = r.try_get(1).map_err(q("decode chunk"))?;
            if !extend_contiguous(&mut out, offset, &bytes) {
                break;
            }
        }
        Ok(out)
    }
}

/// Adds a chunk at `offset` to the bytes so far; false at a gap. Chunks may overlap (a
/// retried append that carried more): only the part past the end is new.
fn extend_contiguous(out: &mut Vec<u8>, offset: u64, bytes: &[u8]) -> bool {
    let have = out.len() as u64;
    if offset > have {
        return false;
    }
    let skip = (have - offset) as usize;
    if skip < bytes.len() {
        out.extend_from_slice(&bytes[skip..]);
    }
    true
}

async fn stored_bytes(conn: &mut sqlx::AnyConnection, world_id: &str, seq: i64) -> Result<u64, StoreError> {
    let rows = sqlx::query(
        "SELECT offset_bytes, CAST(length(bytes) AS BIGINT) FROM segment_chunks \
         WHERE world_id = $1 AND seq = $2 ORDER BY offset_bytes",
    )
    .bind(world_id)
    .bind(seq)
    .fetch_all(&mut *conn)
    .await
    .map_err(q("chunk lengths"))?;
    let mut end = 0u64;
    for r in rows {
        let offset = r.try_get::<i64, _>(0).map_err(q("decode chunk"))? as u64;
        let len = r.try_get::<i64, _>(1).map_err(q("decode chunk"))? as u64;
        if offset > end {
            break;
        }
        end = end.max(offset + len);
    }
    Ok(end)
}

fn segment_row(r: &AnyRow) -> Result<SegmentRow, sqlx::Error> {
    Ok(SegmentRow {
        seq: r.try_get(0)?,
        recording_path: r.try_get(1)?,
        first_tick: r.try_get(2)?,
        last_tick: r.try_get(3)?,
        final_root: r.try_get(4)?,
        ended: Ended::parse(&r.try_get::<String, _>(5)?),
        resumed_from_seq: r.try_get(6)?,
        started_unix_ms: r.try_get(7)?,
        ended_unix_ms: r.try_get(8)?,
        epoch: r.try_get(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::extend_contiguous;

    #[test]
    fn chunks_join_up_to_the_first_gap_and_overlaps_add_only_their_new_part() {
        let mut out = Vec::new();
        assert!(extend_contiguous(&mut out, 0, b"abc"));
        assert!(extend_contiguous(&mut out, 3, b"de"));
        // A retried append at 3 that carried more.
        assert!(extend_contiguous(&mut out, 3, b"defg"));
        assert_eq!(out, b"abcdefg");
        assert!(!extend_contiguous(&mut out, 9, b"z"));
        assert_eq!(out, b"abcdefg");
    }
}
