//! Probes of refunds (issue 26), kept as tests: every way found to make a spend given back
//! leave a budget larger than its quota (or than the same history without that spend), or run
//! a `count = ..` body more often than its limit. Each test names what it checks; a probe that
//! found a way through is `#[ignore = "FOUND: .."]` with the failing assertion left in place.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Refund, Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, Failover, FailurePolicy, ManualClock, MemoryOptions,
    MemoryStore, Module, Options, RateLimitService, StoreConfig, Strategy,
};
use ratelimit_tests::{drain, now, Rng, START};

const SEC: Duration = Duration::from_secs(1);

fn memory(config: Config) -> (RateLimitService, ManualClock) {
    ratelimit_tests::service(config)
}

fn plain() -> (RateLimitService, ManualClock) {
    memory(Config::default())
}

/// `limit` per `window` under `strategy`.
fn per(limit: u64, window: Duration, strategy: Strategy) -> Options {
    Options::new()
        .limit(limit)
        .window(window)
        .strategy(strategy)
}

fn remaining(service: &RateLimitService, key: &str, options: &Options) -> u64 {
    now(service.status(key, options)).unwrap().remaining
}

// ---------------------------------------------------------------------------------------------
// The token bucket: a refund gives back the spend's whole cost in time, even when most of it
// had already come back by refilling.

/// A spend of 9 of 10 tokens, given back just before its tokens had all refilled: the bucket
/// moves back 9 intervals although only a nanosecond of them was still owed, so 18 calls are
/// admitted at one instant against a capacity of 10 (a history without the spend admits 10).
#[test]
fn token_bucket_late_refund_never_admits_more_than_the_capacity_at_once() {
    let (service, clock) = plain();
    // One token a second, ten at most.
    let options = per(10, 10 * SEC, Strategy::TokenBucket);
    let spent = now(service.spend("a", &options.clone().cost(9))).unwrap();
    assert!(spent.decision().allowed);
    // 9 s less a nanosecond later, the 9 tokens are back but for a nanosecond's worth.
    clock.set(START + 9 * SEC - Duration::from_nanos(1));
    let before = drain(&service, "a", &options);
    assert_eq!(before, 9);
    assert!(now(spent.refund()).unwrap(), "the spend still counted");
    let after = drain(&service, "a", &options);

    // The same instant without the spend ever made.
    let (control, control_clock) = plain();
    control_clock.set(START + 9 * SEC - Duration::from_nanos(1));
    assert_eq!(drain(&control, "a", &options), 10);

    assert!(
        before + after <= 10,
        "{} admitted at one instant against a capacity of 10",
        before + after
    );
}

/// The `count = "err"` pattern with cost 1: a call that spent at once and succeeded late (its
/// spend given back 1 ms before its token refilled) lets 11 failures count within 1 ms
/// against a capacity of 10; a history without that call admits 10.
#[test]
fn token_bucket_late_refund_of_one_token_never_admits_past_the_capacity() {
    let (service, clock) = plain();
    let options = per(10, 10 * SEC, Strategy::TokenBucket);
    let long_success = now(service.spend("b", &options)).unwrap();
    clock.set(START + Duration::from_millis(999));
    let mut failures = drain(&service, "b", &options);
    assert_eq!(failures, 9);
    assert!(now(long_success.refund()).unwrap());
    failures += drain(&service, "b", &options);
    clock.set(START + SEC);
    failures += drain(&service, "b", &options);

    let (control, control_clock) = plain();
    control_clock.set(START + Duration::from_millis(999));
    let mut without = drain(&control, "b", &options);
    control_clock.set(START + SEC);
    without += drain(&control, "b", &options);
    assert_eq!(without, 10);

    assert!(
        failures <= without,
        "{failures} admitted within 1 ms, {without} without the refunded call"
    );
}

// ---------------------------------------------------------------------------------------------
// A refund against the history without the refunded spend: never more budget than that.

/// Random histories of spends (cost 1 or 2) and refunds at random instants on one key; at the
/// end, the calls admitted at once are at most what a second service admits after replaying
/// only the spends that were not given back, at the same instants. Returns the first history
/// (seed) that breaks it, with both counts.
fn refund_against_replay(strategy: Strategy, seeds: u64, back: bool) -> Option<(u64, u64, u64)> {
    let options = per(5, 10 * SEC, strategy);
    for seed in 1..=seeds {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let (service, clock) = plain();
        let mut at = START;
        // (instant, cost, held spend, still counted) of each admitted spend.
        let mut spends = Vec::new();
        for _ in 0..(4 + rng.below(12)) {
            at += Duration::from_millis(rng.below(4_000));
            if back && rng.below(4) == 0 {
                // A clock stepped back, by up to 3 s.
                at = at.saturating_sub(Duration::from_millis(rng.below(3_000)));
            }
            clock.set(at);
            match rng.below(3) {
                0 | 1 => {
                    let cost = 1 + rng.below(2);
                    let spent = now(service.spend("k", &options.clone().cost(cost))).unwrap();
                    if spent.decision().allowed {
                        spends.push((at, cost, Some(spent), true));
                    }
                }
                _ if !spends.is_empty() => {
                    let i = rng.below(spends.len() as u64) as usize;
                    if let Some(spent) = spends[i].2.take() {
                        // Given back: no longer counted; nothing given: still counted.
                        spends[i].3 = !now(spent.refund()).unwrap();
                    }
                }
                _ => {}
            }
        }
        at += Duration::from_millis(rng.below(4_000));
        clock.set(at);
        let (replay, replay_clock) = plain();
        for (when, cost, _, counted) in &spends {
            if *counted {
                replay_clock.set(*when);
                let d = now(replay.consume("k", &options.clone().cost(*cost))).unwrap();
                assert!(
                    d.allowed,
                    "{strategy}: seed {seed}: the replay admits what was"
                );
            }
        }
        replay_clock.set(at);
        let (got, want) = (
            drain(&service, "k", &options),
            drain(&replay, "k", &options),
        );
        if got > want {
            return Some((seed, got, want));
        }
    }
    None
}

/// Fixed window, sliding log and sliding counter: a refund leaves exactly the history without
/// the spend (never more budget), over 400 random histories each.
#[test]
fn a_refund_never_leaves_more_budget_than_the_history_without_the_spend() {
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
    ] {
        assert_eq!(
            refund_against_replay(strategy, 400, false),
            None,
            "{strategy}"
        );
    }
}

/// Sliding log and sliding counter against the same replays, with a clock that now and then
/// steps back by up to 3 s (a caller whose clock read predates another's).
#[test]
fn a_refund_with_a_clock_stepping_back_never_leaves_more_budget_than_the_replay() {
    for strategy in [Strategy::SlidingWindow, Strategy::SlidingWindowCounter] {
        assert_eq!(
            refund_against_replay(strategy, 400, true),
            None,
            "{strategy}"
        );
    }
}

/// The fixed window with the clock stepping back: the replay is not the measure here (a
/// history without a spend that moved the key to the next window leaves a stale caller in
/// the window before, where the refunded history decides it in the next one, as it must),
/// so each window's count is: no window ever counts more than its limit, whatever the
/// refunds and the steps back. Every admitted call is counted in the window the store
/// decided it in (`now.max(start)` of the key's state), read back from its `reset_at`.
#[test]
fn a_fixed_window_refund_with_a_clock_stepping_back_never_counts_past_the_limit_in_a_window() {
    let options = per(5, 10 * SEC, Strategy::FixedWindow);
    for seed in 1..=400u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let (service, clock) = plain();
        let mut at = START;
        let mut held: Vec<(std::time::SystemTime, u64, Option<ratelimit::Spent>)> = Vec::new();
        for _ in 0..(4 + rng.below(16)) {
            at += Duration::from_millis(rng.below(4_000));
            if rng.below(4) == 0 {
                at = at.saturating_sub(Duration::from_millis(rng.below(3_000)));
            }
            clock.set(at);
            match rng.below(3) {
                0 | 1 => {
                    let cost = 1 + rng.below(2);
                    let spent = now(service.spend("k", &options.clone().cost(cost))).unwrap();
                    if spent.decision().allowed {
                        held.push((spent.decision().reset_at(), cost, Some(spent)));
                    }
                }
                _ if !held.is_empty() => {
                    let i = rng.below(held.len() as u64) as usize;
                    if let Some(spent) = held[i].2.take() {
                        if now(spent.refund()).unwrap() {
                            held[i].1 = 0;
                        }
                    }
                }
                _ => {}
            }
        }
        let mut by_window = std::collections::HashMap::new();
        for (window_end, cost, _) in &held {
            *by_window.entry(*window_end).or_insert(0) += cost;
        }
        for (window_end, count) in by_window {
            assert!(
                count <= 5,
                "seed {seed}: {count} counted in the window ending {window_end:?}"
            );
        }
    }
}

/// A fixed window of 5 per 10 s with 4 counted in `[START, START + 10 s)`; a spend at the next
/// window's start moves the key there and is given back at once. A caller whose clock read
/// 9.99 s (it read the clock before the move) was decided in the old window from nothing (the
/// emptied window was a fresh state): 5 more counted there, 9 in one window of 5. The emptied
/// window keeps its start, so that caller is decided in the new window (`now.max(start)`),
/// as a kept spend makes it: its calls land there, and the old window keeps its 4.
#[test]
fn a_fixed_window_never_counts_more_than_its_limit_in_a_window_after_a_refund_emptied_the_next() {
    let (service, clock) = plain();
    let options = per(5, 10 * SEC, Strategy::FixedWindow);
    clock.set(START + 3 * SEC);
    let kept: Vec<_> = (0..4)
        .map(|_| now(service.spend("w", &options)).unwrap())
        .collect();
    assert!(kept.iter().all(|s| s.decision().allowed));
    clock.set(START + 10 * SEC);
    let next = now(service.spend("w", &options)).unwrap();
    assert!(next.decision().allowed);
    assert!(now(next.refund()).unwrap());
    // A caller that read the clock just before the move.
    clock.set(START + 10 * SEC - Duration::from_millis(10));
    let late: Vec<_> = (0..10)
        .map(|_| now(service.spend("w", &options)).unwrap())
        .filter(|s| s.decision().allowed)
        .collect();
    let new_window = START + 20 * SEC;
    for spent in &late {
        let window_end = spent.decision().reset_at();
        assert_eq!(
            window_end,
            std::time::UNIX_EPOCH + new_window,
            "counted in the window before"
        );
    }
    assert_eq!(late.len(), 5, "the new window's 5");
    clock.set(START + 10 * SEC);
    assert_eq!(drain(&service, "w", &options), 0, "the new window is full");
}

/// The token bucket against the same replays.
#[test]
fn a_token_bucket_refund_never_leaves_more_budget_than_the_history_without_the_spend() {
    assert_eq!(
        refund_against_replay(Strategy::TokenBucket, 400, false),
        None,
        "(seed, admitted after refunds, admitted by the replay)"
    );
}

// ---------------------------------------------------------------------------------------------
// A clock stepped back: a spend whose tokens refilled long ago, given back at an instant
// before its arrival time.

/// A spend at `START` on `limit 10 per 1s` (its unit back 100 ms later); 5 s later every unit
/// is spent; the clock steps back to 50 ms after `START` (no sweep ran: it runs every 10 s)
/// and the old spend is given back; at 5 s again: whether the refund gave anything, and what
/// is admitted then (nothing, without the refund).
fn refund_with_the_clock_stepped_back(strategy: Strategy) -> (bool, u64) {
    let (service, clock) = plain();
    let options = per(10, SEC, strategy);
    let old = now(service.spend("c", &options)).unwrap();
    assert!(old.decision().allowed, "{strategy}");
    clock.set(START + 5 * SEC);
    assert_eq!(drain(&service, "c", &options), 10, "{strategy}");
    clock.set(START + Duration::from_millis(50));
    let gave = now(old.refund()).unwrap();
    clock.set(START + 5 * SEC);
    (gave, drain(&service, "c", &options))
}

/// Fixed window, log and counter: the state moved on (a new window; the log's entry pruned),
/// so nothing is given back and nothing more admitted.
#[test]
fn a_refund_with_the_clock_stepped_back_gives_nothing_to_a_later_state() {
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
    ] {
        assert_eq!(
            refund_with_the_clock_stepped_back(strategy),
            (false, 0),
            "{strategy}"
        );
    }
}

#[test]
fn a_token_bucket_refund_with_the_clock_stepped_back_gives_nothing_to_a_later_state() {
    let (gave, admitted) = refund_with_the_clock_stepped_back(Strategy::TokenBucket);
    assert_eq!(
        admitted, 0,
        "admitted over a bucket spent since (refund gave: {gave})"
    );
    assert!(!gave);
}

// ---------------------------------------------------------------------------------------------
// Other states: after a reset, another key, another budget, another tier.

/// A spend of cost 3 made before a reset, given back after one spend of cost 1 on the new
/// state: nothing given (the count 1 must not go below zero or to a fresh state), and the new
/// spend still counts.
#[test]
fn a_refund_of_cost_3_after_a_reset_and_a_spend_of_1_gives_nothing() {
    for strategy in Strategy::ALL {
        let (service, _clock) = plain();
        let options = per(5, 60 * SEC, strategy);
        let old = now(service.spend("d", &options.clone().cost(3))).unwrap();
        assert!(old.refundable(), "{strategy}");
        assert!(now(service.reset_with("d", &options)).unwrap());
        let new = now(service.spend("d", &options)).unwrap();
        assert!(new.decision().allowed);
        assert!(!now(old.refund()).unwrap(), "{strategy}");
        assert_eq!(remaining(&service, "d", &options), 4, "{strategy}");
        assert_eq!(drain(&service, "d", &options), 4, "{strategy}");
        assert!(now(new.refund()).unwrap(), "{strategy}");
        assert_eq!(drain(&service, "d", &options), 1, "{strategy}");
    }
}

/// A spend goes back to its own key and budget only: other keys and another budget spent to
/// nothing stay spent; the same key under the two budgets are two states.
#[test]
fn a_refund_reaches_only_its_own_key_and_budget() {
    for strategy in Strategy::ALL {
        let (service, _clock) = plain();
        let first = per(3, 60 * SEC, strategy).budget("first");
        let second = per(3, 60 * SEC, strategy).budget("second");
        let spent = now(service.spend("e", &first)).unwrap();
        assert_eq!(drain(&service, "e", &second), 3);
        assert_eq!(drain(&service, "e2", &first), 3);
        assert!(now(spent.refund()).unwrap(), "{strategy}");
        assert_eq!(drain(&service, "e", &second), 0, "{strategy}");
        assert_eq!(drain(&service, "e2", &first), 0, "{strategy}");
        assert_eq!(drain(&service, "e", &first), 3, "{strategy}");
    }
}

/// A spend made before a sweep, on a key emptied by refunds and swept, then made again by
/// other calls: nothing given to the new state, on every strategy; what the new state admits
/// is exactly its limit.
#[test]
fn a_refund_after_a_sweep_and_a_new_state_gives_nothing() {
    for strategy in Strategy::ALL {
        let (service, clock) = plain();
        // One unit every 30 s for the bucket: a refund leaves its arrival time at `now`.
        let options = per(2, 60 * SEC, strategy);
        let first = now(service.spend("f", &options)).unwrap();
        let second = now(service.spend("f", &options)).unwrap();
        assert!(now(first.refund()).unwrap());
        // Past every state's expiry (the counter's: two windows after its window's start) and
        // the sweep's grace.
        clock.advance(125 * SEC);
        let store = service.memory_store().expect("memory");
        store.sweep(ratelimit::Clock::now(&clock));
        assert_eq!(store.len(), 0, "{strategy}");
        assert_eq!(drain(&service, "f", &options), 2, "{strategy}");
        assert!(!now(second.refund()).unwrap(), "{strategy}");
        assert_eq!(drain(&service, "f", &options), 0, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// The store at `max_keys`.

/// Two keys at most: a third key is refused (an error, never an allowance) while both hold
/// spends; a refund needs no room; once a key's spends are all given back it may be swept to
/// make room, and then it is the one refused. The store never holds more than two keys.
#[test]
fn at_max_keys_refunds_make_no_room_for_an_allowance_past_the_cap() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .store(StoreConfig::Memory(MemoryOptions::default().max_keys(2)))
            .build()
            .unwrap();
        let (service, clock) = memory(config);
        let options = per(3, 60 * SEC, strategy);
        let a = now(service.spend("a", &options)).unwrap();
        let b = now(service.spend("b", &options)).unwrap();
        assert!(a.decision().allowed && b.decision().allowed);
        let full = now(service.spend("c", &options));
        assert!(
            matches!(full, Err(Error::StoreFull { max_keys: 2 })),
            "{full:?}"
        );
        assert!(now(a.refund()).unwrap(), "{strategy}");
        let store = service.memory_store().unwrap();
        assert_eq!(store.len(), 2);
        // Past the sweep's grace: the emptied key may go, the one with a spend stays.
        clock.advance(2 * SEC);
        if strategy == Strategy::FixedWindow {
            // An emptied fixed window keeps its start until the window ends (a caller whose
            // clock read predates it is decided in it, not in the window before): the key
            // stays, and a new key is still refused.
            let still = now(service.spend("c", &options));
            assert!(matches!(still, Err(Error::StoreFull { .. })), "{still:?}");
            continue;
        }
        // (A refunded bucket is full from the refund's instant, 2 s ago: swept too.)
        let c = now(service.spend("c", &options));
        assert!(c.as_ref().is_ok_and(|s| s.decision().allowed), "{c:?}");
        assert_eq!(store.len(), 2, "{strategy}");
        let again = now(service.spend("a", &options));
        assert!(
            matches!(again, Err(Error::StoreFull { .. })),
            "{strategy}: {again:?}"
        );
        assert!(now(b.refund()).unwrap(), "{strategy}");
        assert_eq!(drain(&service, "c", &options), 2, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// Reloads: the limit, the strategy.

fn config(limit: u64, strategy: Strategy) -> Config {
    Config::builder()
        .default_limit(limit)
        .default_window("1m")
        .strategy(strategy)
        .build()
        .unwrap()
}

/// Spends made under a fixed window, given back after a reload moved the limit to a sliding
/// log (another state, decided with the old one for one old window): each goes back to the
/// old state, and the two together admit exactly the limit again, no more.
#[test]
fn refunds_across_a_strategy_reload_admit_exactly_the_limit() {
    let (service, _clock) = memory(config(3, Strategy::FixedWindow));
    let options = Options::new();
    let held: Vec<_> = (0..3)
        .map(|_| now(service.spend("g", &options)).unwrap())
        .collect();
    service.reload(config(3, Strategy::SlidingWindow)).unwrap();
    assert_eq!(
        drain(&service, "g", &options),
        0,
        "the old window's spends count"
    );
    for spent in held {
        assert!(spent.refundable());
        assert!(now(spent.refund()).unwrap());
    }
    assert_eq!(drain(&service, "g", &options), 3);
    let late = now(service.spend("g", &options)).unwrap();
    assert!(!late.decision().allowed);
    assert!(!late.refundable());
}

/// A limit lowered from 5 to 2 on the same state: 5 spends given back after the reload leave
/// exactly 2 to admit; a limit raised from 2 to 4 during the old window: 2 spends given back
/// leave exactly the old limit until the old window ends, then the new one.
#[test]
fn refunds_across_a_limit_reload_never_exceed_the_limit_in_force() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory(config(5, strategy));
        let options = Options::new();
        let held: Vec<_> = (0..5)
            .map(|_| now(service.spend("h", &options)).unwrap())
            .collect();
        service.reload(config(2, strategy)).unwrap();
        for spent in held {
            assert!(now(spent.refund()).unwrap(), "{strategy}");
        }
        assert_eq!(drain(&service, "h", &options), 2, "{strategy}");

        let (service, clock) = memory(config(2, strategy));
        let held: Vec<_> = (0..2)
            .map(|_| now(service.spend("i", &options)).unwrap())
            .collect();
        service.reload(config(4, strategy)).unwrap();
        for spent in held {
            assert!(now(spent.refund()).unwrap(), "{strategy}");
        }
        let during = drain(&service, "i", &options);
        assert_eq!(
            during, 2,
            "{strategy}: admitted under the old limit's window"
        );
        clock.advance(180 * SEC);
        assert_eq!(drain(&service, "i", &options), 4, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency: refunds racing spends on many keys and threads, and the stats.

/// Four threads spend on eight keys and give back all but a few spends, racing each other:
/// the spends held on a key never exceed its limit, and at the end each key has exactly its
/// limit less what was kept; the stats count every admission and every refund exactly, in the
/// total and in the budget.
#[test]
fn refunds_racing_spends_on_many_keys_keep_exact_budgets_and_stats() {
    const KEYS: usize = 8;
    const LIMIT: usize = 4;
    for strategy in Strategy::ALL {
        let (service, _clock) = plain();
        let options = per(LIMIT as u64, 3600 * SEC, strategy).budget("race");
        let held: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
        let kept: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
        let (admitted, refunded) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (service, options, held, kept) = (&service, &options, &held, &kept);
                let (admitted, refunded) = (&admitted, &refunded);
                scope.spawn(move || {
                    for round in 0..3_000usize {
                        let k = (thread * 7 + round) % KEYS;
                        let key = format!("key-{k}");
                        let mut spent = now(service.spend(&key, options)).unwrap();
                        if !spent.decision().allowed {
                            assert!(!spent.refundable());
                            continue;
                        }
                        admitted.fetch_add(1, Ordering::SeqCst);
                        let now_held = held[k].fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now_held <= LIMIT, "{strategy}: {now_held} held on {key}");
                        if round % 1_009 == thread {
                            kept[k].fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        held[k].fetch_sub(1, Ordering::SeqCst);
                        assert!(spent.refund_now().unwrap().unwrap(), "{strategy}");
                        refunded.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        for (k, kept) in kept.iter().enumerate() {
            let kept = kept.load(Ordering::SeqCst);
            let key = format!("key-{k}");
            let left = remaining(&service, &key, &options);
            assert_eq!(left, (LIMIT - kept) as u64, "{strategy}: {key}");
        }
        let stats = service.stats();
        assert_eq!(
            stats.total.allowed,
            admitted.load(Ordering::SeqCst),
            "{strategy}"
        );
        assert_eq!(
            stats.total.refunded,
            refunded.load(Ordering::SeqCst),
            "{strategy}"
        );
        assert_eq!(
            stats.by_method["race"].refunded,
            refunded.load(Ordering::SeqCst),
            "{strategy}"
        );
    }
}

/// Stacked spends (a per-user limit and one shared by all) given back while single spends on
/// the shared key race them: the shared key never holds more than its limit, and ends with
/// exactly its limit less the spends kept, each user's likewise.
#[test]
fn stacked_refunds_racing_single_spends_keep_the_shared_budget_exact() {
    for strategy in Strategy::ALL {
        let (service, _clock) = plain();
        let user = per(3, 3600 * SEC, strategy).budget("user");
        let shared = per(6, 3600 * SEC, strategy).budget("shared");
        let held = AtomicUsize::new(0);
        let kept_shared = AtomicUsize::new(0);
        let kept_user: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (service, user, shared) = (&service, &user, &shared);
                let (held, kept_shared, kept_user) = (&held, &kept_shared, &kept_user);
                scope.spawn(move || {
                    let me = format!("u{thread}");
                    for round in 0..2_000usize {
                        let keep = round % 997 == 5;
                        if round % 2 == 0 {
                            let limits = [(me.as_str(), user), ("all", shared)];
                            let mut spent = now(service.spend_all(&limits)).unwrap();
                            if !spent.decisions().iter().all(|d| d.allowed) {
                                assert!(!spent.refundable());
                                continue;
                            }
                            let h = held.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(h <= 6, "{strategy}: {h} held on the shared key");
                            if keep {
                                kept_shared.fetch_add(1, Ordering::SeqCst);
                                kept_user[thread].fetch_add(1, Ordering::SeqCst);
                                continue;
                            }
                            held.fetch_sub(1, Ordering::SeqCst);
                            assert!(spent.refund_now().unwrap().unwrap(), "{strategy}");
                        } else {
                            let mut spent = now(service.spend("all", shared)).unwrap();
                            if !spent.decision().allowed {
                                continue;
                            }
                            let h = held.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(h <= 6, "{strategy}: {h} held on the shared key");
                            if keep {
                                kept_shared.fetch_add(1, Ordering::SeqCst);
                                continue;
                            }
                            held.fetch_sub(1, Ordering::SeqCst);
                            assert!(spent.refund_now().unwrap().unwrap(), "{strategy}");
                        }
                    }
                });
            }
        });
        let kept = kept_shared.load(Ordering::SeqCst) as u64;
        assert_eq!(remaining(&service, "all", &shared), 6 - kept, "{strategy}");
        for (thread, kept) in kept_user.iter().enumerate() {
            let kept = kept.load(Ordering::SeqCst) as u64;
            let left = remaining(&service, &format!("u{thread}"), &user);
            assert_eq!(left, 3 - kept, "{strategy}: u{thread}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Annotated fns.

fn module(limit: u64) -> TestModule {
    TestModule::new(Module::builder().default_limit(limit).default_window("1m")).expect("module")
}

static OK_PANIC_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = user, count = "ok")]
fn ok_but_panics(user: &str) -> Result<(), Error> {
    let _ = user;
    OK_PANIC_RUNS.fetch_add(1, Ordering::SeqCst);
    panic!("no outcome");
}

/// `count = "ok"`: a body that panics has no outcome, so it is not a failure to give back: it
/// keeps its spend, and the third call is refused before the body.
#[test]
fn a_panicking_count_ok_body_keeps_its_spend() {
    let m = module(3);
    m.run(|| {
        for _ in 0..2 {
            assert!(std::panic::catch_unwind(|| ok_but_panics("p")).is_err());
        }
        assert!(matches!(ok_but_panics("p"), Err(Error::Exceeded(_))));
    });
    assert_eq!(OK_PANIC_RUNS.load(Ordering::SeqCst), 2);
    assert_eq!(m.stats().total.refunded, 0);
}

static OK_HANG_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = user, count = "ok")]
async fn ok_but_hangs(user: &str) -> Result<(), Error> {
    let _ = user;
    OK_HANG_RUNS.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

/// `count = "ok"`: a call cancelled mid-body keeps its spend too.
#[tokio::test]
async fn a_cancelled_count_ok_call_keeps_its_spend() {
    let m = module(3);
    m.scope(async {
        for _ in 0..2 {
            let call = tokio::time::timeout(Duration::from_millis(1), ok_but_hangs("q"));
            assert!(call.await.is_err());
        }
        let refused = futures::FutureExt::now_or_never(ok_but_hangs("q")).expect("at once");
        assert!(matches!(refused, Err(Error::Exceeded(_))), "{refused:?}");
    })
    .await;
    assert_eq!(OK_HANG_RUNS.load(Ordering::SeqCst), 2);
}

static STACKED_PANIC_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = user, count = "err")]
#[rate_limit(limit = 3, window = "1h", key = ip)]
fn stacked_panics(user: &str, ip: &str) -> Result<(), Error> {
    let _ = (user, ip);
    STACKED_PANIC_RUNS.fetch_add(1, Ordering::SeqCst);
    panic!("no outcome");
}

/// Stacked limits with `count = "err"`: a panicking body keeps its spend in both limits, so
/// the address's limit of 3 stops a fourth body from any user.
#[test]
fn a_panicking_stacked_body_keeps_both_spends() {
    let m = module(3);
    m.run(|| {
        for user in ["a", "a", "b"] {
            assert!(std::panic::catch_unwind(|| stacked_panics(user, "ip")).is_err());
        }
        assert!(matches!(stacked_panics("a", "ip"), Err(Error::Exceeded(_))));
        assert!(matches!(stacked_panics("c", "ip"), Err(Error::Exceeded(_))));
    });
    assert_eq!(STACKED_PANIC_RUNS.load(Ordering::SeqCst), 3);
}

static CODE_FAILURES: AtomicU32 = AtomicU32::new(0);
static CODE_SUCCESSES: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, PartialEq)]
enum CodeError {
    Wrong,
    Limited,
}

impl From<Error> for CodeError {
    fn from(e: Error) -> Self {
        assert!(matches!(e, Error::Exceeded(_)), "{e}");
        CodeError::Limited
    }
}

#[rate_limit(limit = 5, window = "1m", key = user, count = "err")]
fn check_code(user: &str, code: u32) -> Result<(), CodeError> {
    let _ = user;
    if code.is_multiple_of(2) {
        CODE_SUCCESSES.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
    CODE_FAILURES.fetch_add(1, Ordering::SeqCst);
    Err(CodeError::Wrong)
}

/// A sync `count = "err"` fn called from four threads at once, half its calls failing: the
/// failures that run are exactly the limit in the window, every success before the last
/// failure runs and is given back, and the stats count each refund.
#[test]
fn a_sync_count_err_fn_on_four_threads_runs_exactly_the_limit_of_failures() {
    let m = module(3);
    let limited = AtomicU32::new(0);
    std::thread::scope(|scope| {
        for thread in 0..4u32 {
            let (m, limited) = (&m, &limited);
            scope.spawn(move || {
                m.run(|| {
                    for round in 0..500u32 {
                        match check_code("r", thread + round) {
                            Ok(()) | Err(CodeError::Wrong) => {}
                            Err(CodeError::Limited) => {
                                limited.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                });
            });
        }
    });
    let (failures, successes) = (
        CODE_FAILURES.load(Ordering::SeqCst),
        CODE_SUCCESSES.load(Ordering::SeqCst),
    );
    assert_eq!(failures, 5);
    assert_eq!(failures + successes + limited.load(Ordering::SeqCst), 2_000);
    let stats = m.stats();
    assert_eq!(stats.total.refunded, u64::from(successes));
    assert_eq!(stats.total.allowed, u64::from(failures + successes));
}

// ---------------------------------------------------------------------------------------------
// A `Spent` outliving its module; shadow limits; a failover; the stamps.

/// A spend from a module that was dropped and replaced gives back to its own store only: the
/// new module's budget, spent to nothing, stays spent.
#[test]
fn a_spent_outliving_its_module_never_reaches_the_next_one() {
    let first = module(2);
    let options = Options::new();
    let old = now(first.service().spend("s", &options)).unwrap();
    drop(first);
    let second = module(2);
    assert_eq!(drain(second.service(), "s", &options), 2);
    assert!(
        now(old.refund()).unwrap(),
        "given back to the first module's store"
    );
    assert_eq!(drain(second.service(), "s", &options), 0);
    assert_eq!(second.stats().total.refunded, 0);
}

/// A shadow limit beside an enforced one with the same settings: whatever the shadow limit's
/// spends and refunds do, the enforced budget spent to nothing stays spent, and a shadowed
/// call (one the shadow limit would have refused) is never given back.
#[test]
fn shadow_refunds_never_free_the_enforced_budget() {
    for strategy in Strategy::ALL {
        let (service, _clock) = plain();
        let enforced = per(2, 60 * SEC, strategy).budget("sh");
        let shadow = enforced.clone().shadow(true);
        let held: Vec<_> = (0..2)
            .map(|_| now(service.spend("t", &enforced)).unwrap())
            .collect();
        let mut shadowed = 0;
        for _ in 0..4 {
            let spent = now(service.spend("t", &shadow)).unwrap();
            assert!(
                spent.decision().allowed,
                "{strategy}: a shadow limit refuses nothing"
            );
            if spent.decision().shadowed {
                shadowed += 1;
                assert!(!spent.refundable(), "{strategy}");
            } else {
                assert!(now(spent.refund()).unwrap(), "{strategy}");
            }
        }
        assert!(shadowed > 0, "{strategy}: the shadow limit never went over");
        assert!(
            !now(service.consume("t", &enforced)).unwrap().allowed,
            "{strategy}"
        );
        for spent in held {
            assert!(now(spent.refund()).unwrap(), "{strategy}");
        }
        assert_eq!(drain(&service, "t", &enforced), 2, "{strategy}");
    }
}

/// The memory store behind a store of one's own that can be taken away: decisions and
/// refunds fail while it is away.
struct Flaky {
    memory: MemoryStore,
    away: Arc<AtomicBool>,
}

impl Flaky {
    fn check(&self) -> Result<(), Error> {
        match self.away.load(Ordering::SeqCst) {
            true => Err(Error::Store {
                message: "away".into(),
            }),
            false => Ok(()),
        }
    }
}

impl Store for Flaky {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.check()?;
        Store::decide(&self.memory, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.check()?;
        Store::decide_all(&self.memory, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.check()?;
        Store::reset(&self.memory, key).await
    }
    fn refunds(&self) -> bool {
        true
    }
    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.check()?;
        Store::refund(&self.memory, refund).await
    }
    async fn refund_all(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.check()?;
        Store::refund_all(&self.memory, refunds).await
    }
}

/// A failover with a local share: a spend the store made is given back to the store; one the
/// local share made while the store was away is never given back, not even once the store is
/// back (its stamp would otherwise be checked against the store's own stamps, which also
/// start at 1); a refund while the store is away is an error and the spend stays.
#[test]
fn a_failovers_local_spends_never_reach_the_store_and_failed_refunds_keep_the_spend() {
    let away = Arc::new(AtomicBool::new(false));
    let flaky = Flaky {
        memory: MemoryStore::new(),
        away: Arc::clone(&away),
    };
    let store = Failover::new(flaky, FailurePolicy::Local { pods: 1 });
    let clock = ManualClock::new(START);
    let config = Config::builder()
        .default_limit(3)
        .default_window("1m")
        .build()
        .unwrap();
    let service = RateLimitService::with_store(config, store, Arc::new(clock)).unwrap();
    let options = Options::new();
    let first = now(service.spend("v", &options)).unwrap();
    let second = now(service.spend("v", &options)).unwrap();
    assert!(first.refundable() && second.refundable());
    away.store(true, Ordering::SeqCst);
    let local = now(service.spend("v", &options)).unwrap();
    assert!(local.decision().allowed);
    assert!(!local.refundable());
    let failed = now(first.refund());
    assert!(matches!(failed, Err(Error::Store { .. })), "{failed:?}");
    away.store(false, Ordering::SeqCst);
    assert!(!now(local.refund()).unwrap());
    // The store still holds both of its spends (the failed refund kept the first).
    assert_eq!(drain(&service, "v", &options), 1);
    assert!(now(second.refund()).unwrap());
    assert_eq!(drain(&service, "v", &options), 1);
    assert_eq!(service.stats().total.refunded, 1);
}

/// The memory store behind a store of one's own that records each refund's stamp.
struct Recording {
    memory: MemoryStore,
    stamps: Arc<Mutex<Vec<u64>>>,
}

impl Store for Recording {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        Store::decide(&self.memory, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.memory, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.memory, key).await
    }
    fn refunds(&self) -> bool {
        true
    }
    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.stamps.lock().unwrap().push(refund.stamp());
        Store::refund(&self.memory, refund).await
    }
}

/// Stamps are never 0 and never given twice: 2,000 keys on four strategies, and one key reset
/// and made again 500 times; each refund of a key's latest state gives back.
#[test]
fn stamps_are_unique_across_many_keys_and_recreations() {
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let recording = Recording {
        memory: MemoryStore::new(),
        stamps: Arc::clone(&stamps),
    };
    let clock = ManualClock::new(START);
    let service =
        RateLimitService::with_store(Config::default(), recording, Arc::new(clock)).unwrap();
    for i in 0..2_000 {
        let options = per(3, 60 * SEC, Strategy::ALL[i % 4]);
        let spent = now(service.spend(&format!("key-{i}"), &options)).unwrap();
        assert!(now(spent.refund()).unwrap());
    }
    let options = per(3, 60 * SEC, Strategy::FixedWindow);
    for _ in 0..500 {
        let spent = now(service.spend("again", &options)).unwrap();
        assert!(now(service.reset_with("again", &options)).unwrap());
        let spent_again = now(service.spend("again", &options)).unwrap();
        assert!(!now(spent.refund()).unwrap());
        assert!(now(spent_again.refund()).unwrap());
        assert!(now(service.reset_with("again", &options)).unwrap());
    }
    let stamps = stamps.lock().unwrap();
    assert_eq!(stamps.len(), 3_000);
    assert!(!stamps.contains(&0));
    let distinct: HashSet<u64> = stamps.iter().copied().collect();
    // Each pair of the 500 is an old stamp and a new one, all different.
    assert_eq!(distinct.len(), 3_000);
}

// ---------------------------------------------------------------------------------------------
// The token bucket's late refund through an annotated fn.

static SLOW_FAILURES: AtomicU32 = AtomicU32::new(0);
static SLOW_STARTED: AtomicU32 = AtomicU32::new(0);
/// Holds the successful calls of `slow_login` until the test lets them go.
static SLOW_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[derive(Debug, PartialEq)]
enum SlowError {
    Wrong,
    Limited,
}

impl From<Error> for SlowError {
    fn from(_: Error) -> Self {
        SlowError::Limited
    }
}

/// Ten failures per 10 s as a token bucket (one back a second); a success (which takes a
/// while) does not count.
#[rate_limit(limit = 10, window = "10s", key = user, count = "err", strategy = "token-bucket")]
async fn slow_login(user: &str, right: bool) -> Result<(), SlowError> {
    let _ = user;
    if right {
        SLOW_STARTED.fetch_add(1, Ordering::SeqCst);
        SLOW_GATE.acquire().await.expect("open").forget();
        return Ok(());
    }
    SLOW_FAILURES.fetch_add(1, Ordering::SeqCst);
    Err(SlowError::Wrong)
}

/// A success that took 999 ms is given back 1 ms before its token refilled: the bucket moves
/// back a whole token, and 11 failing bodies run within 1 ms against a bucket of 10 (10
/// without the success).
#[tokio::test]
async fn a_late_success_never_lets_more_failures_run_than_the_bucket_holds() {
    let m = module(3);
    let success = tokio::spawn(m.scope(slow_login("z", true)));
    while SLOW_STARTED.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let fail_all = || {
        m.scope(async {
            let mut ran = 0;
            while slow_login("z", false).await == Err(SlowError::Wrong) {
                ran += 1;
            }
            ran
        })
    };
    m.clock().set(START + Duration::from_millis(999));
    let mut failures = fail_all().await;
    assert_eq!(failures, 9);
    SLOW_GATE.add_permits(1);
    assert_eq!(success.await.unwrap(), Ok(()));
    failures += fail_all().await;
    m.clock().set(START + SEC);
    failures += fail_all().await;
    assert_eq!(SLOW_FAILURES.load(Ordering::SeqCst), failures);
    assert!(
        failures <= 10,
        "{failures} failing bodies ran within 1 ms, limit 10"
    );
}
