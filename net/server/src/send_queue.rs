//! A client's send queue: the tick thread puts messages in without blocking, the
//! connection task takes them out; bounded, with one sender and one receiver.
//!
//! It replaces `tokio::sync::mpsc`, whose bounded channel allocates its slots in blocks of
//! 32 and keeps up to two such blocks: 3.1 KB of heap per client with 1,000 clients
//! (heaptrack), where this queue keeps about 0.3 KB (its shared part, and a buffer as deep
//! as the queue has been). The queue is a mutex that the two sides take for a push or a
//! pop, never across an await; the receiver leaves its waker under it when it finds the
//! queue empty, and the push that finds the waker there takes it and wakes it. (A tokio
//! `Notify` did the waking before: its permit and waiter list cost more atomics a message,
//! and polling it was about 3 % of the server's CPU with 1,000 bots.)

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// Why `try_send` handed the message back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The queue holds its maximum: the message was not queued.
    Full(T),
    /// The receiver is gone: nothing will be sent on this queue again.
    Closed(T),
}

struct State<T> {
    messages: VecDeque<T>,
    sender_alive: bool,
    receiver_alive: bool,
    /// The receiver's waker, while it waits on an empty queue.
    receiver_waker: Option<Waker>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    messages_max: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock leaves the queue consistent (every critical
        // section is a single push, pop or flag write), so a poisoned lock is taken as is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The tick thread's end.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("messages_max", &self.shared.messages_max)
            .finish_non_exhaustive()
    }
}

/// The connection task's end.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A queue that holds at most `messages_max` messages (at least 1).
pub fn channel<T>(messages_max: usize) -> (Sender<T>, Receiver<T>) {
    assert!(messages_max > 0, "a send queue holds at least one message");
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            messages: VecDeque::new(),
            sender_alive: true,
            receiver_alive: true,
            receiver_waker: None,
        }),
        messages_max,
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl<T> Sender<T> {
    /// Queues `message` unless the queue is full or its receiver is gone, and answers how
    /// many messages the queue then holds (taken under the same lock as the push); never
    /// blocks beyond the other side's push or pop.
    pub fn try_send(&self, message: T) -> Result<usize, TrySendError<T>> {
        let (depth, waiting) = {
            let mut s = self.shared.lock();
            if !s.receiver_alive {
                return Err(TrySendError::Closed(message));
            }
            if s.messages.len() >= self.shared.messages_max {
                return Err(TrySendError::Full(message));
            }
            s.messages.push_back(message);
            (s.messages.len(), s.receiver_waker.take())
        };
        // Woken outside the lock. A receiver that has not registered yet will find the
        // message under the lock before it would wait, so no wake is lost.
        if let Some(w) = waiting {
            w.wake();
        }
        Ok(depth)
    }

    /// Messages queued and not yet taken.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.lock().messages.len()
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waiting = {
            let mut s = self.shared.lock();
            s.sender_alive = false;
            s.receiver_waker.take()
        };
        if let Some(w) = waiting {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// The next message; `None` once the sender is gone and the queue is empty. Cancel
    /// safe: a message is taken only by the call that returns it.
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| {
            let mut s = self.shared.lock();
            if let Some(m) = s.messages.pop_front() {
                return Poll::Ready(Some(m));
            }
            if !s.sender_alive {
                return Poll::Ready(None);
            }
            match &s.receiver_waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => s.receiver_waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.receiver_alive = false;
        s.receiver_waker = None;
        // What was queued will never be sent: free it now, not with the sender.
        s.messages = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_come_out_in_order_and_a_full_queue_hands_the_message_back() {
        let (tx, mut rx) = channel(2);
        assert_eq!(tx.try_send(1), Ok(1));
        assert_eq!(tx.try_send(2), Ok(2));
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        assert_eq!(tx.len(), 2);
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(tx.try_send(4), Ok(2));
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.recv().await, Some(4));
        assert_eq!(tx.len(), 0);
    }

    #[tokio::test]
    async fn the_receiver_drains_then_sees_the_sender_gone() {
        let (tx, mut rx) = channel(4);
        tx.try_send("a").unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some("a"));
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_when_the_sender_goes() {
        let (tx, mut rx) = channel::<u32>(4);
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(tx);
        });
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await;
        assert_eq!(got, Ok(None), "the sender's drop wakes the receiver");
        dropper.join().unwrap();
    }

    #[test]
    fn a_queue_without_its_receiver_is_closed() {
        let (tx, rx) = channel(4);
        tx.try_send(1).unwrap();
        drop(rx);
        assert_eq!(tx.try_send(2), Err(TrySendError::Closed(2)));
        assert_eq!(tx.len(), 0, "what was queued is freed with the receiver");
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_by_a_send_from_another_thread() {
        let (tx, mut rx) = channel(16);
        let sender = std::thread::spawn(move || {
            for i in 0..1_000u32 {
                // The receiver keeps up: a full queue is retried, never lost.
                let mut m = i;
                while let Err(TrySendError::Full(back)) = tx.try_send(m) {
                    m = back;
                    std::thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while let Some(m) = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
            .await
            .expect("a send wakes the receiver")
        {
            got.push(m);
        }
        sender.join().unwrap();
        assert_eq!(got, (0..1_000).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_cancelled_recv_loses_no_message() {
        let (tx, mut rx) = channel(4);
        // A recv that is waiting and then dropped, as `select!` drops the losing branch.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), rx.recv()).await;
        assert!(waited.is_err());
        tx.try_send(7).unwrap();
        assert_eq!(rx.recv().await, Some(7));
    }
}
