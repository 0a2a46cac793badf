//! helper-74's attacks on a budget without a user key moved by a reload, on a Redis Cluster
//! (`cluster_moves`): its old state lies in another slot than the moved one, read there first
//! (`lua/level.lua`) and carried by the stacked script from what was read
//! (`RedisStore::run_stacked`). Two round trips where one server runs one script: what may
//! happen between them is what these probe, against the same history on one server.
//!
//! Time: Redis decides on its own clock, the services' transitions on hand-driven ones (one
//! a pod). Token buckets of 6 s a token: nothing the tests count refills in the milliseconds
//! a test takes on Redis' clock. The order of requests between two round trips is made with
//! `CLIENT PAUSE WRITE` on one node (every script waits there, in the order it came, while
//! the other nodes run theirs), waited on by the node's own count of waiting clients.

use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{Error, FailurePolicy, RedisOptions};
use ratelimit_tests::cluster_pods::{
    admitted_by, admitted_of, budget_key, fleet, node_of, pod, reloaded, two_masters,
    until_refused, Call, MINUTE, REPORT, REPORT_FOR,
};
use ratelimit_tests::redis_server::{
    pause_writes as pause, prefix, unpause, until_waiting, RedisCluster, RedisServer,
};

ratelimit_tests::moved_budget_fns!();

/// Whether a call of `report` under `m` was admitted (a refusal over the limit: false; any
/// other error fails the test).
async fn admitted(m: &TestModule) -> bool {
    admitted_by(m, plain).await
}

/// What the token bucket at `key` on `node` owes, in microseconds of its node's clock.
fn owed(node: &RedisServer, key: &str) -> u64 {
    let mut c = node.connection();
    let state: String = redis::cmd("GET").arg(key).query(&mut c).unwrap();
    let digits: String = state[1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let tat: u64 = digits.parse().unwrap();
    tat - ratelimit_tests::redis_server::redis_time(&mut c)
}

/// A history of [`moved_while_others_spend`]: calls of `call` spent before the move, pods that
/// moved and pods still in the old window.
#[derive(Clone, Copy)]
struct History {
    call: Call,
    before: usize,
    movers: usize,
    others: usize,
}

/// What `movers` moving pods and `others` still in the old window (their clocks a minute
/// apart: a reload reaches pods at different times) admit after the move, `before` spent
/// before it: the movers' first calls read the old state, then the others' calls spend on
/// it (they decide slot by slot, the old state's first: `slots.rs`), then the movers'
/// scripts run, one after the other, then the others' spends on the moved state; then one
/// mover calls until refused. On one server, the movers' scripts, then the others'. `old`:
/// the server every old-state script runs on (one server's own, or the old state's master);
/// `moved`: the moved state's master on a Cluster. (Admitted by the movers' first calls, by
/// the others' calls, by the calls after.)
///
/// Until the old state's slot came first (the moved state's before), the others' spends on
/// the moved state came between the movers' reads and scripts too, made by pausing the old
/// state's master; the movers' scripts now wait on the moved state's master, ahead of them.
fn moved_while_others_spend(
    options: &RedisOptions,
    p: &str,
    old: &RedisServer,
    moved: Option<&RedisServer>,
    history: History,
) -> (usize, usize, usize) {
    let History {
        call,
        before,
        movers,
        others,
    } = history;
    let runtime = ratelimit_tests::two_workers();
    let (movers, others) = fleet(&runtime, options, p, (call, before), (movers, others));
    let spawn = |pods: &[TestModule]| -> Vec<_> {
        (pods.iter())
            .map(|m| runtime.spawn(m.scope(call())))
            .collect()
    };
    // The server where the movers' scripts wait: one server's own, or the moved state's
    // master, whose pause lets their reads of the old state through and holds the others'
    // spends on the moved state behind the movers' scripts (the old state's slot is decided
    // first: `slots.rs`).
    let mut held = moved.unwrap_or(old).connection();
    pause(&mut held);
    let first = spawn(&movers);
    until_waiting(&mut held, movers.len() as u64);
    let then = spawn(&others);
    until_waiting(&mut held, (movers.len() + others.len()) as u64);
    unpause(&mut held);
    runtime.block_on(async {
        let (first, then) = (admitted_of(first).await, admitted_of(then).await);
        let after = until_refused(&movers[0], call).await;
        (first, then, after)
    })
}

/// Pods that moved and pods still in their old window (a reload reaches pods at different
/// times), calling at once right after the movers' old window: what the movers' old-state
/// reads missed (the others' spends on the old state, made after them) is added by their
/// reads after, and the others' spends on the moved state land after the movers' scripts:
/// the budget of 15, 5 spent before the move, gives 10 after it, as on one server, never the
/// 15 a forgotten debt gives. (The same with the moved state's slot first, the others' moved
/// spends then before the movers' scripts.)
#[test]
fn pods_still_in_the_old_window_spending_between_a_movers_read_and_its_script() {
    let history = History {
        call: plain,
        before: 5,
        movers: 5,
        others: 5,
    };
    let (on_server, on_cluster, owed) = races(history, REPORT);
    assert_eq!(on_server, (5, 5, 0));
    assert_eq!(on_cluster, on_server);
    // Moved, the bucket owes a full bucket's 90 s, never more (no lockout): on each side.
    assert_eq!(owed, (89, 89));
}

/// The same with the fn's budget stacked beside a user's limit in a third slot (two
/// attributes): the moved state's slot is run with the old state read first, the others
/// apart, the old state's first (`slots.rs`), and a Cluster admits the 10 one server admits.
#[test]
fn a_moved_budget_stacked_beside_a_user_while_pods_still_in_the_old_window_spend() {
    let history = History {
        call: beside_a_user,
        before: 5,
        movers: 5,
        others: 5,
    };
    let budget = REPORT_FOR;
    let (on_server, on_cluster, owed) = races(history, budget);
    assert_eq!(on_server, (5, 5, 0));
    assert_eq!(on_cluster, on_server);
    assert_eq!(owed, (89, 89));
}

/// 10 spent before the move (60 s owed), 5 others spending the old bucket's last 5 between
/// a mover's read and its script: the mover, which read 30 s less than the old state then
/// owed, had room for 24 s after its spend. Refused (its spend kept), as one script after the
/// others' refuses it (the old state's 90 s carried leave no room), the moved bucket full
/// after (a bucket's worth, no more). Admitted on its read, the mover's spend was covered by
/// the next carry: 6. The old state's slot decided first (`slots.rs`), the others' spends on
/// the moved state land after the mover's script, so its kept spend takes one of the 5
/// tokens left there: the others admit 4 (their fifth refused by the moved bucket, its
/// spend on the old state given back), 4 after the move where one server admits 5, an
/// over-refusal of the kept spend (fails closed). Their moved spends before its script
/// (the moved state's slot first), it was 5: the others' 5, then the mover refused.
#[test]
fn a_mover_without_room_for_what_its_read_missed_is_refused() {
    let history = History {
        call: plain,
        before: 10,
        movers: 1,
        others: 5,
    };
    let (on_server, on_cluster, owed) = races(history, REPORT);
    // One server runs the mover's one script before the others' (it came first): admitted,
    // and the others' fifth refused by the moved bucket.
    assert_eq!(on_server, (1, 4, 0));
    assert_eq!(on_cluster, (0, 4, 0));
    assert_eq!(owed, (89, 89));
}

/// [`moved_while_others_spend`] of `history` (its fn's budget `budget` in its store keys)
/// on one server and on a Cluster whose old and moved states lie on two masters (the user of
/// `report_for` on the third): what each admitted, and what the moved bucket owes after, in
/// whole seconds (one server's, then the Cluster's).
fn races(history: History, budget: &str) -> (Tally, Tally, (u64, u64)) {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let single = RedisOptions::new(server.url()).timeout(Duration::from_secs(10));
    let single_p = prefix("races-server");
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let key = |p: &str, window: &str| budget_key(p, window, budget);
    let (p, old, new) = two_masters(&cluster, "races-cluster", budget);
    let (old, new) = (&cluster.nodes[old], &cluster.nodes[new]);
    // Each read as its history ends: read after the other's too, the Cluster's bucket had
    // refilled for as long as one server's history took (88 s where 89 are, on a loaded
    // machine).
    let on_cluster = moved_while_others_spend(&nodes, &p, old, Some(new), history);
    let cluster_owed = owed(new, &key(&p, "T120000")) / 1_000_000;
    let on_server = moved_while_others_spend(&single, &single_p, &server, None, history);
    let server_owed = owed(&server, &key(&single_p, "T120000")) / 1_000_000;
    (on_server, on_cluster, (server_owed, cluster_owed))
}

/// Calls admitted, refused over the limit, and failed (or, from
/// [`moved_while_others_spend`], admitted by the movers' first calls, by the others' calls,
/// by the calls after).
type Tally = (usize, usize, usize);

/// How `n` calls of `report` under `m` ended: admitted, refused over the limit, failed.
async fn tally(m: &TestModule, n: usize) -> (usize, usize, usize) {
    let (mut admitted, mut refused, mut failed) = (0, 0, 0);
    for _ in 0..n {
        match m.scope(report()).await {
            Ok(()) => admitted += 1,
            Err(Error::Exceeded(_)) => refused += 1,
            Err(_) => failed += 1,
        }
    }
    (admitted, refused, failed)
}

/// The old state holds garbage (its key overwritten) once the budget moved, under each
/// failure policy: a Cluster, which reads it in its own slot first, answers every call as one
/// server, whose one script reads it beside the moved state (an error for the policy, the
/// moved bucket having room: refused under Deny, admitted under Allow, decided in memory
/// under Local).
#[test]
fn garbage_in_the_old_state_answers_as_on_one_server_under_every_policy() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let policies = [
        FailurePolicy::Deny,
        FailurePolicy::Allow,
        FailurePolicy::Local { pods: 1 },
    ];
    for policy in policies {
        let mut told = Vec::new();
        for on_cluster in [false, true] {
            let p = prefix(&format!("garbage-{}", policy.as_str()));
            let options = match on_cluster {
                false => RedisOptions::new(server.url()),
                true => RedisOptions::cluster(cluster.urls()),
            };
            let options = options.timeout(Duration::from_secs(5)).on_failure(policy);
            let m = pod(&options, &p);
            let runtime = ratelimit_tests::two_workers();
            let old = budget_key(&p, "T60000", REPORT);
            let mut c = match on_cluster {
                false => server.connection(),
                true => cluster.nodes[node_of(&cluster, &old)].connection(),
            };
            told.push(runtime.block_on(async {
                assert_eq!(tally(&m, 5).await, (5, 0, 0));
                reloaded(&m);
                m.clock().advance(MINUTE);
                redis::cmd("SET")
                    .arg(&old)
                    .arg("garbage")
                    .query::<()>(&mut c)
                    .unwrap();
                tally(&m, 12).await
            }));
        }
        assert_eq!(
            told[1], told[0],
            "{policy:?}: the Cluster against one server"
        );
        // An error for the policy: the shared limit is not asked while garbage is there, on
        // either store (the memory share under Local is fresh).
        let expected = match policy {
            FailurePolicy::Deny => (0, 0, 12),
            _ => (12, 0, 0),
        };
        assert_eq!(told[0], expected, "{policy:?}");
    }
}

/// Calls dropped at every point of their run after the move (timeouts from 0 to 3 ms, in
/// steps of 50 us: after the old state's read, after the script, after the read that checks
/// it): however many are dropped, the calls that complete admit no more than the 10 one
/// server admits, and what dropped calls left spent is only ever an over-refusal.
#[test]
fn calls_dropped_while_the_old_state_is_carried_never_admit_more_than_one_server() {
    let cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let m = pod(&options, &prefix("dropped"));
    let runtime = ratelimit_tests::two_workers();
    runtime.block_on(async {
        assert_eq!(tally(&m, 5).await, (5, 0, 0));
        reloaded(&m);
        m.clock().advance(MINUTE);
        let mut count = 0;
        for step in 0..60u64 {
            let bound = Duration::from_micros(step * 50);
            if let Ok(decided) = tokio::time::timeout(bound, m.scope(report())).await {
                count += usize::from(decided.is_ok());
            }
        }
        // A dropped call's request already sent lands before any later one on its node's
        // connection (one connection a node, in order).
        while admitted(&m).await {
            count += 1;
        }
        assert!(count <= 10, "{count} admitted");
        eprintln!("dropped calls: {count} admitted of 10");
    });
}

/// The old state's master paused (SIGSTOP: every read of it times out) once the budget moved,
/// the moved bucket with room: every call fails for the policy (refused under Deny, admitted
/// under Allow, decided in memory under Local), spending nothing on the moved state; resumed,
/// the budget admits the 10 one server admits after the move, nothing lost or kept.
#[test]
fn a_paused_old_node_fails_calls_for_the_policy_and_spends_nothing_on_the_moved_state() {
    let cluster = RedisCluster::start();
    let policies = [
        (FailurePolicy::Deny, (0, 0, 3)),
        (FailurePolicy::Allow, (3, 0, 0)),
        (FailurePolicy::Local { pods: 1 }, (3, 0, 0)),
    ];
    for (policy, expected) in policies {
        let key = |p: &str, window: &str| budget_key(p, window, REPORT);
        let (p, old) = (0..)
            .map(|i| prefix(&format!("paused-{}{i}", policy.as_str())))
            .find_map(|p| {
                let a = node_of(&cluster, &key(&p, "T60000"));
                (a != node_of(&cluster, &key(&p, "T120000"))).then_some((p, a))
            })
            .unwrap();
        let options = RedisOptions::cluster(cluster.urls())
            .timeout(Duration::from_millis(300))
            .on_failure(policy);
        let m = pod(&options, &p);
        let runtime = ratelimit_tests::two_workers();
        runtime.block_on(async {
            assert_eq!(tally(&m, 5).await, (5, 0, 0));
            reloaded(&m);
            m.clock().advance(MINUTE);
            cluster.nodes[old].pause();
            let paused = tally(&m, 3).await;
            cluster.nodes[old].resume();
            assert_eq!(paused, expected, "{policy:?} while paused");
            assert_eq!(tally(&m, 12).await, (10, 2, 0), "{policy:?} resumed");
        });
    }
}

/// Leases (`RedisOptions::leases`: slices of a key's budget spent in the process): a pod that
/// leased from the budget before the move, calling past the old window, admits on a Cluster
/// what it admits on one server, never past the bucket's 15 over the whole history.
#[test]
fn a_leasing_pod_admits_across_the_move_as_on_one_server() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let leases = |o: RedisOptions| {
        o.timeout(Duration::from_secs(5))
            .leases(ratelimit::LeaseOptions::new(4).idle(Duration::from_secs(600)))
    };
    let mut told = Vec::new();
    for options in [
        leases(RedisOptions::new(server.url())),
        leases(RedisOptions::cluster(cluster.urls())),
    ] {
        let m = pod(&options, &prefix("leases"));
        let runtime = ratelimit_tests::two_workers();
        told.push(runtime.block_on(async {
            let before = tally(&m, 5).await;
            reloaded(&m);
            m.clock().advance(MINUTE);
            (before, tally(&m, 15).await)
        }));
    }
    assert_eq!(told[1], told[0], "the Cluster against one server");
    // Two leases of 4 for the 5 calls before: the 3 units leased and not spent count in the
    // old state's debt, carried (an over-refusal on both stores alike).
    assert_eq!(told[0], ((5, 0, 0), (7, 8, 0)));
}

/// Four pods that moved and four still in their old window, ten tasks each, all calling at
/// once right after the movers' old window (no order made): never more admitted after the
/// move than any order of the same calls admits on one server, 10 (the others' spends hold
/// the old state to its 15, the movers' carry holds the moved one to it), plus a token for
/// every 6 s the run took: the scripts read Redis' own clock, which refills the buckets.
/// On a loaded machine it admitted 15, 14, 13 and 11 with nothing refilled (helper-92: one
/// whole-binary run in eight or more under load, 2 of 5 alone on a loaded one): not a flake but
/// a way through, an other's call slow between its spend on the moved state and its spend on
/// the old one while movers read, carried and read again (seen in `MONITOR`: 11 others'
/// spends on the moved state, 4 movers' carries and read afters, then the others' spends on
/// the old state; 14 admitted). Made in order by
/// [`an_old_window_pods_spend_on_the_old_state_after_a_movers_read_after_is_carried`]
/// (the earlier "12 in 12.5 s" may have been this too), and closed with it: the old state's
/// slot decided first (`slots.rs`), 1, 10, 1, 0 and 10 in 5 runs under a parallel build
/// (helper-96), never past 10; the fewer are an over-refusal,
/// [`concurrent_movers_and_old_window_pods_admit_what_one_bucket_holds`].
#[test]
fn concurrent_movers_and_old_window_pods_never_admit_past_one_bucket() {
    let (admitted, refilled) = concurrent_movers_and_old_window_pods();
    assert!(
        admitted <= 10 + refilled,
        "{admitted} admitted after the move"
    );
}

/// The same calls admit the 10 one server admits after the move, not fewer: with the old
/// state's slot decided first (`slots.rs`), an old-window pod's call spends on the old state,
/// the moved state refuses it, and it gives that spend back; a mover's read after made in
/// between adds it to the moved state for a call never admitted, and once the moved bucket
/// is full every such refusal keeps it full: 5, 0, 0, 1 and 4 admitted (1, 1 and 5 more
/// under a parallel build) where the moved state's slot first admitted 10 in 3 runs of 3
/// (helper-96, unloaded). Looking at the moved
/// state first, and deciding its slot first when it would refuse (helper-96, not kept: the
/// look is a round trip the paused histories of this file cannot order), admitted 10 in 3
/// of 3. The read after's addition taking back a spend given back would close it where it
/// lives (`across_slots.rs`). Measured (helper-98, with the moved node's clock read before
/// each carried read): 0, 1, 10, 0 and 8; with the mover's refusal for what its read after
/// found (`shortfall`) left out, 9, 10, 10, 10 and 10; with nothing added after the read
/// after either, 10, 10, 10, 10 and 15 (the over-admission back). So it lives in that
/// refusal, which counts what the old state grew by between the read and the read after,
/// where only what grew before the script, by pods whose moved spends the greater debt then
/// hid, is owed: the rest is a spend given back (its call refused by the moved state) or
/// one whose moved spend lands after the script (counted there as well). Without the
/// refusal an admission one server refuses is made
/// (`an_old_window_spend_hidden_by_the_greater_debt_refuses_the_mover`,
/// ratelimit-core/src/store/redis/carries/shortfall.rs): it stays.
#[test]
#[ignore = "FOUND: 5, 0, 0, 1 and 4 (and 0, 1, 10, 0 and 8) admitted after the move where one server admits 10"]
fn concurrent_movers_and_old_window_pods_admit_what_one_bucket_holds() {
    let (admitted, refilled) = concurrent_movers_and_old_window_pods();
    assert!(
        admitted >= 10,
        "{admitted} admitted after the move ({refilled} refilled at most)"
    );
}

/// Four pods that moved and four still in their old window, ten tasks each, all calling at
/// once right after the movers' old window, then one mover until refused: how many were
/// admitted after the move, and how many tokens Redis' clock gave back at most meanwhile.
fn concurrent_movers_and_old_window_pods() -> (usize, usize) {
    let cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let p = prefix("concurrent");
    let (movers, others): (Vec<TestModule>, Vec<TestModule>) = (
        (0..4).map(|_| pod(&options, &p)).collect(),
        (0..4).map(|_| pod(&options, &p)).collect(),
    );
    let runtime = ratelimit_tests::two_workers();
    let started = std::time::Instant::now();
    let admitted = runtime.block_on(async {
        assert_eq!(tally(&movers[0], 5).await, (5, 0, 0));
        for m in movers.iter().chain(&others) {
            reloaded(m);
        }
        for m in &movers {
            m.clock().advance(MINUTE);
        }
        let calls: Vec<_> = (0..10)
            .flat_map(|_| movers.iter().chain(&others))
            .map(|m| runtime.spawn(m.scope(report())))
            .collect();
        let mut admitted = 0;
        for call in calls {
            match call.await.unwrap() {
                Ok(()) => admitted += 1,
                Err(Error::Exceeded(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        while admitted_by(&movers[0], plain).await {
            admitted += 1;
        }
        admitted
    });
    // Whole tokens Redis' clock gave back since the first spend (the bucket's phase starts
    // there: a run under 6 s gives none back).
    let refilled = (started.elapsed().as_secs() / 6) as usize;
    eprintln!("concurrent: {admitted} admitted after the move ({refilled} refilled at most)");
    (admitted, refilled)
}

/// helper-92's probe of `concurrent_movers_and_old_window_pods_never_admit_past_one_bucket`'s
/// failures (15 and 14 admitted against 10 on a loaded machine, nothing refilled): a pod still
/// in its old window decided a moved budget slot by slot, the moved state first and the old
/// one after it; a mover whose read, script and read after all fall between those two spends
/// finds the other's spend on the moved state already there (its carry, the greater of the
/// two debts, takes it for the old debt), and the old state not yet grown (its read after adds
/// nothing). The other's spend on the old state lands after: the 5 spent before the move are
/// forgotten. Made here with `report_for` (the budget beside a user's limit on the third
/// master, a slot between the moved and the old state's in the others' calls): the user's
/// master paused holds each other between its two spends while the movers' calls carry,
/// and holds the movers after their read after. One bucket of 15, 5 spent before: 10 after
/// the move whatever the order (one server), never 15. 15 were; closed by deciding the old
/// states' slots first (`RedisStore::slot_groups`): each other now spends on the old state,
/// then on the moved one, before it waits on the user's master, so every mover's read finds
/// the others' old spends (the over-refusal that order costs, an old spend read whose moved
/// spend lands after a mover's script, is not made here).
#[test]
fn an_old_window_pods_spend_on_the_old_state_after_a_movers_read_after_is_carried() {
    let cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let (p, _, _) = two_masters(&cluster, "between", REPORT_FOR);
    let user = ratelimit_tests::cluster_pods::USER.get().expect("set");
    let user = node_of(&cluster, &format!("{{{user}}}"));
    let runtime = ratelimit_tests::two_workers();
    let call = beside_a_user;
    let (movers, others) = fleet(&runtime, &options, &p, (call, 5), (5, 5));
    let mut c = cluster.nodes[user].connection();
    pause(&mut c);
    // Each other spends on the moved state, then waits on the user's master.
    let then: Vec<_> = (others.iter())
        .map(|m| runtime.spawn(m.scope(call())))
        .collect();
    until_waiting(&mut c, others.len() as u64);
    // Each mover reads the old state, carries it, spends and reads it again, then waits there.
    let first: Vec<_> = (movers.iter())
        .map(|m| runtime.spawn(m.scope(call())))
        .collect();
    until_waiting(&mut c, (others.len() + movers.len()) as u64);
    unpause(&mut c);
    let (then, first, after) = runtime.block_on(async {
        let (then, first) = (admitted_of(then).await, admitted_of(first).await);
        (then, first, until_refused(&movers[0], call).await)
    });
    eprintln!("between: others {then}, movers {first}, after {after}");
    assert!(
        then + first + after <= 10,
        "{} admitted after the move (others {then}, movers {first}, after {after})",
        then + first + after
    );
}
