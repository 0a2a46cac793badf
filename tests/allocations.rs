//! The hot paths allocate nothing: an annotated call (keyed and not, async and sync) and
//! `service.consume` on a key the store already holds, counted by a global allocator that
//! counts on the calling thread only (other tests' threads do not disturb the count).

use std::time::Duration;

use futures::FutureExt;
use ratelimit::{rate_limit, Error, Module, Options, Strategy};
use ratelimit_tests::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations made on this thread by `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ratelimit_tests::allocations();
    f();
    ratelimit_tests::allocations() - before
}

#[rate_limit(limit = 1_000_000, window = "1h", strategy = "token-bucket", key = user)]
async fn keyed_bucket(user: u64) -> Result<u64, Error> {
    Ok(user)
}

#[rate_limit(limit = 1_000_000, window = "1h", strategy = "fixed-window", key = user)]
async fn keyed_fixed(user: &str) -> Result<usize, Error> {
    Ok(user.len())
}

#[rate_limit(limit = 1_000_000, window = "1h", strategy = "sliding-window-counter")]
async fn unkeyed() -> Result<(), Error> {
    Ok(())
}

// A sync fn answers in one word, its refusal boxed: an admitted call allocates nothing.
#[rate_limit(limit = 1_000_000, window = "1h", strategy = "token-bucket", key = user)]
fn keyed_sync(user: u64) -> Result<u64, Error> {
    Ok(user)
}

#[test]
fn hot_paths_allocate_nothing_per_call() {
    let module = Module::builder().init().expect("module");
    let service = module.service().clone();
    let options = Options::new()
        .limit(1_000_000)
        .window(Duration::from_secs(3_600))
        .strategy(Strategy::TokenBucket)
        .budget("alloc-test");
    let bucket = || keyed_bucket(7).now_or_never().unwrap().map(drop).unwrap();
    let fixed = || {
        keyed_fixed("user-with-a-longer-name")
            .now_or_never()
            .unwrap()
            .map(drop)
            .unwrap()
    };
    let plain = || unkeyed().now_or_never().unwrap().unwrap();
    let sync = || keyed_sync(7).map(drop).unwrap();
    let consume = || {
        service
            .consume("user:1", &options)
            .now_or_never()
            .unwrap()
            .map(drop)
            .unwrap()
    };
    let paths: [(&str, &dyn Fn()); 5] = [
        ("annotated, token bucket, keyed", &bucket),
        ("annotated sync fn, token bucket, keyed", &sync),
        ("annotated, fixed window, keyed", &fixed),
        ("annotated, sliding-window counter, no key", &plain),
        ("service.consume", &consume),
    ];
    // The first calls store the keys and fill this thread's caches.
    for (_, call) in paths {
        call();
    }
    for (name, call) in paths {
        assert_eq!(allocations(|| (0..10).for_each(|_| call())), 0, "{name}");
    }
    // And interleaved, as an application calls them.
    let interleaved = allocations(|| {
        for _ in 0..10 {
            paths.iter().for_each(|(_, call)| call());
        }
    });
    assert_eq!(interleaved, 0);
    assert_eq!(module.stats().total.allowed, 5 * 21);
    a_long_key_is_kept_whole();
}

/// A key longer than the in-place buffer still decides, on the whole key. (Called from the
/// test above: one module per process at a time.)
fn a_long_key_is_kept_whole() {
    let long = "k".repeat(300);
    let other = format!("{}x", &long[1..]);
    #[rate_limit(limit = 1, window = "1h", key = user)]
    async fn once(user: &str) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }
    assert!(once(&long).now_or_never().unwrap().is_ok());
    assert!(matches!(
        once(&long).now_or_never().unwrap(),
        Err(Error::Exceeded(_))
    ));
    assert!(once(&other).now_or_never().unwrap().is_ok());
}
