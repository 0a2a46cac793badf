//! Blocks ([`Quota::block`]): a key refused until a time once a call on it was refused,
//! whatever its algorithm says meanwhile; kept per shard beside the states (`Tables`).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use super::cells::{Stamp, Tables};
use super::MemoryStore;
use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;

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
    pub(super) fn block(
        &mut self,
        hash: u64,
        key: &[u8],
        until: Nanos,
        hasher: &foldhash::fast::RandomState,
    ) {
        match self.blocks.find(hash, |b| &*b.key == key) {
            Some(block) => drop(block.until.fetch_max(until, Ordering::AcqRel)),
            None => drop(self.blocks.insert_unique(
                hash,
                Block {
                    key: key.into(),
                    until: AtomicU64::new(until),
                },
                |b| hasher.hash_one(&*b.key),
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
    /// test for it. (Between the look at the blocks and the decision a block may begin: the
    /// call is then decided as one that came just before it.)
    #[cold]
    #[inline(never)]
    pub(super) fn decide_with_blocks(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        at: Nanos,
        commit: bool,
    ) -> Result<(Verdict, Stamp), Error> {
        let hash = self.inner.hasher.hash_one(key);
        if let Some(blocked) = self.shard(hash).read().blocked(quota, hash, key, at) {
            return Ok((blocked, Stamp::default()));
        }
        let (verdict, stamp) = self.decide_plain(key, quota, cost, at, commit)?;
        match block_after(&verdict, quota, at, commit) {
            Some(until) => Ok((self.block(hash, key, until, at), stamp)),
            None => Ok((verdict, stamp)),
        }
    }

    /// Blocks `key` until `until` (a call on it was just refused at `now`): the refusal the
    /// call answers, the block's.
    #[cold]
    fn block(&self, hash: u64, key: &[u8], until: Nanos, now: Nanos) -> Verdict {
        self.shard(hash)
            .write()
            .block(hash, key, until, &self.inner.hasher);
        blocked_verdict(until, now)
    }
}
