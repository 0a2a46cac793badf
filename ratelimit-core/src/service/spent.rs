//! [`Spent`]: an admitted call's spend, held until its outcome says whether it counts. The
//! call spends before its work runs and is given back after, when its outcome should not
//! count (only failures count, or only successes), so that N concurrent attempts never run
//! more than the limit allows: there is no check-then-count race.

use std::fmt;
use std::sync::Arc;

use super::site::Site;
use super::RateLimitService;
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
pub struct Spent {
    decision: Decision,
    owed: Option<Owed>,
}

/// What giving a spend back takes: the store key and quota it was decided on, its cost, the
/// store's receipt, and the counters it was counted in.
struct Owed {
    service: RateLimitService,
    store_key: String,
    quota: Quota,
    cost: u64,
    receipt: Receipt,
    tier: Option<Arc<Counters>>,
    budget: Option<Arc<Counters>>,
}

impl fmt::Debug for Spent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spent")
            .field("decision", &self.decision)
            .field("refundable", &self.refundable())
            .finish()
    }
}

impl Spent {
    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The decision, the spend kept.
    pub fn into_decision(self) -> Decision {
        self.decision
    }

    /// Whether [`refund`](Self::refund) can give anything back (see the type's docs).
    pub fn refundable(&self) -> bool {
        self.owed.is_some()
    }

    /// Gives the spend back: `Ok(true)` when it was, `Ok(false)` when there was nothing to
    /// give (see the type's docs); an error when the store could not answer (the spend then
    /// stays, as it does for a caller that never refunds).
    pub async fn refund(mut self) -> Result<bool, Error> {
        let Some(owed) = self.owed.take() else {
            return Ok(false);
        };
        let now = owed.service.inner.clock.now();
        let refund = owed.refund(now);
        let given = owed.service.inner.store.refund(refund).await;
        owed.counted(given)
    }

    /// [`refund`](Self::refund) when the store answers at once (the memory store): `Some`
    /// with its answer, the spend no longer held; `None` when it must be awaited, the spend
    /// still held for `refund`.
    pub fn refund_now(&mut self) -> Option<Result<bool, Error>> {
        let Some(owed) = &self.owed else {
            return Some(Ok(false));
        };
        let now = owed.service.inner.clock.now();
        let given = owed.service.inner.store.refund_now(owed.refund(now))?;
        let owed = self.owed.take()?;
        Some(owed.counted(given))
    }
}

impl Owed {
    fn refund(&self, now: crate::clock::Nanos) -> Refund<'_> {
        let key = StoreKey::composed(&self.store_key);
        Refund::of(key, &self.quota, self.cost, self.receipt, now)
    }

    /// The store's answer, a refund given counted.
    fn counted(self, given: Result<bool, Error>) -> Result<bool, Error> {
        if let Ok(true) = given {
            let service = &self.service;
            service.count(
                self.tier.as_deref(),
                None,
                self.budget.as_deref(),
                Outcome::Refunded,
            );
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
            let generation = self.generation();
            match self.site(&generation, &call) {
                Ok(site) => self.spend_at(&site, Some(key), false).await,
                Err(e) => Err(self.unresolved(&call, e)),
            }
        }
    }

    /// A spending call at `site` (every step, the queue included), kept for a refund; with
    /// `enforce`, a refusal is [`Error::Exceeded`].
    pub(crate) async fn spend_at(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        enforce: bool,
    ) -> Result<Spent, Error> {
        let mut store_key = String::new();
        let decided = match site.may_wait {
            false => {
                let then = super::pipeline::Then::Keep(&mut store_key);
                match self.decide_now(site, key, true, then, |d| d) {
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
        site: &Site<'_>,
        key: Option<&str>,
        enforce: bool,
    ) -> Option<Result<Spent, Error>> {
        let mut store_key = String::new();
        let then = super::pipeline::Then::Keep(&mut store_key);
        let decided = self.decide_now(site, key, true, then, |d| d)?;
        Some(decided.and_then(|decision| self.spent(site, decision, store_key, enforce)))
    }

    /// `decision`, made at `site` on `store_key`, with what giving it back takes when it can
    /// be (see [`Spent`]); with `enforce`, a refusal as [`Error::Exceeded`].
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
            && !store_key.is_empty();
        let owed = refundable.then(|| Owed {
            service: self.clone(),
            store_key,
            quota: site.quota,
            cost: site.cost,
            receipt,
            tier: site.tier.map(|i| Arc::clone(&site.generation.by_tier[i])),
            budget: site.budget.map(|name| self.method_counters(name).1),
        });
        Ok(Spent { decision, owed })
    }
}
