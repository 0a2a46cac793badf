//! `Module::init` checks every annotated fn through the resolution the running service uses,
//! against the store it will run on: a fn limit the Redis store cannot count, and a fn limit
//! that only its tier makes unenforceable, are start-up errors, not refused calls later.

use ratelimit_tests::problems;

use ratelimit::{
    rate_limit, Config, Error, Module, ProblemKind, QuotaError, RedisOptions, StoreConfig, Tier,
};

/// A billion a day as a sliding-window counter: fine in memory, beyond the 2^51 the Redis
/// script counts exactly.
#[rate_limit(limit = 1000000000, window = "1d", strategy = "sliding-window-counter")]
async fn firehose() -> Result<(), Error> {
    Ok(())
}

/// 4,000,000,000 is a valid limit alone, and the tier is valid alone; with the tier's burst
/// of 500,000,000 the capacity passes what any store counts. Once checked with the module's
/// default window and burst, and run with the tier's.
#[rate_limit(limit = 4000000000, tier = "bursty")]
async fn bursty() -> Result<(), Error> {
    Ok(())
}

#[test]
fn init_rejects_limits_the_store_or_the_tier_cannot_enforce() {
    let tier = Tier::new("bursty", 10).burst(500_000_000);
    // In memory: only the tier mix is a problem.
    let err = Module::builder().tier(tier.clone()).init().unwrap_err();
    assert_eq!(
        problems(&err),
        [(
            "registry_limits::bursty",
            ProblemKind::Unenforceable {
                tier: None,
                error: QuotaError::CapacityTooLarge
            }
        )],
        "{err}"
    );
    // On Redis (not contacted by init): the firehose too, which Redis cannot count.
    let redis = StoreConfig::Redis(RedisOptions::new("redis://127.0.0.1:1"));
    let err = Module::builder()
        .tier(tier)
        .store(redis)
        .init()
        .unwrap_err();
    let found = problems(&err);
    assert_eq!(found.len(), 2, "{err}");
    assert_eq!(found[0].0, "registry_limits::firehose", "{err}");
    assert!(
        matches!(
            found[0].1,
            ProblemKind::Unenforceable {
                error: QuotaError::Unsupported { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("2^51"), "{err}");
    // The service itself refuses the same calls.
    let config = Config::builder()
        .tier(Tier::new("bursty", 10).burst(500_000_000))
        .build()
        .unwrap();
    let service = ratelimit::RateLimitService::new(config).unwrap();
    let options = ratelimit::Options::new()
        .tier("bursty")
        .limit(4_000_000_000);
    let refused = futures::executor::block_on(service.consume("k", &options)).unwrap_err();
    assert!(matches!(
        refused,
        Error::InvalidQuota(QuotaError::CapacityTooLarge)
    ));
    // Nothing was installed: the fns are refused, not run unlimited.
    for result in [
        futures::executor::block_on(firehose()),
        futures::executor::block_on(bursty()),
    ] {
        assert!(matches!(result, Err(Error::NotInitialized { .. })));
    }
}
