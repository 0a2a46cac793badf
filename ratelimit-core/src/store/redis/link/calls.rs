//! The calls on a link counted by the slot of time they started in, for its watcher: when
//! the oldest still unanswered is past its deadline ([`Calls::due`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::FOREVER;
use crate::stripe::{self, STRIPES};

/// The slots of time a link counts its calls in: a slot is at least `timeout / 32` long, so
/// the 64 cover twice the timeout, and the watcher sees every call until its deadline.
const SLOTS: usize = 64;
/// The shortest slot, about 1 ms (2^20 ns): Tokio's timer resolution.
const SHORTEST_SLOT: u64 = 1 << 20;

/// The calls on a link, counted by the slot of time they started in: in each slot, calls
/// started less calls ended, each striped by thread.
pub(super) struct Calls {
    epoch: Instant,
    /// A slot is `2^shift` nanoseconds.
    shift: u32,
    timeout: Duration,
    parts: Box<[Part; STRIPES]>,
}

/// One stripe's counts, alone on its cache lines.
#[repr(align(128))]
pub(super) struct Part {
    started: [AtomicU64; SLOTS],
    ended: [AtomicU64; SLOTS],
}

impl Default for Part {
    fn default() -> Self {
        Part {
            started: std::array::from_fn(|_| AtomicU64::new(0)),
            ended: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// When the watcher must act next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// Calls are unanswered past their deadline.
    Now,
    /// Look again then.
    At(Instant),
}

impl Calls {
    pub(super) fn new(timeout: Duration) -> Self {
        let timeout = timeout.min(FOREVER);
        let slot = (timeout.as_nanos() as u64 / 32)
            .max(SHORTEST_SLOT)
            .next_power_of_two();
        Calls {
            epoch: Instant::now(),
            shift: slot.trailing_zeros(),
            timeout,
            parts: Box::default(),
        }
    }

    /// Counts a call that started at `at` in its slot, on this thread's stripe; the slot,
    /// or `None` (not counted) before the link was made.
    #[inline]
    pub(super) fn start(&self, at: Instant) -> Option<usize> {
        let slot = self.slot(at)?;
        let stripe = stripe::stripe();
        stripe.add_one(&self.parts[stripe.index()].started[slot]);
        Some(slot)
    }

    /// Counts the end of a call [`start`](Self::start) counted in `slot`.
    #[inline]
    pub(super) fn end(&self, slot: usize) {
        let stripe = stripe::stripe();
        stripe.add_one(&self.parts[stripe.index()].ended[slot]);
    }

    /// The slot of time `at` falls in, as an index; `None` before the link was made.
    #[inline]
    pub(super) fn slot(&self, at: Instant) -> Option<usize> {
        Some(self.tick(at.checked_duration_since(self.epoch)?) as usize % SLOTS)
    }

    #[inline]
    pub(super) fn tick(&self, since: Duration) -> u64 {
        since.as_nanos() as u64 >> self.shift
    }

    /// Whether calls that started in slot `slot` are unanswered. Counts where calls started
    /// are read before counts where they ended: a call that ends meanwhile is not seen as
    /// unanswered.
    pub(super) fn unanswered(&self, slot: usize) -> bool {
        let sum = |f: fn(&Part) -> &[AtomicU64; SLOTS]| {
            self.parts
                .iter()
                .map(|p| f(p)[slot].load(Ordering::Acquire))
                .fold(0u64, u64::wrapping_add)
        };
        let started = sum(|p| &p.started);
        let ended = sum(|p| &p.ended);
        (started.wrapping_sub(ended) as i64) > 0
    }

    /// What the watcher does at `now`: the oldest slot with calls unanswered decides; with
    /// none, it looks again a timeout later (a call started after this look has its deadline
    /// after that).
    pub(super) fn due(&self, now: Instant) -> Due {
        let this = self.tick(now.saturating_duration_since(self.epoch));
        for tick in this.saturating_sub(SLOTS as u64 - 1)..=this {
            if self.unanswered(tick as usize % SLOTS) {
                // The deadline of the slot's last call: no call is failed before its own.
                let end = Duration::from_nanos((tick + 1) << self.shift) + self.timeout;
                let deadline = self.epoch + end;
                return if deadline <= now {
                    Due::Now
                } else {
                    Due::At(deadline)
                };
            }
        }
        Due::At(now + self.timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A slot is at least a 32nd of the timeout, and at most a 16th above 1 ms.
    #[test]
    fn slots_are_a_power_of_two_between_a_32nd_and_a_16th_of_the_timeout() {
        for ms in [1u64, 10, 33, 100, 200, 1_000, 60_000] {
            let calls = Calls::new(Duration::from_millis(ms));
            let slot = 1u64 << calls.shift;
            let timeout = ms * 1_000_000;
            assert!(slot >= timeout / 32, "{ms} ms: {slot}");
            assert!(
                slot < (timeout / 16).max(2 * SHORTEST_SLOT),
                "{ms} ms: {slot}"
            );
        }
        let forever = Calls::new(Duration::MAX);
        assert_eq!(forever.timeout, FOREVER);
    }

    /// The watcher acts at the deadline of the oldest call unanswered, never before it, and
    /// not at all for calls answered.
    #[test]
    fn the_oldest_unanswered_call_sets_the_deadline() {
        let timeout = Duration::from_millis(200);
        let calls = Calls::new(timeout);
        let slot = Duration::from_nanos(1 << calls.shift);
        let t0 = calls.epoch;
        assert_eq!(calls.due(t0), Due::At(t0 + timeout), "idle");

        let first = calls.start(t0 + slot / 2).unwrap();
        let later = calls.start(t0 + slot * 3).unwrap();
        let deadline = t0 + slot + timeout;
        assert_eq!(calls.due(t0 + slot * 4), Due::At(deadline));
        assert_eq!(
            calls.due(deadline - Duration::from_nanos(1)),
            Due::At(deadline)
        );
        assert_eq!(calls.due(deadline), Due::Now);

        // Answered: the later call decides, at its own slot's end.
        calls.end(first);
        let later_deadline = t0 + slot * 4 + timeout;
        assert_eq!(calls.due(deadline), Due::At(later_deadline));
        calls.end(later);
        assert_eq!(calls.due(deadline), Due::At(deadline + timeout));
    }

    /// Slots are reused as time goes round: counts of calls long answered leave nothing
    /// behind.
    #[test]
    fn a_slot_used_again_counts_only_calls_unanswered() {
        let calls = Calls::new(Duration::from_millis(100));
        let slot = Duration::from_nanos(1 << calls.shift);
        let t0 = calls.epoch;
        for round in 0..3u32 {
            let at = t0 + slot * (SLOTS as u32 * round);
            let s = calls.start(at).unwrap();
            calls.end(s);
            assert_eq!(calls.due(at), Due::At(at + calls.timeout));
        }
        let at = t0 + slot * (SLOTS as u32 * 3);
        calls.start(at).unwrap();
        let deadline = at + slot + calls.timeout;
        assert_eq!(calls.due(at), Due::At(deadline));
        assert_eq!(calls.due(deadline), Due::Now);
    }

    /// Calls started and ended on different threads (a task moved between workers) net out.
    #[test]
    fn a_call_ended_on_another_thread_is_answered() {
        let calls = Arc::new(Calls::new(Duration::from_millis(100)));
        let t0 = calls.epoch;
        let slots: Vec<usize> = (0..100).map(|_| calls.start(t0).unwrap()).collect();
        let ender = Arc::clone(&calls);
        std::thread::spawn(move || {
            for s in slots {
                ender.end(s);
            }
        })
        .join()
        .unwrap();
        assert_eq!(calls.due(t0), Due::At(t0 + calls.timeout));
    }
}
