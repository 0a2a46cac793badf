//! helper-66's probes of carrying a moved limit's old state over state of the wrong shape:
//! another strategy's state or stray bytes under the old key, under the moved key, or under
//! either's block key, on the memory store, a Redis server and a Redis Cluster. Each call on
//! it is an error (`Error::UnexpectedState` under the default failure policy), never an
//! admission, and nothing is written: the other state stays as it was. (Under
//! `FailurePolicy::Allow` such an error is answered by the policy, as README says.)

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, Error, ManualClock, Options, Quota, RateLimitService, RedisOptions,
    StoreConfig, Strategy, Tier,
};
use ratelimit_tests::redis_server::{prefix, RedisCluster, RedisServer};
use ratelimit_tests::{bucket_a_minute, now, reload_to as reload, service, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// The bucket of 10 plus 5 at a token every 6 s on `minutes` (the same bucket on another
/// state for each window).
fn on(minutes: u32) -> ConfigBuilder {
    bucket_a_minute(10, 5, 10 * u64::from(minutes)).default_window(MINUTE * minutes)
}

/// The store key of user `"k"` on the default limit's bucket of `minutes` under `prefix`.
fn key_of(prefix: &str, minutes: u32) -> String {
    format!("{prefix}:{{k}}T{}:-:-", 60_000 * minutes)
}

/// Every way of asking on `"k"` (a call, a look, a stacked call, a penalty): each an error
/// the caller must refuse, none an admission.
fn every_way_is_an_error(service: &RateLimitService, when: &str) {
    now(every_way_errs(service, when));
}

/// Plants a fixed window's state under `key` in the memory store (an hour long: it lives
/// through the probes).
fn plant(service: &RateLimitService, key: &str) {
    let fixed = Quota::from_parts(5, HOUR, 0, Strategy::FixedWindow, None).unwrap();
    let store = service.memory_store().unwrap();
    let at = START.as_nanos() as u64;
    assert!(store.acquire(key, &fixed, 1, at).unwrap().allowed);
}

/// Another strategy's state under the old key: in the old window (decided with the call)
/// and past it (carried), every way of asking is an error, and no key is added.
#[test]
fn another_strategys_state_under_the_old_key_is_an_error_past_and_in_the_old_window() {
    let (service, clock) = service(on(1).build().unwrap());
    reload(&service, on(2));
    plant(&service, &key_of("ratelimit", 1));
    let keys = service.memory_store().unwrap().len();
    every_way_is_an_error(&service, "in the old window");
    clock.advance(MINUTE);
    every_way_is_an_error(&service, "past the old window");
    assert_eq!(service.memory_store().unwrap().len(), keys, "a key written");
}

/// Another strategy's state under the moved key, the old bucket spent: past the old window
/// every way of asking is an error, and the old bucket's debt is left (its 15 spent: a look
/// at it under its own quota still owes 90 s less the minute).
#[test]
fn another_strategys_state_under_the_moved_key_is_an_error_and_the_old_debt_stays() {
    let (service, clock) = service(on(1).build().unwrap());
    for _ in 0..15 {
        assert!(now(service.consume("k", &Options::new())).unwrap().allowed);
    }
    reload(&service, on(2));
    plant(&service, &key_of("ratelimit", 2));
    clock.advance(MINUTE);
    every_way_is_an_error(&service, "past the old window");
    let bucket = Quota::from_parts(10, MINUTE, 5, Strategy::TokenBucket, Some(10)).unwrap();
    let store = service.memory_store().unwrap();
    let at = (START + MINUTE).as_nanos() as u64;
    let level = store.peek(&key_of("ratelimit", 1), &bucket, 0, at).unwrap();
    assert_eq!(level.reset_after, Duration::from_secs(30));
}

// ---------------------------------------------------------------------------------------
// On Redis: a server and a Cluster.
// ---------------------------------------------------------------------------------------

/// A service over `config` on `options` under a fresh prefix, on a hand-driven clock.
fn on_redis(options: RedisOptions, config: ConfigBuilder) -> (RateLimitService, ManualClock) {
    let config = config
        .key_prefix(prefix("carry-garbage"))
        .store(StoreConfig::Redis(options.timeout(Duration::from_secs(5))))
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

/// [`every_way_is_an_error`] on Redis.
async fn every_way_errs(service: &RateLimitService, when: &str) {
    let plain = Options::new();
    let single = service.consume("k", &plain).await;
    let look = service.status("k", &plain).await;
    let stacked = service.consume_all(&[("k", &plain)]).await;
    let penalty = service.penalize("k", &plain, 1).await;
    for (way, unexpected) in [
        ("call", matches!(single, Err(Error::UnexpectedState { .. }))),
        ("look", matches!(look, Err(Error::UnexpectedState { .. }))),
        (
            "stack",
            matches!(stacked, Err(Error::UnexpectedState { .. })),
        ),
        (
            "penalty",
            matches!(penalty, Err(Error::UnexpectedState { .. })),
        ),
    ] {
        assert!(
            unexpected,
            "{when}, {way}: {single:?} {look:?} {stacked:?} {penalty:?}"
        );
    }
}

/// The reload to `to` on `service`'s store and prefix.
fn reload_on(service: &RateLimitService, to: ConfigBuilder) {
    service
        .reload(ratelimit_tests::on_its_store(service, to))
        .unwrap();
}

fn get(c: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn set(c: &mut redis::Connection, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(c)
        .unwrap();
}

/// The bucket of 15 on `minutes`, blocking the key an hour once refused.
fn blocking(minutes: u32) -> ConfigBuilder {
    let tier = Tier::new("a", 10)
        .burst(5)
        .refill(10 * u64::from(minutes))
        .window(MINUTE * minutes)
        .strategy(Strategy::TokenBucket)
        .block_for(HOUR);
    Config::builder().tier(tier).default_tier("a")
}

/// On a Redis server: stray bytes under the old key, another strategy's state under the
/// moved key, and stray bytes under either's block key. Past the old window (carried) every
/// way of asking is an error and nothing is written: the moved key (or its block key) stays
/// absent, the other keys hold what they held.
#[tokio::test]
async fn stray_state_under_the_old_or_the_moved_key_or_a_block_key_on_redis_is_an_error() {
    let server = RedisServer::start();
    let mut c = server.connection();
    // Under the old key.
    let (service, clock) = on_redis(RedisOptions::new(server.url()), on(1));
    let p = service.config().key_prefix().to_owned();
    reload_on(&service, on(2));
    set(&mut c, &key_of(&p, 1), "garbage");
    clock.advance(MINUTE);
    every_way_errs(&service, "old key").await;
    assert_eq!(get(&mut c, &key_of(&p, 2)), None, "the moved key written");
    // Under the moved key, the old bucket spent.
    let (service, clock) = on_redis(RedisOptions::new(server.url()), on(1));
    let p = service.config().key_prefix().to_owned();
    for _ in 0..15 {
        assert!(service.consume("k", &Options::new()).await.unwrap().allowed);
    }
    reload_on(&service, on(2));
    set(&mut c, &key_of(&p, 2), "F1:60000000:1");
    let old = get(&mut c, &key_of(&p, 1));
    clock.advance(MINUTE);
    every_way_errs(&service, "moved key").await;
    assert_eq!(get(&mut c, &key_of(&p, 1)), old, "the old key written");
    // Under a block key: the old one's, then the moved one's.
    for (minutes, other) in [(1, 2), (2, 1)] {
        let (service, clock) = on_redis(RedisOptions::new(server.url()), blocking(1));
        let p = service.config().key_prefix().to_owned();
        let tier = |m: u32| format!("{p}:{{k}}T{}:-:1:a", 60_000 * m);
        reload_on(&service, blocking(2));
        set(&mut c, &format!("{}:block", tier(minutes)), "soon");
        clock.advance(MINUTE);
        every_way_errs(&service, &format!("block key of {minutes}")).await;
        assert_eq!(get(&mut c, &format!("{}:block", tier(other))), None);
        assert_eq!(get(&mut c, &tier(2)), None, "the moved key written");
    }
}

/// On a Redis Cluster (the old and the moved key share the user key's slot): stray bytes
/// under the old key are an error past the old window, and the moved key stays absent.
#[tokio::test]
async fn stray_state_under_the_old_key_on_a_redis_cluster_is_an_error() {
    let cluster = RedisCluster::start();
    let (service, clock) = on_redis(RedisOptions::cluster(cluster.urls()), on(1));
    let p = service.config().key_prefix().to_owned();
    reload_on(&service, on(2));
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut c = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg(key_of(&p, 1))
        .arg("garbage")
        .query::<()>(&mut c)
        .unwrap();
    clock.advance(MINUTE);
    every_way_errs(&service, "old key on a cluster").await;
    let moved: Option<Vec<u8>> = redis::cmd("GET").arg(key_of(&p, 2)).query(&mut c).unwrap();
    assert_eq!(moved, None, "the moved key written");
}
