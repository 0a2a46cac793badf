//! Penalties and rewards through the scripts' adjust mode (ARGV[4] = 4 or 5) against
//! `Algorithm::adjust`, run by Lua 5.1 in the stand-in (`lua_standin.rs`) between calls
//! decided on both sides as `lua_agrees.rs` decides them (`lua_pair.rs`): the units each side
//! spent or gave back must agree, and every call after is decided alike.
//!
//! Small quotas only (`lua_agrees::small`), with units from none up to three capacities: the
//! scripts' own bounds (a bucket's penalty at most 2^51 µs ahead, a counter's count at most
//! what its window reads back) lie far beyond them, where Rust's bounds differ (see the
//! scripts).

use proptest::prelude::*;

use super::lua_agrees::{cases, cost, moved, small, Cost};
use super::lua_pair::Pair;
use super::lua_pair::{Limits, Move, KEY};
use super::lua_standin::Reply;
use crate::syntax::Strategy as Kind;

/// How many units an adjustment names.
#[derive(Debug, Clone)]
enum Units {
    /// An adjustment of nothing, which moves nothing and writes nothing (in Rust, a token
    /// bucket's penalty of nothing wrote its arrival time, a sliding log's dropped the
    /// entries that stopped counting).
    Nothing,
    One,
    /// Per mille of the capacity, at least 1.
    Share(u64),
    /// Up to three capacities and a few.
    Over(u64),
}

impl Units {
    fn of(&self, capacity: u64) -> u64 {
        match *self {
            Units::Nothing => 0,
            Units::One => 1,
            Units::Share(p) => (capacity * p / 1_000).max(1),
            Units::Over(n) => 3 * capacity + n,
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Call {
        moved: Move,
        cost: Cost,
        commit: bool,
    },
    Adjust {
        moved: Move,
        units: Units,
        penalty: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let units = prop_oneof![
        Just(Units::Nothing),
        Just(Units::One),
        (1..=1_000u64).prop_map(Units::Share),
        (0..=3u64).prop_map(Units::Over),
    ];
    prop_oneof![
        3 => (moved(), cost(), any::<bool>())
            .prop_map(|(moved, cost, commit)| Op::Call { moved, cost, commit }),
        2 => (moved(), units, any::<bool>())
            .prop_map(|(moved, units, penalty)| Op::Adjust { moved, units, penalty }),
    ]
}

fn adjustments_agree(limits: &Limits, ops: &[Op]) {
    let mut pair = Pair::new(limits, false);
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Call {
                moved,
                cost,
                commit,
            } => {
                pair.tick(moved);
                let what = format!("{limits:?}, op {i}: {op:?} at {}", pair.now);
                pair.expiry(&what);
                let cost = cost.of(pair.q.capacity());
                pair.decide(cost, *commit && cost > 0, false, &what);
            }
            Op::Adjust {
                moved,
                units,
                penalty,
            } => {
                pair.tick(moved);
                let what = format!("{limits:?}, op {i}: {op:?} at {}", pair.now);
                pair.expiry(&what);
                let units = units.of(pair.q.capacity().max(1));
                let prior = pair.state.clone();
                let lua = pair.redis.adjust(&pair.quota, KEY, units, *penalty);
                let rust = pair.state.adjust(pair.now, &pair.q, units, *penalty);
                assert_eq!(
                    lua,
                    Reply::Int(rust as i64),
                    "{what}: {units} units on {prior:?}"
                );
                // A reward may take a sliding log's newest entry: its key may outlive it.
                pair.refunded |= !*penalty && limits.strategy == Kind::SlidingWindow;
                pair.expiry(&format!("{what}, after"));
                pair.decide(0, false, false, &format!("{what}, the look after"));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn adjustments_agree_with_the_algorithm(
        limits in small(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        adjustments_agree(&limits, &ops);
    }
}

/// The sliding log's reward of its newest entry, when the entry under it names an oldest live
/// entry that the newest one's call dropped: the next call must read the list (the reward
/// gave the next entry the removed head's summary, as a refund does).
#[test]
fn a_reward_of_the_newest_entry_leaves_a_log_that_reads() {
    let limits = Limits::new(Kind::SlidingWindow, (2, 0), 3, None);
    let ops = [
        Op::Call {
            moved: Move::Tick(0),
            cost: Cost::One,
            commit: true,
        },
        Op::Call {
            moved: Move::Tick(1),
            cost: Cost::One,
            commit: true,
        },
        Op::Call {
            moved: Move::Reset(-1),
            cost: Cost::One,
            commit: true,
        },
        Op::Adjust {
            moved: Move::Shift(0),
            units: Units::One,
            penalty: false,
        },
        Op::Call {
            moved: Move::Tick(0),
            cost: Cost::One,
            commit: true,
        },
    ];
    adjustments_agree(&limits, &ops);
}

/// A sliding log's adjustment of nothing drops no entry a caller with an older clock read
/// still counts, as the script writes nothing: Rust's (`SlidingLog::adjust` of 0 units)
/// dropped the entries that stopped counting at its time. Capacity 3 a 2 µs: a penalty of 2
/// at T0, a reward of nothing at T0 + 2 µs, and a look at T0 + 1 µs read 0 left in the
/// script and 2 in Rust (its entry of 2 gone). Found by the property above once it named
/// adjustments of nothing.
#[test]
fn a_log_adjustment_of_nothing_drops_no_entry_an_older_read_counts() {
    let limits = Limits::new(Kind::SlidingWindow, (2, 1), 2, None);
    let ops = [
        Op::Adjust {
            moved: Move::Tick(0),
            units: Units::Share(667),
            penalty: true,
        },
        Op::Call {
            moved: Move::Tick(0),
            cost: Cost::Capacity,
            commit: false,
        },
        Op::Adjust {
            moved: Move::Retry(0),
            units: Units::Nothing,
            penalty: false,
        },
        Op::Call {
            moved: Move::Shift(-500),
            cost: Cost::One,
            commit: false,
        },
    ];
    adjustments_agree(&limits, &ops);
}
