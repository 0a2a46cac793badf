//! helper-90's probes of the fleet's reload horizon recorded in Redis (`Store::horizon`,
//! `service/horizon.rs`) on surfaces the earlier probes left alone: the wait queue, a call
//! dropped between the record's raise and its decision, a reload racing a call, tiers chosen
//! per call, a read of the record that fails under `FailurePolicy::Allow` and `Local`, and
//! records of other shapes. Each against its twin, one service under a prefix of its own that
//! makes every call and reload of every pod (as probes_horizon_record_redis): the fleet never
//! admits more than the twin over the same history.
//!
//! Time: Redis decides on its own clock, which the tests never move, so every debt written is
//! whole whenever a call asks for it; the services' transitions run on hand-driven clocks set
//! alike. Scripts are ordered with `CLIENT PAUSE WRITE` where a probe needs a call held
//! between two of its round trips.
//!
//! Found and closed (`wait.rs`): a waiter in the queue decided on what its pod knew when it
//! queued (1 against 0), and `until_ready` read no record (15 against 0). Found and closed
//! (`Site::failed`, helper-97): under `Allow` or `Local`, a raise lost in Redis before a
//! decision Redis answered (15 against 0), and a due read lost so (1 against 0): such a
//! call is now answered by the failure policy alone. Found and closed (helper-97):
//! `until_ready` and a prepared site's `try_consume` with a quota of their own raised no
//! record (15 against 0 each). Found and closed (helper-109): a Redis restart between a
//! pod's raise and the spend it covers (15 against 0: `Store::records_lost`), and a spend
//! that connects to the restarted server within its decision (15 against 0:
//! `Store::connects_first`). Open (ignored, FOUND): the same restart of the record's master
//! on a Redis Cluster, whose connection reconnects unseen (15 against 0).
//!
//! The configuration: [`bucket`]`("a")`, a bucket of 15 (10 plus 5) a token every 6 s (a
//! tolerance of 90 s: its old state carried 150 s past a move), moved by a reload to
//! [`bucket`]`("b")` (the tier renamed). A quota of its own, `Options::new().refill(1)` (a
//! token a minute, on the tier's state): 15 spent owe 15 minutes there.

use std::future::Future;
use std::time::Duration;

use ratelimit::{
    ConfigBuilder, Decision, Error, FailurePolicy, LeaseOptions, Options, RateLimitService,
    RedisOptions, Strategy, Tier,
};
use ratelimit_tests::moves::{bucket, MOVES};
use ratelimit_tests::redis_server::{
    horizon_key, horizon_record, pause_writes, prefix, unpause, until_waiting, RedisCluster,
    RedisServer,
};
use ratelimit_tests::{
    fleet_and_twin, fleet_and_twin_of, on_its_store, on_redis_with, until_depth, within, Pods,
    START,
};
use tokio::task::JoinHandle;

/// The quota of a call's own that the probes spend through pod A.
fn own() -> Options {
    Options::new().refill(1)
}

/// A call of `options` on `key` by `service`, spawned.
fn spawned(
    service: &RateLimitService,
    key: &'static str,
    options: &Options,
) -> JoinHandle<Result<Decision, Error>> {
    let (service, options) = (service.clone(), options.clone());
    tokio::spawn(async move { service.consume(key, &options).await })
}

// ---------------------------------------------------------------------------------------
// 1. The wait queue.
// ---------------------------------------------------------------------------------------

/// [`bucket`]`(name)` with calls that wait an hour at most.
fn queued_bucket(name: &str) -> ConfigBuilder {
    bucket(name).queue_timeout("1h")
}

/// A rolling reload: B reloaded to the tier renamed first (and reads the record at its first
/// call, +1 s: nothing); A, still on the old tier, then spends its 15 with its own refill (15
/// minutes owed on the old state; the record raised), and B's queued calls begin at +2 s,
/// where B has no read due: a head of cost 2, refused (B carries the old state, for the
/// configured bucket: 150 s), and a call of cost 1 behind it. A reloads; at +300 s the head
/// is dropped and the call behind it asks the store, with the site worked out at +2 s: the
/// old state's carrying ended there for what B knew then. A plain call of B's at +300 s
/// reads the record first and carries the 15 minutes owed (`fleet_horizon_redis`). The twin
/// (reloaded at B's reload: A's 15 spent on the new state) admits the waiter nothing.
/// Found: the waiter asked on its site as worked out, and read the moved state alone: 1
/// admitted. Closed: a head about to ask reads the record where due, and a read that raised
/// what its pod knows since the wait began ends the wait, refused as at a reload (`wait.rs`).
/// A waiter is held for up to 5 s of wall clock: admitted, it is answered at once; refused,
/// it ends at once (the fleet's) or sleeps for the old debt (the twin's), counted refused.
#[tokio::test]
async fn a_waiter_queued_before_another_pods_raise_is_decided_on_what_it_knew() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h90-queue-rolling",
        || queued_bucket("a"),
        async |pods| {
            let b = pods.pod(1);
            b.reload(on_its_store(b, queued_bucket("b"))).unwrap();
            pods.at(1);
            let mut counts = vec![pods.admitted(1, "other", &Options::new(), 1).await];
            counts.push(pods.admitted(0, "k", &own(), 16).await);
            pods.at(2);
            let head = spawned(b, "k", &Options::new().cost(2).queue(true));
            until_depth(b, 1).await;
            let behind = spawned(b, "k", &Options::new().queue(true));
            until_depth(b, 2).await;
            if pods.fleet() {
                let a = pods.pod(0);
                a.reload(on_its_store(a, queued_bucket("b"))).unwrap();
            }
            pods.at(300);
            head.abort();
            let waited = tokio::time::timeout(Duration::from_secs(5), behind).await;
            counts.push(match waited {
                Ok(joined) => usize::from(joined.unwrap().is_ok_and(|d| d.allowed)),
                Err(_) => 0,
            });
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [1, 15, 0, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

// ---------------------------------------------------------------------------------------
// 2. A call dropped between the record's raise and its decision.
// ---------------------------------------------------------------------------------------

/// Where A's first call with its own quota is dropped: while its raise waits in Redis
/// (`"raise"`: the raise runs after, the spend never), or polled once and dropped at once
/// (`"polled once"`, writes paused: its raise sent or not). A then spends 15 more with its own quota, both reload to
/// the tier renamed, and B's plain calls at +300 s (past the configured carrying) carry the
/// 15 minutes owed: none, as the twin. What A knew of the record is folded only from a raise
/// that answered: a dropped raise leaves A to raise it again before it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_between_its_raise_and_its_decision_leaves_the_record_raised() {
    let server = RedisServer::start();
    for dropped in ["raise", "polled once"] {
        let (fleet, twin) = fleet_and_twin(
            &server,
            "h90-dropped",
            || bucket("a"),
            async |pods| {
                let a = pods.pod(0);
                // The scripts loaded, and a first plain spend, so that the dropped call's
                // first script is its raise.
                let mut counts = vec![pods.admitted(0, "warm", &Options::new(), 1).await];
                match dropped {
                    "raise" => {
                        let mut c = server.connection();
                        pause_writes(&mut c);
                        let call = spawned(a, "k", &own());
                        until_waiting(&mut c, 1);
                        call.abort();
                        assert!(call.await.unwrap_err().is_cancelled());
                        unpause(&mut c);
                    }
                    _ => {
                        // Writes paused, so that the one poll cannot be answered.
                        let mut c = server.connection();
                        pause_writes(&mut c);
                        {
                            let mut call = std::pin::pin!(a.consume("k", &own()));
                            let once = std::future::poll_fn(|cx| {
                                std::task::Poll::Ready(call.as_mut().poll(cx).is_pending())
                            });
                            assert!(once.await, "{dropped}: answered at once");
                        }
                        unpause(&mut c);
                    }
                }
                counts.push(pods.admitted(0, "k", &own(), 16).await);
                assert!(
                    horizon_record(&server, &pods.prefix).is_some(),
                    "{dropped}: raised"
                );
                pods.reload_all(|| bucket("b"));
                pods.at(300);
                counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
                counts
            },
        )
        .await;
        assert_eq!(twin, [1, 15, 0], "{dropped}: twin");
        assert_eq!(fleet, twin, "{dropped}: fleet");
    }
}

// ---------------------------------------------------------------------------------------
// 3. A reload racing a call on another task.
// ---------------------------------------------------------------------------------------

/// A's first call with its own quota (of cost 15: the whole bucket, 15 minutes owed) begun on
/// another task, its raise held in Redis (paused writes) while both pods reload to the tier
/// renamed: begun under the old configuration, it raises the record and spends on the old
/// state after the reload. B's plain calls at +300 s (past the configured carrying) carry
/// the old state for the quota of its own: none, as the twin, whose reload races its own
/// call the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_racing_a_call_that_raises_the_record() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h90-racing",
        || bucket("a"),
        async |pods| {
            let a = pods.pod(0);
            let mut counts = vec![pods.admitted(0, "warm", &Options::new(), 1).await];
            let mut c = server.connection();
            pause_writes(&mut c);
            let raced = spawned(a, "k", &own().cost(15));
            until_waiting(&mut c, 1);
            pods.reload_all(|| bucket("b"));
            unpause(&mut c);
            counts.push(usize::from(raced.await.unwrap().unwrap().allowed));
            assert!(horizon_record(&server, &pods.prefix).is_some(), "raised");
            pods.at(300);
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [1, 1, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// The reload the other way round: B reloads while a call of B's that reads the record is
/// held in Redis (its read due: B's first call after its reload, paused writes), and A, still
/// on the old tier, spends 15 with its own quota behind it (its raise queued behind B's read,
/// which Redis runs first: B reads nothing). A reloads.
/// B's plain calls at +300 s: B's next read is due at its first call past the old window
/// (+60 s), which reads A's raise: none admitted, as the twin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_held_while_another_pod_raises_is_read_again_when_due() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h90-read-held",
        || bucket("a"),
        async |pods| {
            let (a, b) = (pods.pod(0), pods.pod(1));
            let mut counts = vec![pods.admitted(1, "warm", &Options::new(), 1).await];
            b.reload(on_its_store(b, bucket("b"))).unwrap();
            let mut c = server.connection();
            pause_writes(&mut c);
            let held = spawned(b, "other", &Options::new());
            until_waiting(&mut c, 1);
            let spent = {
                let (a, own) = (a.clone(), own());
                tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..16 {
                        admitted += usize::from(a.consume("k", &own).await.unwrap().allowed);
                    }
                    admitted
                })
            };
            // On the fleet, A's raise waits behind B's read; on the twin, one connection, it
            // is sent after the read on the same link: Redis runs them in that order anyway.
            if pods.fleet() {
                until_waiting(&mut c, 2);
            }
            unpause(&mut c);
            counts.push(usize::from(held.await.unwrap().unwrap().allowed));
            counts.push(spent.await.unwrap());
            if pods.fleet() {
                a.reload(on_its_store(a, bucket("b"))).unwrap();
            }
            pods.at(300);
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [1, 1, 15, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

// ---------------------------------------------------------------------------------------
// 4. Tiers chosen per call.
// ---------------------------------------------------------------------------------------

/// Two tiers: the default [`bucket`] and `"pro"`, the same bucket, chosen per call (a name
/// made at run time). The reload moves `"pro"` (its window doubled at the same rate: another
/// state) and renames the default. A spends 15 with `"pro"` and its own refill (15 minutes
/// owed on pro's state); B's calls with `"pro"` at +300 s, plain: none, as the twin; and at
/// +400 s with the quota of its own, on the moved tier a token every 2 minutes tolerating 25:
/// 17 of 26, the 15 minutes owed carried (8 more than none carried), as the twin.
#[tokio::test]
async fn a_tier_chosen_per_call_moved_by_a_reload_on_a_fleet() {
    let server = RedisServer::start();
    let pro = |minutes: u64| {
        Tier::new("pro", 10 * minutes)
            .burst(5)
            .refill(10 * minutes)
            .window(Duration::from_secs(60 * minutes))
            .strategy(Strategy::TokenBucket)
    };
    let first = move || bucket("a").tier(pro(1));
    let (fleet, twin) = fleet_and_twin(&server, "h90-tier", first, async |pods| {
        let tier = String::from("pro");
        let mine = own().tier(tier.clone());
        let mut counts = vec![pods.admitted(0, "k", &mine, 16).await];
        pods.reload_all(|| bucket("b").tier(pro(2)));
        pods.at(300);
        counts.push(
            pods.admitted(1, "k", &Options::new().tier(tier.clone()), 16)
                .await,
        );
        pods.at(400);
        counts.push(pods.admitted(1, "k", &mine, 26).await);
        counts
    })
    .await;
    assert_eq!(twin, [15, 0, 17], "twin");
    assert_eq!(fleet, twin, "fleet");
}

// ---------------------------------------------------------------------------------------
// 5. A read of the record that fails under `Allow` or `Local`.
// ---------------------------------------------------------------------------------------

/// Until `call` has ended or `c`'s server holds `n` clients waiting (5 s at most): a call
/// whose decision the failure policy answered sends no script to wait.
async fn until_waiting_or_done<T>(c: &mut redis::Connection, n: u64, call: &JoinHandle<T>) {
    for _ in 0..5_000 {
        if call.is_finished() || ratelimit_tests::redis_server::waiting(c) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("neither ended nor {n} waiting");
}

/// A's 15 with its own quota (the record raised), both reloaded to the tier renamed; at
/// +300 s (past the configured carrying) B's first plain call has the record to read, and
/// that read fails: writes paused, a timeout of 300 ms. Under `Allow` and `Local` the call
/// is answered by the policy (`horizon_failure_answered`, `Site::failed`: unlimited, or
/// from the pod's share in memory), on the fleet and on the twin alike (1 each), nothing
/// sent to Redis on what B alone knew (before, its decision went on to Redis on the same
/// link, behind the held read, and timed out too: the policy's answer then as well). Writes let
/// through again, B's next 16 plain calls read the record and carry the old state: none, as
/// the twin. Held; where the read fails at once (its link killed), see
/// [`a_due_read_whose_link_is_killed_under_allow_or_local`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_read_that_fails_under_allow_or_local_is_answered_by_the_policy_then_read_again() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }] {
        let options = || {
            RedisOptions::new(server.url())
                .timeout(Duration::from_millis(300))
                .on_failure(policy)
        };
        let script = async |pods: &Pods| {
            let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            let mut c = server.connection();
            pause_writes(&mut c);
            let call = spawned(pods.pod(1), "k", &Options::new());
            // Its read, then (timed out) its decision.
            until_waiting(&mut c, 1);
            until_waiting_or_done(&mut c, 2, &call).await;
            unpause(&mut c);
            let decided = call.await.unwrap().unwrap();
            counts.push(usize::from(decided.allowed));
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        };
        let pods = |n| Pods::on_redis(options, "h90-read-fails", &vec![0; n], || bucket("a"));
        let (fleet, twin) = fleet_and_twin_of(pods, script).await;
        results.push((policy, fleet, twin));
    }
    for (policy, _, twin) in &results {
        assert_eq!(twin, &[15, 1, 0], "{policy:?}: twin");
    }
    for (policy, fleet, twin) in &results {
        assert_eq!(fleet, twin, "{policy:?}: fleet (all: {results:?})");
    }
}

/// Every normal client of `c`'s server but `c` killed (`CLIENT KILL`): what each was
/// running or waiting to run is dropped, never run.
fn kill_links(c: &mut redis::Connection) {
    (redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"))
        .arg("SKIPME")
        .arg("yes")
        .exec(c)
        .unwrap();
}

/// The same read failing at once: B's read held in Redis (writes paused) and its link
/// killed there, so that the read fails with the store's error. The call went on to its
/// decision on a new link, which ran once writes were let through: on the moved state
/// alone, as far as B knew, admitted by Redis, 1 (fleet [15, 1, 0]) against 0 on the twin
/// ([15, 0, 0]), which carries the old state for the quota of its own it saw, under `Allow`
/// and `Local` alike. Closed: the call is answered by the policy alone (`Site::failed`:
/// unlimited, or the pod's share in memory), never by Redis. Then 16 more plain calls on B,
/// which read the record (still due): none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_read_whose_link_is_killed_under_allow_or_local() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }] {
        let options = || {
            RedisOptions::new(server.url())
                .timeout(Duration::from_secs(2))
                .on_failure(policy)
        };
        let script = async |pods: &Pods| {
            let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            let mut c = server.connection();
            pause_writes(&mut c);
            let call = spawned(pods.pod(1), "k", &Options::new());
            until_waiting(&mut c, 1);
            kill_links(&mut c);
            until_waiting_or_done(&mut c, 1, &call).await;
            unpause(&mut c);
            let decided = call.await.unwrap();
            // Admitted by Redis (a real level), not by the policy's unlimited answer.
            let by_redis = decided.is_ok_and(|d| d.allowed && d.limit == 15);
            counts.push(usize::from(by_redis));
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        };
        let pods = |n| Pods::on_redis(options, "h90-read-killed", &vec![0; n], || bucket("a"));
        let (fleet, twin) = fleet_and_twin_of(pods, script).await;
        results.push((policy, fleet, twin));
    }
    for (policy, _, twin) in &results {
        assert_eq!(twin, &[15, 0, 0], "{policy:?}: twin");
    }
    for (policy, fleet, twin) in &results {
        assert_eq!(fleet, twin, "{policy:?}: fleet (all: {results:?})");
    }
}

/// The raise's side of the same: A's first call with its own quota has its raise time out
/// (writes paused, 300 ms) under `Allow` and `Local`: the call is answered by the policy
/// (`Site::failed`: admitted unlimited, or by the pod's share in memory), nothing sent to
/// Redis for it; writes let through, Redis runs the raise it held (the record raised), and
/// A's next 16 calls with the quota raise it again and spend 15 (14 before, when the first
/// call went on to Redis behind its raise on the same link and was spent there). Both
/// reloaded to the tier renamed, B's plain calls at +300 s: none, as the twin. Where the
/// raise is lost rather than late, see [`a_raise_whose_link_is_killed_under_allow_or_local`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_that_times_out_under_allow_or_local_writes_nothing_past_the_record() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }] {
        let options = || {
            RedisOptions::new(server.url())
                .timeout(Duration::from_millis(300))
                .on_failure(policy)
        };
        let script = async |pods: &Pods| {
            let mut counts = vec![pods.admitted(0, "warm", &Options::new(), 1).await];
            let mut c = server.connection();
            pause_writes(&mut c);
            let call = spawned(pods.pod(0), "k", &own());
            until_waiting(&mut c, 1);
            until_waiting_or_done(&mut c, 2, &call).await;
            unpause(&mut c);
            counts.push(usize::from(call.await.unwrap().unwrap().allowed));
            counts.push(pods.admitted(0, "k", &own(), 16).await);
            assert!(
                horizon_record(&server, &pods.prefix).is_some(),
                "{policy:?}: raised"
            );
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        };
        let pods = |n| Pods::on_redis(options, "h90-raise-fails", &vec![0; n], || bucket("a"));
        let (fleet, twin) = fleet_and_twin_of(pods, script).await;
        results.push((policy, fleet, twin));
    }
    for (policy, fleet, twin) in &results {
        assert_eq!(twin, &[1, 1, 15, 0], "{policy:?}: twin");
        assert_eq!(fleet, twin, "{policy:?}: fleet (all: {results:?})");
    }
}

/// The raise lost rather than late: A's call with its own quota of cost 15 (the whole
/// bucket: 15 minutes owed) has its raise held in Redis (writes paused) and its link killed
/// there (`CLIENT KILL`: the raise is never run). Under `Deny` the call is refused with the
/// store's error. Under `Allow` and `Local` it went on to its decision, sent on a new link
/// where Redis answered again: the state written with no record, and both reloaded to the
/// tier renamed, B's plain calls at +300 s (past the configured carrying) read no record
/// (the second count: 0) and let the old state go: 15, where the twin, which knew the quota
/// of its own, carried it: none (fleet [1, 1, 0, 15] against [1, 1, 0, 0], under each;
/// RELIABILITY item 19's "a Redis that answers again between a failed raise and the call's
/// decision", made deterministic). Closed: the call is answered by the policy alone, as any
/// call whose store failed (`Site::failed`): under `Allow` admitted unlimited, under `Local`
/// by the pod's share (7 of 15 here: a cost of 15 above it is the share's error), nothing
/// written to Redis, so B's 15 at +300 s are the twin's too. Under `Deny` the call is
/// refused, nothing written: 15 on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_whose_link_is_killed_under_allow_or_local() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    let policies = [
        FailurePolicy::Deny,
        FailurePolicy::Allow,
        FailurePolicy::Local { pods: 2 },
    ];
    for policy in policies {
        let options = || {
            RedisOptions::new(server.url())
                .timeout(Duration::from_secs(2))
                .on_failure(policy)
        };
        let script = async |pods: &Pods| {
            let mut counts = vec![pods.admitted(0, "warm", &Options::new(), 1).await];
            let mut c = server.connection();
            pause_writes(&mut c);
            let call = spawned(pods.pod(0), "k", &own().cost(15));
            until_waiting(&mut c, 1);
            kill_links(&mut c);
            until_waiting_or_done(&mut c, 1, &call).await;
            unpause(&mut c);
            counts.push(usize::from(call.await.unwrap().is_ok_and(|d| d.allowed)));
            let raised = horizon_record(&server, &pods.prefix).is_some();
            counts.push(usize::from(raised));
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            let mut admitted = 0;
            for _ in 0..16 {
                // A link the kill left broken may refuse a call or two with its error.
                let decided = pods.pod(1).consume("k", &Options::new()).await;
                admitted += usize::from(decided.is_ok_and(|d| d.allowed));
            }
            counts.push(admitted);
            counts
        };
        let pods = |n| Pods::on_redis(options, "h90-raise-killed", &vec![0; n], || bucket("a"));
        let (fleet, twin) = fleet_and_twin_of(pods, script).await;
        results.push((policy, fleet, twin));
    }
    for (policy, _, twin) in &results {
        let expected = match policy {
            FailurePolicy::Allow => [1, 1, 0, 15],
            _ => [1, 0, 0, 15],
        };
        assert_eq!(twin, &expected, "{policy:?}: twin");
    }
    for (policy, fleet, twin) in &results {
        assert_eq!(fleet, twin, "{policy:?}: fleet (all: {results:?})");
    }
}

// ---------------------------------------------------------------------------------------
// 6. What an attacker with access to the keys, or a restart, leaves in the record.
// ---------------------------------------------------------------------------------------

/// Records of other shapes than fleet_horizon_redis' five (a list, a set, a sorted set, an
/// empty string, signs, spaces, a fourth number, hexadecimal, a fraction, a string of a
/// mebibyte), under every failure policy: the call that must raise it is refused with
/// [`Error::UnexpectedState`] and nothing spent; a pod's read of it at a carry boundary too.
/// A failure policy answers a store that cannot answer, never one that answers garbage.
#[tokio::test]
async fn records_of_other_shapes_refuse_under_every_policy() {
    let server = RedisServer::start();
    let huge = "7".repeat(1 << 20);
    let strings = [
        "", "-1 0 0", "1 2 3 4", " 1 2 3", "1 2 3 ", "1  2 3", "0x1 2 3", "+1 2 3", "1.5 2 3",
        "1\n2\n3", &huge,
    ];
    let policies = [
        FailurePolicy::Deny,
        FailurePolicy::Allow,
        FailurePolicy::Local { pods: 2 },
    ];
    let kinds = ["list", "set", "zset"].into_iter().map(|k| (k, ""));
    let shapes: Vec<(&str, &str)> = kinds
        .chain(strings.iter().map(|s| ("string", *s)))
        .collect();
    for policy in policies {
        for &(kind, text) in &shapes {
            let p = prefix("h90-garbage");
            let mut c = server.connection();
            let key = horizon_key(&p);
            let mut planted = match kind {
                "list" => redis::cmd("RPUSH"),
                "set" => redis::cmd("SADD"),
                "zset" => redis::cmd("ZADD"),
                _ => redis::cmd("SET"),
            };
            planted.arg(&key);
            match kind {
                "zset" => planted.arg(1).arg("1 2 3"),
                "string" => planted.arg(text),
                _ => planted.arg("1 2 3"),
            };
            planted.exec(&mut c).unwrap();
            let options = RedisOptions::new(server.url())
                .timeout(Duration::from_secs(2))
                .on_failure(policy);
            let (service, clock) = on_redis_with(options, &p, bucket("a"));
            let what = format!("{policy:?}, {kind} {:?}", &text[..text.len().min(12)]);
            let refused = service.consume("k", &own()).await;
            assert!(
                matches!(refused, Err(Error::UnexpectedState { .. })),
                "{what}: {refused:?}"
            );
            let mut admitted = 0;
            for _ in 0..16 {
                admitted +=
                    usize::from(service.consume("k", &Options::new()).await.unwrap().allowed);
            }
            assert_eq!(admitted, 15, "{what}: nothing spent");
            service.reload(on_its_store(&service, bucket("b"))).unwrap();
            clock.set(START + Duration::from_secs(300));
            let read = service.consume("k", &Options::new()).await;
            assert!(
                matches!(read, Err(Error::UnexpectedState { .. })),
                "{what}: {read:?}"
            );
            let left: String = redis::cmd("TYPE").arg(&key).query(&mut c).unwrap();
            assert_eq!(left, kind, "{what}: left as it was");
        }
    }
}

/// Redis restarted (no persistence: every key gone) after A raised the record for its own
/// quota (a first call on another key), and before A spends 15 with it on `"k"` (15 minutes
/// owed there). A knows the record raised and raises nothing more; both reload to the tier
/// renamed; B's plain calls at +300 s read no record and let the move go. The twin, which
/// noted the quota itself, carries the old state: none. As a record deleted
/// (probes_horizon_record_redis), but the record lost before the state is written, with
/// nothing but A's memory of its raise to say it stands. Found: 15 admitted on B against 0.
/// Closed (helper-109): the store counts its links lost and the servers it finds other than
/// the last (`run_id`: `Store::records_lost`), and a pod forgets what it knows recorded when
/// that count moves, so A's first spend past nothing raises the record again.
#[tokio::test]
async fn a_restart_between_a_raise_and_the_spend_it_covers_loses_the_record() {
    let mut server = RedisServer::start();
    let mut results = Vec::new();
    for fleet in [true, false] {
        let n = if fleet { 2 } else { 1 };
        let pods = Pods::on_redis(within(&server), "h90-restart", &vec![0; n], || bucket("a"));
        let mut counts = vec![pods.admitted(0, "warm", &own(), 1).await];
        assert!(horizon_record(&server, &pods.prefix).is_some(), "raised");
        server.stop();
        server.restart();
        // Until every pod's connection answers again (plain calls: they raise nothing).
        pods.until_all_answered(100).await;
        counts.push(pods.admitted(0, "k", &own(), 16).await);
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
        results.push(counts);
    }
    let (fleet, twin) = (&results[0], &results[1]);
    assert_eq!(twin, &[1, 15, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// As [`a_restart_between_a_raise_and_the_spend_it_covers_loses_the_record`], but A's first
/// calls after the restart are its spends with the quota of its own, no plain call between:
/// the first finds its link dead (failed, on the fleet and the twin alike: the link's end is
/// seen with it), and the next ones raise the record again before they spend. Fails without
/// `Store::records_lost` (A raises nothing more: B admits 15 at +300 s against none), or
/// with the service not forgetting what it knew recorded where the count moved.
#[tokio::test]
async fn a_pod_raises_the_record_again_at_its_first_spend_after_a_restart() {
    let mut server = RedisServer::start();
    let mut results = Vec::new();
    for fleet in [true, false] {
        let skew: &[u64] = if fleet { &[0, 0] } else { &[0] };
        let pods = Pods::on_redis(within(&server), "h109-restart", skew, || bucket("a"));
        let warm = pods.admitted(0, "warm", &own(), 1).await;
        assert!(horizon_record(&server, &pods.prefix).is_some(), "raised");
        server.stop();
        server.restart();
        assert_eq!(
            horizon_record(&server, &pods.prefix),
            None,
            "lost with the restart"
        );
        let (spent, failed) = pods.admitted_or_failed(0, "k", &own(), 17).await;
        assert!(failed <= 1, "{failed} failed");
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        let after = pods.admitted_or_failed(1, "k", &Options::new(), 16).await;
        results.push((warm, spent, after));
    }
    let (fleet, twin) = (&results[0], &results[1]);
    assert_eq!(twin, &(1, 15, (0, 0)), "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// The store's count of records lost (`Store::records_lost`) moves where a link finds
/// another server than the last one found, though no link was seen ending (the one before
/// ended with its runtime), and not where it finds the same one: a restart moves it, a
/// runtime's new link to the same server does not (no raise more for it).
#[tokio::test]
async fn a_link_that_finds_another_server_counts_the_records_lost() {
    use ratelimit::store::Store;
    let mut server = RedisServer::start();
    let store = ratelimit::RedisStore::new(within(&server)()).unwrap();
    let key = ratelimit::store::StoreKey::new("h109-lost:{k}").unwrap();
    let quota = ratelimit::Quota::new(10, Duration::from_secs(60)).unwrap();
    let call_on_a_runtime_of_its_own = || {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let request = ratelimit::store::Request::spend(key, &quota, 1, 0).unwrap();
                    runtime.block_on(store.decide(request)).unwrap();
                })
                .join()
                .unwrap()
        })
    };
    call_on_a_runtime_of_its_own();
    assert_eq!(store.records_lost(), 0, "the first server");
    call_on_a_runtime_of_its_own();
    assert_eq!(
        store.records_lost(),
        0,
        "the same server, another runtime's link"
    );
    server.stop();
    server.restart();
    call_on_a_runtime_of_its_own();
    assert_eq!(store.records_lost(), 1, "a restarted server");
}

/// A spend in flight across the restart: A raised the record on a link of another runtime,
/// which ended with its runtime (a link dropped so is not counted lost), Redis restarted, and
/// A's next call, a spend of 15 with its own quota, connects anew within its decision: the
/// store finds the server another (its `run_id`) only then, after A checked whether a raise
/// was due, and the state is written with no record. B's plain calls at +300 s read none.
/// The twin carries the old state: none admitted. Found: 15 admitted on B against 0.
/// Closed: a pod that noted anything of its own raises the record before a spend whose
/// call connects first (`Store::connects_first`): the raise connects, finds the server
/// another, and the spend follows it.
#[tokio::test]
async fn a_spend_that_connects_to_a_restarted_server_raises_the_record_first() {
    let mut server = RedisServer::start();
    let mut results = Vec::new();
    for fleet in [true, false] {
        let skew: &[u64] = if fleet { &[0, 0] } else { &[0] };
        let pods = Pods::on_redis(within(&server), "h109-in-flight", skew, || bucket("a"));
        let warm = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let decided = runtime.block_on(pods.pod(0).consume("warm", &own()));
                    usize::from(decided.unwrap().allowed)
                })
                .join()
                .unwrap()
        });
        assert!(horizon_record(&server, &pods.prefix).is_some(), "raised");
        server.stop();
        server.restart();
        let spent = pods.admitted_or_failed(0, "k", &own().cost(15), 1).await;
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        let after = pods.admitted_or_failed(1, "k", &Options::new(), 16).await;
        results.push((warm, spent, after));
    }
    let (fleet, twin) = (&results[0], &results[1]);
    assert_eq!(twin, &(1, (1, 0), (0, 0)), "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// [`a_restart_between_a_raise_and_the_spend_it_covers_loses_the_record`] on a Redis Cluster:
/// the master of the record's slot restarted (no persistence: its keys gone, its slots kept
/// by its `nodes.conf`) after A raised the record and before A spends 15 with its own quota
/// on `"k"`. redis-rs' cluster connection reconnects unseen, so the store's count of records
/// lost (`Store::records_lost`) stays 0 there: A raises nothing more, and B's plain calls at
/// +300 s read no record. The twin carries the old state: none.
#[tokio::test]
#[ignore = "FOUND: 15 admitted on pod B at +300 s against 0 on the twin (Cluster: the record's master restarted empty, unseen)"]
async fn a_restart_of_the_records_cluster_node_between_a_raise_and_the_spend_it_covers() {
    let mut cluster = RedisCluster::start();
    let urls = cluster.urls();
    let options = || RedisOptions::cluster(urls.clone()).timeout(Duration::from_secs(2));
    let mut results = Vec::new();
    for fleet in [true, false] {
        let pods = {
            let p = prefix("h109-cluster-restart");
            let n = if fleet { 2 } else { 1 };
            let pods = (0..n)
                .map(|_| on_redis_with(options(), &p, bucket("a")))
                .collect();
            Pods::new(pods, &vec![0; n], p)
        };
        let mut counts = vec![pods.admitted(0, "warm", &own(), 1).await];
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(horizon_key(&pods.prefix))
            .query(&mut cluster.nodes[0].connection())
            .unwrap();
        let node = cluster.master_of(slot).expect("a master");
        cluster.nodes[node].stop();
        cluster.nodes[node].restart();
        let mut c = cluster.nodes[node].connection();
        // Until the restarted master serves its slots again, and every pod answers (plain
        // calls: they raise nothing).
        for _ in 0..400 {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
            if info.contains("cluster_state:ok") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pods.until_all_answered(200).await;
        let held: Option<String> = redis::cmd("GET")
            .arg(horizon_key(&pods.prefix))
            .query(&mut c)
            .unwrap();
        assert_eq!(held, None, "lost with the restart");
        counts.push(pods.admitted_or_failed(0, "k", &own(), 16).await.0);
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        counts.push(pods.admitted_or_failed(1, "k", &Options::new(), 16).await.0);
        results.push(counts);
    }
    let (fleet, twin) = (&results[0], &results[1]);
    assert_eq!(twin, &[1, 15, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// `until_ready` (a caller that paces itself, outside the queue) on B at +300 s, after A's
/// 15 with its own quota and both pods reloaded to the tier renamed: a plain call there
/// reads the record first and carries the 15 minutes owed (none admitted, as the twin).
/// Each of 16 calls with a deadline 1 ms away (a refusal ends it at once). Found: it read
/// no record, nowhere (its site worked out with what B alone knew): 15 admitted. Closed: it
/// reads where due before its site is worked out, and works it out again where a read is
/// due or raised what B knows before it asks again (`wait.rs`).
#[tokio::test]
async fn until_ready_on_another_pod_reads_the_record() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h90-until-ready",
        || bucket("a"),
        async |pods| {
            let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            let mut admitted = 0;
            for _ in 0..16 {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(1);
                let ready = pods
                    .pod(1)
                    .until_ready("k", &Options::new(), deadline)
                    .await;
                admitted += usize::from(ready.is_ok_and(|d| d.allowed));
            }
            counts.push(admitted);
            counts
        },
    )
    .await;
    assert_eq!(twin, [15, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

// ---------------------------------------------------------------------------------------
// Every move of `moves::MOVES` across the fleet, another prefix among them.
// ---------------------------------------------------------------------------------------

/// [`bucket`]`(name)` on a window of `minutes`, at the same rate (10 a minute plus 5).
fn bucket_on(name: &str, minutes: u64) -> ConfigBuilder {
    let tier = Tier::new(name, 10 * minutes)
        .burst(5)
        .refill(10 * minutes)
        .window(Duration::from_secs(60 * minutes))
        .strategy(Strategy::TokenBucket);
    ratelimit::Config::builder().tier(tier).default_tier(name)
}

/// A's 15 with its own quota (the record raised under the first prefix), then every pod
/// makes the move's reloads (10 s apart where two: renamed, the window doubled, another key
/// prefix, renamed twice, renamed and back); B's plain calls at +300 s, past the configured
/// carrying of the last reload: none, as the twin. Under another prefix, B reads the record
/// of every prefix it carries from (the old one's, where A raised it), not only its own.
#[tokio::test]
async fn every_move_on_a_fleet_carries_what_another_pods_quota_of_its_own_left() {
    let server = RedisServer::start();
    let mut all = Vec::new();
    for how in MOVES {
        let (fleet, twin) = fleet_and_twin(
            &server,
            "h90-moves",
            || bucket("a"),
            async |pods| {
                let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
                for (i, &(name, minutes, other_prefix)) in how.reloads().iter().enumerate() {
                    pods.at(10 * i as u64);
                    let at = match other_prefix {
                        true => format!("{}-q", pods.prefix),
                        false => pods.prefix.clone(),
                    };
                    for (service, _) in &pods.pods {
                        let running = service.config();
                        let to = bucket_on(name, u64::from(minutes))
                            .store(running.store().clone())
                            .key_prefix(&at)
                            .build()
                            .unwrap();
                        service.reload(to).unwrap();
                    }
                }
                pods.at(300);
                counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
                counts
            },
        )
        .await;
        all.push((how, fleet, twin));
    }
    for (how, fleet, twin) in &all {
        assert_eq!(twin, &[15, 0], "{how:?}: twin");
        assert_eq!(fleet, twin, "{how:?}: fleet (all: {all:?})");
    }
}

// ---------------------------------------------------------------------------------------
// Shortcuts of the Redis store: leased budgets and refusals answered in the process.
// ---------------------------------------------------------------------------------------

/// Every pod with leased slices of 8 and refused keys answered in the process (the calls a
/// pod decides without a round trip): A's 15 with its own quota, both reloaded to the tier
/// renamed, B's plain calls at +300 s: none, as the twin (a lease is granted by a decision
/// on a site worked out after the record's read, and carries the old state as it does).
#[tokio::test]
async fn leased_and_locally_refused_calls_on_another_pod_carry_what_the_record_holds() {
    let server = RedisServer::start();
    let options = || {
        RedisOptions::new(server.url())
            .timeout(Duration::from_secs(2))
            .leases(LeaseOptions::new(8))
            .local_refusals(100)
    };
    let script = async |pods: &Pods| {
        let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
        pods.at(301);
        counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
        counts
    };
    let pods = |n| Pods::on_redis(options, "h90-leases", &vec![0; n], || bucket("a"));
    let (fleet, twin) = fleet_and_twin_of(pods, script).await;
    assert_eq!(twin, [15, 0, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// [`a_waiter_queued_before_another_pods_raise_is_decided_on_what_it_knew`] with the call
/// behind the head made through a site B prepared at +2 s (`"prepared"`: what B knew then,
/// current until a read), or kept for a refund (`"spend"`): each waits in the queue as a
/// call of `consume` does, and is refused where B's read at +300 s grew what B knows, as
/// the twin refuses it.
#[tokio::test]
async fn a_prepared_or_kept_waiter_queued_before_another_pods_raise_is_refused() {
    let server = RedisServer::start();
    let mut all = Vec::new();
    for how in ["prepared", "spend"] {
        let (fleet, twin) = fleet_and_twin(
            &server,
            "h90-queue-prepared",
            || queued_bucket("a"),
            async |pods| {
                let b = pods.pod(1);
                b.reload(on_its_store(b, queued_bucket("b"))).unwrap();
                pods.at(1);
                let mut counts = vec![pods.admitted(1, "other", &Options::new(), 1).await];
                counts.push(pods.admitted(0, "k", &own(), 16).await);
                pods.at(2);
                let head = spawned(b, "k", &Options::new().cost(2).queue(true));
                until_depth(b, 1).await;
                let prepared = std::sync::Arc::new(b.prepare(&Options::new().queue(true)).unwrap());
                let behind = tokio::spawn(async move {
                    match how {
                        "prepared" => prepared.consume("k").await,
                        _ => prepared
                            .spend("k")
                            .await
                            .map(|spent| spent.decision().clone()),
                    }
                });
                until_depth(b, 2).await;
                if pods.fleet() {
                    let a = pods.pod(0);
                    a.reload(on_its_store(a, queued_bucket("b"))).unwrap();
                }
                pods.at(300);
                head.abort();
                let waited = tokio::time::timeout(Duration::from_secs(5), behind).await;
                counts.push(match waited {
                    Ok(joined) => usize::from(joined.unwrap().is_ok_and(|d| d.allowed)),
                    Err(_) => 0,
                });
                counts
            },
        )
        .await;
        all.push((how, fleet, twin));
    }
    for (how, fleet, twin) in &all {
        assert_eq!(twin, &[1, 15, 0], "{how}: twin");
        assert_eq!(fleet, twin, "{how}: fleet (all: {all:?})");
    }
}

/// No move at all: B's waiter (a head of cost 2 refused, a call of cost 1 behind it, one
/// token left) while a call of B's own raises the record and reads back A's longer quota of
/// its own (a block of ten hours): what B knows grows, with no replaced configuration to
/// carry from. The head dropped, the waiter behind it is admitted by the token left, as on
/// the twin: a waiter's wait ends on such a read only where its configuration keeps a
/// replaced one (a wait ended on every read that grew, it was refused, 0 against 1).
#[tokio::test]
async fn a_read_that_grows_what_a_pod_knows_without_a_move_ends_no_wait() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h90-queue-no-move",
        || queued_bucket("a"),
        async |pods| {
            let b = pods.pod(1);
            let hours = Options::new().block_for(Duration::from_secs(36_000));
            let mut counts = vec![pods.admitted(0, "a-own", &hours, 1).await];
            counts.push(pods.admitted(1, "k", &Options::new(), 14).await);
            let head = spawned(b, "k", &Options::new().cost(2).queue(true));
            until_depth(b, 1).await;
            let behind = spawned(b, "k", &Options::new().queue(true));
            until_depth(b, 2).await;
            counts.push(pods.admitted(1, "b-own", &own(), 1).await);
            head.abort();
            let waited = tokio::time::timeout(Duration::from_secs(5), behind).await;
            counts.push(match waited {
                Ok(joined) => usize::from(joined.unwrap().is_ok_and(|d| d.allowed)),
                Err(_) => 0,
            });
            counts
        },
    )
    .await;
    assert_eq!(twin, [1, 14, 1, 1], "twin");
    assert_eq!(fleet, twin, "fleet");
}

// ---------------------------------------------------------------------------------------
// Adjustments made on another pod after the move.
// ---------------------------------------------------------------------------------------

/// A's 15 with its own quota, both reloaded to the tier renamed; at +300 s B penalizes
/// `"k"` by 1 (`"penalty"`: then none of B's plain calls, the old debt carried) or rewards it
/// by 15 with the quota of its own (`"reward"`: the 15 minutes given back, then 15): an
/// adjustment reads the record where due before it works out which states it adjusts, so B
/// adjusts the old state as the twin does. Held.
#[tokio::test]
async fn an_adjustment_on_another_pod_after_the_move_reads_the_record() {
    let server = RedisServer::start();
    let mut all = Vec::new();
    for how in ["penalty", "reward"] {
        let (fleet, twin) = fleet_and_twin(
            &server,
            "h90-adjust",
            || bucket("a"),
            async |pods| {
                let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
                pods.reload_all(|| bucket("b"));
                pods.at(300);
                let b = pods.pod(1);
                match how {
                    "penalty" => b.penalize("k", &Options::new(), 1).await.unwrap(),
                    _ => b.reward("k", &own(), 15).await.unwrap(),
                };
                counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
                counts
            },
        )
        .await;
        all.push((how, fleet, twin));
    }
    for (how, _, twin) in &all {
        let expected = if *how == "penalty" { [15, 0] } else { [15, 15] };
        assert_eq!(twin, &expected, "{how}: twin");
    }
    for (how, fleet, twin) in &all {
        assert_eq!(fleet, twin, "{how}: fleet (all: {all:?})");
    }
}

// ---------------------------------------------------------------------------------------
// 7. Surfaces that spend with a quota of their own (helper-97).
// ---------------------------------------------------------------------------------------

/// A's 15 with its own quota through `until_ready` (a deadline a second away each), both
/// reloaded to the tier renamed, B's plain calls at +300 s: none, as the twin. Counts: A's
/// admitted, the record there after them, B's plain calls. Found: `until_ready` raised the
/// record nowhere, so A's state was written past it and B let the old state go: 15 (fleet
/// [15, 0, 15]) against 0 (twin [15, 0, 0]). Closed: it raises before each ask where due,
/// as every spending call (`wait.rs`'s `ready_under`).
#[tokio::test]
async fn until_ready_with_a_quota_of_its_own_raises_the_record() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h97-until-ready-raise",
        || bucket("a"),
        async |pods| {
            let mut admitted = 0;
            for _ in 0..16 {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
                let ready = pods.pod(0).until_ready("k", &own(), deadline).await;
                admitted += usize::from(ready.is_ok_and(|d| d.allowed));
            }
            let mut counts = vec![admitted];
            counts.push(usize::from(horizon_record(&server, &pods.prefix).is_some()));
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [15, 1, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// The same through a prepared site's `try_consume` (and `Pending::consume`), the path an
/// annotated fn's call takes too (`enforce_now`). Found: decided at once or awaited on the
/// store key composed, it raised nothing: 15 (fleet [15, 0, 15]) against 0 (twin
/// [15, 0, 0]). Closed: a call that raises first is decided by every step
/// (`Prepared::begin`, `awaited`).
#[tokio::test]
async fn a_prepared_sites_try_consume_with_a_quota_of_its_own_raises_the_record() {
    let server = RedisServer::start();
    let (fleet, twin) = fleet_and_twin(
        &server,
        "h97-try-consume-raise",
        || bucket("a"),
        async |pods| {
            let site = std::sync::Arc::new(pods.pod(0).prepare(&own()).unwrap());
            let mut admitted = 0;
            for _ in 0..16 {
                let decided = match site.try_consume("k") {
                    ratelimit::Attempt::Decided(decided) => decided,
                    ratelimit::Attempt::Pending(pending) => pending.consume().await,
                };
                admitted += usize::from(decided.is_ok_and(|d| d.allowed));
            }
            let mut counts = vec![admitted];
            counts.push(usize::from(horizon_record(&server, &pods.prefix).is_some()));
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [15, 1, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}
