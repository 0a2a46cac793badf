//! Sweeps, and the floor they leave: the keys whose windows have passed, dropped from the calls themselves every
//! `sweep_interval` of clock time and, while the store is idle, by a background thread.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Inner, MemoryStore, SWEEP_GRACE};
use crate::algorithm::{check_now, MAX_NOW};
use crate::clock::{Clock, Nanos};
use crate::error::Error;

impl MemoryStore {
    /// Drops every key whose window passed more than a second before `now` (the second keeps
    /// a sweep from moving the decisions of callers holding a slightly older `now`: see
    /// `SWEEP_GRACE`); returns how many were dropped. Runs by itself (see the type's docs);
    /// public for callers that want memory back at once. A `now` past the last time the store
    /// decides (about the year 2226) sweeps nothing: a clock read that far would forget live
    /// keys and stop time for every later decision.
    pub fn sweep(&self, now: Nanos) -> usize {
        if check_now(now).is_err() {
            return 0;
        }
        self.sweep_by(now.saturating_sub(SWEEP_GRACE))
    }

    /// The sweep a full store runs before it refuses a new key ([`Error::StoreFull`]): every
    /// key expired by `now` itself, with no grace. The floor the sweep leaves is the end of
    /// what it drops, at most `now`, a time the clock has shown, so a caller holding an older
    /// `now` that finds a dropped key missing is decided fresh at that key's end, never
    /// inside its window. With the grace, keys that had ended up to a second before stayed,
    /// and new keys were refused while the store held no live key but one (3 keys of 100 ms
    /// windows, one new key every 200 ms: 11 of 20 admitted, probes_overrefusal).
    pub(super) fn sweep_for_room(&self, now: Nanos) -> usize {
        if check_now(now).is_err() {
            return 0;
        }
        self.sweep_by(now)
    }

    /// Drops the keys expired by `by` and the blocks over then. Each shard raises the floor
    /// (see `Inner::floor`) to the latest expiry, or block's end, among what it drops, under
    /// its write lock, before a decision can find those keys missing: a key decided fresh is
    /// decided at or after the end of any state it may have had. To that time and no later:
    /// the sweep's own time (less the grace) as the floor stood for a whole day after a wall
    /// clock stepped a day ahead and back, every key decided at the stepped time
    /// (probes_overrefusal: 10 a minute admitted 10 in 5 minutes; 2 of 10 new keys admitted
    /// in a store of 3 keys, the rest `StoreFull`).
    fn sweep_by(&self, by: Nanos) -> usize {
        let mut removed = 0;
        for shard in self.inner.shards.iter() {
            let mut tables = shard.write();
            let (dropped, latest) = tables.sweep(by, &self.inner.hasher);
            self.inner.floor.fetch_max(latest, Ordering::AcqRel);
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

    /// Sweeps when `sweep_interval` has passed since the last sweep (the background
    /// sweeper's check; a decision's is [`decision_time`](Self::decision_time)'s).
    pub(super) fn maybe_sweep(&self, now: Nanos) {
        let next = self.inner.next_sweep.load(Ordering::Relaxed);
        if now >= next {
            let _ = self.sweep_after(next, now);
        }
    }

    /// What a `now` at or past `next_sweep` (`next`) meets: a time past
    /// [`MAX_NOW`](crate::algorithm::MAX_NOW) is `ClockOutOfRange`, with no sweep and the next
    /// one not put off to the end of time; any other, the sweep that is due, run by the caller
    /// whose exchange moves `next_sweep` on from `next`, so by one of any racing callers.
    /// `next_sweep` never passes `MAX_NOW + 1`, so every time out of range comes here: the
    /// one comparison a decision makes of its time ([`decision_time`](Self::decision_time)).
    #[cold]
    #[inline(never)]
    fn sweep_after(&self, next: Nanos, now: Nanos) -> Result<(), Error> {
        check_now(now)?;
        let every = self.inner.options.sweep_interval.as_nanos() as Nanos;
        // At most `MAX_NOW + 1`: a later `next_sweep` would let a time out of range past the
        // one comparison (past it, a time in range sweeps no more, as it never reaches it).
        let after = now.saturating_add(every).min(MAX_NOW + 1);
        if self
            .inner
            .next_sweep
            .compare_exchange(next, after, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.sweep(now);
        }
        Ok(())
    }

    /// The time a key found missing under its shard's lock is decided at, fresh: `at`, or the
    /// floor if a sweep raised it since `at` was worked out. A sweep raises the floor to the
    /// latest end among what it drops before it releases the shard's lock, so read under
    /// that lock it is at or after the end of any state (or block) a missing key had: decided
    /// fresh at an older `at`, that key's spends were forgotten inside their window (a
    /// probe's fixed window of 3 admitted 4: `probes_memory_limits`). Every path that finds a
    /// key or a block missing reads it again under the lock.
    #[inline]
    pub(super) fn fresh_at(&self, at: Nanos) -> Nanos {
        at.max(self.inner.floor.load(Ordering::Acquire))
    }

    /// The decision time for a call at `now`: never before the last sweep (see `floor`). The
    /// one check of the time every path takes (decisions, stacked ones, refunds,
    /// adjustments): a time past [`MAX_NOW`](crate::algorithm::MAX_NOW) is `ClockOutOfRange`, before
    /// it can sweep or move the floor (a floor past it overflowed every later decision). One
    /// comparison, the sweep's: `next_sweep` is at most `MAX_NOW + 1`, so such a time finds a
    /// sweep due, and [`sweep_after`](Self::sweep_after) refuses it first.
    #[inline]
    pub(super) fn decision_time(&self, now: Nanos) -> Result<Nanos, Error> {
        self.time_checked(now)?;
        Ok(self.fresh_at(now))
    }

    /// [`decision_time`](Self::decision_time)'s check of `now`, and the sweep that is due; a
    /// single decision reads the floor (`fresh_at`) in its strategy's step.
    #[inline(always)]
    pub(super) fn time_checked(&self, now: Nanos) -> Result<(), Error> {
        let next = self.inner.next_sweep.load(Ordering::Relaxed);
        if now >= next {
            self.sweep_after(next, now)?;
        }
        Ok(())
    }
}
