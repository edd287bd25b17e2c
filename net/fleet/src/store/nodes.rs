//! Fleet nodes and their leases: a node registers under its id with a random incarnation,
//! renews its lease by heartbeat, and gives it up when it stops. A world whose owner's
//! lease has expired may be taken over by any node (`Store::claim_world`).

use sqlx::Row;

use super::{q, Store, StoreError};

/// A node as the store has it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeRow {
    pub id: String,
    pub advertise_host: String,
    pub lease_expires_unix_ms: i64,
    pub started_unix_ms: i64,
    /// Whether its lease is live now, on the store's clock.
    pub live: bool,
    /// Draining: it takes no world (moves and fresh starts go elsewhere).
    pub draining: bool,
    /// Worlds it owns.
    pub worlds: i64,
    /// Its public API (`http://HOST:PORT`), once it listens.
    pub api_url: Option<String>,
}

/// What registering a node found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    Registered,
    /// Another incarnation of this id holds a live lease for this many more ms.
    HeldElsewhere {
        lease_left_ms: i64,
    },
}

impl Store {
    /// Registers `id` as this process (`incarnation`) with a lease of `lease_ms`, unless
    /// another incarnation of it holds a live lease.
    pub async fn register_node(
        &self,
        id: &str,
        advertise_host: &str,
        incarnation: &str,
        lease_ms: i64,
    ) -> Result<Registration, StoreError> {
        let now = self.now_sql();
        let sql = format!(
            "INSERT INTO nodes (id, advertise_host, incarnation, lease_expires_unix_ms, started_unix_ms) \
             VALUES ($1, $2, $3, {now} + $4, {now}) \
             ON CONFLICT (id) DO UPDATE SET advertise_host = excluded.advertise_host, \
             incarnation = excluded.incarnation, lease_expires_unix_ms = excluded.lease_expires_unix_ms, \
             started_unix_ms = excluded.started_unix_ms, draining = 0 \
             WHERE nodes.lease_expires_unix_ms <= {now} OR nodes.incarnation = excluded.incarnation"
        );
        let done = sqlx::query(&sql)
            .bind(id)
            .bind(advertise_host)
            .bind(incarnation)
            .bind(lease_ms)
            .execute(&self.pool)
            .await
            .map_err(q("register node"))?;
        if done.rows_affected() == 1 {
            return Ok(Registration::Registered);
        }
        let left: i64 = sqlx::query(&format!(
            "SELECT lease_expires_unix_ms - {now} FROM nodes WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(q("read node lease"))?;
        Ok(Registration::HeldElsewhere {
            lease_left_ms: left.max(0),
        })
    }

    /// Renews this incarnation's lease; false when the id now belongs to another
    /// incarnation (this one's lease expired and a new process registered the id).
    pub async fn heartbeat(&self, id: &str, incarnation: &str, lease_ms: i64) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE nodes SET lease_expires_unix_ms = {} + $1 WHERE id = $2 AND incarnation = $3",
            self.now_sql()
        );
        let done = sqlx::query(&sql)
            .bind(lease_ms)
            .bind(id)
            .bind(incarnation)
            .execute(&self.pool)
            .await
            .map_err(q("heartbeat"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends this incarnation's lease now (a clean stop: its worlds may be taken over at once).
    pub async fn leave(&self, id: &str, incarnation: &str) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE nodes SET lease_expires_unix_ms = {} WHERE id = $1 AND incarnation = $2",
            self.now_sql()
        );
        sqlx::query(&sql)
            .bind(id)
            .bind(incarnation)
            .execute(&self.pool)
            .await
            .map_err(q("leave"))?;
        Ok(())
    }

    /// Every node, with whether its lease is live.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        let sql = format!(
            "SELECT id, advertise_host, lease_expires_unix_ms, started_unix_ms, \
             CAST(CASE WHEN lease_expires_unix_ms > {} THEN 1 ELSE 0 END AS BIGINT), draining, \
             (SELECT COUNT(*) FROM worlds WHERE worlds.owner_node = nodes.id), api_url FROM nodes ORDER BY id",
            self.now_sql()
        );
        let rows = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list nodes"))?;
        rows.iter()
            .map(|r| {
                Ok(NodeRow {
                    id: r.try_get(0)?,
                    advertise_host: r.try_get(1)?,
                    lease_expires_unix_ms: r.try_get(2)?,
                    started_unix_ms: r.try_get(3)?,
                    live: r.try_get::<i64, _>(4)? == 1,
                    draining: r.try_get::<i64, _>(5)? != 0,
                    worlds: r.try_get(6)?,
                    api_url: r.try_get(7)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("decode node"))
    }

    /// Records where node `id`'s public API listens.
    pub async fn set_api_url(&self, id: &str, api_url: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE nodes SET api_url = $1 WHERE id = $2")
            .bind(api_url)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q("set api url"))?;
        Ok(())
    }

    /// Marks `id` draining (or not): it takes no world while it is.
    pub async fn set_draining(&self, id: &str, draining: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE nodes SET draining = $1 WHERE id = $2")
            .bind(i64::from(draining))
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q("set draining"))?;
        Ok(())
    }

    /// Whether `id`'s lease is live now.
    pub async fn node_live(&self, id: &str) -> Result<bool, StoreError> {
        let sql = format!(
            "SELECT COUNT(*) FROM nodes WHERE id = $1 AND lease_expires_unix_ms > {}",
            self.now_sql()
        );
        let n: i64 = sqlx::query(&sql)
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(q("node lease"))?;
        Ok(n > 0)
    }
}
