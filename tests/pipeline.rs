//! The one decision pipeline, seen from outside: every entry point checks a call in the same
//! place and answers a bad one the same way, and call sites prepared for one service never
//! decide for another.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ratelimit::store::{Request, Stacked, Store};
use ratelimit::{
    Config, Decision, Error, ManualClock, MemoryStore, Options, Quota, QuotaError,
    RateLimitService, Strategy,
};
use ratelimit_tests::START;

/// The memory store, refusing token buckets as a store that cannot keep them would.
struct NoLog(MemoryStore);

impl Store for NoLog {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.0.decide(request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.0.decide_all(stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.0, key).await
    }
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        match quota.strategy() {
            Strategy::TokenBucket => Err(QuotaError::Unsupported {
                store: "the bucketless store",
                reason: "it keeps no buckets",
            }),
            _ => Ok(()),
        }
    }
}

/// Every way a call reaches the store, each answering `key` with `options` (`Ok(true)`:
/// admitted).
fn entry_points(
    service: &RateLimitService,
    key: &str,
    options: &Options,
) -> Vec<(&'static str, Result<bool, String>)> {
    let now = |f: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>>| {
        let decided: Result<Decision, Error> = f.now_or_never().expect("decided at once");
        decided.map(|d| d.allowed).map_err(|e| e.to_string())
    };
    let queued = options.clone().queue(true);
    let mut out = vec![
        ("consume", now(Box::pin(service.consume(key, options)))),
        ("enforce", now(Box::pin(service.enforce(key, options)))),
        ("check", now(Box::pin(service.check(key, options)))),
        (
            "queued consume",
            now(Box::pin(service.consume(key, &queued))),
        ),
        (
            "consume_now",
            match service.consume_now(key, options) {
                Some(decided) => decided.map(|d| d.allowed).map_err(|e| e.to_string()),
                None => Err("not decided at once".into()),
            },
        ),
        (
            "consume_all",
            service
                .consume_all(&[(key, options)])
                .now_or_never()
                .expect("decided at once")
                .map(|d| d[0].allowed)
                .map_err(|e| e.to_string()),
        ),
    ];
    match service.prepare(options) {
        Ok(prepared) => {
            out.push(("prepared.consume", now(Box::pin(prepared.consume(key)))));
            out.push((
                "prepared.consume_now",
                match prepared.consume_now(key) {
                    Some(decided) => decided.map(|d| d.allowed).map_err(|e| e.to_string()),
                    None => Err("not decided at once".into()),
                },
            ));
        }
        Err(e) => out.push(("prepare", Err(e.to_string()))),
    }
    out
}

fn service_on(store: Option<NoLog>) -> RateLimitService {
    let clock = Arc::new(ManualClock::new(START));
    let config = Config::builder()
        .default_limit(5)
        .default_window("1m")
        .build();
    match store {
        None => RateLimitService::with_clock(config.unwrap(), clock),
        Some(store) => RateLimitService::with_store(config.unwrap(), store, clock),
    }
    .unwrap()
}

/// A cost of 0 that spends, an empty key, a key over the length limit, a cost above the
/// capacity and a limit the store cannot count: each answered with one error, the same from
/// every entry point (the public methods, a prepared site, stacked limits, the queue).
#[test]
fn every_entry_point_answers_a_bad_call_with_the_same_error() {
    let long = "k".repeat(ratelimit::MAX_KEY_LEN + 1);
    let cases: Vec<(&str, &str, Options)> = vec![
        ("cost 0", "k", Options::new().cost(0)),
        ("empty key", "", Options::new()),
        ("long key", &long, Options::new()),
        ("cost above capacity", "k", Options::new().cost(6)),
        (
            "unsupported quota",
            "k",
            Options::new().strategy(Strategy::TokenBucket),
        ),
    ];
    for (case, key, options) in cases {
        let service = service_on(Some(NoLog(MemoryStore::new())));
        let answers = entry_points(&service, key, &options);
        let (_, first) = &answers[0];
        let first = first.as_ref().expect_err(case);
        for (entry, answer) in &answers {
            assert_eq!(answer.as_ref().err(), Some(first), "{case}: {entry}");
        }
        // Nothing was spent by any of them.
        let status = service.status("k", &Options::new()).now_or_never().unwrap();
        assert_eq!(status.unwrap().remaining, 5, "{case}");
    }
    // And a good call is admitted by every entry point, each spending one.
    let service = service_on(None);
    let good = Options::new().limit(20).budget("good");
    let answers = entry_points(&service, "k", &good);
    assert!(answers.iter().all(|(_, a)| *a == Ok(true)), "{answers:?}");
    let spent = service.stats().by_method["good"].allowed;
    assert_eq!(spent, answers.len() as u64);
}

#[ratelimit::rate_limit(limit = 1, window = "1h")]
fn once_an_hour() -> Result<(), Error> {
    Ok(())
}

/// One fn, one thread, three services (two testing scopes and the running module): each
/// decides on its own state and counts in its own stats, however the calls interleave; a
/// site prepared under one never decides under another, and a module started after another
/// shut down prepares its own.
#[test]
fn scopes_and_modules_on_one_thread_never_share_a_prepared_site() {
    let exceeded = |r: Result<(), Error>| matches!(r, Err(Error::Exceeded(_)));
    let test_module = || {
        let builder = ratelimit::Module::builder();
        ratelimit::testing::TestModule::new(builder).unwrap()
    };
    let (a, b) = (test_module(), test_module());
    assert!(a.run(once_an_hour).is_ok());
    assert!(b.run(once_an_hour).is_ok());
    assert!(exceeded(a.run(once_an_hour)));
    let module = ratelimit::Module::builder()
        .clock(ManualClock::new(START))
        .init()
        .unwrap();
    assert!(once_an_hour().is_ok());
    assert!(exceeded(b.run(once_an_hour)));
    assert!(exceeded(once_an_hour()));
    a.clock().advance(Duration::from_secs(3_600));
    assert!(a.run(once_an_hour).is_ok());
    assert!(exceeded(once_an_hour()));
    let counts = |stats: ratelimit::Stats| {
        let c = stats.by_method.values().next().copied().unwrap();
        (c.allowed, c.denied)
    };
    assert_eq!(counts(a.stats()), (2, 1));
    assert_eq!(counts(b.stats()), (1, 1));
    assert_eq!(counts(module.stats()), (1, 2));
    // Shut down: refused, and a module started again decides on its own fresh state.
    drop(module);
    assert!(matches!(once_an_hour(), Err(Error::NotInitialized { .. })));
    let again = ratelimit::Module::builder()
        .clock(ManualClock::new(START))
        .init()
        .unwrap();
    assert!(once_an_hour().is_ok());
    assert!(exceeded(once_an_hour()));
    assert_eq!(counts(again.stats()), (1, 1));
}

/// A store is asked only what could be decided: a request that spends nothing, costs more
/// than the capacity, names an empty or oversized key, or a stacked one that names a key
/// twice, cannot be made, so no store (the crate's or a user's) decides what it means. A look
/// of cost 0 is the level, on every store the same.
#[test]
fn a_store_request_that_could_not_be_decided_cannot_be_made() {
    use ratelimit::store::{Check, Mode, StoreKey};
    let quota = Quota::per_second(5).unwrap();
    let now = START.as_nanos() as u64;
    assert!(matches!(StoreKey::new(""), Err(Error::InvalidKey { .. })));
    assert!(matches!(
        StoreKey::new(&"k".repeat(4097)),
        Err(Error::InvalidKey { .. })
    ));
    let key = StoreKey::new("user:1").unwrap();
    assert!(!format!("{key:?}").contains("user"), "keys are not printed");
    assert!(matches!(
        Request::spend(key, &quota, 0, now),
        Err(Error::ZeroCost)
    ));
    assert!(matches!(
        Request::new(key, &quota, 6, now, Mode::Look),
        Err(Error::CostAboveCapacity { .. })
    ));
    let other = StoreKey::new("user:2").unwrap();
    let twice = [
        Check {
            key,
            quota: &quota,
            cost: 1,
        },
        Check {
            key: other,
            quota: &quota,
            cost: 1,
        },
        Check {
            key,
            quota: &quota,
            cost: 1,
        },
    ];
    assert!(matches!(
        Stacked::new(&twice, now, Mode::Spend),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        Stacked::new(&twice[..2], now, Mode::Spend).map(|s| s.requests().count()),
        Ok(2)
    ));
    // Spend 2, then look at the level: 3 remain, and nothing more is spent by looking.
    let store = MemoryStore::new();
    let spend = Request::spend(key, &quota, 2, now).unwrap();
    assert!(store.decide(spend).now_or_never().unwrap().unwrap().allowed);
    let level = Request::look(key, &quota, 0, now).unwrap();
    for _ in 0..2 {
        let d = store.decide(level).now_or_never().unwrap().unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 3);
    }
    let _: Decision = store.decide_now(spend).unwrap().unwrap();
    assert_eq!(store.decide_now(level).unwrap().unwrap().remaining, 1);
}

/// A store that never answers: a Redis whose reply has not come.
struct Stalled;

impl Store for Stalled {
    async fn decide(&self, _: Request<'_>) -> Result<Decision, Error> {
        std::future::pending().await
    }
    async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        std::future::pending().await
    }
    async fn reset(&self, _: &str) -> Result<bool, Error> {
        Ok(false)
    }
}

/// A caller that gives up while the store decides (a client that disconnected, a timeout
/// around the call) was in no count, though the store may have spent the call: it is counted
/// once, as abandoned, in every scope the call counts in; and a call the store answered is
/// never counted abandoned.
#[test]
fn a_call_given_up_while_the_store_decides_is_counted_once_as_abandoned() {
    let clock = Arc::new(ManualClock::new(START));
    let config = Config::builder().default_limit(5).build().unwrap();
    let stalled = RateLimitService::with_store(config, Stalled, clock).unwrap();
    let named = Options::new().budget("login");
    let prepared = Arc::new(stalled.prepare(&named).unwrap());
    assert!(stalled.consume("k", &named).now_or_never().is_none());
    assert!(prepared.consume("k").now_or_never().is_none());
    match prepared.try_consume("k") {
        ratelimit::Attempt::Pending(pending) => assert!(pending.consume().now_or_never().is_none()),
        ratelimit::Attempt::Decided(d) => panic!("a stalled store decided at once: {d:?}"),
    }
    // Looks spend nothing: not counted.
    assert!(stalled.status("k", &named).now_or_never().is_none());
    let limits = [("k", &named), ("k", &Options::new().budget("other"))];
    assert!(stalled.consume_all(&limits).now_or_never().is_none());
    let stats = stalled.stats();
    assert_eq!(stats.total.abandoned, 4);
    assert_eq!(stats.by_method["login"].abandoned, 4);
    assert_eq!(stats.by_method["other"].abandoned, 1);
    assert_eq!(
        (stats.total.allowed, stats.total.denied, stats.total.errors),
        (0, 0, 0)
    );

    // Answered: counted by its outcome, never as abandoned.
    let answering = service_on(Some(NoLog(MemoryStore::new())));
    let options = Options::new().limit(1).window(Duration::from_secs(60));
    assert!(
        answering
            .consume("k", &options)
            .now_or_never()
            .unwrap()
            .unwrap()
            .allowed
    );
    assert!(
        !answering
            .consume("k", &options)
            .now_or_never()
            .unwrap()
            .unwrap()
            .allowed
    );
    let total = answering.stats().total;
    assert_eq!((total.allowed, total.denied, total.abandoned), (1, 1, 0));
}
