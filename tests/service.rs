//! The service API: consume / enforce / status / reset / stats, tiers, options, config.

use std::time::Duration;

use ratelimit::{Config, Error, MemoryOptions, Options, StoreConfig, Strategy, Tier};
use ratelimit_tests::{now, service};

fn tiers() -> Config {
    Config::builder()
        .burst_limit(2)
        .tier(Tier::new("free", 3).window("1m"))
        .tier(Tier::new("pro", 10).window("1m").burst(5).priority(10))
        .build()
        .unwrap()
}

#[test]
fn consume_enforce_status_reset_and_stats() {
    let (service, clock) = service(tiers());
    let free = Options::new().tier("free");
    // Effective limit = tier limit + module burst (the tier has no burst of its own).
    for remaining in (0..5).rev() {
        let d = now(service.consume("u1", &free)).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.limit), (remaining, 5));
        assert_eq!(d.tier.as_deref(), Some("free"));
        assert_eq!(d.retry_after, None);
    }
    let status = now(service.status("u1", &free)).unwrap();
    assert!(!status.allowed);
    let err = now(service.enforce("u1", &free)).unwrap_err();
    let Error::Exceeded(exceeded) = &err else {
        panic!("{err}")
    };
    assert_eq!(exceeded.decision.retry_after, Some(Duration::from_secs(60)));
    assert!(err.to_string().contains("5 per 1m"), "{err}");
    assert!(err.to_string().contains("\"free\""), "{err}");

    // status never spends, even when it would be allowed.
    for _ in 0..10 {
        assert!(now(service.status("u2", &free)).unwrap().allowed);
    }
    assert_eq!(now(service.consume("u2", &free)).unwrap().remaining, 4);

    // The same key under another tier is another budget.
    let pro = Options::new().tier("pro");
    assert_eq!(now(service.consume("u1", &pro)).unwrap().limit, 15);

    now(service.reset("u1", Some("free"))).unwrap();
    assert!(now(service.consume("u1", &free)).unwrap().allowed);

    clock.advance(Duration::from_secs(60));
    let stats = service.stats();
    assert_eq!(stats.total.allowed, 5 + 1 + 1 + 1);
    assert_eq!(stats.total.denied, 1);
    assert_eq!(stats.total.checks, stats.total.allowed + stats.total.denied);
    assert_eq!(stats.by_tier["free"].allowed, 7);
    assert_eq!(stats.by_tier["free"].denied, 1);
    assert_eq!(stats.by_tier["pro"].checks, 1);
    service.reset_stats();
    assert_eq!(service.stats().total.checks, 0);
}

#[test]
fn unknown_tier_is_refused_never_allowed() {
    let (service, _) = service(tiers());
    let err = now(service.consume("u", &Options::new().tier("gold"))).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownTier { tier, .. } if tier == "gold"),
        "{err}"
    );
    assert!(err.to_string().contains("free, pro"), "{err}");
    let err = now(service.enforce("u", &Options::new().tier("gold"))).unwrap_err();
    assert!(matches!(err, Error::UnknownTier { .. }));
    assert_eq!(service.stats().total.errors, 2);
    assert_eq!(service.stats().total.allowed, 0);
    assert!(now(service.reset("u", Some("gold"))).is_err());
}

#[test]
fn default_tier_and_missing_default_limit() {
    let config = Config::builder()
        .no_default_limit()
        .tier(Tier::new("free", 1))
        .default_tier("free")
        .build()
        .unwrap();
    let (service, _) = service(config);
    let d = now(service.consume("u", &Options::new())).unwrap();
    assert_eq!(d.tier.as_deref(), Some("free"));
    assert!(!now(service.consume("u", &Options::new())).unwrap().allowed);
    // reset(key, None) resets the default tier's budget.
    now(service.reset("u", None)).unwrap();
    assert!(now(service.consume("u", &Options::new())).unwrap().allowed);

    let (service, _) = service_without_default();
    let err = now(service.consume("u", &Options::new())).unwrap_err();
    assert!(matches!(err, Error::NoLimit), "{err}");
    // A per-call limit is enough.
    assert!(
        now(service.consume("u", &Options::new().limit(1)))
            .unwrap()
            .allowed
    );
}

fn service_without_default() -> (ratelimit::RateLimitService, ratelimit::ManualClock) {
    service(Config::builder().no_default_limit().build().unwrap())
}

#[test]
fn per_call_overrides_and_cost() {
    let (service, clock) = service(Config::default());
    let opts = Options::new()
        .limit(4)
        .window(Duration::from_secs(10))
        .strategy(Strategy::TokenBucket)
        .cost(2);
    assert_eq!(now(service.consume("k", &opts)).unwrap().remaining, 2);
    assert_eq!(now(service.consume("k", &opts)).unwrap().remaining, 0);
    let refused = now(service.consume("k", &opts)).unwrap();
    // Two tokens at one per 2.5 s.
    assert_eq!(refused.retry_after, Some(Duration::from_secs(5)));
    clock.advance(Duration::from_secs(5));
    assert!(now(service.consume("k", &opts)).unwrap().allowed);

    let err = now(service.consume("k", &opts.clone().cost(5))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CostAboveCapacity {
                cost: 5,
                capacity: 4
            }
        ),
        "{err}"
    );
    let err = now(service.consume("k", &opts.clone().cost(0))).unwrap_err();
    assert!(matches!(err, Error::ZeroCost), "{err}");
    let err = now(service.consume("k", &opts.window(Duration::ZERO))).unwrap_err();
    assert!(matches!(err, Error::InvalidQuota { .. }), "{err}");
    let err = now(service.consume("", &Options::new())).unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
}

#[test]
fn disabled_is_the_explicit_way_to_admit_everything() {
    let (service, _) = service(
        Config::builder()
            .enabled(false)
            .default_limit(1)
            .build()
            .unwrap(),
    );
    for _ in 0..10 {
        assert!(now(service.consume("k", &Options::new())).unwrap().allowed);
    }
    // An unknown tier is still an error: a typo is not a reason to let traffic through.
    assert!(now(service.consume("k", &Options::new().tier("nope"))).is_err());
}

#[test]
fn headers_follow_the_decision() {
    let (service, _) = service(tiers());
    let free = Options::new().tier("free");
    let d = now(service.consume("k", &free)).unwrap();
    let h: std::collections::HashMap<_, _> = d.headers().into_iter().collect();
    assert_eq!(h["x-ratelimit-limit"], "5");
    assert_eq!(h["x-ratelimit-remaining"], "4");
    assert_eq!(
        h["x-ratelimit-reset"],
        d.reset_at()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            .div_ceil(1000)
            .to_string()
    );
    assert_eq!(h["ratelimit-policy"], "\"free\";q=5;w=60");
    assert_eq!(h["ratelimit"], "\"free\";r=4;t=60");
    assert!(!h.contains_key("retry-after"));
    for _ in 0..4 {
        now(service.consume("k", &free)).unwrap();
    }
    let refused = now(service.consume("k", &free)).unwrap();
    let h: std::collections::HashMap<_, _> = refused.headers().into_iter().collect();
    assert_eq!(h["retry-after"], "60");
    assert_eq!(h["x-ratelimit-remaining"], "0");
}

#[test]
fn config_from_toml_and_json() {
    let toml = r#"
        strategy = "fixed-window"
        key_prefix = "api"
        default_limit = 50
        default_window = "30s"
        burst_limit = 5
        default_tier = "free"
        [tiers.free]
        limit = 10
        [tiers.enterprise]
        limit = 10000
        window = "1h"
        burst = 5000
        priority = 9
        [store]
        type = "memory"
        max_keys = 1000
        sweep_interval = "5s"
    "#;
    let config = Config::from_toml_str(toml).unwrap();
    assert_eq!(config.strategy(), Strategy::FixedWindow);
    assert_eq!(config.tier("free").unwrap().quota.capacity(), 15);
    assert_eq!(
        config.tier("free").unwrap().quota.window(),
        Duration::from_secs(30)
    );
    assert_eq!(config.tier("enterprise").unwrap().quota.capacity(), 15_000);
    assert_eq!(
        config.store(),
        &StoreConfig::Memory(
            MemoryOptions::default()
                .max_keys(1000)
                .sweep_interval(Duration::from_secs(5))
        )
    );
    let json = r#"{"default_limit": 5, "tiers": {"pro": {"limit": 1, "window": "1x"}}}"#;
    let err = Config::from_json_str(json).unwrap_err();
    assert!(err.to_string().contains("tiers.pro.window"), "{err}");
}

/// redis-cell's published GCRA table: capacity 5, one token a second. After the calls at
/// 8.0 s and 9.5 s, a look at 9.5 s shows 4 remaining, full again in 1 s (once `status`
/// answered as if a call of cost 1 were made, and said 3).
#[test]
fn status_reports_the_level_now_as_in_the_published_gcra_table() {
    let config = Config::builder()
        .tier(
            Tier::new("cell", 5)
                .window("5s")
                .strategy(Strategy::TokenBucket),
        )
        .build()
        .unwrap();
    let (service, clock) = service(config);
    let cell = Options::new().tier("cell");
    let start = ratelimit_tests::START;
    clock.set(start + Duration::from_secs(8));
    assert!(now(service.consume("k", &cell)).unwrap().allowed);
    clock.set(start + Duration::from_millis(9_500));
    assert!(now(service.consume("k", &cell)).unwrap().allowed);
    let level = now(service.status("k", &cell)).unwrap();
    assert_eq!(level.remaining, 4);
    assert_eq!(level.reset_after, Duration::from_secs(1));
    assert!(level.allowed);
    assert_eq!(level.retry_after, None);
    // A look with cost 0 through `check` is the same as `status`.
    let look = now(service.check("k", &cell.consume(false).cost(0))).unwrap();
    assert_eq!(look, level);
}

/// A module-wide `token_refill_rate` of 3,600 per window once refilled a tier of 2 an hour
/// at the module's rate: 60 admitted in a minute.
#[test]
fn a_module_refill_rate_does_not_replace_a_tiers_own_limit() {
    let config = Config::builder()
        .strategy(Strategy::TokenBucket)
        .token_refill_rate(3_600)
        .tier(Tier::new("hourly", 2).window("1h"))
        .build()
        .unwrap();
    let (hourly_service, clock) = service(config);
    let hourly = Options::new().tier("hourly");
    let mut admitted = 0;
    for _ in 0..60 {
        admitted += u32::from(now(hourly_service.consume("k", &hourly)).unwrap().allowed);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(admitted, 2);
    // A tier can set its own refill.
    let config = Config::builder()
        .strategy(Strategy::TokenBucket)
        .tier(Tier::new("trickle", 2).window("1h").refill(60))
        .build()
        .unwrap();
    let (trickling, clock) = service(config);
    let trickle = Options::new().tier("trickle");
    let mut admitted = 0;
    for _ in 0..60 {
        admitted += u32::from(now(trickling.consume("k", &trickle)).unwrap().allowed);
        clock.advance(Duration::from_secs(1));
    }
    // The bucket's 2, then one a minute.
    assert_eq!(admitted, 2);
    assert!(now(trickling.consume("k", &trickle)).unwrap().allowed);
}

/// Found by `tests/fuzz.rs`: JSON may repeat a key, and the tiers map kept the last
/// definition, so a second, looser `pro` silently replaced the first (TOML refuses it).
#[test]
fn a_tier_defined_twice_in_json_is_refused_not_overwritten() {
    let json = r#"{"tiers": {"pro": {"limit": 1}, "pro": {"limit": 1000000}}}"#;
    match Config::from_json_str(json) {
        Err(Error::InvalidConfig(e)) => {
            assert!(e.to_string().contains("\"pro\" is defined twice"), "{e}")
        }
        other => panic!("a duplicated tier is refused: {other:?}"),
    }
    let toml = "[tiers.pro]\nlimit = 1\n[tiers.pro]\nlimit = 1000000\n";
    assert!(matches!(
        Config::from_toml_str(toml),
        Err(Error::InvalidConfig(_))
    ));
}

/// Each thread keeps the last quota it resolved from overrides: two services with different
/// configurations must never be answered from each other's entry, nor two tiers.
#[test]
fn resolved_overrides_are_never_shared_between_services_or_tiers() {
    let plain = Config::builder().build().unwrap();
    let bursty = Config::builder()
        .burst_limit(5)
        .tier(Tier::new("big", 1).burst(10))
        .build()
        .unwrap();
    let (a, _) = service(plain);
    let (b, _) = service(bursty);
    let one = Options::new().limit(1);
    for _ in 0..3 {
        assert_eq!(now(a.consume("x", &one)).unwrap().limit, 1);
        assert_eq!(now(b.consume("x", &one)).unwrap().limit, 6);
        assert_eq!(
            now(b.consume("y", &one.clone().tier("big"))).unwrap().limit,
            11
        );
    }
}

/// The memory path keeps the last store key's suffix (identity, budget, tier) per thread:
/// calls that alternate budgets, tiers, windows and services on one user key must still
/// each spend from their own state.
#[test]
fn alternating_budgets_tiers_windows_and_services_keep_separate_states() {
    let (first, _) = service(tiers());
    let (second, _) = service(tiers());
    let one = || {
        Options::new()
            .limit(1)
            .burst(0)
            .window(Duration::from_secs(60))
    };
    let calls = [
        (&first, one().budget("a")),
        (&first, one().budget("b")),
        (&first, one().budget("ab")),
        (&first, one()),
        (&first, one().window(Duration::from_secs(61)).budget("a")),
        (&first, one().strategy(Strategy::TokenBucket).budget("a")),
        (&first, Options::new().tier("free").budget("a")),
        (&first, Options::new().tier("pro").budget("a")),
        (&second, one().budget("a")),
    ];
    for (service, options) in &calls {
        let d = now(service.consume("user", options)).unwrap();
        assert!(d.allowed, "{options:?}");
    }
    for (service, options) in calls.into_iter().filter(|(_, o)| o.tier.is_none()) {
        let d = now(service.consume("user", &options)).unwrap();
        assert!(!d.allowed, "{options:?}");
    }
}

#[test]
fn consume_now_decides_at_once_and_defers_a_call_that_may_wait_spending_nothing() {
    let (service, _clock) = service_without_default();
    let once = Options::new().limit(1).window(Duration::from_secs(60));
    // A call that would wait in the queue when refused cannot be answered without a future.
    assert!(service
        .consume_now("user", &once.clone().queue(true))
        .is_none());
    // ... and spent nothing: the budget of one is still whole.
    let first = service.consume_now("user", &once).unwrap().unwrap();
    assert!(first.allowed);
    assert_eq!(first.remaining, 0);
    let second = service.consume_now("user", &once).unwrap().unwrap();
    assert!(!second.allowed);
    // A refusal is a decision, as with `consume`; a bad option is an error, never an allowance.
    let bad = Options::new().limit(1).window("soon");
    assert!(matches!(
        service.consume_now("user", &bad),
        Some(Err(Error::InvalidQuota(_)))
    ));
}
