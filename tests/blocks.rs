//! Blocks (issue 26): `block_for` keeps a key refused for that long once a call on it was
//! refused, whatever the algorithm says meanwhile; visible in `status`, `retry_after` and the
//! headers; the normal limit again after it. On the memory store, with a hand-driven clock.
//! A store that keeps no blocks cannot enforce such a limit: refused, never ignored.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Error, MemoryStore, Module, Options, ProblemKind, Quota, QuotaError,
    RateLimitService, StoreConfig, Strategy, SystemClock, Tier,
};

const HOUR: Duration = Duration::from_secs(3_600);

fn module() -> TestModule {
    TestModule::new(Module::builder().tier(Tier::new("trial", 2).window("1m").block_for("10m")))
        .expect("every declaration is enforceable")
}

static GUESSES: AtomicU32 = AtomicU32::new(0);

/// Five failed guesses per 15 minutes, then an hour's block.
#[rate_limit(limit = 5, window = "15m", key = user, count = "err", block_for = "1h")]
async fn guess(user: &str, right: bool) -> Result<(), Error> {
    let _ = user;
    GUESSES.fetch_add(1, Ordering::SeqCst);
    match right {
        true => Ok(()),
        false => Err(Error::Store {
            message: "wrong".into(),
        }),
    }
}

fn guess_options() -> Options {
    Options::new()
        .limit(5)
        .window(Duration::from_secs(900))
        .block_for(HOUR)
        .budget("blocks::guess")
}

/// Refused for exactly the block after the limit refused, however often it is tried (the
/// block does not grow), visible in `status`; then the normal limit again.
#[tokio::test]
async fn a_refusal_blocks_the_key_for_exactly_the_block() {
    let m = module();
    m.scope(async {
        for _ in 0..5 {
            assert!(matches!(
                guess("ann", false).await,
                Err(Error::Store { .. })
            ));
        }
        let runs = GUESSES.load(Ordering::SeqCst);
        let Err(Error::Exceeded(refused)) = guess("ann", true).await else {
            panic!("admitted")
        };
        assert_eq!(refused.decision.retry_after, Some(HOUR));
        assert_eq!(refused.decision.reset_after, HOUR);
        // Past the 15-minute window the algorithm would admit again: the block holds.
        m.clock().advance(Duration::from_secs(1_800));
        let status = m.service().status("ann", &guess_options()).await.unwrap();
        assert!(!status.allowed);
        assert_eq!(status.remaining, 0);
        assert_eq!(status.retry_after, Some(Duration::from_secs(1_800)));
        for _ in 0..3 {
            assert!(matches!(guess("ann", true).await, Err(Error::Exceeded(_))));
        }
        m.clock()
            .advance(Duration::from_secs(1_800) - Duration::from_nanos(1));
        assert!(matches!(guess("ann", true).await, Err(Error::Exceeded(_))));
        m.clock().advance(Duration::from_nanos(1));
        assert!(guess("ann", true).await.is_ok());
        assert_eq!(
            GUESSES.load(Ordering::SeqCst),
            runs + 1,
            "no body ran while blocked"
        );
        // The normal limit again: five more failures, then the next block.
        for _ in 0..5 {
            assert!(matches!(
                guess("ann", false).await,
                Err(Error::Store { .. })
            ));
        }
        assert!(matches!(guess("ann", true).await, Err(Error::Exceeded(_))));
        // Another user was never blocked.
        assert!(guess("bob", true).await.is_ok());
    })
    .await;
}

/// A block is per key and goes with a reset of the key's state.
#[tokio::test]
async fn a_reset_lifts_the_block() {
    let m = module();
    let service = m.service();
    let options = Options::new().tier("trial");
    for _ in 0..2 {
        assert!(service.consume("cy", &options).await.unwrap().allowed);
    }
    let refused = service.consume("cy", &options).await.unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(600)));
    m.clock().advance(Duration::from_secs(120));
    assert!(!service.consume("cy", &options).await.unwrap().allowed);
    assert!(service.reset_with("cy", &options).await.unwrap());
    assert!(service.consume("cy", &options).await.unwrap().allowed);
}

/// Every strategy blocks alike: refused, then refused past its own window, then admitted at
/// the block's end.
#[tokio::test]
async fn every_strategy_blocks_alike() {
    for strategy in Strategy::ALL {
        let m = module();
        let service = m.service();
        let options = Options::new()
            .limit(1)
            .window(Duration::from_secs(10))
            .strategy(strategy)
            .block_for(Duration::from_secs(100));
        assert!(
            service.consume("dee", &options).await.unwrap().allowed,
            "{strategy}"
        );
        let refused = service.consume("dee", &options).await.unwrap();
        assert!(!refused.allowed, "{strategy}");
        assert_eq!(
            refused.retry_after,
            Some(Duration::from_secs(100)),
            "{strategy}"
        );
        m.clock().advance(Duration::from_secs(99));
        assert!(
            !service.consume("dee", &options).await.unwrap().allowed,
            "{strategy}"
        );
        m.clock().advance(Duration::from_secs(1));
        assert!(
            service.consume("dee", &options).await.unwrap().allowed,
            "{strategy}"
        );
    }
}

/// Stacked limits: the limit that refuses blocks its own key, and the other limits spend
/// nothing for the refused call; while blocked, every call through the stack is refused.
#[tokio::test]
async fn a_stacked_limit_blocks_its_own_key() {
    let m = module();
    let service = m.service();
    let short = Options::new()
        .limit(1)
        .window(Duration::from_secs(10))
        .block_for(Duration::from_secs(60))
        .budget("short");
    let long = Options::new().limit(100).window(HOUR).budget("long");
    let limits = [("eve", &short), ("eve", &long)];
    assert!(service
        .consume_all(&limits)
        .await
        .unwrap()
        .iter()
        .all(|d| d.allowed));
    let refused = service.consume_all(&limits).await.unwrap();
    assert!(!refused[0].allowed && refused[1].allowed);
    m.clock().advance(Duration::from_secs(30));
    let blocked = service.consume_all(&limits).await.unwrap();
    assert!(!blocked[0].allowed);
    assert_eq!(blocked[0].retry_after, Some(Duration::from_secs(30)));
    assert_eq!(service.status("eve", &long).await.unwrap().remaining, 99);
    m.clock().advance(Duration::from_secs(30));
    assert!(service
        .consume_all(&limits)
        .await
        .unwrap()
        .iter()
        .all(|d| d.allowed));
}

/// Blocks are swept once over, and kept while in force.
#[tokio::test]
async fn blocks_are_swept_once_over() {
    let m = module();
    let service = m.service();
    let options = Options::new().tier("trial");
    for _ in 0..3 {
        service.consume("fay", &options).await.unwrap();
    }
    let store = service.memory_store().unwrap();
    let now = || ratelimit::Clock::now(m.clock());
    m.clock().advance(Duration::from_secs(300));
    store.sweep(now());
    assert!(
        !service.consume("fay", &options).await.unwrap().allowed,
        "swept while in force"
    );
    m.clock().advance(Duration::from_secs(400));
    store.sweep(now());
    assert!(store.is_empty());
    assert!(service.consume("fay", &options).await.unwrap().allowed);
}

/// On a store that keeps no blocks, a limit with a block cannot be enforced: a call is
/// refused with the reason, an annotated fn does not start, a tier does not build.
#[tokio::test]
async fn a_store_without_blocks_refuses_a_limit_with_one() {
    let service = RateLimitService::with_store(
        Config::default(),
        ratelimit_tests::Forwarding {
            store: MemoryStore::new(),
            refunds: true,
        },
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    let refused = service
        .consume("gus", &Options::new().limit(5).block_for(HOUR))
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::InvalidQuota(QuotaError::Unsupported { .. }))
        ),
        "{refused:?}"
    );
    assert!(
        service
            .consume("gus", &Options::new().limit(5))
            .await
            .unwrap()
            .allowed
    );

    let store = StoreConfig::custom(ratelimit_tests::Forwarding {
        store: MemoryStore::new(),
        refunds: true,
    });
    let Err(Error::Declarations(errors)) = TestModule::new(Module::builder().store(store)) else {
        panic!("started")
    };
    assert!(errors
        .problems
        .iter()
        .any(|p| p.function == "blocks::guess"
            && matches!(p.kind, ProblemKind::Unenforceable { .. })));

    let store = StoreConfig::custom(ratelimit_tests::Forwarding {
        store: MemoryStore::new(),
        refunds: true,
    });
    let tier = Tier::new("trial", 2).window("1m").block_for("10m");
    let built = Config::builder().store(store).tier(tier).build();
    assert!(built.is_err(), "{built:?}");
    // A block longer than any window is refused when the quota is made.
    assert_eq!(
        Quota::per_minute(1)
            .unwrap()
            .with_block(Duration::from_secs(400 * 86_400)),
        Err(QuotaError::BlockTooLong)
    );
}

// ---------------------------------------------------------------------------------------------
// Penalties and rewards: what the application decides after the fact.

/// A penalty spends past the limit: a token bucket (one token every 12 s, 5 at most) given
/// 10 units is refused until they have come back (72 s: 120 s of tokens less the bucket's 60
/// s of room, less the one token a call needs), exactly; a new key is made by a penalty.
#[tokio::test]
async fn a_penalty_refuses_until_its_units_came_back() {
    let m = module();
    let service = m.service();
    let options = Options::new()
        .limit(5)
        .window(Duration::from_secs(60))
        .strategy(Strategy::TokenBucket);
    let level = service.penalize("hal", &options, 10).await.unwrap();
    assert!(!level.allowed);
    assert_eq!(level.remaining, 0);
    m.clock()
        .advance(Duration::from_secs(72) - Duration::from_nanos(1));
    assert!(!service.consume("hal", &options).await.unwrap().allowed);
    m.clock().advance(Duration::from_nanos(1));
    assert!(service.consume("hal", &options).await.unwrap().allowed);
}

/// A reward gives back up to its units, never past the quota; on a key with nothing spent it
/// gives nothing and keeps nothing.
#[tokio::test]
async fn a_reward_never_grows_the_budget_past_the_quota() {
    for strategy in Strategy::ALL {
        let m = module();
        let service = m.service();
        let options = Options::new()
            .limit(5)
            .window(Duration::from_secs(60))
            .strategy(strategy);
        assert_eq!(
            service.reward("ivy", &options, 3).await.unwrap().remaining,
            5
        );
        assert!(service.memory_store().unwrap().is_empty(), "{strategy}");
        for _ in 0..3 {
            service.consume("ivy", &options).await.unwrap();
        }
        let level = service.reward("ivy", &options, 10).await.unwrap();
        assert_eq!(level.remaining, 5, "{strategy}");
        for _ in 0..5 {
            assert!(
                service.consume("ivy", &options).await.unwrap().allowed,
                "{strategy}"
            );
        }
        assert!(
            !service.consume("ivy", &options).await.unwrap().allowed,
            "{strategy}"
        );
    }
}

/// A store that takes no penalties or rewards refuses them with the reason, changing nothing.
#[tokio::test]
async fn a_store_without_adjustments_refuses_them() {
    let service = RateLimitService::with_store(
        Config::builder().default_limit(5).build().unwrap(),
        ratelimit_tests::LikeMemory::without_refunds(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    for result in [
        service.penalize("jo", &Options::new(), 2).await,
        service.reward("jo", &Options::new(), 2).await,
    ] {
        assert!(
            matches!(
                result,
                Err(Error::InvalidQuota(QuotaError::Unsupported { .. }))
            ),
            "{result:?}"
        );
    }
    assert_eq!(
        service
            .status("jo", &Options::new())
            .await
            .unwrap()
            .remaining,
        5
    );
}
