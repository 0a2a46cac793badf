//! Counters of decisions: overall and per tier.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Decisions counted for one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Calls decided (`allowed + denied`).
    pub checks: u64,
    /// Calls admitted.
    pub allowed: u64,
    /// Calls refused for being over the limit.
    pub denied: u64,
    /// Calls refused because no decision could be made (unknown tier, store failure, ...).
    pub errors: u64,
}

/// A snapshot of the service's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every call.
    pub total: Counts,
    /// Calls made under a tier, by tier name.
    pub by_tier: BTreeMap<String, Counts>,
    /// Calls made on behalf of a named budget (an annotated fn's path), by name.
    pub by_method: BTreeMap<String, Counts>,
    /// The wait queue (calls that waited for capacity rather than being refused).
    pub queue: QueueCounts,
}

/// The wait queue's figures. A call that waited is counted once in [`Counts`] too, by how
/// it ended: `allowed` when admitted, `denied` when the queue was full or the wait timed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueCounts {
    /// Calls waiting now.
    pub depth: u64,
    /// Calls that joined the queue.
    pub queued: u64,
    /// Calls admitted after waiting.
    pub admitted: u64,
    /// Calls whose wait ended with [`Error::QueueTimeout`](crate::Error::QueueTimeout).
    pub timed_out: u64,
    /// Calls refused with [`Error::QueueFull`](crate::Error::QueueFull): on arrival, or
    /// displaced by a higher-priority arrival.
    pub full: u64,
    /// Waits given up by the caller (the future dropped): nothing was spent.
    pub cancelled: u64,
}

/// How many sets of counters each scope keeps. Threads take one each in turn, so the first
/// `STRIPES` threads never write the same cache line: a counter shared by every thread
/// moves its line between cores on every call (a contended atomic add), which cost more than
/// the decision itself with two threads on one key.
const STRIPES: usize = 8;

/// One thread's share of a scope's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

/// Counters of one scope: a [`Stripe`] per thread (in turn), summed when read.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    stripes: [Stripe; STRIPES],
    /// The same counts as metrics (feature `metrics`; zero-sized without it).
    metrics: crate::metrics::Handles,
}

/// What happened to one call, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Error,
}

/// This thread's stripe, given out in turn on first use; the same for the thread's life, so a
/// caller that keeps per-thread state (a call site's resolution) keeps it there and counts
/// with [`Counters::record_on`] without this thread-local access.
#[inline]
pub(crate) fn stripe() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| match s.get() {
        usize::MAX => {
            let i = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
            s.set(i);
            i
        }
        i => i,
    })
}

impl Counters {
    /// A tier's counters.
    pub(crate) fn tier(name: &str) -> Self {
        Counters {
            metrics: crate::metrics::Handles::tier(name),
            ..Default::default()
        }
    }

    /// A budget's counters.
    pub(crate) fn budget(name: &str) -> Self {
        Counters {
            metrics: crate::metrics::Handles::budget(name),
            ..Default::default()
        }
    }

    #[inline]
    pub(crate) fn record(&self, outcome: Outcome) {
        self.record_on(stripe(), outcome);
    }

    /// [`record`](Self::record) on `stripe`, which [`stripe()`] gave (any index below
    /// `STRIPES` counts exactly; this thread's own keeps the line unshared).
    #[inline]
    pub(crate) fn record_on(&self, stripe: usize, outcome: Outcome) {
        self.metrics.record(outcome);
        let stripe = &self.stripes[stripe % STRIPES];
        let counter = match outcome {
            Outcome::Allowed => &stripe.allowed,
            Outcome::Denied => &stripe.denied,
            Outcome::Error => &stripe.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counts {
        let sum = |f: fn(&Stripe) -> &AtomicU64| {
            self.stripes
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        let allowed = sum(|s| &s.allowed);
        let denied = sum(|s| &s.denied);
        Counts {
            checks: allowed + denied,
            allowed,
            denied,
            errors: sum(|s| &s.errors),
        }
    }

    pub(crate) fn clear(&self) {
        for s in &self.stripes {
            s.allowed.store(0, Ordering::Relaxed);
            s.denied.store(0, Ordering::Relaxed);
            s.errors.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from many threads land on several stripes; the snapshot sums every one.
    #[test]
    fn counts_from_threads_on_every_stripe_are_summed() {
        let counters = Counters::default();
        std::thread::scope(|scope| {
            for _ in 0..(2 * STRIPES + 1) {
                scope.spawn(|| {
                    for _ in 0..100 {
                        counters.record(Outcome::Allowed);
                    }
                    counters.record(Outcome::Denied);
                    counters.record(Outcome::Error);
                });
            }
        });
        let n = 2 * STRIPES as u64 + 1;
        let counts = counters.snapshot();
        assert_eq!(counts.allowed, 100 * n);
        assert_eq!(counts.denied, n);
        assert_eq!(counts.errors, n);
        assert_eq!(counts.checks, 101 * n);
        assert!(
            counters
                .stripes
                .iter()
                .filter(|s| s.allowed.load(Ordering::Relaxed) > 0)
                .count()
                > 1
        );
        counters.clear();
        assert_eq!(counters.snapshot(), Counts::default());
    }
}
