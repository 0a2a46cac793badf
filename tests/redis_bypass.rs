//! Regression tests for ways the Redis store failed open or broke (feature `redis`), each named
//! after the hole it closes. They go through the public API (`RateLimitService` over
//! `StoreConfig::Redis`) and plant state with a raw connection; the store's key format is not
//! assumed: a test makes one call, then finds the limiter's key with `SCAN`.

use std::time::Duration;

use ratelimit::{Config, Error, Options, RateLimitService, RedisOptions, StoreConfig};
use ratelimit_tests::redis_server::{prefix, RedisServer};

/// Long enough that no window ends during a test.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// A fresh prefix that is no other prefix's beginning (`…-1x` is not a prefix of `…-10x`), so
/// that `SCAN MATCH <prefix>*` finds this service's keys only.
fn fresh(name: &str) -> String {
    format!("{}x", prefix(name))
}

fn service_with(options: RedisOptions, prefix: &str) -> RateLimitService {
    let config = Config::builder()
        .key_prefix(prefix)
        .store(StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    RateLimitService::new(config).expect("service")
}

fn service(url: &str, prefix: &str) -> RateLimitService {
    service_with(
        RedisOptions::new(url).timeout(Duration::from_secs(2)),
        prefix,
    )
}

#[test]
fn outside_a_tokio_runtime_the_store_refuses_instead_of_panicking() {
    let server = RedisServer::start();
    let service = service(&server.url(), &fresh("noruntime"));
    let opts = Options::new().limit(5).window(LONG);
    let results = [
        futures::executor::block_on(service.consume("k", &opts)).map(|_| ()),
        futures::executor::block_on(service.status("k", &opts)).map(|_| ()),
        futures::executor::block_on(service.reset("k", None)),
        futures::executor::block_on(service.redis_store().unwrap().connect()),
    ];
    for result in results {
        match result {
            Err(Error::Store { message }) => {
                assert!(message.contains("Tokio runtime"), "{message}")
            }
            other => panic!("refused with the store's error: {other:?}"),
        }
    }
}
