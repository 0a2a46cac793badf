//! Blocks (`block_for`) through the stacked script (`lua/stacked.lua`), run by Lua 5.1 in the
//! stand-in (`lua_standin.rs`) at a clock the test sets, against the memory store's blocks at
//! the same clock: every call's decision must be the same (as a [`Decision`] reads it: to the
//! millisecond), and a block must end exactly when the memory store's does. The clock only
//! moves forwards here (after Redis' clock went back a script measures a refusal's wait from
//! `TIME`: `lua_agrees.rs`); looks cost at least 1 (a look at the level is two looks, as the
//! store makes it, not the stacked script's).

use std::time::Duration;

use proptest::prelude::*;

use super::arguments::arguments;
use super::ledger::block_key;
use super::lua_pair::T0;
use super::lua_standin::{Redis, Reply};
use super::reply::full;
use super::scripts::stacked_index;
use super::stacked::STACKED_SCRIPT;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::store::{MemoryStore, Request, Store, StoreKey};
use crate::syntax::Strategy as Kind;

const KEY: &str = "rl:{user}:blocks";

/// One call through the stacked script with one limit: its decision at `now_us`.
fn script(redis: &Redis, quota: &Quota, cost: u64, spend: bool) -> Decision {
    let [first, second] = arguments(quota);
    let index = stacked_index(quota.strategy()) as u64;
    let block_us = quota.block().map_or(0, |b| b.as_micros() as u64);
    let args = [u64::from(spend), 1, index, first, second, cost, block_us];
    let block = block_key(KEY);
    let reply = redis.eval_source(STACKED_SCRIPT.text(), &[KEY, &block], &args);
    let Reply::Array(items) = &reply else {
        panic!("{reply:?}")
    };
    let ints: Vec<i64> = (items.iter())
        .map(|r| match r {
            Reply::Int(i) => *i,
            other => panic!("{other:?} in {reply:?}"),
        })
        .collect();
    let (verdict, at) = full(&ints).unwrap_or_else(|| panic!("{ints:?}"));
    Decision::for_quota(verdict, at, quota)
}

/// The same call on the memory store at `now_us`.
fn memory(store: &MemoryStore, quota: &Quota, cost: u64, spend: bool, now_us: u64) -> Decision {
    let key = StoreKey::new(KEY).unwrap();
    let now = now_us * 1_000;
    let request = match spend {
        true => Request::spend(key, quota, cost, now),
        false => Request::look(key, quota, cost, now),
    };
    let decided = Store::decide_now(store, request.unwrap()).expect("at once");
    decided.expect("decided")
}

/// Runs `calls` (microseconds the clock moves first, cost, whether it spends) on both sides.
fn blocks_agree(quota: &Quota, calls: &[(u64, u64, bool)]) {
    let redis = Redis::new(T0).expect("the scripts compile");
    let store = MemoryStore::new();
    let mut now = T0;
    for (i, &(moved, cost, spend)) in calls.iter().enumerate() {
        now += moved;
        redis.set_time(now);
        let lua = script(&redis, quota, cost, spend);
        let rust = memory(&store, quota, cost, spend, now);
        assert_eq!(lua, rust, "{quota:?}, call {i} of {calls:?} at {now}");
    }
}

fn quota(kind: Kind, limit: u64, window_us: u64, block_windows: u64) -> Quota {
    let window = Duration::from_micros(window_us);
    Quota::new(limit, window)
        .unwrap()
        .with_strategy(kind)
        .with_block(window * block_windows as u32)
        .unwrap()
}

/// A refusal that spends blocks the key for exactly the block: one microsecond before its end
/// refused (tries do not lengthen it), at its end the limit decides again; a look never
/// begins one.
#[test]
fn a_block_ends_exactly_when_the_memory_stores_does() {
    for kind in Kind::ALL {
        for window_us in [3_000, 2_500] {
            let q = quota(kind, 2, window_us, 3);
            let block = 3 * window_us;
            let calls = [
                (0, 1, true),
                (0, 1, true),
                (0, 1, false), // a look over the limit: no block
                (1, 1, true),  // the refusal that begins it, at T0 + 1
                (window_us, 1, true),
                (block - window_us - 2, 1, true), // one microsecond before its end
                (1, 1, true),                     // at its end
                (0, 1, true),
            ];
            blocks_agree(&q, &calls);
            // Checked against the memory store, and by hand: refused until T0 + 1 + block.
            let redis = Redis::new(T0).unwrap();
            for (t, cost) in [(T0, 2), (T0 + 1, 1)] {
                redis.set_time(t);
                script(&redis, &q, cost, true);
            }
            redis.set_time(T0 + block);
            assert!(!script(&redis, &q, 1, true).allowed, "{kind}: ended early");
            redis.set_time(T0 + 1 + block);
            let after = script(&redis, &q, 1, false);
            assert!(after.allowed, "{kind}: still blocked at its end: {after:?}");
        }
    }
}

/// A blocked refusal's wait is the later of the block's end and the state's own wait for the
/// call, on both sides: a bucket of 3 refilled a token every 3 s (a debt of 9 s) blocking a
/// key for 1 s. The refusal that begins the block says 3 s (the next token), not 1 s; a call
/// during the block says the bucket's wait too; told the block's end, the call was refused
/// again then and blocked anew (probes_carry_attacks).
#[test]
fn a_blocked_refusals_wait_is_the_states_own_where_that_is_later() {
    let window = Duration::from_secs(3);
    let q = Quota::from_parts(3, window, 0, Kind::TokenBucket, Some(1))
        .unwrap()
        .with_block(Duration::from_secs(1))
        .unwrap();
    let calls = [
        (0, 1, true),
        (0, 1, true),
        (0, 1, true),
        (0, 1, true),       // refused: blocked for 1 s, the next token in 3 s
        (500_000, 1, true), // during the block: 2.5 s to the token
        (0, 1, false),      // a look during the block
        (2_500_000, 1, true),
    ];
    blocks_agree(&q, &calls);
    let redis = Redis::new(T0).unwrap();
    for _ in 0..3 {
        script(&redis, &q, 1, true);
    }
    let refused = script(&redis, &q, 1, true);
    assert_eq!(
        refused.retry_after,
        Some(Duration::from_secs(3)),
        "{refused:?}"
    );
    redis.set_time(T0 + 500_000);
    let blocked = script(&redis, &q, 1, true);
    assert_eq!(
        blocked.retry_after,
        Some(Duration::from_millis(2_500)),
        "{blocked:?}"
    );
    redis.set_time(T0 + 3_000_000);
    assert!(script(&redis, &q, 1, true).allowed);
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::lua_agrees::cases()))]

    #[test]
    fn blocks_agree_with_the_memory_store(
        kind in kind(),
        limit in 1..=4u64,
        // Multiples of 12 µs: a bucket's interval is whole microseconds under every limit
        // here, as Redis counts (a quota that is not is read in microseconds: lua_agrees.rs).
        window_us in prop_oneof![(1..=2_000u64).prop_map(|ms| ms * 3_000), (1..=250_000u64).prop_map(|w| w * 12)],
        block_windows in 1..=4u64,
        calls in prop::collection::vec(
            (prop_oneof![Just(0u64), 0..=2_000u64, 0..=8_000_000u64], 1..=4u64, any::<bool>()),
            1..40,
        ),
    ) {
        let q = quota(kind, limit, window_us, block_windows);
        let calls: Vec<_> = calls.into_iter().map(|(m, c, s)| (m, c.min(limit), s)).collect();
        blocks_agree(&q, &calls);
    }
}
