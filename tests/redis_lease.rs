//! Leased budgets on the Redis store (feature `redis`, `RedisOptions::leases`), against real
//! `redis-server` processes: exact counts across 64 tasks and across 4 processes, one round trip
//! per slice (counted by Redis' `INFO commandstats`), one budget shared with the plain path,
//! refusals, reset, and the units given back or left unspent (under-admission, measured).
//!
//! No window ends during a test: windows are a day long and the token bucket refills one token
//! per window. Waiting for the background task polls Redis' state, never the clock.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use ratelimit::{LeaseOptions, Quota, RedisOptions, RedisStore, Store, Strategy};
use ratelimit_tests::acquire;
use ratelimit_tests::redis_server::{prefix, script_calls, RedisCluster, RedisServer};

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
        // Keys spread over the nodes: each lease is one key, one slot.
        for user in ["a", "b", "c"] {
            let key = format!("{p}:{{{user}}}:{strategy}");
            assert!(acquire(&plain, &key, &quota).await.unwrap().allowed);
            assert_eq!(
                hammer(&leased, &key, &quota, 64, 20).await,
                999,
                "{strategy}"
            );
            assert!(!acquire(&plain, &key, &quota).await.unwrap().allowed);
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

/// The fleet's key, as the service composes it under prefix `p`.
fn fleet_key(c: &mut redis::Connection, p: &str) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{p}*")).query(c).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys[0].clone()
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
