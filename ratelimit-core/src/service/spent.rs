//! [`Spent`]: an admitted call's spend, held until its outcome says whether it counts. The
//! call spends before its work runs and is given back after, when its outcome should not
//! count (only failures count, or only successes), so that N concurrent attempts never run
//! more than the limit allows: there is no check-then-count race.

use std::fmt;
use std::sync::Arc;

use super::site::{Held, Site};
use super::RateLimitService;
use crate::clock::Nanos;
use crate::decision::{Decision, Receipt};
use crate::error::Error;
use crate::quota::Quota;
use crate::stats::{Counters, Outcome};
use crate::store::{Refund, StoreKey};

/// A decision whose spend can be given back once ([`refund`](Self::refund)), from
/// [`RateLimitService::spend`] or [`Prepared::spend`](crate::Prepared::spend).
///
/// Given back only to the state it was spent from, and only while it still counts: a refund
/// after the window rolled (the log's entry left it, the bucket's tokens came back), after
/// the key was reset, or after the store lost the key and made it again gives back nothing,
/// and never makes the budget larger than the quota. Not `Clone`: a spend is given back at
/// most once. Dropping it keeps the spend (a call whose outcome is unknown, such as one
/// cancelled, counts).
///
/// Nothing can be given back ([`refundable`](Self::refundable) is `false`) for a refused
/// call, a shadow limit's would-be refusal, an unlimited service, a store without refunds
/// ([`Store::refunds`](crate::store::Store::refunds)), a spend a failover's local share
/// decided, or a call decided during a reload's transition (on two states).
///
/// ```
/// use ratelimit_core::{Config, Options, RateLimitService};
///
/// # futures::executor::block_on(async {
/// let service = RateLimitService::new(Config::builder().default_limit(2).build()?)?;
/// let login = Options::new().budget("login");
/// for _ in 0..5 {
///     let spent = service.spend("alice", &login).await?;
///     assert!(spent.decision().allowed);
///     // The password was right: this attempt does not count.
///     assert!(spent.refund().await?);
/// }
/// assert_eq!(service.status("alice", &login).await?.remaining, 2);
/// # Ok::<(), ratelimit_core::Error>(())
/// # }).unwrap();
/// ```
pub struct Spent<D = Decision> {
    decided: D,
    owed: Option<Owed>,
}

/// The decisions of a stacked call whose spends can be given back together, once
/// ([`refund`](Spent::refund)): from [`RateLimitService::spend_all`], or an annotated fn with
/// several limits that counts only some outcomes. Given back to every limit the call spent
/// from, or (one of them finding nothing to give back: its window rolled, its key was reset)
/// to none; otherwise as [`Spent`].
pub type SpentAll = Spent<Vec<Decision>>;

/// What giving spends back takes: for each limit the store key and quota it was decided on,
/// its cost, the store's receipt and the counters it was counted in.
struct Owed {
    service: RateLimitService,
    parts: Vec<Part>,
}

struct Part {
    store_key: String,
    quota: Quota,
    cost: u64,
    receipt: Receipt,
    tier: Option<Arc<Counters>>,
    budget: Option<Arc<Counters>>,
}

impl<D: fmt::Debug> fmt::Debug for Spent<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spent")
            .field("decided", &self.decided)
            .field("refundable", &self.refundable())
            .finish()
    }
}

impl Spent {
    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.decided
    }

    /// The decision, the spend kept.
    pub fn into_decision(self) -> Decision {
        self.decided
    }
}

impl SpentAll {
    /// Decisions whose spends stay (nothing to give back).
    pub(crate) fn kept(decisions: Vec<Decision>) -> Self {
        Spent {
            decided: decisions,
            owed: None,
        }
    }

    /// One decision per limit, in order.
    pub fn decisions(&self) -> &[Decision] {
        &self.decided
    }

    /// The decisions, the spends kept.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.decided
    }
}

impl<D> Spent<D> {
    /// Whether [`refund`](Self::refund) can give anything back (see the type's docs; for
    /// stacked limits: the call was admitted by every limit, none of them a shadow limit).
    pub fn refundable(&self) -> bool {
        self.owed.is_some()
    }

    /// Gives the spend back (for stacked limits: to every limit, or to none): `Ok(true)`
    /// when it was, `Ok(false)` when there was nothing to give (see the type's docs); an
    /// error when the store could not answer (the spend then stays, as it does for a caller
    /// that never refunds).
    pub async fn refund(mut self) -> Result<bool, Error> {
        match self.owed.take() {
            Some(owed) => owed.refund().await,
            None => Ok(false),
        }
    }

    /// [`refund`](Self::refund) when the store answers at once (the memory store): `Some`
    /// with its answer, the spend no longer held; `None` when it must be awaited, the spend
    /// still held for `refund`.
    pub fn refund_now(&mut self) -> Option<Result<bool, Error>> {
        Owed::refund_now(&mut self.owed)
    }
}

impl Owed {
    fn refunds(&self, now: Nanos) -> Vec<Refund<'_>> {
        (self.parts.iter())
            .map(|p| {
                Refund::of(
                    StoreKey::composed(&p.store_key),
                    &p.quota,
                    p.cost,
                    p.receipt,
                    now,
                )
            })
            .collect()
    }

    async fn refund(self) -> Result<bool, Error> {
        let store = &*self.service.inner.store;
        // The latest time the clock reached: a clock stepped back never gives back tokens
        // that had come back before the step (`Clock::latest`).
        let now = self.service.inner.clock.latest();
        let given = match self.refunds(now).as_slice() {
            [one] => store.refund(*one).await,
            all => store.refund_all(all).await,
        };
        self.counted(given)
    }

    /// The store's answer at once, taking `owed`; `None`, `owed` left, when it must be
    /// awaited.
    fn refund_now(owed: &mut Option<Owed>) -> Option<Result<bool, Error>> {
        let Some(held) = owed else {
            return Some(Ok(false));
        };
        let store = &*held.service.inner.store;
        let now = held.service.inner.clock.latest();
        let given = match held.refunds(now).as_slice() {
            [one] => store.refund_now(*one),
            all => store.refund_all_now(all),
        }?;
        owed.take().map(|owed| owed.counted(given))
    }

    /// The store's answer, refunds given counted: once in the total, and in each limit's
    /// tier and budget.
    fn counted(self, given: Result<bool, Error>) -> Result<bool, Error> {
        if let Ok(true) = given {
            let service = &self.service;
            service.inner.total.record(Outcome::Refunded);
            for part in &self.parts {
                let (tier, budget) = (part.tier.as_deref(), part.budget.as_deref());
                service.count_scoped(tier, None, budget, Outcome::Refunded);
            }
        }
        given
    }
}

impl RateLimitService {
    /// Spends one call (or `options.cost`) from `key`'s budget, as
    /// [`consume`](Self::consume), keeping what is needed to give it back once its outcome
    /// is known ([`Spent::refund`]). The future does not borrow `options`.
    pub fn spend<'a>(
        &'a self,
        key: &'a str,
        options: &super::Options,
    ) -> impl std::future::Future<Output = Result<Spent, Error>> + Send + 'a {
        let options = options.clone();
        async move {
            let call = super::calls::Mode::Spend.apply(options.call());
            let (generation, mut held) = (self.generation(), Held::default());
            let mut failed = false;
            if self.horizon_due(&generation) {
                match Box::pin(self.read_horizon_if_due(&generation)).await {
                    Ok(unanswered) => failed = unanswered,
                    Err(e) => return Err(self.unresolved(&call, e)),
                }
            }
            match self.site(&generation, &call, &mut held) {
                Ok(site) => {
                    self.spend_at(site.failed_if(failed), Some(key), false)
                        .await
                }
                Err(e) => Err(self.unresolved(&call, e)),
            }
        }
    }

    /// A spending call at `site` (every step, the queue included), kept for a refund; with
    /// `enforce`, a refusal is [`Error::Exceeded`].
    pub(crate) async fn spend_at(
        &self,
        site: Site<'_>,
        key: Option<&str>,
        enforce: bool,
    ) -> Result<Spent, Error> {
        let mut site = Site { kept: true, ..site };
        // A quota or a window of its own past the fleet's record: raised first (`horizon.rs`);
        // failing unanswered, the call answered by the store's failure policy.
        if self.horizon_raise_at(&site) {
            match Box::pin(self.raise_horizon_for_call(site.generation)).await {
                Ok(failed) => site = site.failed_if(failed),
                // Recorded as the call's outcome, and returned: an error stays one.
                Err(e) => {
                    self.record_and_return(&site, key, Err(e))?;
                }
            }
        }
        let site = &site;
        let mut store_key = String::new();
        let decided = match site.may_wait {
            false => {
                let then = super::pipeline::Then::Keep(&mut store_key);
                match self.decide_now(site, key, then, super::pipeline::take) {
                    Some(decided) => decided,
                    None => Box::pin(self.decide_later(site, key, &store_key)).await,
                }
            }
            true => {
                let decided = Box::pin(self.decide_waiting(site, key)).await;
                if decided.is_ok() {
                    store_key = site.store_key(key)?;
                }
                decided
            }
        };
        self.spent(site, decided?, store_key, enforce)
    }

    /// A spending call at `site` decided at once ([`Store::decide_now`]), never waiting in
    /// the queue (a sync fn's); `None`, nothing spent, when the store must be awaited.
    ///
    /// [`Store::decide_now`]: crate::store::Store::decide_now
    pub(crate) fn spend_now(
        &self,
        site: Site<'_>,
        key: Option<&str>,
        enforce: bool,
    ) -> Option<Result<Spent, Error>> {
        let site = &Site { kept: true, ..site };
        if self.horizon_raise_at(site) {
            return None;
        }
        let mut store_key = String::new();
        let then = super::pipeline::Then::Keep(&mut store_key);
        let decided = self.decide_now(site, key, then, super::pipeline::take)?;
        Some(decided.and_then(|decision| self.spent(site, decision, store_key, enforce)))
    }

    /// `decision`, made at `site` on `store_key`, with what giving it back takes when it can
    /// be (see [`Spent`]); with `enforce`, a refusal as [`Error::Exceeded`]. Only on a store
    /// that says it gives spends back ([`refunds`](RateLimitService::refunds)): one that says
    /// not, and stamps its decisions anyway, was asked to give them back (probes_custom_store).
    /// A stamp is the store's word about a state, not about what it does.
    fn spent(
        &self,
        site: &Site<'_>,
        decision: Decision,
        store_key: String,
        enforce: bool,
    ) -> Result<Spent, Error> {
        if enforce && !decision.allowed {
            return Err(Self::exceeded(site, decision));
        }
        let receipt = decision.receipt();
        let refundable = site.spend
            && decision.allowed
            && !decision.shadowed
            && receipt.stamp != 0
            && site.transition.is_none()
            && !store_key.is_empty()
            && self.refunds();
        let owed = refundable.then(|| Owed {
            service: self.clone(),
            parts: vec![self.part(site, store_key, receipt)],
        });
        Ok(Spent {
            decided: decision,
            owed,
        })
    }
}

impl RateLimitService {
    /// What giving back a spend at `site` on `store_key` takes.
    fn part(&self, site: &Site<'_>, store_key: String, receipt: Receipt) -> Part {
        Part {
            store_key,
            quota: *site.quota,
            cost: site.cost,
            receipt,
            tier: site.tier.map(|i| Arc::clone(&site.generation.by_tier[i])),
            budget: site.budget().map(|name| self.method_counters(name).1),
        }
    }

    /// A stacked call's decisions with what giving them back takes, when every limit admitted
    /// the call and each can be given back (see [`SpentAll`]).
    pub(crate) fn spent_all(
        &self,
        sites: &[Site<'_>],
        decisions: Vec<Decision>,
        store_keys: Vec<String>,
    ) -> SpentAll {
        let refundable = sites.len() == decisions.len()
            && sites.len() == store_keys.len()
            && self.refunds()
            && sites.iter().zip(&decisions).all(|(site, decision)| {
                site.spend
                    && site.transition.is_none()
                    && decision.allowed
                    && !decision.shadowed
                    && decision.receipt().stamp != 0
            });
        let owed = refundable.then(|| Owed {
            service: self.clone(),
            parts: (sites.iter().zip(&decisions).zip(store_keys))
                .map(|((site, decision), key)| self.part(site, key, decision.receipt()))
                .collect(),
        });
        Spent {
            decided: decisions,
            owed,
        }
    }
}
