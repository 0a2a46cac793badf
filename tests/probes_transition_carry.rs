//! A limit a reload moves to another state (its window, tier name or key prefix changed)
//! carries its old state into the new one (`Stacked::carried`, `service/transition.rs`): a
//! token bucket's debt and a block outlast the old window. What is probed here, around the
//! carrying itself (the ways through it closes are in `probes_transition_others`,
//! `probes_transition_stacked`, `probes_transition_sites` and `probes_transition_redis`):
//! a look sees what is carried, how long it is carried, a store of one's own that does not
//! carry (the old state decided whole instead), and which reloads are kept how long for it.
//! Memory store (and a store over the public API), hand-driven clock.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, Error, ManualClock, Options, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::stored_map::StoredMap;
use ratelimit_tests::{bucket_a_minute, moved, now, reload_to as reload, service, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Calls on `"k"` admitted out of `n`, at the clock's instant.
fn admitted(service: &RateLimitService, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", &Options::new())).is_ok_and(|d| d.allowed))
        .count()
}

/// A look at the moved bucket past the old window reads the carried debt: 15 spent at 6 s a
/// token, moved, a minute later `status` says 10 remain (not the fresh state's 15), and the
/// calls then get exactly those 10.
#[test]
fn a_look_at_a_moved_bucket_reads_the_debt_it_carries() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    assert_eq!(admitted(&service, 16), 15);
    reload(&service, moved(10, 5, 10));
    clock.advance(MINUTE);
    let level = now(service.status("k", &Options::new())).unwrap();
    assert_eq!(level.remaining, 10, "the look read a fresh state");
    assert_eq!(admitted(&service, 20), 10);
}

/// The old state is carried from only while it may hold something: past the old window
/// plus the bucket's tolerance (60 s + 90 s) its debt has drained, and the moved bucket,
/// asked for the first time then, gives its 15 (as one bucket would).
#[test]
fn a_moved_bucket_first_asked_after_its_old_debt_drained_gives_its_whole_capacity() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    assert_eq!(admitted(&service, 16), 15);
    reload(&service, moved(10, 5, 10));
    clock.advance(Duration::from_secs(150));
    assert_eq!(admitted(&service, 20), 15);
}

/// A debt carried once is the moved state's own, after the old state stops being carried
/// from: 10 spent and a penalty of 30 on a bucket of 10 a minute (40 tokens owed, 4
/// minutes), moved; one call at the switch carries the debt. Three minutes later (past
/// the old window plus the tolerance, 2 minutes, when the old state is no longer asked) a
/// minute of debt is left: nothing admitted; 6 s later, one.
#[test]
fn a_penalty_carried_by_a_call_outlasts_the_old_state() {
    let (service, clock) = service(bucket_a_minute(10, 0, 10).build().unwrap());
    assert_eq!(admitted(&service, 10), 10);
    now(service.penalize("k", &Options::new(), 30)).unwrap();
    reload(&service, moved(10, 0, 10));
    assert_eq!(admitted(&service, 1), 0, "admitted at the switch");
    clock.advance(Duration::from_secs(180));
    assert_eq!(admitted(&service, 10), 0, "admitted while a minute is owed");
    clock.advance(Duration::from_secs(6));
    assert_eq!(admitted(&service, 10), 1);
}

/// The same penalty with no call from the switch until three minutes later. Kept only for
/// its window plus its bucket's tolerance (what a decision can leave owing), the old
/// configuration was let go with a minute of the penalty's debt owed: the moved state was
/// fresh, 10 admitted where the debt allowed none. It is kept until the latest penalty's
/// debt may end (`Inner::penalized_until`).
#[test]
fn a_penalty_past_the_old_tolerance_is_carried_even_with_no_call_meanwhile() {
    let (service, clock) = service(bucket_a_minute(10, 0, 10).build().unwrap());
    assert_eq!(admitted(&service, 10), 10);
    now(service.penalize("k", &Options::new(), 30)).unwrap();
    reload(&service, moved(10, 0, 10));
    clock.advance(Duration::from_secs(180));
    assert_eq!(admitted(&service, 10), 0, "admitted while a minute is owed");
}

/// A key blocked on the old state is blocked on the moved one only where the moved limit
/// blocks: a reload that moves a blocking fixed window to one without `block_for` reads no
/// block (as a reload on the same state dropping the block does).
#[test]
fn a_block_is_carried_only_into_a_limit_that_blocks() {
    let limit = |window: Duration, block: bool| {
        let tier = Tier::new("a", 2)
            .window(window)
            .strategy(Strategy::FixedWindow);
        let tier = match block {
            true => tier.block_for(HOUR),
            false => tier,
        };
        Config::builder().tier(tier).default_tier("a")
    };
    let (service, clock) = service(limit(MINUTE, true).build().unwrap());
    assert_eq!(admitted(&service, 3), 2);
    reload(&service, limit(2 * MINUTE, false));
    clock.advance(Duration::from_secs(90));
    assert_eq!(
        admitted(&service, 3),
        2,
        "a block read by a limit without one"
    );
}

// ---------------------------------------------------------------------------------------
// A store of one's own that does not carry (`Store::carries` false).
// ---------------------------------------------------------------------------------------

/// On a store that does not carry, the old state is decided with the call, whole, for as
/// long as it may hold a debt (the old window plus its tolerance), not one old window: 15
/// spent and moved, a minute later the calls get the 10 the old bucket refilled, not the
/// fresh state's 15; and a call every second for two minutes gets no more than the one
/// bucket's 35.
#[test]
fn a_store_that_does_not_carry_holds_a_moved_bucket_to_its_old_state_while_it_owes() {
    let serve = || {
        let clock = ManualClock::new(START);
        let config = bucket_a_minute(10, 5, 10).build().unwrap();
        let service =
            RateLimitService::with_store(config, StoredMap::default(), Arc::new(clock.clone()))
                .unwrap();
        (service, clock)
    };
    let (service, clock) = serve();
    assert_eq!(admitted(&service, 16), 15);
    service.reload(moved(10, 5, 10).build().unwrap()).unwrap();
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, 20), 10, "a minute after the move");

    let (service, clock) = serve();
    let mut total = admitted(&service, 16);
    service.reload(moved(10, 5, 10).build().unwrap()).unwrap();
    for _ in 0..120 {
        clock.advance(Duration::from_secs(1));
        total += admitted(&service, 16);
    }
    assert!(
        total <= 35,
        "{total} admitted in two minutes (one bucket: 35)"
    );
}

// ---------------------------------------------------------------------------------------
// How long a reload is kept for what it carries.
// ---------------------------------------------------------------------------------------

/// A fixed window of `limit` a minute blocking a key for `block`, as tier `"a"`.
fn blocking(limit: u64, window: Duration, block: Duration) -> ConfigBuilder {
    let tier = Tier::new("a", limit)
        .window(window)
        .strategy(Strategy::FixedWindow)
        .block_for(block);
    Config::builder().tier(tier).default_tier("a")
}

/// Reloads that keep every limit on its state are kept for their windows only, whatever
/// the blocks: 80 reloads a minute and a second apart, under a day's block, are all taken
/// (kept for the day, the 65th would have been refused as too many in force).
#[test]
fn reloads_that_move_no_limit_are_not_kept_for_its_block() {
    let day = 24 * HOUR;
    let (service, clock) = service(blocking(2, MINUTE, day).build().unwrap());
    for i in 0..80 {
        clock.advance(MINUTE + Duration::from_secs(1));
        let config = blocking(2 + i % 2, MINUTE, day);
        service
            .reload(ratelimit_tests::on_its_store(&service, config))
            .unwrap_or_else(|e| panic!("reload {i} refused: {e}"));
    }
}

/// Reloads that move a blocking limit to another state are kept as long as a block begun on
/// the old state may last (the old window plus the block), since a call carries it:
/// renaming the default tier every minute and a second under a block of two hours, the reload
/// that would hold a 65th configuration still carried is refused (an error, the running
/// configuration kept), never the carrying dropped.
#[test]
fn reloads_that_move_a_blocking_limit_are_kept_while_a_block_may_last() {
    let named = |name: &str| {
        let tier = Tier::new(name, 2)
            .window(MINUTE)
            .strategy(Strategy::FixedWindow)
            .block_for(2 * HOUR);
        Config::builder().tier(tier).default_tier(name)
    };
    let (service, clock) = service(named("t").build().unwrap());
    let mut refused = None;
    for i in 0..80 {
        clock.advance(MINUTE + Duration::from_secs(1));
        let config = ratelimit_tests::on_its_store(&service, named(&format!("t{i}")));
        if let Err(e) = service.reload(config) {
            refused = Some((i, e));
            break;
        }
    }
    let (i, e) = refused.expect("every reload taken while 64 were carried");
    assert_eq!(i, 64, "refused at reload {i}: {e}");
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    assert_eq!(service.config().default_tier(), Some("t63"));
}

/// A bucket moved to a faster refill is whole when the old window ends, not locked out for
/// the old debt: 10 a minute, spent, moved to 10 a second (another window). Decided on, the
/// old state is cut as its window ends so that what its calls leave owing then is within the
/// new bucket's tolerance (`OldState::quota_at`): nothing admitted in the minute (the debt
/// of the whole minute leaves no room), and at +60 s the new bucket's 10, every second.
/// With the old state decided whole, the debt it left at the window's end, carried, refused
/// every call past the window; carried while decided on, every call in the minute.
#[test]
fn a_bucket_moved_to_a_faster_refill_is_whole_when_the_old_window_ends() {
    let (service, clock) = service(bucket_a_minute(10, 0, 10).build().unwrap());
    assert_eq!(admitted(&service, 10), 10);
    let fast = bucket_a_minute(10, 0, 10).default_window(Duration::from_secs(1));
    reload(&service, fast);
    let mut in_the_minute = 0;
    for _ in 0..60 {
        in_the_minute += admitted(&service, 20);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(in_the_minute, 0);
    for second in 60..70 {
        assert_eq!(admitted(&service, 20), 10, "at +{second} s");
        clock.advance(Duration::from_secs(1));
    }
}
