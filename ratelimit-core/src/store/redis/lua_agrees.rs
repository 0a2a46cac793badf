//! The scripts, run by Lua 5.1 against the stand-in (`lua_standin.rs`), against the
//! algorithms they follow: for every call, the verdict the store would parse from the script
//! must be the one `algorithm::decide` gives at the same time, with the same quota read in
//! microseconds (as `agrees.rs` does on a live server). Here the clock is the test's, so this
//! also covers what a live Redis cannot show: time stepping backwards, edge instants (window
//! boundaries, retry and reset times, the expiry's millisecond), refill rates other than the
//! limit, and quotas at the 2^51 bounds of `supports`. The two sides run in step in
//! `lua_pair.rs`; `lua_refunds.rs` runs refunds between the calls.
//!
//! Each property runs 1024 cases (`PROPTEST_CASES` overrides) of up to 60 calls: about 6 s
//! for the three in a debug build on two cores.
//!
//! The documented differences, both after Redis' clock went back: a script decides at the
//! key's recorded time, like Rust, but measures `retry_after` from `TIME` (see the scripts'
//! headers): it is Rust's plus how far `TIME` is behind that recorded time. And the fixed
//! window's hot path answers an admitted call with its count alone, placed by the store in
//! the window of Redis' time (see `reply.rs`): its `reset_at` is then the end of the window of
//! `TIME`, not of the recorded one.

use proptest::prelude::*;

use super::arguments::supports;
use super::lua_pair::{script, Limits, Move, Pair, BOUND, MAX_WINDOW_US, T0};
use super::lua_standin::Redis;
use crate::algorithm::Verdict;
use crate::syntax::Strategy as Kind;

#[derive(Debug, Clone)]
pub(super) enum Cost {
    One,
    Capacity,
    /// Per mille of the capacity, at least 1.
    Share(u64),
    /// Above the capacity: never reaches the script.
    Above(u64),
    /// A look at the level, as `Store::decide` asks it (a peek of cost 0, then of cost 1).
    Look,
}

#[derive(Debug, Clone)]
struct Step {
    moved: Move,
    cost: Cost,
    commit: bool,
}

impl Cost {
    pub(super) fn of(&self, capacity: u64) -> u64 {
        match *self {
            Cost::One => 1,
            Cost::Capacity => capacity,
            Cost::Share(p) => (capacity as u128 * p as u128 / 1_000).max(1) as u64,
            Cost::Above(n) => capacity + n,
            Cost::Look => 0,
        }
    }
}

/// Runs `steps` through the script and the algorithm, comparing every verdict; `shared`: the
/// fixed window's hot path through the shared script rather than the quota's own.
fn agree(limits: &Limits, steps: &[Step], shared: bool) {
    let mut pair = Pair::new(limits, shared);
    for (i, step) in steps.iter().enumerate() {
        pair.tick(&step.moved);
        let what = format!("{limits:?}, step {i}: {step:?} at {}", pair.now);
        pair.expiry(&what);
        let cost = step.cost.of(pair.q.capacity());
        pair.decide(cost, step.commit && cost > 0, false, &what);
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

/// How the clock moves before a call.
pub(super) fn moved() -> impl Strategy<Value = Move> {
    prop_oneof![
        2 => Just(Move::Tick(0)),
        3 => (-3..=3i64).prop_map(Move::Tick),
        8 => (-2_000..=3_000i64).prop_map(Move::Shift),
        2 => (-1..=1i64).prop_map(Move::Boundary),
        2 => (-1..=1i64).prop_map(Move::Expiry),
        2 => (-1..=1i64).prop_map(Move::Retry),
        1 => (-1..=1i64).prop_map(Move::Reset),
    ]
}

/// A call's cost.
pub(super) fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        6 => Just(Cost::One),
        2 => Just(Cost::Capacity),
        3 => (1..=1_000u64).prop_map(Cost::Share),
        1 => (1..=3u64).prop_map(Cost::Above),
        2 => Just(Cost::Look),
    ]
}

fn steps(n: usize) -> impl Strategy<Value = Vec<Step>> {
    let step =
        (moved(), cost(), prop::bool::weighted(0.8)).prop_map(|(moved, cost, commit)| Step {
            moved,
            cost,
            commit,
        });
    prop::collection::vec(step, 1..=n)
}

/// A refill for a token bucket: none (the limit), one, the capacity or near it, or any up to
/// one per microsecond.
fn refill(strategy: Kind, capacity: u64, window_us: u64, pick: u64) -> Option<u64> {
    if strategy != Kind::TokenBucket || pick % 5 == 0 {
        return None;
    }
    let r = match pick % 5 {
        1 => 1,
        2 => capacity + pick % 3,
        3 => window_us,
        _ => 1 + pick / 5 % window_us,
    };
    Some(r.clamp(1, window_us))
}

/// Small capacities (0 to 9) and windows from 1 µs to a minute, whole milliseconds often.
pub(super) fn small() -> impl Strategy<Value = Limits> {
    let window = prop_oneof![
        prop::sample::select(vec![1u64, 2, 3, 7, 1_000, 20_000, 1_000_000, 60_000_000]),
        1..=10_000_000u64,
        // Whole milliseconds: the fixed window's integer state.
        (1..=60_000u64).prop_map(|ms| ms * 1_000),
    ];
    (kind(), 0..=6u64, 0..=3u64, window, any::<u64>()).prop_map(|(kind, limit, burst, w, pick)| {
        Limits::new(
            kind,
            (limit, burst),
            w,
            refill(kind, limit + burst, w, pick),
        )
        .fit()
    })
}

/// `capacity` as a limit and a burst.
fn split(capacity: u64, pick: u64) -> (u64, u64) {
    let burst = pick % (capacity + 1);
    (capacity - burst, burst)
}

/// Capacities and windows up to their maxima, cut down to what `supports` accepts.
pub(super) fn large() -> impl Strategy<Value = Limits> {
    let capacity = prop_oneof![1..=1_000u64, 1..=u32::MAX as u64, Just(u32::MAX as u64)];
    let window = prop_oneof![
        1..=1_000_000u64,
        1..=MAX_WINDOW_US,
        Just(MAX_WINDOW_US),
        (1..=MAX_WINDOW_US / 1_000).prop_map(|ms| ms * 1_000),
    ];
    (kind(), capacity, window, any::<u64>()).prop_map(|(kind, capacity, w, pick)| {
        let refill = refill(kind, capacity, w, pick);
        Limits::new(kind, split(capacity, pick / 3), w, refill).fit()
    })
}

/// Counters and buckets whose product (capacity times window, or times the emission
/// interval) is the largest `supports` accepts: one microsecond more is refused.
pub(super) fn at_the_bound() -> impl Strategy<Value = Limits> {
    let capacity = prop_oneof![(7..=31u32).prop_map(|k| 1u64 << k), 72..=u32::MAX as u64];
    let counter = (capacity.clone(), any::<u64>()).prop_map(|(capacity, pick)| {
        let (kind, window_us) = (Kind::SlidingWindowCounter, BOUND / capacity);
        Limits::new(kind, split(capacity, pick), window_us, None)
    });
    let bucket = (capacity, any::<u64>()).prop_map(|(capacity, pick)| {
        let interval = BOUND / capacity;
        let refill = 1 + pick % (MAX_WINDOW_US / interval);
        let window_us = (interval * refill + pick / 7 % refill).min(MAX_WINDOW_US);
        Limits::new(
            Kind::TokenBucket,
            split(capacity, pick / 3),
            window_us,
            Some(refill),
        )
    });
    prop_oneof![counter, bucket]
}

/// `limits` is at the bound: the next larger window is refused.
pub(super) fn one_more_is_refused(limits: &Limits) {
    let step = limits.refill.unwrap_or(1);
    let wider = Limits {
        window_us: limits.window_us + step,
        ..limits.clone()
    };
    if wider.window_us <= MAX_WINDOW_US {
        assert!(supports(&wider.quota()).is_err(), "{wider:?} is past 2^51");
    }
}

/// A look (cost 0) through the script, at `now` on a fresh stand-in after `calls` at `T0`.
fn look_after(limits: Limits, calls: u64, now: u64) -> Verdict {
    let redis = Redis::new(T0).expect("the scripts compile");
    for _ in 0..calls {
        assert!(script(&redis, &limits.quota(), T0, 1, true, false).allowed);
    }
    redis.set_time(now);
    script(&redis, &limits.quota(), now, 0, false, false)
}

fn per_second(strategy: Kind) -> Limits {
    Limits::new(strategy, (3, 0), 1_000_000, None)
}

#[test]
fn a_look_at_an_unused_fixed_window_is_full_now() {
    let (fixed, now) = (|| per_second(Kind::FixedWindow), T0 + 1_250_000);
    assert_eq!(look_after(fixed(), 0, now).reset_at, now);
    assert_eq!(
        look_after(fixed(), 1, now).reset_at,
        now,
        "the last window's"
    );
}

#[test]
fn a_look_at_a_sliding_log_is_full_one_window_after_its_newest_hit() {
    let log = || per_second(Kind::SlidingWindow);
    assert_eq!(look_after(log(), 0, T0 + 5).reset_at, T0 + 5);
    assert_eq!(look_after(log(), 2, T0 + 5).reset_at, T0 + 1_000_000);
    let gone = T0 + 1_000_000;
    assert_eq!(look_after(log(), 2, gone).reset_at, gone, "no hit left");
}

pub(super) fn cases() -> u32 {
    let set = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    set.unwrap_or(1024)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn small_quotas_decide_alike(limits in small(), steps in steps(60), shared: bool) {
        agree(&limits, &steps, shared);
    }

    #[test]
    fn large_quotas_decide_alike(limits in large(), steps in steps(40), shared: bool) {
        agree(&limits, &steps, shared);
    }

    #[test]
    fn quotas_at_the_2_51_bounds_decide_alike(limits in at_the_bound(), steps in steps(40)) {
        one_more_is_refused(&limits);
        agree(&limits, &steps, false);
    }
}
