//! Probes of stacked limits (several limits decided as one, all or nothing:
//! `RateLimitService::consume_all` / `enforce_all` / `spend_all`, and an annotated fn with
//! several limit attributes): ways a stack could admit a call one of its limits refuses, spend
//! from some limits of a call it refuses, miscount, panic, or refuse with an error of the wrong
//! kind. Every strategy and mixes of them, duplicates, extreme costs, limits and windows, bad
//! keys, quotas the store cannot enforce, blocks, a full store, a clock out of range,
//! concurrency, reloads, shadow members, the queue, failing and lying stores. Exact counts, a
//! hand-driven clock, no sleeps. `tests/stacked.rs` holds the plain cases; these go around them.
//!
//! Not probed: a custom store whose `decide_all` says `allowed` for a call over its limit with
//! the right number of decisions. The service cannot tell that from an honest answer (it has no
//! state of its own to compare with), so trusting it is the `Store` contract, not a hole.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, Failover, FailurePolicy, ManualClock, MemoryOptions,
    MemoryStore, Module, Options, QuotaError, RateLimitService, Strategy, Tier, MAX_CAPACITY,
    MAX_KEY_LEN, MAX_WINDOW,
};
use ratelimit_tests::{hammer, now, remaining, service, tally, Broken, LikeMemory, START};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

// ---------------------------------------------------------------------------------------------
// Helpers.

/// A service on the memory store (the default configuration) over a manual clock at `START`.
fn memory() -> (RateLimitService, ManualClock) {
    service(Config::builder().build().unwrap())
}

/// `limit` an hour on behalf of `budget` (sliding window, the default strategy).
fn hourly(limit: u64, budget: &'static str) -> Options {
    Options::new().limit(limit).window(HOUR).budget(budget)
}

/// What `key` has left under `options` now.
fn level(service: &RateLimitService, key: &str, options: &Options) -> u64 {
    now(remaining(service, key, options))
}

/// The levels of every limit of `limits` now.
fn levels(service: &RateLimitService, limits: &[(&str, &Options)]) -> Vec<u64> {
    limits.iter().map(|(k, o)| level(service, k, o)).collect()
}

/// Whether a stacked call passed: decided, and every limit admitted it.
fn passed(result: &Result<Vec<Decision>, Error>) -> bool {
    matches!(result, Ok(d) if d.iter().all(|d| d.allowed))
}

/// Whether a stacked call was refused over a limit (not an error): `consume_all`'s refusal.
fn refused(result: &Result<Vec<Decision>, Error>) -> bool {
    matches!(result, Ok(d) if !d.is_empty() && d.iter().any(|d| !d.allowed))
}

/// A stacked call answered at its first poll (the memory store never waits).
fn at_once<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("the memory store answers at once")
}

/// The `(allowed, denied, errors)` of `budget`.
fn ade(service: &RateLimitService, budget: &str) -> (u64, u64, u64) {
    let c = service
        .stats()
        .by_method
        .get(budget)
        .copied()
        .unwrap_or_default();
    (c.allowed, c.denied, c.errors)
}

// ---------------------------------------------------------------------------------------------
// All or nothing, every strategy and mixes, every position.

/// A stack of three whose tight member (2) refuses: at any position, under any strategy, next
/// to members of any strategy, the refusals spend nothing from the two others (exactly), from
/// `consume_all` and `enforce_all` alike, and `enforce_all` names the tight member.
#[test]
fn a_stack_refused_by_any_member_spends_nothing_from_the_others_for_every_strategy_mix() {
    for tight_strategy in Strategy::ALL {
        for other in Strategy::ALL {
            for position in 0..3 {
                let (service, _clock) = memory();
                let tight = hourly(2, "tight").strategy(tight_strategy);
                let mut members = vec![
                    hourly(7, "a").strategy(other),
                    hourly(9, "b").strategy(other),
                ];
                members.insert(position, tight.clone());
                let limits: Vec<(&str, &Options)> = members.iter().map(|o| ("u", o)).collect();
                let case = format!("tight {tight_strategy} at {position}, others {other}");
                for _ in 0..2 {
                    assert!(passed(&at_once(service.consume_all(&limits))), "{case}");
                }
                for i in 0..6 {
                    if i % 2 == 0 {
                        let r = at_once(service.consume_all(&limits));
                        assert!(refused(&r), "{case}: {r:?}");
                        let d = r.unwrap();
                        for (j, d) in d.iter().enumerate() {
                            assert_eq!(d.allowed, j != position, "{case}: member {j}");
                        }
                    } else {
                        let r = at_once(service.enforce_all(&limits));
                        let Err(Error::Exceeded(e)) = &r else {
                            panic!("{case}: {r:?}")
                        };
                        assert_eq!(e.budget.as_deref(), Some("tight"), "{case}");
                    }
                }
                let mut expected = vec![5, 7];
                expected.insert(position, 0);
                assert_eq!(levels(&service, &limits), expected, "{case}");
            }
        }
    }
}

/// Members with costs of their own: a call refused because its cost (4) is above what the
/// tight member has left (2 of 10) spends nothing from the loose one (cost 7), whatever the
/// strategies; a cheaper call then takes exactly what is left.
#[test]
fn a_stack_refused_on_its_cost_spends_nothing_from_members_with_other_costs() {
    for tight_strategy in Strategy::ALL {
        for loose_strategy in Strategy::ALL {
            let (service, _clock) = memory();
            let tight = hourly(10, "tight").strategy(tight_strategy);
            let loose = hourly(100, "loose").strategy(loose_strategy);
            let case = format!("{tight_strategy} / {loose_strategy}");
            let call = |tight_cost: u64| {
                let t = tight.clone().cost(tight_cost);
                let l = loose.clone().cost(7);
                at_once(service.consume_all(&[("u", &t), ("u", &l)]))
            };
            assert!(passed(&call(4)), "{case}");
            assert!(passed(&call(4)), "{case}");
            for _ in 0..5 {
                let r = call(4);
                assert!(refused(&r), "{case}: {r:?}");
                let d = r.unwrap();
                assert!(!d[0].allowed && d[1].allowed, "{case}");
                // The loose member's level now, not what the call would have left it.
                assert_eq!(d[1].remaining, 86, "{case}");
            }
            assert_eq!(level(&service, "u", &tight), 2, "{case}");
            assert_eq!(level(&service, "u", &loose), 86, "{case}");
            assert!(passed(&call(2)), "{case}");
            assert_eq!(level(&service, "u", &tight), 0, "{case}");
            assert_eq!(level(&service, "u", &loose), 79, "{case}");
        }
    }
}

/// Members for different user keys (a per-user and a global limit): the global one refusing
/// spends nothing from the user's, and a user refused by its own limit spends nothing from
/// the global one.
#[test]
fn a_stack_over_several_user_keys_is_all_or_nothing_on_every_key() {
    let (service, _clock) = memory();
    let user = hourly(2, "per-user");
    let global = hourly(5, "global");
    let stack = |u: &'static str| at_once(service.consume_all(&[(u, &user), ("all", &global)]));
    assert!(passed(&stack("ann")));
    assert!(passed(&stack("ann")));
    // Ann's own limit refuses: the global budget keeps its 3.
    for _ in 0..4 {
        assert!(refused(&stack("ann")));
    }
    assert_eq!(level(&service, "all", &global), 3);
    assert!(passed(&stack("bob")));
    assert!(passed(&stack("bob")));
    assert!(passed(&stack("cat")));
    // The global budget is spent: Dan is refused and keeps his 2.
    for _ in 0..4 {
        assert!(refused(&stack("dan")));
    }
    assert_eq!(level(&service, "dan", &user), 2);
    assert_eq!(level(&service, "all", &global), 0);
    assert_eq!(level(&service, "cat", &user), 1);
}

/// A refused stack counts one denial in the total and in the refusing budget only; an admitted
/// one counts one admission in the total and in every budget.
#[test]
fn a_stack_is_counted_once_in_the_total_and_refusals_only_in_the_refusing_budget() {
    let (service, _clock) = memory();
    let tight = hourly(1, "tight");
    let loose = hourly(10, "loose");
    let limits = [("u", &tight), ("u", &loose)];
    assert!(passed(&at_once(service.consume_all(&limits))));
    for _ in 0..3 {
        assert!(refused(&at_once(service.consume_all(&limits))));
    }
    let total = service.stats().total;
    assert_eq!((total.allowed, total.denied, total.errors), (1, 3, 0));
    assert_eq!(ade(&service, "tight"), (1, 3, 0));
    assert_eq!(ade(&service, "loose"), (1, 0, 0));
}

/// Two members refusing at once: `enforce_all`'s error carries the one to wait for longest
/// (a refusal of an hour's window, not of a minute's), and each decision its own retry.
#[test]
fn enforce_all_reports_the_refusal_to_wait_for_longest() {
    let (service, clock) = memory();
    let minute = Options::new()
        .limit(1)
        .window(Duration::from_secs(60))
        .strategy(Strategy::SlidingWindow)
        .budget("minute");
    let hour = hourly(1, "hour").strategy(Strategy::SlidingWindow);
    for order in [[&minute, &hour], [&hour, &minute]] {
        let (service, _clock) = memory();
        let limits = [("u", order[0]), ("u", order[1])];
        assert!(passed(&at_once(service.enforce_all(&limits))));
        let r = at_once(service.enforce_all(&limits));
        let Err(Error::Exceeded(e)) = &r else {
            panic!("{r:?}")
        };
        assert_eq!(e.budget.as_deref(), Some("hour"));
        assert_eq!(e.decision.retry_after, Some(HOUR));
    }
    // Both refuse for a minute; then the minute's member admits again, the hour's still
    // refuses, and the refusals spend nothing from the minute's member.
    let limits = [("u", &minute), ("u", &hour)];
    assert!(passed(&at_once(service.consume_all(&limits))));
    for _ in 0..3 {
        assert!(refused(&at_once(service.consume_all(&limits))));
    }
    clock.advance(Duration::from_secs(61));
    for _ in 0..3 {
        let d = at_once(service.consume_all(&limits)).unwrap();
        assert!(d[0].allowed && !d[1].allowed, "{d:?}");
    }
    assert_eq!(levels(&service, &limits), [1, 0]);
}

// ---------------------------------------------------------------------------------------------
// Duplicates: one state twice, or two states under one user key.

/// One user key and one budget under two strategies (or two windows) are two states: a stack
/// of them spends each exactly once per call, and each refuses at its own limit.
#[test]
fn one_budget_under_two_strategies_or_windows_is_two_states_each_spent_once_per_call() {
    for (a, b) in [
        (
            hourly(3, "same").strategy(Strategy::FixedWindow),
            hourly(5, "same").strategy(Strategy::TokenBucket),
        ),
        (
            hourly(3, "same"),
            Options::new().limit(5).window(DAY).budget("same"),
        ),
    ] {
        let (service, _clock) = memory();
        let limits = [("u", &a), ("u", &b)];
        let (admitted, refusals) = tally(6, || {
            at_once(service.enforce_all(&limits)).map(|d| assert_eq!(d.len(), 2))
        });
        assert_eq!((admitted, refusals), (3, 3));
        assert_eq!(levels(&service, &limits), [0, 2]);
    }
}

/// One state twice in a stack (same user key, budget, strategy and window), with different
/// costs or different limits: an error before anything is spent, from every entry point,
/// and the other members keep their level.
#[test]
fn one_state_twice_with_other_costs_or_limits_is_an_error_and_spends_nothing() {
    let (service, _clock) = memory();
    let base = hourly(5, "dup");
    let other = hourly(10, "other");
    let twins = [
        (base.clone().cost(1), base.clone().cost(3)),
        (base.clone(), hourly(3, "dup")),
        (base.clone(), base.clone().shadow(true)),
    ];
    for (first, second) in &twins {
        for limits in [
            [("u", first), ("u", &other), ("u", second)],
            [("u", &other), ("u", second), ("u", first)],
        ] {
            for r in [
                at_once(service.consume_all(&limits)),
                at_once(service.enforce_all(&limits)),
                at_once(service.spend_all(&limits)).map(|s| s.into_decisions()),
            ] {
                assert!(
                    matches!(r, Err(Error::InvalidKey { .. })),
                    "{first:?} / {second:?}: {r:?}"
                );
            }
        }
    }
    assert_eq!(level(&service, "u", &base), 5);
    assert_eq!(level(&service, "u", &other), 10);
    let total = service.stats().total;
    assert_eq!(total.allowed + total.denied, 0, "nothing decided");
}

// ---------------------------------------------------------------------------------------------
// Costs, limits and windows at their extremes.

/// A member with cost 0 is `ZeroCost`, as the single call is: never a spend of nothing
/// admitted, and nothing spent from the others, at any position and from every entry point.
#[test]
fn a_member_of_cost_zero_is_zero_cost_and_spends_nothing_from_the_others() {
    let (service, _clock) = memory();
    let free = hourly(5, "free").cost(0);
    let paid = hourly(5, "paid");
    let single = at_once(service.consume("u", &free));
    assert!(matches!(single, Err(Error::ZeroCost)), "{single:?}");
    for limits in [[("u", &free), ("u", &paid)], [("u", &paid), ("u", &free)]] {
        for r in [
            at_once(service.consume_all(&limits)),
            at_once(service.enforce_all(&limits)),
            at_once(service.spend_all(&limits)).map(|s| s.into_decisions()),
        ] {
            assert!(matches!(r, Err(Error::ZeroCost)), "{r:?}");
        }
    }
    assert_eq!(level(&service, "u", &paid), 5);
    assert_eq!(level(&service, "u", &hourly(5, "free")), 5);
    assert_eq!(service.stats().total.allowed, 0);
}

/// A member whose cost is above its capacity is `CostAboveCapacity` (with the figures), every
/// strategy, whatever the others have; nothing is spent from them.
#[test]
fn a_member_costing_above_its_capacity_is_an_error_and_spends_nothing() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory();
        let costly = hourly(3, "costly").strategy(strategy).burst(1).cost(5);
        let roomy = hourly(100, "roomy").strategy(strategy).cost(5);
        for limits in [
            [("u", &costly), ("u", &roomy)],
            [("u", &roomy), ("u", &costly)],
        ] {
            let r = at_once(service.enforce_all(&limits));
            assert!(
                matches!(
                    r,
                    Err(Error::CostAboveCapacity {
                        cost: 5,
                        capacity: 4
                    })
                ),
                "{strategy}: {r:?}"
            );
        }
        assert_eq!(level(&service, "u", &roomy), 100, "{strategy}");
    }
}

/// What a test expects of an error.
type Expected = fn(&Error) -> bool;

/// Costs and limits at the edges of `u64`: a limit of `u64::MAX` (or a capacity overflowing
/// it) is `InvalidQuota`, a cost of `u64::MAX` is `CostAboveCapacity`; and a window of zero or
/// over `MAX_WINDOW` is `InvalidQuota`. As a member of a stack each is that error, and the
/// healthy member beside it keeps its level.
#[test]
fn members_at_the_edges_of_u64_and_of_windows_are_typed_errors_and_spend_nothing() {
    let (service, _clock) = memory();
    let healthy = hourly(4, "healthy");
    let cases: Vec<(Options, Expected)> = vec![
        (hourly(u64::MAX, "huge"), |e| {
            matches!(e, Error::InvalidQuota(QuotaError::CapacityTooLarge))
        }),
        (hourly(MAX_CAPACITY, "over").burst(u64::MAX), |e| {
            matches!(e, Error::InvalidQuota(QuotaError::CapacityTooLarge))
        }),
        (hourly(MAX_CAPACITY, "max").cost(u64::MAX), |e| {
            matches!(e, Error::CostAboveCapacity { cost: u64::MAX, .. })
        }),
        (
            Options::new()
                .limit(1)
                .window(Duration::ZERO)
                .budget("instant"),
            |e| matches!(e, Error::InvalidQuota(QuotaError::ZeroWindow)),
        ),
        (
            Options::new()
                .limit(1)
                .window(MAX_WINDOW + Duration::from_nanos(1))
                .budget("long"),
            |e| matches!(e, Error::InvalidQuota(QuotaError::WindowTooLong)),
        ),
        (
            Options::new().limit(1).window("forever").budget("text"),
            |e| matches!(e, Error::InvalidQuota(QuotaError::InvalidWindowText)),
        ),
    ];
    for (bad, expected) in &cases {
        for strategy in Strategy::ALL {
            let bad = bad.clone().strategy(strategy);
            for limits in [
                [("u", &bad), ("u", &healthy)],
                [("u", &healthy), ("u", &bad)],
            ] {
                for r in [
                    at_once(service.consume_all(&limits)),
                    at_once(service.enforce_all(&limits)),
                ] {
                    assert!(
                        matches!(&r, Err(e) if expected(e)),
                        "{bad:?} {strategy}: {r:?}"
                    );
                }
            }
        }
    }
    assert_eq!(level(&service, "u", &healthy), 4);
    assert_eq!(service.stats().total.allowed, 0);
}

/// The largest valid costs, limits and windows decide exactly: a cost of `MAX_CAPACITY` on a
/// limit of `MAX_CAPACITY` passes once and then is refused (never wrapped into a fresh
/// budget), stacked with a one-nanosecond window and a `MAX_WINDOW` one.
#[test]
fn the_largest_valid_costs_limits_and_windows_decide_exactly_in_a_stack() {
    for strategy in Strategy::ALL {
        let (service, clock) = memory();
        let whole = Options::new()
            .limit(MAX_CAPACITY)
            .window(HOUR)
            .strategy(strategy)
            .budget("whole")
            .cost(MAX_CAPACITY);
        let blink = Options::new()
            .limit(1)
            .window(Duration::from_nanos(1))
            .strategy(strategy)
            .budget("blink");
        let year = Options::new()
            .limit(2)
            .window(MAX_WINDOW)
            .strategy(strategy)
            .budget("year");
        let limits = [("u", &whole), ("u", &blink), ("u", &year)];
        let first = at_once(service.consume_all(&limits));
        assert!(passed(&first), "{strategy}: {first:?}");
        // Two nanoseconds on: the blink's one-nanosecond window (and, for the sliding-window
        // counter, the one before it) has passed.
        clock.advance(Duration::from_nanos(2));
        let second = at_once(service.consume_all(&limits));
        assert!(refused(&second), "{strategy}: {second:?}");
        let d = second.unwrap();
        assert!(!d[0].allowed && d[1].allowed && d[2].allowed, "{strategy}");
        // The year's budget spent once, the blink's refilled, nothing else moved.
        assert_eq!(level(&service, "u", &year), 1, "{strategy}");
        assert_eq!(level(&service, "u", &blink), 1, "{strategy}");
    }
}

/// A member with a limit of 0 refuses every call (a refusal, not an error), and the others
/// never spend.
#[test]
fn a_member_with_limit_zero_refuses_every_stacked_call_and_spends_nothing() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory();
        let closed = hourly(0, "closed").strategy(strategy);
        let open = hourly(3, "open").strategy(strategy);
        let limits = [("u", &open), ("u", &closed)];
        let (admitted, refusals) = tally(5, || at_once(service.enforce_all(&limits)));
        assert_eq!((admitted, refusals), (0, 5), "{strategy}");
        assert_eq!(level(&service, "u", &open), 3, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// Bad keys, unsupported quotas, blocks, a full store, the clock.

/// An empty or over-long user key on any member is `InvalidKey` before anything is spent;
/// a key of exactly `MAX_KEY_LEN` bytes works.
#[test]
fn a_bad_user_key_on_any_member_is_invalid_key_and_spends_nothing() {
    let (service, _clock) = memory();
    let a = hourly(3, "a");
    let b = hourly(3, "b");
    let long = "k".repeat(MAX_KEY_LEN + 1);
    for bad in ["", long.as_str()] {
        for limits in [[(bad, &a), ("u", &b)], [("u", &a), (bad, &b)]] {
            for r in [
                at_once(service.consume_all(&limits)),
                at_once(service.enforce_all(&limits)),
                at_once(service.spend_all(&limits)).map(|s| s.into_decisions()),
            ] {
                assert!(matches!(r, Err(Error::InvalidKey { .. })), "{r:?}");
            }
        }
    }
    assert_eq!((level(&service, "u", &a), level(&service, "u", &b)), (3, 3));
    let longest = "k".repeat(MAX_KEY_LEN);
    assert!(passed(&at_once(
        service.consume_all(&[(longest.as_str(), &a), ("u", &b)])
    )));
    assert_eq!(level(&service, "u", &b), 2);
}

/// A member naming a tier that is not configured is `UnknownTier`; nothing spent.
#[test]
fn a_member_on_an_unknown_tier_is_unknown_tier_and_spends_nothing() {
    let (service, _clock) = service(
        Config::builder()
            .tier(Tier::new("pro", 3).window(HOUR))
            .build()
            .unwrap(),
    );
    let pro = Options::new().tier("pro");
    let ghost = Options::new().tier("ghost");
    for limits in [[("u", &pro), ("u", &ghost)], [("u", &ghost), ("u", &pro)]] {
        let r = at_once(service.consume_all(&limits));
        assert!(matches!(r, Err(Error::UnknownTier { .. })), "{r:?}");
    }
    assert_eq!(level(&service, "u", &pro), 3);
}

/// A member with a block, on a store that keeps none: the store cannot enforce it, so the
/// call is `InvalidQuota`, and the member beside it spends nothing.
#[test]
fn a_member_the_store_cannot_enforce_is_an_error_and_spends_nothing() {
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        LikeMemory::without_refunds(),
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let blocking = hourly(3, "blocking").block_for(DAY);
    let plain = hourly(3, "plain");
    for limits in [
        [("u", &blocking), ("u", &plain)],
        [("u", &plain), ("u", &blocking)],
    ] {
        for _ in 0..3 {
            let r = now(service.enforce_all(&limits));
            assert!(matches!(r, Err(Error::InvalidQuota(_))), "{r:?}");
        }
    }
    assert_eq!(level(&service, "u", &plain), 3);
    assert_eq!(service.stats().total.allowed, 0);
}

/// A member whose refusal starts a block: the stack stays refused for the whole block (its
/// window long passed), the other member keeps its level throughout; a stack refused by the
/// *other* member starts no block on it.
#[test]
fn a_blocked_member_refuses_the_stack_for_the_whole_block_and_spends_nothing() {
    for strategy in Strategy::ALL {
        let (service, clock) = memory();
        let guarded = Options::new()
            .limit(1)
            .window(Duration::from_secs(60))
            .strategy(strategy)
            .block_for(DAY)
            .budget("guarded");
        let daily = Options::new().limit(10).window(DAY * 2).budget("daily");
        let limits = [("u", &guarded), ("u", &daily)];
        assert!(passed(&at_once(service.consume_all(&limits))), "{strategy}");
        assert!(
            refused(&at_once(service.consume_all(&limits))),
            "{strategy}"
        );
        for _ in 0..5 {
            clock.advance(HOUR);
            let r = at_once(service.consume_all(&limits));
            assert!(refused(&r), "{strategy}: blocked, {r:?}");
        }
        assert_eq!(level(&service, "u", &daily), 9, "{strategy}");
        clock.advance(DAY);
        assert!(passed(&at_once(service.consume_all(&limits))), "{strategy}");
        assert_eq!(level(&service, "u", &daily), 8, "{strategy}");

        // The other way round: the plain member refuses, the guarded one admitted: no block.
        let guarded = guarded.clone().limit(5).budget("guarded-2");
        let one = hourly(1, "one");
        let limits = [("v", &guarded), ("v", &one)];
        assert!(passed(&at_once(service.consume_all(&limits))), "{strategy}");
        for _ in 0..3 {
            assert!(
                refused(&at_once(service.consume_all(&limits))),
                "{strategy}"
            );
        }
        assert_eq!(level(&service, "v", &guarded), 4, "{strategy}");
        assert!(
            at_once(service.consume("v", &guarded)).unwrap().allowed,
            "{strategy}: blocked by another member's refusal"
        );
    }
}

/// At `max_keys`, a stack needing more new keys than there is room for is `StoreFull` and
/// spends nothing, not even on its keys that exist; one that needs no more room than there
/// is passes.
#[test]
fn a_stack_with_no_room_for_its_new_keys_is_store_full_and_spends_nothing() {
    let store = MemoryStore::with_options(MemoryOptions::default().max_keys(3));
    let clock = ratelimit_tests::clock();
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        store.clone(),
        Arc::new(clock.clone()),
    )
    .unwrap();
    let a = hourly(5, "a");
    let b = hourly(5, "b");
    let c = hourly(5, "c");
    assert!(at_once(service.consume("old", &a)).unwrap().allowed);
    assert!(at_once(service.consume("old", &b)).unwrap().allowed);
    assert_eq!(store.len(), 2);
    // One slot left, two new keys wanted.
    for _ in 0..3 {
        let r = at_once(service.enforce_all(&[("old", &a), ("new", &b), ("new", &c)]));
        assert!(matches!(r, Err(Error::StoreFull { max_keys: 3 })), "{r:?}");
    }
    assert_eq!(store.len(), 2);
    assert_eq!(level(&service, "old", &a), 4);
    // One new key: room for it.
    let limits = [("old", &a), ("old", &b), ("new", &c)];
    assert!(passed(&at_once(service.enforce_all(&limits))));
    assert_eq!(levels(&service, &limits), [3, 3, 4]);
    assert_eq!(store.len(), 3);
}

/// A clock past the last time the limiter can count from: the stack is `ClockOutOfRange`,
/// nothing is spent, and at a sane time again every member has its whole budget.
#[test]
fn a_stack_at_a_clock_out_of_range_is_an_error_and_spends_nothing() {
    let (service, clock) = memory();
    let a = hourly(2, "a");
    let b = hourly(2, "b").strategy(Strategy::TokenBucket);
    let limits = [("u", &a), ("u", &b)];
    clock.set(Duration::from_nanos(u64::MAX));
    for _ in 0..3 {
        let r = at_once(service.consume_all(&limits));
        assert!(matches!(r, Err(Error::ClockOutOfRange { .. })), "{r:?}");
    }
    clock.set(START);
    assert_eq!(levels(&service, &limits), [2, 2]);
    assert_eq!(service.stats().total.allowed, 0);
}

// ---------------------------------------------------------------------------------------------
// Concurrency.

/// A test module (for [`hammer`]'s threads): its service is the one probed.
fn threads_module() -> TestModule {
    TestModule::new(Module::builder()).unwrap()
}

/// 8 threads stacking a tight and a loose limit, every strategy: exactly the tight limit's
/// count is admitted, the loose one spends exactly that, never more.
#[test]
fn threads_stacking_two_limits_admit_exactly_the_tighter_for_every_strategy() {
    for strategy in Strategy::ALL {
        let module = threads_module();
        let service = module.service();
        let tight = hourly(37, "tight").strategy(strategy);
        let loose = hourly(60, "loose").strategy(strategy);
        let limits = [("u", &tight), ("u", &loose)];
        let got = hammer(&module, 8, 20, || at_once(service.enforce_all(&limits)));
        assert_eq!(got, (37, 123), "{strategy}");
        assert_eq!(levels(service, &limits), [0, 23], "{strategy}");
    }
}

/// Threads stacking costs: a cost of 3 from a limit of 50 admits exactly 16 calls, and the
/// other member (cost 2) spends exactly 32.
#[test]
fn threads_stacking_costs_admit_exactly_what_the_tighter_budget_holds() {
    for strategy in Strategy::ALL {
        let module = threads_module();
        let service = module.service();
        let tight = hourly(50, "tight").strategy(strategy).cost(3);
        let loose = hourly(100, "loose").strategy(strategy).cost(2);
        let limits = [("u", &tight), ("u", &loose)];
        let got = hammer(&module, 8, 10, || at_once(service.enforce_all(&limits)));
        assert_eq!(got, (16, 64), "{strategy}");
        assert_eq!(levels(service, &limits), [2, 68], "{strategy}");
    }
}

/// Threads making overlapping stacks in both orders ([a, shared], [shared, b], [b, a]): no
/// deadlock, and every budget spends exactly what its admitted calls cost: the shared one
/// (20) admits exactly 20 of the calls that name it.
#[test]
fn threads_making_overlapping_stacks_in_any_order_spend_every_budget_exactly() {
    let module = threads_module();
    let service = module.service();
    let a = hourly(1_000, "a");
    let b = hourly(1_000, "b");
    let shared = hourly(20, "shared");
    let turn = AtomicUsize::new(0);
    let (with_shared, without) = (AtomicU32::new(0), AtomicU32::new(0));
    let got = hammer(&module, 8, 30, || {
        let i = turn.fetch_add(1, Ordering::SeqCst) % 3;
        let r = match i {
            0 => at_once(service.enforce_all(&[("x", &a), ("x", &shared)])),
            1 => at_once(service.enforce_all(&[("x", &shared), ("x", &b)])),
            _ => at_once(service.enforce_all(&[("x", &b), ("x", &a)])),
        };
        if r.is_ok() {
            [&with_shared, &with_shared, &without][i].fetch_add(1, Ordering::SeqCst);
        }
        r
    });
    assert_eq!(with_shared.load(Ordering::SeqCst), 20);
    assert_eq!(without.load(Ordering::SeqCst), 80, "[b, a] never refused");
    assert_eq!(got, (100, 140));
    let spent = |o: &Options| 1_000 - level(service, "x", o);
    assert_eq!(level(service, "x", &shared), 0);
    // Every [b, a] call spent from both; the others from one each: 80 + 20 in all.
    assert_eq!(spent(&a) + spent(&b), 80 * 2 + 20);
}

/// Threads stacking an enforced limit (20) with a shadow one (5): exactly 20 admitted, the
/// shadow member refusing none of them, and counting the 15 it would have refused.
#[test]
fn threads_stacking_an_enforced_and_a_shadow_limit_admit_exactly_the_enforced_count() {
    let module = threads_module();
    let service = module.service();
    let enforced = hourly(20, "enforced");
    let trial = hourly(5, "trial").shadow(true);
    let limits = [("u", &enforced), ("u", &trial)];
    let got = hammer(&module, 8, 10, || at_once(service.enforce_all(&limits)));
    assert_eq!(got, (20, 60));
    let trial_counts = service.stats().by_method["trial"];
    assert_eq!(
        (
            trial_counts.allowed,
            trial_counts.shadowed,
            trial_counts.denied
        ),
        (20, 15, 0)
    );
    assert_eq!(ade(service, "enforced"), (20, 60, 0));
    assert_eq!(levels(service, &limits), [0, 0]);
}

// ---------------------------------------------------------------------------------------------
// Reloads.

fn two_tiers(a: u64) -> Config {
    Config::builder()
        .tier(Tier::new("a", a).window(HOUR))
        .tier(Tier::new("b", 100).window(HOUR))
        .build()
        .unwrap()
}

/// A reload tightening one member below what was spent: the next stacks are refused, and
/// spend nothing from the other member.
#[test]
fn a_reload_tightening_a_member_below_its_spend_refuses_the_stack_and_spends_nothing() {
    let (service, _clock) = service(two_tiers(10));
    let a = Options::new().tier("a");
    let b = Options::new().tier("b");
    let limits = [("u", &a), ("u", &b)];
    for _ in 0..3 {
        assert!(passed(&at_once(service.consume_all(&limits))));
    }
    service.reload(two_tiers(2)).unwrap();
    for _ in 0..4 {
        assert!(refused(&at_once(service.consume_all(&limits))));
    }
    assert_eq!(level(&service, "u", &b), 97);
}

/// A reload taking away a member's tier: the stack is `UnknownTier`, the other member keeps
/// its level; a stack prepared before the reload and awaited after it decides on one
/// configuration.
#[test]
fn a_reload_removing_a_members_tier_is_unknown_tier_and_spends_nothing() {
    let (service, _clock) = service(two_tiers(10));
    let a = Options::new().tier("a");
    let b = Options::new().tier("b");
    let limits = [("u", &a), ("u", &b)];
    assert!(passed(&at_once(service.consume_all(&limits))));
    // Made before the reload, polled after it.
    let pending = service.consume_all(&limits);
    service
        .reload(
            Config::builder()
                .tier(Tier::new("b", 100).window(HOUR))
                .build()
                .unwrap(),
        )
        .unwrap();
    let r = at_once(pending);
    assert!(matches!(r, Err(Error::UnknownTier { .. })), "{r:?}");
    let r = at_once(service.consume_all(&limits));
    assert!(matches!(r, Err(Error::UnknownTier { .. })), "{r:?}");
    assert_eq!(level(&service, "u", &b), 99);
}

/// After a reload moved a member to another window, its old state is held to as a check of
/// the stack too; a second member naming that old state itself (the same tier with the old
/// window as an override) is the same state twice: an error, never two looks at one state.
#[test]
fn a_member_on_another_members_old_state_after_a_reload_is_an_error_not_a_double_look() {
    let config = |window: Duration| {
        Config::builder()
            .tier(Tier::new("a", 3).window(window))
            .build()
            .unwrap()
    };
    let (service, _clock) = service(config(HOUR));
    let moved = Options::new().tier("a");
    let pinned = Options::new().tier("a").window(HOUR);
    assert!(at_once(service.consume("u", &moved)).unwrap().allowed);
    service.reload(config(DAY)).unwrap();
    for _ in 0..3 {
        let r = at_once(service.consume_all(&[("u", &moved), ("u", &pinned)]));
        assert!(matches!(r, Err(Error::InvalidKey { .. })), "{r:?}");
    }
    // The old state: one spent of 3, no more.
    assert_eq!(level(&service, "u", &pinned), 2);
}

// ---------------------------------------------------------------------------------------------
// The queue.

/// With the queue on (module-wide and per call), a stack over a limit is refused at once,
/// never left waiting, and spends nothing from the other member.
#[test]
fn a_stack_over_its_limit_is_refused_at_once_with_the_queue_on() {
    let (service, _clock) = service(
        Config::builder()
            .queue_enabled(true)
            .max_queue_size(10)
            .queue_timeout(HOUR)
            .build()
            .unwrap(),
    );
    let tight = hourly(1, "tight").queue(true);
    let loose = hourly(10, "loose").queue(true);
    let limits = [("u", &tight), ("u", &loose)];
    assert!(passed(&at_once(service.enforce_all(&limits))));
    for _ in 0..3 {
        let r = service
            .enforce_all(&limits)
            .now_or_never()
            .expect("a stacked call never waits");
        assert!(matches!(r, Err(Error::Exceeded(_))), "{r:?}");
    }
    assert_eq!(level(&service, "u", &loose), 9);
    assert_eq!(service.stats().queue.depth, 0);
}

// ---------------------------------------------------------------------------------------------
// Refunds of stacked spends (`spend_all`).

/// A stack one member refused spent nothing, so it has nothing to give back: not refundable,
/// and refunding it leaves the member that would have admitted it at its level (never above).
#[test]
fn a_refused_stack_gives_nothing_back_to_the_member_that_admitted_it() {
    let (service, _clock) = memory();
    let tight = hourly(1, "tight");
    let loose = hourly(10, "loose");
    for _ in 0..3 {
        assert!(at_once(service.consume("u", &loose)).unwrap().allowed);
    }
    let limits = [("u", &tight), ("u", &loose)];
    let first = at_once(service.spend_all(&limits)).unwrap();
    assert!(first.refundable());
    let mut refused_calls = Vec::new();
    for _ in 0..3 {
        let spent = at_once(service.spend_all(&limits)).unwrap();
        assert!(!spent.refundable());
        assert!(!spent.decisions()[0].allowed && spent.decisions()[1].allowed);
        refused_calls.push(spent);
    }
    for spent in refused_calls {
        assert!(!at_once(spent.refund()).unwrap());
    }
    assert_eq!(level(&service, "u", &loose), 6);
    assert_eq!(level(&service, "u", &tight), 0);
}

/// An admitted stack given back returns its cost to every member exactly once; then each
/// member admits exactly its limit again, not one more.
#[test]
fn an_admitted_stack_given_back_returns_each_members_cost_exactly_once() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory();
        let a = hourly(4, "a").strategy(strategy).cost(2);
        let b = hourly(5, "b").strategy(strategy);
        let limits = [("u", &a), ("u", &b)];
        let spent = at_once(service.spend_all(&limits)).unwrap();
        assert!(spent.refundable(), "{strategy}");
        assert_eq!(levels(&service, &limits), [2, 4], "{strategy}");
        assert!(at_once(spent.refund()).unwrap(), "{strategy}");
        assert_eq!(levels(&service, &limits), [4, 5], "{strategy}");
        let got = tally(5, || at_once(service.enforce_all(&limits)));
        assert_eq!(got, (2, 3), "{strategy}");
        assert_eq!(levels(&service, &limits), [0, 3], "{strategy}");
    }
}

/// A stack whose spend on one member no longer counts (its one-minute window has passed) is
/// given back to none: the other member (an hour) stays spent.
#[test]
fn a_stack_given_back_after_one_members_window_passed_gives_back_to_none() {
    let (service, clock) = memory();
    let minute = Options::new()
        .limit(2)
        .window(Duration::from_secs(60))
        .budget("minute");
    let hour = hourly(5, "hour");
    let limits = [("u", &minute), ("u", &hour)];
    let spent = at_once(service.spend_all(&limits)).unwrap();
    assert!(spent.refundable());
    clock.advance(Duration::from_secs(120));
    assert!(!at_once(spent.refund()).unwrap());
    assert_eq!(levels(&service, &limits), [2, 4]);
}

// ---------------------------------------------------------------------------------------------
// Failing stores.

/// A store that cannot answer: every stacked call is `Error::Store` (never a decision), from
/// every entry point, counted as errors.
#[test]
fn a_stack_on_a_failing_store_is_a_store_error_never_an_admission() {
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        Broken,
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let a = hourly(5, "a");
    let b = hourly(5, "b");
    let limits = [("u", &a), ("u", &b)];
    for _ in 0..2 {
        for r in [
            now(service.consume_all(&limits)),
            now(service.enforce_all(&limits)),
            now(service.spend_all(&limits)).map(|s| s.into_decisions()),
        ] {
            assert!(matches!(r, Err(Error::Store { .. })), "{r:?}");
        }
    }
    let total = service.stats().total;
    assert_eq!((total.allowed, total.denied, total.errors), (0, 0, 6));
}

/// A failing store under `FailurePolicy::Deny` refuses with its error; under `Local`, each
/// process's share decides the stack all or nothing (4 / 2 pods = 2 admitted, the other
/// member spending exactly those 2 of its 5), and a share of zero (1 / 2 pods) admits nothing.
#[test]
fn a_failing_store_behind_a_failover_decides_a_stack_all_or_nothing_or_refuses() {
    let on = |policy| {
        RateLimitService::with_store(
            Config::builder().build().unwrap(),
            Failover::new(Broken, policy),
            Arc::new(ratelimit_tests::clock()),
        )
        .unwrap()
    };
    let tight = hourly(4, "tight");
    let loose = hourly(10, "loose");
    let limits = [("u", &tight), ("u", &loose)];

    let deny = on(FailurePolicy::Deny);
    let r = now(deny.enforce_all(&limits));
    assert!(matches!(r, Err(Error::Store { .. })), "{r:?}");

    let local = on(FailurePolicy::Local { pods: 2 });
    let got = tally(6, || now(local.enforce_all(&limits)));
    assert_eq!(got, (2, 4));
    assert_eq!(level(&local, "u", &loose), 3, "the local share of 10 is 5");

    let none = hourly(1, "none");
    let limits = [("u", &none), ("u", &loose)];
    for _ in 0..3 {
        let r = now(local.enforce_all(&limits));
        assert!(!passed(&r), "{r:?}");
    }
    assert_eq!(level(&local, "u", &loose), 3);
}

// ---------------------------------------------------------------------------------------------
// Lying stores: the wrong number of decisions.

/// How [`Liar`] bends the memory store's stacked answer.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// One decision fewer than asked.
    Fewer,
    /// None at all.
    Empty,
    /// One more, saying `allowed`.
    More,
}

/// The memory store, its stacked answers bent by `lie`; answered at once when `at_once`.
struct Liar {
    memory: MemoryStore,
    lie: Lie,
    at_once: bool,
}

impl Liar {
    fn bend(&self, decided: Result<Vec<Decision>, Error>) -> Result<Vec<Decision>, Error> {
        let mut decisions = decided?;
        match self.lie {
            Lie::Fewer => {
                decisions.pop();
            }
            Lie::Empty => decisions.clear(),
            Lie::More => {
                let mut extra = decisions[0].clone();
                extra.allowed = true;
                extra.retry_after = None;
                decisions.push(extra);
            }
        }
        Ok(decisions)
    }
}

impl Store for Liar {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        Store::decide(&self.memory, request).await
    }
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.at_once
            .then(|| Store::decide_now(&self.memory, request))
            .flatten()
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.bend(Store::decide_all(&self.memory, stacked).await)
    }
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        if !self.at_once {
            return None;
        }
        Some(self.bend(Store::decide_all_now(&self.memory, stacked)?))
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.memory, key).await
    }
    fn decides_at_once(&self) -> bool {
        self.at_once
    }
}

/// A store answering a stack with the wrong number of decisions (fewer, none, one more),
/// awaited or at once, with or without a shadow member: never an admission, always
/// `UnexpectedState` (one more decision beside a shadow member too: it was dropped unread,
/// until the count was checked before it decides whether the shadow member spends).
#[test]
fn a_store_answering_the_wrong_number_of_decisions_never_gets_a_stack_admitted() {
    for lie in [Lie::Fewer, Lie::Empty, Lie::More] {
        for at_once in [false, true] {
            for with_shadow in [false, true] {
                let case = format!("{lie:?}, at once {at_once}, shadow member {with_shadow}");
                let liar = Liar {
                    memory: MemoryStore::new(),
                    lie,
                    at_once,
                };
                let service = RateLimitService::with_store(
                    Config::builder().build().unwrap(),
                    liar,
                    Arc::new(ratelimit_tests::clock()),
                )
                .unwrap();
                let enforced = hourly(2, "enforced");
                let other = hourly(50, "other").shadow(with_shadow);
                let limits = [("u", &enforced), ("u", &other)];
                let (mut admitted, mut refusals, mut errors) = (0, 0, 0);
                for _ in 0..6 {
                    match now(service.enforce_all(&limits)) {
                        Ok(_) => admitted += 1,
                        Err(Error::Exceeded(_)) => refusals += 1,
                        Err(Error::UnexpectedState { .. }) => errors += 1,
                        Err(e) => panic!("{case}: {e}"),
                    }
                }
                assert_eq!((admitted, refusals, errors), (0, 0, 6), "{case}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Annotated fns with several limits (`acquire_all_now` / `acquire_all`).

static SYNC_STACK_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1h", key = user, name = "sync-stack-tight")]
#[rate_limit(limit = 5, window = "1h", key = user, name = "sync-stack-loose")]
fn sync_stack(user: &str) -> Result<(), Error> {
    let _ = user;
    SYNC_STACK_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static ASYNC_STACK_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 4, window = "1h", key = user, cost = cost, name = "async-stack-a")]
#[rate_limit(limit = 2, window = "1h", key = user, name = "async-stack-b")]
async fn async_stack(user: &str, cost: u64) -> Result<(), Error> {
    let _ = user;
    ASYNC_STACK_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A sync fn with two limits under 4 threads: exactly the tighter limit's count runs, the
/// looser spends exactly that; an empty key is `InvalidKey` and runs nothing, spends nothing.
#[test]
fn a_sync_fn_with_two_limits_runs_exactly_the_tighter_count_under_threads() {
    let module = threads_module();
    assert_eq!(hammer(&module, 4, 10, || sync_stack("u")), (3, 37));
    assert_eq!(SYNC_STACK_RUNS.load(Ordering::SeqCst), 3);
    let service = module.service();
    assert_eq!(ade(service, "sync-stack-tight"), (3, 37, 0));
    assert_eq!(ade(service, "sync-stack-loose"), (3, 0, 0));
    let loose = hourly(5, "sync-stack-loose");
    assert_eq!(level(service, "u", &loose), 2);
    let bad = module.run(|| sync_stack(""));
    assert!(matches!(bad, Err(Error::InvalidKey { .. })), "{bad:?}");
    assert_eq!(SYNC_STACK_RUNS.load(Ordering::SeqCst), 3);
}

/// An async fn with two limits: a cost of 0 on one is `ZeroCost` and runs nothing; a cost
/// above its capacity is `CostAboveCapacity`; the other limit spends nothing for either.
#[test]
fn an_async_fn_with_two_limits_and_a_bad_cost_runs_nothing_and_spends_nothing() {
    let module = threads_module();
    let r = now(module.scope(async_stack("u", 0)));
    assert!(matches!(r, Err(Error::ZeroCost)), "{r:?}");
    let r = now(module.scope(async_stack("u", 5)));
    assert!(matches!(r, Err(Error::CostAboveCapacity { .. })), "{r:?}");
    assert_eq!(ASYNC_STACK_RUNS.load(Ordering::SeqCst), 0);
    let b = hourly(2, "async-stack-b");
    assert_eq!(level(module.service(), "u", &b), 2);
    // Cost 3 of 4, then 3 more refused: b spent once.
    assert!(now(module.scope(async_stack("u", 3))).is_ok());
    let r = now(module.scope(async_stack("u", 3)));
    assert!(matches!(r, Err(Error::Exceeded(_))), "{r:?}");
    assert_eq!(ASYNC_STACK_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(level(module.service(), "u", &b), 1);
}

// ---------------------------------------------------------------------------------------------
// Ways through these probes found, closed since: each a regression test named after it.

/// A store answering a stack of one enforced and one shadow member with no decision for the
/// enforced one: the call is an error (`UnexpectedState`), so, like any call in error, it
/// must spend nothing from the shadow member.
#[test]
fn a_stack_in_error_from_a_store_answering_too_few_spends_nothing_from_its_shadow_member() {
    let liar = Liar {
        memory: MemoryStore::new(),
        lie: Lie::Fewer,
        at_once: true,
    };
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        liar,
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let enforced = hourly(2, "enforced");
    let trial = hourly(50, "trial").shadow(true);
    for _ in 0..3 {
        let r = now(service.enforce_all(&[("u", &enforced), ("u", &trial)]));
        assert!(matches!(r, Err(Error::UnexpectedState { .. })), "{r:?}");
    }
    assert_eq!(level(&service, "u", &trial), 50);
}

/// A stack of no limits at all asks nothing of any limit: it must be an error (as a call with
/// no limit is `NoLimit`), never an admission, from every entry point, and count no admission.
#[test]
fn a_stack_of_no_limits_is_an_error_not_an_admission() {
    let (service, _clock) = memory();
    for r in [
        at_once(service.enforce_all(&[])),
        at_once(service.consume_all(&[])),
        at_once(service.spend_all(&[])).map(|s| s.into_decisions()),
    ] {
        assert!(matches!(r, Err(Error::NoLimit)), "{r:?}");
    }
    assert_eq!(service.stats().total.allowed, 0);
}

/// A stack whose members spend, next to one that only looks (`consume(false)`): a stacked
/// decision spends everywhere or looks everywhere, and a look would have admitted the call
/// spending nothing (every call of 10 admitted by a limit of 2): the mix is `MixedStack`,
/// from every entry point, before anything is asked of the store.
#[test]
fn a_stack_mixing_a_look_with_a_spend_never_admits_past_the_spending_limit() {
    let (service, _clock) = memory();
    let spends = hourly(2, "spends");
    let looks = hourly(100, "looks").consume(false);
    let limits = [("u", &spends), ("u", &looks)];
    for _ in 0..10 {
        for r in [
            at_once(service.enforce_all(&limits)),
            at_once(service.consume_all(&limits)),
            at_once(service.spend_all(&limits)).map(|s| s.into_decisions()),
        ] {
            assert!(matches!(r, Err(Error::MixedStack)), "{r:?}");
        }
    }
    // Refused before the store was asked: nothing spent, nothing counted as admitted.
    assert_eq!(level(&service, "u", &spends), 2);
    assert_eq!(level(&service, "u", &looks), 100);
    assert_eq!(service.stats().total.allowed, 0);
    // Every limit looking is a stacked look: answered, nothing spent.
    let all_look = [("u", &looks), ("u", &spends.clone().consume(false))];
    assert!(at_once(service.consume_all(&all_look)).is_ok_and(|d| d.iter().all(|d| d.allowed)));
    assert_eq!(level(&service, "u", &spends), 2);
}
