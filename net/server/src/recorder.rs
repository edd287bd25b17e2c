//! The session recording, written on a thread of its own: the tick thread hands each tick's
//! inputs and roots (and, when one is due, the world's checkpoint bytes) to the writer
//! thread and goes on; encoding, compressing and writing happen there.
//!
//! A tick with a checkpoint is handed over only when its snapshots are out (`hand_over`):
//! waking the writer lets it run at once on the tick thread's CPU (the tick thread is
//! pinned, and a thread that has slept is placed where it was woken and preempts), so a
//! wake-up in the middle of the tick delayed the snapshots by the writer's work, there
//! compacting 4.4 MB: the send took 2-5 ms in four checkpoints of seven at 1,000 bots.
//! Other ticks go at once: with every tick held to the end, the loop's median rose from
//! 1.74-1.84 to 2.46-3.36 ms (`hold_cpu.sh`, recorded, 3 pairs). Why was not found, and
//! that median also moves between about 1.7 and 3 ms from run to run of one binary; held
//! only at checkpoints it stayed (1.71 and 1.74 against 1.78 and 1.71 ms).
//!
//! On the tick thread, a second's block of 1,000 clients' inputs took 2 ms to encode and
//! compress, and a checkpoint 18 ms (longer than a tick at 60 Hz); what stays on it is
//! archiving the world into the checkpoint's bytes (461 us for 1,000 clients in
//! `headless 600 2 1000 5000 2`, over the streams' own views). Here the raw checkpoint is
//! compacted (`UnsealedCheckpoint::compact`: `compact_checkpoint`'s 5.6 ms at 1,000
//! clients less the 1.4 ms checksum check it skips) without ever being hashed, and zstd
//! then takes 1.2 ms instead of 14.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use migratory_kernel::{
    save_checkpoint_unsealed, save_checkpoint_unsealed_into, TickInputs, UnsealedCheckpoint, World,
};
use migratory_record::{RecordingWriter, TickRoots, WriterOptions};

use crate::metrics::Metrics;

/// Ticks the tick thread may run ahead of the writer (10 s at 60 Hz) before it waits: a
/// disk that stalls for longer stalls the world, rather than the recording losing ticks.
pub const RECORD_QUEUE_MAX_TICKS: usize = 600;

/// How many ticks before a checkpoint a helper thread starts touching the pages of the
/// buffer it will be archived into (half a second at 60 Hz; at 1,000 clients that is
/// about 1,000 page faults, which took the tick thread about 2 ms when it met them).
const PREFAULT_LEAD_TICKS: u32 = 30;

type Writer = RecordingWriter<BufWriter<File>>;

/// Why the recording stopped (the world goes on without it).
#[derive(Clone, Debug, thiserror::Error)]
pub enum RecordError {
    #[error("writing the recording: {0}")]
    Write(Arc<std::io::Error>),
    #[error("the recording writer stopped")]
    WriterStopped,
    #[error("the recording writer panicked")]
    WriterPanicked,
}

enum Job {
    Tick {
        inputs: TickInputs,
        roots: TickRoots,
        /// Compacted on the writer thread.
        checkpoint: Option<UnsealedCheckpoint>,
    },
    /// A bookmark of a tick handed over already.
    Bookmark { tick: u32, client: u32, note: String },
    /// The last recorded tick and the world's checkpoint at it; the writer decides whether
    /// the recording still needs it (and only then seals it).
    Finish {
        tick: u32,
        checkpoint: UnsealedCheckpoint,
    },
}

/// The session recording and the thread writing it.
pub struct Recorder {
    pub path: PathBuf,
    options: WriterOptions,
    /// None once the recording has stopped (finished, or its writer failed).
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// The writer thread's error, if it stopped on one.
    error: Arc<Mutex<Option<RecordError>>>,
    metrics: Arc<Metrics>,
    /// The buffer of the next checkpoint, being touched by a helper thread; and the bound
    /// the last checkpoint's buffer was reserved for (`buffer_bytes`), which sizes it.
    prefault: Option<JoinHandle<Vec<u8>>>,
    last_checkpoint_bytes: usize,
    /// A checkpoint's tick and the jobs after it in that tick, in order, until `hand_over`
    /// sends them.
    held: Vec<Job>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Starts the writer thread on a writer that has written its header.
    pub fn start(path: PathBuf, writer: Writer, metrics: Arc<Metrics>) -> std::io::Result<Recorder> {
        let options = writer.options().clone();
        let (tx, rx) = sync_channel(RECORD_QUEUE_MAX_TICKS);
        let error = Arc::new(Mutex::new(None));
        let thread = std::thread::Builder::new().name("migratory-record".into()).spawn({
            let (path, error, metrics) = (path.clone(), error.clone(), metrics.clone());
            move || {
                if let Err(e) = write_jobs(writer, rx, &metrics) {
                    tracing::error!(path = %path.display(), error = %e, "recording write failed; recording stopped");
                    metrics.recording_errors_total.fetch_add(1, Relaxed);
                    *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(RecordError::Write(Arc::new(e)));
                }
            }
        })?;
        Ok(Recorder {
            path,
            options,
            tx: Some(tx),
            thread: Some(thread),
            error,
            metrics,
            prefault: None,
            last_checkpoint_bytes: 0,
            held: Vec::new(),
        })
    }

    /// Hands over one tick (the world after it, for a due checkpoint); true when it took
    /// a checkpoint, which is held for `hand_over`. An error means the writer has stopped;
    /// the recording ends there and the error says why.
    pub fn record(&mut self, inputs: &TickInputs, world: &World) -> Result<bool, RecordError> {
        if self.tx.is_none() {
            return Ok(false);
        }
        let out = world.output();
        self.prefault_ahead(out.tick);
        let checkpoint = match self.options.checkpoint_due(out.tick) {
            true => {
                self.metrics.recording_checkpoints_total.fetch_add(1, Relaxed);
                let checkpoint = save_checkpoint_apart(world, self.prefaulted());
                self.last_checkpoint_bytes = checkpoint.buffer_bytes();
                Some(checkpoint)
            }
            false => None,
        };
        let checkpointed = checkpoint.is_some();
        let job = Job::Tick {
            inputs: inputs.clone(),
            roots: TickRoots::of(out),
            checkpoint,
        };
        self.send(job, checkpointed)?;
        Ok(checkpointed)
    }

    /// Sends `job` now, or holds it for `hand_over` (`hold`, or behind a held job).
    fn send(&mut self, job: Job, hold: bool) -> Result<(), RecordError> {
        if hold || !self.held.is_empty() {
            self.held.push(job);
            return Ok(());
        }
        let Some(tx) = &self.tx else {
            return Err(RecordError::WriterStopped);
        };
        if tx.send(job).is_err() {
            self.tx = None;
            return Err(self.writer_error());
        }
        Ok(())
    }

    /// Whether jobs wait for `hand_over`.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Sends the jobs held since the last call (a checkpoint's tick and what followed it)
    /// to the writer, waking it. Called when the tick's work is done (see the module's
    /// doc). An error means the writer has stopped; the recording ends there and the error
    /// says why.
    pub fn hand_over(&mut self) -> Result<(), RecordError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let Some(tx) = &self.tx else {
            self.held.clear();
            return Ok(());
        };
        let sent = self.held.drain(..).all(|job| tx.send(job).is_ok());
        if !sent {
            self.tx = None;
            return Err(self.writer_error());
        }
        Ok(())
    }

    /// Starts touching the pages of the next checkpoint's buffer when one is due
    /// `PREFAULT_LEAD_TICKS` after `tick`. Archived into fresh memory, a 1,000-client
    /// checkpoint took the tick thread 2.2-2.6 ms, about 1,000 of its page faults, where
    /// the archiving itself takes 0.5 ms. The buffer lives from here until the writer
    /// has compacted it, half a second in every `checkpoint_interval_ticks`, rather than
    /// for good (8 KB a client).
    fn prefault_ahead(&mut self, tick: u32) {
        let due = self
            .options
            .checkpoint_due(tick.wrapping_add(PREFAULT_LEAD_TICKS));
        if !due || self.prefault.is_some() || self.last_checkpoint_bytes == 0 {
            return;
        }
        // Room for the streams to have grown by an eighth since the last checkpoint.
        let bytes = self.last_checkpoint_bytes + self.last_checkpoint_bytes / 8;
        let spawned = std::thread::Builder::new()
            .name("migratory-prefault".into())
            .spawn(move || {
                // Written, not `vec![0; bytes]`: calloc's zeroed pages are mapped only when
                // first written, and faulting them in is what this thread is for.
                #[allow(clippy::slow_vector_initialization)]
                let buffer = {
                    let mut buffer = Vec::with_capacity(bytes);
                    buffer.resize(bytes, 0);
                    buffer
                };
                buffer
            });
        self.prefault = spawned.ok();
    }

    /// The touched buffer for this checkpoint, when its helper has finished (else a fresh
    /// one: the tick never waits for the helper).
    fn prefaulted(&mut self) -> Vec<u8> {
        match self.prefault.take() {
            Some(helper) if helper.is_finished() => helper.join().unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Hands over a bookmark of `tick` (handed over already, or held). An error means the
    /// writer has stopped.
    pub fn bookmark(&mut self, tick: u32, client: u32, note: String) -> Result<(), RecordError> {
        if self.tx.is_none() {
            return Err(RecordError::WriterStopped);
        }
        self.send(Job::Bookmark { tick, client, note }, false)
    }

    /// Ends the recording with a checkpoint of `world` (so the next session of this world
    /// resumes without stepping), and waits for the writer. The error of a writer that
    /// failed earlier was returned by `record` already.
    pub fn finish(&mut self, world: &World) -> Result<(), RecordError> {
        self.hand_over()?;
        let Some(tx) = self.tx.take() else {
            self.join();
            return Ok(());
        };
        let job = Job::Finish {
            tick: world.tick(),
            checkpoint: save_checkpoint_unsealed(world),
        };
        let sent = tx.send(job).is_ok();
        drop(tx);
        self.join();
        let error = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (sent, error) {
            (_, Some(e)) => Err(e),
            (false, None) => Err(RecordError::WriterStopped),
            (true, None) => Ok(()),
        }
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(RecordError::WriterPanicked);
            }
        }
    }

    fn writer_error(&mut self) -> RecordError {
        self.join();
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or(RecordError::WriterStopped)
    }
}

/// The writer thread: every job in order until `Finish`. A closed channel without it (the
/// tick thread went away) leaves the recording as a crash would: complete records only.
fn write_jobs(mut writer: Writer, rx: Receiver<Job>, metrics: &Metrics) -> std::io::Result<()> {
    for job in rx {
        match job {
            Job::Tick {
                inputs,
                roots,
                checkpoint,
            } => {
                // Compacted here, so the writer (which stores checkpoints compact) takes them
                // as they are.
                let checkpoint = checkpoint.map(compact).transpose()?;
                writer.record_tick_parts(inputs, &roots, checkpoint.as_deref())?
            }
            // A note the format cannot keep is cut short by the protocol already (200 of
            // 280 bytes); should the writer still refuse one, the recording goes on.
            Job::Bookmark { tick, client, note } => match writer.bookmark(tick, client, &note) {
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                    tracing::warn!(tick, client, error = %e, "bookmark not recorded");
                }
                r => r?,
            },
            Job::Finish { tick, checkpoint } => {
                let checkpoint = match writer.final_checkpoint_needed(tick) {
                    true => Some(compact(checkpoint)?),
                    false => None,
                };
                writer.finish_with_checkpoint_bytes(tick, checkpoint.as_deref())?;
                return Ok(());
            }
        }
        metrics.recording_bytes.store(writer.bytes_written(), Relaxed);
    }
    Ok(())
}

/// A checkpoint's compact bytes (what the writer stores), never sealing the raw ones.
fn compact(checkpoint: UnsealedCheckpoint) -> std::io::Result<Vec<u8>> {
    checkpoint
        .compact()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `save_checkpoint_unsealed` on a thread of its own while the tick thread waits. The
/// blocks it builds (a few vectors of borrowed views; before they were archived in place,
/// a copy of every view and interest list) then live in that thread's heap, which holds
/// nothing else and goes back to the OS when they are freed. Built on the tick thread,
/// the copy's blocks were freed among the tick thread's longer-lived ones, and RSS rose in
/// steps at some checkpoints and stayed: 1,000 bots, 4-minute holds recorded, 1.44 /
/// 1.70 % drift on 2 shards and 0.93 % on 1; 0.009 % this way.
/// The price is one thread started every `checkpoint_interval_ticks`.
fn save_checkpoint_apart(world: &World, buffer: Vec<u8>) -> UnsealedCheckpoint {
    std::thread::scope(|s| s.spawn(|| save_checkpoint_unsealed_into(world, buffer)).join())
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `session-YYYYMMDD-HHMMSS-PID[-N].mrec`, never overwriting an existing file.
pub(crate) fn create_session_file(dir: &Path) -> std::io::Result<(PathBuf, File)> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let stamp = utc_stamp(secs);
    let pid = std::process::id();
    for n in 0..1000u32 {
        let name = if n == 0 {
            format!("session-{stamp}-{pid}.mrec")
        } else {
            format!("session-{stamp}-{pid}-{n}.mrec")
        };
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free recording file name"))
}

/// `YYYYMMDD-HHMMSS` in UTC from Unix seconds (civil-from-days, proleptic Gregorian).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use migratory_kernel::testkit::small_config;
    use migratory_kernel::Input;
    use migratory_record::Recording;

    /// A checkpoint's tick waits for `hand_over` and what follows it in that tick waits
    /// behind it; every other tick goes at once. The file then holds every tick with its
    /// roots, the checkpoints and the bookmarks in order.
    #[test]
    fn a_checkpoint_tick_is_held_until_handed_over() {
        let dir = std::env::temp_dir().join(format!("migratory-recorder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("held.mrec");
        let mut world = World::new(small_config(5, 300), 1).unwrap();
        let options = WriterOptions {
            checkpoint_interval_ticks: 4,
            ..WriterOptions::default()
        };
        let file = BufWriter::new(File::create(&path).unwrap());
        let writer = RecordingWriter::new(file, &world, 1, options).unwrap();
        let mut rec = Recorder::start(path.clone(), writer, Metrics::new(60)).unwrap();
        let mut roots = Vec::new();
        for tick in 1..=10u32 {
            let mut inputs = TickInputs::default();
            if tick == 1 {
                let name = "held".to_string();
                inputs.inputs.push(Input::Join { client: 7, name });
            }
            let out = world.step(&inputs);
            roots.push((out.tick, out.state_root, out.snapshots_root));
            let checkpointed = rec.record(&inputs, &world).unwrap();
            assert_eq!(checkpointed, tick % 4 == 0, "tick {tick}");
            if tick == 4 || tick == 5 {
                rec.bookmark(tick, 7, format!("at {tick}")).unwrap();
            }
            assert_eq!(rec.holding(), checkpointed, "tick {tick}");
            rec.hand_over().unwrap();
            assert!(!rec.holding());
        }
        rec.finish(&world).unwrap();
        let read = Recording::open(&path).unwrap();
        let stored: Vec<_> = read
            .ticks_from(1)
            .map(|t| t.map(|t| (t.tick, t.state_root, t.snapshots_root)).unwrap())
            .collect();
        assert_eq!(stored, roots);
        let checkpoints: Vec<u32> = read.checkpoints().map(|c| c.first_tick).collect();
        assert!(checkpoints.starts_with(&[4, 8]), "{checkpoints:?}");
        let bookmarks: Vec<(u32, String)> = read
            .bookmarks()
            .unwrap()
            .into_iter()
            .map(|b| (b.tick, b.note))
            .collect();
        assert_eq!(bookmarks, [(4, "at 4".to_string()), (5, "at 5".to_string())]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400 + 3661), "20000229-010101");
        assert_eq!(utc_stamp(1_764_686_096), "20251202-143456");
    }
}
