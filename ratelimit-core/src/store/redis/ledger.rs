//! A key's lease ledger: the leases taken out of it that their processes may still spend, one
//! hash field per lease id, written by the grant (`lua/lease_grant.lua`, which also removes
//! the lease it replaces) and the return (`lua/lease_return.lua`), and the reset that keeps
//! counting them (`lua/reset.lua`); see `lua/ledger.lua`. A lease removed twice (a grant and
//! a reset racing, a grant dropped in flight and sent again) is removed once.
//!
//! A process holding a lease spends it without asking Redis, so it cannot see a reset made
//! elsewhere: a reset that forgot the units leased out would let them be spent twice (once
//! from the lease, once from the fresh state). So a reset forgets what the key counts except
//! what is leased out at that moment; those units come back to the key when their lease is
//! given back, or expire with their window (or bucket slots). A return is taken only while the
//! ledger holds the units (a key re-created since, e.g. by a Redis restarted empty, holds none).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use redis::cluster_routing::Slot;

use super::scripts::Lua;
use super::RedisStore;
use crate::error::Error;

pub(super) static RESET_SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../lua/ledger.lua"),
        include_str!("../../../lua/beside.lua"),
        include_str!("../../../lua/reset.lua"),
    ))
});

/// The key of `key`'s lease ledger (see `lua/lease_grant.lua`), in `key`'s Redis Cluster slot.
pub(super) fn ledger_key(key: &str) -> String {
    beside(key, "lease")
}

/// The key of `key`'s stamp (see `lua/stacked.lua`), in `key`'s Redis Cluster slot.
pub(super) fn stamp_key(key: &str) -> String {
    beside(key, "stamp")
}

/// The key of `key`'s block (see `lua/stacked.lua`), in `key`'s Redis Cluster slot.
pub(super) fn block_key(key: &str) -> String {
    beside(key, "block")
}

/// The key of the end a reset erased of `key`'s token bucket (see `lua/reset.lua`), in
/// `key`'s Redis Cluster slot.
pub(super) fn erased_key(key: &str) -> String {
    beside(key, "erased")
}

/// A key beside `key`, named by `what`, in `key`'s Redis Cluster slot so that one script
/// reads both: `key` with a suffix when it has a hash tag (every composed store key with a
/// user key has one), else behind a tag that hashes to `key`'s own slot (the one budget of a
/// fn has the empty tag `{}`, which Redis does not take for a tag).
pub(super) fn beside(key: &str, what: &str) -> String {
    let tagged = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .is_some_and(|(tag, _)| !tag.is_empty());
    if tagged {
        return format!("{key}:{what}");
    }
    let tag = &SLOT_TAGS[&Slot::for_key(key)];
    format!("{{{tag}}}:{what}:{key}")
}

/// A tag for every cluster slot: the first of `0`, `1`, ... `zzzz` (62 letters) that hashes to
/// it, found once (about 160 000 hashes; every slot is reached by four letters).
static SLOT_TAGS: LazyLock<HashMap<Slot, String>> = LazyLock::new(|| {
    const LETTERS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut tags = HashMap::with_capacity(SLOTS);
    let mut tag = Vec::with_capacity(4);
    for n in 0.. {
        tag.clear();
        let mut rest: usize = n;
        loop {
            tag.push(LETTERS[rest % LETTERS.len()]);
            rest /= LETTERS.len();
            if rest == 0 {
                break;
            }
        }
        let text = String::from_utf8(tag.clone()).unwrap_or_default();
        tags.entry(Slot::for_key(&text)).or_insert(text);
        if tags.len() == SLOTS {
            return tags;
        }
    }
    tags
});

/// Redis Cluster's slots.
const SLOTS: usize = 16_384;

impl RedisStore {
    /// Forgets `key` (`lua/reset.lua`), but for what other processes hold leased from it;
    /// this store's own lease of it is dropped. Returns whether Redis held state for it.
    pub(super) async fn reset_key(&self, key: &str) -> Result<bool, Error> {
        crate::key::check_store_key(key)?;
        self.inner.refusals.forget(key);
        let own = self.leases().map_or(0, |leases| leases.forget(key));
        let (ledger, stamp, block) = (ledger_key(key), stamp_key(key), block_key(key));
        let erased = erased_key(key);
        let keys = [
            key,
            ledger.as_str(),
            stamp.as_str(),
            block.as_str(),
            erased.as_str(),
        ];
        let held: i64 = self
            .run(&RESET_SCRIPT, &keys, &[own], false, Instant::now())
            .await?;
        Ok(held == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::{block_key, erased_key, ledger_key, stamp_key};

    #[test]
    fn the_keys_beside_a_key_live_in_its_cluster_slot() {
        let slot = |k: &str| redis::cluster_routing::Slot::for_key(k);
        for key in [
            "p:{user:1}F60000:-:-",
            "plain-key",
            "p:{}F1:-:-",
            "a{b}c",
            "}{",
            "{",
        ] {
            let beside = [
                ledger_key(key),
                stamp_key(key),
                block_key(key),
                erased_key(key),
            ];
            for (i, one) in beside.iter().enumerate() {
                assert_eq!(slot(one), slot(key), "{key} -> {one}");
                assert_ne!(one, key);
                assert!(beside[..i].iter().all(|other| other != one), "{one}");
            }
        }
        assert_eq!(ledger_key("p:{u}F1:-:-"), "p:{u}F1:-:-:lease");
        assert!(ledger_key("p:{}F1:-:-").ends_with("}:lease:p:{}F1:-:-"));
        assert_eq!(super::SLOT_TAGS.len(), super::SLOTS);
    }
}
