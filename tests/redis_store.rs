//! The Redis store against real `redis-server` processes (feature `redis`): the same decisions
//! as the memory algorithms, one round trip each, Redis' clock, expiring keys, exact counts
//! across tasks and processes, the failure policies, and credentials kept out of sight.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit::store::{Request, Store, StoreKey};
use ratelimit::{
    Config, Error, FailurePolicy, ManualClock, Options, Quota, RateLimitService, RedisOptions,
    RedisStore, StoreConfig, Strategy,
};
use ratelimit_tests::acquire;
use ratelimit_tests::redis_server::{four_processes, prefix, RedisServer};

/// Long enough that no window boundary, refill or expiry happens during a test (and short
/// enough for the sliding window counter's exact arithmetic in Redis at these limits).
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

fn service(url: &str, prefix: &str, on_failure: FailurePolicy) -> RateLimitService {
    let options = RedisOptions::new(url)
        .timeout(Duration::from_secs(2))
        .on_failure(on_failure);
    ratelimit_tests::redis_service(options, prefix)
}

fn store(server: &RedisServer) -> RedisStore {
    RedisStore::new(RedisOptions::new(server.url()).timeout(Duration::from_secs(2))).expect("store")
}

fn command_stats(c: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Watches a server with `redis-cli monitor`: every command it runs, with who sent it.
struct Monitor {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Monitor {
    fn start(server: &RedisServer) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("redis-cli")
            .args(["-p", &server.port().to_string(), "monitor"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("redis-cli monitor");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "OK");
        Monitor { child, lines }
    }

    /// The commands seen until `ECHO <marker>` (sent by the caller), as (sender, command):
    /// the sender is "lua" for commands a script ran.
    fn until(&mut self, marker: &str) -> Vec<(String, String)> {
        let mut seen = Vec::new();
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if line.contains(marker) {
                break;
            }
            // 1700000000.123456 [0 127.0.0.1:40000] "evalsha" "..."
            let (Some(open), Some(close)) = (line.find('['), line.find(']')) else {
                continue;
            };
            let sender = line[open + 1..close]
                .split(' ')
                .nth(1)
                .unwrap_or("")
                .to_owned();
            let command = line[close + 1..].trim().split(' ').next().unwrap_or("");
            seen.push((sender, command.trim_matches('"').to_lowercase()));
        }
        seen
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn one_round_trip_per_decision() {
    let server = RedisServer::start();
    // Every refusal asked of Redis too, not answered in the process.
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(2))
        .local_refusals(0);
    let store = RedisStore::new(options).expect("store");
    let p = prefix("trip");
    store.connect().await.unwrap();
    let mut c = server.connection();
    let mut monitor = Monitor::start(&server);
    for strategy in Strategy::ALL {
        let quota = Quota::new(3, LONG).unwrap().with_strategy(strategy);
        for i in 0..10 {
            let d = acquire(&store, &format!("{p}:{strategy}"), &quota)
                .await
                .unwrap();
            assert_eq!(d.allowed, i < 3, "{strategy} call {i}");
        }
        let now = ratelimit::Clock::now(&ratelimit::SystemClock);
        let key = format!("{p}:{strategy}");
        let look = Request::look(StoreKey::new(&key).unwrap(), &quota, 1, now).unwrap();
        Store::decide(&store, look).await.unwrap();
        let marker = format!("end-of-{strategy}");
        redis::cmd("ECHO").arg(&marker).exec(&mut c).unwrap();
        let seen = monitor.until(&marker);
        let from_clients: Vec<&str> = seen
            .iter()
            .filter(|(sender, _)| sender != "lua")
            .map(|(_, command)| command.as_str())
            .collect();
        // 11 decisions, 11 commands sent: one script call each, everything else ran inside
        // it. Each is an EVALSHA but the first run of the fixed window's hot script of this
        // quota's own, an EVAL with its source (loading it, in the same round trip).
        let mut expected = vec!["evalsha"; 11];
        if strategy == Strategy::FixedWindow {
            expected[1] = "eval";
        }
        assert_eq!(from_clients, expected, "{strategy}: {seen:?}");
        assert!(seen.iter().any(|(_, cmd)| cmd == "time"), "{strategy}");
    }
}

#[tokio::test]
async fn refused_calls_on_a_hot_key_do_not_reach_redis() {
    let server = RedisServer::start();
    let store = store(&server);
    let p = prefix("refusals");
    store.connect().await.unwrap();
    let mut c = server.connection();
    let evalsha = |c: &mut redis::Connection| command_stats(c).get("evalsha").copied().unwrap_or(0);
    for strategy in Strategy::ALL {
        let key = format!("{p}:{strategy}");
        let quota = Quota::new(3, LONG).unwrap().with_strategy(strategy);
        for _ in 0..3 {
            assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
        }
        let before = evalsha(&mut c);
        let first = acquire(&store, &key, &quota).await.unwrap();
        assert!(!first.allowed, "{strategy}");
        for _ in 0..1_000 {
            let d = acquire(&store, &key, &quota).await.unwrap();
            assert!(!d.allowed, "{strategy}: {d:?}");
            assert!(d
                .retry_after
                .is_some_and(|r| r <= first.retry_after.unwrap()));
        }
        // The first refusal asked Redis; the thousand after it did not.
        assert_eq!(evalsha(&mut c) - before, 1, "{strategy}");
        // A reset through this store (a script of its own) clears the refusal: the next
        // call asks Redis again.
        assert!(Store::reset(&store, &key).await.unwrap());
        let before = evalsha(&mut c);
        assert!(
            acquire(&store, &key, &quota).await.unwrap().allowed,
            "{strategy}"
        );
        assert_eq!(evalsha(&mut c) - before, 1, "{strategy}");
    }
}

#[tokio::test]
async fn scripts_are_loaded_again_after_a_script_flush() {
    let server = RedisServer::start();
    let store = store(&server);
    let p = prefix("flush");
    let quota = Quota::new(2, LONG)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    assert!(acquire(&store, &p, &quota).await.unwrap().allowed);
    let mut c = server.connection();
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut c).unwrap();
    redis::cmd("CONFIG").arg("RESETSTAT").exec(&mut c).unwrap();
    assert!(acquire(&store, &p, &quota).await.unwrap().allowed);
    assert!(!acquire(&store, &p, &quota).await.unwrap().allowed);
    let stats = command_stats(&mut c);
    // NOSCRIPT, the retry with the source (EVAL: loaded and run in one round trip), then one
    // EVALSHA again.
    assert_eq!(stats.get("evalsha"), Some(&2), "{stats:?}");
    assert_eq!(stats.get("eval"), Some(&1), "{stats:?}");
    assert_eq!(stats.get("script|load"), None, "{stats:?}");
}

/// How many scripts the server holds (`INFO memory`).
fn cached_scripts(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory names its cached scripts")
}

#[tokio::test]
async fn a_store_loads_at_most_256_own_fixed_window_scripts_and_decides_exactly_past_them() {
    let server = RedisServer::start();
    let store = store(&server);
    store.connect().await.unwrap();
    let p = prefix("own");
    let mut c = server.connection();
    let loaded = cached_scripts(&mut c);
    let fixed = |capacity| {
        Quota::new(capacity, LONG)
            .unwrap()
            .with_strategy(Strategy::FixedWindow)
    };
    for capacity in 1..=300 {
        let (key, quota) = (format!("{p}:{capacity}"), fixed(capacity));
        let d = acquire(&store, &key, &quota).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, capacity - 1), "{capacity}");
    }
    // One own script per quota (the hot path of a cost of 1) up to 256; the 44 quotas past
    // them share the script that reads its quota from the arguments.
    assert_eq!(cached_scripts(&mut c), loaded + 256);
    for capacity in [1, 255, 256, 257, 300] {
        let (key, quota) = (format!("{p}:{capacity}"), fixed(capacity));
        for i in 1..=capacity {
            let d = acquire(&store, &key, &quota).await.unwrap();
            assert_eq!(d.allowed, i < capacity, "{capacity}, call {i}");
        }
    }
    // Flushed, both kinds are loaded again on their next call, which is decided as before.
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut c).unwrap();
    for capacity in [2, 300] {
        let (key, quota) = (format!("{p}:flushed:{capacity}"), fixed(capacity));
        let d = acquire(&store, &key, &quota).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, capacity - 1), "{capacity}");
    }
    assert!(cached_scripts(&mut c) >= 2);
}

#[tokio::test]
async fn status_only_reads_and_reset_forgets() {
    let server = RedisServer::start();
    let p = prefix("status");
    let service = service(&server.url(), &p, FailurePolicy::Deny);
    for strategy in Strategy::ALL {
        let key = format!("user-{strategy}");
        let opts = Options::new().limit(2).window(LONG).strategy(strategy);
        // `status` is the level now: nothing spent yet, so the whole limit.
        let fresh = service.status(&key, &opts).await.unwrap();
        assert_eq!((fresh.allowed, fresh.remaining), (true, 2), "{strategy}");
        let mut c = server.connection();
        assert!(
            stored_keys(&mut c, &p, &key).is_empty(),
            "{strategy}: status wrote nothing"
        );
        assert_eq!(service.consume(&key, &opts).await.unwrap().remaining, 1);
        assert_eq!(service.status(&key, &opts).await.unwrap().remaining, 1);
        assert_eq!(service.consume(&key, &opts).await.unwrap().remaining, 0);
        let empty = service.status(&key, &opts).await.unwrap();
        assert_eq!((empty.allowed, empty.remaining), (false, 0), "{strategy}");
        assert!(empty.retry_after.is_some(), "{strategy}");
        let refused = service.consume(&key, &opts).await.unwrap();
        assert!(!refused.allowed);
        assert!(refused.retry_after.is_some());
        assert!(service.reset_with(&key, &opts).await.unwrap());
        assert_eq!(service.consume(&key, &opts).await.unwrap().remaining, 1);
    }
    // One key per user key, the user key as the hash tag.
    let mut c = server.connection();
    for strategy in Strategy::ALL {
        let key = format!("user-{strategy}");
        let stored = stored_keys(&mut c, &p, &key);
        assert_eq!(stored.len(), 1, "{strategy}: {stored:?}");
        assert!(
            stored[0].starts_with(&format!("{p}:{{{key}}}")),
            "{stored:?}"
        );
    }
}

/// The keys the service stored for user key `key` under prefix `p`: `<p>:{<key>}...`.
fn stored_keys(c: &mut redis::Connection, p: &str, key: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{p}:{{{key}}}*"))
        .query(c)
        .unwrap()
}

#[tokio::test]
async fn pods_whose_clocks_disagree_by_minutes_make_the_same_decisions() {
    let server = RedisServer::start();
    let p = prefix("skew");
    let config = Config::builder()
        .key_prefix(p.as_str())
        .store(StoreConfig::Redis(RedisOptions::new(server.url())))
        .build()
        .unwrap();
    let real = ratelimit::SystemClock;
    let now = Duration::from_nanos(ratelimit::Clock::now(&real));
    let early = ManualClock::new(now - Duration::from_secs(7 * 60));
    let late = ManualClock::new(now + Duration::from_secs(9 * 60));
    let a = RateLimitService::with_clock(config.clone(), Arc::new(early)).unwrap();
    let b = RateLimitService::with_clock(config, Arc::new(late)).unwrap();
    for strategy in Strategy::ALL {
        // A one-minute window: with their own clocks the pods would be in different windows.
        let opts = Options::new()
            .limit(10)
            .window(Duration::from_secs(60))
            .strategy(strategy);
        let key = format!("k-{strategy}");
        let mut allowed = 0;
        for i in 0..30 {
            let pod = if i % 2 == 0 { &a } else { &b };
            allowed += u32::from(pod.consume(&key, &opts).await.unwrap().allowed);
        }
        // A fixed window may have turned over during the run (Redis' minute, not a pod's).
        let expected = if strategy == Strategy::FixedWindow {
            10..=20
        } else {
            10..=10
        };
        assert!(expected.contains(&allowed), "{strategy}: {allowed}");
        let (da, db) = (
            a.status(&key, &opts).await.unwrap(),
            b.status(&key, &opts).await.unwrap(),
        );
        assert_eq!(da.remaining, db.remaining, "{strategy}");
        // Both report Redis' reset time, not one skewed by 16 minutes.
        assert!(
            da.reset_at()
                .duration_since(db.reset_at())
                .unwrap_or_else(|e| e.duration())
                < Duration::from_secs(1),
            "{strategy}: {da:?} {db:?}"
        );
    }
}

#[tokio::test]
async fn every_key_expires_with_its_window() {
    let server = RedisServer::start();
    let store = store(&server);
    let p = prefix("ttl");
    let window = Duration::from_millis(40);
    let mut c = server.connection();
    for strategy in Strategy::ALL {
        let quota = Quota::new(3, window)
            .unwrap()
            .with_burst(1)
            .unwrap()
            .with_strategy(strategy);
        // How long each state matters: one window, two for the counter (its count weighs on
        // the next window), (limit + burst) / limit windows for a full bucket; plus 1 ms as
        // expiries are whole milliseconds rounded up.
        let bound = match strategy {
            Strategy::SlidingWindowCounter => 80,
            Strategy::TokenBucket => 40 * 4 / 3,
            _ => 40,
        } + 1;
        for i in 0..6 {
            let key = format!("{p}:{strategy}:{}", i % 2);
            acquire(&store, &key, &quota).await.unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut c).unwrap();
            // -2: a fixed window may already have ended, 0: it ends within the millisecond;
            // -1 (no expiry) is never fine.
            assert!(
                ttl == -2 || (0..=bound).contains(&ttl),
                "{key}: PTTL {ttl} ms, at most {bound}"
            );
        }
    }
    // Waits for Redis to expire the keys on its own clock and reclaim them (DBSIZE also
    // counts keys that are expired but not yet evicted); bounded: 3 s.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let size: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        if size == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{size} keys outlived their windows"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_admit_exactly_the_limit_and_every_hit_is_kept() {
    let server = RedisServer::start();
    let p = prefix("tasks");
    let service = service(&server.url(), &p, FailurePolicy::Deny);
    for strategy in Strategy::ALL {
        let opts = Options::new().limit(1_000).window(LONG).strategy(strategy);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let service = service.clone();
                let opts = opts.clone();
                tokio::spawn(async move {
                    let mut allowed = 0;
                    for _ in 0..20 {
                        allowed += u32::from(service.consume("one", &opts).await.unwrap().allowed);
                    }
                    allowed
                })
            })
            .collect();
        let mut allowed = 0;
        for t in tasks {
            allowed += t.await.unwrap();
        }
        assert_eq!(allowed, 1_000, "{strategy}");
        assert!(
            service.reset_with("one", &opts).await.unwrap(),
            "{strategy}"
        );
    }
    // Hits landing in the same millisecond (even microsecond) are distinct log entries.
    let opts = Options::new().limit(500).window(LONG);
    let calls: Vec<_> = (0..500)
        .map(|_| {
            let (service, opts) = (service.clone(), opts.clone());
            tokio::spawn(async move { service.consume("burst", &opts).await.unwrap().allowed })
        })
        .collect();
    for c in calls {
        assert!(c.await.unwrap());
    }
    let mut c = server.connection();
    let stored = stored_keys(&mut c, &p, "burst");
    assert_eq!(stored.len(), 1, "{stored:?}");
    let entries: u64 = redis::cmd("LLEN").arg(&stored[0]).query(&mut c).unwrap();
    assert_eq!(entries, 500);
}

#[test]
fn four_processes_admit_exactly_the_limit() {
    let server = RedisServer::start();
    for strategy in Strategy::ALL {
        let total = four_processes(
            env!("CARGO_BIN_EXE_redis-worker"),
            &[server.url()],
            false,
            &prefix("procs"),
            strategy.as_str(),
        );
        assert_eq!(total, 1_000, "{strategy}");
    }
}

#[tokio::test]
async fn a_dead_redis_is_handled_by_the_failure_policy_and_recovery_needs_no_restart() {
    let mut server = RedisServer::start();
    let p = prefix("policy");
    let fast = |policy| {
        let options = RedisOptions::new(server.url())
            .timeout(Duration::from_millis(300))
            .on_failure(policy);
        let config = Config::builder()
            .key_prefix(p.as_str())
            .store(StoreConfig::Redis(options))
            .build()
            .unwrap();
        RateLimitService::new(config).unwrap()
    };
    let deny = fast(FailurePolicy::Deny);
    let allow = fast(FailurePolicy::Allow);
    let local = fast(FailurePolicy::Local { pods: 4 });
    let opts = Options::new().limit(8).window(LONG);
    for s in [&deny, &allow, &local] {
        assert!(s.consume("k", &opts).await.unwrap().allowed);
    }

    server.stop();
    for s in [&deny, &allow, &local] {
        let started = Instant::now();
        let _ = s.consume("k", &opts).await;
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "bounded by the timeout"
        );
    }
    match deny.consume("k", &opts).await {
        Err(Error::Store { .. } | Error::Timeout { .. }) => {}
        other => panic!("deny refuses with the store's error: {other:?}"),
    }
    assert_eq!(deny.stats().total.errors, 2);
    for _ in 0..20 {
        assert!(allow.consume("k", &opts).await.unwrap().allowed);
    }
    // 8 / 4 pods = 2 per process while Redis is away (the call above may have spent one).
    let mut admitted = 1;
    for _ in 0..10 {
        admitted += u32::from(local.consume("k", &opts).await.unwrap().allowed);
    }
    assert!(
        admitted <= 2 + 1,
        "local fallback admits the pod's share: {admitted}"
    );
    assert!(!local.consume("k", &opts).await.unwrap().allowed);

    server.restart();
    // The connection comes back in the background; poll with a bounded deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    while deny.consume("back", &opts).await.is_err() {
        assert!(Instant::now() < deadline, "decisions went back to Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = server.connection();
    for (name, s) in [("allow", &allow), ("local", &local)] {
        let key = format!("back-{name}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            s.consume(&key, &opts).await.unwrap();
            if !stored_keys(&mut c, &p, &key).is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: decisions went back to Redis"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Redis restarted empty: the whole limit is available again, counted in Redis.
    let d = local.consume("fresh", &opts).await.unwrap();
    assert_eq!(d.remaining, 7);
}

#[tokio::test]
async fn a_hung_redis_never_hangs_a_caller() {
    let server = RedisServer::start();
    let p = prefix("hung");
    let options = RedisOptions::new(server.url()).timeout(Duration::from_millis(100));
    let store = RedisStore::new(options).unwrap();
    let quota = Quota::per_minute(5).unwrap();
    assert!(acquire(&store, &p, &quota).await.unwrap().allowed);
    server.pause();
    let started = Instant::now();
    let result = acquire(&store, &p, &quota).await;
    let waited = started.elapsed();
    server.resume();
    assert!(
        matches!(result, Err(Error::Timeout { after }) if after == Duration::from_millis(100)),
        "{result:?}"
    );
    assert!(waited < Duration::from_millis(400), "{waited:?}");
}

/// Requests in flight on one connection when Redis stops answering: each fails with
/// `Error::Timeout`, none far past its timeout (the connection's watcher closes it at its
/// oldest requests' deadline, at most a 16th of the timeout late) and none more than one of the
/// watcher's slots before it (they start together, and fail together with the oldest), and the
/// next call after Redis is back opens a new connection and is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_on_a_hung_connection_time_out_in_time_and_the_next_reconnects() {
    const TIMEOUT: Duration = Duration::from_millis(100);
    let server = RedisServer::start();
    let p = prefix("hung_many");
    let store = RedisStore::new(RedisOptions::new(server.url()).timeout(TIMEOUT)).unwrap();
    let quota = Quota::per_minute(1_000).unwrap();
    let key = format!("{p}:k");
    assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
    server.pause();
    let calls: Vec<_> = (0..32)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let result = acquire(&store, &key, &quota).await;
                (result, started.elapsed())
            })
        })
        .collect();
    let mut ended = Vec::new();
    for call in calls {
        ended.push(call.await.unwrap());
    }
    server.resume();
    for (result, waited) in ended {
        assert!(
            matches!(result, Err(Error::Timeout { after }) if after == TIMEOUT),
            "{result:?}"
        );
        // The 32 calls start together, but may straddle the start of a slot (100 ms / 32,
        // rounded up to 2^22 ns): those of the later slot fail with the earlier one's, up to a
        // slot before their own timeout (CI measured 99.999774 ms and 99.965762 ms).
        let slot = Duration::from_nanos(1 << 22);
        assert!(
            waited >= TIMEOUT - slot,
            "failed before its timeout: {waited:?}"
        );
        // The 100 ms bound, plus scheduling slack on a busy 2-core machine.
        assert!(waited < Duration::from_millis(400), "{waited:?}");
    }
    // Redis may still run the requests it read before it stopped: they only spend.
    let d = acquire(&store, &key, &quota).await.unwrap();
    assert!(d.allowed && d.remaining <= 1_000 - 2, "{d:?}");
}

/// Redis slow but within the timeout: the calls waiting on the connection are answered, not
/// failed (the watcher closes a connection only past its oldest request's deadline), and no
/// new connection is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_connection_slower_than_usual_but_within_the_timeout_are_answered() {
    let server = RedisServer::start();
    let p = prefix("slow_ok");
    let store =
        RedisStore::new(RedisOptions::new(server.url()).timeout(Duration::from_millis(400)))
            .unwrap();
    let quota = Quota::new(100_000_000, Duration::from_secs(60)).unwrap();
    let key = format!("{p}:k");
    assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
    let mut admin = server.connection();
    let clients = |c: &mut redis::Connection| -> usize {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
        list.lines().count()
    };
    let before = clients(&mut admin);
    // Calls coming all along, so that the watcher is timing pending calls (not idle) when
    // Redis stalls.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let (store, key, done) = (store.clone(), key.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
            }
        })
    };
    // Real time on purpose: the stall must come while calls are in flight.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every client's commands held for 150 ms, from now.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(150)
        .arg("ALL")
        .query(&mut admin)
        .unwrap();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let d = acquire(&store, &key, &quota).await;
                (d, started.elapsed())
            })
        })
        .collect();
    for call in calls {
        let (d, waited) = call.await.unwrap();
        assert!(d.unwrap().allowed);
        // Held by the pause (it started before the call), yet answered.
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    background.await.unwrap();
    assert_eq!(clients(&mut admin), before, "the store kept its connection");
}

/// A TCP proxy to `port` on loopback that holds each connection `delay` before relaying it;
/// the number of connections it accepted.
fn slow_proxy(port: u16, delay: Duration) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                // The fault itself, in real time on purpose: a connection slow to make.
                std::thread::sleep(delay);
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut c_in, &mut s_out));
                let (mut s_in, mut c_out) = (server, client);
                let _ = std::io::copy(&mut s_in, &mut c_out);
            });
        }
    });
    (proxy_port, accepted)
}

/// Connecting takes longer than a call's timeout (a proxy holds the connection 300 ms, the
/// timeout is 100 ms): the first calls time out, but the one attempt to connect runs on in
/// its own task and completes, and the calls after it are decided on that connection. Were
/// the attempt made inside each call, every call would cancel it with its timeout and none
/// would ever connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_slower_to_make_than_the_timeout_is_made_once_and_used() {
    let server = RedisServer::start();
    let (port, accepted) = slow_proxy(server.port(), Duration::from_millis(300));
    let options = RedisOptions::new(format!("redis://127.0.0.1:{port}"))
        .timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_secs(5));
    let store = RedisStore::new(options).unwrap();
    let quota = Quota::per_minute(1_000).unwrap();
    let key = format!("{}:k", prefix("slow_connect"));
    let first = acquire(&store, &key, &quota).await;
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    // Polling real time, bounded: no limit is checked by this wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    let decided = loop {
        match acquire(&store, &key, &quota).await {
            Ok(d) => break d,
            Err(Error::Timeout { .. }) => assert!(Instant::now() < deadline, "never connected"),
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(decided.allowed);
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one attempt to connect"
    );
}

/// A store shared by two runtimes, one of them kept but idle (a current-thread runtime
/// outside `block_on` drives none of its tasks): the other's calls are decided at once, on a
/// connection of their own, rather than waiting on a connection the idle runtime would
/// drive (with one connection shared, they timed out); counts stay exact across both.
#[test]
fn a_runtime_kept_idle_never_holds_up_the_calls_of_another_runtime() {
    let server = RedisServer::start();
    let p = prefix("idle_runtime");
    let store = store(&server);
    let quota = Quota::per_minute(10).unwrap();
    let key = format!("{p}:k");
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(), runtime());
    let mut remaining = Vec::new();
    let mut call = |on: &tokio::runtime::Runtime| {
        // Far below the 2 s timeout a call held up would wait for (or for good, were it
        // bounded by the idle runtime's watcher).
        let soon = async {
            tokio::time::timeout(Duration::from_secs(1), acquire(&store, &key, &quota)).await
        };
        let d = on.block_on(soon).expect("decided at once").unwrap();
        assert!(d.allowed);
        remaining.push(d.remaining);
    };
    call(&first);
    call(&second);
    call(&second);
    call(&first);
    drop(first);
    call(&second);
    assert_eq!(remaining, [9, 8, 7, 6, 5]);
}

#[tokio::test]
async fn credentials_never_appear_in_debug_display_or_errors() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2-s3cret"]);
    let good = format!("redis://:hunter2-s3cret@127.0.0.1:{}", server.port());
    let bad = format!("redis://:wrong-pa55word@127.0.0.1:{}", server.port());
    let p = prefix("secret");
    let ok = service(&good, &p, FailurePolicy::Deny);
    assert!(ok.consume("k", &Options::new()).await.unwrap().allowed);
    let refused = service(&bad, &p, FailurePolicy::Deny);
    let err = refused.consume("k", &Options::new()).await.unwrap_err();
    let texts = [
        format!("{ok:?}"),
        format!("{:?}", ok.config()),
        format!("{refused:?}"),
        format!("{err}"),
        format!("{err:?}"),
        format!("{:?}", RedisOptions::new(&good)),
    ];
    for text in texts {
        assert!(
            !text.contains("hunter2") && !text.contains("wrong-pa55word"),
            "{text}"
        );
    }
    assert!(matches!(err, Error::Store { .. }), "{err}");
    // A bad URL is a startup error that does not echo the password either.
    let err = Config::builder()
        .store(StoreConfig::Redis(RedisOptions::new(
            "redis://:hunter2-s3cret@127.0.0.1:notaport",
        )))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("store.url"), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn redis_configuration_is_validated_naming_each_field() {
    let err = Config::builder()
        .key_prefix("a{b}")
        .tier(
            ratelimit::Tier::new("huge", 1_000_000_000)
                .window("300d")
                .strategy(Strategy::SlidingWindowCounter),
        )
        .store(StoreConfig::Redis(
            RedisOptions::new("")
                .timeout(Duration::ZERO)
                .on_failure(FailurePolicy::Local { pods: 0 }),
        ))
        .build()
        .unwrap_err();
    let Error::InvalidConfig(e) = &err else {
        panic!("{err}")
    };
    for field in [
        "store.url",
        "store.timeout",
        "store.pods",
        "key_prefix",
        "tiers.huge.limit",
    ] {
        assert!(e.has(field), "{field} missing from {err}");
    }

    let config = Config::from_toml_str(
        r#"
        key_prefix = "api"
        [store]
        type = "redis"
        url = "redis://127.0.0.1:6379/0"
        timeout = "50ms"
        on_failure = "local"
        pods = 4
        require_noeviction = true
        local_refusals = 500
        "#,
    )
    .unwrap();
    let StoreConfig::Redis(r) = config.store() else {
        panic!("{config:?}")
    };
    assert_eq!(r.timeout, Duration::from_millis(50));
    assert_eq!(r.on_failure, FailurePolicy::Local { pods: 4 });
    assert_eq!(r.local_refusals, 500);
    assert!(r.require_noeviction);
    let config = Config::from_json_str(
        r#"{"store": {"type": "redis", "cluster": true, "nodes": ["redis://a:7000", "redis://b:7001"], "on_failure": "allow"}}"#,
    )
    .unwrap();
    let StoreConfig::Redis(r) = config.store() else {
        panic!("{config:?}")
    };
    assert!(r.cluster);
    assert_eq!(r.urls.len(), 2);
    assert_eq!(r.on_failure, FailurePolicy::Allow);
    let err = Config::from_toml_str(
        "[store]\ntype = \"redis\"\nurl = \"redis://h\"\non_failure = \"maybe\"\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("store.on_failure"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_when_redis_dies_are_bounded_and_resume_after_a_restart() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let mut server = RedisServer::start();
    let p = prefix("inflight");
    let options = RedisOptions::new(server.url()).timeout(Duration::from_millis(200));
    let config = Config::builder()
        .key_prefix(p.as_str())
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let restarted = Arc::new(AtomicBool::new(false));
    let after_restart = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (service, done) = (service.clone(), Arc::clone(&done));
            let (restarted, after_restart) = (Arc::clone(&restarted), Arc::clone(&after_restart));
            tokio::spawn(async move {
                let opts = Options::new().limit(1_000_000).window(LONG);
                let (mut slowest, mut errors) = (Duration::ZERO, 0u32);
                while !done.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = service.consume(&format!("k{t}"), &opts).await;
                    slowest = slowest.max(started.elapsed());
                    match result {
                        Ok(d) => {
                            assert!(d.allowed);
                            if restarted.load(Ordering::Relaxed) {
                                after_restart.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(Error::Store { .. } | Error::Timeout { .. }) => errors += 1,
                        Err(other) => panic!("{other}"),
                    }
                }
                (slowest, errors)
            })
        })
        .collect();
    // Real time on purpose: calls must be in flight when the server dies, and keep coming
    // during the outage.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    restarted.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while after_restart.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "decisions went back to Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for task in tasks {
        let (slowest, e) = task.await.unwrap();
        // The 200 ms bound, plus scheduling slack on a busy 2-core machine.
        assert!(
            slowest < Duration::from_millis(600),
            "a call took {slowest:?}"
        );
        errors += e;
    }
    assert!(errors > 0, "the outage was seen, and refused (deny)");
}
