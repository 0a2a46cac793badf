//! Leased budgets (opt-in, [`LeaseOptions`]): a process reserves a slice of a hot key's budget
//! in one script (`lua/lease_grant.lua`) and spends it in the process, so a fleet sharing one
//! hot key needs one round trip per slice instead of one per decision.
//!
//! Why the fleet never admits more than the limit: a slice is recorded in Redis as spent, by
//! the strategy's own script on the key's own state, before any of it is spent here; a slice is
//! spent only under its key's lock (exact whatever the number of tasks), and only while it still
//! counts in Redis:
//! - fixed window: until its window ends (the window's count expires then, and the slice with
//!   it);
//! - token bucket: the `j`-th unit of a slice only until `tat0 + j * interval`, where `tat0` is
//!   the bucket's theoretical arrival time before the slice. Spent by then, every unit is a
//!   call GCRA admits at the instant it is spent, with Redis' state unchanged (the slice took
//!   those very slots); later, the bucket would have refilled it, so it is dropped.
//!
//! Deadlines are measured on this process's monotonic clock from the instant the grant was
//! sent, before Redis read its clock: never later than Redis' own.
//!
//! A lease never outlives the state it was carved from:
//! - **a reset**, from any process: the grant records the slice beside the key (its ledger,
//!   [`ledger_key`](super::ledger::ledger_key)), and a reset (`lua/reset.lua`) keeps counting what is leased out, so a
//!   lease held elsewhere spends only units the key still counts; they come back to the key
//!   when the lease is given back. A reset through this store drops its own lease first.
//! - **a Redis restarted empty** (or a connection lost for any reason): a lease is spent only
//!   while no connection of the store has ended since its grant was sent (Redis closing the
//!   connection ends it at once); its units can still be given back, which the ledger allows
//!   only to the state they came from. A Redis Cluster keeps redis-rs' connections, which
//!   reconnect unseen: there, a failover that loses acknowledged grants (asynchronous
//!   replication) lets each process spend them again on the new master: at most its slice
//!   plus what it admitted in the replication lag before the failover (RELIABILITY.md).
//!
//! Unspent units are given back (`lua/lease_return.lua`) when the key has been idle for
//! [`LeaseOptions::idle`], when the store is dropped (by the background task that sweeps idle
//! leases, while the Tokio runtime runs), or on [`RedisStore::return_leases`], and only while
//! they are still the key's own (the same fixed window; the bucket as the slice left it).
//! Otherwise they expire as above: under-admission, never over-admission.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

mod options;
mod slice;

pub use self::options::LeaseOptions;
use self::slice::Lease;
use super::arguments::arguments;
use super::ledger::{erased_key, ledger_key};
use super::link::FOREVER;
use super::reply::full;
use super::scripts::{wrapped, Lua};
use super::RedisStore;
use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;
use crate::syntax::Strategy;

/// `lua/lease_grant.lua` behind the two strategies' scripts, each as a function of
/// `(KEYS, ARGV)`, wrapped as `lua/stacked.lua`'s are.
const GRANT: &str = concat!(
    wrapped!("fixed_window"),
    wrapped!("token_bucket"),
    include_str!("../../../lua/ledger.lua"),
    include_str!("../../../lua/lease_grant.lua"),
);

pub(super) static GRANT_SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(GRANT));
pub(super) static RETURN_SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../lua/ledger.lua"),
        include_str!("../../../lua/beside.lua"),
        include_str!("../../../lua/lease_return.lua"),
    ))
});

/// A lease's id, its field in the key's ledger: never 0, and (drawn from a random start per
/// process) distinct from the other processes' with near certainty.
fn lease_id() -> u64 {
    use std::hash::BuildHasher;
    static START: LazyLock<u64> = LazyLock::new(|| {
        foldhash::fast::RandomState::default().hash_one((std::process::id(), Instant::now()))
    });
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = START.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
    // A Lua number holds integers exactly to 2^53: ids stay below it.
    (id & ((1 << 53) - 1)).max(1)
}

/// The strategy's number in the lease scripts, for the strategies that lease. Any other
/// strategy (one added to the table of algorithms without lease rules of its own) is decided
/// on the plain path, one round trip per call: never more than the plain decision admits.
fn leased(strategy: Strategy) -> Option<u8> {
    match strategy {
        Strategy::FixedWindow => Some(1),
        Strategy::TokenBucket => Some(4),
        _ => None,
    }
}

/// One key's lease: spent under a plain lock held for a few instructions (no await, so 64
/// tasks spending one key never queue as futures), and one grant in flight at a time (the async
/// lock, held across the round trip).
#[derive(Debug, Default)]
struct Slot {
    lease: Mutex<Option<Lease>>,
    grant: tokio::sync::Mutex<()>,
}

impl Slot {
    fn lease(&self) -> std::sync::MutexGuard<'_, Option<Lease>> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spend(
        &self,
        cost: u64,
        quota: &Quota,
        now: Instant,
        epoch: u64,
    ) -> Option<(Verdict, Nanos)> {
        self.lease().as_mut()?.spend(cost, quota, now, epoch)
    }

    /// Whether the slot holds a lease whose units still count.
    fn live(&self, now: Instant) -> bool {
        self.lease().is_some_and(|l| l.live(now))
    }
}

/// The leased keys of one store.
#[derive(Debug)]
pub(super) struct Leases {
    options: LeaseOptions,
    /// Hashed as the memory store hashes its keys (foldhash, seeded per map): SipHash was a
    /// measurable part of a leased decision (BENCHMARKS.md, `redis_lease`).
    keys: Mutex<HashMap<String, Arc<Slot>, foldhash::fast::RandomState>>,
    /// Whether the task that gives idle leases back runs.
    sweeping: AtomicBool,
    /// How many of the store's connections have ended (see [`Lease::epoch`]).
    ended: Arc<AtomicU64>,
}

impl Leases {
    /// `ended` counts the store's connections that have ended.
    pub(super) fn new(options: LeaseOptions, ended: Arc<AtomicU64>) -> Self {
        Leases {
            options,
            keys: Mutex::new(HashMap::default()),
            sweeping: AtomicBool::new(false),
            ended,
        }
    }

    fn epoch(&self) -> u64 {
        self.ended.load(Ordering::Acquire)
    }

    /// `key`'s slot, `None` when the table is full of keys whose leases still count.
    fn slot(&self, key: &str) -> Option<Arc<Slot>> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = keys.get(key) {
            return Some(slot.clone());
        }
        if keys.len() >= self.options.max_keys {
            let now = Instant::now();
            keys.retain(|_, slot| slot.live(now) || slot.grant.try_lock().is_err());
            if keys.len() >= self.options.max_keys {
                return None;
            }
        }
        let slot = Arc::new(Slot::default());
        keys.insert(key.to_owned(), slot.clone());
        Some(slot)
    }

    /// Forgets `key`'s lease (a reset through this store): its units are not given back, the
    /// reset clears them with the key. Returns the lease's id, for the reset to take it out of
    /// the key's ledger (`lua/reset.lua`): 0 for a lease granted before a connection was lost
    /// (Redis may have restarted since, with a ledger that never held it).
    pub(super) fn forget(&self, key: &str) -> u64 {
        let slot = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        slot.and_then(|slot| slot.lease().take())
            .filter(|lease| lease.epoch == self.epoch())
            .map_or(0, |lease| lease.id)
    }

    /// Spends `cost` units of `key`'s lease at `now` when it holds them and they still
    /// count: no round trip, no allocation, no wait. `None`, having spent nothing, when the
    /// key holds no such lease (a grant is needed: [`decide`](Self::decide)) or its strategy
    /// does not lease.
    pub(super) fn spend(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Instant,
    ) -> Option<(Verdict, Nanos)> {
        leased(quota.strategy())?;
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.get(key)?.spend(cost, quota, now, self.epoch())
    }

    /// Decides a call that spends through `key`'s lease, asking Redis for a new slice when it
    /// has none left. `None` when the quota's strategy does not lease or the table is full:
    /// the caller asks Redis as usual.
    pub(super) async fn decide(
        &self,
        store: &RedisStore,
        key: &str,
        quota: &Quota,
        cost: u64,
        started: Instant,
    ) -> Option<Result<(Verdict, Nanos), Error>> {
        leased(quota.strategy())?;
        let (refusals, clock) = (&store.inner.refusals, &store.inner.clock);
        let slot = self.slot(key)?;
        // The lease was tried just before (`RedisStore::answered_here`, the one caller's first
        // step): what a grant in flight adds is spent below, once the grant lock is ours. The
        // wait for the lock and the grant after it share the call's one timeout, from `started`.
        let timeout = store.options().timeout;
        let deadline = started.checked_add(timeout).unwrap_or(started + FOREVER);
        let locked = tokio::time::timeout_at(deadline.into(), slot.grant.lock()).await;
        let Ok(_granting) = locked else {
            return Some(Err(Error::Timeout { after: timeout }));
        };
        // Granted by the call that held the grant lock before this one: spent from that.
        let now = Instant::now();
        let epoch = self.epoch();
        if let Some(decided) = slot.spend(cost, quota, now, epoch) {
            return Some(Ok(decided));
        }
        // Refused meanwhile (by a call that held the lock before this one): answered here.
        if let Some(answered) = refusals.answer_on_redis_clock(key, cost, quota, now, clock) {
            return Some(Ok(answered));
        }
        // Units left of this quota's lease, fewer than the cost: taken out before the round
        // trip (no other call spends them meanwhile) and spent with the grant's, so that a
        // grant over an unfinished lease never drops its units; put back if it refuses.
        // The lease this grant replaces, taken out of the ledger with it (spent, or carried).
        let (replaced, carried) = match slot.lease().as_mut() {
            Some(l) => (
                if l.epoch == epoch { l.id } else { 0 },
                l.take_rest(quota, now, epoch),
            ),
            None => (0, None),
        };
        let carry = carried.map_or(0, |c| c.left);
        let decided = self
            .grant(store, key, quota, cost - carry, replaced, started)
            .await;
        let put_back = || {
            if let (Some(carried), Some(lease)) = (carried, slot.lease().as_mut()) {
                lease.put_back(&carried);
            }
        };
        let (verdict, at, granted) = match decided {
            Ok(decided) => decided,
            Err(e) => {
                put_back();
                return Some(Err(e));
            }
        };
        let Some(mut lease) = granted else {
            refusals.record(key, cost, quota, &verdict, now);
            put_back();
            return Some(Ok((verdict, at)));
        };
        let mut decided = (verdict, at);
        if let Some(carried) = carried.filter(|c| !c.live(Instant::now())) {
            // The carried units stopped counting during the round trip (their window ended):
            // the call is decided on the new slice alone.
            decided = lease.respend(carried.left, cost, Instant::now());
        }
        *slot.lease() = Some(lease);
        self.sweep(store);
        Some(Ok(decided))
    }

    /// One round trip: a slice for `key`, the call's cost spent from it (or the refusal); the
    /// lease it replaces (`in_ledger`) leaves the ledger.
    async fn grant(
        &self,
        store: &RedisStore,
        key: &str,
        quota: &Quota,
        cost: u64,
        replaced: u64,
        started: Instant,
    ) -> Result<(Verdict, Nanos, Option<Lease>), Error> {
        let kind = leased(quota.strategy()).ok_or_else(|| Error::Store {
            message: format!("the {} does not lease", quota.strategy()),
        })?;
        let want = self.options.slice.max(cost).min(quota.capacity());
        let [first, second] = arguments(quota);
        let id = lease_id();
        let args = [u64::from(kind), first, second, cost, want, id, replaced];
        let (sent, epoch) = (Instant::now(), self.epoch());
        let ledger = ledger_key(key);
        let keys = [key, ledger.as_str()];
        // Bounded from the call's start (the wait for the grant lock came out of the same
        // timeout); the lease's deadlines are measured from `sent`.
        let reply: Vec<i64> = store
            .run(&GRANT_SCRIPT, &keys, &args, false, started)
            .await?;
        let unexpected = || Error::Store {
            message: format!("unexpected reply from the lease script: {reply:?}"),
        };
        let [granted, ref rest @ ..] = reply[..] else {
            return Err(unexpected());
        };
        let (verdict, redis_now) = full(rest).ok_or_else(unexpected)?;
        let granted = u64::try_from(granted).map_err(|_| unexpected())?;
        if granted == 0 {
            // Fail closed: a grant of nothing is a refusal, whatever the reply says.
            if verdict.allowed || verdict.retry_after.is_none() {
                return Err(unexpected());
            }
            return Ok((verdict, redis_now, None));
        }
        if !verdict.allowed || granted < cost || granted > want {
            return Err(unexpected());
        }
        // The window's end, or the arrival time before the slice (its first unit's deadline).
        let interval_us = if kind == 4 { first } else { 0 };
        let start = verdict
            .reset_at
            .checked_sub(granted * interval_us * 1_000)
            .ok_or_else(unexpected)?;
        let lease = Lease {
            kind,
            epoch,
            id,
            quota: *quota,
            granted,
            left: granted - cost,
            spent: cost,
            until: sent + Duration::from_nanos(start.saturating_sub(redis_now)),
            interval: Duration::from_micros(interval_us),
            sent,
            redis_now,
            remaining: verdict.remaining,
            reset_at: verdict.reset_at,
            stamp_us: verdict.reset_at / 1_000,
            interval_us,
            last_used: sent,
        };
        let verdict = Verdict {
            remaining: verdict.remaining + lease.left,
            ..verdict
        };
        Ok((verdict, redis_now, Some(lease)))
    }

    /// Gives back the unspent units of every lease (`all`) or of those idle for
    /// [`LeaseOptions::idle`]; forgets leases that no longer count. Returns the units Redis
    /// took back.
    pub(super) async fn give_back(&self, store: &RedisStore, all: bool) -> Result<u64, Error> {
        let now = Instant::now();
        let slots: Vec<(String, Arc<Slot>)> = {
            let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.iter().map(|(k, s)| (k.clone(), s.clone())).collect()
        };
        let mut returned = 0;
        for (key, slot) in slots {
            let Ok(granting) = slot.grant.try_lock() else {
                continue; // a grant in flight: not idle
            };
            let lease = {
                let mut lease = slot.lease();
                let Some(l) = *lease else {
                    drop((lease, granting));
                    self.drop_if(&key, &slot);
                    continue;
                };
                let leaving =
                    all || now.saturating_duration_since(l.last_used) >= self.options.idle;
                // In use; or spent but still in the ledger, to leave it when idle.
                let counts = l.ends().is_some_and(|end| now < end);
                if !leaving && (l.live(now) || counts) {
                    continue;
                }
                // Taken out before the round trip: never both spent here and given back. A
                // lease from before a connection ended is not given back (Redis may have
                // restarted, with a ledger that never held it): its units expire.
                *lease = None;
                Some(l).filter(|l| counts && l.epoch == self.epoch())
            };
            let Some(lease) = lease else {
                drop(granting);
                self.drop_if(&key, &slot);
                continue;
            };
            let units = if lease.live(now) { lease.left } else { 0 };
            let args = [
                u64::from(lease.kind),
                units,
                lease.stamp_us,
                lease.interval_us,
                lease.id,
            ];
            let (ledger, erased) = (ledger_key(&key), erased_key(&key));
            let keys = [key.as_str(), ledger.as_str(), erased.as_str()];
            let back: u64 = store
                .run(&RETURN_SCRIPT, &keys, &args, false, Instant::now())
                .await?;
            returned += back;
            drop(granting);
            self.drop_if(&key, &slot);
        }
        Ok(returned)
    }

    /// Removes `key` from the table if `slot` is still its slot and holds no lease.
    fn drop_if(&self, key: &str, slot: &Arc<Slot>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.get(key).is_some_and(|s| Arc::ptr_eq(s, slot))
            && slot.lease().is_none()
            && slot.grant.try_lock().is_ok()
        {
            keys.remove(key);
        }
    }

    /// Starts the task that gives idle leases back, and all of them when it holds the last
    /// handle on the store (the store was dropped), unless it runs. It ends then, or with the
    /// runtime it runs on: the next grant, on whatever runtime, starts it again.
    fn sweep(&self, store: &RedisStore) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        /// Clears `sweeping` when the task ends, however it ends (dropped with its runtime).
        struct Sweeping(RedisStore);
        impl Drop for Sweeping {
            fn drop(&mut self) {
                if let Some(leases) = self.0.leases() {
                    leases.sweeping.store(false, Ordering::Release);
                }
            }
        }
        let sweeping = Sweeping(store.clone());
        let period = (self.options.idle / 2).max(Duration::from_millis(1));
        tokio::spawn(async move {
            let store = &sweeping.0;
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let dropped = store.handles() == 1;
                if let Some(leases) = store.leases() {
                    // A failure leaves the units to expire; the next tick tries the others.
                    let _ = leases.give_back(store, dropped).await;
                }
                if dropped {
                    return;
                }
            }
        });
    }
}

impl RedisStore {
    /// Gives every unspent leased unit back to Redis now (see [`LeaseOptions`]), e.g. before
    /// a graceful shutdown; returns how many units Redis took back (units of a window that has
    /// ended, or of a bucket spent from since, are not: they no longer count). Without leases,
    /// 0.
    pub async fn return_leases(&self) -> Result<u64, Error> {
        match self.leases() {
            Some(leases) => leases.give_back(self, true).await,
            None => Ok(0),
        }
    }
}
