//! What a [`RedisStore`] answers in the process, without a round trip: the checks every
//! decision makes first, a refusal still in force (`refusals`), a unit of a leased budget
//! (`lease`). Shared by the awaited decision (`RedisStore::verdict`) and the one made at once
//! ([`Store::decide_now`](crate::store::Store::decide_now)).

use std::time::Instant;

use super::arguments::supports;
use super::RedisStore;
use crate::algorithm::{self, Verdict};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Mode, Request};

impl RedisStore {
    /// The checks every decision makes before anything is answered, in the process or by
    /// Redis: the key, whether the scripts count `quota`, and the same prechecks as in memory
    /// (`Some` refusal for a zero capacity, whatever Redis holds: Redis is not asked).
    pub(super) fn checked(
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Option<Verdict>, Error> {
        crate::key::check_store_key(key)?;
        supports(quota)?;
        Ok(algorithm::precheck(now, quota, cost, commit)?)
    }

    /// What this process answers at `started` without asking Redis (after [`checked`]): a
    /// refusal still in force, or, for a call that spends, a unit of the key's lease. `None`:
    /// Redis decides (nothing was spent).
    ///
    /// [`checked`]: Self::checked
    pub(super) fn answered_here(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        commit: bool,
        started: Instant,
    ) -> Option<(Verdict, Nanos)> {
        let inner = &self.inner;
        if quota.block().is_some() {
            // Redis reads a block and begins one on a refused spend: a refusal answered
            // here would begin none.
            return None;
        }
        if let Some(answered) =
            inner
                .refusals
                .answer_on_redis_clock(key, cost, quota, started, &inner.clock)
        {
            return Some(answered);
        }
        inner
            .leases
            .as_ref()
            .filter(|_| commit)?
            .spend(key, quota, cost, started)
    }

    /// [`Store::decide_now`](crate::store::Store::decide_now): the checks, then what is
    /// answered here; `None` (nothing spent) for a look at the level and whatever Redis must
    /// decide.
    pub(super) fn decided_here(&self, request: &Request<'_>) -> Option<Result<Decision, Error>> {
        let (key, quota, cost, now) = (
            request.key().as_str(),
            request.quota(),
            request.cost(),
            request.now(),
        );
        let commit = request.spends();
        if cost == 0 && !commit {
            return None; // two looks, as `decide` makes them
        }
        if self.inner.leases.is_none() && !self.inner.refusals.may_hold(key) {
            // Nothing could be answered here: the checks are made once, by `decide`.
            return None;
        }
        let (verdict, at) = match Self::checked(key, quota, cost, now, commit) {
            Err(e) => return Some(Err(e)),
            Ok(Some(verdict)) => (verdict, now),
            // A spend kept for a refund is Redis' (stamped): never a leased unit.
            Ok(None) => {
                let leased = request.mode() == Mode::Spend;
                self.answered_here(key, quota, cost, leased, Instant::now())?
            }
        };
        Some(Ok(Decision::for_quota(verdict, at, quota)))
    }
}
