//! The in-process store: a sharded hash table, one lock per shard, the algorithm run under it.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hashbrown::HashTable;
use parking_lot::{Condvar, Mutex};

use crate::algorithm::{self, State, Undecidable};
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::quota::Quota;
use crate::Error;

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

struct Slot {
    key: Box<str>,
    expires_at: Nanos,
    state: State,
}

#[repr(align(128))]
struct Shard(Mutex<HashTable<Slot>>);

struct Inner {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::RandomState,
    len: AtomicUsize,
    options: MemoryOptions,
    next_sweep: AtomicU64,
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
/// let quota = Quota::per_second(2);
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

fn undecidable(e: Undecidable) -> Error {
    match e {
        Undecidable::ZeroCost => Error::ZeroCost,
        Undecidable::CostAboveCapacity { cost, capacity } => {
            Error::CostAboveCapacity { cost, capacity }
        }
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
            .map(|_| Shard(Mutex::new(HashTable::new())))
            .collect();
        MemoryStore {
            inner: Arc::new(Inner {
                shards,
                hasher: foldhash::fast::RandomState::default(),
                len: AtomicUsize::new(0),
                options,
                next_sweep: AtomicU64::new(0),
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
        self.decide(key, quota, cost, now, true)
    }

    /// What [`acquire`](Self::acquire) would answer, without changing anything.
    pub fn peek(&self, key: &str, quota: &Quota, cost: u64, now: Nanos) -> Result<Decision, Error> {
        self.decide(key, quota, cost, now, false)
    }

    /// Forgets `key`; returns whether it was tracked.
    pub fn reset(&self, key: &str) -> bool {
        let hash = self.inner.hasher.hash_one(key);
        let mut table = self.shard(hash).lock();
        match table.find_entry(hash, |s| &*s.key == key) {
            Ok(entry) => {
                entry.remove();
                self.inner.len.fetch_sub(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
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
        let mut removed = 0;
        for shard in self.inner.shards.iter() {
            let mut table = shard.0.lock();
            let before = table.len();
            table.retain(|slot| slot.expires_at > now);
            removed += before - table.len();
            if table.capacity() > 16 && table.len() * 4 < table.capacity() {
                let hasher = &self.inner.hasher;
                let target = table.len() * 2;
                table.shrink_to(target, |s| hasher.hash_one(&*s.key));
            }
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

    fn shard(&self, hash: u64) -> &Mutex<HashTable<Slot>> {
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

    fn decide(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        super::check_key(key)?;
        quota
            .validate()
            .map_err(|reason| Error::InvalidQuota { reason })?;
        self.maybe_sweep(now);
        let hash = self.inner.hasher.hash_one(key);
        let decision = |state: &mut State| {
            algorithm::decide(state, now, quota, cost, commit)
                .map(|v| Decision::from_verdict(v, now, quota.capacity(), quota.window, None))
                .map_err(undecidable)
        };
        for attempt in 0..2 {
            let mut table = self.shard(hash).lock();
            if let Some(slot) = table.find_mut(hash, |s| &*s.key == key) {
                let d = decision(&mut slot.state)?;
                if commit {
                    slot.expires_at = slot.state.expires_at(quota);
                }
                return Ok(d);
            }
            let mut state = State::new(quota.strategy);
            let d = decision(&mut state)?;
            if !commit || !d.allowed {
                // Nothing to remember: a fresh key that was only looked at or refused outright.
                return Ok(d);
            }
            if self.reserve() {
                let hasher = &self.inner.hasher;
                table.insert_unique(
                    hash,
                    Slot {
                        key: key.into(),
                        expires_at: state.expires_at(quota),
                        state,
                    },
                    |s| hasher.hash_one(&*s.key),
                );
                return Ok(d);
            }
            drop(table);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Strategy;

    const SEC: Nanos = 1_000_000_000;

    #[test]
    fn debug_never_prints_keys() {
        let store = MemoryStore::new();
        store
            .acquire("secret-user-42", &Quota::per_second(1), 1, SEC)
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
        let q = Quota::per_second(5);
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
            let q = Quota::per_second(5).with_strategy(strategy);
            let d = store.peek("k", &q, 1, SEC).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 4);
        }
        assert!(store.is_empty());
    }

    #[test]
    fn bad_keys_are_errors() {
        let store = MemoryStore::new();
        let q = Quota::per_second(5);
        assert!(matches!(
            store.acquire("", &q, 1, SEC),
            Err(Error::InvalidKey { .. })
        ));
        let long = "x".repeat(crate::store::MAX_KEY_LEN + 1);
        assert!(matches!(
            store.acquire(&long, &q, 1, SEC),
            Err(Error::InvalidKey { .. })
        ));
        assert!(store.is_empty());
    }
}
