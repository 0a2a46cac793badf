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
use std::num::NonZeroU64;

// The stores themselves are public at the crate root only (one public path per item).
mod dyn_store;
pub(crate) mod failover;
mod horizon;
pub(crate) mod memory;
#[cfg(feature = "redis")]
pub(crate) mod redis;
mod request;
mod stacked;
mod state;
mod told;

pub(crate) use self::dyn_store::{BoxFuture, DynStore};
// Without Redis, only doc links (`crate::store::FailurePolicy`) name these here.
#[cfg_attr(not(feature = "redis"), allow(unused_imports))]
pub(crate) use self::failover::{Failover, FailurePolicy};
pub use self::horizon::{Horizon, Penalty};
pub(crate) use self::memory::{MemoryOptions, MemoryStore};
#[cfg(feature = "redis")]
pub(crate) use self::redis::{RedisOptions, RedisStore};
pub use self::request::{Adjustment, Mode, Refund, Request, StoreKey};
pub use self::stacked::{Carry, Check, Stacked};
pub use self::state::StoredState;
#[doc(hidden)]
pub use self::told::Told;

use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};

/// A place where limiter state lives, deciding each call in one atomic step.
///
/// The service composes the key (prefix, budget, tier, user key and the quota's identity) and
/// asks the store with a [`Request`]: a [`StoreKey`], a [`Quota`] that is already valid, the
/// call's cost (checked under the quota), the time, and a [`Mode`] (spend or look). A store
/// keys its state by the key alone and never validates the request again.
///
/// Contract, checked by the crate's own stores and expected of yours:
/// - **Atomic**: in [`Mode::Spend`] (and [`Mode::Keep`]), the decision and the record of an admitted call are one
///   step; with a limit of L, exactly L of any number of concurrent calls pass.
/// - **Fail closed**: state of an unexpected shape under the key is
///   [`Error::UnexpectedState`] (and left as it was), never a fresh key; a store that cannot
///   answer returns [`Error::Store`] or [`Error::Timeout`], never an allowance.
/// - **Looks** ([`Mode::Look`]) spend nothing; a look of cost 0 is the level now (see
///   [`Mode::Look`]). [`StoredState::decide`] implements all of this.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use ratelimit_core::store::{Request, Stacked, Store, StoredState};
/// use ratelimit_core::{Config, Decision, Error, Options, RateLimitService, SystemClock};
///
/// /// A store over a plain map: the shape of one over any storage with transactions.
/// #[derive(Default)]
/// struct MapStore(Mutex<HashMap<String, Vec<u8>>>);
///
/// impl Store for MapStore {
///     async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
///         let mut map = self.0.lock().unwrap(); // the transaction
///         let key = request.key().as_str();
///         let mut state = match map.get(key) {
///             Some(bytes) => StoredState::from_bytes(bytes)?,
///             None => StoredState::new(request.quota()),
///         };
///         let decision = state.decide(&request)?;
///         if request.spends() && decision.allowed {
///             map.insert(key.to_owned(), state.to_bytes());
///         }
///         Ok(decision)
///     }
///
///     async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
///         let mut map = self.0.lock().unwrap(); // one transaction for every limit
///         let mut states = Vec::new();
///         for c in stacked.checks() {
///             states.push(match map.get(c.key.as_str()) {
///                 Some(bytes) => StoredState::from_bytes(bytes)?,
///                 None => StoredState::new(c.quota),
///             });
///         }
///         // Look at every limit; spend from each only if all admit the call.
///         let mut decisions = Vec::new();
///         for (request, state) in stacked.requests().zip(&mut states) {
///             decisions.push(state.decide(&request.as_look())?);
///         }
///         if stacked.spends() && decisions.iter().all(|d| d.allowed) {
///             for (i, (request, state)) in stacked.requests().zip(&mut states).enumerate() {
///                 decisions[i] = state.decide(&request)?;
///                 map.insert(request.key().as_str().to_owned(), state.to_bytes());
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
    /// Decides `request` and, in [`Mode::Spend`] or [`Mode::Keep`], records the call if allowed.
    fn decide(&self, request: Request<'_>) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Decides a call against several limits as one (stacked limits, such as a short
    /// window against bursts and a long one): in [`Mode::Spend`], the call is admitted and
    /// spent from every limit only if every limit admits it, in one atomic step; a call
    /// refused by one limit spends nothing from the others. One decision per check, in order.
    fn decide_all(
        &self,
        stacked: Stacked<'_>,
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send;

    /// Forgets `key`; returns whether it was held.
    fn reset(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;

    /// [`decide`](Self::decide) when the store can answer without waiting (a budget leased
    /// to this process, a refusal still in force, state in memory): the service asks this
    /// first for every call that does not wait in the queue, and awaits `decide` only on
    /// `None`, so a decision answered here builds no future.
    ///
    /// Contract: `Some` is exactly what `decide` would have decided and recorded at this
    /// moment, with the same errors; `None` has decided and spent nothing (the service then
    /// calls `decide`). Default: `None` for every call, so a store that always waits (a
    /// round trip per decision) does not implement it.
    ///
    /// A store whose every decision is made in this process answers here, and its `decide`
    /// forwards:
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::{Arc, Mutex};
    /// use ratelimit_core::store::{Request, Stacked, Store, StoredState};
    /// use ratelimit_core::{Config, Decision, Error, Options, RateLimitService, SystemClock};
    ///
    /// #[derive(Default)]
    /// struct Local(Mutex<HashMap<String, Vec<u8>>>);
    ///
    /// impl Store for Local {
    ///     fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
    ///         let mut map = self.0.lock().unwrap();
    ///         let key = request.key().as_str();
    ///         let mut state = match map.get(key) {
    ///             Some(bytes) => match StoredState::from_bytes(bytes) {
    ///                 Ok(state) => state,
    ///                 Err(e) => return Some(Err(e)),
    ///             },
    ///             None => StoredState::new(request.quota()),
    ///         };
    ///         let decision = state.decide(&request);
    ///         if request.spends() && decision.as_ref().is_ok_and(|d| d.allowed) {
    ///             map.insert(key.to_owned(), state.to_bytes());
    ///         }
    ///         Some(decision)
    ///     }
    ///
    ///     async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
    ///         self.decide_now(request).expect("decided at once")
    ///     }
    ///
    ///     async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
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
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        let _ = request;
        None
    }

    /// The hash this store finds `key` by, for a caller that asks it of the same key on every
    /// call (a prepared site whose store key is fixed: a budget without user keys) and works
    /// it out once: the store is then handed it with the key and does not hash the key again.
    /// Not a seam: the service alone hands it back, to the store that made it. Default: none.
    #[doc(hidden)]
    fn hash_of(&self, key: &str) -> Option<u64> {
        let _ = key;
        None
    }

    /// [`decide_now`](Self::decide_now) of a request on a key whose hash in this store the
    /// caller held ([`hash_of`](Self::hash_of)). Not a seam: the default forwards to
    /// `decide_now`, and only the store that made the hash uses it. The memory store checks
    /// a held hash against the key's text wherever it would find no state or store one, so a
    /// wrapper that hands on a hash of another text or store is decided by the text.
    #[doc(hidden)]
    #[inline]
    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        let _ = hash;
        self.decide_now(request)
    }

    /// [`decide_now`](Self::decide_now) of a request whose caller never shows an admitted
    /// call's decision (an annotated fn): a plain admission may be told as
    /// [`Told::Admitted`], its decision not made. On a key whose hash in this store the caller
    /// held ([`hash_of`](Self::hash_of)), when it did. Not a seam: the default forwards to
    /// `decide_now` (or `decide_now_hashed`) and tells every decision.
    #[doc(hidden)]
    #[inline]
    fn decide_now_told(&self, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Told> {
        let decided = match hash {
            Some(hash) => self.decide_now_hashed(request, hash),
            None => self.decide_now(request),
        };
        decided.map(Told::Decided)
    }

    /// [`decide_all`](Self::decide_all) when the store can answer without waiting, under the
    /// contract of [`decide_now`](Self::decide_now). Default: `None` for every call.
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        let _ = stacked;
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

    /// Whether this store gives spends back ([`refund`](Self::refund)). An annotated fn that
    /// counts only some outcomes (`count = "err"`), or a call site asking for refunds, does not
    /// start on a store without them: it would count every call. Default: `false`.
    fn refunds(&self) -> bool {
        false
    }

    /// Gives back an admitted spend (see [`Refund`]), in one atomic step: only to the state
    /// it was made on, never twice, and never past the quota; returns whether anything was
    /// given back. A store keeps, with each key's state a spend was kept on ([`Mode::Keep`]),
    /// a stamp no other state under the key ever had, and puts it in the decisions of those
    /// spends. Default: nothing is given back.
    fn refund(&self, refund: Refund<'_>) -> impl Future<Output = Result<bool, Error>> + Send {
        let _ = refund;
        async { Ok(false) }
    }

    /// [`refund`](Self::refund) when the store can answer without waiting, under the contract
    /// of [`decide_now`](Self::decide_now). Default: `None`.
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        let _ = refund;
        None
    }

    /// Gives back the spends of one stacked call ([`decide_all`](Self::decide_all)) as one:
    /// every one, or (one of them finding nothing to give back) none, in one atomic step.
    /// Default: nothing is given back.
    fn refund_all(
        &self,
        refunds: &[Refund<'_>],
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        let _ = refunds;
        async { Ok(false) }
    }

    /// [`refund_all`](Self::refund_all) when the store can answer without waiting. Default:
    /// `None`.
    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        let _ = refunds;
        None
    }

    /// Whether this store takes penalties and rewards ([`adjust`](Self::adjust)). Default:
    /// `false`.
    fn adjusts(&self) -> bool {
        false
    }

    /// Applies a penalty or a reward ([`Adjustment`]) in one atomic step; returns the units
    /// spent or given back. Default: nothing is changed (`0`): a store that takes them says
    /// so with [`adjusts`](Self::adjusts), and the service refuses them on any other.
    fn adjust(
        &self,
        adjustment: Adjustment<'_>,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        let _ = adjustment;
        async { Ok(0) }
    }

    /// Whether this store keeps blocks: a key refused for a quota's
    /// [`block`](Quota::block) once a call on it was refused, whatever the algorithm says
    /// meanwhile. A quota with a block is one a store without them cannot enforce (the
    /// service refuses it as it refuses what [`supports`](Self::supports) refuses). Default:
    /// `false`.
    fn blocks(&self) -> bool {
        false
    }

    /// Whether this store carries the old states of a reload's moved limits into their new
    /// ones ([`Stacked::carried`]) in [`decide_all`](Self::decide_all). On a store that does
    /// not, the service decides each such old state with the call, all or nothing, for as
    /// long as it may hold anything (a token bucket's debt, a block), which holds the call to
    /// it but may hand out, when that ends, what the moved limit's own state never counted.
    /// Default: `false`.
    ///
    /// A store that keeps [`blocks`](Self::blocks) without carrying over-refuses beside a
    /// moved limit whose quotas block (never admits more; probes_blocks_without_carrying):
    ///
    /// - it cannot tell that the two states are one limit's: a call refused by one state while
    ///   the other is blocked begins a block on the one that refused, from then, as any
    ///   stacked refusal does, and the moved limit is refused past the block in force by the
    ///   time between the two refusals (at most about a window of either limit: 3 a minute
    ///   blocking an hour, renamed, refused 40 s into the old state's block by the moved
    ///   state's own count, stayed refused until 3,640 s where the limit alone admits at
    ///   3,600 s);
    /// - the old state is decided whole, under its own quota, as long as a block begun in its
    ///   window may last (a window and a block), and a refusal by that quota then begins a
    ///   block (3 a minute blocking an hour, renamed and raised to 10: 3 of 10 admitted two
    ///   minutes after the reload, then none until 61 minutes after it, where a store that
    ///   carries admits 10 a minute from the first minute's end).
    ///
    /// To be exact, carry: honour [`Carry::block_only`] (a block in force on either state
    /// refuses on both, and a refusal during it begins none of its own) and
    /// [`Carry::debt`].
    fn carries(&self) -> bool {
        false
    }

    /// Whether this store can count `quota` exactly. The service calls it for every limit it
    /// resolves, and `Module::init` for every annotated fn, so a limit the store cannot count
    /// is a start-up error or a refused call, never a miscounted one. Default: any valid quota.
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        let _ = quota;
        Ok(())
    }

    /// Whether this store keeps a [`Horizon`] per key prefix ([`horizon`](Self::horizon)):
    /// a store shared by a fleet (several services under one prefix) should, so that every
    /// service keeps a limit a reload moved, and carries its old state, as long as what any
    /// of them wrote there may hold. Default: `false`: each service keeps them only as long
    /// as what it saw itself may hold (its calls' own quotas and windows, its penalties),
    /// which is exact for a store of one process (the memory store), and under-keeps on a
    /// shared one: a service that never saw another's quota of its own, or its penalty,
    /// lets the move go at the configured quotas' end and reads the moved state alone.
    fn records_horizon(&self) -> bool {
        false
    }

    /// Raises the [`Horizon`] recorded under key prefix `prefix` to at least `raise`, field
    /// by field (a max: never lowered), in one atomic step, and returns the record as it was
    /// before (zeros where there was none; `raise` of zeros only reads it): the service
    /// tells another's raise from its own by it. Called only where
    /// [`records_horizon`](Self::records_horizon) says so: by the service before it writes a
    /// state past what is recorded (a quota or a window of a call's own, a penalty), so that
    /// a failure here leaves the record raised or the call refused, never the state written
    /// past it; and to read it before it lets a move go. A record of an unexpected shape is
    /// [`Error::UnexpectedState`], left as it was. Default: nothing kept (zeros).
    fn horizon(
        &self,
        prefix: &str,
        raise: Horizon,
    ) -> impl Future<Output = Result<Horizon, Error>> + Send {
        let _ = (prefix, raise);
        async { Ok(Horizon::default()) }
    }

    /// A count that moves where what this store recorded ([`horizon`](Self::horizon)) may
    /// have been lost whole since (the Redis store: a link lost, or one that found another
    /// server than the last, as a Redis restarted without persistence). A service that
    /// knows a record raised forgets it when the count moves, and raises it again before
    /// its next write past nothing. Not a seam: asked only where
    /// [`records_horizon`](Self::records_horizon) says so. Default: 0, never lost (a record
    /// deleted is found at the next read: `read_horizon`).
    #[doc(hidden)]
    fn records_lost(&self) -> u64 {
        0
    }

    /// Whether this store's next call from here connects first (the Redis store: no open
    /// link on the calling runtime), and may then find a server that lost what was recorded,
    /// told by [`records_lost`](Self::records_lost) only within that call. A service that
    /// noted a quota or a window of a call's own raises the record before such a call
    /// spends, so that the raise connects and the spend follows it on the server it found:
    /// one raise more per link made. Not a seam: asked only where
    /// [`records_horizon`](Self::records_horizon) says so. Default: whether it records the
    /// horizon. A store of one's own that records it (one over the Redis store, forwarding
    /// the documented methods) cannot tell a restart of what it records
    /// ([`records_lost`](Self::records_lost) stays 0): taken to connect before every call,
    /// its service raises the record before every spend of a quota of a call's own, one
    /// round trip more each, where a restart unseen lost the record under them (15 admitted
    /// against 0:
    /// `a_store_of_ones_own_over_redis_forwarding_the_documented_methods_sees_the_restart`).
    #[doc(hidden)]
    fn connects_first(&self) -> bool {
        self.records_horizon()
    }

    /// Whether a call this store could not decide is answered otherwise than by the store's
    /// error, by a failure policy of its own ([`answer_failure`](Self::answer_failure)):
    /// [`Failover`] under [`FailurePolicy::Allow`] or [`FailurePolicy::Local`]. Default:
    /// `false`, every failure refuses its call.
    fn answers_failures(&self) -> bool {
        false
    }

    /// The answer to `request` where the store failed with `error` before it was asked (its
    /// fleet's [`horizon`](Self::horizon) could not be read or raised: decided by the store
    /// meanwhile, on a link that answers again, it was decided on what one service alone
    /// knew): what this store answers any decision it cannot make, never the store's own.
    /// Default: `error`.
    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error> {
        let _ = request;
        Err(error)
    }

    /// [`answer_failure`](Self::answer_failure) of a stacked call. Default: `error`.
    fn answer_failure_all(
        &self,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error> {
        let _ = stacked;
        Err(error)
    }
}

/// What every store decides about a stacked call before touching any state, one entry per
/// check: a refusal for a zero capacity, `None` where the store decides; an error for a clock
/// out of range. (The keys and costs were checked when the [`Stacked`] was made.)
pub(crate) fn precheck_all(
    stacked: &Stacked<'_>,
) -> Result<Vec<Option<crate::algorithm::Verdict>>, Error> {
    stacked
        .requests()
        .map(|r| {
            Ok(crate::algorithm::precheck(
                r.now(),
                r.quota(),
                r.cost(),
                r.spends(),
            )?)
        })
        .collect()
}
