//! Probes of the memory store's windowed keys (commit 0f3c12d): a word cell (fixed window,
//! sliding-window counter, token bucket) keeps what it needs of the last quota that spent on
//! its state at the end of its key's own allocation (`StampedKey`, after an optional stamp:
//! a word cell's window; a token bucket's interval and window), and a bare key asked under
//! another window is decided by `algorithm::written_elsewhere`: refused while the state
//! counts by its own window, claimed fresh (under the shard's write lock) once it has
//! passed; adjustments by `cells::adjust_written`; a bucket's reward only under the one
//! quota that spent on it since it was last full.
//!
//! What is attacked: key bytes that could be confused with the layout (1 byte, 8 bytes, a
//! key ending in a window's bytes, multi-byte UTF-8, 4096 bytes); looks, rewards and
//! penalties that claim or rewrite a state another window still counts at an older clock
//! read (three ways through, fixed: a look claimed it empty, a reward or a penalty of nothing
//! wrote it fresh); stacked calls and blocks on a bucket another window emptied (a way
//! through, fixed: its look read it as fresh); a bucket's rewards under two quotas of one
//! window (a way through, fixed: the key keeps the interval too); resets, sweeps and a full
//! store around claims; one key text under two strategies; two threads racing a claim
//! against spends on the read path; a bucket alternating two quotas with rewards, against a
//! reference fed one quota's calls only; refunds across a claim (through the service's key);
//! memory back to its baseline after a sweep; and, randomized, that nothing spending under
//! another window (looks, rewards, penalties of nothing) ever frees a state.
//!
//! Each test is named after the way through it guards against.

use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use std::time::Duration;

use ratelimit::store::{Adjustment, Check, Mode, Request, Stacked, Store, StoreKey};
use ratelimit::{Clock, Decision, Error, MemoryOptions, MemoryStore, Quota, Strategy};
use ratelimit_tests::{net_bytes, CountingAllocator};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const NS: u64 = 1_000_000_000;
/// A whole day's second: every window used here divides it.
const T0: u64 = 20_000 * 86_400 * NS;

/// The strategies whose cells keep their window in the key's bytes.
const WORDS: [Strategy; 2] = [Strategy::FixedWindow, Strategy::SlidingWindowCounter];
/// Every strategy that keeps a window beside its state (the log's cell keeps it itself).
const WINDOWED: [Strategy; 3] = [
    Strategy::FixedWindow,
    Strategy::SlidingWindowCounter,
    Strategy::SlidingWindow,
];

fn quota(limit: u64, window: Duration, strategy: Strategy) -> Quota {
    Quota::new(limit, window).unwrap().with_strategy(strategy)
}

fn secs(limit: u64, s: u64, strategy: Strategy) -> Quota {
    quota(limit, Duration::from_secs(s), strategy)
}

/// A memory store that sweeps only when asked (its first decision sweeps once, at its time).
fn memory() -> MemoryStore {
    memory_with(MemoryOptions::default())
}

fn memory_with(options: MemoryOptions) -> MemoryStore {
    MemoryStore::with_options(options.sweep_interval(Duration::from_secs(1_000_000_000)))
}

fn spend(store: &MemoryStore, key: &str, q: &Quota, now: u64) -> bool {
    store.acquire(key, q, 1, now).unwrap().allowed
}

/// Spends of cost 1 at `now` until one is refused (at most 1,000): how many were admitted.
fn drain(store: &MemoryStore, key: &str, q: &Quota, now: u64) -> u64 {
    (0..1_000).take_while(|_| spend(store, key, q, now)).count() as u64
}

fn decide(store: &MemoryStore, key: &str, q: &Quota, cost: u64, now: u64, mode: Mode) -> Decision {
    let request = Request::new(StoreKey::new(key).unwrap(), q, cost, now, mode).unwrap();
    futures::executor::block_on(Store::decide(store, request)).unwrap()
}

fn adjust(store: &MemoryStore, adjustment: Adjustment<'_>) -> Result<u64, Error> {
    futures::executor::block_on(Store::adjust(store, adjustment))
}

fn penalty(store: &MemoryStore, key: &str, q: &Quota, units: u64, now: u64) -> u64 {
    adjust(
        store,
        Adjustment::penalty(StoreKey::new(key).unwrap(), q, units, now),
    )
    .unwrap()
}

fn reward(store: &MemoryStore, key: &str, q: &Quota, units: u64, now: u64) -> u64 {
    adjust(
        store,
        Adjustment::reward(StoreKey::new(key).unwrap(), q, units, now),
    )
    .unwrap()
}

fn stacked(store: &MemoryStore, checks: &[Check<'_>], now: u64, mode: Mode) -> Vec<Decision> {
    let s = Stacked::new(checks, now, mode).unwrap();
    store.decide_all_now(s).unwrap().unwrap()
}

fn check<'a>(key: &'a str, quota: &'a Quota) -> Check<'a> {
    Check {
        key: StoreKey::new(key).unwrap(),
        quota,
        cost: 1,
    }
}

fn each(strategies: &[Strategy], probe: impl Fn(Strategy) -> Result<(), String>) {
    let failed: Vec<_> = strategies.iter().filter_map(|&s| probe(s).err()).collect();
    assert!(failed.is_empty(), "{failed:?}");
}

// ---- Key bytes and the layout ----------------------------------------------------------------

/// Keys of every length the layout could confuse (1 byte, 7, 8, 9, multi-byte UTF-8, the
/// longest), each spent under one window then asked under another: each key is its own state,
/// found again under its own window (never a second cell: `len()` one a key), refused under
/// the other while it counts.
#[test]
fn a_key_of_any_length_is_one_state_and_keeps_its_window() {
    let long = "x".repeat(4096);
    let keys = [
        "a",
        "abcdefg",
        "abcdefgh",
        "abcdefghi",
        "é",
        "日本語のキー",
        "🦀🦀",
        long.as_str(),
    ];
    each(&WINDOWED, |strategy| {
        let store = memory();
        let minute = secs(3, 60, strategy);
        let second = secs(100, 1, strategy);
        for key in keys {
            if drain(&store, key, &minute, T0) != 3 {
                return Err(format!("{strategy:?} {key:.9}: not 3 at first"));
            }
        }
        if store.len() != keys.len() {
            return Err(format!("{strategy:?}: {} keys", store.len()));
        }
        for key in keys {
            let admitted = drain(&store, key, &second, T0 + NS);
            let again = drain(&store, key, &minute, T0 + 2 * NS);
            if admitted + again > 0 {
                return Err(format!("{strategy:?} {key:.9}: {admitted} + {again} more"));
            }
        }
        match store.len() == keys.len() {
            true => Ok(()),
            false => Err(format!("{strategy:?}: {} keys after", store.len())),
        }
    });
}

/// A key whose text is another key's bytes followed by exactly the bytes of the window kept
/// after it (1 s: `00 CA 9A 3B 00 00 00 00`, valid UTF-8): the two are two states, never
/// one key found as the other (a lookup by the stored bytes would find `ab` for it).
#[test]
fn a_key_ending_in_a_windows_bytes_is_never_another_key() {
    let window = NS.to_le_bytes();
    let mut bytes = b"ab".to_vec();
    bytes.extend_from_slice(&window);
    let confusable = String::from_utf8(bytes).expect("the window's bytes are text");
    each(&WORDS, |strategy| {
        let store = memory();
        let second = secs(2, 1, strategy);
        let a = drain(&store, "ab", &second, T0);
        let b = drain(&store, &confusable, &second, T0);
        let again = drain(&store, "ab", &second, T0);
        match (a, b, again, store.len()) {
            (2, 2, 0, 2) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

/// One key text under two strategies, through every path that claims (a spend, a look, a
/// penalty, a reward, a stacked call, a call with a block), before and after the first
/// strategy's window passed: always `UnexpectedState`, never a second cell.
#[test]
fn a_key_under_two_strategies_is_refused_whatever_its_window() {
    let fixed = secs(3, 1, Strategy::FixedWindow);
    for other in [
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
        Strategy::SlidingWindow,
    ] {
        let store = memory();
        assert_eq!(drain(&store, "k", &fixed, T0), 3);
        for at in [T0, T0 + 5 * NS] {
            let q = secs(5, 2, other);
            let blocked = q.with_block(Duration::from_secs(3)).unwrap();
            let key = StoreKey::new("k").unwrap();
            let unexpected =
                |r: Result<Decision, Error>| matches!(r, Err(Error::UnexpectedState { .. }));
            assert!(unexpected(store.acquire("k", &q, 1, at)), "{other:?}");
            assert!(unexpected(store.peek("k", &q, 0, at)), "{other:?}");
            assert!(unexpected(store.acquire("k", &blocked, 1, at)), "{other:?}");
            for adjustment in [
                Adjustment::penalty(key, &q, 1, at),
                Adjustment::reward(key, &q, 1, at),
            ] {
                assert!(
                    matches!(
                        adjust(&store, adjustment),
                        Err(Error::UnexpectedState { .. })
                    ),
                    "{other:?}"
                );
            }
            let checks = [check("k", &q)];
            let s = Stacked::new(&checks, at, Mode::Spend).unwrap();
            assert!(
                matches!(
                    store.decide_all_now(s).unwrap(),
                    Err(Error::UnexpectedState { .. })
                ),
                "{other:?}"
            );
            assert_eq!(store.len(), 1, "{other:?}");
        }
    }
}

// ---- A state another window still counts, at an earlier clock read -------------------------

/// A second's quota spends its 3 in its second (`history`).
fn second_spent(strategy: Strategy) -> (MemoryStore, Quota, Quota, u64) {
    let store = memory();
    let second = secs(3, 1, strategy);
    let minute = secs(100, 60, strategy);
    assert_eq!(drain(&store, "k", &second, T0 + NS / 2), 3);
    // The counter's spends count into the next second too: its state passes after two.
    let passed = match strategy {
        Strategy::SlidingWindowCounter => T0 + 2 * NS,
        // The log's entries count a second from when they were made.
        Strategy::SlidingWindow => T0 + NS + NS / 2,
        _ => T0 + NS,
    };
    (store, second, minute, passed)
}

/// Once the second's state has passed (by one caller's clock), `step` under the minute on the
/// bare key; then a caller whose clock read is still in the second's state (a clock stepped
/// back, or a caller holding an older `now`) asks under the second: it must be admitted as
/// often as on a store where `step` never ran.
fn never_erases(
    strategy: Strategy,
    step: impl Fn(&MemoryStore, &Quota, u64) -> String,
) -> Result<(), String> {
    let (store, second, minute, passed) = second_spent(strategy);
    let (reference, ..) = second_spent(strategy);
    let did = step(&store, &minute, passed);
    let earlier = passed - NS / 4;
    let want = drain(&reference, "k", &second, earlier);
    let got = drain(&store, "k", &second, earlier);
    match got == want {
        true => Ok(()),
        false => Err(format!(
            "{strategy:?}: after {did}, {got} admitted at the earlier clock (without it {want})"
        )),
    }
}

/// A look under the minute spends nothing, so it must not erase the second's count. Before,
/// the look claimed the state for the minute with nothing spent (an empty word, its expiry
/// 0), the second's caller claimed it back, fresh, and the second admitted 3 more in the
/// second it had spent (6 against 3); the log's cell looks without claiming.
#[test]
fn a_look_under_another_window_never_erases_a_state_an_earlier_clock_still_counts() {
    each(&WINDOWED, |strategy| {
        never_erases(strategy, |store, minute, now| {
            let look = store.peek("k", minute, 1, now).unwrap();
            format!("a look (allowed {})", look.allowed)
        })
    });
}

/// The same with a look of cost 0 (a look at the level: two looks) and a `Mode::Look`
/// request.
#[test]
fn a_look_at_the_level_under_another_window_never_erases_a_state() {
    each(&WINDOWED, |strategy| {
        never_erases(strategy, |store, minute, now| {
            store.peek("k", minute, 0, now).unwrap();
            decide(store, "k", minute, 1, now, Mode::Look);
            "looks at the level".into()
        })
    });
}

/// A reward under another window on a state whose window has passed gives nothing (nothing of
/// it is this window's, and a fresh state has nothing to give back), and must not erase the
/// state. Before, the reward wrote a fresh state over the second's count (its window still
/// kept), and the second admitted 3 more in the second it had spent.
#[test]
fn a_reward_under_another_window_never_erases_a_state_an_earlier_clock_still_counts() {
    each(&WINDOWED, |strategy| {
        never_erases(strategy, |store, minute, now| {
            format!("a reward (gave {})", reward(store, "k", minute, 3, now))
        })
    });
}

/// A penalty of nothing (0 units) under another window on a passed state moves nothing, so it
/// writes nothing either (before, it wrote a fresh state over the second's count, as the
/// reward did).
#[test]
fn a_penalty_of_nothing_under_another_window_never_erases_a_state() {
    each(&WINDOWED, |strategy| {
        never_erases(strategy, |store, minute, now| {
            format!(
                "a penalty of 0 (moved {})",
                penalty(store, "k", minute, 0, now)
            )
        })
    });
}

/// A penalty under the minute once the second's state passed: the minute owns the key from
/// then (its penalty counts), and a caller still in the second is refused by the minute's
/// state, never decided on a fresh one.
#[test]
fn a_penalty_under_another_window_after_a_state_passed_is_the_new_windows() {
    each(&WORDS, |strategy| {
        let store = memory();
        let second = secs(3, 1, strategy);
        let minute = secs(4, 60, strategy);
        assert_eq!(drain(&store, "k", &second, T0 + NS / 2), 3);
        let moved = penalty(&store, "k", &minute, 2, T0 + 2 * NS);
        let back = drain(&store, "k", &second, T0 + 2 * NS - NS / 4);
        let minute_left = drain(&store, "k", &minute, T0 + 3 * NS);
        match (moved, back, minute_left) {
            (2, 0, 2) => Ok(()),
            got => Err(format!("{strategy:?}: (moved, second, minute) {got:?}")),
        }
    });
}

/// A spend claim under the second, then the clock stepping back into the minute's window the
/// claim ended: the minute's caller is refused while the second's state counts, and the
/// second is decided in its own recorded window (never a fresh one before it).
#[test]
fn a_clock_stepping_back_across_a_claim_never_reopens_either_window() {
    each(&WORDS, |strategy| {
        let store = memory();
        let minute = secs(3, 60, strategy);
        let second = secs(2, 1, strategy);
        let end = match strategy {
            Strategy::SlidingWindowCounter => T0 + 120 * NS,
            _ => T0 + 60 * NS,
        };
        assert_eq!(drain(&store, "k", &minute, T0 + 59 * NS), 3);
        assert_eq!(drain(&store, "k", &second, end), 2);
        let mut more = 0;
        for back in [NS / 2, NS, 30 * NS] {
            more += drain(&store, "k", &minute, end - back);
            more += drain(&store, "k", &second, end - back);
        }
        match more {
            0 => Ok(()),
            n => Err(format!("{strategy:?}: {n} more")),
        }
    });
}

// ---- Penalties and rewards on new and claimed keys --------------------------------------------

/// A penalty on a key not stored yet under the minute, then the second on it: refused while
/// the minute's penalty counts (never a fresh second), and a reward under the second gives
/// the minute's penalty back to nothing.
#[test]
fn a_penalty_on_a_new_key_is_its_windows_and_no_other_windows_reward_takes_it() {
    each(&WINDOWED, |strategy| {
        let store = memory();
        let minute = secs(3, 60, strategy);
        let second = secs(5, 1, strategy);
        let moved = penalty(&store, "k", &minute, 2, T0 + NS);
        let gave = reward(&store, "k", &second, 2, T0 + 2 * NS);
        let second_admitted = drain(&store, "k", &second, T0 + 3 * NS);
        let minute_left = drain(&store, "k", &minute, T0 + 4 * NS);
        match (moved, gave, second_admitted, minute_left, store.len()) {
            (2, 0, 0, 1, 1) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

/// Stamps and windows share the key's allocation: a kept spend stamps the key, a reward (a
/// new stamp) and a claim by another window rewrite it; each keeps the other part, and the
/// key is found (one cell) at every step, under its own window's count.
#[test]
fn a_stamp_and_a_window_rewritten_in_turn_keep_one_cell_and_its_count() {
    each(&WORDS, |strategy| {
        let store = memory();
        let second = secs(4, 1, strategy);
        let minute = secs(4, 60, strategy);
        let at = T0 + 10 * NS;
        let kept = decide(&store, "key-é", &second, 1, at, Mode::Keep);
        if !kept.allowed || kept.stamp() == 0 {
            return Err(format!("{strategy:?}: kept spend {kept:?}"));
        }
        assert!(spend(&store, "key-é", &second, at));
        assert_eq!(reward(&store, "key-é", &second, 1, at), 1);
        // 1 spent of 4 in this second, the key stamped twice: 3 left.
        let left = drain(&store, "key-é", &second, at);
        let under_minute = drain(&store, "key-é", &minute, at + NS / 2);
        // The minute claims it once the second's state passed, then the key is its.
        let later = at + 3 * NS;
        let kept2 = decide(&store, "key-é", &minute, 1, later, Mode::Keep);
        let minute_left = drain(&store, "key-é", &minute, later);
        let second_after = drain(&store, "key-é", &second, later + NS);
        match (
            left,
            under_minute,
            kept2.allowed,
            minute_left,
            second_after,
            store.len(),
        ) {
            (3, 0, true, 3, 0, 1) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

// ---- Resets, sweeps, a full store ---------------------------------------------------------------

/// A reset ends the key whatever window wrote it: another window then has its whole limit at
/// once, and the first window's state is gone (one cell again once spent, none after a reset).
#[test]
fn a_reset_windowed_key_is_fresh_under_any_window() {
    each(&WINDOWED, |strategy| {
        let store = memory();
        let minute = secs(3, 60, strategy);
        let second = secs(5, 1, strategy);
        assert_eq!(drain(&store, "k", &minute, T0), 3);
        assert!(store.reset("k"));
        let len_after_reset = store.len();
        let second_admitted = drain(&store, "k", &second, T0 + NS);
        let minute_admitted = drain(&store, "k", &minute, T0 + NS + NS / 2);
        match (
            len_after_reset,
            second_admitted,
            minute_admitted,
            store.len(),
        ) {
            (0, 5, 0, 1) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

/// A swept windowed key (its state passed) is gone: another window then stores it afresh
/// with its whole limit (one cell), and a sweep before the state passed keeps it, refused
/// under the other window.
#[test]
fn a_swept_windowed_key_is_fresh_under_another_window_and_a_live_one_is_kept() {
    each(&WINDOWED, |strategy| {
        let store = memory();
        let second = secs(3, 1, strategy);
        let minute = secs(4, 60, strategy);
        assert_eq!(drain(&store, "k", &second, T0), 3);
        assert_eq!(drain(&store, "live", &minute, T0), 4);
        let swept = store.sweep(T0 + 10 * NS);
        let len = store.len();
        let fresh = drain(&store, "k", &minute, T0 + 10 * NS);
        let live = drain(&store, "live", &second, T0 + 10 * NS);
        match (swept, len, fresh, live, store.len()) {
            (1, 1, 4, 0, 2) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

/// Stamped, claimed and adjusted windowed keys are swept once their state passed, and the
/// store's memory goes back to where it was (the key's rewritten allocations freed).
#[test]
fn a_claimed_stamped_key_is_swept_and_its_memory_given_back() {
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
    ] {
        let store = memory();
        let second = secs(3, 1, strategy);
        let two = secs(3, 2, strategy);
        let round = |from: u64| {
            for i in 0..64 {
                let key = format!("key-{i}-ключ");
                let at = from + 200 * NS;
                decide(&store, &key, &second, 1, at, Mode::Keep);
                reward(&store, &key, &second, 1, at);
                penalty(&store, &key, &two, 1, at + 5 * NS);
                decide(&store, &key, &two, 1, at + 10 * NS, Mode::Keep);
            }
            assert_eq!(store.len(), 64, "{strategy:?}");
            assert_eq!(store.sweep(from + 400 * NS), 64, "{strategy:?}");
            assert_eq!(store.len(), 0, "{strategy:?}");
        };
        // The first round sizes the tables as the second will (their allocation may stay).
        round(T0);
        let base = net_bytes();
        round(T0 + 1_000 * NS);
        let held = net_bytes() - base;
        assert!(held <= 0, "{strategy:?}: {held} bytes still held");
    }
}

/// A full store: a claim takes no room (the key is stored), a new key still finds none, and
/// the count of keys stays exact through claims, refusals and a sweep.
#[test]
fn a_claim_in_a_full_store_takes_no_room_and_the_count_stays_exact() {
    each(&WINDOWED, |strategy| {
        let store = memory_with(MemoryOptions::default().max_keys(2));
        let second = secs(3, 1, strategy);
        let minute = secs(3, 60, strategy);
        assert!(spend(&store, "a", &second, T0));
        let long = secs(3, 600, strategy);
        assert!(spend(&store, "b", &long, T0));
        // Refused as the second's (counting), then claimed by the minute once it passed.
        let refused = spend(&store, "a", &minute, T0);
        let claimed = spend(&store, "a", &minute, T0 + 5 * NS);
        let full = store.acquire("c", &second, 1, T0 + 5 * NS);
        let stacked_full = {
            let checks = [check("a", &minute), check("c", &second)];
            let s = Stacked::new(&checks, T0 + 5 * NS, Mode::Spend).unwrap();
            store.decide_all_now(s).unwrap()
        };
        // The refused stacked call spent nothing on the claimed key.
        let minute_left = drain(&store, "a", &minute, T0 + 5 * NS);
        // "a" and "b" have passed: a sweep for room drops both, then "c" fits.
        let after = store.acquire("c", &second, 1, T0 + 1_300 * NS);
        let got = (
            refused,
            claimed,
            matches!(full, Err(Error::StoreFull { .. })),
            stacked_full.is_err(),
            minute_left,
            after.map(|d| d.allowed).unwrap_or(false),
            store.len(),
        );
        match got {
            (false, true, true, true, 2, true, 1) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

// ---- Stacked calls and blocks -------------------------------------------------------------------

/// A token bucket emptied under one quota, then a stacked call with it under a quota of
/// another window beside another key: the bucket refuses (it has nothing), so the call is
/// refused as a whole and the other key spends nothing. Before, the look before the spends
/// read the bucket as fresh (a state another window wrote, read as a word cell's claim reads
/// it), the other key was spent, then the bucket refused: a call refused, one limit charged.
#[test]
fn a_stacked_call_refused_by_a_bucket_another_window_emptied_spends_nothing() {
    let store = memory();
    let slow = secs(2, 2, Strategy::TokenBucket);
    let fast = secs(2, 1, Strategy::TokenBucket);
    let other = secs(5, 60, Strategy::FixedWindow);
    assert_eq!(drain(&store, "k", &slow, T0), 2);
    let decisions = stacked(
        &store,
        &[check("k", &fast), check("o", &other)],
        T0,
        Mode::Spend,
    );
    let refused = decisions.iter().any(|d| !d.allowed);
    let other_left = drain(&store, "o", &other, T0);
    assert!(refused, "the empty bucket admitted: {decisions:?}");
    assert_eq!(other_left, 5, "the other key was spent by a refused call");
}

/// The same bucket looked at (a stacked look) under the other quota: refused, as a spend is.
#[test]
fn a_stacked_look_at_a_bucket_another_window_emptied_is_refused() {
    let store = memory();
    let slow = secs(2, 2, Strategy::TokenBucket);
    let fast = secs(2, 1, Strategy::TokenBucket);
    assert_eq!(drain(&store, "k", &slow, T0), 2);
    let look = stacked(&store, &[check("k", &fast)], T0, Mode::Look);
    let single = store.peek("k", &fast, 1, T0).unwrap();
    assert_eq!(
        (look[0].allowed, single.allowed),
        (false, false),
        "the stacked look and the single look disagree or admit"
    );
}

/// A bucket emptied under one quota, then a call under another quota with a block: refused,
/// and the refusal begins the block, so a call once tokens are back is still refused until
/// it ends. Before, the look read the bucket as fresh, the spend then refused it with no
/// block begun, and a call 3 s later (tokens back, inside the 10 s block) was admitted.
#[test]
fn a_refusal_on_a_bucket_another_window_emptied_begins_the_block() {
    let store = memory();
    let slow = secs(2, 2, Strategy::TokenBucket);
    let fast = secs(2, 1, Strategy::TokenBucket)
        .with_block(Duration::from_secs(10))
        .unwrap();
    assert_eq!(drain(&store, "k", &slow, T0), 2);
    assert!(!spend(&store, "k", &fast, T0), "the empty bucket admitted");
    assert!(
        !spend(&store, "k", &fast, T0 + 3 * NS),
        "admitted inside the block the refusal began"
    );
    assert!(spend(&store, "k", &fast, T0 + 11 * NS));
}

/// A stacked call with a word cell's key under another window than its state's, once that
/// state passed: claimed, spent as a whole with the other key, the key's count the new
/// window's (its limit), the old window refused while the new counts.
#[test]
fn a_stacked_call_claims_a_passed_state_as_a_whole() {
    each(&WINDOWED, |strategy| {
        let store = memory();
        let second = secs(3, 1, strategy);
        let minute = secs(2, 60, strategy);
        let other = secs(5, 60, strategy);
        assert_eq!(drain(&store, "k", &second, T0), 3);
        let checks = [check("k", &minute), check("o", &other)];
        let at = T0 + 5 * NS;
        let first = stacked(&store, &checks, at, Mode::Spend);
        let second_call = stacked(&store, &checks, at, Mode::Spend);
        let third = stacked(&store, &checks, at, Mode::Spend);
        let all = |d: &[Decision]| d.iter().all(|d| d.allowed);
        let none = |d: &[Decision]| !d.iter().any(|d| d.allowed);
        let got = (
            all(&first),
            all(&second_call),
            none(&third) || !all(&third),
            drain(&store, "o", &other, at),
            drain(&store, "k", &second, at + 10 * NS),
            store.len(),
        );
        match got {
            (true, true, true, 3, 0, 2) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

/// Quotas with blocks under two windows on one key: the first's refusal blocks it; the
/// second is refused while the first's state counts (or blocked), then has its own limit,
/// never more.
#[test]
fn blocks_under_two_windows_never_admit_past_either_limit() {
    each(&WORDS, |strategy| {
        let store = memory();
        let second = secs(2, 1, strategy)
            .with_block(Duration::from_secs(3))
            .unwrap();
        let minute = secs(3, 60, strategy)
            .with_block(Duration::from_secs(5))
            .unwrap();
        let at = T0 + 10 * NS;
        let first = drain(&store, "k", &second, at);
        let under_minute = drain(&store, "k", &minute, at + NS / 2);
        let blocked = drain(&store, "k", &second, at + 2 * NS);
        let after = drain(&store, "k", &minute, at + 20 * NS);
        let second_again = drain(&store, "k", &second, at + 30 * NS);
        match (first, under_minute, blocked, after, second_again) {
            (2, 0, 0, 3, 0) => Ok(()),
            got => Err(format!("{strategy:?}: {got:?}")),
        }
    });
}

// ---- Two threads racing a claim ---------------------------------------------------------------

/// Threads spend under the second (the read path: the key is the second's) while others claim
/// under the minute (the write path), on a key whose second has passed, all at one `now`: one
/// window wins the key, the other admits nothing, and the winner admits its limit exactly.
#[test]
fn a_claim_racing_spends_on_the_read_path_never_admits_both_windows() {
    for strategy in [Strategy::FixedWindow, Strategy::SlidingWindowCounter] {
        for round in 0..40 {
            let store = Arc::new(memory());
            let second = secs(3, 1, strategy);
            let minute = secs(4, 60, strategy);
            assert_eq!(drain(&store, "k", &second, T0), 3);
            let at = T0 + 3 * NS;
            let barrier = Arc::new(Barrier::new(4));
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                    let q = if t % 2 == 0 { second } else { minute };
                    std::thread::spawn(move || {
                        barrier.wait();
                        let n = (0..6).filter(|_| spend(&store, "k", &q, at)).count() as u64;
                        (t % 2, n)
                    })
                })
                .collect();
            let mut admitted = [0u64; 2];
            for h in handles {
                let (which, n) = h.join().unwrap();
                admitted[which] += n;
            }
            let ok = matches!(admitted, [3, 0] | [0, 4]);
            assert!(
                ok,
                "{strategy:?} round {round}: (second, minute) {admitted:?}"
            );
            assert_eq!(store.len(), 1);
        }
    }
}

// ---- The token bucket's window --------------------------------------------------------------

/// A bucket spent in turn by two quotas, with rewards under each after every step: no reward
/// gives back another quota's spends. A reference store fed only the slow quota's admitted
/// calls and its rewards must admit every call the store under test admits under it.
#[test]
fn a_bucket_alternating_two_quotas_never_rewards_one_with_the_others_spends() {
    let slow = secs(3, 3, Strategy::TokenBucket);
    let fast = secs(2, 1, Strategy::TokenBucket);
    // (tenths of a second after T0, which quota, spend or reward)
    let mut steps = Vec::new();
    for i in 0..60u64 {
        let q = if (i / 2) % 3 == 0 { 1 } else { 0 };
        steps.push((i * 3, q, i % 4 != 3));
    }
    let store = memory();
    let reference = memory();
    for (tenths, q, spends) in steps {
        let now = T0 + tenths * NS / 10;
        let quota = if q == 0 { &slow } else { &fast };
        if spends {
            let admitted = spend(&store, "k", quota, now);
            if admitted && q == 0 {
                assert!(
                    spend(&reference, "ref", &slow, now),
                    "the slow quota admitted past its limit at {tenths}"
                );
            }
        } else {
            let gave = reward(&store, "k", quota, 1, now);
            if q == 0 && gave > 0 {
                let ref_gave = reward(&reference, "ref", &slow, gave, now);
                assert_eq!(
                    ref_gave, gave,
                    "a reward gave back more than its spends at {tenths}"
                );
            }
        }
    }
}

/// A bucket claimed by a second quota (MIXED) and a penalty under the first: no reward under
/// either gives anything until the bucket is full again; then the one window that spends on
/// it owns it (a reward under it gives back its own spend).
#[test]
fn a_mixed_bucket_gives_no_reward_until_full_then_its_next_window_owns_it() {
    let store = memory();
    let slow = secs(2, 2, Strategy::TokenBucket);
    let fast = secs(10, 5, Strategy::TokenBucket);
    assert!(spend(&store, "k", &slow, T0));
    assert!(spend(&store, "k", &fast, T0));
    assert_eq!(penalty(&store, "k", &slow, 1, T0), 1);
    assert_eq!(reward(&store, "k", &slow, 1, T0), 0);
    assert_eq!(reward(&store, "k", &fast, 1, T0), 0);
    let later = T0 + 100 * NS;
    assert!(spend(&store, "k", &fast, later));
    assert_eq!(reward(&store, "k", &slow, 1, later), 0);
    assert_eq!(reward(&store, "k", &fast, 1, later), 1);
    assert_eq!(drain(&store, "k", &fast, later), 10);
}

// ---- Refunds across a claim ------------------------------------------------------------------

/// A spend kept for a refund through the service (the key stamped, under the service's
/// window), then the same store key (as the service composes it) claimed under another
/// window once the first passed: the old receipt gives nothing back to the new window's
/// state (the stamp stays with the key across the claim, the window does not), and the
/// service's own key is refused while the other counts.
#[test]
fn a_refund_after_a_claim_by_another_window_gives_nothing_back() {
    for (strategy, letter) in [
        (Strategy::FixedWindow, "F"),
        (Strategy::SlidingWindowCounter, "C"),
    ] {
        let (service, clock) = ratelimit_tests::service(ratelimit::Config::default());
        let options = ratelimit::Options::new()
            .limit(3)
            .window(Duration::from_secs(1))
            .strategy(strategy);
        let store = service.memory_store().unwrap();
        let composed = format!("ratelimit:{{u}}{letter}1000:-:-");
        let own = secs(3, 1, strategy);
        let kept = futures::executor::block_on(service.spend("u", &options)).unwrap();
        assert!(kept.decision().allowed && kept.refundable(), "{strategy:?}");
        // The composed key is the service's state: one more spend leaves 1.
        let d = store.acquire(&composed, &own, 1, clock.now()).unwrap();
        assert_eq!(
            (d.remaining, store.len()),
            (1, 1),
            "{strategy:?}: key {composed}"
        );
        clock.advance(Duration::from_secs(3));
        let minute = secs(5, 60, strategy);
        assert!(
            spend(store, &composed, &minute, clock.now()),
            "{strategy:?}"
        );
        let refused = futures::executor::block_on(service.consume("u", &options)).unwrap();
        assert!(
            !refused.allowed,
            "{strategy:?}: the service's window read the minute's"
        );
        // The old receipt, refunded while the minute's state holds the key.
        let gave = futures::executor::block_on(kept.refund()).unwrap();
        assert!(!gave, "{strategy:?}: given back to the minute's state");
        assert_eq!(
            drain(store, &composed, &minute, clock.now()),
            4,
            "{strategy:?}"
        );
        assert_eq!(store.len(), 1, "{strategy:?}");
    }
}

/// Threads spend on a token bucket under its own quota (the read path) while others spend
/// under a quota of another window (claims, under the write lock), at one `now`: whenever
/// both admitted a call, the key is marked as spent by two windows, so a reward under either
/// gives nothing back.
#[test]
fn a_bucket_raced_by_two_windows_gives_no_reward_to_either() {
    let slow = secs(4, 4, Strategy::TokenBucket);
    let fast = secs(4, 2, Strategy::TokenBucket);
    for round in 0..40 {
        let store = Arc::new(memory());
        // Stored under the slow quota, full again by `at`.
        assert!(spend(&store, "k", &slow, T0));
        let at = T0 + 10 * NS;
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                let q = if t % 2 == 0 { slow } else { fast };
                std::thread::spawn(move || {
                    barrier.wait();
                    let n = (0..3).filter(|_| spend(&store, "k", &q, at)).count() as u64;
                    (t % 2, n)
                })
            })
            .collect();
        let mut admitted = [0u64; 2];
        for h in handles {
            let (which, n) = h.join().unwrap();
            admitted[which] += n;
        }
        assert!(
            admitted[0] + admitted[1] >= 2,
            "round {round}: {admitted:?}"
        );
        if admitted[0] > 0 && admitted[1] > 0 {
            let gave = (
                reward(&store, "k", &slow, 1, at),
                reward(&store, "k", &fast, 1, at),
            );
            assert_eq!(gave, (0, 0), "round {round}: {admitted:?}");
        }
        assert_eq!(store.len(), 1);
    }
}

/// Thousands of keys, every other one claimed by another window, then the tables grown (a
/// rehash by each cell's key without its window) and shrunk by a sweep: every key is found
/// again as the one cell it was, under the window that holds it, and the count stays exact.
#[test]
fn claimed_keys_survive_a_rehash_and_a_shrink_as_one_cell_each() {
    each(&WORDS, |strategy| {
        let store = memory();
        let second = secs(2, 1, strategy);
        let minute = secs(3, 60, strategy);
        let keys: Vec<String> = (0..3_000).map(|i| format!("κ{i}")).collect();
        for key in &keys {
            assert!(spend(&store, key, &second, T0));
        }
        for key in keys.iter().step_by(2) {
            assert!(spend(&store, key, &minute, T0 + 5 * NS));
        }
        // Grown: as many keys again, under the minute.
        for i in 0..3_000 {
            assert!(spend(&store, &format!("new-{i}"), &minute, T0 + 5 * NS));
        }
        if store.len() != 6_000 {
            return Err(format!("{strategy:?}: {} keys", store.len()));
        }
        let at = T0 + 6 * NS;
        let mut wrong = 0;
        for (i, key) in keys.iter().enumerate() {
            if i % 2 == 0 {
                let got = (
                    drain(&store, key, &second, at),
                    drain(&store, key, &minute, at),
                );
                wrong += usize::from(got != (0, 2));
            } else {
                // The unclaimed half: its second passed, the key still the second's.
                wrong += usize::from(drain(&store, key, &second, at) != 2);
            }
        }
        // The second's keys have passed by then (the minute's have not): a sweep shrinks.
        store.sweep(at + 10 * NS);
        let after = store.len();
        for key in keys.iter().step_by(2) {
            wrong += usize::from(spend(&store, key, &minute, at + 10 * NS));
        }
        match (wrong, after) {
            (0, 4_500) => Ok(()),
            got => Err(format!(
                "{strategy:?}: (wrong, len after the sweep) {got:?}"
            )),
        }
    });
}

/// Two token-bucket quotas of one window but different limits (so different intervals: 2 a
/// 3 s refills one token in 1.5 s, 3 a 3 s in 1 s) on one bare key: a reward under the
/// second on the first's spends moves the arrival time back by its own interval, which is
/// not what a reward under the first would give back (found by probes_two_windows'
/// randomized interleaving: 2 spent under the first, a reward of 1 under the second 1.6 s
/// later gave 1 s back where the first's own reward gives nothing there (less than one of
/// its tokens had come back), and the first admitted a call at 2 s its own calls alone
/// refuse). The bucket's key keeps the interval of the quotas that spent on it since it was
/// last full: a reward is given only under that interval.
#[test]
fn a_reward_under_a_bucket_quota_of_the_same_window_never_gives_back_anothers_spends() {
    let first = secs(2, 3, Strategy::TokenBucket);
    let second = secs(3, 3, Strategy::TokenBucket);
    let (store, reference) = (memory(), memory());
    let at = T0 + 100 * NS;
    for s in [&store, &reference] {
        assert!(s.acquire("k", &first, 2, at).unwrap().allowed);
    }
    let gave = reward(&store, "k", &second, 1, at + 16 * NS / 10);
    // The reference: the same reward under the first quota (one window shares a state).
    let ref_gave = reward(&reference, "k", &first, 1, at + 16 * NS / 10);
    let mut admitted = [0u64; 2];
    for (i, s) in [&store, &reference].into_iter().enumerate() {
        admitted[i] += u64::from(spend(s, "k", &first, at + 16 * NS / 10));
        admitted[i] += u64::from(spend(s, "k", &first, at + 2 * NS));
    }
    assert!(
        admitted[0] <= admitted[1],
        "gave {gave} (the first's own reward {ref_gave}): admitted {admitted:?} (store, reference)"
    );
    // Under the same quota, the reward is given as before.
    let store = memory();
    assert!(store.acquire("k", &second, 3, at).unwrap().allowed);
    assert_eq!(reward(&store, "k", &second, 1, at + NS / 2), 1);
}

/// Two bucket quotas of one interval but different windows (2 a 1 s and 4 a 2 s: a token
/// each 0.5 s) share their unit: a reward of one under the second on the first's spends
/// gives back one token, as the first's own reward would, and no more.
#[test]
fn a_reward_under_a_bucket_quota_of_the_same_interval_gives_back_what_its_own_would() {
    let first = secs(2, 1, Strategy::TokenBucket);
    let second = secs(4, 2, Strategy::TokenBucket);
    let (store, reference) = (memory(), memory());
    let at = T0 + 100 * NS;
    assert_eq!(drain(&store, "k", &first, at), 2);
    assert_eq!(drain(&reference, "k", &first, at), 2);
    assert_eq!(reward(&store, "k", &second, 1, at), 1);
    assert_eq!(reward(&reference, "k", &first, 1, at), 1);
    assert_eq!(drain(&store, "k", &first, at), 1);
    assert_eq!(drain(&reference, "k", &first, at), 1);
}

/// A penalty of nothing on a token bucket full again writes nothing, under its own quota or
/// another of its interval (found by the randomized probe below): it wrote the arrival time
/// at its `now` (the Redis script writes nothing), so a caller holding an older clock read
/// found a debt no call made, and a reward there gave a whole token back out of it where the
/// spend's own 0.9 s left gives nothing: 3 a 3 s spent 1 at +100 s, a penalty of 0 under 2 a
/// 2 s at +101.1 s, a reward of 1 at +100.1 s, and the quota admitted 2 at +99.8 s that its
/// calls alone refuse.
#[test]
fn a_penalty_of_nothing_on_a_full_bucket_gives_no_reward_a_token() {
    let own = secs(3, 3, Strategy::TokenBucket);
    let other = secs(2, 2, Strategy::TokenBucket);
    let at = |tenths: u64| T0 + tenths * NS / 10;
    for under in [&own, &other] {
        let (store, reference) = (memory(), memory());
        for s in [&store, &reference] {
            assert!(s.acquire("k", &own, 1, at(1_000)).unwrap().allowed);
        }
        assert_eq!(penalty(&store, "k", under, 0, at(1_011)), 0);
        assert_eq!(
            store.peek("k", &own, 0, at(1_001)).unwrap(),
            reference.peek("k", &own, 0, at(1_001)).unwrap(),
            "a penalty of nothing moved the arrival time"
        );
        let gave = reward(&store, "k", under, 1, at(1_001));
        let own_gave = reward(&reference, "k", &own, 1, at(1_001));
        assert_eq!(gave, own_gave, "under {under:?}");
        let admitted = [&store, &reference].map(|s| s.acquire("k", &own, 2, at(998)).unwrap());
        assert_eq!(admitted[0].allowed, admitted[1].allowed, "under {under:?}");
    }
}

/// The interval a token bucket's quota spends a token in.
fn interval(q: &Quota) -> u128 {
    q.window().as_nanos() / u128::from(q.refill_per_window().max(1))
}

// ---- Randomized: what spends nothing changes nothing ------------------------------------------

/// One step: the clock moves by `dt` tenths of a second (back too), then a call.
#[derive(Debug, Clone)]
enum Op {
    /// A spend under the quota that owns the key.
    Spend(u64),
    /// Under the other quota: a look of cost 0 or 1, a `Mode::Look` request, a stacked look,
    /// a reward, a penalty of nothing.
    Look(u64),
    LookRequest,
    StackedLook,
    Reward(u64),
    NoPenalty,
}

fn op() -> impl proptest::strategy::Strategy<Value = (i64, Op)> {
    let op = prop_oneof![
        4 => (1..=2u64).prop_map(Op::Spend),
        1 => (0..=1u64).prop_map(Op::Look),
        1 => Just(Op::LookRequest),
        1 => Just(Op::StackedLook),
        1 => (1..=3u64).prop_map(Op::Reward),
        1 => Just(Op::NoPenalty),
    ];
    (-15..25i64, op)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ratelimit_tests::proptest_cases(300), ..ProptestConfig::default() })]

    /// One quota spends on a bare key while another quota of another window only looks,
    /// rewards and penalizes by nothing, with a clock that steps back and forth (callers
    /// holding older reads): nothing the other quota does may let the first admit a call a
    /// reference store fed only the first's admitted calls refuses. Before, a look or a
    /// reward under the other window once the first's state had passed (by one read) erased
    /// it, and an older read found it fresh.
    #[test]
    fn what_spends_nothing_under_another_window_never_frees_a_state(
        s in 0..4usize,
        windows in (1..=3u64, 1..=3u64).prop_filter("two windows", |(a, b)| a != b),
        limits in (2..=4u64, 2..=4u64),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let strategy = [
            Strategy::FixedWindow,
            Strategy::SlidingWindowCounter,
            Strategy::SlidingWindow,
            Strategy::TokenBucket,
        ][s];
        let own = secs(limits.0, windows.0, strategy);
        let other = secs(limits.1, windows.1, strategy);
        let (store, reference) = (memory(), memory());
        let mut now = T0 + 100 * NS;
        // Each store's first call sweeps at its time: the same floor for both.
        for s in [&store, &reference] {
            s.peek("x", &own, 0, now).unwrap();
        }
        for (dt, op) in ops {
            now = now.checked_add_signed(dt * (NS as i64) / 10).unwrap();
            match op {
                Op::Spend(cost) => {
                    if store.acquire("k", &own, cost, now).unwrap().allowed {
                        let d = reference.acquire("k", &own, cost, now).unwrap();
                        prop_assert!(d.allowed, "admitted past the limit at {}", now - T0);
                    }
                }
                Op::Look(cost) => {
                    store.peek("k", &other, cost, now).unwrap();
                }
                Op::LookRequest => {
                    decide(&store, "k", &other, 1, now, Mode::Look);
                }
                Op::StackedLook => {
                    stacked(&store, &[check("k", &other)], now, Mode::Look);
                }
                Op::Reward(units) => {
                    // A token bucket's unit is its quota's interval: a reward under a quota of
                    // the owner's interval is the owner's too (its own reward gives as much).
                    let shared = strategy == Strategy::TokenBucket
                        && interval(&own) == interval(&other);
                    if reward(&store, "k", &other, units, now) > 0 && shared {
                        reward(&reference, "k", &own, units, now);
                    }
                }
                Op::NoPenalty => {
                    penalty(&store, "k", &other, 0, now);
                }
            }
        }
    }
}
