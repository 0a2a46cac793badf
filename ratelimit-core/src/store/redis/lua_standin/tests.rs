//! The stand-in's own checks: state of another shape, expiry, and the commands as Redis 7
//! answers them (checked against a Redis 7.0 server).

use super::{Redis, Reply};
use crate::quota::Quota;
use crate::syntax::Strategy;

#[test]
fn state_of_another_shape_is_an_error_reply_and_is_left_as_it_is() {
    let redis = Redis::new(1_750_000_000_000_000).expect("the scripts compile");
    redis.command(&["SET", "s", "F1:2:x"]).unwrap();
    redis.command(&["ZADD", "z", "1", "m"]).unwrap();
    redis
        .command(&["LPUSH", "l", "1750000000000000:1"])
        .unwrap();
    // A count that is not a number, in the field of the window decided in (1 ms windows).
    redis.command(&["HSET", "h", "1750000000000", "x"]).unwrap();
    // The fixed window's own hot scripts, then the shared ones.
    for shared in [false, true] {
        if shared {
            redis.share_hot();
        }
        for strategy in Strategy::ALL {
            let quota = Quota::new(5, std::time::Duration::from_millis(1))
                .unwrap()
                .with_strategy(strategy);
            for (key, kind) in [("s", "string"), ("z", "zset"), ("l", "list"), ("h", "hash")] {
                // Each script: a look, and records of cost 1 and 3 (the fixed window's hot path).
                for (cost, commit) in [(1, false), (1, true), (3, true)] {
                    let reply = redis.decide(&quota, key, cost, commit);
                    let holds =
                        format!("RATELIMIT_STATE the limiter key holds a {kind} that is not");
                    assert!(
                        matches!(&reply, Reply::Error(e) if e.starts_with(&holds)),
                        "{strategy}, {cost}, {commit}: {reply:?}"
                    );
                }
            }
        }
    }
    assert_eq!(
        redis.command(&["GET", "s"]),
        Ok(Reply::Bulk("F1:2:x".into()))
    );
    assert_eq!(redis.command(&["ZCARD", "z"]), Ok(Reply::Int(1)));
    assert_eq!(redis.command(&["LLEN", "l"]), Ok(Reply::Int(1)));
    assert_eq!(
        redis.command(&["HGETALL", "h"]),
        Ok(Reply::Array(vec![
            Reply::Bulk("1750000000000".into()),
            Reply::Bulk("x".into())
        ]))
    );
}

#[test]
fn a_key_is_gone_from_the_millisecond_after_its_expiry() {
    let redis = Redis::new(5_000_000).expect("the scripts compile");
    redis.command(&["SET", "k", "v", "PXAT", "5001"]).unwrap();
    redis.set_time(5_001_999);
    assert_eq!(redis.expiry("k"), Some(Some(5_001)));
    assert_eq!(redis.command(&["PTTL", "k"]), Ok(Reply::Int(0)));
    redis.set_time(5_002_000);
    assert_eq!(redis.expiry("k"), None);
    redis.set_time(5_000_000);
    assert_eq!(
        redis.command(&["GET", "k"]),
        Ok(Reply::Nil),
        "deleted, not hidden"
    );
}

fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|&s| Reply::Bulk(s.into())).collect())
}

/// The list commands the sliding log's refund calls, as a Redis 7.0 server answered them.
#[test]
fn lrange_lset_and_lrem_answer_as_redis_does() {
    let redis = Redis::new(5_000_000).expect("the scripts compile");
    let run = |args: &[&str]| redis.command(args);
    for v in ["b", "c", "b", "a"] {
        run(&["LPUSH", "l", v]).unwrap();
    }
    assert_eq!(
        run(&["LRANGE", "l", "0", "-1"]),
        Ok(bulks(&["a", "b", "c", "b"]))
    );
    assert_eq!(
        run(&["LSET", "l", "9", "x"]),
        Err("ERR index out of range".into())
    );
    assert_eq!(
        run(&["LSET", "none", "0", "x"]),
        Err("ERR no such key".into())
    );
    assert_eq!(
        run(&["LSET", "l", "-1", "z"]),
        Ok(Reply::Status("OK".into()))
    );
    assert_eq!(run(&["LREM", "l", "1", "b"]), Ok(Reply::Int(1)));
    assert_eq!(
        run(&["LRANGE", "l", "-100", "100"]),
        Ok(bulks(&["a", "c", "z"]))
    );
    assert_eq!(run(&["LRANGE", "l", "1", "1"]), Ok(bulks(&["c"])));
    assert_eq!(run(&["LRANGE", "l", "5", "1"]), Ok(bulks(&[])));
    assert_eq!(run(&["LRANGE", "none", "0", "-1"]), Ok(bulks(&[])));
    assert_eq!(run(&["LREM", "l", "0", "a"]), Ok(Reply::Int(1)));
    assert_eq!(run(&["LREM", "l", "-5", "c"]), Ok(Reply::Int(1)));
    assert_eq!(run(&["LREM", "l", "0", "z"]), Ok(Reply::Int(1)));
    assert_eq!(
        run(&["TYPE", "l"]),
        Ok(Reply::Status("none".into())),
        "emptied: deleted"
    );
    assert_eq!(run(&["LREM", "none", "1", "z"]), Ok(Reply::Int(0)));
    // From the head, from the tail, every one.
    for v in ["x", "y", "x", "y", "x"] {
        run(&["LPUSH", "m", v]).unwrap();
    }
    run(&["LSET", "m", "0", "x0"]).unwrap();
    assert_eq!(run(&["LREM", "m", "-1", "x"]), Ok(Reply::Int(1)));
    assert_eq!(
        run(&["LRANGE", "m", "0", "-1"]),
        Ok(bulks(&["x0", "y", "x", "y"]))
    );
    assert_eq!(run(&["LREM", "m", "1", "y"]), Ok(Reply::Int(1)));
    assert_eq!(run(&["LREM", "m", "0", "y"]), Ok(Reply::Int(1)));
    assert_eq!(run(&["LRANGE", "m", "0", "-1"]), Ok(bulks(&["x0", "x"])));
    run(&["SET", "s", "1"]).unwrap();
    for list in [
        &["LRANGE", "s", "0", "1"][..],
        &["LSET", "s", "0", "v"],
        &["LREM", "s", "0", "v"],
    ] {
        assert!(
            matches!(run(list), Err(e) if e.starts_with("WRONGTYPE")),
            "{list:?}"
        );
    }
}

/// The other commands the refunds call: a count taken down keeps its expiry, an emptied
/// hash is deleted, an expiry already past deletes the key, `DEL` counts what it deleted.
#[test]
fn decrby_del_hincrby_and_a_past_pexpireat_answer_as_redis_does() {
    let redis = Redis::new(5_000_000).expect("the scripts compile");
    let run = |args: &[&str]| redis.command(args);
    run(&["SET", "n", "5", "PXAT", "9000"]).unwrap();
    assert_eq!(run(&["DECRBY", "n", "7"]), Ok(Reply::Int(-2)));
    assert_eq!(redis.expiry("n"), Some(Some(9_000)));
    let min = i64::MIN.to_string();
    assert_eq!(
        run(&["DECRBY", "n", &min]),
        Err("ERR decrement would overflow".into())
    );
    assert_eq!(
        run(&["INCRBY", "n", &min]),
        Err("ERR increment or decrement would overflow".into())
    );
    run(&["SET", "n", "3", "KEEPTTL"]).unwrap();
    assert_eq!(redis.expiry("n"), Some(Some(9_000)));
    run(&["SET", "fresh", "3", "KEEPTTL"]).unwrap();
    assert_eq!(run(&["PTTL", "fresh"]), Ok(Reply::Int(-1)));
    run(&["HSET", "h", "a", "1"]).unwrap();
    assert_eq!(run(&["HINCRBY", "h", "a", "-1"]), Ok(Reply::Int(0)));
    assert_eq!(
        run(&["HGETALL", "h"]),
        Ok(bulks(&["a", "0"])),
        "a field at 0 stays"
    );
    assert_eq!(run(&["HDEL", "h", "a"]), Ok(Reply::Int(1)));
    assert_eq!(
        run(&["TYPE", "h"]),
        Ok(Reply::Status("none".into())),
        "emptied: deleted"
    );
    assert_eq!(run(&["DEL", "n", "none", "n"]), Ok(Reply::Int(1)));
    assert_eq!(redis.expiry("n"), None);
    // The clock is at 5000 ms: an expiry then or before deletes at once, a later one waits.
    for (key, at, kept) in [
        ("a", "5000", false),
        ("b", "4995", false),
        ("c", "5001", true),
    ] {
        run(&["SET", key, "1"]).unwrap();
        assert_eq!(run(&["PEXPIREAT", key, at]), Ok(Reply::Int(1)));
        assert_eq!(redis.expiry(key).is_some(), kept, "{key} at {at}");
    }
    assert_eq!(run(&["PEXPIREAT", "none", "4995"]), Ok(Reply::Int(0)));
}

/// The fixed window's hot path sets a window's first hit to expire at the window's last
/// millisecond: when that hit comes in that millisecond, the expiry is the clock's own, and
/// Redis deletes the count at once (checked on a Redis 7.0.15 server: 200 calls in 17 ms
/// all admitted under 1 per millisecond). A second call at the same instant is then admitted
/// as a window's first: over the limit. The hot path now sets the expiry with `SET .. PXAT`,
/// which keeps the key through the clock's millisecond.
#[test]
fn a_first_hit_in_the_last_millisecond_of_a_window_is_kept() {
    for (window_ms, at_us) in [(1, 0), (1, 400), (1_000, 999_500)] {
        let redis = Redis::new(1_750_000_000_000_000 + at_us).expect("the scripts compile");
        let quota = Quota::new(1, std::time::Duration::from_millis(window_ms))
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        assert_eq!(redis.decide(&quota, "k", 1, true), Reply::Int(1));
        assert_ne!(
            redis.decide(&quota, "k", 1, true),
            Reply::Int(1),
            "a window of {window_ms} ms: a second call at the same instant admitted"
        );
    }
}
