//! A future that is polled again only when its own wake-up came: for a connection's
//! rarely ready branches (a close request, the server's shutdown), raced against its
//! queue and socket on every wake-up of the task.
//!
//! A `select!` polls every pending branch each time any of them wakes the task. A waiting
//! tokio `Notify` (behind a close request and a `watch`) takes its waiter list's lock on
//! every such poll: with 1,000 bots that was about 3.5 % of the server's CPU samples
//! (`NotifiedProject::poll_notified` and `Notified::poll`), for futures that resolve once
//! in a connection's life. `Gated` hands the inner future a waker of its own, and polls it
//! only after that waker fired (or the task's waker changed); otherwise a poll costs one
//! atomic swap.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// What the inner future's waker does: mark the gate open, then wake the task.
struct Gate {
    open: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.open.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// `inner`, polled only when its own waker fired since its last poll (or on the first
/// poll, and whenever the task's waker changes).
pub struct Gated<F> {
    inner: Pin<Box<F>>,
    gate: Arc<Gate>,
    inner_waker: Waker,
    /// The task waker last left with the gate.
    task_waker: Option<Waker>,
}

impl<F: Future> Gated<F> {
    pub fn new(inner: F) -> Gated<F> {
        let gate = Arc::new(Gate {
            open: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Gated {
            inner: Box::pin(inner),
            inner_waker: Waker::from(gate.clone()),
            gate,
            task_waker: None,
        }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if !this.task_waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            // A new task waker: leave it with the gate, and poll the inner future, which
            // may have fired towards the old one.
            this.gate.task.register(cx.waker());
            this.task_waker = Some(cx.waker().clone());
            this.gate.open.store(true, Ordering::Release);
        }
        // Closed before the poll, so a wake-up during it opens the gate for the next one.
        if !this.gate.open.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.inner_waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A future that counts its polls and is ready once `ready` is set, waking the last
    /// waker it was polled with when `fire` is called.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    struct CountingWake(AtomicUsize);
    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_inner_future_is_polled_only_after_its_own_wake_up() {
        let (polls, ready) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut gated = Gated::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        let task = Arc::new(CountingWake(AtomicUsize::new(0)));
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        let mut gated = Pin::new(&mut gated);
        // The first poll reaches the inner future; the task's other wake-ups do not.
        assert!(gated.as_mut().poll(&mut cx).is_pending());
        for _ in 0..5 {
            assert!(gated.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // Its own wake-up wakes the task and lets the next poll through.
        ready.store(true, Ordering::SeqCst);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(gated.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_new_task_waker_lets_the_inner_future_be_polled() {
        let (polls, ready) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let mut gated = Gated::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: Arc::new(std::sync::Mutex::new(None)),
        });
        let mut gated = Pin::new(&mut gated);
        let first = Waker::from(Arc::new(CountingWake(AtomicUsize::new(0))));
        assert!(gated.as_mut().poll(&mut Context::from_waker(&first)).is_pending());
        // Ready now, but nothing woke it: the same task's poll does not look.
        ready.store(true, Ordering::SeqCst);
        assert!(gated.as_mut().poll(&mut Context::from_waker(&first)).is_pending());
        // Another task's waker (the future moved): it looks again.
        let second = Waker::from(Arc::new(CountingWake(AtomicUsize::new(0))));
        assert!(gated.as_mut().poll(&mut Context::from_waker(&second)).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_notify_behind_the_gate_still_ends_a_select() {
        let notify = Arc::new(tokio::sync::Notify::new());
        let n = notify.clone();
        let mut gated = std::pin::pin!(Gated::new(async move { n.notified().await }));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let waker = tokio::spawn(async move {
            for i in 0..50 {
                tx.send(i).unwrap();
                tokio::task::yield_now().await;
            }
            notify.notify_one();
            // The sender stays alive, so only the gate can end the loop.
            std::future::pending::<()>().await;
        });
        let mut messages = 0;
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                tokio::select! {
                    biased;
                    () = &mut gated => break,
                    Some(_) = rx.recv() => messages += 1,
                }
            }
        })
        .await;
        waker.abort();
        assert!(
            ended.is_ok(),
            "the notify never got through the gate ({messages} messages)"
        );
        assert!(messages <= 50);
    }
}
