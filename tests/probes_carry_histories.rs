//! helper-66's probes of carrying a moved limit's old state along histories of reloads: a
//! limit moved twice within the spans (A to B to C), moved back (A to B to A with A's state
//! alive), a move that changes the refill too, a tier renamed while a new tier takes its old
//! name, the key prefix changed, costs above 1, the clock stepped back, and resets of the
//! new and the old key during the carry. Memory store, hand-driven clock. Each assertion is
//! an exact count (or a bound) of what one bucket allows; what is not a way through but
//! worth knowing is said where it is measured.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{admitted, bucket_a_minute, now, reload_to as reload, service, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
const SECOND: Duration = Duration::from_secs(1);

/// The bucket of 10 plus 5 at a token every 6 s, on a window of `minutes`: the same bucket
/// on another state for each window.
fn on(minutes: u32) -> ConfigBuilder {
    bucket_a_minute(10, 5, 10 * u64::from(minutes)).default_window(MINUTE * minutes)
}

/// Calls every second from the clock's instant to `until` (seconds since the start): how
/// many admitted.
fn every_second(service: &RateLimitService, clock: &ratelimit::ManualClock, until: u64) -> usize {
    let mut total = 0;
    while clock.now_since_start() < Duration::from_secs(until) {
        clock.advance(SECOND);
        total += admitted(service, &Options::new(), 3);
    }
    total
}

trait SinceStart {
    fn now_since_start(&self) -> Duration;
}

impl SinceStart for ratelimit::ManualClock {
    fn now_since_start(&self) -> Duration {
        use ratelimit::Clock as _;
        Duration::from_nanos(self.now()) - START
    }
}

/// 15 spent at the start; moved at once to two minutes and, 10 s later, to three: a call
/// every second until +200 s gets exactly the bucket's tokens, one every 6 s (33), through
/// both old states decided and then carried.
#[test]
fn a_bucket_moved_twice_within_the_old_windows_gives_one_token_every_six_seconds() {
    let (service, clock) = service(on(1).build().unwrap());
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    reload(&service, on(2));
    let mut total = every_second(&service, &clock, 10);
    reload(&service, on(3));
    total += every_second(&service, &clock, 200);
    assert_eq!(total, 33);
}

/// 15 spent; moved to two minutes, and back to one at +30 s (A's state still owing 60 s, B's
/// state decided with the calls for its two minutes): one token every 6 s until +200 s.
#[test]
fn a_bucket_moved_and_moved_back_gives_one_token_every_six_seconds() {
    let (service, clock) = service(on(1).build().unwrap());
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    reload(&service, on(2));
    let mut total = every_second(&service, &clock, 30);
    reload(&service, on(1));
    total += every_second(&service, &clock, 200);
    assert_eq!(total, 33);
}

/// Moved back after the old window, its spends made on B carried: 15 spent on A, moved to B,
/// 10 more over B's first two minutes (B owes them, A's state was carried into it past +60 s),
/// moved back to A at +120 s: A's own state, untouched since +60 s, does not hand out what B
/// spent: B's state is decided with the calls for its window, then carried into A's.
#[test]
fn a_bucket_moved_back_after_its_spends_on_the_other_state_keeps_them() {
    let (service, clock) = service(on(1).build().unwrap());
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    reload(&service, on(2));
    let first = every_second(&service, &clock, 120);
    assert_eq!(first, 20, "one every 6 s for two minutes");
    reload(&service, on(1));
    assert_eq!(
        admitted(&service, &Options::new(), 5),
        0,
        "admitted at the switch"
    );
    let then = every_second(&service, &clock, 300);
    assert_eq!(then, 30, "one every 6 s after");
}

/// A move that also makes the refill faster (15 at 6 s a token moved to 15 at 3 s a token,
/// on two minutes): the old debt is carried as time, 30 s at +60 s, which the new bucket
/// holds as 10 of its tokens: 5 admitted (fewer than either bucket alone: README).
#[test]
fn a_move_to_a_faster_refill_carries_the_debt_as_time() {
    let (service, clock) = service(on(1).build().unwrap());
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    reload(
        &service,
        bucket_a_minute(10, 5, 40).default_window(2 * MINUTE),
    );
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &Options::new(), 20), 5);
}

/// The key prefix changed (every state moved): the same debt past the old window.
#[test]
fn a_bucket_moved_by_a_new_key_prefix_keeps_its_debt() {
    let (service, clock) = service(on(1).build().unwrap());
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    let config = on(1)
        .store(service.config().store().clone())
        .key_prefix("elsewhere")
        .build()
        .unwrap();
    service.reload(config).unwrap();
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &Options::new(), 20), 10);
}

/// Calls of cost 3 on the moved bucket past the old window: 10 tokens back, 3 calls.
#[test]
fn calls_of_cost_three_on_a_moved_bucket_get_the_tokens_carried_back() {
    let (service, clock) = service(on(1).build().unwrap());
    let three = Options::new().cost(3);
    assert_eq!(admitted(&service, &three, 6), 5);
    reload(&service, on(2));
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &three, 6), 3);
}

/// The clock stepped back from past the old window (the debt carried) into it (the old
/// state decided again), then on: never more than the bucket gives by the latest instant
/// the clock showed (15 + one every 6 s).
#[test]
fn a_clock_stepped_back_into_the_old_window_hands_out_nothing_more() {
    let (service, clock) = service(on(1).build().unwrap());
    let mut total = admitted(&service, &Options::new(), 16);
    reload(&service, on(2));
    clock.advance(Duration::from_secs(70));
    total += admitted(&service, &Options::new(), 20);
    clock.set(START + Duration::from_secs(30));
    total += admitted(&service, &Options::new(), 20);
    total += every_second(&service, &clock, 120);
    assert!(total <= 15 + 120 / 6, "{total} admitted by +120 s");
}

/// A tier `"a"` renamed `"a2"` (still the default) while a new tier takes the name `"a"`
/// with the same strategy and window (so the same state as the old `"a"`): the new `"a"`'s
/// spends on that state are carried into `"a2"` for as long as the old state is carried from
/// (its window and tolerance: 150 s). Measured: 15 spent on `"a"` at the start, 51 calls on
/// the new `"a"` (100 a minute) at +61 s, and `"a2"` then gives 5 where its own bucket had
/// given back 10. Never more than that bucket (a carry only adds); fewer, for at most 150 s.
#[test]
fn a_tier_taking_a_renamed_tiers_name_is_carried_into_it_while_the_carry_lasts() {
    let x = |name: &str| {
        Tier::new(name, 10)
            .burst(5)
            .refill(10)
            .window(MINUTE)
            .strategy(Strategy::TokenBucket)
    };
    let y = Tier::new("a", 100)
        .refill(100)
        .window(MINUTE)
        .strategy(Strategy::TokenBucket);
    let (service, clock) = service(
        Config::builder()
            .tier(x("a"))
            .default_tier("a")
            .build()
            .unwrap(),
    );
    assert_eq!(admitted(&service, &Options::new(), 16), 15);
    reload(
        &service,
        Config::builder().tier(x("a2")).tier(y).default_tier("a2"),
    );
    clock.advance(Duration::from_secs(61));
    assert_eq!(admitted(&service, &Options::new().tier("a"), 100), 51);
    assert_eq!(admitted(&service, &Options::new(), 20), 5);
    // Past the carry, each on its own: the new "a" full again, "a2" its own bucket's.
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &Options::new().tier("a"), 101), 100);
    assert_eq!(admitted(&service, &Options::new(), 20), 15);
}

/// A fixed window of 2 a minute blocking a key an hour, moved to two minutes; blocked before
/// the move. What a reset means during the carry: `reset_with` forgets the state calls on
/// the key are decided on now (the new one), not the old state, which the next call carries
/// again: still refused at +90 s after a reset (the reset said there was state). The old
/// state's key is the old configuration's: reset through a service over it (the same store),
/// both are fresh and the limit's 2 come back.
#[test]
fn a_reset_during_the_carry_forgets_the_new_state_only() {
    let blocking = |window: Duration| {
        let tier = Tier::new("a", 2)
            .window(window)
            .strategy(Strategy::FixedWindow)
            .block_for(HOUR);
        Config::builder().tier(tier).default_tier("a")
    };
    let (service, clock) = service(blocking(MINUTE).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 3), 2);
    reload(&service, blocking(2 * MINUTE));
    clock.advance(Duration::from_secs(90));
    assert_eq!(admitted(&service, &plain, 3), 0, "admitted while blocked");
    assert!(now(service.reset_with("k", &plain)).unwrap());
    assert_eq!(
        admitted(&service, &plain, 3),
        0,
        "the old block carried back"
    );
    let store = service.memory_store().unwrap().clone();
    let old = ratelimit_tests::on_its_store(&service, blocking(MINUTE));
    let old = RateLimitService::with_store(old, store, std::sync::Arc::new(clock.clone()));
    assert!(now(old.unwrap().reset_with("k", &plain)).unwrap());
    assert!(now(service.reset_with("k", &plain)).unwrap());
    assert_eq!(admitted(&service, &plain, 3), 2, "both reset");
}
