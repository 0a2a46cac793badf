//! Blocks ([`Quota::block`]): a key refused until a time once a call on it was refused,
//! whatever its algorithm says meanwhile; kept per shard beside the states (`Tables`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::cells::{by_strategy, by_strategy_arms, KeyHasher, Stamp, Tables};
use super::{stacked, MemoryStore};
use crate::algorithm::{self, Verdict};
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::Mode;

/// A key refused until `until` ([`Quota::block`]). Not counted in the store's keys: only a
/// key with a state is ever blocked, and the block goes with it (a reset) or when it ends (a
/// sweep).
pub(super) struct Block {
    key: Box<[u8]>,
    until: AtomicU64,
}

/// When a block begins: a call under a quota with a block that spent and was refused blocks
/// its key until `now` plus the block. `None`: no block.
#[inline]
pub(super) fn block_after(
    verdict: &Verdict,
    quota: &Quota,
    now: Nanos,
    commit: bool,
) -> Option<Nanos> {
    let block = quota.block_nanos();
    (block > 0 && commit && !verdict.allowed).then(|| now.saturating_add(block))
}

/// The refusal of a call on a key blocked until `until`, decided at `now`.
#[inline]
pub(super) fn blocked_verdict(until: Nanos, now: Nanos) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        reset_at: until,
        retry_after: Some(until.saturating_sub(now).max(1)),
    }
}

impl Tables {
    /// The refusal of a call under `quota` on `key` while a block is in force on it at
    /// `now` (only a quota with a block looks).
    #[inline]
    pub(super) fn blocked(
        &self,
        quota: &Quota,
        hash: u64,
        key: &[u8],
        now: Nanos,
    ) -> Option<Verdict> {
        if quota.block_nanos() == 0 {
            return None;
        }
        let block = self.blocks.find(hash, |b| &*b.key == key)?;
        let until = block.until.load(Ordering::Acquire);
        (until > now).then(|| blocked_verdict(until, now))
    }

    /// Blocks `key` until `until` (never shortening a block in force).
    pub(super) fn block(&mut self, hash: u64, key: &[u8], until: Nanos, hasher: &KeyHasher) {
        match self.blocks.find(hash, |b| &*b.key == key) {
            Some(block) => drop(block.until.fetch_max(until, Ordering::AcqRel)),
            None => drop(self.blocks.insert_unique(
                hash,
                Block {
                    key: key.into(),
                    until: AtomicU64::new(until),
                },
                |b| hasher.hash(&b.key),
            )),
        }
    }

    /// Lifts `key`'s block; whether it had one.
    pub(super) fn unblock(&mut self, hash: u64, key: &[u8]) -> bool {
        match self.blocks.find_entry(hash, |b| &*b.key == key) {
            Ok(block) => {
                block.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Drops the blocks over at `now`.
    pub(super) fn sweep_blocks(&mut self, now: Nanos) {
        self.blocks
            .retain(|b| b.until.load(Ordering::Acquire) > now);
    }
}

impl MemoryStore {
    /// The decision of a call whose quota blocks a key once a call on it is refused
    /// ([`Quota::block`]), around the plain one: refused while a block is in force, and a
    /// spend the algorithm refuses begins one. Out of line: a quota without a block pays one
    /// test for it. A spend is decided under the shard's write lock, the look at the block,
    /// the decision and the block it begins as one: with the look under a lock of its own, a
    /// refund or a reward landing between it and the decision let a call in during a block
    /// that had begun meanwhile (helper 27's observation). A look takes the read lock.
    #[cold]
    #[inline(never)]
    pub(super) fn decide_with_blocks(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        at: Nanos,
        mode: Mode,
    ) -> Result<(Verdict, Stamp), Error> {
        let hash = self.inner.hasher.hash(key);
        let commit = mode.spends();
        if !commit {
            if let Some(blocked) = self.shard(hash).read().blocked(quota, hash, key, at) {
                return Ok((blocked, Stamp::default()));
            }
            return self.decide_plain(key, quota, cost, at, mode);
        }
        let strategy = quota.strategy();
        for attempt in 0..2 {
            let mut tables = self.shard(hash).write();
            if let Some(blocked) = tables.blocked(quota, hash, key, at) {
                return Ok((blocked, Stamp::default()));
            }
            if tables.held_by_other(strategy, hash, key) {
                return Err(algorithm::Undecidable::UnexpectedState.into());
            }
            let (verdict, stored) = by_strategy!(
                strategy,
                stacked::look(&mut tables, hash, key, quota, cost, at)
            );
            if let Some(until) = block_after(&verdict, quota, at, commit) {
                tables.block(hash, key, until, &self.inner.hasher);
                return Ok((blocked_verdict(until, at), Stamp::default()));
            }
            if !verdict.allowed {
                return Ok((verdict, Stamp::default()));
            }
            if stored || self.reserve() {
                let (verdict, stamp) = by_strategy!(
                    strategy,
                    stacked::spend(&mut tables, self, hash, key, quota, cost, at)
                );
                let stamp = match mode {
                    Mode::Keep => by_strategy!(strategy, self.stamp_of(&mut tables, hash, key)),
                    _ => stamp,
                };
                return Ok((verdict, stamp));
            }
            drop(tables);
            if attempt == 0 {
                self.sweep(at);
            }
        }
        Err(Error::StoreFull {
            max_keys: self.inner.options.max_keys,
        })
    }
}
