//! Probes of over-refusal on a real Redis server (helper-68): a refusal's `retry_after` is when
//! the call passes, on Redis' own clock, for every strategy, costs above 1 and burst, with
//! refusals held in the process and with leases; and a limit admits its whole capacity there.
//!
//! Time: Redis decides on its own clock (`TIME`), so the probes wait on it (polling `TIME`,
//! windows of a few hundred milliseconds). A call's script reads the clock between the
//! `TIME` read before it was sent and the one after its answer: a call at `after + retry`
//! must pass; a look made from `before + retry - 3 ms` and answered before `before + retry -
//! 1 ms` must be refused (one answered later is not judged: the machine was slow).

use std::time::Duration;

use ratelimit::{
    Config, LeaseOptions, Options, RateLimitService, RedisOptions, StoreConfig, Strategy,
};
use ratelimit_tests::redis_server::{
    clear_of_boundary, prefix, redis_time, until_redis_time, RedisServer,
};

fn service(
    server: &RedisServer,
    name: &str,
    options: impl Fn(RedisOptions) -> RedisOptions,
) -> RateLimitService {
    let options = options(RedisOptions::new(server.url()).timeout(Duration::from_secs(2)));
    let config = Config::builder()
        .key_prefix(prefix(name))
        .store(StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    RateLimitService::new(config).expect("service")
}

/// The limits the probes draw from: every strategy, short windows, burst, refill.
fn limits() -> Vec<Options> {
    let ms = Duration::from_millis;
    vec![
        Options::new()
            .strategy(Strategy::FixedWindow)
            .limit(4)
            .window(ms(300)),
        Options::new()
            .strategy(Strategy::SlidingWindow)
            .limit(3)
            .burst(1)
            .window(ms(300)),
        Options::new()
            .strategy(Strategy::SlidingWindowCounter)
            .limit(5)
            .window(ms(250)),
        Options::new()
            .strategy(Strategy::TokenBucket)
            .limit(4)
            .burst(2)
            .window(ms(200)),
        Options::new()
            .strategy(Strategy::TokenBucket)
            .limit(6)
            .refill(3)
            .window(ms(300)),
    ]
}

/// For each limit and `service`: calls of costs 1 to 3 in turn; each refusal is waited out on
/// Redis' clock: refused a millisecond before its `retry_after`, admitted at it. Returns how
/// many refusals were waited out and how many of them were judged a millisecond before.
async fn waits_are_true(service: &RateLimitService, c: &mut redis::Connection) -> (u32, u32) {
    let (mut waited, mut judged) = (0, 0);
    for (l, limit) in limits().into_iter().enumerate() {
        let key = format!("k{l}");
        for call in 0..16u64 {
            let options = limit.clone().cost(1 + call % 3);
            let before = redis_time(c);
            let decision = service.consume(&key, &options).await.unwrap();
            let after = redis_time(c);
            if decision.allowed {
                continue;
            }
            let retry = decision.retry_after.expect("a refusal says when");
            let retry_us = retry.as_micros() as u64;
            assert!(retry_us >= 1_000, "{options:?}: {retry:?}");
            // The call passes no sooner than `before + retry - 1 ms` (the wait is rounded up
            // to a millisecond): a look answered before then must be refused.
            if before + retry_us > after + 3_000 {
                until_redis_time(c, before + retry_us - 3_000);
                let look = service
                    .check(&key, &options.clone().consume(false))
                    .await
                    .unwrap();
                if redis_time(c) < before + retry_us - 1_000 {
                    assert!(
                        !look.allowed,
                        "{options:?}: passes a millisecond before its retry_after {retry:?}"
                    );
                    judged += 1;
                }
            }
            until_redis_time(c, after + retry_us);
            let again = service.consume(&key, &options).await.unwrap();
            assert!(
                again.allowed,
                "{options:?}: refused at its retry_after {retry:?}: {again:?}"
            );
            waited += 1;
        }
    }
    (waited, judged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusals_retry_after_is_when_the_call_passes_on_redis() {
    let server = RedisServer::start();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for (name, options) in [
        (
            "asked",
            (|o: RedisOptions| o.local_refusals(0)) as fn(RedisOptions) -> RedisOptions,
        ),
        ("held", |o| o),
        ("leased", |o| o.leases(LeaseOptions::new(4))),
    ] {
        let service = service(&server, name, options);
        let (waited, judged) = waits_are_true(&service, &mut c).await;
        assert!(waited >= 25, "{name}: only {waited} refusals waited out");
        assert!(judged >= 10, "{name}: {judged} of {waited} judged before");
    }
}

/// Each limit admits its whole capacity at once on Redis (costs 1 and 3), as in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_strategy_admits_its_whole_capacity_on_redis() {
    let server = RedisServer::start();
    let service = service(&server, "capacity", |o| o);
    let long = Duration::from_secs(3_600);
    for strategy in Strategy::ALL {
        for (limit, burst, cost) in [(10, 0, 1), (10, 5, 1), (10, 2, 3), (1, 0, 1)] {
            let options = Options::new()
                .strategy(strategy)
                .limit(limit)
                .burst(burst)
                .window(long)
                .cost(cost);
            let key = format!("{strategy:?}-{limit}-{burst}-{cost}");
            let mut admitted = 0;
            for _ in 0..40 {
                admitted += u64::from(service.consume(&key, &options).await.unwrap().allowed);
            }
            assert_eq!(admitted, (limit + burst) / cost, "{options:?}");
            let mut rest = 0;
            for _ in 0..40 {
                rest += u64::from(
                    service
                        .consume(&key, &options.clone().cost(1))
                        .await
                        .unwrap()
                        .allowed,
                );
            }
            assert_eq!(rest, (limit + burst) % cost, "{options:?}: the rest");
        }
    }
}

/// Two processes on one key of 10 a window: A leases a slice of 8 (spends 1, holds 7), B
/// spends the 2 Redis has left and is refused, until the window's end. A gives its 7 unspent
/// units back when idle (50 ms): Redis admits 7 more, and B, asking again an `idle` later, is
/// admitted them. B held Redis' refusal in the process until its retry time (the window's
/// end) and refused all 7 without asking: a refusal held there is sound against spends, not
/// against units coming back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_a_lease_gives_back_are_admitted_to_a_process_refused_before() {
    let server = RedisServer::start();
    let name = prefix("lease-back");
    let on = |options: RedisOptions| {
        let config = Config::builder()
            .key_prefix(name.clone())
            .store(StoreConfig::Redis(options))
            .build()
            .expect("valid configuration");
        RateLimitService::new(config).expect("service")
    };
    let base = || RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
    let idle = Duration::from_millis(50);
    let a = on(base().leases(LeaseOptions::new(8).idle(idle)));
    let b = on(base().leases(LeaseOptions::new(8).idle(idle)));
    let day = Options::new()
        .strategy(Strategy::FixedWindow)
        .limit(10)
        .window(Duration::from_secs(20 * 86_400));
    assert!(a.consume("user", &day).await.unwrap().allowed);
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += u64::from(b.consume("user", &day).await.unwrap().allowed);
    }
    assert_eq!(admitted, 2, "B: what Redis has left beside A's lease");
    // A's 7 unspent units go back to Redis once A is idle. Real time, not a hand-driven
    // clock: a lease's `idle` runs on the store's own timer (tokio's, against a real Redis),
    // so the test waits it out, polling Redis every 10 ms for at most 10 s.
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{name}*"))
                .query(&mut c)
                .unwrap();
            let counts: Vec<Option<String>> = keys
                .iter()
                .filter(|k| !k.ends_with(":lease"))
                .map(|k| redis::cmd("GET").arg(k).query(&mut c).unwrap_or(None))
                .collect();
            if counts.iter().any(|v| v.as_deref() == Some("3")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(back.await.is_ok(), "A's lease never came back");
    // B holds its refusal (till the window's end, Redis said) no longer than its own `idle`.
    tokio::time::sleep(idle).await;
    let mut again = 0;
    for _ in 0..10 {
        again += u64::from(b.consume("user", &day).await.unwrap().allowed);
    }
    assert_eq!(again, 7, "B after A gave its 7 unspent units back");
}

/// Stacked calls on Redis (`consume_all`: a fixed window, a log with burst and a counter, one
/// key): a refused stack passes at its longest `retry_after`, on Redis' clock, and a look a
/// millisecond or more before it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stacks_longest_retry_after_is_when_it_passes_on_redis() {
    let server = RedisServer::start();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let service = service(&server, "stacked", |o| o);
    let all = limits();
    let limits: Vec<Options> = [&all[0], &all[1], &all[2]]
        .iter()
        .enumerate()
        .map(|(i, o)| (*o).clone().budget(format!("b{i}")))
        .collect();
    let (mut waited, mut judged) = (0, 0);
    for call in 0..40u64 {
        let cost = 1 + call % 3;
        let stack: Vec<Options> = limits.iter().map(|o| o.clone().cost(cost)).collect();
        let looks: Vec<Options> = stack.iter().map(|o| o.clone().consume(false)).collect();
        let spend: Vec<(&str, &Options)> = stack.iter().map(|o| ("u", o)).collect();
        let look: Vec<(&str, &Options)> = looks.iter().map(|o| ("u", o)).collect();
        let before = redis_time(&mut c);
        let decisions = service.consume_all(&spend).await.unwrap();
        let after = redis_time(&mut c);
        if decisions.iter().all(|d| d.allowed) {
            continue;
        }
        let retry = decisions
            .iter()
            .filter_map(|d| d.retry_after)
            .max()
            .unwrap();
        let retry_us = retry.as_micros() as u64;
        if before + retry_us > after + 3_000 {
            until_redis_time(&mut c, before + retry_us - 3_000);
            let early = service.consume_all(&look).await.unwrap();
            if redis_time(&mut c) < before + retry_us - 1_000 {
                assert!(
                    !early.iter().all(|d| d.allowed),
                    "cost {cost}: passes before its retry_after {retry:?}"
                );
                judged += 1;
            }
        }
        until_redis_time(&mut c, after + retry_us);
        let due = service.consume_all(&spend).await.unwrap();
        assert!(
            due.iter().all(|d| d.allowed),
            "cost {cost}: refused at its retry_after {retry:?}: {due:?}"
        );
        waited += 1;
    }
    assert!(waited >= 10, "only {waited} refused stacks waited out");
    assert!(judged >= 4, "{judged} of {waited} judged before");
}

/// `status` on Redis, every strategy: its `remaining` is how many calls of cost 1 pass at once
/// (one more is refused), after spends of costs 1 to 3 (windows of 20 days: none turns
/// meanwhile); and with short windows, at its `reset_after` (on Redis' clock) the budget is
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_what_passes_and_when_the_budget_is_whole_on_redis() {
    let server = RedisServer::start();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let service = service(&server, "status", |o| o);
    let long_window = Duration::from_secs(20 * 86_400);
    for (l, limit) in limits().into_iter().enumerate() {
        for spent in [1u64, 2, 3, 5] {
            let long = limit.clone().window(long_window);
            let key = format!("long{l}-{spent}");
            let mut left = spent;
            while left > 0 {
                let cost = left.min(3);
                service
                    .consume(&key, &long.clone().cost(cost))
                    .await
                    .unwrap();
                left -= cost;
            }
            let level = service.status(&key, &long).await.unwrap();
            let mut passed = 0;
            for _ in 0..=level.remaining {
                passed += u64::from(
                    service
                        .consume(&key, &long.clone().cost(1))
                        .await
                        .unwrap()
                        .allowed,
                );
            }
            assert_eq!(passed, level.remaining, "{long:?} after {spent}");
        }
        let key = format!("short{l}");
        for cost in [2, 1, 3] {
            service
                .consume(&key, &limit.clone().cost(cost))
                .await
                .unwrap();
        }
        let level = service.status(&key, &limit).await.unwrap();
        let after = redis_time(&mut c);
        until_redis_time(&mut c, after + level.reset_after.as_micros() as u64);
        let whole = service.status(&key, &limit).await.unwrap();
        assert_eq!(
            whole.remaining, whole.limit,
            "{limit:?} at reset_after {:?}",
            level.reset_after
        );
    }
}

/// On Redis, a limit with a block (2 per 300 ms, an hour's block once refused): looks while
/// it is spent begin no block, nor does a stack refused by its other limit; once the window
/// has passed (on Redis' clock) the key admits 2 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looks_and_other_limits_refusals_begin_no_block_on_redis() {
    let server = RedisServer::start();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let service = service(&server, "blocks", |o| o);
    for strategy in Strategy::ALL {
        let key = format!("{strategy:?}");
        let blocked = Options::new()
            .strategy(strategy)
            .limit(2)
            .window(Duration::from_millis(300))
            .block_for(Duration::from_secs(3_600));
        let tight = Options::new()
            .limit(1)
            .window(Duration::from_secs(3_600))
            .budget("tight");
        let start = redis_time(&mut c);
        for _ in 0..2 {
            assert!(service.consume(&key, &blocked).await.unwrap().allowed);
        }
        assert!(!service.status(&key, &blocked).await.unwrap().allowed);
        let look = blocked.clone().consume(false);
        assert!(!service.check(&key, &look).await.unwrap().allowed);
        assert!(!service.consume_all(&[(&key, &look)]).await.unwrap()[0].allowed);
        until_redis_time(&mut c, start + 700_000);
        assert!(service.consume(&key, &tight).await.unwrap().allowed);
        let refused = service
            .consume_all(&[(&key, &blocked), (&key, &tight)])
            .await
            .unwrap();
        assert!(
            refused[0].allowed && !refused[1].allowed,
            "{strategy:?}: {refused:?}"
        );
        // Three calls within one of Redis' fixed windows of 300 ms: one turning over between
        // them admitted a third (a CI flake, 3 against 2).
        clear_of_boundary(
            &mut c,
            Duration::from_millis(300),
            Duration::from_millis(150),
        );
        let mut again = 0;
        for _ in 0..3 {
            again += u64::from(service.consume(&key, &blocked).await.unwrap().allowed);
        }
        assert_eq!(again, 2, "{strategy:?}: after the window");
    }
}
