//! What a store is asked: [`Request`] for one limit, [`Stacked`](super::Stacked) for several
//! decided as one (`stacked.rs`).
//! Both are checked when they are made (the key, the cost under the quota, the mode), so a
//! store never sees a call that could not be decided and never decides what a cost means.

use std::fmt;

use crate::algorithm::{self, Spend};
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;

/// The key a store keeps one limit's state under: 1 to 4096 bytes. The service composes it
/// (prefix, budget, tier, user key and the quota's identity); a caller of a store directly
/// makes one with [`StoreKey::new`].
#[derive(Clone, Copy)]
pub struct StoreKey<'a> {
    key: &'a str,
    /// Whether the key is only ever asked under one window (the service composed it, naming
    /// its quota, or [`one_window`](Self::one_window) made it): see
    /// [`names_its_window`](Self::names_its_window).
    composed: bool,
}

impl<'a> StoreKey<'a> {
    /// `key`, or [`Error::InvalidKey`] when it is empty or longer than 4096 bytes.
    pub fn new(key: &'a str) -> Result<Self, Error> {
        crate::key::check_store_key(key)?;
        Ok(StoreKey {
            key,
            composed: false,
        })
    }

    /// `key` as [`new`](Self::new) checks it, for a key only ever asked under one window (one
    /// strategy and window, as the service's keys are: they name their quota): a store may
    /// then take the shortcuts that trust its state to be that window's, such as the Redis
    /// store's fixed-window hot script. A key made with [`new`](Self::new) is decided the
    /// long way there, where a state another window wrote is refused until it ends; one made
    /// here and asked under two windows is read by whichever asks. The Redis store rewards
    /// ([`Adjustment::reward`](crate::store::Adjustment::reward)) only such keys: its states
    /// keep no window, and a reward on a bare key is `Error::InvalidKey`.
    ///
    /// ```
    /// use ratelimit_core::store::StoreKey;
    ///
    /// let key = StoreKey::one_window("search:user-1:per-minute")?;
    /// assert_eq!(key, StoreKey::new("search:user-1:per-minute")?);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    pub fn one_window(key: &'a str) -> Result<Self, Error> {
        crate::key::check_store_key(key)?;
        Ok(StoreKey::composed(key))
    }

    /// A key the pipeline composed from a checked user key and the site's fixed parts, the
    /// quota's identity among them.
    #[inline]
    pub(crate) fn composed(key: &'a str) -> Self {
        debug_assert!(crate::key::check_store_key(key).is_ok());
        StoreKey {
            key,
            composed: true,
        }
    }

    /// The key's text.
    #[inline]
    pub fn as_str(&self) -> &'a str {
        self.key
    }

    /// Whether the key is only ever asked under one window: one the service composed (it
    /// names its quota) or [`one_window`](Self::one_window)'s. A bare key
    /// ([`new`](Self::new)) may be asked under two windows, and a store whose shortcut trusts
    /// the state to be its window's (the Redis store's fixed-window hot script) decides it the
    /// long way, where that is checked. A store of your own may take the same shortcuts on
    /// such keys.
    #[inline]
    pub fn names_its_window(&self) -> bool {
        self.composed
    }
}

/// Two keys are one when their text is.
impl PartialEq for StoreKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for StoreKey<'_> {}

impl std::hash::Hash for StoreKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

/// Keys are user data: their text is not printed.
impl fmt::Debug for StoreKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreKey({} bytes)", self.key.len())
    }
}

/// What a decision does with the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Admit the call if it passes and spend its cost from the budget, in one atomic step.
    Spend,
    /// Decide whether the call would pass, spending nothing. With a cost of 0, a look at
    /// the level now: what remains, when the budget is full again, and `allowed` when a call
    /// of cost 1 would pass.
    Look,
    /// As [`Spend`](Mode::Spend), for a spend the caller may give back
    /// ([`Store::refund`](super::Store::refund)): a store that refunds answers an admitted
    /// call with the stamp of the state it spent from ([`Decision::stamped`]).
    ///
    /// [`Decision::stamped`]: crate::Decision::stamped
    Keep,
}

impl Mode {
    /// The mode of a call that spends when admitted (`spends`), `kept` for a refund or not;
    /// a call that does not spend looks. The one place the two flags become a mode.
    #[inline]
    pub(crate) const fn of(spends: bool, kept: bool) -> Mode {
        match (spends, kept) {
            (false, _) => Mode::Look,
            (true, false) => Mode::Spend,
            (true, true) => Mode::Keep,
        }
    }

    /// Whether a call in this mode spends when admitted ([`Spend`](Mode::Spend) or
    /// [`Keep`](Mode::Keep)).
    #[inline]
    pub(crate) const fn spends(self) -> bool {
        !matches!(self, Mode::Look)
    }
}

/// One call asked of a [`Store`](super::Store): the store key, the limit, the call's cost,
/// the time (nanoseconds since the epoch, on the service's clock) and the [`Mode`].
///
/// Made checked: a call that spends costs at least 1, and no call costs more than a
/// non-zero capacity ([`Error::ZeroCost`], [`Error::CostAboveCapacity`]).
///
/// ```
/// use ratelimit_core::store::{Mode, Request, StoreKey};
/// use ratelimit_core::{Error, Quota};
///
/// let quota = Quota::per_second(5)?;
/// let key = StoreKey::new("user:1")?;
/// let request = Request::spend(key, &quota, 1, 1_000_000_000)?;
/// assert_eq!(request.mode(), Mode::Spend);
/// assert!(matches!(Request::spend(key, &quota, 0, 0), Err(Error::ZeroCost)));
/// assert!(Request::look(key, &quota, 0, 0).is_ok()); // the level now
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    key: StoreKey<'a>,
    quota: &'a Quota,
    cost: u64,
    now: Nanos,
    mode: Mode,
    /// Whether the caller never shows an admitted spend's decision (an annotated fn): a store
    /// that knows it may answer such a spend with a bare [`Told::Admitted`](super::Told).
    admission_unshown: bool,
}

impl<'a> Request<'a> {
    /// A call of weight `cost` that spends if admitted.
    pub fn spend(
        key: StoreKey<'a>,
        quota: &'a Quota,
        cost: u64,
        now: Nanos,
    ) -> Result<Self, Error> {
        Self::new(key, quota, cost, now, Mode::Spend)
    }

    /// Whether a call of weight `cost` would pass, spending nothing (cost 0: the level now).
    pub fn look(key: StoreKey<'a>, quota: &'a Quota, cost: u64, now: Nanos) -> Result<Self, Error> {
        Self::new(key, quota, cost, now, Mode::Look)
    }

    /// A request in `mode`, checked.
    pub fn new(
        key: StoreKey<'a>,
        quota: &'a Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
    ) -> Result<Self, Error> {
        algorithm::check_cost(quota, cost, mode.spends())?;
        Ok(Self::checked(key, quota, cost, now, mode))
    }

    /// A request whose cost the pipeline has checked (`Site::check`).
    #[inline]
    pub(crate) fn checked(
        key: StoreKey<'a>,
        quota: &'a Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
    ) -> Self {
        debug_assert!(algorithm::check_cost(quota, cost, mode.spends()).is_ok());
        Request {
            key,
            quota,
            cost,
            now,
            mode,
            admission_unshown: false,
        }
    }

    /// The same request, for a caller that never shows an admitted spend's decision (an
    /// annotated fn): see [`admission_unshown`](Self::admission_unshown). A kept spend
    /// ([`Mode::Keep`]) and a look show theirs: unchanged.
    #[inline]
    pub(crate) fn unshown(self) -> Self {
        Request {
            admission_unshown: self.mode == Mode::Spend,
            ..self
        }
    }

    /// Whether a plain admission may be told without its decision
    /// ([`Told::Admitted`](super::Told::Admitted)): a spend whose caller never shows it.
    #[inline]
    pub(crate) fn admission_unshown(&self) -> bool {
        self.admission_unshown
    }

    /// The same call as a look: what a stacked decision asks of every limit first.
    pub fn as_look(&self) -> Self {
        Request {
            mode: Mode::Look,
            admission_unshown: false,
            ..*self
        }
    }

    /// The store key.
    #[inline]
    pub fn key(&self) -> StoreKey<'a> {
        self.key
    }

    /// The limit.
    #[inline]
    pub fn quota(&self) -> &'a Quota {
        self.quota
    }

    /// The call's weight.
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The time of the decision, in nanoseconds since the epoch.
    #[inline]
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Whether the call spends or looks.
    #[inline]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the call spends.
    #[inline]
    pub fn spends(&self) -> bool {
        self.mode.spends()
    }
}

/// A spend to give back ([`Store::refund`](super::Store::refund)): the key and quota it was
/// decided under, its cost, which state it was made on (what the decision's store said: the
/// algorithm's instant of that spend and the key's stamp), and the time of the refund.
///
/// A store gives back only to the state the spend was made on: nothing when the key was
/// reset or added again since (another stamp), or when the spend no longer counts (its
/// window rolled, its tokens came back). The service makes one per admitted spend, once:
/// a spend is never given back twice.
#[derive(Debug, Clone, Copy)]
pub struct Refund<'a> {
    key: StoreKey<'a>,
    quota: &'a Quota,
    cost: u64,
    spent: Spend,
    stamp: u64,
    now: Nanos,
}

impl<'a> Refund<'a> {
    /// The refund, at `now`, of a spend of `cost` on `key` under `quota` that the store's
    /// decision gave `receipt` for (an admitted spend, with a stamp: see
    /// [`Spent`](crate::Spent)).
    pub(crate) fn of(
        key: StoreKey<'a>,
        quota: &'a Quota,
        cost: u64,
        receipt: crate::decision::Receipt,
        now: Nanos,
    ) -> Self {
        Refund {
            key,
            quota,
            cost,
            spent: receipt.spent,
            stamp: receipt.stamp,
            now,
        }
    }

    /// The store key the spend was decided on.
    pub fn key(&self) -> StoreKey<'a> {
        self.key
    }

    /// The limit it was decided under.
    pub fn quota(&self) -> &'a Quota {
        self.quota
    }

    /// What it spent.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The algorithm's instant of the spend (the admitted verdict's exact `reset_at`, in
    /// nanoseconds since the epoch): where each algorithm finds it.
    pub fn spent(&self) -> Nanos {
        self.spent.at
    }

    /// How far refunds and rewards had moved the state's spends back when the spend was made
    /// (the token bucket's; 0 for the other strategies), in nanoseconds: a store that keeps a
    /// [`StoredState`](crate::store::StoredState) needs nothing more, the state keeps its own.
    pub fn shift(&self) -> Nanos {
        self.spent.shift
    }

    /// Where the spend is found again.
    pub(crate) fn spend(&self) -> Spend {
        self.spent
    }

    /// The stamp of the key's state the spend was made on, as the store gave it.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// The time of the refund.
    pub fn now(&self) -> Nanos {
        self.now
    }
}

/// What the application decides after the fact ([`Store::adjust`](super::Store::adjust)): a
/// penalty spends `units` from a key's budget whatever it holds (past its limit too), a reward
/// gives back up to `units` of what it holds (never past the quota).
#[derive(Debug, Clone, Copy)]
pub struct Adjustment<'a> {
    key: StoreKey<'a>,
    quota: &'a Quota,
    units: u64,
    now: Nanos,
    penalty: bool,
}

impl<'a> Adjustment<'a> {
    /// A penalty of `units` on `key` under `quota`, at `now`.
    pub fn penalty(key: StoreKey<'a>, quota: &'a Quota, units: u64, now: Nanos) -> Self {
        Adjustment {
            key,
            quota,
            units,
            now,
            penalty: true,
        }
    }

    /// A reward of `units` on `key` under `quota`, at `now`.
    pub fn reward(key: StoreKey<'a>, quota: &'a Quota, units: u64, now: Nanos) -> Self {
        Adjustment {
            penalty: false,
            ..Self::penalty(key, quota, units, now)
        }
    }

    /// The store key.
    pub fn key(&self) -> StoreKey<'a> {
        self.key
    }

    /// The limit.
    pub fn quota(&self) -> &'a Quota {
        self.quota
    }

    /// How many units.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// The time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Whether it is a penalty (else a reward).
    pub fn is_penalty(&self) -> bool {
        self.penalty
    }
}
