//! Every entry point asks its store through one step (`service/ask.rs`: `ask_store`,
//! `ask_store_later`), which answers a call whose read or raise of the fleet's horizon record
//! failed unanswered by the store's failure policy, never by the store (issue 28). Without
//! Redis: a memory store that says it records the horizon, whose raises of it fail while a
//! flag is set, and which counts every spend it is asked to decide, under a [`Failover`]
//! with `FailurePolicy::Allow`. Each entry point spends a quota of its own (a raise due at
//! its first call), once while the raise fails (the policy's unlimited answer, nothing asked
//! of the store) and once after (the store's decision, one spend: the store is asked when
//! nothing failed). Redis' versions of these, with the fleet against its twin:
//! horizon_policy_answers_redis.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use ratelimit::store::{Horizon, Request, Stacked, Store};
use ratelimit::{
    Decision, Error, Failover, FailurePolicy, ManualClock, MemoryStore, Options, RateLimitService,
};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::{reload_to, Forward, Hooks, START};

/// Hooks on a memory store that records the fleet's horizon (in name: the record is always
/// empty), whose reads and raises of it fail while `failing`, counting the spends it decides.
#[derive(Clone)]
struct Failing {
    failing: Arc<AtomicBool>,
    spends: Arc<AtomicUsize>,
}

impl Failing {
    fn count(&self, spends: bool) {
        if spends {
            self.spends.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Hooks<MemoryStore> for Failing {
    async fn decide(&self, inner: &MemoryStore, request: Request<'_>) -> Result<Decision, Error> {
        self.count(request.spends());
        Store::decide(inner, request).await
    }
    fn decide_now(
        &self,
        inner: &MemoryStore,
        request: Request<'_>,
    ) -> Option<Result<Decision, Error>> {
        self.count(request.spends());
        Store::decide_now(inner, request)
    }
    async fn decide_all(
        &self,
        inner: &MemoryStore,
        stacked: Stacked<'_>,
    ) -> Result<Vec<Decision>, Error> {
        self.count(stacked.spends());
        Store::decide_all(inner, stacked).await
    }
    fn decide_all_now(
        &self,
        inner: &MemoryStore,
        stacked: Stacked<'_>,
    ) -> Option<Result<Vec<Decision>, Error>> {
        self.count(stacked.spends());
        Store::decide_all_now(inner, stacked)
    }
    fn records_horizon(&self, _: &MemoryStore) -> bool {
        true
    }
    async fn horizon(&self, _: &MemoryStore, _: &str, _: Horizon) -> Result<Horizon, Error> {
        match self.failing.load(Ordering::SeqCst) {
            true => Err(Error::Store {
                message: "the horizon record is out of reach".into(),
            }),
            false => Ok(Horizon::default()),
        }
    }
}

/// A service on tier `"a"` (a bucket of 15) over a [`Failing`] store under `Allow`,
/// reloaded to tier `"b"` (the limit moved: a call then holds the old state too) where
/// `moved`; the store's failing flag and its count of spends.
fn service(moved: bool) -> (RateLimitService, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let (failing, spends) = (Arc::default(), Arc::default());
    let hooks = Failing {
        failing: Arc::clone(&failing),
        spends: Arc::clone(&spends),
    };
    let store = Forward::new(MemoryStore::new(), hooks);
    let store = Failover::new(store, FailurePolicy::Allow);
    let clock = Arc::new(ManualClock::new(START));
    let config = bucket("a").build().unwrap();
    let service = RateLimitService::with_store(config, store, clock).unwrap();
    if moved {
        reload_to(&service, bucket("b"));
    }
    (service, failing, spends)
}

/// A quota of the call's own (a token a minute): its first spend raises the record first.
fn own() -> Options {
    Options::new().refill(1)
}

type Call<'a> = Pin<Box<dyn Future<Output = Result<Vec<Decision>, Error>> + 'a>>;

/// Runs `call` on a fresh service (moved or not) while the raise fails, then once it does
/// not: the policy's answer (`Allow`: unlimited) with no spend asked of the store, then the
/// store's own decisions (spends asked of it).
async fn answered_by_the_policy(
    name: &str,
    moved: bool,
    call: impl for<'a> Fn(&'a RateLimitService) -> Call<'a>,
) {
    let (service, failing, asked) = service(moved);
    failing.store(true, Ordering::SeqCst);
    let decided = call(&service)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        decided.iter().all(|d| d.allowed && d.limit == u64::MAX),
        "{name} (moved: {moved}): not the policy's answer: {decided:?}"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "{name}: the store was asked"
    );
    failing.store(false, Ordering::SeqCst);
    let decided = call(&service)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        decided.iter().all(|d| d.allowed && d.limit != u64::MAX),
        "{name} (moved: {moved}): the store was not asked: {decided:?}"
    );
    assert!(
        asked.load(Ordering::SeqCst) > 0,
        "{name}: nothing asked of the store"
    );
}

fn one(decided: Result<Decision, Error>) -> Result<Vec<Decision>, Error> {
    decided.map(|d| vec![d])
}

#[tokio::test]
async fn every_entry_point_whose_raise_fails_is_answered_by_the_policy() {
    for moved in [false, true] {
        answered_by_the_policy("consume", moved, |s| {
            Box::pin(async move { one(s.consume("k", &own()).await) })
        })
        .await;
        answered_by_the_policy("enforce", moved, |s| {
            Box::pin(async move { one(s.enforce("k", &own()).await) })
        })
        .await;
        answered_by_the_policy("spend", moved, |s| {
            Box::pin(async move { one(s.spend("k", &own()).await.map(|s| s.into_decision())) })
        })
        .await;
        answered_by_the_policy("prepared consume", moved, |s| {
            Box::pin(async move {
                let prepared = s.prepare(&own())?;
                one(prepared.consume("k").await)
            })
        })
        .await;
        answered_by_the_policy("prepared spend", moved, |s| {
            Box::pin(async move {
                let prepared = s.prepare(&own())?;
                one(prepared.spend("k").await.map(|s| s.into_decision()))
            })
        })
        .await;
        answered_by_the_policy("until_ready", moved, |s| {
            Box::pin(async move {
                let deadline = Instant::now() + Duration::from_secs(5);
                one(s.until_ready("k", &own(), deadline).await)
            })
        })
        .await;
        answered_by_the_policy("consume_all", moved, |s| {
            Box::pin(async move {
                let per_hour = own().budget("hourly").window(Duration::from_secs(3600));
                s.consume_all(&[("k", &own()), ("k", &per_hour)]).await
            })
        })
        .await;
        // A shadow limit is asked on its own, after the enforced ones (`ask_stacked`).
        answered_by_the_policy("consume_all with a shadow limit", moved, |s| {
            Box::pin(async move {
                let shadow = own().budget("shadowed").shadow(true);
                s.consume_all(&[("k", &own()), ("k", &shadow)]).await
            })
        })
        .await;
    }
}
