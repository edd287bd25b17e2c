//! The floor under a game server's system CPU on this machine: the TCP segments a session
//! of N clients makes the OS kernel move (one message down to each client per snapshot
//! interval, one reply up for each), with no game, no WebSocket and no async runtime, and
//! each side's CPU read per thread.
//!
//! On loopback, a `send` carries its segment through the receiver's TCP stack in the
//! sender's system time, so a server's system CPU per tick is set by how many segments it
//! sends and reads, whatever the server does between. This measures that cost alone: one
//! thread plays the server (a paced tick loop that writes to the clients due and reads
//! what arrives until the tick ends), another all the clients (each reads its message and
//! answers it `reply_after_percent` into the interval, as the bots do). The server's
//! system time here is what no server with one segment each way per snapshot can go
//! under; its user time is next to nothing.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream as StdTcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// Most clients a run opens (two sockets each, in one process).
pub const FLOOR_CLIENT_COUNT_MAX: u32 = 20_000;

/// Ticks run before the measured ones, so connections are warm and replies flowing.
const WARM_TICKS: u32 = 60;

/// What to move and for how long.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    pub clients: u32,
    pub ticks: u32,
    pub tick_rate_hz: u32,
    /// Each client gets one message every this many ticks, clients staggered by index.
    pub interval_ticks: u32,
    pub down_bytes: u32,
    pub up_bytes: u32,
    /// How far into the interval a client answers (0: at once).
    pub reply_after_percent: u32,
}

impl Default for FloorOptions {
    /// A 1,000-client session as the soak plays it: 60 Hz, a snapshot every 3 ticks of the
    /// soak's mean size (about 140 bytes), an INPUT_ACK of 24 bytes half an interval later.
    fn default() -> FloorOptions {
        FloorOptions {
            clients: 1000,
            ticks: 1200,
            tick_rate_hz: 60,
            interval_ticks: 3,
            down_bytes: 140,
            up_bytes: 24,
            reply_after_percent: crate::bots::REPLY_AFTER_PERCENT_DEFAULT,
        }
    }
}

/// CPU per measured tick of each side, in milliseconds, and what moved.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FloorReport {
    pub clients: u32,
    pub ticks: u32,
    pub server_user_ms_per_tick: f64,
    pub server_sys_ms_per_tick: f64,
    pub clients_user_ms_per_tick: f64,
    pub clients_sys_ms_per_tick: f64,
    /// Messages the server wrote (one `send` each) and reads that returned data.
    pub sends_per_tick: f64,
    pub reads_per_tick: f64,
    /// Writes the kernel refused or cut short for a full send buffer (0 when each side
    /// keeps up).
    pub sends_blocked: u64,
    /// Seconds the measured ticks took (more than ticks / rate when the loop fell behind).
    pub wall_seconds: f64,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error("{what} must be between {min} and {max}, is {value}")]
    OutOfRange {
        what: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the clients' thread panicked")]
    ClientsPanicked,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> FloorError {
    move |source| FloorError::Io { what, source }
}

fn check(what: &'static str, value: u32, min: u32, max: u32) -> Result<(), FloorError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(FloorError::OutOfRange {
            what,
            value,
            min,
            max,
        })
    }
}

/// User and system CPU of the calling thread so far.
fn thread_cpu() -> (Duration, Duration) {
    // SAFETY: `rusage` is plain data, zero is a valid value of it, and getrusage writes
    // only into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD names the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let d = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    (d(ru.ru_utime), d(ru.ru_stime))
}

/// Opens `clients` loopback connections: (server ends, client ends), both non-blocking
/// with Nagle off, as the game server and the bots set them.
fn connect(clients: u32) -> Result<(Vec<TcpStream>, Vec<TcpStream>), FloorError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding 127.0.0.1:0"))?;
    let addr = listener
        .local_addr()
        .map_err(io("reading the listener's address"))?;
    let (mut server, mut client) = (Vec::new(), Vec::new());
    for _ in 0..clients {
        let c = StdTcpStream::connect(addr).map_err(io("connecting"))?;
        let (s, _) = listener.accept().map_err(io("accepting"))?;
        for t in [&c, &s] {
            t.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
            t.set_nonblocking(true).map_err(io("setting O_NONBLOCK"))?;
        }
        server.push(TcpStream::from_std(s));
        client.push(TcpStream::from_std(c));
    }
    Ok((server, client))
}

fn register(poll: &Poll, streams: &mut [TcpStream]) -> Result<(), FloorError> {
    for (i, s) in streams.iter_mut().enumerate() {
        poll.registry()
            .register(s, Token(i), Interest::READABLE)
            .map_err(io("registering a socket"))?;
    }
    Ok(())
}

/// Reads what `s` holds (edge-triggered readiness: until the buffer is not filled).
/// Returns the reads that got data.
fn drain(s: &mut TcpStream, buf: &mut [u8]) -> u64 {
    let mut reads = 0;
    loop {
        match s.read(buf) {
            Ok(0) => return reads,
            Ok(n) => {
                reads += 1;
                if n < buf.len() {
                    return reads;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return reads,
        }
    }
}

/// Runs the session and reports each side's CPU per measured tick.
pub fn run(o: &FloorOptions) -> Result<FloorReport, FloorError> {
    check("clients", o.clients, 1, FLOOR_CLIENT_COUNT_MAX)?;
    check("ticks", o.ticks, 1, u32::MAX - WARM_TICKS)?;
    check("tick rate (Hz)", o.tick_rate_hz, 1, 1000)?;
    check("interval (ticks)", o.interval_ticks, 1, 1000)?;
    check("down bytes", o.down_bytes, 1, 1 << 20)?;
    check("up bytes", o.up_bytes, 1, 1 << 20)?;
    check("reply after (percent)", o.reply_after_percent, 0, 100)?;
    let (mut server, mut clients) = connect(o.clients)?;
    let period = Duration::from_secs(1) / o.tick_rate_hz;
    let reply_after = period * o.interval_ticks * o.reply_after_percent / 100;
    // The server sets `measuring` when its warm ticks end and `done` when it stops; the
    // clients' thread reads its CPU at both, so both sides measure the same stretch.
    let (measuring, done) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|scope| {
        let up = vec![1u8; o.up_bytes as usize];
        let (measuring, done) = (&measuring, &done);
        let client_side = scope.spawn(
            move || -> Result<(Duration, Duration, Duration, Duration), FloorError> {
                let mut poll = Poll::new().map_err(io("creating a poller"))?;
                register(&poll, &mut clients)?;
                let mut events = Events::with_capacity(1024);
                let mut buf = vec![0u8; 1 << 16];
                // Replies due, oldest first: every reply waits the same time, so the queue
                // stays in order of its due times.
                let mut due: VecDeque<(Instant, usize)> = VecDeque::new();
                let mut measured_from: Option<(Duration, Duration)> = None;
                while !done.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    while let Some(&(at, i)) = due.front() {
                        if at > now {
                            break;
                        }
                        due.pop_front();
                        // A full send buffer drops the reply: the server counts what it read.
                        let _ = clients[i].write(&up);
                    }
                    let wait = due
                        .front()
                        .map_or(period, |&(at, _)| at.saturating_duration_since(now));
                    match poll.poll(&mut events, Some(wait.min(period))) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(io("polling the clients")(e)),
                    }
                    let now = Instant::now();
                    for ev in &events {
                        let i = ev.token().0;
                        if drain(&mut clients[i], &mut buf) > 0 {
                            due.push_back((now + reply_after, i));
                        }
                    }
                    if measured_from.is_none() && measuring.load(Ordering::Relaxed) {
                        measured_from = Some(thread_cpu());
                    }
                }
                let (u0, s0) = measured_from.unwrap_or_default();
                let (u1, s1) = thread_cpu();
                Ok((u0, s0, u1, s1))
            },
        );

        let served = (|| -> Result<_, FloorError> {
            let mut poll = Poll::new().map_err(io("creating a poller"))?;
            register(&poll, &mut server)?;
            let mut events = Events::with_capacity(1024);
            let down = vec![2u8; o.down_bytes as usize];
            let mut buf = vec![0u8; 1 << 16];
            let (mut sends, mut reads, mut blocked) = (0u64, 0u64, 0u64);
            let start = Instant::now();
            let mut measured_from = (thread_cpu(), start);
            for tick in 0..WARM_TICKS + o.ticks {
                if tick == WARM_TICKS {
                    measuring.store(true, Ordering::Relaxed);
                    measured_from = (thread_cpu(), Instant::now());
                    (sends, reads, blocked) = (0, 0, 0);
                }
                let first = (tick % o.interval_ticks) as usize;
                for s in server.iter_mut().skip(first).step_by(o.interval_ticks as usize) {
                    // A short write counts as refused: the rest of it is not sent.
                    match s.write(&down) {
                        Ok(n) if n == down.len() => sends += 1,
                        Ok(_) | Err(_) => blocked += 1,
                    }
                }
                let deadline = start + period * (tick + 1);
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    match poll.poll(&mut events, Some(deadline - now)) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(io("polling the server's sockets")(e)),
                    }
                    for ev in &events {
                        reads += drain(&mut server[ev.token().0], &mut buf);
                    }
                }
            }
            let ((u0, s0), t0) = measured_from;
            let (u1, s1) = thread_cpu();
            Ok((u1 - u0, s1 - s0, sends, reads, blocked, t0.elapsed()))
        })();
        done.store(true, Ordering::Relaxed);
        let client_cpu = client_side.join().map_err(|_| FloorError::ClientsPanicked)?;
        let (su, ss, sends, reads, blocked, wall) = served?;
        let (cu0, cs0, cu1, cs1) = client_cpu?;
        let per_tick = |d: Duration| d.as_secs_f64() * 1e3 / f64::from(o.ticks);
        Ok(FloorReport {
            clients: o.clients,
            ticks: o.ticks,
            server_user_ms_per_tick: per_tick(su),
            server_sys_ms_per_tick: per_tick(ss),
            clients_user_ms_per_tick: per_tick(cu1.saturating_sub(cu0)),
            clients_sys_ms_per_tick: per_tick(cs1.saturating_sub(cs0)),
            sends_per_tick: sends as f64 / f64::from(o.ticks),
            reads_per_tick: reads as f64 / f64::from(o.ticks),
            sends_blocked: blocked,
            wall_seconds: wall.as_secs_f64(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_due_client_gets_one_message_a_tick_and_answers() {
        let o = FloorOptions {
            clients: 30,
            ticks: 30,
            ..FloorOptions::default()
        };
        let r = run(&o).expect("a small loopback session runs");
        // 30 clients every 3 ticks: 10 sends a tick, none refused.
        assert_eq!(r.sends_per_tick, 10.0, "{r:?}");
        assert_eq!(r.sends_blocked, 0, "{r:?}");
        // The replies come back (some of the last ticks' after the loop ends).
        assert!(r.reads_per_tick > 5.0 && r.reads_per_tick <= 10.5, "{r:?}");
        assert!(r.server_sys_ms_per_tick >= 0.0 && r.wall_seconds >= 0.4, "{r:?}");
    }

    #[test]
    fn bad_options_are_refused_before_any_socket_opens() {
        for (o, what) in [
            (
                FloorOptions {
                    clients: 0,
                    ..FloorOptions::default()
                },
                "clients",
            ),
            (
                FloorOptions {
                    interval_ticks: 0,
                    ..FloorOptions::default()
                },
                "interval (ticks)",
            ),
            (
                FloorOptions {
                    reply_after_percent: 101,
                    ..FloorOptions::default()
                },
                "reply after (percent)",
            ),
        ] {
            match run(&o) {
                Err(FloorError::OutOfRange { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: expected OutOfRange, got {other:?}"),
            }
        }
    }
}
