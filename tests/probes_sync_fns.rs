//! Probes of sync (not `async`) annotated fns since they answer in one word (`acquire_now`'s
//! `Result<(), Box<Error>>`) and decide on the decision's flag in place (`pipeline::admitted`):
//! ways a sync fn could admit a call it should refuse, miscount, panic, or refuse with an
//! error of the wrong kind. Exact counts, a hand-driven clock (a `TestModule`'s), no sleeps.
//!
//! Every `TestModule` here is built on [`base`]: each is checked against every declaration in
//! the binary, so each configures the tiers the fns below name.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, ConfigBuilder, Counts, Decision, Error, Limiter, MemoryStore, Module,
    ModuleBuilder, Options, StoreConfig, Strategy, Tier,
};
use ratelimit_tests::{hammer, serial, tally};

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The fns probed. Each has a budget of its own (its path), used by one test only, unless said.

static PLAIN_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1m")]
fn probe_plain() -> Result<u32, Error> {
    PLAIN_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

static HAMMERED_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 7, window = "1m")]
fn probe_hammered() -> Result<(), Error> {
    HAMMERED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 5, window = "1m")]
fn probe_two_scopes_at_once() -> Result<(), Error> {
    Ok(())
}

static TIERED_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(tier = plan, key = user)]
fn probe_tiered(user: &str, plan: &str) -> Result<(), Error> {
    let _ = user;
    TIERED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The same, for the refusal's fields (a test of its own: `TIERED_RUNS` counts exactly).
#[rate_limit(tier = plan, key = user)]
fn probe_tier_refusal(user: &str, plan: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

static OUTSIDE_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m")]
fn probe_outside() -> Result<(), Error> {
    OUTSIDE_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 1, window = "1h")]
fn probe_isolated() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 2, window = "1h")]
fn probe_nested() -> Result<(), Error> {
    Ok(())
}

/// On a static tier, so a reload of the tier reaches it.
#[rate_limit(tier = "reloadable", key = user)]
fn probe_reloaded(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// On its own static tier: the reload under threads.
#[rate_limit(tier = "raced")]
fn probe_raced() -> Result<(), Error> {
    Ok(())
}

/// On its own static tier: a window changed by a reload.
#[rate_limit(tier = "moved")]
fn probe_moved() -> Result<(), Error> {
    Ok(())
}

/// On a tier a reload would take away (refused: the service checks its fns however reloaded).
#[rate_limit(tier = "vanishing")]
fn probe_vanishing() -> Result<(), Error> {
    VANISHING_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static VANISHING_RUNS: AtomicU32 = AtomicU32::new(0);

/// On tier "reloadable" too: two modules with two limits for it.
#[rate_limit(tier = "reloadable", key = user, name = "probe-two-configs")]
fn probe_two_configs(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user)]
fn probe_reset(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

static SHADOW_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", shadow = true)]
fn probe_shadow() -> Result<(), Error> {
    SHADOW_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static KEYED_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 1, window = "1m", key = user)]
fn probe_keyed(user: &str) -> Result<(), Error> {
    let _ = user;
    KEYED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static COSTLY_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 5, window = "1m", cost = cost)]
fn probe_costly(cost: u64) -> Result<(), Error> {
    COSTLY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

static WAITING_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1m", key = user)]
fn probe_waiting(user: &str) -> Result<(), Error> {
    let _ = user;
    WAITING_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The same, for the store that breaks its promise (a test of its own).
#[rate_limit(limit = 3, window = "1m", key = user)]
fn probe_broken_store(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m")]
fn probe_whole() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", name = "probe-named")]
fn probe_named() -> Result<(), Error> {
    Ok(())
}

/// An error type of the application's own: the refusal travels through its `From`.
#[derive(Debug)]
enum AppError {
    Limited(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Limited(e)
    }
}

#[rate_limit(limit = 1, window = "1m")]
fn probe_app_error() -> Result<u8, AppError> {
    Ok(7)
}

/// A library's limiter: a testing scope never stands in for it.
static LIB: Limiter = Limiter::new();

static LIB_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 1, window = "1m", limiter = LIB)]
fn probe_lib() -> Result<(), Error> {
    LIB_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 2, window = "1h")]
fn probe_global() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 2, window = "1m")]
fn probe_in_async() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 4, window = "1m", burst = 2, strategy = "token-bucket")]
fn probe_burst() -> Result<(), Error> {
    Ok(())
}

static QUEUED_RUNS: AtomicU32 = AtomicU32::new(0);

/// Asks to wait when over its limit: a sync fn never waits.
#[rate_limit(limit = 1, window = "1m", queue = true)]
fn probe_queued() -> Result<(), Error> {
    QUEUED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(limit = 3, window = "1m", key = id)]
fn probe_by_id(id: u64) -> Result<u64, Error> {
    Ok(id)
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/// The tiers every module here configures (the fns above name them): each `(name, limit)`,
/// a window of a minute.
const TIERS: [(&str, u64); 6] = [
    ("free", 1),
    ("pro", 3),
    ("reloadable", 3),
    ("raced", 3),
    ("moved", 3),
    ("vanishing", 2),
];

/// [`TIERS`] on `builder`, tier `name` replaced by `tier` (`None`: left out).
fn tiers_but<F>(
    mut builder: ConfigBuilder<F>,
    name: &str,
    tier: Option<&Tier>,
) -> ConfigBuilder<F> {
    for (n, limit) in TIERS {
        match (n == name, tier) {
            (false, _) => builder = builder.tier(Tier::new(n, limit).window("1m")),
            (true, Some(tier)) => builder = builder.tier(tier.clone()),
            (true, None) => {}
        }
    }
    builder
}

fn base() -> ModuleBuilder {
    tiers_but(Module::builder(), "", None)
}

fn module() -> TestModule {
    TestModule::new(base()).expect("every declaration is enforceable")
}

/// The configuration of [`base`] with tier `name` replaced by `tier`, for a reload.
fn with_tier(name: &str, tier: Tier) -> Config {
    tiers_but(Config::builder(), name, Some(&tier))
        .build()
        .unwrap()
}

fn counts(module: &TestModule, function: &str) -> Counts {
    module
        .stats()
        .by_method
        .get(&format!("probes_sync_fns::{function}"))
        .copied()
        .unwrap_or_default()
}

/// (allowed, denied, errors) of `function`.
fn ade(module: &TestModule, function: &str) -> (u64, u64, u64) {
    let c = counts(module, function);
    (c.allowed, c.denied, c.errors)
}

fn exceeded<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Exceeded(_)))
}

// ---------------------------------------------------------------------------------------------
// A store of one's own, around the memory store, that can stop deciding at once.

/// How [`Switchable`] answers `decide_now`.
const AT_ONCE: u8 = 0;
/// Claims to decide at once, yet answers `None` (a broken store).
const NONE_AT_ONCE: u8 = 1;
/// Answers every call with a store error.
const FAILING: u8 = 2;

#[derive(Default)]
struct SwitchInner {
    memory: MemoryStore,
    /// What `decides_at_once` says (true at first, so that `init`'s check passes).
    waits: AtomicBool,
    answer: AtomicU8,
    /// Calls of `decide` (the awaited half): a sync fn must never reach it.
    awaited: AtomicU32,
}

#[derive(Clone, Default)]
struct Switchable(Arc<SwitchInner>);

impl Store for Switchable {
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        match self.0.answer.load(Ordering::SeqCst) {
            AT_ONCE => Store::decide_now(&self.0.memory, request),
            NONE_AT_ONCE => None,
            _ => Some(Err(Error::Store {
                message: "away".into(),
            })),
        }
    }
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(&self.0.memory, stacked)
    }
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.0.awaited.fetch_add(1, Ordering::SeqCst);
        Store::decide(&self.0.memory, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.0.awaited.fetch_add(1, Ordering::SeqCst);
        Store::decide_all(&self.0.memory, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.0.memory, key).await
    }
    fn decides_at_once(&self) -> bool {
        !self.0.waits.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The budget: exact, refused calls never run, given back by time.

#[test]
fn a_sync_fn_admits_exactly_its_limit_then_refuses_then_admits_again_after_its_window() {
    let module = module();
    let runs = PLAIN_RUNS.load(Ordering::SeqCst);
    module.run(|| {
        for round in 0..3 {
            assert_eq!(tally(3, probe_plain), (3, 0), "round {round}: the limit");
            assert_eq!(tally(5, probe_plain), (0, 5), "round {round}: over it");
            // Not quite a window: still refused.
            module.clock().advance(MINUTE - Duration::from_millis(1));
            assert!(exceeded(&probe_plain()), "round {round}: 1 ms early");
            module.clock().advance(Duration::from_millis(1));
        }
    });
    assert_eq!(
        PLAIN_RUNS.load(Ordering::SeqCst) - runs,
        9,
        "refused calls never run the body"
    );
    assert_eq!(ade(&module, "probe_plain"), (9, 18, 0));
    let total = module.stats().total;
    assert_eq!((total.checks, total.allowed, total.denied), (27, 9, 18));
}

#[test]
fn threads_hammering_one_sync_fn_are_admitted_exactly_its_limit() {
    let module = module();
    let runs = HAMMERED_RUNS.load(Ordering::SeqCst);
    for window in 0..3 {
        assert_eq!(
            hammer(&module, 8, 50, probe_hammered),
            (7, 393),
            "window {window}"
        );
        module.clock().advance(MINUTE);
    }
    assert_eq!(HAMMERED_RUNS.load(Ordering::SeqCst) - runs, 21);
    assert_eq!(ade(&module, "probe_hammered"), (21, 1179, 0));
}

/// Two modules' scopes on different threads at the same time, one fn: the fn's prepared
/// site (one per declaration) is taken back and forth, and each module still admits
/// exactly its limit.
#[test]
fn two_modules_hammering_one_sync_fn_at_once_each_admit_exactly_their_limit() {
    let (a, b) = (module(), module());
    let barrier = Barrier::new(8);
    let results: Vec<(usize, (u32, u32))> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (module, barrier) = (if i % 2 == 0 { &a } else { &b }, &barrier);
                s.spawn(move || {
                    module.run(|| {
                        barrier.wait();
                        (i % 2, tally(100, probe_two_scopes_at_once))
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for side in 0..2 {
        let admitted: u32 = results
            .iter()
            .filter(|(s, _)| *s == side)
            .map(|(_, (ok, _))| ok)
            .sum();
        assert_eq!(admitted, 5, "module {side}");
    }
    assert_eq!(ade(&a, "probe_two_scopes_at_once"), (5, 395, 0));
    assert_eq!(ade(&b, "probe_two_scopes_at_once"), (5, 395, 0));
}

#[test]
fn a_sync_fns_burst_is_its_capacity_exactly() {
    let module = module();
    module.run(|| {
        assert_eq!(tally(10, probe_burst), (6, 4), "limit 4 + burst 2");
    });
}

#[test]
fn a_sync_fn_keyed_by_an_integer_gives_each_key_its_own_budget() {
    let module = module();
    module.run(|| {
        for id in [0, 1, u64::MAX] {
            assert_eq!(tally(5, || probe_by_id(id)), (3, 2), "id {id}");
        }
    });
    assert_eq!(ade(&module, "probe_by_id"), (9, 6, 0));
}

// ---------------------------------------------------------------------------------------------
// 2. A tier chosen per call (the cold branch).

#[test]
fn a_sync_fn_with_a_tier_per_call_refuses_an_unknown_tier_and_spends_each_tiers_budget_exactly() {
    let module = module();
    let runs = TIERED_RUNS.load(Ordering::SeqCst);
    module.run(|| {
        for tier in ["gold", "", "FREE", "free ", "pro\0"] {
            match probe_tiered("ann", tier) {
                Err(Error::UnknownTier { tier: asked, .. }) => assert_eq!(asked, tier),
                other => panic!("tier {tier:?}: {other:?}"),
            }
        }
    });
    assert_eq!(TIERED_RUNS.load(Ordering::SeqCst), runs, "never ran");
    assert_eq!(ade(&module, "probe_tiered"), (0, 0, 5), "counted as errors");
    assert_eq!(
        hammer(&module, 4, 10, || probe_tiered("ann", "free")),
        (1, 39)
    );
    assert_eq!(
        hammer(&module, 4, 10, || probe_tiered("ann", "pro")),
        (3, 37)
    );
    // Another user: budgets of their own.
    assert_eq!(
        hammer(&module, 4, 10, || probe_tiered("bob", "pro")),
        (3, 37)
    );
    // An unknown tier once the known ones are spent is still an error, not a refusal.
    module.run(|| {
        assert!(matches!(
            probe_tiered("ann", "gold"),
            Err(Error::UnknownTier { .. })
        ))
    });
    assert_eq!(TIERED_RUNS.load(Ordering::SeqCst) - runs, 7);
    let stats = module.stats();
    assert_eq!(stats.by_tier["free"].allowed, 1);
    assert_eq!(
        (stats.by_tier["pro"].allowed, stats.by_tier["pro"].denied),
        (6, 74)
    );
    assert_eq!(ade(&module, "probe_tiered"), (7, 113, 6));
    module.clock().advance(MINUTE);
    assert_eq!(
        hammer(&module, 4, 10, || probe_tiered("ann", "pro")),
        (3, 37)
    );
}

/// A refusal under a tier chosen per call names its tier and budget (the cold path builds it).
#[test]
fn a_refusal_under_a_tier_chosen_per_call_names_its_tier() {
    let module = module();
    module.run(|| {
        probe_tier_refusal("carol", "free").unwrap();
        let Err(Error::Exceeded(refusal)) = probe_tier_refusal("carol", "free") else {
            panic!("the second call passed");
        };
        assert_eq!(refusal.decision.tier.as_deref(), Some("free"));
        assert_eq!(
            refusal.budget.as_deref(),
            Some("probes_sync_fns::probe_tier_refusal")
        );
        assert_eq!(refusal.decision.limit, 1);
        assert!(!refusal.decision.allowed);
        assert!(refusal
            .decision
            .retry_after
            .is_some_and(|d| d > Duration::ZERO));
    });
}

// ---------------------------------------------------------------------------------------------
// 3. Which module decides: none, a scope, the next scope, a nested one, a library's.

#[test]
fn a_sync_fn_outside_any_module_is_refused_naming_it_inside_a_scope_admitted_and_after_refused() {
    let _serial = serial(); // no global module meanwhile (see the global module's test)
    let runs = OUTSIDE_RUNS.load(Ordering::SeqCst);
    let not_initialized = |r: Result<(), Error>| {
        matches!(
            r,
            Err(Error::NotInitialized {
                function: "probes_sync_fns::probe_outside"
            })
        )
    };
    assert!(not_initialized(probe_outside()), "before any scope");
    let module = module();
    module.run(|| {
        assert_eq!(tally(3, probe_outside), (2, 1));
    });
    // The scope ended: the prepared site it left must not decide (nor admit) a call.
    for _ in 0..3 {
        assert!(not_initialized(probe_outside()), "after the scope");
    }
    assert_eq!(OUTSIDE_RUNS.load(Ordering::SeqCst) - runs, 2);
    // A call outside is counted by no module.
    assert_eq!(ade(&module, "probe_outside"), (2, 1, 0));
    // The same module again: its budget, still spent.
    module.run(|| assert!(exceeded(&probe_outside())));
}

#[test]
fn two_scopes_one_after_the_other_on_one_thread_never_share_a_budget() {
    for i in 0..5 {
        let module = module();
        module.run(|| {
            assert_eq!(tally(3, probe_isolated), (1, 2), "module {i}");
        });
        assert_eq!(ade(&module, "probe_isolated"), (1, 2, 0), "module {i}");
    }
    // Two modules alive, alternating on one thread: each its own budget.
    let (a, b) = (module(), module());
    a.run(|| probe_isolated().unwrap());
    b.run(|| probe_isolated().unwrap());
    a.run(|| assert!(exceeded(&probe_isolated())));
    b.run(|| assert!(exceeded(&probe_isolated())));
    assert_eq!(ade(&a, "probe_isolated"), (1, 1, 0));
    assert_eq!(ade(&b, "probe_isolated"), (1, 1, 0));
}

#[test]
fn a_nested_scope_decides_inside_it_and_the_outer_one_again_after_it() {
    let (outer, inner) = (module(), module());
    outer.run(|| {
        probe_nested().unwrap();
        inner.run(|| {
            assert_eq!(tally(4, probe_nested), (2, 2), "the inner budget");
        });
        // Back in the outer scope: its site, not the inner's stale one.
        assert_eq!(tally(3, probe_nested), (1, 2), "the outer budget");
    });
    assert_eq!(ade(&outer, "probe_nested"), (2, 2, 0));
    assert_eq!(ade(&inner, "probe_nested"), (2, 2, 0));
}

#[test]
fn a_sync_fn_called_from_an_async_scope_is_decided_by_that_scope() {
    let module = module();
    let (ok, refused) =
        futures::executor::block_on(module.scope(async { tally(5, probe_in_async) }));
    assert_eq!((ok, refused), (2, 3));
    assert_eq!(ade(&module, "probe_in_async"), (2, 3, 0));
}

/// A library's fn is decided by its limiter only: a testing scope does not stand in for it.
#[test]
fn a_library_sync_fn_is_refused_until_its_limiter_runs_whatever_the_scope_and_after_it_stops() {
    let runs = LIB_RUNS.load(Ordering::SeqCst);
    let not_initialized = |r: Result<(), Error>| {
        matches!(
            r,
            Err(Error::NotInitialized {
                function: "probes_sync_fns::probe_lib"
            })
        )
    };
    let module = module();
    assert!(not_initialized(probe_lib()));
    assert!(
        not_initialized(module.run(probe_lib)),
        "a scope is not the library's"
    );
    let running = LIB
        .init(Module::builder().clock(ratelimit_tests::clock()))
        .unwrap();
    assert_eq!(module.run(|| tally(3, probe_lib)), (1, 2));
    assert_eq!(
        tally(3, probe_lib),
        (0, 3),
        "outside the scope: the same limiter"
    );
    assert_eq!(
        ade(&module, "probe_lib"),
        (0, 0, 0),
        "the scope counted nothing"
    );
    let stats = running.stats().by_method["probes_sync_fns::probe_lib"];
    assert_eq!((stats.allowed, stats.denied), (1, 5));
    drop(running);
    assert!(not_initialized(probe_lib()), "after the limiter stopped");
    assert!(not_initialized(module.run(probe_lib)));
    // Started again: a fresh service, a fresh budget, its site prepared again.
    let running = LIB
        .init(Module::builder().clock(ratelimit_tests::clock()))
        .unwrap();
    assert_eq!(tally(2, probe_lib), (1, 1));
    drop(running);
    assert!(not_initialized(probe_lib()));
    assert_eq!(LIB_RUNS.load(Ordering::SeqCst) - runs, 2);
}

/// The application's module (global): a sync fn's site prepared on it, dropped with it, and
/// prepared again on the next; a scope stands in for it on its thread meanwhile.
#[test]
fn a_sync_fn_follows_the_global_module_through_shutdown_and_a_new_init() {
    let _serial = serial();
    let clock = ratelimit_tests::clock();
    let first = base().clock(clock.clone()).init().unwrap();
    assert_eq!(tally(3, probe_global), (2, 1));
    // A scope stands in for the global module on its thread: its own budget.
    let scoped = module();
    assert_eq!(scoped.run(|| tally(3, probe_global)), (2, 1));
    assert_eq!(
        tally(1, probe_global),
        (0, 1),
        "the global budget, still spent"
    );
    let c = first.stats().by_method["probes_sync_fns::probe_global"];
    assert_eq!((c.allowed, c.denied), (2, 2));
    drop(first);
    assert!(matches!(
        probe_global(),
        Err(Error::NotInitialized {
            function: "probes_sync_fns::probe_global"
        })
    ));
    // Another module: its own store, a fresh budget; the first's site is not used.
    let second = base().clock(clock).init().unwrap();
    assert_eq!(tally(3, probe_global), (2, 1));
    let c = second.stats().by_method["probes_sync_fns::probe_global"];
    assert_eq!((c.allowed, c.denied), (2, 1));
    drop(second);
    assert!(matches!(probe_global(), Err(Error::NotInitialized { .. })));
}

// ---------------------------------------------------------------------------------------------
// 4. Reloads and resets.

#[test]
fn a_reload_that_tightens_then_loosens_reaches_a_sync_fns_next_calls() {
    let module = module();
    let service = module.service();
    module.run(|| {
        assert_eq!(tally(5, || probe_reloaded("u")), (3, 2), "limit 3");
        // Tightened to 1: the 3 spent count against it.
        let reloaded = service
            .reload(with_tier(
                "reloadable",
                Tier::new("reloadable", 1).window("1m"),
            ))
            .unwrap();
        assert_eq!(reloaded.tightened, ["reloadable"]);
        assert_eq!(tally(3, || probe_reloaded("u")), (0, 3), "tightened, spent");
        assert_eq!(
            tally(3, || probe_reloaded("v")),
            (1, 2),
            "tightened, a new key"
        );
        module.clock().advance(MINUTE);
        assert_eq!(tally(3, || probe_reloaded("u")), (1, 2), "limit 1");
        // Loosened to 4: the old quota (1) holds for one old window.
        let reloaded = service
            .reload(with_tier(
                "reloadable",
                Tier::new("reloadable", 4).window("1m"),
            ))
            .unwrap();
        assert_eq!(reloaded.loosened, ["reloadable"]);
        assert_eq!(
            tally(3, || probe_reloaded("u")),
            (0, 3),
            "loosened, old window"
        );
        module.clock().advance(MINUTE);
        assert_eq!(tally(6, || probe_reloaded("u")), (4, 2), "limit 4");
        module.clock().advance(MINUTE);
        assert_eq!(
            tally(6, || probe_reloaded("w")),
            (4, 2),
            "limit 4, a new key"
        );
    });
    assert_eq!(module.stats().generation, 2);
    assert_eq!(ade(&module, "probe_reloaded"), (13, 16, 0));
}

/// Threads hammer a sync fn while another reloads its limit from 3 to 10 and back to 3,
/// over and over, inside one window: never more than 3 admitted in that window.
#[test]
fn threads_calling_a_sync_fn_across_reloads_never_pass_the_tighter_limit_in_a_window() {
    let module = module();
    let service = module.service();
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(4);
    let admitted = std::thread::scope(|s| {
        let reloader = s.spawn(|| {
            barrier.wait();
            for i in 0..200 {
                let limit = if i % 2 == 0 { 10 } else { 3 };
                service
                    .reload(with_tier("raced", Tier::new("raced", limit).window("1m")))
                    .unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        let callers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    module.run(|| {
                        let mut ok = 0;
                        barrier.wait();
                        // At least 100 calls each, and on until the reloads are over.
                        for call in 0.. {
                            if call >= 100 && done.load(Ordering::SeqCst) {
                                break;
                            }
                            match probe_raced() {
                                Ok(()) => ok += 1,
                                Err(Error::Exceeded(_)) => {}
                                Err(other) => panic!("{other:?}"),
                            }
                        }
                        ok
                    })
                })
            })
            .collect();
        reloader.join().unwrap();
        callers.into_iter().map(|c| c.join().unwrap()).sum::<u32>()
    });
    assert_eq!(admitted, 3, "one window, the tighter limit 3");
    // The last reload set 3; a window later, 3 again.
    module.clock().advance(MINUTE);
    assert_eq!(module.run(|| tally(5, probe_raced)), (3, 2));
    assert_eq!(counts(&module, "probe_raced").allowed, 6);
    assert_eq!(counts(&module, "probe_raced").errors, 0);
}

/// A reload that moves a limit to another window: the old budget holds for one old window,
/// then the new window's budget, exactly.
#[test]
fn a_reload_to_another_window_holds_a_sync_fn_to_its_old_budget_for_one_old_window() {
    let module = module();
    let service = module.service();
    module.run(|| {
        assert_eq!(tally(4, probe_moved), (3, 1));
        let reloaded = service
            .reload(with_tier("moved", Tier::new("moved", 5).window("1h")))
            .unwrap();
        assert_eq!(reloaded.changed, ["moved"]);
        assert_eq!(
            tally(4, probe_moved),
            (0, 4),
            "the old window's budget is spent"
        );
        module.clock().advance(MINUTE);
        assert_eq!(tally(7, probe_moved), (5, 2), "the new window: 5 an hour");
        module.clock().advance(MINUTE);
        assert_eq!(tally(2, probe_moved), (0, 2), "still inside the hour");
    });
}

/// A reload on the module's service that takes the fn's tier away is refused naming the fn,
/// as `Module::reload` refuses it (the service checks its fns however it is reloaded), and the
/// fn goes on decided under the running configuration: the one spent still counts (limit 2).
/// (Until the service held its fns, this reload was taken and the fn's calls were errors
/// from then on: `UnknownTier`, never admitted on the stale site.)
#[test]
fn a_reload_that_takes_a_sync_fns_tier_away_is_refused_and_its_calls_stay_decided() {
    let module = module();
    let service = module.service();
    let runs = VANISHING_RUNS.load(Ordering::SeqCst);
    module.run(|| {
        assert_eq!(tally(1, probe_vanishing), (1, 0));
        let removed = tiers_but(Config::builder(), "vanishing", None)
            .build()
            .unwrap();
        match service.reload(removed) {
            Err(Error::Declarations(e)) => assert!(e
                .problems
                .iter()
                .any(|p| p.function.ends_with("::probe_vanishing"))),
            other => panic!("{other:?}"),
        }
        assert_eq!(tally(3, probe_vanishing), (1, 2));
        module.clock().advance(MINUTE);
        assert_eq!(tally(3, probe_vanishing), (2, 1));
    });
    assert_eq!(VANISHING_RUNS.load(Ordering::SeqCst) - runs, 4);
    assert_eq!(ade(&module, "probe_vanishing"), (4, 3, 0));
}

/// Two modules with two limits for one fn's tier, called in turn on one thread: the fn's site
/// is prepared again at each switch, and each module holds the fn to its own limit.
#[test]
fn two_modules_with_two_limits_for_one_sync_fn_each_hold_it_to_their_own() {
    let loose = module(); // "reloadable": 3
    let tight = TestModule::new(tiers_but(
        Module::builder(),
        "reloadable",
        Some(&Tier::new("reloadable", 1).window("1m")),
    ))
    .unwrap();
    let (mut on_loose, mut on_tight) = ((0, 0), (0, 0));
    for _ in 0..6 {
        let l = loose.run(|| tally(1, || probe_two_configs("u")));
        let t = tight.run(|| tally(1, || probe_two_configs("u")));
        on_loose = (on_loose.0 + l.0, on_loose.1 + l.1);
        on_tight = (on_tight.0 + t.0, on_tight.1 + t.1);
    }
    assert_eq!(on_loose, (3, 3));
    assert_eq!(on_tight, (1, 5));
    let refusal = tight.run(|| probe_two_configs("u")).unwrap_err();
    assert_eq!(refusal.decision().unwrap().limit, 1);
    let refusal = loose.run(|| probe_two_configs("u")).unwrap_err();
    assert_eq!(refusal.decision().unwrap().limit, 3);
}

#[test]
fn a_reset_of_a_sync_fns_key_gives_its_budget_back_exactly_once() {
    let module = module();
    let service = module.service();
    let options = Options::new()
        .budget("probes_sync_fns::probe_reset")
        .limit(2)
        .window("1m");
    module.run(|| {
        assert_eq!(tally(3, || probe_reset("ann")), (2, 1));
        assert_eq!(tally(1, || probe_reset("bob")), (1, 0));
    });
    let had_state = futures::executor::block_on(service.reset_with("ann", &options)).unwrap();
    assert!(had_state, "the reset found the fn's state");
    module.run(|| {
        assert_eq!(tally(3, || probe_reset("ann")), (2, 1), "given back once");
        assert_eq!(
            tally(2, || probe_reset("bob")),
            (1, 1),
            "another key untouched"
        );
    });
    // A second reset gives it back once more, no more: the budget, not an allowance.
    assert!(futures::executor::block_on(service.reset_with("ann", &options)).unwrap());
    assert!(futures::executor::block_on(service.reset_with("nobody", &options)).is_ok());
    module.run(|| assert_eq!(tally(4, || probe_reset("ann")), (2, 2)));
    assert_eq!(ade(&module, "probe_reset"), (8, 5, 0));
}

// ---------------------------------------------------------------------------------------------
// 5. Shadow, bad keys, bad costs.

#[test]
fn a_shadow_sync_fn_admits_over_its_limit_and_counts_each_as_shadowed() {
    let module = module();
    let runs = SHADOW_RUNS.load(Ordering::SeqCst);
    assert_eq!(hammer(&module, 4, 10, probe_shadow), (40, 0));
    assert_eq!(SHADOW_RUNS.load(Ordering::SeqCst) - runs, 40);
    let c = counts(&module, "probe_shadow");
    assert_eq!(
        (c.allowed, c.denied, c.errors, c.shadowed),
        (40, 0, 0, 38),
        "2 within the limit, 38 over it and shadowed"
    );
    module.clock().advance(MINUTE);
    module.run(|| assert_eq!(tally(3, probe_shadow), (3, 0)));
    assert_eq!(counts(&module, "probe_shadow").shadowed, 39);
}

#[test]
fn a_sync_fn_with_an_empty_or_overlong_key_is_an_invalid_key_and_spends_nothing() {
    let module = module();
    let runs = KEYED_RUNS.load(Ordering::SeqCst);
    let bad = [
        String::new(),
        "k".repeat(1025),
        "é".repeat(513),
        "🦀".repeat(257),
        "x".repeat(1 << 16),
    ];
    module.run(|| {
        for key in &bad {
            for _ in 0..3 {
                assert!(
                    matches!(probe_keyed(key), Err(Error::InvalidKey { .. })),
                    "{} bytes",
                    key.len()
                );
            }
        }
    });
    assert_eq!(KEYED_RUNS.load(Ordering::SeqCst), runs, "never ran");
    assert_eq!(
        ade(&module, "probe_keyed"),
        (0, 0, 15),
        "errors, not refusals"
    );
    // 1024 bytes of each kind: decided, each its own budget of 1.
    let edge = ["k".repeat(1024), "é".repeat(512), "🦀".repeat(256)];
    module.run(|| {
        for key in &edge {
            assert_eq!(key.len(), 1024);
            assert_eq!(tally(2, || probe_keyed(key)), (1, 1), "{key:.8}");
        }
        // The 1025-byte key that starts like an admitted one spent nothing of it.
        let mut over = edge[0].clone();
        over.push('k');
        assert!(matches!(probe_keyed(&over), Err(Error::InvalidKey { .. })));
    });
    assert_eq!(KEYED_RUNS.load(Ordering::SeqCst) - runs, 3);
    assert_eq!(ade(&module, "probe_keyed"), (3, 3, 16));
}

#[test]
fn a_sync_fn_with_a_cost_of_zero_or_above_its_capacity_is_an_error_and_spends_nothing() {
    let module = module();
    let runs = COSTLY_RUNS.load(Ordering::SeqCst);
    module.run(|| {
        for cost in [6, 7, 1000, u64::MAX] {
            match probe_costly(cost) {
                Err(Error::CostAboveCapacity {
                    cost: asked,
                    capacity: 5,
                }) => assert_eq!(asked, cost),
                other => panic!("cost {cost}: {other:?}"),
            }
        }
        assert!(matches!(probe_costly(0), Err(Error::ZeroCost)));
        assert_eq!(COSTLY_RUNS.load(Ordering::SeqCst), runs, "never ran");
        // Nothing spent: the whole capacity in one call, then nothing.
        probe_costly(5).unwrap();
        assert!(exceeded(&probe_costly(1)));
        module.clock().advance(MINUTE);
        // 2 + 2, then 2 over the 1 left is refused, then 1 admitted.
        assert_eq!(tally(2, || probe_costly(2)), (2, 0));
        let Err(Error::Exceeded(refusal)) = probe_costly(2) else {
            panic!("cost 2 on 1 left passed");
        };
        assert_eq!(refusal.decision.limit, 5);
        probe_costly(1).unwrap();
        assert!(exceeded(&probe_costly(1)));
    });
    assert_eq!(COSTLY_RUNS.load(Ordering::SeqCst) - runs, 4);
    assert_eq!(ade(&module, "probe_costly"), (4, 3, 5));
}

// ---------------------------------------------------------------------------------------------
// 6. A store that must be waited for, or fails.

#[test]
fn a_sync_fn_on_a_store_that_must_be_waited_for_is_refused_as_such_and_counted_as_an_error() {
    let store = Switchable::default();
    let module = TestModule::new(base().store(StoreConfig::custom(store.clone())))
        .expect("the store decides at once at init");
    let runs = WAITING_RUNS.load(Ordering::SeqCst);
    module.run(|| assert_eq!(tally(2, || probe_waiting("u")), (2, 0)));
    // The store now says it must be waited for.
    store.0.waits.store(true, Ordering::SeqCst);
    module.run(|| {
        for key in ["u", "v", ""] {
            assert!(
                matches!(
                    probe_waiting(key),
                    Err(Error::SyncOnWaitingStore {
                        function: "probes_sync_fns::probe_waiting"
                    })
                ),
                "key {key:?}"
            );
        }
    });
    assert_eq!(ade(&module, "probe_waiting"), (2, 0, 3));
    // Threads too: every call refused, none admitted.
    let errors = AtomicU32::new(0);
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                module.run(|| {
                    barrier.wait();
                    for _ in 0..25 {
                        match probe_waiting("u") {
                            Err(Error::SyncOnWaitingStore { .. }) => {
                                errors.fetch_add(1, Ordering::SeqCst);
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                })
            });
        }
    });
    assert_eq!(errors.into_inner(), 100);
    assert_eq!(WAITING_RUNS.load(Ordering::SeqCst) - runs, 2);
    assert_eq!(store.0.awaited.load(Ordering::SeqCst), 0, "never awaited");
    assert_eq!(ade(&module, "probe_waiting"), (2, 0, 103));
    // Back to deciding at once: the 2 spent still count (limit 3).
    store.0.waits.store(false, Ordering::SeqCst);
    module.run(|| assert_eq!(tally(3, || probe_waiting("u")), (1, 2)));
}

/// A store that says it decides at once but does not (answers `None`): the sync fn is
/// refused as on a waiting store, never admitted, and the store never awaited.
#[test]
fn a_sync_fn_on_a_store_that_breaks_its_promise_to_decide_at_once_is_refused() {
    let store = Switchable::default();
    let module = TestModule::new(base().store(StoreConfig::custom(store.clone()))).unwrap();
    store.0.answer.store(NONE_AT_ONCE, Ordering::SeqCst);
    module.run(|| {
        for _ in 0..4 {
            assert!(matches!(
                probe_broken_store("u"),
                Err(Error::SyncOnWaitingStore { .. })
            ));
        }
    });
    assert_eq!(store.0.awaited.load(Ordering::SeqCst), 0);
    assert_eq!(ade(&module, "probe_broken_store"), (0, 0, 4));
    // A store error is the store's error: refused, counted as an error.
    store.0.answer.store(FAILING, Ordering::SeqCst);
    module.run(|| {
        for _ in 0..3 {
            match probe_broken_store("u") {
                Err(Error::Store { message }) => assert_eq!(message, "away"),
                other => panic!("{other:?}"),
            }
        }
    });
    assert_eq!(ade(&module, "probe_broken_store"), (0, 0, 7));
    store.0.answer.store(AT_ONCE, Ordering::SeqCst);
    module.run(|| assert_eq!(tally(4, || probe_broken_store("u")), (3, 1)));
    assert_eq!(ade(&module, "probe_broken_store"), (3, 1, 7));
}

// ---------------------------------------------------------------------------------------------
// 7. The refusal, whole.

#[test]
fn a_sync_fns_refusal_arrives_whole_every_time() {
    let module = module();
    module.run(|| {
        tally(2, probe_whole);
        let mut waits = BTreeSet::new();
        for i in 0..5 {
            module.clock().advance(Duration::from_secs(1));
            let Err(Error::Exceeded(refusal)) = probe_whole() else {
                panic!("refusal {i} passed");
            };
            assert!(!refusal.decision.allowed);
            assert!(!refusal.decision.shadowed);
            assert_eq!(refusal.decision.limit, 2);
            assert_eq!(refusal.decision.remaining, 0);
            assert_eq!(refusal.decision.window, MINUTE);
            assert_eq!(
                refusal.budget.as_deref(),
                Some("probes_sync_fns::probe_whole")
            );
            assert_eq!(
                refusal.policy, None,
                "no name given: the path is not a policy"
            );
            let wait = refusal.decision.retry_after.expect("a wait");
            assert!(wait > Duration::ZERO && wait <= MINUTE, "{wait:?}");
            waits.insert(wait);
        }
        assert_eq!(waits.len(), 5, "the wait shrinks as time passes: {waits:?}");
        // After the longest wait it reported, the call passes.
        let Err(Error::Exceeded(refusal)) = probe_whole() else {
            panic!("passed early");
        };
        module
            .clock()
            .advance(refusal.decision.retry_after.unwrap());
        probe_whole().expect("admitted once retry_after has passed");
    });
}

#[test]
fn a_named_sync_fns_refusal_names_its_budget_as_its_policy() {
    let module = module();
    module.run(|| {
        tally(2, probe_named);
        let Err(Error::Exceeded(refusal)) = probe_named() else {
            panic!("passed");
        };
        assert_eq!(refusal.budget.as_deref(), Some("probe-named"));
        assert_eq!(refusal.policy.as_deref(), Some("probe-named"));
        assert!(!refusal.decision.allowed);
    });
    let c = module.stats().by_method["probe-named"];
    assert_eq!((c.allowed, c.denied), (2, 1));
}

#[test]
fn a_sync_fns_refusal_reaches_an_error_type_of_its_own_whole() {
    let module = module();
    module.run(|| {
        assert_eq!(probe_app_error().unwrap(), 7);
        match probe_app_error() {
            Err(AppError::Limited(Error::Exceeded(refusal))) => {
                assert!(!refusal.decision.allowed);
                assert_eq!(refusal.decision.limit, 1);
                assert!(refusal.decision.retry_after.is_some());
            }
            other => panic!("{other:?}"),
        }
    });
    assert!(matches!(
        probe_app_error(),
        Err(AppError::Limited(Error::NotInitialized { .. }))
    ));
}

// ---------------------------------------------------------------------------------------------
// 8. Every strategy (the module's default strategy, under the fn's tier), and the queue.

#[rate_limit(tier = "free", key = user)]
fn probe_free(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[test]
fn a_sync_fn_admits_exactly_its_limit_under_every_strategy() {
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
    ] {
        let module = TestModule::new(base().strategy(strategy)).unwrap();
        assert_eq!(
            hammer(&module, 4, 10, || probe_free("s")),
            (1, 39),
            "{strategy}"
        );
        // Two windows: the sliding-window counter still weighs the previous fixed window one
        // window on (START is not on a minute's edge), refusing, as an estimate may.
        module.clock().advance(2 * MINUTE);
        assert_eq!(
            hammer(&module, 4, 10, || probe_free("s")),
            (1, 39),
            "{strategy}"
        );
        assert_eq!(ade(&module, "probe_free"), (2, 78, 0), "{strategy}");
    }
}

/// `queue = true` on a sync fn, in a module with the queue on: over the limit it is refused
/// at once (no executor to wait on), never admitted, never left waiting, the queue untouched.
#[test]
fn a_sync_fn_that_asks_to_queue_is_refused_at_once_over_its_limit() {
    let module = TestModule::new(base().queue_enabled(true)).unwrap();
    let runs = QUEUED_RUNS.load(Ordering::SeqCst);
    assert_eq!(hammer(&module, 4, 10, probe_queued), (1, 39));
    assert_eq!(QUEUED_RUNS.load(Ordering::SeqCst) - runs, 1);
    let stats = module.stats();
    assert_eq!(stats.queue.queued, 0);
    assert_eq!(stats.queue.depth, 0);
    assert_eq!(ade(&module, "probe_queued"), (1, 39, 0));
}
