//! An annotated fn's admitted call is told bare by the store (`Told::Admitted`: admitted, its
//! decision not made), since the fn never shows it; everything else is the decision, as for
//! every other caller. These tests hold what that shortcut must not change: the counts, a
//! refusal's decision, and the decision every caller that shows it gets.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Told};
use ratelimit::{
    Config, Decision, Error, ManualClock, MemoryStore, Options, RateLimitService, StoreConfig,
};
use ratelimit_tests::{Forward, Hooks, START};

/// The memory store, except that it tells every call decided at once through the service's
/// hidden seam (`decide_now_told`) as a bare admission, refused or not; it carries, blocks,
/// adjusts and gives back nothing, and decides stacked calls by awaiting them.
#[derive(Clone, Copy, Default)]
struct Bare;

type TellsBare = Forward<MemoryStore, Bare>;

impl Hooks<MemoryStore> for Bare {
    fn decide_now_told(
        &self,
        _: &MemoryStore,
        _: Request<'_>,
        _: Option<NonZeroU64>,
    ) -> Option<Told> {
        Some(Told::Admitted)
    }

    fn decide_all_now(
        &self,
        _: &MemoryStore,
        _: Stacked<'_>,
    ) -> Option<Result<Vec<Decision>, Error>> {
        None
    }

    fn refunds(&self, _: &MemoryStore) -> bool {
        false
    }

    fn adjusts(&self, _: &MemoryStore) -> bool {
        false
    }

    fn blocks(&self, _: &MemoryStore) -> bool {
        false
    }

    fn carries(&self, _: &MemoryStore) -> bool {
        false
    }
}

fn config(limit: u64) -> Config {
    Config::builder().default_limit(limit).build().unwrap()
}

/// A caller that returns the decision (`consume`, `consume_now`, a prepared site) is never
/// told a bare admission, whatever the store tells annotated fns: each gets the decision
/// itself, counted once as admitted.
#[test]
fn a_caller_that_shows_its_decision_is_never_told_a_bare_admission() {
    let clock = Arc::new(ManualClock::new(START));
    let service = RateLimitService::with_store(config(5), TellsBare::default(), clock).unwrap();
    let options = Options::new();
    let prepared = service.prepare(&options).unwrap();
    let decisions = [
        service.consume_now("u", &options).expect("decided at once"),
        futures::executor::block_on(service.consume("u", &options)),
        prepared.consume_now("u").expect("decided at once"),
    ];
    for (decided, left) in decisions.into_iter().zip([4, 3, 2]) {
        let decision = decided.unwrap();
        assert!(decision.allowed);
        assert_eq!((decision.limit, decision.remaining), (5, left));
    }
    let counts = service.stats().total;
    assert_eq!((counts.allowed, counts.errors), (3, 0), "{counts:?}");
}

/// The same store under an annotated fn: its bare admissions are the fn's admissions, each
/// counted once (the store's word, as any decision of a store is).
#[test]
fn an_annotated_fn_told_bare_admissions_counts_each_once() {
    let builder = ratelimit::Module::builder().store(StoreConfig::custom(TellsBare::default()));
    let module = ratelimit::testing::TestModule::new(builder).unwrap();
    for _ in 0..3 {
        assert!(futures::executor::block_on(module.scope(bare("u"))).is_ok());
    }
    let counts = module.stats().total;
    assert_eq!((counts.checks, counts.allowed), (3, 3), "{counts:?}");
}

#[ratelimit::rate_limit(limit = 2, window = "1m", key = user)]
async fn bare(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[ratelimit::rate_limit(limit = 2, window = "1m", key = user)]
fn bare_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// On the memory store, an annotated fn's admitted calls are told bare: each is counted as
/// admitted exactly once, and the refusal after them carries its whole decision (limit,
/// window, remaining, retry_after), as before the shortcut.
#[test]
fn annotated_admissions_told_bare_are_counted_and_a_refusal_carries_its_decision() {
    let module = ratelimit::testing::TestModule::new(ratelimit::Module::builder()).unwrap();
    let run = |user| futures::executor::block_on(module.scope(bare(user)));
    for _ in 0..2 {
        assert!(run("u").is_ok());
        assert!(module.run(|| bare_sync("u")).is_ok());
    }
    for refused in [run("u"), module.run(|| bare_sync("u"))] {
        let Err(Error::Exceeded(exceeded)) = refused else {
            panic!("{refused:?}");
        };
        let decision = &exceeded.decision;
        assert!(!decision.allowed);
        assert_eq!((decision.limit, decision.remaining), (2, 0));
        assert_eq!(decision.window, Duration::from_secs(60));
        let wait = decision
            .retry_after
            .expect("a refusal says how long to wait");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
    }
    let counts = module.stats().total;
    assert_eq!(
        (counts.checks, counts.allowed, counts.denied, counts.errors),
        (6, 4, 2, 0),
        "{counts:?}"
    );
}
