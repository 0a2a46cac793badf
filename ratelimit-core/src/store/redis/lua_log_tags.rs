//! helper-57's attacks on the sliding log's window tag (`sliding_log.lua`: a bare key's entry
//! is "<time>:<total>:<age>:<used>/<window>"), in the stand-in (`lua_standin.rs`, a clock set
//! by hand): tags of every wrong shape planted as the newest entry and under it, on every path
//! of the script (a bare key's call and a key of one window's, a look, a penalty, a reward, a
//! refund). Every one must be the state error with the key left as it was: never a fresh
//! budget, never a write.

use super::lua_pair::{KEY, T0};
use super::lua_standin::{Redis, Reply};
use crate::quota::Quota;
use crate::syntax::Strategy as Kind;

const MINUTE: u64 = 60_000_000;

/// A sliding log of `limit` a window of `window_us` microseconds.
fn log(limit: u64, window_us: u64) -> Quota {
    super::lua_pair::Limits::new(Kind::SlidingWindow, (limit, 0), window_us, None).quota()
}

/// Window tags no script writes after "<time>:<total>:<age>:<used>" (the minute's, as the
/// store sends it, is "60000000").
const TAGS: [&str; 20] = include!("wrong_log_tags.in");

/// Everything the key holds: its entries, newest first, and its expiry.
fn snapshot(redis: &Redis) -> (Result<Reply, String>, Option<Option<u64>>) {
    (
        redis.command(&["LRANGE", KEY, "0", "-1"]),
        redis.expiry(KEY),
    )
}

/// Plants `entries` (oldest first) on a fresh key expiring an hour after `T0`.
fn planted(entries: &[String]) -> Redis {
    let redis = Redis::new(T0).expect("the scripts compile");
    for entry in entries {
        redis.command(&["LPUSH", KEY, entry]).expect("planted");
    }
    let far = (T0 / 1_000 + 3_600_000).to_string();
    redis.command(&["PEXPIREAT", KEY, &far]).expect("expiry");
    redis
}

/// Every path of the script on the key, under `quota`: (what, reply).
fn every_path(redis: &Redis, quota: &Quota) -> Vec<(&'static str, Reply)> {
    let spent = (T0 + MINUTE, 0);
    vec![
        ("a bare key's spend", redis.decide_full(quota, KEY, 1, true)),
        ("a bare key's look", redis.decide_full(quota, KEY, 1, false)),
        ("a level", redis.decide_full(quota, KEY, 0, false)),
        ("one window's spend", redis.decide(quota, KEY, 1, true)),
        ("a penalty", redis.adjust(quota, KEY, 1, true)),
        ("a reward", redis.adjust(quota, KEY, 1, false)),
        ("a refund", redis.refund(quota, KEY, 1, spent, true)),
        ("a refund asked", redis.refund(quota, KEY, 1, spent, false)),
    ]
}

/// Each path's reply is the state error and the key is as it was planted; else what was not.
fn refused_everywhere(redis: &Redis, quota: &Quota, what: &str) -> Vec<String> {
    let before = snapshot(redis);
    let mut failed = Vec::new();
    for (path, reply) in every_path(redis, quota) {
        if !matches!(&reply, Reply::Error(e) if e.starts_with("RATELIMIT_STATE ")) {
            failed.push(format!("{what:?}, {path}: {reply:?}"));
        }
        if snapshot(redis) != before {
            failed.push(format!("{what:?}, {path}: written {:?}", snapshot(redis)));
        }
    }
    failed
}

/// The newest entry, live (just written), with a tag of the wrong shape: never read as
/// another window's log that has passed, or as none named.
#[test]
fn a_newest_entry_with_a_window_tag_no_script_writes_is_the_state_error_on_every_path() {
    let mut failed = Vec::new();
    for tag in TAGS {
        let entry = format!("{T0}:1:0:1{tag}");
        failed.extend(refused_everywhere(
            &planted(std::slice::from_ref(&entry)),
            &log(3, MINUTE),
            &entry,
        ));
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The same tags on an older entry that has left the window under a live newest entry of the
/// minute (the newest names it as its oldest live one, so a call searches the tail): read once
/// the search reaches it, and the state error then.
#[test]
fn an_older_entry_with_a_window_tag_no_script_writes_is_the_state_error_once_read() {
    let mut failed = Vec::new();
    for tag in TAGS {
        let entries = [
            format!("{T0}:1:0:1/{MINUTE}"),
            format!("{}:2:1000:2{tag}", T0 + 1_000),
            format!("{}:3:2000:3/{MINUTE}", T0 + 2_000),
        ];
        let redis = planted(&entries);
        // Both older entries have left the minute; the newest is live.
        redis.set_time(T0 + MINUTE + 1_500);
        let q = log(3, MINUTE);
        let before = snapshot(&redis);
        for (path, reply) in [
            ("a bare key's spend", redis.decide_full(&q, KEY, 1, true)),
            ("one window's spend", redis.decide(&q, KEY, 1, true)),
            ("a look", redis.decide_full(&q, KEY, 1, false)),
            ("a penalty", redis.adjust(&q, KEY, 1, true)),
            ("a reward", redis.adjust(&q, KEY, 1, false)),
        ] {
            if !matches!(&reply, Reply::Error(e) if e.starts_with("RATELIMIT_STATE ")) {
                failed.push(format!("{tag:?}, {path}: {reply:?}"));
            }
            if snapshot(&redis) != before {
                failed.push(format!("{tag:?}, {path}: written"));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// A reward walks the live entries from the newest, taking units: an older live entry of the
/// wrong shape is the state error before anything is written, however many entries the reward
/// would take first.
#[test]
fn a_reward_reaching_an_entry_of_the_wrong_shape_writes_nothing() {
    let mut failed = Vec::new();
    for tag in TAGS {
        let entries = [
            format!("{T0}:1:0:1{tag}"),
            format!("{}:2:1000:2/{MINUTE}", T0 + 1_000),
            format!("{}:3:2000:3/{MINUTE}", T0 + 2_000),
        ];
        let redis = planted(&entries);
        redis.set_time(T0 + 3_000);
        let before = snapshot(&redis);
        let reply = redis.adjust(&log(3, MINUTE), KEY, 3, false);
        if !matches!(&reply, Reply::Error(e) if e.starts_with("RATELIMIT_STATE ")) {
            failed.push(format!("{tag:?}: {reply:?}"));
        }
        if snapshot(&redis) != before {
            failed.push(format!("{tag:?}: written {:?}", snapshot(&redis)));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Entries each of the shape, their totals not in order: an older entry's total at or above
/// the newer one's, or the oldest live one's at or below the total before it (the newest's
/// summary). A reward's walk found units of 0 or fewer there and went on writing (an entry of
/// "-1" units, a reward of 4 from a log of 3): the state error, nothing written.
#[test]
fn a_reward_over_totals_out_of_order_writes_nothing() {
    let logs = [
        (
            vec![
                format!("{T0}:5:0:5/{MINUTE}"),
                format!("{}:2:1000:2/{MINUTE}", T0 + 1_000),
            ],
            1,
        ),
        (
            vec![
                format!("{T0}:3:0:3/{MINUTE}"),
                format!("{}:7:1000:3/{MINUTE}", T0 + 1_000),
            ],
            5,
        ),
    ];
    for (entries, units) in logs {
        let redis = planted(&entries);
        redis.set_time(T0 + 3_000);
        let before = snapshot(&redis);
        let reply = redis.adjust(&log(3, MINUTE), KEY, units, false);
        assert!(
            matches!(&reply, Reply::Error(e) if e.starts_with("RATELIMIT_STATE ")),
            "{entries:?}: {reply:?}"
        );
        assert_eq!(snapshot(&redis), before, "{entries:?}");
    }
}
