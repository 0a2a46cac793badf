//! The algorithms' promises, checked through the memory store with a hand-driven clock.

use std::time::Duration;

use proptest::prelude::*;
use ratelimit::{Clock, ManualClock, MemoryOptions, MemoryStore, Nanos, Quota, Strategy};
use ratelimit_tests::clock;

const MS: Nanos = 1_000_000;

fn admitted(store: &MemoryStore, key: &str, q: &Quota, now: Nanos, calls: usize) -> usize {
    (0..calls)
        .filter(|_| store.acquire(key, q, 1, now).unwrap().allowed)
        .count()
}

#[test]
fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    // Documented behaviour, not a bug: the cheapest algorithm resets at the boundary.
    let store = MemoryStore::new();
    let q = Quota::per_minute(10)
        .unwrap()
        .with_strategy(Strategy::FixedWindow);
    let w = 60_000 * MS;
    let boundary = (clock().now() / w + 1) * w;
    assert_eq!(admitted(&store, "k", &q, boundary - MS, 20), 10);
    assert_eq!(admitted(&store, "k", &q, boundary, 20), 10);
    // 20 calls inside two milliseconds; the sliding log would have admitted 10.
    let log = Quota::per_minute(10)
        .unwrap()
        .with_strategy(Strategy::SlidingWindow);
    assert_eq!(admitted(&store, "s", &log, boundary - MS, 20), 10);
    assert_eq!(admitted(&store, "s", &log, boundary, 20), 0);
}

#[test]
fn fixed_windows_are_aligned_to_the_epoch() {
    let store = MemoryStore::new();
    let q = Quota::new(1, Duration::from_secs(7))
        .unwrap()
        .with_strategy(Strategy::FixedWindow);
    let now = 999_999 * 1_000 * MS; // a multiple of 7 s
    let d = store.acquire("k", &q, 1, now + 2_000 * MS).unwrap();
    assert_eq!(
        d.reset_at(),
        std::time::UNIX_EPOCH + Duration::from_secs(999_999 + 7)
    );
    let refused = store.acquire("k", &q, 1, now + 2_000 * MS).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(5)));
}

#[test]
fn token_bucket_admits_capacity_at_once_then_exactly_the_refill_rate() {
    let store = MemoryStore::new();
    let q = Quota::per_second(10)
        .unwrap()
        .with_burst(5)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    let clock = clock();
    assert_eq!(admitted(&store, "k", &q, clock.now(), 100), 15);
    for _ in 0..5 {
        clock.advance(Duration::from_secs(1));
        assert_eq!(admitted(&store, "k", &q, clock.now(), 100), 10);
    }
    clock.advance(Duration::from_millis(100));
    assert_eq!(admitted(&store, "k", &q, clock.now(), 100), 1);
    clock.advance(Duration::from_millis(99));
    assert_eq!(admitted(&store, "k", &q, clock.now(), 100), 0);
    // A custom refill rate: 2 tokens per second, bucket of 15.
    let slow = q.with_refill(2).unwrap();
    assert_eq!(admitted(&store, "slow", &slow, clock.now(), 100), 15);
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&store, "slow", &slow, clock.now(), 100), 2);
}

#[test]
fn sliding_counter_weights_the_previous_window() {
    let store = MemoryStore::new();
    let q = Quota::per_minute(100)
        .unwrap()
        .with_strategy(Strategy::SlidingWindowCounter);
    let clock = ManualClock::new(Duration::from_secs(60 * 1_000));
    assert_eq!(admitted(&store, "k", &q, clock.now(), 80), 80);
    // A quarter into the next window 75% of the previous 80 (= 60) still count.
    clock.advance(Duration::from_secs(75));
    assert_eq!(admitted(&store, "k", &q, clock.now(), 100), 40);
    let refused = store.acquire("k", &q, 1, clock.now()).unwrap();
    assert!(!refused.allowed);
    // 80 * (60 - e) / 60 + 40 <= 99  <=>  e >= 15.75 s: 0.75 s from now.
    assert_eq!(refused.retry_after, Some(Duration::from_millis(750)));
}

#[test]
fn zero_limit_refuses_everything() {
    let store = MemoryStore::new();
    for strategy in Strategy::ALL {
        let q = Quota::per_second(0).unwrap().with_strategy(strategy);
        let d = store.acquire("k", &q, 1, clock().now()).unwrap();
        assert!(!d.allowed, "{strategy}");
        assert_eq!(d.limit, 0);
        assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    }
}

#[test]
fn cost_is_weight_and_above_capacity_is_an_error() {
    let store = MemoryStore::new();
    for strategy in Strategy::ALL {
        let q = Quota::per_second(10).unwrap().with_strategy(strategy);
        let now = clock().now();
        assert!(
            store
                .acquire(strategy.as_str(), &q, 7, now)
                .unwrap()
                .allowed
        );
        let d = store.acquire(strategy.as_str(), &q, 4, now).unwrap();
        assert!(!d.allowed, "{strategy}");
        assert_eq!(d.remaining, 3, "{strategy}");
        assert!(
            store
                .acquire(strategy.as_str(), &q, 3, now)
                .unwrap()
                .allowed
        );
        let err = store.acquire(strategy.as_str(), &q, 11, now).unwrap_err();
        assert!(
            matches!(
                err,
                ratelimit::Error::CostAboveCapacity {
                    cost: 11,
                    capacity: 10
                }
            ),
            "{err}"
        );
    }
}

fn strategy() -> impl Strategy_<Value = Strategy> {
    prop_oneof![
        Just(Strategy::FixedWindow),
        Just(Strategy::SlidingWindow),
        Just(Strategy::SlidingWindowCounter),
        Just(Strategy::TokenBucket),
    ]
}
use proptest::strategy::Strategy as Strategy_;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(ratelimit_tests::proptest_cases(256)))]

    /// The sliding log never admits more than `limit + burst` in any rolling window.
    #[test]
    fn sliding_log_never_exceeds_the_limit_in_any_window(
        limit in 1u64..20,
        burst in 0u64..5,
        window_ms in 1u64..2_000,
        steps in prop::collection::vec((0u64..700, 1u64..4), 1..300),
    ) {
        let store = MemoryStore::new();
        let q = Quota::new(limit, Duration::from_millis(window_ms)).unwrap()
            .with_burst(burst).unwrap()
            .with_strategy(Strategy::SlidingWindow);
        let mut now = 1_000_000 * 1_000 * MS;
        let mut hits: Vec<(Nanos, u64)> = Vec::new();
        for (advance, cost) in steps {
            now += advance * MS / 10;
            let cost = cost.min(q.capacity());
            if store.acquire("k", &q, cost, now).unwrap().allowed {
                hits.push((now, cost));
            }
        }
        let w = window_ms * MS;
        for &(t, _) in &hits {
            let in_window: u64 = hits.iter().filter(|&&(u, _)| u <= t && u + w > t).map(|&(_, c)| c).sum();
            prop_assert!(in_window <= q.capacity(), "{} admitted in a window ending at {}", in_window, t);
        }
    }

    /// A refused call is admitted exactly `retry_after` later, and refused a millisecond
    /// sooner, under every algorithm.
    #[test]
    fn retry_after_is_exact(
        strategy in strategy(),
        limit in 1u64..10,
        burst in 0u64..3,
        window_ms in 1u64..5_000,
        steps in prop::collection::vec((0u64..3_000, 1u64..4), 1..60),
    ) {
        // Peeking ahead in time below must not let a sweep drop the key "in the future".
        let store = MemoryStore::with_options(MemoryOptions::default().sweep_interval(Duration::from_secs(1_000_000)));
        let q = Quota::new(limit, Duration::from_millis(window_ms)).unwrap()
            .with_burst(burst).unwrap()
            .with_strategy(strategy);
        let mut now = 1_000_000 * 1_000 * MS;
        for (advance, cost) in steps {
            now += advance * MS / 7;
            let cost = cost.min(q.capacity());
            let d = store.acquire("k", &q, cost, now).unwrap();
            if let Some(retry) = d.retry_after {
                prop_assert!(!d.allowed);
                prop_assert!(retry > Duration::ZERO);
                let at = now + retry.as_nanos() as Nanos;
                prop_assert!(store.peek("k", &q, cost, at).unwrap().allowed, "not admitted at retry_after {:?}", retry);
                if retry >= Duration::from_millis(1) {
                    prop_assert!(!store.peek("k", &q, cost, at - MS).unwrap().allowed, "admitted 1ms before retry_after {:?}", retry);
                }
            } else {
                prop_assert!(d.allowed);
            }
        }
    }

    /// `remaining` counts down exactly with each admitted call of cost 1 from a fresh key.
    #[test]
    fn remaining_counts_down(strategy in strategy(), limit in 1u64..50, burst in 0u64..10) {
        let store = MemoryStore::new();
        let q = Quota::per_minute(limit).unwrap().with_burst(burst).unwrap().with_strategy(strategy);
        let now = clock().now();
        for expected in (0..q.capacity()).rev() {
            let d = store.acquire("k", &q, 1, now).unwrap();
            prop_assert!(d.allowed);
            prop_assert_eq!(d.remaining, expected);
            prop_assert_eq!(d.limit, q.capacity());
        }
        prop_assert!(!store.acquire("k", &q, 1, now).unwrap().allowed);
    }
}

/// Regression: callers read the clock before taking the key's lock, so a caller can arrive
/// with a `now` older than the state a concurrent caller just wrote. Deciding it "in the past"
/// reset the fixed window (and the counter) and let a second window's worth through.
#[test]
fn a_caller_with_an_older_now_cannot_reopen_a_closed_window() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = Quota::per_second(1).unwrap().with_strategy(strategy);
        let boundary = 2_000_000 * 1_000 * MS;
        assert!(
            store.acquire("k", &q, 1, boundary).unwrap().allowed,
            "{strategy}"
        );
        let late = store.acquire("k", &q, 1, boundary - MS).unwrap();
        assert!(!late.allowed, "{strategy}: an older now was admitted");
        assert!(
            !store.acquire("k", &q, 1, boundary).unwrap().allowed,
            "{strategy}"
        );
        assert!(
            !store
                .acquire("k", &q, 1, boundary + 999 * MS)
                .unwrap()
                .allowed,
            "{strategy}"
        );
        // The next window is open again (the counter still weighs the previous one at its start).
        let reopen = boundary + 1_000 * MS;
        let reopen = if strategy == Strategy::SlidingWindowCounter {
            reopen + 1_000 * MS
        } else {
            reopen
        };
        assert!(
            store.acquire("k", &q, 1, reopen).unwrap().allowed,
            "{strategy}"
        );
    }
}
