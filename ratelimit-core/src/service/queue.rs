//! The wait queue: where calls over their limit wait their turn instead of being refused.
//!
//! One line per store key (calls that spend from the same state wait in the same line),
//! ordered by tier priority, then arrival. Only the *head* of a line asks the store: it
//! sleeps on a timer until its refusal's `retry_after`, asks again, and once admitted leaves
//! and wakes the next waiter, who asks at once. A release of capacity for `k` calls therefore
//! wakes `k + 1` waiters (`k` admitted, one refused who sleeps until the new `retry_after`),
//! never the whole line. Every other waiter sleeps on its own [`Notify`], with its deadline
//! as its only timer. No polling. A refusal whose turn comes after the head's deadline ends
//! its wait at once, and a waiter that comes to the front before the line's turn waits for
//! it without asking the store (or leaves at once when it is past its own deadline). The
//! line's turn is that of the refused call's cost: it holds a waiter of that cost or more
//! (a larger call fits no sooner), and a smaller one asks the store, for a head that left
//! unadmitted (past its deadline, cancelled, displaced) may have been refused for a cost the
//! line no longer has.
//!
//! Places are bounded over every key (`max_queue_size`): an arrival finding the queue full
//! takes the place of the newest waiter of the lowest priority, if that priority is lower
//! than its own (the place is freed at that moment, not when the displaced waiter next
//! runs); otherwise it is refused. Either way the one left out gets
//! [`Error::QueueFull`](crate::Error::QueueFull).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics;
use crate::stats::QueueCounts;
use crate::sync::Mutex;

/// A waiter's place in its line: higher priority first, then arrival.
type Rank = (Reverse<i32>, u64);

/// What one waiter holds, with its two map entries (memory per waiter: BENCHMARKS.md, `queue`).
struct Slot {
    notify: Notify,
    /// Set (under the lock) when a higher-priority arrival took this waiter's place, which
    /// was freed then.
    displaced: AtomicBool,
}

#[derive(Default)]
struct Line {
    waiters: BTreeMap<Rank, Arc<Slot>>,
    /// When the head's last refusal said the budget admits a call again, and that call's
    /// cost: a call of a smaller cost may fit sooner.
    ready_at: Option<(Instant, u64)>,
}

#[derive(Default)]
struct State {
    lines: hashbrown::HashMap<Arc<str>, Line, foldhash::fast::RandomState>,
    /// Every waiter by (priority, newest first): the first entry is the one a
    /// higher-priority arrival displaces from a full queue.
    by_priority: BTreeMap<(i32, Reverse<u64>), Arc<str>>,
    next: u64,
}

/// The queue of one service.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    closed: AtomicBool,
    /// Wakes the callers waiting outside the line (`until_ready`) when the queue closes.
    closing: Notify,
    depth: AtomicU64,
    queued: AtomicU64,
    admitted: AtomicU64,
    timed_out: AtomicU64,
    full: AtomicU64,
    cancelled: AtomicU64,
}

/// How a wait ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    Admitted,
    TimedOut,
    /// A higher-priority arrival took the place.
    Displaced,
    /// Refused for another reason (shutdown, a store error).
    Refused,
}

impl Queue {
    /// Whether nobody waits on `key` (a new call may then ask the store before queueing).
    pub(crate) fn is_idle(&self, key: &str) -> bool {
        !self.state.lock().lines.contains_key(key)
    }

    /// Whether the queue was closed (the module shut down).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the queue: every waiter wakes (and ends with `NotInitialized`), and nobody
    /// joins after.
    pub(crate) fn close(&self) {
        let state = self.state.lock();
        self.closed.store(true, Ordering::Release);
        for line in state.lines.values() {
            for slot in line.waiters.values() {
                slot.notify.notify_one();
            }
        }
        self.closing.notify_waiters();
    }

    /// Sleeps until `until`, or until the queue closes: a call that waits outside the line
    /// (`until_ready`) ends with the shutdown as the line's waiters do.
    pub(crate) async fn sleep_unless_closed(&self, until: Instant) {
        let closing = self.closing.notified();
        let mut closing = std::pin::pin!(closing);
        // Registered before the check: a close between the two still wakes it.
        closing.as_mut().enable();
        if self.is_closed() {
            return;
        }
        let _ = tokio::time::timeout_at(until, closing).await;
    }

    /// Takes a place in `key`'s line, or `None` when the queue is full of waiters of this
    /// priority or higher.
    pub(crate) fn join(&self, key: &str, priority: i32, max: usize) -> Option<Turn<'_>> {
        let mut state = self.state.lock();
        if state.by_priority.len() >= max {
            let (&(lowest, _), _) = state.by_priority.first_key_value()?;
            if lowest >= priority {
                self.full.fetch_add(1, Ordering::Relaxed);
                metrics::full();
                return None;
            }
            let ((lowest, Reverse(seq)), victim) = state.by_priority.pop_first()?;
            // Its place is freed now, not when it next runs: the queue never holds more than
            // `max` places, even for an instant.
            if let Some(slot) = self.free(&mut state, &victim, (Reverse(lowest), seq)) {
                slot.displaced.store(true, Ordering::Release);
                slot.notify.notify_one();
            }
        }
        let seq = state.next;
        state.next += 1;
        let key: Arc<str> = match state.lines.get_key_value(key) {
            Some((k, _)) => Arc::clone(k),
            None => key.into(),
        };
        let slot = Arc::new(Slot {
            notify: Notify::new(),
            displaced: AtomicBool::new(false),
        });
        let rank = (Reverse(priority), seq);
        state
            .lines
            .entry(Arc::clone(&key))
            .or_default()
            .waiters
            .insert(rank, Arc::clone(&slot));
        state
            .by_priority
            .insert((priority, Reverse(seq)), Arc::clone(&key));
        self.queued.fetch_add(1, Ordering::Relaxed);
        // Under the lock, like every change of the places, so the depth never runs ahead.
        self.depth.fetch_add(1, Ordering::Relaxed);
        debug_assert_eq!(
            self.depth.load(Ordering::Relaxed),
            state.by_priority.len() as u64
        );
        metrics::queued();
        Some(Turn {
            queue: self,
            key,
            rank,
            slot,
            left: None,
        })
    }

    /// Gives back the place `rank` holds in `key`'s line (waking the next waiter if it was
    /// the head): the one way a place is freed. `None` if it was freed already.
    fn free(&self, state: &mut State, key: &Arc<str>, rank: Rank) -> Option<Arc<Slot>> {
        let (Reverse(priority), seq) = rank;
        state.by_priority.remove(&(priority, Reverse(seq)));
        let line = state.lines.get_mut(key)?;
        let was_head = line.waiters.keys().next() == Some(&rank);
        let slot = line.waiters.remove(&rank)?;
        match line.waiters.values().next() {
            None => {
                state.lines.remove(key);
            }
            Some(next) if was_head => next.notify.notify_one(),
            Some(_) => {}
        }
        self.depth.fetch_sub(1, Ordering::Relaxed);
        debug_assert_eq!(
            self.depth.load(Ordering::Relaxed),
            state.by_priority.len() as u64
        );
        metrics::freed();
        Some(slot)
    }

    /// The counters.
    pub(crate) fn counts(&self) -> QueueCounts {
        QueueCounts {
            depth: self.depth.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }

    /// Sets the counters (not the depth, which is a level) back to zero.
    pub(crate) fn clear_counts(&self) {
        for c in [
            &self.queued,
            &self.admitted,
            &self.timed_out,
            &self.full,
            &self.cancelled,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// A place in a line. Dropping it gives the place back (and wakes the next waiter if it was
/// the head); a wait whose future is dropped counts as cancelled.
pub(crate) struct Turn<'q> {
    queue: &'q Queue,
    key: Arc<str>,
    rank: Rank,
    slot: Arc<Slot>,
    left: Option<Left>,
}

impl Turn<'_> {
    /// Whether this waiter is first in its line (the one that asks the store).
    pub(crate) fn is_head(&self) -> bool {
        let state = self.queue.state.lock();
        state
            .lines
            .get(&self.key)
            .and_then(|line| line.waiters.keys().next())
            == Some(&self.rank)
    }

    /// Whether a higher-priority arrival took this place.
    pub(crate) fn is_displaced(&self) -> bool {
        self.slot.displaced.load(Ordering::Acquire)
    }

    /// Records that the store refused the head, a call of `cost`, until `at`.
    pub(crate) fn refused_until(&self, at: Instant, cost: u64) {
        if let Some(line) = self.queue.state.lock().lines.get_mut(&self.key) {
            line.ready_at = Some((at, cost));
        }
    }

    /// When the line's budget was last said to admit a call of `cost` again: `None` when not
    /// asked yet, or when the refusal was for a smaller cost than the one it was asked for
    /// (a head of cost 8 refused until +8 s said nothing of a call of cost 1 behind it, whose
    /// token came at +1 s: it was refused at once as past its deadline, or held to +8 s).
    pub(crate) fn ready_at(&self, cost: u64) -> Option<Instant> {
        let state = self.queue.state.lock();
        let (at, refused) = state.lines.get(&self.key)?.ready_at?;
        (cost >= refused).then_some(at)
    }

    /// Sleeps until woken (this waiter's turn, a shutdown, displaced) or `until`.
    pub(crate) async fn sleep(&self, until: Instant) {
        let _ = tokio::time::timeout_at(until, self.slot.notify.notified()).await;
    }

    /// Marks how the wait ended (before the place is given back); the first mark stands.
    pub(crate) fn leave(&mut self, how: Left) {
        self.left.get_or_insert(how);
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let queue = self.queue;
        let (counter, metric): (_, fn()) = match self.left {
            Some(Left::Admitted) => (Some(&queue.admitted), metrics::admitted),
            Some(Left::TimedOut) => (Some(&queue.timed_out), metrics::timed_out),
            Some(Left::Displaced) => (Some(&queue.full), metrics::full),
            Some(Left::Refused) => (None, || {}),
            None => (Some(&queue.cancelled), metrics::cancelled),
        };
        // A displaced waiter's place was freed when it was displaced: freeing it again is a
        // no-op.
        queue.free(&mut queue.state.lock(), &self.key, self.rank);
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        metric();
    }
}
