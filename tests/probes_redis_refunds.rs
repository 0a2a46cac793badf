//! Probes of refunds on Redis (a spend kept for a refund is stamped by `lua/stacked.lua` and
//! given back by `lua/refund.lua`), from outside, kept as tests: several OS processes, dropped
//! futures, two quotas on one user key, leases and local refusals, keys without a hash tag on
//! a Cluster, a flushed script cache, a restart, garbage in the state, a rolled window, and the
//! failover wrapper's local decisions. Each asserts the budget never goes above the quota and a
//! refund gives back only to the state it was spent from.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratelimit::store::{Mode, Request, Store, StoreKey};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Error, FailurePolicy, LeaseOptions, Module, Options, Quota,
    RateLimitService, RedisOptions, RedisStore, StoreConfig, Strategy, Tier,
};
use ratelimit_tests::redis_server::{
    four_workers, prefix, script_calls, state_key, RedisCluster, RedisServer,
};
use ratelimit_tests::remaining;

const STRATEGIES: [Strategy; 4] = [
    Strategy::FixedWindow,
    Strategy::SlidingWindow,
    Strategy::SlidingWindowCounter,
    Strategy::TokenBucket,
];

const DAY: Duration = Duration::from_secs(86_400);

fn per_day(limit: u64, strategy: Strategy) -> Options {
    Options::new().limit(limit).window(DAY).strategy(strategy)
}

fn single(server: &RedisServer, name: &str) -> RateLimitService {
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    ratelimit_tests::redis_service(options, &prefix(name))
}

/// 4 `redis-worker` processes in `refund` mode, 16 tasks of 8 kept spends each on one key
/// (limit `limit`, fixed window of 20 days): the total each says it kept.
fn four_refunding(urls: &[String], cluster: bool, p: &str, limit: u64) -> u64 {
    let worker = env!("CARGO_BIN_EXE_redis-worker");
    let limit = limit.to_string();
    let sizes = [limit.as_str(), "16", "8"];
    let fixed = Strategy::FixedWindow.as_str();
    four_workers(worker, urls, cluster, p, fixed, sizes, Some("refund"))
}

/// 512 kept spends from 4 processes against a limit of 300, every other admitted one given
/// back (each refund must give): what is spent in Redis is exactly what the processes kept,
/// never above the limit, on one server and on a Cluster.
#[test]
fn four_processes_refunding_every_other_spend_leave_exactly_what_they_kept() {
    const LIMIT: u64 = 300;
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    for (store, urls, is_cluster) in [
        ("redis", vec![server.url()], false),
        ("cluster", cluster.urls(), true),
    ] {
        let p = prefix(&format!("probes_refunds_procs_{store}"));
        let kept = four_refunding(&urls, is_cluster, &p, LIMIT);
        assert!(kept <= LIMIT, "{store}: kept {kept}");
        let options = RedisOptions::cluster(urls.clone()).timeout(Duration::from_secs(5));
        let options = if is_cluster {
            options
        } else {
            RedisOptions::new(server.url()).timeout(Duration::from_secs(5))
        };
        let service = ratelimit_tests::redis_service(options, &p);
        let runtime = ratelimit_tests::two_workers();
        let left = runtime.block_on(async {
            let limit = Options::new()
                .limit(LIMIT)
                .window(Duration::from_secs(20 * 24 * 3_600))
                .strategy(Strategy::FixedWindow);
            remaining(&service, "shared-key", &limit).await
        });
        assert_eq!(LIMIT - left, kept, "{store}: {left} left, {kept} kept");
        // 512 attempts, half of the admitted given back: the limit was reached, so the
        // refunds were made under contention (kept is exactly the limit or one short of
        // what the last refunds freed).
        assert!(kept > LIMIT / 2, "{store}: kept {kept}");
    }
}

/// A kept spend whose future is dropped mid round trip (the server frozen, the caller gives
/// up) spends at most its own cost; a later kept spend's refund gives back exactly its own.
#[tokio::test]
async fn a_dropped_spend_future_never_leaves_the_budget_above_the_quota() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_dropped");
    for strategy in STRATEGIES {
        let options = per_day(5, strategy);
        let key = format!("dropped-{strategy:?}");
        // Dropped before its first poll, and at once after it.
        let never = service.spend(&key, &options);
        drop(never);
        for _ in 0..20 {
            let _ = tokio::time::timeout(Duration::ZERO, service.spend(&key, &options)).await;
        }
        // Each dropped spend spent its unit or none; a kept one then gives back exactly its
        // own, and nothing is ever admitted past what is left.
        let left = remaining(&service, &key, &options).await;
        if left > 0 {
            let spent = service.spend(&key, &options).await.expect("spent");
            assert!(spent.decision().allowed, "{strategy:?}");
            assert_eq!(remaining(&service, &key, &options).await, left - 1);
            assert!(spent.refund().await.expect("given"), "{strategy:?}");
            assert_eq!(remaining(&service, &key, &options).await, left);
        }
        let mut admitted = 0;
        while service.consume(&key, &options).await.unwrap().allowed {
            admitted += 1;
        }
        assert_eq!(admitted, left, "{strategy:?}");
        service.reset_with(&key, &options).await.expect("reset");

        server.pause();
        let gave_up =
            tokio::time::timeout(Duration::from_millis(100), service.spend(&key, &options)).await;
        server.resume();
        assert!(gave_up.is_err(), "{strategy:?}: {gave_up:?}");
        // The frozen script runs (or not) once the server thaws: at most its one unit.
        let mut left = None;
        for _ in 0..50 {
            if let Ok(s) = service.status(&key, &options).await {
                left = Some(s.remaining);
                break;
            }
        }
        let left = left.expect("Redis answers again");
        assert!(left == 5 || left == 4, "{strategy:?}: {left}");
        let spent = service.spend(&key, &options).await.expect("spent");
        assert!(spent.decision().allowed);
        assert_eq!(remaining(&service, &key, &options).await, left - 1);
        assert!(spent.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(
            remaining(&service, &key, &options).await,
            left,
            "{strategy:?}"
        );
    }
}

/// Two quotas on one user key differing in window or in strategy (two states): a refund of a
/// spend made under one gives back to it alone. Quotas differing only in limit share one
/// state (the store key names the strategy and window, not the limit): see
/// `quotas_differing_only_in_limit_share_the_state_a_refund_gives_back_to`.
#[tokio::test]
async fn a_refund_under_one_quota_never_changes_another_on_the_same_key() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_two_quotas");
    let pairs = [
        (
            per_day(3, Strategy::FixedWindow),
            per_day(3, Strategy::FixedWindow).window(Duration::from_secs(3_600 * 5)),
        ),
        (
            per_day(3, Strategy::SlidingWindow),
            per_day(3, Strategy::SlidingWindow).window(Duration::from_secs(3_600 * 5)),
        ),
        (
            per_day(3, Strategy::TokenBucket),
            per_day(3, Strategy::SlidingWindowCounter),
        ),
    ];
    for (i, (one, other)) in pairs.iter().enumerate() {
        let key = format!("shared-{i}");
        let spent = service.spend(&key, one).await.expect("spent");
        assert!(spent.decision().allowed);
        let other_limit = remaining(&service, &key, other).await;
        assert!(service.consume(&key, other).await.unwrap().allowed);
        let other_spent = service.spend(&key, other).await.expect("spent");
        assert_eq!(
            remaining(&service, &key, other).await,
            other_limit - 2,
            "{i}"
        );
        let one_left = remaining(&service, &key, one).await;
        assert!(spent.refund().await.expect("given"), "{i}");
        assert_eq!(remaining(&service, &key, one).await, one_left + 1, "{i}");
        assert_eq!(
            remaining(&service, &key, other).await,
            other_limit - 2,
            "{i}: the other quota's state changed"
        );
        assert!(other_spent.refund().await.expect("given"), "{i}");
        assert_eq!(
            remaining(&service, &key, other).await,
            other_limit - 1,
            "{i}"
        );
        assert_eq!(remaining(&service, &key, one).await, one_left + 1, "{i}");
    }
}

/// Two quotas differing only in limit on one user key share one state: a spend under the
/// smaller, given back, gives back to that state once, never past the larger quota nor the
/// smaller one.
#[tokio::test]
async fn quotas_differing_only_in_limit_share_the_state_a_refund_gives_back_to() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_limits");
    for strategy in STRATEGIES {
        let (small, large) = (per_day(3, strategy), per_day(5, strategy));
        let key = format!("limits-{strategy:?}");
        let spent = service.spend(&key, &small).await.expect("spent");
        assert!(service.consume(&key, &large).await.unwrap().allowed);
        let (large_left, small_left) = (
            remaining(&service, &key, &large).await,
            remaining(&service, &key, &small).await,
        );
        assert!(spent.refund().await.expect("given"), "{strategy:?}");
        let (large_after, small_after) = (
            remaining(&service, &key, &large).await,
            remaining(&service, &key, &small).await,
        );
        if strategy != Strategy::TokenBucket {
            // Counts: one unit each way.
            assert_eq!((large_left, small_left), (3, 1), "{strategy:?}");
            assert_eq!((large_after, small_after), (4, 2), "{strategy:?}");
        }
        // A bucket's state is a time, read in each limit's own tokens: given back, but
        // never past either quota.
        assert!(large_after > large_left && large_after <= 5, "{strategy:?}");
        assert!(small_after > small_left && small_after <= 3, "{strategy:?}");
        let spent = service.spend(&key, &large).await.expect("spent");
        assert!(spent.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(remaining(&service, &key, &large).await, large_after);
        assert_eq!(remaining(&service, &key, &small).await, small_after);
    }
}

/// With leases on, a kept spend is Redis' own (stamped, refundable), never a leased unit: its
/// refund gives it back to the state in Redis.
#[tokio::test]
async fn a_kept_spend_is_never_answered_from_a_lease() {
    let server = RedisServer::start();
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(2))
        .leases(LeaseOptions::new(8));
    let service = ratelimit_tests::redis_service(options, &prefix("probes_refunds_leases"));
    for strategy in [Strategy::FixedWindow, Strategy::TokenBucket] {
        let options = per_day(100, strategy);
        let key = format!("leased-{strategy:?}");
        // Plain calls: a lease is granted and units are spent from it.
        for _ in 0..5 {
            assert!(service.consume(&key, &options).await.unwrap().allowed);
        }
        let before = remaining(&service, &key, &options).await;
        for _ in 0..10 {
            let spent = service.spend(&key, &options).await.expect("spent");
            assert!(spent.decision().allowed, "{strategy:?}");
            assert!(spent.refundable(), "{strategy:?}: answered from a lease");
            assert!(spent.refund().await.expect("given"), "{strategy:?}");
        }
        assert_eq!(
            remaining(&service, &key, &options).await,
            before,
            "{strategy:?}"
        );
    }
}

/// A refusal held in the process (local refusals) no longer holds once a refund gave back:
/// the next call is admitted, by Redis.
#[tokio::test]
async fn a_refund_clears_a_local_refusal_that_no_longer_holds() {
    let server = RedisServer::start();
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(2))
        .local_refusals(100);
    let service = ratelimit_tests::redis_service(options, &prefix("probes_refunds_refusals"));
    for strategy in STRATEGIES {
        let options = per_day(2, strategy);
        let key = format!("refused-{strategy:?}");
        let first = service.spend(&key, &options).await.expect("spent");
        let _second = service.spend(&key, &options).await.expect("spent");
        // Refused by Redis, then held in the process.
        for _ in 0..3 {
            assert!(!service.consume(&key, &options).await.unwrap().allowed);
        }
        assert!(first.refund().await.expect("given"), "{strategy:?}");
        assert!(
            service.consume(&key, &options).await.unwrap().allowed,
            "{strategy:?}: a stale local refusal"
        );
        assert!(!service.consume(&key, &options).await.unwrap().allowed);
        assert_eq!(remaining(&service, &key, &options).await, 0);
    }
}

/// One budget for every caller (no `key`): its store key has the empty tag `{}`.
#[rate_limit(limit = 3, window = "1d", count = "err")]
async fn untagged(fail: bool) -> Result<(), Error> {
    match fail {
        true => Err(Error::InvalidKey { reason: "failed" }),
        false => Ok(()),
    }
}

/// On a Cluster, a store key without a hash tag (an annotated fn without `key`, and a plain
/// store key used directly): the stamp key is in the key's slot, so a kept spend and its
/// refund are no CROSSSLOT error.
#[test]
fn a_key_without_a_hash_tag_keeps_its_stamp_in_its_slot_on_a_cluster() {
    let cluster = RedisCluster::start();
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let builder = Module::builder()
        .key_prefix(prefix("probes_refunds_untagged"))
        .store(StoreConfig::Redis(nodes.clone()));
    let m = TestModule::new(builder).expect("module");
    let runtime = ratelimit_tests::two_workers();
    runtime.block_on(async {
        for _ in 0..5 {
            m.scope(untagged(false)).await.expect("passes, given back");
        }
        for _ in 0..3 {
            let failed = m.scope(untagged(true)).await;
            assert!(
                matches!(failed, Err(Error::InvalidKey { .. })),
                "{failed:?}"
            );
        }
        let refused = m.scope(untagged(true)).await;
        assert!(matches!(refused, Err(Error::Exceeded(_))), "{refused:?}");
        assert_eq!(m.stats().total.refunded, 5);

        let store = RedisStore::new(nodes).expect("store");
        let quota = Quota::new(2, DAY).unwrap();
        for key in ["plain", "{}plain", "{"] {
            let key = StoreKey::new(key).unwrap();
            for _ in 0..2 {
                let request = Request::new(key, &quota, 1, 0, Mode::Keep).unwrap();
                let decided = store.decide(request).await.expect("no CROSSSLOT");
                assert!(decided.allowed, "{key:?}");
            }
            let request = Request::new(key, &quota, 1, 0, Mode::Keep).unwrap();
            assert!(!store.decide(request).await.unwrap().allowed, "{key:?}");
        }
    });
}

/// The script cache flushed between a spend and its refund: the refund script is sent again
/// (NOSCRIPT) and gives back.
#[tokio::test]
async fn a_refund_after_script_flush_is_sent_again_and_gives() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_flush");
    let mut redis = server.connection();
    for strategy in STRATEGIES {
        let options = per_day(3, strategy);
        let key = format!("flush-{strategy:?}");
        let spent = service.spend(&key, &options).await.expect("spent");
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut redis).unwrap();
        assert!(spent.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(remaining(&service, &key, &options).await, 3, "{strategy:?}");
        let spent = service.spend(&key, &options).await.expect("spent");
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut redis).unwrap();
        assert!(spent.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(remaining(&service, &key, &options).await, 3, "{strategy:?}");
    }
}

/// Redis restarted (every key lost) and nothing made the key again: the refund gives
/// nothing, and the key is not made by it (the budget stays full, never above).
#[tokio::test]
async fn a_refund_after_a_restart_without_a_new_state_gives_nothing() {
    let mut server = RedisServer::start();
    let service = single(&server, "probes_refunds_restart");
    for strategy in STRATEGIES {
        let options = per_day(3, strategy);
        let key = format!("restart-{strategy:?}");
        let spent = service.spend(&key, &options).await.expect("spent");
        server.stop();
        server.restart();
        // The first calls after the restart may find the old connection gone (a look
        // writes nothing).
        for _ in 0..50 {
            if service.status(&key, &options).await.is_ok() {
                break;
            }
        }
        assert!(!spent.refund().await.expect("answered"), "{strategy:?}");
        assert_eq!(remaining(&service, &key, &options).await, 3, "{strategy:?}");
        let mut redis = server.connection();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis).unwrap();
        assert!(keys.is_empty(), "{strategy:?}: {keys:?}");
    }
}

/// The state key replaced between a spend and its refund, by another type or by another
/// strategy's value: the refund is an error or gives nothing, never a panic, and writes
/// nothing there.
#[tokio::test]
async fn a_refund_onto_a_replaced_state_is_an_error_or_nothing() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    for (i, strategy) in STRATEGIES.into_iter().enumerate() {
        let p = prefix(&format!("probes_refunds_garbage_{i}"));
        let service = single_with(&server, &p);
        let options = per_day(3, strategy);
        let plants: [(&str, &[&str]); 5] = [
            ("hash", &["HSET", "", "f", "1"]),
            ("list", &["RPUSH", "", "x"]),
            ("bucket", &["SET", "", "T99999999999999"]),
            ("window", &["SET", "", "F1:2"]),
            ("text", &["SET", "", "nonsense"]),
        ];
        for (what, command) in plants {
            let spent = service.spend("g", &options).await.expect("spent");
            let state = state_key(&mut redis, &p);
            let before: Vec<u8> = redis::cmd("DUMP").arg(&state).query(&mut redis).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&state).query(&mut redis).unwrap();
            let _: () = redis::cmd("DEL").arg(&state).query(&mut redis).unwrap();
            let mut cmd = redis::cmd(command[0]);
            cmd.arg(&state);
            for a in &command[2..] {
                cmd.arg(*a);
            }
            let _: () = cmd.query(&mut redis).unwrap();
            let dumped: Vec<u8> = redis::cmd("DUMP").arg(&state).query(&mut redis).unwrap();
            let given = spent.refund().await;
            assert!(
                matches!(given, Ok(false) | Err(Error::UnexpectedState { .. })),
                "{strategy:?} {what}: {given:?}"
            );
            let after: Vec<u8> = redis::cmd("DUMP").arg(&state).query(&mut redis).unwrap();
            assert_eq!(after, dumped, "{strategy:?} {what}: the refund wrote");
            // The state put back: the spend still counts there.
            let _: () = redis::cmd("DEL").arg(&state).query(&mut redis).unwrap();
            let _: () = redis::cmd("RESTORE")
                .arg(&state)
                .arg(ttl)
                .arg(before)
                .query(&mut redis)
                .unwrap();
            assert_eq!(service.status("g", &options).await.unwrap().remaining, 2);
            service.reset_with("g", &options).await.expect("reset");
        }
    }
}

fn single_with(server: &RedisServer, p: &str) -> RateLimitService {
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    ratelimit_tests::redis_service(options, p)
}

/// A spend of the whole limit (cost = limit) given back: exactly the quota again, never
/// more; a second spend's refund of it after a reset gives nothing.
#[tokio::test]
async fn a_refund_of_the_whole_limit_gives_back_exactly_the_quota() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_huge");
    for strategy in STRATEGIES {
        for limit in [1u64, 7, 1_000] {
            let options = per_day(limit, strategy).cost(limit);
            let key = format!("huge-{strategy:?}-{limit}");
            let spent = service.spend(&key, &options).await.expect("spent");
            assert!(spent.decision().allowed, "{strategy:?} {limit}");
            let one = per_day(limit, strategy);
            assert_eq!(remaining(&service, &key, &one).await, 0, "{strategy:?}");
            assert!(!service.consume(&key, &one).await.unwrap().allowed);
            assert!(spent.refund().await.expect("given"), "{strategy:?} {limit}");
            assert_eq!(
                remaining(&service, &key, &one).await,
                limit,
                "{strategy:?} {limit}"
            );
            let again = service.spend(&key, &options).await.expect("spent");
            assert!(again.decision().allowed, "{strategy:?} {limit}");
            assert!(!service.consume(&key, &one).await.unwrap().allowed);
            assert!(again.refund().await.expect("given"));
            assert_eq!(remaining(&service, &key, &one).await, limit);
        }
    }
}

/// A refund after the spend's window rolled gives nothing, and the budget stays within the
/// quota. Redis decides on its own clock, so the window must really pass: a real sleep.
#[tokio::test]
async fn a_refund_after_the_window_rolled_gives_nothing() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_rolled");
    for strategy in STRATEGIES {
        let options = Options::new()
            .limit(2)
            .window(Duration::from_millis(200))
            .strategy(strategy);
        let key = format!("rolled-{strategy:?}");
        let spent = service.spend(&key, &options).await.expect("spent");
        let other = service.spend(&key, &options).await.expect("spent");
        assert!(spent.decision().allowed && other.decision().allowed);
        // Redis' clock, not the test's: the window has to pass in real time (two windows,
        // so a sliding window's previous one has rolled out too).
        tokio::time::sleep(Duration::from_millis(450)).await;
        // The newest spend must still hold its window when it is given back below: a fixed
        // window is aligned to the epoch, so a spend late in one (Redis' clock is this
        // machine's) saw its window roll before its refund, one run in ten.
        let into = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 200;
        if into > 100 {
            tokio::time::sleep(Duration::from_millis(205 - into as u64)).await;
        }
        let new = service.spend(&key, &options).await.expect("spent");
        assert!(new.decision().allowed, "{strategy:?}");
        assert!(!spent.refund().await.expect("answered"), "{strategy:?}");
        assert!(!other.refund().await.expect("answered"), "{strategy:?}");
        let left = remaining(&service, &key, &options).await;
        assert!(left <= 2, "{strategy:?}: {left}");
        assert!(new.refund().await.expect("given"), "{strategy:?}");
        assert!(remaining(&service, &key, &options).await <= 2);
    }
}

/// The failover wrapper deciding locally while Redis is away: such a spend is not
/// refundable, and its refund never reaches Redis (no script runs on the server after).
#[tokio::test]
async fn a_spend_decided_locally_by_the_failover_policy_is_not_refundable() {
    let mut server = RedisServer::start();
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_millis(300))
        .on_failure(FailurePolicy::Local { pods: 1 });
    let config = Config::builder()
        .key_prefix(prefix("probes_refunds_failover"))
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    let options = per_day(5, Strategy::FixedWindow);
    let kept = service.spend("f", &options).await.expect("spent");
    assert!(kept.refundable());
    server.stop();
    let mut local = Vec::new();
    for _ in 0..3 {
        let spent = service.spend("f", &options).await.expect("decided locally");
        assert!(spent.decision().allowed);
        assert!(!spent.refundable(), "a local decision carries no stamp");
        local.push(spent);
    }
    server.restart();
    let mut redis = server.connection();
    let calls = script_calls(&mut redis);
    for spent in local {
        assert!(!spent.refund().await.expect("nothing"));
    }
    assert_eq!(
        script_calls(&mut redis),
        calls,
        "a local refund reached Redis"
    );
}

/// Every key the store wrote (states and their stamps) has an expiry, after kept spends,
/// refunds (one emptying the state), and a stacked spend: no stamp key is left forever.
#[tokio::test]
async fn no_stamp_key_is_left_without_an_expiry() {
    let server = RedisServer::start();
    let p = prefix("probes_refunds_ttl");
    let service = single_with(&server, &p);
    let mut redis = server.connection();
    for strategy in STRATEGIES {
        let options = per_day(3, strategy);
        let key = format!("ttl-{strategy:?}");
        let a = service.spend(&key, &options).await.expect("spent");
        let b = service.spend(&key, &options).await.expect("spent");
        assert!(service.consume(&key, &options).await.unwrap().allowed);
        assert!(b.refund().await.expect("given"));
        let c = service.spend(&key, &options).await.expect("spent");
        assert!(a.refund().await.expect("given"));
        assert!(c.refund().await.expect("given"));
        let lone = format!("lone-{strategy:?}");
        let only = service.spend(&lone, &options).await.expect("spent");
        assert!(only.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(remaining(&service, &lone, &options).await, 3);
    }
    let stacked = [
        ("s", &per_day(3, Strategy::TokenBucket).budget("one")),
        ("s", &per_day(3, Strategy::SlidingWindow).budget("two")),
    ];
    let spent = service.spend_all(&stacked).await.expect("spent");
    assert!(spent.refund().await.expect("given"));
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis).unwrap();
    assert!(keys.iter().any(|k| k.ends_with(":stamp")), "{keys:?}");
    for k in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(k).query(&mut redis).unwrap();
        // -1: no expiry (0 or -2: a bucket given back to full expires at once).
        assert_ne!(ttl, -1, "{k} has no expiry");
    }
}

/// One stacked spend naming one state twice (the same key and options, or quotas differing
/// only in limit, which share a state): both looked at before either records would spend
/// past the smaller quota; it is refused, with nothing spent.
#[tokio::test]
async fn a_stacked_spend_naming_one_state_twice_stays_within_the_quota() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_twice");
    for strategy in STRATEGIES {
        let (small, large) = (per_day(3, strategy), per_day(5, strategy));
        for (case, pair) in [("same", [&small, &small]), ("limits", [&small, &large])] {
            let key = format!("twice-{case}-{strategy:?}");
            let both = [(key.as_str(), pair[0]), (key.as_str(), pair[1])];
            // Refused as a key error, before anything is spent.
            for _ in 0..4 {
                let refused = service.spend_all(&both).await;
                assert!(
                    matches!(refused, Err(Error::InvalidKey { .. })),
                    "{case} {strategy:?}: {:?}",
                    refused.map(|s| s.decisions().to_vec())
                );
            }
            assert_eq!(remaining(&service, &key, &small).await, 3, "{case}");
            assert_eq!(remaining(&service, &key, &large).await, 5, "{case}");
        }
    }
}

/// Stacked limits on two user keys (two hash tags: two slots on a Cluster): a kept spend is
/// an error or is admitted and given back to both, never half.
#[tokio::test]
async fn a_stacked_spend_over_two_user_keys_on_a_cluster_is_whole_or_an_error() {
    let cluster = RedisCluster::start();
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let service = ratelimit_tests::redis_service(nodes, &prefix("probes_refunds_two_slots"));
    let a = per_day(3, Strategy::FixedWindow).budget("a");
    let b = per_day(3, Strategy::FixedWindow).budget("b");
    let both = [("alice", &a), ("bob", &b)];
    match service.spend_all(&both).await {
        Ok(spent) => {
            assert!(spent.refundable());
            assert!(spent.refund().await.expect("given"));
        }
        Err(e) => eprintln!("two slots: {e}"),
    }
    assert_eq!(remaining(&service, "alice", &a).await, 3);
    assert_eq!(remaining(&service, "bob", &b).await, 3);
}

/// A refund of a spend with many newer calls after it (past the sliding log's 64-entry
/// chunks, whose newer entries are rewritten): exactly its own unit comes back, and the
/// calls admitted after it are exactly what remains.
#[tokio::test]
async fn a_refund_behind_many_newer_calls_gives_exactly_its_own_cost() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_deep");
    for strategy in STRATEGIES {
        let options = per_day(300, strategy);
        let two = per_day(300, strategy).cost(2);
        let key = format!("deep-{strategy:?}");
        let old = service.spend(&key, &two).await.expect("spent");
        assert!(service.consume(&key, &options).await.unwrap().allowed);
        let middle = service.spend(&key, &options).await.expect("spent");
        for _ in 0..130 {
            assert!(service.consume(&key, &options).await.unwrap().allowed);
        }
        let late = service.spend(&key, &two).await.expect("spent");
        for _ in 0..3 {
            assert!(service.consume(&key, &options).await.unwrap().allowed);
        }
        // 2 + 1 + 1 + 130 + 2 + 3 spent.
        assert_eq!(remaining(&service, &key, &options).await, 161);
        assert!(old.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(
            remaining(&service, &key, &options).await,
            163,
            "{strategy:?}"
        );
        assert!(middle.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(
            remaining(&service, &key, &options).await,
            164,
            "{strategy:?}"
        );
        assert!(late.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(
            remaining(&service, &key, &options).await,
            166,
            "{strategy:?}"
        );
        let mut admitted = 0;
        while service.consume(&key, &options).await.unwrap().allowed {
            admitted += 1;
            assert!(admitted <= 166, "{strategy:?}");
        }
        assert_eq!(admitted, 166, "{strategy:?}");
    }
}

/// Two tiers (different limits and windows) on one user key: a refund of a spend made under
/// one gives back to that tier's state alone.
#[tokio::test]
async fn a_refund_under_one_tier_never_changes_another_tier() {
    let server = RedisServer::start();
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let config = Config::builder()
        .key_prefix(prefix("probes_refunds_tiers"))
        .store(StoreConfig::Redis(options))
        .tier(Tier::new("free", 3).window("1d"))
        .tier(Tier::new("pro", 10).window("1h"))
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    let (free, pro) = (Options::for_tier("free"), Options::for_tier("pro"));
    let spent = service.spend("u", &free).await.expect("spent");
    assert!(spent.refundable());
    let pro_spent = service.spend("u", &pro).await.expect("spent");
    assert!(service.consume("u", &pro).await.unwrap().allowed);
    assert_eq!(remaining(&service, "u", &free).await, 2);
    assert_eq!(remaining(&service, "u", &pro).await, 8);
    assert!(spent.refund().await.expect("given"));
    assert_eq!(remaining(&service, "u", &free).await, 3);
    assert_eq!(
        remaining(&service, "u", &pro).await,
        8,
        "the other tier changed"
    );
    assert!(pro_spent.refund().await.expect("given"));
    assert_eq!(remaining(&service, "u", &pro).await, 9);
    assert_eq!(remaining(&service, "u", &free).await, 3);
}

/// A refund whose future is dropped mid round trip (the server frozen) gives back at most
/// once: the budget is the spend's own unit back or not, never more.
#[tokio::test]
async fn a_dropped_refund_future_gives_back_at_most_once() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_dropped_refund");
    for strategy in STRATEGIES {
        let options = per_day(3, strategy);
        let key = format!("dropped-refund-{strategy:?}");
        let kept = service.spend(&key, &options).await.expect("spent");
        let spent = service.spend(&key, &options).await.expect("spent");
        assert_eq!(remaining(&service, &key, &options).await, 1);
        server.pause();
        let gave_up = tokio::time::timeout(Duration::from_millis(100), spent.refund()).await;
        server.resume();
        assert!(gave_up.is_err(), "{strategy:?}: {gave_up:?}");
        let mut left = None;
        for _ in 0..50 {
            if let Ok(s) = service.status(&key, &options).await {
                left = Some(s.remaining);
                break;
            }
        }
        let left = left.expect("Redis answers again");
        assert!(left == 1 || left == 2, "{strategy:?}: {left}");
        assert!(kept.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(
            remaining(&service, &key, &options).await,
            left + 1,
            "{strategy:?}"
        );
    }
}

/// Token bucket, refunds out of order: A and B kept (the bucket's arrival time 2 intervals
/// ahead), A given back (B's holding now ends one interval ahead), one interval later a plain
/// call C, then B given back: B's refund finds its instant still ahead and gives back most of
/// an interval, which is C's. Then 100 ms later, with A and B given back, C and what follows
/// are 4 calls within 100 ms on a full bucket of 3. Redis decides on its own clock, so the
/// interval (1 s) must pass in real time: a real sleep.
///
/// Found by helper 25 as a way through in the token bucket's refund rule itself (4 admitted
/// in about 100 ms); closed by the state's shift (`Gcra::refund`): B's end is taken as moved
/// back by A's refund, so it holds nothing by the time C is admitted.
#[tokio::test]
async fn token_bucket_refunds_out_of_order_give_back_a_later_call() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_bucket_order");
    let options = Options::new()
        .limit(3)
        .window(Duration::from_secs(3))
        .strategy(Strategy::TokenBucket);
    let a = service.spend("b", &options).await.expect("spent");
    let b = service.spend("b", &options).await.expect("spent");
    assert!(a.refund().await.expect("given"));
    tokio::time::sleep(Duration::from_millis(1_020)).await;
    let started = std::time::Instant::now();
    assert!(service.consume("b", &options).await.unwrap().allowed, "C");
    let given = b.refund().await.expect("answered");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut admitted = 1; // C
    while service.consume("b", &options).await.unwrap().allowed {
        admitted += 1;
    }
    let took = started.elapsed();
    eprintln!("B given back: {given}; {admitted} admitted in {took:?}");
    // Within a second, a bucket of 3 with A and B given back admits at most 3.
    assert!(
        took < Duration::from_millis(900),
        "too slow to tell: {took:?}"
    );
    assert!(
        admitted <= 3,
        "{admitted} admitted in {took:?} (B given: {given})"
    );
}

/// The same way through on the memory store, on a manual clock (exact): the rule is the
/// algorithm's, not Redis'.
#[tokio::test]
async fn token_bucket_refunds_out_of_order_give_back_a_later_call_on_memory_too() {
    let (service, clock) = ratelimit_tests::service(Config::default());
    let options = Options::new()
        .limit(3)
        .window(Duration::from_secs(3))
        .strategy(Strategy::TokenBucket);
    let a = service.spend("b", &options).await.expect("spent");
    let b = service.spend("b", &options).await.expect("spent");
    assert!(a.refund().await.expect("given"));
    clock.advance(Duration::from_millis(1_020));
    assert!(service.consume("b", &options).await.unwrap().allowed, "C");
    let given = b.refund().await.expect("answered");
    clock.advance(Duration::from_millis(100));
    let mut admitted = 1; // C
    while service.consume("b", &options).await.unwrap().allowed {
        admitted += 1;
    }
    assert!(
        admitted <= 3,
        "{admitted} admitted in 100 ms (B given: {given})"
    );
}

/// Under the failover wrapper, a spend Redis decided (stamped) and given back while Redis is
/// frozen: the refund is an error (never a `true` that Redis did not do), and once Redis
/// thaws, the state holds the spend or had it given back once, never more.
#[tokio::test]
async fn a_refund_while_redis_is_away_is_an_error_not_a_local_refund() {
    let server = RedisServer::start();
    let p = prefix("probes_refunds_away");
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_millis(300))
        .on_failure(FailurePolicy::Local { pods: 1 });
    let config = Config::builder()
        .key_prefix(p.as_str())
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    let options = per_day(5, Strategy::FixedWindow);
    let kept = service.spend("f", &options).await.expect("spent");
    let other = service.spend("f", &options).await.expect("spent");
    assert!(kept.refundable() && other.refundable());
    server.pause();
    let given = kept.refund().await;
    server.resume();
    assert!(given.is_err(), "answered without Redis: {given:?}");
    // Read from Redis itself (the wrapper may answer a status from its local share for a
    // while): the fixed window's count.
    let mut redis = server.connection();
    let state = state_key(&mut redis, &p);
    let count =
        |c: &mut redis::Connection| -> u64 { redis::cmd("GET").arg(&state).query(c).unwrap() };
    let held = count(&mut redis);
    assert!(held == 1 || held == 2, "{held}");
    assert!(other.refund().await.expect("given"));
    assert_eq!(count(&mut redis), held - 1);
}

/// 64 concurrent tasks spending from two stacked limits on one user key (a fixed window of
/// 20 and a sliding log of 30), each giving back every other admitted spend: each limit has
/// spent exactly what the tasks kept, on one server and on a Cluster.
#[test]
fn concurrent_stacked_spends_and_refunds_leave_exactly_what_was_kept() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let single = RedisOptions::new(server.url()).timeout(Duration::from_secs(10));
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    for (store, options) in [("redis", single), ("cluster", nodes)] {
        let service =
            ratelimit_tests::redis_service(options, &prefix(&format!("probes_stacked_{store}")));
        let runtime = ratelimit_tests::two_workers();
        runtime.block_on(async {
            let burst = per_day(20, Strategy::FixedWindow).budget("burst");
            let hourly = per_day(30, Strategy::SlidingWindow).budget("hourly");
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..64 {
                let (service, burst, hourly) = (service.clone(), burst.clone(), hourly.clone());
                tasks.spawn(async move {
                    let (mut kept, mut admitted) = (0u64, 0u64);
                    for _ in 0..3 {
                        let spent = service
                            .spend_all(&[("u", &burst), ("u", &hourly)])
                            .await
                            .expect("decided");
                        if !spent.decisions().iter().all(|d| d.allowed) {
                            assert!(!spent.refundable());
                            continue;
                        }
                        admitted += 1;
                        if admitted % 2 == 0 {
                            assert!(spent.refund().await.expect("given"));
                        } else {
                            kept += 1;
                        }
                    }
                    kept
                });
            }
            let mut kept = 0;
            while let Some(k) = tasks.join_next().await {
                kept += k.expect("task");
            }
            assert!(kept <= 20, "{store}: {kept}");
            assert_eq!(20 - remaining(&service, "u", &burst).await, kept, "{store}");
            assert_eq!(
                30 - remaining(&service, "u", &hourly).await,
                kept,
                "{store}"
            );
        });
    }
}

/// A token bucket given back to full by a reward: its state expires at once, and a plain call
/// makes the key again, with no shift. The stamp goes with the state it named (`stamp_follows`
/// in lua/beside.lua), so a spend of the old state gives nothing back to the new one. Found
/// while closing the out-of-order way through above: the stamp outlived its state (it expired
/// when the last kept spend's reset_at passed), and B's refund gave back D's token. Redis
/// expires the state on its own clock: a real wait of a few milliseconds.
#[tokio::test]
async fn a_bucket_made_again_after_a_reward_emptied_it_takes_no_old_refund() {
    let server = RedisServer::start();
    let service = single(&server, "probes_refunds_follow");
    let options = per_day(3, Strategy::TokenBucket);
    let _a = service.spend("f", &options).await.expect("spent");
    let b = service.spend("f", &options).await.expect("spent");
    service.reward("f", &options, 2).await.expect("rewarded");
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Two plain calls: the new arrival time passes B's (so B's refund is not refused for
    // ending after the state's arrival time).
    for call in ["C", "D"] {
        assert!(
            service.consume("f", &options).await.unwrap().allowed,
            "{call}"
        );
    }
    assert!(
        !b.refund().await.expect("answered"),
        "B gave back D's token"
    );
    assert_eq!(remaining(&service, "f", &options).await, 1);
}

/// A state deleted alone (by hand, or evicted under a `volatile-*` policy) leaves its stamp:
/// the next spend kept for a refund draws a new one (lua/stacked.lua), so a spend of the old
/// state gives nothing back to the new one, on every strategy.
#[tokio::test]
async fn a_stamp_whose_state_was_deleted_alone_names_no_state() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    for strategy in STRATEGIES {
        let p = prefix("probes_refunds_alone");
        let service = single_with(&server, &p);
        let options = per_day(3, strategy);
        let old = service.spend("d", &options).await.expect("spent");
        let state = state_key(&mut redis, &p);
        let _: u64 = redis::cmd("DEL").arg(&state).query(&mut redis).unwrap();
        let new = service.spend("d", &options).await.expect("spent");
        assert!(!old.refund().await.expect("answered"), "{strategy:?}");
        assert_eq!(remaining(&service, "d", &options).await, 2, "{strategy:?}");
        assert!(new.refund().await.expect("given"), "{strategy:?}");
        assert_eq!(remaining(&service, "d", &options).await, 3, "{strategy:?}");
    }
}

/// Helper 27's way through on Redis too, every strategy: limit 2, spends A and B kept, a
/// reward of 2 gives both back, C and D admitted, then A given back: A held nothing, so its
/// refund gives nothing and no fifth call is admitted (before, the counting strategies gave
/// A's unit back a second time). A reward on those deletes the stamp (lua/adjust.lua); the
/// token bucket counts it in its shift.
#[tokio::test]
async fn a_refund_after_an_emptying_reward_gives_nothing_on_redis() {
    let server = RedisServer::start();
    for strategy in STRATEGIES {
        let service = single(&server, "probes_refunds_reward");
        let options = per_day(2, strategy);
        let a = service.spend("r", &options).await.expect("spent");
        let _b = service.spend("r", &options).await.expect("spent");
        let level = service.reward("r", &options, 2).await.expect("rewarded");
        assert_eq!(level.remaining, 2, "{strategy:?}");
        for call in ["C", "D"] {
            let d = service.consume("r", &options).await.unwrap();
            assert!(d.allowed, "{strategy:?} {call}");
        }
        assert!(!a.refund().await.expect("answered"), "{strategy:?}");
        assert_eq!(remaining(&service, "r", &options).await, 0, "{strategy:?}");
    }
}
