//! Debts and blocks carried into a moved limit's state, on one server and across Cluster
//! slots.

use super::*;

/// The bucket of 15 spent, moved to two minutes at the same rate: the fresh key takes the 15
/// tokens owed (refused, the next token in 6 s, where a fresh one had 14 left), and a second
/// call carries nothing more (`across`, from another slot: each call carries the old debt
/// from its own script's clock, over by its own round trip, [`over_by`]; the larger stays);
/// moved with room for 30, 14 are left (not 29). The old state's key under the hash tag
/// `from_tag`, the moved ones' under `{u}`.
async fn a_spent_buckets_debt_is_carried_into_a_fresh_key(
    store: &impl Store,
    p: &str,
    from_tag: &str,
    across: bool,
) {
    let (old, new, roomy) = (
        old_bucket(),
        tokens(10, 5, 2 * MINUTE, 20),
        tokens(20, 10, 2 * MINUTE, 20),
    );
    let (from, into, wide) = (
        format!("{p}:{{{from_tag}}}:old"),
        format!("{p}:{{u}}:new"),
        format!("{p}:{{u}}:wide"),
    );
    let since = SystemTime::now();
    let spent = spend(store, &from, &old, 15).await;
    assert!(spent.allowed);
    let carried = [carry(&from, &old)];
    let (decided, took) = timed(carrying(store, &into, &new, 1, &carried, Mode::Spend)).await;
    let decided = decided.unwrap();
    owes_within(&decided, &spent, since, over_by(across, took));
    let (again, took) = timed(carrying(store, &into, &new, 1, &carried, Mode::Spend)).await;
    let (again, first) = (again.unwrap(), decided.reset_at());
    let full = again.reset_at();
    assert!(
        !again.allowed && full >= first && full <= first + over_by(across, took),
        "{again:?} against {decided:?}"
    );
    let decided = carrying(store, &wide, &roomy, 1, &carried, Mode::Spend)
        .await
        .unwrap();
    assert!(decided.allowed && decided.remaining == 14, "{decided:?}");
}

#[tokio::test]
async fn a_spent_buckets_debt_is_carried_into_a_fresh_key_on_a_server() {
    let server = RedisServer::start();
    let (store, p) = (on_server(&server), prefix("carry"));
    a_spent_buckets_debt_is_carried_into_a_fresh_key(&store, &p, "u", false).await;
}

/// Within a slot as on one server; and from an old state in another slot (another hash tag,
/// as a budget without a user key has: its empty tag `{}` is none, each key hashed whole),
/// read in its own slot first: carried the same, full again up to the round trip between the
/// two scripts later. Carried in one script, Redis refused every such call whole (CROSSSLOT,
/// an `InvalidKey` under every failure policy) for as long as the old state was carried:
/// every call of a budget without a user key, on a Cluster, after a reload moved it. Under
/// `FailurePolicy::Allow` the carried debt refuses too (no error to admit on).
#[tokio::test]
async fn a_spent_buckets_debt_is_carried_into_a_fresh_key_on_a_cluster() {
    let cluster = RedisCluster::start();
    let store = on_cluster(&cluster);
    a_spent_buckets_debt_is_carried_into_a_fresh_key(&store, &prefix("carry"), "u", false).await;
    let slot = redis::cluster_routing::Slot::for_key;
    let p = prefix("slots");
    assert_ne!(
        slot(&format!("{p}:{{v}}:old")),
        slot(&format!("{p}:{{u}}:new"))
    );
    a_spent_buckets_debt_is_carried_into_a_fresh_key(&store, &p, "v", true).await;
    let allowing = crate::store::Failover::new(store.clone(), FailurePolicy::Allow);
    let p = prefix("slots-allow");
    a_spent_buckets_debt_is_carried_into_a_fresh_key(&allowing, &p, "v", true).await;
}

/// A block carried alone both ways between an old state and the moved one, both decided with
/// the call (`Carry::block_only`, the old window), on a Cluster where the two keys lie in
/// different slots (a budget without a user key: each key hashed whole): decided slot by
/// slot, the blocks carried within a slot only. Carried across, the run was refused whole
/// (CROSSSLOT) for the whole old window, whatever the call. The old key's block holds the call
/// by its own check: refused for what is left of the hour.
#[tokio::test]
async fn blocks_carried_alone_across_slots_are_decided_slot_by_slot() {
    let cluster = RedisCluster::start();
    let store = on_cluster(&cluster);
    let p = prefix("slots-blocks");
    let (from, into) = (format!("{p}:old"), format!("{p}:new"));
    let slot = redis::cluster_routing::Slot::for_key;
    assert_ne!(slot(&from), slot(&into));
    let hour = Duration::from_secs(3_600);
    let (old, new) = (blocking(MINUTE, hour), blocking(2 * MINUTE, hour));
    for _ in 0..2 {
        assert!(spend(&store, &from, &old, 1).await.allowed);
    }
    assert!(
        !spend(&store, &from, &old, 1).await.allowed,
        "the block begun"
    );
    let checks = [check(&into, &new, 1), check(&from, &old, 1)];
    let carried = [
        Carry {
            block_only: true,
            ..carry(&from, &old)
        },
        Carry {
            from: StoreKey::composed(&into),
            quota: &new,
            into: 1,
            block_only: true,
        },
    ];
    let stacked = Stacked::carrying(&checks, &carried, NOW, Mode::Spend).unwrap();
    let decided = store
        .decide_all(stacked)
        .await
        .expect("decided slot by slot");
    assert!(!decided[1].allowed, "{decided:?}");
    let wait = decided[1].retry_after.expect("a refusal's wait");
    assert!(
        wait <= hour && wait > hour - Duration::from_secs(10),
        "{wait:?}"
    );
}

/// A moved key that owes more than the old one (15 tokens against 5) is left as it is, in a
/// look and in a spend it refuses: the same string, the same expiry.
#[tokio::test]
async fn an_into_key_owing_more_is_left_as_it_is() {
    let server = RedisServer::start();
    let (store, p, mut c) = (on_server(&server), prefix("more"), server.connection());
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    let (from, into) = (format!("{p}:{{u}}:old"), format!("{p}:{{u}}:new"));
    assert!(spend(&store, &into, &new, 15).await.allowed);
    assert!(spend(&store, &from, &old, 5).await.allowed);
    let held = |c: &mut redis::Connection| -> (String, i64) {
        let value = redis::cmd("GET").arg(&into).query(c).unwrap();
        (
            value,
            redis::cmd("PEXPIRETIME").arg(&into).query(c).unwrap(),
        )
    };
    let before = held(&mut c);
    let carried = [carry(&from, &old)];
    for mode in [Mode::Look, Mode::Spend] {
        let decided = carrying(&store, &into, &new, 1, &carried, mode)
            .await
            .unwrap();
        // Its own next token, 6 s after its spend (a few milliseconds ago).
        assert!(!decided.allowed && decided.remaining == 0, "{decided:?}");
        let retry = decided.retry_after.unwrap();
        assert!(
            retry <= Duration::from_secs(6) && retry > Duration::from_secs(5),
            "{retry:?}"
        );
        assert_eq!(held(&mut c), before, "{mode:?}");
    }
}

/// A debt carried as time, exactly, whatever the intervals: 8 tokens at 4 s a token (32 s)
/// owed, less the microseconds since, carried into a bucket of 6 s a token (15 of them, 90 s)
/// and the call's 1 owe 38 s less those: 8 left of 15; 5 tokens at 6 s (30 s) carried into
/// one of 4 s (15, 60 s) and the call's 1, 34 s: 6 left of 15.
#[tokio::test]
async fn a_debt_is_carried_as_time_whatever_the_intervals() {
    let server = RedisServer::start();
    let (store, p) = (on_server(&server), prefix("intervals"));
    let (four, six) = (tokens(15, 0, MINUTE, 15), tokens(10, 5, MINUTE, 10));
    for (i, (old, spent, new, left)) in [(&four, 8, &six, 8), (&six, 5, &four, 6)]
        .into_iter()
        .enumerate()
    {
        let (from, into) = (format!("{p}:{{u}}:old{i}"), format!("{p}:{{u}}:new{i}"));
        assert!(spend(&store, &from, old, spent).await.allowed);
        let carried = [carry(&from, old)];
        let decided = carrying(&store, &into, new, 1, &carried, Mode::Spend)
            .await
            .unwrap();
        assert!(
            decided.allowed && decided.remaining == left,
            "{i}: {decided:?}"
        );
    }
}

/// The block key's value and its expiry in milliseconds.
fn block_of(c: &mut redis::Connection, key: &str) -> (Option<u64>, i64) {
    let block = block_key(key);
    let value = redis::cmd("GET").arg(&block).query(c).unwrap();
    (
        value,
        redis::cmd("PEXPIRETIME").arg(&block).query(c).unwrap(),
    )
}

/// Blocks `key` until `until` (microseconds), expiring then, as the scripts write a block.
fn block(c: &mut impl redis::ConnectionLike, key: &str, until: u64) {
    let _: () = redis::cmd("SET")
        .arg(block_key(key))
        .arg(until)
        .arg("PXAT")
        .arg(until.div_ceil(1_000))
        .query(c)
        .unwrap();
}

/// A sliding log blocked for an hour, moved to two minutes that block for 10: the moved key is
/// blocked until the hour's end (the same microsecond, expiring then); a block of its own that
/// ends later is kept, never shortened.
#[tokio::test]
async fn a_carried_block_holds_and_never_shortens_a_longer_one() {
    let server = RedisServer::start();
    let (store, p, mut c) = (on_server(&server), prefix("blocks"), server.connection());
    let old = blocking(MINUTE, Duration::from_secs(3_600));
    let new = blocking(2 * MINUTE, Duration::from_secs(600));
    let (from, into, longer) = (
        format!("{p}:{{u}}:old"),
        format!("{p}:{{u}}:new"),
        format!("{p}:{{u}}:longer"),
    );
    for _ in 0..3 {
        spend(&store, &from, &old, 1).await;
    }
    let (until, expiry) = block_of(&mut c, &from);
    let until = until.expect("blocked for the hour");
    assert_eq!(expiry as u64, until.div_ceil(1_000));
    let carried = [carry(&from, &old)];
    let decided = carrying(&store, &into, &new, 1, &carried, Mode::Spend)
        .await
        .unwrap();
    assert!(!decided.allowed, "{decided:?}");
    let ends = UNIX_EPOCH + Duration::from_millis(until.div_ceil(1_000));
    assert_eq!(decided.reset_at(), ends);
    assert!(
        decided.retry_after.unwrap() > Duration::from_secs(3_590),
        "{decided:?}"
    );
    assert_eq!(block_of(&mut c, &into), (Some(until), expiry));
    // A longer block of the moved key's own.
    let later = until + 1_000_000_000;
    block(&mut c, &longer, later);
    let decided = carrying(&store, &longer, &new, 1, &carried, Mode::Spend)
        .await
        .unwrap();
    assert!(!decided.allowed, "{decided:?}");
    let kept = (Some(later), later.div_ceil(1_000) as i64);
    assert_eq!(block_of(&mut c, &longer), kept);
}

/// State of the wrong shape under an old key (a string no bucket writes, a block key holding a
/// list), or under a limit's own key while a state is carried: an error, and nothing written
/// on any key, though a state carried before it (read first, all of them) owed 15 tokens.
#[tokio::test]
async fn wrong_shaped_old_state_is_an_error_and_nothing_is_written() {
    let server = RedisServer::start();
    let (store, p, mut c) = (on_server(&server), prefix("shapes"), server.connection());
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    let key = |name: &str| format!("{p}:{{u}}:{name}");
    let (owing, wrong, into, other) = (key("owing"), key("wrong"), key("new"), key("other"));
    assert!(spend(&store, &owing, &old, 15).await.allowed);
    let _: () = redis::cmd("SET")
        .arg(&wrong)
        .arg("T12x")
        .query(&mut c)
        .unwrap();
    let unexpected = |r: &Result<Decision, Error>| matches!(r, Err(Error::UnexpectedState { .. }));
    for mode in [Mode::Spend, Mode::Look] {
        let carried = [carry(&owing, &old), carry(&wrong, &old)];
        let decided = carrying(&store, &into, &new, 1, &carried, mode).await;
        assert!(unexpected(&decided), "{mode:?}: {decided:?}");
        assert!(
            !exists(&mut c, &into),
            "{mode:?}: the moved key was written"
        );
        let value: String = redis::cmd("GET").arg(&wrong).query(&mut c).unwrap();
        assert_eq!(value, "T12x");
        // A limit's own state of the wrong shape, the state carried well formed.
        let checks = [check(&into, &new, 1), check(&other, &new, 1)];
        let _: () = redis::cmd("RPUSH")
            .arg(&other)
            .arg("x")
            .query(&mut c)
            .unwrap();
        let carried = [carry(&owing, &old)];
        let stacked = Stacked::carrying(&checks, &carried, NOW, mode).unwrap();
        let decided = store.decide_all(stacked).await.map(|mut d| d.remove(0));
        assert!(unexpected(&decided), "{mode:?}: {decided:?}");
        assert!(
            !exists(&mut c, &into),
            "{mode:?}: the moved key was written"
        );
    }
    // A block key of the wrong shape.
    let (old, new) = (blocking(MINUTE, MINUTE), blocking(2 * MINUTE, MINUTE));
    let _: () = redis::cmd("RPUSH")
        .arg(block_key(&owing))
        .arg("x")
        .query(&mut c)
        .unwrap();
    let decided = carrying(&store, &into, &new, 1, &[carry(&owing, &old)], Mode::Spend).await;
    assert!(unexpected(&decided), "{decided:?}");
    assert!(!exists(&mut c, &into) && !exists(&mut c, &block_key(&into)));
}

/// A look carries too, and writes what it carries: at a cost (the stacked script's look) and
/// at the level (cost 0, the store's two looks, after a run that carries alone).
#[tokio::test]
async fn a_look_carries_too() {
    let server = RedisServer::start();
    let (store, p, mut c) = (on_server(&server), prefix("looks"), server.connection());
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    let from = format!("{p}:{{u}}:old");
    let since = SystemTime::now();
    let spent = spend(&store, &from, &old, 15).await;
    assert!(spent.allowed);
    let carried = [carry(&from, &old)];
    for cost in [1, 0] {
        let into = format!("{p}:{{u}}:new{cost}");
        let fresh = carrying(&store, &into, &new, cost, &[], Mode::Look)
            .await
            .unwrap();
        assert_eq!(fresh.remaining, 15 - cost, "{fresh:?}");
        let look = carrying(&store, &into, &new, cost, &carried, Mode::Look);
        owes(&look.await.unwrap(), &spent, since);
        assert!(exists(&mut c, &into), "{cost}: nothing written");
    }
}

/// The same calls on the server and on the memory store at the server's time (read just
/// before each): the same answers (a retry time within what the two clocks are apart by: the
/// longest a call took, and the millisecond it is rounded to). Debts carried between buckets at one interval and at two, and a block.
#[tokio::test]
async fn the_server_answers_as_the_memory_store() {
    let server = RedisServer::start();
    let (store, p, mut c) = (on_server(&server), prefix("same"), server.connection());
    let memory = MemoryStore::new();
    let four = tokens(15, 0, MINUTE, 15);
    let (old, six, roomy) = (
        old_bucket(),
        tokens(10, 5, 2 * MINUTE, 20),
        tokens(20, 10, 2 * MINUTE, 20),
    );
    let hour = blocking(MINUTE, Duration::from_secs(3_600));
    let ten = blocking(2 * MINUTE, Duration::from_secs(600));
    let key = |name: &str| format!("{p}:{{u}}:{name}");
    let (from, lent, blocked) = (key("old"), key("four"), key("blocked"));
    type Step<'a> = (String, &'a Quota, u64, Option<(&'a str, &'a Quota)>);
    let steps: Vec<Step<'_>> = vec![
        (from.clone(), &old, 11, None),
        (lent.clone(), &four, 9, None),
        (blocked.clone(), &hour, 1, None),
        (blocked.clone(), &hour, 1, None),
        (blocked.clone(), &hour, 1, None),
        (key("a"), &six, 1, Some((&from, &old))),
        (key("a"), &six, 2, Some((&from, &old))),
        (key("a"), &six, 3, Some((&from, &old))),
        (key("b"), &roomy, 4, Some((&from, &old))),
        (key("b"), &roomy, 9, Some((&lent, &four))),
        (key("c"), &four, 2, Some((&from, &old))),
        (key("d"), &ten, 1, Some((&blocked, &hour))),
        (key("d"), &ten, 1, Some((&blocked, &hour))),
    ];
    // How far apart the two clocks may be: the longest a call took, from the time read.
    let mut apart = Duration::from_millis(1);
    for (i, (into, quota, cost, carried)) in steps.iter().enumerate() {
        let carried: Vec<Carry<'_>> = carried.iter().map(|(k, q)| carry(k, q)).collect();
        let at = redis_time(&mut c) * 1_000;
        let checks = [check(into, quota, *cost)];
        let stacked = Stacked::carrying(&checks, &carried, at, Mode::Spend).unwrap();
        let rust = Store::decide_all_now(&memory, stacked)
            .unwrap()
            .unwrap()
            .remove(0);
        let lua = carrying(&store, into, quota, *cost, &carried, Mode::Spend)
            .await
            .unwrap();
        let took = Duration::from_micros(redis_time(&mut c) - at / 1_000);
        apart = apart.max(took + Duration::from_millis(1));
        assert_eq!(
            (lua.allowed, lua.remaining),
            (rust.allowed, rust.remaining),
            "step {i}: {lua:?} against {rust:?}"
        );
        let (a, b) = (
            lua.retry_after.unwrap_or_default(),
            rust.retry_after.unwrap_or_default(),
        );
        assert!(a.abs_diff(b) <= apart, "step {i}: {lua:?} against {rust:?}");
    }
}

/// A connection to every node of `cluster`, each command sent to its key's.
fn cluster_connection(cluster: &RedisCluster) -> redis::cluster::ClusterConnection {
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    client.get_connection().unwrap()
}

/// From an old state in another Cluster slot than the moved one (a budget without a user
/// key), read in its own slot first and carried as one script carries (refused whole by
/// Redis, CROSSSLOT, before): a block, until the old one's end (up to the round trip between
/// the two scripts later, never earlier), a longer one of the moved key's own kept; a look,
/// at a cost and at the level, carries and writes too; state of the wrong shape there is an
/// error, and nothing is written on any key, though a state carried before it owed 15 tokens.
#[tokio::test]
async fn old_states_in_another_slot_are_carried_as_in_one() {
    let cluster = RedisCluster::start();
    let (store, p, mut c) = (
        on_cluster(&cluster),
        prefix("across"),
        cluster_connection(&cluster),
    );
    let key = |tag: &str, name: &str| format!("{p}:{{{tag}}}:{name}");
    let slot = |k: &str| redis::cluster_routing::Slot::for_key(k);
    assert_ne!(slot(&key("v", "old")), slot(&key("u", "new")));

    // A block.
    let old = blocking(MINUTE, Duration::from_secs(3_600));
    let new = blocking(2 * MINUTE, Duration::from_secs(600));
    let (from, into, longer) = (key("v", "old"), key("u", "new"), key("u", "longer"));
    for _ in 0..3 {
        spend(&store, &from, &old, 1).await;
    }
    let until: u64 = redis::cmd("GET")
        .arg(block_key(&from))
        .query(&mut c)
        .unwrap();
    let carried = [carry(&from, &old)];
    let (decided, took) = timed(carrying(&store, &into, &new, 1, &carried, Mode::Spend)).await;
    let decided = decided.unwrap();
    assert!(!decided.allowed, "{decided:?}");
    assert!(
        decided.retry_after.unwrap() > Duration::from_secs(3_590),
        "{decided:?}"
    );
    let carried_until: u64 = redis::cmd("GET")
        .arg(block_key(&into))
        .query(&mut c)
        .unwrap();
    let later = over_by(true, took).as_micros() as u64;
    assert!(
        carried_until >= until && carried_until <= until + later,
        "{carried_until} against {until}"
    );
    let ends = UNIX_EPOCH + Duration::from_millis(carried_until.div_ceil(1_000));
    assert_eq!(decided.reset_at(), ends);
    let own = until + 1_000_000_000;
    block(&mut c, &longer, own);
    let decided = carrying(&store, &longer, &new, 1, &carried, Mode::Spend)
        .await
        .unwrap();
    assert!(!decided.allowed, "{decided:?}");
    let kept: u64 = redis::cmd("GET")
        .arg(block_key(&longer))
        .query(&mut c)
        .unwrap();
    assert_eq!(kept, own);

    // A look, at a cost and at the level.
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    let owing = key("v", "owing");
    let since = SystemTime::now();
    let spent = spend(&store, &owing, &old, 15).await;
    assert!(spent.allowed);
    let carried = [carry(&owing, &old)];
    for cost in [1, 0] {
        let into = key("u", &format!("look{cost}"));
        let (look, took) = timed(carrying(&store, &into, &new, cost, &carried, Mode::Look)).await;
        owes_within(&look.unwrap(), &spent, since, over_by(true, took));
        let written: i64 = redis::cmd("EXISTS").arg(&into).query(&mut c).unwrap();
        assert_eq!(written, 1, "{cost}: nothing written");
    }

    // State of the wrong shape in the other slot, a well-formed state carried before it.
    let wrong = key("w", "wrong");
    assert_ne!(slot(&wrong), slot(&key("u", "new")));
    let _: () = redis::cmd("SET")
        .arg(&wrong)
        .arg("T12x")
        .query(&mut c)
        .unwrap();
    let into = key("u", "shapes");
    for mode in [Mode::Spend, Mode::Look] {
        let carried = [carry(&owing, &old), carry(&wrong, &old)];
        let decided = carrying(&store, &into, &new, 1, &carried, mode).await;
        assert!(
            matches!(decided, Err(Error::UnexpectedState { .. })),
            "{mode:?}: {decided:?}"
        );
        let written: i64 = redis::cmd("EXISTS").arg(&into).query(&mut c).unwrap();
        assert_eq!(written, 0, "{mode:?}: the moved key was written");
        let value: String = redis::cmd("GET").arg(&wrong).query(&mut c).unwrap();
        assert_eq!(value, "T12x");
    }
}

/// An old state in another slot whose node is stopped: the moved state, spent, still refuses
/// the call (under `FailurePolicy::Allow` too: no policy turns a refusal a live node gives
/// into an admission); one with room answers the error (admitted uncounted under `Allow`, as
/// the policy says, nothing spent on it either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_old_state_in_another_slot_leaves_a_refusal_a_refusal() {
    let mut cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_millis(500));
    let store = RedisStore::new(options).unwrap();
    let allowing = crate::store::Failover::new(store.clone(), FailurePolicy::Allow);
    let p = prefix("down");
    let tag = (0..)
        .map(|i| format!("o{i}"))
        .find(|tag| node_of(&cluster, tag) != node_of(&cluster, "u"))
        .unwrap();
    let (from, into, roomy) = (
        format!("{p}:{{{tag}}}:old"),
        format!("{p}:{{u}}:new"),
        format!("{p}:{{u}}:roomy"),
    );
    let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
    assert!(spend(&store, &from, &old, 15).await.allowed);
    assert!(spend(&store, &into, &new, 15).await.allowed);
    let down = node_of(&cluster, &tag);
    cluster.nodes[down].stop();
    let carried = [carry(&from, &old)];
    let refused = |d: &Result<Decision, Error>| d.as_ref().is_ok_and(|d| !d.allowed);
    let denying = carrying(&store, &into, &new, 1, &carried, Mode::Spend).await;
    assert!(refused(&denying), "deny: {denying:?}");
    let allowed = carrying(&allowing, &into, &new, 1, &carried, Mode::Spend).await;
    assert!(refused(&allowed), "allow: {allowed:?}");
    let failed = carrying(&store, &roomy, &new, 1, &carried, Mode::Spend).await;
    assert!(
        matches!(failed, Err(Error::Store { .. } | Error::Timeout { .. })),
        "{failed:?}"
    );
    let admitted = carrying(&allowing, &roomy, &new, 1, &carried, Mode::Spend).await;
    assert!(admitted.is_ok_and(|d| d.allowed), "allow");
    let left = carrying(&store, &roomy, &new, 1, &[], Mode::Look).await;
    assert_eq!(left.unwrap().remaining, 14, "spent on the moved state");
}
