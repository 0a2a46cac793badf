//! Stacked limits through the service: several limits decided as one call.

use std::future::Future;

use super::ask::Question;
use super::pipeline::IfAbandoned;
use super::site::{Held, Site};
use super::transition;
use super::{Call, Generation, Options, RateLimitService, SpentAll};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::quota::Quota;
use crate::stats::Outcome;
use crate::store::{Carry, Check, Mode, Request, Stacked, StoreKey};

mod answer;
use answer::fold;

impl RateLimitService {
    /// Decides one call against several limits as one (stacked limits: a short window against
    /// bursts and a long one, a per-user and a per-route budget): the call is admitted, and
    /// spent from every limit, only if every limit admits it, in one atomic step per store; a
    /// call refused by one limit spends nothing from the others. Each limit is a key with its
    /// options (tier, overrides, budget; the first limit's `cost` is not shared: each has its
    /// own). One decision per limit, in order; the call passed when every one is `allowed`.
    /// Every limit spends, or every one only looks (`consume(false)`): a mix is
    /// [`Error::MixedStack`], and no limit at all [`Error::NoLimit`], before anything is
    /// spent or counted.
    ///
    /// With the Redis store the limits are one script in one round trip. In a Redis Cluster
    /// one script reads one slot's keys, which the service's keys of one user key are (it is
    /// the hash tag); limits on several user keys (a user's and an address's), or beside an
    /// fn-wide budget, are decided slot by slot, a script each: a call every slot admits
    /// spent from each limit, and one refused, once answered, from none (what an earlier slot
    /// spent for it is given back), no limit ever admitting more than it holds. Between a
    /// slot's spend and its give-back another call may be refused for those units (never
    /// admitted); a call dropped in between leaves them spent (fail closed).
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
        // Never waits: every store call is answered at once or refused as waiting.
        let decided = self.decide_stacked_in(limits, Some(function));
        let waiting = Error::SyncOnWaitingStore { function };
        refuse_unless_all_allowed(crate::drivers::poll_once(decided, waiting)?, limits)
    }

    /// A stacked call, awaiting the store when it must.
    async fn decide_stacked(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
    ) -> Result<Vec<Decision>, Error> {
        let spent = self.spend_stacked_in(limits, None, false).await;
        spent.map(SpentAll::into_decisions)
    }

    /// [`decide_stacked_in`](Self::decide_stacked_in), the spends kept to be given back
    /// together (an annotated fn with several limits that counts only some outcomes, or
    /// [`spend_all`](Self::spend_all)); with `enforce`, a refusal is an error.
    pub(crate) async fn spend_stacked(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
        at_once: Option<&'static str>,
        enforce: bool,
    ) -> Result<SpentAll, Error> {
        let spent = self.spend_stacked_in(limits, at_once, true).await?;
        if enforce {
            refuse_unless_all_allowed(spent.decisions().to_vec(), limits)?;
        }
        Ok(spent)
    }

    /// [`consume_all`](Self::consume_all), keeping the spends to give them back together once
    /// the call's outcome is known ([`SpentAll::refund`]): to every limit, or to none.
    pub fn spend_all<'a>(
        &'a self,
        limits: &[(&'a str, &Options)],
    ) -> impl Future<Output = Result<SpentAll, Error>> + Send + 'a {
        let owned = Self::own_limits(limits);
        async move { self.spend_stacked(&Self::calls(&owned), None, false).await }
    }

    /// A stacked call: every limit's site, key, cost and mode worked out and checked (the
    /// same key twice is an error) before anything is spent, then the store's answer, then
    /// every limit settled and counted once. `at_once`: the fn whose call must not wait for
    /// its store (a sync fn: refused with [`Error::SyncOnWaitingStore`] where the store would
    /// be awaited), else the store is awaited when it must be.
    async fn decide_stacked_in(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
        at_once: Option<&'static str>,
    ) -> Result<Vec<Decision>, Error> {
        let spent = self.spend_stacked_in(limits, at_once, false).await;
        spent.map(SpentAll::into_decisions)
    }

    /// [`decide_stacked_in`](Self::decide_stacked_in), with `keep`: the spends kept to be
    /// given back when they can be (see [`SpentAll`]).
    async fn spend_stacked_in(
        &self,
        limits: &[(Option<&str>, Call<'_>)],
        at_once: Option<&'static str>,
        keep: bool,
    ) -> Result<SpentAll, Error> {
        let generation = self.generation();
        // The fleet's reload horizon (`horizon.rs`), as a single call: read where due before
        // the sites are worked out, raised before a quota of a call's own is spent. Neither,
        // a pod carried a moved state only for the configured bucket while another's stacked
        // calls owed 15 minutes on it: 15 admitted where one service admitted none
        // (probes_horizon_record_redis).
        // Either failing unanswered, the call is answered by the store's failure policy, as
        // a single call is (`Site::failed`).
        // A read or raise that refuses the call is counted as its error, as a single call's
        // (`unresolved`, `record_and_return`) and as the store's own error here
        // (`finish_stacked`): returned as it was, a stacked call refused so was counted
        // nowhere (0 errors against the single call's 1: probes_policy_answers_redis).
        let mut failed = false;
        if self.horizon_due(&generation) {
            match Box::pin(self.read_horizon_if_due(&generation)).await {
                Ok(unanswered) => failed = unanswered,
                Err(e) => return Err(self.unresolved_all(limits, e)),
            }
        }
        let mut held: Vec<Held> = std::iter::repeat_with(Held::default)
            .take(limits.len())
            .collect();
        let (mut sites, keys, now) = match self.stacked(&generation, limits, &mut held)? {
            Keyed::Unlimited(decisions) => return Ok(SpentAll::kept(decisions)),
            Keyed::Keys(sites, keys, now) => (sites, keys, now),
        };
        if sites.iter().any(|site| self.horizon_raise_at(site)) {
            match Box::pin(self.raise_horizon_for_call(&generation)).await {
                Ok(unanswered) => failed |= unanswered,
                Err(e) => return self.finish_stacked(&sites, Err(e)).map(SpentAll::kept),
            }
        }
        for site in &mut sites {
            *site = site.failed_if(failed);
        }
        let mut drained = vec![None; sites.len()];
        let mut checks = checks(&keys, &sites, now, &mut drained);
        // Limits a reload moved to another state are held to their old states too, as one
        // with the rest (`transition.rs`): one more check per old state, owned by its limit.
        let old_keys: Vec<Vec<String>> = (sites.iter().zip(limits))
            .map(|(site, (key, _))| transition::old_store_keys(site, *key, now))
            .collect();
        let old_quotas: Vec<Vec<crate::quota::Quota>> = (sites.iter())
            .map(|site| transition::old_quotas(site, now))
            .collect();
        let mut owners: Vec<usize> = (0..sites.len()).collect();
        let mut carried = Vec::new();
        for (i, site) in sites.iter().enumerate() {
            let olds_at = checks.len();
            for check in transition::old_checks(site, &old_keys[i], &old_quotas[i], now) {
                checks.push(check);
                owners.push(i);
            }
            let own = (checks[i], i);
            carried.extend(transition::carries(site, &old_keys[i], now, own, olds_at));
        }
        let result = match stacked(&checks, &carried, &sites, now, keep) {
            Ok(all) => {
                // Given up while the store decides: counted once, as abandoned, in every
                // limit's scopes (the store may have spent from each).
                let abandoned = IfAbandoned::new(|| {
                    if all.spends() {
                        self.inner.total.record(Outcome::Abandoned);
                        for site in &sites {
                            let tier = site.tier_counters();
                            self.count_scoped(tier, site.budget(), None, Outcome::Abandoned);
                        }
                    }
                });
                let result = self.ask_stacked(all, &sites, &owners, at_once).await;
                abandoned.defuse();
                result.and_then(|decided| fold(decided, &checks, &owners, &sites, now))
            }
            Err(e) => Err(e),
        };
        let held_to_old_states = owners.len() != sites.len();
        drop(checks);
        let decisions = self.finish_stacked(&sites, result)?;
        Ok(match keep && !held_to_old_states {
            true => self.spent_all(&sites, decisions, keys),
            false => SpentAll::kept(decisions),
        })
    }

    /// The store's answer to a stacked call, one decision per limit in order. Without shadow
    /// limits, one decision over them all. With some: the enforced limits as one (all or
    /// nothing), then each shadow limit on its own, in the call's mode when the enforced ones
    /// admitted the call (it spends and counts as it would enforced, refusing nothing:
    /// `finish_stacked`), else as a look (nothing was spent anywhere, as an enforced stack
    /// refused by one limit spends nothing from the others).
    async fn ask_stacked(
        &self,
        all: Stacked<'_>,
        sites: &[Site<'_>],
        owners: &[usize],
        at_once: Option<&'static str>,
    ) -> Result<Vec<Decision>, Error> {
        let shadow = |i: usize| sites[owners[i]].shadow;
        // A sync fn's limits need a store that always decides at once: one that answers some
        // calls at once (a leased budget) would admit its calls only while that lasts.
        if let Some(function) = at_once.filter(|_| !self.inner.store.decides_at_once()) {
            return Err(Error::SyncOnWaitingStore { function });
        }
        if !sites.iter().any(|s| s.shadow) {
            return self.ask_stacked_store(sites, all, at_once).await?;
        }
        let enforced: Vec<Check<'_>> = (all.checks().iter().enumerate())
            .filter(|(i, _)| !shadow(*i))
            .map(|(_, check)| *check)
            .collect();
        // Carried into enforced limits, at their places (left out, a moved bucket beside a
        // shadow limit read a fresh state past its old window: probes_carry_attacks).
        let carried: Vec<Carry<'_>> = (all.carried().iter())
            .filter(|carry| !shadow(carry.into))
            .map(|carry| Carry {
                into: (0..carry.into).filter(|&i| !shadow(i)).count(),
                ..*carry
            })
            .collect();
        let mut decided = Vec::with_capacity(owners.len());
        let mut admitted = true;
        if !enforced.is_empty() {
            let olds_at = (0..all.olds_at()).filter(|&i| !shadow(i)).count();
            let stack = Stacked::carrying(&enforced, &carried, all.now(), all.mode())?
                .with_old_states_from(olds_at);
            let decisions = self.ask_stacked_store(sites, stack, at_once).await??;
            // Anything but one decision per limit is a store answering another question:
            // read before it decides whether the shadow limits spend.
            if decisions.len() != enforced.len() {
                return Err(crate::algorithm::Undecidable::UnexpectedState.into());
            }
            admitted = decisions.iter().all(|d| d.allowed);
            decided = decisions.into_iter().map(Some).collect();
            decided.reserve(owners.len() - decided.len());
        }
        let mut enforced_in_order = std::mem::take(&mut decided).into_iter();
        let mode = if admitted { all.mode() } else { Mode::Look };
        for (i, check) in all.checks().iter().enumerate() {
            if !shadow(i) {
                decided.push(enforced_in_order.next().flatten());
                continue;
            }
            let request = Request::checked(check.key, check.quota, check.cost, all.now(), mode);
            let decision = self.ask_stacked_store(sites, request, at_once).await??;
            decided.push(Some(decision));
        }
        // Anything but one decision per limit is a store answering another question.
        decided
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| crate::algorithm::Undecidable::UnexpectedState.into())
    }

    /// `question`, of a stacked call at `sites`, asked of the store (`ask.rs`: the failure
    /// policy's answer where the call's read or raise of the fleet's record failed): at once,
    /// else awaited; a sync fn's (`at_once`) refused where it would be awaited.
    async fn ask_stacked_store<Q: Question>(
        &self,
        sites: &[Site<'_>],
        question: Q,
        at_once: Option<&'static str>,
    ) -> Result<Q::Answer, Error> {
        match self.ask_store(sites, question) {
            Some(answer) => Ok(answer),
            None => match at_once {
                Some(function) => Err(Error::SyncOnWaitingStore { function }),
                None => Ok(self.ask_store_later(sites, question).await),
            },
        }
    }

    /// Steps 1 to 3 for every limit: its site, its checked call, its store key (or, limiting
    /// disabled, the decisions).
    fn stacked<'a>(
        &'a self,
        generation: &'a Generation,
        limits: &'a [(Option<&'a str>, Call<'a>)],
        held: &'a mut [Held],
    ) -> Result<Keyed<'a>, Error> {
        // No limit at all is no limit, as for one call: never an admission.
        if limits.is_empty() {
            return Err(Error::NoLimit);
        }
        let mut sites = Vec::with_capacity(limits.len());
        let mut keys = Vec::with_capacity(limits.len());
        for ((key, options), held) in limits.iter().zip(held) {
            let site = self
                .site(generation, options, held)
                .map_err(|e| self.unresolved(options, e))?;
            site.check(*key)?;
            let mut k = String::with_capacity(64);
            site.compose(&mut k, *key);
            keys.push(k);
            sites.push(site);
        }
        // One stacked decision spends or looks everywhere: a look among spends would admit
        // the call and spend nothing from the others.
        if sites.iter().any(|s| s.spend) && !sites.iter().all(|s| s.spend) {
            return Err(Error::MixedStack);
        }
        let now = self.inner.clock.now();
        if !generation.config.enabled() {
            return Ok(Keyed::Unlimited(
                limits.iter().map(|_| Decision::unlimited(now)).collect(),
            ));
        }
        Ok(Keyed::Keys(sites, keys, now))
    }

    /// A stacked call refused with `error` before its sites were worked out: counted once in
    /// the total and under each limit's budget, as an error, where it spends (as
    /// [`unresolved`](Self::unresolved) counts a single call's).
    fn unresolved_all(&self, limits: &[(Option<&str>, Call<'_>)], error: Error) -> Error {
        if limits.iter().all(|(_, call)| call.consume) {
            self.inner.total.record(Outcome::Error);
            for (_, call) in limits {
                self.count_scoped(None, call.budget, None, Outcome::Error);
            }
        }
        error
    }
}

/// What a stacked call needs from the store: every limit's site and store key, and the time;
/// or, limiting disabled, the decisions already.
enum Keyed<'a> {
    Unlimited(Vec<Decision>),
    Keys(Vec<Site<'a>>, Vec<String>, Nanos),
}

/// The store's checks: one per limit, each with its own cost.
fn checks<'a>(
    keys: &'a [String],
    sites: &'a [Site<'_>],
    now: Nanos,
    drained: &'a mut [Option<Quota>],
) -> Vec<Check<'a>> {
    (keys.iter().zip(sites).zip(drained))
        .map(|((key, site), drained)| Check {
            key: StoreKey::composed(key),
            quota: site.quota_at(now, drained),
            cost: site.cost,
        })
        .collect()
}

/// The store's request: spends when every limit asks to, a look when none does (a mix is
/// refused before: [`Error::MixedStack`]). An error for the same store key twice (see
/// [`Stacked::new`]).
fn stacked<'a>(
    checks: &'a [Check<'a>],
    carried: &'a [Carry<'a>],
    sites: &[Site<'_>],
    now: Nanos,
    keep: bool,
) -> Result<Stacked<'a>, Error> {
    let mode = Mode::of(sites.iter().all(|s| s.spend), keep);
    // One check per site, then the old states' (`spend_stacked_in`): those decided first
    // where a store decides in steps (`Stacked::with_old_states_from`).
    Ok(Stacked::carrying(checks, carried, now, mode)?.with_old_states_from(sites.len()))
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
