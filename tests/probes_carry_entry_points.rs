//! helper-66's probes of carrying a moved limit's old state through every entry point:
//! stacked calls (both limits moved, one moved beside one that was not), prepared sites
//! made before and after the move, an annotated fn, the queue and `until_ready`, looks, and
//! spends kept across the move. Each is held to what the one bucket (or block) allows past
//! the old window; none found a way through (they can fail on exact counts). Memory store,
//! hand-driven clocks (Tokio's paused time for the waits).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::{TestModule, TokioClock};
use ratelimit::{
    rate_limit, Config, ConfigBuilder, Error, ModuleBuilder, Options, RateLimitService, Strategy,
    Tier,
};
use ratelimit_tests::{admitted, bucket_a_minute, now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
const MILLI: Duration = Duration::from_millis(1);

/// A token-bucket tier `name` of 10 plus a burst of 5 at a token every 6 s on `window`.
fn bucket_tier(name: &str, window: Duration) -> Tier {
    Tier::new(name, 10)
        .burst(5)
        .refill(10 * window.as_secs() / 60)
        .window(window)
        .strategy(Strategy::TokenBucket)
}

/// Stacked calls on `"k"` under `a` and `b` admitted out of `n`.
fn stacked(service: &RateLimitService, a: &Options, b: &Options, n: usize) -> usize {
    (0..n)
        .filter(|_| {
            now(service.consume_all(&[("k", a), ("k", b)]))
                .is_ok_and(|d| d.iter().all(|d| d.allowed))
        })
        .count()
}

/// Tiers `"a"` and `"b"`, both the bucket of 15 at 6 s a token, spent together; both moved
/// to two minutes. A minute later the stack gives exactly the 10 each gave back, and each
/// tier alone then nothing.
#[test]
fn a_stack_of_two_moved_buckets_gives_what_each_gave_back() {
    let tiers = |w: Duration| {
        Config::builder()
            .tier(bucket_tier("a", w))
            .tier(bucket_tier("b", w))
    };
    let (service, clock) = service(tiers(MINUTE).build().unwrap());
    let (a, b) = (Options::new().tier("a"), Options::new().tier("b"));
    assert_eq!(stacked(&service, &a, &b, 16), 15);
    reload(&service, tiers(2 * MINUTE));
    assert_eq!(stacked(&service, &a, &b, 3), 0, "admitted at the switch");
    clock.advance(MINUTE);
    assert_eq!(stacked(&service, &a, &b, 20), 10);
    assert_eq!(admitted(&service, &a, 3) + admitted(&service, &b, 3), 0);
}

/// `"a"` moved, `"b"` (a bucket of 100 a minute) on its own state: `"a"`'s 15 spent alone;
/// a minute later the stack gives `"a"`'s 10, and the 10 refused stacked calls after them
/// spent nothing on `"b"` (90 left of its 100).
#[test]
fn a_stack_of_a_moved_bucket_and_one_that_stayed_spends_nothing_when_the_carry_refuses() {
    let tiers = |w: Duration| {
        Config::builder().tier(bucket_tier("a", w)).tier(
            Tier::new("b", 100)
                .window(MINUTE)
                .strategy(Strategy::TokenBucket),
        )
    };
    let (service, clock) = service(tiers(MINUTE).build().unwrap());
    let (a, b) = (Options::new().tier("a"), Options::new().tier("b"));
    assert_eq!(admitted(&service, &a, 16), 15);
    reload(&service, tiers(2 * MINUTE));
    clock.advance(MINUTE);
    assert_eq!(stacked(&service, &a, &b, 20), 10);
    assert_eq!(now(service.status("k", &b)).unwrap().remaining, 90);
}

/// A site prepared before the move (stale: its calls resolved again) and one prepared
/// after, on one key past the old window: between them the 10 the bucket gave back.
#[test]
fn prepared_sites_from_before_and_after_a_move_share_the_carried_debt() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let stale = service.prepare(&Options::new()).unwrap();
    let by = |site: &ratelimit::Prepared, n: usize| {
        (0..n)
            .filter(|_| site.consume_now("k").unwrap().is_ok_and(|d| d.allowed))
            .count()
    };
    assert_eq!(by(&stale, 16), 15);
    reload(
        &service,
        bucket_a_minute(10, 5, 20).default_window(2 * MINUTE),
    );
    let fresh = service.prepare(&Options::new()).unwrap();
    clock.advance(MINUTE);
    let mut total = 0;
    for _ in 0..10 {
        total += by(&stale, 1) + by(&fresh, 1);
    }
    assert_eq!(total, 10);
}

#[rate_limit(tier = "h66_blocked", key = user)]
async fn h66_blocked(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// The fn's tier: 2 on `window` (fixed), blocking a key for an hour once refused.
fn blocked_tier(window: Duration) -> ConfigBuilder {
    let tier = Tier::new("h66_blocked", 2)
        .window(window)
        .strategy(Strategy::FixedWindow)
        .block_for(HOUR);
    Config::builder().tier(tier)
}

/// An annotated fn under a module whose reload moves its blocking tier to another window:
/// blocked before the move, still refused at 90 s and 59 minutes, its 2 again after the hour.
#[tokio::test]
async fn an_annotated_fn_blocked_before_a_move_stays_blocked_for_the_hour() {
    let module = TestModule::new(ModuleBuilder::from(blocked_tier(MINUTE))).unwrap();
    let calls = |n: usize| async move {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(h66_blocked("u").await.is_ok());
        }
        ok
    };
    module
        .scope(async {
            assert_eq!(calls(3).await, 2);
            reload(module.service(), blocked_tier(2 * MINUTE));
            module.clock().advance(Duration::from_secs(90));
            assert_eq!(calls(3).await, 0, "admitted at 90 s");
            module.clock().advance(Duration::from_secs(57 * 60));
            assert_eq!(calls(3).await, 0, "admitted at 58.5 minutes");
            module.clock().advance(2 * MINUTE);
            assert_eq!(calls(3).await, 2, "after the hour");
        })
        .await;
}

/// Past the old window a look tells what the calls get: 10 remain, exactly 10 admitted,
/// the refusal's wait (6 s, the next token) is one the call is refused before and admitted
/// at, and the look at a refused instant says the same wait.
#[test]
fn a_look_and_a_refusals_wait_past_the_old_window_are_what_the_calls_get() {
    let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16), 15);
    reload(
        &service,
        bucket_a_minute(10, 5, 20).default_window(2 * MINUTE),
    );
    clock.advance(MINUTE);
    let level = now(service.status("k", &plain)).unwrap();
    assert_eq!((level.allowed, level.remaining), (true, 10));
    assert_eq!(admitted(&service, &plain, 20), 10);
    let look = now(service.status("k", &plain)).unwrap();
    let refused = now(service.consume("k", &plain)).unwrap();
    assert!(!refused.allowed && !look.allowed);
    let wait = refused.retry_after.unwrap();
    assert_eq!(look.retry_after, Some(wait));
    assert_eq!(wait, Duration::from_secs(6));
    clock.advance(wait - MILLI);
    assert_eq!(admitted(&service, &plain, 1), 0, "admitted before the wait");
    clock.advance(MILLI);
    assert_eq!(admitted(&service, &plain, 2), 1, "refused at the wait");
}

/// 15 spends kept under the old configuration, then the move; a minute later (no call
/// meanwhile) all 15 given back: the 5 that still count (their tokens not back yet) are
/// given back to the old state they were spent on, which then owes nothing to carry: the
/// bucket's 15. Given back after a call carried the old debt, they give back nothing more on
/// the new state (10, as without the refunds: never more than the bucket).
#[test]
fn spends_kept_before_a_move_give_back_only_what_is_not_carried_yet() {
    for call_first in [false, true] {
        let (service, clock) = service(bucket_a_minute(10, 5, 10).build().unwrap());
        let plain = Options::new();
        let spent: Vec<_> = (0..15)
            .map(|_| now(service.spend("k", &plain)).unwrap())
            .collect();
        assert!(spent.iter().all(|s| s.decision().allowed));
        reload(
            &service,
            bucket_a_minute(10, 5, 20).default_window(2 * MINUTE),
        );
        clock.advance(MINUTE);
        if call_first {
            assert_eq!(now(service.status("k", &plain)).unwrap().remaining, 10);
        }
        let given = (spent.into_iter().map(|s| now(s.refund()).unwrap()))
            .filter(|&g| g)
            .count();
        assert_eq!(given, 5);
        let expected = if call_first { 10 } else { 15 };
        assert_eq!(admitted(&service, &plain, 20), expected, "{call_first}");
    }
}

// ---------------------------------------------------------------------------------------
// Waiting: the queue and `until_ready`, on Tokio's paused time.
// ---------------------------------------------------------------------------------------

/// A service on Tokio's paused time over tier `"a"` (the bucket on `window`), waiting up to
/// 5 minutes.
fn waiting(window: Duration) -> ConfigBuilder {
    Config::builder()
        .tier(bucket_tier("a", window))
        .queue_enabled(true)
        .queue_timeout("5m")
        .max_queue_size(100)
}

fn tokio_service(config: ConfigBuilder) -> RateLimitService {
    RateLimitService::with_clock(config.build().unwrap(), Arc::new(TokioClock::new())).unwrap()
}

/// The bucket of 15 spent (calls that do not wait), then moved to two minutes.
async fn spent_and_moved(service: &RateLimitService, opts: &Options) {
    for _ in 0..15 {
        let spent = service.consume("k", &opts.clone().queue(false)).await;
        assert!(spent.unwrap().allowed);
    }
    service
        .reload(waiting(2 * MINUTE).build().unwrap())
        .unwrap();
}

/// The bucket of 15 spent, moved; 20 callers waiting in the queue. They are admitted one
/// every 6 s, across the old window's end too (no burst of the fresh state at +60 s): at
/// 6, 12, ..., 120 s.
#[tokio::test(start_paused = true)]
async fn waiters_across_the_old_windows_end_are_admitted_at_the_buckets_rate() {
    let service = tokio_service(waiting(MINUTE));
    let start = tokio::time::Instant::now();
    let opts = Options::new().tier("a");
    spent_and_moved(&service, &opts).await;
    let mut tasks = Vec::new();
    for n in 1..=20u64 {
        let (svc, opts) = (service.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            let d = svc.consume("k", &opts).await;
            (d, start.elapsed())
        }));
        while service.stats().queue.queued != n {
            tokio::task::yield_now().await;
        }
    }
    let mut by_second = BTreeMap::new();
    for task in tasks {
        let (d, at) = task.await.unwrap();
        assert!(d.unwrap().allowed);
        *by_second.entry(at.as_secs()).or_insert(0) += 1;
    }
    let expected: BTreeMap<u64, u64> = (1..=20).map(|i| (6 * i, 1)).collect();
    assert_eq!(by_second, expected);
}

/// `until_ready` from the switch on: each call returns when the one bucket admits it, one
/// every 6 s, across the old window's end too.
#[tokio::test(start_paused = true)]
async fn until_ready_across_the_old_windows_end_waits_for_the_bucket() {
    let service = tokio_service(waiting(MINUTE));
    let start = tokio::time::Instant::now();
    let opts = Options::new().tier("a");
    spent_and_moved(&service, &opts).await;
    let deadline = start + Duration::from_secs(600);
    for i in 1..=15u64 {
        let d = service.until_ready("k", &opts, deadline).await.unwrap();
        assert!(d.allowed);
        assert_eq!(start.elapsed().as_secs(), 6 * i, "call {i}");
    }
}
