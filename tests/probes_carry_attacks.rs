//! helper-66's attacks on carrying a moved limit's old state into its new one
//! (`Stacked::carried`, `service/transition.rs`) through the ways a call reaches it that the
//! single call does not take: a stacked call beside a shadow limit, a call's own quota
//! (overrides), penalties and rewards. Memory store, hand-driven clock.
//!
//! The rule probed: a limit a reload moves to another state (window, tier name, default
//! tier, prefix) admits no more than its one bucket (or block) would have, whatever the way
//! in: the debt and the block the old state holds past the old window reach the new state.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, Strategy, Tier};
use ratelimit_tests::{admitted, bucket_a_minute, moved, now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

// ---------------------------------------------------------------------------------------
// A stacked call with a shadow limit.
// ---------------------------------------------------------------------------------------

/// Tier `"a"`, a bucket of 10 plus 5 at a token every 6 s (moved by the reload to two
/// minutes at the same rate), and a shadow tier `"s"`, stacked. A stacked call with a shadow
/// limit decides its enforced limits as one stack of their own, which left out the states
/// carried into them: past the old window the moved bucket read a fresh state, 15 admitted
/// where the bucket had given back 10.
#[test]
fn a_moved_bucket_stacked_beside_a_shadow_limit_keeps_its_debt_past_the_old_window() {
    let tiers = |a: Tier| {
        Config::builder()
            .tier(a.strategy(Strategy::TokenBucket).burst(5))
            .tier(Tier::new("s", 1).window(MINUTE).shadow())
    };
    let bucket = Tier::new("a", 10).refill(10).window(MINUTE);
    let (service, clock) = service(tiers(bucket).build().unwrap());
    let (a, s) = (Options::new().tier("a"), Options::new().tier("s"));
    assert_eq!(admitted(&service, &a, 16), 15);
    reload(
        &service,
        tiers(Tier::new("a", 10).refill(20).window(2 * MINUTE)),
    );
    clock.advance(MINUTE);
    let stacked = (0..20)
        .filter(|_| {
            now(service.consume_all(&[("k", &a), ("k", &s)]))
                .is_ok_and(|d| d.iter().all(|d| d.allowed))
        })
        .count();
    assert_eq!(stacked, 10, "the bucket gives back 10 in a minute");
}

// ---------------------------------------------------------------------------------------
// A call's own quota (overrides) moved by a reload.
// ---------------------------------------------------------------------------------------

/// Tiers `"a"` and `"b"`, 100 a minute each, `default` the default tier: switching it moves
/// every call that names no tier to another state.
fn two_tiers(default: &str) -> ConfigBuilder {
    Config::builder()
        .tier(Tier::new("a", 100).window(MINUTE))
        .tier(Tier::new("b", 100).window(MINUTE))
        .default_tier(default)
}

/// A call with its own limit of 2 a minute blocking the key an hour once refused: refused
/// (blocked), then the default tier switched. The replaced configuration was kept (and its
/// old states read) only for what its configured limits may hold, a minute: at 90 s the
/// call's own state was fresh, 2 admitted inside the hour's block.
#[test]
fn a_calls_own_block_outlasts_a_switch_of_the_default_tier() {
    let (service, clock) = service(two_tiers("a").build().unwrap());
    let own = Options::new()
        .limit(2)
        .strategy(Strategy::FixedWindow)
        .block_for(HOUR);
    assert_eq!(admitted(&service, &own, 3), 2);
    reload(&service, two_tiers("b"));
    assert_eq!(admitted(&service, &own, 3), 0, "admitted at the switch");
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &own, 3), 0, "admitted while blocked");
    clock.advance(HOUR);
    assert_eq!(admitted(&service, &own, 3), 2, "after the block");
}

/// A call with its own bucket of 10 refilled a token a minute (a debt of 10 minutes), all
/// spent, then the default tier switched: at 90 s the bucket has given back 1 token; the
/// fresh state gave 10.
#[test]
fn a_calls_own_slow_bucket_keeps_its_debt_past_a_switch_of_the_default_tier() {
    let (service, clock) = service(two_tiers("a").build().unwrap());
    let own = Options::new()
        .limit(10)
        .strategy(Strategy::TokenBucket)
        .refill(1);
    assert_eq!(admitted(&service, &own, 11), 10);
    reload(&service, two_tiers("b"));
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &own, 11), 1, "one token back in 90 s");
}

// ---------------------------------------------------------------------------------------
// Penalties and rewards on a moved bucket.
// ---------------------------------------------------------------------------------------

/// The bucket of 15 at 6 s a token, spent, moved; a minute later it owes 30 s (10 back),
/// and a penalty of 5 leaves 5. The penalty fell on the new state alone, fresh then (the old
/// state not carried yet): 30 s owed there, under the old 30 s the next call carried: 10
/// admitted, the penalty lost (and the level it returned said 10).
#[test]
fn a_penalty_past_the_old_window_is_not_lost_under_the_debt_carried() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    clock.advance(MINUTE);
    let level = now(service.penalize("k", &plain, 5)).unwrap();
    assert_eq!(level.remaining, 5);
    assert_eq!(admitted(&service, &plain, 20), 5);
}

/// The same penalty half way through the old window (the old state still decided with the
/// calls, owing 60 s): on the new state alone it had drained by the window's end, where the
/// old state's 30 s were carried: 10 admitted at +60 s where the bucket leaves 5.
#[test]
fn a_penalty_inside_the_old_window_is_not_lost_under_the_debt_carried() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    clock.advance(Duration::from_secs(30));
    now(service.penalize("k", &plain, 5)).unwrap();
    clock.advance(Duration::from_secs(30));
    assert_eq!(admitted(&service, &plain, 20), 5);
}

/// A reward of 3 a minute after the move, where the bucket gives back 10: 13. On the new
/// state alone, the next call carried the old debt back over it: 10.
#[test]
fn a_reward_past_the_old_window_is_not_taken_back_by_the_debt_carried() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    clock.advance(MINUTE);
    let level = now(service.reward("k", &plain, 3)).unwrap();
    assert_eq!(level.remaining, 13);
    assert_eq!(admitted(&service, &plain, 20), 13);
}

// ---------------------------------------------------------------------------------------
// A refusal's wait across the old window's end.
// ---------------------------------------------------------------------------------------

/// The bucket of 15 at 6 s a token, spent, moved; a call every 6 s gets the old bucket's 9
/// tokens by +54 s (it owes 90 s at +54 s). Refused at +55 s, the call passes at +60 s, when
/// the old debt carried into the new bucket leaves room for it. The wait said 89 s (until the
/// old bucket is full again, the whole debt drained): the queue's waiters were all held to
/// it and `until_ready` slept through 14 tokens (11 waiters admitted at once at +144 s).
#[test]
fn a_refusal_near_the_old_windows_end_waits_for_the_carried_debt_not_the_whole_old_bucket() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(&service, moved(10, 5, 10));
    let mut got = 0;
    for _ in 0..9 {
        clock.advance(Duration::from_secs(6));
        got += admitted(&service, &plain, 2);
    }
    assert_eq!(got, 9);
    clock.advance(Duration::from_secs(1));
    let refused = now(service.consume("k", &plain)).unwrap();
    assert!(!refused.allowed);
    let wait = refused.retry_after.unwrap();
    assert_eq!(wait, Duration::from_secs(5));
    clock.advance(wait - Duration::from_millis(1));
    assert_eq!(admitted(&service, &plain, 1), 0, "admitted before the wait");
    clock.advance(Duration::from_millis(1));
    assert_eq!(admitted(&service, &plain, 2), 1, "refused at the wait");
}

// ---------------------------------------------------------------------------------------
// Penalties on blocked and stacked debts.
// ---------------------------------------------------------------------------------------

/// The default tier `name`: a bucket of 3 at a token a second on `minutes`, blocking a key
/// five minutes once refused.
fn blocking_bucket(name: &str, minutes: u32) -> ConfigBuilder {
    let tier = Tier::new(name, 3)
        .burst(0)
        .refill(60 * u64::from(minutes))
        .window(MINUTE * minutes)
        .strategy(Strategy::TokenBucket)
        .block_for(Duration::from_secs(300));
    Config::builder().tier(tier).default_tier(name)
}

/// Blocked until +300 s (3 spent, the fourth refused), then moved at +62 s; a penalty of 3
/// at +63 s. Spent on the new state alone (or on it and the old one decided with the calls),
/// the next call was refused by the new state's own bucket, which the old state's block did
/// not reach while it was decided: a block of its own began, until +363 s, and the key was
/// refused at +301 s, "retry after 62 s", where one bucket (every configuration is this one)
/// admits from +300 s. The penalty now carries the old state, its block too, first.
#[test]
fn a_penalty_on_a_blocked_key_during_a_move_does_not_restart_its_block() {
    let (service, clock) = service(blocking_bucket("a", 1).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 4), 3);
    clock.advance(Duration::from_secs(62));
    reload(&service, blocking_bucket("a", 2));
    clock.advance(Duration::from_secs(1));
    now(service.penalize("k", &plain, 3)).unwrap();
    assert_eq!(admitted(&service, &plain, 1), 0, "admitted while blocked");
    clock.advance(Duration::from_secs(238));
    let d = now(service.consume("k", &plain)).unwrap();
    assert!(
        d.allowed,
        "refused at +301 s, retry after {:?}",
        d.retry_after
    );
}

/// A carry rounded the old debt up to a whole token of the moved bucket from the instant it
/// was carried, and each further move carried that again: 10 at a token every 20 s, all
/// spent at the start (full again at +200 s), moved at once to tier "b"; carried by a look at
/// +79.999 s (120.001 s owed: 7 tokens, full at +219.999 s), moved again to tier "c" on two
/// minutes and carried by a look at +159.998 s (60.001 s owed: 4 tokens, full at
/// +239.998 s, 6 tokens shown where the bucket holds 7). At +200.5 s one bucket (every
/// configuration is this one) admits its 10; measured, 8 (39.498 s owed): a token more for
/// each move. The debt is now carried as time, exactly (`Carry::debt`): each moved bucket is
/// full again at +200 s, when the first one is.
#[test]
fn chained_moves_do_not_round_a_debt_up_a_token_each() {
    let slow = |name: &str, minutes: u32| {
        let tier = Tier::new(name, 10)
            .burst(0)
            .refill(3 * u64::from(minutes))
            .window(MINUTE * minutes)
            .strategy(Strategy::TokenBucket);
        Config::builder().tier(tier).default_tier(name)
    };
    let (service, clock) = service(slow("a", 1).build().unwrap());
    let plain = Options::new();
    let look = || now(service.status("k", &plain)).unwrap();
    assert_eq!(admitted(&service, &plain, 11), 10);
    reload(&service, slow("b", 1));
    clock.advance(Duration::from_millis(79_999));
    assert_eq!(look().remaining, 3);
    reload(&service, slow("c", 2));
    clock.advance(Duration::from_millis(159_998 - 79_999));
    assert_eq!(look().remaining, 7);
    clock.advance(Duration::from_millis(200_500 - 159_998));
    assert_eq!(admitted(&service, &plain, 12), 10);
}

/// 10 spent of a bucket of 10 a minute and three penalties of 10 (a debt of 4 minutes), then
/// the move, and no call until +170 s. The reload was kept, and the old state carried from,
/// until the latest penalty's debt may end, counted as the tolerance owed before it and its
/// own tokens after (`Inner::penalized_until`): +120 s, where stacked penalties owe until
/// +240 s. At +170 s the old state was let go and the moved one was fresh: 10 admitted where
/// the bucket, owing 70 s, admits none. Now counted from the level the penalty leaves.
#[test]
fn stacked_penalties_past_the_tolerance_are_carried_with_no_call_meanwhile() {
    let (service, clock) = service(bucket_a_minute(10, 0, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 10), 10);
    for _ in 0..3 {
        now(service.penalize("k", &plain, 10)).unwrap();
    }
    reload(&service, moved(10, 0, 10));
    clock.advance(Duration::from_secs(170));
    assert_eq!(
        admitted(&service, &plain, 20),
        0,
        "admitted while 70 s are owed"
    );
    // Carried at +170 s as the 70 s owed, exactly (`Carry::debt`; in whole tokens of 6 s, 12,
    // full again at +242 s): full again at +240 s, when the old bucket is, a call of one
    // token (6 s) within the tolerance of 60 s from +186 s.
    clock.advance(Duration::from_secs(15));
    assert_eq!(admitted(&service, &plain, 20), 0, "admitted at +185 s");
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&service, &plain, 20), 1, "at +186 s");
}

/// Outside the carry (one state, no reload): a bucket of 3 at a token a second blocking a key
/// five minutes, blocked at the start; a penalty of 400 at +200 s leaves 500 s owed. A call at
/// +200 s is refused "retry after 100 s", the block's end, where the bucket still owes 200 s:
/// refused again then, and that refusal begins a new block of five minutes (measured: the
/// retry at +300 s refused, "retry after 300 s"). A blocked refusal's wait is now the later
/// of the block's end and the state's own wait (`blocked_verdict`, `lua/stacked.lua`).
#[test]
fn a_blocked_refusals_wait_is_when_the_call_passes_after_a_penalty() {
    let (service, clock) = service(blocking_bucket("a", 1).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 4), 3);
    clock.advance(Duration::from_secs(200));
    now(service.penalize("k", &plain, 400)).unwrap();
    let refused = now(service.consume("k", &plain)).unwrap();
    let wait = refused.retry_after.unwrap();
    clock.advance(wait);
    let again = now(service.consume("k", &plain)).unwrap();
    assert!(
        again.allowed,
        "told {wait:?}, refused then: {:?}",
        again.retry_after
    );
}
