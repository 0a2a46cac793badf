//! Probes of the in-memory store at its boundaries: ways `MemoryStore` (bare, and under a
//! `RateLimitService`) could admit a call it should refuse, miscount, panic, or refuse with an
//! error of the wrong kind at `max_keys`, around its sweeps (a key forgotten before its state
//! expired, a sweep racing a decision), under a clock stepped back (before and after a sweep),
//! with extreme quotas, costs and times (`MAX_CAPACITY`, `MAX_WINDOW`, 1 ns windows, `now` at
//! and past the last time decided), with keys at their length limits or alike but for a byte,
//! with one key under two strategies or two windows, and with resets racing decisions.
//!
//! Exact counts, times given by hand (`MemoryStore::acquire(.., now)`, a service's
//! `ManualClock`), no sleeps. Each test's name is the property it asserts. Five found ways
//! through (a sweep, a penalty or a refund past the last time decided poisoning every later
//! decision; a sweep racing a decision; a bare key read under another window), closed since:
//! they stay as the regression tests named after them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use ratelimit::store::{Adjustment, Check, Mode, Stacked, Store, StoreKey};
use ratelimit::{
    Config, Error, MemoryOptions, MemoryStore, Options, Quota, QuotaError, Strategy, MAX_CAPACITY,
    MAX_KEY_LEN, MAX_WINDOW,
};
use ratelimit_tests::{now as block_on, service};

const SEC: u64 = 1_000_000_000;

/// The store keeps a key for this long past its expiry (`SWEEP_GRACE` in the store).
const GRACE: u64 = SEC;

/// A whole second, aligned to every window of whole seconds up to 10 s that divides 10^6 s.
const T0: u64 = 1_000_000 * SEC;

/// The latest time the algorithms decide at (`algorithm::MAX_NOW`, about the year 2226).
const MAX_NOW: u64 = (1 << 63) - (1 << 60);

/// The longest key a bare store takes (`key::MAX_STORE_KEY_LEN`).
const MAX_STORE_KEY: usize = 4 * MAX_KEY_LEN;

fn quota(limit: u64, window: Duration, strategy: Strategy) -> Quota {
    Quota::new(limit, window).unwrap().with_strategy(strategy)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn capped(max_keys: usize) -> MemoryStore {
    MemoryStore::with_options(MemoryOptions::default().max_keys(max_keys))
}

/// How many of `n` calls of cost 1 on `key` at `now` are admitted; any error panics.
fn admitted(store: &MemoryStore, key: &str, quota: &Quota, now: u64, n: usize) -> usize {
    (0..n)
        .filter(|_| store.acquire(key, quota, 1, now).unwrap().allowed)
        .count()
}

fn full(r: &Result<ratelimit::Decision, Error>) -> bool {
    matches!(r, Err(Error::StoreFull { .. }))
}

fn unexpected<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::UnexpectedState { .. }))
}

// ---------------------------------------------------------------------------------------------
// 1. max_keys: refused with a typed error, never admitted, never counted twice.

#[test]
fn a_store_of_zero_keys_refuses_every_new_key_of_every_strategy_with_store_full() {
    let store = capped(0);
    for strategy in Strategy::ALL {
        let q = quota(5, secs(60), strategy);
        for cost in [1, 5] {
            let r = store.acquire("k", &q, cost, T0);
            assert!(
                matches!(r, Err(Error::StoreFull { max_keys: 0 })),
                "{strategy}: {r:?}"
            );
        }
        // A look admits nothing and tracks nothing.
        assert!(store.peek("k", &q, 1, T0).unwrap().allowed);
        let blocked = q.with_block(secs(60)).unwrap();
        assert!(full(&store.acquire("k", &blocked, 1, T0)), "{strategy}");
        let penalty = Adjustment::penalty(StoreKey::new("k").unwrap(), &q, 1, T0);
        let r = block_on(store.adjust(penalty));
        assert!(
            matches!(r, Err(Error::StoreFull { .. })),
            "{strategy}: {r:?}"
        );
    }
    assert_eq!(store.len(), 0);
}

#[test]
fn threads_racing_distinct_new_keys_admit_exactly_max_keys_and_len_never_passes_it() {
    const MAX: usize = 100;
    const THREADS: usize = 4;
    const PER_THREAD: usize = 100;
    let store = capped(MAX);
    let quotas: Vec<Quota> = Strategy::ALL
        .iter()
        .map(|&s| quota(1, secs(3_600), s))
        .collect();
    let q = |i: usize| &quotas[i % 4];
    let (admitted_keys, refused_keys) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (done, peak) = (AtomicBool::new(false), AtomicUsize::new(0));
    let barrier = Barrier::new(THREADS);
    let outcomes: Vec<Vec<(usize, bool)>> = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(store.len(), Ordering::SeqCst);
                std::thread::yield_now();
            }
        });
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier, q) = (&store, &barrier, &q);
                let (admitted_keys, refused_keys) = (&admitted_keys, &refused_keys);
                s.spawn(move || {
                    barrier.wait();
                    (0..PER_THREAD)
                        .map(|j| {
                            let i = t * PER_THREAD + j;
                            match store.acquire(&format!("key:{i}"), q(i), 1, T0) {
                                Ok(d) => {
                                    assert!(d.allowed, "a new key has its budget");
                                    admitted_keys.fetch_add(1, Ordering::SeqCst);
                                    (i, true)
                                }
                                Err(Error::StoreFull { max_keys: MAX }) => {
                                    refused_keys.fetch_add(1, Ordering::SeqCst);
                                    (i, false)
                                }
                                Err(other) => panic!("neither admitted nor full: {other:?}"),
                            }
                        })
                        .collect()
                })
            })
            .collect();
        let outcomes = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        outcomes
    });
    assert_eq!(admitted_keys.into_inner(), MAX);
    assert_eq!(refused_keys.into_inner(), THREADS * PER_THREAD - MAX);
    assert_eq!(store.len(), MAX);
    assert!(peak.into_inner() <= MAX);
    // Every key admitted holds its spend (limit 1: refused now); every key refused was never
    // tracked (still refused as full, never a fresh budget).
    for (i, was_admitted) in outcomes.into_iter().flatten() {
        let again = store.acquire(&format!("key:{i}"), q(i), 1, T0);
        match was_admitted {
            true => assert!(!again.unwrap().allowed, "key {i}"),
            false => assert!(full(&again), "key {i}: {again:?}"),
        }
    }
    assert_eq!(store.len(), MAX);
}

#[test]
fn threads_racing_one_new_key_into_the_last_room_store_it_once_and_count_it_exactly() {
    for strategy in Strategy::ALL {
        let store = capped(1);
        let q = quota(3, secs(60), strategy);
        let barrier = Barrier::new(4);
        let total: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let (store, q, barrier) = (&store, &q, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        admitted(store, "only", q, T0, 25)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(total, 3, "{strategy}");
        assert_eq!(store.len(), 1, "{strategy}");
        assert!(full(&store.acquire("other", &q, 1, T0)), "{strategy}");
    }
}

#[test]
fn a_reset_frees_exactly_one_room_and_a_reset_of_an_absent_key_frees_none() {
    for strategy in Strategy::ALL {
        let store = capped(3);
        let q = quota(2, secs(3_600), strategy);
        for k in ["a", "b", "c"] {
            assert_eq!(admitted(&store, k, &q, T0, 2), 2);
        }
        assert!(full(&store.acquire("d", &q, 1, T0)), "{strategy}");
        assert!(!store.reset("absent"), "{strategy}");
        assert!(full(&store.acquire("d", &q, 1, T0)), "{strategy}");
        assert_eq!(store.len(), 3);
        assert!(store.reset("a"), "{strategy}");
        assert!(
            !store.reset("a"),
            "{strategy}: a second reset finds nothing"
        );
        assert_eq!(store.len(), 2, "{strategy}");
        // One room: "d" takes it (and counts from zero), "e" finds the store full.
        assert_eq!(admitted(&store, "d", &q, T0, 3), 2, "{strategy}");
        assert!(full(&store.acquire("e", &q, 1, T0)), "{strategy}");
        // The reset key comes back only if room is made again.
        assert!(full(&store.acquire("a", &q, 1, T0)), "{strategy}");
        assert_eq!(store.len(), 3, "{strategy}");
        // Untouched keys kept their spends through it all.
        assert_eq!(admitted(&store, "b", &q, T0, 1), 0, "{strategy}");
    }
}

#[test]
fn a_stacked_call_needing_more_rooms_than_are_left_is_store_full_and_spends_nothing() {
    let store = capped(3);
    let q = quota(2, secs(3_600), Strategy::FixedWindow);
    assert_eq!(admitted(&store, "old1", &q, T0, 1), 1);
    assert_eq!(admitted(&store, "old2", &q, T0, 1), 1);
    let stack = |keys: &[&'static str]| -> Result<Vec<bool>, Error> {
        let checks: Vec<Check<'_>> = keys
            .iter()
            .map(|k| Check {
                key: StoreKey::new(k).unwrap(),
                quota: &q,
                cost: 1,
            })
            .collect();
        let stacked = Stacked::new(&checks, T0, Mode::Spend)?;
        block_on(store.decide_all(stacked)).map(|ds| ds.iter().map(|d| d.allowed).collect())
    };
    let r = stack(&["old1", "new1", "new2"]);
    assert!(matches!(r, Err(Error::StoreFull { max_keys: 3 })), "{r:?}");
    assert_eq!(store.len(), 2);
    // old1 spent nothing: one call left.
    assert!(store.peek("old1", &q, 1, T0).unwrap().allowed);
    assert_eq!(store.peek("old1", &q, 0, T0).unwrap().remaining, 1);
    // One new key fits: all admitted, and the store is full.
    assert_eq!(stack(&["old1", "new1"]).unwrap(), [true, true]);
    assert_eq!(store.len(), 3);
    assert!(!store.acquire("old1", &q, 1, T0).unwrap().allowed);
}

// ---------------------------------------------------------------------------------------------
// 2. Sweeps: never before a state expired (plus the grace), exactly then; racing decisions.

/// A key exhausted at `T0 + 3 s` (limit 3, window 10 s) and when its state is fresh again.
fn exhausted_with_expiry(store: &MemoryStore, strategy: Strategy) -> (Quota, u64) {
    let q = quota(3, secs(10), strategy);
    let at = T0 + 3 * SEC;
    assert_eq!(admitted(store, "k", &q, at, 3), 3);
    let expiry = match strategy {
        // The window [T0, T0 + 10 s) ends.
        Strategy::FixedWindow => T0 + 10 * SEC,
        // The last entry leaves the log.
        Strategy::SlidingWindow => at + 10 * SEC,
        // The window the calls were counted in stops weighing, one window after it ends.
        Strategy::SlidingWindowCounter => T0 + 20 * SEC,
        // The bucket is full again: three intervals of 10/3 s (rounded down to a whole
        // nanosecond) after `at`.
        Strategy::TokenBucket => at + 3 * (10 * SEC / 3),
    };
    (q, expiry)
}

#[test]
fn every_strategy_keeps_a_key_until_its_expiry_plus_the_grace_and_forgets_it_exactly_then() {
    for strategy in Strategy::ALL {
        let (store, twin) = (MemoryStore::new(), MemoryStore::new());
        let (q, expiry) = exhausted_with_expiry(&store, strategy);
        exhausted_with_expiry(&twin, strategy);
        assert_eq!(store.sweep(expiry + GRACE - 1), 0, "{strategy}: 1 ns early");
        assert_eq!(store.len(), 1, "{strategy}");
        // Just before its expiry, the swept store decides as the store never swept.
        for (at, cost) in [(expiry - 1, 1), (expiry - 1, 0), (expiry - 1, 3)] {
            let (got, want) = (store.peek("k", &q, cost, at), twin.peek("k", &q, cost, at));
            let (got, want) = (got.unwrap(), want.unwrap());
            assert_eq!(
                (got.allowed, got.remaining, got.retry_after),
                (want.allowed, want.remaining, want.retry_after),
                "{strategy} at expiry - 1 ns, cost {cost}"
            );
        }
        assert_eq!(store.sweep(expiry + GRACE), 1, "{strategy}: exactly then");
        assert_eq!(store.len(), 0, "{strategy}");
        // At its expiry the state was a fresh one: both stores agree.
        let (got, want) = (
            store.acquire("k", &q, 3, expiry).unwrap(),
            twin.acquire("k", &q, 3, expiry).unwrap(),
        );
        assert_eq!((got.allowed, got.remaining), (want.allowed, want.remaining));
        assert!(got.allowed, "{strategy}");
        assert!(!store.acquire("k", &q, 1, expiry).unwrap().allowed);
    }
}

#[test]
fn a_clock_stepped_back_behind_a_sweep_gets_one_budget_at_the_sweep_not_one_per_step() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let (q, expiry) = exhausted_with_expiry(&store, strategy);
        let swept_at = expiry + GRACE + 5 * SEC;
        assert_eq!(store.sweep(swept_at), 1, "{strategy}");
        // The floor is the end of what the sweep dropped, the key's (not the sweep's time, less
        // its grace: that held a clock stepped back at the sweep's time for as long as the
        // step, new keys too). Every earlier time, even the first calls', is decided there:
        // one budget of 3 in all.
        let floor = expiry;
        let times = [T0 + 3 * SEC, floor - 1, T0, floor - 7 * SEC, 0, floor];
        let total: usize = times
            .iter()
            .map(|&at| admitted(&store, "k", &q, at, 2))
            .sum();
        assert_eq!(total, 3, "{strategy}");
    }
}

/// Decisions on a store swept at each step, at the time of the step, against a twin never
/// swept: a sweep drops only states that are fresh again, so no decision differs, whatever
/// the strategy, cost, look or gap between calls (a deterministic xorshift drives them).
#[test]
fn a_store_swept_at_every_step_decides_exactly_as_one_never_swept() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for strategy in Strategy::ALL {
        let q = Quota::new(4, Duration::from_millis(700))
            .unwrap()
            .with_burst(1)
            .unwrap()
            .with_strategy(strategy);
        let (swept, twin) = (MemoryStore::new(), MemoryStore::new());
        let mut at = T0;
        let mut dropped = 0;
        for step in 0..3_000 {
            // Gaps from 0 to ~2.5 windows: states expire often, at every phase.
            at += match next(4) {
                0 => 0,
                1 => next(1_000),
                _ => next(1_750_000_000),
            };
            let key = ["a", "b", "c"][next(3) as usize];
            let cost = next(4);
            let commit = cost > 0 && next(4) != 0;
            let decide = |store: &MemoryStore| match commit {
                true => store.acquire(key, &q, cost, at),
                false => store.peek(key, &q, cost, at),
            };
            let (got, want) = (decide(&swept).unwrap(), decide(&twin).unwrap());
            assert_eq!(got, want, "{strategy}, step {step}");
            // A sweep whose floor is `at` itself: whatever expired by now goes.
            dropped += swept.sweep(at + GRACE);
        }
        assert!(
            dropped > 100,
            "{strategy}: the sweeps dropped keys ({dropped})"
        );
    }
}

/// Two threads decide on keys that go idle (and are swept) and come back, while a third
/// sweeps at the shared clock: each fixed window (told by its decisions' reset times)
/// admits at most its limit, so no sweep ever freed a key a decision still counted on.
#[test]
fn sweeps_racing_decisions_never_free_a_live_key() {
    const LIMIT: u64 = 3;
    const STEP: u64 = 500_000; // 0.5 ms of clock per call: 8 s at least
    let store = MemoryStore::new();
    let q = quota(LIMIT, Duration::from_millis(2), Strategy::FixedWindow);
    let clock = AtomicU64::new(T0);
    let done = AtomicBool::new(false);
    let swept = AtomicUsize::new(0);
    let per_window: Vec<std::collections::BTreeMap<(u8, u64), u64>> = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                swept.fetch_add(store.sweep(clock.load(Ordering::SeqCst)), Ordering::SeqCst);
                std::thread::yield_now();
            }
        });
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (store, q, clock, swept) = (&store, &q, &clock, &swept);
                s.spawn(move || {
                    let mut counts = std::collections::BTreeMap::new();
                    // 8,000 calls each, and on until the sweeper has dropped keys while
                    // they decide: on a loaded machine its thread may not have run yet
                    // (once in about ten runs under load), which tested no race at all.
                    let mut calls = 0;
                    while calls < 8_000 || (swept.load(Ordering::SeqCst) == 0 && calls < 400_000) {
                        calls += 1;
                        let at = clock.fetch_add(STEP, Ordering::SeqCst);
                        // Five keys in turn, each busy for 0.5 s then idle for 2 s (swept
                        // meanwhile, from 1 s after its last window ended).
                        let key = ((at - T0) / 500_000_000 % 5) as u8;
                        let d = store.acquire(&format!("k{key}"), q, 1, at).unwrap();
                        if d.allowed {
                            let end = d.reset_at();
                            let end = end.duration_since(std::time::UNIX_EPOCH).unwrap();
                            *counts.entry((key, end.as_nanos() as u64)).or_insert(0) += 1;
                        }
                    }
                    counts
                })
            })
            .collect();
        let all = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        all
    });
    let mut merged: std::collections::BTreeMap<(u8, u64), u64> = std::collections::BTreeMap::new();
    for counts in per_window {
        for (window, n) in counts {
            *merged.entry(window).or_insert(0) += n;
        }
    }
    for (window, n) in &merged {
        assert!(*n <= LIMIT, "window {window:?} admitted {n}");
    }
    assert!(merged.len() > 1_000, "windows seen: {}", merged.len());
    assert!(swept.into_inner() > 0, "the sweeper dropped keys");
}

// ---------------------------------------------------------------------------------------------
// 3. The clock stepping back.

#[test]
fn a_clock_stepped_back_after_a_key_is_exhausted_is_refused_at_every_earlier_time() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let window = 10 * SEC;
        let q = quota(3, secs(10), strategy);
        let t1 = T0 + 7 * SEC;
        assert_eq!(admitted(&store, "k", &q, t1, 3), 3);
        for back in [1, SEC, window / 2, window, window + 1, 10 * window, t1] {
            let d = store.acquire("k", &q, 1, t1 - back).unwrap();
            assert!(!d.allowed, "{strategy}: {back} ns back");
            assert_eq!(d.remaining, 0, "{strategy}: {back} ns back");
            assert!(d.retry_after.unwrap() > Duration::ZERO);
            assert!(!store.peek("k", &q, 1, t1 - back).unwrap().allowed);
        }
        // Two windows on, every strategy is full again: exactly 3.
        assert_eq!(
            admitted(&store, "k", &q, t1 + 2 * window, 5),
            3,
            "{strategy}"
        );
        assert_eq!(store.len(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Extreme quotas, costs and times.

#[test]
fn a_one_nanosecond_window_of_limit_one_admits_at_most_one_call_per_nanosecond() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = Quota::new(1, Duration::from_nanos(1))
            .unwrap()
            .with_strategy(strategy);
        let mut total = 0;
        for t in T0..T0 + 100 {
            let n = admitted(&store, "k", &q, t, 3);
            assert!(n <= 1, "{strategy} at {t}: {n}");
            total += n;
        }
        let want = match strategy {
            // The previous window weighs in full at the start of the next: one in two.
            Strategy::SlidingWindowCounter => 50,
            _ => 100,
        };
        assert_eq!(total, want, "{strategy}");
    }
}

#[test]
fn the_largest_capacity_over_the_longest_window_admits_exactly_its_capacity_and_no_more() {
    for strategy in Strategy::ALL {
        for at in [T0, MAX_NOW - MAX_WINDOW.as_nanos() as u64, MAX_NOW] {
            let store = MemoryStore::new();
            let q = Quota::new(MAX_CAPACITY, MAX_WINDOW)
                .unwrap()
                .with_strategy(strategy);
            let d = store.acquire("k", &q, MAX_CAPACITY, at).unwrap();
            assert!(d.allowed, "{strategy} at {at}");
            assert_eq!(d.remaining, 0);
            assert!(
                !store.acquire("k", &q, 1, at).unwrap().allowed,
                "{strategy}"
            );
            assert!(!store.peek("k", &q, 0, at).unwrap().allowed, "{strategy}");
            let r = store.acquire("k", &q, MAX_CAPACITY + 1, at);
            assert!(
                matches!(r, Err(Error::CostAboveCapacity { .. })),
                "{strategy}: {r:?}"
            );
        }
    }
}

/// A token bucket whose tolerance (interval x capacity) is just under 2^62, at the last time
/// decided: every timestamp it computes stays in range, and it counts exactly.
#[test]
fn a_bucket_at_the_tolerance_bound_counts_exactly_at_the_last_time_decided() {
    let q = Quota::from_parts(1, MAX_WINDOW, 144, Strategy::TokenBucket, Some(1)).unwrap();
    assert!(matches!(
        Quota::from_parts(1, MAX_WINDOW, 146, Strategy::TokenBucket, Some(1)),
        Err(QuotaError::RefillTooSlow)
    ));
    let store = MemoryStore::new();
    assert_eq!(admitted(&store, "k", &q, MAX_NOW, 200), 145);
    assert!(!store.acquire("k", &q, 1, MAX_NOW - 1).unwrap().allowed);
    assert_eq!(store.len(), 1);
}

#[test]
fn costs_of_zero_above_capacity_and_u64_max_are_typed_errors_that_track_nothing() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(5, secs(60), strategy);
        assert!(matches!(
            store.acquire("k", &q, 0, T0),
            Err(Error::ZeroCost)
        ));
        for cost in [6, u64::MAX] {
            let r = store.acquire("k", &q, cost, T0);
            assert!(
                matches!(r, Err(Error::CostAboveCapacity { capacity: 5, .. })),
                "{strategy}: {r:?}"
            );
            assert!(store.peek("k", &q, cost, T0).is_err(), "{strategy}");
        }
        assert_eq!(store.len(), 0, "{strategy}");
        // Cost 5 (the capacity) then 1: exactly the capacity.
        assert!(store.acquire("k", &q, 5, T0).unwrap().allowed);
        assert!(!store.acquire("k", &q, 1, T0).unwrap().allowed);
        // A look at cost 0 on the exhausted key: nothing left, nothing spent.
        let look = store.peek("k", &q, 0, T0).unwrap();
        assert_eq!((look.allowed, look.remaining), (false, 0), "{strategy}");
    }
}

#[test]
fn a_limit_of_zero_refuses_every_call_even_in_a_full_store_and_tracks_no_key() {
    for strategy in Strategy::ALL {
        let store = capped(1);
        let zero = quota(0, secs(60), strategy);
        let one = quota(1, secs(60), strategy);
        for _ in 0..3 {
            let d = store.acquire("z", &zero, 1, T0).unwrap();
            assert!(!d.allowed, "{strategy}");
        }
        assert_eq!(store.len(), 0);
        assert_eq!(admitted(&store, "a", &one, T0, 1), 1);
        assert!(!store.acquire("z", &zero, 1, T0).unwrap().allowed);
    }
}

#[test]
fn quotas_beyond_the_stores_counters_are_refused_before_any_key_is_tracked() {
    let (service, _clock) = service(Config::builder().default_limit(5).build().unwrap());
    let store = service.memory_store().unwrap().clone();
    let too_big = [
        Options::new().limit(u64::MAX),
        Options::new().limit(MAX_CAPACITY + 1),
        Options::new().limit(MAX_CAPACITY).burst(1),
        Options::new().window(MAX_WINDOW + Duration::from_nanos(1)),
        Options::new().window(secs(100 * 365 * 86_400)),
        Options::new().limit(2).window(Duration::from_nanos(1)),
    ];
    for options in &too_big {
        let r = block_on(service.consume("k", options));
        assert!(
            matches!(r, Err(Error::InvalidQuota(_))),
            "{options:?}: {r:?}"
        );
        let r = block_on(service.status("k", options));
        assert!(
            matches!(r, Err(Error::InvalidQuota(_))),
            "{options:?}: {r:?}"
        );
    }
    assert_eq!(store.len(), 0);
    assert_eq!(service.stats().total.allowed, 0);
}

#[test]
fn now_at_the_last_time_decided_counts_exactly_and_one_past_it_is_clock_out_of_range() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(2, MAX_WINDOW, strategy);
        assert_eq!(admitted(&store, "k", &q, MAX_NOW, 1), 1);
        for past in [MAX_NOW + 1, u64::MAX - 1, u64::MAX] {
            for r in [
                store.acquire("k", &q, 1, past),
                store.peek("k", &q, 1, past),
                store.acquire("new", &q, 1, past),
            ] {
                assert!(
                    matches!(r, Err(Error::ClockOutOfRange { now_nanos }) if now_nanos == past),
                    "{strategy}: {r:?}"
                );
            }
        }
        assert_eq!(store.len(), 1);
        assert_eq!(admitted(&store, "k", &q, MAX_NOW, 3), 1, "{strategy}");
    }
}

#[test]
fn a_sweep_past_the_last_time_decided_never_turns_later_decisions_into_panics_or_allowances() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(1, secs(60), strategy);
        store.sweep(u64::MAX);
        let outcomes: Result<Vec<Result<bool, Error>>, _> = std::panic::catch_unwind(|| {
            (0..3)
                .map(|_| store.acquire("k", &q, 1, T0).map(|d| d.allowed))
                .collect()
        });
        let outcomes = outcomes.unwrap_or_else(|_| panic!("{strategy}: a decision panicked"));
        let allowed = outcomes.iter().filter(|r| matches!(r, Ok(true))).count();
        assert!(allowed <= 1, "{strategy}: {outcomes:?}");
    }
}

#[test]
fn a_penalty_at_a_clock_past_the_last_time_decided_is_an_error_and_leaves_decisions_exact() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .default_limit(2)
            .default_window("1m")
            .strategy(strategy)
            .build()
            .unwrap();
        let (service, clock) = service(config);
        let options = Options::new();
        clock.set(Duration::from_nanos(u64::MAX - 5));
        let penalty = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            block_on(service.penalize("other", &options, 1))
        }));
        let penalty = penalty.unwrap_or_else(|_| panic!("{strategy}: the penalty panicked"));
        assert!(
            matches!(penalty, Err(Error::ClockOutOfRange { .. })),
            "{strategy}: {penalty:?}"
        );
        clock.set(Duration::from_nanos(T0));
        let outcomes = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (0..4)
                .map(|_| block_on(service.consume("k", &options)).map(|d| d.allowed))
                .collect::<Vec<_>>()
        }));
        let outcomes = outcomes.unwrap_or_else(|_| panic!("{strategy}: a decision panicked"));
        let allowed = outcomes.iter().filter(|r| matches!(r, Ok(true))).count();
        assert_eq!(allowed, 2, "{strategy}: {outcomes:?}");
    }
}

#[test]
fn a_refund_after_the_clock_once_read_past_the_last_time_decided_leaves_decisions_exact() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .default_limit(2)
            .default_window("1m")
            .strategy(strategy)
            .build()
            .unwrap();
        let (service, clock) = service(config);
        let options = Options::new();
        let spent = block_on(service.spend("k", &options)).unwrap();
        // The clock jumps far ahead and back (no call meanwhile): its latest reading stays.
        clock.set(Duration::from_nanos(u64::MAX - 5));
        clock.set(Duration::from_nanos(T0));
        let refund =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(spent.refund())));
        // Given back or not (or an error): either way, no panic.
        let _ = refund.unwrap_or_else(|_| panic!("{strategy}: the refund panicked"));
        let outcomes = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (0..4)
                .map(|_| block_on(service.consume("k", &options)).map(|d| d.allowed))
                .collect::<Vec<_>>()
        }));
        let outcomes = outcomes.unwrap_or_else(|_| panic!("{strategy}: a decision panicked"));
        let allowed = outcomes.iter().filter(|r| matches!(r, Ok(true))).count();
        // One spent before; the refund gave it back or not: 1 or 2 more, never 3.
        assert!(allowed <= 2, "{strategy}: {outcomes:?}");
        assert!(allowed >= 1, "{strategy}: {outcomes:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Keys: lengths, and keys alike but for a byte.

#[test]
fn bare_keys_of_1_to_4096_bytes_are_counted_and_empty_or_longer_ones_are_invalid() {
    let store = MemoryStore::new();
    let q = quota(1, secs(60), Strategy::SlidingWindow);
    let at_limit = [
        "x".to_owned(),
        "a".repeat(MAX_STORE_KEY),
        format!("{}é", "a".repeat(MAX_STORE_KEY - 2)),
        format!("{}\u{10FFFF}", "a".repeat(MAX_STORE_KEY - 4)),
    ];
    for key in &at_limit {
        assert_eq!(key.len().min(MAX_STORE_KEY), key.len());
        assert_eq!(admitted(&store, key, &q, T0, 2), 1, "{} bytes", key.len());
    }
    let invalid = [
        String::new(),
        "a".repeat(MAX_STORE_KEY + 1),
        format!("{}é", "a".repeat(MAX_STORE_KEY - 1)),
        format!("{}\u{10FFFF}", "a".repeat(MAX_STORE_KEY - 3)),
    ];
    for key in &invalid {
        for r in [store.acquire(key, &q, 1, T0), store.peek(key, &q, 1, T0)] {
            assert!(
                matches!(r, Err(Error::InvalidKey { .. })),
                "{} bytes: {r:?}",
                key.len()
            );
        }
        assert!(!store.reset(key));
    }
    assert_eq!(store.len(), at_limit.len());
}

#[test]
fn bare_keys_that_are_prefixes_or_differ_in_one_byte_never_share_a_budget() {
    let long = "k".repeat(MAX_STORE_KEY - 1);
    let keys = [
        "a".to_owned(),
        "aa".to_owned(),
        "a\0".to_owned(),
        "\0a".to_owned(),
        "\0".to_owned(),
        "a ".to_owned(),
        "ab".to_owned(),
        "ac".to_owned(),
        "A".to_owned(),
        "é".to_owned(),
        "e\u{301}".to_owned(),
        "\u{FFFF}".to_owned(),
        "\u{FFFE}".to_owned(),
        "\u{10FFFF}".to_owned(),
        "ÿ".to_owned(),
        "\u{FEFF}a".to_owned(),
        long.clone(),
        format!("{long}a"),
        format!("{long}b"),
        format!("{}ab", &long[1..]),
    ];
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(1, secs(60), strategy);
        for key in &keys {
            assert_eq!(admitted(&store, key, &q, T0, 1), 1, "{strategy}: {key:?}");
        }
        for key in &keys {
            assert_eq!(admitted(&store, key, &q, T0, 1), 0, "{strategy}: {key:?}");
        }
        assert_eq!(store.len(), keys.len(), "{strategy}");
        // A reset of one forgets that one alone.
        assert!(store.reset("a"));
        assert_eq!(admitted(&store, "a", &q, T0, 2), 1);
        for key in &keys[1..] {
            assert_eq!(admitted(&store, key, &q, T0, 1), 0, "{strategy}: {key:?}");
        }
    }
}

#[test]
fn user_keys_at_the_limit_and_look_alike_user_keys_have_budgets_of_their_own() {
    let (service, _clock) = service(Config::builder().default_limit(1).build().unwrap());
    let store = service.memory_store().unwrap().clone();
    let options = Options::new();
    let keys = [
        "a".to_owned(),
        "a:".to_owned(),
        ":a".to_owned(),
        "a:-".to_owned(),
        "{a}".to_owned(),
        "{a".to_owned(),
        "a}".to_owned(),
        "}a{".to_owned(),
        "a:{}".to_owned(),
        "#a".to_owned(),
        "u".repeat(MAX_KEY_LEN),
        format!("{}v", "u".repeat(MAX_KEY_LEN - 1)),
        format!("{{{}", "u".repeat(MAX_KEY_LEN - 1)),
    ];
    for key in &keys {
        let d = block_on(service.consume(key, &options)).unwrap();
        assert!(d.allowed, "{key:?}");
    }
    for key in &keys {
        let d = block_on(service.consume(key, &options)).unwrap();
        assert!(!d.allowed, "{key:?}");
    }
    assert_eq!(store.len(), keys.len());
    for key in ["", &"u".repeat(MAX_KEY_LEN + 1)] {
        let r = block_on(service.consume(key, &options));
        assert!(matches!(r, Err(Error::InvalidKey { .. })), "{r:?}");
    }
    assert_eq!(store.len(), keys.len());
}

// ---------------------------------------------------------------------------------------------
// 6. One key, two shapes: another strategy, another window, another limit.

#[test]
fn a_bare_key_held_under_another_strategy_is_refused_on_every_path_and_kept() {
    for held in Strategy::ALL {
        for asked in Strategy::ALL.into_iter().filter(|&s| s != held) {
            let store = MemoryStore::new();
            let q = quota(2, secs(60), held);
            assert_eq!(admitted(&store, "k", &q, T0, 2), 2);
            let other = quota(2, secs(60), asked);
            let key = StoreKey::new("k").unwrap();
            assert!(
                unexpected(&store.acquire("k", &other, 1, T0)),
                "{held}/{asked}"
            );
            assert!(
                unexpected(&store.peek("k", &other, 0, T0)),
                "{held}/{asked}"
            );
            let blocking = other.with_block(secs(60)).unwrap();
            assert!(unexpected(&store.acquire("k", &blocking, 1, T0)));
            for penalty in [true, false] {
                let adjustment = match penalty {
                    true => Adjustment::penalty(key, &other, 1, T0),
                    false => Adjustment::reward(key, &other, 1, T0),
                };
                let r = block_on(store.adjust(adjustment));
                assert!(unexpected(&r), "{held}/{asked} penalty {penalty}: {r:?}");
            }
            let fresh = quota(2, secs(60), held);
            let checks = [
                Check {
                    key: StoreKey::new("fresh").unwrap(),
                    quota: &fresh,
                    cost: 1,
                },
                Check {
                    key,
                    quota: &other,
                    cost: 1,
                },
            ];
            let stacked = Stacked::new(&checks, T0, Mode::Spend).unwrap();
            let r = block_on(store.decide_all(stacked));
            assert!(unexpected(&r), "{held}/{asked}: {r:?}");
            // Nothing changed: the state is still exhausted, and "fresh" spent nothing.
            assert_eq!(admitted(&store, "k", &q, T0, 1), 0, "{held}/{asked}");
            assert_eq!(store.len(), 1, "{held}/{asked}");
        }
    }
}

#[test]
fn a_bare_key_read_under_another_window_is_never_a_fresh_budget() {
    let mut ways_through = Vec::new();
    for strategy in Strategy::ALL {
        for other_window in 1..=12 {
            if other_window == 10 {
                continue;
            }
            let store = MemoryStore::new();
            let q = quota(2, secs(10), strategy);
            let other = quota(2, secs(other_window), strategy);
            let at = T0 + 5 * SEC;
            assert_eq!(admitted(&store, "k", &q, at, 2), 2);
            // At the same instant: two calls were admitted then, so a quota of 2 in any window
            // has nothing left. A refusal or `UnexpectedState` both hold the line.
            for _ in 0..2 {
                match store.acquire("k", &other, 1, at) {
                    Ok(d) if d.allowed => ways_through.push((strategy, other_window)),
                    Ok(_) | Err(Error::UnexpectedState { .. }) => {}
                    Err(e) => panic!("{strategy}, {other_window} s: {e:?}"),
                }
            }
        }
    }
    assert!(ways_through.is_empty(), "admitted: {ways_through:?}");
}

#[test]
fn a_bare_key_read_under_another_limit_keeps_its_spends() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let three = quota(3, secs(10), strategy);
        let five = quota(5, secs(10), strategy);
        let two = quota(2, secs(10), strategy);
        assert_eq!(admitted(&store, "k", &three, T0, 3), 3);
        assert_eq!(admitted(&store, "k", &two, T0, 3), 0, "{strategy}");
        let more = admitted(&store, "k", &five, T0, 5);
        assert!(more <= 2, "{strategy}: {more} more under a limit of 5");
        assert_eq!(admitted(&store, "k", &three, T0, 3), 0, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Resets racing decisions.

#[test]
fn resets_racing_decisions_never_admit_more_than_a_budget_per_reset_and_leave_counts_exact() {
    const LIMIT: usize = 50;
    const RESETS: usize = 5;
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(LIMIT as u64, secs(3_600), strategy);
        let (done, peak) = (AtomicBool::new(false), AtomicUsize::new(0));
        let (total, resets) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (store, q, done, peak) = (&store, &q, &done, &peak);
                    s.spawn(move || {
                        let mut n = 0;
                        while !done.load(Ordering::SeqCst) {
                            n += admitted(store, "hot", q, T0, 10);
                            peak.fetch_max(store.len(), Ordering::SeqCst);
                        }
                        n
                    })
                })
                .collect();
            let mut resets = 0;
            for _ in 0..RESETS {
                // Wait until the budget is spent, then reset it.
                while store.peek("hot", &q, 0, T0).unwrap().remaining > 0 {
                    std::thread::yield_now();
                }
                resets += usize::from(store.reset("hot"));
            }
            done.store(true, Ordering::SeqCst);
            let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
            (total, resets)
        });
        assert_eq!(resets, RESETS, "{strategy}: each reset found the key");
        // A budget before the first reset and one after each: the last is spent or not yet.
        assert!(total <= LIMIT * (RESETS + 1), "{strategy}: {total}");
        assert!(total >= LIMIT * RESETS, "{strategy}: {total}");
        // One key, counted once: `reset` counts it off under the shard's lock (it counted it
        // off after, and a spend storing it again in between had `len()` read 2).
        assert!(peak.into_inner() <= 1, "{strategy}");
        // Once the reset is done, exactly a budget.
        store.reset("hot");
        assert_eq!(store.len(), 0, "{strategy}");
        assert_eq!(
            admitted(&store, "hot", &q, T0, LIMIT + 10),
            LIMIT,
            "{strategy}"
        );
        assert_eq!(store.len(), 1, "{strategy}");
    }
}

#[test]
fn a_service_reset_racing_consumes_from_threads_leaves_the_next_budget_exact() {
    const LIMIT: u64 = 20;
    let config = Config::builder()
        .default_limit(LIMIT)
        .default_window("1h")
        .build()
        .unwrap();
    let (service, _clock) = service(config);
    let options = Options::new();
    let done = AtomicBool::new(false);
    let allowed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (service, options, done, allowed) = (&service, &options, &done, &allowed);
            s.spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    let d = block_on(service.consume("user", options)).unwrap();
                    allowed.fetch_add(u64::from(d.allowed), Ordering::SeqCst);
                }
            });
        }
        for _ in 0..10 {
            block_on(service.reset("user", None)).unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    let allowed = allowed.into_inner();
    assert!(allowed <= LIMIT * 11, "{allowed}");
    assert_eq!(service.stats().total.allowed, allowed);
    block_on(service.reset("user", None)).unwrap();
    let store = service.memory_store().unwrap();
    assert_eq!(store.len(), 0);
    let after = (0..LIMIT + 5)
        .filter(|_| block_on(service.consume("user", &options)).unwrap().allowed)
        .count();
    assert_eq!(after as u64, LIMIT);
    assert_eq!(store.len(), 1);
}

/// A reset drops the key's cell under the shard's lock and takes it off `len()` just after
/// (mod.rs, `reset`), so a spend in between can count the key again for a moment (the test
/// above reads 2 for one key in a store without a cap). In a store of one, the cap still
/// holds: `len()` never reads more than 1, and every spend is admitted or refused as full.
#[test]
fn a_reset_racing_spends_on_its_key_never_lets_a_store_of_one_count_two() {
    let store = capped(1);
    let q = quota(1_000_000, secs(3_600), Strategy::FixedWindow);
    let (done, peak) = (AtomicBool::new(false), AtomicUsize::new(0));
    let (spends, full_refusals) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for _ in 0..20_000 {
                store.reset("k");
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            barrier.wait();
            let mut n = 0;
            while n < 2_000 || !done.load(Ordering::SeqCst) {
                match store.acquire("k", &q, 1, T0) {
                    Ok(d) => assert!(d.allowed, "a fresh or reset key has its budget"),
                    Err(Error::StoreFull { max_keys: 1 }) => {
                        full_refusals.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("{e:?}"),
                }
                peak.fetch_max(store.len(), Ordering::SeqCst);
                n += 1;
            }
            spends.store(n, Ordering::SeqCst);
        });
    });
    assert_eq!(peak.into_inner(), 1);
    assert!(full_refusals.into_inner() < spends.into_inner());
    assert!(store.len() <= 1);
}

/// A bare key asked under two windows, every strategy: a minute's 3 spends, then a call
/// under a second (limit 100) 2 s later, then the minute again. The sliding log's second
/// dropped the minute's entries (they had left its window) and the minute admitted 2 more:
/// 5 in a minute limited to 3. Now the log keeps the window that last spent on it, and the
/// other window is refused while that one counts (`algorithm::written_elsewhere`).
#[test]
fn a_shorter_windows_call_never_drops_a_longer_windows_spends() {
    let sec = 1_000_000_000u64;
    let t = 1_000 * 60 * sec;
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let minute = Quota::new(3, Duration::from_secs(60))
            .unwrap()
            .with_strategy(strategy);
        let second = Quota::new(100, Duration::from_secs(1))
            .unwrap()
            .with_strategy(strategy);
        let admitted =
            |quota: &Quota, at: u64| store.acquire("k", quota, 1, at).is_ok_and(|d| d.allowed);
        assert_eq!((0..3).filter(|_| admitted(&minute, t)).count(), 3);
        let _ = admitted(&second, t + 2 * sec);
        let again = (0..5)
            .filter(|i| admitted(&minute, t + 3 * sec + i))
            .count();
        assert_eq!(again, 0, "{strategy}: the minute admitted more than its 3");
    }
}
