//! Leased budgets on the Redis store (feature `redis`, `RedisOptions::leases`), against real
//! `redis-server` processes: exact counts across 64 tasks and across 4 processes, one round trip
//! per slice (counted by Redis' `INFO commandstats`), one budget shared with the plain path,
//! refusals, reset, and the units given back or left unspent (under-admission, measured).
//! Through the service, leased units and held refusals are decided at once (`consume_now`, an
//! annotated fn's first poll), counted as `consume` counts them, allocating nothing.
//!
//! No window ends during a test: windows are a day long and the token bucket refills one token
//! per window. Waiting for the background task polls Redis' state, never the clock.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use std::sync::Arc;

use futures::FutureExt;
use ratelimit::store::Store;
use ratelimit::{
    Config, Counts, Decision, Error, LeaseOptions, Options, Quota, RateLimitService, RedisOptions,
    RedisStore, StoreConfig, Strategy,
};
use ratelimit_tests::redis_server::{prefix, script_calls, RedisCluster, RedisServer};
use ratelimit_tests::{acquire, CountingAllocator};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const DAY: Duration = Duration::from_secs(24 * 3_600);
const LEASED: [Strategy; 2] = [Strategy::FixedWindow, Strategy::TokenBucket];

/// `limit` per day; the token bucket refills one token a day.
fn quota(limit: u64, strategy: Strategy) -> Quota {
    let quota = Quota::new(limit, DAY).unwrap().with_strategy(strategy);
    match strategy {
        Strategy::TokenBucket => quota.with_refill(1).unwrap(),
        _ => quota,
    }
}

fn options(server: &RedisServer) -> RedisOptions {
    RedisOptions::new(server.url()).timeout(Duration::from_secs(10))
}

fn leasing(server: &RedisServer, slice: u64) -> RedisStore {
    RedisStore::new(options(server).leases(LeaseOptions::new(slice))).expect("store")
}

fn plain(server: &RedisServer) -> RedisStore {
    RedisStore::new(options(server)).expect("store")
}

/// Units spent in Redis on `key`: the fixed window's count, or the token bucket's tokens
/// taken (its arrival time ahead of Redis' clock, in whole intervals, rounded up).
fn spent(c: &mut redis::Connection, key: &str, quota: &Quota) -> u64 {
    let raw: Option<String> = redis::cmd("GET").arg(key).query(c).unwrap();
    let Some(raw) = raw else { return 0 };
    match quota.strategy() {
        Strategy::TokenBucket => {
            let tat: u64 = raw.strip_prefix('T').unwrap().parse().unwrap();
            let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
            let interval = quota.window().as_micros() as u64;
            (tat.saturating_sub(s * 1_000_000 + us)).div_ceil(interval)
        }
        _ => raw.parse().unwrap(),
    }
}

/// `tasks` tasks making `calls` calls each on `key`; the calls admitted.
async fn hammer(store: &RedisStore, key: &str, quota: &Quota, tasks: usize, calls: usize) -> u64 {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (store, key, quota) = (store.clone(), key.to_owned(), *quota);
            tokio::spawn(async move {
                let mut allowed = 0;
                for _ in 0..calls {
                    allowed += u64::from(acquire(&store, &key, &quota).await.unwrap().allowed);
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for h in handles {
        allowed += h.await.unwrap();
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_admit_exactly_the_limit_with_one_round_trip_per_slice() {
    let server = RedisServer::start();
    let store = leasing(&server, 16);
    let p = prefix("lease-tasks");
    let mut c = server.connection();
    for strategy in LEASED {
        let quota = quota(1_024, strategy);
        // Loads the script (a NOSCRIPT, then EVAL), so only decisions are counted below.
        assert!(
            acquire(&store, &format!("{p}:warm:{strategy}"), &quota)
                .await
                .unwrap()
                .allowed
        );
        let key = format!("{p}:{strategy}");
        let before = script_calls(&mut c);
        assert_eq!(
            hammer(&store, &key, &quota, 64, 16).await,
            1_024,
            "{strategy}"
        );
        // 1 024 decisions, 64 round trips: 1 per slice of 16.
        assert_eq!(script_calls(&mut c) - before, 64, "{strategy}");
        assert_eq!(spent(&mut c, &key, &quota), 1_024, "{strategy}");
        // Spent: the first refusal asks Redis, the 639 after it are answered in the process.
        assert_eq!(hammer(&store, &key, &quota, 64, 10).await, 0, "{strategy}");
        assert_eq!(script_calls(&mut c) - before, 65, "{strategy}");
    }
}

#[tokio::test]
async fn leases_and_plain_calls_share_one_budget() {
    let server = RedisServer::start();
    let (leased, plain) = (leasing(&server, 8), plain(&server));
    let p = prefix("lease-shared");
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(20, strategy);
        // One call takes a slice of 8: 7 left in the process, 12 in Redis.
        assert!(acquire(&leased, &key, &quota).await.unwrap().allowed);
        assert_eq!(hammer(&plain, &key, &quota, 1, 30).await, 12, "{strategy}");
        assert_eq!(hammer(&leased, &key, &quota, 1, 30).await, 7, "{strategy}");
    }
}

#[tokio::test]
async fn a_grant_of_nothing_is_a_refusal_with_the_retry_after_redis_gives() {
    let server = RedisServer::start();
    let (leased, plain) = (leasing(&server, 4), plain(&server));
    let p = prefix("lease-refused");
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(3, strategy);
        for _ in 0..3 {
            assert!(acquire(&plain, &key, &quota).await.unwrap().allowed);
        }
        let by_lease = acquire(&leased, &key, &quota).await.unwrap();
        let by_plain = acquire(&plain, &key, &quota).await.unwrap();
        assert!(!by_lease.allowed && !by_plain.allowed, "{strategy}");
        let (a, b) = (by_lease.retry_after.unwrap(), by_plain.retry_after.unwrap());
        assert!(
            a.abs_diff(b) < Duration::from_secs(1),
            "{strategy}: {a:?} {b:?}"
        );
        assert!(a <= DAY, "{strategy}");
    }
}

#[tokio::test]
async fn a_reset_through_the_store_drops_its_lease() {
    let server = RedisServer::start();
    let (leased, plain) = (leasing(&server, 16), plain(&server));
    let p = prefix("lease-reset");
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(20, strategy);
        assert!(acquire(&leased, &key, &quota).await.unwrap().allowed);
        assert!(Store::reset(&leased, &key).await.unwrap());
        for _ in 0..20 {
            assert!(acquire(&plain, &key, &quota).await.unwrap().allowed);
        }
        // The 15 units leased before the reset are gone with it.
        assert!(
            !acquire(&leased, &key, &quota).await.unwrap().allowed,
            "{strategy}"
        );
    }
}

#[tokio::test]
async fn unspent_units_are_given_back_while_they_are_still_the_keys_own() {
    let server = RedisServer::start();
    let (leased, plain) = (leasing(&server, 16), plain(&server));
    let p = prefix("lease-back");
    let mut c = server.connection();
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(20, strategy);
        assert!(acquire(&leased, &key, &quota).await.unwrap().allowed);
        assert_eq!(spent(&mut c, &key, &quota), 16, "{strategy}");
        assert_eq!(leased.return_leases().await.unwrap(), 15, "{strategy}");
        assert_eq!(spent(&mut c, &key, &quota), 1, "{strategy}");
        assert_eq!(hammer(&plain, &key, &quota, 1, 25).await, 19, "{strategy}");
        assert_eq!(leased.return_leases().await.unwrap(), 0, "nothing leased");
    }
    // A bucket spent from since the lease is no longer the lease's: its units stay spent.
    let key = format!("{p}:moved");
    let quota = quota(20, Strategy::TokenBucket);
    assert!(acquire(&leased, &key, &quota).await.unwrap().allowed);
    assert!(acquire(&plain, &key, &quota).await.unwrap().allowed);
    assert_eq!(leased.return_leases().await.unwrap(), 0);
    assert_eq!(spent(&mut c, &key, &quota), 17);
}

/// Polls Redis until `key` has `units` spent (the background task's work), for at most 10 s.
async fn until_spent(c: &mut redis::Connection, key: &str, quota: &Quota, units: u64) {
    let polled = tokio::time::timeout(Duration::from_secs(10), async {
        while spent(c, key, quota) != units {
            tokio::task::yield_now().await;
        }
    });
    assert!(polled.await.is_ok(), "{key}: {}", spent(c, key, quota));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_leases_and_those_of_a_dropped_store_are_given_back() {
    let server = RedisServer::start();
    let p = prefix("lease-idle");
    let mut c = server.connection();
    for strategy in LEASED {
        let quota = quota(20, strategy);
        let idle = RedisStore::new(
            options(&server).leases(LeaseOptions::new(16).idle(Duration::from_millis(20))),
        )
        .unwrap();
        let key = format!("{p}:idle:{strategy}");
        assert!(acquire(&idle, &key, &quota).await.unwrap().allowed);
        until_spent(&mut c, &key, &quota, 1).await;

        let dropped = leasing(&server, 16); // idle after 1 s: only the drop gives back
        let key = format!("{p}:dropped:{strategy}");
        assert!(acquire(&dropped, &key, &quota).await.unwrap().allowed);
        assert_eq!(spent(&mut c, &key, &quota), 16);
        drop(dropped);
        until_spent(&mut c, &key, &quota, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_leases_each_key_in_its_own_slot() {
    let cluster = RedisCluster::start();
    let cluster_options = || RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let leased = RedisStore::new(cluster_options().leases(LeaseOptions::new(16))).unwrap();
    let plain = RedisStore::new(cluster_options()).unwrap();
    let p = prefix("lease-cluster");
    for strategy in LEASED {
        let quota = quota(1_000, strategy);
        // Keys spread over the nodes: each lease is one key and its ledger, one slot; the
        // one budget of a fn has the empty tag `{}` (no tag to Redis), and keys without
        // braces none at all.
        let keys = ["a", "b", "c"].map(|user| format!("{p}:{{{user}}}:{strategy}"));
        let untagged = [format!("{p}:{{}}:{strategy}"), format!("{p}-{strategy}")];
        for key in keys.iter().chain(&untagged) {
            assert!(acquire(&plain, key, &quota).await.unwrap().allowed);
            assert_eq!(hammer(&leased, key, &quota, 64, 20).await, 999, "{key}");
            assert!(!acquire(&plain, key, &quota).await.unwrap().allowed);
            // A reset and a return read the ledger in the key's slot too (the leasing store
            // keeps its refusal until its retry time: a reset made elsewhere).
            assert!(Store::reset(&plain, key).await.unwrap(), "{key}");
            assert_eq!(leased.return_leases().await.unwrap(), 0, "{key}");
            assert!(acquire(&plain, key, &quota).await.unwrap().allowed, "{key}");
        }
    }
}

#[tokio::test]
async fn the_sliding_strategies_ask_redis_for_every_call() {
    let server = RedisServer::start();
    let store = leasing(&server, 16);
    let p = prefix("lease-sliding");
    let mut c = server.connection();
    for strategy in [Strategy::SlidingWindow, Strategy::SlidingWindowCounter] {
        let quota = Quota::new(100, DAY).unwrap().with_strategy(strategy);
        let key = format!("{p}:{strategy}");
        assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
        let before = script_calls(&mut c);
        assert_eq!(hammer(&store, &key, &quota, 1, 10).await, 10);
        assert_eq!(script_calls(&mut c) - before, 10, "{strategy}");
    }
}

#[test]
fn lease_options_are_validated_naming_each_field() {
    let bad = [
        (LeaseOptions::new(0), "store.leases.slice"),
        (
            LeaseOptions::new(8).idle(Duration::ZERO),
            "store.leases.idle",
        ),
        (LeaseOptions::new(8).max_keys(0), "store.leases.max_keys"),
    ];
    for (leases, field) in bad {
        let options = RedisOptions::new("redis://127.0.0.1:1").leases(leases);
        let err = RedisStore::new(options).unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }
}

/// Runs 4 `lease-worker` processes of 64 tasks at once on one key (limit 1 000 a day), each
/// task making `calls` calls (0: until refused); returns each one's `(allowed, returned)`.
fn four_processes(
    server: &RedisServer,
    p: &str,
    strategy: Strategy,
    [slice, calls, back]: [&str; 3],
) -> Vec<(u64, u64)> {
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_lease-worker"))
                .args([
                    server.url().as_str(),
                    p,
                    strategy.as_str(),
                    "1000",
                    &DAY.as_millis().to_string(),
                    slice,
                    "64",
                    calls,
                    back,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start lease-worker")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("lease-worker ran");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let fields: Vec<u64> = text
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            match fields[..] {
                [allowed, returned] => (allowed, returned),
                _ => panic!("lease-worker said {text:?}"),
            }
        })
        .collect()
}

/// The fleet's key, as the service composes it under prefix `p` (not its lease ledger).
fn fleet_key(c: &mut redis::Connection, p: &str) -> String {
    the_limiter_key(c, &format!("{p}*"))
}

/// The one limiter key matching `pattern`, beside its lease ledger (`<key>:lease`).
fn the_limiter_key(c: &mut redis::Connection, pattern: &str) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(c).unwrap();
    let limiter: Vec<&String> = keys.iter().filter(|k| !k.ends_with(":lease")).collect();
    assert_eq!(limiter.len(), 1, "{keys:?}");
    limiter[0].clone()
}

#[test]
fn four_processes_of_sixty_four_tasks_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let mut c = server.connection();
    for strategy in LEASED {
        let p = prefix("lease-fleet");
        // Every task calls until it is refused: no process stops holding units.
        let runs = four_processes(&server, &p, strategy, ["16", "0", "0"]);
        let admitted: u64 = runs.iter().map(|r| r.0).sum();
        assert_eq!(admitted, 1_000, "{strategy}: {runs:?}");
        let key = fleet_key(&mut c, &p);
        assert_eq!(spent(&mut c, &key, &quota(1_000, strategy)), 1_000);
    }
}

#[test]
fn units_stranded_on_processes_that_stop_are_bounded_and_can_be_given_back() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let mut stranded = BTreeMap::new();
    for strategy in LEASED {
        let quota = quota(1_000, strategy);
        // 4 x 64 tasks x 3 calls, slices of 10: each process takes 20 slices (200 units, the
        // budget never runs short) for its 192 calls, and stops holding 8.
        let p = prefix("lease-stranded");
        let runs = four_processes(&server, &p, strategy, ["10", "3", "0"]);
        let admitted: u64 = runs.iter().map(|r| r.0).sum();
        assert_eq!(admitted, 768, "{strategy}");
        let key = fleet_key(&mut c, &p);
        let left = spent(&mut c, &key, &quota) - admitted;
        assert_eq!(left, 4 * 8, "{strategy}");
        stranded.insert(strategy.as_str(), left);

        let p = prefix("lease-given-back");
        let runs = four_processes(&server, &p, strategy, ["10", "3", "1"]);
        let admitted: u64 = runs.iter().map(|r| r.0).sum();
        let returned: u64 = runs.iter().map(|r| r.1).sum();
        assert_eq!(admitted, 768, "{strategy}");
        let key = fleet_key(&mut c, &p);
        let left = spent(&mut c, &key, &quota) - admitted;
        match strategy {
            // Every process's units are in the one window, and go back to it.
            Strategy::FixedWindow => assert_eq!((left, returned), (0, 32), "{runs:?}"),
            // Only the last slice taken can go back: the others' slots were spent after them.
            _ => assert_eq!(left + returned, 32, "{runs:?}"),
        }
    }
    println!("units stranded by 4 stopped processes (slices of 10): {stranded:?}");
}

/// A service on a hand-driven clock over `options`, its keys under prefix `p`.
fn service_over(options: RedisOptions, p: &str) -> RateLimitService {
    let config = Config::builder()
        .key_prefix(p)
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap()
}

/// `limit` a day under `strategy` (the bucket refilling one token a day), counted under tier
/// "pro" and budget "hot".
fn day_options(limit: u64, strategy: Strategy) -> Options {
    let options = Options::new()
        .limit(limit)
        .window(DAY)
        .strategy(strategy)
        .budget("hot");
    match strategy {
        Strategy::TokenBucket => options.refill(1),
        _ => options,
    }
}

/// A service with tier "pro" (whatever its own limit: the calls override it).
fn tiered_service(options: RedisOptions, p: &str) -> RateLimitService {
    let config = Config::builder()
        .key_prefix(p)
        .tier(ratelimit::Tier::new("pro", 1))
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap()
}

/// `consume_now`, and `consume` awaited when it cannot decide at once: the decision and
/// whether it was made at once.
async fn now_or_awaited(
    service: &RateLimitService,
    key: &str,
    options: &Options,
) -> (Decision, bool) {
    match service.consume_now(key, options) {
        Some(decided) => (decided.unwrap(), true),
        None => (service.consume(key, options).await.unwrap(), false),
    }
}

#[tokio::test]
async fn consume_now_spends_a_lease_while_it_has_units_and_defers_a_grant_spending_nothing() {
    let server = RedisServer::start();
    let mut c = server.connection();
    for strategy in LEASED {
        let p = prefix("lease-now");
        let leased = tiered_service(options(&server).leases(LeaseOptions::new(16)), &p);
        let plain = tiered_service(options(&server), &prefix("lease-now-plain"));
        let options = day_options(40, strategy).tier("pro");
        // Scripts loaded on another key, so that only this key's calls are counted below.
        assert!(leased.consume("warm", &options).await.unwrap().allowed);
        assert!(plain.consume("warm", &options).await.unwrap().allowed);
        leased.reset_stats();
        plain.reset_stats();
        let before = script_calls(&mut c);

        // No lease yet: nothing decided, spent or counted.
        assert!(leased.consume_now("k", &options).is_none());
        assert_eq!(script_calls(&mut c), before, "{strategy}");
        assert_eq!(leased.stats().by_method["hot"], Counts::default());
        assert_eq!(leased.stats().total, Counts::default());

        // Slices of 16, 16 and the 8 left: each taken by an awaited call, the rest at once.
        let mut at_once = Vec::new();
        for _ in 0..40 {
            let (decision, now) = now_or_awaited(&leased, "k", &options).await;
            assert!(decision.allowed, "{strategy}");
            assert_eq!(decision.tier.as_deref(), Some("pro"), "{strategy}");
            at_once.push(now);
        }
        let awaited: Vec<usize> = (0..40).filter(|&i| !at_once[i]).collect();
        assert_eq!(awaited, [0, 16, 32], "{strategy}");
        assert_eq!(script_calls(&mut c) - before, 3, "{strategy}");
        // Spent: the first refusal asks Redis (a grant of nothing); those after it are the
        // refusal held in the process.
        for i in 0..6 {
            let (decision, now) = now_or_awaited(&leased, "k", &options).await;
            assert!(!decision.allowed, "{strategy}");
            assert!(decision.retry_after.is_some(), "{strategy}");
            assert_eq!(now, i > 0, "{strategy}: refusal {i}");
        }
        assert_eq!(script_calls(&mut c) - before, 4, "{strategy}");
        let key = fleet_key_of(&mut c, &p, "k");
        assert_eq!(spent(&mut c, &key, &quota(40, strategy)), 40, "{strategy}");

        // Counted as `consume` counts the same calls, one round trip each.
        for _ in 0..46 {
            plain.consume("k", &options).await.unwrap();
        }
        let (leased, plain) = (leased.stats(), plain.stats());
        assert_eq!(leased, plain, "{strategy}");
        assert_eq!((leased.total.allowed, leased.total.denied), (40, 6));
        assert_eq!(leased.by_tier["pro"].allowed, 40);
        assert_eq!(leased.by_method["hot"].denied, 6);
    }
}

/// The one key of user key `user` under prefix `p`.
fn fleet_key_of(c: &mut redis::Connection, p: &str, user: &str) -> String {
    the_limiter_key(c, &format!("{p}:{{{user}}}*"))
}

#[tokio::test]
async fn a_refusal_held_in_the_process_is_answered_by_consume_now_without_redis() {
    let server = RedisServer::start();
    let mut c = server.connection();
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
    ] {
        // No leases: every admission is a round trip; a refusal is held until its retry time.
        let service = service_over(options(&server), &prefix("refusal-now"));
        let options = day_options(2, strategy);
        // The scripts loaded (a NOSCRIPT, then EVAL): the first call asks for the full reply
        // (Redis' time), the second takes the fixed window's hot script; only this key's
        // calls are counted below.
        for _ in 0..2 {
            assert!(service.consume("warm", &options).await.unwrap().allowed);
        }
        service.reset_stats();
        let before = script_calls(&mut c);
        // Nothing held yet: deferred, nothing spent.
        assert!(service.consume_now("k", &options).is_none());
        for _ in 0..2 {
            assert!(service.consume("k", &options).await.unwrap().allowed);
        }
        let refused = service.consume("k", &options).await.unwrap();
        assert!(!refused.allowed, "{strategy}");
        assert_eq!(script_calls(&mut c) - before, 3, "{strategy}");
        for _ in 0..10 {
            let held = service.consume_now("k", &options).expect("held").unwrap();
            assert!(!held.allowed, "{strategy}");
            let retry = held.retry_after.expect("a retry time");
            assert!(retry <= refused.retry_after.unwrap(), "{strategy}");
        }
        // `enforce` too: the refusal as an error, no round trip.
        let enforced = service
            .enforce("k", &options)
            .now_or_never()
            .expect("at once");
        assert!(matches!(enforced, Err(Error::Exceeded(_))), "{strategy}");
        assert_eq!(script_calls(&mut c) - before, 3, "{strategy}");
        assert_eq!(service.stats().total.denied, 12, "{strategy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_through_the_service_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let mut c = server.connection();
    for strategy in LEASED {
        let p = prefix("lease-service");
        let service = service_over(options(&server).leases(LeaseOptions::new(16)), &p);
        let options = day_options(1_024, strategy);
        assert!(service.consume("warm", &options).await.unwrap().allowed);
        service.reset_stats();
        let before = script_calls(&mut c);
        let admitted = ratelimit_tests::admitted_by_tasks(&service, &options, 64, 16, false);
        assert_eq!(admitted.await, 1_024, "{strategy}");
        // 1 024 decisions, 64 round trips: 1 per slice of 16.
        assert_eq!(script_calls(&mut c) - before, 64, "{strategy}");
        let key = fleet_key_of(&mut c, &p, "shared-key");
        assert_eq!(spent(&mut c, &key, &quota(1_024, strategy)), 1_024);
        let refused = ratelimit_tests::admitted_by_tasks(&service, &options, 64, 10, false);
        assert_eq!(refused.await, 0, "{strategy}");
        assert_eq!(script_calls(&mut c) - before, 65, "{strategy}");
        let stats = service.stats().by_method["hot"];
        assert_eq!((stats.allowed, stats.denied), (1_024, 640), "{strategy}");
    }
}

/// Allocations made on this thread by `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ratelimit_tests::allocations();
    f();
    ratelimit_tests::allocations() - before
}

#[tokio::test]
async fn a_leased_decision_allocates_nothing() {
    let server = RedisServer::start();
    let service = service_over(
        options(&server).leases(LeaseOptions::new(1_000)),
        &prefix("lease-alloc"),
    );
    for strategy in LEASED {
        let options = day_options(10_000, strategy);
        // The grant, and this thread's buffers.
        assert!(service.consume("k", &options).await.unwrap().allowed);
        let now = || {
            let decided = service.consume_now("k", &options).expect("leased");
            assert!(decided.unwrap().allowed);
        };
        let consume = || {
            let decided = service.consume("k", &options).now_or_never();
            assert!(decided.expect("ready at once").unwrap().allowed);
        };
        now();
        consume();
        assert_eq!(
            allocations(|| (0..100).for_each(|_| now())),
            0,
            "{strategy}"
        );
        assert_eq!(
            allocations(|| (0..100).for_each(|_| consume())),
            0,
            "{strategy}"
        );
    }
}

#[ratelimit::rate_limit(limit = 40, window = "1d", strategy = "fixed-window")]
async fn leased_fn() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn an_annotated_fn_spends_its_lease_at_once_allocating_nothing() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let builder = ratelimit::Module::builder()
        .key_prefix(prefix("lease-fn"))
        .store(StoreConfig::Redis(
            options(&server).leases(LeaseOptions::new(16)),
        ));
    let module = ratelimit::testing::TestModule::new(builder).unwrap();
    // The grant (the script loaded first: a NOSCRIPT, then EVAL).
    module.scope(leased_fn()).await.unwrap();
    let granted = script_calls(&mut c);
    let at_once = || {
        let decided = leased_fn().now_or_never().expect("decided at once");
        decided.unwrap();
    };
    module.run(at_once);
    let allocated = allocations(|| module.run(|| (0..14).for_each(|_| at_once())));
    assert_eq!(allocated, 0);
    assert_eq!(script_calls(&mut c), granted, "16 calls, one slice");
    // The slice spent: the next call takes another.
    module.scope(leased_fn()).await.unwrap();
    assert_eq!(script_calls(&mut c), granted + 1);
    let counts = module.stats().by_method;
    let (name, counts) = counts.iter().next().unwrap();
    assert!(name.ends_with("leased_fn"), "{name}");
    assert_eq!((counts.allowed, counts.denied), (17, 0));
}

/// A token bucket of capacity 10 under two quotas on one key: 10 a day, refilling 10 a day
/// (`fast`), and 1 a day with a burst of 9, refilling 1 a day (`slow`). The store key names
/// the strategy and window, not the limit, so both read one state.
fn two_quotas() -> (Quota, Quota) {
    let fast = Quota::new(10, DAY)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    let slow = Quota::new(1, DAY)
        .unwrap()
        .with_burst(9)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    assert_eq!(fast.capacity(), slow.capacity());
    (fast, slow)
}

/// A lease's units were priced for the quota that took them: spent under another quota of
/// the same capacity they admitted 18 calls at one instant where the plain path admits 9.
/// For any mix of quotas on a key, the leased path admits no more than the plain path.
#[tokio::test]
async fn a_lease_taken_under_one_quota_is_not_spent_under_another_on_the_same_key() {
    let server = RedisServer::start();
    let (leased, plain) = (leasing(&server, 32), plain(&server));
    let p = prefix("lease-two-quotas");
    let (fast, slow) = two_quotas();
    let mut admitted = Vec::new();
    for (name, store) in [("plain", &plain), ("leased", &leased)] {
        let key = format!("{p}:{name}");
        assert!(acquire(store, &key, &fast).await.unwrap().allowed);
        admitted.push(hammer(store, &key, &slow, 1, 30).await);
    }
    assert_eq!(admitted[0], 9, "the plain path");
    assert_eq!(
        admitted[1], 9,
        "the leased path admits what the plain path does"
    );
}

/// A refusal held in the process answered calls under any quota of the same capacity, so a
/// call that Redis would admit under a quota refilling faster (or slower) was refused until
/// the other quota's retry time. A refusal answers only calls under the quota it was given.
#[tokio::test]
async fn a_refusal_held_under_one_quota_does_not_refuse_another_of_the_same_capacity() {
    let server = RedisServer::start();
    let store = plain(&server);
    let key = format!("{}:k", prefix("refusal-two-quotas"));
    let (fast, slow) = two_quotas();
    // One token taken at a day's interval: the fast quota (a tenth of a day's interval, a
    // tolerance of 0.9 day) is refused for 2.4 h, the slow one has 9 left.
    assert!(acquire(&store, &key, &slow).await.unwrap().allowed);
    let refused = acquire(&store, &key, &fast).await.unwrap();
    assert!(!refused.allowed);
    for _ in 0..9 {
        assert!(
            acquire(&store, &key, &slow).await.unwrap().allowed,
            "Redis admits the slow quota"
        );
    }
    assert!(!acquire(&store, &key, &slow).await.unwrap().allowed);
}

/// The task that gives idle leases back ran on the runtime of the store's first grant, once:
/// when that runtime ended, no idle lease was ever given back again, so units leased from
/// another runtime stayed stranded (another process admitted 0 of them instead of the 15).
#[test]
fn idle_leases_are_given_back_after_the_runtime_of_the_first_grant_has_ended() {
    let server = RedisServer::start();
    let p = prefix("lease-idle-runtimes");
    let mut c = server.connection();
    let quota = quota(20, Strategy::FixedWindow);
    let store = RedisStore::new(
        options(&server).leases(LeaseOptions::new(16).idle(Duration::from_millis(20))),
    )
    .unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = format!("{p}:first");
    let first_runtime = runtime();
    assert!(
        first_runtime
            .block_on(acquire(&store, &first, &quota))
            .unwrap()
            .allowed
    );
    assert_eq!(spent(&mut c, &first, &quota), 16);
    drop(first_runtime);

    let second = format!("{p}:second");
    runtime().block_on(async {
        assert!(acquire(&store, &second, &quota).await.unwrap().allowed);
        assert_eq!(spent(&mut c, &second, &quota), 16);
        until_spent(&mut c, &second, &quota, 1).await;
        // The lease taken on the runtime that ended is given back too.
        until_spent(&mut c, &first, &quota, 1).await;
    });
    let other = plain(&server);
    let admitted = runtime().block_on(hammer(&other, &second, &quota, 1, 30));
    assert_eq!(admitted, 19);
}

/// A call that needed more units than its lease had left took a new slice and dropped the
/// leftover: one task, slices of 16, costs 4, 4, 4, 5 over and over, saw 794 of 1,000 units
/// admitted (206 recorded in Redis, never spent, never given back) against the documented
/// `processes x (slice - 1)` = 15. The leftover is spent with the new slice's units.
#[tokio::test]
async fn a_grant_over_an_unfinished_lease_spends_its_leftover_units_not_drops_them() {
    let server = RedisServer::start();
    let store = leasing(&server, 16);
    let p = prefix("lease-leftover");
    let mut c = server.connection();
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(1_000, strategy);
        let mut admitted = 0;
        for cost in [4, 4, 4, 5].into_iter().cycle().take(400) {
            use ratelimit::Clock as _;
            let now = ratelimit::SystemClock.now();
            let decision = Store::decide(&store, &key, &quota, cost, now, true)
                .await
                .unwrap();
            admitted += if decision.allowed { cost } else { 0 };
        }
        assert!(
            (1_000 - 15..=1_000).contains(&admitted),
            "{strategy}: {admitted} units admitted"
        );
        assert_eq!(spent(&mut c, &key, &quota), 1_000, "{strategy}");
    }
}

/// A reset from another process did not see the units leased out: process A held 9 units of
/// 10, B reset the key and spent 10, A spent its 9 (19 admitted after the reset); A's return
/// then took 9 off B's new count, and a third process admitted 9 more. A reset keeps counting
/// the units leased out at that moment (Redis records them beside the key); they come back
/// to the key when their lease is given back.
#[tokio::test]
async fn a_lease_does_not_outlive_a_reset_from_another_process() {
    let server = RedisServer::start();
    let p = prefix("lease-reset-elsewhere");
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(10, strategy);
        let (a, b, c) = (leasing(&server, 10), plain(&server), plain(&server));
        assert!(acquire(&a, &key, &quota).await.unwrap().allowed);
        assert!(Store::reset(&b, &key).await.unwrap());
        let by_b = hammer(&b, &key, &quota, 1, 30).await;
        let by_a = hammer(&a, &key, &quota, 1, 30).await;
        let returned = a.return_leases().await.unwrap();
        let by_c = hammer(&c, &key, &quota, 1, 30).await;
        assert!(
            by_a + by_b + by_c <= 10,
            "{strategy}: {by_a} + {by_b} + {by_c} admitted after the reset ({returned} returned)"
        );
        // What the lease had not spent, given back, is spent by the others.
        let key = format!("{p}:back:{strategy}");
        assert!(acquire(&a, &key, &quota).await.unwrap().allowed);
        assert!(Store::reset(&b, &key).await.unwrap());
        assert_eq!(hammer(&b, &key, &quota, 1, 30).await, 0, "{strategy}");
        assert_eq!(a.return_leases().await.unwrap(), 9, "{strategy}");
        assert_eq!(hammer(&c, &key, &quota, 1, 30).await, 9, "{strategy}");
    }
}

/// A lease outlived a Redis restarted empty: A held 9 units, the server restarted with no
/// state, B spent 10, and A spent its 9. A lease is spent only while the connection its grant
/// came over is open: a restart closes it.
#[tokio::test]
async fn a_lease_does_not_outlive_a_redis_restart() {
    let mut server = RedisServer::start();
    let p = prefix("lease-restart");
    for strategy in LEASED {
        let key = format!("{p}:{strategy}");
        let quota = quota(10, strategy);
        let (a, b) = (leasing(&server, 10), plain(&server));
        assert!(acquire(&a, &key, &quota).await.unwrap().allowed);
        server.stop();
        server.restart();
        // Real time, bounded: the restart must reach A's connection (its task reads the
        // end of the stream), as it does in production before anyone else can spend.
        let b_spent = async {
            loop {
                match acquire(&b, &key, &quota).await {
                    Ok(_) => return hammer(&b, &key, &quota, 1, 30).await + 1,
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        };
        let by_b = tokio::time::timeout(Duration::from_secs(10), b_spent)
            .await
            .unwrap();
        assert_eq!(by_b, 10, "{strategy}");
        let mut by_a = 0;
        for _ in 0..30 {
            by_a += u64::from(acquire(&a, &key, &quota).await.is_ok_and(|d| d.allowed));
        }
        assert_eq!(
            by_a, 0,
            "{strategy}: admitted from a lease of the state before"
        );
    }
}
