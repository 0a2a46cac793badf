//! Key churn on the memory store, through `RateLimitService` on a `ManualClock`: many
//! distinct keys over several windows leave nothing behind once their windows pass, and at
//! `max_keys` nothing turns into an allowance.
//!
//! The store sweeps by itself in two ways: every call sweeps once per `sweep_interval` of
//! clock time (`maybe_sweep`), and a background thread (`MemoryStore::start_sweeper`, started
//! by the service) sweeps every `sweep_interval` of *real* time while the store is idle. That
//! thread waits on a real timer, so these tests call the same public `sweep(now)` it runs
//! rather than wait for it; `examples/churn.rs` waits for the thread itself, with the full
//! million keys in a release build:
//!
//! ```sh
//! cargo run --release -p ratelimit-examples --example churn
//! ```

use std::time::Duration;

use ratelimit::{Config, Error, MemoryOptions, Options, StoreConfig, Strategy};
use ratelimit_tests::{now, service};

/// Distinct keys in the debug-build test (the example runs 1,000,000 in release).
const KEYS: usize = 200_000;

const WINDOWS: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(300),
];

fn options(i: usize) -> Options {
    Options::new()
        .limit(3)
        .window(WINDOWS[i % 4])
        .strategy(Strategy::ALL[(i / 4) % 4])
}

#[test]
fn keys_churned_over_several_windows_are_all_swept_away() {
    let config = Config::builder()
        .store(StoreConfig::Memory(
            MemoryOptions::default()
                .max_keys(KEYS)
                .sweep_interval(Duration::from_secs(10)),
        ))
        .build()
        .unwrap();
    let (service, clock) = service(config);
    let store = service.memory_store().unwrap().clone();
    let mut peak = 0;
    for i in 0..KEYS {
        let d = now(service.consume(&format!("user:{i}"), &options(i))).unwrap();
        assert!(d.allowed, "key {i}: a new key has its whole budget");
        if i % 1_000 == 999 {
            // 200 ms of clock per 1,000 keys: 40 s over the run, so the 1 s and 10 s keys
            // expire (and are swept by the calls themselves) while new keys keep coming.
            clock.advance(Duration::from_millis(200));
            peak = peak.max(store.len());
        }
    }
    assert_eq!(service.stats().total.allowed, KEYS as u64);
    assert!(store.len() < KEYS, "the calls swept as they went");
    assert!(peak <= KEYS);
    // The last keys, still in their windows, count exactly: 2 more, then refused.
    for i in KEYS - 8..KEYS {
        let key = format!("user:{i}");
        assert!(now(service.consume(&key, &options(i))).unwrap().allowed);
        assert!(now(service.consume(&key, &options(i))).unwrap().allowed);
        assert!(!now(service.consume(&key, &options(i))).unwrap().allowed);
    }

    // Past every key's expiry, plus the sweep's one-second grace: the sliding window
    // counter's state weighs in for two windows (the previous one counts), so the longest
    // expiry is twice the longest window.
    clock.advance(WINDOWS[3] + Duration::from_secs(2));
    store.sweep(service.clock().now());
    assert_eq!(
        store.len(),
        KEYS / 16,
        "one window on: only the 300 s sliding-window-counter keys remain"
    );
    clock.advance(WINDOWS[3]);
    assert!(
        !store.is_empty(),
        "nothing swept yet: no call, and no real time passed"
    );
    let swept = store.sweep(service.clock().now());
    assert!(swept > 0);
    assert_eq!(store.len(), 0, "every key is gone");
    // And what was exhausted is a fresh budget again, counted from zero.
    let d = now(service.consume(&format!("user:{}", KEYS - 1), &options(KEYS - 1))).unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 2));
    assert_eq!(store.len(), 1);
}

#[test]
fn at_max_keys_new_keys_are_refused_and_old_keys_counted_exactly() {
    const MAX: usize = 10_000;
    let config = Config::builder()
        .store(StoreConfig::Memory(
            MemoryOptions::default()
                .max_keys(MAX)
                .sweep_interval(Duration::from_secs(10)),
        ))
        .build()
        .unwrap();
    let (service, clock) = service(config);
    let store = service.memory_store().unwrap().clone();
    // Half the keys on a 1 s window, half on an hour.
    let opts = |i: usize| {
        let window = if i & 1 == 0 { 1 } else { 3_600 };
        Options::new().limit(3).window(Duration::from_secs(window))
    };
    for i in 0..MAX {
        assert!(
            now(service.consume(&format!("old:{i}"), &opts(i)))
                .unwrap()
                .allowed
        );
    }
    assert_eq!(store.len(), MAX);
    for j in 0..1_000 {
        match now(service.consume(&format!("new:{j}"), &opts(j))) {
            Err(Error::StoreFull { max_keys }) => assert_eq!(max_keys, MAX),
            other => panic!("a new key at the cap is refused: {other:?}"),
        }
    }
    // Old keys keep their exact counts: 2 more each, then refused.
    for i in 0..MAX {
        let key = format!("old:{i}");
        assert!(now(service.consume(&key, &opts(i))).unwrap().allowed);
        assert!(now(service.consume(&key, &opts(i))).unwrap().allowed);
        assert!(
            !now(service.consume(&key, &opts(i))).unwrap().allowed,
            "{key}"
        );
    }
    let stats = service.stats().total;
    assert_eq!(
        (stats.allowed, stats.denied, stats.errors),
        (3 * MAX as u64, MAX as u64, 1_000)
    );

    // Once the 1 s keys' windows (and the grace) have passed, the sweep at the cap frees
    // exactly their room: 5,000 new keys, then full again.
    clock.advance(Duration::from_secs(2));
    let mut admitted = 0;
    for j in 0..MAX {
        match now(service.consume(&format!("new:{j}"), &opts(1))) {
            Ok(d) => {
                assert!(d.allowed);
                admitted += 1;
            }
            Err(Error::StoreFull { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(admitted, MAX / 2);
    assert_eq!(store.len(), MAX);
    // The hour-long keys are still exhausted.
    for i in (1..MAX).step_by(2) {
        assert!(
            !now(service.consume(&format!("old:{i}"), &opts(i)))
                .unwrap()
                .allowed
        );
    }
}
