//! helper-73: a reload's transition on Redis, whose decisions are on Redis' clock, while the
//! service's clock (the pod's) is another: the wait a refused call is told must be the one a
//! twin service that never reloaded tells, whatever the two clocks' difference.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, ManualClock, Options, RateLimitService, RedisOptions, StoreConfig,
    Strategy, Tier,
};
use ratelimit_tests::redis_server::{prefix, redis_time, RedisServer};
use ratelimit_tests::reload_to as reload;

const MINUTE: Duration = Duration::from_secs(60);

/// A token-bucket tier `name` (the default tier) of 10 on `window` refilled 10 a minute.
fn bucket(name: &str, window: Duration) -> ConfigBuilder {
    let refill = (10 * window.as_secs() / 60).max(1);
    let tier = Tier::new(name, 10)
        .burst(0)
        .refill(refill)
        .window(window)
        .strategy(Strategy::TokenBucket);
    Config::builder().tier(tier).default_tier(name)
}

/// A service on `server` under a fresh prefix, on a hand-driven clock `skew` from Redis'
/// (`ahead`: the service's clock later than Redis').
fn on_redis(
    server: &RedisServer,
    config: ConfigBuilder,
    skew: Duration,
    ahead: bool,
) -> (RateLimitService, ManualClock) {
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let config = config
        .key_prefix(prefix("transition-clocks"))
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let redis_now = Duration::from_micros(redis_time(&mut server.connection()));
    let at = match ahead {
        true => redis_now + skew,
        false => redis_now - skew,
    };
    let clock = ManualClock::new(at);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

async fn spend(service: &RateLimitService, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let d = service.consume("k", &Options::new()).await.unwrap();
        admitted += usize::from(d.allowed);
    }
    admitted
}

async fn refused_wait(service: &RateLimitService) -> Duration {
    let d = service.consume("k", &Options::new()).await.unwrap();
    assert!(!d.allowed, "admitted");
    d.retry_after.unwrap()
}

/// 10 spent on a bucket of 10 a minute, then the tier renamed and its window moved to two
/// minutes (another state): the next call is refused by the old bucket, which gives a token
/// every 6 s. A twin that never reloaded tells about 6 s; so must the moved limit, whatever
/// the service's clock says against Redis'.
#[tokio::test]
async fn a_moved_bucket_tells_the_twins_wait_whatever_the_clocks_difference() {
    let server = RedisServer::start();
    for (skew, ahead) in [
        (Duration::ZERO, true),
        (Duration::from_secs(10), false),
        (Duration::from_secs(10), true),
        (Duration::from_secs(3_600), false),
    ] {
        let (twin, _) = on_redis(&server, bucket("a", MINUTE), skew, ahead);
        let (moved, _) = on_redis(&server, bucket("a", MINUTE), skew, ahead);
        assert_eq!(spend(&twin, 10).await, 10);
        assert_eq!(spend(&moved, 10).await, 10);
        reload(&moved, bucket("b", 2 * MINUTE));
        let told = refused_wait(&twin).await;
        let moved_told = refused_wait(&moved).await;
        eprintln!("skew {skew:?} ahead {ahead}: twin {told:?}, moved {moved_told:?}");
        assert!(told <= Duration::from_secs(6), "{skew:?} {ahead}: {told:?}");
        let near = told.saturating_sub(Duration::from_millis(50))..told + Duration::from_millis(50);
        assert!(
            near.contains(&moved_told),
            "{skew:?} ahead {ahead}: twin told {told:?}, moved {moved_told:?}"
        );
    }
}

/// As above on the system's clock, the one Redis reads too (one machine): the service reads
/// its clock before Redis reads `TIME`, and that fraction of a millisecond alone made the
/// moved limit's wait the old window's 60 s where the twin's is 6 s (3 tries of 20 before
/// the fix).
#[tokio::test]
async fn a_moved_bucket_on_the_system_clock_tells_the_twins_wait() {
    let server = RedisServer::start();
    let on = |config: ConfigBuilder| {
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let config = config
            .key_prefix(prefix("transition-clocks"))
            .store(StoreConfig::Redis(options))
            .build()
            .unwrap();
        RateLimitService::new(config).unwrap()
    };
    let mut longer = Vec::new();
    for _ in 0..20 {
        let (twin, moved) = (on(bucket("a", MINUTE)), on(bucket("a", MINUTE)));
        assert_eq!(spend(&twin, 10).await, 10);
        assert_eq!(spend(&moved, 10).await, 10);
        reload(&moved, bucket("b", 2 * MINUTE));
        let (told, moved_told) = (refused_wait(&twin).await, refused_wait(&moved).await);
        if moved_told > told + Duration::from_millis(50) {
            longer.push((told, moved_told));
        }
    }
    assert!(longer.is_empty(), "twin told, moved told: {longer:?}");
}
