//! helper-93's probes of the fleet's reload horizon record in its six-number format (eight
//! since: a second bound, helper-95)
//! (`lua/horizon.lua`, `store/redis/horizon.rs`, `service/horizon.rs`): penalty ends as time
//! left on Redis' clock with the id of the service that raised them, the exact end raised
//! after the penalty beside the bound raised before, the bounds past which a record is
//! `UnexpectedState`, and the raise again of a record read lower. Each against its twin, one
//! service under a prefix of its own that makes every call and reload of every pod (as
//! probes_horizon_record_redis): the fleet never admits more than the twin over the same
//! history.
//!
//! Time: Redis decides on its own clock, which the tests never move, so every debt written is
//! whole whenever a call asks for it; the services' transitions run on hand-driven clocks,
//! set alike unless a probe skews one.
//!
//! Found and closed: a record past the bound of its longest quota or window of its own was
//! rewritten by a raise before the service refused it (12 of 90 cases past a bound); two
//! pods' penalty bounds, each raised from the other's read back, climbed with every penalty
//! whatever the keys (1,433 s after 40 penalties against 191 s); what a pod knew recorded
//! under one key prefix was taken for the next prefix's record, so a quota of its own
//! written there raised nothing (15 against 0); a penalty's exact end lost after the
//! penalty is written (its raise failing under any policy, or the call dropped), where its
//! bound lay under another pod's own larger bound: 15 against 0 (closed by a second bound in
//! the record, the latest of a service other than the first's, helper-95).
//! Held: penalties racing on one key in each order, a restarted pod, clocks apart, garbage
//! in each field under every policy, a record expired by design raised again without its
//! penalty ends.
//!
//! The configuration: [`bucket`]`("a")`, a bucket of 15 (10 plus 5) a token every 6 s (a
//! tolerance of 90 s: its old state carried 150 s past a move), moved by a reload to
//! [`bucket`]`("b")` (the tier renamed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::Horizon;
use ratelimit::{
    ConfigBuilder, Error, FailurePolicy, ManualClock, Options, RateLimitService, RedisOptions,
    RedisStore,
};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{horizon_key, horizon_record, prefix, redis_time, RedisServer};
use ratelimit_tests::{horizon_hooked, on_its_store, on_redis_with, until, Before, Pods, START};

/// The record's time to live in milliseconds (-1: none, -2: no key).
fn record_ttl(server: &RedisServer, prefix: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(horizon_key(prefix))
        .query(&mut server.connection())
        .unwrap()
}

/// `text` planted as `prefix`'s record, with no expiry.
fn plant(server: &RedisServer, prefix: &str, text: &str) {
    redis::cmd("SET")
        .arg(horizon_key(prefix))
        .arg(text)
        .exec(&mut server.connection())
        .unwrap();
}

/// How a [`HorizonHooked`] store answers a raise of a penalty's exact end (`penalty_end.left > 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExactRaise {
    /// As Redis does.
    Answered,
    /// The store's error (a link lost, a timeout under `Deny`).
    Fails,
    /// Never answered: the call waits until it is dropped (a pod stopped, a cancelled call).
    Hangs,
}

/// One pod per `skew` on `server`, failures refused (one: the twin).
fn denying(server: &RedisServer, name: &str, skew: &[u64]) -> Pods {
    Pods::on_redis(options(server, FailurePolicy::Deny), name, skew, || {
        bucket("a")
    })
}

/// One pod per `exact` on [`HorizonHooked`] stores (one: the twin, answered as Redis does).
fn hooked(server: &RedisServer, name: &str, exact: &[ExactRaise]) -> (Pods, Arc<AtomicUsize>) {
    let hanging = Arc::new(AtomicUsize::new(0));
    let mut exact = exact.iter();
    let skew = vec![0; exact.len()];
    let pods = Pods::made(name, &skew, |p| {
        let exact = *exact.next().unwrap();
        let hanging = Arc::clone(&hanging);
        // A raise of a penalty's exact end (`penalty_end.left > 0`) answered as `exact`
        // says; `hanging` counts the raises held.
        let hook = move |raise: &Horizon| match (raise.penalty_end.left > 0, exact) {
            (false, _) | (true, ExactRaise::Answered) => Before::Forward,
            (true, ExactRaise::Fails) => Before::Fail,
            (true, ExactRaise::Hangs) => {
                hanging.fetch_add(1, Ordering::SeqCst);
                Before::Hang
            }
        };
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let store = horizon_hooked(RedisStore::new(options).unwrap(), hook);
        let clock = ManualClock::new(START);
        let config = bucket("a").key_prefix(p).build().unwrap();
        let service = RateLimitService::with_store(config, store, Arc::new(clock.clone())).unwrap();
        (service, clock)
    });
    (pods, hanging)
}

/// Redis options of the probes: the server's, a 2 s timeout, failures answered by `policy`.
fn options(server: &RedisServer, policy: FailurePolicy) -> impl Fn() -> RedisOptions + '_ {
    move || {
        RedisOptions::new(server.url())
            .timeout(Duration::from_secs(2))
            .on_failure(policy)
    }
}

const POLICIES: [FailurePolicy; 3] = [
    FailurePolicy::Deny,
    FailurePolicy::Allow,
    FailurePolicy::Local { pods: 2 },
];

// ---------------------------------------------------------------------------------------
// 1. The exact end's raise, after the penalty is written.
// ---------------------------------------------------------------------------------------

/// probes_horizon_record_redis' two penalties (closed by the exact end), with B's raise of
/// its exact end lost: A penalizes a fresh key `"f"` by 40 (the record's bound +426 s, its
/// exact end +336 s, both A's); B spends 15 on `"k"` and penalizes it by 30: its bound
/// (+366 s) stays under A's, its debt ends at +366 s, after A's own exact end. Both reloaded
/// to the tier renamed; A's plain calls on `"k"` at +350 s. The twin carries the old state
/// to +366 s: none. B's exact end raise fails (the store's error: under `Deny` the
/// penalty's error, under `Allow` or `Local` no error at all, `horizon_failure_answered`) or
/// is never answered and the call dropped (its pod stopped, the call cancelled): the
/// penalty is written either way. Found: the record held A's own ends alone (B's bound
/// under A's larger one); A read them as its own and carried to its own exact end: 15
/// admitted where the twin admits none. Closed: the record keeps a second bound, the latest
/// of a service other than the first's (B's), which A reads (`Horizon::bound_of_others`):
/// none admitted. (15 again with A folding the largest bound alone.)
#[tokio::test]
async fn an_exact_end_lost_after_the_penalty_leaves_it_hidden_under_anothers_bound() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut all = Vec::new();
    for exact in [ExactRaise::Answered, ExactRaise::Fails, ExactRaise::Hangs] {
        let mut counts = Vec::new();
        for fleet in [true, false] {
            let hooks = if fleet {
                vec![ExactRaise::Answered, exact]
            } else {
                vec![ExactRaise::Answered]
            };
            let (pods, hanging) = hooked(&server, "h93-exact-lost", &hooks);
            pods.pod(0).penalize("f", &plain, 40).await.unwrap();
            let mut c = vec![pods.admitted(1, "k", &plain, 15).await];
            let b = pods.pod(1).clone();
            let penalty = tokio::spawn(async move { b.penalize("k", &Options::new(), 30).await });
            match (fleet, exact) {
                (true, ExactRaise::Hangs) => {
                    until(|| hanging.load(Ordering::SeqCst) == 1).await;
                    penalty.abort();
                    assert!(penalty.await.unwrap_err().is_cancelled());
                }
                (true, ExactRaise::Fails) => {
                    let failed = penalty.await.unwrap();
                    assert!(matches!(failed, Err(Error::Store { .. })), "{failed:?}");
                }
                _ => {
                    penalty.await.unwrap().unwrap();
                }
            }
            pods.reload_all(|| bucket("b"));
            pods.at(350);
            c.push(pods.admitted(0, "k", &plain, 16).await);
            counts.push(c);
        }
        all.push((exact, counts));
    }
    for (exact, counts) in &all {
        assert_eq!(counts[1], [15, 0], "{exact:?}: twin");
    }
    for (exact, counts) in &all {
        assert_eq!(counts[0], counts[1], "{exact:?}: fleet (all: {all:?})");
    }
}

/// The second bound across three pods: A penalizes a fresh key `"f"` by 40 (the record's
/// bound +426 s, A's); B spends 15 on `"k"` and penalizes it by 30, its exact end's raise
/// failing (its bound +366 s, under A's, is the second); then C penalizes a fresh key `"g"`,
/// by 5 (a bound of +216 s, under B's: the second must stay B's, the largest of the others',
/// not C's, the latest) or by 60 (a bound of +546 s, over A's: the first is C's, A's the
/// second, B's in neither, and every pod reads one at least as late as B's). All reloaded
/// to the tier renamed; at +350 s A's plain calls on `"k"`, then C's: none admitted, as the
/// twin, which made every penalty itself. The record's bounds are checked too: Redis' clock
/// stands still in the tests, so any bound of another's read holds the move, and the counts
/// alone cannot tell B's bound second from C's (with the second bound the latest rather than
/// the largest, C's +216 s lay over B's, and on a moving clock A let go at +350 s).
#[tokio::test]
async fn a_third_pods_smaller_bound_keeps_the_second_bound_anothers_largest() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut all = Vec::new();
    for c_units in [5, 60] {
        let mut counts = Vec::new();
        for fleet in [true, false] {
            let hooks = if fleet {
                vec![
                    ExactRaise::Answered,
                    ExactRaise::Fails,
                    ExactRaise::Answered,
                ]
            } else {
                vec![ExactRaise::Answered]
            };
            let (pods, _) = hooked(&server, "h95-three-pods", &hooks);
            pods.pod(0).penalize("f", &plain, 40).await.unwrap();
            let mut c = vec![pods.admitted(1, "k", &plain, 15).await];
            let penalty = pods.pod(1).penalize("k", &plain, 30).await;
            let fields = || -> Vec<String> {
                (horizon_record(&server, &pods.prefix).unwrap())
                    .split(' ')
                    .map(String::from)
                    .collect()
            };
            let before = fields();
            if fleet {
                assert!(matches!(penalty, Err(Error::Store { .. })), "{penalty:?}");
                assert_ne!(before[7], "0", "B's bound second: {before:?}");
            } else {
                penalty.unwrap();
            }
            pods.pod(2).penalize("g", &plain, c_units).await.unwrap();
            if fleet {
                let after = fields();
                if c_units == 5 {
                    assert_eq!(after[2..4], before[2..4], "A's first: {after:?}");
                    assert_eq!(after[6..], before[6..], "B's second: {after:?}");
                } else {
                    assert_eq!(after[6..], before[2..4], "A's second: {after:?}");
                    assert_ne!(after[2..4], before[2..4], "C's first: {after:?}");
                }
            }
            pods.reload_all(|| bucket("b"));
            pods.at(350);
            c.push(pods.admitted(0, "k", &plain, 16).await);
            c.push(pods.admitted(2, "k", &plain, 16).await);
            counts.push(c);
        }
        all.push((c_units, counts));
    }
    for (c_units, counts) in &all {
        assert_eq!(counts[1], [15, 0, 0], "C by {c_units}: twin");
        assert_eq!(counts[0], counts[1], "C by {c_units}: fleet (all: {all:?})");
    }
}

/// A pod's bound under another's first, known to it: A penalizes a fresh key `"f"` by 40 (the
/// first bound, A's, +426 s), its exact end's raise failing; B penalizes a fresh key `"x"` by
/// 1 (its bound the second; B now knows A's first recorded), spends 15 on `"k"` and
/// penalizes it by 30, its exact end's raise failing too: its bound, past its own `"x"` end
/// and under A's +426 s, must still be raised (into the second: what A reads), where a pod
/// that took the first for what is recorded raised nothing and A read only B's `"x"` bound.
/// Checked on the record's fields (Redis' clock stands still in the tests, so any bound
/// read holds the move: the counts alone cannot tell); A's plain calls on `"k"` at +350 s
/// after the reload admit none, as the twin.
#[tokio::test]
async fn a_bound_under_anothers_known_first_is_raised_into_the_second() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut counts = Vec::new();
    for fleet in [true, false] {
        let hooks = if fleet {
            vec![ExactRaise::Fails, ExactRaise::Fails]
        } else {
            vec![ExactRaise::Answered]
        };
        let (pods, _) = hooked(&server, "h95-known-first", &hooks);
        let fields = || -> Vec<u64> {
            (horizon_record(&server, &pods.prefix).unwrap())
                .split(' ')
                .map(|n| n.parse().unwrap())
                .collect()
        };
        let (a, b) = (pods.pod(0), pods.pod(1));
        let penalties = [
            a.penalize("f", &plain, 40).await,
            b.penalize("x", &plain, 1).await,
        ];
        let mut c = vec![pods.admitted(1, "k", &plain, 15).await];
        let before = fields();
        let last = b.penalize("k", &plain, 30).await;
        if fleet {
            for failed in penalties.iter().chain([&last]) {
                assert!(matches!(failed, Err(Error::Store { .. })), "{failed:?}");
            }
            let after = fields();
            assert_ne!(before[6], 0, "B's \"x\" bound second: {before:?}");
            assert_eq!(after[2..4], before[2..4], "A's first: {after:?}");
            assert_eq!(after[7], before[7], "B's second: {after:?}");
            assert!(
                after[6] > before[6],
                "B's \"k\" bound raised: {before:?} {after:?}"
            );
        } else {
            for done in penalties.into_iter().chain([last]) {
                done.unwrap();
            }
        }
        pods.reload_all(|| bucket("b"));
        pods.at(350);
        c.push(pods.admitted(0, "k", &plain, 16).await);
        counts.push(c);
    }
    assert_eq!(counts[1], [15, 0], "twin");
    assert_eq!(counts[0], counts[1], "fleet");
}

/// Two penalties on one key `"k"` after A's 15 spent, one per pod, in each order and at once
/// (both stack on the one state: the later one's debt ends past the earlier one's), larger
/// then smaller and smaller then larger; both reloaded to the tier renamed; at one of
/// +350 s to +800 s, A's plain calls on `"k"`, then B's. The fleet never admits more than the
/// twin, which made both penalties (it holds at most until its own exact end; the fleet
/// holds while the record's ends, read on Redis' unmoving clock, last).
#[tokio::test]
async fn two_penalties_on_one_key_on_two_pods_in_each_order() {
    let server = RedisServer::start();
    let plain = Options::new();
    let orders: [(&str, u64, u64); 5] = [
        ("a then b", 40, 30),
        ("b then a", 40, 30),
        ("a then b", 40, 5),
        ("b then a", 40, 5),
        ("at once", 40, 30),
    ];
    let mut all = Vec::new();
    for (order, a_units, b_units) in orders {
        for secs in [350, 450, 600, 800] {
            let mut counts = Vec::new();
            for skew in [&[0, 0][..], &[0]] {
                let pods = denying(&server, "h93-two-penalties", skew);
                let mut c = vec![pods.admitted(0, "k", &plain, 15).await];
                let (a, b) = (pods.pod(0), pods.pod(1));
                match order {
                    "a then b" => {
                        a.penalize("k", &plain, a_units).await.unwrap();
                        b.penalize("k", &plain, b_units).await.unwrap();
                    }
                    "b then a" => {
                        b.penalize("k", &plain, b_units).await.unwrap();
                        a.penalize("k", &plain, a_units).await.unwrap();
                    }
                    _ => {
                        let (x, y) = tokio::join!(
                            a.penalize("k", &plain, a_units),
                            b.penalize("k", &plain, b_units)
                        );
                        x.unwrap();
                        y.unwrap();
                    }
                }
                pods.reload_all(|| bucket("b"));
                pods.at(secs);
                c.push(pods.admitted(0, "k", &plain, 16).await);
                c.push(pods.admitted(1, "k", &plain, 16).await);
                counts.push(c);
            }
            let (fleet, twin) = (&counts[0], &counts[1]);
            assert!(
                fleet.iter().zip(twin).all(|(f, t)| f <= t),
                "{order} ({a_units}, {b_units}) at +{secs} s: fleet {fleet:?}, twin {twin:?}"
            );
            all.push((order, b_units, secs, fleet[1] + fleet[2], twin[1] + twin[2]));
        }
    }
    // The twin lets go once its own exact end has passed; the fleet holds while Redis owes
    // the other pod's bound (in the tests, always: Redis' clock does not move). Before the
    // second bound, where the pod that made the later penalty (whose own exact end covers
    // both debts) called first, it let go with the twin: it read the other's exact end and
    // not its bound, which lay under its own; it now reads that bound (the second). Here it
    // ends before the later pod's own exact end, so on a moving clock it holds nothing more;
    // on Redis' clock in the tests, it is whole at every read. At once: whichever Redis ran
    // first.
    let mut expected = Vec::new();
    for (order, b_units) in [
        ("a then b", 30),
        ("b then a", 30),
        ("a then b", 5),
        ("b then a", 5),
    ] {
        for secs in [350, 450, 600, 800] {
            let twin = if secs > if b_units == 30 { 500 } else { 400 } {
                15
            } else {
                0
            };
            expected.push((order, b_units, secs, 0, twin));
        }
    }
    let sequential: Vec<_> = (all.iter().copied())
        .filter(|(order, ..)| *order != "at once")
        .collect();
    assert_eq!(sequential, expected);
    let at_once: Vec<_> = (all.iter())
        .filter(|(order, ..)| *order == "at once")
        .map(|(.., twin)| *twin)
        .collect();
    assert_eq!(at_once, [0, 0, 15, 15], "at once: twin");
}

// ---------------------------------------------------------------------------------------
// 2. Ids: a pod restarted, pods' clocks apart.
// ---------------------------------------------------------------------------------------

/// A pod restarted (a new service in the same process, on the same prefix: the ids are
/// drawn per service, from a counter and the process' random hash keys): A spends 15 on `"k"`
/// and penalizes it by 40 (its debt to +336 s, the record A's), and stops; A', started on the
/// old configuration, reloads to the tier renamed with B; their plain calls at +300 s. A'
/// must fold A's penalty as another service's (with A's id, it would take it for its own,
/// which it never noted, and let the old state go at the configured carrying): none
/// admitted, as the twin, which never restarts.
#[tokio::test]
async fn a_restarted_pod_reads_its_former_penalty_as_anothers() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut counts = Vec::new();
    for fleet in [true, false] {
        let skew: &[u64] = if fleet { &[0, 0] } else { &[0] };
        let mut pods = denying(&server, "h93-restart", skew);
        let mut c = vec![pods.admitted(0, "k", &plain, 15).await];
        pods.pod(0).penalize("k", &plain, 40).await.unwrap();
        if fleet {
            // A stopped, A' started in its place.
            pods.pods[0] = on_redis_with(
                options(&server, FailurePolicy::Deny)(),
                &pods.prefix,
                bucket("a"),
            );
            pods.at(0);
        }
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        c.push(pods.admitted(0, "k", &plain, 16).await);
        c.push(pods.admitted(1, "k", &plain, 16).await);
        counts.push(c);
    }
    assert_eq!(counts[1], [15, 0, 0], "twin");
    assert_eq!(counts[0], counts[1], "fleet");
}

/// Pods' clocks apart, each from the others and from Redis' (the pods' at 1970 + 11 days,
/// Redis' today): A's clock 300 s behind or ahead of B's, or a day behind. 15 spent on A and
/// a penalty of 40 there (its debt 336 s from its own now), both reloaded to the tier
/// renamed; B's plain calls at +100 s to +400 s of B's clock. The record holds the time
/// left, so what B reads does not depend on A's clock: the fleet never admits more than the
/// twin, and admits alike whatever the skew.
#[tokio::test]
async fn pods_clocks_apart_read_one_penalty_alike() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut all = Vec::new();
    for secs in [100, 300, 500] {
        let twin = {
            let pods = denying(&server, "h93-skews", &[0]);
            let mut c = vec![pods.admitted(0, "k", &plain, 15).await];
            pods.pod(0).penalize("k", &plain, 40).await.unwrap();
            pods.reload_all(|| bucket("b"));
            pods.at(secs);
            c.push(pods.admitted(0, "k", &plain, 16).await);
            c
        };
        let mut fleets = Vec::new();
        // B's clock runs `skew` ahead of A's: A behind by 300 s, ahead by 300 s, a day behind.
        for skew in [&[0, 300][..], &[300, 0], &[0, 86_400]] {
            let pods = denying(&server, "h93-skews", skew);
            let mut c = vec![pods.admitted(0, "k", &plain, 15).await];
            pods.pod(0).penalize("k", &plain, 40).await.unwrap();
            pods.reload_all(|| bucket("b"));
            // B's clock at +secs past its own start.
            let b_at = START + Duration::from_secs(secs) + pods.skew[1];
            pods.pods[1].1.set(b_at);
            c.push(pods.admitted(1, "k", &plain, 16).await);
            assert!(
                c[1] <= twin[1],
                "+{secs} s, skew {skew:?}: fleet {c:?}, twin {twin:?}"
            );
            fleets.push(c[1]);
        }
        all.push((secs, twin[1], fleets));
    }
    assert_eq!(
        all,
        [
            (100, 0, vec![0, 0, 0]),
            (300, 0, vec![0, 0, 0]),
            (500, 15, vec![0, 0, 0])
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 3. Bounds: at each, honoured; past it, UnexpectedState, loud, the record as it was.
// ---------------------------------------------------------------------------------------

/// `MOST_OUTLASTS` (`store/redis/horizon.rs`): a window of 366 days and a tolerance of 2^62 ns.
const MOST_WINDOW: u64 = 366 * 86_400 * 1_000_000_000;
const MOST_OUTLASTS: u64 = MOST_WINDOW + (1 << 62);
/// `MOST_LEFT` (`lua/horizon.lua`): 2^62 ns, in microseconds.
const MOST_LEFT: u64 = (1 << 62) / 1_000;

/// What a pod's call makes of the record: `"read"`, a plain call with a read due (after a
/// move, past the configured carrying); `"own"` and `"penalty"`, a call with its own refill
/// (a raise of the longest quota of its own) and a penalty (a raise of a bound, then an end),
/// each with that read due before it; `"own, no move"` and `"penalty, no move"`, the same
/// with no reload, so with no read due: the raise is the first thing the script runs on it.
async fn touch(
    server: &RedisServer,
    p: &str,
    policy: FailurePolicy,
    how: &str,
) -> Result<(), Error> {
    let (pod, clock) = on_redis_with(options(server, policy)(), p, bucket("a"));
    if !how.ends_with("no move") {
        pod.reload(on_its_store(&pod, bucket("b"))).unwrap();
        clock.set(START + Duration::from_secs(300));
    }
    match how {
        "read" => pod.consume("k", &Options::new()).await.map(|_| ()),
        "own" | "own, no move" => pod
            .consume("k", &Options::new().refill(1))
            .await
            .map(|_| ()),
        _ => pod.penalize("k", &Options::new(), 40).await.map(|_| ()),
    }
}

/// Every way of [`touch`].
const TOUCHES: [&str; 5] = ["read", "own", "penalty", "own, no move", "penalty, no move"];

/// Records at each bound (honoured: no error) and just past it (each call that reads or
/// raises it is `UnexpectedState`, naming the record), under every failure policy; the
/// record as it was after the error, its value and its time to live (planted with none).
/// Found: a longest quota of its own or a window past its bound was a canonical number to
/// the script, which checked only the ends' bound: a raise with no read due before it (no
/// move kept) went on into it, the penalty's bound written beside the corrupt value (and a
/// raise of a quota of its own set an expiry on it: 12 of the 90 cases past a bound, under
/// every policy), before the service refused what the script returned. Closed: the script
/// is asked both bounds and refuses such a record before it writes anything.
#[tokio::test]
async fn records_at_and_past_each_bound() {
    let server = RedisServer::start();
    let now = redis_time(&mut server.connection());
    let at_end = (now + MOST_LEFT).to_string();
    let past_end = (now + MOST_LEFT + 30_000_000).to_string();
    let at: Vec<String> = vec![
        format!("{MOST_OUTLASTS} 0 0 0 0 0 0 0"),
        format!("0 {MOST_WINDOW} 0 0 0 0 0 0"),
        format!("0 0 {at_end} 1 0 0 0 0"),
        format!("0 0 0 0 {at_end} 1 0 0"),
        format!("0 0 {at_end} 1 0 0 {at_end} 2"),
        format!(
            "0 0 {now} {} {now} {} {now} {}",
            u64::MAX,
            u64::MAX,
            u64::MAX - 1
        ),
        "0 0 1 5 1 5 1 6".to_string(),
    ];
    let past: Vec<String> = vec![
        format!("{} 0 0 0 0 0 0 0", MOST_OUTLASTS + 1),
        format!("0 {} 0 0 0 0 0 0", MOST_WINDOW + 1),
        format!("0 0 {past_end} 1 0 0 0 0"),
        format!("0 0 0 0 {past_end} 1 0 0"),
        format!("0 0 {at_end} 1 0 0 {past_end} 2"),
        "0 0 1 18446744073709551616 0 0 0 0".to_string(),
        "0 0 0 0 1 18446744073709551616 0 0".to_string(),
        "0 0 1 5 0 0 1 18446744073709551616".to_string(),
    ];
    let mut wrong = Vec::new();
    for policy in POLICIES {
        for how in TOUCHES {
            for text in &at {
                let p = prefix("h93-at-bound");
                plant(&server, &p, text);
                if let Err(e) = touch(&server, &p, policy, how).await {
                    wrong.push(format!(
                        "{policy:?} {how} {text}: refused at the bound: {e}"
                    ));
                }
            }
            for text in &past {
                let p = prefix("h93-past-bound");
                plant(&server, &p, text);
                match touch(&server, &p, policy, how).await {
                    Err(Error::UnexpectedState { message }) if message.contains("horizon") => {}
                    other => wrong.push(format!("{policy:?} {how} {text}: {other:?}")),
                }
                let (held, ttl) = (horizon_record(&server, &p), record_ttl(&server, &p));
                if held.as_deref() != Some(text.as_str()) || ttl != -1 {
                    wrong.push(format!(
                        "{policy:?} {how} {text}: left as {held:?}, expiring in {ttl} ms"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Garbage in each of the eight numbers (a sign, a fraction, past `u64`, empty, a digit not
/// ASCII, a leading zero): under every failure policy, a read, a raise of a quota of its
/// own and a penalty are each `UnexpectedState`, the record as it was.
#[tokio::test]
async fn garbage_in_each_field_is_unexpected_state_under_every_policy() {
    let server = RedisServer::start();
    let garbage = ["-1", "1.5", "18446744073709551616", "", "\u{0663}", "07"];
    let mut wrong = Vec::new();
    for field in 0..8 {
        for bad in garbage {
            let mut fields = ["0"; 8];
            fields[field] = bad;
            let text = fields.join(" ");
            for policy in POLICIES {
                for how in TOUCHES {
                    let p = prefix("h93-garbage");
                    plant(&server, &p, &text);
                    match touch(&server, &p, policy, how).await {
                        Err(Error::UnexpectedState { message }) if message.contains("horizon") => {}
                        other => wrong.push(format!("{policy:?} {how} {text:?}: {other:?}")),
                    }
                    let (held, ttl) = (horizon_record(&server, &p), record_ttl(&server, &p));
                    if held.as_deref() != Some(text.as_str()) || ttl != -1 {
                        wrong.push(format!("{policy:?} {how} {text:?}: left {held:?} {ttl}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------
// 4. The raise again of a record read lower, after it expired by design.
// ---------------------------------------------------------------------------------------

/// Expires `prefix`'s record now (as its time to live running out would): `PEXPIRE 1`, then
/// Redis' clock polled until it is gone.
fn expire_now(server: &RedisServer, prefix: &str) {
    let mut c = server.connection();
    redis::cmd("PEXPIRE")
        .arg(horizon_key(prefix))
        .arg(1)
        .exec(&mut c)
        .unwrap();
    let from = redis_time(&mut c);
    while horizon_record(server, prefix).is_some() {
        assert!(redis_time(&mut c) < from + 5_000_000, "never expired");
    }
}

/// A's own refill (a token a minute: its quota outlasts a reload by 15 minutes and more) and a
/// penalty of 40 on `"k"` raise the record; it expires (its time to live run out: twice the
/// longest it holds, with no write past half of it). A, which knew it, reads it lower at its
/// next due read and raises it again: what it raises is the durations it keeps (how long a
/// quota of its own outlasts each reload, no clock in them), never a penalty's end, which
/// ended with the record. Then 100 moving reloads 2,000 s apart on B, a call between each:
/// all taken, on the fleet as on the twin (a record raised again holding an end, or for
/// ever, would hold every move: past 64 reloads refused).
#[tokio::test]
async fn a_record_expired_by_design_is_raised_again_without_its_penalty_ends() {
    let server = RedisServer::start();
    let (own, plain) = (Options::new().refill(1), Options::new());
    let mut taken = Vec::new();
    for skew in [&[0, 0][..], &[0]] {
        let pods = denying(&server, "h93-expired", skew);
        pods.admitted(0, "k", &own, 16).await;
        pods.pod(0).penalize("k", &plain, 40).await.unwrap();
        let raised = horizon_record(&server, &pods.prefix).expect("raised");
        let fields: Vec<&str> = raised.split(' ').collect();
        assert_ne!(fields[2], "0", "{raised}");
        pods.reload_all(|| bucket("b"));
        expire_now(&server, &pods.prefix);
        // A's next due read, past every end it knows (its own exact end and the refill's).
        pods.at(5_000);
        pods.admitted(0, "other", &plain, 1).await;
        if pods.fleet() {
            let again = horizon_record(&server, &pods.prefix).expect("raised again");
            let again: Vec<&str> = again.split(' ').collect();
            assert_eq!(&again[..2], &fields[..2], "the durations");
            assert_eq!(&again[2..], ["0"; 6], "no penalty end");
        }
        let b = pods.pod(1);
        let mut ok = 0;
        for i in 1..=100u64 {
            pods.at(5_000 + 2_000 * i);
            b.consume("other", &plain).await.unwrap();
            ok += usize::from(b.reload(on_its_store(b, bucket(&format!("t{i}")))).is_ok());
        }
        taken.push(ok);
    }
    assert_eq!(taken, [100, 100], "fleet, twin");
}

// ---------------------------------------------------------------------------------------
// 5. Penalties on many keys, alternating between pods.
// ---------------------------------------------------------------------------------------

/// How long the record's penalty bound under `prefix` lasts from now on Redis' clock, in
/// seconds (0: none).
fn bound_left(server: &RedisServer, prefix: &str) -> u64 {
    let Some(text) = horizon_record(server, prefix) else {
        return 0;
    };
    let at: u64 = text.split(' ').nth(2).unwrap().parse().unwrap();
    at.saturating_sub(redis_time(&mut server.connection())) / 1_000_000
}

/// Penalties of one unit on 40 distinct keys (failed logins, say), alternating between A and
/// B, at one instant. Each key owes at most a tolerance and two tokens (90 + 12 s): the twin,
/// which made them all, records a bound of 191 s (its own exact ends are the base of its
/// next bound, and they do not add up across keys). Found: on the fleet each pod's bound was
/// raised from the other's bound it read back (`Fleet::penalized`, in `penalty_bound`'s
/// base), plus its own debt and a tolerance: the bound climbed with every penalty that read
/// the other's back (1,433 s after these 40, about 31 s a penalty), whatever the keys, and
/// every move was held until it ended (past 64 reloads refused that long): a lockout that a
/// stream of penalties spread over two pods, one every half minute, kept going for ever.
/// Closed: the base is the exact ends, this pod's and those read (`Fleet::ended`): 191 s.
#[tokio::test]
async fn penalties_on_many_keys_alternating_between_pods_chain_the_bound() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut left = Vec::new();
    for skew in [&[0, 0][..], &[0]] {
        let pods = denying(&server, "h93-chain", skew);
        for i in 0..40 {
            pods.pod(i % 2)
                .penalize(&format!("login:{i}"), &plain, 1)
                .await
                .unwrap();
        }
        left.push(bound_left(&server, &pods.prefix));
    }
    assert!(left[1] <= 192, "twin: {left:?}");
    assert!(
        left[0] <= 2 * left[1],
        "fleet {} s against the twin's {} s",
        left[0],
        left[1]
    );
}

// ---------------------------------------------------------------------------------------
// 6. What a pod knows is recorded, across key prefixes.
// ---------------------------------------------------------------------------------------

/// `builder` on `service`'s store under key prefix `prefix`.
fn under(service: &RateLimitService, prefix: &str, builder: ConfigBuilder) -> ratelimit::Config {
    builder
        .store(service.config().store().clone())
        .key_prefix(prefix)
        .build()
        .unwrap()
}

/// A pod knows what is recorded as one figure for every prefix, where the record is one
/// per prefix. A, under prefix P1, makes one call with its own refill (a token a minute: the
/// P1 record raised to its 15 minutes and more), is reloaded to prefix P2 and spends 15 on
/// `"k"` there with that refill (15 minutes owed on P2's state): it knows the quota
/// recorded, and raises nothing, so P2's record holds nothing. C, a pod under P2 from the
/// start, and A are reloaded to the tier renamed (P2's state moved); C's plain calls at
/// +300 s read P2's record: nothing, and C let the old state go at the configured carrying
/// (150 s): 15 admitted. The twin, which made every call, carries it for the quota it
/// noted: none. Closed: what a pod knows is recorded is the least of its prefixes' records,
/// forgotten where a reload brings a prefix in (`horizon_prefixes_moved`): A's first call
/// with its own refill under P2 raises P2's record.
#[tokio::test]
async fn a_quota_recorded_under_one_prefix_is_not_raised_under_the_next() {
    let server = RedisServer::start();
    let (own, plain) = (Options::new().refill(1), Options::new());
    let mut counts = Vec::new();
    for fleet in [true, false] {
        let mut pods = denying(&server, "h93-prefixes", &[0]);
        let p2 = prefix("h93-prefixes-next");
        let mut c = vec![pods.admitted(0, "warm", &own, 1).await];
        let a = pods.pod(0).clone();
        a.reload(under(&a, &p2, bucket("a"))).unwrap();
        c.push(pods.admitted(0, "k", &own, 16).await);
        if fleet {
            pods.pods.push(on_redis_with(
                options(&server, FailurePolicy::Deny)(),
                &p2,
                bucket("a"),
            ));
            pods.skew.push(Duration::ZERO);
        }
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        c.push(pods.admitted(1, "k", &plain, 16).await);
        counts.push(c);
    }
    assert_eq!(counts[1], [1, 15, 0], "twin");
    assert_eq!(counts[0], counts[1], "fleet");
}
