//! The pending record a carried spend leaves beside the moved state for a read after that
//! never comes (`lua/carry.lua`): helper-79's probes.

use super::moved::*;
use super::*;

/// Records of a shape no script writes, set before any carried spend: every carried spend
/// after fails (nothing admitted), as garbage in the mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_garbage_pending_records_fail_every_carried_spend() {
    let garbage = [
        "garbage",
        "0:1",
        "-5:1",
        "5:-1",
        "5:0",
        "5:",
        ":5",
        "1e5:1",
        "5.5:1",
        "5:1:2",
        " 5:1",
        "99999999999999999999:1",
        "9007199254740993:1",
    ];
    let mut moved = Moved::new("probe-garbage-records", Duration::from_secs(2)).await;
    let key = moved.record_key();
    for g in garbage {
        moved.set_record(g);
        let (admitted, error) = moved.admitted_after().await;
        assert_eq!(admitted, 0, "{g}");
        assert!(error.is_some(), "{g}");
    }
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query(&mut moved.masters[0])
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("a")
        .arg("1")
        .query(&mut moved.masters[0])
        .unwrap();
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_some()), (0, true), "a hash");
}

/// A record of another call's id, its end far in the past (1 µs): the next carried spend adds
/// all the old state's end, capped at a full moved bucket from now: nothing admitted, and the
/// moved bucket full again within a full bucket (90 s) of now, never later (bounded lockout).
/// One in the future adds nothing: 10 admitted, as with no record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_records_from_the_past_and_the_future() {
    let mut moved = Moved::new("probe-past-record", Duration::from_secs(2)).await;
    let key = moved.record_key();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("1:77")
        .query(&mut moved.masters[0])
        .unwrap();
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (0, true));
    let carried = [carry(&moved.from, &moved.old)];
    let refused = carrying(
        &moved.store,
        &moved.into,
        &moved.new,
        1,
        &carried,
        Mode::Spend,
    );
    let refused = refused.await.unwrap();
    assert!(!refused.allowed);
    let full = SystemTime::now() + Duration::from_secs(90) + Duration::from_millis(50);
    assert!(refused.reset_at() <= full, "{refused:?}");

    let mut moved = Moved::new("probe-future-record", Duration::from_secs(2)).await;
    let key = moved.record_key();
    let future = (SystemTime::now() + Duration::from_secs(3600))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("{future}:77"))
        .query(&mut moved.masters[0])
        .unwrap();
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (10, true));
}

/// One server's history of [`held_past_the_read_after`] (5 spent on the old bucket, 5 more,
/// then the carried spend, whose script reads the old state itself: 66 s on the moved
/// bucket), `then` done after: what the moved bucket admits after, carrying, until refused.
pub(super) async fn on_one_server(then: Then) -> usize {
    let server = RedisServer::start();
    let store = on_server(&server);
    let p = prefix(&format!("probe-one-{then:?}"));
    let (from, into) = (format!("{p}:{{o}}:old"), format!("{p}:{{u}}:new"));
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    assert!(spend(&store, &from, &old, 5).await.allowed);
    assert!(spend(&store, &from, &old, 5).await.allowed);
    let carried = [carry(&from, &old)];
    let first = carrying(&store, &into, &new, 1, &carried, Mode::Spend).await;
    assert!(first.unwrap().allowed);
    match then {
        Then::ResetOld | Then::ErasedGoneThenResetOld => {
            assert!(store.reset(&from).await.unwrap())
        }
        Then::ResetMoved => assert!(store.reset(&into).await.unwrap()),
        Then::RewardOld => reward_old(&store, &from, &old).await,
        Then::RewardOldPastItsDebt => assert!(reward(&store, &from, &old, 20).await >= 9),
        Then::RewardMoved => assert_eq!(reward(&store, &into, &new, 5).await, 5),
        Then::Nothing | Then::Expired => {}
    }
    let mut admitted = 0;
    loop {
        let d = carrying(&store, &into, &new, 1, &carried, Mode::Spend)
            .await
            .unwrap();
        if !d.allowed {
            break;
        }
        admitted += 1;
    }
    admitted
}

/// What is done after a carried spend's read after failed, its record standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    Nothing,
    /// The old state reset (a pod the reload has not reached resets the key).
    ResetOld,
    /// The moved state reset (`service.reset` after the reload).
    ResetMoved,
    /// The record deleted, as its expiry would (a moved bucket busy past a full bucket).
    Expired,
    /// A reward of 5 on the old state (a pod the reload has not reached rewards the key).
    RewardOld,
    /// A reward of 20 on the old state, past all it owes (9 or 10 given back: what its
    /// quota takes).
    RewardOldPastItsDebt,
    /// A reward of 5 on the moved state (`service.reward` after the reload).
    RewardMoved,
    /// The erased key beside the old state deleted (as an eviction would), then the old state
    /// reset.
    ErasedGoneThenResetOld,
}

/// A reward of 5 on `from` under `old` (`service.reward` by a pod in its old window).
async fn reward_old(store: &RedisStore, from: &str, old: &Quota) {
    assert_eq!(reward(store, from, old, 5).await, 5);
}

/// A reward of `units` on `key` under `quota`: the units given back.
async fn reward(store: &RedisStore, key: &str, quota: &Quota, units: u64) -> u64 {
    let key = StoreKey::one_window(key).unwrap();
    let reward = crate::store::Adjustment::reward(key, quota, units, NOW);
    store.adjust(reward).await.unwrap()
}

/// [`held_past_the_read_after`], then `then`: what the moved bucket admits after.
pub(super) async fn on_a_cluster(then: Then) -> usize {
    let mut moved = Moved::new(&format!("probe-held-{then:?}"), Duration::from_millis(1500)).await;
    held_past_the_read_after(&mut moved).await;
    let record = record_of(&mut moved).expect("the call's record stands");
    assert!(record.contains(':'), "{record}");
    match then {
        Then::ResetOld => assert!(moved.store.reset(&moved.from).await.unwrap()),
        Then::ResetMoved => assert!(moved.store.reset(&moved.into).await.unwrap()),
        Then::Expired => {
            let key = moved.record_key();
            let _: () = redis::cmd("DEL")
                .arg(&key)
                .query(&mut moved.masters[0])
                .unwrap();
        }
        Then::RewardOld => reward_old(&moved.store, &moved.from, &moved.old).await,
        Then::RewardOldPastItsDebt => {
            assert!(reward(&moved.store, &moved.from, &moved.old, 20).await >= 9)
        }
        Then::RewardMoved => {
            assert_eq!(reward(&moved.store, &moved.into, &moved.new, 5).await, 5)
        }
        Then::ErasedGoneThenResetOld => {
            let erased = super::super::ledger::erased_key(&moved.from);
            assert!(exists(&mut moved.masters[1], &erased), "kept by the read");
            let _: () = redis::cmd("DEL")
                .arg(&erased)
                .query(&mut moved.masters[1])
                .unwrap();
            assert!(moved.store.reset(&moved.from).await.unwrap());
        }
        Then::Nothing => {}
    }
    let (admitted, error) = moved.admitted_after().await;
    assert!(error.is_none(), "{then:?}: {error:?}");
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_a_standing_record_then_nothing() {
    assert_eq!(on_one_server(Then::Nothing).await, 4);
    assert_eq!(on_a_cluster(Then::Nothing).await, 4);
}

/// The moved state reset while the record stands: the next carry takes the old debt (60 s)
/// again, the record's addition (30 s) inside it, never on top: 5 on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_a_standing_record_then_the_moved_state_reset() {
    assert_eq!(on_one_server(Then::ResetMoved).await, 5);
    assert_eq!(on_a_cluster(Then::ResetMoved).await, 5);
}

/// The old state reset while the record stands: the next read finds it full, and nothing was
/// added from a full read (the record overwritten): the 30 s the call missed were lost, 9
/// admitted after where one server (the call's script after the old state's 5 more) leaves 4.
/// Not of the record alone: a read after that found the old state reset added nothing either
/// (`grown_since` of a full bucket). The reset now leaves the end it erased beside the old
/// state (`lua/reset.lua`), which the next read takes for the end it was spent to: 4 on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_a_standing_record_then_the_old_state_reset() {
    assert_eq!(on_one_server(Then::ResetOld).await, 4);
    assert_eq!(on_a_cluster(Then::ResetOld).await, 4);
}

/// The record gone (as its expiry would take it): the next carry takes the old debt (60 s)
/// by the carry's rule; only the call's own spend is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_a_standing_record_then_expired() {
    assert_eq!(on_one_server(Then::Expired).await, 4);
    assert_eq!(on_a_cluster(Then::Expired).await, 5);
}

/// `before` carried spends read the old state (30 s) and wait with their scripts on the moved
/// state's master, the old state is spent 5 more (60 s), `after` more read it (60 s) and wait
/// behind them; the scripts run in that order, each overwriting the record of the one before,
/// then every read after is held past the store's timeout (each call fails, its spend kept):
/// what the moved bucket admits after, carrying, until refused.
async fn held_together(before: usize, after: usize) -> usize {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    let name = format!("probe-together-{before}-{after}");
    let mut moved = Moved::new(&name, Duration::from_millis(1500)).await;
    // A pod each, warmed (its scripts loaded, its connections made).
    let pods: Vec<RedisStore> = (0..before + after)
        .map(|_| {
            let options = RedisOptions::cluster(moved._cluster.urls());
            RedisStore::new(options.timeout(Duration::from_millis(1500))).unwrap()
        })
        .collect();
    for pod in &pods {
        let look = carrying(pod, &moved.into, &moved.new, 1, &[], Mode::Look).await;
        assert!(look.unwrap().allowed);
        let look = carrying(pod, &moved.from, &moved.old, 1, &[], Mode::Look).await;
        assert!(look.unwrap().allowed);
    }
    let mut pods = pods.into_iter();
    pause_writes(&mut moved.masters[0]);
    let mut calls: Vec<_> = (pods.by_ref().take(before))
        .map(|pod| moved.spend_by(pod))
        .collect();
    until_waiting(&mut moved.masters[0], before as u64);
    moved.others_spend().await;
    for n in 1..=after {
        calls.push(moved.spend_by(pods.next().unwrap()));
        until_waiting(&mut moved.masters[0], (before + n) as u64);
    }
    let n = calls.len() as u64;
    pause_writes(&mut moved.masters[1]);
    unpause(&mut moved.masters[0]);
    until_waiting(&mut moved.masters[1], n);
    for call in calls {
        let decided = call.await.unwrap();
        assert!(
            matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
            "{decided:?}"
        );
    }
    unpause(&mut moved.masters[1]);
    assert!(record_of(&mut moved).is_some());
    let (admitted, error) = moved.admitted_after().await;
    assert!(error.is_none(), "{error:?}");
    admitted
}

/// Two calls whose reads came before the old state's 5 more, both read afters failed: the
/// second's record (30 s) stands, the next call adds the 30 s once: 3 after (60 s and the two
/// spends), as one server leaves with both scripts after the 5 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_two_calls_whose_records_overwrite_each_other() {
    assert_eq!(held_together(2, 0).await, 3);
}

/// The same with a third call reading after the 5 more (60 s): its script adds the 30 s from
/// the second's record, its own record (60 s) stands: 2 after, as one server leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_three_calls_whose_records_overwrite_each_other() {
    assert_eq!(held_together(2, 1).await, 2);
}
