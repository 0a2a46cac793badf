//! Penalties and rewards ([`Adjustment`]): what the application decides after the fact, on
//! the key's cell under its shard's write lock.

use super::cells::{Cell, Side};
use super::tables::{by_strategy, by_strategy_arms, InTables, Tables};
use super::MemoryStore;
use crate::algorithm::{self, State};
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::Adjustment;

impl MemoryStore {
    /// What [`Store::adjust`](crate::store::Store::adjust) does, synchronously: the units
    /// spent (a penalty) or given back (a reward).
    pub(crate) fn adjust_request(&self, adjustment: &Adjustment<'_>) -> Result<u64, Error> {
        let quota = adjustment.quota();
        let key = adjustment.key().as_str().as_bytes();
        let (units, penalty) = (adjustment.units(), adjustment.is_penalty());
        let at = self.decision_time(adjustment.now())?;
        // An adjustment of nothing changes nothing, as the scripts' (which write nothing):
        // a penalty of nothing stored a key not stored yet (a key of `max_keys`, stamped).
        if units == 0 {
            return Ok(0);
        }
        by_strategy!(
            quota.strategy(),
            self.adjust_in(key, quota, units, penalty, at)
        )
    }

    /// On the stored key under the shard's write lock (a reward moves a token bucket's
    /// shift with its arrival time, see [`Algorithm::adjust`](crate::algorithm::Algorithm));
    /// a penalty on a key not stored yet adds it (a reward on one has nothing to give).
    fn adjust_in<A: InTables>(
        &self,
        key: &[u8],
        quota: &Quota,
        units: u64,
        penalty: bool,
        now: Nanos,
    ) -> Result<u64, Error> {
        let hash = self.inner.hasher.hash(key);
        // A full store sweeps the keys that expired first, as a decision does.
        self.with_room(hash, now, |tables| {
            self.adjust_locked::<A>(tables, hash, key, quota, units, penalty, now)
        })
    }

    /// [`adjust_in`](Self::adjust_in)'s step under the shard's write lock, held by the
    /// caller: `Ok(None)` when a penalty needs room for a new key and none is left.
    #[allow(clippy::too_many_arguments)]
    fn adjust_locked<A: InTables>(
        &self,
        tables: &mut Tables,
        hash: u64,
        key: &[u8],
        quota: &Quota,
        units: u64,
        penalty: bool,
        now: Nanos,
    ) -> Result<Option<u64>, Error> {
        let adjust = |cell: &mut A::Cell, side: &mut Side, at: Nanos| {
            let moved = cell.adjust(side, at, quota, units, penalty);
            if !penalty && moved > 0 && !State::refunds_survive_rewards(quota.strategy()) {
                // The spends before the reward are given back to nothing (see the const).
                cell.keep(cell.kept().with_stamp(self.new_stamp()));
            }
            moved
        };
        self.change_locked::<A>(tables, hash, key, quota, now, penalty, adjust)
    }

    /// `change` of the state under `key` (what it answers: what moved), under the shard's
    /// write lock, held by the caller (a debt a stacked call carries, `carry.rs`, is one):
    /// on a key not stored yet, on a fresh state when it `adds` (a penalty, a debt; else
    /// nothing moves), `Ok(None)` when that needs room for a new key and none is left.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn change_locked<A: InTables>(
        &self,
        tables: &mut Tables,
        hash: u64,
        key: &[u8],
        quota: &Quota,
        now: Nanos,
        adds: bool,
        change: impl FnOnce(&mut A::Cell, &mut Side, Nanos) -> u64,
    ) -> Result<Option<u64>, Error> {
        let (table, side) = A::table_and_side(tables);
        if let Some(cell) = table.find_mut(hash, |c| c.key() == key) {
            // What an adjustment moves may be kept under the key's stamp (a token bucket's
            // shift, in the side table): stamped first, as a kept spend is.
            self.ensure_stamped(cell);
            return Ok(Some(change(cell, side, now)));
        }
        if tables.held_by_other(quota.strategy(), hash, key) {
            return Err(algorithm::Undecidable::UnexpectedState.into());
        }
        if !adds {
            return Ok(Some(0));
        }
        if !self.reserve() {
            return Ok(None);
        }
        // A penalty on a key not stored yet: nothing for the side table (only refunds
        // and rewards keep anything there).
        let mut cell = A::Cell::fresh();
        let at = self.fresh_at(now);
        let moved = change(&mut cell, &mut Side::new(), at);
        self.insert::<A>(tables, hash, key, quota, cell, true);
        Ok(Some(moved))
    }
}
