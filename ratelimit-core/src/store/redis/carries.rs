//! Old states carried into a moved limit's ([`Stacked::carried`], `lua/carry.lua`), through
//! [`Store::decide_all`] on a real `redis-server` and a real Cluster. Redis decides on its own
//! clock: every quota here counts in seconds, and a test runs in a few milliseconds of it, so
//! what the tests count neither refills nor unblocks (a retry time is rounded up to the
//! millisecond, which the microseconds between two steps of one script never reach). The
//! exact clock is the stand-in's (`lua_carry.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::redis_server::{prefix, redis_time, RedisCluster, RedisServer};

use super::ledger::block_key;
use super::{RedisOptions, RedisStore};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{
    Carry, Check, FailurePolicy, MemoryStore, Mode, Request, Stacked, Store, StoreKey,
};
use crate::syntax::Strategy as Kind;

const MINUTE: Duration = Duration::from_secs(60);
/// The service's clock, which Redis does not decide by (any time in range).
const NOW: u64 = 1_750_000_000_000_000_000;

fn on_server(server: &RedisServer) -> RedisStore {
    RedisStore::new(RedisOptions::new(server.url()).timeout(Duration::from_secs(2))).unwrap()
}

fn on_cluster(cluster: &RedisCluster) -> RedisStore {
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(2));
    RedisStore::new(options).unwrap()
}

/// A token bucket of `limit` + `burst`, refilling `refill` a `window`.
fn tokens(limit: u64, burst: u64, window: Duration, refill: u64) -> Quota {
    Quota::from_parts(limit, window, burst, Kind::TokenBucket, Some(refill)).unwrap()
}

/// A sliding log of 2 a `window`, blocking for `block`.
fn blocking(window: Duration, block: Duration) -> Quota {
    Quota::new(2, window).unwrap().with_block(block).unwrap()
}

fn check<'a>(key: &'a str, quota: &'a Quota, cost: u64) -> Check<'a> {
    Check {
        key: StoreKey::composed(key),
        quota,
        cost,
    }
}

fn carry<'a>(from: &'a str, quota: &'a Quota) -> Carry<'a> {
    Carry {
        from: StoreKey::composed(from),
        quota,
        into: 0,
        block_only: false,
    }
}

async fn spend(store: &impl Store, key: &str, quota: &Quota, cost: u64) -> Decision {
    let request = Request::spend(StoreKey::composed(key), quota, cost, NOW).unwrap();
    store.decide(request).await.unwrap()
}

/// `into` (under `quota`, at `cost`) decided in `mode` carrying `carried`.
async fn carrying(
    store: &impl Store,
    into: &str,
    quota: &Quota,
    cost: u64,
    carried: &[Carry<'_>],
    mode: Mode,
) -> Result<Decision, Error> {
    let checks = [check(into, quota, cost)];
    let stacked = Stacked::carrying(&checks, carried, NOW, mode)?;
    Ok(store.decide_all(stacked).await?.remove(0))
}

/// A refusal of a bucket of a token every 6 s, carried the debt of an old bucket's spend
/// (`spent`, made from `since` on, by this machine's clock, which the servers here read too):
/// full again exactly when the old one is (`reset_at`, its arrival time rounded up to the
/// millisecond: the same; in whole tokens of the moved bucket it was the instant of the carry
/// plus the whole tokens), and the next token 6 s after the spend.
fn owes(decided: &Decision, spent: &Decision, since: SystemTime) {
    owes_within(decided, spent, since, Duration::ZERO);
}

/// `call`'s output and how long it took: a state read in another Cluster slot is carried over
/// by the round trip between its read and the call's script, which lies within the call.
async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = std::time::Instant::now();
    let out = call.await;
    (out, started.elapsed())
}

/// What a call that took `took` may carry a state read in another slot (`across`) over by:
/// that long, and a millisecond for two times rounded up to the millisecond; nothing within
/// a slot.
fn over_by(across: bool, took: Duration) -> Duration {
    match across {
        true => took + Duration::from_millis(1),
        false => Duration::ZERO,
    }
}

/// [`owes`], full again up to `later` after the old one (never before): a state read in
/// another Cluster slot is carried from the moved state's script's clock, so over by the
/// round trip between the two scripts.
fn owes_within(decided: &Decision, spent: &Decision, since: SystemTime, later: Duration) {
    assert!(!decided.allowed && decided.remaining == 0, "{decided:?}");
    let (full, old) = (decided.reset_at(), spent.reset_at());
    assert!(
        full >= old && full <= old + later,
        "{decided:?} against {spent:?}"
    );
    let took = SystemTime::now().duration_since(since).unwrap();
    let (ms, retry) = (Duration::from_millis(1), decided.retry_after.unwrap());
    assert!(
        retry <= Duration::from_secs(6) && retry + took + ms >= Duration::from_secs(6),
        "{decided:?}"
    );
}

/// A token every 6 s, 15 at most: spent whole, the old bucket owes 90 s, 15 tokens.
fn old_bucket() -> Quota {
    tokens(10, 5, MINUTE, 10)
}

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

/// Whether `key` exists.
fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
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

/// The master of the slot of hash tag `tag` in `cluster`.
fn node_of(cluster: &RedisCluster, tag: &str) -> usize {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{tag}}}"))
        .query(&mut cluster.nodes[0].connection())
        .unwrap();
    cluster.master_of(slot).expect("a master")
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

/// A bucket moved to another Cluster slot than its old state's (a budget without a user key,
/// each key hashed whole): the old state `from` (a token every 6 s, 15 at most) spent 5 (30 s
/// owed), the moved state `into` (the same rate on two minutes) not yet carried into, the
/// scripts loaded on both masters, as after any first call (a script sent without its source
/// to a node that lacks it is sent again only by a caller still there: a dropped call's would
/// never run). Named `name` in its keys.
struct Moved {
    _cluster: RedisCluster,
    store: RedisStore,
    from: String,
    into: String,
    old: Quota,
    new: Quota,
    /// The moved state's master, then the old state's.
    masters: [redis::Connection; 2],
}

impl Moved {
    async fn new(name: &str, timeout: Duration) -> Moved {
        let cluster = RedisCluster::start();
        let options = RedisOptions::cluster(cluster.urls()).timeout(timeout);
        let store = RedisStore::new(options).unwrap();
        let p = prefix(name);
        let tag = (0..)
            .map(|i| format!("o{i}"))
            .find(|tag| node_of(&cluster, tag) != node_of(&cluster, "u"))
            .unwrap();
        let (from, into) = (format!("{p}:{{{tag}}}:old"), format!("{p}:{{u}}:new"));
        let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
        let masters = [node_of(&cluster, "u"), node_of(&cluster, &tag)]
            .map(|node| cluster.nodes[node].connection());
        let (warm_from, warm_into) = (format!("{p}:{{{tag}}}:warm"), format!("{p}:{{u}}:warm"));
        assert!(spend(&store, &warm_from, &old, 1).await.allowed);
        let warm = [carry(&warm_from, &old)];
        let warmed = carrying(&store, &warm_into, &new, 1, &warm, Mode::Spend).await;
        assert!(warmed.unwrap().allowed);
        assert!(spend(&store, &from, &old, 5).await.allowed);
        Moved {
            _cluster: cluster,
            store,
            from,
            into,
            old,
            new,
            masters,
        }
    }

    /// A carrying spend of 1 on the moved state, as a task (to drop, or to wait for).
    fn spend(&self) -> tokio::task::JoinHandle<Result<Decision, Error>> {
        self.spend_by(self.store.clone())
    }

    /// [`spend`](Self::spend) by `store` (another pod's, on connections of its own).
    fn spend_by(&self, store: RedisStore) -> tokio::task::JoinHandle<Result<Decision, Error>> {
        let (from, into) = (self.from.clone(), self.into.clone());
        let (old, new) = (self.old, self.new);
        tokio::spawn(async move {
            let carried = [carry(&from, &old)];
            carrying(&store, &into, &new, 1, &carried, Mode::Spend).await
        })
    }

    /// The old state spent 5 more (as a pod still in its old window spends there).
    async fn others_spend(&self) {
        assert!(spend(&self.store, &self.from, &self.old, 5).await.allowed);
    }

    /// Until what a carried spend's task adds is written (the mark beside the moved state).
    async fn until_added(&mut self, what: &str) {
        let mark = super::across_slots::grown_mark(&self.into, &self.from);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !exists(&mut self.masters[0], &mark) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: nothing was added"
            );
            tokio::task::yield_now().await;
        }
    }

    /// What the moved bucket admits, carrying, until it refuses; and the error that ended
    /// it instead, if one did.
    async fn admitted_after(&self) -> (usize, Option<Error>) {
        let carried = [carry(&self.from, &self.old)];
        let mut admitted = 0;
        loop {
            match carrying(&self.store, &self.into, &self.new, 1, &carried, Mode::Spend).await {
                Ok(d) if d.allowed => admitted += 1,
                Ok(_) => return (admitted, None),
                Err(e) => return (admitted, Some(e)),
            }
        }
    }
}

/// What may meet a carried spend's read after its script (`run_checked`), written or done
/// while that read waits on the old state's master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meanwhile {
    /// The mark beside the moved state (`grown_mark`) overwritten with a string no addition
    /// writes.
    GarbageMark,
    /// The call's pending record beside the moved state (`pending_key`) overwritten so.
    GarbagePending,
    /// The old state overwritten so (after the script read it, before the script ran).
    GarbageOld,
    /// The old state reset (by a pod the reload has not reached), at the same point.
    ResetOld,
    /// The old state's master held past the store's timeout: the read after times out.
    Held,
}

/// A spend that carries a bucket's debt from another slot (30 s read), the old state
/// spent 5 more after its read (60 s), its read after made to wait on the old state's
/// master, `meanwhile` done then: the call's answer, and what the moved bucket admits after
/// (carrying, until refused or failed).
async fn met_before_the_read_after(meanwhile: Meanwhile) -> (Result<Decision, Error>, usize) {
    use super::redis_server::{pause_writes, unpause, until_waiting};
    let name = format!("met-{meanwhile:?}");
    let mut moved = Moved::new(&name, Duration::from_millis(1500)).await;
    let (into_master, from_master) = (0, 1);
    pause_writes(&mut moved.masters[into_master]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[into_master], 1);
    moved.others_spend().await;
    let garbage = |c: &mut redis::Connection, key: &str| {
        let set = redis::cmd("SET").arg(key).arg("garbage").query::<()>(c);
        set.unwrap();
    };
    // The old state's own master paused, nothing written there would come before the read.
    if meanwhile == Meanwhile::GarbageOld {
        garbage(&mut moved.masters[from_master], &moved.from);
    }
    if meanwhile == Meanwhile::ResetOld {
        assert!(moved.store.reset(&moved.from).await.unwrap());
    }
    pause_writes(&mut moved.masters[from_master]);
    unpause(&mut moved.masters[into_master]);
    until_waiting(&mut moved.masters[from_master], 1);
    if meanwhile == Meanwhile::GarbageMark {
        let mark = super::across_slots::grown_mark(&moved.into, &moved.from);
        garbage(&mut moved.masters[into_master], &mark);
    }
    if meanwhile == Meanwhile::GarbagePending {
        let record = super::across_slots::pending_key(&moved.into, &moved.from);
        garbage(&mut moved.masters[into_master], &record);
    }
    let decided = match meanwhile {
        Meanwhile::Held => {
            let decided = call.await.unwrap();
            unpause(&mut moved.masters[from_master]);
            decided
        }
        _ => {
            unpause(&mut moved.masters[from_master]);
            call.await.unwrap()
        }
    };
    (decided, moved.admitted_after().await.0)
}

/// Garbage in the mark of what was added, before a carried spend's read after adds what the
/// old state grew by: the addition fails, and the call is refused, its spend kept (fail
/// closed). Its pending record stands (`lua/carry.lua`), so the next carried spend adds what
/// the old state grew by since, which reads the mark: each fails (state of an unexpected
/// shape), as after garbage in the old state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_grown_mark_refuses_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbageMark).await;
    assert!(decided.is_ok_and(|d| !d.allowed && d.remaining == 0));
    assert_eq!(admitted, 0);
}

/// Garbage in a carried spend's pending record before its read after adds what the old state
/// grew by: as garbage in the mark, the call is refused, its spend kept, and each carried
/// spend after fails (each reads the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_pending_record_refuses_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbagePending).await;
    assert!(decided.is_ok_and(|d| !d.allowed && d.remaining == 0));
    assert_eq!(admitted, 0);
}

/// Garbage in the old state between a carried spend's script and its read after: the call
/// fails (state of an unexpected shape: for the failure policy, the moved bucket having
/// room), and so does every call after (nothing admitted past the garbage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_old_state_before_the_read_after_fails_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbageOld).await;
    assert!(
        matches!(decided, Err(Error::UnexpectedState { .. })),
        "{decided:?}"
    );
    assert_eq!(admitted, 0);
}

/// The old state's master holding a carried spend's read after past the store's timeout: the
/// call fails (for the failure policy), its spend kept, and its pending record stands
/// (`lua/carry.lua`): the next carried spend adds what the old state grew by since the
/// call's read (its 30 s), so 4 are admitted after, the failed call's spend counted: 15 over
/// the whole history with it, as on one server, whatever the failure policy made of it (where
/// the next carry covered its spend, 5 were admitted after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_held_past_the_timeout_fails_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::Held).await;
    assert!(
        matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
        "{decided:?}"
    );
    assert_eq!(admitted, 4);
}

/// The old state reset between a carried spend's read (30 s) and its read after, after a pod
/// in the old window spent 5 more (60 s): the read after finds it full, and added nothing
/// (`grown_since` of a full bucket): 9 admitted after, where one server (the call's script
/// after the 5 more) leaves 4. The reset adds what it erased to the time kept beside the old
/// state while it is carried (`lua/reset.lua`, `lua/level.lua`), which the read after reads
/// in its end: the call admitted (its bucket had room), 4 after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_state_reset_before_the_read_after_leaves_what_one_server_leaves() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::ResetOld).await;
    assert!(decided.as_ref().is_ok_and(|d| d.allowed), "{decided:?}");
    assert_eq!(admitted, 4);
}

/// Where a carried spend's caller is dropped (its task aborted), each step waiting on its
/// node (`CLIENT PAUSE WRITE`) while it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhileItsWaiting {
    /// Its read of the old state, on the old state's master: nothing is sent after it.
    Read,
    /// Its script, sent, on the moved state's master.
    Script,
    /// Its read after the script, on the old state's master.
    ReadAfter,
    /// What that read found added, on the moved state's master.
    Addition,
}

/// A spend carrying a bucket's debt from another slot (30 s read before the old state is
/// spent 5 more, to 60 s, where a pod still in its old window spends), dropped at `point`:
/// what the moved bucket of 15 admits after, carrying, until refused. What was added is
/// waited for (its mark) where the call's script ran.
async fn dropped_at(point: WhileItsWaiting) -> usize {
    use super::redis_server::{pause_writes, unpause, until_waiting};
    let mut moved = Moved::new(&format!("dropped-at-{point:?}"), Duration::from_secs(2)).await;
    // The step the call is dropped at: its read (on the old state's master), its script (on
    // the moved state's), its read after, its addition; the steps after the read alternate.
    let (first, steps) = match point {
        WhileItsWaiting::Read => (1, 0),
        WhileItsWaiting::Script => (0, 0),
        WhileItsWaiting::ReadAfter => (0, 1),
        WhileItsWaiting::Addition => (0, 2),
    };
    pause_writes(&mut moved.masters[first]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[first], 1);
    if point != WhileItsWaiting::Read {
        moved.others_spend().await; // owes 60 s
    }
    // Each step's node paused before the one it waits on is let go.
    let mut waiting = first;
    for _ in 0..steps {
        let next = 1 - waiting;
        pause_writes(&mut moved.masters[next]);
        unpause(&mut moved.masters[waiting]);
        until_waiting(&mut moved.masters[next], 1);
        waiting = next;
    }
    call.abort();
    assert!(call.await.is_err_and(|e| e.is_cancelled()));
    unpause(&mut moved.masters[waiting]);
    if point == WhileItsWaiting::Read {
        until_waiting(&mut moved.masters[1], 0);
        moved.others_spend().await; // owes 60 s
    } else {
        moved.until_added(&format!("{point:?}")).await;
    }
    let (admitted, error) = moved.admitted_after().await;
    assert!(error.is_none(), "{point:?}: {error:?}");
    admitted
}

/// A carried spend dropped at each of its steps, the old state spent meanwhile: once its
/// script is sent, its spend lands and what the old state grew by is added (its task): 4
/// left of the bucket of 15 (10 spent on the old state, 1 by the dropped call), as one
/// server leaves; dropped before, nothing of it is spent: 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_spend_dropped_at_each_step_leaves_what_one_server_leaves() {
    let points = [
        WhileItsWaiting::Read,
        WhileItsWaiting::Script,
        WhileItsWaiting::ReadAfter,
        WhileItsWaiting::Addition,
    ];
    let mut left = Vec::new();
    for point in points {
        left.push(dropped_at(point).await);
    }
    assert_eq!(left, [5, 4, 4, 4]);
}

/// helper-79's probes of the pending record (`lua/carry.lua`): a spend carrying the old
/// state's debt (30 s) whose read after is held past the store's timeout, after a pod in
/// the old window spent 5 more (60 s): the call fails, its record (30 s, its id) stands.
async fn held_past_the_read_after(moved: &mut Moved) {
    use super::redis_server::{pause_writes, unpause, until_waiting};
    pause_writes(&mut moved.masters[0]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[0], 1);
    moved.others_spend().await;
    pause_writes(&mut moved.masters[1]);
    unpause(&mut moved.masters[0]);
    until_waiting(&mut moved.masters[1], 1);
    let decided = call.await.unwrap();
    unpause(&mut moved.masters[1]);
    assert!(
        matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
        "{decided:?}"
    );
}

/// The record beside `moved`'s moved state, or None.
fn record_of(moved: &mut Moved) -> Option<String> {
    let key = super::across_slots::pending_key(&moved.into, &moved.from);
    redis::cmd("GET")
        .arg(&key)
        .query(&mut moved.masters[0])
        .unwrap()
}

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
    let key = super::across_slots::pending_key(&moved.into, &moved.from);
    for g in garbage {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(g)
            .query(&mut moved.masters[0])
            .unwrap();
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
    let key = super::across_slots::pending_key(&moved.into, &moved.from);
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
    let key = super::across_slots::pending_key(&moved.into, &moved.from);
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
async fn on_one_server(then: Then) -> usize {
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
enum Then {
    Nothing,
    /// The old state reset (a pod the reload has not reached resets the key).
    ResetOld,
    /// The moved state reset (`service.reset` after the reload).
    ResetMoved,
    /// The record deleted, as its expiry would (a moved bucket busy past a full bucket).
    Expired,
    /// A reward of 5 on the old state (a pod the reload has not reached rewards the key).
    RewardOld,
    /// The erased key beside the old state deleted (as an eviction would), then the old state
    /// reset.
    ErasedGoneThenResetOld,
}

/// A reward of 5 on `from` under `old` (`service.reward` by a pod in its old window).
async fn reward_old(store: &RedisStore, from: &str, old: &Quota) {
    let key = StoreKey::one_window(from).unwrap();
    let reward = crate::store::Adjustment::reward(key, old, 5, NOW);
    assert_eq!(store.adjust(reward).await.unwrap(), 5);
}

/// [`held_past_the_read_after`], then `then`: what the moved bucket admits after.
async fn on_a_cluster(then: Then) -> usize {
    let mut moved = Moved::new(&format!("probe-held-{then:?}"), Duration::from_millis(1500)).await;
    held_past_the_read_after(&mut moved).await;
    let record = record_of(&mut moved).expect("the call's record stands");
    assert!(record.contains(':'), "{record}");
    match then {
        Then::ResetOld => assert!(moved.store.reset(&moved.from).await.unwrap()),
        Then::ResetMoved => assert!(moved.store.reset(&moved.into).await.unwrap()),
        Then::Expired => {
            let key = super::across_slots::pending_key(&moved.into, &moved.from);
            let _: () = redis::cmd("DEL")
                .arg(&key)
                .query(&mut moved.masters[0])
                .unwrap();
        }
        Then::RewardOld => reward_old(&moved.store, &moved.from, &moved.old).await,
        Then::ErasedGoneThenResetOld => {
            let erased = super::ledger::erased_key(&moved.from);
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
    use super::redis_server::{pause_writes, unpause, until_waiting};
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

// helper-82's probes of the erased total (`lua/level.lua`, `lua/reset.lua`) and of the
// pending records of four parts (`end:id:past:erased`, `lua/carry.lua`), on a real Cluster,
// each against one server's count for the same history (the twin) where it has one.

/// A reward of the old state while a carried spend's record stands (its read after held past
/// the timeout): a reward moves the old end back as a reset does, and the next read found it
/// where the record's read had (30 s), adding nothing: 9 admitted after where one server
/// (whose script carried the 5 more before the reward, which reaches no moved state) leaves 4.
/// Not fixed: see `probe82_a_reward_of_the_old_state_before_the_read_after` (lua_carry.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "FOUND: 9 admitted after where one server leaves 4 (a reward of the old state while a carried spend's record stands)"]
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
    let erased = super::ledger::erased_key(&moved.from);
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

/// Records of four parts no script writes (a past or an erased time of 0, a leading zero, a
/// sign, a fraction, a part missing or one too many, past 2^53): every carried spend fails.
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
    ];
    let mut moved = Moved::new("probe82-records-garbage", Duration::from_secs(2)).await;
    let key = super::across_slots::pending_key(&moved.into, &moved.from);
    for g in garbage {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(g)
            .query(&mut moved.masters[0])
            .unwrap();
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
        let key = super::across_slots::pending_key(&moved.into, &moved.from);
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
    use super::redis_server::{pause_writes, unpause, until_waiting};
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
    use super::redis_server::{pause_writes, unpause, until_waiting};
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
    assert_eq!(parts.len(), 4, "{record}");
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
