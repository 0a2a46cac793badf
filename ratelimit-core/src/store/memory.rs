//! The in-process store: a sharded hash table, one lock per shard, the algorithm run under it.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hashbrown::HashTable;
use parking_lot::{Condvar, Mutex};

use crate::algorithm::{self, FixedWindow, Gcra, SlidingCounter, SlidingLog, Verdict};
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::syntax::Strategy;

const SHARDS: usize = 64;

/// How long past its expiry a key is kept. Callers read `now` before taking a shard's lock, so
/// a caller holding a slightly older `now` may still need a key that a sweep at a later `now`
/// considers expired; dropping it would hand that caller a fresh budget.
const SWEEP_GRACE: Nanos = 1_000_000_000;

/// Limits of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

// Each strategy has its own table of compact cells. A lookup among more keys than the CPU
// caches hold costs a miss on the cell, so cells are kept to half a cache line: the key (16
// bytes), when the key may be dropped (8), and what the algorithm needs beyond that (8).
// What a cell does not store is recovered from the expiry and the quota's window (a key
// whose window changes between calls starts a new window unless the recovered start happens
// to line up, as a stored start had to). One enum for all four strategies plus the expiry
// took 56 bytes, straddled two lines most of the time, and measured 1.7 times governor's
// time at 100,000 keys (BENCHMARKS.md).

/// A key's state under one strategy, as stored.
trait Cell: Sized {
    /// A fresh state for a key not stored yet; the key is set only if the cell is kept.
    fn fresh() -> Self;
    fn key(&self) -> &[u8];
    fn set_key(&mut self, key: &[u8]);
    /// When the state is indistinguishable from a fresh one.
    fn expires_at(&self) -> Nanos;
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;
    fn table(tables: &mut Tables) -> &mut HashTable<Self>;
}

/// [`FixedWindow`]; the window's start is `end - window`.
struct FixedCell {
    key: Box<[u8]>,
    end: Nanos,
    count: u64,
}

/// [`SlidingLog`]; the log is boxed (it grows with the limit).
struct LogCell {
    key: Box<[u8]>,
    expires_at: Nanos,
    log: Box<SlidingLog>,
}

/// [`SlidingCounter`]; the current window's start is the expiry less one window, or two while
/// the current window has calls. Counts fit in `u32`: a [`Quota`]'s capacity is at most
/// [`MAX_CAPACITY`](crate::quota::MAX_CAPACITY).
struct CounterCell {
    key: Box<[u8]>,
    expires_at: Nanos,
    current: u32,
    previous: u32,
}

/// [`Gcra`]; the theoretical arrival time is also the expiry.
struct BucketCell {
    key: Box<[u8]>,
    tat: Nanos,
}

const _: () = assert!(std::mem::size_of::<FixedCell>() == 32);
const _: () = assert!(std::mem::size_of::<LogCell>() == 32);
const _: () = assert!(std::mem::size_of::<CounterCell>() == 32);
const _: () = assert!(std::mem::size_of::<BucketCell>() == 24);

impl Cell for FixedCell {
    fn fresh() -> Self {
        FixedCell {
            key: Box::default(),
            end: 0,
            count: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.end
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let window = quota.window_nanos();
        let mut state = FixedWindow {
            start: self.end.saturating_sub(window),
            count: self.count,
        };
        let verdict = state.decide(now, quota, cost, commit);
        if commit {
            self.end = state.expires_at(quota);
            self.count = state.count;
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.fixed
    }
}

impl Cell for LogCell {
    fn fresh() -> Self {
        LogCell {
            key: Box::default(),
            expires_at: 0,
            log: Box::default(),
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let verdict = self.log.decide(now, quota, cost, commit);
        if commit {
            self.expires_at = self.log.expires_at(quota);
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.log
    }
}

impl Cell for CounterCell {
    fn fresh() -> Self {
        CounterCell {
            key: Box::default(),
            expires_at: 0,
            current: 0,
            previous: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let window = quota.window_nanos();
        let windows = if self.current > 0 { 2 } else { 1 };
        let mut state = SlidingCounter {
            start: self.expires_at.saturating_sub(windows * window),
            current: self.current as u64,
            previous: self.previous as u64,
        };
        let verdict = state.decide(now, quota, cost, commit);
        if commit {
            self.expires_at = state.expires_at(quota);
            // Both at most the capacity, which a `Quota` keeps within `u32`.
            self.current = u32::try_from(state.current).unwrap_or(u32::MAX);
            self.previous = u32::try_from(state.previous).unwrap_or(u32::MAX);
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.counter
    }
}

impl Cell for BucketCell {
    fn fresh() -> Self {
        BucketCell {
            key: Box::default(),
            tat: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.tat
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let mut state = Gcra { tat: self.tat };
        let verdict = state.decide(now, quota, cost, commit);
        self.tat = state.tat;
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.bucket
    }
}

/// One shard: a table per strategy. A key is in at most one of them: a call on a key held
/// under another strategy is refused with [`Error::UnexpectedState`], as
/// [`algorithm::decide`] refuses it.
#[derive(Default)]
struct Tables {
    fixed: HashTable<FixedCell>,
    log: HashTable<LogCell>,
    counter: HashTable<CounterCell>,
    bucket: HashTable<BucketCell>,
}

impl Tables {
    /// Removes `key` from every table; returns how many entries went.
    fn remove_all(&mut self, hash: u64, key: &[u8]) -> usize {
        fn remove<C: Cell>(table: &mut HashTable<C>, hash: u64, key: &[u8]) -> usize {
            match table.find_entry(hash, |c| c.key() == key) {
                Ok(entry) => {
                    entry.remove();
                    1
                }
                Err(_) => 0,
            }
        }
        remove(&mut self.fixed, hash, key)
            + remove(&mut self.log, hash, key)
            + remove(&mut self.counter, hash, key)
            + remove(&mut self.bucket, hash, key)
    }

    /// Whether `key` is held under a strategy other than `strategy`.
    fn held_by_other(&self, strategy: Strategy, hash: u64, key: &[u8]) -> bool {
        let has = |s: Strategy| {
            s != strategy
                && match s {
                    Strategy::FixedWindow => self.fixed.find(hash, |c| c.key() == key).is_some(),
                    Strategy::SlidingWindow => self.log.find(hash, |c| c.key() == key).is_some(),
                    Strategy::SlidingWindowCounter => {
                        self.counter.find(hash, |c| c.key() == key).is_some()
                    }
                    Strategy::TokenBucket => self.bucket.find(hash, |c| c.key() == key).is_some(),
                }
        };
        Strategy::ALL.into_iter().any(has)
    }

    /// Drops the cells expired at `now` and gives back memory that is mostly unused.
    fn sweep(&mut self, now: Nanos, hasher: &foldhash::fast::RandomState) -> usize {
        fn sweep<C: Cell>(
            table: &mut HashTable<C>,
            now: Nanos,
            hasher: &foldhash::fast::RandomState,
        ) -> usize {
            let before = table.len();
            table.retain(|cell| cell.expires_at() > now);
            if table.capacity() > 16 && table.len() * 4 < table.capacity() {
                let target = table.len() * 2;
                table.shrink_to(target, |c| hasher.hash_one(c.key()));
            }
            before - table.len()
        }
        sweep(&mut self.fixed, now, hasher)
            + sweep(&mut self.log, now, hasher)
            + sweep(&mut self.counter, now, hasher)
            + sweep(&mut self.bucket, now, hasher)
    }
}

#[repr(align(128))]
struct Shard(Mutex<Tables>);

struct Inner {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::RandomState,
    len: AtomicUsize,
    options: MemoryOptions,
    next_sweep: AtomicU64,
    /// The latest time (less the grace) a sweep dropped keys at. Decisions never run before
    /// it: a key dropped then was expired at that time, and a wall clock stepped back must
    /// not find it fresh (the algorithms already never decide before a kept key's own time).
    floor: AtomicU64,
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
/// - **Atomic**: each decision runs the algorithm under the lock of the key's shard, so with a
///   limit of L exactly L of any number of concurrent calls pass.
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
        let shards = (0..SHARDS)
            .map(|_| Shard(Mutex::new(Tables::default())))
            .collect();
        MemoryStore {
            inner: Arc::new(Inner {
                shards,
                hasher: foldhash::fast::RandomState::default(),
                len: AtomicUsize::new(0),
                options,
                next_sweep: AtomicU64::new(0),
                floor: AtomicU64::new(0),
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
    pub fn peek(&self, key: &str, quota: &Quota, cost: u64, now: Nanos) -> Result<Decision, Error> {
        self.decide_at(key, quota, cost, now, false)
    }

    /// Forgets `key`; returns whether it was tracked.
    pub fn reset(&self, key: &str) -> bool {
        let key = key.as_bytes();
        let hash = self.inner.hasher.hash_one(key);
        let removed = self.shard(hash).lock().remove_all(hash, key);
        self.inner.len.fetch_sub(removed, Ordering::Relaxed);
        removed > 0
    }

    /// Keys currently tracked (including expired ones not yet swept).
    pub fn len(&self) -> usize {
        self.inner.len.load(Ordering::Relaxed)
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose window passed more than a second before `now` (the second covers
    /// callers holding a slightly older `now`); returns how many were dropped. Runs by itself
    /// (see the type's docs); public for callers that want memory back at once.
    pub fn sweep(&self, now: Nanos) -> usize {
        let now = now.saturating_sub(SWEEP_GRACE);
        // Raised before the keys go, so that no decision runs before what was dropped.
        self.inner.floor.fetch_max(now, Ordering::AcqRel);
        let mut removed = 0;
        for shard in self.inner.shards.iter() {
            removed += shard.0.lock().sweep(now, &self.inner.hasher);
        }
        self.inner.len.fetch_sub(removed, Ordering::Relaxed);
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
                    wake.wait_for(&mut stopped, every);
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

    fn shard(&self, hash: u64) -> &Mutex<Tables> {
        &self.inner.shards[(hash >> 32) as usize % SHARDS].0
    }

    fn maybe_sweep(&self, now: Nanos) {
        let next = self.inner.next_sweep.load(Ordering::Relaxed);
        if now < next {
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

    /// The decision, synchronously: what [`Store::decide`](super::Store::decide) answers.
    pub(crate) fn decide_at(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        crate::key::check_store_key(key)?;
        let decision = |v: Verdict| Decision::for_quota(v, now, quota);
        if let Some(verdict) = algorithm::precheck(now, quota, cost, commit)? {
            return Ok(decision(verdict));
        }
        self.maybe_sweep(now);
        // A clock stepped back behind the last sweep decides at the sweep's time.
        let at = now.max(self.inner.floor.load(Ordering::Acquire));
        let verdict = match quota.strategy() {
            Strategy::FixedWindow => self.decide_in::<FixedCell>(key, quota, cost, at, commit),
            Strategy::SlidingWindow => self.decide_in::<LogCell>(key, quota, cost, at, commit),
            Strategy::SlidingWindowCounter => {
                self.decide_in::<CounterCell>(key, quota, cost, at, commit)
            }
            Strategy::TokenBucket => self.decide_in::<BucketCell>(key, quota, cost, at, commit),
        }?;
        Ok(decision(verdict))
    }

    /// The decision in the strategy's own table, under the shard's lock.
    fn decide_in<C: Cell>(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Verdict, Error> {
        let key = key.as_bytes();
        let hash = self.inner.hasher.hash_one(key);
        for attempt in 0..2 {
            let mut tables = self.shard(hash).lock();
            if let Some(cell) = C::table(&mut tables).find_mut(hash, |c| c.key() == key) {
                return Ok(algorithm::level(cost, commit, |cost, commit| {
                    cell.decide(now, quota, cost, commit)
                }));
            }
            if tables.held_by_other(quota.strategy(), hash, key) {
                return Err(algorithm::Undecidable::UnexpectedState.into());
            }
            let mut cell = C::fresh();
            let verdict = algorithm::level(cost, commit, |cost, commit| {
                cell.decide(now, quota, cost, commit)
            });
            if !commit || !verdict.allowed {
                // Nothing to remember: a fresh key that was only looked at or refused outright.
                return Ok(verdict);
            }
            if self.reserve() {
                cell.set_key(key);
                let hasher = &self.inner.hasher;
                C::table(&mut tables).insert_unique(hash, cell, |c| hasher.hash_one(c.key()));
                return Ok(verdict);
            }
            drop(tables);
            if attempt == 0 {
                self.sweep(now);
            }
        }
        Err(Error::StoreFull {
            max_keys: self.inner.options.max_keys,
        })
    }

    fn reserve(&self) -> bool {
        let max = self.inner.options.max_keys;
        self.inner
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }
}

impl super::Store for MemoryStore {
    async fn decide(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        self.decide_at(key, quota, cost, now, commit)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(MemoryStore::reset(self, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::State;

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
        // Once a's and b's windows have passed (plus the sweep's grace), the sweep at the cap
        // makes room.
        assert!(matches!(
            store.acquire("c", &q, 1, 3 * SEC - 1),
            Err(Error::StoreFull { .. })
        ));
        assert!(store.acquire("c", &q, 1, 3 * SEC).unwrap().allowed);
        assert_eq!(store.len(), 1);
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
