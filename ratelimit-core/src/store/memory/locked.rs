//! One key decided under its shard's write lock, held by the caller: a look, and a spend that
//! stores a new key (a stacked call's members, a call on a key under a block).

use super::cells::{Cell, Stamp};
use super::tables::{InTables, Tables};
use super::MemoryStore;
use crate::algorithm::{self, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;

/// The level a call would find (spending nothing), and whether the key is stored.
pub(super) fn look<A: InTables>(
    tables: &mut Tables,
    hash: u64,
    key: &[u8],
    quota: &Quota,
    cost: u64,
    now: Nanos,
) -> (Verdict, bool) {
    let decide = |cell: &A::Cell| {
        algorithm::level(cost, false, |cost, commit| {
            cell.decide(now, quota, cost, commit)
        })
    };
    match A::table(tables).find(hash, |c| c.key() == key) {
        Some(cell) => (decide(cell), true),
        None => (decide(&A::Cell::fresh()), false),
    }
}

/// Spends the call, storing the key if it is new (room for it was reserved), not stamped;
/// with the key's stamp (a spend kept for a refund stamps it: [`MemoryStore::stamp_of`]).
pub(super) fn spend<A: InTables>(
    tables: &mut Tables,
    store: &MemoryStore,
    hash: u64,
    key: &[u8],
    quota: &Quota,
    cost: u64,
    now: Nanos,
) -> (Verdict, Stamp) {
    if let Some(cell) = A::table(tables).find(hash, |c| c.key() == key) {
        return (
            cell.decide(now, quota, cost, true),
            cell.stamp(&tables.side),
        );
    }
    let cell = A::Cell::fresh();
    let verdict = cell.decide(now, quota, cost, true);
    (verdict, store.insert::<A>(tables, hash, key, cell, false))
}
