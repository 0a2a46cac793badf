//! Probes of the last shortcuts on the hot path (the six commits after `cae4df4`):
//!
//! 1. the memory store's one compare of a call's time with its next sweep (`next_sweep` capped
//!    at `MAX_NOW + 1`, a time past `MAX_NOW` refused on the cold sweep step): times at and
//!    around `MAX_NOW` and `u64::MAX`, sweep intervals of 0, 1 ns, huge and `Duration::MAX`,
//!    zero capacities, blocks and looks at such times, racing threads, a service's spends,
//!    refunds and adjustments on a `ManualClock` past the range;
//! 2. the fixed-window cell that reuses its recorded start inside its window: boundaries at
//!    `start + window` and a nanosecond before, windows that do not divide a day, a clock
//!    stepped back, one bare key under two windows, refunds and adjustments, near `MAX_NOW`;
//! 3. the decision made inside the strategy's step (and `decision_aside` for zero capacity,
//!    blocks and looks): every field of every mode and strategy against the same calls decided
//!    through `StoredState` (the generic algorithms), a full store, a key held under another
//!    strategy, a kept spend refunded;
//! 4. annotated fns' user keys lent from a `KeySlot` (integers read where `itoa` wrote them),
//!    copied into a `Later` only when the call waits (the queue, a store that answers later),
//!    `acquire_tier` for a tier chosen per call, refusals mapped out of line: every integer
//!    type at its bounds, strings empty or too long, keys with side effects or temporaries,
//!    look-alike integer and string keys, costs, sync fns, two modules on one thread. Each
//!    annotated call is compared with the same key composed by hand (`service.consume_now`
//!    under the fn's budget): they must share one budget exactly.
//!
//! Each test is named after the way through it guards against, with exact counts.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use ratelimit::store::{
    Adjustment, Check, Mode, Refund, Request, Stacked, Store, StoreKey, StoredState,
};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, MemoryOptions, MemoryStore, Module, ModuleBuilder,
    Options, Quota, StoreConfig, Strategy, Tier, MAX_KEY_LEN, MAX_WINDOW,
};
use ratelimit_tests::{now as block_on, service};

const NS: u64 = 1_000_000_000;
/// The latest time the algorithms decide at (`algorithm::MAX_NOW`, about the year 2226).
const MAX_NOW: u64 = (1 << 63) - (1 << 60);
/// A whole day's second: 1 s, 1 min and 1 h windows start here.
const T0: u64 = 20_000 * 86_400 * NS;
const MINUTE: Duration = Duration::from_secs(60);

fn quota(limit: u64, window: Duration, strategy: Strategy) -> Quota {
    Quota::new(limit, window).unwrap().with_strategy(strategy)
}

/// A span as a decision gives it: whole milliseconds, rounded up.
fn ceil_ms(nanos: u64) -> Duration {
    Duration::from_millis(nanos.div_ceil(1_000_000))
}

fn store_with(every: Duration) -> MemoryStore {
    MemoryStore::with_options(MemoryOptions::default().sweep_interval(every))
}

fn out_of_range<T: fmt::Debug>(r: &Result<T, Error>, at: u64) -> bool {
    matches!(r, Err(Error::ClockOutOfRange { now_nanos }) if *now_nanos == at)
}

fn allowed(store: &MemoryStore, key: &str, q: &Quota, now: u64, n: usize) -> usize {
    (0..n)
        .filter(|_| store.acquire(key, q, 1, now).unwrap().allowed)
        .count()
}

// ---------------------------------------------------------------------------------------------
// 1. One compare of the time: the sweep's.

const INTERVALS: [Duration; 6] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_secs(1),
    Duration::from_secs(1 << 40),
    Duration::from_nanos(u64::MAX),
    Duration::MAX,
];

/// Every way a memory decision enters with a time: spends, looks of a cost and of none, a
/// capacity of zero, a quota with a block.
fn every_entry(
    store: &MemoryStore,
    key: &str,
    strategy: Strategy,
    at: u64,
) -> Vec<Result<Decision, Error>> {
    let q = quota(2, MINUTE, strategy);
    let zero = Quota::new(0, MINUTE).unwrap().with_strategy(strategy);
    let blocked = q.with_block(MINUTE).unwrap();
    let k = StoreKey::new(key).unwrap();
    vec![
        store.acquire(key, &q, 1, at),
        store.peek(key, &q, 1, at),
        store.peek(key, &q, 0, at),
        store.acquire(key, &zero, 1, at),
        store.peek(key, &zero, 0, at),
        store.acquire(key, &blocked, 1, at),
        store.peek(key, &blocked, 0, at),
        Store::decide_now(store, Request::new(k, &q, 1, at, Mode::Keep).unwrap()).unwrap(),
        Store::decide_now(store, Request::look(k, &q, 0, at).unwrap()).unwrap(),
    ]
}

#[test]
fn a_time_past_the_range_after_a_sweep_at_its_last_instant_is_refused_under_every_sweep_interval() {
    // With `next_sweep` set past `MAX_NOW + 1` (an interval added uncapped), a time past the
    // range would skip the one compare and be decided (or overflow the floor).
    for every in INTERVALS {
        for strategy in Strategy::ALL {
            let store = store_with(every);
            assert_eq!(
                allowed(&store, "k", &quota(2, MINUTE, strategy), MAX_NOW, 1),
                1
            );
            // Sweeps run by hand move the floor, not `next_sweep`: the compare still refuses.
            store.sweep(MAX_NOW);
            store.sweep(u64::MAX);
            for past in [MAX_NOW + 1, MAX_NOW + 2, u64::MAX - 1, u64::MAX] {
                for (i, r) in every_entry(&store, "k", strategy, past).iter().enumerate() {
                    assert!(
                        out_of_range(r, past),
                        "{every:?} {strategy} entry {i}: {r:?}"
                    );
                }
                for (i, r) in every_entry(&store, "new", strategy, past)
                    .iter()
                    .enumerate()
                {
                    assert!(out_of_range(r, past), "{every:?} {strategy} new {i}: {r:?}");
                }
            }
            assert_eq!(
                store.len(),
                1,
                "{every:?} {strategy}: nothing tracked past the range"
            );
            let q = quota(2, MINUTE, strategy);
            assert_eq!(
                allowed(&store, "k", &q, MAX_NOW, 3),
                1,
                "{every:?} {strategy}"
            );
        }
    }
}

#[test]
fn a_fresh_stores_first_call_past_the_range_is_refused_and_tracks_nothing() {
    // `next_sweep` starts at 0: the first call takes the cold step whatever its time.
    for every in INTERVALS {
        for strategy in Strategy::ALL {
            let store = store_with(every);
            for (i, r) in every_entry(&store, "k", strategy, u64::MAX)
                .iter()
                .enumerate()
            {
                assert!(
                    out_of_range(r, u64::MAX),
                    "{every:?} {strategy} entry {i}: {r:?}"
                );
            }
            assert_eq!(store.len(), 0);
            // The refused times moved no sweep: the store still decides from its first time.
            let q = quota(3, MINUTE, strategy);
            assert_eq!(allowed(&store, "k", &q, T0, 5), 3, "{every:?} {strategy}");
        }
    }
}

#[test]
fn threads_racing_at_the_last_instant_and_past_it_admit_exactly_the_limit() {
    // Racing sweeps (the exchange lost by all but one) must neither admit past the range nor
    // lose the refusal of a time out of it.
    for strategy in Strategy::ALL {
        let store = store_with(Duration::ZERO);
        let q = quota(5, MAX_WINDOW, strategy);
        let (ok, refused, out) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let barrier = Barrier::new(4);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (store, q, barrier) = (&store, &q, &barrier);
                let (ok, refused, out) = (&ok, &refused, &out);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..50u64 {
                        let at = match (t + i) % 3 {
                            0 => MAX_NOW,
                            1 => MAX_NOW + 1 + i,
                            _ => u64::MAX - i,
                        };
                        match store.acquire("k", q, 1, at) {
                            Ok(d) if d.allowed => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(_) => {
                                refused.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::ClockOutOfRange { .. }) if at > MAX_NOW => {
                                out.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => panic!("{strategy} at {at}: {e}"),
                        }
                    }
                });
            }
        });
        let in_range: usize = (0..4u64)
            .map(|t| (0..50u64).filter(|i| (t + i) % 3 == 0).count())
            .sum();
        assert_eq!(ok.load(Ordering::SeqCst), 5, "{strategy}");
        assert_eq!(refused.load(Ordering::SeqCst), in_range - 5, "{strategy}");
        assert_eq!(out.load(Ordering::SeqCst), 200 - in_range, "{strategy}");
    }
}

#[test]
fn a_clock_stepped_back_behind_a_sweep_under_a_zero_interval_is_decided_at_the_floor() {
    // Every call sweeps under a zero interval: a key dropped by a sweep must not be found
    // fresh by a call whose clock stepped back before that sweep's floor.
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowCounter,
        Strategy::SlidingWindow,
    ] {
        let store = store_with(Duration::ZERO);
        let q = quota(1, Duration::from_secs(10), strategy);
        // Spent at T0 + 20 s; a later call at T0 + 100 s sweeps, dropping "a" (the floor: its
        // end).
        assert_eq!(allowed(&store, "a", &q, T0 + 20 * NS, 1), 1);
        assert_eq!(allowed(&store, "b", &q, T0 + 100 * NS, 1), 1);
        // Stepped back to T0 + 20 s: "b" is decided at the floor, in its own window, spent.
        assert_eq!(allowed(&store, "b", &q, T0 + 20 * NS, 3), 0, "{strategy}");
        // "a" was dropped; stepped back, it is fresh at the floor once, not once per step.
        let back: usize = (0..5)
            .map(|i| allowed(&store, "a", &q, T0 + (20 + i) * NS, 1))
            .sum();
        assert_eq!(back, 1, "{strategy}");
    }
}

/// A service of `n` a minute under `strategy`, on a hand-driven clock.
fn per_minute(n: u64, strategy: Strategy) -> (ratelimit::RateLimitService, ratelimit::ManualClock) {
    service(
        Config::builder()
            .default_limit(n)
            .default_window("1m")
            .strategy(strategy)
            .build()
            .unwrap(),
    )
}

#[test]
fn a_service_on_a_clock_past_the_range_refuses_spends_refunds_and_adjustments_and_stays_exact() {
    for strategy in Strategy::ALL {
        let (service, clock) = per_minute(2, strategy);
        let options = Options::new();
        let spent = block_on(service.spend("k", &options)).unwrap();
        for past in [MAX_NOW + 1, u64::MAX] {
            clock.set(Duration::from_nanos(past));
            for r in [
                block_on(service.consume("k", &options)).map(|d| d.allowed),
                block_on(service.status("k", &options)).map(|d| d.allowed),
                service
                    .consume_now("k", &options)
                    .unwrap()
                    .map(|d| d.allowed),
                block_on(service.penalize("k", &options, 1)).map(|_| true),
                block_on(service.reward("k", &options, 1)).map(|_| true),
            ] {
                assert!(
                    matches!(r, Err(Error::ClockOutOfRange { .. })),
                    "{strategy}: {r:?}"
                );
            }
        }
        // Back in range: the refund is made at the clock's latest reading (past the range),
        // so it gives nothing back; decisions at the clock's time count the spend, exactly.
        clock.set(ratelimit_tests::START + Duration::from_secs(1));
        let refund = block_on(spent.refund());
        assert!(
            matches!(refund, Err(Error::ClockOutOfRange { .. })),
            "{strategy}: {refund:?}"
        );
        let admitted = (0..4)
            .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
            .count();
        assert_eq!(admitted, 1, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2 & 3. Decisions against the generic algorithms (`StoredState`), field by field.

/// The reference: one `StoredState` per key, decided by the algorithms' own `decide`.
#[derive(Default)]
struct Reference(HashMap<String, StoredState>);

impl Reference {
    fn decide(&mut self, request: &Request<'_>) -> Result<Decision, Error> {
        let key = request.key().as_str().to_owned();
        let mut state = match self.0.get(&key) {
            Some(state) => state.clone(),
            None => StoredState::new(request.quota()),
        };
        let decision = state.decide(request)?;
        if request.spends() && decision.allowed {
            self.0.insert(key, state);
        }
        Ok(decision)
    }
}

/// A walk of times from `start` (the first): inside windows, at `start + window` and a nanosecond
/// before, past a window, stepped back (never before `start`), capped at `MAX_NOW`.
fn times(start: u64, window: u64, n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    let mut at = start;
    // The first call at `start`: its sweep drops nothing, so no floor is after any call.
    let mut out = vec![start];
    for _ in 1..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let step = match x % 9 {
            0 => 0,
            1 => 1,
            2 => window - 1,
            3 => window,
            4 => window + 1,
            5 => window - at % window, // to the next boundary
            6 => window - at % window - 1,
            7 => 2 * window + 3,
            _ => 0,
        };
        at = match x % 11 {
            // Stepped back a little (never before the first call: its sweep's floor).
            10 => at.saturating_sub(x % (2 * window)).max(start),
            _ => at.saturating_add(step).min(MAX_NOW),
        };
        out.push(at);
    }
    out
}

#[test]
fn every_strategy_and_mode_decides_every_field_as_the_generic_algorithms_do() {
    // The decision made inside the step (or aside) must say what the algorithm says: a field
    // made from the wrong time, or a look's verdict read as a spend's, would differ here.
    let windows = [
        Duration::from_secs(1),
        Duration::from_secs(7),
        Duration::from_nanos(7),
        Duration::from_millis(1500),
        MINUTE,
        MAX_WINDOW,
    ];
    for strategy in Strategy::ALL {
        for window in windows {
            for limit in [1, 3] {
                let Ok(q) = Quota::new(limit, window) else {
                    continue;
                };
                let q = q.with_strategy(strategy);
                let w = window.as_nanos() as u64;
                for start in [T0 + 13, MAX_NOW - 4 * w.min(MAX_NOW / 8)] {
                    let memory = store_with(Duration::from_secs(1 << 40));
                    let mut reference = Reference::default();
                    for (i, at) in times(start, w, 300, w ^ start).into_iter().enumerate() {
                        let key = ["a", "b"][i % 2];
                        let k = StoreKey::new(key).unwrap();
                        let (mode, cost) = match i % 7 {
                            0..=2 => (Mode::Spend, 1),
                            3 => (Mode::Keep, 1),
                            4 => (Mode::Look, 1),
                            5 => (Mode::Look, 0),
                            _ => (Mode::Spend, limit),
                        };
                        let request = Request::new(k, &q, cost, at, mode).unwrap();
                        let want = reference.decide(&request);
                        let got = match i % 3 {
                            0 => Store::decide_now(&memory, request).unwrap(),
                            1 if mode == Mode::Spend => memory.acquire(key, &q, cost, at),
                            1 if mode == Mode::Look => memory.peek(key, &q, cost, at),
                            _ => block_on(Store::decide(&memory, request)),
                        };
                        // `Decision`'s `==` leaves out the receipt (only the memory store
                        // stamps a kept spend); an error must be the same error.
                        let same = match (&got, &want) {
                            (Ok(got), Ok(want)) => got == want,
                            (Err(got), Err(want)) => got.to_string() == want.to_string(),
                            _ => false,
                        };
                        assert!(
                            same,
                            "{strategy} {window:?} limit {limit} call {i} at {at} {mode:?} cost {cost}: {got:?} against {want:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_capacity_of_zero_is_refused_at_the_calls_own_time_in_every_mode_and_tracks_nothing() {
    for strategy in Strategy::ALL {
        let store = store_with(Duration::from_secs(1 << 40));
        let zero = Quota::new(0, MINUTE).unwrap().with_strategy(strategy);
        for at in [T0, T0 + 1, MAX_NOW] {
            for mode in [Mode::Spend, Mode::Keep, Mode::Look] {
                let cost = if mode == Mode::Look { 0 } else { 1 };
                let k = StoreKey::new("z").unwrap();
                let d = Store::decide_now(&store, Request::new(k, &zero, cost, at, mode).unwrap())
                    .unwrap()
                    .unwrap();
                assert!(!d.allowed, "{strategy} {mode:?}");
                assert_eq!(
                    (d.remaining, d.limit, d.reset_after, d.retry_after),
                    (0, 0, MINUTE, Some(MINUTE)),
                    "{strategy} {mode:?} at {at}"
                );
            }
        }
        assert_eq!(store.len(), 0, "{strategy}");
    }
}

#[test]
fn a_block_refuses_every_mode_until_it_ends_and_then_the_budget_is_exact() {
    for strategy in Strategy::ALL {
        let store = store_with(Duration::from_secs(1 << 40));
        let q = quota(2, Duration::from_secs(10), strategy)
            .with_block(MINUTE)
            .unwrap();
        assert_eq!(allowed(&store, "k", &q, T0, 3), 2, "{strategy}");
        // The third call began a block of a minute from T0.
        for at in [T0 + 1, T0 + 30 * NS, T0 + 60 * NS - 1] {
            let k = StoreKey::new("k").unwrap();
            for (mode, cost) in [
                (Mode::Spend, 1),
                (Mode::Keep, 1),
                (Mode::Look, 1),
                (Mode::Look, 0),
            ] {
                let d = Store::decide_now(&store, Request::new(k, &q, cost, at, mode).unwrap())
                    .unwrap()
                    .unwrap();
                assert!(!d.allowed, "{strategy} {mode:?} cost {cost} at {at}");
                assert_eq!(
                    d.retry_after,
                    Some(ceil_ms(T0 + 60 * NS - at)),
                    "{strategy} {mode:?}"
                );
            }
        }
        assert_eq!(allowed(&store, "k", &q, T0 + 60 * NS, 3), 2, "{strategy}");
    }
}

#[test]
fn a_full_store_refuses_a_new_key_in_every_spending_mode_and_a_look_tracks_nothing() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::with_options(MemoryOptions::default().max_keys(1));
        let q = quota(2, MINUTE, strategy);
        assert_eq!(allowed(&store, "a", &q, T0, 1), 1);
        let k = StoreKey::new("b").unwrap();
        for mode in [Mode::Spend, Mode::Keep] {
            let r = Store::decide_now(&store, Request::new(k, &q, 1, T0, mode).unwrap()).unwrap();
            assert!(
                matches!(r, Err(Error::StoreFull { max_keys: 1 })),
                "{strategy} {mode:?}: {r:?}"
            );
        }
        let r = store.acquire("b", &q, 1, T0);
        assert!(
            matches!(r, Err(Error::StoreFull { .. })),
            "{strategy}: {r:?}"
        );
        for cost in [0, 1] {
            let d = store.peek("b", &q, cost, T0).unwrap();
            assert!(d.allowed && d.remaining == 2 - cost, "{strategy}: {d:?}");
        }
        assert_eq!(store.len(), 1);
        assert_eq!(allowed(&store, "a", &q, T0, 3), 1, "{strategy}");
    }
}

#[test]
fn a_key_held_under_another_strategy_is_unexpected_state_in_every_mode() {
    for held in Strategy::ALL {
        for asked in Strategy::ALL.into_iter().filter(|s| *s != held) {
            let store = store_with(Duration::from_secs(1 << 40));
            assert_eq!(allowed(&store, "k", &quota(2, MINUTE, held), T0, 1), 1);
            let q = quota(2, MINUTE, asked);
            let k = StoreKey::new("k").unwrap();
            for (mode, cost) in [
                (Mode::Spend, 1),
                (Mode::Keep, 1),
                (Mode::Look, 1),
                (Mode::Look, 0),
            ] {
                let r = Store::decide_now(&store, Request::new(k, &q, cost, T0, mode).unwrap())
                    .unwrap();
                assert!(
                    matches!(r, Err(Error::UnexpectedState { .. })),
                    "{held} asked as {asked} {mode:?} cost {cost}: {r:?}"
                );
            }
            assert_eq!(allowed(&store, "k", &quota(2, MINUTE, held), T0, 3), 1);
        }
    }
}

#[test]
fn a_kept_spend_is_given_back_once_and_only_to_its_own_state() {
    for strategy in Strategy::ALL {
        let (service, _clock) = per_minute(2, strategy);
        let options = Options::new();
        let first = block_on(service.spend("k", &options)).unwrap();
        let second = block_on(service.spend("k", &options)).unwrap();
        assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
        assert!(block_on(first.refund()).unwrap(), "{strategy}");
        assert!(block_on(service.consume("k", &options)).unwrap().allowed);
        assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
        // Reset: the second spend's state is gone; its refund gives nothing to the new one.
        assert!(block_on(service.reset_with("k", &options)).unwrap());
        assert_eq!(
            (0..2)
                .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
                .count(),
            2
        );
        assert!(!block_on(second.refund()).unwrap(), "{strategy}");
        assert!(
            !block_on(service.consume("k", &options)).unwrap().allowed,
            "{strategy}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The fixed-window cell's recorded start.

fn fixed(limit: u64, window: Duration) -> Quota {
    quota(limit, window, Strategy::FixedWindow)
}

#[test]
fn a_fixed_window_counts_up_to_a_nanosecond_before_its_end_and_starts_afresh_exactly_at_it() {
    for window in [Duration::from_nanos(3), Duration::from_secs(7), MAX_WINDOW] {
        let w = window.as_nanos() as u64;
        for base in [T0, MAX_NOW - MAX_NOW % w - 2 * w] {
            let start = base - base % w;
            let store = store_with(Duration::from_secs(1 << 40));
            let q = fixed(2, window);
            assert_eq!(allowed(&store, "k", &q, start + w / 2, 1), 1);
            let last = store.acquire("k", &q, 1, start + w - 1).unwrap();
            assert!(last.allowed, "{window:?}");
            assert_eq!(last.reset_after, ceil_ms(1), "{window:?}");
            let over = store.acquire("k", &q, 1, start + w - 1).unwrap();
            assert!(!over.allowed);
            assert_eq!(over.retry_after, Some(ceil_ms(1)));
            // Stepped back to the window's first instant: still this window, spent.
            assert_eq!(allowed(&store, "k", &q, start, 2), 0, "{window:?}");
            // At the end exactly: the next window, its own budget and its own end.
            let next = store.acquire("k", &q, 1, start + w).unwrap();
            assert!(next.allowed && next.remaining == 1, "{window:?}: {next:?}");
            assert_eq!(next.reset_after, ceil_ms(w));
            assert_eq!(allowed(&store, "k", &q, start + 2 * w - 1, 3), 1);
            // Stepped back into the first window: decided in the recorded one, spent.
            assert_eq!(allowed(&store, "k", &q, start + w - 1, 2), 0, "{window:?}");
        }
    }
}

#[test]
fn a_fixed_window_skipping_windows_counts_each_from_its_own_boundary() {
    // Past the recorded window the start is divided out again: a start kept from an earlier
    // window would stretch it and refuse (or, stepped back, admit) the wrong calls.
    let q = fixed(1, Duration::from_secs(7));
    let w = 7 * NS;
    let store = store_with(Duration::from_secs(1 << 40));
    let first = T0 - T0 % w + 3;
    assert_eq!(allowed(&store, "k", &q, first, 2), 1);
    for k in [5u64, 6, 100, 101] {
        let at = first - 3 + k * w + (k % 3) * NS;
        let d = store.acquire("k", &q, 1, at).unwrap();
        assert!(d.allowed, "window {k}");
        assert_eq!(d.reset_after, ceil_ms(first - 3 + (k + 1) * w - at));
        assert_eq!(allowed(&store, "k", &q, at, 2), 0, "window {k}");
    }
}

#[test]
fn one_bare_key_under_two_fixed_windows_that_do_not_divide_each_other_never_reads_a_fresh_budget() {
    // A state of the 3 s window read under the 2 s one (or back) must be refused while it
    // counts by its own window and fresh after: read with the other window's start, it
    // would count from a start off that window's boundaries.
    let (three, two) = (
        fixed(2, Duration::from_secs(3)),
        fixed(2, Duration::from_secs(2)),
    );
    let store = store_with(Duration::from_secs(1 << 40));
    let t = T0; // a multiple of 6 s
    assert_eq!(allowed(&store, "k", &three, t + NS, 1), 1);
    // The 3 s state counts until t + 3 s: the 2 s quota is refused until then.
    assert_eq!(allowed(&store, "k", &two, t + NS, 2), 0);
    assert_eq!(allowed(&store, "k", &two, t + 3 * NS - 1, 2), 0);
    // At t + 3 s it has passed: the 2 s quota's window [t + 2 s, t + 4 s), fresh.
    assert_eq!(allowed(&store, "k", &two, t + 3 * NS, 3), 2);
    assert_eq!(allowed(&store, "k", &two, t + 4 * NS - 1, 1), 0);
    // Under the 3 s quota the 2 s state still counts until t + 4 s.
    assert_eq!(allowed(&store, "k", &three, t + 4 * NS - 1, 1), 0);
    // After: the 3 s window [t + 3 s, t + 6 s), fresh, its own two.
    assert_eq!(allowed(&store, "k", &three, t + 4 * NS, 3), 2);
    let d = store.peek("k", &three, 0, t + 5 * NS).unwrap();
    assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
}

#[test]
fn a_fixed_window_refund_and_adjustments_keep_the_recorded_window_exact() {
    let config = Config::builder()
        .default_limit(3)
        .default_window("7s")
        .strategy(Strategy::FixedWindow)
        .build()
        .unwrap();
    let (service, clock) = service(config);
    let options = Options::new();
    let w = Duration::from_secs(7);
    // To a boundary of 7 s, then 6.999999999 s into that window.
    let now = ratelimit::Clock::now(&clock);
    clock.advance(Duration::from_nanos(7 * NS - now % (7 * NS)));
    let spent = block_on(service.spend("k", &options)).unwrap();
    clock.advance(w - Duration::from_nanos(1));
    // A penalty of 2 in the same window: full.
    assert_eq!(
        block_on(service.penalize("k", &options, 2))
            .unwrap()
            .remaining,
        0
    );
    assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
    // The spend, given back in its window: one more, exactly.
    assert!(block_on(spent.refund()).unwrap());
    assert!(block_on(service.consume("k", &options)).unwrap().allowed);
    assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
    // A reward of 1: one more.
    assert_eq!(
        block_on(service.reward("k", &options, 1))
            .unwrap()
            .remaining,
        1
    );
    assert!(block_on(service.consume("k", &options)).unwrap().allowed);
    assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
    // One nanosecond on: the next window, three.
    clock.advance(Duration::from_nanos(1));
    let admitted = (0..5)
        .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
        .count();
    assert_eq!(admitted, 3);
    let status = block_on(service.status("k", &options)).unwrap();
    assert_eq!((status.remaining, status.reset_after), (0, w));
}

#[test]
fn a_reload_to_a_window_that_does_not_divide_the_old_one_never_admits_over_either() {
    let build = |window: &str| {
        Config::builder()
            .default_limit(2)
            .default_window(window)
            .strategy(Strategy::FixedWindow)
            .build()
            .unwrap()
    };
    let (service, clock) = service(build("1m"));
    let options = Options::new();
    assert_eq!(
        (0..3)
            .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
            .count(),
        2
    );
    service
        .reload(ratelimit_tests::on_its_store(&service, build_builder("7s")))
        .unwrap();
    // The minute's state counts until its end (START is 40 s into a minute): refused.
    let admitted = (0..3)
        .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
        .count();
    assert_eq!(admitted, 0);
    clock.advance(Duration::from_secs(19));
    assert!(!block_on(service.consume("k", &options)).unwrap().allowed);
    clock.advance(Duration::from_secs(1));
    // Past the minute: the 7 s window of now, two.
    let admitted = (0..3)
        .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
        .count();
    assert_eq!(admitted, 2);
}

fn build_builder(window: &str) -> ratelimit::ConfigBuilder {
    Config::builder()
        .default_limit(2)
        .default_window(window)
        .strategy(Strategy::FixedWindow)
}

// ---------------------------------------------------------------------------------------------
// 4. Annotated fns: keys lent from a slot.

fn config() -> ModuleBuilder {
    Module::builder()
        .default_limit(3)
        .default_window("1m")
        .tier(Tier::new("free", 2).window("1m"))
        .tier(Tier::new("pro", 4).window("1m"))
}

fn module() -> TestModule {
    TestModule::new(config()).expect("every declaration is enforceable")
}

/// The options a fn limited to `limit` a minute is decided under, by its path.
fn fn_options(function: &str, limit: u64) -> Options {
    Options::new()
        .budget(format!("probes_lent_keys::{function}"))
        .limit(limit)
        .window("1m")
}

/// Whether the key composed by hand is admitted under the fn's budget.
fn by_hand(module: &TestModule, key: &str, options: &Options) -> bool {
    module
        .service()
        .consume_now(key, options)
        .unwrap()
        .unwrap()
        .allowed
}

fn outcome<T>(r: Result<T, Error>) -> Option<bool> {
    match r {
        Ok(_) => Some(true),
        Err(Error::Exceeded(_)) => Some(false),
        Err(_) => None,
    }
}

macro_rules! keyed_by {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[rate_limit(limit = 2, window = "1m", key = id)]
        async fn $name(id: $t) -> Result<$t, Error> {
            Ok(id)
        }
    )*};
}

keyed_by!(
    by_u8: u8, by_u16: u16, by_u32: u32, by_u64: u64, by_u128: u128, by_usize: usize,
    by_i8: i8, by_i16: i16, by_i32: i32, by_i64: i64, by_i128: i128, by_isize: isize,
);

/// Calls `f(id)` for each id: two admitted, then the key composed by hand (`id`'s
/// `Display`) refused under the fn's budget; another call of `f` refused; a key of the
/// same digits with a sign or padding not spent.
async fn shares_its_budget_with_the_displayed_key<T: Copy + fmt::Display, F>(
    module: &TestModule,
    function: &str,
    ids: &[T],
    f: impl Fn(T) -> F,
) where
    F: std::future::Future<Output = Result<T, Error>>,
{
    let options = fn_options(function, 2);
    for &id in ids {
        assert_eq!(outcome(f(id).await), Some(true), "{function}({id})");
        assert!(
            by_hand(module, &id.to_string(), &options),
            "{function}({id}): by hand"
        );
        assert_eq!(outcome(f(id).await), Some(false), "{function}({id}) third");
        assert!(
            !by_hand(module, &id.to_string(), &options),
            "{function}({id}) spent"
        );
        assert!(
            by_hand(module, &format!("{id} "), &options),
            "{function}: look-alike"
        );
    }
}

#[tokio::test]
async fn every_integer_type_at_its_bounds_is_the_key_its_display_writes() {
    // An integer read from the wrong part of the slot (or a slot written twice) would spend
    // another budget than the key's text composed by hand.
    let m = module();
    m.scope(async {
        shares_its_budget_with_the_displayed_key(
            &m,
            "by_u8",
            &[0, 1, 9, 10, 99, 100, u8::MAX],
            by_u8,
        )
        .await;
        shares_its_budget_with_the_displayed_key(&m, "by_u16", &[0, u16::MAX], by_u16).await;
        shares_its_budget_with_the_displayed_key(&m, "by_u32", &[7, u32::MAX], by_u32).await;
        shares_its_budget_with_the_displayed_key(&m, "by_u64", &[0, 42, u64::MAX], by_u64).await;
        shares_its_budget_with_the_displayed_key(
            &m,
            "by_u128",
            &[0, u128::MAX, u128::MAX - 1],
            by_u128,
        )
        .await;
        shares_its_budget_with_the_displayed_key(&m, "by_usize", &[0, usize::MAX], by_usize).await;
        shares_its_budget_with_the_displayed_key(&m, "by_i8", &[i8::MIN, -1, 0, i8::MAX], by_i8)
            .await;
        shares_its_budget_with_the_displayed_key(&m, "by_i16", &[i16::MIN, i16::MAX], by_i16).await;
        shares_its_budget_with_the_displayed_key(&m, "by_i32", &[i32::MIN, -42, i32::MAX], by_i32)
            .await;
        shares_its_budget_with_the_displayed_key(&m, "by_i64", &[i64::MIN, -1, i64::MAX], by_i64)
            .await;
        shares_its_budget_with_the_displayed_key(
            &m,
            "by_i128",
            &[i128::MIN, -1, i128::MAX],
            by_i128,
        )
        .await;
        shares_its_budget_with_the_displayed_key(
            &m,
            "by_isize",
            &[isize::MIN, isize::MAX],
            by_isize,
        )
        .await;
        // A negative of a spent key, or its digits under another width's fn: budgets of
        // their own.
        assert_eq!(outcome(by_i64(5).await), Some(true));
        assert_eq!(outcome(by_i64(5).await), Some(true));
        assert_eq!(outcome(by_i64(5).await), Some(false));
        assert_eq!(outcome(by_i64(-5).await), Some(true), "-5 is its own key");
        assert_eq!(outcome(by_u64(5).await), Some(true));
        assert_eq!(outcome(by_u64(5).await), Some(true));
        assert_eq!(outcome(by_u64(5).await), Some(false));
    })
    .await;
}

/// One named budget for an integer key and a string key.
#[rate_limit(limit = 2, window = "1m", key = id, name = "lent-shared")]
async fn shared_by_number(id: u32) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = id, name = "lent-shared")]
async fn shared_by_text(id: &str) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = id, name = "lent-shared")]
fn shared_by_number_sync(id: i128) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn an_integer_key_and_a_string_key_alike_share_one_named_budget_exactly() {
    // Two ways of writing the key (itoa into the slot's buffer, a string into its text) must
    // land on one store key: a budget of 2 shared, never 2 each.
    let m = module();
    let options = Options::new().budget("lent-shared").limit(2).window("1m");
    m.scope(async {
        assert_eq!(outcome(shared_by_number(77).await), Some(true));
        assert_eq!(outcome(shared_by_text("77").await), Some(true));
        assert_eq!(outcome(shared_by_number(77).await), Some(false));
        assert_eq!(outcome(shared_by_text("77").await), Some(false));
        assert!(!by_hand(&m, "77", &options));
        assert_eq!(outcome(shared_by_text("077").await), Some(true));
    })
    .await;
    m.run(|| {
        assert_eq!(outcome(shared_by_number_sync(77)), Some(false));
        assert_eq!(outcome(shared_by_number_sync(-77)), Some(true));
        assert_eq!(outcome(shared_by_number_sync(-77)), Some(true));
    });
    m.scope(async { assert_eq!(outcome(shared_by_text("-77").await), Some(false)) })
        .await;
}

static SYNC_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = id)]
fn sync_by_i128(id: i128) -> Result<(), Error> {
    let _ = id;
    SYNC_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = id)]
fn sync_by_u8(id: u8) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[test]
fn a_sync_fns_integer_key_is_the_key_its_display_writes() {
    let m = module();
    let options = fn_options("sync_by_i128", 2);
    m.run(|| {
        for id in [i128::MIN, -1, 0, 1, i128::MAX] {
            assert_eq!(outcome(sync_by_i128(id)), Some(true));
            assert!(by_hand(&m, &id.to_string(), &options), "{id}");
            assert_eq!(outcome(sync_by_i128(id)), Some(false), "{id}");
        }
        let options = fn_options("sync_by_u8", 2);
        for id in [0u8, 255] {
            assert!(by_hand(&m, &id.to_string(), &options));
            assert!(by_hand(&m, &id.to_string(), &options));
            assert_eq!(outcome(sync_by_u8(id)), Some(false), "{id}");
        }
    });
    // Threads racing on one integer key (each its own slot): the budget, exactly.
    assert_eq!(
        ratelimit_tests::hammer(&m, 4, 10, || sync_by_i128(42)),
        (2, 38)
    );
    assert!(!by_hand(&m, "42", &options));
    assert_eq!(SYNC_RUNS.load(Ordering::SeqCst), 7);
}

static TEXT_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = user)]
async fn by_text(user: &str) -> Result<(), Error> {
    let _ = user;
    TEXT_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user)]
fn by_text_sync(user: String) -> Result<(), Error> {
    let _ = user;
    TEXT_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

fn invalid_key<T: fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidKey { .. }))
}

#[tokio::test]
async fn empty_and_overlong_keys_are_invalid_never_run_and_spend_nothing() {
    let m = module();
    let long = "k".repeat(MAX_KEY_LEN + 1);
    let at_limit = "k".repeat(MAX_KEY_LEN);
    m.scope(async {
        for _ in 0..3 {
            assert!(invalid_key(&by_text("").await));
            assert!(invalid_key(&by_text(&long).await));
        }
        // The longest key: a budget of its own (its text spills out of the slot's place).
        assert_eq!(outcome(by_text(&at_limit).await), Some(true));
        assert_eq!(outcome(by_text(&at_limit).await), Some(true));
        assert_eq!(outcome(by_text(&at_limit).await), Some(false));
    })
    .await;
    m.run(|| {
        assert!(invalid_key(&by_text_sync(String::new())));
        assert!(invalid_key(&by_text_sync(long.clone())));
    });
    assert_eq!(TEXT_RUNS.load(Ordering::SeqCst), 2);
    assert!(!by_hand(&m, &at_limit, &fn_options("by_text", 2)));
    // Nothing spent on the bad keys: the longest key's prefix is a key of its own, full.
    let prefix = &long[..MAX_KEY_LEN];
    assert_eq!(prefix, at_limit);
    let stats = m.stats();
    assert_eq!(stats.total.allowed, 2);
}

/// A key whose `Display` fails after writing part of itself.
struct Failing(&'static str);

impl fmt::Display for Failing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)?;
        Err(fmt::Error)
    }
}

#[rate_limit(limit = 2, window = "1m", key = key)]
async fn by_failing(key: Failing) -> Result<(), Error> {
    let _ = key.0;
    Ok(())
}

#[tokio::test]
async fn a_key_whose_display_fails_is_invalid_not_the_prefix_it_wrote() {
    let m = module();
    m.scope(async {
        for _ in 0..3 {
            let r = by_failing(Failing("user")).await;
            assert!(invalid_key(&r), "{r:?}");
        }
    })
    .await;
    assert!(by_hand(&m, "user", &fn_options("by_failing", 2)));
    assert!(by_hand(&m, "user", &fn_options("by_failing", 2)));
}

static KEY_CALLS: AtomicU32 = AtomicU32::new(0);

fn counted(id: u64) -> u64 {
    KEY_CALLS.fetch_add(1, Ordering::SeqCst);
    id
}

#[rate_limit(limit = 2, window = "1m", key = counted(id))]
async fn side_effect(id: u64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = format!("u{}", id).as_str())]
async fn temporary(id: i16) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = &format!("u{}", id))]
fn temporary_sync(id: i16) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

static NEXT_KEY: AtomicU32 = AtomicU32::new(100);
static NEXT_SYNC_KEY: AtomicU32 = AtomicU32::new(100);

/// The key, read before the cost moves it on.
#[rate_limit(limit = 1, window = "1m", key = NEXT_KEY.load(Ordering::SeqCst), cost = bump(&NEXT_KEY))]
async fn key_before_cost() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = NEXT_SYNC_KEY.load(Ordering::SeqCst), cost = bump(&NEXT_SYNC_KEY))]
fn key_before_cost_sync() -> Result<(), Error> {
    Ok(())
}

fn bump(next: &AtomicU32) -> u64 {
    next.fetch_add(1, Ordering::SeqCst);
    1
}

#[tokio::test]
async fn a_key_with_side_effects_is_evaluated_once_and_a_temporary_key_is_its_text() {
    // The key is written before the cost is evaluated: read after it (or twice), calls
    // would spend on the next call's key.
    let m = module();
    m.scope(async {
        for _ in 0..3 {
            assert_eq!(outcome(key_before_cost().await), Some(true));
        }
    })
    .await;
    m.run(|| {
        for _ in 0..3 {
            assert_eq!(outcome(key_before_cost_sync()), Some(true));
        }
    });
    for key in ["100", "101", "102"] {
        assert!(
            !by_hand(&m, key, &fn_options("key_before_cost", 1)),
            "{key}"
        );
        assert!(
            !by_hand(&m, key, &fn_options("key_before_cost_sync", 1)),
            "{key}"
        );
    }
    assert!(by_hand(&m, "103", &fn_options("key_before_cost", 1)));
    assert!(by_hand(&m, "103", &fn_options("key_before_cost_sync", 1)));
    m.scope(async {
        let results: Vec<_> = [
            side_effect(9).await,
            side_effect(9).await,
            side_effect(9).await,
        ]
        .into_iter()
        .map(outcome)
        .collect();
        assert_eq!(results, [Some(true), Some(true), Some(false)]);
        assert_eq!(outcome(temporary(-3).await), Some(true));
        assert!(by_hand(&m, "u-3", &fn_options("temporary", 2)));
        assert_eq!(outcome(temporary(-3).await), Some(false));
    })
    .await;
    assert_eq!(KEY_CALLS.load(Ordering::SeqCst), 3);
    m.run(|| {
        assert_eq!(outcome(temporary_sync(i16::MIN)), Some(true));
        assert!(by_hand(
            &m,
            &format!("u{}", i16::MIN),
            &fn_options("temporary_sync", 2)
        ));
        assert_eq!(outcome(temporary_sync(i16::MIN)), Some(false));
    });
}

#[rate_limit(limit = 5, window = "1m", key = id, cost = n)]
async fn costly(id: u16, n: u64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn an_integer_keyed_calls_cost_spends_exactly_and_bad_costs_spend_nothing() {
    let m = module();
    let options = fn_options("costly", 5);
    m.scope(async {
        assert!(matches!(costly(1, 0).await, Err(Error::ZeroCost)));
        assert!(matches!(
            costly(1, 6).await,
            Err(Error::CostAboveCapacity {
                cost: 6,
                capacity: 5
            })
        ));
        assert_eq!(outcome(costly(1, 3).await), Some(true));
        assert_eq!(outcome(costly(1, 3).await), Some(false));
        assert_eq!(outcome(costly(1, 2).await), Some(true));
        assert_eq!(outcome(costly(u16::MAX, 5).await), Some(true));
    })
    .await;
    assert!(!by_hand(&m, "1", &options));
    assert!(!by_hand(&m, &u16::MAX.to_string(), &options));
    assert!(by_hand(&m, "2", &options));
}

#[rate_limit(tier = plan, key = id)]
async fn tiered(id: i64, plan: &str) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(tier = plan, key = id)]
fn tiered_sync(id: u128, plan: &str) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn a_tier_chosen_per_call_with_an_integer_key_spends_that_tiers_budget_on_that_key() {
    let m = module();
    let free = Options::new()
        .budget("probes_lent_keys::tiered")
        .tier("free");
    let pro = Options::new()
        .budget("probes_lent_keys::tiered")
        .tier("pro");
    m.scope(async {
        assert_eq!(outcome(tiered(i64::MIN, "free").await), Some(true));
        assert!(by_hand(&m, &i64::MIN.to_string(), &free));
        assert_eq!(outcome(tiered(i64::MIN, "free").await), Some(false));
        assert!(matches!(
            tiered(i64::MIN, "gold").await,
            Err(Error::UnknownTier { .. })
        ));
        for _ in 0..3 {
            assert_eq!(outcome(tiered(i64::MIN, "pro").await), Some(true));
        }
        assert!(by_hand(&m, &i64::MIN.to_string(), &pro));
        assert_eq!(outcome(tiered(i64::MIN, "pro").await), Some(false));
        assert_eq!(outcome(tiered(-1, "free").await), Some(true));
    })
    .await;
    let free = Options::new()
        .budget("probes_lent_keys::tiered_sync")
        .tier("free");
    m.run(|| {
        assert_eq!(outcome(tiered_sync(u128::MAX, "free")), Some(true));
        assert!(by_hand(&m, &u128::MAX.to_string(), &free));
        assert_eq!(outcome(tiered_sync(u128::MAX, "free")), Some(false));
    });
}

#[tokio::test]
async fn a_refusal_of_an_integer_keyed_call_carries_the_decision_of_its_key() {
    let m = module();
    m.scope(async {
        assert_eq!(outcome(by_i32(-9).await), Some(true));
        m.clock().advance(Duration::from_secs(10));
        assert_eq!(outcome(by_i32(-9).await), Some(true));
        let Err(Error::Exceeded(refusal)) = by_i32(-9).await else {
            panic!("not refused")
        };
        // START is 40 s into a minute (see `support.rs`); +10 s: 10 s to the window's end
        // under the default strategy? Compare with the key by hand, field by field.
        let by_hand = m
            .service()
            .status(&(-9).to_string(), &fn_options("by_i32", 2))
            .await
            .unwrap();
        assert_eq!(refusal.decision.limit, 2);
        assert_eq!(refusal.decision.remaining, 0);
        assert_eq!(refusal.decision.retry_after, by_hand.retry_after);
        assert_eq!(refusal.decision.reset_after, by_hand.reset_after);
        assert_eq!(refusal.budget.as_deref(), Some("probes_lent_keys::by_i32"));
    })
    .await;
}

#[tokio::test]
async fn two_modules_on_one_thread_each_count_an_integer_key_on_their_own() {
    let (a, b) = (module(), module());
    for _ in 0..2 {
        a.scope(async { assert_eq!(outcome(by_isize(3).await), Some(true)) })
            .await;
        b.scope(async { assert_eq!(outcome(by_isize(3).await), Some(true)) })
            .await;
    }
    a.scope(async { assert_eq!(outcome(by_isize(3).await), Some(false)) })
        .await;
    b.scope(async { assert_eq!(outcome(by_isize(3).await), Some(false)) })
        .await;
    assert!(!by_hand(&a, "3", &fn_options("by_isize", 2)));
    assert!(by_hand(&a, "-3", &fn_options("by_isize", 2)));
    assert_eq!((a.stats().total.allowed, b.stats().total.allowed), (3, 2));
}

// The calls that wait: the key copied into `Later`.

#[rate_limit(limit = 2, window = "1m", key = id, queue = true)]
async fn queued(id: i64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user, queue = true)]
async fn queued_text(user: String) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

// Tokio's paused time: a call over the limit waits out the queue's timeout on Tokio's timer.
#[tokio::test(start_paused = true)]
async fn a_queued_call_keeps_its_integer_key_across_the_wait() {
    // A call that may wait is not decided at once: its key is copied into `Later`. Copied
    // wrong (or from a slot already gone), it would spend another budget.
    let m = module();
    let options = fn_options("queued", 2);
    m.scope(async {
        for id in [i64::MIN, -1, 0, i64::MAX] {
            assert_eq!(outcome(queued(id).await), Some(true), "{id}");
            assert_eq!(outcome(queued(id).await), Some(true), "{id}");
            assert!(
                !by_hand(&m, &id.to_string(), &options),
                "{id}: the fn's key"
            );
            // Over the limit, its turn further than the queue's timeout: refused, nothing spent.
            let r = queued(id).await;
            assert!(matches!(r, Err(Error::QueueTimeout { .. })), "{id}: {r:?}");
        }
        assert!(by_hand(&m, "1", &options), "another key untouched");
        // Bad keys on the queue's way (not decided at once): invalid, nothing spent.
        for bad in [String::new(), "q".repeat(MAX_KEY_LEN + 1)] {
            let r = queued_text(bad).await;
            assert!(invalid_key(&r), "{r:?}");
        }
        let long = "q".repeat(KEY_INLINE + 20);
        assert_eq!(outcome(queued_text(long.clone()).await), Some(true));
        assert_eq!(outcome(queued_text(long.clone()).await), Some(true));
        assert!(!by_hand(&m, &long, &fn_options("queued_text", 2)));
        assert!(by_hand(&m, &long[1..], &fn_options("queued_text", 2)));
    })
    .await;
    // 8 of the fn, 2 of its long key, 2 by hand on keys of their own.
    assert_eq!(m.stats().total.allowed, 12);
}

/// `KeyText::INLINE`: the longest key the slot keeps in place.
const KEY_INLINE: usize = 46;

/// A memory store that answers later (not at once) while `later` is set, and records the
/// store keys it is asked on.
#[derive(Clone, Default)]
struct Later {
    memory: MemoryStore,
    later: Arc<AtomicBool>,
    keys: Arc<Mutex<Vec<String>>>,
}

impl Store for Later {
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.keys
            .lock()
            .unwrap()
            .push(request.key().as_str().to_owned());
        if self.later.load(Ordering::SeqCst) {
            return None;
        }
        Store::decide_now(&self.memory, request)
    }
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(&self.memory, stacked)
    }
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.keys
            .lock()
            .unwrap()
            .push(request.key().as_str().to_owned());
        Store::decide(&self.memory, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.memory, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.memory, key).await
    }
    async fn adjust(&self, adjustment: Adjustment<'_>) -> Result<u64, Error> {
        Store::adjust(&self.memory, adjustment).await
    }
    fn adjusts(&self) -> bool {
        true
    }
    /// Claims to decide at once (so that the binary's sync fns pass the module's check):
    /// only the async fns are called while it answers later.
    fn decides_at_once(&self) -> bool {
        true
    }
    fn refunds(&self) -> bool {
        true
    }
    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        Store::refund(&self.memory, refund).await
    }
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        Store::refund_now(&self.memory, refund)
    }
}

#[rate_limit(limit = 2, window = "1m", key = user)]
async fn by_text_later(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[tokio::test]
async fn a_call_its_store_answers_later_is_decided_on_the_key_it_was_asked_on_at_once() {
    let store = Later::default();
    let m = TestModule::new(config().store(StoreConfig::custom(store.clone()))).unwrap();
    let long = "L".repeat(KEY_INLINE + 1);
    m.scope(async {
        store.later.store(true, Ordering::SeqCst);
        assert_eq!(outcome(by_u128(u128::MAX).await), Some(true));
        assert_eq!(outcome(by_text_later(&long).await), Some(true));
        assert_eq!(outcome(by_i8(i8::MIN).await), Some(true));
        store.later.store(false, Ordering::SeqCst);
        assert_eq!(outcome(by_u128(u128::MAX).await), Some(true));
        assert_eq!(outcome(by_text_later(&long).await), Some(true));
        assert_eq!(outcome(by_i8(i8::MIN).await), Some(true));
        // Each key's third call, at once: refused (both earlier calls on the one store key).
        assert_eq!(outcome(by_u128(u128::MAX).await), Some(false));
        assert_eq!(outcome(by_text_later(&long).await), Some(false));
        assert_eq!(outcome(by_i8(i8::MIN).await), Some(false));
    })
    .await;
    let keys = store.keys.lock().unwrap().clone();
    // Asked at once then awaited on the same key, 3 times; then at once 6 times.
    assert_eq!(keys.len(), 12, "{keys:?}");
    for (at_once, awaited) in [(0, 1), (2, 3), (4, 5)] {
        assert_eq!(keys[at_once], keys[awaited]);
    }
    assert_eq!(keys[0], keys[6]);
    assert_eq!(keys[2], keys[7]);
    assert_eq!(keys[4], keys[8]);
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), 3);
}

// `count = ..`: the key written into an owned text, the spend kept and given back.

#[rate_limit(limit = 2, window = "1m", key = id, count = "err")]
async fn counts_errors(id: u64, fail: bool) -> Result<(), Error> {
    let _ = id;
    match fail {
        true => Err(Error::ZeroCost),
        false => Ok(()),
    }
}

#[tokio::test]
async fn an_integer_keyed_fn_counting_errors_gives_back_its_successes_on_that_key_only() {
    let m = module();
    let options = fn_options("counts_errors", 2);
    m.scope(async {
        for _ in 0..5 {
            assert!(counts_errors(u64::MAX, false).await.is_ok());
        }
        assert!(matches!(
            counts_errors(u64::MAX, true).await,
            Err(Error::ZeroCost)
        ));
        assert!(by_hand(&m, &u64::MAX.to_string(), &options));
        assert!(matches!(
            counts_errors(u64::MAX, false).await,
            Err(Error::Exceeded(_))
        ));
    })
    .await;
    // The sync fn, by an `i8` key.
    let options = fn_options("counts_errors_sync", 2);
    m.run(|| {
        for _ in 0..4 {
            assert!(counts_errors_sync(i8::MIN, false).is_ok());
        }
        assert!(matches!(
            counts_errors_sync(i8::MIN, true),
            Err(Error::ZeroCost)
        ));
        assert!(by_hand(&m, &i8::MIN.to_string(), &options));
        assert!(matches!(
            counts_errors_sync(i8::MIN, false),
            Err(Error::Exceeded(_))
        ));
        // Another key's spends were never touched by the gifts back.
        assert!(by_hand(&m, &i8::MAX.to_string(), &options));
        assert!(by_hand(&m, &i8::MAX.to_string(), &options));
        assert!(matches!(
            counts_errors_sync(i8::MAX, true),
            Err(Error::Exceeded(_))
        ));
    });
}

#[rate_limit(limit = 2, window = "1m", key = id, count = "err")]
fn counts_errors_sync(id: i8, fail: bool) -> Result<(), Error> {
    let _ = id;
    match fail {
        true => Err(Error::ZeroCost),
        false => Ok(()),
    }
}

#[rate_limit(limit = 2, window = "1m", key = id)]
#[rate_limit(limit = 3, window = "1h", key = id)]
async fn stacked_by_id(id: i32) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn stacked_limits_keyed_by_an_integer_spend_each_on_the_keys_text() {
    let m = module();
    let minute = fn_options("stacked_by_id", 2);
    m.scope(async {
        assert_eq!(outcome(stacked_by_id(-1).await), Some(true));
        assert_eq!(outcome(stacked_by_id(-1).await), Some(true));
        assert_eq!(outcome(stacked_by_id(-1).await), Some(false));
        assert!(
            !by_hand(&m, "-1", &minute),
            "the minute's budget of -1 is spent"
        );
        m.clock().advance(MINUTE);
        assert_eq!(outcome(stacked_by_id(-1).await), Some(true));
        // The hour's three spent: refused, though the minute has room.
        assert_eq!(outcome(stacked_by_id(-1).await), Some(false));
        assert!(
            by_hand(&m, "-1", &minute),
            "the refusal spent nothing of the minute"
        );
        assert_eq!(outcome(stacked_by_id(1).await), Some(true));
    })
    .await;
}

#[test]
fn a_kept_spend_under_a_quota_with_a_block_is_given_back_once_and_the_block_still_holds() {
    for strategy in Strategy::ALL {
        let (service, clock) = per_minute(2, strategy);
        let options = Options::new().block_for(Duration::from_secs(300));
        let spent = block_on(service.spend("k", &options)).unwrap();
        assert!(block_on(spent.refund()).unwrap(), "{strategy}");
        let admitted = (0..3)
            .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
            .count();
        assert_eq!(
            admitted, 2,
            "{strategy}: the third begins a block of 5 minutes"
        );
        clock.advance(Duration::from_secs(120));
        assert!(
            !block_on(service.consume("k", &options)).unwrap().allowed,
            "{strategy}"
        );
        let look = block_on(service.status("k", &options)).unwrap();
        assert!(!look.allowed, "{strategy}");
        assert_eq!(
            look.retry_after,
            Some(Duration::from_secs(180)),
            "{strategy}"
        );
        clock.advance(Duration::from_secs(180));
        let admitted = (0..3)
            .filter(|_| block_on(service.consume("k", &options)).unwrap().allowed)
            .count();
        assert_eq!(admitted, 2, "{strategy}");
    }
}

#[test]
fn a_call_decided_at_the_floor_answers_from_its_own_time_on_every_path() {
    // A clock stepped back behind a sweep is decided at the sweep's floor, but the decision
    // is the call's: its `reset_after` counts from the call's `now`, on the path that decides
    // in the strategy's step (spends, kept spends, looks of a cost) and on the one aside
    // (a look of none) alike.
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowCounter,
        Strategy::SlidingWindow,
    ] {
        let hour = Duration::from_secs(3600);
        let q = quota(3, hour, strategy);
        let store = store_floored();
        let k = StoreKey::new("b").unwrap();
        let at = |mode, cost| {
            Store::decide_now(&store, Request::new(k, &q, cost, T0, mode).unwrap())
                .unwrap()
                .unwrap()
        };
        let looked = at(Mode::Look, 0);
        assert_eq!((looked.allowed, looked.remaining), (true, 3), "{strategy}");
        let spent = at(Mode::Spend, 1);
        let kept = at(Mode::Keep, 1);
        let looked_at_one = at(Mode::Look, 1);
        let looked_again = store.peek("b", &q, 0, T0).unwrap();
        assert_eq!((spent.remaining, kept.remaining), (2, 1), "{strategy}");
        assert_eq!(looked_again.remaining, 1, "{strategy}");
        assert!(looked_at_one.allowed, "{strategy}");
        for d in [&looked, &spent, &kept, &looked_at_one, &looked_again] {
            // From the call's own time (a whole millisecond) to the decision's reset.
            let reset = d.reset_at().duration_since(std::time::UNIX_EPOCH).unwrap();
            assert_eq!(
                d.reset_after,
                reset - Duration::from_nanos(T0),
                "{strategy}: {d:?}"
            );
        }
        // The fixed window [T0, T0 + 1 h): an hour after the call's time, not the floor's.
        if strategy == Strategy::FixedWindow {
            assert_eq!(spent.reset_after, hour);
        }
    }
}

// A refusal decided at the floor: its `retry_after` counts from the call's own time.

/// A store whose floor is `T0 + 99 s`, and whose sweeps do not run again: a call at `T0` is
/// decided at the floor. A sweep's floor is the latest end among the keys it drops (not its
/// own time): a key of a second's window spent at `T0 + 98 s`, dropped at `T0 + 100 s`.
fn store_floored() -> MemoryStore {
    let store = store_with(Duration::from_secs(1 << 40));
    let second = quota(1, Duration::from_secs(1), Strategy::FixedWindow);
    assert_eq!(allowed(&store, "swept", &second, T0 + 98 * NS, 1), 1);
    assert_eq!(
        store.sweep(T0 + 100 * NS),
        1,
        "the key of T0 + 98 s dropped"
    );
    store
}

/// `refused` was refused at `now` (decided at a later floor); its `retry_after` must be kept:
/// `before(now + retry_after - 1 ms)` refused, `retry(now + retry_after)` admitted. Returns
/// `retry_after`.
fn keeps_its_retry_after(
    what: &str,
    refused: &Decision,
    now: u64,
    before: impl FnOnce(u64) -> bool,
    retry: impl FnOnce(u64) -> bool,
) -> Duration {
    assert!(!refused.allowed, "{what}: {refused:?}");
    let r = refused.retry_after.expect("a refusal carries retry_after");
    let at = now + r.as_nanos() as u64;
    assert!(
        !before(at - 1_000_000),
        "{what}: admitted 1 ms early ({r:?})"
    );
    assert!(retry(at), "{what}: refused at now + retry_after ({r:?})");
    r
}

#[test]
fn a_spend_refused_at_the_floor_is_not_told_to_retry_before_the_floor() {
    // Decided at the floor (`T0 + 99 s`), a refusal's `retry_after` counted from there but
    // was read from the call's `T0`: a client honouring it retried 99 s early, into the same
    // refusal, on the spend decided in the strategy's step.
    for strategy in Strategy::ALL {
        let q = quota(2, MINUTE, strategy);
        let store = store_floored();
        assert_eq!(allowed(&store, "k", &q, T0, 3), 2, "{strategy}");
        let refused = store.acquire("k", &q, 1, T0).unwrap();
        let r = keeps_its_retry_after(
            &format!("{strategy}: spend"),
            &refused,
            T0,
            |t| store.acquire("k", &q, 1, t).unwrap().allowed,
            |t| store.acquire("k", &q, 1, t).unwrap().allowed,
        );
        assert!(r > Duration::from_secs(99), "{strategy}: {r:?}");
    }
}

#[test]
fn a_look_refused_at_the_floor_is_not_told_to_retry_before_the_floor() {
    // Looks of a cost (in the strategy's step) and of none (aside, as two looks) alike.
    for strategy in Strategy::ALL {
        for cost in [1, 0] {
            let q = quota(2, MINUTE, strategy);
            let store = store_floored();
            assert_eq!(allowed(&store, "k", &q, T0, 3), 2, "{strategy}");
            let refused = store.peek("k", &q, cost, T0).unwrap();
            keeps_its_retry_after(
                &format!("{strategy}: look of {cost}"),
                &refused,
                T0,
                |t| store.peek("k", &q, cost, t).unwrap().allowed,
                |t| store.peek("k", &q, cost, t).unwrap().allowed,
            );
        }
    }
}

#[test]
fn a_kept_spend_refused_at_the_floor_is_not_told_to_retry_before_the_floor() {
    for strategy in Strategy::ALL {
        let q = quota(2, MINUTE, strategy);
        let store = store_floored();
        let k = StoreKey::new("k").unwrap();
        let keep = |t| {
            Store::decide_now(&store, Request::new(k, &q, 1, t, Mode::Keep).unwrap())
                .unwrap()
                .unwrap()
        };
        assert_eq!((0..3).filter(|_| keep(T0).allowed).count(), 2, "{strategy}");
        keeps_its_retry_after(
            &format!("{strategy}: kept spend"),
            &keep(T0),
            T0,
            |t| keep(t).allowed,
            |t| keep(t).allowed,
        );
    }
}

#[test]
fn a_call_blocked_at_the_floor_is_not_told_to_retry_before_its_block_ends() {
    // The refusal begins a block at the floor, until `T0 + 99 s + 5 min`; told 5 min from
    // `T0`, the retry met the block. A look at the blocked key says the same.
    for strategy in Strategy::ALL {
        let q = quota(2, MINUTE, strategy).with_block(5 * MINUTE).unwrap();
        let store = store_floored();
        assert_eq!(allowed(&store, "k", &q, T0, 2), 2, "{strategy}");
        let refused = store.acquire("k", &q, 1, T0).unwrap();
        let looked = store.peek("k", &q, 1, T0).unwrap();
        assert_eq!(looked.retry_after, refused.retry_after, "{strategy}");
        // A spend a millisecond early would lengthen the block: the look asks instead.
        let r = keeps_its_retry_after(
            &format!("{strategy}: blocked"),
            &refused,
            T0,
            |t| store.peek("k", &q, 1, t).unwrap().allowed,
            |t| store.acquire("k", &q, 1, t).unwrap().allowed,
        );
        assert_eq!(r, Duration::from_secs(399), "{strategy}");
    }
}

#[test]
fn a_stacked_call_refused_at_the_floor_is_not_told_to_retry_before_the_floor() {
    // Stacked limits are decided under their shards' locks at the floor, a limit with a block
    // among them or not.
    for strategy in Strategy::ALL {
        for block in [None, Some(5 * MINUTE)] {
            let tight = match block {
                Some(b) => quota(2, MINUTE, strategy).with_block(b).unwrap(),
                None => quota(2, MINUTE, strategy),
            };
            let roomy = quota(100, MINUTE, strategy);
            let store = store_floored();
            let checks = [
                Check {
                    key: StoreKey::new("roomy").unwrap(),
                    quota: &roomy,
                    cost: 1,
                },
                Check {
                    key: StoreKey::new("tight").unwrap(),
                    quota: &tight,
                    cost: 1,
                },
            ];
            let all = |t, mode| {
                let d = Store::decide_all_now(&store, Stacked::new(&checks, t, mode).unwrap())
                    .unwrap()
                    .unwrap();
                assert_eq!(d.len(), 2);
                d
            };
            let admitted = |d: &[Decision]| d.iter().all(|d| d.allowed);
            for _ in 0..2 {
                assert!(admitted(&all(T0, Mode::Spend)), "{strategy}");
            }
            let refused = all(T0, Mode::Keep);
            keeps_its_retry_after(
                &format!("{strategy}: stacked, block {block:?}"),
                &refused[1],
                T0,
                |t| admitted(&all(t, Mode::Look)),
                |t| admitted(&all(t, Mode::Spend)),
            );
        }
    }
}

#[rate_limit(limit = 2, window = "1m", key = id)]
async fn reloaded_by_id(id: u64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = id)]
fn reloaded_by_id_sync(id: i64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn a_call_after_a_reload_waits_on_its_own_integer_key_and_keeps_the_budget() {
    // After a reload the fn's prepared site is no longer current: the call is not decided at
    // once, and its key is copied into `Later`. Copied wrong, it would spend elsewhere.
    let m = module();
    let reload = || {
        let config = ratelimit_tests::on_its_store(
            m.service(),
            Config::builder()
                .default_limit(3)
                .default_window("1m")
                .tier(Tier::new("free", 2).window("1m"))
                .tier(Tier::new("pro", 4).window("1m")),
        );
        m.service().reload(config).unwrap();
    };
    m.scope(async { assert_eq!(outcome(reloaded_by_id(u64::MAX).await), Some(true)) })
        .await;
    m.run(|| assert_eq!(outcome(reloaded_by_id_sync(i64::MIN)), Some(true)));
    reload();
    m.scope(async {
        assert_eq!(outcome(reloaded_by_id(u64::MAX).await), Some(true));
        assert_eq!(outcome(reloaded_by_id(u64::MAX).await), Some(false));
    })
    .await;
    m.run(|| {
        assert_eq!(outcome(reloaded_by_id_sync(i64::MIN)), Some(true));
        assert_eq!(outcome(reloaded_by_id_sync(i64::MIN)), Some(false));
    });
    reload();
    assert!(!by_hand(
        &m,
        &u64::MAX.to_string(),
        &fn_options("reloaded_by_id", 2)
    ));
    assert!(!by_hand(
        &m,
        &i64::MIN.to_string(),
        &fn_options("reloaded_by_id_sync", 2)
    ));
    m.scope(async { assert_eq!(outcome(reloaded_by_id(u64::MAX - 1).await), Some(true)) })
        .await;
    assert_eq!(m.stats().total.allowed, 5);
}

#[test]
fn threads_racing_across_a_fixed_windows_boundary_admit_exactly_a_budget_per_window() {
    // Calls of the older window racing ones that moved the cell to the next are decided in
    // the recorded (newer) window, never in a fresh copy of the old one.
    for window in [Duration::from_secs(1), Duration::from_secs(7)] {
        let w = window.as_nanos() as u64;
        let store = store_with(Duration::from_secs(1 << 40));
        let q = fixed(5, window);
        let t = T0 - T0 % w + w - 1;
        // The older window spent first: of the race, only the next window's five pass.
        assert_eq!(allowed(&store, "k", &q, t, 5), 5);
        let ok = AtomicUsize::new(0);
        let barrier = Barrier::new(4);
        std::thread::scope(|s| {
            for th in 0..4u64 {
                let (store, q, ok, barrier) = (&store, &q, &ok, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..50u64 {
                        let at = if (th + i) % 2 == 0 { t } else { t + 1 };
                        if store.acquire("k", q, 1, at).unwrap().allowed {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        let admitted = ok.load(Ordering::SeqCst);
        assert_eq!(admitted, 5, "{window:?}");
        assert_eq!(allowed(&store, "k", &q, t + 1, 5), 0, "{window:?}");
        assert_eq!(allowed(&store, "k", &q, t, 5), 0, "{window:?}");
        assert_eq!(allowed(&store, "k", &q, t + w + 1, 6), 5, "{window:?}");
    }
}

#[rate_limit(key = id, strategy = "fixed-window")]
async fn windowed_by_id(id: u32) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

#[tokio::test]
async fn a_reload_to_a_window_not_dividing_the_old_one_leaves_an_integer_keys_calls_exact() {
    // The fn's window is the module's: reloaded from a minute to 7 s, the key's cell was
    // written under the minute. Read under 7 s with the recorded start, it would count from a
    // start off the 7 s boundaries; fresh, it would admit a second budget in the minute.
    let m = module();
    let count = |n: usize| async move {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(outcome(windowed_by_id(u32::MAX).await) == Some(true));
        }
        ok
    };
    assert_eq!(m.scope(count(4)).await, 3);
    let config = ratelimit_tests::on_its_store(
        m.service(),
        Config::builder()
            .default_limit(3)
            .default_window("7s")
            .tier(Tier::new("free", 2).window("1m"))
            .tier(Tier::new("pro", 4).window("1m")),
    );
    m.service().reload(config).unwrap();
    // START is 40 s into its minute: the minute's state counts 20 s more.
    assert_eq!(m.scope(count(3)).await, 0);
    m.clock()
        .advance(Duration::from_secs(20) - Duration::from_nanos(1));
    assert_eq!(m.scope(count(3)).await, 0);
    // The minute's end, 1_000_020 s, is a multiple of 7 s: a 7 s window of its own.
    m.clock().advance(Duration::from_nanos(1));
    assert_eq!(m.scope(count(4)).await, 3);
    m.clock()
        .advance(Duration::from_secs(7) - Duration::from_nanos(1));
    assert_eq!(m.scope(count(2)).await, 0);
    // The next 7 s window, yet the minute's spends still count for the reload's transition
    // (one old window from the reload): refused.
    m.clock().advance(Duration::from_nanos(1));
    assert_eq!(m.scope(count(2)).await, 0);
    // Past the transition (START + 61 s, in the 7 s window from 1_000_055 s): three, then
    // none until 1_000_062 s, then three.
    m.clock().advance(Duration::from_secs(34));
    assert_eq!(m.scope(count(4)).await, 3);
    m.clock()
        .advance(Duration::from_secs(1) - Duration::from_nanos(1));
    assert_eq!(m.scope(count(2)).await, 0);
    m.clock().advance(Duration::from_nanos(1));
    assert_eq!(m.scope(count(4)).await, 3);
}

#[test]
fn a_zero_capacity_refused_at_the_floor_still_says_one_window_alone_or_stacked() {
    // A capacity of zero is refused before any state is read, at the call's own time (one
    // window, the soonest a reconfigured limit could take effect): not moved by the floor,
    // alone or among stacked limits decided at it.
    for strategy in Strategy::ALL {
        let zero = Quota::new(0, MINUTE).unwrap().with_strategy(strategy);
        let q = quota(2, MINUTE, strategy);
        let store = store_floored();
        let alone = store.acquire("z", &zero, 1, T0).unwrap();
        let checks = [
            Check {
                key: StoreKey::new("k").unwrap(),
                quota: &q,
                cost: 1,
            },
            Check {
                key: StoreKey::new("z").unwrap(),
                quota: &zero,
                cost: 1,
            },
        ];
        let stacked =
            Store::decide_all_now(&store, Stacked::new(&checks, T0, Mode::Spend).unwrap())
                .unwrap()
                .unwrap();
        for d in [&alone, &stacked[1]] {
            assert!(!d.allowed, "{strategy}");
            assert_eq!(
                (d.retry_after, d.reset_after),
                (Some(MINUTE), MINUTE),
                "{strategy}"
            );
        }
        // The limit that admitted it spends nothing.
        assert_eq!(allowed(&store, "k", &q, T0, 3), 2, "{strategy}");
    }
}
