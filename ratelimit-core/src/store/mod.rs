//! The [`Store`] trait: where limiter state lives, and what implementing a store of your own
//! takes. Every store runs the algorithm inside its own atomic step, never as a
//! read-modify-write across calls.
//!
//! The stores this crate ships are at the crate root:
//!
//! - [`MemoryStore`]: this process's memory.
//! - `RedisStore` (feature `redis`): Redis or Redis Cluster, shared by a fleet.
//! - [`Failover`]: any store with a [`FailurePolicy`] for
//!   when it cannot answer.
//! - Your own: implement [`Store`], and run the algorithms on your storage through
//!   [`StoredState`] (load the bytes, decide, save the bytes, inside one transaction).

use std::future::Future;
use std::pin::Pin;

// The stores themselves are public at the crate root only (one public path per item).
pub(crate) mod failover;
pub(crate) mod memory;
#[cfg(feature = "redis")]
pub(crate) mod redis;
mod state;

// Without Redis, only doc links (`crate::store::FailurePolicy`) name these here.
#[cfg_attr(not(feature = "redis"), allow(unused_imports))]
pub(crate) use self::failover::{Failover, FailurePolicy};
pub(crate) use self::memory::{MemoryOptions, MemoryStore};
#[cfg(feature = "redis")]
pub(crate) use self::redis::{RedisOptions, RedisStore};
pub use self::state::StoredState;

use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};

/// A place where limiter state lives, deciding each call in one atomic step.
///
/// The service composes the key (prefix, budget, tier, user key and the quota's identity) and
/// hands the store a [`Quota`] that is already valid: a store keys its state by `key` alone,
/// and never needs to validate the quota again.
///
/// Contract, checked by the crate's own stores and expected of yours:
/// - **Atomic**: with `commit`, the decision and the record of an admitted call are one step;
///   with a limit of L, exactly L of any number of concurrent calls pass.
/// - **Fail closed**: state of an unexpected shape under `key` is
///   [`Error::UnexpectedState`] (and left as it was), never a fresh key; a store that cannot
///   answer returns [`Error::Store`] or [`Error::Timeout`], never an allowance.
/// - **Cost 0** (only without `commit`) is a look at the level now: what remains, when the
///   budget is full again, `allowed` when a call of cost 1 would pass. [`StoredState::decide`]
///   implements all of this.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use ratelimit_core::store::{Check, Store, StoredState};
/// use ratelimit_core::{Config, Decision, Error, Nanos, Options, Quota, RateLimitService};
/// use ratelimit_core::SystemClock;
///
/// /// A store over a plain map: the shape of one over any storage with transactions.
/// #[derive(Default)]
/// struct MapStore(Mutex<HashMap<String, Vec<u8>>>);
///
/// impl Store for MapStore {
///     async fn decide(&self, key: &str, quota: &Quota, cost: u64, now: Nanos, commit: bool)
///         -> Result<Decision, Error>
///     {
///         let mut map = self.0.lock().unwrap(); // the transaction
///         let mut state = match map.get(key) {
///             Some(bytes) => StoredState::from_bytes(bytes)?,
///             None => StoredState::new(quota),
///         };
///         let decision = state.decide(now, quota, cost, commit)?;
///         if commit && decision.allowed {
///             map.insert(key.to_owned(), state.to_bytes());
///         }
///         Ok(decision)
///     }
///
///     async fn decide_all(&self, checks: &[Check<'_>], now: Nanos, commit: bool)
///         -> Result<Vec<Decision>, Error>
///     {
///         let mut map = self.0.lock().unwrap(); // one transaction for every limit
///         let mut states = Vec::new();
///         for c in checks {
///             states.push(match map.get(c.key) {
///                 Some(bytes) => StoredState::from_bytes(bytes)?,
///                 None => StoredState::new(c.quota),
///             });
///         }
///         // Look at every limit; spend from each only if all admit the call.
///         let mut decisions = Vec::new();
///         for (c, state) in checks.iter().zip(&mut states) {
///             decisions.push(state.decide(now, c.quota, c.cost, false)?);
///         }
///         if commit && decisions.iter().all(|d| d.allowed) {
///             for (i, (c, state)) in checks.iter().zip(&mut states).enumerate() {
///                 decisions[i] = state.decide(now, c.quota, c.cost, true)?;
///                 map.insert(c.key.to_owned(), state.to_bytes());
///             }
///         }
///         Ok(decisions)
///     }
///
///     async fn reset(&self, key: &str) -> Result<bool, Error> {
///         Ok(self.0.lock().unwrap().remove(key).is_some())
///     }
/// }
///
/// // Without `decide_now` (see there), every decision is awaited.
/// let config = Config::builder().default_limit(1).build()?;
/// let service = RateLimitService::with_store(config, MapStore::default(), Arc::new(SystemClock))?;
/// let options = Options::new();
/// assert!(service.consume_now("user:1", &options).is_none());
/// futures::executor::block_on(async {
///     assert!(service.consume("user:1", &options).await?.allowed);
///     assert!(!service.consume("user:1", &options).await?.allowed);
///     Ok::<(), Error>(())
/// })?;
/// # Ok::<(), ratelimit_core::Error>(())
/// ```
pub trait Store: Send + Sync + 'static {
    /// Decides a call of weight `cost` on `key` at `now` (nanoseconds since the epoch, from
    /// the service's clock) and, with `commit`, records it if allowed.
    fn decide(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Decides a call against several limits as one (stacked limits, such as a short
    /// window against bursts and a long one): with `commit`, the call is admitted and spent
    /// from every limit only if every limit admits it, in one atomic step; a call refused by
    /// one limit spends nothing from the others. One decision per check, in order.
    fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        commit: bool,
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send;

    /// Forgets `key`; returns whether it was held.
    fn reset(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;

    /// [`decide`](Self::decide) when the store can answer without waiting (a budget leased
    /// to this process, a refusal still in force, state in memory): the service asks this
    /// first for every call that does not wait in the queue, and awaits `decide` only on
    /// `None`, so a decision answered here builds no future.
    ///
    /// Contract: `Some` is exactly what `decide` would have decided and recorded at this
    /// moment, with the same checks and the same errors; `None` has decided and spent
    /// nothing (the service then calls `decide`). Default: `None` for every call, so a store
    /// that always waits (a round trip per decision) does not implement it.
    ///
    /// A store whose every decision is made in this process answers here, and its `decide`
    /// forwards:
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::{Arc, Mutex};
    /// use ratelimit_core::store::{Check, Store, StoredState};
    /// use ratelimit_core::{Config, Decision, Error, Nanos, Options, Quota, RateLimitService};
    /// use ratelimit_core::SystemClock;
    ///
    /// #[derive(Default)]
    /// struct Local(Mutex<HashMap<String, Vec<u8>>>);
    ///
    /// impl Store for Local {
    ///     fn decide_now(&self, key: &str, quota: &Quota, cost: u64, now: Nanos, commit: bool)
    ///         -> Option<Result<Decision, Error>>
    ///     {
    ///         let mut map = self.0.lock().unwrap();
    ///         let mut state = match map.get(key) {
    ///             Some(bytes) => match StoredState::from_bytes(bytes) {
    ///                 Ok(state) => state,
    ///                 Err(e) => return Some(Err(e)),
    ///             },
    ///             None => StoredState::new(quota),
    ///         };
    ///         let decision = state.decide(now, quota, cost, commit);
    ///         if commit && decision.as_ref().is_ok_and(|d| d.allowed) {
    ///             map.insert(key.to_owned(), state.to_bytes());
    ///         }
    ///         Some(decision)
    ///     }
    ///
    ///     async fn decide(&self, key: &str, quota: &Quota, cost: u64, now: Nanos, commit: bool)
    ///         -> Result<Decision, Error>
    ///     {
    ///         self.decide_now(key, quota, cost, now, commit).expect("decided at once")
    ///     }
    ///
    ///     async fn decide_all(&self, _: &[Check<'_>], _: Nanos, _: bool)
    ///         -> Result<Vec<Decision>, Error>
    ///     {
    ///         Err(Error::Store { message: "no stacked limits here".into() })
    ///     }
    ///
    ///     async fn reset(&self, key: &str) -> Result<bool, Error> {
    ///         Ok(self.0.lock().unwrap().remove(key).is_some())
    ///     }
    /// }
    ///
    /// let config = Config::builder().default_limit(1).build()?;
    /// let service = RateLimitService::with_store(config, Local::default(), Arc::new(SystemClock))?;
    /// let options = Options::new();
    /// // Decided without a future (`consume` would not wait either).
    /// assert!(service.consume_now("user:1", &options).unwrap()?.allowed);
    /// assert!(!service.consume_now("user:1", &options).unwrap()?.allowed);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    fn decide_now(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Decision, Error>> {
        let _ = (key, quota, cost, now, commit);
        None
    }

    /// [`decide_all`](Self::decide_all) when the store can answer without waiting, under the
    /// contract of [`decide_now`](Self::decide_now). Default: `None` for every call.
    fn decide_all_now(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Vec<Decision>, Error>> {
        let _ = (checks, now, commit);
        None
    }

    /// Whether [`decide_now`](Self::decide_now) and [`decide_all_now`](Self::decide_all_now)
    /// answer every call (a store whose every decision is made in this process). A sync
    /// annotated fn runs only on such a store: on any other it is refused with
    /// [`Error::SyncOnWaitingStore`], never blocked on, and never admitted only while a
    /// leased budget lasts. Default: `false`.
    fn decides_at_once(&self) -> bool {
        false
    }

    /// Whether this store can count `quota` exactly. The service calls it for every limit it
    /// resolves, and `Module::init` for every annotated fn, so a limit the store cannot count
    /// is a start-up error or a refused call, never a miscounted one. Default: any valid quota.
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        let _ = quota;
        Ok(())
    }
}

/// One limit of a stacked decision ([`Store::decide_all`]): a key, its quota, the call's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'a> {
    /// The store key.
    pub key: &'a str,
    /// The limit.
    pub quota: &'a Quota,
    /// What the call costs under it.
    pub cost: u64,
}

/// What every store decides about a stacked call before touching any state, one entry per
/// check: an error for a bad key, for the same key twice (its two looks would both see the
/// state before either spent) or for a cost that can never pass; `Some` refusal for a zero
/// capacity; `None` where the store decides.
pub(crate) fn precheck_all(
    checks: &[Check<'_>],
    now: Nanos,
    commit: bool,
) -> Result<Vec<Option<crate::algorithm::Verdict>>, Error> {
    let mut fixed = Vec::with_capacity(checks.len());
    for (i, check) in checks.iter().enumerate() {
        crate::key::check_store_key(check.key)?;
        if checks[..i].iter().any(|other| other.key == check.key) {
            return Err(Error::InvalidKey {
                reason: "the same key twice in one stacked decision",
            });
        }
        fixed.push(crate::algorithm::precheck(
            now,
            check.quota,
            check.cost,
            commit,
        )?);
    }
    Ok(fixed)
}

/// A boxed future, for stores behind `dyn`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Store`] with its futures boxed, so the service can hold any store behind one pointer.
pub(crate) trait DynStore: Send + Sync + 'static {
    fn decide<'a>(
        &'a self,
        key: &'a str,
        quota: &'a Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> BoxFuture<'a, Result<Decision, Error>>;
    fn decide_all<'a>(
        &'a self,
        checks: &'a [Check<'a>],
        now: Nanos,
        commit: bool,
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>>;
    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>>;
    fn decide_now(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Decision, Error>>;
    fn decide_all_now(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Vec<Decision>, Error>>;
    fn decides_at_once(&self) -> bool;
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError>;
}

impl<S: Store> DynStore for S {
    fn decide<'a>(
        &'a self,
        key: &'a str,
        quota: &'a Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> BoxFuture<'a, Result<Decision, Error>> {
        Box::pin(Store::decide(self, key, quota, cost, now, commit))
    }
    fn decide_all<'a>(
        &'a self,
        checks: &'a [Check<'a>],
        now: Nanos,
        commit: bool,
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>> {
        Box::pin(Store::decide_all(self, checks, now, commit))
    }
    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(Store::reset(self, key))
    }
    fn decide_now(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Decision, Error>> {
        Store::decide_now(self, key, quota, cost, now, commit)
    }
    fn decide_all_now(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(self, checks, now, commit)
    }
    fn decides_at_once(&self) -> bool {
        Store::decides_at_once(self)
    }
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        Store::supports(self, quota)
    }
}
