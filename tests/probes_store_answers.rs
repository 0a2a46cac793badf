//! helper-57's probes of a `Store` written only against the public API whose answers are of
//! the wrong shape for the question asked: an admission under a limit larger than the quota's
//! capacity, or under another window. A stacked call refused such an answer as an error
//! (`stacked.rs`, `fold`: each decision under its check's quota); a single call through every
//! other entry point (`consume`, a prepared site, annotated fns async and sync) handed it on,
//! and now answers it with the same error (`Decision::is_under`). The store decides honestly (the memory store's answers)
//! and only rewrites the numbers of its admissions, so no call here is admitted beyond the
//! limit either way: what is at stake is a store's word handed on as fact (the limit and
//! window an HTTP answer reports, a decision read as the quota's).

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, ManualClock, MemoryStore, Module, Options,
    RateLimitService, StoreConfig,
};
use ratelimit_tests::{clock, now};

/// The memory store's answers, each admission rewritten by `mangle`.
struct Mangling {
    store: MemoryStore,
    mangle: fn(&mut Decision),
}

impl Mangling {
    fn new(mangle: fn(&mut Decision)) -> Self {
        Mangling {
            store: MemoryStore::new(),
            mangle,
        }
    }

    fn answer(&self, mut decision: Decision) -> Decision {
        if decision.allowed {
            (self.mangle)(&mut decision);
        }
        decision
    }
}

impl Store for Mangling {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.store.decide(request).await.map(|d| self.answer(d))
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        let decided = self.store.decide_now(request)?;
        Some(decided.map(|d| self.answer(d)))
    }

    fn decides_at_once(&self) -> bool {
        true
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let decided = self.store.decide_all(stacked).await?;
        Ok(decided.into_iter().map(|d| self.answer(d)).collect())
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.store, key).await
    }
}

/// Admissions reporting a limit of 1,000 (999 left) whatever the quota.
fn larger_limit(d: &mut Decision) {
    d.limit = 1_000;
    d.remaining = 999;
}

/// Admissions reporting a window of a day whatever the quota.
fn another_window(d: &mut Decision) {
    d.window = Duration::from_secs(86_400);
}

fn unexpected<T: std::fmt::Debug>(what: &str, got: Result<T, Error>) -> Option<String> {
    (!matches!(got, Err(Error::UnexpectedState { .. }))).then(|| format!("{what}: {got:?}"))
}

/// A service of 2 a minute on the store.
fn served(mangle: fn(&mut Decision)) -> (RateLimitService, ManualClock) {
    let clock = clock();
    let config = Config::builder()
        .default_limit(2)
        .default_window(Duration::from_secs(60))
        .store(StoreConfig::custom(Mangling::new(mangle)))
        .build()
        .unwrap();
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

#[rate_limit(limit = 2, window = "1m", key = user)]
async fn answered_async(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user)]
fn answered_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Every entry point's first call on a fresh key (an admission the store rewrites): what was
/// not the state error.
fn every_entry_point(mangle: fn(&mut Decision)) -> Vec<String> {
    let (service, _clock) = served(mangle);
    let plain = Options::new();
    let prepared = service.prepare(&plain).unwrap();
    let stacked = Options::new().budget("other");
    let module = TestModule::new(
        Module::builder()
            .clock(clock())
            .store(StoreConfig::custom(Mangling::new(mangle))),
    )
    .unwrap();
    [
        unexpected("consume", now(service.consume("a", &plain))),
        unexpected("consume_now", service.consume_now("b", &plain).unwrap()),
        unexpected("prepared", now(prepared.consume("c"))),
        unexpected("prepared now", prepared.consume_now("d").unwrap()),
        unexpected(
            "stacked",
            now(service.consume_all(&[("e", &plain), ("e", &stacked)])),
        ),
        unexpected("async fn", now(module.scope(answered_async("f")))),
        unexpected("sync fn", module.run(|| answered_sync("g"))),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// An admission under a limit of 1,000 on a quota of 2: what a stacked call refuses as an
/// answer to another question, handed on by every single-call entry point as the decision
/// (`X-RateLimit-Limit: 1000`, `Remaining: 999` under a limit of 2).
#[test]
fn an_admission_under_a_larger_limit_than_its_quota_is_an_error_on_every_entry_point() {
    let failed = every_entry_point(larger_limit);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The same for an admission under another window.
#[test]
fn an_admission_under_another_window_than_its_quota_is_an_error_on_every_entry_point() {
    let failed = every_entry_point(another_window);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The stacked call refuses both answers, and a single call admits nothing on the store's
/// word: each of its admissions is the same error (handed on, they were 2, the quota's).
#[test]
fn a_stacked_call_refuses_an_admission_under_another_quota_and_no_entry_point_admits_more() {
    for mangle in [larger_limit as fn(&mut Decision), another_window] {
        let (service, _clock) = served(mangle);
        let (plain, other) = (Options::new(), Options::new().budget("other"));
        let got = now(service.consume_all(&[("e", &plain), ("e", &other)]));
        assert!(matches!(got, Err(Error::UnexpectedState { .. })), "{got:?}");
        let answers: Vec<_> = (0..5).map(|_| now(service.consume("k", &plain))).collect();
        let errors = answers
            .iter()
            .filter(|a| matches!(a, Err(Error::UnexpectedState { .. })))
            .count();
        let admitted = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(|d| d.allowed))
            .count();
        assert_eq!((admitted, errors), (0, 2), "{answers:?}");
    }
}
