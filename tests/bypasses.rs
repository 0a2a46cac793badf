//! Regression tests for the ways through the limiter found when it was tried as an attacker
//! would, each named after what got through. Every case runs on the memory store and, with
//! the `redis` feature, on a real Redis server too.

use std::time::Duration;

use ratelimit::{Config, Error, MemoryStore, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{clock, now};

/// Makes a service over a configuration, on one store.
type MakeService = Box<dyn Fn(Config) -> RateLimitService>;

/// The stores each case runs on: (name, a service over `config` on that store). Two
/// services made from one factory share the store, like two apps on one Redis.
fn stores() -> Vec<(&'static str, MakeService)> {
    let memory = MemoryStore::new();
    // Redis adds its stores to these with the feature.
    #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
    let mut all: Vec<(&'static str, MakeService)> = vec![(
        "memory",
        Box::new(move |config| {
            RateLimitService::with_store(config, memory.clone(), std::sync::Arc::new(clock()))
                .unwrap()
        }),
    )];
    #[cfg(feature = "redis")]
    {
        let server = std::sync::Arc::new(ratelimit_tests::redis_server::RedisServer::start());
        all.push((
            "redis",
            Box::new(move |config: Config| {
                let options =
                    ratelimit::RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
                let config = rebuild_on(config, ratelimit::StoreConfig::Redis(options));
                RateLimitService::new(config).unwrap()
            }),
        ));
    }
    all
}

/// `config` on another store (a `Config` is built once; the cases build theirs through this).
#[cfg(feature = "redis")]
fn rebuild_on(config: Config, store: ratelimit::StoreConfig) -> Config {
    let mut b = Config::builder()
        .strategy(config.strategy())
        .key_prefix(config.key_prefix())
        .default_window(config.default_window())
        .burst_limit(config.burst_limit())
        .store(store);
    b = match config.default_limit() {
        Some(limit) => b.default_limit(limit),
        None => b.no_default_limit(),
    };
    for t in config.tiers() {
        let mut tier = Tier::new(t.name.to_string(), t.quota.limit())
            .window(t.quota.window())
            .burst(t.quota.burst())
            .strategy(t.quota.strategy());
        if let Some(refill) = t.overrides.refill {
            tier = tier.refill(refill);
        }
        b = b.tier(tier);
    }
    b.build().unwrap()
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A tier named `-` once shared the store key of "no tier", and resetting it wiped the
/// other budget.
#[test]
fn a_tier_named_dash_does_not_share_the_key_of_no_tier() {
    for (store, make) in stores() {
        let config = Config::builder()
            .default_limit(1)
            .tier(Tier::new("-", 1))
            .build()
            .unwrap();
        let service = make(config);
        run(async {
            let dash = Options::new().tier("-");
            let none = Options::new();
            assert!(
                service.consume("k", &dash).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                service.consume("k", &none).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                !service.consume("k", &dash).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                !service.consume("k", &none).await.unwrap().allowed,
                "{store}"
            );
            service.reset("k", Some("-")).await.unwrap();
            assert!(
                !service.consume("k", &none).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                service.consume("k", &dash).await.unwrap().allowed,
                "{store}"
            );
        });
    }
}

/// Alternating fixed window and token bucket on one key through per-call overrides once
/// admitted 20 of 20 at a limit of 1: each switch read the other's state as a fresh key.
#[test]
fn switching_strategy_or_window_on_one_key_never_resets_its_count() {
    for (store, make) in stores() {
        let service = make(Config::default());
        run(async {
            let fixed = Options::new()
                .limit(1)
                .window(Duration::from_secs(3_600))
                .strategy(Strategy::FixedWindow);
            let bucket = fixed.clone().strategy(Strategy::TokenBucket);
            let mut admitted = 0;
            for i in 0..20 {
                let opts = if i % 2 == 0 { &fixed } else { &bucket };
                admitted += u32::from(service.consume("k", opts).await.unwrap().allowed);
            }
            // One budget per quota: each admits its one call, no switch gives another.
            assert_eq!(admitted, 2, "{store}");
            let hour = Options::new().limit(1).window(Duration::from_secs(3_600));
            let day = hour.clone().window(Duration::from_secs(86_400));
            let mut admitted = 0;
            for i in 0..20 {
                let opts = if i % 2 == 0 { &hour } else { &day };
                admitted += u32::from(service.consume("w", opts).await.unwrap().allowed);
            }
            assert_eq!(admitted, 2, "{store}");
        });
    }
}

/// Two apps on one store with the default `key_prefix` and different strategies once reset
/// each other's budgets (20 of 20 admitted at a limit of 1).
#[test]
fn two_apps_with_the_default_prefix_keep_each_others_budgets() {
    for (store, make) in stores() {
        let app = |strategy| {
            make(
                Config::builder()
                    .strategy(strategy)
                    .default_limit(1)
                    .default_window("1h")
                    .build()
                    .unwrap(),
            )
        };
        let (a, b) = (app(Strategy::FixedWindow), app(Strategy::TokenBucket));
        run(async {
            let mut admitted = 0;
            for i in 0..20 {
                let app = if i % 2 == 0 { &a } else { &b };
                admitted += u32::from(app.consume("k", &Options::new()).await.unwrap().allowed);
            }
            assert_eq!(admitted, 2, "{store}");
        });
    }
}

/// The parts of a store key once ran into each other: a budget and a key that concatenate
/// alike, or a key holding the separators, must be separate budgets.
#[test]
fn keys_and_budgets_that_concatenate_alike_are_separate_budgets() {
    for (store, make) in stores() {
        let service = make(Config::builder().default_limit(1).build().unwrap());
        run(async {
            let calls = [
                (Some("a"), "b:c"),
                (Some("a:b"), "c"),
                (Some("a#b"), "c"),
                (Some("a"), "b#c"),
                (None, "a#b#c"),
                (None, "{a}"),
                (None, "a"),
                (None, "a}"),
                (Some("-"), "x"),
                (None, "x"),
            ];
            for (budget, key) in calls {
                let opts = match budget {
                    Some(b) => Options::new().budget(b),
                    None => Options::new(),
                };
                let first = service.consume(key, &opts).await.unwrap();
                assert!(first.allowed, "{store}: {budget:?} {key:?} shares a budget");
                assert!(
                    !service.consume(key, &opts).await.unwrap().allowed,
                    "{store}"
                );
            }
        });
    }
}

/// A clock near the end of `u64` nanoseconds once overflowed: a panic in debug builds, and
/// in release the wrap admitted 20 of 20 at a limit of 3.
#[test]
fn a_clock_near_the_end_of_u64_is_refused_not_wrapped() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .strategy(strategy)
            .default_limit(3)
            .build()
            .unwrap();
        let clock = ratelimit::ManualClock::new(Duration::from_nanos(u64::MAX - 5));
        let service =
            RateLimitService::with_clock(config, std::sync::Arc::new(clock.clone())).unwrap();
        for _ in 0..20 {
            let result = now(service.consume("k", &Options::new()));
            assert!(
                matches!(result, Err(Error::ClockOutOfRange { .. })),
                "{strategy}: {result:?}"
            );
        }
        assert_eq!(service.stats().total.allowed, 0, "{strategy}");
    }
}

/// A wall clock stepped forward a day and then back once admitted the limit twice: the
/// forward step's sweep dropped the keys, and back in the first window they were fresh.
/// A forward step is indistinguishable from time passing (the windows it jumps over are
/// over); stepping back must not reopen them.
#[test]
fn a_wall_clock_stepped_forward_then_back_never_admits_the_limit_twice() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .strategy(strategy)
            .default_limit(3)
            .build()
            .unwrap();
        let clock = clock();
        let service =
            RateLimitService::with_clock(config, std::sync::Arc::new(clock.clone())).unwrap();
        let admitted = |n: usize| {
            (0..n)
                .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
                .count()
        };
        assert_eq!(admitted(10), 3, "{strategy}");
        clock.advance(Duration::from_secs(86_400));
        // The forward step: a day has passed, as far as anyone can tell.
        assert_eq!(admitted(10), 3, "{strategy}");
        clock.set(ratelimit_tests::START);
        assert_eq!(
            admitted(10),
            0,
            "{strategy}: the step back reopened a window"
        );
    }
}
