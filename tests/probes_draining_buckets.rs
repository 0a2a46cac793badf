//! A token bucket held to a slower old refill for one window after a reload
//! (`Quota::held_to`) must leave no more owing at the window's end than the running bucket
//! tolerates (`Quota::draining_by`): the state is a debt in time, read after the window at the
//! new, faster refill. Held whole, the calls of the window ran the debt up to the old bucket's
//! whole tolerance, and the reload that loosened the limit then refused every call for up to
//! that long after the window. Never more admitted than the transition gives (the probes of
//! `probes_refill_reloads` and `probes_held_buckets` hold that).

use std::time::Duration;

use ratelimit::{ConfigBuilder, Options, RateLimitService};
use ratelimit_tests::{bucket_a_minute, now, reload_to as reload, service};

/// A bucket of `limit` refilled `refill` tokens a minute.
fn bucket(limit: u64, refill: u64) -> ConfigBuilder {
    bucket_a_minute(limit, 0, refill)
}

/// Calls of `cost` on `"k"` admitted out of `n` at the clock's instant; any error fails.
fn admitted(service: &RateLimitService, n: usize, cost: u64) -> usize {
    let options = Options::new().cost(cost);
    (0..n)
        .filter(|_| match now(service.consume("k", &options)) {
            Ok(decided) => decided.allowed,
            Err(e) => panic!("a call of cost {cost} answered {e}"),
        })
        .count()
}

/// 10 a minute, reloaded at once to 10 a second; a call every second through the old
/// minute. For that minute the calls are held to the old bucket (10, then one every 6 s at
/// most), cut so that its debt is drained by the minute's end: the first 10 only. Then the new
/// bucket gives its 10 at once. Held whole, the calls of the minute ran the debt to a minute
/// ahead (19 admitted), and from +60 s every call was refused until +119 s.
#[test]
fn a_reload_speeding_a_buckets_refill_refuses_nothing_past_the_old_window() {
    let (service, clock) = service(bucket(10, 10).build().unwrap());
    reload(&service, bucket(10, 600));
    let mut in_window = 0;
    for _ in 0..60 {
        in_window += admitted(&service, 1, 1);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(admitted(&service, 11, 1), 10, "admitted at once after it");
    assert_eq!(in_window, 10, "admitted in the old window");
    // And then at the new refill: 10 a second.
    let mut after = 0;
    for _ in 0..50 {
        clock.advance(Duration::from_millis(100));
        after += admitted(&service, 1, 1);
    }
    assert_eq!(after, 50, "admitted at a call every 100 ms");
}

/// The same reload with calls of cost 4 every 3 s: near the window's end the cut would leave
/// no room for such a call, yet a cost the held quota takes is never an error
/// (`CostAboveCapacity`); it may leave its own cost owing at the end, 4 old tokens (24 s) at
/// most, not the old bucket's whole minute.
#[test]
fn a_call_of_a_cost_the_held_bucket_takes_is_never_an_error_while_its_debt_drains() {
    let (service, clock) = service(bucket(10, 10).build().unwrap());
    reload(&service, bucket(10, 600));
    let mut in_window = 0;
    for _ in 0..20 {
        in_window += admitted(&service, 1, 4);
        clock.advance(Duration::from_secs(3));
    }
    assert!(in_window <= 5, "{in_window} calls of 4 in the old window");
    // At +60 s the debt is at most one call's 24 s past the end: admitted again by +84 s.
    let mut waited = 0;
    while admitted(&service, 1, 4) == 0 {
        assert!(waited < 24, "still refused {waited} s after the window");
        clock.advance(Duration::from_secs(1));
        waited += 1;
    }
}

/// A reload slowing the refill (10 a second to 10 a minute) is held to the old second's
/// tolerance, which the running bucket's covers: nothing is cut, as before.
#[test]
fn a_reload_slowing_a_buckets_refill_cuts_nothing() {
    let (service, clock) = service(bucket(10, 600).build().unwrap());
    assert_eq!(admitted(&service, 11, 1), 10);
    reload(&service, bucket(10, 10));
    clock.advance(Duration::from_secs(1));
    // The old bucket's debt of 1 s is drained: one call at a time at the minute's 6 s.
    assert_eq!(admitted(&service, 3, 1), 1);
    clock.advance(Duration::from_secs(6));
    assert_eq!(admitted(&service, 3, 1), 1);
}
