//! helper-76's attacks on a carried spend's read after its script, run as a task of its own
//! (`RedisStore::run_checked`): a budget without a user key moved by a reload, on a Redis
//! Cluster, its old state in another slot than the moved one, read there before the stacked
//! script and again after it, what its debt grew by between added to the moved state. The
//! calls are dropped, their runtimes shut down, around that task; each history against the
//! same history on one server where one exists.
//!
//! Time and order as in `cluster_moves_attacks` (whose helpers these mirror): Redis decides on
//! its own clock, at a token every 6 s, which the milliseconds a test takes never refill; the
//! services' transitions on hand-driven clocks; requests ordered between round trips with
//! `CLIENT PAUSE WRITE` on one node (every script waits there, in the order it came), waited
//! on by the node's own count of waiting clients.

use std::time::Duration;

use ratelimit::RedisOptions;
use ratelimit_tests::cluster_pods::{
    admitted_by, admitted_of, fleet, node_of, pod, reloaded, two_masters, until_refused, Call,
    MINUTE, REPORT, REPORT_FOR,
};
use ratelimit_tests::redis_server::{
    pause_writes as pause, prefix, unpause, until_waiting, RedisCluster, RedisServer,
};

ratelimit_tests::moved_budget_fns!();

/// A history of [`dropped_movers`]: calls of `call` spent before the move, pods that moved
/// (the first `dropped` of their calls dropped) and pods still in the old window.
#[derive(Clone, Copy)]
struct History {
    call: Call,
    before: usize,
    movers: usize,
    dropped: usize,
    others: usize,
}

/// `cluster_moves_attacks`' `moved_while_others_spend`, the first `dropped` of the movers'
/// calls dropped (their tasks aborted: a timeout above them, a client gone) while their
/// scripts wait on the moved state's master (`moved`, on a Cluster; on one server, `old`,
/// while their one script waits): their reads made before the others' calls spent on the
/// old state, their scripts after, and before the others' spends on the moved state (the
/// old state's slot first: `slots.rs`; before it, the others' whole calls came between the
/// movers' reads and scripts). What the movers' calls not dropped admit, what the others
/// admit, then what one mover admits until refused. On a Cluster the drops' reads
/// after and additions, made by their tasks, are waited on the nodes in turn (their count
/// of waiting clients: a task that never read again fails the test there).
fn dropped_movers(
    options: &RedisOptions,
    p: &str,
    old: &RedisServer,
    moved: Option<&RedisServer>,
    history: History,
) -> Tally {
    let History {
        call,
        before,
        movers,
        dropped,
        others,
    } = history;
    let runtime = ratelimit_tests::two_workers();
    let (movers, others) = fleet(&runtime, options, p, (call, before), (movers, others));
    let n = movers.len() as u64;
    // Where the movers' scripts wait: one server's own, or the moved state's master, whose
    // pause lets their reads of the old state through, and the others' spends on the old
    // state after them, and holds the others' spends on the moved state behind the movers'
    // scripts (the old state's slot is decided first: `slots.rs`).
    let mut held = moved.unwrap_or(old).connection();
    pause(&mut held);
    let mut first: Vec<_> = (movers.iter())
        .map(|m| runtime.spawn(m.scope(call())))
        .collect();
    let kept = first.split_off(dropped);
    until_waiting(&mut held, n);
    let then: Vec<_> = (others.iter())
        .map(|m| runtime.spawn(m.scope(call())))
        .collect();
    until_waiting(&mut held, n + others.len() as u64);
    for call in &first {
        call.abort();
    }
    runtime.block_on(async {
        for call in first {
            assert!(call.await.is_err_and(|e| e.is_cancelled()));
        }
    });
    match moved {
        Some(_) => {
            // Each mover's task reads the old state again (after the others' spends on the
            // moved state, behind its script), then adds what it grew by.
            let mut a = old.connection();
            pause(&mut a);
            unpause(&mut held);
            until_waiting(&mut a, n);
            pause(&mut held);
            unpause(&mut a);
            until_waiting(&mut held, n);
            unpause(&mut held);
        }
        None => unpause(&mut held),
    }
    runtime.block_on(async {
        let (kept, then) = (admitted_of(kept).await, admitted_of(then).await);
        (kept, then, until_refused(&movers[0], call).await)
    })
}

/// What the movers' calls not dropped admitted, the others' calls, the calls after.
type Tally = (usize, usize, usize);

/// [`dropped_movers`] of `history` on one server and on a Cluster (the old and moved states
/// on two masters, the user of `report_for` on the third): what each admitted.
fn dropped_races(history: History, budget: &str) -> (Tally, Tally) {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    let single = RedisOptions::new(server.url()).timeout(Duration::from_secs(10));
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let (p, old, moved) = two_masters(&cluster, "dropped-movers", budget);
    let (old, moved) = (&cluster.nodes[old], &cluster.nodes[moved]);
    let on_cluster = dropped_movers(&nodes, &p, old, Some(moved), history);
    let single_p = prefix("dropped-movers-server");
    let on_server = dropped_movers(&single, &single_p, &server, None, history);
    (on_server, on_cluster)
}

/// Five movers' calls dropped while their scripts wait, after five pods still in the old
/// window spent on the old state (their spends on the moved state waiting behind the
/// movers' scripts): the movers' spends land (sent, they run), and what the old state grew
/// by since their reads is added by their tasks. One server runs the movers' scripts first
/// (they came first), the others' five fill the bucket; on a Cluster the others spend on the
/// old state first, and the movers' reads missed their 30 s there: added, the budget of 15,
/// 5 spent before the move, is full, as on one server. With the read after spawned only once
/// a script's reply came, nothing was added, and one pod admitted 5 more.
#[test]
fn movers_dropped_while_their_scripts_wait_leave_what_one_server_leaves() {
    let history = History {
        call: plain,
        before: 5,
        movers: 5,
        dropped: 5,
        others: 5,
    };
    let (on_server, on_cluster) = dropped_races(history, REPORT);
    assert_eq!(on_server, (0, 5, 0));
    assert_eq!(on_cluster, on_server);
}

/// Two of the five movers' calls dropped, three kept: each kept call's task adds what its
/// read missed (once for all, the mark), and each had room for it after its spend, so stays
/// admitted: 3 kept and 5 others admitted, the bucket full, as on one server.
#[test]
fn some_movers_dropped_some_kept_while_their_scripts_wait() {
    let history = History {
        call: plain,
        before: 5,
        movers: 5,
        dropped: 2,
        others: 5,
    };
    let (on_server, on_cluster) = dropped_races(history, REPORT);
    assert_eq!(on_server, (3, 5, 0));
    assert_eq!(on_cluster, on_server);
}

/// The same with the budget stacked beside a user's limit in a third slot.
#[test]
fn movers_beside_a_user_dropped_while_their_scripts_wait_leave_what_one_server_leaves() {
    let history = History {
        call: beside_a_user,
        before: 5,
        movers: 5,
        dropped: 5,
        others: 5,
    };
    let (on_server, on_cluster) = dropped_races(history, REPORT_FOR);
    assert_eq!(on_server, (0, 5, 0));
    assert_eq!(on_cluster, on_server);
}

/// [`until_waiting`] awaited: the runtime it runs on (a `current_thread` one's only thread)
/// keeps driving its tasks while it waits.
async fn waiting_for(c: &mut redis::Connection, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while ratelimit_tests::redis_server::waiting(c) != n {
        assert!(std::time::Instant::now() < deadline, "never {n} waiting");
        tokio::task::yield_now().await;
    }
}

/// Which runtime a mover's call runs on, and what becomes of it once the call is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    /// One thread, kept: the call's task runs whenever it is next driven.
    CurrentThread,
    /// One thread, shut down while the read after waits.
    CurrentThreadShutDown,
    /// Two workers, shut down while the read after waits.
    TwoWorkersShutDown,
}

/// A mover's call (`report`, 5 spent before the move) dropped by its caller while its script
/// waits on the moved state's master, a pod the reload has not reached spending the old
/// bucket's next 5 meanwhile (after the mover's read), the call's read after then made to
/// wait on the old state's master: on `runtime`. What a mover admits after, until refused
/// (on a fresh runtime and pod where the first was shut down).
fn dropped_on(runtime: Runtime) -> usize {
    let cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(10));
    let name = format!("runtime-{runtime:?}");
    // The fleet's record on neither master: the mover's call may raise it first (a prepared
    // site cannot tell a quota of its own: `service/horizon.rs`), which on the paused moved
    // master would wait in its script's place.
    let (p, old, moved) = (0..)
        .map(|i| two_masters(&cluster, &format!("{name}-{i}"), REPORT))
        .find(|(p, old, moved)| {
            ![*old, *moved].contains(&node_of(&cluster, &format!("{p}:horizon")))
        })
        .unwrap();
    let (mut a, mut b) = (
        cluster.nodes[old].connection(),
        cluster.nodes[moved].connection(),
    );
    let first = match runtime {
        Runtime::TwoWorkersShutDown => ratelimit_tests::two_workers(),
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    };
    let (mover, unreached) = (pod(&options, &p), pod(&options, &p));
    first.block_on(async {
        for _ in 0..5 {
            assert!(admitted_by(&unreached, plain).await); // owes 30 s
        }
    });
    reloaded(&mover);
    mover.clock().advance(MINUTE);
    // The mover's first call after its reload reads the fleet's reload horizon record first
    // (`service/horizon.rs`), a script that would wait on a paused master as its own does:
    // read here, with a look that writes nothing, so that the call below sends its script.
    first.block_on(async {
        let look = ratelimit::Options::new().tier("moves");
        let looked = mover.service().status("horizon-read", &look).await;
        assert!(looked.is_ok(), "{looked:?}");
    });
    pause(&mut b);
    first.block_on(async {
        tokio::select! {
            decided = mover.scope(report()) => panic!("decided while its script waits: {decided:?}"),
            () = waiting_for(&mut b, 1) => {}
        }
        // Dropped (its future, by the select), its script sent.
        for _ in 0..5 {
            assert!(admitted_by(&unreached, plain).await); // owes 60 s
        }
        pause(&mut a);
        unpause(&mut b);
        waiting_for(&mut a, 1).await;
    });
    if runtime != Runtime::CurrentThread {
        drop(first);
        unpause(&mut a);
        let again = pod(&options, &p);
        reloaded(&again);
        again.clock().advance(MINUTE);
        return ratelimit_tests::two_workers().block_on(until_refused(&again, plain));
    }
    pause(&mut b);
    unpause(&mut a);
    first.block_on(async {
        waiting_for(&mut b, 1).await;
        unpause(&mut b);
        until_refused(&mover, plain).await
    })
}

/// A `current_thread` runtime whose caller is dropped while its script waits: the task that
/// reads after it runs as the runtime is next driven, and adds what the old state grew by:
/// the bucket of 15, 10 spent on the old state and 1 by the dropped call, admits 4 more, as
/// one server whose one script ran after the other pod's spends.
#[test]
fn a_current_thread_runtime_runs_a_dropped_calls_read_after_when_next_driven() {
    assert_eq!(dropped_on(Runtime::CurrentThread), 4);
}

/// The runtime shut down while a dropped call's read after waits (`run_checked`): the task
/// is dropped with it and adds nothing, but its script left its pending record beside the
/// moved state (`lua/carry.lua`), so the next call's script adds what the old state grew by
/// since the dropped call's read: 4 admitted after, as one server leaves, on either kind of
/// runtime (with nothing but the task to add it, the next carry covered the dropped call's
/// spend: 5).
#[test]
fn a_runtime_shut_down_while_the_read_after_waits_loses_nothing() {
    let shut_down = [Runtime::TwoWorkersShutDown, Runtime::CurrentThreadShutDown];
    assert_eq!(shut_down.map(dropped_on), [4, 4]);
}
