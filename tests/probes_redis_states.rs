//! Probes of the Redis store's stored states, against a real `redis-server`: one bare store
//! key asked under two quotas (the service's keys carry the quota, a bare store's may not),
//! values no script writes (planted with raw commands), odd calls (cost 0, `u64::MAX`, odd
//! keys), and a server that loses its scripts or restarts mid-sequence. Each asserts that
//! what is admitted never passes a limit and that a state a script did not write is an error
//! or a refusal, never a fresh budget, and is left as it was.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratelimit::store::{Mode, Request, Store, StoreKey};
use ratelimit::{Decision, Error, Quota, RedisOptions, RedisStore, Strategy};
use ratelimit_tests::redis_server::{prefix, RedisServer};

const DAY: Duration = Duration::from_secs(86_400);
const SECOND: Duration = Duration::from_secs(1);

fn store(server: &RedisServer) -> RedisStore {
    // No refusals held in the process: every call here reaches Redis' scripts.
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(2))
        .local_refusals(0);
    RedisStore::new(options).expect("store")
}

fn quota(limit: u64, window: Duration, strategy: Strategy) -> Quota {
    Quota::new(limit, window).unwrap().with_strategy(strategy)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

async fn ask(
    store: &RedisStore,
    key: &str,
    quota: &Quota,
    cost: u64,
    mode: Mode,
) -> Result<Decision, Error> {
    let request = Request::new(StoreKey::new(key)?, quota, cost, now(), mode)?;
    store.decide(request).await
}

async fn spend(store: &RedisStore, key: &str, quota: &Quota) -> Result<Decision, Error> {
    ask(store, key, quota, 1, Mode::Spend).await
}

/// Spends of cost 1 until one is refused (at most 1,000): how many were admitted.
async fn drain(store: &RedisStore, key: &str, quota: &Quota, mode: Mode) -> u64 {
    let mut admitted = 0;
    for _ in 0..1_000 {
        match ask(store, key, quota, 1, mode).await {
            Ok(d) if d.allowed => admitted += 1,
            Ok(_) => return admitted,
            Err(e) => panic!("after {admitted} admitted: {e}"),
        }
    }
    panic!("never refused");
}

/// Everything Redis holds under `key`: its type, value (as Redis dumps it) and absolute
/// expiry in milliseconds (-1: none).
fn snapshot(c: &mut redis::Connection, key: &str) -> (String, Option<Vec<u8>>, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (kind, dump, expiry)
}

/// Waits (bounded: 3 s) for Redis to drop `key` on its own clock: a real server decides on
/// its own `TIME` and expires keys by it, which no test can move (a poll, not a timing: the
/// assertions are on counts, never on how long anything took).
fn until_gone(c: &mut redis::Connection, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let exists: u64 = redis::cmd("EXISTS").arg(key).query(c).unwrap();
        if exists == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{key} outlived its window");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn unexpected<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::UnexpectedState { .. })),
        "{what}: {result:?}"
    );
}

// ---- One bare key under two quotas ---------------------------------------------------------

/// A fixed window of whole milliseconds stores an integer count expiring at its window's last
/// millisecond. A day's quota spending on a key a one-second window wrote would count in a
/// state that ends within the second: its spends vanish, and the day's limit admits its limit
/// again every second. It is refused until that state ends (as the memory store's
/// `algorithm::foreign`), on each of the script's paths: the hot path (spend), the full one
/// (look), and the stacked one (kept spend).
#[tokio::test]
async fn a_fixed_window_count_of_a_shorter_window_is_not_spent_under_a_longer_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_fixed_two");
    let short = quota(10, SECOND, Strategy::FixedWindow);
    let day = quota(10, DAY, Strategy::FixedWindow);
    for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
        let key = format!("{p}:{mode:?}");
        assert!(spend(&store, &key, &short).await.unwrap().allowed);
        let before = snapshot(&mut c, &key);
        let d = ask(&store, &key, &day, 1, mode).await.unwrap();
        assert!(!d.allowed, "{mode:?}: {d:?}");
        assert_eq!(d.remaining, 0, "{mode:?}");
        let retry = d.retry_after.expect("a refusal's wait");
        assert!(
            retry <= SECOND,
            "{mode:?}: until the short window ends, {retry:?}"
        );
        assert_eq!(snapshot(&mut c, &key), before, "{mode:?}: the key changed");
    }
}

/// The same, counted over time: the day's limit of 10, asked on a key a one-second window
/// wrote, then again once that state has ended, admits 10 in all (it admitted 10 in the
/// short window's second, lost with it, then 10 more).
#[tokio::test]
async fn a_day_limit_admits_its_limit_once_whatever_a_shorter_window_wrote() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("states_fixed_day"));
    let short = quota(10, SECOND, Strategy::FixedWindow);
    let day = quota(10, DAY, Strategy::FixedWindow);
    assert!(spend(&store, &key, &short).await.unwrap().allowed);
    let during = drain(&store, &key, &day, Mode::Spend).await;
    until_gone(&mut c, &key);
    let after = drain(&store, &key, &day, Mode::Spend).await;
    assert_eq!(during + after, 10, "{during} then {after}");
}

/// A longer window's count read under a shorter one whose boundaries it ends on is counted
/// (more strictly than needed, never less): the day's spends are never lost to it.
#[tokio::test]
async fn a_shorter_window_never_takes_a_longer_ones_count_away() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("states_fixed_long_first"));
    let short = quota(10, SECOND, Strategy::FixedWindow);
    let day = quota(10, DAY, Strategy::FixedWindow);
    assert_eq!(drain(&store, &key, &day, Mode::Spend).await, 10);
    let expiry = snapshot(&mut c, &key).2;
    // The day's 10 weigh on the one-second window too.
    assert_eq!(drain(&store, &key, &short, Mode::Spend).await, 0);
    assert_eq!(snapshot(&mut c, &key).2, expiry);
    assert_eq!(drain(&store, &key, &day, Mode::Spend).await, 0);
}

/// A window that does not divide the other: a count of a one-second window asked under
/// windows of 1.5 s and 7 s is counted only when the state ends on one of their boundaries
/// (then it is their window's, and the key lives as long); else refused until it ends.
#[tokio::test]
async fn a_count_ending_off_a_windows_boundaries_is_never_spent_as_its_own() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_fixed_off");
    let short = quota(10, SECOND, Strategy::FixedWindow);
    for ms in [1_500u64, 7_000, 60_001] {
        let other = quota(10, Duration::from_millis(ms), Strategy::FixedWindow);
        for i in 0..3 {
            let key = format!("{p}:{ms}:{i}");
            assert!(spend(&store, &key, &short).await.unwrap().allowed);
            let d = spend(&store, &key, &other).await.unwrap();
            let expiry = snapshot(&mut c, &key).2;
            if d.allowed {
                // On a boundary, or up to 50 ms past one (a relative TTL restored).
                assert!((expiry + 1) % ms as i64 <= 50, "{ms}: spent into {expiry}");
            } else {
                assert!(d.retry_after.unwrap() <= SECOND, "{ms}: {d:?}");
            }
        }
    }
}

/// A fixed window of a window that is not whole milliseconds keeps "F<start>:<window>:
/// <count>": under any other window it is the wrong shape, as is the integer count under one.
#[tokio::test]
async fn a_fixed_window_string_state_under_another_window_is_an_error() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_fixed_string");
    let odd = quota(10, Duration::from_micros(1_000_500), Strategy::FixedWindow);
    let odd2 = quota(10, Duration::from_micros(2_001_000), Strategy::FixedWindow);
    let whole = quota(10, SECOND, Strategy::FixedWindow);
    for (first, then) in [(&odd, &odd2), (&odd, &whole), (&whole, &odd)] {
        let key = format!(
            "{p}:{}:{}",
            first.window().as_micros(),
            then.window().as_micros()
        );
        assert!(spend(&store, &key, first).await.unwrap().allowed);
        let before = snapshot(&mut c, &key);
        for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
            unexpected(ask(&store, &key, then, 1, mode).await, &key);
        }
        assert_eq!(snapshot(&mut c, &key), before);
    }
}

/// The sliding window counter keeps window numbers (start / window): a one-second quota
/// reading a day's state found neither its window nor the one before, read it as fresh and
/// dropped the day's fields, so the day's limit came back. It is refused while that state
/// counts, and the key is left as it was.
#[tokio::test]
async fn a_counter_state_of_a_longer_window_is_not_dropped_by_a_shorter_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("states_counter_two"));
    let short = quota(10, SECOND, Strategy::SlidingWindowCounter);
    let day = quota(10, DAY, Strategy::SlidingWindowCounter);
    assert_eq!(drain(&store, &key, &day, Mode::Spend).await, 10);
    let before = snapshot(&mut c, &key);
    for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
        let d = ask(&store, &key, &short, 1, mode).await.unwrap();
        assert!(!d.allowed, "{mode:?}: {d:?}");
        assert_eq!(
            snapshot(&mut c, &key),
            before,
            "{mode:?}: the day's state changed"
        );
    }
    assert_eq!(drain(&store, &key, &day, Mode::Spend).await, 0);
}

/// The other way: a one-second counter's window numbers are past any a day's quota writes:
/// the wrong shape, left as it was.
#[tokio::test]
async fn a_counter_state_of_a_shorter_window_is_an_error_under_a_longer_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("states_counter_short_first"));
    let short = quota(10, SECOND, Strategy::SlidingWindowCounter);
    let day = quota(10, DAY, Strategy::SlidingWindowCounter);
    assert!(spend(&store, &key, &short).await.unwrap().allowed);
    let before = snapshot(&mut c, &key);
    for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
        unexpected(ask(&store, &key, &day, 1, mode).await, "day");
    }
    assert_eq!(snapshot(&mut c, &key), before);
}

/// Quotas differing in limit only share the state: the smaller is never passed whatever the
/// larger spent, on every strategy.
#[tokio::test]
async fn two_limits_on_one_key_never_pass_the_smaller() {
    let server = RedisServer::start();
    let store = store(&server);
    let p = prefix("states_two_limits");
    for strategy in Strategy::ALL {
        let key = format!("{p}:{strategy}");
        let big = quota(10, DAY, strategy);
        let small = quota(3, DAY, strategy);
        assert_eq!(drain(&store, &key, &big, Mode::Spend).await, 10);
        assert_eq!(
            drain(&store, &key, &small, Mode::Spend).await,
            0,
            "{strategy}"
        );
        let d = ask(&store, &key, &small, 0, Mode::Look).await.unwrap();
        assert_eq!(d.remaining, 0, "{strategy}");
    }
}

/// Two strategies on one bare key: each reads the other's state as the wrong shape.
#[tokio::test]
async fn another_strategys_state_is_an_error_and_left_as_it_was() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_strategies");
    for first in Strategy::ALL {
        for then in Strategy::ALL {
            if first == then {
                continue;
            }
            let key = format!("{p}:{first}:{then}");
            assert!(
                spend(&store, &key, &quota(5, DAY, first))
                    .await
                    .unwrap()
                    .allowed
            );
            let before = snapshot(&mut c, &key);
            for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
                let got = ask(&store, &key, &quota(5, DAY, then), 1, mode).await;
                unexpected(got, &format!("{first} then {then} ({mode:?})"));
            }
            unexpected(
                ask(&store, &key, &quota(5, DAY, then), 0, Mode::Look).await,
                &format!("{first} then {then}: a look at the level"),
            );
            assert_eq!(snapshot(&mut c, &key), before, "{first} then {then}");
        }
    }
}

// ---- Values no script writes ----------------------------------------------------------------

/// Raw commands that plant a value under `key`: (what it is, the commands).
fn plants(key: &str, strategy: Strategy) -> Vec<(&'static str, Vec<redis::Cmd>)> {
    let set = |v: &str| {
        let mut c = redis::cmd("SET");
        c.arg(key).arg(v).arg("PX").arg(60_000);
        c
    };
    let mut out: Vec<(&'static str, Vec<redis::Cmd>)> = vec![
        (
            "a hash",
            vec![redis::cmd("HSET").arg(key).arg("x").arg("1").clone()],
        ),
        (
            "a list",
            vec![redis::cmd("RPUSH").arg(key).arg("1").clone()],
        ),
        ("a set", vec![redis::cmd("SADD").arg(key).arg("1").clone()]),
        ("garbage", vec![set("garbage")]),
        ("an empty string", vec![set("")]),
        ("a float", vec![set("1.5")]),
        ("a number past 2^64", vec![set("99999999999999999999")]),
    ];
    match strategy {
        Strategy::FixedWindow => out.extend([
            ("a negative count", vec![set("-3")]),
            ("a leading zero", vec![set("03")]),
            ("a leading space", vec![set(" 3")]),
            ("a plus sign", vec![set("+3")]),
            ("a count past MAX_CAPACITY", vec![set("4294967296")]),
            ("i64::MAX", vec![set("9223372036854775807")]),
            ("a token bucket's state", vec![set("T1")]),
            ("a string fixed window", vec![set("F0:1000:1")]),
        ]),
        Strategy::TokenBucket => out.extend([
            ("a tat with a leading zero", vec![set("T01")]),
            ("a tat past 2^53", vec![set("T9007199254740993")]),
            ("a negative tat", vec![set("T-1")]),
            ("a tat and a zero shift", vec![set("T1:0")]),
            ("a truncated run", vec![set("T1:5:1")]),
            ("an integer", vec![set("3")]),
        ]),
        Strategy::SlidingWindow => {
            out = vec![
                ("a string", vec![set("1:1:0:1")]),
                (
                    "a hash",
                    vec![redis::cmd("HSET").arg(key).arg("x").arg("1").clone()],
                ),
                (
                    "a garbage entry",
                    vec![redis::cmd("LPUSH").arg(key).arg("x").clone()],
                ),
                (
                    "a truncated entry",
                    vec![redis::cmd("LPUSH").arg(key).arg("1:1:0").clone()],
                ),
                (
                    "a zero entry",
                    vec![redis::cmd("LPUSH").arg(key).arg("0:0:0:0").clone()],
                ),
                (
                    "an entry past MAX_CAPACITY",
                    vec![redis::cmd("LPUSH")
                        .arg(key)
                        .arg("1:4294967296:0:4294967296")
                        .clone()],
                ),
                (
                    "an entry from the far future",
                    vec![redis::cmd("LPUSH")
                        .arg(key)
                        .arg("9999999999999999:1:0:1")
                        .clone()],
                ),
            ]
        }
        Strategy::SlidingWindowCounter => {
            out = vec![
                ("a string", vec![set("3")]),
                (
                    "a list",
                    vec![redis::cmd("RPUSH").arg(key).arg("1").clone()],
                ),
                (
                    "a garbage field",
                    vec![redis::cmd("HSET").arg(key).arg("x").arg("1").clone()],
                ),
                (
                    "a negative count",
                    vec![redis::cmd("HSET").arg(key).arg("1").arg("-1").clone()],
                ),
                (
                    "a float count",
                    vec![redis::cmd("HSET").arg(key).arg("1").arg("0.5").clone()],
                ),
                (
                    "a zero recorded count",
                    vec![redis::cmd("HSET").arg(key).arg("1").arg("0").clone()],
                ),
                (
                    "three windows",
                    vec![redis::cmd("HSET")
                        .arg(key)
                        .arg(&["1", "1", "2", "1", "5", "1"])
                        .clone()],
                ),
            ]
        }
    }
    out
}

/// Every planted value, under every strategy and every way of asking (spend, look, kept
/// spend, a look at the level): the wrong shape, and the key as it was.
#[tokio::test]
async fn a_planted_value_is_an_error_and_left_as_it_was() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_planted");
    for strategy in Strategy::ALL {
        for (i, window) in [DAY, Duration::from_micros(86_400_000_001)]
            .into_iter()
            .enumerate()
        {
            let q = quota(5, window, strategy);
            let base = format!("{p}:{strategy}:{i}");
            for (what, commands) in plants(&base, strategy) {
                let key = base.clone();
                let _: () = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
                for cmd in commands {
                    let _: () = cmd.query(&mut c).unwrap();
                }
                let before = snapshot(&mut c, &key);
                for (cost, mode) in [
                    (1, Mode::Spend),
                    (1, Mode::Look),
                    (1, Mode::Keep),
                    (0, Mode::Look),
                ] {
                    let got = ask(&store, &key, &q, cost, mode).await;
                    unexpected(got, &format!("{strategy} {i}: {what} ({mode:?}, {cost})"));
                }
                assert_eq!(snapshot(&mut c, &key), before, "{strategy}: {what}");
            }
        }
    }
}

/// A fixed window's count whose expiry another client moved: removed (PERSIST), it is the
/// wrong shape; moved far out, it is refused (never a fresh budget) until then; the count
/// never grows past the limit.
#[tokio::test]
async fn a_fixed_window_count_whose_expiry_was_moved_is_never_a_fresh_budget() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_moved");
    let day = quota(5, DAY, Strategy::FixedWindow);
    let key = format!("{p}:persist");
    assert!(spend(&store, &key, &day).await.unwrap().allowed);
    let _: () = redis::cmd("PERSIST").arg(&key).query(&mut c).unwrap();
    for mode in [Mode::Look, Mode::Keep] {
        unexpected(ask(&store, &key, &day, 1, mode).await, "persisted");
    }
    // A bare key is decided the long way (never the hot script, which would count on it
    // until the limit: it never ends), where it is the wrong shape at once.
    let mut admitted = 0;
    for _ in 0..10 {
        match spend(&store, &key, &day).await {
            Ok(d) => admitted += u64::from(d.allowed),
            Err(e) => assert!(matches!(e, Error::UnexpectedState { .. }), "{e}"),
        }
    }
    assert_eq!(admitted, 0);
    let got: String = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
    assert_eq!(got, "1");
    // A year and a millisecond out: not on a day's boundary.
    let key = format!("{p}:far");
    assert!(spend(&store, &key, &day).await.unwrap().allowed);
    let far = now() / 1_000_000 + 366 * 86_400_000 + 1;
    let _: () = redis::cmd("PEXPIREAT")
        .arg(&key)
        .arg(far)
        .query(&mut c)
        .unwrap();
    for mode in [Mode::Spend, Mode::Look, Mode::Keep] {
        let d = ask(&store, &key, &day, 1, mode).await.unwrap();
        assert!(!d.allowed && d.remaining == 0, "{mode:?}: {d:?}");
    }
    let got: String = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
    assert_eq!(got, "1");
}

// ---- Odd calls -------------------------------------------------------------------------------

/// A look of cost 0 (the level) spends nothing, on every strategy; a cost above the capacity
/// or `u64::MAX` is refused before anything is asked, and a spend of 0 too.
#[tokio::test]
async fn a_look_spends_nothing_and_impossible_costs_are_refused_before_redis() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_costs");
    for strategy in Strategy::ALL {
        let key = format!("{p}:{strategy}");
        let q = quota(5, DAY, strategy);
        assert!(spend(&store, &key, &q).await.unwrap().allowed);
        let before = snapshot(&mut c, &key);
        for _ in 0..5 {
            let d = ask(&store, &key, &q, 0, Mode::Look).await.unwrap();
            assert_eq!(d.remaining, 4, "{strategy}");
            let d = ask(&store, &key, &q, 5, Mode::Look).await.unwrap();
            assert!(!d.allowed, "{strategy}");
        }
        assert_eq!(snapshot(&mut c, &key), before, "{strategy}");
        for mode in [Mode::Spend, Mode::Keep, Mode::Look] {
            for cost in [6, u64::MAX] {
                let got = ask(&store, &key, &q, cost, mode).await;
                assert!(
                    matches!(got, Err(Error::CostAboveCapacity { .. })),
                    "{strategy} {mode:?} {cost}: {got:?}"
                );
            }
        }
        for mode in [Mode::Spend, Mode::Keep] {
            let got = ask(&store, &key, &q, 0, mode).await;
            assert!(matches!(got, Err(Error::ZeroCost)), "{strategy}: {got:?}");
        }
        assert_eq!(drain(&store, &key, &q, Mode::Spend).await, 4, "{strategy}");
    }
}

/// Keys with hash-tag braces, newlines, NUL bytes, 4096 bytes: each its own state, counted
/// exactly; an empty key and one of 4097 bytes are refused before Redis.
#[tokio::test]
async fn odd_keys_each_keep_their_own_exact_count() {
    let server = RedisServer::start();
    let store = store(&server);
    let p = prefix("states_keys");
    for strategy in Strategy::ALL {
        let p = format!("{p}:{strategy}");
        let long = format!("{p}:{}", "k".repeat(4096 - p.len() - 1));
        let keys = [
            format!("{p}:{{tag}}"),
            format!("{p}:{{tag}}:x"),
            format!("{p}:{{}}"),
            format!("{p}:\n"),
            format!("{p}:\r\n*1\r\n"),
            format!("{p}:\0"),
            format!("{p}:\0\0"),
            long.clone(),
        ];
        let q = quota(3, DAY, strategy);
        for key in &keys {
            assert_eq!(
                drain(&store, key, &q, Mode::Spend).await,
                3,
                "{strategy} {key:?}"
            );
        }
        for key in ["", &format!("{long}k")] {
            let got = spend(&store, key, &q).await;
            assert!(
                matches!(got, Err(Error::InvalidKey { .. })),
                "{}: {got:?}",
                key.len()
            );
        }
        // Keys that differ only past a NUL byte are different keys.
        let key = format!("{p}:{strategy}:\0a");
        assert_eq!(drain(&store, &key, &q, Mode::Spend).await, 3);
        assert_eq!(
            drain(&store, &format!("{p}:{strategy}:\0b"), &q, Mode::Spend).await,
            3
        );
    }
}

// ---- A server that loses its scripts or restarts ----------------------------------------------

/// Between every two calls the server's scripts are flushed: every call is still decided
/// exactly once (no double spend from the reload, no free call), on every path.
#[tokio::test]
async fn a_script_flush_between_calls_neither_spends_twice_nor_admits_free() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let p = prefix("states_flush");
    for strategy in Strategy::ALL {
        for mode in [Mode::Spend, Mode::Keep] {
            let key = format!("{p}:{strategy}:{mode:?}");
            let q = quota(5, DAY, strategy);
            let mut admitted = 0;
            for _ in 0..8 {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
                if ask(&store, &key, &q, 1, mode).await.unwrap().allowed {
                    admitted += 1;
                }
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
                let level = ask(&store, &key, &q, 0, Mode::Look).await.unwrap();
                assert_eq!(level.remaining, 5 - admitted, "{strategy} {mode:?}");
            }
            assert_eq!(admitted, 5, "{strategy} {mode:?}");
        }
    }
}

/// A restart mid-sequence (with the state persisted): the calls after it are decided on the
/// state as it was, with the scripts loaded again.
#[tokio::test]
async fn a_restart_mid_sequence_decides_on_the_state_as_it_was() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store = store(&server);
    let p = prefix("states_restart");
    for strategy in Strategy::ALL {
        let key = format!("{p}:{strategy}");
        let q = quota(5, DAY, strategy);
        for _ in 0..3 {
            assert!(spend(&store, &key, &q).await.unwrap().allowed);
        }
        server.stop();
        server.restart();
        let mut left = None;
        for _ in 0..100 {
            if let Ok(d) = ask(&store, &key, &q, 0, Mode::Look).await {
                left = Some(d.remaining);
                break;
            }
        }
        assert_eq!(left, Some(2), "{strategy}");
        assert_eq!(drain(&store, &key, &q, Mode::Spend).await, 2, "{strategy}");
    }
}

/// The sliding log keeps times, so it reads alike under any window; but a call admitted
/// under a shorter window dropped the entries that left *its* window, and a longer window's
/// spends on the same bare key went with them: a day's limit of 10, spent whole, then one
/// call of a 1 ms window two milliseconds later, and the day admitted 9 more (19 in a day).
/// The memory store dropped them alike. Now the shorter window is refused while the log
/// counts by the window it names (`sliding_log.lua`, as `algorithm::written_elsewhere` in
/// Rust).
#[tokio::test]
async fn a_shorter_windows_call_never_drops_a_longer_windows_log() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("states_log_two"));
    let day = quota(10, DAY, Strategy::SlidingWindow);
    let short = quota(10, Duration::from_millis(1), Strategy::SlidingWindow);
    assert!(
        ask(&store, &key, &day, 10, Mode::Spend)
            .await
            .unwrap()
            .allowed
    );
    // Redis' clock two milliseconds on (bounded: a poll of its TIME).
    let time = |c: &mut redis::Connection| {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
        s * 1_000_000 + us
    };
    let from = time(&mut c);
    while time(&mut c) < from + 2_000 {}
    let _ = spend(&store, &key, &short).await;
    assert_eq!(drain(&store, &key, &day, Mode::Spend).await, 0);
}
