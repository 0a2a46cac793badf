//! helper-77's probes of `probes_prepared_transitions` that found a difference, on Redis (a
//! real server): a call's own quota first resolved after a reload that moved its limit, on
//! three services under prefixes of their own: (a) a site prepared right after the reload,
//! (b) the per-call path, (c) a twin with the new configuration from the start.
//!
//! Time: Redis decides on its own clock, the service's transition on a hand-driven one, so
//! no bucket refills while the service's clock crosses the old window and the carrying: the
//! old state's debt and block are whole when the calls past the carrying ask for them.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, ManualClock, Options, Prepared, RateLimitService, RedisOptions,
    StoreConfig, Strategy, Tier,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{on_its_store, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier): a bucket of 10 plus `burst` on a minute, a token every
/// 6 s.
fn bucket(name: &str, burst: u64) -> ConfigBuilder {
    let tier = Tier::new(name, 10)
        .burst(burst)
        .refill(10)
        .window(MINUTE)
        .strategy(Strategy::TokenBucket);
    Config::builder().tier(tier).default_tier(name)
}

/// Which of the three services a script runs on.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Prepared,
    PerCall,
    Twin,
}

/// One service's admissions, on `server` under a prefix of its own: `plain` calls with no
/// options at the start, the tier renamed from `"a"` to `"b"` (the twin on `"b"` from the
/// start), then `own` calls with `options` and, at each of `later` (seconds on the
/// service's clock), as many more as it says.
async fn run(
    server: &RedisServer,
    burst: u64,
    (plain, own): (usize, usize),
    options: &Options,
    later: &[(u64, usize)],
    way: Way,
) -> Vec<usize> {
    let clock = ManualClock::new(START);
    let first = bucket(if way == Way::Twin { "b" } else { "a" }, burst);
    let redis = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
    let config = (first.key_prefix(prefix("h77-prepared")))
        .store(StoreConfig::Redis(redis))
        .build()
        .unwrap();
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    let mut counts = vec![admitted(&service, None, &Options::new(), plain).await];
    if way != Way::Twin {
        let moved = on_its_store(&service, bucket("b", burst));
        service.reload(moved).unwrap();
    }
    let site = (way == Way::Prepared).then(|| service.prepare(options).unwrap());
    counts.push(admitted(&service, site.as_ref(), options, own).await);
    for &(at, n) in later {
        clock.set(START + Duration::from_secs(at));
        counts.push(admitted(&service, site.as_ref(), options, n).await);
    }
    counts
}

async fn admitted(
    service: &RateLimitService,
    site: Option<&Prepared>,
    options: &Options,
    n: usize,
) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let decided = match site {
            Some(site) => site.consume("k").await,
            None => service.consume("k", options).await,
        };
        admitted += usize::from(decided.unwrap().allowed);
    }
    admitted
}

/// The bucket of 60 spent by plain calls, the tier renamed; calls with their own refill of
/// a token a minute, first resolved after the reload: 54, leaving the old state an hour owed
/// and the new one 54 minutes. Past the configured bucket's carrying (+421 s on the
/// service's clock, none on Redis'), the one bucket owes its hour: nothing, as the twin.
/// Before the fix, the per-call path read the new state alone there: 6.
#[tokio::test]
async fn a_calls_own_slow_bucket_first_resolved_after_the_reload_keeps_the_old_debt_on_redis() {
    let server = RedisServer::start();
    let own = Options::new().refill(1);
    let mut all = Vec::new();
    for way in [Way::Prepared, Way::PerCall, Way::Twin] {
        all.push(run(&server, 50, (61, 61), &own, &[(421, 61)], way).await);
    }
    assert_eq!(all[2], [60, 54, 0], "twin");
    assert_eq!(all[0], all[2], "prepared");
    assert_eq!(all[1], all[2], "per call");
}

/// 10 of the bucket's 15 spent by plain calls, the tier renamed; calls with their own block
/// of an hour, first resolved after the reload, at +59 s: 5 admitted (on Redis' clock the
/// old bucket gave nothing back), the sixth refused by the old state, which blocks it. Past
/// the configured bucket's carrying the old state's block holds the key: nothing at +200 s
/// nor +3,000 s, as the twin. Before the fix, the per-call path read the new state alone
/// there: 5 and 5.
#[tokio::test]
async fn a_calls_own_block_first_resolved_after_the_reload_outlasts_the_carrying_on_redis() {
    let server = RedisServer::start();
    let own = Options::new().block_for(HOUR);
    let mut all = Vec::new();
    for way in [Way::Prepared, Way::PerCall, Way::Twin] {
        all.push(
            run(
                &server,
                5,
                (10, 0),
                &own,
                &[(59, 6), (200, 5), (3_000, 5)],
                way,
            )
            .await,
        );
    }
    assert_eq!(all[2], [10, 0, 5, 0, 0], "twin");
    assert_eq!(all[0], all[2], "prepared");
    assert_eq!(all[1], all[2], "per call");
}
