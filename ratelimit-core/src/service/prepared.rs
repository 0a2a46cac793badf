//! [`Prepared`]: a call site prepared once, for a caller that makes many calls with the same
//! options (an annotated fn holds one in its declaration, the HTTP layer one per limit, and
//! anyone can ask [`RateLimitService::prepare`] for one).

use std::future::Future;
use std::num::NonZeroU64;
use std::sync::Arc;

use super::calls::{Mode, Started};
use super::held::Transition;
use super::pipeline::Then;
use super::site::{Held, Names, Site, SiteKey};
use super::{Call, Generation, Options, RateLimitService, Spent};
use crate::decision::Decision;
use crate::error::Error;
use crate::key::Around;
use crate::quota::{Overrides, Quota};
use crate::stats::Counters;

impl RateLimitService {
    /// A call site prepared for calls with `options`: the limit resolved and checked against
    /// the store, the budget's counters found, the store key's fixed parts written, once.
    /// Its calls take the same steps as [`consume`](Self::consume) with the same options, on
    /// the same state, without working any of that out again.
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService};
    ///
    /// # futures::executor::block_on(async {
    /// let service = RateLimitService::new(Config::builder().default_limit(2).build()?)?;
    /// let search = service.prepare(&Options::new().budget("search"))?;
    /// assert!(search.consume("user:1").await?.allowed);
    /// assert!(search.consume_now("user:1").unwrap()?.allowed);
    /// assert!(!search.consume("user:1").await?.allowed);
    /// // The same state as the convenient form's.
    /// let status = service.status("user:1", &Options::new().budget("search")).await?;
    /// assert_eq!(status.remaining, 0);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// Errors: what the call itself would get for its options ([`Error::NoLimit`], an
    /// unknown tier, a limit the store cannot count).
    ///
    /// The prepared site's calls spend ([`Prepared::consume`]) or look ([`Prepared::status`])
    /// as their method says: `options.consume` is not used.
    pub fn prepare(&self, options: &Options) -> Result<Prepared, Error> {
        self.prepare_call(&Call {
            consume: true,
            ..options.call()
        })
    }

    pub(crate) fn prepare_call(&self, options: &Call<'_>) -> Result<Prepared, Error> {
        let (generation, mut held) = (self.generation(), Held::default());
        // Before the site: a read folded while it is worked out leaves it stale, not current.
        let folds = self.inner.fleet.folds();
        let site = self.site(&generation, options, &mut held)?;
        let around = site.around();
        // A hash of 0 is not held: the key is hashed on each call instead.
        let whole_hash = self
            .inner
            .store
            .hash_of(around.whole())
            .and_then(NonZeroU64::new);
        let prepared = Prepared {
            folds,
            quota: *site.quota,
            tier: site.tier,
            counters: options.budget.map(|name| self.method_counters(name).1),
            budget: options.budget.map(Box::from),
            policy: options.policy.map(Box::from),
            tier_name: site.tier_name(),
            around,
            whole_hash,
            cost: site.cost,
            cost_fits: Site::cost_fits(site.quota, site.cost),
            may_wait: site.may_wait,
            shadow: site.shadow,
            transition: site.transition.cloned().map(Box::new),
            asked: Asked {
                tier: options.tier.map(Arc::from),
                overrides: *options.overrides,
                queue: options.queue,
                shadow: options.shadow,
            },
            generation: Arc::clone(&generation),
            service: self.clone(),
        };
        Ok(prepared)
    }
}

/// A call site prepared once ([`RateLimitService::prepare`]): its calls go through the same
/// pipeline as the service's per-call methods, with the limit, the budget's counters and the
/// store key's fixed parts already worked out. Cheap to share (`Arc` it); it holds its
/// service.
pub struct Prepared {
    service: RateLimitService,
    /// The generation the site was worked out under. Once a reload replaces it, the site's
    /// calls take the per-call path under the running one (see [`is_current`](Self::is_current)).
    generation: Arc<Generation>,
    /// What the site was prepared for, as asked (before resolution), to decide under a later
    /// generation.
    asked: Asked,
    quota: Quota,
    tier: Option<usize>,
    counters: Option<Arc<Counters>>,
    budget: Option<Box<str>>,
    /// The policy's name on a refusal (see `Call::policy`).
    policy: Option<Box<str>>,
    tier_name: Option<Arc<str>>,
    /// The store key around the user key, written once.
    around: Around,
    /// The hash the store finds the key of a call without a user key by, if it gave one
    /// (`Store::hash_of`): worked out once, as the key is written once.
    whole_hash: Option<NonZeroU64>,
    cost: u64,
    /// Whether a spend of `cost` passes the cost check under `quota` (`Site::check`),
    /// checked once: a call of that cost is not checked again.
    cost_fits: bool,
    may_wait: bool,
    shadow: bool,
    /// Boxed: a site's calls test it on every call, and a pointer is one compare (an
    /// `Option` around two `Vec`s tests a capacity's niche).
    transition: Option<Box<Transition>>,
    /// How many reads of the fleet's reload horizon had raised what the service knows when
    /// the site was worked out (`RateLimitService::horizon_stands`).
    folds: u64,
}

/// The options a [`Prepared`] site was asked for that a reload may resolve differently.
struct Asked {
    tier: Option<Arc<str>>,
    overrides: Overrides,
    queue: Option<bool>,
    shadow: bool,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("quota", &self.quota)
            .field("tier", &self.tier_name)
            .field("budget", &self.budget)
            .field("cost", &self.cost)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// The service the site was prepared on.
    pub fn service(&self) -> &RateLimitService {
        &self.service
    }

    /// The quota its calls are decided under (while [`is_current`](Self::is_current)).
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Whether the site was prepared under the running configuration. After a
    /// [`reload`](RateLimitService::reload) its calls are still decided under the running
    /// configuration, each resolving its options again (the per-call path's cost): prepare the
    /// site again to make them cheap again. Annotated fns and the HTTP layer do this
    /// themselves.
    #[inline]
    pub fn is_current(&self) -> bool {
        self.service.runs(&self.generation)
            && (self.service).horizon_stands(self.folds, &self.generation)
    }

    /// The call the site was prepared for, as asked, with `cost`.
    fn asked(&self, cost: u64) -> Call<'_> {
        Call {
            tier: self.asked.tier.as_deref(),
            budget: self.budget.as_deref(),
            policy: self.policy.as_deref(),
            overrides: &self.asked.overrides,
            cost,
            consume: true,
            queue: self.asked.queue,
            shadow: self.asked.shadow,
        }
    }

    /// A call of a site prepared under a generation no longer running: resolved again, per
    /// call, under the running one.
    #[cold]
    async fn rerun(&self, key: Option<&str>, cost: u64, mode: Mode) -> Result<Decision, Error> {
        let (generation, mut held) = (self.service.generation(), Held::default());
        let call = mode.apply(self.asked(cost));
        let failed = self.service.horizon_due(&generation)
            && Box::pin(self.service.read_horizon_if_due(&generation))
                .await
                .map_err(|e| self.service.unresolved(&call, e))?;
        let site = self
            .service
            .site(&generation, &call, &mut held)
            .map_err(|e| self.service.unresolved(&call, e))?;
        let decided = match self.service.start(site.failed_if(failed), key, mode) {
            Started::Now(decided) => decided,
            Started::Later(later) => later.await,
        };
        decided
    }

    /// A call at this site in `mode`: on the prepared site while it is current. Its future
    /// holds a pointer across the wait, if there is one (see [`RateLimitService::start`]).
    async fn run(&self, key: Option<&str>, cost: u64, mode: Mode) -> Result<Decision, Error> {
        if !self.is_current() {
            return Box::pin(self.rerun(key, cost, mode)).await;
        }
        let later = match self
            .service
            .start(self.site(cost, mode != Mode::Look), key, mode)
        {
            Started::Now(decided) => return decided,
            Started::Later(later) => later,
        };
        later.await
    }

    /// The budget's name, if the site has one ([`Site::budget`]).
    #[inline]
    pub(super) fn budget(&self) -> Option<&str> {
        self.budget.as_deref()
    }

    /// The policy's name, if the site has one ([`Site::policy`]).
    #[inline]
    pub(super) fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// The site, borrowed, as the pipeline takes it; `cost` of this call.
    #[inline]
    pub(crate) fn site(&self, cost: u64, spend: bool) -> Site<'_> {
        Site {
            generation: &self.generation,
            quota: &self.quota,
            tier: self.tier,
            names: Names::Prepared(self),
            counters: self.counters.as_deref(),
            key: SiteKey::Around(&self.around, self.whole_hash),
            cost,
            cost_checked: spend && cost == self.cost && self.cost_fits,
            spend,
            kept: false,
            may_wait: spend && self.may_wait,
            shadow: self.shadow,
            failed: false,
            transition: self.transition.as_deref(),
        }
    }

    /// Spends from `key`'s budget: [`RateLimitService::consume`] with the prepared options.
    pub fn consume<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.run(Some(key), self.cost, Mode::Spend)
    }

    /// Spends from `key`'s budget as [`consume`](Self::consume) does, keeping what is needed
    /// to give the spend back once the call's outcome is known ([`Spent::refund`]).
    pub async fn spend(&self, key: &str) -> Result<Spent, Error> {
        self.spend_with(Some(key), self.cost, false).await
    }

    /// [`spend`](Self::spend) of `cost` (`key`: none for a budget without user keys), a
    /// refusal an error with `enforce`: on the prepared site while it is current, else
    /// resolved again under the running generation.
    pub(crate) async fn spend_with(
        &self,
        key: Option<&str>,
        cost: u64,
        enforce: bool,
    ) -> Result<Spent, Error> {
        if self.is_current() {
            let site = self.site(cost, true);
            return self.service.spend_at(site, key, enforce).await;
        }
        let (generation, mut held) = (self.service.generation(), Held::default());
        let call = self.asked(cost);
        let failed = self.service.horizon_due(&generation)
            && Box::pin(self.service.read_horizon_if_due(&generation))
                .await
                .map_err(|e| self.service.unresolved(&call, e))?;
        let site = self
            .service
            .site(&generation, &call, &mut held)
            .map_err(|e| self.service.unresolved(&call, e))?;
        Box::pin(self.service.spend_at(site.failed_if(failed), key, enforce)).await
    }

    /// [`spend_with`](Self::spend_with) decided at once; `None`, nothing spent, when the
    /// store must be awaited or the call may wait.
    pub(crate) fn spend_now(
        &self,
        key: Option<&str>,
        cost: u64,
        enforce: bool,
    ) -> Option<Result<Spent, Error>> {
        if self.is_current() {
            return self.service.spend_now(self.site(cost, true), key, enforce);
        }
        let (generation, mut held) = (self.service.generation(), Held::default());
        if self.service.horizon_due(&generation) {
            return None;
        }
        let call = self.asked(cost);
        match self.service.site(&generation, &call, &mut held) {
            Ok(site) => self.service.spend_now(site, key, enforce),
            Err(e) => Some(Err(self.service.unresolved(&call, e))),
        }
    }

    /// Like [`consume`](Self::consume), a refusal as `Err(Error::Exceeded(..))`.
    pub fn enforce<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.run(Some(key), self.cost, Mode::Enforce)
    }

    /// [`consume`](Self::consume) when the store decides at once (see
    /// [`RateLimitService::consume_now`]); `None`, having spent nothing, when it must be
    /// awaited or the call may wait in the queue.
    #[inline]
    pub fn consume_now(&self, key: &str) -> Option<Result<Decision, Error>> {
        if !self.is_current() {
            return self.service.decide_now_call(&self.asked(self.cost), key);
        }
        let site = self.site(self.cost, true);
        if site.may_wait {
            return None;
        }
        self.service
            .decide_now(&site, Some(key), Then::GiveUp, super::pipeline::take)
    }

    /// [`consume`](Self::consume) begun at once: [`Attempt::Decided`] when the store
    /// answered without waiting (as [`consume_now`](Self::consume_now)), else
    /// [`Attempt::Pending`], nothing spent, holding what was worked out (the store key,
    /// composed once) for [`Pending::consume`] to await the store on: one ask each way, where
    /// `consume_now` then `consume` would ask the store at once and compose the key twice.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratelimit_core::{Attempt, Config, Options, RateLimitService};
    ///
    /// # futures::executor::block_on(async {
    /// let service = RateLimitService::new(Config::builder().default_limit(1).build()?)?;
    /// let site = Arc::new(service.prepare(&Options::new())?);
    /// let decision = match site.try_consume("user:1") {
    ///     Attempt::Decided(decided) => decided?, // the memory store: always at once
    ///     Attempt::Pending(pending) => pending.consume().await?,
    /// };
    /// assert!(decision.allowed);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn try_consume(self: &Arc<Self>, key: &str) -> Attempt {
        let site = self.site(self.cost, true);
        let store_key = match self.begin(&site, Some(key), super::pipeline::take) {
            Begun::Decided(decided) => return Attempt::Decided(decided),
            Begun::Later(store_key) => Some(store_key),
            Begun::Waits => None,
        };
        Attempt::Pending(Pending {
            prepared: Arc::clone(self),
            key: key.to_owned(),
            store_key,
        })
    }

    /// What the calls that can be awaited share: the call at `site` decided at once when the
    /// store can (its decision handed to `answer`); else, having spent nothing, the store key
    /// composed for it ([`Begun::Later`]), or [`Begun::Waits`] for a call that may wait in
    /// the queue (nothing asked). [`awaited`](Self::awaited) is the other half.
    #[inline]
    fn begin<T, A: super::ask::Asked>(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        answer: impl FnOnce(&Site<'_>, &mut Option<A>) -> Option<T>,
    ) -> Begun<T> {
        // A site no longer current is decided by `awaited`, under the running generation;
        // one whose call raises the fleet's record first (`horizon.rs`) too, by every step.
        // Decided here, a prepared site's calls with a quota of their own (`try_consume`, an
        // annotated fn's) wrote past the record, never raised: 15 admitted on another pod
        // against none on one service (probes_horizon_surfaces_redis).
        if site.may_wait || !self.is_current() || self.service.horizon_raise_at(site) {
            return Begun::Waits;
        }
        let mut store_key = String::new();
        let then = Then::Await(&mut store_key);
        match self.service.decide_now(site, key, then, answer) {
            Some(decided) => Begun::Decided(decided),
            None => Begun::Later(store_key),
        }
    }

    /// [`begin`](Self::begin)'s awaited half, a spending call of `cost`: the store awaited
    /// once on the store key `begin` composed (neither composed nor asked at once again), or,
    /// with none, every step ([`run`](Self::run): the queue, the fleet's record raised first),
    /// for a call `begin` did not decide; a refusal an error in [`Mode::Enforce`]. A site no
    /// longer current (a reload since `begin`, which then spent nothing) decides under the
    /// running generation.
    async fn awaited(
        &self,
        key: Option<&str>,
        cost: u64,
        store_key: Option<&str>,
        mode: Mode,
    ) -> Result<Decision, Error> {
        let Some(store_key) = store_key else {
            return Box::pin(self.run(key, cost, mode)).await;
        };
        if !self.is_current() {
            return Box::pin(self.rerun(key, cost, mode)).await;
        }
        let site = self.site(cost, true);
        let decided = self.service.decide_later(&site, key, store_key).await;
        match mode {
            Mode::Enforce => decided.and_then(|d| RateLimitService::admit(&site, d)),
            _ => decided,
        }
    }

    /// The level of `key`'s budget now: [`RateLimitService::status`].
    pub fn status<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.run(Some(key), 0, Mode::Look)
    }

    /// An annotated fn's call: user `key` (none: the budget alone) and `cost`, decided at
    /// once when the store can; a refusal is an error. Otherwise what [`begin`](Self::begin)
    /// got to, for [`enforce_later`](Self::enforce_later). The error boxed, as the fn hands
    /// it on: the answer is two words, not the 48 bytes of an `Error` moved at each step.
    #[inline]
    pub(crate) fn enforce_now(
        &self,
        key: Option<&str>,
        cost: u64,
    ) -> Begun<Result<(), Box<Error>>> {
        let site = self.site(cost, true);
        self.begin(&site, key, super::pipeline::admitted)
    }

    /// [`enforce_now`](Self::enforce_now)'s awaited half, on the store key it composed
    /// (`None`: a call that may wait, or one `enforce_now` did not reach).
    pub(crate) async fn enforce_later(
        &self,
        key: Option<&str>,
        cost: u64,
        store_key: Option<&str>,
    ) -> Result<(), Error> {
        self.awaited(key, cost, store_key, Mode::Enforce)
            .await
            .map(drop)
    }

    /// A sync annotated fn's call: decided at once, or refused with
    /// [`Error::SyncOnWaitingStore`] on a store that does not always decide at once.
    pub(crate) fn enforce_sync(
        &self,
        key: Option<&str>,
        cost: u64,
        function: &'static str,
    ) -> Result<(), Error> {
        if !self.is_current() {
            return (self.service).enforce_call_sync(&self.asked(cost), key, function);
        }
        let site = self.site(cost, true);
        self.service.enforce_sync(&site, key, function)
    }
}

/// What [`Prepared::begin`] made of a call.
pub(crate) enum Begun<T> {
    /// Decided at once (and recorded), as the caller's `answer` made it.
    Decided(T),
    /// The store must be awaited, on this store key.
    Later(String),
    /// The call may wait in the queue: nothing asked.
    Waits,
}

/// What [`Prepared::try_consume`] made of a call.
#[derive(Debug)]
pub enum Attempt {
    /// Decided at once, and recorded.
    Decided(Result<Decision, Error>),
    /// Not decided, nothing spent: the store must be awaited ([`Pending::consume`]).
    Pending(Pending),
}

/// A call [`Prepared::try_consume`] began and the store must answer: its site, its user key
/// and the store key composed for it (none for a call that may wait in the queue, which takes
/// the queue's path), owned, so the future of [`consume`](Self::consume) borrows nothing.
#[derive(Debug)]
pub struct Pending {
    prepared: Arc<Prepared>,
    key: String,
    store_key: Option<String>,
}

impl Pending {
    /// The store awaited once, on the store key `try_consume` composed (or the whole
    /// pipeline, queue included, for a call that may wait).
    pub async fn consume(self) -> Result<Decision, Error> {
        let prepared = &*self.prepared;
        let key = Some(self.key.as_str());
        prepared
            .awaited(key, prepared.cost, self.store_key.as_deref(), Mode::Spend)
            .await
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Error, Options, RateLimitService};

    /// A prepared site checks its own cost once: a cost above its capacity is still an error
    /// on every call, and a call of another cost is checked as it comes.
    #[test]
    fn a_prepared_cost_checked_once_still_refuses_every_call_above_capacity() {
        let service = RateLimitService::new(Config::builder().default_limit(3).build().unwrap());
        let service = service.unwrap();
        let above = |r: Option<Result<_, Error>>| {
            matches!(r, Some(Err(Error::CostAboveCapacity { cost: 5, .. })))
        };
        let costly = service.prepare(&Options::new().cost(5)).unwrap();
        for _ in 0..2 {
            assert!(above(costly.consume_now("k")));
        }
        let fits = service.prepare(&Options::new().cost(2)).unwrap();
        assert!(fits.consume_now("k").unwrap().unwrap().allowed);
        assert!(matches!(
            fits.enforce_now(Some("k"), 5),
            super::Begun::Decided(Err(e)) if matches!(*e, Error::CostAboveCapacity { cost: 5, .. })
        ));
        assert!(matches!(
            fits.enforce_now(Some("k"), 0),
            super::Begun::Decided(Err(e)) if matches!(*e, Error::ZeroCost)
        ));
    }

    /// A site without user keys holds its store key's hash in the memory store
    /// (`Store::hash_of`), and its calls are not hashed again: they spend from the one state
    /// the key's text names, which a look and a reset by that text find.
    #[test]
    fn a_held_hash_finds_the_state_its_key_text_names() {
        let config = Config::builder().default_limit(2).build().unwrap();
        let service = RateLimitService::new(config).unwrap();
        let prepared = service.prepare(&Options::new().budget("held")).unwrap();
        assert!(prepared.whole_hash.is_some());
        let admitted = || matches!(prepared.enforce_now(None, 1), super::Begun::Decided(Ok(())));
        let (store, text) = (service.memory_store().unwrap(), prepared.around.whole());
        let remaining = || {
            let now = service.clock().now();
            let look = store.decide_at(text, &prepared.quota, 0, now, false);
            look.unwrap().remaining
        };
        assert_eq!(remaining(), 2);
        assert!(admitted());
        assert_eq!(remaining(), 1);
        assert!(admitted());
        assert!(!admitted());
        assert_eq!(remaining(), 0);
        assert!(store.reset(text));
        assert_eq!(remaining(), 2);
        assert!(admitted());
        assert_eq!(store.len(), 1);
    }
}
