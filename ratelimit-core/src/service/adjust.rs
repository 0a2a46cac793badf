//! Penalties and rewards: what the application decides after the fact about a key's budget.

use std::future::Future;

use super::calls::{Mode, Started};
use super::site::Held;
use super::{Options, RateLimitService};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::QuotaError;
use crate::store::{Adjustment, StoreKey};

impl RateLimitService {
    /// Spends `units` from `key`'s budget under `options` whatever it holds: past its limit
    /// too, so the key is refused until they have come back (a failed payment that costs a
    /// user 10 attempts). Returns the level after, as [`status`](Self::status). Spends are
    /// counted in the stores of the budget only, not in the statistics of calls.
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService};
    ///
    /// # futures::executor::block_on(async {
    /// let service = RateLimitService::new(Config::builder().default_limit(5).build()?)?;
    /// let options = Options::new();
    /// assert_eq!(service.penalize("user:1", &options, 3).await?.remaining, 2);
    /// assert_eq!(service.reward("user:1", &options, 1).await?.remaining, 3);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// Errors: on a store that takes no penalties or rewards (a store of one's own that says
    /// none, [`Store::adjusts`](crate::store::Store::adjusts)),
    /// [`Error::InvalidQuota`] with [`QuotaError::Unsupported`]; else as `status`.
    pub fn penalize<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
        units: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        let options = options.clone();
        async move { self.adjust(key, &options, units, true).await }
    }

    /// Gives back up to `units` of what `key`'s budget under `options` holds now, never past
    /// its quota (a refund without a spend to name: see [`spend`](Self::spend) for giving back
    /// one call exactly). Returns the level after; errors as [`penalize`](Self::penalize).
    pub fn reward<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
        units: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        let options = options.clone();
        async move { self.adjust(key, &options, units, false).await }
    }

    async fn adjust(
        &self,
        key: &str,
        options: &Options,
        units: u64,
        penalty: bool,
    ) -> Result<Decision, Error> {
        let call = Mode::Look.apply(options.call());
        let (generation, mut held) = (self.generation(), Held::default());
        let site = self.site(&generation, &call, &mut held)?;
        let store = &*self.inner.store;
        if !store.adjusts() {
            return Err(Error::InvalidQuota(QuotaError::Unsupported {
                store: "this store",
                reason: "it takes no penalties or rewards: the memory and Redis stores do",
            }));
        }
        if generation.config.enabled() {
            let store_key = site.store_key(Some(key))?;
            let now = self.inner.clock.now();
            // A moved limit's old states carried into its state now are carried first (a
            // look, as a call now would carry them), so that what is adjusted is what the
            // key owes: adjusted alone, its state's penalty lay under the old debt the next
            // call carried, 10 admitted where it left 5 (probes_carry_attacks).
            if site.other_states_at(now).any(|old| old.carried_at(now)) {
                self.decide_both(&site, Some(key), &store_key, now).await?;
            }
            let mut drained = None;
            let quota = site.quota_at(now, &mut drained);
            let mut old_keys = Vec::new();
            // The old states too: a penalty on those decided with the key's calls (spent
            // there as a call of that cost would be: on its own state alone it was lost under
            // the old debt carried at the old window's end), a reward on every one (else the
            // next call carries back what it gave).
            for old in (site.other_states_at(now)).filter(|old| !penalty || old.decided_at(now)) {
                let mut old_key = String::with_capacity(64);
                old.key.write(&mut old_key, Some(key));
                old_keys.push((old_key, &old.quota));
            }
            let states = std::iter::once((store_key.as_str(), quota))
                .chain(old_keys.iter().map(|(k, q)| (k.as_str(), *q)));
            for (store_key, quota) in states {
                let key_in_store = StoreKey::composed(store_key);
                let adjustment = match penalty {
                    true => Adjustment::penalty(key_in_store, quota, units, now),
                    false => Adjustment::reward(key_in_store, quota, units, now),
                };
                store.adjust(adjustment).await?;
                if penalty && quota.strategy() == crate::syntax::Strategy::TokenBucket {
                    // At most the tolerance owed before and the penalty's tokens after.
                    let debt = quota.interval_nanos().saturating_mul(units);
                    let until = now
                        .saturating_add(quota.tolerance_nanos())
                        .saturating_add(debt);
                    let latest = &self.inner.penalized_until;
                    latest.fetch_max(until, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        let decided = match self.start(site, Some(key), Mode::Look) {
            Started::Now(decided) => decided,
            Started::Later(later) => later.await,
        };
        decided
    }
}
