//! helper-108's probes of the one step through which the service asks its store for a
//! decision (`service/ask.rs`), on the entry points `policy_answers_one_step` does not take:
//! annotated fns, async and sync, on a store that decides at once and records the fleet's
//! horizon (a store of one's own; `records_horizon` is public). Without Redis: a memory
//! store that says it records the horizon (the record always empty), whose reads and raises
//! of it fail while a flag is set, counting the spends it decides and the reads and raises
//! of the record it is asked for, under a [`Failover`] with `FailurePolicy::Allow`.
//!
//! A sync fn's call neither read nor raised the record (`enforce_sync` asked the store
//! straight away), where an async fn's call at the same instant raised it first, or, the
//! raise failing, was answered by the policy, nothing asked of the store: the sync fn's
//! state was written past the record, and asked of the store while its raise or read
//! failed. Now it reads and raises it as the async fn's call does, polled once (refused as
//! waiting where the store's read or raise is pending).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use ratelimit::store::{Horizon, Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Decision, Error, Failover, FailurePolicy, MemoryStore, Module, StoreConfig,
};

/// A memory store that records the fleet's horizon (in name: the record is always empty),
/// whose reads and raises of it fail while `failing`, counting the spends it decides and
/// the record's reads and raises it is asked for.
#[derive(Clone, Default)]
struct Failing {
    inner: MemoryStore,
    failing: Arc<AtomicBool>,
    spends: Arc<AtomicUsize>,
    records: Arc<AtomicUsize>,
}

impl Failing {
    fn count(&self, spends: bool) {
        if spends {
            self.spends.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Store for Failing {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.count(request.spends());
        Store::decide(&self.inner, request).await
    }
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.count(request.spends());
        Store::decide_now(&self.inner, request)
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.count(stacked.spends());
        Store::decide_all(&self.inner, stacked).await
    }
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        self.count(stacked.spends());
        Store::decide_all_now(&self.inner, stacked)
    }
    fn decides_at_once(&self) -> bool {
        true
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.inner, key).await
    }
    fn records_horizon(&self) -> bool {
        true
    }
    // In memory: never connects, never loses what it recorded (else the trait's default,
    // a raise before every spend of a quota of a call's own).
    fn connects_first(&self) -> bool {
        false
    }
    async fn horizon(&self, _: &str, _: Horizon) -> Result<Horizon, Error> {
        self.records.fetch_add(1, Ordering::SeqCst);
        match self.failing.load(Ordering::SeqCst) {
            true => Err(Error::Store {
                message: "the horizon record is out of reach".into(),
            }),
            false => Ok(Horizon::default()),
        }
    }
}

// A window of the fn's own (an hour, where the configuration counts a minute): its first
// spend raises the record first.
#[rate_limit(limit = 5, window = "1h", key = user)]
async fn own_async(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 5, window = "1h", key = user)]
fn own_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A module over a [`Failing`] store under `Allow`, a default of 10 a minute.
fn module() -> (TestModule, Failing) {
    let store = Failing::default();
    let failover = Failover::new(store.clone(), FailurePolicy::Allow);
    let builder = Module::builder()
        .default_limit(10)
        .default_window("1m")
        .store(StoreConfig::custom(failover));
    (TestModule::new(builder).unwrap(), store)
}

/// The async fn, for comparison: its raise fails, the policy answers (admitted), nothing
/// asked of the store; once the raise succeeds, the record raised before the spend.
#[tokio::test]
async fn an_async_fn_of_its_own_window_whose_raise_fails_is_answered_by_the_policy() {
    let (module, store) = module();
    store.failing.store(true, Ordering::SeqCst);
    module.scope(own_async("a")).await.unwrap();
    assert_eq!(
        store.spends.load(Ordering::SeqCst),
        0,
        "the store was asked"
    );
    assert_eq!(store.records.load(Ordering::SeqCst), 1, "one raise tried");
    store.failing.store(false, Ordering::SeqCst);
    module.scope(own_async("a")).await.unwrap();
    assert_eq!(store.records.load(Ordering::SeqCst), 2, "raised before");
    assert_eq!(store.spends.load(Ordering::SeqCst), 1);
}

/// A sync fn of its own window whose raise fails: answered by the policy (`Allow`), never
/// asked of the store, as the async fn's call.
#[test]
fn a_sync_fns_call_whose_raise_fails_is_answered_by_the_policy() {
    let (module, store) = module();
    store.failing.store(true, Ordering::SeqCst);
    module.run(|| own_sync("s")).unwrap();
    assert_eq!(store.records.load(Ordering::SeqCst), 1, "one raise tried");
    assert_eq!(
        store.spends.load(Ordering::SeqCst),
        0,
        "the store was asked for a sync fn's call whose raise failed"
    );
}

/// A sync fn of its own window: the record raised before its state is written, once (then
/// known recorded), each call decided by the store.
#[test]
fn a_sync_fns_call_of_its_own_window_raises_the_record_first() {
    let (module, store) = module();
    for calls in 1..=3 {
        module.run(|| own_sync("s")).unwrap();
        let (spends, records) = (
            store.spends.load(Ordering::SeqCst),
            store.records.load(Ordering::SeqCst),
        );
        assert_eq!(
            (spends, records),
            (calls, 1),
            "the record raised before the spend"
        );
    }
}

#[rate_limit(key = user)]
fn configured_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A sync fn of the configured limit, after a reload that moved it, once a read of the
/// record is due (past the old window) and fails: answered by the policy, never asked of
/// the store (as an async call, which reads first).
#[test]
fn a_sync_fns_call_whose_read_fails_is_answered_by_the_policy() {
    let (module, store) = module();
    module.run(|| configured_sync("r")).unwrap();
    let moved = ratelimit::Config::builder()
        .default_limit(20)
        .default_window(std::time::Duration::from_secs(120));
    ratelimit_tests::reload_to(module.service(), moved);
    module.clock().advance(std::time::Duration::from_secs(61));
    store.failing.store(true, Ordering::SeqCst);
    let (spends, records) = (
        store.spends.load(Ordering::SeqCst),
        store.records.load(Ordering::SeqCst),
    );
    module.run(|| configured_sync("r")).unwrap();
    assert!(store.records.load(Ordering::SeqCst) > records, "no read");
    assert_eq!(
        store.spends.load(Ordering::SeqCst),
        spends,
        "the store was asked for a sync fn's call whose read failed"
    );
}
