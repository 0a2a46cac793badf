//! helper-61's attacks on a reload's transition to other states on Redis (a real server):
//! `probes_transition_others` and `probes_transition_stacked` there. Redis decides on its own
//! clock and the transition ends on the service's (a hand-driven one here): everything
//! happens within a few milliseconds of Redis' time, so nothing the tests count refills or
//! unblocks there, and the service's clock is moved only to end a transition.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, ManualClock, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::on_its_store;
use ratelimit_tests::redis_server::{prefix, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// A service on `server` under a fresh prefix, decided on a hand-driven clock.
fn on_redis(server: &RedisServer, config: ConfigBuilder) -> (RateLimitService, ManualClock) {
    ratelimit_tests::on_redis(server, &prefix("transition"), config)
}

async fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let decided = service.consume("k", options).await;
        admitted += usize::from(decided.is_ok_and(|d| d.allowed));
    }
    admitted
}

/// A token-bucket tier `"a"` (the default tier) of 10 plus a burst of 5 on `window`,
/// refilled `refill` a window: at 10 a minute, 15 at a token every 6 s.
fn bucket(window: Duration, refill: u64) -> ConfigBuilder {
    let tier = Tier::new("a", 10)
        .burst(5)
        .refill(refill)
        .window(window)
        .strategy(Strategy::TokenBucket);
    Config::builder().tier(tier).default_tier("a")
}

/// A sliding-log tier `"a"` (the default tier) of 2 per `window`, blocking an hour (a log:
/// no window boundary of Redis' clock falls inside a test).
fn blocking(window: Duration) -> ConfigBuilder {
    let tier = Tier::new("a", 2)
        .window(window)
        .strategy(Strategy::SlidingWindow)
        .block_for(HOUR);
    Config::builder().tier(tier).default_tier("a")
}

/// `tier` as a sliding log: no window boundary of Redis' clock falls inside a test.
fn sliding(tier: Tier) -> Tier {
    tier.strategy(Strategy::SlidingWindow)
}

fn reload(service: &RateLimitService, builder: ConfigBuilder) {
    service.reload(on_its_store(service, builder)).unwrap();
}

/// Inside the old window the old state holds on Redis: the bucket's 15 spent, moved to two
/// minutes at the same rate: nothing at the switch, nor a second before the old window ends.
#[tokio::test]
async fn a_bucket_moved_to_another_window_on_redis_holds_inside_the_old_window() {
    let server = RedisServer::start();
    let (service, clock) = on_redis(&server, bucket(MINUTE, 10));
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16).await, 15);
    reload(&service, bucket(2 * MINUTE, 20));
    assert_eq!(admitted(&service, &plain, 5).await, 0);
    clock.advance(MINUTE - Duration::from_secs(1));
    assert_eq!(admitted(&service, &plain, 5).await, 0);
}

/// Past the old window (on the service's clock; on Redis' a few milliseconds later) the old
/// state still owes 90 s: nothing comes back. The fresh state gave its 15.
#[tokio::test]
async fn a_bucket_moved_to_another_window_on_redis_keeps_its_debt_past_the_old_window() {
    let server = RedisServer::start();
    let (service, clock) = on_redis(&server, bucket(MINUTE, 10));
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16).await, 15);
    reload(&service, bucket(2 * MINUTE, 20));
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, &plain, 20).await, 0);
}

/// A key blocked for the hour on Redis, its limit moved to another window: still refused
/// past the old window. The fresh state admitted 2.
#[tokio::test]
async fn a_block_holds_across_a_reload_that_moves_its_state_on_redis() {
    let server = RedisServer::start();
    let (service, clock) = on_redis(&server, blocking(MINUTE));
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 3).await, 2);
    reload(&service, blocking(2 * MINUTE));
    clock.advance(Duration::from_secs(90));
    assert_eq!(
        admitted(&service, &plain, 3).await,
        0,
        "admitted while blocked"
    );
}

/// A penalty of 100 tokens (10 minutes more) on the bucket of 15 spent, moved to two minutes
/// at the same rate: the old state is decided with the call for as long as its own debt could
/// last (a window and its tolerance: 150 s on the service's clock), and what the penalty owes
/// past that is carried into the moved bucket by the calls within it, in Redis' atomic step
/// (`lua/carry.lua`). Past it, on Redis' clock a few milliseconds later, the moved bucket
/// still owes it all: nothing admitted, where a store that does not carry gave the fresh
/// state's 15.
#[tokio::test]
async fn a_penalty_outlasting_the_transition_is_carried_into_the_moved_bucket_on_redis() {
    let server = RedisServer::start();
    let (service, clock) = on_redis(&server, bucket(MINUTE, 10));
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 16).await, 15);
    service.penalize("k", &plain, 100).await.unwrap();
    reload(&service, bucket(2 * MINUTE, 20));
    assert_eq!(admitted(&service, &plain, 3).await, 0);
    clock.advance(Duration::from_secs(200));
    assert_eq!(
        admitted(&service, &plain, 20).await,
        0,
        "the penalty forgotten"
    );
}

/// Stacked calls on Redis during a move (`"a"` 3 a minute moved to 10 per two minutes, `"b"`
/// 100 a minute): exactly 3 admitted, and the refused calls spent nothing on `"b"`.
#[tokio::test]
async fn a_stacked_call_refused_by_an_old_state_on_redis_spends_nothing_elsewhere() {
    let server = RedisServer::start();
    let tiers = |a: Tier| {
        Config::builder()
            .tier(sliding(a))
            .tier(sliding(Tier::new("b", 100).window(MINUTE)))
    };
    let (service, _clock) = on_redis(&server, tiers(Tier::new("a", 3).window(MINUTE)));
    reload(&service, tiers(Tier::new("a", 10).window(2 * MINUTE)));
    let (a, b) = (Options::new().tier("a"), Options::new().tier("b"));
    let mut got = 0;
    for _ in 0..20 {
        let decided = service.consume_all(&[("u", &a), ("u", &b)]).await.unwrap();
        got += usize::from(decided.iter().all(|d| d.allowed));
    }
    assert_eq!(got, 3);
    assert_eq!(service.status("u", &b).await.unwrap().remaining, 97);
}

/// Spends kept on Redis across a reload: 2 a minute, both kept; a loosening to 10 on the
/// same state gives one more call for one spend given back (the held 2), never the new 10;
/// moved to two minutes, the spends are given back to the old state, which then holds the
/// calls to its 2.
#[tokio::test]
async fn refunds_across_a_reload_on_redis_give_back_to_the_old_budget_only() {
    let server = RedisServer::start();
    let fixed = |n: u64, window: Duration| {
        let tier = Tier::new("a", n)
            .window(window)
            .strategy(Strategy::SlidingWindow);
        Config::builder().tier(tier).default_tier("a")
    };
    let plain = Options::new();
    // Loosened on the same state.
    let (service, _clock) = on_redis(&server, fixed(2, MINUTE));
    let first = service.spend("k", &plain).await.unwrap();
    let second = service.spend("k", &plain).await.unwrap();
    assert!(first.decision().allowed && second.decision().allowed);
    assert!(first.refundable() && second.refundable());
    reload(&service, fixed(10, MINUTE));
    assert_eq!(admitted(&service, &plain, 5).await, 0);
    assert!(first.refund().await.unwrap());
    assert_eq!(admitted(&service, &plain, 5).await, 1);
    // Moved to another window.
    let (service, _clock) = on_redis(&server, fixed(2, MINUTE));
    let spent = [
        service.spend("k", &plain).await.unwrap(),
        service.spend("k", &plain).await.unwrap(),
    ];
    reload(&service, fixed(10, 2 * MINUTE));
    assert_eq!(admitted(&service, &plain, 5).await, 0);
    for s in spent {
        assert!(s.refund().await.unwrap());
    }
    assert_eq!(admitted(&service, &plain, 12).await, 2);
}
