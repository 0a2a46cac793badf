//! helper-50's probes of the pipeline's shortcuts of 2026-12-06 (second session), attacked
//! from outside through the public API with a hand-driven clock:
//!
//! 1. a site lent by copy to the out-of-line steps (`Site::lent`): refusals, errors,
//!    transitions and shadow limits must see the same site as the inline step (budget, tier,
//!    policy, counters), with exact statistics;
//! 2. a tier named only where there is one (`settle`): a store of one's own naming a tier,
//!    with and without tiers in the configuration, on every entry point;
//! 3. an annotated async fn's refusal boxed: the error whole, each kind counted once;
//! 4. the budget's and policy's names read where needed (`Site::budget`, `Site::policy`);
//! 5. `Held`'s own `Drop`: calls (and errors) during transitions, counted exactly;
//! 6. errors made only where returned (`NoLimit`, `SyncOnWaitingStore`);
//! 7. a reload keeping a replaced configuration for calls' own windows (`Options::window`).
//!
//! Sliding-log windows of an hour: nothing turns unless the clock is moved on purpose.
//!
//! 1 to 6 held. 7 had a way through, fixed: a replaced configuration was kept past the last 8
//! only for the own windows of calls worked out *under it*, though calls with their own
//! window made under later configurations are held to it as long: a ninth reload dropped it
//! (1 admitted over its quota; 3 for a tight configuration no call ran under). The longest
//! own window is now one for the service (`service/mod.rs`, `Generation::own_windows`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Attempt, Config, ConfigBuilder, Counts, Decision, Error, MemoryStore, Module,
    Options, RateLimitService, StoreConfig,
};
use ratelimit_tests::hourly::{admitted_now, admitted_per_call, limit, reload, tier};
use ratelimit_tests::{now as block_on, on_its_store, service};

const HOUR: Duration = Duration::from_secs(3_600);
const MINUTE: Duration = Duration::from_secs(60);

/// (checks, allowed, denied, errors, shadowed) of `counts`.
fn five(c: &Counts) -> (u64, u64, u64, u64, u64) {
    (c.checks, c.allowed, c.denied, c.errors, c.shadowed)
}

/// The counts of tier `name` (all zero when absent).
fn by_tier(service: &RateLimitService, name: &str) -> (u64, u64, u64, u64, u64) {
    five(
        &service
            .stats()
            .by_tier
            .get(name)
            .copied()
            .unwrap_or_default(),
    )
}

/// The counts of budget `name` (all zero when absent).
fn by_method(service: &RateLimitService, name: &str) -> (u64, u64, u64, u64, u64) {
    five(
        &service
            .stats()
            .by_method
            .get(name)
            .copied()
            .unwrap_or_default(),
    )
}

/// The refusal in `r`: its decision's tier, the budget and the policy named.
fn refusal<T: std::fmt::Debug>(
    r: Result<T, Error>,
) -> (Option<String>, Option<String>, Option<String>) {
    match r {
        Err(Error::Exceeded(e)) => {
            assert!(!e.decision.allowed);
            assert!(e.decision.retry_after.is_some());
            (
                e.decision.tier.as_deref().map(str::to_owned),
                e.budget,
                e.policy,
            )
        }
        other => panic!("not a refusal: {other:?}"),
    }
}

fn s(name: &str) -> Option<String> {
    Some(name.to_owned())
}

// ---------------------------------------------------------------------------------------
// A store of one's own that names a tier of its own on every decision, and one that fails
// or stops deciding at once.
// ---------------------------------------------------------------------------------------

/// The memory store's decisions, each naming the tier "rogue": the service must name the
/// site's tier instead (or none), never hand the store's on.
#[derive(Clone, Default)]
struct Naming {
    store: Arc<MemoryStore>,
    /// When set, nothing is decided at once, and `decides_at_once` says so.
    waits: Arc<AtomicBool>,
    /// When set, every decision is a store error, nothing spent.
    fails: Arc<AtomicBool>,
}

impl Naming {
    fn name(&self, d: Result<Decision, Error>) -> Result<Decision, Error> {
        if self.fails.load(Ordering::SeqCst) {
            return Err(Error::Store {
                message: "down".into(),
            });
        }
        d.map(|mut d| {
            d.tier = Some(Arc::from("rogue"));
            d
        })
    }
}

impl Store for Naming {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        if self.fails.load(Ordering::SeqCst) {
            return self.name(Ok(Decision::unlimited(0)));
        }
        let d = Store::decide(&*self.store, request).await;
        self.name(d)
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        if self.fails.load(Ordering::SeqCst) {
            return self.name(Ok(Decision::unlimited(0))).map(|d| vec![d]);
        }
        let ds = Store::decide_all(&*self.store, stacked).await?;
        ds.into_iter().map(|d| self.name(Ok(d))).collect()
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&*self.store, key).await
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        if self.waits.load(Ordering::SeqCst) {
            return None;
        }
        if self.fails.load(Ordering::SeqCst) {
            return Some(self.name(Ok(Decision::unlimited(0))));
        }
        Some(self.name(Store::decide_now(&*self.store, request)?))
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        if self.waits.load(Ordering::SeqCst) {
            return None;
        }
        if self.fails.load(Ordering::SeqCst) {
            return Some(self.name(Ok(Decision::unlimited(0))).map(|d| vec![d]));
        }
        let ds = match Store::decide_all_now(&*self.store, stacked)? {
            Ok(ds) => ds,
            Err(e) => return Some(Err(e)),
        };
        Some(ds.into_iter().map(|d| self.name(Ok(d))).collect())
    }

    fn decides_at_once(&self) -> bool {
        !self.waits.load(Ordering::SeqCst)
    }
}

fn naming_service(config: ConfigBuilder, store: Naming) -> RateLimitService {
    RateLimitService::with_store(
        config.build().unwrap(),
        store,
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// 1. The site lent to the out-of-line steps.
// ---------------------------------------------------------------------------------------

/// A prepared site with a budget and a tier: its refusal (out of line, on a copy of the site)
/// names the same budget, policy and tier as its admissions are counted under; counted once
/// each, per tier and per budget.
#[test]
fn a_prepared_refusal_names_and_counts_the_same_budget_and_tier_as_its_admissions() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 2)).build().unwrap());
    let site = service
        .prepare(&Options::new().tier("gold").budget("search"))
        .unwrap();
    assert_eq!(admitted_now(&site, "k", 2), 2);
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (s("gold"), s("search"), s("search"))
    );
    let d = site.consume_now("k").unwrap().unwrap();
    assert_eq!((d.allowed, d.tier.as_deref()), (false, Some("gold")));
    assert_eq!(by_tier(&service, "gold"), (4, 2, 2, 0, 0));
    assert_eq!(by_method(&service, "search"), (4, 2, 2, 0, 0));
    assert_eq!(five(&service.stats().total), (4, 2, 2, 0, 0));
}

/// The same through per-call options: the refusal names the options' budget and policy.
#[test]
fn a_per_call_refusal_names_its_own_options_budget_and_policy() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 1)).build().unwrap());
    let options = Options::new().tier("gold").budget("b");
    assert_eq!(admitted_per_call(&service, "k", &options, 1), 1);
    assert_eq!(
        refusal(block_on(service.enforce("k", &options))),
        (s("gold"), s("b"), s("b"))
    );
    // Without a budget (a budget of its own): none named, the tier still.
    let plain = Options::new().tier("gold");
    assert_eq!(admitted_per_call(&service, "k", &plain, 1), 1);
    assert_eq!(
        refusal(block_on(service.enforce("k", &plain))),
        (s("gold"), None, None)
    );
    assert_eq!(by_tier(&service, "gold"), (4, 2, 2, 0, 0));
    assert_eq!(by_method(&service, "b"), (2, 1, 1, 0, 0));
}

/// Errors made out of line (a bad key, a cost above capacity) at a prepared site and per
/// call: each counted once as an error, in the site's tier and budget, nothing spent.
#[test]
fn errors_at_every_entry_point_are_counted_once_in_the_sites_tier_and_budget() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 2)).build().unwrap());
    let options = Options::new().tier("gold").budget("e");
    let site = service.prepare(&options).unwrap();
    assert!(matches!(
        site.consume_now(""),
        Some(Err(Error::InvalidKey { .. }))
    ));
    assert!(matches!(
        block_on(site.consume("")),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        block_on(service.consume("", &options)),
        Err(Error::InvalidKey { .. })
    ));
    let costly = options.clone().cost(3);
    assert!(matches!(
        service.consume_now("k", &costly),
        Some(Err(Error::CostAboveCapacity {
            cost: 3,
            capacity: 2
        }))
    ));
    let costly_site = service.prepare(&costly).unwrap();
    assert!(matches!(
        costly_site.consume_now("k"),
        Some(Err(Error::CostAboveCapacity {
            cost: 3,
            capacity: 2
        }))
    ));
    assert_eq!(by_tier(&service, "gold"), (0, 0, 0, 5, 0));
    assert_eq!(by_method(&service, "e"), (0, 0, 0, 5, 0));
    // Nothing spent: the 2 are all there.
    assert_eq!(admitted_now(&site, "k", 3), 2);
}

/// A shadow tier: over its limit, calls are admitted, marked `shadowed` and counted as such
/// on every path (per call, at once, prepared, stacked), the tier named.
#[test]
fn a_shadow_tiers_calls_are_admitted_marked_and_counted_on_every_path() {
    let (service, _clock) = service(limit(100).tier(tier("dry", 1).shadow()).build().unwrap());
    let options = Options::new().tier("dry").budget("dry-run");
    let site = service.prepare(&options).unwrap();
    assert!(!site.consume_now("k").unwrap().unwrap().shadowed);
    for d in [
        block_on(service.consume("k", &options)).unwrap(),
        service.consume_now("k", &options).unwrap().unwrap(),
        site.consume_now("k").unwrap().unwrap(),
        block_on(site.enforce("k")).unwrap(),
        block_on(service.consume_all(&[("k", &options)]))
            .unwrap()
            .remove(0),
    ] {
        assert!(d.allowed && d.shadowed && d.retry_after.is_none());
        assert_eq!(d.tier.as_deref(), Some("dry"));
    }
    assert_eq!(by_tier(&service, "dry"), (6, 6, 0, 0, 5));
    assert_eq!(by_method(&service, "dry-run"), (6, 6, 0, 0, 5));
}

/// A loosening reload (2 -> 5) with a tier and a budget: calls of a prepared site and per
/// call are held to the old 2 for the old hour (the transition, out of line); the refusal
/// names the tier and budget; statistics exact. Then the hour passes: 5.
#[test]
fn a_loosening_reload_holds_every_entry_point_to_the_old_quota_with_the_same_names() {
    let (service, clock) = service(limit(100).tier(tier("gold", 2)).build().unwrap());
    let options = Options::new().tier("gold").budget("t");
    assert_eq!(admitted_per_call(&service, "k", &options, 1), 1);
    reload(&service, limit(100).tier(tier("gold", 5)));
    let site = service.prepare(&options).unwrap();
    assert_eq!(admitted_now(&site, "k", 3), 1);
    assert_eq!(admitted_per_call(&service, "k", &options, 2), 0);
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (s("gold"), s("t"), s("t"))
    );
    let d = service.consume_now("k", &options).unwrap().unwrap();
    assert_eq!((d.allowed, d.tier.as_deref()), (false, Some("gold")));
    assert_eq!(by_tier(&service, "gold"), (8, 2, 6, 0, 0));
    assert_eq!(by_method(&service, "t"), (8, 2, 6, 0, 0));
    clock.advance(HOUR + MINUTE);
    assert_eq!(admitted_now(&site, "k", 7), 5);
}

/// A reload that moves the window (1 h -> 2 h) and loosens: old and new states decided as
/// one, the refusal named after the site; calls that error (bad key, cost too high) during
/// it are errors counted once, and spend nothing on either state.
#[test]
fn a_reload_that_moves_the_window_decides_as_one_and_errors_spend_nothing() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 3)).build().unwrap());
    let options = Options::new().tier("gold").budget("m");
    assert_eq!(admitted_per_call(&service, "k", &options, 2), 2);
    reload(&service, limit(100).tier(tier("gold", 10).window(2 * HOUR)));
    let site = service.prepare(&options).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            site.consume_now(""),
            Some(Err(Error::InvalidKey { .. }))
        ));
        assert!(matches!(
            block_on(service.consume("k", &options.clone().cost(11))),
            Err(Error::CostAboveCapacity { .. })
        ));
    }
    assert_eq!(admitted_now(&site, "k", 1), 1);
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (s("gold"), s("m"), s("m"))
    );
    assert_eq!(admitted_per_call(&service, "k", &options, 3), 0);
    assert_eq!(by_tier(&service, "gold"), (7, 3, 4, 6, 0));
    assert_eq!(by_method(&service, "m"), (7, 3, 4, 6, 0));
}

// ---------------------------------------------------------------------------------------
// 2. The tier named only where there is one: a store that names its own.
// ---------------------------------------------------------------------------------------

/// Without tiers in the configuration, a store's own tier is never handed on: admissions and
/// refusals of every entry point name none.
#[test]
fn a_stores_own_tier_is_cleared_on_every_path_without_tiers() {
    let store = Naming::default();
    let service = naming_service(limit(3), store);
    let o = Options::new();
    let site = Arc::new(service.prepare(&o).unwrap());
    let mut decisions = vec![
        block_on(service.consume("k", &o)).unwrap(),
        service.consume_now("k", &o).unwrap().unwrap(),
        site.consume_now("k").unwrap().unwrap(),
        site.consume_now("k").unwrap().unwrap(),
        block_on(site.consume("k")).unwrap(),
        block_on(service.status("k", &o)).unwrap(),
    ];
    match site.try_consume("k") {
        Attempt::Decided(d) => decisions.push(d.unwrap()),
        Attempt::Pending(_) => panic!("decided at once"),
    }
    decisions.extend(block_on(service.consume_all(&[("j", &o), ("i", &o)])).unwrap());
    let allowed: Vec<bool> = decisions.iter().map(|d| d.allowed).collect();
    assert_eq!(
        allowed,
        [true, true, true, false, false, false, false, true, true]
    );
    for d in &decisions {
        assert_eq!(d.tier, None, "{d:?}");
    }
    let (_, _, policy) = refusal(block_on(service.enforce("k", &o)));
    assert_eq!(policy, None);
    let Err(Error::Exceeded(e)) = block_on(service.enforce("k", &o)) else {
        panic!()
    };
    assert_eq!(e.decision.tier, None);
}

/// With tiers, the site's tier replaces the store's on every path; a call on the default
/// limit (no tier) names none, though the store named "rogue".
#[test]
fn a_stores_own_tier_is_replaced_by_the_sites_on_every_path() {
    let store = Naming::default();
    let service = naming_service(limit(5).tier(tier("gold", 1)), store);
    let gold = Options::new().tier("gold");
    let site = Arc::new(service.prepare(&gold).unwrap());
    let plain = service.prepare(&Options::new()).unwrap();
    let ds = [
        site.consume_now("k").unwrap().unwrap(),
        site.consume_now("k").unwrap().unwrap(),
        block_on(service.consume("k", &gold)).unwrap(),
        service.consume_now("k", &gold).unwrap().unwrap(),
        block_on(service.consume_all(&[("k", &gold), ("k", &Options::new())]))
            .unwrap()
            .remove(0),
    ];
    assert_eq!(ds.iter().filter(|d| d.allowed).count(), 1);
    for d in &ds {
        assert_eq!(d.tier.as_deref(), Some("gold"), "{d:?}");
    }
    for d in [
        plain.consume_now("k").unwrap().unwrap(),
        block_on(service.consume("k", &Options::new())).unwrap(),
        block_on(service.consume_all(&[("j", &Options::new())]))
            .unwrap()
            .remove(0),
    ] {
        assert!(d.allowed);
        assert_eq!(d.tier, None, "{d:?}");
    }
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (s("gold"), None, None)
    );
    assert_eq!(by_tier(&service, "gold"), (6, 1, 5, 0, 0));
    assert_eq!(by_tier(&service, "rogue"), (0, 0, 0, 0, 0));
}

/// The store's tier on the awaited path (the store stops deciding at once) and during a
/// transition: still the site's.
#[test]
fn a_stores_own_tier_is_replaced_on_the_awaited_path_and_during_a_transition() {
    let store = Naming::default();
    let waits = Arc::clone(&store.waits);
    let service = naming_service(limit(5).tier(tier("gold", 2)), store);
    let gold = Options::new().tier("gold");
    assert!(block_on(service.consume("k", &gold)).unwrap().allowed);
    reload(&service, limit(5).tier(tier("gold", 4)));
    let site = service.prepare(&gold).unwrap();
    let ds = [
        site.consume_now("k").unwrap().unwrap(),
        site.consume_now("k").unwrap().unwrap(),
        block_on(service.consume("k", &Options::new())).unwrap(),
    ];
    assert_eq!(
        ds.iter()
            .map(|d| (d.allowed, d.tier.as_deref()))
            .collect::<Vec<_>>(),
        [(true, Some("gold")), (false, Some("gold")), (true, None)]
    );
    waits.store(true, Ordering::SeqCst);
    assert!(service.consume_now("k", &gold).is_none());
    assert!(site.consume_now("k").is_none());
    for d in [
        block_on(service.consume("k", &gold)).unwrap(),
        block_on(site.consume("k")).unwrap(),
    ] {
        assert_eq!((d.allowed, d.tier.as_deref()), (false, Some("gold")));
    }
    let d = block_on(service.consume("j", &Options::new())).unwrap();
    assert_eq!((d.allowed, d.tier.as_deref()), (true, None));
}

// ---------------------------------------------------------------------------------------
// 3. An annotated fn's refusal, boxed; its errors.
// ---------------------------------------------------------------------------------------

#[rate_limit(limit = 2, window = "1h", key = user, name = "lent-async")]
async fn probe_lent_async(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1h", key = user)]
fn probe_lent_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// `(allowed, denied, errors)` of `module`'s budget `name`.
fn ade(module: &TestModule, name: &str) -> (u64, u64, u64) {
    let stats = module.stats();
    let c = stats
        .by_method
        .iter()
        .find(|(k, _)| k.ends_with(name))
        .map(|(_, c)| *c)
        .unwrap_or_default();
    (c.allowed, c.denied, c.errors)
}

/// An annotated async fn's refusal is the whole decision (limit, nothing left, a wait), its
/// budget and policy the fn's name; counted once.
#[test]
fn an_annotated_async_refusal_carries_the_whole_decision_and_its_name() {
    let module = TestModule::new(Module::builder().default_limit(100)).unwrap();
    for _ in 0..2 {
        assert!(block_on(module.scope(probe_lent_async("u"))).is_ok());
    }
    let Err(Error::Exceeded(e)) = block_on(module.scope(probe_lent_async("u"))) else {
        panic!("the third call is refused")
    };
    assert_eq!(
        (e.decision.allowed, e.decision.limit, e.decision.remaining),
        (false, 2, 0)
    );
    assert_eq!(e.decision.window, HOUR);
    assert!(e
        .decision
        .retry_after
        .is_some_and(|w| w > Duration::ZERO && w <= HOUR));
    assert_eq!(e.budget.as_deref(), Some("lent-async"));
    assert_eq!(e.policy.as_deref(), Some("lent-async"));
    assert!(matches!(
        block_on(module.scope(probe_lent_async(""))),
        Err(Error::InvalidKey { .. })
    ));
    assert_eq!(ade(&module, "lent-async"), (2, 1, 1));
    assert_eq!(five(&module.stats().total), (3, 2, 1, 1, 0));
}

/// The sync fn's refusal too, and outside any module: `NotInitialized`, counted nowhere.
#[test]
fn an_annotated_sync_refusal_is_whole_and_no_module_is_not_initialized() {
    let module = TestModule::new(Module::builder().default_limit(100)).unwrap();
    assert_eq!(
        module.run(|| ratelimit_tests::tally(3, || probe_lent_sync("u"))),
        (2, 1)
    );
    let Err(Error::Exceeded(e)) = module.run(|| probe_lent_sync("u")) else {
        panic!()
    };
    assert_eq!((e.decision.limit, e.decision.remaining), (2, 0));
    assert!(e.budget.is_some_and(|b| b.ends_with("probe_lent_sync")));
    assert_eq!(e.policy, None);
    assert!(matches!(
        probe_lent_sync("u"),
        Err(Error::NotInitialized { function }) if function.ends_with("probe_lent_sync")
    ));
    assert!(matches!(
        block_on(probe_lent_async("u")),
        Err(Error::NotInitialized { .. })
    ));
    assert_eq!(ade(&module, "probe_lent_sync"), (2, 2, 0));
}

/// On a store of one's own that fails: the store's error, counted once as an error, for the
/// async and the sync fn; when it stops deciding at once: the async fn awaits it, the sync fn
/// is `SyncOnWaitingStore`, counted once.
#[test]
fn annotated_fns_on_a_failing_or_waiting_store_are_errors_counted_once() {
    let store = Naming::default();
    let (fails, waits) = (Arc::clone(&store.fails), Arc::clone(&store.waits));
    let module = TestModule::new(
        Module::builder()
            .default_limit(100)
            .store(StoreConfig::custom(store)),
    )
    .unwrap();
    fails.store(true, Ordering::SeqCst);
    assert!(matches!(
        block_on(module.scope(probe_lent_async("u"))),
        Err(Error::Store { .. })
    ));
    assert!(matches!(
        module.run(|| probe_lent_sync("u")),
        Err(Error::Store { .. })
    ));
    fails.store(false, Ordering::SeqCst);
    waits.store(true, Ordering::SeqCst);
    assert!(block_on(module.scope(probe_lent_async("u"))).is_ok());
    assert!(matches!(
        module.run(|| probe_lent_sync("u")),
        Err(Error::SyncOnWaitingStore { function }) if function.ends_with("probe_lent_sync")
    ));
    fails.store(true, Ordering::SeqCst);
    assert!(matches!(
        block_on(module.scope(probe_lent_async("u"))),
        Err(Error::Store { .. })
    ));
    assert_eq!(ade(&module, "lent-async"), (1, 0, 2));
    assert_eq!(ade(&module, "probe_lent_sync"), (0, 0, 2));
    assert_eq!(five(&module.stats().total), (1, 1, 0, 4, 0));
}

// ---------------------------------------------------------------------------------------
// 4. The budget's and policy's names.
// ---------------------------------------------------------------------------------------

/// Two prepared sites with different budgets on one key: two budgets, each refusal naming
/// its own, each counted in its own.
#[test]
fn two_prepared_budgets_on_one_key_are_named_and_counted_apart() {
    let (service, _clock) = service(limit(2).build().unwrap());
    let a = service.prepare(&Options::new().budget("a")).unwrap();
    let b = service.prepare(&Options::new().budget("b")).unwrap();
    assert_eq!(admitted_now(&a, "k", 3), 2);
    assert_eq!(admitted_now(&b, "k", 1), 1);
    assert_eq!(refusal(block_on(a.enforce("k"))), (None, s("a"), s("a")));
    assert_eq!(admitted_now(&b, "k", 1), 1);
    assert_eq!(refusal(block_on(b.enforce("k"))), (None, s("b"), s("b")));
    assert_eq!(by_method(&service, "a"), (4, 2, 2, 0, 0));
    assert_eq!(by_method(&service, "b"), (3, 2, 1, 0, 0));
}

/// A budget name of 1024 bytes is a budget; 1025 is `InvalidKey` everywhere (per call,
/// prepared, stacked), never a key cut short or a call let through.
#[test]
fn a_budget_name_one_byte_over_the_limit_is_an_invalid_key_everywhere() {
    let (service, _clock) = service(limit(1).build().unwrap());
    let at = "b".repeat(1024);
    let over = "b".repeat(1025);
    let ok = Options::new().budget(at.clone());
    let site = service.prepare(&ok).unwrap();
    assert_eq!(admitted_now(&site, "k", 2), 1);
    assert_eq!(
        refusal(block_on(site.enforce("k"))).1.as_deref(),
        Some(&*at)
    );
    let bad = Options::new().budget(over.clone());
    assert!(matches!(
        service.prepare(&bad),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        block_on(service.consume("k", &bad)),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        service.consume_now("k", &bad),
        Some(Err(Error::InvalidKey { .. }))
    ));
    assert!(matches!(
        block_on(service.consume_all(&[("k", &Options::new()), ("k", &bad)])),
        Err(Error::InvalidKey { .. })
    ));
    // Nothing spent by the stacked call on the plain budget.
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 2), 1);
    assert_eq!(by_method(&service, &at), (3, 1, 2, 0, 0));
}

/// A prepared site after a reload (no longer current, decided per call): its refusal still
/// names its budget and policy, counted in its budget.
#[test]
fn a_prepared_site_no_longer_current_names_its_budget() {
    let (service, _clock) = service(limit(3).build().unwrap());
    let site = service.prepare(&Options::new().budget("old")).unwrap();
    assert_eq!(admitted_now(&site, "k", 1), 1);
    reload(&service, limit(1));
    assert!(!site.is_current());
    assert_eq!(admitted_now(&site, "k", 1), 0);
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (None, s("old"), s("old"))
    );
    assert!(!block_on(site.consume("k")).unwrap().allowed);
    assert_eq!(by_method(&service, "old"), (4, 1, 3, 0, 0));
}

/// Stacked limits with budgets and a tier: a refusal by one limit counts it denied in its
/// own budget, nothing in the other's; the error names the refusing limit's budget.
#[test]
fn a_stacked_refusal_names_and_counts_the_refusing_limits_budget() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 5)).build().unwrap());
    let tight = Options::new().budget("tight").limit(1);
    let gold = Options::new().budget("wide").tier("gold");
    let both = [("k", &tight), ("k", &gold)];
    assert!(block_on(service.consume_all(&both))
        .unwrap()
        .iter()
        .all(|d| d.allowed));
    let ds = block_on(service.consume_all(&both)).unwrap();
    assert_eq!(
        ds.iter()
            .map(|d| (d.allowed, d.tier.as_deref()))
            .collect::<Vec<_>>(),
        [(false, None), (true, Some("gold"))]
    );
    let Err(Error::Exceeded(e)) = block_on(service.enforce_all(&both)) else {
        panic!()
    };
    assert_eq!(e.budget.as_deref(), Some("tight"));
    assert_eq!(by_method(&service, "tight"), (3, 1, 2, 0, 0));
    assert_eq!(by_method(&service, "wide"), (1, 1, 0, 0, 0));
    assert_eq!(by_tier(&service, "gold"), (1, 1, 0, 0, 0));
}

// ---------------------------------------------------------------------------------------
// 5. Held: many calls during transitions.
// ---------------------------------------------------------------------------------------

/// 3 loosening reloads and then 600 per-call calls with overrides (each holding a quota and
/// a transition in its `Held`), a third of them errors: exact counts, the old quota held.
#[test]
fn many_calls_during_transitions_are_counted_exactly_errors_included() {
    let (service, _clock) = service(limit(100).build().unwrap());
    let own = Options::new().budget("h").limit(50);
    assert_eq!(admitted_per_call(&service, "k", &own, 10), 10);
    for n in [200, 300, 400] {
        reload(&service, limit(n));
    }
    let (mut admitted, mut errors) = (0, 0);
    for i in 0..600 {
        let key = if i % 3 == 0 { "" } else { "k" };
        match block_on(service.consume(key, &own)) {
            Ok(d) => admitted += u64::from(d.allowed),
            Err(Error::InvalidKey { .. }) => errors += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((admitted, errors), (40, 200));
    assert_eq!(by_method(&service, "h"), (410, 50, 360, 200, 0));
}

// ---------------------------------------------------------------------------------------
// 6. Errors made where returned: no default limit.
// ---------------------------------------------------------------------------------------

/// A configuration without a default limit: plain calls (and options that override nothing
/// but the window or budget) are `NoLimit`, counted as errors; a limit of one's own decides.
#[test]
fn without_a_default_limit_every_call_is_no_limit_counted_as_an_error() {
    let (service, _clock) = service(
        Config::builder()
            .no_default_limit()
            .tier(tier("gold", 1))
            .build()
            .unwrap(),
    );
    let nothing = [
        Options::new(),
        Options::new().budget("n"),
        Options::new().window(HOUR),
        Options::new().cost(1),
    ];
    for o in &nothing {
        assert!(matches!(
            block_on(service.consume("k", o)),
            Err(Error::NoLimit)
        ));
        assert!(matches!(
            service.consume_now("k", o),
            Some(Err(Error::NoLimit))
        ));
        assert!(matches!(service.prepare(o), Err(Error::NoLimit)));
    }
    assert!(matches!(
        block_on(service.consume_all(&[("k", &Options::new().tier("gold")), ("k", &nothing[0])])),
        Err(Error::NoLimit)
    ));
    assert_eq!(
        admitted_per_call(&service, "k", &Options::new().limit(2), 3),
        2
    );
    let t = service.stats().total;
    assert_eq!((t.allowed, t.denied, t.errors), (2, 1, 9));
    assert_eq!(by_method(&service, "n"), (0, 0, 0, 2, 0));
}

// ---------------------------------------------------------------------------------------
// 7. A reload kept for calls' own windows.
// ---------------------------------------------------------------------------------------

/// The configuration the service started with (2 an hour) sees no call with a window of its
/// own. A reload loosens it (3); calls with their own two hours, made under the new
/// configuration, are held to the first's 2 for two hours since it was replaced, and spend
/// those 2. Past the first's configured hour, eight more reloads: the first is the ninth
/// kept, and kept only for windows calls were worked out with *under it* (none): dropped,
/// though calls with two hours are held to it for another hour.
#[test]
fn a_ninth_reload_does_not_drop_a_transition_later_calls_own_windows_are_held_to() {
    let (service, clock) = service(limit(2).build().unwrap());
    let own = Options::new().window(2 * HOUR);
    clock.advance(MINUTE);
    reload(&service, limit(3));
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 2);
    clock.advance(HOUR + MINUTE);
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
    for n in 4..=11 {
        clock.advance(MINUTE);
        reload(&service, limit(n));
    }
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
    let prepared = service.prepare(&own).unwrap();
    assert_eq!(admitted_now(&prepared, "k", 3), 0);
}

/// The same for a prepared site with its own window, prepared under the second
/// configuration and called throughout (never prepared again).
#[test]
fn a_prepared_own_window_keeps_the_transition_it_is_held_to() {
    let (service, clock) = service(limit(2).build().unwrap());
    let own = Options::new().window(2 * HOUR);
    clock.advance(MINUTE);
    reload(&service, limit(3));
    let prepared = service.prepare(&own).unwrap();
    assert_eq!(admitted_now(&prepared, "k", 3), 2);
    clock.advance(HOUR + MINUTE);
    for n in 4..=11 {
        clock.advance(MINUTE);
        reload(&service, limit(n));
    }
    assert_eq!(admitted_now(&prepared, "k", 3), 0);
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
}

/// Own windows reach the 64-in-force refusal: calls with two hours under each of 65
/// configurations, the reloads a minute apart but past every configured hour... A reload
/// that would drop one still held is refused (`InvalidConfig`, field `reload`); once the
/// first's own two hours have passed, the same reload is taken.
#[test]
fn own_windows_reach_the_in_force_refusal_and_it_lifts_once_they_pass() {
    let (service, clock) = service(limit(2).default_window(MINUTE).build().unwrap());
    let own = Options::new().window(2 * HOUR);
    let minute = |n: u64| limit(n).default_window(MINUTE);
    for n in 3..=66 {
        assert!(block_on(service.consume("k", &own)).is_ok());
        clock.advance(MINUTE);
        reload(&service, minute(n));
    }
    assert_eq!(service.stats().generation, 64);
    assert!(block_on(service.consume("k", &own)).is_ok());
    clock.advance(MINUTE);
    let refused = service.reload(on_its_store(&service, minute(67)));
    let Err(Error::InvalidConfig(e)) = refused else {
        panic!("the 65th reload held by own windows: {refused:?}");
    };
    assert_eq!(e.problems.len(), 1);
    assert_eq!(e.problems[0].0, "reload");
    assert_eq!(service.stats().generation, 64);
    // The first configuration's own two hours pass since it was replaced: taken.
    clock.advance(2 * HOUR - 64 * MINUTE);
    reload(&service, minute(67));
    assert_eq!(service.stats().generation, 65);
}

/// Without calls of their own window, the same 65 reloads a minute apart under a one-minute
/// window are all taken: own windows keep nothing they were not worked out with.
#[test]
fn without_own_windows_reloads_past_the_configured_window_are_taken() {
    let (service, clock) = service(limit(2).default_window(MINUTE).build().unwrap());
    let minute = |n: u64| limit(n).default_window(MINUTE);
    for n in 3..=80 {
        assert!(block_on(service.consume("k", &Options::new())).is_ok());
        clock.advance(MINUTE + Duration::from_secs(1));
        reload(&service, minute(n));
    }
    assert_eq!(service.stats().generation, 78);
}

/// A short own window (a minute, under a configured hour) keeps nothing longer: the 65th
/// loosening reload inside the hour is refused as before, and taken once the hour passes.
#[test]
fn a_short_own_window_neither_extends_nor_shortens_the_configured_hour() {
    let (service, clock) = service(limit(2).build().unwrap());
    let short = Options::new().window(MINUTE);
    for n in 3..=66 {
        assert!(block_on(service.consume("k", &short)).is_ok());
        clock.advance(Duration::from_secs(1));
        reload(&service, limit(n));
    }
    clock.advance(Duration::from_secs(1));
    assert!(matches!(
        service.reload(on_its_store(&service, limit(67))),
        Err(Error::InvalidConfig(_))
    ));
    clock.advance(HOUR);
    reload(&service, limit(67));
    assert_eq!(service.stats().generation, 65);
}

// ---------------------------------------------------------------------------------------
// More of 1, 2 and 7: the awaited half, a store failing during a transition, stacked own
// windows.
// ---------------------------------------------------------------------------------------

/// A store that must be awaited: a prepared site's `try_consume` begins (nothing spent) and
/// its `Pending` awaits; the decision and the refusal name the site's tier and budget (the
/// store named "rogue"), counted once each.
#[test]
fn the_awaited_half_names_and_counts_the_same_site_as_the_begun_half() {
    let store = Naming::default();
    store.waits.store(true, Ordering::SeqCst);
    let service = naming_service(limit(100).tier(tier("gold", 1)), store);
    let site = Arc::new(
        service
            .prepare(&Options::new().tier("gold").budget("p"))
            .unwrap(),
    );
    let mut ds = Vec::new();
    for _ in 0..2 {
        match site.try_consume("k") {
            Attempt::Pending(pending) => ds.push(block_on(pending.consume()).unwrap()),
            Attempt::Decided(d) => panic!("the store waits: {d:?}"),
        }
    }
    assert_eq!(
        ds.iter()
            .map(|d| (d.allowed, d.tier.as_deref()))
            .collect::<Vec<_>>(),
        [(true, Some("gold")), (false, Some("gold"))]
    );
    assert_eq!(
        refusal(block_on(site.enforce("k"))),
        (s("gold"), s("p"), s("p"))
    );
    assert_eq!(by_tier(&service, "gold"), (3, 1, 2, 0, 0));
    assert_eq!(by_method(&service, "p"), (3, 1, 2, 0, 0));
}

/// The store fails while a reload that moved the window holds calls to the old state
/// (decided as one, out of line): each call an error, counted once in its tier and budget;
/// once the store is back, nothing was spent on either state.
#[test]
fn a_store_failing_during_a_transition_is_an_error_counted_once_spending_nothing() {
    let store = Naming::default();
    let fails = Arc::clone(&store.fails);
    let service = naming_service(limit(100).tier(tier("gold", 3)), store);
    let options = Options::new().tier("gold").budget("f");
    assert_eq!(admitted_per_call(&service, "k", &options, 1), 1);
    reload(&service, limit(100).tier(tier("gold", 10).window(2 * HOUR)));
    let site = service.prepare(&options).unwrap();
    fails.store(true, Ordering::SeqCst);
    for _ in 0..4 {
        assert!(matches!(
            site.consume_now("k"),
            Some(Err(Error::Store { .. }))
        ));
        assert!(matches!(
            block_on(service.consume("k", &options)),
            Err(Error::Store { .. })
        ));
    }
    fails.store(false, Ordering::SeqCst);
    assert_eq!(admitted_now(&site, "k", 5), 2);
    assert_eq!(by_tier(&service, "gold"), (6, 3, 3, 8, 0));
    assert_eq!(by_method(&service, "f"), (6, 3, 3, 8, 0));
}

/// A shadow tier loosened by a reload: no transition holds it (a shadow limit refused
/// nothing), its calls over the old limit are admitted plain under the new one, and over the
/// new one shadowed; counted exactly.
#[test]
fn a_shadow_tier_across_a_loosening_reload_is_counted_exactly() {
    let (service, _clock) = service(limit(100).tier(tier("dry", 1).shadow()).build().unwrap());
    let options = Options::new().tier("dry");
    let site = service.prepare(&options).unwrap();
    assert!(!site.consume_now("k").unwrap().unwrap().shadowed);
    assert!(site.consume_now("k").unwrap().unwrap().shadowed);
    reload(&service, limit(100).tier(tier("dry", 3).shadow()));
    let site = service.prepare(&options).unwrap();
    let shadowed: Vec<bool> = (0..3)
        .map(|_| {
            let d = site.consume_now("k").unwrap().unwrap();
            assert!(d.allowed);
            d.shadowed
        })
        .collect();
    // The 1 admitted before counts: 1 + 2 = 3.
    assert_eq!(shadowed, [false, false, true]);
    assert_eq!(by_tier(&service, "dry"), (5, 5, 0, 0, 2));
}

/// Stacked calls with a window of their own (two hours), made under the second
/// configuration: the first (2, never seen with an own window) holds them for two hours, and
/// eight more reloads past its configured hour do not drop it.
#[test]
fn stacked_calls_own_windows_keep_the_transition_they_are_held_to() {
    let (service, clock) = service(limit(2).build().unwrap());
    let own = Options::new().window(2 * HOUR);
    let other = Options::new().budget("other").limit(50);
    let both = |n| -> u64 {
        (0..n)
            .map(|_| {
                let ds = block_on(service.consume_all(&[("k", &own), ("k", &other)]));
                u64::from(ds.unwrap().iter().all(|d| d.allowed))
            })
            .sum()
    };
    clock.advance(MINUTE);
    reload(&service, limit(3));
    assert_eq!(both(3), 2);
    clock.advance(HOUR + MINUTE);
    for n in 4..=11 {
        clock.advance(MINUTE);
        reload(&service, limit(n));
    }
    assert_eq!(both(3), 0);
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
    // The spends of the first minute leave the two hours; the second's 3 holds.
    clock.advance(HOUR);
    assert_eq!(both(5), 3);
}

/// An own window noted under a configuration, then the configuration replaced and the own
/// window's time passed: the reload that was refused while it held is taken, and the
/// transition it held no longer refuses anything.
#[test]
fn a_configuration_kept_for_an_own_window_is_let_go_once_the_window_passes() {
    let (service, clock) = service(limit(1).default_window(MINUTE).build().unwrap());
    let own = Options::new().window(HOUR);
    assert_eq!(admitted_per_call(&service, "k", &own, 2), 1);
    let minute = |n: u64| limit(n).default_window(MINUTE);
    for n in 2..=65 {
        clock.advance(Duration::from_secs(10));
        reload(&service, minute(n));
        // A call with its own hour under each: each configuration kept for it.
        assert!(
            block_on(service.consume(&format!("j{n}"), &own))
                .unwrap()
                .allowed
        );
    }
    // Inside the first configuration's hour: held to its 1.
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
    clock.advance(Duration::from_secs(10));
    assert!(matches!(
        service.reload(on_its_store(&service, minute(66))),
        Err(Error::InvalidConfig(_))
    ));
    clock.advance(HOUR);
    reload(&service, minute(66));
    assert_eq!(service.stats().generation, 65);
    // The 1 spent has left the hour; held to the configuration just replaced (65 an hour,
    // for calls with their own hour), every older one's hour over.
    assert_eq!(admitted_per_call(&service, "k", &own, 70), 65);
}

/// A tightening reload (5 -> 2) and, ten seconds later, a loosening one (2 -> 10), under a
/// one-minute configured window: calls with their own hour spent 2 under the first; no call
/// was made under the second (2), which holds them for an hour since it was replaced. Eight
/// more reloads past its configured minute: the second is the ninth kept, and no call with
/// an own window was worked out under it or held to it: dropped, the first's 5 the
/// tightest kept, so 3 more admitted.
#[test]
fn a_tight_configuration_no_call_saw_is_kept_for_the_own_windows_seen_before_it() {
    let minute = |n: u64| limit(n).default_window(MINUTE);
    let (service, clock) = service(minute(5).build().unwrap());
    let own = Options::new().window(HOUR);
    assert_eq!(admitted_per_call(&service, "k", &own, 2), 2);
    clock.advance(Duration::from_secs(10));
    reload(&service, minute(2));
    clock.advance(Duration::from_secs(10));
    reload(&service, minute(10));
    // No call until the eight more reloads.
    clock.advance(2 * MINUTE);
    for n in 11..=18 {
        clock.advance(Duration::from_secs(10));
        reload(&service, minute(n));
    }
    assert_eq!(admitted_per_call(&service, "k", &own, 5), 0);
}
