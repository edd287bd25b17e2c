//! Marks a helper thread (the recording's writer, the checkpoint prefault, the flusher)
//! as batch work for the scheduler, so waking it never preempts the tick thread.
//!
//! The tick thread is pinned to its CPU, so a thread it wakes is placed on that CPU and,
//! as a fair-share thread that has slept, runs at once in its place. The recording's
//! writer woken with a checkpoint then compressed it while the tick thread waited: the
//! channel send that woke it took 2-5 ms in four of seven checkpoint ticks at 1,000 bots,
//! the checkpoint seconds' loop p99 5.95 ms against 3.90 for the others. A `SCHED_BATCH`
//! thread keeps its fair share of the CPU but waits for the running thread's turn to end.

/// Makes the calling thread `SCHED_BATCH` (Linux; elsewhere nothing). A refusal is logged
/// and changes nothing else: the thread then only runs as before.
pub(crate) fn mark_current_thread_batch() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sets the calling thread's own policy, with a valid parameter.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if r != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_BATCH refused");
        }
    }
}

/// The calling thread's scheduling policy (Linux), for tests.
#[cfg(all(test, target_os = "linux"))]
fn current_policy() -> i32 {
    // SAFETY: reads the calling thread's own policy.
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_marked_thread_is_batch_and_others_are_not() {
        let marked = std::thread::spawn(|| {
            mark_current_thread_batch();
            current_policy()
        })
        .join()
        .unwrap();
        assert_eq!(marked, libc::SCHED_BATCH);
        let other = std::thread::spawn(current_policy).join().unwrap();
        assert_eq!(other, libc::SCHED_OTHER);
    }
}
