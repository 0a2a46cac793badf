//! helper-70's attacks on stacked limits across Redis Cluster slots (`store/redis/slots.rs`),
//! from outside: the public API over a real Cluster (and, where a case compares, the memory
//! store and one Redis server beside it). What a stack across slots may never do: admit more
//! than any of its limits holds, leave a refused or failed call's spend in another slot, or
//! answer otherwise than the memory store and one server do. Each store reads its own clock
//! (Redis its `TIME`): every case stays within its windows.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{Config, Decision, Error, Options, RateLimitService, RedisOptions, StoreConfig};
use ratelimit_tests::redis_server::{prefix, RedisCluster};
use ratelimit_tests::{clock, on_every_store};

/// User keys whose states lie on `n` different masters of `cluster` (so in different slots,
/// and a node can be stopped under one alone).
fn on_different_nodes(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for i in 0.. {
        let key = format!("user-{i}");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("{{{key}}}"))
            .query(&mut cluster.nodes[0].connection())
            .unwrap();
        let node = cluster.master_of(slot).expect("a master");
        if found.iter().all(|(m, _)| *m != node) {
            found.push((node, key));
        }
        if found.len() == n {
            break;
        }
    }
    found.into_iter().map(|(_, k)| k).collect()
}

/// The master of `cluster` serving user key `key`'s states.
fn node_of(cluster: &RedisCluster, key: &str) -> usize {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{key}}}"))
        .query(&mut cluster.nodes[0].connection())
        .unwrap();
    cluster.master_of(slot).expect("a master")
}

/// The state keys (stamps and blocks left out) of user key `key` under prefix `p`, on its node.
fn states_of(cluster: &RedisCluster, p: &str, key: &str) -> Vec<String> {
    let node = node_of(cluster, key);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}*{{{key}}}*"))
        .query(&mut cluster.nodes[node].connection())
        .unwrap();
    keys.into_iter()
        .filter(|k| !k.ends_with(":stamp") && !k.contains(":lease") && !k.contains(":block"))
        .collect()
}

/// A service on `cluster` with `redis` options, its keys under a fresh prefix from `name`.
fn on_cluster(
    cluster: &RedisCluster,
    name: &str,
    redis: impl FnOnce(RedisOptions) -> RedisOptions,
) -> (RateLimitService, String) {
    let p = prefix(name);
    let options = redis(RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(2)));
    let config = Config::builder()
        .key_prefix(&p)
        .store(StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    (RateLimitService::new(config).expect("service"), p)
}

async fn remaining(service: &RateLimitService, key: &str, options: &Options) -> u64 {
    service
        .status(key, options)
        .await
        .expect("readable")
        .remaining
}

/// What a stacked call told, as stores can agree on it whatever their clocks: admitted, and
/// each limit's `allowed` and `remaining`.
type Told = (bool, Vec<(bool, bool, u64)>);

fn told(decided: &[Decision]) -> Told {
    let admitted = decided.iter().all(|d| d.allowed);
    let each = decided.iter().map(|d| (d.allowed, d.shadowed, d.remaining));
    (admitted, each.collect())
}

/// `calls` stacked calls of `limits` on every store (memory, one server, the Cluster): each
/// store's answers equal the memory store's. The memory store's answers.
async fn alike_on_every_store(name: &str, limits: &[(&str, &Options)], calls: usize) -> Vec<Told> {
    let clock = clock();
    let (services, _servers) = on_every_store(name, Config::builder, &clock);
    let mut all = Vec::new();
    for (store, service) in &services {
        let mut answers = Vec::new();
        for _ in 0..calls {
            let decided = service.consume_all(limits).await.expect("decided");
            answers.push(told(&decided));
        }
        let mut levels = Vec::new();
        for (key, options) in limits {
            levels.push(remaining(service, key, options).await);
        }
        all.push((store, answers, levels));
    }
    for (store, answers, levels) in &all[1..] {
        assert_eq!(answers, &all[0].1, "{store}'s answers against memory");
        assert_eq!(levels, &all[0].2, "{store}'s levels against memory");
    }
    all.swap_remove(0).1
}

fn limit(n: u64, budget: &str) -> Options {
    Options::new()
        .limit(n)
        .window("1h")
        .budget(budget.to_owned())
}

// ---- Probes that hold unless said otherwise ------------------------------------------------

/// Three slots, the limits of one slot interleaved with the others' (a reply per limit put
/// back in the call's order), one slot holding two limits of which one refuses first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_slots_interleaved_answer_as_memory_does() {
    let (a1, b1, a2, c1, b2) = (
        limit(4, "a1"),
        limit(6, "b1"),
        limit(3, "a2"),
        limit(5, "c1"),
        limit(2, "b2"),
    );
    let limits = [
        ("alice", &a1),
        ("10.0.0.1", &b1),
        ("alice", &a2),
        ("carol", &c1),
        ("10.0.0.1", &b2),
    ];
    let answers = alike_on_every_store("attack-three-slots", &limits, 5).await;
    let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
    assert_eq!(admitted, [true, true, false, false, false]);
    // The third call: refused by b2 (the last limit, the second slot's), nothing spent.
    assert_eq!(
        answers[2].1,
        [
            (true, false, 2),
            (true, false, 4),
            (true, false, 1),
            (true, false, 3),
            (false, false, 0)
        ]
    );
}

/// Costs above 1, differing per limit, across slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_differing_per_limit_across_slots_answer_as_memory_does() {
    let (a, b) = (limit(10, "cost-a").cost(3), limit(7, "cost-b").cost(2));
    let limits = [("alice", &a), ("10.0.0.2", &b)];
    let answers = alike_on_every_store("attack-costs", &limits, 5).await;
    let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
    assert_eq!(admitted, [true, true, true, false, false]);
    assert_eq!(answers[2].1, [(true, false, 1), (true, false, 1)]);
    // The fourth call: 1 left of each, under either cost.
    assert_eq!(answers[3].1, [(false, false, 1), (false, false, 1)]);
}

/// A shadow limit between two enforced limits in other slots: it refuses nothing, and the
/// enforced limits across slots spend as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_limit_among_limits_across_slots_answers_as_memory_does() {
    let (a, s, c) = (
        limit(3, "sh-a"),
        limit(1, "sh-s").shadow(true),
        limit(2, "sh-c"),
    );
    let limits = [("alice", &a), ("10.0.0.3", &s), ("carol", &c)];
    let answers = alike_on_every_store("attack-shadow", &limits, 4).await;
    let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
    assert_eq!(admitted, [true, true, false, false]);
    assert_eq!(answers[1].1[1], (true, true, 0));
}

/// Looks (`consume(false)`) across slots spend nothing and answer as memory does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looks_across_slots_spend_nothing_and_answer_as_memory_does() {
    let (a, b) = (
        limit(2, "look-a").consume(false),
        limit(3, "look-b").consume(false).cost(2),
    );
    let limits = [("alice", &a), ("10.0.0.4", &b)];
    let answers = alike_on_every_store("attack-looks", &limits, 3).await;
    for answer in &answers {
        assert_eq!(answer, &(true, vec![(true, false, 1), (true, false, 1)]));
    }
}

/// Blocking limits in several slots, one full: each refusal begins its own limit's block
/// only, and a limit that admitted is given its unit back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_in_several_slots_answer_as_memory_does() {
    let blocks = |n, b: &str| limit(n, b).block_for(Duration::from_secs(600));
    let (a, b, c) = (blocks(3, "bl-a"), blocks(1, "bl-b"), blocks(4, "bl-c"));
    let limits = [("alice", &a), ("10.0.0.5", &b), ("carol", &c)];
    let answers = alike_on_every_store("attack-blocks", &limits, 3).await;
    let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
    assert_eq!(admitted, [true, false, false]);
    assert_eq!(answers[2].1[0], (true, false, 2));
    assert!(!answers[2].1[1].0, "the full limit refused");
    assert_eq!(answers[2].1[2], (true, false, 3));
}

/// A penalty on one key of a stack across slots counts in the stack's decisions as in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_penalty_on_one_key_of_a_stack_across_slots_answers_as_memory_does() {
    let clock = clock();
    let (services, _servers) = on_every_store("attack-penalty", Config::builder, &clock);
    let (a, b) = (limit(5, "pen-a"), limit(5, "pen-b"));
    let limits = [("alice", &a), ("10.0.0.6", &b)];
    let mut all = Vec::new();
    for (store, service) in &services {
        service
            .penalize("10.0.0.6", &b, 3)
            .await
            .expect("penalized");
        let mut answers = Vec::new();
        for _ in 0..4 {
            answers.push(told(&service.consume_all(&limits).await.unwrap()));
        }
        let left = remaining(service, "alice", &a).await;
        all.push((store, answers, left));
    }
    for (store, answers, left) in &all {
        let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
        assert_eq!(admitted, [true, true, false, false], "{store}");
        assert_eq!(*left, 3, "{store}");
        assert_eq!(answers, &all[0].1, "{store} against memory");
    }
}

// ---- Errors in one slot ---------------------------------------------------------------------

/// Garbage bytes under the state of the second slot's limit, after one admitted call: the
/// call is an error, the first slot's limit keeps nothing of it, and the garbage is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_a_later_slot_is_an_error_and_the_earlier_slot_gets_its_spend_back() {
    let cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, p) = on_cluster(&cluster, "attack-garbage", |o| o);
    let (first, second) = (limit(3, "gb-first"), limit(3, "gb-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let [planted] = &states_of(&cluster, &p, &keys[1])[..] else {
        panic!("one state")
    };
    let mut c = cluster.nodes[node_of(&cluster, &keys[1])].connection();
    let _: () = redis::cmd("SET")
        .arg(planted)
        .arg("garbage")
        .query(&mut c)
        .unwrap();
    for _ in 0..2 {
        let refused = service.consume_all(&limits).await;
        assert!(
            matches!(refused, Err(Error::UnexpectedState { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(
        remaining(&service, &keys[0], &first).await,
        2,
        "the earlier slot kept the failed calls' spends"
    );
    let left: String = redis::cmd("GET").arg(planted).query(&mut c).unwrap();
    assert_eq!(left, "garbage");
}

/// Garbage under the first slot's state: an error before anything else is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_first_slot_is_an_error_and_nothing_is_spent_after_it() {
    let cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, p) = on_cluster(&cluster, "attack-garbage-first", |o| o);
    let (first, second) = (limit(3, "gf-first"), limit(3, "gf-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let [planted] = &states_of(&cluster, &p, &keys[0])[..] else {
        panic!("one state")
    };
    let mut c = cluster.nodes[node_of(&cluster, &keys[0])].connection();
    let _: () = redis::cmd("SET")
        .arg(planted)
        .arg("garbage")
        .query(&mut c)
        .unwrap();
    let refused = service.consume_all(&limits).await;
    assert!(
        matches!(refused, Err(Error::UnexpectedState { .. })),
        "{refused:?}"
    );
    assert_eq!(remaining(&service, &keys[1], &second).await, 2);
}

/// The second slot's master stopped (Deny, the default): the call is an error, never an
/// admission, and the first slot's limit gets back what the call spent there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_in_a_later_slot_denies_and_the_earlier_slot_gets_its_spend_back() {
    let mut cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-stopped", |o| {
        o.timeout(Duration::from_millis(500))
    });
    let (first, second) = (limit(3, "st-first"), limit(3, "st-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let down = node_of(&cluster, &keys[1]);
    cluster.nodes[down].stop();
    for _ in 0..2 {
        let refused = service.consume_all(&limits).await;
        assert!(refused.is_err(), "{refused:?}");
    }
    assert_eq!(
        remaining(&service, &keys[0], &first).await,
        2,
        "the earlier slot kept the failed calls' spends"
    );
}

/// The same with `FailurePolicy::Allow`: the call is admitted unlimited, as the policy
/// says, and the first slot's limit is not left holding its spend (the call was not counted
/// anywhere, as a call on a store that is down is not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_in_a_later_slot_under_allow_admits_uncounted_everywhere() {
    let mut cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-allow", |o| {
        o.timeout(Duration::from_millis(500))
            .on_failure(ratelimit::FailurePolicy::Allow)
    });
    let (first, second) = (limit(3, "al-first"), limit(3, "al-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let down = node_of(&cluster, &keys[1]);
    cluster.nodes[down].stop();
    for _ in 0..2 {
        let admitted = service.consume_all(&limits).await.expect("allowed");
        assert!(admitted.iter().all(|d| d.allowed), "{admitted:?}");
    }
    assert_eq!(remaining(&service, &keys[0], &first).await, 2);
}

/// The same with `FailurePolicy::Local { pods: 1 }`: decided in this process's memory, which
/// holds each limit to its own budget there; the first slot's Redis limit keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_in_a_later_slot_under_local_decides_in_memory_and_keeps_nothing() {
    let mut cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-local", |o| {
        o.timeout(Duration::from_millis(500))
            .on_failure(ratelimit::FailurePolicy::Local { pods: 1 })
    });
    let (first, second) = (limit(3, "lo-first"), limit(3, "lo-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let down = node_of(&cluster, &keys[1]);
    cluster.nodes[down].stop();
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(told(&service.consume_all(&limits).await.unwrap()).0);
    }
    assert_eq!(admitted, 3, "the local fallback's budget");
    // Read on Redis (a single-limit look at the first slot, whose node is up).
    assert_eq!(remaining(&service, &keys[0], &first).await, 2);
}

// ---- Kept spends ----------------------------------------------------------------------------

/// A kept spend across slots, one of whose keys was reset before the refund: given back to
/// every limit or to none (memory, one server: none, as the reset state never held it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_spend_one_of_whose_keys_was_reset_is_given_back_to_none() {
    let clock = clock();
    let (services, _servers) = on_every_store("attack-kept-reset", Config::builder, &clock);
    for reset_first in [false, true] {
        let budget = |b: &str| format!("{b}-{reset_first}");
        let (a, b) = (limit(3, &budget("kr-a")), limit(3, &budget("kr-b")));
        let limits = [("alice", &a), ("10.0.0.7", &b)];
        for (store, service) in &services {
            let spent = service.spend_all(&limits).await.expect("spent");
            assert!(spent.decisions().iter().all(|d| d.allowed), "{store}");
            let (key, options) = limits[usize::from(!reset_first)];
            assert!(service.reset_with(key, options).await.unwrap(), "{store}");
            let given = spent.refund().await.expect("answered");
            let left = (
                remaining(service, "alice", &a).await,
                remaining(service, "10.0.0.7", &b).await,
            );
            // The reset limit fresh, the other one holding the spend.
            let expected = if reset_first { (3, 2) } else { (2, 3) };
            assert_eq!(
                (given, left),
                (false, expected),
                "{store}: reset {key} first: given back to one limit"
            );
        }
    }
}

/// Two kept spends across slots, each given back once: each limit back at its full budget,
/// never above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_spends_across_slots_given_back_leave_every_limit_at_its_budget() {
    let clock = clock();
    let (services, _servers) = on_every_store("attack-kept-twice", Config::builder, &clock);
    let (a, b) = (limit(2, "kt-a"), limit(3, "kt-b"));
    let limits = [("alice", &a), ("10.0.0.8", &b)];
    for (store, service) in &services {
        let one = service.spend_all(&limits).await.unwrap();
        let two = service.spend_all(&limits).await.unwrap();
        let three = service.spend_all(&limits).await.unwrap();
        assert!(!three.decisions()[0].allowed, "{store}");
        assert!(
            !three.refund().await.unwrap(),
            "{store}: a refused call given back"
        );
        assert!(one.refund().await.unwrap(), "{store}");
        assert!(two.refund().await.unwrap(), "{store}");
        assert_eq!(remaining(service, "alice", &a).await, 2, "{store}");
        assert_eq!(remaining(service, "10.0.0.8", &b).await, 3, "{store}");
        let mut admitted = 0;
        for _ in 0..4 {
            admitted += usize::from(told(&service.consume_all(&limits).await.unwrap()).0);
        }
        assert_eq!(admitted, 2, "{store}");
    }
}

// ---- Cancellation ---------------------------------------------------------------------------

/// Calls dropped at every point of their run (timeouts from 0 to 3 ms, in steps of 50 us):
/// however many are dropped, the calls that complete are never admitted past either limit,
/// both limits stay readable, and what dropped calls left spent is only ever an over-refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_dropped_between_slots_never_admit_more_than_a_limit() {
    let cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 3);
    let (service, _p) = on_cluster(&cluster, "attack-dropped", |o| o);
    let (a, b, c) = (limit(40, "dr-a"), limit(40, "dr-b"), limit(40, "dr-c"));
    let limits = [
        (keys[0].as_str(), &a),
        (keys[1].as_str(), &b),
        (keys[2].as_str(), &c),
    ];
    let mut finished_admitted = 0u64;
    for step in 0..60u64 {
        let bound = Duration::from_micros(step * 50);
        if let Ok(decided) = tokio::time::timeout(bound, service.consume_all(&limits)).await {
            finished_admitted += u64::from(told(&decided.unwrap()).0);
        }
    }
    // A dropped call's request already sent lands before any later one on its node's
    // connection (one connection a node, in order).
    loop {
        let decided = service.consume_all(&limits).await.unwrap();
        if !told(&decided).0 {
            break;
        }
        finished_admitted += 1;
    }
    assert!(finished_admitted <= 40, "{finished_admitted} admitted");
    let mut levels = Vec::new();
    for (key, options) in limits {
        levels.push(remaining(&service, key, options).await);
    }
    assert!(levels.contains(&0), "{levels:?}");
    // What dropped calls left spent: over-refusal only, told for the report.
    let spent = levels.iter().map(|l| 40 - l).collect::<Vec<_>>();
    eprintln!("dropped calls: {finished_admitted} admitted; spent {spent:?}");
}

/// Concurrent stacked calls over three slots, some dropped at random points: never more
/// admitted than the smallest limit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_and_dropped_calls_over_three_slots_admit_at_most_the_smallest_limit() {
    let cluster = RedisCluster::start();
    let keys = Arc::new(on_different_nodes(&cluster, 3));
    let (service, _p) = on_cluster(&cluster, "attack-concurrent-drop", |o| o);
    let service = Arc::new(service);
    let (a, b, c) = (limit(12, "cd-a"), limit(7, "cd-b"), limit(30, "cd-c"));
    let tasks: Vec<_> = (0..60u64)
        .map(|i| {
            let (service, keys) = (Arc::clone(&service), Arc::clone(&keys));
            let (a, b, c) = (a.clone(), b.clone(), c.clone());
            tokio::spawn(async move {
                let limits = [
                    (keys[0].as_str(), &a),
                    (keys[1].as_str(), &b),
                    (keys[2].as_str(), &c),
                ];
                let call = service.consume_all(&limits);
                if i % 3 == 0 {
                    let bound = Duration::from_micros(100 * (i % 17));
                    match tokio::time::timeout(bound, call).await {
                        Ok(decided) => u64::from(told(&decided.unwrap()).0),
                        Err(_) => 0,
                    }
                } else {
                    u64::from(told(&call.await.unwrap()).0)
                }
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert!(admitted <= 7, "{admitted} admitted");
    let left = remaining(&service, &keys[1], &b).await;
    assert!(left <= 7 - admitted, "{left} left after {admitted}");
}

// ---- Leases ---------------------------------------------------------------------------------

/// A key leasing slices of its budget (single calls) stacked with a key in another slot:
/// single and stacked calls together admit the key's limit, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_key_in_a_stack_across_slots_admits_its_limit_and_no_more() {
    let cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-leases", |o| {
        o.leases(ratelimit::LeaseOptions::new(4).idle(Duration::from_secs(60)))
            .local_refusals(1_000)
    });
    let (a, b) = (limit(10, "le-a"), limit(100, "le-b"));
    let limits = [(keys[0].as_str(), &a), (keys[1].as_str(), &b)];
    let single = |n: usize| {
        let (service, key, a) = (&service, keys[0].as_str(), &a);
        async move {
            let mut admitted = 0;
            for _ in 0..n {
                admitted += usize::from(service.consume(key, a).await.unwrap().allowed);
            }
            admitted
        }
    };
    let stacked = |n: usize| {
        let (service, limits) = (&service, &limits);
        async move {
            let mut admitted = 0;
            for _ in 0..n {
                admitted += usize::from(told(&service.consume_all(limits).await.unwrap()).0);
            }
            admitted
        }
    };
    let mut admitted = single(3).await;
    admitted += stacked(20).await;
    admitted += single(5).await;
    admitted += stacked(3).await;
    assert_eq!(admitted, 10);
    // The other limit spent only for admitted stacks, and none for the refused ones.
    let stacked_admitted = 100 - remaining(&service, &keys[1], &b).await;
    assert!(stacked_admitted <= 10, "{stacked_admitted}");
}

// ---- Reloads --------------------------------------------------------------------------------

/// A reload moving the user's bucket to another window (another state) while it is stacked
/// with an address in another slot: its debt is carried into the moved bucket in its own
/// slot, the stack still refused, the address's limit spending nothing for the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moving_one_limit_of_a_stack_across_slots_carries_its_debt() {
    let clock = clock();
    let config = || ratelimit_tests::bucket_a_minute(3, 0, 3);
    let (services, _servers) = on_every_store("attack-reload", config, &clock);
    let (user, ip) = (Options::new(), limit(50, "rl-ip"));
    let limits = [("alice", &user), ("10.0.0.9", &ip)];
    let mut all = Vec::new();
    for (store, service) in &services {
        let mut answers = Vec::new();
        for _ in 0..4 {
            answers.push(told(&service.consume_all(&limits).await.unwrap()));
        }
        ratelimit_tests::reload_to(service, ratelimit_tests::moved(3, 0, 3));
        for _ in 0..3 {
            answers.push(told(&service.consume_all(&limits).await.unwrap()));
        }
        let left = remaining(service, "10.0.0.9", &ip).await;
        all.push((store, answers, left));
    }
    for (store, answers, left) in &all {
        let admitted: Vec<bool> = answers.iter().map(|a| a.0).collect();
        assert_eq!(
            admitted,
            [true, true, true, false, false, false, false],
            "{store}"
        );
        assert_eq!(*left, 47, "{store}");
        assert_eq!(answers, &all[0].1, "{store} against memory");
    }
}

// ---- Annotated fns --------------------------------------------------------------------------

static LOGINS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The README's `login`: failures counted per user, every attempt per address.
#[ratelimit::rate_limit(limit = 5, window = "15m", key = user, count = "err", name = "login-user")]
#[ratelimit::rate_limit(limit = 100, window = "1h", key = ip, name = "login-ip")]
async fn login(user: &str, ip: &str, right: bool) -> Result<(), Error> {
    LOGINS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _ = (user, ip);
    match right {
        true => Ok(()),
        false => Err(Error::InvalidKey { reason: "wrong" }),
    }
}

/// The README's `login` (two attributes on two user keys, one counting failures only) on the
/// memory store, one server and a Cluster: the same bodies run, the same refusals, the same
/// levels after (a success given back to both limits, across slots on the Cluster).
#[test]
fn an_annotated_login_on_two_keys_runs_alike_on_every_store() {
    use ratelimit::testing::TestModule;
    use ratelimit::Module;
    let (server, cluster) = (
        ratelimit_tests::redis_server::RedisServer::start(),
        RedisCluster::start(),
    );
    let single = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let stores = [
        ("memory", Module::builder()),
        (
            "redis",
            Module::builder()
                .key_prefix(prefix("attack-login-redis"))
                .store(StoreConfig::Redis(single)),
        ),
        (
            "cluster",
            Module::builder()
                .key_prefix(prefix("attack-login-cluster"))
                .store(StoreConfig::Redis(nodes)),
        ),
    ];
    let per_user = Options::new().budget("login-user").limit(5).window("15m");
    let per_ip = Options::new().budget("login-ip").limit(100).window("1h");
    let mut all = Vec::new();
    for (store, builder) in stores {
        let m = TestModule::new(builder).expect("login runs");
        let runtime = ratelimit_tests::two_workers();
        let seen = runtime.block_on(async {
            let before = LOGINS.load(std::sync::atomic::Ordering::SeqCst);
            let mut outcomes = Vec::new();
            for _ in 0..8 {
                outcomes.push(match m.scope(login("mallory", "10.1.1.1", false)).await {
                    Err(Error::InvalidKey { .. }) => "failed",
                    Err(Error::Exceeded(_)) => "refused",
                    other => panic!("{store}: {other:?}"),
                });
            }
            for _ in 0..4 {
                m.scope(login("alice", "10.1.1.1", true))
                    .await
                    .expect("passes");
            }
            let runs = LOGINS.load(std::sync::atomic::Ordering::SeqCst) - before;
            let service = m.service();
            let mut levels = Vec::new();
            for (key, options) in [
                ("mallory", &per_user),
                ("alice", &per_user),
                ("10.1.1.1", &per_ip),
            ] {
                let left = m.scope(service.status(key, options)).await.unwrap();
                levels.push(left.remaining);
            }
            (outcomes, runs, levels)
        });
        all.push((store, seen));
    }
    for (store, (outcomes, runs, levels)) in &all {
        let failed = outcomes.iter().filter(|o| **o == "failed").count();
        assert_eq!((failed, *runs), (5, 9), "{store}");
        // A success is given back to both limits, as the stack is spent as one (the
        // address's 95 is the 5 failures).
        assert_eq!(levels, &[0, 5, 95], "{store}");
    }
}

/// Under `FailurePolicy::Allow`, the first slot's limit spent (on a live node) and the
/// second slot's node stopped: the first limit refuses, which refuses the call whatever the
/// other limit would say, so the call is refused, not admitted unlimited for an error in a
/// slot only looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_on_a_live_node_stays_a_refusal_under_allow_when_a_looked_at_node_is_down() {
    let mut cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-allow-refused", |o| {
        o.timeout(Duration::from_millis(500))
            .on_failure(ratelimit::FailurePolicy::Allow)
    });
    let (first, second) = (limit(1, "ar-first"), limit(3, "ar-second"));
    let (live, dead) = (keys[0].as_str(), keys[1].as_str());
    // The live slot first (the stopped one first, the live one is refused as well when it
    // answers; but redis-rs' cluster client, just timed out on the stopped node, often
    // times the next request out too, and an error on both is the policy's to answer).
    let limits = [(live, &first), (dead, &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let down = node_of(&cluster, dead);
    cluster.nodes[down].stop();
    let mut admitted = 0;
    for _ in 0..3 {
        let decided = service.consume_all(&limits).await.expect("decided");
        let refusal = decided.iter().find(|d| !d.allowed);
        let wait = refusal.and_then(|d| d.retry_after);
        assert!(wait > Some(Duration::from_secs(3_000)), "{decided:?}");
        admitted += usize::from(told(&decided).0);
    }
    assert_eq!(
        admitted, 0,
        "admitted past a limit of 1 its live node refused"
    );
    assert_eq!(remaining(&service, live, &first).await, 0);
}

/// The second slot's master paused (SIGSTOP: every request to it times out), then resumed:
/// each call meanwhile is an error (Deny) and the first slot's limit gets back what it spent;
/// after the resume, what the timed-out scripts spent when the node ran them is only ever an
/// over-refusal: never more admitted than either limit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_in_a_later_slot_times_out_and_nothing_is_admitted_past_a_limit() {
    let cluster = RedisCluster::start();
    let keys = on_different_nodes(&cluster, 2);
    let (service, _p) = on_cluster(&cluster, "attack-paused", |o| {
        o.timeout(Duration::from_millis(300))
    });
    let (first, second) = (limit(3, "pa-first"), limit(3, "pa-second"));
    let limits = [(keys[0].as_str(), &first), (keys[1].as_str(), &second)];
    assert!(told(&service.consume_all(&limits).await.unwrap()).0);
    let paused = node_of(&cluster, &keys[1]);
    cluster.nodes[paused].pause();
    for _ in 0..2 {
        let failed = service.consume_all(&limits).await;
        assert!(failed.is_err(), "{failed:?}");
    }
    assert_eq!(remaining(&service, &keys[0], &first).await, 2);
    cluster.nodes[paused].resume();
    let mut admitted = 1;
    for _ in 0..6 {
        if let Ok(decided) = service.consume_all(&limits).await {
            admitted += usize::from(told(&decided).0);
        }
    }
    assert!(admitted <= 3, "{admitted} admitted");
    // Measured: 1 admitted, and the 2 timed-out calls' spends run by the node on its resume
    // (the second limit at 0 for its hour: fail closed, at most a unit per timed-out call).
    let kept = 3 - admitted as u64 - remaining(&service, &keys[1], &second).await;
    assert!(kept <= 2, "{kept} kept by 2 timed-out calls");
}
