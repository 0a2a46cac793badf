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

use ratelimit::Options;
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{on_redis, Pods};

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
