//! A call whose read or raise of the fleet's horizon record fails unanswered, under
//! `FailurePolicy::Allow` or `Local`, is answered by the failure policy alone (`Site::failed`,
//! `Store::answer_failure`), on every surface, never by the store on a link that answers
//! again (helper-97; the plain call's probes: probes_horizon_surfaces_redis'
//! `a_due_read_whose_link_is_killed_under_allow_or_local` and
//! `a_raise_whose_link_is_killed_under_allow_or_local`).
//!
//! Each pod's store is a [`Failover`] over a [`HorizonHooked`] Redis store whose reads and
//! raises of the record fail (the store's error) while a flag is set, and whose decisions go
//! to Redis: the read or raise fails, the store answers the rest, deterministically. Each
//! script runs on a fleet of two pods and on its twin (one service that makes every call and
//! reload of every pod), under `Allow` and `Local`; the fleet never admits more than the twin.
//!
//! The configuration: [`bucket`]`("a")`, a bucket of 15 (10 plus 5) a token every 6 s (its
//! old state carried 150 s past a move), moved by a reload to [`bucket`]`("b")`. A quota of
//! its own, `Options::new().refill(1)` (a token a minute on the tier's state): 15 spent owe
//! 15 minutes there. Redis' clock stands still in the tests: every debt is whole.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::Horizon;
use ratelimit::{
    ConfigBuilder, Decision, Error, Failover, FailurePolicy, ManualClock, Options,
    RateLimitService, RedisOptions, RedisStore,
};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{delete_horizon, RedisServer};
use ratelimit_tests::{
    fleet_and_twin_of, horizon_hooked, on_its_store, until_depth, Before, Pods, START,
};

/// The policies that answer a failure otherwise than by its error.
const POLICIES: [FailurePolicy; 2] = [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }];

/// The quota of a call's own that pod A spends.
fn own() -> Options {
    Options::new().refill(1)
}

/// Whether `decided` is Redis' admission (under the bucket of 15), not the policy's
/// (unlimited under `Allow`, the pod's share of 7 under `Local`).
fn by_redis(decided: &Result<Decision, Error>) -> bool {
    decided.as_ref().is_ok_and(|d| d.allowed && d.limit == 15)
}

/// `n` pods on `first` under `policy`, each on a [`Failover`] over a [`HorizonHooked`] store
/// whose reads and raises of the record fail while `failing` (its raises only, where
/// `only_raises`).
fn pods(
    server: &RedisServer,
    name: &str,
    n: usize,
    first: impl Fn() -> ConfigBuilder,
    policy: FailurePolicy,
    failing: &Arc<AtomicBool>,
    only_raises: bool,
) -> Pods {
    Pods::made(name, &vec![0; n], |p| {
        let failing = Arc::clone(failing);
        let hook = move |raise: &Horizon| {
            let fails = !only_raises || *raise != Horizon::default();
            match failing.load(Ordering::Relaxed) && fails {
                true => Before::Fail,
                false => Before::Forward,
            }
        };
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let inner = RedisStore::new(options).unwrap();
        let store = Failover::new(horizon_hooked(inner, hook), policy);
        let clock = ManualClock::new(START);
        let config = first().key_prefix(p).build().unwrap();
        let service = RateLimitService::with_store(config, store, Arc::new(clock.clone()));
        (service.unwrap(), clock)
    })
}

/// Runs `script` under each policy on a fleet and on its twin (`failing` shared by their
/// stores) and checks that the fleet admitted what the twin did, the twin `expected`.
async fn against_twin<F>(
    name: &str,
    first: impl Fn() -> ConfigBuilder + Copy,
    expected: impl Fn(FailurePolicy) -> Vec<usize>,
    script: F,
) where
    F: AsyncFn(&Pods, &AtomicBool) -> Vec<usize>,
{
    against_twin_failing(name, first, false, expected, async |pods, failing, _| {
        script(pods, failing).await
    })
    .await
}

/// [`against_twin`] whose stores fail only raises of the record while `failing`, where
/// `only_raises`; `script` is handed the server too.
async fn against_twin_failing<F>(
    name: &str,
    first: impl Fn() -> ConfigBuilder + Copy,
    only_raises: bool,
    expected: impl Fn(FailurePolicy) -> Vec<usize>,
    script: F,
) where
    F: AsyncFn(&Pods, &AtomicBool, &RedisServer) -> Vec<usize>,
{
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in POLICIES {
        let failing = Arc::new(AtomicBool::new(false));
        let each = |n| {
            failing.store(false, Ordering::Relaxed);
            pods(&server, name, n, first, policy, &failing, only_raises)
        };
        let script = async |p: &Pods| script(p, &failing, &server).await;
        let (fleet, twin) = fleet_and_twin_of(each, script).await;
        results.push((policy, fleet, twin));
    }
    for (policy, _, twin) in &results {
        assert_eq!(twin, &expected(*policy), "{policy:?}: twin");
    }
    for (policy, fleet, twin) in &results {
        assert_eq!(fleet, twin, "{policy:?}: fleet (all: {results:?})");
    }
}

// ---------------------------------------------------------------------------------------
// 1. A due read that fails: A's 15 with its own quota (the record raised), both reloaded to
//    the tier renamed, and at +300 s (past the configured carrying: a read due on B) B's
//    read fails while B makes one call on the surface. Asked of Redis, B's call was decided
//    on the moved state alone (1 admitted by Redis); the twin, which knows the quota of its
//    own, carries the old state (0). Then the reads answer again, and B's 16 plain calls
//    read the record and carry it: none.
// ---------------------------------------------------------------------------------------

/// The read side's script: B's call on the surface is `call`.
async fn read_fails_under<C>(pods: &Pods, failing: &AtomicBool, call: C) -> Vec<usize>
where
    C: AsyncFn(&RateLimitService) -> bool,
{
    let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
    pods.reload_all(|| bucket("b"));
    pods.at(300);
    failing.store(true, Ordering::Relaxed);
    counts.push(usize::from(call(pods.pod(1)).await));
    failing.store(false, Ordering::Relaxed);
    counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
    counts
}

/// The read side's twin: 15 spent, B's call answered by the policy (never by Redis), none.
fn read_side(_: FailurePolicy) -> Vec<usize> {
    vec![15, 0, 0]
}

/// A stacked call (`consume_all`) whose due read fails: answered by the policy, each of its
/// limits, never by Redis. Without it (`spend_stacked_in` not marking its sites), 1 admitted
/// by Redis against 0.
#[tokio::test]
async fn a_stacked_call_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let other = Options::new().budget("other").limit(100).window("1h");
            let limits = [("k", &Options::new()), ("k", &other)];
            let decided = b.consume_all(&limits).await;
            decided.is_ok_and(|all| all[0].allowed && all[0].limit == 15)
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-stacked-read", || bucket("a"), read_side, script).await;
}

/// `until_ready` whose due read fails: its tries answered by the policy. Without it, 1
/// admitted by Redis against 0.
#[tokio::test]
async fn until_ready_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(1);
            by_redis(&b.until_ready("k", &Options::new(), deadline).await)
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-until-ready-read", || bucket("a"), read_side, script).await;
}

/// A site prepared before the move, no longer current, whose due read fails: its call
/// resolved again (`Prepared::rerun`) and answered by the policy. Without it, 1 admitted by
/// Redis against 0.
#[tokio::test]
async fn a_prepared_sites_call_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let site = b.prepare(&Options::new()).unwrap();
            by_redis(&site.consume("k").await)
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-prepared-read", || bucket("a"), read_side, script).await;
}

/// The same site's spend kept for a refund (`Prepared::spend_with`). Without it, 1 admitted
/// by Redis against 0.
#[tokio::test]
async fn a_prepared_sites_spend_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let site = b.prepare(&Options::new()).unwrap();
            let spent = site.spend("k").await;
            by_redis(&spent.map(|s| s.into_decision()))
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-prepared-spend-read", || bucket("a"), read_side, script).await;
}

/// A spend kept for a refund (`RateLimitService::spend`) whose due read fails. Without it,
/// 1 admitted by Redis against 0.
#[tokio::test]
async fn a_spend_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let spent = b.spend("k", &Options::new()).await;
            by_redis(&spent.map(|s| s.into_decision()))
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-spend-read", || bucket("a"), read_side, script).await;
}

/// A reward (or a penalty) whose due read fails is refused with the read's error, whatever
/// the policy, as a penalty whose bound's raise fails: an adjustment is no decision a policy
/// answers, and made on what B alone knew it gives back (or spends) on the moved state alone.
/// Without it, the reward was given back on the moved state (its level, `Ok`). Then B's
/// plain calls: none.
#[tokio::test]
async fn an_adjustment_whose_due_read_fails_is_refused_with_its_error() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |b: &RateLimitService| {
            let reward = b.reward("k", &Options::new(), 1).await;
            assert!(matches!(reward, Err(Error::Store { .. })), "{reward:?}");
            let penalty = b.penalize("k", &Options::new(), 1).await;
            assert!(matches!(penalty, Err(Error::Store { .. })), "{penalty:?}");
            false
        };
        read_fails_under(pods, failing, call).await
    };
    against_twin("h97-adjust-read", || bucket("a"), read_side, script).await;
}

/// [`bucket`]`(name)` with calls that wait an hour at most.
fn queued_bucket(name: &str) -> ConfigBuilder {
    bucket(name).queue_timeout("1h")
}

/// A waiter in the queue whose head's read fails: a rolling reload, B on the tier renamed
/// first (its read at +1 s finds nothing), A on the old tier spends 15 with its own quota
/// (the record raised), and B queues at +2 s a head of cost 2 (refused: B carries the old
/// state for the configured bucket) and a call of cost 1 behind it. A reloads; at +300 s
/// the head is dropped and the call behind it, at the head, has a read due, which fails:
/// its ask is answered by the policy (`wait.rs`), never by Redis, where the site worked out
/// at +2 s let the old state go at 150 s. Without it, 1 admitted by Redis against 0. The
/// waiter is held up to 5 s of wall clock. Then B's 16 plain calls read the record: none.
#[tokio::test]
async fn a_queued_head_whose_due_read_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let b = pods.pod(1);
        b.reload(on_its_store(b, queued_bucket("b"))).unwrap();
        pods.at(1);
        let mut counts = vec![pods.admitted(1, "other", &Options::new(), 1).await];
        counts.push(pods.admitted(0, "k", &own(), 16).await);
        pods.at(2);
        let spawn = |options: Options| {
            let b = b.clone();
            tokio::spawn(async move { b.consume("k", &options).await })
        };
        let head = spawn(Options::new().cost(2).queue(true));
        until_depth(b, 1).await;
        let behind = spawn(Options::new().queue(true));
        until_depth(b, 2).await;
        if pods.fleet() {
            let a = pods.pod(0);
            a.reload(on_its_store(a, queued_bucket("b"))).unwrap();
        }
        pods.at(300);
        failing.store(true, Ordering::Relaxed);
        head.abort();
        let waited = tokio::time::timeout(Duration::from_secs(5), behind).await;
        counts.push(match waited {
            Ok(joined) => usize::from(by_redis(&joined.unwrap())),
            Err(_) => 0,
        });
        failing.store(false, Ordering::Relaxed);
        counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
        counts
    };
    let expected = |_| vec![1, 15, 0, 0];
    against_twin("h97-queue-read", || queued_bucket("a"), expected, script).await;
}

// ---------------------------------------------------------------------------------------
// 2. A raise that fails: A's call with its own quota of cost 15 (the whole bucket: 15
//    minutes owed) on the surface has its raise fail. Asked of Redis, its state was written
//    with no record, and B's plain calls at +300 s (after both reloaded to the tier renamed)
//    read none and let the old state go: 15, where the twin, knowing the quota of its own,
//    carried it: 0. Answered by the policy, nothing is written: 15 on both. Counts: A's
//    call admitted (by the policy: unlimited under `Allow`; under `Local` a cost of 15 is
//    above the share of 7, its error), B's plain calls at +300 s.
// ---------------------------------------------------------------------------------------

/// The raise side's script: A's call on the surface is `call`.
async fn raise_fails_under<C>(pods: &Pods, failing: &AtomicBool, call: C) -> Vec<usize>
where
    C: AsyncFn(&RateLimitService) -> bool,
{
    let mut counts = vec![pods.admitted(0, "warm", &Options::new(), 1).await];
    failing.store(true, Ordering::Relaxed);
    counts.push(usize::from(call(pods.pod(0)).await));
    failing.store(false, Ordering::Relaxed);
    pods.reload_all(|| bucket("b"));
    pods.at(300);
    counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
    counts
}

/// The raise side's twin: nothing written to Redis by A's call.
fn raise_side(policy: FailurePolicy) -> Vec<usize> {
    match policy {
        FailurePolicy::Allow => vec![1, 1, 15],
        _ => vec![1, 0, 15],
    }
}

/// A spend kept for a refund (`spend_at`) whose raise fails. Without it, its state written
/// with no record: 15 against 0.
#[tokio::test]
async fn a_spend_whose_raise_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |a: &RateLimitService| {
            let spent = a.spend("k", &own().cost(15)).await;
            spent.is_ok_and(|s| s.decision().allowed)
        };
        raise_fails_under(pods, failing, call).await
    };
    against_twin("h97-spend-raise", || bucket("a"), raise_side, script).await;
}

/// A stacked call whose raise fails. Without it, its state written with no record: 15
/// against 0.
#[tokio::test]
async fn a_stacked_call_whose_raise_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |a: &RateLimitService| {
            let other = Options::new().budget("other").limit(100).window("1h");
            let limits = [("k", &own().cost(15)), ("k", &other.cost(15))];
            let decided = a.consume_all(&limits).await;
            decided.is_ok_and(|all| all.iter().all(|d| d.allowed))
        };
        raise_fails_under(pods, failing, call).await
    };
    against_twin("h97-stacked-raise", || bucket("a"), raise_side, script).await;
}

/// A call that may wait in the queue whose raise fails (`raised_then`, then the queue's
/// path). Without it, its state written with no record: 15 against 0.
#[tokio::test]
async fn a_queued_call_whose_raise_fails_is_answered_by_the_policy() {
    let script = async |pods: &Pods, failing: &AtomicBool| {
        let call = async |a: &RateLimitService| {
            let decided = a.consume("k", &own().cost(15).queue(true)).await;
            decided.is_ok_and(|d| d.allowed)
        };
        raise_fails_under(pods, failing, call).await
    };
    against_twin("h97-queue-raise", || queued_bucket("a"), raise_side, script).await;
}

// ---------------------------------------------------------------------------------------
// 3. A lost record whose raise again fails: A's 15 with its own quota (the record raised),
//    the record deleted (evicted, or Redis restarted without it), both reloaded to the tier
//    renamed, and at +300 s A's plain call reads the record (due), finds less than it knew
//    was recorded and raises it again; the raise fails (answered by the policy: 1). The
//    raises answer again; A's next plain call (1), then B's 16 plain calls on "k". The twin
//    carries the old state for the quota of its own it knows: none.
// ---------------------------------------------------------------------------------------

/// A lost record whose raise again failed is raised at the pod's next call, not at its next
/// due read: the read had moved what is due on, so the pod read nothing more, the record
/// stayed lost, and B, reading it empty, let the old state go: 15 against 0.
#[tokio::test]
async fn a_lost_record_whose_raise_again_fails_is_raised_at_the_next_call() {
    let script = async |pods: &Pods, failing: &AtomicBool, server: &RedisServer| {
        let mut counts = vec![pods.admitted(0, "k", &own(), 16).await];
        delete_horizon(server, &pods.prefix);
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        failing.store(true, Ordering::Relaxed);
        counts.push(pods.admitted(0, "other", &Options::new(), 1).await);
        failing.store(false, Ordering::Relaxed);
        counts.push(pods.admitted(0, "other", &Options::new(), 1).await);
        counts.push(pods.admitted(1, "k", &Options::new(), 16).await);
        counts
    };
    let expected = |_| vec![15, 1, 1, 0];
    against_twin_failing("lost-raise-fails", || bucket("a"), true, expected, script).await;
}

/// As [`a_lost_record_whose_raise_again_fails_is_raised_at_the_next_call`], the record lost
/// holding a penalty through A (15 spent and 40 more: its debt to +336 s) rather than a
/// quota of its own (helper-108; the raise again that answers:
/// probes_horizon_record_redis' `a_lost_record_holding_a_penalty_is_raised_again_by_the_pod_that_made_it`):
/// A's raise again failing (answered by the policy: 1), it is made at A's next call, the
/// penalty with it, and B's 16 plain calls carry the old state: none, as the twin.
#[tokio::test]
async fn a_lost_record_holding_a_penalty_whose_raise_again_fails_is_raised_at_the_next_call() {
    let script = async |pods: &Pods, failing: &AtomicBool, server: &RedisServer| {
        let plain = Options::new();
        let mut counts = vec![pods.admitted(0, "k", &plain, 15).await];
        pods.pod(0).penalize("k", &plain, 40).await.unwrap();
        delete_horizon(server, &pods.prefix);
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        failing.store(true, Ordering::Relaxed);
        counts.push(pods.admitted(0, "other", &plain, 1).await);
        failing.store(false, Ordering::Relaxed);
        counts.push(pods.admitted(0, "other", &plain, 1).await);
        counts.push(pods.admitted(1, "k", &plain, 16).await);
        counts
    };
    let expected = |_| vec![15, 1, 1, 0];
    let name = "h108-lost-penalty-fails";
    against_twin_failing(name, || bucket("a"), true, expected, script).await;
}
