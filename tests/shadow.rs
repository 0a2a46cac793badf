//! Shadow limits (issue 27): decided, spent and counted exactly like enforced ones, refusing
//! nothing; each call they would have refused is admitted, marked `shadowed` and counted. On
//! the memory store and, with the `redis` feature, on a real Redis server and Cluster, with a
//! hand-driven clock and exact counts.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Error, ManualClock, MemoryStore, Module, Options, RateLimitService,
    Strategy, Tier,
};
use ratelimit_tests::{now, Broken};

const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// The services each case runs on (memory, Redis, Cluster), all on one clock.
fn services(
    config: impl Fn() -> ratelimit::ConfigBuilder,
) -> (
    Vec<(&'static str, RateLimitService)>,
    ManualClock,
    Box<dyn std::any::Any>,
) {
    let clock = ratelimit_tests::clock();
    let (services, servers) = ratelimit_tests::on_every_store("shadow", config, &clock);
    (services, clock, servers)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_shadow_limit_of_5_admits_20_calls_and_counts_15_would_be_refusals() {
    let rt = runtime();
    let (services, _clock, _servers) = services(Config::builder);
    for (store, service) in services {
        for strategy in Strategy::ALL {
            let budget = format!("trial-{strategy}");
            let shadow = Options::new()
                .limit(5)
                .window(LONG)
                .strategy(strategy)
                .budget(budget.clone())
                .shadow(true);
            rt.block_on(async {
                for call in 0..20 {
                    let d = service.consume("user:1", &shadow).await.unwrap();
                    assert!(d.allowed, "{store} {strategy} call {call}");
                    assert_eq!(d.shadowed, call >= 5, "{store} {strategy} call {call}");
                    assert_eq!(d.retry_after, None, "{store} {strategy} call {call}");
                    assert_eq!(d.remaining, 4u64.saturating_sub(call), "{store} {strategy}");
                }
                // `enforce` admits too: a shadow limit never refuses.
                assert!(service.enforce("user:1", &shadow).await.unwrap().shadowed);
                // Spent like an enforced limit: 5, never more.
                let level = service.status("user:1", &shadow).await.unwrap();
                assert_eq!(level.remaining, 0, "{store} {strategy}");
            });
            let counts = service.stats().by_method[&budget];
            assert_eq!(
                (
                    counts.allowed,
                    counts.denied,
                    counts.shadowed,
                    counts.errors
                ),
                (21, 0, 16, 0),
                "{store} {strategy}"
            );
        }
        assert_eq!(service.stats().total.shadowed, 16 * 4, "{store}");
    }
}

/// Promoting a shadow limit is a change of its options (a reload, or a restart): the store
/// key does not depend on `shadow`, so the enforced limit starts from the shadow one's counts.
#[test]
fn a_shadow_limit_promoted_keeps_its_counts_and_refuses_the_next_call() {
    let rt = runtime();
    let (services, _clock, _servers) = services(Config::builder);
    for (store, service) in services {
        let limit = Options::new().limit(3).window(LONG).budget("promoted");
        rt.block_on(async {
            for _ in 0..4 {
                assert!(
                    service
                        .consume("u", &limit.clone().shadow(true))
                        .await
                        .unwrap()
                        .allowed
                );
            }
            let refused = service.consume("u", &limit).await.unwrap();
            assert!(!refused.allowed && !refused.shadowed, "{store}");
            assert!(refused.retry_after.is_some(), "{store}");
        });
    }
}

/// A tier's `shadow` makes every limit under it one; the tier's counters count the would-be
/// refusals; its window passing admits again without shadowing (on the memory store: Redis
/// decides on its own clock, not the hand-driven one).
#[test]
fn a_shadow_tier_counts_under_the_tier_and_recovers_with_its_window() {
    let rt = runtime();
    let config = || {
        Config::builder()
            .tier(Tier::new("trial", 2).window("1m").shadow())
            .tier(Tier::new("paid", 2).window("1m"))
    };
    let (services, clock, _servers) = services(config);
    for (store, service) in services {
        rt.block_on(async {
            let trial = Options::new().tier("trial");
            let shadowed: Vec<bool> = {
                let mut out = Vec::new();
                for _ in 0..4 {
                    let d = service.consume("t", &trial).await.unwrap();
                    assert!(d.allowed);
                    assert_eq!(d.tier.as_deref(), Some("trial"));
                    out.push(d.shadowed);
                }
                out
            };
            assert_eq!(shadowed, [false, false, true, true], "{store}");
            let paid = Options::new().tier("paid");
            for _ in 0..2 {
                assert!(service.consume("t", &paid).await.unwrap().allowed);
            }
            assert!(
                !service.consume("t", &paid).await.unwrap().allowed,
                "{store}"
            );
            if store == "memory" {
                clock.advance(Duration::from_secs(60));
                let d = service.consume("t", &trial).await.unwrap();
                assert!(d.allowed && !d.shadowed, "{store}");
            }
        });
        let stats = service.stats();
        assert_eq!(stats.by_tier["trial"].shadowed, 2, "{store}");
        let recovered = u64::from(store == "memory");
        assert_eq!(stats.by_tier["trial"].allowed, 4 + recovered, "{store}");
        assert_eq!(stats.by_tier["paid"].denied, 1, "{store}");
        assert_eq!(stats.by_tier["paid"].shadowed, 0, "{store}");
    }
}

/// In a stack, the enforced limits decide the call as one; a shadow limit spends only for a
/// call they admit, and only looks at one they refuse.
#[test]
fn in_a_stack_a_shadow_limit_never_refuses_and_spends_only_with_the_call() {
    let rt = runtime();
    let (services, _clock, _servers) = services(Config::builder);
    for (store, service) in services {
        let enforced = Options::new().limit(3).window(LONG).budget("enforced");
        let shadow = Options::new()
            .limit(2)
            .window(LONG)
            .budget("shadow")
            .shadow(true);
        // The shadow limit first: the decisions come back in the limits' order.
        let limits = [("s", &shadow), ("s", &enforced)];
        rt.block_on(async {
            let mut seen = Vec::new();
            for _ in 0..5 {
                let d = service.consume_all(&limits).await.unwrap();
                seen.push((d[0].allowed, d[0].shadowed, d[1].allowed));
            }
            assert_eq!(
                seen,
                [
                    (true, false, true),
                    (true, false, true),
                    (true, true, true),
                    (true, true, false),
                    (true, true, false),
                ],
                "{store}"
            );
            // Refused by the enforced limit: `enforce_all` says so, with its decision.
            match service.enforce_all(&limits).await {
                Err(Error::Exceeded(e)) => assert_eq!(e.budget.as_deref(), Some("enforced")),
                other => panic!("{store}: {other:?}"),
            }
            assert_eq!(service.status("s", &enforced).await.unwrap().remaining, 0);
            assert_eq!(service.status("s", &shadow).await.unwrap().remaining, 0);
        });
        let stats = service.stats();
        assert_eq!(stats.by_method["shadow"].allowed, 3, "{store}");
        assert_eq!(stats.by_method["shadow"].shadowed, 1, "{store}");
        assert_eq!(stats.by_method["enforced"].allowed, 3, "{store}");
        assert_eq!(stats.by_method["enforced"].denied, 3, "{store}");
        // The total counts each stacked call once.
        assert_eq!(
            (
                stats.total.allowed,
                stats.total.denied,
                stats.total.shadowed
            ),
            (3, 3, 1),
            "{store}"
        );
    }
}

/// A stack of shadow limits only: every call admitted, each limit counting its own.
#[test]
fn a_stack_of_shadow_limits_only_admits_every_call() {
    let rt = runtime();
    let (services, _clock, _servers) = services(Config::builder);
    for (store, service) in services {
        let a = Options::new()
            .limit(1)
            .window(LONG)
            .budget("a")
            .shadow(true);
        let b = Options::new()
            .limit(2)
            .window(LONG)
            .budget("b")
            .shadow(true);
        rt.block_on(async {
            for _ in 0..3 {
                let d = service.consume_all(&[("k", &a), ("k", &b)]).await.unwrap();
                assert!(d.iter().all(|d| d.allowed), "{store}");
            }
        });
        let stats = service.stats();
        assert_eq!(stats.by_method["a"].shadowed, 2, "{store}");
        assert_eq!(stats.by_method["b"].shadowed, 1, "{store}");
        assert_eq!(
            (stats.total.allowed, stats.total.shadowed),
            (3, 2),
            "{store}"
        );
    }
}

/// A shadow limit refuses nothing for being over its limit, but a store that cannot answer
/// is still an error: shadow is not a way around failing closed.
#[test]
fn a_shadow_limit_on_a_store_that_cannot_answer_is_an_error() {
    let service = RateLimitService::with_store(
        Config::default(),
        Broken,
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let shadow = Options::new().limit(5).window(LONG).shadow(true);
    assert!(matches!(
        now(service.consume("k", &shadow)),
        Err(Error::Store { .. })
    ));
    let stacked = now(service.consume_all(&[("k", &shadow)]));
    assert!(matches!(stacked, Err(Error::Store { .. })), "{stacked:?}");
    // Each failed call once in the total: the single one and the stacked one.
    assert_eq!(service.stats().total.errors, 2);
}

/// A bad key under a shadow limit is refused as under any limit.
#[test]
fn a_shadow_limit_refuses_a_bad_key() {
    let service = RateLimitService::with_store(
        Config::default(),
        MemoryStore::new(),
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let shadow = Options::new().limit(5).window(LONG).shadow(true);
    let long = "k".repeat(2_000);
    assert!(matches!(
        now(service.consume(&long, &shadow)),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        now(service.consume_all(&[(long.as_str(), &shadow)])),
        Err(Error::InvalidKey { .. })
    ));
}

#[rate_limit(limit = 2, window = "1m", key = user, shadow = true)]
async fn tried(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user, shadow = true)]
fn tried_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// `#[rate_limit(shadow = true)]`: the fn runs on every call, its budget counts the calls the
/// limit would have refused, and `declarations()` shows the limit is a shadow one.
#[test]
fn an_annotated_shadow_limit_runs_every_call_and_counts_the_rest() {
    let module = TestModule::new(Module::builder()).unwrap();
    let rt = runtime();
    rt.block_on(module.scope(async {
        for _ in 0..5 {
            tried("u").await.unwrap();
        }
    }));
    module.run(|| {
        for _ in 0..3 {
            tried_sync("u").unwrap();
        }
    });
    let stats = module.stats();
    let counts = stats
        .by_method
        .iter()
        .find(|(name, _)| name.ends_with("::tried"))
        .map(|(_, c)| *c)
        .unwrap();
    assert_eq!((counts.allowed, counts.shadowed, counts.denied), (5, 3, 0));
    let sync = stats
        .by_method
        .iter()
        .find(|(name, _)| name.ends_with("::tried_sync"))
        .map(|(_, c)| *c)
        .unwrap();
    assert_eq!((sync.allowed, sync.shadowed), (3, 1));
    let declared: Vec<bool> = ratelimit::declarations()
        .iter()
        .filter(|d| d.function().ends_with("::tried") || d.function().ends_with("::tried_sync"))
        .map(|d| d.spec().shadow())
        .collect();
    assert_eq!(declared, [true, true]);
}
