//! Counters of decisions: overall and per tier.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

// A caller takes this thread's stripe once for the several scopes one call is counted in
// (`record_on`).
use crate::stripe::{stripe, StripeId, STRIPES};
use crate::sync::Mutex;

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
    /// Calls whose caller gave up (dropped the future: a client that disconnected, a
    /// timeout around the call) while the store was deciding them. The store may have spent
    /// them, so they are counted, here: neither admitted nor refused to anyone.
    pub abandoned: u64,
    /// Calls a shadow limit would have refused (see `shadow` on
    /// [`Options`](crate::Options) and [`Tier`](crate::Tier)): admitted, so counted in
    /// `allowed` too.
    pub shadowed: u64,
    /// Admitted spends given back because their outcome does not count (`count = "err"` on
    /// an annotated fn, [`Spent::refund`](crate::Spent::refund)): counted in `allowed` too.
    pub refunded: u64,
}

/// A snapshot of the service's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every call.
    pub total: Counts,
    /// The configuration running: 0 for the one the service was built with, one more per
    /// [`reload`](crate::RateLimitService::reload).
    pub generation: u64,
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

/// One stripe of a scope's counters, alone on its cache lines: an owned stripe is written by
/// its owner only; a shared one by any thread, atomically.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
    abandoned: AtomicU64,
    shadowed: AtomicU64,
    refunded: AtomicU64,
}

/// Counters of one scope: [`Stripe`]s summed when read, less what was summed when they were
/// last cleared.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    stripes: [Stripe; STRIPES],
    /// The sums at the last [`clear`](Self::clear): an owner's plain store would overwrite a
    /// zero written by another thread, so clearing writes no stripe.
    cleared: Mutex<Counts>,
    /// The same counts as metrics (feature `metrics`; zero-sized without it).
    metrics: crate::metrics::Handles,
}

/// What happened to one call, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Error,
    Abandoned,
    /// Would have been refused by a shadow limit (counted besides `Allowed`).
    Shadowed,
    /// An admitted spend given back (counted besides `Allowed`).
    Refunded,
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

    /// [`record`](Self::record) on this thread's `stripe`, taken by the caller for the call
    /// at hand (one look-up for several scopes).
    #[inline]
    pub(crate) fn record_on(&self, stripe: StripeId, outcome: Outcome) {
        let part = &self.stripes[stripe.index()];
        stripe.add_one(match outcome {
            Outcome::Allowed => {
                self.metrics.allowed();
                &part.allowed
            }
            Outcome::Denied => {
                self.metrics.denied();
                &part.denied
            }
            Outcome::Error => {
                self.metrics.error();
                &part.errors
            }
            Outcome::Abandoned => {
                self.metrics.abandoned();
                &part.abandoned
            }
            Outcome::Shadowed => {
                self.metrics.shadowed();
                &part.shadowed
            }
            Outcome::Refunded => {
                self.metrics.refunded();
                &part.refunded
            }
        });
    }

    /// The counts since the last [`clear`](Self::clear).
    pub(crate) fn snapshot(&self) -> Counts {
        // The base first: sums read after it are at least the sums it was taken from (a
        // stripe's counts only grow, and the lock orders this read after that one).
        let base = *self.cleared.lock();
        let sums = self.sums();
        let allowed = sums.allowed.saturating_sub(base.allowed);
        let denied = sums.denied.saturating_sub(base.denied);
        Counts {
            checks: allowed + denied,
            allowed,
            denied,
            errors: sums.errors.saturating_sub(base.errors),
            abandoned: sums.abandoned.saturating_sub(base.abandoned),
            shadowed: sums.shadowed.saturating_sub(base.shadowed),
            refunded: sums.refunded.saturating_sub(base.refunded),
        }
    }

    /// Every stripe summed, since the counters were made.
    fn sums(&self) -> Counts {
        let sum = |f: fn(&Stripe) -> &AtomicU64| {
            self.stripes
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        let (allowed, denied) = (sum(|s| &s.allowed), sum(|s| &s.denied));
        Counts {
            checks: allowed.wrapping_add(denied),
            allowed,
            denied,
            errors: sum(|s| &s.errors),
            abandoned: sum(|s| &s.abandoned),
            shadowed: sum(|s| &s.shadowed),
            refunded: sum(|s| &s.refunded),
        }
    }

    /// Counts from zero again: calls counted at the same time land on either side.
    pub(crate) fn clear(&self) {
        let mut cleared = self.cleared.lock();
        *cleared = self.sums();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from many threads alive at once land on several stripes (owned ones, and the
    /// shared ones past those); the snapshot sums every one.
    #[test]
    fn counts_from_threads_on_every_stripe_are_summed() {
        let counters = Counters::default();
        let all_alive = std::sync::Barrier::new(2 * STRIPES + 1);
        std::thread::scope(|scope| {
            for _ in 0..(2 * STRIPES + 1) {
                scope.spawn(|| {
                    // Every thread holds its stripe before any gives one back.
                    counters.record(Outcome::Allowed);
                    all_alive.wait();
                    for _ in 1..100 {
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

    /// Owned stripes are written with a plain load and store, so two threads must never own
    /// one: threads that come and go (each giving its stripe back), more of them at once than
    /// there are owned stripes, all count exactly.
    #[test]
    fn owned_stripes_passed_between_threads_lose_no_count() {
        const CALLS: u64 = 20_000;
        let counters = Counters::default();
        for _ in 0..3 {
            std::thread::scope(|scope| {
                for _ in 0..(STRIPES + 3) {
                    scope.spawn(|| {
                        for _ in 0..CALLS {
                            counters.record(Outcome::Allowed);
                        }
                    });
                }
            });
        }
        let threads = 3 * (STRIPES + 3) as u64;
        assert_eq!(counters.snapshot().allowed, threads * CALLS);
    }

    /// A thread that goes on counting on its own stripe after a clear counts from zero: the
    /// clear is a base subtracted when read, not a zero its owner would write over.
    #[test]
    fn counts_after_a_clear_start_from_zero_on_an_owned_stripe() {
        let counters = Counters::default();
        let (cleared, counted) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..5 {
                    counters.record(Outcome::Denied);
                }
                counted.wait();
                cleared.wait();
                for _ in 0..3 {
                    counters.record(Outcome::Denied);
                }
            });
            counted.wait();
            assert_eq!(counters.snapshot().denied, 5);
            counters.clear();
            cleared.wait();
        });
        let counts = counters.snapshot();
        assert_eq!((counts.denied, counts.checks), (3, 3));
    }
}
