//! helper-73: `probes_resets_beside_moves` on a real Redis server: a reset during a reload's
//! transition forgets the moved limit's budget as it does on a twin that never reloaded.
//! Redis decides on its own clock (a log and a bucket: no window boundary of it falls inside
//! a test); the service's hand-driven clock only ends the old window.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, ManualClock, Options, RateLimitService, RedisOptions, StoreConfig,
    Strategy, Tier,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{reload_to as reload, START};

const SEC: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

fn limit(strategy: Strategy, name: &str, window: Duration, blocks: bool) -> ConfigBuilder {
    let mut tier = Tier::new(name, 3)
        .burst(0)
        .window(window)
        .strategy(strategy);
    if blocks {
        tier = tier.block_for(HOUR);
    }
    if strategy == Strategy::TokenBucket {
        tier = tier.refill(3 * window.as_secs() / 60);
    }
    Config::builder().tier(tier).default_tier(name)
}

fn on_redis(server: &RedisServer, config: ConfigBuilder) -> (RateLimitService, ManualClock) {
    let options = RedisOptions::new(server.url()).timeout(2 * SEC);
    let config = config
        .key_prefix(prefix("resets-beside-moves"))
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

async fn admitted(service: &RateLimitService, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let d = service.consume("k", &Options::new()).await.unwrap();
        admitted += usize::from(d.allowed);
    }
    admitted
}

/// 3 spent and a refusal (an hour's block where the limit blocks) on the twin and on a limit
/// moved to tier `"b"` on two minutes, the key reset inside the old window or past it: each
/// admits 3 of 5 after.
#[tokio::test]
async fn a_reset_beside_a_moved_limit_on_redis_forgets_the_budget_as_the_twin_does() {
    let server = RedisServer::start();
    let mut differ = Vec::new();
    for strategy in [Strategy::SlidingWindow, Strategy::TokenBucket] {
        for blocks in [false, true] {
            for later in [Duration::ZERO, 90 * SEC] {
                let (twin, twin_clock) = on_redis(&server, limit(strategy, "a", MINUTE, blocks));
                let (moved, clock) = on_redis(&server, limit(strategy, "a", MINUTE, blocks));
                reload(&moved, limit(strategy, "b", 2 * MINUTE, blocks));
                assert_eq!(admitted(&twin, 4).await, 3);
                assert_eq!(admitted(&moved, 4).await, 3);
                twin_clock.advance(later);
                clock.advance(later);
                twin.reset("k", None).await.unwrap();
                moved.reset("k", None).await.unwrap();
                let (t, m) = (admitted(&twin, 5).await, admitted(&moved, 5).await);
                if (t, m) != (3, 3) {
                    let what = format!("{strategy} blocks {blocks} +{later:?}");
                    differ.push(format!("{what}: twin {t}, moved {m}"));
                }
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
