//! The table of algorithms: one line each. The [`State`] of a key under any of them, its
//! bytes' dispatch, the memory store's tables and the Redis scripts are generated from it.

use super::{Algorithm, Spend, Verdict, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::Strategy;

/// Every algorithm, one line each:
/// `Strategy variant => State variant(its state's type), "its Lua script's name", its memory cell;`
/// (`algorithm/<name>.lua`, beside `<name>.rs`; a function of that name in the stacked script).
/// The memory cell is one of the memory store's: `LockedCell<type>` (`store/memory/cells.rs`)
/// holds any algorithm's state behind a lock of its own; the others are compact cells of one
/// atomic word (`store/memory/word.rs`). Its name is resolved where the memory store expands
/// the table (`store/memory/tables.rs`), so this layer imports nothing of the store's. A new algorithm is its two files under `algorithm/`, its
/// [`Strategy`] and one line here.
///
/// `algorithms!(then, passed...)` calls `then! { [passed...] lines... }`: each place that
/// dispatches on the strategy writes its `match` from the lines, so none can leave one out.
macro_rules! algorithms {
    ($then:ident $(, $($pass:tt)*)?) => {
        $then! {
            [$($($pass)*)?]
            FixedWindow => Fixed($crate::algorithm::FixedWindow), "fixed_window", FixedCell;
            SlidingWindow => Log(::std::boxed::Box<$crate::algorithm::SlidingLog>), "sliding_log",
                LockedCell<::std::boxed::Box<$crate::algorithm::SlidingLog>>;
            SlidingWindowCounter => Counter($crate::algorithm::SlidingCounter), "sliding_counter",
                CounterCell;
            TokenBucket => Bucket($crate::algorithm::Gcra), "token_bucket", BucketCell;
        }
    };
}

pub(crate) use algorithms;

/// A boxed state (the sliding log's, so that the other strategies' keys stay small) is its
/// algorithm.
impl<A: Algorithm> Algorithm for Box<A> {
    const LETTER: u8 = A::LETTER;
    const REFUNDS_SURVIVE_REWARDS: bool = A::REFUNDS_SURVIVE_REWARDS;

    #[inline]
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        (**self).decide(now, quota, cost, commit)
    }

    #[inline]
    fn expires_at(&self, quota: &Quota) -> Nanos {
        (**self).expires_at(quota)
    }

    fn refund(&mut self, spent: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool {
        (**self).refund(spent, now, quota, cost)
    }

    fn shift(&self) -> Nanos {
        (**self).shift()
    }

    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        (**self).adjust(now, quota, units, penalty)
    }

    fn written_by_a_store(&self) -> bool {
        (**self).written_by_a_store()
    }

    fn written_for(&self, quota: &Quota) -> bool {
        (**self).written_for(quota)
    }

    fn to_words(&self) -> Vec<u64> {
        (**self).to_words()
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        A::from_words(words).map(Box::new)
    }
}

macro_rules! state {
    ([] $($strategy:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        /// The state of one key under any strategy: one variant per line of [`algorithms`].
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub(crate) enum State {
            $(
                #[doc = concat!("[`Strategy::", stringify!($strategy), "`].")]
                $variant($ty),
            )*
        }

        impl State {
            /// A fresh state for `strategy`.
            pub(crate) fn new(strategy: Strategy) -> State {
                match strategy {
                    $(Strategy::$strategy => State::$variant(<$ty>::default()),)*
                }
            }

            /// Whether `strategy`'s spends can be given back after a reward (see
            /// [`Algorithm::REFUNDS_SURVIVE_REWARDS`]).
            pub(crate) fn refunds_survive_rewards(strategy: Strategy) -> bool {
                match strategy {
                    $(Strategy::$strategy => <$ty as Algorithm>::REFUNDS_SURVIVE_REWARDS,)*
                }
            }

            /// The strategy this state belongs to.
            pub(crate) fn strategy(&self) -> Strategy {
                match self {
                    $(State::$variant(_) => Strategy::$strategy,)*
                }
            }

            /// When this state is indistinguishable from a fresh one, so its key can be
            /// dropped.
            pub(crate) fn expires_at(&self, quota: &Quota) -> Nanos {
                match self {
                    $(State::$variant(s) => s.expires_at(quota),)*
                }
            }

            /// Whether a store of this crate could have written this state, whatever the
            /// quota: times no later than [`MAX_NOW`](super::MAX_NOW) (a token bucket's up to
            /// its largest tolerance beyond), counts (a log's total) within
            /// [`MAX_CAPACITY`](crate::quota::MAX_CAPACITY), and a window's count of zero
            /// only in a fresh state (a recorded call counts at least 1). The algorithms'
            /// arithmetic stays within `u64` on such states only; anything else is a corrupt
            /// or foreign value read back (through
            /// [`StoredState`](crate::store::StoredState)), refused when read.
            pub(crate) fn written_by_a_store(&self) -> bool {
                match self {
                    $(State::$variant(s) => s.written_by_a_store(),)*
                }
            }

            /// Whether a store deciding with `quota` could have written this state: of its
            /// strategy, [written by a store](Self::written_by_a_store), and a window
            /// starting on one of `quota`'s boundaries. The key names the window, so a state
            /// under it never started anywhere else; the algorithms would read any other
            /// start as an old window's, a fresh budget.
            pub(crate) fn written_for(&self, quota: &Quota) -> bool {
                self.strategy() == quota.strategy()
                    && self.written_by_a_store()
                    && match self {
                        $(State::$variant(s) => s.written_for(quota),)*
                    }
            }

            /// Its letter and words in a stored state's bytes (see
            /// [`Algorithm::to_words`]).
            pub(crate) fn to_words(&self) -> (u8, Vec<u64>) {
                match self {
                    $(State::$variant(s) => (<$ty as Algorithm>::LETTER, s.to_words()),)*
                }
            }

            /// Reads what [`to_words`](Self::to_words) wrote; else what is wrong with it.
            pub(crate) fn from_words(letter: u8, words: &[u64]) -> Result<State, &'static str> {
                $(
                    if letter == <$ty as Algorithm>::LETTER {
                        return <$ty as Algorithm>::from_words(words).map(State::$variant);
                    }
                )*
                Err(NOT_A_STATE)
            }

            /// A penalty or a reward (see [`Algorithm::adjust`]).
            #[cfg(test)]
            pub(crate) fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
                match self {
                    $(State::$variant(s) => s.adjust(now, quota, units, penalty),)*
                }
            }

            /// How far refunds and rewards moved the state's spends back (see
            /// [`Algorithm::shift`]).
            pub(crate) fn shift(&self) -> Nanos {
                match self {
                    $(State::$variant(s) => s.shift(),)*
                }
            }

            /// Gives back a spend (see [`Algorithm::refund`]).
            pub(crate) fn refund(
                &mut self,
                spent: Spend,
                now: Nanos,
                quota: &Quota,
                cost: u64,
            ) -> bool {
                match self {
                    $(State::$variant(s) => s.refund(spent, now, quota, cost),)*
                }
            }

            /// The algorithm's own step, without [`decide`](super::decide)'s checks and its
            /// handling of looks.
            pub(crate) fn decide_raw(
                &mut self,
                now: Nanos,
                quota: &Quota,
                cost: u64,
                commit: bool,
            ) -> Verdict {
                match self {
                    $(State::$variant(s) => s.decide(now, quota, cost, commit),)*
                }
            }
        }
    };
}

algorithms!(state);

#[cfg(test)]
mod tests {
    use super::*;

    /// Each algorithm's letter names it alone in a stored state's bytes, and every strategy
    /// has a line in the table.
    #[test]
    fn every_strategy_has_a_line_and_a_letter_of_its_own() {
        let letters: Vec<u8> = Strategy::ALL
            .into_iter()
            .map(|s| State::new(s).to_words().0)
            .collect();
        for (i, letter) in letters.iter().enumerate() {
            assert!(!letters[..i].contains(letter), "{}", *letter as char);
            assert_ne!(*letter, b'X');
        }
        for s in Strategy::ALL {
            assert_eq!(State::new(s).strategy(), s);
        }
    }
}
