//! helper-108's probes of a lost (deleted, evicted) fleet record (`service/horizon.rs`:
//! `read_horizon` raising again what it finds lost, `Fleet::unraised`): pods on one Redis
//! server under one key prefix against their twin, one service that makes every call and
//! reload of every pod (as probes_horizon_record_redis, whose configuration this takes:
//! [`bucket`]`("a")`, a bucket of 15 a token every 6 s, its old state carried 150 s past a
//! move, moved by a reload to [`bucket`]`("b")`).
//!
//! A read found a record lost only where it held less of a quota or a window of a call's
//! own than the pod knew was recorded: a penalty's end lost with it went unseen, was never
//! raised again, and a pod that never knew it let the move go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::Horizon;
use ratelimit::{
    Failover, FailurePolicy, ManualClock, Options, RateLimitService, RedisOptions, RedisStore,
};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{horizon_hooked, on_redis, Before, Pods, START};

/// Two pods (`fleet`) or the twin on `server`, on the default bucket of tier `"a"`.
fn pods(server: &RedisServer, name: &str, fleet: bool) -> Pods {
    let p = prefix(name);
    let n = if fleet { 2 } else { 1 };
    let pods = (0..n).map(|_| on_redis(server, &p, bucket("a"))).collect();
    Pods::new(pods, &vec![0; n], p)
}

/// Runs `script` on a fleet of two pods and on its twin: what each admitted, the fleet's first.
async fn fleet_and_twin<F>(server: &RedisServer, name: &str, script: F) -> (Vec<usize>, Vec<usize>)
where
    F: AsyncFn(&Pods) -> Vec<usize>,
{
    let fleet = script(&pods(server, name, true)).await;
    let twin = script(&pods(server, name, false)).await;
    (fleet, twin)
}

/// A penalty through A (15 spent and 40 more: its debt to +336 s, the record's bound to
/// +426 s), the record deleted, both reloaded to the tier renamed; at +300 s A's plain
/// call on another key reads the record (due) and finds it lost; then B's 16 plain calls on
/// `"k"`. The twin carries the old state for the penalty it made itself: none admitted.
/// Found: A's read compared only a quota's and a window's own with what it knew recorded,
/// never the penalty's end: it raised nothing again, and B, reading the record empty, let
/// the move go at the configured carrying: 15.
#[tokio::test]
async fn a_lost_record_holding_a_penalty_is_raised_again_by_the_pod_that_made_it() {
    let server = RedisServer::start();
    let plain = Options::new();
    let (fleet, twin) = fleet_and_twin(&server, "h108-lost-penalty", async |pods| {
        let mut counts = vec![pods.admitted(0, "k", &plain, 15).await];
        pods.pod(0).penalize("k", &plain, 40).await.unwrap();
        redis::cmd("DEL")
            .arg(format!("{}:horizon", pods.prefix))
            .exec(&mut server.connection())
            .unwrap();
        pods.reload_all(|| bucket("b"));
        pods.at(300);
        counts.push(pods.admitted(0, "other", &plain, 1).await);
        counts.push(pods.admitted(1, "k", &plain, 16).await);
        counts
    })
    .await;
    assert_eq!(twin, [15, 1, 0], "twin");
    assert_eq!(fleet, twin, "fleet");
}

/// Two pods (`fleet`) or the twin under `policy`, each on a [`Failover`] over a
/// `HorizonHooked` store whose raises of the record (not its reads) fail while `failing`.
fn failing_pods(
    server: &RedisServer,
    name: &str,
    fleet: bool,
    policy: FailurePolicy,
    failing: &Arc<AtomicBool>,
) -> Pods {
    let p = prefix(name);
    let n = if fleet { 2 } else { 1 };
    let pods = (0..n)
        .map(|_| {
            let failing = Arc::clone(failing);
            let hook = move |raise: &Horizon| match failing.load(Ordering::Relaxed)
                && *raise != Horizon::default()
            {
                true => Before::Fail,
                false => Before::Forward,
            };
            let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
            let inner = RedisStore::new(options).unwrap();
            let store = Failover::new(horizon_hooked(inner, hook), policy);
            let clock = ManualClock::new(START);
            let config = bucket("a").key_prefix(&p).build().unwrap();
            let service = RateLimitService::with_store(config, store, Arc::new(clock.clone()));
            (service.unwrap(), clock)
        })
        .collect();
    Pods::new(pods, &vec![0; n], p)
}

/// As [`a_lost_record_holding_a_penalty_is_raised_again_by_the_pod_that_made_it`], A's
/// raise again failing (answered by the policy: 1), under `Allow` and `Local`: the raise
/// is made at A's next call (`Fleet::unraised`), the penalty with it, and B's 16 plain
/// calls carry the old state: none, as the twin.
#[tokio::test]
async fn a_lost_record_holding_a_penalty_whose_raise_again_fails_is_raised_at_the_next_call() {
    let server = RedisServer::start();
    let plain = Options::new();
    for policy in [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }] {
        let mut results = Vec::new();
        for fleet in [true, false] {
            let failing = Arc::new(AtomicBool::new(false));
            let pods = failing_pods(&server, "h108-lost-penalty-fails", fleet, policy, &failing);
            let mut counts = vec![pods.admitted(0, "k", &plain, 15).await];
            pods.pod(0).penalize("k", &plain, 40).await.unwrap();
            redis::cmd("DEL")
                .arg(format!("{}:horizon", pods.prefix))
                .exec(&mut server.connection())
                .unwrap();
            pods.reload_all(|| bucket("b"));
            pods.at(300);
            failing.store(true, Ordering::Relaxed);
            counts.push(pods.admitted(0, "other", &plain, 1).await);
            failing.store(false, Ordering::Relaxed);
            counts.push(pods.admitted(0, "other", &plain, 1).await);
            counts.push(pods.admitted(1, "k", &plain, 16).await);
            results.push(counts);
        }
        assert_eq!(results[1], [15, 1, 1, 0], "{policy:?}: twin");
        assert_eq!(results[0], results[1], "{policy:?}: fleet");
    }
}
