//! helper-61's attacks on prepared sites and annotated fns across a reload that moves their
//! limit to another state, with `reset(key)` and a clock stepped backwards during the
//! transition. The rule probed: for one old window the old state holds every call, whatever
//! entry point it takes, whatever is reset or however the clock moves; a reset of the new
//! state never hands out the old one's spent budget.

use std::time::Duration;

use ratelimit::{
    rate_limit, Config, ConfigBuilder, Error, ManualClock, Module, ModuleBuilder, Options,
    Strategy, Tier,
};
use ratelimit_tests::{now, reload_to as reload, serial, service, START};

const MINUTE: Duration = Duration::from_secs(60);

/// A sliding-log tier `"a"` (the default tier) of `limit` per `window`.
fn sliding(limit: u64, window: Duration) -> ConfigBuilder {
    let tier = Tier::new("a", limit)
        .window(window)
        .strategy(Strategy::SlidingWindow);
    Config::builder().tier(tier).default_tier("a")
}

/// Admitted calls of a prepared site on `"k"`, out of `n`.
fn admitted_now(site: &ratelimit::Prepared, n: usize) -> usize {
    (0..n)
        .filter(|_| site.consume_now("k").unwrap().is_ok_and(|d| d.allowed))
        .count()
}

/// 3 a minute moved to 10 per two minutes, a site prepared after the reload (holding the
/// transition): its 3 admitted, then nothing; a reset of the key (the new state) hands out
/// nothing while the old state holds, nor does the clock stepped back 30 s; once the old
/// window has passed, the new state's 10 (reset: none spent there).
#[test]
fn a_prepared_site_during_a_move_holds_to_the_old_state_through_a_reset_and_a_clock_stepped_back() {
    let (service, clock) = service(sliding(3, MINUTE).build().unwrap());
    reload(&service, sliding(10, 2 * MINUTE));
    let site = service.prepare(&Options::new()).unwrap();
    assert!(site.is_current());
    assert_eq!(admitted_now(&site, 5), 3);
    assert!(now(service.reset_with("k", &Options::new())).unwrap());
    assert_eq!(admitted_now(&site, 5), 0, "admitted after a reset");
    assert_eq!(
        now(service.consume("k", &Options::new()))
            .map(|d| d.allowed)
            .ok(),
        Some(false)
    );
    clock.advance(Duration::from_secs(50));
    assert_eq!(admitted_now(&site, 5), 0, "admitted inside the old window");
    clock.set(START + Duration::from_secs(20));
    assert_eq!(
        admitted_now(&site, 5),
        0,
        "admitted on a clock stepped back"
    );
    clock.set(START + MINUTE);
    assert_eq!(admitted_now(&site, 12), 10);
}

/// A site prepared before the move (stale once it is made) and one prepared during it, on
/// one key: between them never more than the old 3 in the old window.
#[test]
fn a_stale_and_a_fresh_prepared_site_share_the_old_budget_during_a_move() {
    let (service, clock) = service(sliding(3, MINUTE).build().unwrap());
    let stale = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_now(&stale, 1), 1);
    reload(&service, sliding(10, 2 * MINUTE));
    let fresh = service.prepare(&Options::new()).unwrap();
    assert!(!stale.is_current() && fresh.is_current());
    let mut total = 0;
    for _ in 0..59 {
        total += admitted_now(&stale, 2) + admitted_now(&fresh, 2);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(total, 2, "past the old 3 in the old window");
}

// ---------------------------------------------------------------------------------------
// An annotated fn under a module whose reload moves its tier's bucket.
// ---------------------------------------------------------------------------------------

#[rate_limit(tier = "h61_moved", key = user)]
async fn h61_moved(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// The fn's tier: a bucket of 10 plus a burst of 5, refilled 10 a minute, on `window`
/// (scaled: the same bucket on another state for a window of two minutes).
fn moved_tier(window: Duration) -> ConfigBuilder {
    let refill = 10 * (window.as_secs() / 60);
    Config::builder().tier(
        Tier::new("h61_moved", 10)
            .burst(5)
            .refill(refill)
            .window(window)
            .strategy(Strategy::TokenBucket),
    )
}

/// A module of `moved_tier(MINUTE)` on a hand-driven clock.
fn module() -> (Module, ManualClock) {
    let clock = ratelimit_tests::clock();
    let builder = ModuleBuilder::from(moved_tier(MINUTE)).clock(clock.clone());
    (builder.init().unwrap(), clock)
}

/// Calls of the fn for `"u"` admitted out of `n`.
fn fn_admitted(n: usize) -> usize {
    (0..n).filter(|_| now(h61_moved("u")).is_ok()).count()
}

/// Inside the old window the fn is held to its old state: 15 spent, moved; nothing at the
/// switch, and the old bucket's 9 tokens over the next 59 s (a token every 6 s).
#[test]
fn an_annotated_fn_whose_bucket_is_moved_refills_at_the_old_rate_inside_the_old_window() {
    let _serial = serial();
    let (module, clock) = module();
    assert_eq!(fn_admitted(16), 15);
    module.reload(moved_tier(2 * MINUTE)).unwrap();
    assert_eq!(fn_admitted(5), 0, "admitted at the switch");
    let mut total = 0;
    for _ in 0..59 {
        clock.advance(Duration::from_secs(1));
        total += fn_admitted(3);
    }
    assert_eq!(total, 9);
}

/// Past the old window: the bucket owes 30 s of its 90 s, and gives 10; the fn's fresh
/// state gave 15.
#[test]
fn an_annotated_fn_whose_bucket_is_moved_keeps_its_burst_debt_past_the_old_window() {
    let _serial = serial();
    let (module, clock) = module();
    assert_eq!(fn_admitted(16), 15);
    module.reload(moved_tier(2 * MINUTE)).unwrap();
    clock.advance(MINUTE);
    assert_eq!(fn_admitted(20), 10);
}
