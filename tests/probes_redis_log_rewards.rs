//! Probes of the Redis sliding log's rewards (`Store::adjust` with `Adjustment::reward`,
//! `sliding_log.lua` in its adjust mode) on a key asked under one or two windows, kept as
//! tests. The Redis store rewards only keys of one window (`StoreKey::one_window`, the
//! service's keys) and refuses a reward on a bare key (`Error::InvalidKey`; README, "A state
//! keeps the window of the last quota that spent on it"), the one rule of every strategy
//! (the log's entries have named their window since; a log of mixed windows' entries, which
//! the probes below built first, is refused to the other window now). Attacked: a
//! reward under its own window after refunds, rewards and penalties took the newest entries
//! (it must still give back what `SlidingLog::adjust` gives); rewards under two windows in
//! either order, late in the longer window, on a log of mixed entries, after a penalty, and
//! under windows within an eighth of each other; a key's expiry changed by hand (`PERSIST`,
//! `PEXPIRE`, `DUMP`/`RESTORE` with a relative TTL); rewards of more than was spent and on a
//! log with nothing live; a reward racing spends from several tasks; and the expiry a longer
//! window's call writes in a shorter one's millisecond. Each asserts that no
//! window admits more than its limit inside its window, that a reward under the key's own
//! window gives back what it should, and that the log left reads (its head names an entry it
//! holds). Real servers, Redis' own `TIME`: a round that ran too slow to tell is run again.
//!
//! Six of the probes of two windows found ways through the expiry checks a reward on a bare
//! key first read (a log holding two windows' entries: a reward under one gave back the
//! other's, 6 admitted against 3), hence the refusal, which they now meet (`bare_reward`);
//! the probes of one window reward the same key as one window's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Adjustment, Mode, Request, Store, StoreKey};
use ratelimit::{Decision, Error, Options, Quota, RedisOptions, RedisStore, Strategy};
use ratelimit_tests::redis_server::{
    prefix, redis_time as time, until_redis_time as until, RedisServer,
};

const MINUTE: Duration = Duration::from_secs(60);
const SECOND: Duration = Duration::from_secs(1);

fn log(limit: u64, window: Duration) -> Quota {
    Quota::new(limit, window)
        .unwrap()
        .with_strategy(Strategy::SlidingWindow)
}

fn store(server: &RedisServer) -> RedisStore {
    // No refusals held in the process: every call reaches Redis' scripts.
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(2))
        .local_refusals(0);
    RedisStore::new(options).expect("store")
}

fn bare(key: &str) -> StoreKey<'_> {
    StoreKey::new(key).unwrap()
}

async fn ask(store: &RedisStore, key: &str, quota: &Quota, cost: u64) -> Result<Decision, Error> {
    store
        .decide(Request::new(bare(key), quota, cost, 0, Mode::Spend)?)
        .await
}

/// Spends of cost 1 until one is refused (at most 1,000).
async fn drain(store: &RedisStore, key: &str, quota: &Quota) -> u64 {
    for admitted in 0..1_000 {
        match ask(store, key, quota, 1).await {
            Ok(d) if d.allowed => continue,
            Ok(_) => return admitted,
            Err(e) => panic!("after {admitted} admitted: {e}"),
        }
    }
    panic!("never refused");
}

/// A reward on the key as one window's (`StoreKey::one_window`): the Redis store rewards no
/// bare key.
async fn reward(store: &RedisStore, key: &str, quota: &Quota, units: u64) -> u64 {
    store
        .adjust(Adjustment::reward(
            StoreKey::one_window(key).unwrap(),
            quota,
            units,
            0,
        ))
        .await
        .expect("a reward answers")
}

/// A reward on the bare key: refused, `Error::InvalidKey` (its state keeps no window, and a
/// reward under one window gave back another's spends), so nothing given back: 0.
async fn bare_reward(store: &RedisStore, key: &str, quota: &Quota, units: u64) -> u64 {
    match store
        .adjust(Adjustment::reward(bare(key), quota, units, 0))
        .await
    {
        Err(Error::InvalidKey { .. }) => 0,
        other => panic!("a reward on a bare key: {other:?}"),
    }
}

async fn penalty(store: &RedisStore, key: &str, quota: &Quota, units: u64) -> u64 {
    store
        .adjust(Adjustment::penalty(bare(key), quota, units, 0))
        .await
        .expect("a penalty answers")
}

/// The key's expiry, in milliseconds since the epoch (-1: none, -2: no key).
fn expiry(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// The log's entries, newest first: (time, total, age, used), each naming a window after its
/// slash (sliding_log.lua).
fn entries(c: &mut redis::Connection, key: &str) -> Vec<(u64, u64, u64, u64)> {
    let raw: Vec<String> = redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(c)
        .unwrap();
    raw.iter()
        .map(|e| {
            let (fields, window) = e.split_once('/').unwrap_or_else(|| panic!("{e}"));
            assert!(window.parse::<u64>().is_ok_and(|w| w > 0), "{e}");
            let f: Vec<u64> = fields.split(':').map(|x| x.parse().unwrap()).collect();
            assert_eq!(f.len(), 4, "{e}");
            (f[0], f[1], f[2], f[3])
        })
        .collect()
}

/// The log reads: in time order with growing totals, and its head names an entry it holds
/// as its oldest live one, with the head's `used` the units from that entry on.
fn reads(c: &mut redis::Connection, key: &str) {
    let log = entries(c, key);
    let Some(&(t, total, age, used)) = log.first() else {
        return;
    };
    for pair in log.windows(2) {
        assert!(pair[0].0 >= pair[1].0 && pair[0].1 > pair[1].1, "{log:?}");
    }
    let oldest = t - age;
    let base = total - used;
    let named = log.iter().enumerate().any(|(k, e)| {
        e.0 == oldest
            && match log.get(k + 1) {
                Some(older) => older.1 == base,
                None => e.1 > base,
            }
    });
    assert!(named, "the head names no entry it holds: {log:?}");
}

// ---------------------------------------------------------------------------------------------
// Under the key's own window: what `SlidingLog::adjust` gives back.

/// 3 of 5 spent, rewards of 2 then 5: 2 then 1 back (never past the quota), and 5 admitted
/// after. A reward refused here would leave a caller short of what it was given.
#[tokio::test]
async fn a_reward_under_its_own_window_gives_back_what_was_spent() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_own"));
    let q = log(5, MINUTE);
    for _ in 0..3 {
        assert!(ask(&store, &key, &q, 1).await.unwrap().allowed);
    }
    assert_eq!(reward(&store, &key, &q, 2).await, 2);
    reads(&mut c, &key);
    assert_eq!(reward(&store, &key, &q, 5).await, 1);
    assert_eq!(drain(&store, &key, &q).await, 5);
}

/// A reward of 10 on 3 spent gives back 3, never a budget past the quota: 3 admitted after.
#[tokio::test]
async fn a_reward_of_more_than_was_spent_gives_back_only_the_spends() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_more"));
    let q = log(3, MINUTE);
    assert_eq!(drain(&store, &key, &q).await, 3);
    assert_eq!(reward(&store, &key, &q, 10).await, 3);
    reads(&mut c, &key);
    assert_eq!(drain(&store, &key, &q).await, 3);
    assert_eq!(reward(&store, &key, &q, u64::from(u32::MAX)).await, 3);
    assert_eq!(drain(&store, &key, &q).await, 3);
}

/// A spend of 3 units in one entry, then rewards of 1: the entry is cut, not dropped, and its
/// head still names it; exactly 1 more admitted after each.
#[tokio::test]
async fn a_partial_reward_of_one_entry_leaves_a_log_that_reads() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_partial"));
    let q = log(5, MINUTE);
    assert!(ask(&store, &key, &q, 2).await.unwrap().allowed);
    assert!(ask(&store, &key, &q, 3).await.unwrap().allowed);
    assert_eq!(reward(&store, &key, &q, 1).await, 1);
    reads(&mut c, &key);
    assert_eq!(entries(&mut c, &key).len(), 2);
    assert_eq!(reward(&store, &key, &q, 3).await, 3);
    reads(&mut c, &key);
    assert_eq!(entries(&mut c, &key).len(), 1);
    assert_eq!(drain(&store, &key, &q).await, 4);
}

/// Spends 30 ms apart, then rewards of 1 each taking the newest entry (the key keeps that
/// entry's expiry, later than the next one's by more than the eighth a decision allows): each
/// still gives its 1 back, as `SlidingLog::adjust` does.
#[tokio::test]
async fn rewards_after_earlier_rewards_took_the_newest_entries_still_give_back() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_again"));
    // 400 ms: its eighth is 50 ms, and the entries are 60 ms apart.
    let q = log(4, Duration::from_millis(400));
    for attempt in 0..5 {
        let key = format!("{key}{attempt}");
        let start = time(&mut c);
        for i in 0..4 {
            until(&mut c, start + i * 60_000);
            assert!(ask(&store, &key, &q, 1).await.unwrap().allowed);
        }
        let mut gave = Vec::new();
        for _ in 0..3 {
            gave.push(reward(&store, &key, &q, 1).await);
            reads(&mut c, &key);
        }
        let more = drain(&store, &key, &q).await;
        if time(&mut c) >= start + 400_000 {
            continue; // the first entry left: too slow to tell
        }
        assert_eq!(gave, [1, 1, 1]);
        assert_eq!(more, 3);
        return;
    }
    panic!("never within the window");
}

/// Spends kept for a refund (`Mode::Keep`, through the service, whose adjustments run on the
/// bare key), the newest refunded, then a reward of 2: it gives 2 back (the key keeps the
/// refunded entry's expiry, which the reward must not read as another window's).
#[tokio::test]
async fn a_reward_after_a_refund_of_the_newest_spend_still_gives_back() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let p = prefix("log_rewards_refund");
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let service = ratelimit_tests::redis_service(options, &p);
    let per = Options::new()
        .limit(5)
        .window(Duration::from_millis(400))
        .strategy(Strategy::SlidingWindow);
    for attempt in 0..5 {
        let key = format!("u{attempt}");
        let start = time(&mut c);
        let mut kept = Vec::new();
        for i in 0..4 {
            until(&mut c, start + i * 60_000);
            let spent = service.spend(&key, &per).await.unwrap();
            assert!(spent.decision().allowed);
            kept.push(spent);
        }
        let newest = kept.pop().unwrap();
        assert!(newest.refund().await.unwrap(), "the refund gives");
        let level = service.reward(&key, &per, 2).await.unwrap();
        let second = service.reward(&key, &per, 1).await.unwrap();
        let after = time(&mut c);
        if after >= start + 400_000 {
            continue;
        }
        assert_eq!(
            (level.remaining, second.remaining),
            (4, 5),
            "attempt {attempt}"
        );
        return;
    }
    panic!("never within the window");
}

/// Every spend refunded, newest first, then a reward: nothing is left, it gives nothing, and
/// the budget is the quota's (no error reply on a log its refunds emptied).
#[tokio::test]
async fn a_reward_after_every_spend_was_refunded_gives_nothing_and_errs_not() {
    let server = RedisServer::start();
    let p = prefix("log_rewards_refund_all");
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let service = ratelimit_tests::redis_service(options, &p);
    let per = Options::new()
        .limit(3)
        .window(MINUTE)
        .strategy(Strategy::SlidingWindow);
    let mut kept = Vec::new();
    for _ in 0..3 {
        kept.push(service.spend("u", &per).await.unwrap());
    }
    while let Some(spent) = kept.pop() {
        assert!(spent.refund().await.unwrap());
    }
    let level = service.reward("u", &per, 3).await.unwrap();
    assert_eq!(level.remaining, 3);
    let mut admitted = 0;
    while service.spend("u", &per).await.unwrap().decision().allowed {
        admitted += 1;
    }
    assert_eq!(admitted, 3);
}

/// A penalty of 5 on a limit of 3, then a reward of 5 under the same window: the penalty's 5
/// come back, and the quota's 3 are admitted after (never more).
#[tokio::test]
async fn a_reward_after_a_penalty_under_its_own_window_gives_back_the_penalty() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_penalty"));
    let q = log(3, MINUTE);
    assert_eq!(penalty(&store, &key, &q, 5).await, 5);
    assert_eq!(drain(&store, &key, &q).await, 0);
    assert_eq!(reward(&store, &key, &q, 5).await, 5);
    reads(&mut c, &key);
    assert_eq!(drain(&store, &key, &q).await, 3);
}

/// A log whose entries all left the window: a reward gives nothing, and the window's quota
/// (3, not more) is admitted after.
#[tokio::test]
async fn a_reward_on_a_log_with_nothing_live_gives_nothing() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_dead"));
    let q = log(3, Duration::from_millis(50));
    assert_eq!(drain(&store, &key, &q).await, 3);
    let start = time(&mut c);
    until(&mut c, start + 60_000);
    assert_eq!(reward(&store, &key, &q, 3).await, 0);
    assert_eq!(drain(&store, &key, &q).await, 3);
}

// ---------------------------------------------------------------------------------------------
// Two windows on one bare key.

/// A minute spends its 3, then a reward under a second in the minute's first moments: nothing
/// back, and the minute admits none.
#[tokio::test]
async fn a_reward_under_a_shorter_window_gives_nothing_of_a_longer_ones_spends() {
    let server = RedisServer::start();
    let store = store(&server);
    let key = format!("{}:k", prefix("log_rewards_short"));
    let (minute, second) = (log(3, MINUTE), log(100, SECOND));
    assert_eq!(drain(&store, &key, &minute).await, 3);
    assert_eq!(bare_reward(&store, &key, &second, 3).await, 0);
    assert_eq!(drain(&store, &key, &minute).await, 0);
}

/// A 600 ms window spends its 3; 300 ms later (every entry still in a 400 ms window, and the
/// key ends before that window would keep it from the call) a reward under 400 ms. It gave the
/// 600 ms window's 3 back, and that window admitted 3 more inside its 600 ms (6 against 3).
#[tokio::test]
async fn a_reward_under_a_shorter_window_late_in_a_longer_ones_never_frees_it() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (long, short) = (
        log(3, Duration::from_millis(600)),
        log(100, Duration::from_millis(400)),
    );
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_late"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &long).await, 3);
        until(&mut c, start + 300_000);
        let gave = bare_reward(&store, &key, &short, 3).await;
        let more = drain(&store, &key, &long).await;
        if time(&mut c) >= start + 550_000 {
            continue; // too slow: the long window's entries may have left
        }
        assert_eq!(
            (gave, more),
            (0, 0),
            "attempt {attempt}: gave {gave}, {more} more"
        );
        return;
    }
    panic!("never within the window");
}

/// A 600 ms window spends its 3; 250 ms later a 400 ms window spends 1 (the key's expiry now
/// its own, one window past it), then rewards exactly its 1: the key still ends no earlier
/// than the 600 ms window's entries need, and that window admits none. (Moving the expiry
/// back with the newest entry, as Rust's `expires_at` does, ended the key 200 ms early.)
#[tokio::test]
async fn a_reward_of_a_shorter_windows_own_newest_entry_never_shortens_a_longer_ones_key() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (long, short) = (
        log(3, Duration::from_millis(600)),
        log(100, Duration::from_millis(400)),
    );
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_own_newest"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &long).await, 3);
        let first = entries(&mut c, &key)[0].0;
        until(&mut c, start + 250_000);
        // Refused since the log names its window (sliding_log.lua); admitted or not, no
        // window may pass its limit.
        let _ = ask(&store, &key, &short, 1).await.unwrap();
        let gave = bare_reward(&store, &key, &short, 1).await;
        let ends = expiry(&mut c, &key);
        let more = drain(&store, &key, &long).await;
        if time(&mut c) >= start + 550_000 {
            continue;
        }
        let needed = (first + 600_000).div_ceil(1_000) as i64;
        assert!(
            ends >= needed && more == 0,
            "attempt {attempt}: gave {gave}, the key ends {} ms early, {more} more",
            needed - ends
        );
        return;
    }
    panic!("never within the window");
}

/// A 400 ms window spends its 3; 330 ms later (none of them live in a 100 ms window, and the
/// key ends before 100 ms from the call and its eighth) a reward under 100 ms. It gave
/// nothing, but dropped the key (nothing live in its window), and the 400 ms window admitted
/// 3 more inside its 400 ms. Now the key is left (kept longer than 100 ms past its newest
/// entry: sliding_log.lua).
#[tokio::test]
async fn a_reward_under_a_much_shorter_window_never_drops_a_longer_ones_log() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (long, short) = (
        log(3, Duration::from_millis(400)),
        log(100, Duration::from_millis(100)),
    );
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_drop"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &long).await, 3);
        until(&mut c, start + 330_000);
        let gave = bare_reward(&store, &key, &short, 3).await;
        let more = drain(&store, &key, &long).await;
        if time(&mut c) >= start + 390_000 {
            continue;
        }
        assert_eq!(
            (gave, more),
            (0, 0),
            "attempt {attempt}: gave {gave}, {more} more"
        );
        return;
    }
    panic!("never within the window");
}

/// A second spends its 3, then a minute spends 1 on the same bare key (its entry the newest:
/// the key's expiry is the minute's, a minute past it), then a reward of 4 under the minute.
/// It took the second's 3 behind the minute's 1, and the second admitted 3 more inside its
/// second (6 against 3).
#[tokio::test]
async fn a_reward_under_a_longer_window_never_takes_a_shorter_ones_entries_behind_its_own() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (second, minute) = (log(3, SECOND), log(100, MINUTE));
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_behind"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &second).await, 3);
        let last = entries(&mut c, &key)[0].0;
        until(&mut c, last + 2_000);
        // Refused since the log names its window (sliding_log.lua); admitted or not, no
        // window may pass its limit.
        let _ = ask(&store, &key, &minute, 1).await.unwrap();
        let gave = bare_reward(&store, &key, &minute, 4).await;
        let more = drain(&store, &key, &second).await;
        if time(&mut c) >= start + 900_000 {
            continue;
        }
        assert!(
            gave <= 1 && more == 0,
            "attempt {attempt}: gave {gave}, {more} more"
        );
        return;
    }
    panic!("never within the second");
}

/// As above with a penalty of 1 under the minute in place of its spend.
#[tokio::test]
async fn a_penalty_then_a_reward_under_a_longer_window_never_frees_the_shorter_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (second, minute) = (log(3, SECOND), log(100, MINUTE));
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_penalty_behind"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &second).await, 3);
        let last = entries(&mut c, &key)[0].0;
        until(&mut c, last + 2_000);
        assert_eq!(penalty(&store, &key, &minute, 1).await, 1);
        let gave = bare_reward(&store, &key, &minute, 4).await;
        let more = drain(&store, &key, &second).await;
        if time(&mut c) >= start + 900_000 {
            continue;
        }
        assert!(
            gave <= 1 && more == 0,
            "attempt {attempt}: gave {gave}, {more} more"
        );
        return;
    }
    panic!("never within the second");
}

/// A second spends its 3 (expiry a second past them), then a reward under the minute: the
/// key is kept less than a minute past its newest entry, so nothing back; the second admits
/// none. Also 200 ms later, the entries still in the second.
#[tokio::test]
async fn a_reward_under_a_longer_window_gives_nothing_of_a_shorter_ones_spends() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (second, minute) = (log(3, SECOND), log(100, MINUTE));
    let key = format!("{}:k", prefix("log_rewards_longer"));
    let start = time(&mut c);
    assert_eq!(drain(&store, &key, &second).await, 3);
    assert_eq!(bare_reward(&store, &key, &minute, 3).await, 0);
    until(&mut c, start + 200_000);
    assert_eq!(bare_reward(&store, &key, &minute, 3).await, 0);
    let more = drain(&store, &key, &second).await;
    assert!(time(&mut c) < start + 1_000_000, "too slow to tell");
    assert_eq!(more, 0);
}

/// A minute spends its 3, then a second spends 1 (its entry the newest, the key's expiry the
/// minute's): a reward under either window gives nothing (under the second the key is kept
/// longer, under the minute less than a minute past its newest entry), and the minute admits
/// none.
#[tokio::test]
async fn rewards_on_a_mixed_log_give_nothing_under_either_window() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (minute, second) = (log(3, MINUTE), log(100, SECOND));
    let key = format!("{}:k", prefix("log_rewards_mixed"));
    assert_eq!(drain(&store, &key, &minute).await, 3);
    // The second's entry in a later millisecond than the minute's (in the same one, the
    // expiry cannot tell them: the probe below).
    let last = entries(&mut c, &key)[0].0;
    until(&mut c, last + 2_000);
    // Refused since the log names its window (sliding_log.lua); admitted or not, no window
    // may pass its limit.
    let _ = ask(&store, &key, &second, 1).await.unwrap();
    let under_second = bare_reward(&store, &key, &second, 4).await;
    let under_minute = bare_reward(&store, &key, &minute, 4).await;
    reads(&mut c, &key);
    assert_eq!((under_second, under_minute), (0, 0));
    assert_eq!(drain(&store, &key, &minute).await, 0);
}

/// A 600 ms window spends its 3; 250 ms later a 400 ms window spends 1 (its expiry, one
/// window past it, now the key's), then rewards 4 under 400 ms: it took the 600 ms window's 3
/// behind its own 1, and that window admitted 3 more inside its 600 ms.
#[tokio::test]
async fn a_reward_under_a_shorter_window_after_its_own_late_spend_never_frees_the_longer_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (long, short) = (
        log(3, Duration::from_millis(600)),
        log(100, Duration::from_millis(400)),
    );
    for attempt in 0..5 {
        let key = format!("{}:k", prefix("log_rewards_late_own"));
        let start = time(&mut c);
        assert_eq!(drain(&store, &key, &long).await, 3);
        until(&mut c, start + 250_000);
        // Refused since the log names its window (sliding_log.lua); admitted or not, no
        // window may pass its limit.
        let _ = ask(&store, &key, &short, 1).await.unwrap();
        let gave = bare_reward(&store, &key, &short, 4).await;
        let more = drain(&store, &key, &long).await;
        if time(&mut c) >= start + 550_000 {
            continue;
        }
        assert!(
            gave <= 1 && more == 0,
            "attempt {attempt}: gave {gave}, {more} more"
        );
        return;
    }
    panic!("never within the window");
}

/// A second spends its 3, then a minute spends 1 in the same millisecond as the second's
/// newest entry: the script wrote no expiry (one window past the newest entry reads the
/// same under one window), so the key kept the second's and went a second later with the
/// minute's entry, and the minute admitted 4 more inside its minute (8 against its 4). The
/// key must end a minute past the minute's entry (a bare key's call now always writes it,
/// with GT: sliding_log.lua), and the minute admit no more than its 4 in its minute. (Since
/// the log names its window, the minute's call is refused there until the second's log
/// ends: the minute then has all its 4.)
#[tokio::test]
async fn a_longer_windows_call_in_a_shorter_ones_millisecond_still_keeps_the_key() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (second, minute) = (log(3, SECOND), log(4, MINUTE));
    let name = "log_rewards_same_ms_expiry";
    let (key, log, spent) = in_one_millisecond(&store, &mut c, name, &second, &minute).await;
    let ends = expiry(&mut c, &key);
    let mine = (log[0].0 + 60_000_000).div_ceil(1_000) as i64;
    until(&mut c, log[0].0 + 1_050_000);
    let more = drain(&store, &key, &minute).await;
    assert!(
        (!spent || ends >= mine) && u64::from(spent) + more <= 4,
        "the key ends {} ms before the minute's, {} in the minute",
        mine - ends,
        u64::from(spent) + more
    );
}

/// A fresh key on which `first` spent its whole limit, then `then` one call in the same
/// millisecond as `first`'s newest entry: the key, its log (newest first) and whether `then`'s
/// call was admitted. Tried afresh until the two calls fall in one millisecond (a call
/// refused wrote nothing: since the log names its window, `then`'s is, until `first`'s log
/// ends).
async fn in_one_millisecond(
    store: &RedisStore,
    c: &mut redis::Connection,
    name: &str,
    first: &Quota,
    then: &Quota,
) -> (String, Vec<(u64, u64, u64, u64)>, bool) {
    for _ in 0..50 {
        let key = format!("{}:k", prefix(name));
        assert_eq!(drain(store, &key, first).await, first.limit());
        let spent = ask(store, &key, then, 1).await.unwrap().allowed;
        let log = entries(c, &key);
        if !spent || log[0].0 / 1_000 == log[1].0 / 1_000 {
            return (key, log, spent);
        }
    }
    panic!("never in one millisecond");
}

/// A minute spends its 3 and a second spends 1 in the same millisecond (the key's expiry,
/// rounded up to it, is then the same for the newest entry under the minute): a reward of 4
/// under the minute took the second's entry and the minute's 3.
#[tokio::test]
async fn a_reward_under_a_longer_window_never_takes_a_shorter_ones_entry_in_its_millisecond() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (minute, second) = (log(3, MINUTE), log(4, SECOND));
    let name = "log_rewards_same_ms";
    let (key, ..) = in_one_millisecond(&store, &mut c, name, &minute, &second).await;
    let gave = bare_reward(&store, &key, &minute, 4).await;
    let more = drain(&store, &key, &second).await;
    assert!(
        gave == 0 && more == 0,
        "gave {gave}, the second admitted {more} more"
    );
}

/// Windows of 1,000 ms and 960 ms (within an eighth of each other, 50 ms at most: documented
/// as not told apart). The 960 ms window's spends under a reward of the 1,000 ms window:
/// nothing back (the key is kept less than 1,000 ms past them).
#[tokio::test]
async fn a_reward_under_a_slightly_longer_window_gives_nothing_of_a_shorter_ones_spends() {
    let server = RedisServer::start();
    let store = store(&server);
    let (long, short) = (
        log(100, Duration::from_millis(1_000)),
        log(3, Duration::from_millis(960)),
    );
    let key = format!("{}:k", prefix("log_rewards_close_longer"));
    assert_eq!(drain(&store, &key, &short).await, 3);
    assert_eq!(bare_reward(&store, &key, &long, 3).await, 0);
    assert_eq!(drain(&store, &key, &short).await, 0);
}

/// The other way round: the 1,000 ms window spends its 3, and a reward under 960 ms at once.
/// What gets through: the 3 come back, and the 1,000 ms window admits 3 more in its window
/// (6 against 3), as documented for windows within an eighth; kept to show the measure.
#[tokio::test]
async fn a_reward_under_a_slightly_shorter_window_never_frees_the_longer_one() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let (long, short) = (
        log(3, Duration::from_millis(1_000)),
        log(100, Duration::from_millis(960)),
    );
    let key = format!("{}:k", prefix("log_rewards_close_shorter"));
    let start = time(&mut c);
    assert_eq!(drain(&store, &key, &long).await, 3);
    let gave = bare_reward(&store, &key, &short, 3).await;
    let more = drain(&store, &key, &long).await;
    assert!(time(&mut c) < start + 900_000, "too slow to tell");
    assert_eq!((gave, more), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// The key's expiry changed by hand.

/// A minute's log given a longer TTL by hand (10 minutes): kept longer than a minute keeps
/// it, a reward gives nothing (fails closed), and the log is left as it was.
#[tokio::test]
async fn a_key_kept_longer_by_hand_gives_no_reward() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_longer_ttl"));
    let q = log(3, MINUTE);
    assert_eq!(drain(&store, &key, &q).await, 3);
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(600_000)
        .query(&mut c)
        .unwrap();
    let before = entries(&mut c, &key);
    assert_eq!(bare_reward(&store, &key, &q, 3).await, 0);
    assert_eq!(entries(&mut c, &key), before);
    assert_eq!(drain(&store, &key, &q).await, 0);
}

/// A minute's log given a shorter TTL by hand (5 s): kept less than a minute past its newest
/// entry, a reward gives nothing, and nothing is admitted meanwhile.
#[tokio::test]
async fn a_key_kept_shorter_by_hand_gives_no_reward() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_shorter_ttl"));
    let q = log(3, MINUTE);
    assert_eq!(drain(&store, &key, &q).await, 3);
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(bare_reward(&store, &key, &q, 3).await, 0);
    assert_eq!(drain(&store, &key, &q).await, 0);
}

/// A persisted log (no expiry: not written by the script, counted as it reads): a reward
/// under its window gives back what was spent, no error reply, and the quota's 3 after.
#[tokio::test]
async fn a_persisted_key_gives_its_reward_as_it_reads() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_persist"));
    let q = log(3, MINUTE);
    assert_eq!(drain(&store, &key, &q).await, 3);
    let _: i64 = redis::cmd("PERSIST").arg(&key).query(&mut c).unwrap();
    assert_eq!(reward(&store, &key, &q, 2).await, 2);
    reads(&mut c, &key);
    assert_eq!(drain(&store, &key, &q).await, 2);
}

/// `DUMP`, then `RESTORE` 20 ms later with the TTL read before (relative, as `MIGRATE` gives
/// it: the key now ends 20 ms later, within the eighth a key may be late): the reward under
/// the key's own window still gives back.
#[tokio::test]
async fn a_key_restored_with_a_relative_ttl_still_gets_its_reward() {
    let server = RedisServer::start();
    let store = store(&server);
    let mut c = server.connection();
    let key = format!("{}:k", prefix("log_rewards_restore"));
    let q = log(3, MINUTE);
    assert_eq!(drain(&store, &key, &q).await, 3);
    let ends = expiry(&mut c, &key);
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut c).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut c).unwrap();
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
    let at = time(&mut c);
    until(&mut c, at + 20_000);
    let _: () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(ttl)
        .arg(dump)
        .query(&mut c)
        .unwrap();
    let later = expiry(&mut c, &key) - ends;
    assert!((15..50).contains(&later), "restored {later} ms later");
    assert_eq!(reward(&store, &key, &q, 2).await, 2);
    assert_eq!(drain(&store, &key, &q).await, 2);
}

// ---------------------------------------------------------------------------------------------
// Concurrency.

/// 8 tasks spend on a bare key (limit 40 a minute) while 2 tasks reward 1 unit 15 times each:
/// the spends admitted are exactly the limit plus what the rewards gave back, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewards_racing_spends_give_back_exactly_what_is_admitted_again() {
    let server = RedisServer::start();
    let store = Arc::new(store(&server));
    let key = Arc::new(format!("{}:k", prefix("log_rewards_race")));
    let q = Arc::new(log(40, MINUTE));
    let (admitted, given) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, key, q, admitted) = (
            Arc::clone(&store),
            Arc::clone(&key),
            Arc::clone(&q),
            Arc::clone(&admitted),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..30 {
                if ask(&store, &key, &q, 1).await.unwrap().allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for _ in 0..2 {
        let (store, key, q, given) = (
            Arc::clone(&store),
            Arc::clone(&key),
            Arc::clone(&q),
            Arc::clone(&given),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                given.fetch_add(reward(&store, &key, &q, 1).await, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (admitted, given) = (
        admitted.load(Ordering::Relaxed),
        given.load(Ordering::Relaxed),
    );
    let left = drain(&store, &key, &q).await;
    assert!(admitted >= 40, "8 x 30 spends reach the limit: {admitted}");
    assert_eq!(
        admitted + left,
        40 + given,
        "admitted {admitted}, given {given}, left {left}"
    );
    let mut c = server.connection();
    reads(&mut c, &key);
}
