//! The memory store cleans up after itself and stays within its bounds.

use std::time::{Duration, Instant};

use ratelimit::{
    Clock, Config, Error, MemoryOptions, MemoryStore, Options, Quota, StoreConfig, Strategy,
};
use ratelimit_tests::{clock, now, service};

#[test]
fn sweeper_empties_the_store_once_every_window_has_passed() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let clock = clock();
        let quota = Quota::per_minute(3).unwrap().with_strategy(strategy);
        for i in 0..10_000 {
            store
                .acquire(&format!("user:{i}"), &quota, 1, clock.now())
                .unwrap();
        }
        assert_eq!(store.len(), 10_000);
        // Ten seconds later nothing has expired (the fixed window, aligned to the epoch, ends
        // 20 s after the start), whatever the sweep interval says.
        clock.advance(Duration::from_secs(10));
        store.peek("anyone", &quota, 1, clock.now()).unwrap();
        assert_eq!(store.len(), 10_000, "{strategy}");
        // Two windows (the sliding counter's horizon) and a sweep interval later, the next
        // call, whatever its key, sweeps everything: nobody scheduled anything.
        clock.advance(Duration::from_secs(120) + MemoryOptions::default().sweep_interval);
        store.peek("anyone", &quota, 1, clock.now()).unwrap();
        assert_eq!(store.len(), 0, "{strategy}");
    }
}

#[test]
fn idle_service_gives_keys_back_through_its_sweeper_thread() {
    let config = Config::builder()
        .store(StoreConfig::Memory(
            MemoryOptions::default().sweep_interval(Duration::from_millis(10)),
        ))
        .build()
        .unwrap();
    let (service, clock) = service(config);
    for i in 0..1_000 {
        now(service.consume(&format!("k{i}"), &Options::new())).unwrap();
    }
    let store = service.memory_store().unwrap().clone();
    assert_eq!(store.len(), 1_000);
    clock.advance(Duration::from_secs(3_600));
    // No call is made from here on: only the background thread can sweep. The decision is
    // driven by the manual clock; the wait below is only for a real thread to get scheduled.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.is_empty() && Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(5));
    }
    assert!(store.is_empty(), "{} keys left", store.len());
}

#[test]
fn at_capacity_new_keys_are_refused_not_waved_through() {
    let config = Config::builder()
        .default_limit(10)
        .store(StoreConfig::Memory(MemoryOptions::default().max_keys(100)))
        .build()
        .unwrap();
    let (service, clock) = service(config);
    for i in 0..100 {
        assert!(
            now(service.consume(&format!("k{i}"), &Options::new()))
                .unwrap()
                .allowed
        );
    }
    let err = now(service.consume("newcomer", &Options::new())).unwrap_err();
    assert!(matches!(err, Error::StoreFull { max_keys: 100 }), "{err}");
    assert_eq!(service.stats().total.errors, 1);
    // Known keys keep their exact budgets.
    for _ in 0..9 {
        assert!(now(service.consume("k0", &Options::new())).unwrap().allowed);
    }
    assert!(!now(service.consume("k0", &Options::new())).unwrap().allowed);
    // Once the old keys' windows pass, there is room again.
    clock.advance(Duration::from_secs(120));
    assert!(
        now(service.consume("newcomer", &Options::new()))
            .unwrap()
            .allowed
    );
}

/// The bare store keys state by the key alone (the service's keys carry the quota's
/// identity): another strategy's state under a key is refused, not read as a fresh key.
#[test]
fn another_strategys_state_under_a_bare_key_is_refused_and_kept() {
    let store = MemoryStore::new();
    let at = clock().now();
    let fixed = Quota::per_minute(2)
        .unwrap()
        .with_strategy(Strategy::FixedWindow);
    store.acquire("k", &fixed, 2, at).unwrap();
    let bucket = fixed.with_strategy(Strategy::TokenBucket);
    assert!(matches!(
        store.acquire("k", &bucket, 1, at),
        Err(Error::UnexpectedState { .. })
    ));
    assert!(!store.peek("k", &fixed, 1, at).unwrap().allowed);
    assert!(store.reset("k"));
    assert!(!store.reset("k"));
}
