//! Several limits decided as one: all are admitted and spent, or none is.
//!
//! Every shard a call's keys live in is write-locked, in ascending order (so two stacked calls
//! never wait on each other in a cycle), for the whole decision, which shuts out the single
//! decisions (they hold a shard's read lock around their compare-exchange): each limit is looked at
//! first, and only when every one admits the call is each spent. A call refused by one limit
//! spends nothing from the others.

use super::blocks::{block_after, blocked_verdict};
use super::cells::Stamp;
use super::tables::{by_strategy, by_strategy_arms, Tables};
use super::{locked, MemoryStore, WriteGuard};
use crate::algorithm::{Undecidable, Verdict};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::store::{Check, Mode, Stacked};

/// The tables of shard `index`, among the locked ones (every check's shard is locked).
pub(super) fn locked<'g>(
    guards: &'g mut [(usize, WriteGuard<'_>)],
    index: usize,
) -> &'g mut Tables {
    let slot = guards.iter().position(|(i, _)| *i == index);
    &mut guards[slot.unwrap_or_default()].1
}

impl MemoryStore {
    /// [`Store::decide_all`](crate::store::Store::decide_all), synchronously.
    pub(crate) fn decide_all_at(&self, stacked: &Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let (checks, now, commit) = (stacked.checks(), stacked.now(), stacked.spends());
        let keep = stacked.mode() == Mode::Keep;
        // Decided before any lock (see `precheck_all`).
        let fixed = crate::store::precheck_all(stacked)?;
        let at = self.decision_time(now)?;
        let hashes: Vec<u64> = checks
            .iter()
            .map(|c| self.inner.hasher.hash(c.key.as_str().as_bytes()))
            .collect();
        // The shards of the old states carried into the checks' are locked too (`carry.rs`).
        let carried =
            (stacked.carried().iter()).map(|c| self.inner.hasher.hash(c.from.as_str().as_bytes()));
        let mut shards: Vec<usize> = (hashes.iter().copied().chain(carried))
            .map(|h| self.shard_index(h))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        for attempt in 0..2 {
            let mut guards: Vec<(usize, WriteGuard<'_>)> = shards
                .iter()
                .map(|&i| (i, self.inner.shards[i].write()))
                .collect();
            // Every key is decided under these locks, a missing one fresh (see `fresh_at`).
            let at = self.fresh_at(at);
            if !self.carry(&mut guards, stacked, at)? {
                drop(guards);
                if attempt == 0 {
                    self.sweep_for_room(now);
                }
                continue;
            }
            let mut verdicts = Vec::with_capacity(checks.len());
            // Whether each verdict is its algorithm's on the key's state (a refusal of which
            // may begin a block), not a block in force or a refusal made before any state.
            let mut decided = Vec::with_capacity(checks.len());
            let mut fresh = 0;
            for ((check, &hash), fixed) in checks.iter().zip(&hashes).zip(&fixed) {
                decided.push(fixed.is_none());
                if let Some(verdict) = fixed {
                    verdicts.push(*verdict);
                    continue;
                }
                let key = check.key.as_str().as_bytes();
                let strategy = check.quota.strategy();
                let tables = locked(&mut guards, self.shard_index(hash));
                if tables.held_by_other(strategy, hash, key) {
                    return Err(Undecidable::UnexpectedState.into());
                }
                let blocked = tables.blocks.blocked(check.quota, hash, key, at);
                let (verdict, stored) = by_strategy!(
                    strategy,
                    locked::look(tables, hash, key, check.quota, check.cost, at)
                );
                if let Some(until) = blocked {
                    verdicts.push(blocked_verdict(until, at, &verdict));
                    decided[verdicts.len() - 1] = false;
                    continue;
                }
                fresh += usize::from(!stored);
                verdicts.push(verdict);
            }
            if !commit || verdicts.iter().any(|v| !v.allowed) {
                // A limit with a block that refused a call that would spend blocks its key.
                let checked = checks.iter().zip(&hashes).zip(verdicts.iter_mut());
                for ((check, &hash), verdict) in
                    checked.zip(&decided).filter(|(_, d)| **d).map(|(c, _)| c)
                {
                    if let Some(until) = block_after(verdict, check.quota, at, commit) {
                        let key = check.key.as_str().as_bytes();
                        let tables = locked(&mut guards, self.shard_index(hash));
                        tables.blocks.block(hash, key, until, &self.inner.hasher);
                        *verdict = blocked_verdict(until, at, verdict);
                    }
                }
                let unstamped: Vec<(Verdict, Stamp)> = verdicts
                    .into_iter()
                    .map(|v| (v, Stamp::default()))
                    .collect();
                return Ok(self.decisions(checks, &unstamped, &fixed, at, now));
            }
            if !self.reserve_n(fresh) {
                drop(guards);
                if attempt == 0 {
                    self.sweep_for_room(now);
                }
                continue;
            }
            let mut spent = Vec::with_capacity(checks.len());
            for ((check, &hash), fixed) in checks.iter().zip(&hashes).zip(&fixed) {
                if let Some(verdict) = fixed {
                    spent.push((*verdict, Stamp::default()));
                    continue;
                }
                let key = check.key.as_str().as_bytes();
                let tables = locked(&mut guards, self.shard_index(hash));
                let strategy = check.quota.strategy();
                let (verdict, stamp) = by_strategy!(
                    strategy,
                    locked::spend(tables, self, hash, key, check.quota, check.cost, at)
                );
                let stamp = match keep {
                    true => by_strategy!(strategy, self.stamp_of(tables, hash, key)),
                    false => stamp,
                };
                spent.push((verdict, stamp));
            }
            return Ok(self.decisions(checks, &spent, &fixed, at, now));
        }
        Err(self.full())
    }

    /// The call's decisions, at `now`, from the verdicts reached under the locks at `at` (see
    /// [`Decision::for_quota_at`]), but those `fixed` before any lock, at `now`
    /// (`precheck_all`: a capacity of zero).
    fn decisions(
        &self,
        checks: &[Check<'_>],
        verdicts: &[(Verdict, Stamp)],
        fixed: &[Option<Verdict>],
        at: Nanos,
        now: Nanos,
    ) -> Vec<Decision> {
        checks
            .iter()
            .zip(verdicts)
            .zip(fixed)
            .map(|((c, &(v, stamp)), fixed)| {
                let at = if fixed.is_some() { now } else { at };
                stamp.on(Decision::for_quota_at(v, at, now, c.quota))
            })
            .collect()
    }
}
