//! Blocks ([`Quota::block`]): a key refused until a time once a call on it was refused,
//! whatever its algorithm says meanwhile; kept per shard beside the states (`Tables`).

use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use super::cells::KeyHasher;
use crate::algorithm::Verdict;
use crate::clock::Nanos;
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

/// The refusal of a call on a key blocked until `until`, decided at `now`, where the key's
/// own state answers the same call `own` (a look): its wait is the block's end, or the state's
/// own wait where that is later (`lua/stacked.lua` alike). The block's end alone told a call
/// to come back while the state still refused it (a penalty owing past the block, a refill
/// slower than the block), and that refusal began a new block (probes_carry_attacks: told
/// 100 s, refused then and blocked five minutes more).
#[inline]
pub(super) fn blocked_verdict(until: Nanos, now: Nanos, own: &Verdict) -> Verdict {
    let block = until.saturating_sub(now).max(1);
    let own = match own.allowed {
        true => 0,
        false => own.retry_after.unwrap_or(0),
    };
    Verdict {
        allowed: false,
        remaining: 0,
        reset_at: until,
        retry_after: Some(block.max(own)),
    }
}

/// A shard's blocks, whatever their keys' strategy: a table beside the states' (`Tables`).
#[derive(Default)]
pub(super) struct Blocks(HashTable<Block>);

impl Blocks {
    /// Until when a block in force on `key` at `now` refuses a call under `quota` (only a
    /// quota with a block looks): see [`blocked_verdict`].
    #[inline]
    pub(super) fn blocked(
        &self,
        quota: &Quota,
        hash: u64,
        key: &[u8],
        now: Nanos,
    ) -> Option<Nanos> {
        if quota.block_nanos() == 0 {
            return None;
        }
        let block = self.0.find(hash, |b| &*b.key == key)?;
        let until = block.until.load(Ordering::Acquire);
        (until > now).then_some(until)
    }

    /// Blocks `key` until `until` (never shortening a block in force).
    pub(super) fn block(&mut self, hash: u64, key: &[u8], until: Nanos, hasher: &KeyHasher) {
        match self.0.find(hash, |b| &*b.key == key) {
            Some(block) => drop(block.until.fetch_max(until, Ordering::AcqRel)),
            None => drop(self.0.insert_unique(
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
        match self.0.find_entry(hash, |b| &*b.key == key) {
            Ok(block) => {
                block.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Drops the blocks over at `now`: the latest end among them (0 for none).
    pub(super) fn sweep(&mut self, now: Nanos) -> Nanos {
        let mut latest = 0;
        self.0.retain(|b| {
            let until = b.until.load(Ordering::Acquire);
            if until <= now {
                latest = latest.max(until);
            }
            until > now
        });
        latest
    }
}
