//! `probes_blocks_beside_moves` on a real Redis server and a real Cluster: a refusal in the
//! old window, by the moved state while the old one is blocked, must not begin the block
//! again on the moved state. Redis decides on its own clock, and the service here on the
//! system's (a transition's waits are worked out on the service's clock from Redis' waits,
//! whatever the two clocks' difference: probes_transition_clocks_redis).
//! Everything happens within a few milliseconds: nothing refills, no window ends and no block
//! ends; what tells a block begun again is the wait, the whole block again where the block
//! in force has run on (a few milliseconds of Redis' time waited out between).

use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, Options, RateLimitService, RedisOptions, StoreConfig, Strategy, Tier,
};
use ratelimit_tests::redis_server::{
    prefix, redis_time, until_redis_time, RedisCluster, RedisServer,
};
use ratelimit_tests::reload_to as reload;

const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier) of 3 a minute, blocking a key an hour once refused (no
/// window boundary of Redis' clock falls inside a test: a log or a bucket).
fn limit(strategy: Strategy, name: &str) -> ConfigBuilder {
    let tier = Tier::new(name, 3)
        .burst(0)
        .window(Duration::from_secs(60))
        .strategy(strategy)
        .block_for(HOUR);
    Config::builder().tier(tier).default_tier(name)
}

/// One call of `cost` on `"k"`: admitted, and a refusal's wait.
async fn call(service: &RateLimitService, cost: u64) -> (bool, Option<Duration>) {
    let d = service
        .consume("k", &Options::new().cost(cost))
        .await
        .unwrap();
    (d.allowed, d.retry_after)
}

/// 1 spent, the tier renamed (another state), 2 more spent on both, a refusal by the old
/// state (the block begins there; the moved one has 1 left), then a call of 2 refused by
/// both: its wait is what is left of the block, less than the hour (an hour again: the
/// moved state blocked anew from then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_beside_a_blocked_old_state_does_not_block_the_moved_limit_again() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let mut c = server.connection();
    for strategy in [Strategy::SlidingWindow, Strategy::TokenBucket] {
        for (store, service) in on_both(&server, &cluster, strategy) {
            let on = format!("{store} {strategy:?}");
            assert_eq!(call(&service, 1).await, (true, None), "{on}");
            reload(&service, limit(strategy, "b"));
            assert_eq!(call(&service, 2).await, (true, None), "{on}");
            assert_eq!(call(&service, 1).await, (false, Some(HOUR)), "{on}");
            refused_for_the_rest_of_the_block(&mut c, &service, &on).await;
        }
    }
}

/// The other way round (`probes_blocks_beside_moves`): 2 spent on a bucket, the move, a
/// penalty of 1 (spent on the moved bucket alone, its old debt carried in first); the call of
/// 1 the old bucket admits and the moved one refuses begins the block there; then a call of
/// 2, which the old bucket refuses too, is told what is left of that block (an hour again:
/// the old state blocked anew from then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_the_old_state_beside_a_blocked_moved_one_does_not_block_it_again() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let mut c = server.connection();
    for (store, service) in on_both(&server, &cluster, Strategy::TokenBucket) {
        assert_eq!(call(&service, 2).await, (true, None), "{store}");
        reload(&service, limit(Strategy::TokenBucket, "b"));
        service.penalize("k", &Options::new(), 1).await.unwrap();
        assert_eq!(call(&service, 1).await, (false, Some(HOUR)), "{store}");
        refused_for_the_rest_of_the_block(&mut c, &service, store).await;
    }
}

/// Services of tier `"a"` under `strategy` on `server` and on `cluster`, each under a fresh
/// prefix, on the system's clock.
fn on_both(
    server: &RedisServer,
    cluster: &RedisCluster,
    strategy: Strategy,
) -> [(&'static str, RateLimitService); 2] {
    let on = |options: RedisOptions| {
        let config = limit(strategy, "a")
            .key_prefix(prefix("blocks-beside-moves"))
            .store(StoreConfig::Redis(options.timeout(Duration::from_secs(2))))
            .build()
            .unwrap();
        RateLimitService::new(config).unwrap()
    };
    [
        ("redis", on(RedisOptions::new(server.url()))),
        ("cluster", on(RedisOptions::cluster(cluster.urls()))),
    ]
}

/// A few milliseconds of Redis' time on (waits are told in whole ones), a call of 2 on a key
/// blocked an hour is refused for what is left of the hour, not the hour again.
async fn refused_for_the_rest_of_the_block(
    c: &mut redis::Connection,
    service: &RateLimitService,
    on: &str,
) {
    let later = redis_time(c) + 5_000;
    until_redis_time(c, later);
    let (admitted, wait) = call(service, 2).await;
    assert!(!admitted, "{on}: admitted while blocked");
    let wait = wait.expect("a refusal's wait");
    let ran_on = HOUR - Duration::from_secs(10)..HOUR - Duration::from_millis(3);
    assert!(ran_on.contains(&wait), "{on}: blocked anew: {wait:?}");
}
