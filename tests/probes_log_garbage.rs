//! helper-57's attacks on the Redis sliding log's window tag (`sliding_log.lua`: a bare key's
//! entry is "<time>:<total>:<age>:<used>/<window>") against real servers (a `redis-server`
//! and a Redis Cluster, each started by the harness): tags of every wrong shape and keys of
//! every other Redis type planted with raw commands, asked on every path a store takes (a bare
//! key's spend, look and level, a key of one window, a kept spend, a penalty, a reward, a
//! stacked call beside a fresh key). Each must be the state error with the key as planted and
//! the other key unspent: never a fresh budget. And one bare key under two windows with
//! penalties and rewards, decided alike by Redis and the memory store (the reference:
//! `algorithm::written_elsewhere`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratelimit::store::{Adjustment, Check, Mode, Request, Stacked, Store, StoreKey};
use ratelimit::{Error, Quota, RedisOptions, RedisStore, Strategy};
use ratelimit_tests::redis_server::{prefix, redis_time, RedisCluster, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

fn log(limit: u64, window: Duration) -> Quota {
    Quota::new(limit, window)
        .unwrap()
        .with_strategy(Strategy::SlidingWindow)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Window tags no script writes after "<time>:<total>:<age>:<used>" (the minute's, as the
/// store sends it, is "60000000"): the list `lua_log_tags.rs` reads too.
const TAGS: [&str; 20] = include!("../ratelimit-core/src/store/redis/wrong_log_tags.in");

/// Everything Redis holds under `key`: its type, value (as Redis dumps it) and expiry.
fn snapshot(c: &mut redis::Connection, key: &str) -> (String, Option<Vec<u8>>, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (kind, dump, expiry)
}

/// Whether `r` is the state error.
fn state<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::UnexpectedState { .. }))
}

/// Every path a store takes on `key` under `q`, beside the fresh key `other` for a stacked
/// call: what was not the state error.
async fn every_path(store: &RedisStore, key: &str, other: &str, q: &Quota) -> Vec<String> {
    let (bare, one) = (
        StoreKey::new(key).unwrap(),
        StoreKey::one_window(key).unwrap(),
    );
    let ask =
        |k, cost, mode| async move { store.decide(Request::new(k, q, cost, now(), mode)?).await };
    let mut failed = Vec::new();
    let mut note = |what: &str, ok: bool, got: String| {
        if !ok {
            failed.push(format!("{what}: {got}"));
        }
    };
    for (what, k, cost, mode) in [
        ("a bare key's spend", bare, 1, Mode::Spend),
        ("a bare key's look", bare, 1, Mode::Look),
        ("a level", bare, 0, Mode::Look),
        ("a kept spend", bare, 1, Mode::Keep),
        ("one window's spend", one, 1, Mode::Spend),
        ("one window's look", one, 1, Mode::Look),
    ] {
        let got = ask(k, cost, mode).await;
        note(what, state(&got), format!("{got:?}"));
    }
    // A penalty on either key; a reward on a key of one window (the store refuses a bare
    // key's reward before Redis: any error there).
    for (what, adjustment, exact) in [
        (
            "a bare key's penalty",
            Adjustment::penalty(bare, q, 1, now()),
            true,
        ),
        (
            "one window's penalty",
            Adjustment::penalty(one, q, 1, now()),
            true,
        ),
        (
            "one window's reward",
            Adjustment::reward(one, q, 1, now()),
            true,
        ),
        (
            "a bare key's reward",
            Adjustment::reward(bare, q, 1, now()),
            false,
        ),
    ] {
        let got = store.adjust(adjustment).await;
        note(
            what,
            state(&got) || !exact && got.is_err(),
            format!("{got:?}"),
        );
    }
    let checks = [
        Check {
            key: StoreKey::new(other).unwrap(),
            quota: q,
            cost: 1,
        },
        Check {
            key: bare,
            quota: q,
            cost: 1,
        },
    ];
    for mode in [Mode::Spend, Mode::Keep] {
        let got = store
            .decide_all(Stacked::new(&checks, now(), mode).unwrap())
            .await;
        note(
            &format!("stacked {mode:?}"),
            state(&got),
            format!("{got:?}"),
        );
    }
    failed
}

/// What to plant on a key: what it is, and the commands that write it on the key given.
type Plant = (String, Box<dyn Fn(&str) -> Vec<redis::Cmd>>);

/// Plants each of `plants` on a fresh key (through `conn_for`, the connection to the key's
/// node), expiring in 10 minutes, and asks it on every path under each quota of `quotas`:
/// what was not the state error, or wrote the key or the fresh key beside it.
async fn attack(
    store: &RedisStore,
    conn_for: &dyn Fn(&str) -> redis::Connection,
    plants: &[Plant],
    quotas: &[Quota],
    name: &str,
) -> Vec<String> {
    let p = prefix(name);
    let mut failed = Vec::new();
    for (i, (what, plant)) in plants.iter().enumerate() {
        for (j, q) in quotas.iter().enumerate() {
            // One hash tag for the two keys: one slot in a cluster.
            let (key, other) = (
                format!("{p}:{{u{i}-{j}}}:log"),
                format!("{p}:{{u{i}-{j}}}:b"),
            );
            let mut c = conn_for(&key);
            for cmd in plant(&key) {
                let _: redis::Value = cmd.query(&mut c).unwrap();
            }
            let _: redis::Value = redis::cmd("PEXPIRE")
                .arg(&key)
                .arg(600_000)
                .query(&mut c)
                .unwrap();
            let before = snapshot(&mut c, &key);
            for f in every_path(store, &key, &other, q).await {
                failed.push(format!("{what:?} under {q:?}: {f}"));
            }
            if snapshot(&mut c, &key) != before {
                failed.push(format!("{what:?} under {q:?}: written"));
            }
            let spent: u64 = redis::cmd("EXISTS").arg(&other).query(&mut c).unwrap();
            if spent != 0 {
                failed.push(format!("{what:?} under {q:?}: the other key spent"));
            }
        }
    }
    failed
}

/// A live entry (at Redis' time `t`) with each wrong tag, as the only entry of a list.
fn tagged(t: u64) -> Vec<Plant> {
    TAGS.iter()
        .map(|tag| -> Plant {
            let entry = format!("{t}:1:0:1{tag}");
            let push = entry.clone();
            (
                entry,
                Box::new(move |key: &str| vec![redis::cmd("LPUSH").arg(key).arg(&push).clone()]),
            )
        })
        .collect()
}

/// A key of every other Redis type, and a log entry as a string.
fn other_types(t: u64) -> Vec<Plant> {
    let plant = |what: &str, args: Vec<String>| -> Plant {
        let name = args[0].clone();
        let rest: Vec<String> = args[1..].to_vec();
        (
            what.to_owned(),
            Box::new(move |key: &str| vec![redis::cmd(&name).arg(key).arg(&rest).clone()]),
        )
    };
    let s = |v: &[&str]| v.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        plant(
            "a string entry",
            s(&["SET", &format!("{t}:1:0:1/60000000")]),
        ),
        plant("a hash", s(&["HSET", "x", "1"])),
        plant("a set", s(&["SADD", &format!("{t}:1:0:1/60000000")])),
        plant("a sorted set", s(&["ZADD", &t.to_string(), "1"])),
        plant("a stream", s(&["XADD", "*", "f", "1"])),
    ]
}

/// The quotas the keys are asked under: the minute's log (the tag's window), and an hour's
/// of every strategy for the other types.
fn quotas(strategies: &[Strategy]) -> Vec<Quota> {
    let mut out = vec![log(3, MINUTE)];
    for &s in strategies {
        out.push(Quota::new(3, HOUR).unwrap().with_strategy(s));
    }
    out
}

async fn connected(options: RedisOptions) -> RedisStore {
    let store =
        RedisStore::new(options.timeout(Duration::from_secs(2)).local_refusals(0)).expect("store");
    store.connect().await.expect("connected");
    store
}

#[tokio::test]
async fn a_window_tag_of_the_wrong_shape_is_the_state_error_on_every_path_on_a_server() {
    let server = RedisServer::start();
    let store = connected(RedisOptions::new(server.url())).await;
    let t = redis_time(&mut server.connection());
    let conn = |_: &str| server.connection();
    let failed = attack(&store, &conn, &tagged(t), &quotas(&[]), "tags").await;
    assert!(failed.is_empty(), "{failed:#?}");
}

#[tokio::test]
async fn another_redis_type_under_a_log_or_any_strategy_is_the_state_error_on_every_path() {
    let server = RedisServer::start();
    let store = connected(RedisOptions::new(server.url())).await;
    let t = redis_time(&mut server.connection());
    let conn = |_: &str| server.connection();
    let q = quotas(&Strategy::ALL);
    let failed = attack(&store, &conn, &other_types(t), &q, "types").await;
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The same on a Redis Cluster: each key planted on the master of its slot.
#[tokio::test]
async fn wrong_tags_and_types_are_the_state_error_on_every_path_on_a_cluster() {
    let cluster = RedisCluster::start();
    let store = connected(RedisOptions::cluster(cluster.urls())).await;
    let conn = |key: &str| {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut cluster.nodes[0].connection())
            .unwrap();
        cluster.nodes[cluster.master_of(slot).expect("a master")].connection()
    };
    let t = redis_time(&mut cluster.nodes[0].connection());
    let mut plants = tagged(t);
    plants.extend(other_types(t));
    let failed = attack(&store, &conn, &plants, &quotas(&Strategy::ALL), "cluster").await;
    assert!(failed.is_empty(), "{failed:#?}");
}

// ---------------------------------------------------------------------------------------
// One bare key under two windows, penalties and stacked calls among the spends: Redis decides
// as the memory store (the reference) decides. Windows of a minute and more: neither clock
// turns one while a test runs (the memory store is asked at one instant, Redis at its own).
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Op {
    Spend(usize),
    Look(usize),
    /// Spends until one is refused.
    Drain(usize),
    Penalty(usize, u64),
    /// The key under the quota, stacked with a fresh key of its own for this op.
    Stacked(usize),
}

/// The quotas on the one key: a minute's log of 3, an hour's of 5, two hours' of 2.
fn windows() -> [Quota; 3] {
    [log(3, MINUTE), log(5, HOUR), log(2, HOUR * 2)]
}

/// What each op got on `store` (at `at`, the memory store's instant): admitted or not, the
/// units of a drain or a penalty, or the error's kind; and whether each stacked call's fresh
/// key was spent when the call was refused.
async fn run(store: &impl Store, key: &str, ops: &[Op], at: u64) -> Vec<String> {
    let qs = windows();
    let bare = StoreKey::new(key).unwrap();
    let ask = |q, mode| async move {
        let request = Request::new(bare, q, 1, at, mode)?;
        store.decide(request).await
    };
    let kind = |e: &Error| {
        format!("{:?}", e)
            .split([' ', '(', '{'])
            .next()
            .unwrap()
            .to_owned()
    };
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        out.push(match *op {
            Op::Spend(q) | Op::Look(q) => {
                let mode = if matches!(op, Op::Spend(_)) {
                    Mode::Spend
                } else {
                    Mode::Look
                };
                match ask(&qs[q], mode).await {
                    Ok(d) => format!("{op:?}: {}", d.allowed),
                    Err(e) => format!("{op:?}: {}", kind(&e)),
                }
            }
            Op::Drain(q) => {
                let mut n = 0;
                while n < 100 && ask(&qs[q], Mode::Spend).await.is_ok_and(|d| d.allowed) {
                    n += 1;
                }
                format!("{op:?}: {n}")
            }
            Op::Penalty(q, units) => {
                match store
                    .adjust(Adjustment::penalty(bare, &qs[q], units, at))
                    .await
                {
                    Ok(n) => format!("{op:?}: {n}"),
                    Err(e) => format!("{op:?}: {}", kind(&e)),
                }
            }
            Op::Stacked(q) => {
                let other = format!("{key}:stack{i}");
                let checks = [
                    Check {
                        key: StoreKey::new(&other).unwrap(),
                        quota: &qs[0],
                        cost: 1,
                    },
                    Check {
                        key: bare,
                        quota: &qs[q],
                        cost: 1,
                    },
                ];
                let stacked = Stacked::new(&checks, at, Mode::Spend).unwrap();
                let got = store.decide_all(stacked).await;
                let all = got.as_ref().is_ok_and(|d| d.iter().all(|d| d.allowed));
                let other = Request::new(StoreKey::new(&other).unwrap(), &qs[0], 0, at, Mode::Look);
                let left = store.decide(other.unwrap()).await.map(|d| d.remaining);
                format!("{op:?}: {all}, the other key's level {left:?}")
            }
        });
    }
    out
}

/// Random sequences of ops from `seed`.
fn sequences(seed: u64, n: usize) -> Vec<Vec<Op>> {
    let mut rng = ratelimit_tests::Rng(seed | 1);
    (0..n)
        .map(|_| {
            (0..8)
                .map(|_| {
                    let q = rng.below(3) as usize;
                    match rng.below(7) {
                        0 | 1 => Op::Spend(q),
                        2 => Op::Look(q),
                        3 => Op::Drain(q),
                        4 | 5 => Op::Penalty(q, 1 + rng.below(3)),
                        _ => Op::Stacked(q),
                    }
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn one_bare_key_under_two_windows_with_penalties_decides_on_redis_as_on_memory() {
    let server = RedisServer::start();
    let redis = connected(RedisOptions::new(server.url())).await;
    let p = prefix("alike");
    let mut failed = Vec::new();
    for (i, ops) in sequences(0x57, 60).iter().enumerate() {
        let key = format!("{p}:{{k{i}}}");
        let memory = ratelimit::MemoryStore::new();
        let expected = run(&memory, &key, ops, now()).await;
        let got = run(&redis, &key, ops, now()).await;
        if got != expected {
            failed.push(format!("{ops:?}\n  memory {expected:?}\n  redis  {got:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
