//! Penalties and rewards: what the application decides after the fact about a key's budget.

use std::future::Future;

use super::calls::{Mode, Started};
use super::site::Held;
use super::{Options, RateLimitService};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};
use crate::store::{Adjustment, Carry, Check, Mode as StoreMode, Stacked, StoreKey};

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
        // A read that fails refuses the adjustment with its error under every policy, as a
        // penalty's raise does: a penalty or reward is no decision a policy answers, and made
        // on what this service alone knew it is spent or given back on the moved state alone.
        if self.horizon_due(&generation) {
            Box::pin(self.read_horizon(&generation)).await?;
        }
        let site = self.site(&generation, &call, &mut held)?;
        let store = &*self.inner.store;
        if !store.adjusts() {
            return Err(Error::InvalidQuota(QuotaError::Unsupported {
                store: "this store",
                reason: "it takes no penalties or rewards: the memory and Redis stores do",
            }));
        }
        // An adjustment of nothing changes nothing: no old state carried into the key's (a
        // penalty of 0 on a moved bucket stored its key, one more against `max_keys`:
        // probes_nothing_adjusted), no script run (on Redis, a fixed window's count another
        // window wrote was kept to this one's end), no carrying held longer. The level, as
        // any adjustment answers.
        let adjusts = generation.config.enabled() && units > 0;
        if adjusts {
            let store_key = site.store_key(Some(key))?;
            let now = self.inner.clock.now();
            let mut drained = None;
            let quota = site.quota_at(now, &mut drained);
            let old_keys: Vec<(String, &Quota)> = (site.other_states_at(now))
                .map(|old| {
                    let mut old_key = String::with_capacity(64);
                    old.key.write(&mut old_key, Some(key));
                    (old_key, &old.quota)
                })
                .collect();
            // A moved limit's old states (`transition.rs`). A penalty adds to what the key
            // owes: every old state is carried into its state first (decided on or not), and
            // the penalty spent there; on its state alone it lay under the old debt the next
            // call carried (10 admitted where it left 5, inside the old window or past it:
            // probes_carry_attacks). On a store that does not carry, the old states are
            // decided whole meanwhile: spent on each. A reward gives back on every one (else
            // the next call carries back what it gave).
            // The fleet's record raised first, to when this penalty's debt may end at the
            // latest, on any state it is spent on (a token bucket's): another service lets
            // a move go by it (`horizon.rs`). Raised before the state is written: a failure
            // refuses the penalty with the store's error, nothing spent. Kept only by the
            // service that made it, another carried the old state for the configured bucket
            // only and read the moved one alone: 15 admitted where the penalty's debt left
            // none (probes_fleet_horizon_redis).
            if penalty {
                let until = self.penalty_bound(&site, &old_keys, units, now);
                if self.horizon_raise_due() || self.penalty_raise_due(until) {
                    Box::pin(self.raise_horizon(&generation, (until, 0))).await?;
                }
            }
            let carries = penalty && store.carries() && !old_keys.is_empty();
            if carries {
                let own = [Check {
                    key: StoreKey::composed(&store_key),
                    quota,
                    cost: 0,
                }];
                let carried: Vec<Carry<'_>> = (old_keys.iter())
                    .map(|(old_key, quota)| Carry {
                        from: StoreKey::composed(old_key),
                        quota,
                        into: 0,
                        block_only: false,
                    })
                    .collect();
                let stacked = Stacked::carrying(&own, &carried, now, StoreMode::Look)?;
                self.ask_store_later(&site, stacked).await?;
            }
            let olds = old_keys.iter().filter(|_| !carries);
            let states = std::iter::once((store_key.as_str(), quota))
                .chain(olds.map(|(k, q)| (k.as_str(), *q)));
            for (store_key, quota) in states {
                let key_in_store = StoreKey::composed(store_key);
                let adjustment = match penalty {
                    true => Adjustment::penalty(key_in_store, quota, units, now),
                    false => Adjustment::reward(key_in_store, quota, units, now),
                };
                store.adjust(adjustment).await?;
                if penalty && quota.strategy() == crate::syntax::Strategy::TokenBucket {
                    // At least the tolerance owed before and the penalty's tokens after (more
                    // where penalties stack: the level after, below).
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
        if let (true, Ok(level)) = (penalty && adjusts, &decided) {
            // Where penalties stack, a debt past the tolerance before this one: each state
            // adjusted owes at most a call and a tolerance past the level left (the state with
            // the longest wait's end): three penalties of 10 on a bucket of 10 a minute owed
            // 4 minutes, counted as 2 above, and the moved bucket asked at +170 s was fresh
            // (probes_carry_attacks).
            let now = self.inner.clock.now();
            let most = (std::iter::once(site.quota)
                .chain(site.other_states_at(now).map(|o| &o.quota)))
            .filter(|q| q.strategy() == crate::syntax::Strategy::TokenBucket)
            .map(|q| {
                q.tolerance_nanos()
                    .saturating_add(q.interval_nanos().saturating_mul(site.cost))
            })
            .max();
            if let Some(most) = most {
                let owed = level.reset_after.as_nanos().min(u128::from(u64::MAX)) as u64;
                let until = now.saturating_add(owed).saturating_add(most);
                let latest = &self.inner.penalized_until;
                latest.fetch_max(until, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if penalty && adjusts {
            // The exact end recorded too, beside the bound raised before: another service
            // whose own bound was larger took that bound for its own and read nothing of
            // this penalty, whose debt ended after its own (15 admitted against none:
            // probes_horizon_record_redis). The penalty is written: a failure here is the
            // call's error where it refuses (`horizon_failure_answered`), the bound standing,
            // read by every other service (the record's second bound where it lies under
            // another's own larger one: probes_horizon_ids_redis).
            let end = self
                .inner
                .penalized_until
                .load(std::sync::atomic::Ordering::Relaxed);
            if self.penalty_end_due(end) {
                match Box::pin(self.raise_horizon(&generation, (0, end))).await {
                    Err(e) if !self.horizon_failure_answered(&e) => return Err(e),
                    _ => {}
                }
            }
        }
        decided
    }

    /// When a penalty of `units` at `now` on `site`'s state, and on the old states
    /// `old_keys` names, leaves its debt at the latest, bounded before it is made: a token
    /// bucket owes no more before it than its tolerance past `now` or the latest penalty's
    /// exact end known (this service's, or another's read from the record), and after it
    /// that plus the penalty's tokens, plus a call and a tolerance (the bound noted after
    /// it: `adjust`). 0 where no state is a token bucket. Another's penalty this service
    /// has not read may leave more: its exact end, raised after it, covers that.
    fn penalty_bound(
        &self,
        site: &super::site::Site<'_>,
        old_keys: &[(String, &Quota)],
        units: u64,
        now: crate::clock::Nanos,
    ) -> crate::clock::Nanos {
        use std::sync::atomic::Ordering::Relaxed;
        // Ends, never another's bound: a bound raised from one read back climbed with every
        // penalty across two services (`Fleet::ended`).
        let before =
            (self.inner.penalized_until.load(Relaxed)).max(self.inner.fleet.ended.load(Relaxed));
        (std::iter::once(site.quota).chain(old_keys.iter().map(|(_, q)| *q)))
            .filter(|q| q.strategy() == crate::syntax::Strategy::TokenBucket)
            .map(|q| {
                let tolerance = q.tolerance_nanos();
                let tokens = units.saturating_add(site.cost);
                (now.saturating_add(tolerance).max(before))
                    .saturating_add(q.interval_nanos().saturating_mul(tokens))
                    .saturating_add(tolerance)
            })
            .max()
            .unwrap_or(0)
    }
}
