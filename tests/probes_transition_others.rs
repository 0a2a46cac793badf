//! helper-61's attacks on a reload's transition to OTHER states under token buckets
//! (`service/transition.rs`, `Site::transition_of`'s `others`): a limit whose window, tier name
//! or prefix a reload changed reads a fresh state, and for a while each call is decided on the
//! old state (old quota) and the new one as one, all or nothing.
//!
//! The rule probed: a token bucket of capacity `C` and interval `T` admits at most
//! `C + (b - a) / T` tokens in any `[a, b]`. A reload that moves a bucket to another state
//! but keeps its rate (the same capacity and interval on a window twice as long) must admit
//! no more than that one bucket gives, whatever the switch; and a bucket whose debt outlasts
//! its window (a burst, or a refill slower than the limit: the tolerance `C * T` is longer
//! than the window) keeps refusing until that debt has drained, as it would on its own
//! state (README, "No burst at the switch": "the switch hands out no new budget on top of
//! what the old window spent").

use std::time::Duration;

use ratelimit::{Config, Options, Strategy, Tier};
use ratelimit_tests::{admitted, bucket_a_minute, moved, now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);

/// 10 plus a burst of 5 refilled 10 a minute (a token every 6 s, a debt of 90 s at most), all
/// 15 spent; a reload moves the same bucket to a window of two minutes (another state, the
/// same capacity and interval). One minute later the bucket gives back 10 (a debt of 30 s
/// left). The old state was held to for one old window only: at its end the fresh state
/// gave its whole 15 at once, the 30 s of debt forgotten.
#[test]
fn a_bucket_moved_to_another_window_keeps_its_burst_debt_past_the_old_window() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    assert_eq!(admitted(&service, &plain, 5), 0, "admitted at the switch");
    clock.advance(MINUTE);
    assert_eq!(
        admitted(&service, &plain, 20),
        10,
        "one bucket gives 10 back in a minute"
    );
}

/// The same with no burst and a refill slower than the limit: 10 refilled 5 a minute (a
/// token every 12 s, a debt of 120 s), all 10 spent, moved to two minutes at the same rate.
/// A minute later the bucket gives 5; the fresh state gave 10.
#[test]
fn a_slow_refill_moved_to_another_window_keeps_its_debt_past_the_old_window() {
    let (service, clock) = service(bucket_a_minute(10, 0, 5).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 11), 10);
    reload(&service, moved(10, 0, 5));
    clock.advance(MINUTE);
    assert_eq!(
        admitted(&service, &plain, 20),
        5,
        "one bucket gives 5 back in a minute"
    );
}

/// The bound over an interval: the bucket of 15 at 6 s a token gives at most 15 + 20 = 35
/// in the two minutes from its first spend, a call tried every second. Moved at the switch,
/// the calls crossed the old window's end with the old debt forgotten: 49 (15, then 9 as the
/// old debt drained, then 15 fresh at 60 s, then the refill). Holding the old state longer
/// does not close it: tried for the bucket's tolerance (90 s), still 49, since calls that
/// keep up with the refill keep the old debt whole while the new state, begun full, stays
/// full: whenever the old state is let go, the new one hands out its capacity. The new
/// state must start from the old one's debt.
#[test]
fn a_bucket_moved_to_another_window_never_admits_past_its_rate_over_two_minutes() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    let mut total = admitted(&service, &plain, 16);
    reload(&service, moved(10, 5, 10));
    for _ in 0..120 {
        clock.advance(Duration::from_secs(1));
        total += admitted(&service, &plain, 16);
    }
    assert!(
        total <= 35,
        "{total} admitted in two minutes (one bucket: 35)"
    );
}

/// A tier renamed (the default tier `"a"` becomes `"b"`, the same bucket: another state by
/// its tier's name): the same debt past the old window.
#[test]
fn a_bucket_whose_tier_is_renamed_keeps_its_burst_debt_past_the_old_window() {
    let tier = |name: &str| {
        Tier::new(name, 10)
            .burst(5)
            .refill(10)
            .window(MINUTE)
            .strategy(Strategy::TokenBucket)
    };
    let config = |name: &str| Config::builder().tier(tier(name)).default_tier(name);
    let (service, clock) = service(config("a").build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, config("b"));
    assert_eq!(admitted(&service, &plain, 5), 0, "admitted at the switch");
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &plain, 20), 10);
}

// ---------------------------------------------------------------------------------------
// Within the old window: what holds (no finding; the probes can fail on exact counts).
// ---------------------------------------------------------------------------------------

/// Inside the old window the old state holds: the bucket of 15 at 6 s a token, spent, moved;
/// a call every second for 59 s after the switch gets exactly the 9 tokens the old bucket
/// refills (at 6, 12, ..., 54 s), and never the fresh state's 15.
#[test]
fn a_bucket_moved_to_another_window_refills_at_the_old_rate_inside_the_old_window() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    let mut total = 0;
    for _ in 0..59 {
        clock.advance(Duration::from_secs(1));
        total += admitted(&service, &plain, 16);
    }
    assert_eq!(total, 9);
}

/// Two replaced configurations on one old state (`transition_of`'s merge): 10 at 100 ms a
/// token, all spent; a reload to 10 a minute at a token a minute on the same state; then a
/// reload moving the limit to two minutes. The merged old quota takes the slower interval
/// and the least debt of the two (100 ms x 10 = 1 s): one call, at 1 s, and nothing more
/// before the old window ends (the next token a minute later).
#[test]
fn two_replaced_buckets_on_one_old_state_hold_to_the_slower_refill_and_the_least_debt() {
    let (service, clock) = service(bucket_a_minute(10, 0, 600).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 11), 10);
    reload(&service, bucket_a_minute(10, 0, 1));
    assert_eq!(admitted(&service, &plain, 3), 0);
    reload(&service, moved(10, 0, 10));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted at the switch");
    let mut total = 0;
    for _ in 0..59 {
        clock.advance(Duration::from_secs(1));
        total += admitted(&service, &plain, 3);
    }
    assert_eq!(
        total, 1,
        "the merged old quota admits one call in the old window"
    );
}

/// A cost above the old bucket's capacity (5 > 3) but within the new one (10), on a key
/// with nothing spent, moved to another window: never admitted while the old state holds,
/// by the single call, the prepared site and the stacked call alike.
#[test]
fn a_cost_above_the_moved_buckets_old_capacity_is_never_admitted_by_any_entry_point() {
    let (service, _clock) = service(bucket_a_minute(3, 0, 3).build().unwrap());
    reload(&service, moved(10, 0, 3));
    let costly = Options::new().cost(5);
    let single = now(service.consume("e", &costly));
    assert!(
        !matches!(single, Ok(ref d) if d.allowed),
        "single: {single:?}"
    );
    let prepared = service.prepare(&costly).unwrap();
    let by_prepared = prepared.consume_now("e").unwrap();
    assert!(
        !matches!(by_prepared, Ok(ref d) if d.allowed),
        "{by_prepared:?}"
    );
    let stacked = now(service.consume_all(&[("e", &costly), ("e", &Options::new())]));
    assert!(
        !stacked.as_ref().is_ok_and(|d| d.iter().all(|d| d.allowed)),
        "stacked: {stacked:?}"
    );
}
