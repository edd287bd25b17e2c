//! The fleet's state of record: worlds and their recording segments, in SQLite (the
//! zero-config default, a file in the data folder) or PostgreSQL, through one sqlx code
//! path and one set of embedded migrations (`net/fleet/migrations/`).
//!
//! The SQL is written once for both backends: `$N` parameters (SQLite reads them as
//! numbered parameters too), `BIGINT` and `TEXT` columns only, roots stored as hex.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Row};
use thiserror::Error;

/// The migrations, embedded at build time as (version, description, SQL), in order.
/// sqlx's `migrate!` macro would read the folder instead, but it takes sqlx's compile-time
/// query machinery with it: in a fresh test build's timings, sqlx-postgres built twice (48
/// and 29 s of CPU) and sqlx-macros-core (19 s), of 1,430 s in all. The checksum sqlx keeps per
/// applied migration is the SQL's SHA-384 either way, so stores migrated by either agree.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "worlds and segments",
    include_str!("../migrations/0001_worlds_and_segments.sql"),
)];

/// `MIGRATIONS` as a source sqlx's migrator reads.
#[derive(Debug)]
struct Embedded;

impl sqlx::migrate::MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async {
            Ok(MIGRATIONS
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        description.into(),
                        MigrationType::Simple,
                        sql.into(),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// Why the store failed.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("opening the store at {url}: {source}")]
    Open {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrating the store: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("store query ({what}): {source}")]
    Query {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

fn q(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { what, source }
}

/// Which database holds the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A world as the store has it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WorldRow {
    pub id: String,
    pub config_json: String,
    pub config_hash: String,
    pub created_unix_ms: i64,
    pub server_pid: Option<i64>,
    pub ws_url: Option<String>,
}

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
}

/// How a segment's recording ended, as read from the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentEnd {
    pub last_tick: i64,
    pub final_root: String,
    pub ended: Ended,
}

pub fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The store.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Opens (creating when needed) and migrates the store: `database_url`, or a SQLite
    /// file `fleet.sqlite3` in `data_dir` when there is none.
    pub async fn open(database_url: Option<&str>, data_dir: &Path) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let url = match database_url {
            Some(u) => u.to_string(),
            None => format!("sqlite://{}?mode=rwc", data_dir.join("fleet.sqlite3").display()),
        };
        let backend = if url.starts_with("postgres") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let url = socket_url(&url).into_owned();
        let pool = AnyPoolOptions::new()
            // SQLite serialises writers anyway; one connection avoids "database is locked".
            .max_connections(if backend == Backend::Sqlite { 1 } else { 8 })
            .connect(&url)
            .await
            .map_err(|source| StoreError::Open {
                url: redact(&url),
                source,
            })?;
        Migrator::new(Embedded).await?.run(&pool).await?;
        Ok(Store { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Inserts a world; false when one with that id exists.
    pub async fn create_world(
        &self,
        id: &str,
        config_json: &str,
        config_hash: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO worlds (id, config_json, config_hash, created_unix_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(config_json)
        .bind(config_hash)
        .bind(now_unix_ms())
        .execute(&self.pool)
        .await
        .map_err(q("create world"))?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn world(&self, id: &str) -> Result<Option<WorldRow>, StoreError> {
        let row = sqlx::query(
            "SELECT id, config_json, config_hash, created_unix_ms, server_pid, ws_url FROM worlds WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("read world"))?;
        row.map(|r| world_row(&r)).transpose().map_err(q("decode world"))
    }

    pub async fn worlds(&self) -> Result<Vec<WorldRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, config_json, config_hash, created_unix_ms, server_pid, ws_url FROM worlds ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(q("list worlds"))?;
        rows.iter()
            .map(world_row)
            .collect::<Result<_, _>>()
            .map_err(q("decode world"))
    }

    /// Deletes a world and its segments' rows; false when there was none.
    pub async fn delete_world(&self, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        sqlx::query("DELETE FROM segments WHERE world_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(q("delete segments"))?;
        let done = sqlx::query("DELETE FROM worlds WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(q("delete world"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Records the world's running server (or its absence, with `None`).
    pub async fn set_server(&self, id: &str, server: Option<(u32, &str)>) -> Result<(), StoreError> {
        sqlx::query("UPDATE worlds SET server_pid = $1, ws_url = $2 WHERE id = $3")
            .bind(server.map(|(pid, _)| i64::from(pid)))
            .bind(server.map(|(_, url)| url.to_string()))
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q("set server"))?;
        Ok(())
    }

    pub async fn segments(&self, world_id: &str) -> Result<Vec<SegmentRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, recording_path, first_tick, last_tick, final_root, ended, resumed_from_seq, \
             started_unix_ms, ended_unix_ms FROM segments WHERE world_id = $1 ORDER BY seq",
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

    /// Opens the world's next segment; returns its sequence number.
    pub async fn open_segment(
        &self,
        world_id: &str,
        recording_path: &str,
        first_tick: u32,
        resumed_from_seq: Option<i64>,
    ) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        let next: i64 = sqlx::query("SELECT COALESCE(MAX(seq), 0) + 1 FROM segments WHERE world_id = $1")
            .bind(world_id)
            .fetch_one(&mut *tx)
            .await
            .and_then(|r| r.try_get::<i64, _>(0))
            .map_err(q("next segment"))?;
        sqlx::query(
            "INSERT INTO segments (world_id, seq, recording_path, first_tick, ended, resumed_from_seq, started_unix_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(world_id)
        .bind(next)
        .bind(recording_path)
        .bind(i64::from(first_tick))
        .bind(Ended::Running.as_str())
        .bind(resumed_from_seq)
        .bind(now_unix_ms())
        .execute(&mut *tx)
        .await
        .map_err(q("open segment"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(next)
    }

    /// Closes a segment with what its recording says.
    pub async fn close_segment(&self, world_id: &str, seq: i64, end: &SegmentEnd) -> Result<(), StoreError> {
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
        .execute(&self.pool)
        .await
        .map_err(q("close segment"))?;
        Ok(())
    }
}

fn world_row(r: &AnyRow) -> Result<WorldRow, sqlx::Error> {
    Ok(WorldRow {
        id: r.try_get(0)?,
        config_json: r.try_get(1)?,
        config_hash: r.try_get(2)?,
        created_unix_ms: r.try_get(3)?,
        server_pid: r.try_get(4)?,
        ws_url: r.try_get(5)?,
    })
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
    })
}

/// libpq takes `postgres://user@/db?host=/socket/folder` (a Unix socket: user info and no
/// host), but the URL parser sqlx uses refuses an empty host after user info ("empty
/// host"). Such a URL becomes `postgres:///db?host=/socket/folder&user=user` (and
/// `&password=` when it has one), which sqlx reads the same way; any other URL is kept.
fn socket_url(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.into();
    };
    if at + 1 != authority_end || !scheme.starts_with("postgres") {
        return url.into();
    }
    let (user, password) = match rest[..at].split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (&rest[..at], None),
    };
    let path = &rest[authority_end..];
    let slash = if path.starts_with('/') { "" } else { "/" };
    let mut out = format!("{scheme}://{slash}{path}");
    let mut sep = if out.contains('?') { '&' } else { '?' };
    for (key, value) in [("user", Some(user)), ("password", password)] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push(sep);
            out.push_str(&format!("{key}={v}"));
            sep = '&';
        }
    }
    out.into()
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_urls_with_user_info_and_no_host_are_rewritten() {
        for (given, want) in [
            (
                "postgres://u@/db?host=/run/pg",
                "postgres:///db?host=/run/pg&user=u",
            ),
            (
                "postgres://u:pw@/db?host=/run/pg",
                "postgres:///db?host=/run/pg&user=u&password=pw",
            ),
            ("postgresql://u@/db", "postgresql:///db?user=u"),
            ("postgres://u@?host=/s", "postgres:///?host=/s&user=u"),
            ("postgres://u@host/db", "postgres://u@host/db"),
            ("postgres:///db?host=/s", "postgres:///db?host=/s"),
            ("sqlite://x.db?mode=rwc", "sqlite://x.db?mode=rwc"),
        ] {
            assert_eq!(socket_url(given), want, "{given}");
        }
        // And sqlx reads the rewritten form as the socket and the user.
        let o: sqlx::postgres::PgConnectOptions = socket_url("postgres://u@/db?host=/run/pg")
            .parse()
            .expect("parses");
        assert_eq!(o.get_username(), "u");
        assert_eq!(o.get_database(), Some("db"));
        assert_eq!(
            o.get_socket().map(|p| p.display().to_string()).as_deref(),
            Some("/run/pg")
        );
    }

    /// Every file in `migrations/` is embedded, in order, under its name's version and
    /// description (`0001_worlds_and_segments.sql`: 1, "worlds and segments"), as sqlx's
    /// folder reader would name it.
    #[test]
    fn every_migration_file_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
            .expect("migrations/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .map(|p| {
                let stem = p
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .expect("a name")
                    .to_string();
                let (version, description) = stem.split_once('_').expect("VERSION_DESCRIPTION");
                let sql = std::fs::read_to_string(&p).expect("read");
                (
                    version.parse().expect("a version"),
                    description.replace('_', " "),
                    sql,
                )
            })
            .collect();
        files.sort();
        let embedded: Vec<(i64, String, String)> = MIGRATIONS
            .iter()
            .map(|&(v, d, sql)| (v, d.to_string(), sql.to_string()))
            .collect();
        assert_eq!(embedded, files);
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite:///tmp/x"), "sqlite:///tmp/x");
    }
}
