//! Sweeps, and the floor they leave: the keys whose windows have passed, dropped from the calls themselves every
//! `sweep_interval` of clock time and, while the store is idle, by a background thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Inner, MemoryStore, SWEEP_GRACE};
use crate::algorithm::check_now;
use crate::clock::{Clock, Nanos};
use crate::error::Error;

impl MemoryStore {
    /// Drops every key whose window passed more than a second before `now` (the second covers
    /// callers holding a slightly older `now`); returns how many were dropped. Runs by itself
    /// (see the type's docs); public for callers that want memory back at once. A `now` past
    /// the last time the store decides (about the year 2226) sweeps nothing: a clock read
    /// that far would forget live keys and stop time for every later decision.
    pub fn sweep(&self, now: Nanos) -> usize {
        if check_now(now).is_err() {
            return 0;
        }
        let now = now.saturating_sub(SWEEP_GRACE);
        // Raised before the keys go, so that no decision runs before what was dropped.
        self.inner.floor.fetch_max(now, Ordering::AcqRel);
        let mut removed = 0;
        for shard in self.inner.shards.iter() {
            let mut tables = shard.write();
            let dropped = tables.sweep(now, &self.inner.hasher);
            // Counted off under each shard's lock, as `reset` does.
            self.inner.len.fetch_sub(dropped, Ordering::Relaxed);
            removed += dropped;
        }
        removed
    }

    /// Starts a background thread that sweeps every `sweep_interval` of real time, reading
    /// `now` from `clock`, so an idle store gives its memory back. The thread ends when the
    /// last handle to the store is dropped.
    pub fn start_sweeper(&self, clock: Arc<dyn Clock>) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let stop = Arc::clone(&self.inner.stop);
        let every = self.inner.options.sweep_interval;
        let spawned = std::thread::Builder::new()
            .name("ratelimit-sweeper".into())
            .spawn(move || loop {
                {
                    let (stopped, wake) = &*stop;
                    let mut stopped = stopped.lock();
                    if *stopped {
                        return;
                    }
                    stopped = wake.wait_for(stopped, every);
                    if *stopped {
                        return;
                    }
                }
                let Some(inner) = weak.upgrade() else { return };
                MemoryStore { inner }.maybe_sweep(clock.now());
            });
        if let Err(error) = spawned {
            // Sweeps still run from the calls themselves; only idle clean-up is lost.
            tracing::warn!(%error, "ratelimit: could not start the memory sweeper thread");
        }
    }

    /// Sweeps when `sweep_interval` has passed since the last sweep (one comparison on
    /// every decision; the sweep itself out of the decision's way).
    #[inline]
    pub(super) fn maybe_sweep(&self, now: Nanos) {
        let next = self.inner.next_sweep.load(Ordering::Relaxed);
        if now >= next {
            self.sweep_after(next, now);
        }
    }

    /// The sweep [`maybe_sweep`](Self::maybe_sweep) found due: run by the caller whose
    /// exchange moves `next_sweep` on from `next`, so by one of any racing callers.
    #[cold]
    #[inline(never)]
    fn sweep_after(&self, next: Nanos, now: Nanos) {
        // Out of range: no sweep, and the next one not put off to the end of time.
        if check_now(now).is_err() {
            return;
        }
        let every = self.inner.options.sweep_interval.as_nanos() as Nanos;
        if self
            .inner
            .next_sweep
            .compare_exchange(
                next,
                now.saturating_add(every),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.sweep(now);
        }
    }

    /// The time a key found missing under its shard's lock is decided at, fresh: `at`, or the
    /// floor if a sweep raised it since `at` was worked out. The sweep raises the floor before
    /// it drops keys, so a key it dropped after the caller read its time had expired by the
    /// floor: decided fresh at the older `at`, that key's spends were forgotten inside their
    /// window (a probe's fixed window of 3 admitted 4: `probes_memory_limits`).
    #[inline]
    pub(super) fn fresh_at(&self, at: Nanos) -> Nanos {
        at.max(self.inner.floor.load(Ordering::Acquire))
    }

    /// The decision time for a call at `now`: never before the last sweep (see `floor`). The
    /// one check of the time every path takes (decisions, stacked ones, refunds,
    /// adjustments): a time past [`MAX_NOW`](crate::algorithm::MAX_NOW) is `ClockOutOfRange`, before
    /// it can sweep or move the floor (a floor past it overflowed every later decision).
    #[inline]
    pub(super) fn decision_time(&self, now: Nanos) -> Result<Nanos, Error> {
        check_now(now)?;
        self.maybe_sweep(now);
        Ok(self.fresh_at(now))
    }
}
