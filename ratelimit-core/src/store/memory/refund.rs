//! Refunds ([`Refund`]): a spend given back to the state it was made on, one key at a time or
//! a stacked call's keys as one. A key's state is the one a spend was made on while the key
//! holds the stamp the spend's decision carried (`cells::StampedKey`), given it by the first
//! spend on it kept for a refund.

use std::sync::atomic::Ordering;

use super::cells::{Cell, Stamp};
use super::stacked::locked;
use super::tables::{by_strategy, by_strategy_arms, InTables, Tables};
use super::{MemoryStore, WriteGuard};
use crate::clock::Nanos;
use crate::error::Error;
use crate::store::Refund;

/// Gives back (or, without `commit`, whether it would give back) a spend on a key that still
/// holds the state it was made on (the same stamp).
fn refund<A: InTables>(
    tables: &mut Tables,
    hash: u64,
    refund: &Refund<'_>,
    now: Nanos,
    commit: bool,
) -> bool {
    let key = refund.key().as_str().as_bytes();
    let (table, side) = A::table_and_side(tables);
    match table.find_mut(hash, |c| c.key() == key) {
        Some(cell) if refund.stamp() != 0 && cell.kept().stamp() == refund.stamp() => {
            let (quota, cost) = (refund.quota(), refund.cost());
            cell.refund(side, refund.spend(), now, quota, cost, commit)
        }
        _ => false,
    }
}

/// Stamps: which state of a key a kept spend was made on.
impl MemoryStore {
    /// A stamp no other key's state was given.
    pub(super) fn new_stamp(&self) -> u64 {
        self.inner.stamps.fetch_add(1, Ordering::Relaxed)
    }

    /// The stamp of `key`'s stored cell, under the shard's write lock, the key given one
    /// first if it has none: what a spend kept for a refund carries ([`Mode::Keep`]). A key is
    /// stamped by the first such spend (or an adjustment), not when it is stored: a key
    /// nothing is given back to keeps its bytes alone. A key not stored: none.
    pub(super) fn stamp_of<A: InTables>(
        &self,
        tables: &mut Tables,
        hash: u64,
        key: &[u8],
    ) -> Stamp {
        let (table, side) = A::table_and_side(tables);
        match table.find_mut(hash, |c| c.key() == key) {
            Some(cell) => {
                self.ensure_stamped(cell);
                cell.stamp(side)
            }
            None => Stamp::default(),
        }
    }

    /// Gives `key`'s `cell` a stamp if it has none (see [`stamp_of`](Self::stamp_of)). Out of
    /// line: once in a key's life, off the path of the decisions around it.
    #[cold]
    #[inline(never)]
    pub(super) fn ensure_stamped(&self, cell: &mut impl Cell) {
        if !cell.kept().is_stamped() {
            cell.keep(cell.kept().with_stamp(self.new_stamp()));
        }
    }
}

impl MemoryStore {
    /// What [`Store::refund`](super::Store::refund) answers, synchronously: the spend given
    /// back if its key still holds the state it was made on (the same stamp), under the
    /// shard's write lock (a token bucket's refund reads its arrival time and its shift as
    /// one).
    pub(crate) fn refund_request(&self, refund: &Refund<'_>) -> Result<bool, Error> {
        let at = self.decision_time(refund.now())?;
        let hash = self.inner.hasher.hash(refund.key().as_str().as_bytes());
        let mut tables = self.shard(hash).write();
        Ok(by_strategy!(
            refund.quota().strategy(),
            self::refund(&mut tables, hash, refund, at, true)
        ))
    }

    /// [`Store::refund_all`](crate::store::Store::refund_all), synchronously: every spend
    /// given back, or (one of them finding nothing to give back) none. The shards of every
    /// key are write-locked in ascending order, as for a stacked decision, so nothing changes
    /// between the look and the refunds.
    pub(crate) fn refund_all_at(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        let Some(first) = refunds.first() else {
            return Ok(false);
        };
        let at = self.decision_time(first.now())?;
        let hashes: Vec<u64> = refunds
            .iter()
            .map(|r| self.inner.hasher.hash(r.key().as_str().as_bytes()))
            .collect();
        let mut shards: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut guards: Vec<(usize, WriteGuard<'_>)> = shards
            .iter()
            .map(|&i| (i, self.inner.shards[i].write()))
            .collect();
        for commit in [false, true] {
            for (r, &hash) in refunds.iter().zip(&hashes) {
                let tables = locked(&mut guards, self.shard_index(hash));
                let gave = by_strategy!(
                    r.quota().strategy(),
                    self::refund(tables, hash, r, at, commit)
                );
                if !gave {
                    // A look that finds nothing gives nothing back anywhere; the refunds
                    // that commit were each looked at first under the same locks.
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::clock::Nanos;
    use crate::decision::Receipt;
    use crate::store::{MemoryStore, Mode, Refund, Request, StoreKey};
    use crate::syntax::Strategy;
    use crate::Quota;

    const SEC: Nanos = 1_000_000_000;

    /// How many token buckets the store keeps refunds' bookkeeping for.
    fn sides(store: &MemoryStore) -> usize {
        let shards = store.inner.shards.iter();
        shards.map(|s| s.read().side.len()).sum()
    }

    /// A key is stamped by the first spend on it kept for a refund, not when plain spends
    /// store it (a key nothing is given back to pays nothing for refunds): until then its
    /// receipts carry no stamp and nothing is given back to them; from then on the kept
    /// spend's receipt is given back, under every strategy, until the key is made again.
    #[test]
    fn a_key_is_stamped_by_its_first_kept_spend() {
        let store = MemoryStore::new();
        for strategy in Strategy::ALL {
            let q = Quota::per_second(5).unwrap().with_strategy(strategy);
            let name = format!("k:{strategy}");
            let key = StoreKey::new(&name).unwrap();
            let spend = |mode| {
                let request = Request::new(key, &q, 1, SEC, mode).unwrap();
                let decision = store.decide_request(&request).unwrap();
                assert!(decision.allowed, "{strategy}");
                decision.receipt()
            };
            let refund = |receipt| store.refund_request(&Refund::of(key, &q, 1, receipt, SEC));
            let plain = spend(Mode::Spend);
            assert_eq!(plain.stamp, 0, "{strategy}: a plain spend stamped its key");
            assert!(
                !refund(plain).unwrap(),
                "{strategy}: an unstamped spend given back"
            );
            let kept = spend(Mode::Keep);
            assert_ne!(kept.stamp, 0, "{strategy}: a kept spend carries no stamp");
            assert_eq!(
                spend(Mode::Keep).stamp,
                kept.stamp,
                "{strategy}: stamped twice"
            );
            assert!(refund(kept).unwrap(), "{strategy}");
            // Made again after a reset, by a plain spend then a kept one: another stamp, and
            // the old state's receipt is given back to nothing.
            assert!(store.reset(&name));
            spend(Mode::Spend);
            assert_ne!(
                spend(Mode::Keep).stamp,
                kept.stamp,
                "{strategy}: a stamp again"
            );
            assert!(
                !refund(kept).unwrap(),
                "{strategy}: given back to another state"
            );
        }
    }

    /// Two spends kept on a bucket, the first given back: the bucket's bookkeeping goes into
    /// its shard's side table (the cell keeps its size), and leaves with the cell, on a sweep
    /// once the bucket is full again and on a reset: memory back to where it was.
    #[test]
    fn a_buckets_refund_bookkeeping_leaves_with_its_cell() {
        let store = MemoryStore::new();
        let q = Quota::per_second(3)
            .unwrap()
            .with_strategy(Strategy::TokenBucket);
        for (k, end) in [("swept", true), ("reset", false)] {
            let key = StoreKey::new(k).unwrap();
            let spend = |now| {
                let request = Request::new(key, &q, 1, now, Mode::Keep).unwrap();
                store.decide_request(&request).unwrap().receipt()
            };
            let (a, _b): (Receipt, Receipt) = (spend(SEC), spend(SEC));
            assert!(store
                .refund_request(&Refund::of(key, &q, 1, a, SEC))
                .unwrap());
            assert_eq!(sides(&store), 1, "{k}");
            if end {
                store.sweep(3 * SEC);
            } else {
                assert!(store.reset(k));
            }
            assert_eq!(sides(&store), 0, "{k}");
        }
    }
}
