//! Old states carried into a moved limit's ([`Stacked::carried`], `lua/carry.lua`), through
//! [`Store::decide_all`] on a real `redis-server` and a real Cluster. Redis decides on its own
//! clock: every quota here counts in seconds, and a test runs in a few milliseconds of it, so
//! what the tests count neither refills nor unblocks (a retry time is rounded up to the
//! millisecond, which the microseconds between two steps of one script never reach). The
//! exact clock is the stand-in's (`lua_carry/`).

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

/// Whether `key` exists.
fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
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

/// Debts and blocks carried, on one server and across Cluster slots.
mod carried;
/// The time resets erased from an old state, and records of four parts (helper-82's probes).
mod erased;
/// A bucket moved to another Cluster slot ([`moved::Moved`]): the read after a carried spend,
/// and a call dropped or held at each of its steps.
mod moved;
/// helper-100's probes of the moved node's clock read before a carried spend's read.
mod probe100;
/// helper-87's probes of give-backs while a record stands.
mod probe87;
/// helper-94's probes of the late refusal.
mod probe94;
/// The pending record a carried spend leaves for a read after that never comes (helper-79's
/// probes).
mod records;
/// A carried spend whose read after finds more than its room: refused (helper-98).
mod shortfall;
/// A carried spend stalled between its read and its script: refused past its wait.
mod stalled;
