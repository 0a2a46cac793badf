//! Counters of decisions: overall and per tier.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

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

/// How many stripes a thread can own: the first threads to count (and later ones, as owners
/// exit) each own one, which they alone write, so they count with a plain load and store. A
/// locked add costs more than anything else a decision does but its own atomic steps (the
/// two or three of an annotated call were a large share of its time: BENCHMARKS.md,
/// `hot_path`); a counter shared by threads also moves its line between cores on every call,
/// which with two threads on one key cost more than the decision itself.
const OWNED: usize = 16;
/// Stripes that threads without one of their own share in turn, counting with a locked add:
/// with `T` threads counting, `(T - OWNED) / SHARED` to a stripe, always fewer than the
/// `T / 8` of the 8 shared stripes this replaced.
const SHARED: usize = 8;
/// How many stripes there are: a counter striped by [`StripeId`] has this many parts.
pub(crate) const STRIPES: usize = OWNED + SHARED;

/// One stripe of a scope's counters, alone on its cache lines: an owned stripe is written by
/// its owner only; a shared one by any thread, atomically.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
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
}

/// The stripe this thread counts on now ([`stripe()`]): owned by it when below [`OWNED`].
/// Not kept past the call it was taken for: a thread gives its stripe up when it exits, and
/// whoever then takes it writes it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StripeId(usize);

impl StripeId {
    /// Which of the [`STRIPES`] parts of a striped counter this thread writes.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self.0 % STRIPES
    }

    /// Adds one to `counter`, this stripe's part of a striped counter: with a plain load and
    /// store on an owned stripe (written by this thread alone: no other write can fall
    /// between the two), with a locked add on a shared one.
    #[inline]
    pub(crate) fn add_one(self, counter: &AtomicU64) {
        if self.0 < OWNED {
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Bit `i`: owned stripe `i` belongs to a live thread.
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe, `usize::MAX` until it first counts. No destructor, so it is
    /// one load to read and stays readable while the thread's other locals are dropped.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Gives the thread's owned stripe back when the thread exits; touched once, by the
    /// claim, which registers its destructor.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        // Whatever the thread counts from here on (other locals' destructors) is shared.
        let i = STRIPE.with(|s| s.replace(OWNED));
        if i < OWNED {
            // Release: the next owner, claiming with Acquire, reads this thread's last counts.
            CLAIMED.fetch_and(!(1 << i), Ordering::Release);
        }
    }
}

/// This thread's stripe: its own while it has one, else a shared one.
#[inline]
pub(crate) fn stripe() -> StripeId {
    StripeId(STRIPE.with(|s| match s.get() {
        usize::MAX => {
            let i = claim();
            s.set(i);
            i
        }
        i => i,
    }))
}

/// An owned stripe no live thread has, or else a shared one, in turn.
#[cold]
fn claim() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut claimed = CLAIMED.load(Ordering::Relaxed);
    loop {
        let free = !claimed & ((1 << OWNED) - 1);
        if free == 0 {
            return OWNED + NEXT.fetch_add(1, Ordering::Relaxed) % SHARED;
        }
        let i = free.trailing_zeros() as usize;
        match CLAIMED.compare_exchange_weak(
            claimed,
            claimed | 1 << i,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            // Owned only with a destructor to give it back: a thread claiming while it
            // exits (its `GIVE_BACK` gone already) would keep it for good.
            Ok(_) => match GIVE_BACK.try_with(|_| ()) {
                Ok(()) => return i,
                Err(_) => {
                    CLAIMED.fetch_and(!(1 << i), Ordering::Release);
                    return OWNED;
                }
            },
            Err(now) => claimed = now,
        }
    }
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
                for _ in 0..(OWNED + SHARED + 3) {
                    scope.spawn(|| {
                        for _ in 0..CALLS {
                            counters.record(Outcome::Allowed);
                        }
                    });
                }
            });
        }
        let threads = 3 * (OWNED + SHARED + 3) as u64;
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
