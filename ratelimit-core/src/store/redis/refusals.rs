//! Refusals answered in the process: a key Redis refused until its `retry_after` is refused
//! again here, without a round trip, until then.
//!
//! Sound because a refusal only gets more certain before its retry time: Redis said a call of
//! `cost` does not fit before `retry_after`, assuming nobody else spends meanwhile; anyone
//! spending only pushes that time later, and a call of a larger cost fits no sooner. So an
//! entry answers calls of at least its cost, under the same capacity (the store key names the
//! strategy and window, not the limit), until its deadline. The deadline is taken from the
//! instant the call was sent, before Redis read its clock: never later than Redis' own.
//!
//! What it cannot see: a [`reset`](crate::store::Store::reset) from another process. This
//! process keeps refusing the key until the refusal's retry time, as if the reset had come
//! that much later; a reset through this store clears the entry at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reply::RedisClock;
use crate::algorithm::Verdict;
use crate::clock::Nanos;

/// One refusal Redis gave.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    cost: u64,
    capacity: u64,
    remaining: u64,
    /// When the refused call may fit, on this process's monotonic clock.
    until: Instant,
    /// `reset_at` of Redis' refusal, in nanoseconds of Redis' time.
    reset_at: u64,
}

/// The refusals still in force, at most `capacity` keys.
#[derive(Debug)]
pub(super) struct Refusals {
    capacity: usize,
    entries: Mutex<HashMap<String, Refusal, foldhash::fast::RandomState>>,
    /// How many entries there are, written under the lock: a call finding none (every call
    /// while nothing is refused) takes no lock and hashes no key. Read without the lock, it
    /// may miss a refusal another thread is recording; that call then asks Redis, which is
    /// what the entry would have saved, never an allowance.
    held: AtomicUsize,
}

impl Refusals {
    pub(super) fn new(capacity: usize) -> Self {
        Refusals {
            capacity,
            entries: Mutex::new(HashMap::default()),
            held: AtomicUsize::new(0),
        }
    }

    /// Whether any refusal is held (read without the lock: see `held`).
    pub(super) fn holds_any(&self) -> bool {
        self.capacity > 0 && self.held.load(Ordering::Acquire) > 0
    }

    /// The verdict for a call of `cost` on `key` under `capacity` at `now`, when a refusal in
    /// force answers it: refused, with the time left until the refusal's retry time.
    pub(super) fn answer(
        &self,
        key: &str,
        cost: u64,
        capacity: u64,
        now: Instant,
    ) -> Option<Verdict> {
        if cost == 0 || !self.holds_any() {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let r = *entries.get(key)?;
        if now >= r.until {
            // Out of force: gone, so that calls on the key take no lock again.
            entries.remove(key);
            self.held.store(entries.len(), Ordering::Release);
            return None;
        }
        if cost < r.cost || capacity != r.capacity {
            return None;
        }
        let left = r.until - now;
        Some(Verdict {
            allowed: false,
            remaining: r.remaining,
            reset_at: r.reset_at,
            retry_after: Some((left.as_nanos() as u64).max(1)),
        })
    }

    /// [`answer`](Self::answer) with the Redis time it stands for (ns): now, on `clock`'s
    /// estimate of Redis' clock.
    pub(super) fn answered(
        &self,
        key: &str,
        cost: u64,
        capacity: u64,
        now: Instant,
        clock: &RedisClock,
    ) -> Option<(Verdict, Nanos)> {
        let verdict = self.answer(key, cost, capacity, now)?;
        let at = clock.redis_us(RedisClock::local_us(now));
        Some((verdict, at.saturating_mul(1_000)))
    }

    /// Records Redis' `verdict` for a call of `cost` sent at `sent`, if it is a refusal.
    pub(super) fn record(
        &self,
        key: &str,
        cost: u64,
        capacity: u64,
        verdict: &Verdict,
        sent: Instant,
    ) {
        let Some(retry) = verdict.retry_after.filter(|_| !verdict.allowed) else {
            return;
        };
        if self.capacity == 0 || cost == 0 {
            return;
        }
        let refusal = Refusal {
            cost,
            capacity,
            remaining: verdict.remaining,
            until: sent + Duration::from_nanos(retry),
            reset_at: verdict.reset_at,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, r| r.until > sent);
            self.held.store(entries.len(), Ordering::Release);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(key.to_owned(), refusal);
        self.held.store(entries.len(), Ordering::Release);
    }

    /// Forgets `key`'s refusal (a reset through this store).
    pub(super) fn forget(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.remove(key);
        self.held.store(entries.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(remaining: u64, retry_ms: u64) -> Verdict {
        Verdict {
            allowed: false,
            remaining,
            reset_at: 7,
            retry_after: Some(retry_ms * 1_000_000),
        }
    }

    #[test]
    fn a_refusal_answers_calls_of_at_least_its_cost_until_its_retry_time() {
        let refusals = Refusals::new(8);
        let t = Instant::now();
        refusals.record("k", 2, 5, &refused(1, 100), t);
        let later = t + Duration::from_millis(40);
        let v = refusals.answer("k", 2, 5, later).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(60_000_000));
        assert!(refusals.answer("k", 3, 5, later).is_some());
        assert!(
            refusals.answer("k", 1, 5, later).is_none(),
            "a smaller cost may fit"
        );
        assert!(refusals.answer("k", 2, 6, later).is_none(), "another limit");
        assert!(refusals.answer("other", 2, 5, later).is_none());
        let due = t + Duration::from_millis(100);
        assert!(
            refusals.answer("k", 2, 5, due).is_none(),
            "Redis decides from then"
        );
        refusals.forget("k");
        assert!(refusals.answer("k", 2, 5, later).is_none());
    }

    #[test]
    fn the_map_stays_within_its_capacity_and_admissions_are_not_kept() {
        let refusals = Refusals::new(2);
        let t = Instant::now();
        let admitted = Verdict {
            allowed: true,
            remaining: 3,
            reset_at: 7,
            retry_after: None,
        };
        refusals.record("a", 1, 5, &admitted, t);
        assert!(refusals.answer("a", 1, 5, t).is_none());
        refusals.record("a", 1, 5, &refused(0, 10), t);
        refusals.record("b", 1, 5, &refused(0, 1_000), t);
        refusals.record("c", 1, 5, &refused(0, 1_000), t);
        assert!(refusals.answer("c", 1, 5, t).is_none(), "full: not kept");
        // Once "a" is due, its place is taken.
        let later = t + Duration::from_millis(20);
        refusals.record("c", 1, 5, &refused(0, 1_000), later);
        assert!(refusals.answer("c", 1, 5, later).is_some());
        assert!(refusals.answer("b", 1, 5, later).is_some());
        assert_eq!(refusals.entries.lock().unwrap().len(), 2);
    }

    /// The count read without the lock follows the map: a refusal in force is answered, one
    /// out of force is dropped when next asked about, so calls go back to taking no lock.
    #[test]
    fn the_count_read_without_the_lock_follows_the_entries() {
        let refusals = Refusals::new(8);
        let held = |r: &Refusals| r.held.load(Ordering::Acquire);
        let t = Instant::now();
        refusals.record("a", 1, 5, &refused(0, 10), t);
        refusals.record("b", 1, 5, &refused(0, 1_000), t);
        assert_eq!(held(&refusals), 2);
        assert!(refusals.answer("a", 1, 5, t).is_some());
        let later = t + Duration::from_millis(10);
        assert!(refusals.answer("a", 1, 5, later).is_none(), "out of force");
        assert_eq!(held(&refusals), 1);
        assert!(refusals.answer("b", 1, 5, later).is_some());
        refusals.forget("b");
        assert_eq!(held(&refusals), 0);
        assert!(refusals.entries.lock().unwrap().is_empty());
        assert!(refusals.answer("b", 1, 5, later).is_none());
    }

    #[test]
    fn nothing_is_kept_when_switched_off() {
        let refusals = Refusals::new(0);
        let t = Instant::now();
        refusals.record("k", 1, 5, &refused(0, 1_000), t);
        assert!(refusals.answer("k", 1, 5, t).is_none());
    }
}
