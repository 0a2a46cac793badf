//! helper-60's probe of `Quota::held_to` on Redis: the token bucket's script is handed the one
//! quota a reload's transition holds a call to, as the memory store is
//! (`probes_held_buckets`). Redis reads its own clock: everything here happens within a few
//! milliseconds, and nothing the test counts refills in that time.

use std::time::Duration;

use ratelimit::Strategy;
use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, RedisOptions, StoreConfig};
use ratelimit_tests::redis_server::{prefix, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);

/// 10 a minute, refilled `refill` tokens a minute, under `prefix`.
fn bucket(prefix: &str, refill: u64) -> ConfigBuilder {
    Config::builder()
        .key_prefix(prefix)
        .strategy(Strategy::TokenBucket)
        .default_limit(10)
        .token_refill_rate(refill)
        .default_window(MINUTE)
}

async fn admitted(service: &RateLimitService, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let decided = service.consume("k", &Options::new()).await;
        admitted += usize::from(decided.is_ok_and(|d| d.allowed));
    }
    admitted
}

/// `probes_held_buckets::a_reload_back_past_a_slower_refill_keeps_the_replaced_buckets_own_tolerance`
/// on Redis: 10 refilled every second, spent; reloads to 10 refilled once a minute and back.
/// 19 were admitted at once before the kept configuration with the running limits was kept.
#[tokio::test]
async fn a_reload_back_past_a_slower_refill_keeps_the_replaced_buckets_own_tolerance_on_redis() {
    let server = RedisServer::start();
    let p = prefix("held");
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let config = bucket(&p, 60).store(StoreConfig::Redis(options));
    let service = RateLimitService::new(config.build().unwrap()).unwrap();
    assert_eq!(admitted(&service, 12).await, 10);
    for refill in [1, 60] {
        let store = service.config().store().clone();
        service
            .reload(bucket(&p, refill).store(store).build().unwrap())
            .unwrap();
        assert_eq!(admitted(&service, 12).await, 0, "admitted past 10 at once");
    }
}
