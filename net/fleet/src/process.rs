//! World server processes: spawning one with a secret on its stdin, its ready line, its
//! log and the tail of it, signals that can never hit a recycled pid, and its exit.
//!
//! Every child is spawned from one long-lived thread, with a parent-death signal
//! (`PR_SET_PDEATHSIG`, SIGTERM): Linux sends it when the *thread* that forked the child
//! ends, so forking from a tokio worker or blocking thread (which come and go) would kill
//! children at random. With the spawner thread living as long as the fleet, a fleet that
//! dies for any reason takes its children down cleanly (SIGTERM ends a world server with a
//! final checkpoint), and none outlives it unnoticed.
//!
//! The exit watcher waits with `waitid(WNOWAIT)`: it learns of the exit without reaping,
//! marks the child exited under the lock `signal` takes, and only then reaps. So a signal
//! is sent only while the pid still names this child (alive or a zombie), never a new
//! process that reused the number.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

/// Lines of a child's output kept for error reports.
pub const LOG_TAIL_LINES_MAX: usize = 40;

/// What to start.
#[derive(Debug)]
pub struct SpawnSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Written to the child's stdin, then stdin is closed: never on the command line,
    /// never in the environment.
    pub stdin_secret: String,
    /// The child's stdout and stderr are appended here: stderr by the child itself (so its
    /// last lines reach the file even when the fleet is gone), stdout by the fleet, which
    /// also reads it for the ready line.
    pub log_path: PathBuf,
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitInfo {
    Code(i32),
    Signal(i32),
}

impl ExitInfo {
    pub fn success(self) -> bool {
        self == ExitInfo::Code(0)
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitInfo::Code(c) => write!(f, "exit status {c}"),
            ExitInfo::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// A world server this node did not fork (an allocated Agones GameServer): what a signal
/// means to it is the implementor's to carry out.
pub trait Remote: Send + Sync + std::fmt::Debug {
    fn signal(&self, sig: i32);
}

/// A running (or exited) child, or a remote server driven through `Remote` (pid 0, no
/// output, no log).
#[derive(Debug)]
pub struct ChildProc {
    pub pid: u32,
    /// Stdout lines, as they come (the ready line is one of them).
    pub stdout_lines: mpsc::UnboundedReceiver<String>,
    exit: watch::Receiver<Option<ExitInfo>>,
    shared: Arc<ChildShared>,
    remote: Option<Arc<dyn Remote>>,
}

#[derive(Debug, Default)]
struct ChildShared {
    /// Set (under this lock) before the child is reaped.
    exited: Mutex<bool>,
    /// The log file, and its length when this child started: the child's own output is
    /// what follows.
    log_path: PathBuf,
    log_start_bytes: u64,
    /// Output threads still reading.
    open_streams: AtomicUsize,
}

impl ChildProc {
    /// A remote server: signals go to `remote`, its exit comes through `exit`.
    pub fn remote(remote: Arc<dyn Remote>, exit: watch::Receiver<Option<ExitInfo>>) -> ChildProc {
        ChildProc {
            pid: 0,
            stdout_lines: mpsc::unbounded_channel().1,
            exit,
            shared: Arc::default(),
            remote: Some(remote),
        }
    }

    /// Sends `sig` unless the child has exited; false when it had.
    pub fn signal(&self, sig: i32) -> bool {
        if let Some(remote) = &self.remote {
            if self.exit_info().is_some() {
                return false;
            }
            remote.signal(sig);
            return true;
        }
        let exited = self.shared.exited.lock().unwrap_or_else(|e| e.into_inner());
        if *exited {
            return false;
        }
        // SAFETY: kill only sends a signal; the pid is this unreaped child's (see module doc).
        unsafe { libc::kill(self.pid as libc::pid_t, sig) == 0 }
    }

    /// How it ended, if it has.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// A receiver that sees the exit.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitInfo>> {
        self.exit.clone()
    }

    /// Waits for the exit.
    pub async fn wait(&self) -> ExitInfo {
        let mut rx = self.exit.clone();
        loop {
            if let Some(e) = *rx.borrow_and_update() {
                return e;
            }
            if rx.changed().await.is_err() {
                // The watcher thread is gone without a word: treat as killed.
                return rx.borrow().unwrap_or(ExitInfo::Signal(libc::SIGKILL));
            }
        }
    }

    /// Waits (at most `limit`) until the child's output has been read to its end.
    pub async fn drained(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.shared.open_streams.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The last lines the child printed (stdout and stderr, as they reached its log).
    pub fn log_tail(&self) -> Vec<String> {
        use std::io::{Read as _, Seek as _};
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.shared.log_path) {
            let _ = f.seek(std::io::SeekFrom::Start(self.shared.log_start_bytes));
            let _ = f.read_to_string(&mut text);
        }
        let lines: VecDeque<&str> = text.lines().collect();
        let skip = lines.len().saturating_sub(LOG_TAIL_LINES_MAX);
        lines.into_iter().skip(skip).map(str::to_string).collect()
    }
}

type SpawnReply = oneshot::Sender<std::io::Result<ChildProc>>;

/// The one thread every child is forked from.
#[derive(Debug, Clone)]
pub struct Spawner {
    requests: std_mpsc::Sender<(SpawnSpec, SpawnReply)>,
}

impl Spawner {
    pub fn start() -> std::io::Result<Spawner> {
        let (tx, rx) = std_mpsc::channel::<(SpawnSpec, SpawnReply)>();
        std::thread::Builder::new()
            .name("fleet-spawner".into())
            .spawn(move || {
                for (spec, reply) in rx {
                    let _ = reply.send(spawn_now(spec));
                }
            })?;
        Ok(Spawner { requests: tx })
    }

    pub async fn spawn(&self, spec: SpawnSpec) -> std::io::Result<ChildProc> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((spec, tx))
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
    }
}

fn spawn_now(spec: SpawnSpec) -> std::io::Result<ChildProc> {
    use std::os::unix::process::CommandExt as _;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log_path)?;
    let log_start_bytes = log.metadata()?.len();
    // The child appends its stderr to the log itself; only stdout passes through the fleet.
    let child_stderr = Stdio::from(log.try_clone()?);
    let log = Arc::new(Mutex::new(log));
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(child_stderr);
    // SAFETY: between fork and exec only async-signal-safe calls are made (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The fleet died between fork and prctl: the signal will never come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the fleet exited while spawning"));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    if let Some(mut stdin) = child.stdin.take() {
        // A child that exits at once closes the pipe; its exit is reported instead.
        let _ = writeln!(stdin, "{}", spec.stdin_secret);
    }
    let shared = Arc::new(ChildShared {
        log_path: spec.log_path.clone(),
        log_start_bytes,
        ..ChildShared::default()
    });
    shared
        .open_streams
        .store(usize::from(child.stdout.is_some()), Ordering::Release);
    let (lines_tx, lines_rx) = mpsc::unbounded_channel();
    if let Some(out) = child.stdout.take() {
        pump(format!("child-{pid}-out"), out, &shared, &log, lines_tx)?;
    }
    let (exit_tx, exit_rx) = watch::channel(None);
    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("child-{pid}-wait"))
            .spawn(move || {
                wait_exited_unreaped(pid);
                *shared.exited.lock().unwrap_or_else(|e| e.into_inner()) = true;
                let info = match child.wait() {
                    Ok(status) => {
                        use std::os::unix::process::ExitStatusExt as _;
                        match (status.code(), status.signal()) {
                            (Some(c), _) => ExitInfo::Code(c),
                            (None, Some(s)) => ExitInfo::Signal(s),
                            (None, None) => ExitInfo::Signal(0),
                        }
                    }
                    Err(_) => ExitInfo::Signal(0),
                };
                let _ = exit_tx.send(Some(info));
            })?;
    }
    Ok(ChildProc {
        pid,
        stdout_lines: lines_rx,
        exit: exit_rx,
        shared,
        remote: None,
    })
}

/// Reads a child's stdout on a thread of its own: each line to the log and the line
/// channel.
fn pump(
    name: String,
    stream: impl std::io::Read + Send + 'static,
    shared: &Arc<ChildShared>,
    log: &Arc<Mutex<std::fs::File>>,
    lines: mpsc::UnboundedSender<String>,
) -> std::io::Result<()> {
    let (shared, log) = (shared.clone(), log.clone());
    std::thread::Builder::new().name(name).spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let _ = writeln!(log.lock().unwrap_or_else(|e| e.into_inner()), "{line}");
            let _ = lines.send(line);
        }
        shared.open_streams.fetch_sub(1, Ordering::Release);
    })?;
    Ok(())
}

/// Blocks until `pid` has exited, leaving it unreaped (a zombie).
fn wait_exited_unreaped(pid: u32) {
    loop {
        // SAFETY: waitid writes only the siginfo passed.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Whether `pid` is a live (not zombie) `migratory-server` serving world `world_id`:
/// what a restarted fleet checks before it signals a pid its store remembers.
pub fn is_world_server(pid: u32, world_id: &str, server_bin: &std::path::Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let wanted = world_id_arg(world_id);
    let names_world = cmdline.split(|&b| b == 0).any(|a| a == wanted.as_bytes());
    // The process must also run the world server's binary, so an unrelated process that
    // happens to carry the same argument (a script, an editor) is never signalled.
    let runs_server = match (
        std::fs::canonicalize(format!("/proc/{pid}/exe")),
        std::fs::canonicalize(server_bin),
    ) {
        (Ok(exe), Ok(bin)) => exe == bin,
        _ => false,
    };
    names_world && runs_server && !is_zombie(pid)
}

/// The argument that names a world to its server: `--world-id=ID`, one argument.
pub fn world_id_arg(world_id: &str) -> String {
    format!("--world-id={world_id}")
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Whether a live (not zombie) process has `pid`.
pub fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restarted fleet signals a remembered pid only if that process runs the server
    /// binary *and* names the world: a decoy that carries `--world-id=ID` in its arguments
    /// (a script, an editor) is left alone, as is the binary serving another world.
    #[test]
    fn only_the_server_binary_naming_the_world_counts_as_its_server() {
        let mut decoy = Command::new("/bin/sh")
            .args(["-c", "sleep 30; true", "sh", &world_id_arg("sb")])
            .spawn()
            .expect("spawn a decoy");
        let pid = decoy.id();
        // Until exec has happened, /proc shows the test binary's own command line.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.windows(14).any(|w| w == b"--world-id=sb\0"))
        {
            assert!(Instant::now() < deadline, "the decoy never showed its arguments");
            std::thread::sleep(Duration::from_millis(10));
        }
        let server_bin = std::path::Path::new("/nonexistent/migratory-server");
        assert!(
            !is_world_server(pid, "sb", server_bin),
            "a decoy is not the world server"
        );
        // The same process counts once the configured binary is the one it runs, and only
        // for the world it names.
        let sh = std::fs::canonicalize(format!("/proc/{pid}/exe")).expect("its exe");
        assert!(is_world_server(pid, "sb", &sh));
        assert!(!is_world_server(pid, "other", &sh));
        let _ = decoy.kill();
        let _ = decoy.wait();
        assert!(
            !is_world_server(pid, "sb", &sh),
            "an exited process is nobody's server"
        );
    }
}
