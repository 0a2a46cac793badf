//! One key decided under its shard's write lock, held by the caller: a look, and a spend that
//! stores a new key (a stacked call's members, a call on a key under a block).

use super::cells::{claimed, Cell, Stamp};
use super::tables::{InTables, Tables};
use super::MemoryStore;
use crate::algorithm::{self, Verdict, Written};
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
    let decide = |cell: &A::Cell, passed: bool| {
        algorithm::level(cost, false, |cost, commit| match passed {
            true => cell.decide_passed(now, quota, cost),
            false => cell.decide(now, quota, cost, commit),
        })
    };
    match A::table(tables).find(hash, |c| c.key() == key) {
        Some(cell) => match cell.written_elsewhere(now, quota) {
            Written::Here => (decide(cell, false), true),
            Written::Elsewhere(refused) => (refused, true),
            // As a claim leaves it: claimed if the call spends ([`spend`]).
            Written::Passed => (decide(cell, true), true),
        },
        None => (decide(&A::Cell::fresh(), false), false),
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
    let (table, side) = A::table_and_side(tables);
    if let Some(cell) = table.find_mut(hash, |c| c.key() == key) {
        if let Err(refused) = claimed(cell, now, quota) {
            return (refused, Stamp::default());
        }
        return (cell.decide(now, quota, cost, true), cell.stamp(side));
    }
    let cell = A::Cell::fresh();
    let verdict = cell.decide(now, quota, cost, true);
    (
        verdict,
        store.insert::<A>(tables, hash, key, quota, cell, false),
    )
}
