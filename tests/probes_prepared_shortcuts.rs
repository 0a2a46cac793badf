//! Probes of this morning's shortcuts on the hot path (f7e5cc6..4b6d34f), each attacked from
//! outside through the public API with a hand-driven clock:
//!
//! 1. a prepared site's own cost checked once, when it is prepared (`Site::cost_checked`):
//!    reloads that tighten or loosen the limit under a prepared cost, tiers, a cost of 0,
//!    every way to call a prepared site, annotated fns with a cost, shadow limits, two
//!    services preparing one `Options`;
//! 2. a quota's capacity kept beside its settings (`Quota::capacity` filled in `derived()`):
//!    every way to make or change a quota, checked by the calls it admits, and equality;
//! 3. the token bucket's tolerance, an unsaturated multiplication: quotas at the bound
//!    `Quota::problem` sets, in decisions and refunds (a debug build: an overflow panics);
//! 4. a site's quota and a reload's transition borrowed (`Site::quota: &Quota`, `Held`):
//!    per-call overrides during a transition, stacked limits each with its own overrides,
//!    reloads in a row, exact counts against what the tighter quota admits.
//!
//! Exact counts everywhere; sliding-log windows of an hour, so nothing turns unless the
//! clock is moved on purpose.
//!
//! The four shortcuts held. Two ways through found next to them, both fixed: a single call
//! decided on a reload's old states decided its own state under the new quota, not the
//! tighter old one in force on it (`transition.rs`); a ninth reload inside one window dropped
//! the first one's transition (`reload.rs`: a replaced configuration is now kept while in
//! force, and a reload that would drop one is refused). Later, the same for calls whose own
//! window outlasts the configured ones (kept for the longest such window seen under it).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Attempt, Config, Error, Limiter, MemoryStore, Module, Options, Quota, QuotaError,
    RateLimitService, Strategy, Tier, MAX_CAPACITY, MAX_WINDOW,
};
use ratelimit_tests::hourly::{admitted_now, admitted_per_call, limit, reload, tier};
use ratelimit_tests::{now as block_on, on_its_store, service, START};

const HOUR: Duration = Duration::from_secs(3_600);

/// The latest time the algorithms decide at (`algorithm::MAX_NOW`).
const MAX_NOW: u64 = (1 << 63) - (1 << 60);

/// Whether `r` is `CostAboveCapacity` for `cost` under `capacity`.
fn above(r: &Result<impl std::fmt::Debug, Error>, cost: u64, capacity: u64) -> bool {
    matches!(r, Err(Error::CostAboveCapacity { cost: c, capacity: k }) if *c == cost && *k == capacity)
}

/// Calls of `cost` admitted by the memory store at one instant, under `quota`.
fn store_admits(quota: &Quota, cost: u64, now: u64, n: usize) -> u64 {
    let store = MemoryStore::new();
    (0..n)
        .map(|_| u64::from(store.acquire("k", quota, cost, now).unwrap().allowed))
        .sum()
}

// ---------------------------------------------------------------------------------------
// 1. A prepared site's own cost, checked once.
// ---------------------------------------------------------------------------------------

/// A cost of 4 prepared under a limit of 5, then a reload to 3: the site's cost no longer
/// fits. Skipping the check (it fit when prepared) would hand the store a request of cost 4
/// under a capacity of 3. Every way to call the site refuses it as `CostAboveCapacity`.
#[test]
fn a_prepared_cost_that_fit_before_a_tightening_reload_is_not_admitted_after() {
    let (service, _clock) = service(limit(5).build().unwrap());
    let site = service.prepare(&Options::new().cost(4)).unwrap();
    assert!(site.consume_now("a").unwrap().unwrap().allowed);
    reload(&service, limit(3));
    assert!(!site.is_current());
    // A fresh key: a state with room would admit the 4 if the cost went unchecked.
    assert!(above(&site.consume_now("b").unwrap(), 4, 3));
    assert!(above(&block_on(site.consume("b")), 4, 3));
    assert!(above(&block_on(site.enforce("b")), 4, 3));
    assert!(above(&block_on(site.spend("b")), 4, 3));
    let arc = std::sync::Arc::new(
        service
            .prepare(&Options::new().cost(4))
            .unwrap_or_else(|_| {
                // Preparing under 3 may itself refuse; the old site is the one under attack.
                panic!("prepare refused a cost above capacity instead of its calls")
            }),
    );
    match arc.try_consume("b") {
        Attempt::Decided(d) => assert!(above(&d, 4, 3)),
        Attempt::Pending(_) => panic!("the memory store decides at once"),
    }
    // Nothing spent on "b": a cost of 3 is admitted once.
    let three = service.prepare(&Options::new().cost(3)).unwrap();
    assert_eq!(admitted_now(&three, "b", 2), 1);
}

/// A site prepared under the tighter limit, then the limit loosened (3 -> 10): a cost of 4
/// fits the new quota, not the old one the transition holds for an hour. The site prepared
/// before the reload and one prepared during the transition (whose cost was checked once,
/// under the new quota) both refuse it while the transition lasts, and admit it after.
#[test]
fn a_loosening_reload_still_refuses_a_prepared_cost_above_the_old_capacity() {
    let (service, clock) = service(limit(3).build().unwrap());
    let before = service.prepare(&Options::new().cost(4)).unwrap();
    assert!(above(&before.consume_now("k").unwrap(), 4, 3));
    reload(&service, limit(10));
    let during = service.prepare(&Options::new().cost(4)).unwrap();
    for site in [&before, &during] {
        assert!(above(&site.consume_now("k").unwrap(), 4, 3));
        assert!(above(&block_on(site.consume("k")), 4, 3));
        assert!(above(&block_on(site.enforce("k")), 4, 3));
        assert!(above(&block_on(site.spend("k")), 4, 3));
    }
    // Nothing was spent: the old quota's 3 are all there.
    let one = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_now(&one, "k", 5), 3);
    // An hour after the switch the transition ends; the 3 spent slide out with it.
    clock.advance(HOUR + Duration::from_secs(1));
    assert_eq!(admitted_now(&during, "k", 3), 2);
    assert_eq!(admitted_now(&one, "k", 5), 2);
}

/// The same through a tier whose limit a reload changes (gold 5 -> 3, then 3 -> 8).
#[test]
fn a_tier_reloaded_under_a_prepared_cost_is_checked_again() {
    let (service, _clock) = service(limit(100).tier(tier("gold", 5)).build().unwrap());
    let site = service
        .prepare(&Options::new().tier("gold").cost(4))
        .unwrap();
    assert!(site.consume_now("a").unwrap().unwrap().allowed);
    reload(&service, limit(100).tier(tier("gold", 3)));
    assert!(above(&site.consume_now("b").unwrap(), 4, 3));
    let under_three = service
        .prepare(&Options::new().tier("gold").cost(4))
        .unwrap();
    assert!(above(&under_three.consume_now("b").unwrap(), 4, 3));
    reload(&service, limit(100).tier(tier("gold", 8)));
    // Held to 3 for the hour after the loosening: still above.
    let under_eight = service
        .prepare(&Options::new().tier("gold").cost(4))
        .unwrap();
    for s in [&site, &under_three, &under_eight] {
        assert!(above(&s.consume_now("b").unwrap(), 4, 3));
    }
    let one = service.prepare(&Options::new().tier("gold")).unwrap();
    assert_eq!(admitted_now(&one, "b", 5), 3);
}

/// A site prepared with a cost of 0: a spend of nothing is `ZeroCost` on every call (a
/// look costs nothing and is a status); never an admission that spends nothing.
#[test]
fn a_prepared_cost_of_zero_is_an_error_on_every_spend() {
    let (service, _clock) = service(limit(2).build().unwrap());
    let site = service.prepare(&Options::new().cost(0)).unwrap();
    for _ in 0..3 {
        assert!(matches!(site.consume_now("k"), Some(Err(Error::ZeroCost))));
        assert!(matches!(block_on(site.consume("k")), Err(Error::ZeroCost)));
        assert!(matches!(block_on(site.enforce("k")), Err(Error::ZeroCost)));
        assert!(matches!(block_on(site.spend("k")), Err(Error::ZeroCost)));
    }
    let status = block_on(site.status("k")).unwrap();
    assert_eq!(status.remaining, 2);
    let one = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_now(&one, "k", 3), 2);
}

/// One prepared site of cost 3 under a limit of 10, called every way in turn: each call
/// spends 3, whatever its entry point; the fourth is refused, the status reads 1 left.
#[test]
fn every_entry_point_of_one_prepared_site_spends_its_cost() {
    let (service, _clock) = service(limit(10).build().unwrap());
    let site = service.prepare(&Options::new().cost(3)).unwrap();
    assert!(site.consume_now("k").unwrap().unwrap().allowed);
    assert!(block_on(site.consume("k")).unwrap().allowed);
    assert!(block_on(site.spend("k")).unwrap().decision().allowed);
    assert!(matches!(
        block_on(site.enforce("k")),
        Err(Error::Exceeded(_))
    ));
    assert!(!site.consume_now("k").unwrap().unwrap().allowed);
    assert_eq!(block_on(site.status("k")).unwrap().remaining, 1);
}

/// Two services with different limits preparing one `Options`: each site's cost is checked
/// under its own service's quota (5 fits 10, not 3).
#[test]
fn one_options_prepared_on_two_services_is_checked_under_each_quota() {
    let (wide, _c1) = service(limit(10).build().unwrap());
    let (narrow, _c2) = service(limit(3).build().unwrap());
    let options = Options::new().cost(5);
    let a = wide.prepare(&options).unwrap();
    let b = narrow.prepare(&options).unwrap();
    assert!(a.consume_now("k").unwrap().unwrap().allowed);
    assert!(above(&b.consume_now("k").unwrap(), 5, 3));
    assert!(above(&block_on(b.spend("k")), 5, 3));
    assert_eq!(admitted_per_call(&narrow, "k", &Options::new(), 4), 3);
}

/// A shadow limit prepared with a cost above its capacity after a tightening reload: the
/// same answer as the per-call path gives (never an admission the per-call path refuses
/// as an error).
#[test]
fn a_shadow_prepared_cost_is_answered_as_the_per_call_path_answers_it() {
    let (service, _clock) = service(limit(5).build().unwrap());
    let options = Options::new().cost(4).shadow(true);
    let site = service.prepare(&options).unwrap();
    assert!(site.consume_now("a").unwrap().unwrap().allowed);
    reload(&service, limit(3));
    let per_call = block_on(service.consume("b", &options));
    assert!(above(&per_call, 4, 3), "{per_call:?}");
    assert!(above(&site.consume_now("b").unwrap(), 4, 3));
    let again = service.prepare(&options).unwrap();
    assert!(above(&again.consume_now("b").unwrap(), 4, 3));
}

/// A prepared site's refusal after a reload tightens a per-call burst: the quota is the
/// call's own (limit from the configuration, burst from the call), worked out again.
#[test]
fn a_prepared_burst_override_follows_the_reloaded_limit() {
    let (service, _clock) = service(limit(4).build().unwrap());
    // 4 + 2 = 6: a cost of 6 fits.
    let site = service.prepare(&Options::new().burst(2).cost(6)).unwrap();
    assert!(site.consume_now("a").unwrap().unwrap().allowed);
    reload(&service, limit(2));
    // 2 + 2 = 4 now.
    assert!(above(&site.consume_now("b").unwrap(), 6, 4));
    let one = service.prepare(&Options::new().burst(2)).unwrap();
    assert_eq!(admitted_now(&one, "b", 6), 4);
}

#[rate_limit(key = user, cost = cost)]
async fn probe_shortcut_costed(user: &str, cost: u64) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(key = user, cost = cost)]
fn probe_shortcut_costed_sync(user: &str, cost: u64) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Annotated fns (async and sync) with a cost, on the default limit, across a reload that
/// tightens (5 -> 3) then loosens (3 -> 10): a cost of 4 is an error, never admitted, in
/// both; the fn's site is prepared for a cost of 1, so each call's cost is its own.
#[test]
fn an_annotated_cost_is_checked_under_each_reloaded_limit() {
    let module = TestModule::new(Module::builder().default_limit(5).default_window("1h")).unwrap();
    let svc = module.service().clone();
    let async_call =
        |user: &'static str, cost| block_on(module.scope(probe_shortcut_costed(user, cost)));
    let sync_call =
        |user: &'static str, cost| module.run(|| probe_shortcut_costed_sync(user, cost));
    assert!(async_call("a", 4).is_ok());
    assert!(sync_call("a", 1).is_ok());
    reload(
        &svc,
        Config::builder().default_limit(3).default_window("1h"),
    );
    assert!(above(&async_call("b", 4), 4, 3));
    assert!(above(&sync_call("b", 4), 4, 3));
    assert!(matches!(async_call("b", 0), Err(Error::ZeroCost)));
    reload(
        &svc,
        Config::builder().default_limit(10).default_window("1h"),
    );
    assert!(above(&async_call("c", 4), 4, 3));
    assert!(above(&sync_call("c", 4), 4, 3));
    // Each fn is its own budget: "c" holds 3 under the old quota in each, whatever the
    // new limit of 10 says.
    assert!(async_call("c", 2).is_ok());
    assert!(async_call("c", 1).is_ok());
    assert!(matches!(async_call("c", 1), Err(Error::Exceeded(_))));
    assert!(sync_call("c", 3).is_ok());
    assert!(matches!(sync_call("c", 1), Err(Error::Exceeded(_))));
}

/// A library's limiter.
static LIB: Limiter = Limiter::new();

#[rate_limit(key = user, cost = cost, limiter = LIB)]
fn probe_shortcut_lib(user: &str, cost: u64) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A limiter's annotated fn (its site prepared on the limiter's service) through a module
/// reload that tightens (5 -> 3), then loosens (3 -> 10): a cost of 4 is an error under both,
/// then admitted once the old quota's hour is over.
#[test]
fn a_limiters_prepared_site_checks_its_cost_under_each_reloaded_limit() {
    let clock = ratelimit_tests::clock();
    let module = LIB
        .init(
            Module::builder()
                .default_limit(5)
                .default_window("1h")
                .clock(clock.clone()),
        )
        .unwrap();
    assert!(probe_shortcut_lib("a", 4).is_ok());
    module
        .reload(Module::builder().default_limit(3).default_window("1h"))
        .unwrap();
    assert!(above(&probe_shortcut_lib("b", 4), 4, 3));
    assert!(above(&probe_shortcut_lib("b", 4), 4, 3));
    module
        .reload(Module::builder().default_limit(10).default_window("1h"))
        .unwrap();
    assert!(above(&probe_shortcut_lib("b", 4), 4, 3));
    assert!(probe_shortcut_lib("b", 3).is_ok());
    assert!(matches!(
        probe_shortcut_lib("b", 1),
        Err(Error::Exceeded(_))
    ));
    clock.advance(HOUR + Duration::from_secs(1));
    assert!(probe_shortcut_lib("b", 4).is_ok());
    assert!(probe_shortcut_lib("b", 4).is_ok());
    assert!(probe_shortcut_lib("b", 2).is_ok());
    assert!(matches!(
        probe_shortcut_lib("b", 1),
        Err(Error::Exceeded(_))
    ));
}

/// A site prepared before a tightening reload, begun with `try_consume` (the entry point
/// that decides at once or hands a pending call on): no longer current, its cost of 4 is
/// checked under the new limit of 3 either way, and nothing is spent.
#[test]
fn an_old_sites_try_consume_checks_its_cost_under_the_running_limit() {
    let (service, _clock) = service(limit(5).build().unwrap());
    let site = std::sync::Arc::new(service.prepare(&Options::new().cost(4)).unwrap());
    assert!(site.consume_now("a").unwrap().unwrap().allowed);
    reload(&service, limit(3));
    for _ in 0..3 {
        let got = match site.try_consume("b") {
            Attempt::Decided(d) => d,
            Attempt::Pending(pending) => block_on(pending.consume()),
        };
        assert!(above(&got, 4, 3), "{got:?}");
    }
    assert_eq!(admitted_per_call(&service, "b", &Options::new(), 5), 3);
}

// ---------------------------------------------------------------------------------------
// 2. A quota's capacity kept beside its settings.
// ---------------------------------------------------------------------------------------

/// Every constructor and every `with_*` in every order: the store admits exactly
/// `limit + burst` calls of 1 at one instant (0 for a limit of 0), on every strategy.
#[test]
fn every_way_to_make_a_quota_admits_its_limit_plus_burst() {
    let block = Duration::from_secs(5);
    let made: Vec<(Quota, u64)> = vec![
        (Quota::new(3, HOUR).unwrap(), 3),
        (Quota::per_second(4).unwrap(), 4),
        (Quota::per_minute(4).unwrap().with_burst(2).unwrap(), 6),
        (Quota::per_hour(2).unwrap().with_burst(7).unwrap(), 9),
        (
            Quota::per_day(5)
                .unwrap()
                .with_burst(1)
                .unwrap()
                .with_burst(0)
                .unwrap(),
            5,
        ),
        (
            Quota::per_minute(3)
                .unwrap()
                .with_block(block)
                .unwrap()
                .with_burst(4)
                .unwrap(),
            7,
        ),
        (
            Quota::per_minute(3)
                .unwrap()
                .with_burst(4)
                .unwrap()
                .with_block(block)
                .unwrap(),
            7,
        ),
        (
            Quota::per_minute(3)
                .unwrap()
                .with_burst(2)
                .unwrap()
                .with_refill(1)
                .unwrap(),
            5,
        ),
        (
            Quota::per_minute(3)
                .unwrap()
                .with_refill(1)
                .unwrap()
                .with_burst(2)
                .unwrap(),
            5,
        ),
        (
            Quota::from_parts(6, HOUR, 3, Strategy::FixedWindow, Some(2)).unwrap(),
            9,
        ),
        (Quota::default(), 100),
        (Quota::default().with_burst(5).unwrap(), 105),
        (Quota::new(0, HOUR).unwrap().with_burst(5).unwrap(), 0),
        (
            Quota::from_parts(0, HOUR, 9, Strategy::TokenBucket, Some(3)).unwrap(),
            0,
        ),
        (
            Quota::new(1, Duration::from_secs(1))
                .unwrap()
                .with_burst(MAX_CAPACITY - 1)
                .unwrap(),
            MAX_CAPACITY,
        ),
    ];
    let strategies = [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
    ];
    for (quota, capacity) in made {
        assert_eq!(quota.capacity(), capacity, "{quota}");
        for strategy in strategies {
            let q = quota.with_strategy(strategy);
            if capacity > 1_000 {
                // Too many to count one by one: the whole capacity at once, then one more.
                let store = MemoryStore::new();
                let now = START.as_nanos() as u64;
                assert!(
                    store.acquire("k", &q, capacity, now).unwrap().allowed,
                    "{q}"
                );
                assert!(!store.acquire("k", &q, 1, now).unwrap().allowed, "{q}");
                assert!(above(
                    &store.acquire("j", &q, capacity + 1, now),
                    capacity + 1,
                    capacity
                ));
                continue;
            }
            let now = START.as_nanos() as u64;
            assert_eq!(store_admits(&q, 1, now, 120), capacity, "{q}");
        }
    }
}

/// A limit of 0 with a burst refuses every call everywhere it can be written: a quota, a
/// per-call override, a tier, the configuration's default with `burst_limit`, a
/// configuration file.
#[test]
fn a_limit_of_zero_with_a_burst_admits_nothing_anywhere() {
    let (service, _clock) = service(
        limit(5)
            .tier(Tier::new("off", 0).burst(4).window(HOUR))
            .build()
            .unwrap(),
    );
    let zero = Options::new().limit(0).burst(3);
    assert_eq!(admitted_per_call(&service, "a", &zero, 5), 0);
    let prepared = service.prepare(&zero).unwrap();
    assert_eq!(admitted_now(&prepared, "a", 5), 0);
    let off = Options::new().tier("off");
    assert_eq!(admitted_per_call(&service, "b", &off, 5), 0);
    let prepared = service.prepare(&off).unwrap();
    assert_eq!(admitted_now(&prepared, "b", 5), 0);
    let built = Config::builder()
        .default_limit(0)
        .burst_limit(6)
        .default_window(HOUR)
        .build();
    {
        let config = built.unwrap();
        let (service, _clock) = service_of(config);
        assert_eq!(admitted_per_call(&service, "c", &Options::new(), 8), 0);
    }
    let file =
        Config::from_toml_str("default_limit = 0\nburst_limit = 6\ndefault_window = \"1h\"\n");
    {
        let config = file.unwrap();
        let (service, _clock) = service_of(config);
        assert_eq!(admitted_per_call(&service, "d", &Options::new(), 8), 0);
    }
}

fn service_of(config: Config) -> (RateLimitService, ratelimit::ManualClock) {
    service(config)
}

/// Bursts through the builder, a tier, a file and a per-call override (over a tier's limit
/// too): each admits `limit + burst`; a reload that changes only the burst moves it.
#[test]
fn bursts_from_every_source_admit_limit_plus_burst() {
    let (service, _clock) = service(
        limit(3)
            .burst_limit(2)
            .tier(tier("gold", 4).burst(3))
            .build()
            .unwrap(),
    );
    assert_eq!(admitted_per_call(&service, "a", &Options::new(), 9), 5);
    assert_eq!(
        admitted_per_call(&service, "b", &Options::new().tier("gold"), 9),
        7
    );
    let over_tier = Options::new().tier("gold").burst(1);
    assert_eq!(admitted_per_call(&service, "c", &over_tier, 9), 5);
    let prepared = service.prepare(&over_tier).unwrap();
    assert_eq!(admitted_now(&prepared, "d", 9), 5);
    let own = Options::new().limit(2).burst(5);
    assert_eq!(admitted_now(&service.prepare(&own).unwrap(), "e", 9), 7);
    // Only the burst changes (2 -> 0): tightened to 3; "f" fresh.
    reload(&service, limit(3).tier(tier("gold", 4).burst(3)));
    assert_eq!(admitted_per_call(&service, "f", &Options::new(), 9), 3);
    let file =
        Config::from_toml_str("default_limit = 2\nburst_limit = 3\ndefault_window = \"1h\"\n")
            .unwrap();
    let (service, _clock) = service_of(file);
    assert_eq!(admitted_per_call(&service, "g", &Options::new(), 9), 5);
}

fn hash_of(q: &Quota) -> u64 {
    let mut h = DefaultHasher::new();
    q.hash(&mut h);
    h.finish()
}

/// Quotas equal in their settings, made different ways, are equal and hash alike (a kept
/// capacity that differed would split them); quotas whose capacity differs are not.
#[test]
fn quotas_equal_in_settings_are_equal_and_hash_alike() {
    let a = Quota::new(3, Duration::from_secs(60))
        .unwrap()
        .with_burst(2)
        .unwrap();
    let b =
        Quota::from_parts(3, Duration::from_secs(60), 2, Strategy::SlidingWindow, None).unwrap();
    let c = Quota::per_minute(3)
        .unwrap()
        .with_burst(9)
        .unwrap()
        .with_burst(2)
        .unwrap();
    let d = Quota::per_minute(3)
        .unwrap()
        .with_strategy(Strategy::TokenBucket)
        .with_burst(2)
        .unwrap()
        .with_strategy(Strategy::SlidingWindow);
    for q in [b, c, d] {
        assert_eq!(a, q);
        assert_eq!(hash_of(&a), hash_of(&q));
    }
    assert_ne!(a, a.with_burst(3).unwrap());
    let zero_a = Quota::new(0, HOUR).unwrap().with_burst(4).unwrap();
    let zero_b = Quota::new(0, HOUR)
        .unwrap()
        .with_burst(0)
        .unwrap()
        .with_burst(4)
        .unwrap();
    assert_eq!(zero_a, zero_b);
    assert_eq!(hash_of(&zero_a), hash_of(&zero_b));
}

// ---------------------------------------------------------------------------------------
// 3. The token bucket's tolerance at its bound.
// ---------------------------------------------------------------------------------------

/// The slowest refill that passes for `capacity` tokens over `window`: the least refill per
/// window whose quota is made (the one below is `RefillTooSlow`).
fn slowest_refill(capacity: u64, window: Duration) -> Quota {
    let make = |r: u64| Quota::from_parts(capacity, window, 0, Strategy::TokenBucket, Some(r));
    let (mut lo, mut hi) = (1u64, window.as_nanos() as u64);
    assert!(make(hi).is_ok());
    if make(lo).is_ok() {
        return make(lo).unwrap();
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match make(mid) {
            Ok(_) => hi = mid,
            Err(e) => {
                assert_eq!(e, QuotaError::RefillTooSlow);
                lo = mid;
            }
        }
    }
    make(hi).unwrap()
}

/// Quotas at the tolerance's bound (the largest window with the slowest refill that passes,
/// the largest capacity with the slowest refill, a capacity just past the bound refused), decided
/// at the last instant the store decides at, spent whole, refused, and at a quota's every
/// capacity: no overflow (a panic in this debug build), exact counts.
#[test]
fn a_token_bucket_at_the_tolerance_bound_decides_without_overflow() {
    // Largest window, refill of 1: capacity 145 passes, 146 does not (2^62 / 366 days).
    let q = Quota::from_parts(145, MAX_WINDOW, 0, Strategy::TokenBucket, Some(1)).unwrap();
    assert_eq!(
        Quota::from_parts(146, MAX_WINDOW, 0, Strategy::TokenBucket, Some(1)),
        Err(QuotaError::RefillTooSlow)
    );
    let with_burst = Quota::from_parts(1, MAX_WINDOW, 144, Strategy::TokenBucket, Some(1)).unwrap();
    assert_eq!(
        Quota::from_parts(1, MAX_WINDOW, 145, Strategy::TokenBucket, Some(1)),
        Err(QuotaError::RefillTooSlow)
    );
    let widest = slowest_refill(MAX_CAPACITY, MAX_WINDOW);
    let tiny = slowest_refill(MAX_CAPACITY, Duration::from_secs(5));
    for quota in [q, with_burst, widest, tiny] {
        let cap = quota.capacity();
        for now in [0, START.as_nanos() as u64, MAX_NOW - 1, MAX_NOW] {
            let store = MemoryStore::new();
            assert!(
                store.acquire("k", &quota, cap, now).unwrap().allowed,
                "{quota}"
            );
            assert!(
                !store.acquire("k", &quota, 1, now).unwrap().allowed,
                "{quota}"
            );
            assert!(
                !store.acquire("k", &quota, cap, now).unwrap().allowed,
                "{quota}"
            );
            let peek = store.peek("k", &quota, cap, now).unwrap();
            assert!(!peek.allowed);
            // One by one, where that is countable.
            if cap <= 200 {
                assert_eq!(
                    store_admits(&quota, 1, now, cap as usize + 3),
                    cap,
                    "{quota}"
                );
            }
        }
    }
    // Past MAX_NOW: an error, not a panic.
    let store = MemoryStore::new();
    assert!(store.acquire("k", &q, 1, MAX_NOW + 1).is_err());
}

/// The same quotas through a service, with spends given back (`Spent::refund`), at the
/// latest instant whose arrival times stay within the clock's range: each refund gives back
/// exactly what it took, no overflow. Nearer the end, a refund whose arrival time is past it
/// gives nothing back (fail closed): the spend stays spent.
#[test]
fn refunds_at_the_tolerance_bound_give_back_exactly_their_cost() {
    const LATEST: u64 = MAX_NOW - (1 << 62);
    let (service, clock) = service(limit(10).build().unwrap());
    clock.set(Duration::from_nanos(LATEST));
    let options = Options::new()
        .limit(145)
        .window(MAX_WINDOW)
        .strategy(Strategy::TokenBucket)
        .refill(1);
    let site = service.prepare(&options.clone().cost(100)).unwrap();
    let spent = block_on(site.spend("k")).unwrap();
    assert!(spent.decision().allowed);
    assert_eq!(spent.decision().remaining, 45);
    assert!(block_on(spent.refund()).unwrap());
    // All 145 back: 145 admitted one by one, then refused.
    assert_eq!(admitted_per_call(&service, "k", &options, 150), 145);
    let big = Options::new()
        .limit(MAX_CAPACITY)
        .window(MAX_WINDOW)
        .strategy(Strategy::TokenBucket)
        .refill(slowest_refill(MAX_CAPACITY, MAX_WINDOW).refill_per_window())
        .cost(MAX_CAPACITY);
    let site = service.prepare(&big).unwrap();
    let spent = block_on(site.spend("j")).unwrap();
    assert!(spent.decision().allowed);
    assert!(block_on(spent.refund()).unwrap());
    let again = block_on(site.spend("j")).unwrap();
    assert!(again.decision().allowed);
    assert!(!block_on(site.consume("j")).unwrap().allowed);
    // At the last instant: the refund's arrival time is out of range, nothing comes back.
    clock.set(Duration::from_nanos(MAX_NOW));
    let site = service.prepare(&options.clone().cost(100)).unwrap();
    let spent = block_on(site.spend("i")).unwrap();
    assert!(spent.decision().allowed);
    assert!(!block_on(spent.refund()).unwrap());
    assert_eq!(admitted_per_call(&service, "i", &options, 50), 45);
}

// ---------------------------------------------------------------------------------------
// 4. A site's quota and a reload's transition, borrowed.
// ---------------------------------------------------------------------------------------

/// A per-call burst override during a transition: limit 3 + burst 1 = 4 loosened to
/// 10 + 1 = 11 by a reload; 2 spent before, 2 more admitted while the old 4 holds.
#[test]
fn a_per_call_override_during_a_transition_is_held_to_the_old_quota() {
    let (service, clock) = service(limit(3).build().unwrap());
    let options = Options::new().burst(1);
    assert_eq!(admitted_per_call(&service, "k", &options, 2), 2);
    reload(&service, limit(10));
    let prepared = service.prepare(&options).unwrap();
    assert_eq!(admitted_per_call(&service, "k", &options, 1), 1);
    assert_eq!(admitted_now(&prepared, "k", 5), 1);
    assert_eq!(admitted_per_call(&service, "k", &options, 5), 0);
    clock.advance(HOUR + Duration::from_secs(1));
    assert_eq!(admitted_now(&prepared, "k", 20), 11);
}

/// Stacked limits, each with its own overrides (2, 5 and 3 per hour with a burst): each
/// decided under its own quota, whichever order they come in.
#[test]
fn stacked_limits_with_overrides_each_keep_their_own_quota() {
    let (service, _clock) = service(limit(100).build().unwrap());
    let a = Options::new().budget("a").limit(2);
    let b = Options::new().budget("b").limit(5);
    let c = Options::new().budget("c").limit(3).burst(1);
    let mut admitted = 0;
    for _ in 0..6 {
        let ds = block_on(service.consume_all(&[("k", &b), ("k", &a), ("k", &c)])).unwrap();
        admitted += u64::from(ds.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 2);
    assert_eq!(block_on(service.status("k", &b)).unwrap().remaining, 3);
    assert_eq!(block_on(service.status("k", &c)).unwrap().remaining, 2);
    // The reverse order, other keys: the same.
    let mut admitted = 0;
    for _ in 0..6 {
        let ds = block_on(service.consume_all(&[("j", &c), ("j", &a), ("j", &b)])).unwrap();
        admitted += u64::from(ds.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 2);
    // Alone, c admits its 4.
    assert_eq!(admitted_per_call(&service, "i", &c, 6), 4);
}

/// Stacked limits with overrides during a transition (default 2 loosened to 6): the
/// default-limit one held to 2, the override one to its own 4.
#[test]
fn stacked_limits_during_a_transition_hold_each_to_its_tighter_quota() {
    let (service, _clock) = service(limit(2).build().unwrap());
    let plain = Options::new();
    let own = Options::new().budget("own").limit(4);
    reload(&service, limit(6));
    let mut admitted = 0;
    for _ in 0..6 {
        let ds = block_on(service.consume_all(&[("k", &own), ("k", &plain)])).unwrap();
        admitted += u64::from(ds.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 2);
    assert_eq!(block_on(service.status("k", &own)).unwrap().remaining, 2);
}

/// Eight reloads in a row inside the hour (as many as a service keeps), each loosening
/// (2 -> 3 -> ... -> 10): every
/// configuration's transition holds, so the 2 spent under the first are all there is.
/// Then one that tightens to 1: still nothing.
#[test]
fn many_loosening_reloads_in_a_row_keep_the_first_quota() {
    let (service, clock) = service(limit(2).build().unwrap());
    let prepared = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_now(&prepared, "k", 2), 2);
    for n in 3..=10 {
        clock.advance(Duration::from_secs(60));
        reload(&service, limit(n));
        let now_prepared = service.prepare(&Options::new()).unwrap();
        assert_eq!(admitted_now(&now_prepared, "k", 3), 0, "limit {n}");
        assert_eq!(admitted_now(&prepared, "k", 3), 0, "limit {n}, old site");
        assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
    }
    reload(&service, limit(1));
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
}

/// Nine loosening reloads inside the hour (2 -> 3 -> ... -> 11), one more than a service
/// keeps (`KEPT_PREVIOUS`, 8): the first configuration's transition is dropped with it and
/// its quota of 2 no longer holds, though its hour has not passed: the tightest kept (3)
/// admits one more call on a budget whose hour already spent 2 under a limit of 2.
/// Before: 1 admitted (`reload.rs` kept the last 8 replaced configurations by count).
#[test]
fn a_ninth_reload_inside_the_window_does_not_drop_the_first_transition() {
    let (service, clock) = service(limit(2).build().unwrap());
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 2), 2);
    for n in 3..=11 {
        clock.advance(Duration::from_secs(60));
        reload(&service, limit(n));
    }
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
    let prepared = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_now(&prepared, "k", 3), 0);
}

/// Calls with a window of their own (two hours) longer than any configured (an hour): a
/// loosening reload (2 -> 3) holds them to the first configuration's 2 for their own two
/// hours, and they spend those 2. Eight more reloads once the first configuration's
/// configured hour has passed since it was replaced, but not the calls' own two: it is the
/// ninth kept, past its configured windows, and its quota of 2 still holds the 2 spent, so
/// nothing more is admitted. Before: 1 admitted (`reload.rs` kept a configuration past the
/// last 8 only for its configured windows, though calls held its state to a longer one).
#[test]
fn a_ninth_reload_does_not_drop_a_transition_held_by_a_calls_own_longer_window() {
    let (service, clock) = service(limit(2).build().unwrap());
    let own = Options::new().window(2 * HOUR);
    assert_eq!(admitted_per_call(&service, "k", &own, 1), 1);
    clock.advance(Duration::from_secs(60));
    reload(&service, limit(3));
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 1);
    clock.advance(HOUR + Duration::from_secs(60));
    for n in 4..=11 {
        clock.advance(Duration::from_secs(60));
        reload(&service, limit(n));
    }
    assert_eq!(admitted_per_call(&service, "k", &own, 3), 0);
    let prepared = service.prepare(&own).unwrap();
    assert_eq!(admitted_now(&prepared, "k", 3), 0);
    // Past the first configuration's two hours since it was replaced, the 2 spent have left
    // the log; the second configuration's 3 holds for two hours since its own replacement.
    clock.advance(HOUR);
    assert_eq!(admitted_per_call(&service, "k", &own, 12), 3);
}

/// A service holds calls to at most 64 replaced configurations at once: the 65th loosening
/// reload inside the hour would drop the first's transition while it holds, so it is
/// refused (`InvalidConfig`, field `reload`) and the running configuration stays, its
/// budget exact; once the first configuration's hour has passed, the same reload is taken.
#[test]
fn a_reload_that_would_drop_a_transition_in_force_is_refused() {
    let (service, clock) = service(limit(2).build().unwrap());
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 2), 2);
    for n in 3..=66 {
        clock.advance(Duration::from_secs(1));
        reload(&service, limit(n));
    }
    let generation = service.stats().generation;
    assert_eq!(generation, 64);
    clock.advance(Duration::from_secs(1));
    let refused = service.reload(on_its_store(&service, limit(67)));
    let Err(Error::InvalidConfig(e)) = refused else {
        panic!("the 65th reload in force: {refused:?}");
    };
    assert_eq!(e.problems.len(), 1);
    assert_eq!(e.problems[0].0, "reload");
    assert_eq!(service.stats().generation, generation);
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
    // The first configuration's hour passes (it was replaced 1 s after its 2 were spent):
    // the 2 spent leave the sliding log, and the reload is taken.
    clock.advance(HOUR);
    reload(&service, limit(67));
    assert_eq!(service.stats().generation, generation + 1);
}

/// Two reloads: the first moves the limit to another window (a fresh state, the old one held
/// to as an other state), the second back to the first window with a looser limit. The first
/// configuration's quota of 2 on that same state still holds for its hour; a call decided on
/// the old states and its own as one must be decided on its own under that quota, not the
/// new, looser one (2 spent, so nothing more). Before: 3 admitted (`transition.rs` decided
/// the call's own state under the site's quota, not `quota_at`).
#[test]
fn a_transition_with_old_states_still_holds_the_same_state_to_its_old_quota() {
    let (service, clock) = service(limit(2).build().unwrap());
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 2), 2);
    clock.advance(Duration::from_secs(60));
    reload(
        &service,
        limit(5).default_window(Duration::from_secs(7_200)),
    );
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
    clock.advance(Duration::from_secs(60));
    reload(&service, limit(10));
    let prepared = service.prepare(&Options::new()).unwrap();
    assert_eq!(admitted_per_call(&service, "k", &Options::new(), 3), 0);
    assert_eq!(admitted_now(&prepared, "k", 3), 0);
}

/// The same two reloads (the limit moved to two hours, then back to an hour and loosened),
/// through stacked limits: each limit decided under the tightest quota in force on its own
/// state (2 spent of the first configuration's 2: nothing more), the other states with it.
#[test]
fn stacked_limits_with_old_states_hold_the_same_state_to_its_old_quota() {
    let (service, clock) = service(limit(2).build().unwrap());
    let other = Options::new().budget("other").limit(50);
    let both = |n| -> u64 {
        (0..n)
            .map(|_| {
                let ds = block_on(service.consume_all(&[("k", &Options::new()), ("k", &other)]));
                u64::from(ds.unwrap().iter().all(|d| d.allowed))
            })
            .sum()
    };
    assert_eq!(both(3), 2);
    clock.advance(Duration::from_secs(60));
    reload(
        &service,
        limit(5).default_window(Duration::from_secs(7_200)),
    );
    assert_eq!(both(3), 0);
    clock.advance(Duration::from_secs(60));
    reload(&service, limit(10));
    assert_eq!(both(3), 0);
    assert_eq!(block_on(service.status("k", &other)).unwrap().remaining, 48);
}
