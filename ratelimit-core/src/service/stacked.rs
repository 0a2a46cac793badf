//! Stacked limits through the service: several limits decided as one call.

use std::future::Future;

use super::pipeline::IfAbandoned;
use super::site::Site;
use super::{Call, Generation, Options, RateLimitService};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::stats::Outcome;
use crate::store::{Check, Mode, Stacked, StoreKey};

impl RateLimitService {
    /// Decides one call against several limits as one (stacked limits: a short window against
    /// bursts and a long one, a per-user and a per-route budget): the call is admitted, and
    /// spent from every limit, only if every limit admits it, in one atomic step per store; a
    /// call refused by one limit spends nothing from the others. Each limit is a key with its
    /// options (tier, overrides, budget; the first limit's `cost` is not shared: each has its
    /// own). One decision per limit, in order; the call passed when every one is `allowed`.
    ///
    /// With the Redis store the limits are one script in one round trip; in a Redis Cluster
    /// their keys must live in one slot, which the service's keys do when the limits share
    /// their user key (it is the hash tag). Limits without a user key (an annotated fn
    /// without `key = ...`) may land in different slots: Redis then refuses the whole call
    /// (`CROSSSLOT`, an [`Error::Store`]), so it is refused, never half spent.
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService, Tier};
    ///
    /// # futures::executor::block_on(async {
    /// let service = RateLimitService::new(Config::default())?;
    /// let burst = Options::new().limit(2).window("1s").budget("burst");
    /// let hourly = Options::new().limit(3).window("1h").budget("hourly");
    /// let limits = [("user:1", &burst), ("user:1", &hourly)];
    /// assert!(service.consume_all(&limits).await?.iter().all(|d| d.allowed));
    /// assert!(service.consume_all(&limits).await?.iter().all(|d| d.allowed));
    /// // The burst limit refuses the third call, and the hourly one spends nothing for it.
    /// let third = service.consume_all(&limits).await?;
    /// assert!(!third[0].allowed && third[1].allowed);
    /// assert_eq!(service.status("user:1", &hourly).await?.remaining, 1);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// Like the single-limit methods, the future borrows the keys but not the slice or the
    /// options: `service.consume_all(&[("k", &Options::new().limit(5))])` may be kept and
    /// awaited later.
    pub fn consume_all<'a>(
        &'a self,
        limits: &[(&'a str, &Options)],
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send + 'a {
        let owned = Self::own_limits(limits);
        async move { self.decide_stacked(&Self::calls(&owned)).await }
    }

    /// Like [`consume_all`](Self::consume_all), but a refusal is `Err(Error::Exceeded(..))`
    /// carrying the refusing limit's decision (of several, the one to wait for longest).
    pub fn enforce_all<'a>(
        &'a self,
        limits: &[(&'a str, &Options)],
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send + 'a {
        let owned = Self::own_limits(limits);
        async move { self.enforce_stacked(&Self::calls(&owned)).await }
    }

    /// The limits with their options cloned (literal names are copied, run-time ones shared):
    /// the futures of [`consume_all`](Self::consume_all) and
    /// [`enforce_all`](Self::enforce_all) borrow the keys, not the slice or the options, as
    /// the single-limit methods do.
    fn own_limits<'a>(limits: &[(&'a str, &Options)]) -> Vec<(&'a str, Options)> {
        limits.iter().map(|&(k, o)| (k, o.clone())).collect()
    }

    /// The service's view of owned limits.
    fn calls<'a>(owned: &'a [(&'a str, Options)]) -> Vec<(Option<&'a str>, Call<'a>)> {
        owned.iter().map(|(k, o)| (Some(*k), o.call())).collect()
    }

    /// [`enforce_all`](Self::enforce_all) for calls with or without a user key (annotated
    /// fns with several limits).
    pub(crate) async fn enforce_stacked(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
    ) -> Result<Vec<Decision>, Error> {
        refuse_unless_all_allowed(self.decide_stacked(limits).await?, limits)
    }

    /// [`enforce_stacked`](Self::enforce_stacked) decided at once, for a sync fn: refused
    /// with [`Error::SyncOnWaitingStore`] when the store does not always decide at once.
    pub(crate) fn enforce_stacked_now(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
        function: &'static str,
    ) -> Result<Vec<Decision>, Error> {
        let generation = self.generation();
        let decisions = match self.with_shadows(&generation, limits)? {
            None => self.stack_now(&generation, limits, function)?,
            Some(shadows) => {
                let enforced = self.stack_now(&generation, &shadows.enforced, function)?;
                let admitted = enforced.iter().all(|d| d.allowed);
                let mut shadowed = Vec::with_capacity(shadows.shadow.len());
                for (key, call) in &shadows.shadow {
                    let site = self.shadow_site(&generation, call, admitted)?;
                    let store_key = site.store_key(*key)?;
                    let now = self.inner.clock.now();
                    let decided = match generation.config.enabled() {
                        false => Ok(Decision::unlimited(now)),
                        true => self
                            .inner
                            .store
                            .decide_now(site.request(&store_key, now)?)
                            .unwrap_or(Err(Error::SyncOnWaitingStore { function })),
                    };
                    shadowed.push(self.settle_member(&site, decided)?);
                }
                self.merge(shadows, enforced, shadowed)
            }
        };
        refuse_unless_all_allowed(decisions, limits)
    }

    /// [`enforce_stacked_now`](Self::enforce_stacked_now) of a stack without shadow limits.
    fn stack_now(
        &self,
        generation: &Generation,
        limits: &[(Option<&str>, Call<'_>)],
        function: &'static str,
    ) -> Result<Vec<Decision>, Error> {
        if limits.is_empty() {
            return Ok(Vec::new());
        }
        Ok(match self.stacked(generation, limits)? {
            Keyed::Unlimited(decisions) => decisions,
            Keyed::Keys(sites, keys, now) => {
                let checks = checks(&keys, &sites, now);
                let store = &*self.inner.store;
                let result = stacked(&checks, &sites, now).and_then(|stacked| {
                    match store.decides_at_once() {
                        true => store.decide_all_now(stacked),
                        false => None,
                    }
                    .unwrap_or(Err(Error::SyncOnWaitingStore { function }))
                });
                self.finish_stacked(&sites, result)?
            }
        })
    }

    /// A stacked call. Shadow limits among the limits are decided after the others, each on
    /// its own: the enforced limits decide the call as one (all or nothing); when they admit
    /// it, each shadow limit spends and counts as it would enforced, refusing nothing; when
    /// they refuse it, the shadow limits only look (nothing was spent anywhere, as an
    /// enforced stack refused by one limit spends nothing from the others).
    async fn decide_stacked(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
    ) -> Result<Vec<Decision>, Error> {
        let generation = self.generation();
        let Some(shadows) = self.with_shadows(&generation, limits)? else {
            return self.decide_stack(&generation, limits).await;
        };
        let enforced = self.decide_stack(&generation, &shadows.enforced).await?;
        let admitted = enforced.iter().all(|d| d.allowed);
        let mut shadowed = Vec::with_capacity(shadows.shadow.len());
        for (key, call) in &shadows.shadow {
            let site = self.shadow_site(&generation, call, admitted)?;
            let store_key = site.store_key(*key)?;
            let decided = self.ask(&site, *key, &store_key).await;
            shadowed.push(self.settle_member(&site, decided)?);
        }
        Ok(self.merge(shadows, enforced, shadowed))
    }

    /// The limits split into enforced and shadow ones, or `None` when none is a shadow limit
    /// (resolved here for the tier's `shadow`; an unresolvable limit is left to the stack,
    /// which reports it).
    fn with_shadows<'a>(
        &self,
        generation: &Generation,
        limits: &[(Option<&'a str>, Call<'a>)],
    ) -> Result<Option<Shadows<'a>>, Error> {
        let is_shadow = |call: &Call<'_>| self.site(generation, call).is_ok_and(|site| site.shadow);
        if !limits.iter().any(|(_, call)| is_shadow(call)) {
            return Ok(None);
        }
        let mut shadows = Shadows {
            enforced: Vec::new(),
            shadow: Vec::new(),
            order: Vec::with_capacity(limits.len()),
        };
        for &(key, call) in limits {
            let shadow = is_shadow(&call);
            shadows.order.push(shadow);
            match shadow {
                true => shadows.shadow.push((key, call)),
                false => shadows.enforced.push((key, call)),
            }
        }
        Ok(Some(shadows))
    }

    /// A shadow limit's site in a stack: spending only when the enforced limits admitted the
    /// call.
    fn shadow_site<'a>(
        &'a self,
        generation: &'a Generation,
        call: &Call<'a>,
        admitted: bool,
    ) -> Result<Site<'a>, Error> {
        let call = Call {
            consume: call.consume && admitted,
            ..*call
        };
        let mut site = self
            .site(generation, &call)
            .map_err(|e| self.unresolved(&call, e))?;
        site.check(None)?;
        site.may_wait = false;
        Ok(site)
    }

    /// A shadow limit's decision in a stack, settled and counted under its tier and budget
    /// (the stacked call counts once in the total: see [`merge`](Self::merge)).
    fn settle_member(
        &self,
        site: &Site<'_>,
        mut decided: Result<Decision, Error>,
    ) -> Result<Decision, Error> {
        self.settle(site, &mut decided, true);
        if site.spend {
            let count =
                |outcome| self.count_scoped(site.tier_counters(), site.budget, None, outcome);
            match &decided {
                Ok(decision) => {
                    count(Outcome::Allowed);
                    if decision.shadowed {
                        count(Outcome::Shadowed);
                    }
                }
                Err(_) => count(Outcome::Error),
            }
        }
        decided
    }

    /// The decisions back in the limits' order; the total counts the call once: by the
    /// enforced limits (already), or, with none, as admitted; and as shadowed when a shadow
    /// limit would have refused a call the enforced ones admitted.
    fn merge(
        &self,
        shadows: Shadows<'_>,
        enforced: Vec<Decision>,
        shadowed: Vec<Decision>,
    ) -> Vec<Decision> {
        let spends = shadows
            .enforced
            .iter()
            .chain(&shadows.shadow)
            .all(|(_, c)| c.consume);
        if spends && shadows.enforced.is_empty() {
            self.inner.total.record(Outcome::Allowed);
        }
        if spends && enforced.iter().all(|d| d.allowed) && shadowed.iter().any(|d| d.shadowed) {
            self.inner.total.record(Outcome::Shadowed);
        }
        let (mut enforced, mut shadowed) = (enforced.into_iter(), shadowed.into_iter());
        shadows
            .order
            .iter()
            .filter_map(|&shadow| match shadow {
                true => shadowed.next(),
                false => enforced.next(),
            })
            .collect()
    }

    /// A stacked call without shadow limits: every limit decided as one.
    async fn decide_stack(
        &self,
        generation: &Generation,
        limits: &[(Option<&str>, Call<'_>)],
    ) -> Result<Vec<Decision>, Error> {
        if limits.is_empty() {
            return Ok(Vec::new());
        }
        let (sites, keys, now) = match self.stacked(generation, limits)? {
            Keyed::Unlimited(decisions) => return Ok(decisions),
            Keyed::Keys(sites, keys, now) => (sites, keys, now),
        };
        let checks = checks(&keys, &sites, now);
        let store = &*self.inner.store;
        let result = match stacked(&checks, &sites, now) {
            Ok(stacked) => match store.decide_all_now(stacked) {
                Some(result) => result,
                None => {
                    // Given up while the store decides: counted once, as abandoned, in every
                    // limit's scopes (the store may have spent from each).
                    let abandoned = IfAbandoned::new(|| {
                        if sites.iter().all(|s| s.spend) {
                            self.inner.total.record(Outcome::Abandoned);
                            for site in &sites {
                                self.count_scoped(
                                    site.tier_counters(),
                                    site.budget,
                                    None,
                                    Outcome::Abandoned,
                                );
                            }
                        }
                    });
                    let result = store.decide_all(stacked).await;
                    abandoned.defuse();
                    result
                }
            },
            Err(e) => Err(e),
        };
        self.finish_stacked(&sites, result)
    }

    /// Steps 1 to 3 for every limit: its site, its checked call, its store key (or, limiting
    /// disabled, the decisions).
    fn stacked<'a>(
        &'a self,
        generation: &'a Generation,
        limits: &'a [(Option<&'a str>, Call<'a>)],
    ) -> Result<Keyed<'a>, Error> {
        let mut sites = Vec::with_capacity(limits.len());
        let mut keys = Vec::with_capacity(limits.len());
        for (key, options) in limits {
            let site = self
                .site(generation, options)
                .map_err(|e| self.unresolved(options, e))?;
            site.check(*key)?;
            let mut k = String::with_capacity(64);
            site.compose(&mut k, *key);
            keys.push(k);
            sites.push(site);
        }
        let now = self.inner.clock.now();
        if !generation.config.enabled() {
            return Ok(Keyed::Unlimited(
                limits.iter().map(|_| Decision::unlimited(now)).collect(),
            ));
        }
        Ok(Keyed::Keys(sites, keys, now))
    }

    /// Counts the store's answer for every limit and names their tiers.
    fn finish_stacked(
        &self,
        sites: &[Site<'_>],
        result: Result<Vec<Decision>, Error>,
    ) -> Result<Vec<Decision>, Error> {
        let commit = sites.iter().all(|s| s.spend);
        let mut decisions = match result {
            Ok(d) => d,
            Err(e) => {
                if commit {
                    self.inner.total.record(Outcome::Error);
                    for site in sites {
                        self.count_scoped(site.tier_counters(), site.budget, None, Outcome::Error);
                    }
                }
                return Err(e);
            }
        };
        let admitted = decisions.iter().all(|d| d.allowed);
        for (decision, site) in decisions.iter_mut().zip(sites) {
            decision.tier = site.tier_name();
            if !admitted && decision.allowed {
                // This limit would have admitted the call, but another refused it and nothing
                // was spent: its remaining is the level now, not what the call would have left
                // (every algorithm's `remaining` for a cost c is the level less c, exactly).
                decision.remaining = decision
                    .remaining
                    .saturating_add(site.cost)
                    .min(decision.limit);
            }
            if commit {
                // Each budget counts what happened in it: admitted, refused by its own
                // limit, or (refused by another limit) nothing.
                let count =
                    |outcome| self.count_scoped(site.tier_counters(), site.budget, None, outcome);
                match (admitted, decision.allowed) {
                    (true, _) => count(Outcome::Allowed),
                    (false, false) => count(Outcome::Denied),
                    (false, true) => {}
                }
            }
        }
        if commit {
            self.inner.total.record(if admitted {
                Outcome::Allowed
            } else {
                Outcome::Denied
            });
        }
        Ok(decisions)
    }
}

/// A stacked call's limits split by [`RateLimitService::with_shadows`].
struct Shadows<'a> {
    enforced: Vec<(Option<&'a str>, Call<'a>)>,
    shadow: Vec<(Option<&'a str>, Call<'a>)>,
    /// For each limit in the call's order, whether it is a shadow limit.
    order: Vec<bool>,
}

/// What a stacked call needs from the store: every limit's site and store key, and the time;
/// or, limiting disabled, the decisions already.
enum Keyed<'a> {
    Unlimited(Vec<Decision>),
    Keys(Vec<Site<'a>>, Vec<String>, Nanos),
}

/// The store's checks: one per limit, each with its own cost.
fn checks<'a>(keys: &'a [String], sites: &'a [Site<'_>], now: Nanos) -> Vec<Check<'a>> {
    keys.iter()
        .zip(sites)
        .map(|(key, site)| Check {
            key: StoreKey::composed(key),
            quota: site.quota_at(now),
            cost: site.cost,
        })
        .collect()
}

/// The store's request: spends only when every limit asks to; a look otherwise. An error
/// for the same store key twice (see [`Stacked::new`]).
fn stacked<'a>(
    checks: &'a [Check<'a>],
    sites: &[Site<'_>],
    now: Nanos,
) -> Result<Stacked<'a>, Error> {
    let mode = match sites.iter().all(|s| s.spend) {
        true => Mode::Spend,
        false => Mode::Look,
    };
    Stacked::new(checks, now, mode)
}
/// `Err(Error::Exceeded(..))` carrying the refusing limit's decision (of several, the one to
/// wait for longest).
fn refuse_unless_all_allowed(
    decisions: Vec<Decision>,
    limits: &[(Option<&str>, Call<'_>)],
) -> Result<Vec<Decision>, Error> {
    let refusal = decisions
        .iter()
        .zip(limits)
        .filter(|(d, _)| !d.allowed)
        .max_by_key(|(d, _)| d.retry_after);
    match refusal {
        None => Ok(decisions),
        Some((decision, (_, options))) => Err(Error::Exceeded(Box::new(Exceeded {
            decision: decision.clone(),
            budget: options.budget.map(str::to_owned),
            policy: options.policy.map(str::to_owned),
        }))),
    }
}
