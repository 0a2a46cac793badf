//! The memory store's cells: one compact layout per strategy, and a shard's tables of them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;

use super::blocks::Block;
use super::word::{update, CounterCell, FixedCell};
use crate::algorithm::{Algorithm, Gcra, Given, SlidingLog, Spend, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::sync::Mutex;
use crate::syntax::Strategy;

/// How the store hashes a key, the one place: its bytes alone, with a seed drawn per store
/// (`hash_one` of a `[u8]` would hash its length first, which a single key does not need).
#[derive(Default)]
pub(super) struct KeyHasher(foldhash::fast::RandomState);

impl KeyHasher {
    #[inline]
    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        let mut hasher = self.0.build_hasher();
        hasher.write(key);
        hasher.finish()
    }
}

// Each strategy has its own table of compact cells. A lookup among more keys than the CPU
// caches hold costs a miss on the cell, so cells are kept to half a cache line: the key (16
// bytes) and the algorithm's state in one atomic word (8 or 16 bytes), from which the expiry
// is recovered too. What a cell does not store is recovered from the expiry and the quota's
// window (a key whose window changes between calls starts a new window unless the recovered
// start happens to line up, as a stored start had to). One enum for all four strategies plus
// the expiry straddled two lines most of the time and was far slower than governor at 100,000
// keys (BENCHMARKS.md, `memory`).
//
// A decision is one compare-exchange on that word, like governor's GCRA: the shard is only
// read-locked around the lookup, so two threads on one key (or one shard) never wait on a
// lock, and a lost race re-runs the algorithm on the state that won. The word holds the whole
// state, so any value read is one some decision wrote: the algorithm always decides on a
// consistent state, and the exchange succeeds only if nothing was decided in between. The
// sliding log does not fit a word; its cell has a lock of its own.

/// A key's state under one strategy, as stored.
pub(super) trait Cell: Sized {
    /// The algorithm's state the cell holds.
    type State: Algorithm;
    /// A fresh state for a key not stored yet; the key is set only if the cell is kept.
    fn fresh() -> Self;
    fn kept(&self) -> &StampedKey;
    fn keep(&mut self, kept: StampedKey);
    fn key(&self) -> &[u8] {
        self.kept().key()
    }
    /// When the state is indistinguishable from a fresh one.
    fn expires_at(&self) -> Nanos;
    /// Decides in one atomic step: callers share the cell (under the shard's read lock).
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;
    /// The state's shift, for a spend's receipt (see [`Algorithm::shift`]), from the shard's
    /// side table: read under the shard's read lock, it cannot change before the decision,
    /// since only a refund or an adjustment changes it, under the write lock.
    fn shift(&self, _side: &Side) -> Nanos {
        0
    }
    /// The stamp a spend decided on this cell carries.
    #[inline]
    fn stamp(&self, side: &Side) -> Stamp {
        Stamp {
            stamp: self.kept().stamp(),
            shift: self.shift(side),
        }
    }
    /// The whole state, under the shard's write lock (a token bucket's bookkeeping taken out
    /// of `side`); [`put`](Self::put) stores it back.
    fn take(&mut self, side: &mut Side, quota: &Quota) -> Self::State;
    /// Stores `state` back, taken by [`take`](Self::take), under the write lock; `changed`:
    /// whether anything was written to it (a cell whose state is a copy skips the write).
    fn put(&mut self, side: &mut Side, quota: &Quota, state: Self::State, changed: bool);
    /// Gives back a spend (see [`Algorithm::refund`]); without `commit`, only whether it
    /// would. Under the shard's write lock: a refund reads the state and what refunds keep
    /// in the side table as one.
    fn refund(
        &mut self,
        side: &mut Side,
        spent: Spend,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> bool {
        let mut state = self.take(side, quota);
        let gave = match commit {
            true => state.refund(spent, now, quota, cost),
            false => state.clone().refund(spent, now, quota, cost),
        };
        // A refund that gives nothing changes nothing (`Algorithm::refund`).
        self.put(side, quota, state, commit && gave);
        gave
    }
    /// A penalty or a reward (see [`Algorithm::adjust`]), under the shard's write lock.
    fn adjust(
        &mut self,
        side: &mut Side,
        now: Nanos,
        quota: &Quota,
        units: u64,
        penalty: bool,
    ) -> u64 {
        let mut state = self.take(side, quota);
        let moved = state.adjust(now, quota, units, penalty);
        self.put(side, quota, state, true);
        moved
    }
}

/// What token buckets given back to keep for later refunds ([`Given`]), by their cells'
/// stamps: a side table of each shard, so that a key nothing is given back to pays nothing
/// for it (the cells keep their size). An entry goes with its cell (sweep, reset).
pub(super) type Side = HashMap<u64, Box<Given>>;

/// What a spend's receipt takes from the cell it was decided on: the key's stamp (0: none
/// kept, nothing can be given back) and the state's shift ([`Cell::shift`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stamp {
    pub(super) stamp: u64,
    pub(super) shift: Nanos,
}

impl Stamp {
    /// `decision`, carrying this stamp for a refund.
    #[inline]
    pub(super) fn on(self, decision: crate::Decision) -> crate::Decision {
        decision.stamped(self.stamp).shifted(self.shift)
    }
}

/// A kept key's bytes, behind its stamp once a spend kept for a refund was made on it: a
/// number the store gives a key's state, never twice, so that a refund finds the state its
/// spend was made on and not one added under the same key since (after a reset, or a sweep
/// once the state expired). In the key's own allocation, so the cells keep their size: a
/// stamped key is [`STAMPED`], the stamp (8 bytes, little-endian), then the key's bytes; a key
/// never given a stamp (nothing spent on it was kept) is its bytes alone, and pays nothing
/// for refunds.
#[derive(Default)]
pub(super) struct StampedKey(Box<[u8]>);

/// The first byte of a stamped key: a byte no UTF-8 text holds, and store keys are text
/// ([`StoreKey`](crate::store::StoreKey)), so no key's own bytes begin with it.
const STAMPED: u8 = 0xFF;

impl StampedKey {
    /// `key`'s bytes, without a stamp.
    pub(super) fn plain(key: &[u8]) -> Self {
        debug_assert!(std::str::from_utf8(key).is_ok(), "store keys are text");
        StampedKey(key.into())
    }

    /// `key`'s bytes behind `stamp`.
    pub(super) fn stamped(key: &[u8], stamp: u64) -> Self {
        debug_assert!(std::str::from_utf8(key).is_ok(), "store keys are text");
        let mut bytes = Vec::with_capacity(9 + key.len());
        bytes.push(STAMPED);
        bytes.extend_from_slice(&stamp.to_le_bytes());
        bytes.extend_from_slice(key);
        StampedKey(bytes.into_boxed_slice())
    }

    #[inline]
    fn key(&self) -> &[u8] {
        match self.0.split_first() {
            Some((&STAMPED, stamped)) => stamped.get(8..).unwrap_or_default(),
            _ => &self.0,
        }
    }

    /// Whether the key was given a stamp.
    #[inline]
    pub(super) fn is_stamped(&self) -> bool {
        self.0.first() == Some(&STAMPED)
    }

    /// The key's stamp; 0 (no key is given it) for a key without one.
    pub(super) fn stamp(&self) -> u64 {
        match self.0.split_first() {
            Some((&STAMPED, stamped)) => stamped
                .first_chunk::<8>()
                .map_or(0, |bytes| u64::from_le_bytes(*bytes)),
            _ => 0,
        }
    }
}

/// The cell an algorithm's keys are kept in: the last column of the table of algorithms
/// (`algorithm/table.rs`), implemented by `tables!` below.
pub(super) trait Kept: Algorithm {
    type Cell: Cell;
}

/// An algorithm's table in a shard's [`Tables`] (generated from the table of algorithms).
pub(super) trait InTables: Kept {
    fn table(tables: &Tables) -> &HashTable<Self::Cell>;
    fn table_mut(tables: &mut Tables) -> &mut HashTable<Self::Cell>;
    /// The table and the shard's side table, both to write.
    fn table_and_side(tables: &mut Tables) -> (&mut HashTable<Self::Cell>, &mut Side);
}

/// Runs `$f::<algorithm>$args` (or `$recv.$f::<algorithm>$args`) for the algorithm of
/// `$strategy` (an [`InTables`]): the memory store's dispatch on the strategy, one arm per line
/// of the table of algorithms. The method form is for a call inside a closure: a closure
/// around `Self::f(self, ..)` captures `self` by reference, spilled to the stack on every call
/// (6 instructions a decision under cachegrind), where `self.f(..)` captures `*self`.
macro_rules! by_strategy {
    ($strategy:expr, $recv:ident . $f:ident $args:tt) => {
        $crate::algorithm::algorithms!(by_strategy_arms, method $strategy, $recv, $f, $args)
    };
    ($strategy:expr, $owner:tt :: $f:ident $args:tt) => {
        $crate::algorithm::algorithms!(by_strategy_arms, path $strategy, $owner, $f, $args)
    };
}

/// `by_strategy!`'s `match`, from the lines of the table (a name of its own, so that the
/// table's macro can call it back; imported beside `by_strategy!` where that is used).
macro_rules! by_strategy_arms {
    ([method $strategy:expr, $recv:ident, $f:ident, $args:tt]
     $($name:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        match $strategy {
            $($crate::syntax::Strategy::$name => $recv.$f::<$ty> $args,)*
        }
    };
    ([path $strategy:expr, $owner:tt, $f:ident, $args:tt]
     $($name:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        match $strategy {
            $($crate::syntax::Strategy::$name => $owner::$f::<$ty> $args,)*
        }
    };
}

pub(super) use {by_strategy, by_strategy_arms};

/// Any algorithm's state behind the cell's own lock, for a state that fits no word: the
/// [`SlidingLog`], boxed (it grows with the limit); an algorithm without a compact cell of its
/// own.
pub(super) struct LockedCell<A> {
    key: StampedKey,
    expires_at: AtomicU64,
    state: Mutex<A>,
}

/// [`Gcra`]; the theoretical arrival time is also the expiry. What refunds keep
/// ([`Given`]) is in the shard's [`Side`] table, changed only under its write lock.
pub(super) struct BucketCell {
    key: StampedKey,
    tat: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<FixedCell>() == 32);
const _: () = assert!(std::mem::size_of::<LockedCell<Box<SlidingLog>>>() == 40);
const _: () = assert!(std::mem::size_of::<CounterCell>() == 32);
const _: () = assert!(std::mem::size_of::<BucketCell>() == 24);

impl<A: Algorithm> Cell for LockedCell<A> {
    type State = A;
    fn fresh() -> Self {
        LockedCell {
            key: StampedKey::default(),
            expires_at: AtomicU64::new(0),
            state: Mutex::default(),
        }
    }
    fn kept(&self) -> &StampedKey {
        &self.key
    }
    fn keep(&mut self, kept: StampedKey) {
        self.key = kept;
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at.load(Ordering::Acquire)
    }
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let mut state = self.state.lock();
        let verdict = state.decide(now, quota, cost, commit);
        if commit {
            self.expires_at
                .store(state.expires_at(quota), Ordering::Release);
        }
        verdict
    }
    fn take(&mut self, _: &mut Side, _: &Quota) -> A {
        std::mem::take(self.state.get_mut())
    }
    fn put(&mut self, _: &mut Side, quota: &Quota, state: A, changed: bool) {
        if changed {
            *self.expires_at.get_mut() = state.expires_at(quota);
        }
        *self.state.get_mut() = state;
    }
}

impl Cell for BucketCell {
    type State = Gcra;
    fn fresh() -> Self {
        BucketCell {
            key: StampedKey::default(),
            tat: AtomicU64::new(0),
        }
    }
    fn kept(&self) -> &StampedKey {
        &self.key
    }
    fn keep(&mut self, kept: StampedKey) {
        self.key = kept;
    }
    fn expires_at(&self) -> Nanos {
        self.tat.load(Ordering::Acquire)
    }
    #[inline(always)]
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        // A decision reads and writes the arrival time alone; the shift stays as it is.
        update(&self.tat, |tat| {
            let mut state = Gcra { tat, given: None };
            let verdict = state.decide(now, quota, cost, commit);
            (state.tat, verdict)
        })
    }
    fn shift(&self, side: &Side) -> Nanos {
        if side.is_empty() {
            return 0;
        }
        side.get(&self.key.stamp()).map_or(0, |g| g.shift)
    }
    /// What refunds keep comes out of `side` by the cell's stamp.
    fn take(&mut self, side: &mut Side, _: &Quota) -> Gcra {
        Gcra {
            tat: *self.tat.get_mut(),
            given: side.remove(&self.key.stamp()),
        }
    }
    /// ... and goes back there (a cell not kept, stamp 0, is never given back to).
    fn put(&mut self, side: &mut Side, _: &Quota, state: Gcra, _: bool) {
        *self.tat.get_mut() = state.tat;
        let stamp = self.key.stamp();
        if let Some(given) = state.given.filter(|_| stamp != 0) {
            side.insert(stamp, given);
        }
    }
}

macro_rules! tables {
    ([] $($strategy:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        /// One shard: a table per strategy, one per line of the table of algorithms. A key is
        /// in at most one of them: a call on a key held under another strategy is refused with
        /// [`Error::UnexpectedState`](crate::Error::UnexpectedState), as
        /// [`algorithm::decide`](crate::algorithm::decide) refuses it.
        #[derive(Default)]
        #[allow(non_snake_case)]
        pub(super) struct Tables {
            $($variant: HashTable<<$ty as Kept>::Cell>,)*
            /// The keys refused until a time ([`Quota::block`]), whatever their strategy
            /// (`blocks.rs`).
            pub(super) blocks: HashTable<Block>,
            /// What token buckets given back to keep for later refunds.
            pub(super) side: Side,
        }

        $(
            impl Kept for $ty {
                type Cell = $cell;
            }

            impl InTables for $ty {
                #[inline]
                fn table(tables: &Tables) -> &HashTable<Self::Cell> {
                    &tables.$variant
                }
                #[inline]
                fn table_mut(tables: &mut Tables) -> &mut HashTable<Self::Cell> {
                    &mut tables.$variant
                }
                #[inline]
                fn table_and_side(tables: &mut Tables) -> (&mut HashTable<Self::Cell>, &mut Side) {
                    (&mut tables.$variant, &mut tables.side)
                }
            }
        )*

        impl Tables {
            /// Removes `key` from every table: how many states went (the store's keys), and
            /// whether a block went.
            pub(super) fn remove_all(&mut self, hash: u64, key: &[u8]) -> (usize, bool) {
                fn remove<C: Cell>(table: &mut HashTable<C>, side: &mut Side, hash: u64, key: &[u8]) -> usize {
                    match table.find_entry(hash, |c| c.key() == key) {
                        Ok(entry) => {
                            let (cell, _) = entry.remove();
                            side.remove(&cell.kept().stamp());
                            1
                        }
                        Err(_) => 0,
                    }
                }
                let blocked = self.unblock(hash, key);
                (0 $(+ remove(&mut self.$variant, &mut self.side, hash, key))*, blocked)
            }

            /// Whether `key` is held under a strategy other than `strategy`.
            pub(super) fn held_by_other(&self, strategy: Strategy, hash: u64, key: &[u8]) -> bool {
                $(
                    (strategy != Strategy::$strategy
                        && self.$variant.find(hash, |c| c.key() == key).is_some())
                )||*
            }

            /// Drops the cells expired at `now` and gives back memory that is mostly unused.
            pub(super) fn sweep(&mut self, now: Nanos, hasher: &KeyHasher) -> usize {
                fn sweep<C: Cell>(
                    table: &mut HashTable<C>,
                    side: &mut Side,
                    now: Nanos,
                    hasher: &KeyHasher,
                ) -> usize {
                    let before = table.len();
                    table.retain(|cell| {
                        let live = cell.expires_at() > now;
                        if !live && !side.is_empty() {
                            side.remove(&cell.kept().stamp());
                        }
                        live
                    });
                    if table.capacity() > 16 && table.len() * 4 < table.capacity() {
                        let target = table.len() * 2;
                        table.shrink_to(target, |c| hasher.hash(c.key()));
                    }
                    before - table.len()
                }
                self.sweep_blocks(now);
                let swept = 0 $(+ sweep(&mut self.$variant, &mut self.side, now, hasher))*;
                if self.side.capacity() > 16 && self.side.len() * 4 < self.side.capacity() {
                    self.side.shrink_to(self.side.len() * 2);
                }
                swept
            }
        }
    };
}

crate::algorithm::algorithms!(tables);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::{self, State};

    proptest! {
        /// The counter's cell aligns `now` once, before it reads the state: a call whose
        /// `now` predates the recorded window (a clock read before another caller's) is
        /// still decided in that window, as the algorithm decides it, at every step of a
        /// clock that goes back and forth across window boundaries.
        #[test]
        fn a_counter_cell_decides_an_older_now_in_the_recorded_window(
            calls in prop::collection::vec((any::<bool>(), 0..10_000_000u64, 1..=2u64, any::<bool>()), 1..200)
        ) {
            let q = Quota::new(5, Duration::from_millis(10))
                .unwrap()
                .with_strategy(crate::syntax::Strategy::SlidingWindowCounter);
            let (cell, mut state) = (CounterCell::fresh(), State::new(q.strategy()));
            let mut now = 1_000 * q.window_nanos();
            for (back, step, cost, commit) in calls {
                now = if back { now - step } else { now + step };
                let want = algorithm::decide(&mut state, now, &q, cost, commit).unwrap();
                prop_assert_eq!(cell.decide(now, &q, cost, commit), want);
            }
        }
    }
}
