//! Refusals answered in the process: a key Redis refused until its `retry_after` is refused
//! again here, without a round trip, until then.
//!
//! Sound because a refusal only gets more certain before its retry time: Redis said a call of
//! `cost` does not fit before `retry_after`, assuming nobody else spends meanwhile; anyone
//! spending only pushes that time later, and a call of a larger cost fits no sooner. So an
//! entry answers calls of at least its cost, under the same quota (the store key names the
//! strategy and window, not the limit or the refill, and a quota of the same capacity that
//! refills faster may admit at once), until its deadline. The deadline is taken from the
//! instant the call was sent, before Redis read its clock: never later than Redis' own.
//!
//! What it cannot see: a [`reset`](crate::store::Store::reset) from another process. This
//! process keeps refusing the key until the refusal's retry time, as if the reset had come
//! that much later; a reset through this store clears the entry at once. Nor units another
//! process's lease gives back (when idle, dropped, or `return_leases`): they make a refused
//! key admit sooner, so a store that leases (the fleet then leases alike) holds a refusal
//! no longer than its lease's `idle`, the time by which such units come back, and asks Redis
//! again after it (held until its retry time, a process refused by Redis beside another's
//! lease refused the 7 units that lease gave back, for the rest of the day).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reply::RedisClock;
use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::quota::Quota;

/// One refusal Redis gave.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    cost: u64,
    quota: Quota,
    remaining: u64,
    /// When the refused call may fit, on this process's monotonic clock.
    until: Instant,
    /// When the refusal stops being answered here (Redis is asked again): `until`, or
    /// sooner where units leased elsewhere may come back meanwhile (see `Refusals::hold`).
    held_until: Instant,
    /// `reset_at` of Redis' refusal, in nanoseconds of Redis' time.
    reset_at: u64,
}

/// The refusals still in force, at most `capacity` keys.
#[derive(Debug)]
pub(super) struct Refusals {
    capacity: usize,
    /// The longest a refusal is answered here: the leases' `idle` on a store that leases
    /// (units another process leased come back by then), else unbounded (`None`).
    hold: Option<Duration>,
    entries: Mutex<HashMap<String, Refusal, foldhash::fast::RandomState>>,
    /// How many entries there are, written under the lock: a call finding none (every call
    /// while nothing is refused) takes no lock and hashes no key. Read without the lock, it
    /// may miss a refusal another thread is recording; that call then asks Redis, which is
    /// what the entry would have saved, never an allowance.
    held: AtomicUsize,
    /// How many entries' keys hash to each slot, written under the lock (a count that
    /// reaches 255 stays there): a call on a key whose slot counts none takes no lock, even
    /// while other keys are refused. Read without the lock as `held` is, with the same
    /// outcome when it misses.
    slots: Box<[AtomicU8]>,
    hasher: foldhash::fast::RandomState,
}

/// The number of [`Refusals::slots`].
const SLOTS: usize = 4_096;

impl Refusals {
    pub(super) fn new(capacity: usize, hold: Option<Duration>) -> Self {
        Refusals {
            capacity,
            hold,
            entries: Mutex::new(HashMap::default()),
            held: AtomicUsize::new(0),
            slots: (0..SLOTS).map(|_| AtomicU8::new(0)).collect(),
            hasher: Default::default(),
        }
    }

    /// Whether a refusal may be held for `key` (read without the lock: see `slots`).
    pub(super) fn may_hold(&self, key: &str) -> bool {
        self.holds_any() && self.slot(key).load(Ordering::Acquire) > 0
    }

    fn slot(&self, key: &str) -> &AtomicU8 {
        &self.slots[self.hasher.hash_one(key) as usize % SLOTS]
    }

    /// Counts `key` in (`by` 1) or out (`by` -1) of its slot; under the entries' lock.
    fn count(&self, key: &str, by: i8) {
        let slot = self.slot(key);
        let n = slot.load(Ordering::Relaxed);
        if n < u8::MAX {
            slot.store(n.saturating_add_signed(by), Ordering::Release);
        }
    }

    /// Removes `key`'s entry and counts it out; under the entries' lock.
    fn remove(
        &self,
        entries: &mut HashMap<String, Refusal, foldhash::fast::RandomState>,
        key: &str,
    ) {
        if entries.remove(key).is_some() {
            self.count(key, -1);
        }
        self.held.store(entries.len(), Ordering::Release);
    }

    /// Whether any refusal is held (read without the lock: see `held`).
    pub(super) fn holds_any(&self) -> bool {
        self.capacity > 0 && self.held.load(Ordering::Acquire) > 0
    }

    /// The verdict for a call of `cost` on `key` under `quota` at `now`, when a refusal in
    /// force answers it: refused, with the time left until the refusal's retry time.
    pub(super) fn answer(
        &self,
        key: &str,
        cost: u64,
        quota: &Quota,
        now: Instant,
    ) -> Option<Verdict> {
        if cost == 0 || !self.may_hold(key) {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let r = *entries.get(key)?;
        if now >= r.held_until {
            // Out of force: gone, so that calls on the key take no lock again.
            self.remove(&mut entries, key);
            return None;
        }
        if cost < r.cost || *quota != r.quota {
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
    pub(super) fn answer_on_redis_clock(
        &self,
        key: &str,
        cost: u64,
        quota: &Quota,
        now: Instant,
        clock: &RedisClock,
    ) -> Option<(Verdict, Nanos)> {
        let verdict = self.answer(key, cost, quota, now)?;
        let at = clock.redis_us(RedisClock::local_us(now));
        Some((verdict, at.saturating_mul(1_000)))
    }

    /// Records Redis' `verdict` for a call of `cost` sent at `sent`, if it is a refusal.
    pub(super) fn record(
        &self,
        key: &str,
        cost: u64,
        quota: &Quota,
        verdict: &Verdict,
        sent: Instant,
    ) {
        let Some(retry) = verdict.retry_after.filter(|_| !verdict.allowed) else {
            return;
        };
        if self.capacity == 0 || cost == 0 {
            return;
        }
        let retry = Duration::from_nanos(retry);
        let refusal = Refusal {
            cost,
            quota: *quota,
            remaining: verdict.remaining,
            until: sent + retry,
            held_until: sent + self.hold.map_or(retry, |hold| retry.min(hold)),
            reset_at: verdict.reset_at,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|k, r| {
                let keep = r.held_until > sent;
                if !keep {
                    self.count(k, -1);
                }
                keep
            });
            self.held.store(entries.len(), Ordering::Release);
            if entries.len() >= self.capacity {
                return;
            }
        }
        if entries.insert(key.to_owned(), refusal).is_none() {
            self.count(key, 1);
        }
        self.held.store(entries.len(), Ordering::Release);
    }

    /// Forgets `key`'s refusal (a reset through this store).
    pub(super) fn forget(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        self.remove(&mut entries, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quota of `capacity` calls per `seconds`.
    fn q(capacity: u64, seconds: u64) -> Quota {
        Quota::new(capacity, Duration::from_secs(seconds)).unwrap()
    }

    fn refused(remaining: u64, retry_ms: u64) -> Verdict {
        Verdict {
            allowed: false,
            remaining,
            reset_at: 7,
            retry_after: Some(retry_ms * 1_000_000),
        }
    }

    /// On a store that leases, a refusal is answered here for the leases' `idle` at most,
    /// telling Redis' whole wait meanwhile; then Redis is asked again (units leased elsewhere
    /// may have come back).
    #[test]
    fn a_refusal_on_a_leasing_store_is_held_no_longer_than_the_leases_idle() {
        let refusals = Refusals::new(8, Some(Duration::from_millis(30)));
        let t = Instant::now();
        refusals.record("k", 1, &q(5, 1), &refused(0, 100), t);
        let v = refusals.answer("k", 1, &q(5, 1), t + Duration::from_millis(29));
        assert_eq!(v.unwrap().retry_after, Some(71_000_000));
        assert!(refusals
            .answer("k", 1, &q(5, 1), t + Duration::from_millis(30))
            .is_none());
        // A wait shorter than `idle` is held to its end, as without leases.
        refusals.record("s", 1, &q(5, 1), &refused(0, 10), t);
        assert!(refusals
            .answer("s", 1, &q(5, 1), t + Duration::from_millis(9))
            .is_some());
        assert!(refusals
            .answer("s", 1, &q(5, 1), t + Duration::from_millis(10))
            .is_none());
    }

    #[test]
    fn a_refusal_answers_calls_of_at_least_its_cost_until_its_retry_time() {
        let refusals = Refusals::new(8, None);
        let t = Instant::now();
        refusals.record("k", 2, &q(5, 1), &refused(1, 100), t);
        let later = t + Duration::from_millis(40);
        let v = refusals.answer("k", 2, &q(5, 1), later).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(60_000_000));
        assert!(refusals.answer("k", 3, &q(5, 1), later).is_some());
        assert!(
            refusals.answer("k", 1, &q(5, 1), later).is_none(),
            "a smaller cost may fit"
        );
        assert!(
            refusals.answer("k", 2, &q(6, 1), later).is_none(),
            "another limit"
        );
        assert!(
            refusals.answer("k", 2, &q(5, 2), later).is_none(),
            "another refill of the same capacity"
        );
        assert!(refusals.answer("other", 2, &q(5, 1), later).is_none());
        let due = t + Duration::from_millis(100);
        assert!(
            refusals.answer("k", 2, &q(5, 1), due).is_none(),
            "Redis decides from then"
        );
        refusals.forget("k");
        assert!(refusals.answer("k", 2, &q(5, 1), later).is_none());
    }

    #[test]
    fn the_map_stays_within_its_capacity_and_admissions_are_not_kept() {
        let refusals = Refusals::new(2, None);
        let t = Instant::now();
        let admitted = Verdict {
            allowed: true,
            remaining: 3,
            reset_at: 7,
            retry_after: None,
        };
        refusals.record("a", 1, &q(5, 1), &admitted, t);
        assert!(refusals.answer("a", 1, &q(5, 1), t).is_none());
        refusals.record("a", 1, &q(5, 1), &refused(0, 10), t);
        refusals.record("b", 1, &q(5, 1), &refused(0, 1_000), t);
        refusals.record("c", 1, &q(5, 1), &refused(0, 1_000), t);
        assert!(
            refusals.answer("c", 1, &q(5, 1), t).is_none(),
            "full: not kept"
        );
        // Once "a" is due, its place is taken.
        let later = t + Duration::from_millis(20);
        refusals.record("c", 1, &q(5, 1), &refused(0, 1_000), later);
        assert!(refusals.answer("c", 1, &q(5, 1), later).is_some());
        assert!(refusals.answer("b", 1, &q(5, 1), later).is_some());
        assert_eq!(refusals.entries.lock().unwrap().len(), 2);
    }

    /// The count read without the lock follows the map: a refusal in force is answered, one
    /// out of force is dropped when next asked about, so calls go back to taking no lock.
    #[test]
    fn the_count_read_without_the_lock_follows_the_entries() {
        let refusals = Refusals::new(8, None);
        let held = |r: &Refusals| r.held.load(Ordering::Acquire);
        let t = Instant::now();
        refusals.record("a", 1, &q(5, 1), &refused(0, 10), t);
        refusals.record("b", 1, &q(5, 1), &refused(0, 1_000), t);
        assert_eq!(held(&refusals), 2);
        assert!(refusals.answer("a", 1, &q(5, 1), t).is_some());
        let later = t + Duration::from_millis(10);
        assert!(
            refusals.answer("a", 1, &q(5, 1), later).is_none(),
            "out of force"
        );
        assert_eq!(held(&refusals), 1);
        assert!(refusals.answer("b", 1, &q(5, 1), later).is_some());
        refusals.forget("b");
        assert_eq!(held(&refusals), 0);
        assert!(refusals.entries.lock().unwrap().is_empty());
        assert!(refusals.answer("b", 1, &q(5, 1), later).is_none());
    }

    #[test]
    fn a_refusal_held_for_one_key_leaves_the_others_unlocked() {
        let refusals = Refusals::new(3, None);
        let t = Instant::now();
        let slot = |k: &str| refusals.slot(k) as *const AtomicU8;
        refusals.record("a", 1, &q(5, 1), &refused(0, 10), t);
        refusals.record("b", 1, &q(5, 1), &refused(0, 1_000), t);
        assert!(refusals.may_hold("a") && refusals.may_hold("b"));
        // Any other key takes the lock only when it shares a held key's slot.
        for k in (0..200).map(|i| format!("other:{i}")) {
            let shared = slot(&k) == slot("a") || slot(&k) == slot("b");
            assert_eq!(refusals.may_hold(&k), shared, "{k}");
        }
        // Counted out however an entry goes: out of force, evicted at capacity, forgotten.
        let later = t + Duration::from_millis(10);
        assert!(refusals.answer("a", 1, &q(5, 1), later).is_none());
        refusals.record("c", 1, &q(5, 1), &refused(0, 1_000), later);
        refusals.record("d", 1, &q(5, 1), &refused(0, 1_000), later);
        refusals.record("a", 1, &q(5, 1), &refused(0, 1), t);
        refusals.record(
            "e",
            1,
            &q(5, 1),
            &refused(0, 1_000),
            later + Duration::from_millis(5),
        );
        refusals.forget("b");
        let counted: usize = refusals
            .slots
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as usize)
            .sum();
        let entries = refusals.entries.lock().unwrap().len();
        assert_eq!(counted, entries, "one count per entry held");
        assert!(!refusals.may_hold("b"), "forgotten");
        // A count that reached 255 stays there: that slot always takes the lock, never a miss.
        let k = "sticky";
        for _ in 0..300 {
            refusals.count(k, 1);
        }
        refusals.count(k, -1);
        assert_eq!(refusals.slot(k).load(Ordering::Relaxed), u8::MAX);
    }

    #[test]
    fn nothing_is_kept_when_switched_off() {
        let refusals = Refusals::new(0, None);
        let t = Instant::now();
        refusals.record("k", 1, &q(5, 1), &refused(0, 1_000), t);
        assert!(refusals.answer("k", 1, &q(5, 1), t).is_none());
    }
}
