//! helper-73: `probes_nothing_adjusted` on a real Redis server: an adjustment of nothing
//! (`penalize` or `reward` of 0 units) changes nothing anyone can see, through the service
//! (beside a moved limit, on a state another quota wrote) and on a bare store key a shorter
//! window wrote (a store used directly). Redis decides on its own clock: the two services of
//! a history run one after the other, so their waits are compared to within 2 s, and
//! the service's hand-driven clock moves only to end the transitions.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Adjustment, Request, Store, StoreKey};
use ratelimit::{
    Clock, Config, ConfigBuilder, Decision, ManualClock, Options, Quota, RateLimitService,
    RedisOptions, RedisStore, StoreConfig, Strategy, SystemClock, Tier,
};
use ratelimit_tests::redis_server::{clear_of_boundary, prefix, RedisServer};
use ratelimit_tests::{reload_to as reload, START};

const SEC: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

/// Tier `name` (the default tier) of `limit` per `window` under `strategy`, blocking a key
/// a day once refused when `blocks`. Windows of hours: no boundary of Redis' clock falls
/// between the two histories compared ([`clear_of_boundary`] before each pair).
fn tier(
    name: &str,
    limit: u64,
    window: Duration,
    strategy: Strategy,
    blocks: bool,
) -> ConfigBuilder {
    let mut tier = Tier::new(name, limit)
        .burst(0)
        .window(window)
        .strategy(strategy);
    if blocks {
        tier = tier.block_for(DAY);
    }
    Config::builder().tier(tier).default_tier(name)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Call(u64),
    Look,
    /// The service's clock on by this much (Redis' does not move).
    Advance(Duration),
    Reload(usize),
}

use Step::*;

/// What a decision says; its wait is compared to within 2 s (`alike`).
type Seen = (bool, u64, u64, Duration, Option<Duration>);

fn seen(d: &Decision) -> Seen {
    (d.allowed, d.remaining, d.limit, d.window, d.retry_after)
}

fn alike(a: &Seen, b: &Seen) -> bool {
    let near = match (a.4, b.4) {
        (Some(x), Some(y)) => x.abs_diff(y) <= 2 * SEC,
        (x, y) => x == y,
    };
    near && (a.0, a.1, a.2, a.3) == (b.0, b.1, b.2, b.3)
}

fn alike_steps(a: &(Step, Option<Seen>, usize), b: &(Step, Option<Seen>, usize)) -> bool {
    let seen = match (&a.1, &b.1) {
        (Some(x), Some(y)) => alike(x, y),
        (x, y) => x.is_none() && y.is_none(),
    };
    seen && (a.0, a.2) == (b.0, b.2)
}

fn keys(server: &RedisServer, prefix: &str) -> usize {
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut server.connection())
        .unwrap();
    found.len()
}

async fn history(
    server: &RedisServer,
    configs: &[ConfigBuilder],
    steps: &[Step],
    nothing: bool,
) -> Vec<(Step, Option<Seen>, usize)> {
    let prefix = prefix("nothing-adjusted");
    let options = RedisOptions::new(server.url()).timeout(2 * SEC);
    let config = (configs[0].clone())
        .key_prefix(&prefix)
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    let options = Options::new();
    let mut out = Vec::new();
    for &step in steps {
        if nothing {
            let level = service.penalize("k", &options, 0).await.unwrap();
            let again = service.reward("k", &options, 0).await.unwrap();
            let (level, again) = (seen(&level), seen(&again));
            assert!(alike(&level, &again), "{step:?}: {level:?} {again:?}");
        }
        let decided = match step {
            Call(cost) => Some(service.consume("k", &options.clone().cost(cost)).await),
            Look => Some(service.status("k", &options).await),
            Advance(by) => {
                clock.advance(by);
                None
            }
            Reload(i) => {
                reload(&service, configs[i].clone());
                None
            }
        };
        out.push((
            step,
            decided.map(|d| seen(&d.unwrap())),
            keys(server, &prefix),
        ));
    }
    out
}

async fn differs(
    server: &RedisServer,
    configs: &[ConfigBuilder],
    steps: &[Step],
    what: &str,
) -> Option<String> {
    let plain = history(server, configs, steps, false).await;
    let adjusted = history(server, configs, steps, true).await;
    let differ = (plain.iter().zip(&adjusted).enumerate()).find(|(_, (p, a))| !alike_steps(p, a));
    let (i, (p, a)) = differ?;
    Some(format!(
        "{what}: step {i}:\n without: {p:?}\n with:    {a:?}"
    ))
}

/// `probes_nothing_adjusted`'s moved limit and a state under another quota (in hours), every
/// strategy, with and without blocks.
#[tokio::test]
async fn nothing_adjusted_on_redis_changes_nothing() {
    let server = RedisServer::start();
    let moving = [
        Call(1),
        Call(1),
        Look,
        Reload(1),
        Look,
        Call(1),
        Call(1),
        Look,
        Advance(HOUR / 2),
        Call(2),
        Look,
        Advance(HOUR),
        Call(1),
        Look,
        Advance(DAY),
        Call(1),
        Look,
    ];
    let requoted = [
        Call(1),
        Call(1),
        Call(1),
        Call(1),
        Reload(2),
        Look,
        Call(1),
        Reload(3),
        Look,
        Call(1),
        Advance(HOUR + 5 * SEC),
        Call(1),
        Look,
    ];
    let mut differ = Vec::new();
    for strategy in Strategy::ALL {
        for blocks in [false, true] {
            let configs = [
                tier("a", 3, HOUR, strategy, blocks),
                tier("b", 3, 2 * HOUR, strategy, blocks),
                tier("a", 5, HOUR, strategy, blocks),
                tier("a", 2, HOUR, strategy, blocks),
            ];
            for (name, steps) in [("moved", &moving[..]), ("requoted", &requoted[..])] {
                let what = format!("{name} {strategy} blocks {blocks}");
                clear_of_boundary(&mut server.connection(), 2 * HOUR, 5 * SEC);
                differ.extend(differs(&server, &configs, steps, &what).await);
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

fn quota(limit: u64, window: Duration, strategy: Strategy) -> Quota {
    Quota::from_parts(limit, window, 0, strategy, None).unwrap()
}

/// A bare key (a store used directly, `StoreKey::new`) a window of about a second spent 5 on,
/// asked under a longer window: refused until the short window's state ends, then fresh. A penalty of
/// nothing under the minute leaves it so: the same answer to a look, the same expiry.
#[tokio::test]
async fn nothing_adjusted_on_a_bare_key_another_window_wrote_changes_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::new(RedisOptions::new(server.url()).timeout(2 * SEC)).unwrap();
    let mut c = server.connection();
    let mut differ = Vec::new();
    // Windows whose boundaries never meet within a test (the fixed window's count expiring
    // on a minute's boundary would be the minute's), and whose window numbers the longer
    // window reads as window numbers (past them, the counter's hash is the wrong shape).
    let windows = [
        (
            Strategy::FixedWindow,
            Duration::from_millis(1_001),
            60 * SEC,
        ),
        (Strategy::SlidingWindowCounter, SEC, 3 * SEC),
    ];
    for (strategy, short, long) in windows {
        let key = prefix("bare");
        let (short, long) = (quota(10, short, strategy), quota(10, long, strategy));
        let at = || SystemClock.now();
        for _ in 0..5 {
            let spend = Request::spend(StoreKey::new(&key).unwrap(), &short, 1, at()).unwrap();
            assert!(store.decide(spend).await.unwrap().allowed, "{strategy}");
        }
        let expiry = |c: &mut redis::Connection| -> i64 {
            redis::cmd("PEXPIRETIME").arg(&key).query(c).unwrap()
        };
        let before = expiry(&mut c);
        let look = Request::look(StoreKey::new(&key).unwrap(), &long, 1, at()).unwrap();
        let looked = store.decide(look).await.unwrap();
        let penalty = Adjustment::penalty(StoreKey::new(&key).unwrap(), &long, 0, at());
        let adjusted = store.adjust(penalty).await;
        let look = Request::look(StoreKey::new(&key).unwrap(), &long, 1, at()).unwrap();
        let after = store.decide(look).await.unwrap();
        let what = format!("{strategy}");
        if !matches!(adjusted, Ok(0)) {
            differ.push(format!(
                "{what}: a penalty of nothing answered {adjusted:?}"
            ));
        }
        if expiry(&mut c) != before {
            differ.push(format!(
                "{what}: expiry {before} moved to {}",
                expiry(&mut c)
            ));
        }
        if (looked.allowed, looked.remaining) != (after.allowed, after.remaining) {
            differ.push(format!("{what}: looked {looked:?}, then {after:?}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
