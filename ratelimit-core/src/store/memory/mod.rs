//! The in-process store: a sharded hash table of atomic cells, each shard behind a
//! read-write lock taken for reading on a decision and for writing only to add or drop keys.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

mod adjust;
mod blocks;
mod carry;
mod cells;
mod decide;
mod locked;
mod refund;
mod room;
mod stacked;
mod sweep;
mod tables;
mod word;

use self::cells::KeyHasher;
use self::tables::Tables;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Adjustment, Refund, Request, Stacked, Told};
use crate::sync::{unpoisoned, Condvar, Mutex};

const SHARDS: usize = 64;

/// How long past its expiry a key is kept by the sweeps that run every `sweep_interval`.
/// Callers read `now` before taking a shard's lock, so a caller holding a slightly older `now`
/// may still need a key that a sweep at a later `now` considers expired. The floor covers
/// that (a key found missing is decided at or after the end of what was dropped: `fresh_at`);
/// the grace keeps a routine sweep from raising the floor past such a caller's `now`, which
/// would decide its call a little later than it was made.
const SWEEP_GRACE: Nanos = 1_000_000_000;

/// Limits of a [`MemoryStore`].
///
/// ```
/// use ratelimit_core::MemoryOptions;
/// use std::time::Duration;
///
/// let small = MemoryOptions::default().max_keys(10_000).sweep_interval(Duration::from_secs(1));
/// assert_eq!(small.max_keys, 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryOptions {
    /// The most keys tracked at once. At the cap, expired keys are swept first; if the store
    /// is still full, calls on *new* keys are refused with [`Error::StoreFull`] (existing keys
    /// keep working). Default: 1,000,000.
    pub max_keys: usize,
    /// How often expired keys are swept, in clock time: checked on every call, and by a
    /// background thread while the store is idle. Default: 10 s.
    pub sweep_interval: Duration,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            max_keys: 1_000_000,
            sweep_interval: Duration::from_secs(10),
        }
    }
}

impl MemoryOptions {
    /// With this cap on the number of keys.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// With this sweep interval.
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every;
        self
    }
}

/// One shard of the table, behind a lock whose readers share no counter: crossbeam's
/// `ShardedLock` gives each thread a read lock of its own, on its own cache line, and a
/// writer takes them all. Decisions on a stored key (readers) from several threads then write
/// no line in common but the key's cell; a new key, a sweep, a reset, a refund, an
/// adjustment, a decision under a block and a stacked one (writers) pay for the whole lock.
/// (Measured against a `parking_lot::RwLock` and lock-free maps: BENCHMARKS.md, `tables`.)
#[repr(align(128))]
struct Shard(ShardedLock<Tables>);

/// A shard's tables, locked for writing.
type WriteGuard<'a> = ShardedLockWriteGuard<'a, Tables>;

impl Shard {
    /// The tables, for reading. A lock a panicking writer left poisoned is taken all the
    /// same (`crate::sync`): the tables hold no state between steps that a panic could
    /// leave half-made.
    #[inline]
    fn read(&self) -> ShardedLockReadGuard<'_, Tables> {
        unpoisoned(self.0.read())
    }

    /// The tables, for writing (see [`read`](Self::read) on poisoning).
    #[inline]
    fn write(&self) -> WriteGuard<'_> {
        unpoisoned(self.0.write())
    }
}

struct Inner {
    /// As many as [`SHARDS`], by the type: a shard's index is taken modulo it, so finding
    /// a call's shard checks no bound.
    shards: Box<[Shard; SHARDS]>,
    hasher: KeyHasher,
    len: AtomicUsize,
    options: MemoryOptions,
    next_sweep: AtomicU64,
    /// The latest expiry (or block's end) among the keys and blocks sweeps dropped.
    /// Decisions never run before it: a key dropped was expired by then, and a wall clock
    /// stepped back must not find it fresh (the algorithms already never decide before a
    /// kept key's own time). Not the sweep's own time: a clock stepped a day ahead and back
    /// held every decision, new keys' too, at the stepped time for the day.
    floor: AtomicU64,
    /// The stamp the next key stamped is given (see `cells::StampedKey`): from 1, so that 0
    /// names no key.
    stamps: AtomicU64,
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock() = true;
        wake.notify_all();
    }
}

/// Limiter state in this process's memory.
///
/// - **Process-local**: two processes, or two stores, never share a budget. Use the Redis
///   store for a fleet.
/// - **Atomic**: each decision is one compare-exchange on the key's cell (the sliding log: one
///   lock on the key's log), so with a limit of L exactly L of any number of concurrent calls
///   pass, and calls on one key never wait on a lock.
/// - **Self-cleaning**: a key is dropped once its state is indistinguishable from a fresh one
///   (its window has passed). Sweeps run from the calls themselves every `sweep_interval` of
///   clock time and, while idle, from a background thread started by the service, so memory
///   returns to its baseline without anyone scheduling anything.
/// - **Bounded**: at most `max_keys` keys; see [`MemoryOptions::max_keys`] for what happens at
///   the cap. It never lets a call through because it is full.
/// - `Debug` prints counts, never keys.
///
/// ```
/// use ratelimit_core::{MemoryStore, Quota};
///
/// let store = MemoryStore::new();
/// let quota = Quota::per_second(2).unwrap();
/// let now = 1_000_000_000;
/// assert!(store.acquire("user:1", &quota, 1, now).unwrap().allowed);
/// assert!(store.acquire("user:1", &quota, 1, now).unwrap().allowed);
/// assert!(!store.acquire("user:1", &quota, 1, now).unwrap().allowed);
/// assert!(store.acquire("user:2", &quota, 1, now).unwrap().allowed);
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("keys", &self.len())
            .field("max_keys", &self.inner.options.max_keys)
            .field("sweep_interval", &self.inner.options.sweep_interval)
            .finish()
    }
}

impl MemoryStore {
    /// A store with the default [`MemoryOptions`].
    pub fn new() -> Self {
        Self::with_options(MemoryOptions::default())
    }

    /// A store with the given limits.
    pub fn with_options(options: MemoryOptions) -> Self {
        let shards = Box::new(std::array::from_fn(|_| {
            Shard(ShardedLock::new(Tables::default()))
        }));
        MemoryStore {
            inner: Arc::new(Inner {
                shards,
                hasher: KeyHasher::default(),
                len: AtomicUsize::new(0),
                options,
                next_sweep: AtomicU64::new(0),
                floor: AtomicU64::new(0),
                stamps: AtomicU64::new(1),
                stop: Arc::new((Mutex::new(false), Condvar::new())),
            }),
        }
    }

    /// The store's limits.
    pub fn options(&self) -> MemoryOptions {
        self.inner.options
    }

    /// Decides a call of weight `cost` on `key` at `now` and records it if allowed, in one
    /// atomic step.
    // Inline in the caller's crate, with the checks around the strategy's step
    // (`decide_at`), which makes the decision where it decides (`decision_in`): handed back
    // as a verdict and made a decision here, it went through memory twice.
    #[inline]
    pub fn acquire(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, Error> {
        self.decide_at(key, quota, cost, now, true)
    }

    /// What [`acquire`](Self::acquire) would answer, without changing anything.
    #[inline]
    pub fn peek(&self, key: &str, quota: &Quota, cost: u64, now: Nanos) -> Result<Decision, Error> {
        self.decide_at(key, quota, cost, now, false)
    }

    /// Forgets `key` (its state and any block on it); returns whether it was tracked.
    pub fn reset(&self, key: &str) -> bool {
        let key = key.as_bytes();
        let hash = self.inner.hasher.hash(key);
        let mut tables = self.shard(hash).write();
        let (removed, blocked) = tables.remove_all(hash, key);
        // Counted off under the lock: a spend storing the key again in between would have
        // `len` count it twice.
        self.inner.len.fetch_sub(removed, Ordering::Relaxed);
        drop(tables);
        removed > 0 || blocked
    }

    /// Keys currently tracked (including expired ones not yet swept).
    pub fn len(&self) -> usize {
        self.inner.len.load(Ordering::Relaxed)
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.inner.shards[self.shard_index(hash)]
    }

    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize % SHARDS
    }
}

/// Every decision is made in this process, at once: `decide_now` answers every call, and the
/// awaited methods forward to it.
impl super::Store for MemoryStore {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.decide_request(&request)
    }

    #[inline]
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.answer(&request, Some, || None)
    }

    fn hash_of(&self, key: &str) -> Option<u64> {
        Some(self.inner.hasher.hash(key.as_bytes()))
    }

    #[inline]
    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: std::num::NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        self.answer_hashed(&request, hash, Some, || None)
    }

    #[inline]
    fn decide_now_told(
        &self,
        request: Request<'_>,
        hash: Option<std::num::NonZeroU64>,
    ) -> Option<Told> {
        let told = |decided| Some(Told::Decided(decided));
        let bare = || request.admission_unshown().then_some(Some(Told::Admitted));
        match hash {
            Some(hash) => self.answer_hashed(&request, hash, told, bare),
            None => self.answer(&request, told, bare),
        }
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Some(self.decide_all_at(&stacked))
    }

    fn decides_at_once(&self) -> bool {
        true
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.decide_all_at(&stacked)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(MemoryStore::reset(self, key))
    }

    fn refunds(&self) -> bool {
        true
    }

    fn blocks(&self) -> bool {
        true
    }

    fn carries(&self) -> bool {
        true
    }

    fn adjusts(&self) -> bool {
        true
    }

    async fn adjust(&self, adjustment: Adjustment<'_>) -> Result<u64, Error> {
        self.adjust_request(&adjustment)
    }

    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.refund_request(&refund)
    }

    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        Some(self.refund_request(&refund))
    }

    async fn refund_all(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.refund_all_at(refunds)
    }

    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        Some(self.refund_all_at(refunds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{self, State};
    use crate::syntax::Strategy;

    const SEC: Nanos = 1_000_000_000;

    #[test]
    fn debug_never_prints_keys() {
        let store = MemoryStore::new();
        store
            .acquire("secret-user-42", &Quota::per_second(1).unwrap(), 1, SEC)
            .unwrap();
        let text = format!("{store:?}");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("keys: 1"), "{text}");
    }

    /// A penalty or a reward of nothing changes nothing, as on Redis: a penalty of nothing
    /// on a key not stored yet stored it, taking a key of `max_keys`.
    #[test]
    fn an_adjustment_of_nothing_stores_no_key() {
        use crate::store::{Adjustment, StoreKey};
        let store = MemoryStore::with_options(MemoryOptions {
            max_keys: 1,
            ..MemoryOptions::default()
        });
        let q = Quota::per_second(5).unwrap();
        for strategy in Strategy::ALL {
            let q = q.with_strategy(strategy);
            let key = StoreKey::new("new").unwrap();
            let penalty = Adjustment::penalty(key, &q, 0, SEC);
            assert_eq!(store.adjust_request(&penalty).unwrap(), 0, "{strategy:?}");
            let reward = Adjustment::reward(key, &q, 0, SEC);
            assert_eq!(store.adjust_request(&reward).unwrap(), 0, "{strategy:?}");
            assert_eq!(store.len(), 0, "{strategy:?}");
        }
        // The one key the store holds is still free for a call.
        assert!(store.acquire("other", &q, 1, SEC).unwrap().allowed);
    }

    #[test]
    fn full_store_refuses_new_keys_but_serves_old_ones() {
        let store = MemoryStore::with_options(MemoryOptions {
            max_keys: 2,
            ..MemoryOptions::default()
        });
        let q = Quota::per_second(5).unwrap();
        store.acquire("a", &q, 1, SEC).unwrap();
        store.acquire("b", &q, 1, SEC).unwrap();
        assert!(matches!(
            store.acquire("c", &q, 1, SEC),
            Err(Error::StoreFull { max_keys: 2 })
        ));
        assert!(store.acquire("a", &q, 1, SEC).unwrap().allowed);
        // Once a's and b's windows have passed (by `now`, no grace: `sweep_for_room`), the
        // sweep at the cap makes room; a nanosecond before, both are live.
        assert!(matches!(
            store.acquire("c", &q, 1, 2 * SEC - 1),
            Err(Error::StoreFull { .. })
        ));
        assert!(store.acquire("c", &q, 1, 2 * SEC).unwrap().allowed);
        assert_eq!(store.len(), 1);
    }

    /// A sweep holds later decisions to the latest end among what it drops, a block's too:
    /// the floor is not the sweep's time (a wall clock stepped a day ahead and back held
    /// every decision there for the day), and not below a dropped block's end (a key blocked
    /// past its window, both dropped, would be decided outside its block).
    #[test]
    fn a_sweep_floors_time_at_the_latest_end_it_drops_a_blocks_too() {
        let floor = |store: &MemoryStore| store.inner.floor.load(Ordering::Acquire);
        let store = MemoryStore::new();
        let q = Quota::per_second(1)
            .unwrap()
            .with_strategy(Strategy::FixedWindow)
            .with_block(Duration::from_secs(60))
            .unwrap();
        assert!(store.acquire("k", &q, 1, SEC).unwrap().allowed);
        // Refused: blocked until 61 s, its window over at 2 s.
        assert!(!store.acquire("k", &q, 1, SEC).unwrap().allowed);
        assert_eq!(floor(&store), 0, "the first call's sweep dropped nothing");
        assert_eq!(store.sweep(30 * SEC), 1);
        assert_eq!(
            floor(&store),
            2 * SEC,
            "the key's end, not the sweep's time"
        );
        assert_eq!(store.sweep(1_000 * SEC), 0);
        assert_eq!(floor(&store), 61 * SEC, "the block's end");
        assert_eq!(store.sweep(2_000 * SEC), 0);
        assert_eq!(floor(&store), 61 * SEC, "nothing dropped: the floor stays");
        // A key whose window ends later: the floor follows it.
        let minute = Quota::new(1, Duration::from_secs(600))
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        assert!(store.acquire("m", &minute, 1, 2_000 * SEC).unwrap().allowed);
        assert_eq!(store.sweep(100_000 * SEC), 1);
        assert_eq!(floor(&store), 2_400 * SEC);
    }

    #[test]
    fn peek_on_a_new_key_tracks_nothing() {
        let store = MemoryStore::new();
        for strategy in Strategy::ALL {
            let q = Quota::per_second(5).unwrap().with_strategy(strategy);
            let d = store.peek("k", &q, 1, SEC).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 4);
        }
        assert!(store.is_empty());
    }

    /// The compact cells recover what they do not store (a window's start, the counter's
    /// windows) from the expiry; every strategy must answer exactly as the algorithm on its
    /// full state does.
    #[test]
    fn compact_cells_decide_like_the_algorithms() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for strategy in Strategy::ALL {
            let q = Quota::new(7, Duration::from_millis(1_500))
                .unwrap()
                .with_burst(2)
                .unwrap()
                .with_strategy(strategy);
            let store = MemoryStore::new();
            let mut state = State::new(strategy);
            let mut now = 1_000 * SEC;
            for step in 0..5_000 {
                now += next(400_000_000);
                let cost = 1 + next(3);
                let commit = next(5) != 0;
                let want = algorithm::decide(&mut state, now, &q, cost, commit)
                    .map(|v| Decision::for_quota(v, now, &q))
                    .unwrap();
                let got = if commit {
                    store.acquire("k", &q, cost, now)
                } else {
                    store.peek("k", &q, cost, now)
                };
                assert_eq!(got.unwrap(), want, "{strategy}, step {step}");
                if next(50) == 0 {
                    // Sweeps drop only states equal to fresh ones.
                    store.sweep(now);
                }
            }
        }
    }

    /// The service's keys carry the quota's strategy, so another strategy's state under a
    /// key can only be a misuse of the bare store: refused, and left as it was.
    #[test]
    fn another_strategys_state_under_a_key_is_refused_and_kept() {
        let store = MemoryStore::new();
        let fixed = Quota::per_second(2)
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        let bucket = fixed.with_strategy(Strategy::TokenBucket);
        assert_eq!(store.acquire("k", &fixed, 2, SEC).unwrap().remaining, 0);
        for commit in [true, false] {
            let refused = store.decide_at("k", &bucket, 1, SEC, commit);
            assert!(
                matches!(refused, Err(Error::UnexpectedState { .. })),
                "{refused:?}"
            );
        }
        assert_eq!(store.len(), 1);
        assert!(!store.acquire("k", &fixed, 1, SEC).unwrap().allowed);
        assert!(store.reset("k"));
        assert!(!store.reset("k"));
        assert!(store.is_empty());
    }

    /// A decision compares its time once, with the next sweep's (`decision_time`), which
    /// never passes `MAX_NOW + 1`: under any sweep interval, every time past `MAX_NOW` is
    /// `ClockOutOfRange`, a capacity of zero's too, whether or not a sweep ran before.
    #[test]
    fn a_time_out_of_range_is_refused_under_any_sweep_interval() {
        use crate::algorithm::MAX_NOW;
        for every in [Duration::ZERO, Duration::from_secs(10), Duration::MAX] {
            let store = MemoryStore::with_options(MemoryOptions::default().sweep_interval(every));
            for q in [Quota::per_second(2).unwrap(), Quota::per_second(0).unwrap()] {
                for strategy in Strategy::ALL {
                    let (q, key) = (
                        q.with_strategy(strategy),
                        format!("{strategy}:{}", q.limit()),
                    );
                    for now in [SEC, MAX_NOW] {
                        assert!(store.acquire(&key, &q, 1, now).is_ok(), "{every:?} {now}");
                        for past in [MAX_NOW + 1, u64::MAX] {
                            for commit in [true, false] {
                                let r = store.decide_at(&key, &q, 1, past, commit);
                                assert!(
                                    matches!(r, Err(Error::ClockOutOfRange { now_nanos }) if now_nanos == past),
                                    "{every:?} {strategy} {now}: {r:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_keys_are_errors() {
        let store = MemoryStore::new();
        let q = Quota::per_second(5).unwrap();
        assert!(matches!(
            store.acquire("", &q, 1, SEC),
            Err(Error::InvalidKey { .. })
        ));
        let long = "x".repeat(crate::key::MAX_STORE_KEY_LEN + 1);
        assert!(matches!(
            store.acquire(&long, &q, 1, SEC),
            Err(Error::InvalidKey { .. })
        ));
        assert!(store.is_empty());
    }
}
