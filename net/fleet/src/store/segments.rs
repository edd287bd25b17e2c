//! A world's recording segments: one row per server run, and (with a shared store) the
//! segment's bytes as its server shipped them, in chunks appended under the world's
//! fencing epoch.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{held_by, now_unix_ms, q, BindHolder, Holder, Store, StoreError};

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
    /// How the store spells it (the `ended` column).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ended::Running => "running",
            Ended::Stopped => "stopped",
            Ended::Crashed => "crashed",
        }
    }

    /// None for a spelling no version of the fleet writes.
    fn parse(s: &str) -> Option<Ended> {
        [Ended::Running, Ended::Stopped, Ended::Crashed]
            .into_iter()
            .find(|e| e.as_str() == s)
    }

    /// As a SQL literal, for statements that compare the column to a fixed state.
    fn sql(self) -> String {
        format!("'{}'", self.as_str())
    }
}

/// Where a segment came from: `origin` is NULL for a server's run.
const ORIGIN_UPGRADE: &str = "upgrade";

/// Why a world's segments make no one history.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("segment {seq} resumes in a loop")]
    Loop { seq: i64 },
    #[error("segment {seq} resumed from {from}, which has no durable tick")]
    Unresumable { seq: i64, from: i64 },
}

/// Inside `tx`: whether `holder` may no longer write segment `seq` (the world's epoch,
/// owner or creation moved on, or the segment is closed): `Some(the epoch now)` then. The
/// world's row stays locked until `tx` ends, so writes are ordered against takeovers.
async fn fenced(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    world_id: &str,
    seq: i64,
    holder: &Holder,
) -> Result<Option<i64>, StoreError> {
    let sql = format!("UPDATE worlds SET epoch = epoch WHERE id = $1 AND {}", held_by(2));
    let held = sqlx::query(&sql)
        .bind(world_id)
        .bind_holder(holder)
        .execute(&mut **tx)
        .await
        .map_err(q("fence check"))?;
    let closed = sqlx::query("SELECT ended FROM segments WHERE world_id = $1 AND seq = $2")
        .bind(world_id)
        .bind(seq)
        .fetch_optional(&mut **tx)
        .await
        .and_then(|r| r.map(|r| r.try_get::<String, _>(0)).transpose())
        .map_err(q("segment state"))?
        .is_some_and(|e| Ended::parse(&e) != Some(Ended::Running));
    if held.rows_affected() == 1 && !closed {
        return Ok(None);
    }
    let now: Option<i64> = sqlx::query("SELECT epoch FROM worlds WHERE id = $1")
        .bind(world_id)
        .fetch_optional(&mut **tx)
        .await
        .and_then(|r| r.map(|r| r.try_get(0)).transpose())
        .map_err(q("read epoch"))?;
    Ok(Some(now.unwrap_or(-1)))
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
    /// The world's lineage it belongs to (an upgrade or a fork starts a new one).
    pub lineage: i64,
    /// `upgrade` for a segment an upgrade wrote; None for a server's run.
    pub origin: Option<String>,
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

impl Store {
    pub async fn segments(&self, world_id: &str) -> Result<Vec<SegmentRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, recording_path, first_tick, last_tick, final_root, ended, resumed_from_seq, \
             started_unix_ms, ended_unix_ms, epoch, lineage, origin FROM segments WHERE world_id = $1 ORDER BY seq",
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

    /// Opens segment `seq` of the world for its holder; false (and nothing written) when
    /// the world is no longer `holder`'s.
    pub async fn open_segment(
        &self,
        world_id: &str,
        seq: i64,
        recording_path: &str,
        first_tick: u32,
        resumed_from_seq: Option<i64>,
        holder: &Holder,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO segments (world_id, seq, recording_path, first_tick, ended, resumed_from_seq, \
             started_unix_ms, epoch, lineage) SELECT CAST($1 AS TEXT), CAST($2 AS BIGINT), CAST($3 AS TEXT), \
             CAST($4 AS BIGINT), CAST($5 AS TEXT), CAST($6 AS BIGINT), CAST($7 AS BIGINT), epoch, \
             lineage FROM worlds WHERE id = $1 AND {}",
            held_by(8)
        );
        let done = sqlx::query(&sql)
            .bind(world_id)
            .bind(seq)
            .bind(recording_path)
            .bind(i64::from(first_tick))
            .bind(Ended::Running.as_str())
            .bind(resumed_from_seq)
            .bind(now_unix_ms())
            .bind_holder(holder)
            .execute(&self.pool)
            .await
            .map_err(q("open segment"))?;
        Ok(done.rows_affected() == 1)
    }

    /// A lineage number no row of the world has used: one past the world's current one and
    /// every segment's (a failed upgrade may have left a segment in a lineage never made
    /// current, which must not be taken up later).
    pub async fn unused_lineage(&self, world_id: &str) -> Result<i64, StoreError> {
        sqlx::query(
            "SELECT MAX(l) + 1 FROM (SELECT lineage AS l FROM worlds WHERE id = $1 \
             UNION ALL SELECT lineage AS l FROM segments WHERE world_id = $1) AS lineages",
        )
        .bind(world_id)
        .fetch_one(&self.pool)
        .await
        .and_then(|r| r.try_get::<Option<i64>, _>(0))
        .map(|l| l.unwrap_or(1))
        .map_err(q("unused lineage"))
    }

    /// Opens segment `seq` of an upgrade for its holder, in `lineage` (not the world's
    /// current one yet: `commit_upgrade` makes it so); false when the world is no longer
    /// `holder`'s.
    pub async fn open_upgrade_segment(
        &self,
        world_id: &str,
        seq: i64,
        recording_path: &str,
        first_tick: u32,
        lineage: i64,
        holder: &Holder,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO segments (world_id, seq, recording_path, first_tick, ended, started_unix_ms, epoch, \
             lineage, origin) SELECT CAST($1 AS TEXT), CAST($2 AS BIGINT), CAST($3 AS TEXT), CAST($4 AS BIGINT), \
             CAST($5 AS TEXT), CAST($6 AS BIGINT), epoch, CAST($7 AS BIGINT), CAST($8 AS TEXT) FROM worlds \
             WHERE id = $1 AND {}",
            held_by(9)
        );
        let done = sqlx::query(&sql)
            .bind(world_id)
            .bind(seq)
            .bind(recording_path)
            .bind(i64::from(first_tick))
            .bind(Ended::Running.as_str())
            .bind(now_unix_ms())
            .bind(lineage)
            .bind(ORIGIN_UPGRADE)
            .bind_holder(holder)
            .execute(&self.pool)
            .await
            .map_err(q("open upgrade segment"))?;
        Ok(done.rows_affected() == 1)
    }

    /// In one transaction: closes the upgrade's segment `seq` with `end` and makes its
    /// lineage the world's, so the world resumes from it; false (nothing changed) when the
    /// world is no longer `holder`'s or the segment is not open.
    pub async fn commit_upgrade(
        &self,
        world_id: &str,
        seq: i64,
        end: &SegmentEnd,
        holder: &Holder,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        let running = Ended::Running.sql();
        let sql = format!(
            "UPDATE worlds SET lineage = (SELECT lineage FROM segments WHERE world_id = $1 AND seq = $2 \
             AND ended = {running}) WHERE id = $1 AND {} \
             AND EXISTS (SELECT 1 FROM segments WHERE world_id = $1 AND seq = $2 AND ended = {running})",
            held_by(3)
        );
        let moved = sqlx::query(&sql)
            .bind(world_id)
            .bind(seq)
            .bind_holder(holder)
            .execute(&mut *tx)
            .await
            .map_err(q("switch lineage"))?;
        if moved.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE segments SET last_tick = $1, final_root = $2, ended = $3, ended_unix_ms = $4 \
             WHERE world_id = $5 AND seq = $6",
        )
        .bind(end.last_tick)
        .bind(end.final_root.clone())
        .bind(end.ended.as_str())
        .bind(now_unix_ms())
        .bind(world_id)
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(q("close upgrade segment"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(true)
    }

    /// Forgets an upgrade's segment that was never committed (its row and shipped bytes).
    pub async fn discard_segment(&self, world_id: &str, seq: i64) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        let segment = format!(
            "DELETE FROM segments WHERE world_id = $1 AND seq = $2 AND ended = {} AND origin = '{ORIGIN_UPGRADE}'",
            Ended::Running.sql()
        );
        for sql in [
            "DELETE FROM segment_chunks WHERE world_id = $1 AND seq = $2",
            &segment,
        ] {
            sqlx::query(sql)
                .bind(world_id)
                .bind(seq)
                .execute(&mut *tx)
                .await
                .map_err(q("discard segment"))?;
        }
        tx.commit().await.map_err(q("commit"))?;
        Ok(())
    }

    /// Makes `lineage` the world's (a fork: one with no segments yet); false when the
    /// world is no longer `holder`'s.
    pub async fn set_lineage(
        &self,
        world_id: &str,
        holder: &Holder,
        lineage: i64,
    ) -> Result<bool, StoreError> {
        // An integer, formatted into the statement: nothing from outside.
        self.update_held(&format!("lineage = {lineage}"), world_id, holder, "set lineage")
            .await
    }

    /// Closes a running segment with what its recording says; false (and nothing
    /// changed) when it was closed already, by this node or by one that took it over.
    pub async fn close_segment(
        &self,
        world_id: &str,
        seq: i64,
        end: &SegmentEnd,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE segments SET last_tick = $1, final_root = $2, ended = $3, ended_unix_ms = $4 \
             WHERE world_id = $5 AND seq = $6 AND ended = {}",
            Ended::Running.sql()
        );
        let done = sqlx::query(&sql)
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

    /// Appends bytes of segment `seq` at `offset` for the server of `holder`. The world's
    /// row is locked (an UPDATE that changes nothing) for the transaction, so a takeover's
    /// epoch increment and an append are ordered: once a takeover (or a release, or a
    /// delete) has committed, no append of the old holder lands, and a takeover that
    /// waited for an append reads its bytes. A segment already closed takes nothing more.
    pub async fn append_chunk(
        &self,
        world_id: &str,
        seq: i64,
        holder: &Holder,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Append, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        if let Some(epoch_now) = fenced(&mut tx, world_id, seq, holder).await? {
            return Ok(Append::Fenced { epoch_now });
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
        .bind(holder.epoch)
        .bind(bytes.to_vec())
        .execute(&mut *tx)
        .await
        .map_err(q("append chunk"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(Append::Stored)
    }

    /// Stores the segment's reclaim file, under the same fence as its chunks: `Ok(None)`
    /// stored, `Ok(Some(epoch_now))` refused.
    pub async fn set_reclaim(
        &self,
        world_id: &str,
        seq: i64,
        holder: &Holder,
        bytes: &[u8],
    ) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        if let Some(epoch_now) = fenced(&mut tx, world_id, seq, holder).await? {
            return Ok(Some(epoch_now));
        }
        sqlx::query("UPDATE segments SET reclaim = $1 WHERE world_id = $2 AND seq = $3")
            .bind(bytes.to_vec())
            .bind(world_id)
            .bind(seq)
            .execute(&mut *tx)
            .await
            .map_err(q("store reclaim"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(None)
    }

    /// The segment's stored reclaim file, if its server shipped one.
    pub async fn segment_reclaim(&self, world_id: &str, seq: i64) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query("SELECT reclaim FROM segments WHERE world_id = $1 AND seq = $2")
            .bind(world_id)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await
            .and_then(|r| r.map(|r| r.try_get::<Option<Vec<u8>>, _>(0)).transpose())
            .map(Option::flatten)
            .map_err(q("read reclaim"))
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

/// Where the segment's stored bytes end. Every append starts at or before the end
/// (`Append::Gap` refuses the rest), so the chunks run from 0 without a gap and the one at
/// the highest offset ends them: one row read through the primary key, however long the
/// segment.
async fn stored_bytes(conn: &mut sqlx::AnyConnection, world_id: &str, seq: i64) -> Result<u64, StoreError> {
    let end: Option<i64> = sqlx::query(
        "SELECT offset_bytes + CAST(length(bytes) AS BIGINT) FROM segment_chunks \
         WHERE world_id = $1 AND seq = $2 ORDER BY offset_bytes DESC LIMIT 1",
    )
    .bind(world_id)
    .bind(seq)
    .fetch_optional(&mut *conn)
    .await
    .and_then(|r| r.map(|r| r.try_get(0)).transpose())
    .map_err(q("chunk end"))?;
    Ok(end.unwrap_or(0).max(0) as u64)
}

fn segment_row(r: &AnyRow) -> Result<SegmentRow, sqlx::Error> {
    Ok(SegmentRow {
        seq: r.try_get(0)?,
        recording_path: r.try_get(1)?,
        first_tick: r.try_get(2)?,
        last_tick: r.try_get(3)?,
        final_root: r.try_get(4)?,
        ended: {
            let ended: String = r.try_get(5)?;
            Ended::parse(&ended)
                .ok_or_else(|| sqlx::Error::Decode(format!("segment state `{ended}`").into()))?
        },
        resumed_from_seq: r.try_get(6)?,
        started_unix_ms: r.try_get(7)?,
        ended_unix_ms: r.try_get(8)?,
        epoch: r.try_get(9)?,
        lineage: r.try_get(10)?,
        origin: r.try_get(11)?,
    })
}

/// The segments of `lineage` a resume of it stands on, oldest first: from the one a start
/// would resume from (the newest with a durable root, as `start_server` picks it) back
/// through each one's `resumed_from_seq`. Segments off that chain (a server that died
/// before anything of it was kept) are left out.
pub(crate) fn resume_chain(segments: &[SegmentRow], lineage: i64) -> Result<Vec<SegmentRow>, ChainError> {
    let durable = |s: &&SegmentRow| {
        s.lineage == lineage
            && s.last_tick.is_some()
            && s.final_root.as_deref().is_some_and(|r| !r.is_empty())
    };
    let mut chain = Vec::new();
    let mut next = segments.iter().rev().find(durable);
    while let Some(s) = next {
        if chain.len() > segments.len() {
            return Err(ChainError::Loop { seq: s.seq });
        }
        chain.push(s.clone());
        next = match s.resumed_from_seq {
            None => None,
            Some(from) => Some(
                segments
                    .iter()
                    .filter(durable)
                    .find(|p| p.seq == from)
                    .ok_or(ChainError::Unresumable { seq: s.seq, from })?,
            ),
        };
    }
    chain.reverse();
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::{extend_contiguous, Append, Ended, Holder, SegmentEnd, Store};

    /// A SQLite store in a fresh folder (the fencing SQL is the same text on PostgreSQL,
    /// which the multi-node scenarios run).
    async fn store(tag: &str) -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "migratory-fleet-{tag}-{}-{}",
            std::process::id(),
            super::now_unix_ms()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        (Store::open(None, &dir).await.expect("store"), dir)
    }

    async fn claim(store: &Store, id: &str, node: &str) -> Holder {
        let row = store.world(id).await.expect("read").expect("a world");
        let epoch = store
            .claim_world(id, node, row.epoch)
            .await
            .expect("claim")
            .expect("claimed");
        Holder {
            node: node.into(),
            epoch,
            created_unix_ms: row.created_unix_ms,
        }
    }

    /// An upgrade's segment becomes the world's only when committed, in one step with the
    /// lineage; one never committed neither counts nor has its lineage number reused.
    #[test]
    fn an_upgrade_commits_its_segment_and_lineage_together() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (s, dir) = store("upgrade").await;
            assert!(s.create_world("w", "{}", "h").await.expect("create"));
            let a = claim(&s, "w", "a").await;
            assert_eq!(s.unused_lineage("w").await.expect("lineage"), 1);
            // Opened in lineage 1 and abandoned: the world stays in 0, and 1 is used up.
            assert!(s
                .open_upgrade_segment("w", 1, "u1", 0, 1, &a)
                .await
                .expect("open"));
            assert_eq!(s.world("w").await.expect("read").expect("w").lineage, 0);
            assert_eq!(s.unused_lineage("w").await.expect("lineage"), 2);
            // Committed by a holder that lost the world: nothing changes.
            let b = claim_after_release(&s, &a).await;
            let end = SegmentEnd {
                last_tick: 9,
                final_root: "r".into(),
                ended: Ended::Stopped,
            };
            assert!(!s.commit_upgrade("w", 1, &end, &a).await.expect("commit"));
            assert_eq!(s.world("w").await.expect("read").expect("w").lineage, 0);
            // The new holder's upgrade: lineage 2, committed with its segment.
            assert!(s
                .open_upgrade_segment("w", 2, "u2", 0, 2, &b)
                .await
                .expect("open"));
            assert!(s.commit_upgrade("w", 2, &end, &b).await.expect("commit"));
            assert_eq!(s.world("w").await.expect("read").expect("w").lineage, 2);
            let segs = s.segments("w").await.expect("segments");
            let two = segs.iter().find(|g| g.seq == 2).expect("segment 2");
            assert_eq!(
                (two.ended, two.last_tick, two.origin.as_deref()),
                (Ended::Stopped, Some(9), Some("upgrade"))
            );
            // A committed segment is not discarded; the abandoned one is.
            s.discard_segment("w", 1).await.expect("discard");
            s.discard_segment("w", 2).await.expect("discard");
            let seqs: Vec<i64> = s
                .segments("w")
                .await
                .expect("segments")
                .iter()
                .map(|g| g.seq)
                .collect();
            assert_eq!(seqs, [2]);
            let _ = std::fs::remove_dir_all(dir);
        });
    }

    /// `holder` gives the world up and node "b" claims it.
    async fn claim_after_release(s: &Store, holder: &Holder) -> Holder {
        assert!(s.release_world("w", holder).await.expect("release"));
        claim(s, "w", "b").await
    }

    #[test]
    fn only_the_current_holder_appends_and_opens_segments() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (s, dir) = store("fence").await;
            assert!(s.create_world("w", "{}", "h").await.expect("create"));
            let a = claim(&s, "w", "a").await;
            assert_eq!(
                s.append_chunk("w", 1, &a, 0, b"abc").await.expect("append"),
                Append::Stored
            );
            assert!(matches!(
                s.append_chunk("w", 1, &a, 9, b"x").await.expect("append"),
                Append::Gap { stored_bytes: 3 }
            ));
            assert!(s.open_segment("w", 1, "p", 0, None, &a).await.expect("open"));
            // The same epoch of another node is not the holder.
            let impostor = Holder {
                node: "b".into(),
                ..a.clone()
            };
            assert!(matches!(
                s.append_chunk("w", 1, &impostor, 3, b"d").await.expect("append"),
                Append::Fenced { .. }
            ));
            // A closed segment takes nothing more, even from its holder.
            let end = SegmentEnd {
                last_tick: 5,
                final_root: "r".into(),
                ended: Ended::Crashed,
            };
            assert!(s.close_segment("w", 1, &end).await.expect("close"));
            assert!(
                !s.close_segment("w", 1, &end).await.expect("close again"),
                "closed once"
            );
            assert!(matches!(
                s.append_chunk("w", 1, &a, 3, b"d").await.expect("append"),
                Append::Fenced { .. }
            ));
            // Released: the epoch moves on and the old holder is fenced.
            assert!(s.release_world("w", &a).await.expect("release"));
            assert!(matches!(
                s.append_chunk("w", 2, &a, 0, b"z").await.expect("append"),
                Append::Fenced { .. }
            ));
            assert!(!s.open_segment("w", 2, "p", 0, None, &a).await.expect("open"));
            // Deleted and created again: the epochs start over, the old holder still fails.
            let b = claim(&s, "w", "b").await;
            assert!(s.delete_world("w").await.expect("delete"));
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(s.create_world("w", "{}", "h").await.expect("create"));
            let c = claim(&s, "w", "b").await;
            // A server of the first world with the very node and epoch the new one has.
            let stale = Holder {
                created_unix_ms: b.created_unix_ms,
                ..c.clone()
            };
            assert_ne!(stale, c);
            assert!(matches!(
                s.append_chunk("w", 1, &stale, 0, b"old").await.expect("append"),
                Append::Fenced { .. }
            ));
            assert_eq!(
                s.append_chunk("w", 1, &c, 0, b"new").await.expect("append"),
                Append::Stored
            );
            assert_eq!(s.segment_bytes("w", 1).await.expect("bytes"), b"new");
            let _ = std::fs::remove_dir_all(dir);
        });
    }

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

#[cfg(test)]
mod chain_tests {
    use super::{resume_chain, ChainError, Ended, SegmentRow};

    fn seg(seq: i64, from: Option<i64>, root: &str, lineage: i64) -> SegmentRow {
        SegmentRow {
            seq,
            recording_path: format!("s{seq}.mrec"),
            first_tick: 0,
            last_tick: Some(10),
            final_root: Some(root.into()),
            ended: Ended::Stopped,
            resumed_from_seq: from,
            started_unix_ms: 0,
            ended_unix_ms: None,
            epoch: 1,
            lineage,
            origin: None,
        }
    }

    #[test]
    fn the_chain_follows_resumes_and_skips_what_no_resume_stood_on() {
        // 3 died before anything was kept (no root): 4 resumed from 2, as a start would.
        let segs = [
            seg(1, None, "a", 0),
            seg(2, Some(1), "b", 0),
            seg(3, Some(2), "", 0),
            seg(4, Some(2), "d", 0),
            seg(5, None, "e", 1),
        ];
        let seqs = |l| {
            resume_chain(&segs, l)
                .unwrap()
                .iter()
                .map(|s| s.seq)
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(0), [1, 2, 4]);
        assert_eq!(seqs(1), [5]);
        assert!(seqs(2).is_empty());
        let broken = [seg(1, None, "", 0), seg(2, Some(1), "b", 0)];
        assert_eq!(
            resume_chain(&broken, 0).unwrap_err(),
            ChainError::Unresumable { seq: 2, from: 1 }
        );
    }
}
