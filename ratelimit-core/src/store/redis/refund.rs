//! What changes a key's budget after the fact, on Redis: refunds, penalties and rewards.
//!
//! A spend asked in [`Mode::Keep`] is decided by the
//! stacked script (`lua/stacked.lua`, one limit or several), which stamps each key it spends
//! from: a key beside it ([`stamp_key`]) holds a number drawn by the first such spend on the
//! key's state, kept as long as that state, deleted by a reset. A refund (`lua/refund.lua`)
//! gives back only to keys still holding the stamp the spend's decision carried, through
//! each strategy's own refund (its script's refund mode), to every key or to none, in one
//! round trip. A key Redis lost (restarted, flushed) holds no stamp or another one: nothing is
//! given back to the state made after.
//!
//! A penalty or a reward is one run of the strategy's own script in its adjust mode.
//!
//! [`Mode::Keep`]: crate::store::Mode::Keep

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use super::arguments::{arguments, supports};
use super::ledger::{erased_key, stamp_key};
use super::scripts::{stacked_index, ADJUST_SCRIPT, REFUND_SCRIPT};
use super::RedisStore;
use crate::error::Error;
use crate::store::{Adjustment, Refund};

/// What stamps are drawn from: a count, hashed with this process's random keys.
static DRAWS: AtomicU64 = AtomicU64::new(0);
static KEYS: LazyLock<std::hash::RandomState> = LazyLock::new(std::hash::RandomState::new);

/// A stamp for a spend kept for a refund: a hash of this process's next count under its own
/// random keys, from 1 to 2^53 - 1 (exact in Lua's numbers). Two states of one key drawing the
/// same stamp has odds of 2^-53.
pub(super) fn draw() -> u64 {
    let n = DRAWS.fetch_add(1, Ordering::Relaxed);
    (KEYS.hash_one(n) & ((1 << 53) - 1)).max(1)
}

impl RedisStore {
    /// Gives back `refunds` (one call's spends) as one, in one round trip: all or none.
    pub(super) async fn give_back(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.refund_run(refunds, false).await
    }

    /// Whether [`give_back`](Self::give_back) would give back every one of `refunds`,
    /// nothing written (see `lua/refund.lua`).
    pub(super) async fn would_give_back(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.refund_run(refunds, true).await
    }

    /// `lua/refund.lua` on `refunds`; with `asks`, only asking.
    async fn refund_run(&self, refunds: &[Refund<'_>], asks: bool) -> Result<bool, Error> {
        let mut keys: Vec<&str> = Vec::with_capacity(3 * refunds.len());
        let mut args = Vec::with_capacity(7 * refunds.len());
        for refund in refunds {
            crate::key::check_store_key(refund.key().as_str())?;
            supports(refund.quota())?;
            if refund.stamp() == 0 || refund.cost() == 0 {
                return Ok(false);
            }
            keys.push(refund.key().as_str());
            let [first, second] = arguments(refund.quota());
            let index = stacked_index(refund.quota().strategy()) as u64;
            let spent_us = refund.spent() / 1_000;
            args.extend([
                index,
                first,
                second,
                refund.cost(),
                spent_us,
                refund.shift() / 1_000,
                refund.stamp(),
            ]);
        }
        let stamps: Vec<String> = refunds
            .iter()
            .map(|r| stamp_key(r.key().as_str()))
            .collect();
        keys.extend(stamps.iter().map(String::as_str));
        let erased: Vec<String> = refunds
            .iter()
            .map(|r| erased_key(r.key().as_str()))
            .collect();
        keys.extend(erased.iter().map(String::as_str));
        if asks {
            args.push(1);
            let would: i64 =
                (self.run(&REFUND_SCRIPT, &keys, &args, false, Instant::now())).await?;
            return Ok(would == 1);
        }
        let given: i64 = self
            .run(&REFUND_SCRIPT, &keys, &args, false, Instant::now())
            .await?;
        if given == 1 {
            // A refusal held here may no longer be one.
            for refund in refunds {
                self.inner.refusals.forget(refund.key().as_str());
            }
        }
        Ok(given == 1)
    }
}

impl RedisStore {
    /// A penalty or a reward, in one round trip: the strategy's script in its adjust mode
    /// (see `lua/prelude.lua`), behind `lua/adjust.lua`, which keeps the key's stamp no longer
    /// than its state. The units spent or given back.
    pub(super) async fn adjust_key(&self, adjustment: &Adjustment<'_>) -> Result<u64, Error> {
        let (key, quota) = (adjustment.key().as_str(), adjustment.quota());
        crate::key::check_store_key(key)?;
        supports(quota)?;
        // A reward on a bare key: its state here may keep no window (a fixed window's count,
        // a bucket's arrival time; a log's entries name theirs since, but one rule for every
        // strategy), so a reward under one window gave back another's spends
        // (probes_two_windows, probes_redis_log_rewards: 6 admitted against 3). Refused with
        // the key to use, before any round trip; the service's keys name their quota and are
        // rewarded as before.
        if !adjustment.is_penalty() && !adjustment.key().names_its_window() {
            return Err(Error::InvalidKey {
                reason: "a reward on Redis takes a key of one window (StoreKey::one_window): \
                         a bare key's state there may keep no window",
            });
        }
        // An adjustment of nothing changes nothing, without a round trip, as in the memory
        // store: the scripts' adjust modes read a state another window wrote as theirs to
        // keep a penalty in, and a penalty of nothing there kept a fixed window's count of
        // another window to this one's end (read then as this window's: a look refused for
        // 0.8 s answered 4 left of 10, the count's expiry 31 s later) and was an error on a
        // counter's (probes_nothing_adjusted_redis).
        if adjustment.units() == 0 {
            return Ok(0);
        }
        let [first, second] = arguments(quota);
        let mode = if adjustment.is_penalty() { 4 } else { 5 };
        let index = stacked_index(quota.strategy()) as u64;
        let voids = !crate::algorithm::State::refunds_survive_rewards(quota.strategy());
        let args = [
            index,
            first,
            second,
            adjustment.units(),
            mode,
            u64::from(voids),
        ];
        let (stamp, erased) = (stamp_key(key), erased_key(key));
        let units: i64 = self
            .run(
                &ADJUST_SCRIPT,
                &[key, &stamp, &erased],
                &args,
                false,
                Instant::now(),
            )
            .await?;
        self.inner.refusals.forget(key);
        u64::try_from(units).map_err(|_| super::reply::unexpected(&units))
    }
}

#[cfg(test)]
mod tests {
    use super::draw;

    #[test]
    fn stamps_are_never_zero_and_exact_in_lua() {
        let drawn: std::collections::HashSet<u64> = (0..10_000).map(|_| draw()).collect();
        assert_eq!(drawn.len(), 10_000);
        assert!(drawn.iter().all(|&s| (1..1 << 53).contains(&s)));
    }
}
