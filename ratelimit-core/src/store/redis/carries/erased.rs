//! The time resets erased from an old state (`lua/level.lua`, `lua/reset.lua`) and the
//! pending records of four parts: helper-82's probes.

use super::moved::*;
use super::records::*;
use super::*;

// helper-82's probes of the erased total (`lua/level.lua`, `lua/reset.lua`) and of the
// pending records of four parts (`end:id:past:erased`, `lua/carry.lua`), on a real Cluster,
// each against one server's count for the same history (the twin) where it has one.

/// A reward of the old state while a carried spend's record stands (its read after held past
/// the timeout): a reward moves the old end back as a reset does, and the next read found it
/// where the record's read had (30 s), adding nothing: 9 admitted after where one server
/// (whose script carried the 5 more before the reward, which reaches no moved state) leaves
/// 4. Closed by counting give-backs in the erased total (`erase_given` in `lua/beside.lua`;
/// `probe82_a_reward_of_the_old_state_before_the_read_after`, lua_carry/): 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_a_standing_record_then_the_old_state_rewarded() {
    assert_eq!(on_one_server(Then::RewardOld).await, 4);
    assert_eq!(on_a_cluster(Then::RewardOld).await, 4);
}

/// Strings no script writes in the erased key beside the old state: every carried spend
/// fails (`RATELIMIT_STATE`: nothing admitted), and so does a reset of the old state, which
/// keeps it (a spend made after still refused: the old debt carried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_garbage_in_the_erased_key_fails_closed() {
    let garbage = [
        "garbage",
        "-1",
        "01",
        "00",
        "1.5",
        " 1",
        "1e3",
        "",
        "9007199254740992",
        "99999999999999999999",
    ];
    let mut moved = Moved::new("probe82-erased-garbage", Duration::from_secs(2)).await;
    let erased = super::super::ledger::erased_key(&moved.from);
    for g in garbage {
        let _: () = redis::cmd("SET")
            .arg(&erased)
            .arg(g)
            .query(&mut moved.masters[1])
            .unwrap();
        let (admitted, error) = moved.admitted_after().await;
        assert_eq!(admitted, 0, "{g:?}");
        assert!(
            matches!(error, Some(Error::UnexpectedState { .. })),
            "{g:?}: {error:?}"
        );
        let reset = moved.store.reset(&moved.from).await;
        assert!(
            matches!(reset, Err(Error::UnexpectedState { .. })),
            "{g:?}: {reset:?}"
        );
        assert!(exists(&mut moved.masters[1], &moved.from), "{g:?}: reset");
    }
    let _: () = redis::cmd("DEL")
        .arg(&erased)
        .query(&mut moved.masters[1])
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg(&erased)
        .arg("1")
        .query(&mut moved.masters[1])
        .unwrap();
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_some()), (0, true), "a list");
    let reset = moved.store.reset(&moved.from).await;
    assert!(reset.is_err(), "a list: {reset:?}");
    // Gone: the old debt (30 s) carried, 10 admitted of 15.
    let _: () = redis::cmd("DEL")
        .arg(&erased)
        .query(&mut moved.masters[1])
        .unwrap();
    assert_eq!(moved.admitted_after().await.0, 10);
}

/// Records of four or eight parts no script writes (a past or an erased time of 0, a leading
/// zero, a sign, a fraction, a part missing or one too many, past 2^53): every carried spend
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_garbage_four_part_records_fail_every_carried_spend() {
    let garbage = [
        "5:1:2:",
        "5:1:0:0",
        "5:1:02:0",
        "5:1:2:01",
        "5:1:2:-1",
        "5:1:-2:0",
        "5:1:2:1e3",
        "5:1:2.5:0",
        "5:1::0",
        "5::2:0",
        "5:1:2:3:4",
        "5:1:2:0 ",
        "0:1:2:0",
        "5:1:9007199254740992:0",
        "5:1:2:9007199254740992",
        "5:1:2:99999999999999999999999",
        // Of eight parts (the slack, the total added, the merged id, the own slack).
        "5:1:2:0:0:0:0",
        "5:1:2:0:0:0:0:0:0",
        "5:1:2:0:01:0:0:0",
        "5:1:2:0:0:00:0:0",
        "5:1:2:0:0:0:07:0",
        "5:1:2:0:0:0:0:-1",
        "5:1:2:0:-1:0:0:0",
        "5:1:2:0:0:0:x:0",
        "5:1:2:0:0:0:0:",
        "5:1:2:0:0:9007199254740992:0:0",
        "5:1:2:0:9007199254740992:0:0:0",
        "5:1:0:0:0:0:0:0",
        "5:1:2:0:0:0:0:0 ",
    ];
    let mut moved = Moved::new("probe82-records-garbage", Duration::from_secs(2)).await;
    for g in garbage {
        moved.set_record(g);
        let (admitted, error) = moved.admitted_after().await;
        assert_eq!(admitted, 0, "{g}");
        assert!(
            matches!(error, Some(Error::UnexpectedState { .. })),
            "{g}: {error:?}"
        );
    }
}

/// Well-formed records no call wrote, each set before the first carried spend (the old state
/// owing 30 s, so 10 admitted of 15 with no record): none admits more than 10, and a record
/// that adds locks the moved bucket for at most a full bucket (90 s) from now. An erased time
/// above its end, a past far ahead (never past: the read owing, it adds all the same), an end
/// of 1 µs, an end far ahead (adds nothing: 10), the largest numbers exact in Lua.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_forged_four_part_records_never_admit_more() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let now = now.as_micros() as u64;
    let (hour, max) = (3_600_000_000, 9_007_199_254_740_991u64);
    let forged = [
        (format!("5:77:1:{}", 1u64 << 52), 0),
        (format!("1:77:{}:0", now + hour), 0),
        (format!("1:77:{max}:{max}"), 0),
        (format!("{}:77:1:0", now + hour), 10),
        (format!("{max}:{max}:{max}:0"), 10),
        (format!("{}:77:{}:5", now - hour, now - hour), 0),
    ];
    for (i, (record, left)) in forged.into_iter().enumerate() {
        let mut moved = Moved::new(&format!("probe82-forged-{i}"), Duration::from_secs(2)).await;
        let key = moved.record_key();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&record)
            .query(&mut moved.masters[0])
            .unwrap();
        let (admitted, error) = moved.admitted_after().await;
        assert_eq!((admitted, error.is_none()), (left, true), "{record}");
        let carried = [carry(&moved.from, &moved.old)];
        let spend = carrying(
            &moved.store,
            &moved.into,
            &moved.new,
            1,
            &carried,
            Mode::Spend,
        );
        let refused = spend.await.unwrap();
        let full = SystemTime::now() + Duration::from_secs(90) + Duration::from_millis(50);
        assert!(
            !refused.allowed && refused.reset_at() <= full,
            "{record}: {refused:?}"
        );
    }
}

/// Where a reset of the old state meets a carried spend (30 s read, a pod in the old window
/// spending 5 more meanwhile, to 60 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResetAt {
    /// Between its read and its script (the script waiting on the moved state's master).
    BeforeScript,
    /// Sent to the old state's master, paused, before the call's read after reaches it: run
    /// first when it is let go.
    BeforeReadAfter,
    /// After the call, its read after done.
    After,
}

/// One server's history of [`reset_at`]: 5 spent on the old bucket, then (the call's read
/// before them) 5 more, the reset before the call's script or after it, the call: what the
/// moved bucket admits after, carrying, until refused.
async fn reset_at_on_one_server(at: ResetAt) -> usize {
    let server = RedisServer::start();
    let store = on_server(&server);
    let p = prefix(&format!("probe82-one-{at:?}"));
    let (from, into) = (format!("{p}:{{o}}:old"), format!("{p}:{{u}}:new"));
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    assert!(spend(&store, &from, &old, 5).await.allowed);
    assert!(spend(&store, &from, &old, 5).await.allowed);
    let carried = [carry(&from, &old)];
    if at == ResetAt::BeforeScript {
        assert!(store.reset(&from).await.unwrap());
    }
    let first = carrying(&store, &into, &new, 1, &carried, Mode::Spend).await;
    assert!(first.unwrap().allowed);
    if at != ResetAt::BeforeScript {
        assert!(store.reset(&from).await.unwrap());
    }
    let mut admitted = 0;
    while (carrying(&store, &into, &new, 1, &carried, Mode::Spend).await)
        .unwrap()
        .allowed
    {
        admitted += 1;
    }
    admitted
}

/// A carried spend on a Cluster met by a reset of the old state at `at`: the call's answer
/// (admitted, or what else), and what the moved bucket admits after, carrying.
async fn reset_at(at: ResetAt) -> (bool, usize) {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    let mut moved = Moved::new(&format!("probe82-reset-{at:?}"), Duration::from_secs(5)).await;
    let resetter = RedisStore::new(RedisOptions::cluster(moved._cluster.urls())).unwrap();
    assert!(!resetter
        .reset(&format!("{}-warm", moved.from))
        .await
        .unwrap());
    pause_writes(&mut moved.masters[0]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[0], 1);
    moved.others_spend().await;
    let mut reset = None;
    match at {
        ResetAt::BeforeScript => assert!(resetter.reset(&moved.from).await.unwrap()),
        ResetAt::BeforeReadAfter => {
            pause_writes(&mut moved.masters[1]);
            let (resetter, from) = (resetter.clone(), moved.from.clone());
            reset = Some(tokio::spawn(async move { resetter.reset(&from).await }));
            until_waiting(&mut moved.masters[1], 1);
            unpause(&mut moved.masters[0]);
            until_waiting(&mut moved.masters[1], 2);
            unpause(&mut moved.masters[1]);
        }
        ResetAt::After => {}
    }
    unpause(&mut moved.masters[0]);
    let decided = call.await.unwrap().unwrap();
    if let Some(reset) = reset {
        assert!(reset.await.unwrap().unwrap());
    }
    if at == ResetAt::After {
        assert!(resetter.reset(&moved.from).await.unwrap());
    }
    let (admitted, error) = moved.admitted_after().await;
    assert!(error.is_none(), "{at:?}: {error:?}");
    (decided.allowed, admitted)
}

/// A reset of the old state before a carried spend's script: one server's script reads it
/// reset (14 left after its spend); the Cluster's carries the 30 s its read found, and its
/// read after the time the reset erased (60 s) as grown: 4. An over-refusal of what the reset
/// erased (a read before a reset carries what it read), never an admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_a_reset_before_the_script_over_refuses() {
    assert_eq!(reset_at_on_one_server(ResetAt::BeforeScript).await, 14);
    assert_eq!(reset_at(ResetAt::BeforeScript).await, (true, 4));
}

/// A reset of the old state between a carried spend's script and its read after (queued
/// before it on the old state's master), or after the call: 4 on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_a_reset_after_the_script_leaves_what_one_server_leaves() {
    assert_eq!(reset_at_on_one_server(ResetAt::BeforeReadAfter).await, 4);
    assert_eq!(reset_at(ResetAt::BeforeReadAfter).await, (true, 4));
    assert_eq!(reset_at_on_one_server(ResetAt::After).await, 4);
    assert_eq!(reset_at(ResetAt::After).await, (true, 4));
}

/// Pods of different store timeouts: one of 100 ms whose carried spend fails (its script or
/// its read after held past its timeout, the old state spent 5 more between its read and its
/// script), its record saying its read after has come or never will 1.3 s after its script
/// (its own wait, never a slower pod's); then the next carried spends by a pod of 5 s (a wait
/// of 16 s): the record stands for the 30 s the first call missed (the old state owing, the
/// next read adds them whatever the wait): 4 admitted after, as one server leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe82_a_fast_pods_record_read_by_a_slow_pod() {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    let mut moved = Moved::new("probe82-timeouts", Duration::from_secs(5)).await;
    let options = RedisOptions::cluster(moved._cluster.urls());
    let fast = RedisStore::new(options.timeout(Duration::from_millis(100))).unwrap();
    let warm = carrying(&fast, &moved.into, &moved.new, 1, &[], Mode::Look).await;
    assert!(warm.unwrap().allowed);
    let warm = carrying(&fast, &moved.from, &moved.old, 1, &[], Mode::Look).await;
    assert!(warm.unwrap().allowed);
    pause_writes(&mut moved.masters[0]);
    let call = moved.spend_by(fast);
    until_waiting(&mut moved.masters[0], 1);
    moved.others_spend().await;
    // Its read after (if its script did not time out first) held on the old state's master.
    pause_writes(&mut moved.masters[1]);
    unpause(&mut moved.masters[0]);
    let decided = call.await.unwrap();
    assert!(
        matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
        "{decided:?}"
    );
    unpause(&mut moved.masters[1]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let record = loop {
        if let Some(record) = record_of(&mut moved) {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "no record");
        tokio::task::yield_now().await;
    };
    let parts: Vec<u64> = record.split(':').map(|p| p.parse().unwrap()).collect();
    let now = redis_time(&mut moved.masters[0]);
    assert_eq!(parts.len(), 8, "{record}");
    assert!(
        parts[2] <= now + 1_300_000 && parts[2] + 2_000_000 > now + 1_300_000,
        "{record} at {now}"
    );
    assert_eq!(on_one_server(Then::Nothing).await, 4);
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (4, true));
}

/// The erased key beside the old state deleted (as `maxmemory-policy volatile-*` may evict
/// it: it expires) while a carried spend's record stands, then the old state reset: the reset
/// finds no key and writes none (a key nothing carries), and the next read, full, adds
/// nothing from the record: 9 admitted after where one server leaves 4, as before the erased
/// total. Of the eviction class (eviction.rs warns of policies that evict limiter keys; a
/// record or the old state evicted loses as much): not fixed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "FOUND (eviction): 9 admitted after where one server leaves 4, the erased key deleted before a reset of the old state while a record stands"]
async fn probe82_the_erased_key_evicted_then_the_old_state_reset() {
    assert_eq!(on_one_server(Then::ErasedGoneThenResetOld).await, 4);
    assert_eq!(on_a_cluster(Then::ErasedGoneThenResetOld).await, 4);
}

/// One server (the carry in one script, `carry` without `given` in `lua/carry.lua`) and the
/// memory store (under its locks) have no read apart from the script: a reset or a reward of
/// the old state between carried spends is met by each at its turn, the same on both. The
/// same calls at the server's time (read before each): the same answers.
#[tokio::test]
async fn probe82_one_server_and_memory_meet_resets_and_rewards_alike() {
    let server = RedisServer::start();
    let (store, p, mut c) = (
        on_server(&server),
        prefix("probe82-same"),
        server.connection(),
    );
    let memory = MemoryStore::new();
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    let key = |name: &str| format!("{p}:{{u}}:{name}");
    let (from, into) = (key("old"), key("new"));
    let carried = [carry(&from, &old)];
    let mut apart = Duration::from_millis(1);
    let mut decide = async |c: &mut redis::Connection, cost: u64, carrying_it: bool| {
        let at = redis_time(c) * 1_000;
        let (k, q, carried): (&str, &Quota, &[Carry<'_>]) = match carrying_it {
            true => (&into, &new, &carried),
            false => (&from, &old, &[]),
        };
        let checks = [check(k, q, cost)];
        let stacked = Stacked::carrying(&checks, carried, at, Mode::Spend).unwrap();
        let rust = Store::decide_all_now(&memory, stacked)
            .unwrap()
            .unwrap()
            .remove(0);
        let lua = carrying(&store, k, q, cost, carried, Mode::Spend)
            .await
            .unwrap();
        let took = Duration::from_micros(redis_time(c) - at / 1_000);
        apart = apart.max(took + Duration::from_millis(1));
        assert_eq!((lua.allowed, lua.remaining), (rust.allowed, rust.remaining));
        let (a, b) = (
            lua.retry_after.unwrap_or_default(),
            rust.retry_after.unwrap_or_default(),
        );
        assert!(a.abs_diff(b) <= apart, "{lua:?} against {rust:?}");
        lua.allowed
    };
    assert!(decide(&mut c, 5, false).await);
    assert!(decide(&mut c, 1, true).await);
    assert!(decide(&mut c, 5, false).await);
    // A reward of the old state after the moved one carried it: reaches neither moved state.
    let key_of = StoreKey::one_window(&from).unwrap();
    let at = redis_time(&mut c) * 1_000;
    let reward = crate::store::Adjustment::reward(key_of, &old, 4, at);
    assert_eq!(store.adjust(reward).await.unwrap(), 4);
    assert_eq!(Store::adjust(&memory, reward).await.unwrap(), 4);
    assert!(decide(&mut c, 1, true).await);
    assert!(decide(&mut c, 3, false).await);
    assert!(store.reset(&from).await.unwrap());
    assert!(Store::reset(&memory, &from).await.unwrap());
    let mut admitted = 0;
    while decide(&mut c, 1, true).await {
        admitted += 1;
    }
    // 30 s carried with 6 s, the 5 more rewarded back before the next carry, 6 s more: 42 s
    // of the moved bucket's 90 s; the 3 spent before the reset lost with it, on both.
    assert_eq!(admitted, 8);
}
