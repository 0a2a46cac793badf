//! A shard's tables: one per strategy, generated from the table of algorithms
//! (`algorithm/table.rs`), with the blocks and the token buckets' side table beside them; and
//! the dispatch on a call's strategy to its table.

use hashbrown::HashTable;

use super::blocks::Blocks;
use super::cells::{Cell, KeyHasher, LockedCell, Side};
use super::word::{BucketCell, CounterCell, FixedCell};
use crate::algorithm::Algorithm;
use crate::clock::Nanos;
use crate::syntax::Strategy;

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
/// of the table of algorithms (`$recv.$f::<_>(..)`: a method with a second type parameter,
/// inferred). The method form is for a call inside a closure: a closure
/// around `Self::f(self, ..)` captures `self` by reference, spilled to the stack on every call
/// (a few instructions a decision under cachegrind), where `self.f(..)` captures `*self`.
macro_rules! by_strategy {
    ($strategy:expr, $recv:ident . $f:ident::<_> $args:tt) => {
        $crate::algorithm::algorithms!(by_strategy_arms, infer $strategy, $recv, $f, $args)
    };
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
    ([infer $strategy:expr, $recv:ident, $f:ident, $args:tt]
     $($name:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        match $strategy {
            $($crate::syntax::Strategy::$name => $recv.$f::<$ty, _> $args,)*
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
            pub(super) blocks: Blocks,
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
                let blocked = self.blocks.unblock(hash, key);
                (0 $(+ remove(&mut self.$variant, &mut self.side, hash, key))*, blocked)
            }

            /// Whether `key` is held under a strategy other than `strategy`.
            pub(super) fn held_by_other(&self, strategy: Strategy, hash: u64, key: &[u8]) -> bool {
                $(
                    (strategy != Strategy::$strategy
                        && self.$variant.find(hash, |c| c.key() == key).is_some())
                )||*
            }

            /// Drops the cells expired at `now` and the blocks over then, and gives back
            /// memory that is mostly unused: how many cells went, and the latest expiry (or
            /// block's end) among what went, 0 for nothing (the store's floor: `sweep.rs`).
            pub(super) fn sweep(&mut self, now: Nanos, hasher: &KeyHasher) -> (usize, Nanos) {
                fn sweep<C: Cell>(
                    table: &mut HashTable<C>,
                    side: &mut Side,
                    now: Nanos,
                    hasher: &KeyHasher,
                    latest: &mut Nanos,
                ) -> usize {
                    let before = table.len();
                    table.retain(|cell| {
                        let expires_at = cell.expires_at();
                        let live = expires_at > now;
                        if !live {
                            *latest = (*latest).max(expires_at);
                            if !side.is_empty() {
                                side.remove(&cell.kept().stamp());
                            }
                        }
                        live
                    });
                    if table.capacity() > 16 && table.len() * 4 < table.capacity() {
                        let target = table.len() * 2;
                        table.shrink_to(target, |c| hasher.hash(c.key()));
                    }
                    before - table.len()
                }
                let mut latest = self.blocks.sweep(now);
                let swept = 0 $(+ sweep(&mut self.$variant, &mut self.side, now, hasher, &mut latest))*;
                if self.side.capacity() > 16 && self.side.len() * 4 < self.side.capacity() {
                    self.side.shrink_to(self.side.len() * 2);
                }
                (swept, latest)
            }
        }
    };
}

crate::algorithm::algorithms!(tables);
