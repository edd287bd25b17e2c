//! A persistent pool of shard worker threads that runs one job on every shard and waits.
//!
//! The kernel's output never depends on scheduling: each job writes only the data its
//! shard index owns, and the caller waits for every shard before reading anything.
//! With one shard the job runs inline on the caller's thread and no thread exists.
//!
//! A tick hands the pool several short jobs (grid, boids, hashes and snapshots), so a
//! hand-off must cost far less than a futex wake-up and a reschedule (tens of
//! microseconds). Workers therefore spin on an atomic generation counter for a bounded
//! number of rounds after each job and only then park on a condition variable; the
//! caller likewise spins on the count of pending shards before it parks. The bound is a
//! count of spin rounds, not a time, because the kernel reads no clock.

use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

/// Most shards a pool may run.
pub const SHARD_COUNT_MAX: usize = 64;

/// Spin rounds a waiting thread makes before it parks, one `spin_loop` hint each. On this
/// project's machines that is roughly 100 us: it covers the gaps between the jobs of
/// one tick, but a worker idle between the ticks of a live server soon parks.
const SPIN_ROUNDS_MAX: u32 = 1 << 13;

/// The spin bound in force (`set_spin_rounds`): process-wide, because it is a fact about
/// how many threads share the machine's cores, not about any one world.
static SPIN_ROUNDS: AtomicU32 = AtomicU32::new(SPIN_ROUNDS_MAX);

/// Sets how many rounds every pool's waiting threads spin before they park (at most
/// `SPIN_ROUNDS_MAX`; 0: park at once). Spinning pays only when each shard has a core of
/// its own: a process that runs several multi-shard worlds at once on fewer cores (the
/// simulator, verifying at many shard counts) turns it off, or the spinning threads take
/// the very cores the threads they wait for need. Scheduling only: no result changes.
pub fn set_spin_rounds(rounds: u32) {
    SPIN_ROUNDS.store(rounds.min(SPIN_ROUNDS_MAX), Ordering::Relaxed);
}

type Job = dyn Fn(usize) + Sync;

/// A job pointer with its lifetime erased; `ShardPool::run` guarantees it outlives every use.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the pointee is `Sync`, and `run` keeps it alive until every worker is done with it.
unsafe impl Send for JobPtr {}

/// What the lock guards: the job, and who is parked.
struct Parked {
    job: Option<JobPtr>,
    /// Workers parked on `start`.
    workers_parked: usize,
    /// The caller is parked on `done`.
    caller_parked: bool,
}

struct Shared {
    /// Bumped (under the lock) each time a job is published, and once at shutdown.
    generation: AtomicU64,
    /// Workers that have not finished the current job.
    pending: AtomicUsize,
    /// Set by `rest`, cleared by the next `run`: idle workers park at once instead of
    /// spinning out their bound.
    resting: AtomicBool,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    parked: Mutex<Parked>,
    start: Condvar,
    done: Condvar,
}

fn lock(m: &Mutex<Parked>) -> MutexGuard<'_, Parked> {
    // Jobs run outside the lock and panics are caught, so poisoning carries no broken state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spins until `ready()` or the spin bound; returns whether `ready()` held.
#[inline]
fn spin_until(ready: impl Fn() -> bool) -> bool {
    for _ in 0..SPIN_ROUNDS.load(Ordering::Relaxed) {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    ready()
}

/// Worker threads for shards `1..shard_count`; shard 0 runs on the caller.
pub struct ShardPool {
    shard_count: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ShardPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardPool")
            .field("shard_count", &self.shard_count)
            .finish()
    }
}

impl ShardPool {
    /// Starts `shard_count - 1` worker threads (clamped to `1..=SHARD_COUNT_MAX`).
    pub fn new(shard_count: usize) -> ShardPool {
        let shard_count = shard_count.clamp(1, SHARD_COUNT_MAX);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            resting: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            parked: Mutex::new(Parked {
                job: None,
                workers_parked: 0,
                caller_parked: false,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
        });
        let workers = (1..shard_count)
            .map(|shard| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("migratory-shard-{shard}"))
                    .spawn(move || worker(&shared, shard))
                    .expect("spawning a shard worker thread")
            })
            .collect();
        ShardPool {
            shard_count,
            shared,
            workers,
        }
    }

    /// Pins each shard's thread to its own CPU — shard `s` to the `s`-th CPU (wrapping)
    /// of those the calling thread could run on when the process first pinned — including
    /// the caller, which runs shard 0: call it from the thread that will step. Returns the
    /// CPU of each shard.
    ///
    /// Why: on the 2-vCPU VMs this project runs on, a thread that slept a while (as a
    /// server's tick thread does between ticks) is often woken on the CPU of the worker it
    /// then hands jobs to, and the two spin against each other on one CPU for the whole
    /// tick: at 50,000 boids and 60 Hz pacing a 2-shard step took 5.0 ms instead of 1.8
    /// (`headless` with a 15 ms sleep between ticks). Pinned, that cannot happen. The
    /// output never depends on where threads run. With one shard nothing is pinned.
    pub fn pin_to_cpus(&self) -> Result<Vec<usize>, PinError> {
        if self.shard_count == 1 {
            return Ok(vec![]);
        }
        // The CPUs the process started with, read once: a later pool's caller may already
        // be pinned to one CPU by an earlier pool, and must not squeeze its shards onto it.
        static STARTING_CPUS: OnceLock<Result<Vec<usize>, PinError>> = OnceLock::new();
        let allowed = STARTING_CPUS.get_or_init(affinity::allowed_cpus).clone()?;
        let cpus: Vec<usize> = (0..self.shard_count)
            .map(|s| allowed[s % allowed.len()])
            .collect();
        let failed = AtomicUsize::new(usize::MAX);
        self.run(&|s| {
            if affinity::pin_current_thread(cpus[s]).is_err() {
                failed.store(s, Ordering::Relaxed);
            }
        });
        match failed.load(Ordering::Relaxed) {
            usize::MAX => Ok(cpus),
            shard => Err(PinError::Failed {
                shard,
                cpu: cpus[shard],
            }),
        }
    }

    /// The number of shards jobs are split into.
    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// Runs `job(shard)` for every shard in `0..shard_count` and returns when all are done.
    /// A panic in any shard is re-raised here after every shard has finished.
    pub fn run<F: Fn(usize) + Sync>(&self, job: &F) {
        if self.shard_count == 1 {
            job(0);
            return;
        }
        let s = &*self.shared;
        let job: &(dyn Fn(usize) + Sync + '_) = job;
        // SAFETY: we only erase the lifetime; this function does not return until `pending`
        // is back to zero, i.e. until no worker holds the pointer any more.
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Job>(job as *const _)
        });
        {
            let mut p = lock(&s.parked);
            s.resting.store(false, Ordering::Relaxed);
            p.job = Some(ptr);
            s.pending.store(self.shard_count - 1, Ordering::Release);
            s.panicked.store(false, Ordering::Relaxed);
            // Under the lock, so a worker that is about to park either sees the new
            // generation or is counted in `workers_parked` and woken here.
            s.generation.fetch_add(1, Ordering::Release);
            if p.workers_parked > 0 {
                s.start.notify_all();
            }
        }
        let mine = panic::catch_unwind(AssertUnwindSafe(|| job(0)));
        if !spin_until(|| s.pending.load(Ordering::Acquire) == 0) {
            let mut p = lock(&s.parked);
            p.caller_parked = true;
            while s.pending.load(Ordering::Acquire) > 0 {
                p = s.done.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            p.caller_parked = false;
        }
        // Every worker is done with the job, so the pointer may dangle from here on; clear
        // it all the same so nothing can ever read a stale one.
        lock(&s.parked).job = None;
        let theirs = s.panicked.load(Ordering::Acquire);
        if let Err(payload) = mine {
            panic::resume_unwind(payload);
        }
        assert!(!theirs, "a shard worker panicked");
    }

    /// Tells the workers no job comes soon: those spinning for the next one park now
    /// instead of at the end of their spin bound (the next `run` wakes them). A live
    /// server calls it after each step, whose jobs are over in a few milliseconds while
    /// the next step is 16.7 ms away: the spin after the last job was about 100 us of a
    /// CPU a tick that the bots, the I/O and the other threads wanted. Scheduling only.
    pub fn rest(&self) {
        self.shared.resting.store(true, Ordering::Relaxed);
    }
}

/// Why shard threads could not be pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error("pinning threads to CPUs is not supported on this platform")]
    Unsupported,
    #[error("the CPUs this thread may run on could not be read: {0}")]
    AllowedCpus(String),
    #[error("shard {shard} could not be pinned to CPU {cpu}")]
    Failed { shard: usize, cpu: usize },
}

#[cfg(target_os = "linux")]
mod affinity {
    use super::PinError;

    /// The CPUs the calling thread may run on, ascending.
    pub fn allowed_cpus() -> Result<Vec<usize>, PinError> {
        // SAFETY: `cpu_set_t` is plain data; the kernel writes at most its size.
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Err(PinError::AllowedCpus(std::io::Error::last_os_error().to_string()));
            }
            set
        };
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        if cpus.is_empty() {
            return Err(PinError::AllowedCpus("the set is empty".into()));
        }
        Ok(cpus)
    }

    /// Restricts the calling thread to `cpu`.
    pub fn pin_current_thread(cpu: usize) -> Result<(), ()> {
        // SAFETY: as above; `cpu` came from `allowed_cpus`, so it is below CPU_SETSIZE.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod affinity {
    use super::PinError;

    pub fn allowed_cpus() -> Result<Vec<usize>, PinError> {
        Err(PinError::Unsupported)
    }

    pub fn pin_current_thread(_cpu: usize) -> Result<(), ()> {
        Err(())
    }
}

fn worker(s: &Shared, shard: usize) {
    let mut seen = 0u64;
    loop {
        // Spin until the next job or a `rest`; park (rechecking under the lock) if no job came.
        spin_until(|| s.generation.load(Ordering::Acquire) != seen || s.resting.load(Ordering::Relaxed));
        if s.generation.load(Ordering::Acquire) == seen {
            let mut p = lock(&s.parked);
            p.workers_parked += 1;
            while s.generation.load(Ordering::Acquire) == seen {
                p = s.start.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            p.workers_parked -= 1;
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // The caller publishes the next generation only after this worker has finished
        // the current one, so the generation moved by exactly one and the job under the
        // lock is the one it announced.
        seen = s.generation.load(Ordering::Acquire);
        let job = lock(&s.parked).job;
        let ok = match job {
            // SAFETY: `run` keeps the job alive until this worker decrements `pending`.
            Some(JobPtr(p)) => panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*p)(shard) })).is_ok(),
            None => true,
        };
        if !ok {
            s.panicked.store(true, Ordering::Release);
        }
        if s.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last one out wakes the caller if it has parked. The caller checks
            // `pending` under the lock after setting `caller_parked`, so taking the lock
            // here cannot miss it.
            let p = lock(&s.parked);
            if p.caller_parked {
                s.done.notify_one();
            }
        }
    }
}

impl Drop for ShardPool {
    fn drop(&mut self) {
        {
            let _p = lock(&self.shared.parked);
            self.shared.shutdown.store(true, Ordering::Release);
            self.shared.generation.fetch_add(1, Ordering::Release);
            self.shared.start.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A slice that several shards write at once, each at indices no other shard touches.
pub struct SharedSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<T> std::fmt::Debug for SharedSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSlice").field("len", &self.len).finish()
    }
}

// SAFETY: access goes through the unsafe accessors, whose callers promise disjointness.
unsafe impl<T: Send> Sync for SharedSlice<'_, T> {}
unsafe impl<T: Send> Send for SharedSlice<'_, T> {}

impl<'a, T> SharedSlice<'a, T> {
    /// Wraps a slice for the duration of one pool job.
    pub fn new(slice: &'a mut [T]) -> Self {
        SharedSlice {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _borrow: PhantomData,
        }
    }

    /// The element at `index`, mutably.
    ///
    /// # Safety
    /// No other reference to this element may exist while the returned one lives: each
    /// index must belong to exactly one shard.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self, index: usize) -> &mut T {
        assert!(index < self.len, "shared slice index {index} out of {}", self.len);
        // SAFETY: in bounds, and the caller guarantees exclusive access.
        unsafe { &mut *self.ptr.add(index) }
    }

    /// The sub-slice `range`, mutably.
    ///
    /// # Safety
    /// The range must not overlap any other range or element handed out concurrently.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds, and the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contiguous part of `0..len` that `shard` of `shard_count` owns.
    fn shard_range(len: usize, shard: usize, shard_count: usize) -> std::ops::Range<usize> {
        (len * shard / shard_count)..(len * (shard + 1) / shard_count)
    }
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_shard_runs_once_per_job() {
        for n in [1, 2, 3, 7] {
            let pool = ShardPool::new(n);
            let mut out = vec![0usize; 100];
            for round in 1..=20 {
                let shared = SharedSlice::new(&mut out);
                pool.run(&|s| {
                    // SAFETY: shard ranges are disjoint.
                    for v in unsafe { shared.range_mut(shard_range(100, s, n)) } {
                        *v += s + 1;
                    }
                });
                let _ = round;
            }
            for (i, v) in out.iter().enumerate() {
                let owner = (0..n).find(|&s| shard_range(100, s, n).contains(&i)).unwrap();
                assert_eq!(*v, 20 * (owner + 1));
            }
        }
    }

    /// Resting between jobs loses no wake-up: whether a worker is still finishing, spinning
    /// or parked when the next job comes (no pause, a short one, a longer one), every
    /// shard runs every job once.
    #[test]
    fn resting_workers_still_run_every_job() {
        for n in [2, 3] {
            let pool = ShardPool::new(n);
            let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for round in 0..300u64 {
                pool.run(&|s| {
                    runs[s].fetch_add(1, Ordering::Relaxed);
                });
                pool.rest();
                match round % 3 {
                    0 => {}
                    1 => std::thread::yield_now(),
                    // A test's pause, so a worker can get to parking: not the kernel waiting.
                    #[allow(clippy::disallowed_methods)]
                    _ => std::thread::sleep(std::time::Duration::from_micros(200)),
                }
            }
            for (s, r) in runs.iter().enumerate() {
                assert_eq!(r.load(Ordering::Relaxed), 300, "shard {s} of {n}");
            }
        }
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = ShardPool::new(3);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|s| {
                if s == 2 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(&|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 3);
    }

    /// Pinning restricts every shard's thread, the caller's included, to the CPU it
    /// reports (run on a thread of its own, so the test's thread keeps its affinity).
    #[cfg(target_os = "linux")]
    #[test]
    fn pinning_puts_each_shard_on_its_cpu() {
        std::thread::spawn(|| {
            let allowed = super::affinity::allowed_cpus().unwrap();
            let pool = ShardPool::new(3);
            let cpus = pool.pin_to_cpus().unwrap();
            let expected: Vec<usize> = (0..3).map(|s| allowed[s % allowed.len()]).collect();
            assert_eq!(cpus, expected);
            let seen: Vec<Mutex<Vec<usize>>> = (0..3).map(|_| Mutex::new(vec![])).collect();
            pool.run(&|s| *seen[s].lock().unwrap() = super::affinity::allowed_cpus().unwrap());
            for (s, cpus_of_shard) in seen.iter().enumerate() {
                assert_eq!(*cpus_of_shard.lock().unwrap(), vec![expected[s]], "shard {s}");
            }
            // A second pool pinned from this (now pinned) thread spreads over the same CPUs.
            let again = ShardPool::new(3);
            assert_eq!(again.pin_to_cpus().unwrap(), expected);
            // One shard pins nothing: the caller keeps every CPU it had.
            let before = super::affinity::allowed_cpus().unwrap();
            assert_eq!(ShardPool::new(1).pin_to_cpus().unwrap(), Vec::<usize>::new());
            assert_eq!(super::affinity::allowed_cpus().unwrap(), before);
        })
        .join()
        .unwrap();
    }
}
