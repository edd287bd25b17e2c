//! The fleet test harness: a `migratory-fleet` process, its store (SQLite in its data
//! folder, or a throwaway PostgreSQL cluster), an HTTP client, and process checks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use migratory_http as http;

use crate::common::TempDir;

pub const FLEET: &str = env!("CARGO_BIN_EXE_test-migratory-fleet");
pub const SERVER: &str = env!("CARGO_BIN_EXE_test-migratory-server");

/// Where the fleet keeps its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A PostgreSQL cluster of its own in a temporary folder, on a Unix socket only (no TCP
/// port), stopped and removed on drop. PostgreSQL refuses to run as root, so under root
/// it runs as the `postgres` user (Debian's package creates it).
pub struct PgCluster {
    dir: TempDir,
    bin: PathBuf,
    user: Option<(u32, u32)>,
}

fn pg_bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: install Debian's \
             `postgresql` package (.ci/run does)"
        ),
    }
}

fn user_ids(name: &str) -> Option<(u32, u32)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, as checked.
    unsafe { Some(((*pw).pw_uid, (*pw).pw_gid)) }
}

impl PgCluster {
    pub fn start() -> PgCluster {
        let bin = pg_bin_dir();
        let dir = TempDir::new("pg");
        // SAFETY: geteuid has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            let ids = user_ids("postgres")
                .or_else(|| user_ids("nobody"))
                .expect("an unprivileged user (postgres or nobody) to run PostgreSQL as");
            let path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: chown of a folder this test made.
            let r = unsafe { libc::chown(path.as_ptr(), ids.0, ids.1) };
            assert_eq!(r, 0, "chown of the PostgreSQL folder");
            Some(ids)
        } else {
            None
        };
        let pg = PgCluster { dir, bin, user };
        let data = pg.dir.path().join("data");
        pg.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
            ],
        );
        let options = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c synchronous_commit=off -c max_connections=40",
            pg.dir.path().display()
        );
        let log = pg.dir.path().join("postgres.log");
        pg.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        );
        pg
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            use std::os::unix::process::CommandExt as _;
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir(self.dir.path());
        cmd
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let out = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The cluster's URL over its socket folder, in libpq's form: user info and no host.
    pub fn url(&self) -> String {
        format!("postgres://postgres@/postgres?host={}", self.dir.path().display())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = self
            .command("pg_ctl")
            .args([
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "stop".as_ref(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A scenario's surroundings: a data folder and a store.
pub struct Env {
    pub dir: TempDir,
    pg: Option<PgCluster>,
}

impl Env {
    pub fn new(backend: Backend, tag: &str) -> Env {
        Env {
            dir: TempDir::new(tag),
            pg: (backend == Backend::Postgres).then(PgCluster::start),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts a fleet on this store with `args` added to `serve`.
    pub fn fleet(&self, args: &[&str]) -> Fleet {
        self.fleet_with_env(args, &[])
    }

    /// `fleet` with environment variables set for it.
    pub fn fleet_with_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Fleet {
        let mut cmd = Command::new(FLEET);
        cmd.envs(envs.iter().copied());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(args);
        // The program under test, not whatever `migratory-server` sits beside the fleet's binary.
        if !args.contains(&"--server-bin") {
            cmd.arg("--server-bin").arg(SERVER);
        }
        if let Some(pg) = &self.pg {
            cmd.arg("--database-url").arg(pg.url());
        }
        let mut fleet = Fleet::spawn(cmd, self.dir.path());
        // The fleet makes its admin token before it listens.
        let token_file = self.data_dir().join(migratory_fleet::ADMIN_TOKEN_FILE_NAME);
        fleet.admin_token = std::fs::read_to_string(&token_file)
            .ok()
            .and_then(|t| t.lines().next().map(str::to_string));
        fleet
    }
}

/// The admin token every node of a multi-node scenario shares.
pub const SHARED_ADMIN_TOKEN: &str = "multi-node-test-admin-token-0123456789";

impl Env {
    /// Starts fleet node `name` on this store as a machine of its own would run it: its
    /// own data folder, the shared admin token, and a process group of its own (the
    /// node and its world servers), so a test can kill or freeze the whole "machine".
    pub fn node(&self, name: &str, args: &[&str]) -> Fleet {
        let token_file = self.dir.path().join("admin-token");
        std::fs::write(&token_file, format!("{SHARED_ADMIN_TOKEN}\n")).expect("token file");
        let data = self.dir.path().join(format!("{name}-data"));
        let mut cmd = Command::new(FLEET);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(&data)
            .arg("--node-id")
            .arg(name)
            .arg("--admin-token-file")
            .arg(&token_file)
            .arg("--server-bin")
            .arg(SERVER)
            .args(args);
        if let Some(pg) = &self.pg {
            cmd.arg("--database-url").arg(pg.url());
        }
        {
            use std::os::unix::process::CommandExt as _;
            cmd.process_group(0);
        }
        let mut fleet = Fleet::spawn(cmd, self.dir.path());
        fleet.admin_token = Some(SHARED_ADMIN_TOKEN.to_string());
        fleet.data_dir = Some(data);
        fleet
    }
}

/// A running `migratory-fleet`; stopped with SIGTERM (then killed) on drop.
pub struct Fleet {
    child: Child,
    pub url: String,
    stderr: PathBuf,
    /// Sent with every call (None: the calls go without one).
    pub admin_token: Option<String>,
    /// A node's own data folder (`Env::node`).
    pub data_dir: Option<PathBuf>,
    /// Where its world servers reach its internal routes.
    pub internal_url: String,
}

impl Fleet {
    fn spawn(mut cmd: Command, dir: &Path) -> Fleet {
        let stderr = dir.join(format!(
            "fleet-stderr-{}.txt",
            Instant::now().elapsed().as_nanos()
        ));
        let err = std::fs::File::create(&stderr).expect("stderr file");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn migratory-fleet");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.wait();
            panic!(
                "the fleet exited before listening:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        let url = migratory_wire::fleet::parse_ready_line(&line)
            .unwrap_or_else(|| panic!("unexpected first line `{line}`"))
            .to_string();
        let mut second = String::new();
        let _ = out.read_line(&mut second);
        let internal_url = second
            .trim()
            .strip_prefix("internal routes on ")
            .unwrap_or_else(|| panic!("unexpected second line `{second}`"))
            .to_string();
        std::thread::spawn(move || for _ in out.lines() {});
        Fleet {
            child,
            url,
            stderr,
            admin_token: None,
            data_dir: None,
            internal_url,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// A request; returns the status and the JSON body (Null when there is none).
    pub async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let mut req =
            http::Request::new(method, format!("{}{path}", self.url)).timeout(Duration::from_secs(60));
        req.body = body.map(|b| b.as_bytes().to_vec());
        req.bearer = self.admin_token.clone();
        let resp = req.send().await.expect("fleet request");
        (resp.status, resp.json().unwrap_or(serde_json::Value::Null))
    }

    pub async fn put(&self, id: &str, config: &str) -> (u16, serde_json::Value) {
        self.call(http::Method::PUT, &format!("/api/worlds/{id}"), Some(config))
            .await
    }

    pub async fn join(&self, id: &str) -> (u16, serde_json::Value) {
        self.call(http::Method::POST, &format!("/api/worlds/{id}/join"), None)
            .await
    }

    pub async fn stop(&self, id: &str) -> (u16, serde_json::Value) {
        self.call(http::Method::POST, &format!("/api/worlds/{id}/stop"), None)
            .await
    }

    pub async fn show(&self, id: &str) -> serde_json::Value {
        let (status, body) = self
            .call(http::Method::GET, &format!("/api/worlds/{id}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// A GET of the internal content route with `token`.
    pub async fn content(&self, id: &str, token: Option<&str>) -> u16 {
        let mut req = http::Request::new(
            http::Method::GET,
            migratory_wire::fleet::content_url(&self.internal_url, id),
        );
        if let Some(t) = token {
            req = req.bearer(t);
        }
        req.send().await.expect("content request").status
    }

    /// Sends `sig` to the fleet process alone (its world servers go on).
    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to this test's own child, not yet reaped.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.child.id());
    }

    /// Sends `sig` to the node's whole process group (it and its world servers).
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: a signal to the process group this test made (`Env::node`).
        let r = unsafe { libc::kill(-(self.child.id() as libc::pid_t), sig) };
        assert_eq!(r, 0, "kill(-{}, {sig})", self.child.id());
    }

    /// SIGKILL to the whole process group, and reap the node.
    pub fn kill_group(&mut self) {
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: a signal to our own child, not yet reaped (checked just above).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small world (256 x 256 cells, 400 boids) as the fleet's JSON.
pub const SMALL_WORLD: &str = r#"{"terrain_grid_cells": 256, "terrain_cell_size_mm": 1000, "world_size_mm": 256000, "boid_count": 400, "client_slots_max": 64}"#;

/// Pids of live `migratory-server` processes serving `world`.
pub fn world_server_pids(world: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')))
            .unwrap_or(true);
        if !zombie
            && args.iter().any(|a| a.ends_with(b"migratory-server"))
            && args
                .iter()
                .any(|a| *a == format!("--world-id={world}").as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// Whether a live (not zombie) process has `pid`.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Polls `f` until it is true or `limit` passes; says what it waited for on failure.
pub async fn eventually(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// A script that stands in for `migratory-server`: it saves its token (stdin's first
/// line) under `dump/`, then becomes the real server (`exec`, so the pid and the
/// parent-death signal stay) with the same arguments and the token on its stdin.
pub fn token_dumping_server(dir: &TempDir, dump: &Path) -> PathBuf {
    let path = dir.write(
        "token-dumping-server.sh",
        format!(
            "#!/bin/sh\nread token\nworld=\"\"\nfor a in \"$@\"; do\n  case \"$a\" in --world-id=*) world=\"${{a#--world-id=}}\" ;; esac\ndone\necho \"$token\" > \"{}/$world.token\"\nexec {} \"$@\" <<EOF\n$token\nEOF\n",
            dump.display(),
            SERVER
        )
        .as_bytes(),
    );
    make_executable(&path);
    path
}

pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}
