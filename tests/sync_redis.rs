//! A sync annotated fn cannot be decided by a store that must be waited for: with a real
//! Redis server (or any store given to `with_store`), `init` does not start, naming the fn,
//! rather than blocking on the store or letting the fn through. Its async neighbours are fine.

use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, Error, Module, ProblemKind, RedisOptions, StoreConfig};
use ratelimit_tests::redis_server::{prefix, RedisServer};

#[rate_limit(limit = 5, window = "1m")]
fn thumbnail() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 5, window = "1m")]
async fn upload() -> Result<(), Error> {
    Ok(())
}

#[test]
fn init_refuses_a_sync_fn_on_the_redis_store() {
    let server = RedisServer::start();
    let redis = || {
        Module::builder()
            .key_prefix(prefix("sync_redis"))
            .store(StoreConfig::Redis(
                RedisOptions::new(server.url()).timeout(Duration::from_secs(2)),
            ))
    };
    let err = redis().init().unwrap_err();
    let found = ratelimit_tests::problems(&err);
    assert_eq!(
        found,
        [("sync_redis::thumbnail", ProblemKind::SyncOnWaitingStore)],
        "{err}"
    );
    assert!(err.to_string().contains("sync fn"), "{err}");
    assert!(!Module::is_initialized());
    // The test module runs the same check.
    assert!(matches!(
        TestModule::new(redis()),
        Err(Error::Declarations(_))
    ));

    // In memory, the same binary starts, and both fns are limited.
    let module = TestModule::new(Module::builder()).unwrap();
    module.run(thumbnail).unwrap();
    futures::executor::block_on(module.scope(upload())).unwrap();
}
