//! The fleet's state of record: worlds and their recording segments, in SQLite (the
//! zero-config default, a file in the data folder) or PostgreSQL, through one sqlx code
//! path and one set of embedded migrations (`net/fleet/migrations/`).
//!
//! The SQL is written once for both backends: `$N` parameters (SQLite reads them as
//! numbered parameters too), `BIGINT`, `TEXT` and `BYTEA` columns, roots stored as hex.
//! Leases are judged on the store's clock (`Store::now_sql`), so nodes whose clocks
//! disagree still agree on whose lease is live.
//!
//! - `mod.rs`: opening and migrating, the worlds and their ownership.
//! - `nodes`: node registration and leases.
//! - `segments`: segment rows and their shipped bytes.

mod nodes;
mod segments;

pub use nodes::{NodeRow, Registration};
pub(crate) use segments::resume_chain;
pub use segments::ChainError;
pub use segments::{Append, Ended, SegmentEnd, SegmentRow};

/// Who holds a world: a node, at an epoch, of one creation of the world (its
/// `created_unix_ms`: a world deleted and created again under the same id starts its
/// epochs anew, and must never take an old holder's writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub node: String,
    pub epoch: i64,
    pub created_unix_ms: i64,
}

/// The condition that `worlds` row is still held by a holder: its three parameters are
/// numbered from `$first`, and `BindHolder::bind_holder` binds them in this order (node,
/// epoch, creation), so every statement that checks a holder checks the same three columns
/// and binds them alike.
pub(crate) fn held_by(first: usize) -> String {
    format!(
        "owner_node = ${first} AND epoch = ${} AND created_unix_ms = ${}",
        first + 1,
        first + 2
    )
}

/// Binds a holder's three parameters in `held_by`'s order.
pub(crate) trait BindHolder {
    fn bind_holder(self, holder: &Holder) -> Self;
}

impl<'q> BindHolder for sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    fn bind_holder(self, holder: &Holder) -> Self {
        self.bind(holder.node.clone())
            .bind(holder.epoch)
            .bind(holder.created_unix_ms)
    }
}

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "worlds and segments",
        include_str!("../../migrations/0001_worlds_and_segments.sql"),
    ),
    (
        2,
        "nodes epochs and shipped segments",
        include_str!("../../migrations/0002_nodes_epochs_and_shipped_segments.sql"),
    ),
    (
        3,
        "reclaim and moves",
        include_str!("../../migrations/0003_reclaim_and_moves.sql"),
    ),
    (4, "lineages", include_str!("../../migrations/0004_lineages.sql")),
];

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
    #[error(
        "the SQLite store {path} is in use by another fleet node{holder}: SQLite serves one \
         node; give every node --database-url postgres://... to run several"
    )]
    SqliteInUse { path: PathBuf, holder: String },
    #[error("locking the SQLite store {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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
    /// The node running its server, if one does (or did, and its lease has not been
    /// taken over yet).
    pub owner_node: Option<String>,
    /// The fencing epoch: incremented on every start and takeover.
    pub epoch: i64,
    /// The world's current lineage (see migration 0004): 0 until an upgrade or a fork.
    pub lineage: i64,
}

const WORLD_COLUMNS: &str =
    "id, config_json, config_hash, created_unix_ms, server_pid, ws_url, owner_node, epoch, lineage";

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
    /// SQLite only: the lock that keeps a second node off the same file, held while the
    /// store lives.
    _node_lock: Option<Arc<File>>,
}

impl Store {
    /// Opens (creating when needed) and migrates the store: `database_url`, or a SQLite
    /// file `fleet.sqlite3` in `data_dir` when there is none. A SQLite store is locked
    /// for this process: a second node on the same file is refused with
    /// `StoreError::SqliteInUse`.
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
        let node_lock = match backend {
            Backend::Sqlite => sqlite_path(&url)
                .map(|p| lock_sqlite(&p))
                .transpose()?
                .map(Arc::new),
            Backend::Postgres => None,
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
        Ok(Store {
            pool,
            backend,
            _node_lock: node_lock,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The store's clock in SQL, as ms since 1970: leases are set and judged by it.
    fn now_sql(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
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
        let row = sqlx::query(&format!("SELECT {WORLD_COLUMNS} FROM worlds WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("read world"))?;
        row.map(|r| world_row(&r)).transpose().map_err(q("decode world"))
    }

    pub async fn worlds(&self) -> Result<Vec<WorldRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {WORLD_COLUMNS} FROM worlds ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .map_err(q("list worlds"))?;
        rows.iter()
            .map(world_row)
            .collect::<Result<_, _>>()
            .map_err(q("decode world"))
    }

    /// Deletes a world, its segments' rows and their shipped bytes; false when there was none.
    /// The world's epoch is moved on first, under its row lock, so an append in flight
    /// either lands before (and its bytes are deleted with the rest) or is refused.
    pub async fn delete_world(&self, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(q("begin"))?;
        for (sql, what) in [
            ("UPDATE worlds SET epoch = epoch + 1 WHERE id = $1", "fence world"),
            ("DELETE FROM segment_chunks WHERE world_id = $1", "delete chunks"),
            ("DELETE FROM segments WHERE world_id = $1", "delete segments"),
        ] {
            sqlx::query(sql)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(q(what))?;
        }
        let done = sqlx::query("DELETE FROM worlds WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(q("delete world"))?;
        tx.commit().await.map_err(q("commit"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Makes `node` the world's owner under the next epoch, when the world is still at
    /// `expected_epoch` and has no other owner with a live lease (a compare-and-set: of
    /// nodes racing for one world, exactly one gets true). Returns the new epoch.
    pub async fn claim_world(
        &self,
        id: &str,
        node: &str,
        expected_epoch: i64,
    ) -> Result<Option<i64>, StoreError> {
        let sql = format!(
            "UPDATE worlds SET owner_node = $1, epoch = epoch + 1, server_pid = NULL, ws_url = NULL \
             WHERE id = $2 AND epoch = $3 AND (owner_node IS NULL OR owner_node = $1 OR NOT EXISTS \
             (SELECT 1 FROM nodes WHERE nodes.id = worlds.owner_node AND nodes.lease_expires_unix_ms > {}))",
            self.now_sql()
        );
        let done = sqlx::query(&sql)
            .bind(node)
            .bind(id)
            .bind(expected_epoch)
            .execute(&self.pool)
            .await
            .map_err(q("claim world"))?;
        Ok((done.rows_affected() == 1).then_some(expected_epoch + 1))
    }

    /// Records the running server of the world's holder. False when the world is no
    /// longer `holder`'s: another node took it over, and the row is left alone.
    pub async fn set_server(
        &self,
        id: &str,
        holder: &Holder,
        pid: u32,
        ws_url: &str,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE worlds SET server_pid = $1, ws_url = $2 WHERE id = $3 AND {}",
            held_by(4)
        );
        let done = sqlx::query(&sql)
            .bind(i64::from(pid))
            .bind(ws_url)
            .bind(id)
            .bind_holder(holder)
            .execute(&self.pool)
            .await
            .map_err(q("set server"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives the world up: no owner, no server, and the next epoch, so nothing its last
    /// server still sends is taken. False when it was no longer `holder`'s.
    pub async fn release_world(&self, id: &str, holder: &Holder) -> Result<bool, StoreError> {
        self.update_held(
            "server_pid = NULL, ws_url = NULL, owner_node = NULL, epoch = epoch + 1",
            id,
            holder,
            "release world",
        )
        .await
    }

    /// `UPDATE worlds SET {set}` of world `id` while `holder` holds it (`set` binds no
    /// parameter); false when it no longer does.
    async fn update_held(
        &self,
        set: &str,
        id: &str,
        holder: &Holder,
        what: &'static str,
    ) -> Result<bool, StoreError> {
        let sql = format!("UPDATE worlds SET {set} WHERE id = $1 AND {}", held_by(2));
        let done = sqlx::query(&sql)
            .bind(id)
            .bind_holder(holder)
            .execute(&self.pool)
            .await
            .map_err(q(what))?;
        Ok(done.rows_affected() == 1)
    }
}

impl Store {
    /// Hands the world from `holder` to node `to` (a move): `to` owns it at the next
    /// epoch with no server yet, and starts one when it sees it (`Store::handed_to`).
    /// False when the world is no longer `holder`'s.
    pub async fn hand_over(&self, id: &str, holder: &Holder, to: &str) -> Result<bool, StoreError> {
        // Only to a node that will start it: live and not draining, checked in the same
        // statement, so a drain or a death just before cannot strand the world there.
        let sql = format!(
            "UPDATE worlds SET server_pid = NULL, ws_url = NULL, owner_node = $1, epoch = epoch + 1 \
             WHERE id = $2 AND {} AND EXISTS \
             (SELECT 1 FROM nodes WHERE nodes.id = $1 AND nodes.draining = 0 AND nodes.lease_expires_unix_ms > {})",
            held_by(3),
            self.now_sql()
        );
        let done = sqlx::query(&sql)
            .bind(to)
            .bind(id)
            .bind_holder(holder)
            .execute(&self.pool)
            .await
            .map_err(q("hand world over"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives up a world handed to `node` that it could not start (it is draining, or full):
    /// the next join on any node starts it. False when the world is no longer waiting there.
    pub async fn release_handed(&self, id: &str, node: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE worlds SET owner_node = NULL, epoch = epoch + 1 \
             WHERE id = $1 AND owner_node = $2 AND ws_url IS NULL",
        )
        .bind(id)
        .bind(node)
        .execute(&self.pool)
        .await
        .map_err(q("release a handed world"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets the world's server while `holder` keeps the world (a move is stopping it):
    /// joins elsewhere wait instead of answering its URL. False when it is not `holder`'s.
    pub async fn clear_server(&self, id: &str, holder: &Holder) -> Result<bool, StoreError> {
        self.update_held("server_pid = NULL, ws_url = NULL", id, holder, "clear server")
            .await
    }

    /// The worlds `node` owns with no server recorded: handed to it by a move (or being
    /// started by it right now).
    pub async fn handed_to(&self, node: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM worlds WHERE owner_node = $1 AND ws_url IS NULL ORDER BY id")
            .bind(node)
            .fetch_all(&self.pool)
            .await
            .map_err(q("worlds handed over"))?;
        rows.iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("decode world id"))
    }

    /// Clears the server of a world from a store made before worlds had owners.
    pub async fn release_legacy(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE worlds SET server_pid = NULL, ws_url = NULL WHERE id = $1 AND owner_node IS NULL",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(q("release world"))?;
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
        owner_node: r.try_get(6)?,
        epoch: r.try_get(7)?,
        lineage: r.try_get(8)?,
    })
}

/// The file of a `sqlite://PATH?...` URL.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// Takes the node lock of a SQLite store: an exclusive `flock` on `PATH.node-lock`, held
/// until the process exits (the kernel drops it even on SIGKILL, so a restarted node
/// never waits). The file names the holder's pid for the refusal's message.
fn lock_sqlite(db: &Path) -> Result<File, StoreError> {
    use std::io::{Read as _, Seek as _, Write as _};
    use std::os::fd::AsRawFd as _;
    let mut name = db.as_os_str().to_owned();
    name.push(".node-lock");
    let path = PathBuf::from(name);
    let lock_err = |source| StoreError::Lock {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(lock_err)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_err)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::WouldBlock {
            return Err(lock_err(err));
        }
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        let holder = match pid.trim() {
            "" => String::new(),
            p => format!(" (pid {p})"),
        };
        return Err(StoreError::SqliteInUse {
            path: db.to_path_buf(),
            holder,
        });
    }
    file.set_len(0).map_err(lock_err)?;
    file.rewind().map_err(lock_err)?;
    writeln!(file, "{}", std::process::id()).map_err(lock_err)?;
    Ok(file)
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
