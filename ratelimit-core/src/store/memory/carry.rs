//! A reload's moved limit decided no fresher than the state it moved from
//! ([`Stacked::carried`]): before a stacked call is decided, under the write locks of every
//! shard its keys (the carried ones too) live in, each old state's token-bucket debt is carried
//! into the moved limit's state as time ([`Carry::debt`], unless only the block is carried:
//! [`Carry::carries_debt`]) and its block as a block ([`Carry::block`]).

use super::cells::Side;
use super::stacked::locked;
use super::word::BucketCell;
use super::{locked as one, MemoryStore, WriteGuard};
use crate::algorithm::{Gcra, Undecidable};
use crate::clock::Nanos;
use crate::error::Error;
use crate::store::{Carry, Check, Stacked};
use crate::syntax::Strategy;

impl MemoryStore {
    /// Carries each of `stacked`'s old states into its check's state at `at`, under the locks
    /// `guards` hold (every shard of the checks' and the carried keys). `Ok(false)` when a
    /// carried debt needs room for a new key and none is left (what is carried before it
    /// stays: carrying again changes nothing). An old or a moved state held under another
    /// strategy than its quota's is [`Error::UnexpectedState`], as any decision on it is.
    pub(super) fn carry(
        &self,
        guards: &mut [(usize, WriteGuard<'_>)],
        stacked: &Stacked<'_>,
        at: Nanos,
    ) -> Result<bool, Error> {
        // Every state a debt is carried from or into read first: one of the wrong shape is
        // an error with nothing carried (as on Redis, whose script reads before it writes).
        for carry in stacked.carried() {
            let into = &stacked.checks()[carry.into];
            if carry.carries_debt(into.quota) {
                for key in [carry.from.as_str(), into.key.as_str()] {
                    let (hash, key) = self.hashed(key);
                    let tables = locked(guards, self.shard_index(hash));
                    if tables.held_by_other(Strategy::TokenBucket, hash, key) {
                        return Err(Undecidable::UnexpectedState.into());
                    }
                }
            }
        }
        for carry in stacked.carried() {
            let into = &stacked.checks()[carry.into];
            if let Some(until) = self.blocked_until(guards, carry, into, at) {
                let (hash, key) = self.hashed(into.key.as_str());
                let tables = locked(guards, self.shard_index(hash));
                tables.blocks.block(hash, key, until, &self.inner.hasher);
            }
            if !self.carry_debt(guards, carry, into, at)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Until when `carry`'s block holds `into`'s key ([`Carry::block`]).
    fn blocked_until(
        &self,
        guards: &mut [(usize, WriteGuard<'_>)],
        carry: &Carry<'_>,
        into: &Check<'_>,
        at: Nanos,
    ) -> Option<Nanos> {
        if into.quota.block_nanos() == 0 {
            return None;
        }
        let (hash, key) = self.hashed(carry.from.as_str());
        let tables = locked(guards, self.shard_index(hash));
        let until = tables.blocks.blocked(carry.quota, hash, key, at)?;
        carry.block(into.quota, until, at)
    }

    /// Carries a token bucket's debt into `into`'s ([`Carry::debt`]); `Ok(false)`: no room
    /// for the new key it needs.
    fn carry_debt(
        &self,
        guards: &mut [(usize, WriteGuard<'_>)],
        carry: &Carry<'_>,
        into: &Check<'_>,
        at: Nanos,
    ) -> Result<bool, Error> {
        if !carry.carries_debt(into.quota) {
            return Ok(true);
        }
        let Some(from_full_at) = self.full_at(guards, carry.from.as_str(), carry.quota, at) else {
            return Ok(true);
        };
        let into_full_at = (self.full_at(guards, into.key.as_str(), into.quota, at)).unwrap_or(at);
        let time = carry.debt(from_full_at, into.quota, into_full_at, at);
        if time == 0 {
            return Ok(true);
        }
        let (hash, key) = self.hashed(into.key.as_str());
        let tables = locked(guards, self.shard_index(hash));
        let owe = |cell: &mut BucketCell, side: &mut Side, at: Nanos| {
            cell.owe(side, at, into.quota, time)
        };
        let moved = self.change_locked::<Gcra>(tables, hash, key, into.quota, at, true, owe)?;
        Ok(moved.is_some())
    }

    /// When the token bucket under `key` is full again under `quota` (a look of cost 0), if
    /// it is stored (in no other strategy's table: checked first).
    fn full_at(
        &self,
        guards: &mut [(usize, WriteGuard<'_>)],
        key: &str,
        quota: &crate::quota::Quota,
        at: Nanos,
    ) -> Option<Nanos> {
        let (hash, key) = self.hashed(key);
        let tables = locked(guards, self.shard_index(hash));
        let (level, stored) = one::look::<Gcra>(tables, hash, key, quota, 0, at);
        stored.then_some(level.reset_at)
    }

    /// A key's hash and bytes.
    fn hashed<'k>(&self, key: &'k str) -> (u64, &'k [u8]) {
        let key = key.as_bytes();
        (self.inner.hasher.hash(key), key)
    }
}
