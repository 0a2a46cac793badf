//! Exact counts under contention: with limit L, exactly L of N concurrent calls pass.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::{Clock, Config, MemoryStore, Options, Quota, Strategy};
use ratelimit_tests::{clock, now, service};

const THREADS: usize = 8;
const CALLS: usize = 10_000;
const LIMIT: u64 = 1_000;

#[test]
fn one_key_eight_threads_exactly_the_limit_passes_for_every_algorithm() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let quota = Quota::per_minute(LIMIT).unwrap().with_strategy(strategy);
        let at = clock().now();
        let allowed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..CALLS {
                        if store.acquire("hot", &quota, 1, at).unwrap().allowed {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.into_inner(), LIMIT, "{strategy}");
    }
}

#[test]
fn ten_thousand_keys_each_key_counts_exactly() {
    const KEYS: usize = 10_000;
    const PER_KEY: u64 = 5;
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let quota = Quota::per_minute(PER_KEY).unwrap().with_strategy(strategy);
        let at = clock().now();
        let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
        let counts: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (keys, counts, store) = (&keys, &counts, &store);
                s.spawn(move || {
                    // Each thread walks the keys from a different offset, so threads collide on
                    // keys all the time; every key sees 8 calls in all.
                    for i in 0..KEYS {
                        let k = (i + t * KEYS / THREADS) % KEYS;
                        if store.acquire(&keys[k], &quota, 1, at).unwrap().allowed {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(c.load(Ordering::Relaxed), PER_KEY, "{strategy}: key {i}");
        }
        assert_eq!(store.len(), KEYS);
    }
}

#[test]
fn service_on_tokio_worker_threads_admits_exactly_the_limit() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .strategy(strategy)
            .default_limit(LIMIT)
            .default_window("1m")
            .build()
            .unwrap();
        let (service, _clock) = service(config);
        let allowed = runtime.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let service = service.clone();
                    tokio::spawn(async move {
                        let mut allowed = 0u64;
                        for _ in 0..200 {
                            if service
                                .consume("hot", &Options::new())
                                .await
                                .unwrap()
                                .allowed
                            {
                                allowed += 1;
                            }
                            tokio::task::yield_now().await;
                        }
                        allowed
                    })
                })
                .collect();
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap();
            }
            total
        });
        assert_eq!(allowed, LIMIT, "{strategy}");
        let stats = service.stats().total;
        assert_eq!(
            (stats.allowed, stats.denied),
            (LIMIT, 64 * 200 - LIMIT),
            "{strategy}"
        );
    }
}

#[test]
fn enforce_from_threads_refuses_exactly_the_excess() {
    let config = Config::builder().default_limit(100).build().unwrap();
    let (service, clock) = service(config);
    let refused = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (service, refused) = (&service, &refused);
            s.spawn(move || {
                for _ in 0..100 {
                    if let Err(e) = now(service.enforce("k", &Options::new())) {
                        assert!(e.retry_after().is_some(), "{e}");
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(refused.load(Ordering::Relaxed), 300);
    clock.advance(Duration::from_secs(60));
    assert!(now(service.enforce("k", &Options::new())).is_ok());
}
