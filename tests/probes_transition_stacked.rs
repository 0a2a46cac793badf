//! helper-61's attacks on what else a reload's transition must carry: blocks and penalties
//! (a key refused past its window), stacked calls (all or nothing, on the old state too) and
//! spends kept for a refund across a reload (given back only to what they spent from, never
//! to the new, looser budget). Memory store, hand-driven clock.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, Strategy, Tier};
use ratelimit_tests::{admitted, bucket_a_minute, now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// A fixed-window tier `"a"` (the default tier) of `limit` per `window`, blocking a key an
/// hour once refused.
fn blocking(limit: u64, window: Duration) -> ConfigBuilder {
    let tier = Tier::new("a", limit)
        .window(window)
        .strategy(Strategy::FixedWindow)
        .block_for(HOUR);
    Config::builder().tier(tier).default_tier("a")
}

// ---------------------------------------------------------------------------------------
// Blocks and penalties across a reload.
// ---------------------------------------------------------------------------------------

/// 2 a minute, an hour's block once refused: 2 spent, the third refused (blocked). A reload
/// loosening the limit on the same state (5 a minute) keeps the block: a minute and a half
/// later, and at 59 minutes, still refused; at the hour the limit's 5 again.
#[test]
fn a_block_holds_across_a_reload_that_keeps_its_state() {
    let (service, clock) = service(blocking(2, MINUTE).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 3), 2);
    reload(&service, blocking(5, MINUTE));
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
    clock.advance(Duration::from_secs(59 * 60 - 90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &plain, 6), 5);
}

/// The same block, the reload moving the limit to another window (2 per two minutes: another
/// state, the same block). The old state, blocked for the hour, was held to for one old
/// window only: at 90 s the fresh state admitted 2, the hour's block forgotten.
#[test]
fn a_block_holds_across_a_reload_that_moves_its_state() {
    let (service, clock) = service(blocking(2, MINUTE).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 3), 2);
    reload(&service, blocking(2, 2 * MINUTE));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted at the switch");
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
}

/// A block begun during a transition on the same state: 2 a minute loosened to 5 (the old 2
/// held for the window), 2 spent after the reload, the third refused by the held quota: the
/// key is blocked for the hour, past the window where the new 5 would admit.
#[test]
fn a_block_begun_by_a_held_quota_holds_for_the_whole_block() {
    let (service, clock) = service(blocking(2, MINUTE).build().unwrap());
    let plain = Options::new();
    reload(&service, blocking(5, MINUTE));
    assert_eq!(admitted(&service, &plain, 3), 2);
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
    clock.advance(HOUR - Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 6), 5);
}

/// A block begun during a move, by the old state's refusal (2 a minute moved to 5 per two
/// minutes, both with an hour's block): the 2 spent after the reload, the third refused by
/// the old state alone, which the old quota blocks. Past the old window the old state is no
/// longer asked and the new one was never refused: admitted at 90 s, the hour's block
/// begun by the refusal forgotten.
#[test]
fn a_block_begun_by_an_old_state_during_a_move_holds_for_the_whole_block() {
    let (service, clock) = service(blocking(2, MINUTE).build().unwrap());
    let plain = Options::new();
    reload(&service, blocking(5, 2 * MINUTE));
    assert_eq!(admitted(&service, &plain, 3), 2);
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
}

/// A penalty of 30 units on a bucket of 10 a minute (a debt of 4 minutes: 10 spent, 30 more
/// owed), then a reload moving the bucket to two minutes at the same rate. A minute later the
/// bucket has given back 10 of the 40 tokens owed: nothing to admit. The fresh state gave 10.
#[test]
fn a_penalty_holds_across_a_reload_that_moves_its_state() {
    let (service, clock) = service(bucket_a_minute(10, 0, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 10), 10);
    now(service.penalize("k", &plain, 30)).unwrap();
    reload(
        &service,
        bucket_a_minute(10, 0, 20).default_window(2 * MINUTE),
    );
    clock.advance(MINUTE);
    assert_eq!(
        admitted(&service, &plain, 10),
        0,
        "admitted while 30 tokens owed"
    );
}

/// A penalty during the transition adds to what the key owes: the old states carried into
/// the new one first, then spent there (helper-66: on the new state alone it lay under the
/// old state's debt carried at the old window's end, and was lost where that debt was the
/// larger, probes_carry_attacks). With the old state still holding, 3 spent of the old 3 (a
/// token every 20 s: 60 s owed; the new bucket, a token every 6 s, owes 18 s) and a penalty of
/// 5 of the new bucket's tokens: 90 s owed, 30 s at +60 s, where the new bucket of 10 gives 5
/// (10 when the penalty fell on the new state alone), and its 10 a minute later.
#[test]
fn a_penalty_during_a_transition_counts_on_the_new_state_after_it() {
    let (service, clock) = service(bucket_a_minute(3, 0, 3).build().unwrap());
    let plain = Options::new();
    reload(
        &service,
        bucket_a_minute(10, 0, 20).default_window(2 * MINUTE),
    );
    assert_eq!(admitted(&service, &plain, 5), 3);
    now(service.penalize("k", &plain, 5)).unwrap();
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &plain, 20), 5, "at +60 s");
    clock.advance(Duration::from_secs(60));
    assert_eq!(admitted(&service, &plain, 20), 10, "at +120 s");
}

// ---------------------------------------------------------------------------------------
// Stacked calls during a transition: all or nothing, the old states included.
// ---------------------------------------------------------------------------------------

/// Two tiers, `"a"` (3 a minute, moved by the reload to 10 per two minutes) and `"b"` (100
/// a minute); stacked calls on both. The old state of `"a"` refuses once its 3 are spent:
/// each refused stacked call spends nothing on `"b"` (its 100 less the 3 admitted stay).
#[test]
fn a_stacked_call_refused_by_an_old_state_spends_nothing_on_its_other_limits() {
    let tiers = |a: Tier| {
        Config::builder()
            .tier(a.strategy(Strategy::FixedWindow))
            .tier(Tier::new("b", 100).window(MINUTE))
    };
    let (service, _clock) = service(tiers(Tier::new("a", 3).window(MINUTE)).build().unwrap());
    reload(&service, tiers(Tier::new("a", 10).window(2 * MINUTE)));
    let (a, b) = (Options::new().tier("a"), Options::new().tier("b"));
    let mut got = 0;
    for _ in 0..20 {
        let decided = now(service.consume_all(&[("u", &a), ("u", &b)])).unwrap();
        got += usize::from(decided.iter().all(|d| d.allowed));
    }
    assert_eq!(got, 3);
    let remaining = now(service.status("u", &b)).unwrap().remaining;
    assert_eq!(remaining, 97, "a refused stacked call spent on b");
}

/// A stacked call on a bucket moved with its burst debt: the same way through as a single
/// call (`probes_transition_others`), a minute after the switch: the bucket gives 10.
#[test]
fn a_stacked_call_on_a_moved_bucket_keeps_its_burst_debt_past_the_old_window() {
    let tiers = |a: Tier| {
        Config::builder()
            .tier(a.strategy(Strategy::TokenBucket).burst(5))
            .tier(Tier::new("b", 1_000).window(MINUTE))
    };
    let bucket = Tier::new("a", 10).refill(10).window(MINUTE);
    let (service, clock) = service(tiers(bucket).build().unwrap());
    let (a, b) = (Options::new().tier("a"), Options::new().tier("b"));
    let stacked = |n: usize| {
        (0..n)
            .filter(|_| {
                now(service.consume_all(&[("u", &a), ("u", &b)]))
                    .is_ok_and(|d| d.iter().all(|d| d.allowed))
            })
            .count()
    };
    assert_eq!(stacked(16), 15);
    reload(
        &service,
        tiers(Tier::new("a", 10).refill(20).window(2 * MINUTE)),
    );
    clock.advance(MINUTE);
    assert_eq!(stacked(20), 10, "one bucket gives 10 back in a minute");
}

// ---------------------------------------------------------------------------------------
// Refunds across a reload.
// ---------------------------------------------------------------------------------------

/// 2 a minute (fixed window), both spent and kept; a reload loosens to 10 a minute on the
/// same state (held to the 2 for the window). One spend given back: one more call, not 9.
#[test]
fn a_refund_after_a_loosening_gives_back_to_the_old_budget_only() {
    let config = |n| Config::builder().default_limit(n).default_window(MINUTE);
    let (service, _clock) = service(config(2).build().unwrap());
    let plain = Options::new();
    let first = now(service.spend("k", &plain)).unwrap();
    let second = now(service.spend("k", &plain)).unwrap();
    assert!(first.decision().allowed && second.decision().allowed);
    reload(&service, config(10));
    assert_eq!(admitted(&service, &plain, 5), 0);
    assert!(now(first.refund()).unwrap());
    assert_eq!(admitted(&service, &plain, 5), 1);
    // A spend during the transition is admitted under the held quota and cannot be given
    // back (it would be given back under the new one's).
    assert!(now(second.refund()).unwrap());
    let during = now(service.spend("k", &plain)).unwrap();
    assert!(during.decision().allowed && !during.refundable());
    assert!(!now(during.refund()).unwrap());
    assert_eq!(admitted(&service, &plain, 5), 0);
}

/// A spend kept under the old state, the limit then moved to another window: given back to
/// the old state (the one it spent from), whose window still holds the calls: after both
/// spends are given back, the old 2 again, never the new 10.
#[test]
fn a_refund_after_a_move_gives_back_to_the_old_state_only() {
    let config = |n, w| Config::builder().default_limit(n).default_window(w);
    let (service, _clock) = service(config(2, MINUTE).build().unwrap());
    let plain = Options::new();
    let spent: Vec<_> = (0..2)
        .map(|_| now(service.spend("k", &plain)).unwrap())
        .collect();
    assert!(spent.iter().all(|s| s.decision().allowed));
    reload(&service, config(10, 2 * MINUTE));
    assert_eq!(admitted(&service, &plain, 5), 0);
    for s in spent {
        assert!(now(s.refund()).unwrap());
    }
    assert_eq!(admitted(&service, &plain, 12), 2);
}

/// A bucket of 10 at a token a minute, 10 kept; a reload to 10 at a token every 100 ms on
/// the same state. A refund gives back what the spend took (a minute of debt, one old
/// token). The 9 minutes still owed are past what the new bucket tolerates, so the held
/// quota admits nothing more (`Quota::draining_by`: what is owed at the window's end stays
/// within the new second); the new bucket is whole again exactly 9 minutes in (540 s), not a
/// moment before (a refund of more than the spend's minute) nor after (of less).
#[test]
fn a_refund_after_a_faster_refill_gives_back_one_old_token() {
    let (service, clock) = service(bucket_a_minute(10, 0, 1).build().unwrap());
    let plain = Options::new();
    let spent: Vec<_> = (0..10)
        .map(|_| now(service.spend("k", &plain)).unwrap())
        .collect();
    assert!(spent.iter().all(|s| s.decision().allowed));
    reload(&service, bucket_a_minute(10, 0, 600));
    assert_eq!(admitted(&service, &plain, 5), 0);
    let mut spent = spent.into_iter();
    assert!(now(spent.next().unwrap().refund()).unwrap());
    assert_eq!(admitted(&service, &plain, 20), 0, "admitted at once");
    clock.advance(Duration::from_secs(539));
    assert_eq!(admitted(&service, &plain, 20), 0, "admitted at 539 s");
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&service, &plain, 20), 10, "admitted at 540 s");
}
