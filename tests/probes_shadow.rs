//! Probes of shadow limits (issue 27): ways a shadow limit, or a limit next to one, could
//! fail open (a call admitted that must be refused or must be an error, a call that waits)
//! or miscount (a spend not counted, a count without a spend, a double spend). Each test is
//! named after what it probes. The ten found wrong (all in stacked calls with shadow
//! members: a key or cost checked only after the enforced limits spent, the same key twice
//! spent twice, the stack's mode worked out without its shadow members, counts missing from
//! the total, drops and errors uncounted) were fixed by checking every member before the
//! store is asked and counting the call once (`service/stacked.rs`); their probes pass.
//! Hand-driven clock, exact counts, no sleeps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, ConfigBuilder, Counts, Decision, Error, ManualClock, MemoryStore, Module,
    Options, RateLimitService, Strategy, Tier,
};

const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// A service on the memory store over a fresh manual clock.
fn memory(config: ConfigBuilder) -> (RateLimitService, ManualClock) {
    ratelimit_tests::service(config.build().unwrap())
}

/// `limit` over a long window, in budget `budget`.
fn limit(limit: u64, budget: &'static str) -> Options {
    Options::new().limit(limit).window(LONG).budget(budget)
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `(allowed, denied, shadowed, errors, abandoned)` of a scope.
fn counts(c: Counts) -> (u64, u64, u64, u64, u64) {
    (c.allowed, c.denied, c.shadowed, c.errors, c.abandoned)
}

fn by_method(service: &RateLimitService, budget: &str) -> (u64, u64, u64, u64, u64) {
    counts(
        service
            .stats()
            .by_method
            .get(budget)
            .copied()
            .unwrap_or_default(),
    )
}

// ---------------------------------------------------------------------------------------------
// A store for the probes that need one to misbehave at a chosen moment: the memory store
// underneath; a single decision (what a shadow member of a stack is asked with) may fail, or
// spend and then never answer (a Redis reply still in flight when the caller gives up).

#[derive(Clone, Default)]
struct Gate {
    inner: Arc<MemoryStore>,
    /// `decide` spends, then never answers.
    hang: Arc<AtomicBool>,
    /// `decide` fails without deciding.
    fail: Arc<AtomicBool>,
}

impl Store for Gate {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::Store {
                message: "connection reset".into(),
            });
        }
        let decided = Store::decide(&*self.inner, request).await;
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        decided
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&*self.inner, stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&*self.inner, key).await
    }
}

fn gated() -> (RateLimitService, Gate) {
    let gate = Gate::default();
    let service = RateLimitService::with_store(
        Config::default(),
        gate.clone(),
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    (service, gate)
}

// ---------------------------------------------------------------------------------------------
// The queue

/// With the queue on (module-wide, per call, or both), a shadow limit over its limit is
/// decided at once: it never waits (no runtime here: a call that waited would be pending or
/// `NoRuntime`), never joins the queue, and is admitted, marked.
#[test]
fn a_shadow_limit_never_waits_with_the_queue_on_module_wide_or_per_call() {
    let (service, _clock) = memory(Config::builder().queue_enabled(true));
    // The control: an enforced limit over its limit waits (here: cannot, no runtime).
    let enforced = limit(1, "enforced");
    assert!(service
        .consume("u", &enforced)
        .now_or_never()
        .unwrap()
        .is_ok());
    let waits = service.consume("u", &enforced).now_or_never();
    assert!(
        matches!(waits, None | Some(Err(Error::NoRuntime { .. }))),
        "{waits:?}"
    );
    service.reset_stats();

    let module_wide = limit(2, "module-wide").shadow(true);
    let per_call = limit(2, "per-call").shadow(true).queue(true);
    for options in [&module_wide, &per_call] {
        let budget = options.budget.as_deref().unwrap().to_owned();
        // Five spending entry points, five times: the first two calls fit, the rest are
        // shadowed, and every one is decided at once.
        let mut decided = Vec::new();
        for _ in 0..5 {
            let at_once = "decided at once";
            decided.push(service.consume("u", options).now_or_never().expect(at_once));
            decided.push(service.enforce("u", options).now_or_never().expect(at_once));
            decided.push(service.consume_now("u", options).expect(at_once));
            let prepared = service.prepare(options).unwrap();
            decided.push(prepared.consume_now("u").expect(at_once));
            decided.push(service.check("u", options).now_or_never().expect(at_once));
        }
        for (call, d) in decided.into_iter().enumerate() {
            let d = d.unwrap();
            assert!(d.allowed && d.retry_after.is_none(), "{budget} {call}");
            assert_eq!(d.shadowed, call >= 2, "{budget} {call}");
        }
        assert_eq!(by_method(&service, &budget), (25, 0, 23, 0, 0), "{budget}");
    }
    let queue = service.stats().queue;
    assert_eq!((queue.queued, queue.depth), (0, 0));
}

/// `until_ready` on a shadow limit over its limit returns at once, admitted and marked: it
/// never sleeps for a `retry_after` the shadow limit does not give.
#[test]
fn until_ready_on_a_shadow_limit_never_sleeps() {
    let (service, _clock) = memory(Config::builder());
    let shadow = limit(1, "paced").shadow(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3_600);
    for call in 0..3 {
        let d = service
            .until_ready("w", &shadow, deadline)
            .now_or_never()
            .expect("at once")
            .unwrap();
        assert!(d.allowed, "{call}");
        assert_eq!(d.shadowed, call > 0, "{call}");
    }
    assert_eq!(by_method(&service, "paced"), (3, 0, 2, 0, 0));
}

/// A shadow tier read from TOML (`shadow = true`) in a configuration with the queue on: a
/// call under it never waits.
#[test]
fn a_shadow_tier_from_toml_never_waits_with_the_queue_on() {
    let config = Config::from_toml_str(
        r#"
        queue_enabled = true
        [tiers.beta]
        limit = 2
        window = "1h"
        shadow = true
        [tiers.paid]
        limit = 2
        window = "1h"
        "#,
    )
    .unwrap();
    assert!(config.tier("beta").unwrap().shadow);
    assert!(!config.tier("paid").unwrap().shadow);
    let (service, _clock) = ratelimit_tests::service(config);
    let beta = Options::new().tier("beta");
    let seen: Vec<bool> = (0..4)
        .map(|_| {
            let d = service.consume("u", &beta).now_or_never().expect("at once");
            let d = d.unwrap();
            assert!(d.allowed);
            d.shadowed
        })
        .collect();
    assert_eq!(seen, [false, false, true, true]);
    assert_eq!(counts(service.stats().by_tier["beta"]), (4, 0, 2, 0, 0));
    assert_eq!(service.stats().queue.queued, 0);
}

#[rate_limit(limit = 2, window = "1m", key = user, shadow = true, queue = true)]
async fn queued_trial(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user, shadow = true)]
fn sync_trial(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = user, shadow = true, name = "sync-stack-a")]
#[rate_limit(limit = 2, window = "1h", key = user, shadow = true, name = "sync-stack-b")]
fn sync_stacked_trial(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Annotated shadow fns in a module with the queue on: `queue = true` on a shadow fn never
/// waits (its first poll decides it); sync shadow fns, one limit or a stack of two, run.
#[test]
fn annotated_shadow_fns_never_wait_and_sync_ones_run_on_the_memory_store() {
    let module = TestModule::new(Module::builder().queue_enabled(true)).unwrap();
    for call in 0..5 {
        let ran = module.scope(queued_trial("u")).now_or_never();
        assert!(matches!(ran, Some(Ok(()))), "call {call}: {ran:?}");
    }
    module.run(|| {
        for _ in 0..4 {
            sync_trial("u").unwrap();
        }
        for _ in 0..3 {
            sync_stacked_trial("u").unwrap();
        }
    });
    let stats = module.stats();
    let find = |suffix: &str| {
        stats
            .by_method
            .iter()
            .find(|(name, _)| name.ends_with(suffix))
            .map(|(_, c)| counts(*c))
            .unwrap()
    };
    assert_eq!(find("::queued_trial"), (5, 0, 3, 0, 0));
    assert_eq!(find("::sync_trial"), (4, 0, 2, 0, 0));
    assert_eq!(counts(stats.by_method["sync-stack-a"]), (3, 0, 2, 0, 0));
    assert_eq!(counts(stats.by_method["sync-stack-b"]), (3, 0, 1, 0, 0));
    assert_eq!(stats.queue.queued, 0);
}

// ---------------------------------------------------------------------------------------------
// Errors stay errors

/// A cost above capacity (and a cost of 0) under a shadow limit is an error on every entry
/// point, counted as one, never admitted as shadowed.
#[test]
fn a_cost_above_capacity_under_a_shadow_limit_is_an_error_everywhere() {
    let (service, _clock) = memory(Config::builder());
    let big = limit(3, "big").shadow(true).cost(4);
    let above = |r: Option<Result<Decision, Error>>| {
        matches!(r, Some(Err(Error::CostAboveCapacity { .. })))
    };
    assert!(above(service.consume("k", &big).now_or_never()));
    assert!(above(service.enforce("k", &big).now_or_never()));
    assert!(above(service.check("k", &big).now_or_never()));
    assert!(above(service.consume_now("k", &big)));
    let prepared = service.prepare(&big).unwrap();
    assert!(above(prepared.consume("k").now_or_never()));
    assert!(above(prepared.consume_now("k")));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    assert!(above(
        service.until_ready("k", &big, deadline).now_or_never()
    ));
    let stacked = service.consume_all(&[("k", &big)]).now_or_never().unwrap();
    assert!(
        matches!(stacked, Err(Error::CostAboveCapacity { .. })),
        "{stacked:?}"
    );
    // Seven single calls counted as errors; nothing admitted, nothing spent.
    assert_eq!(by_method(&service, "big"), (0, 0, 0, 7, 0));
    let level = service.status("k", &big).now_or_never().unwrap().unwrap();
    assert_eq!(level.remaining, 3);

    let zero = limit(3, "zero").shadow(true).cost(0);
    let r = service.consume("k", &zero).now_or_never().unwrap();
    assert!(matches!(r, Err(Error::ZeroCost)), "{r:?}");
}

/// A stack whose enforced limit admits a call and whose shadow member has a cost above its
/// capacity: the call is an error, and (as for a stack without shadow limits, which checks
/// every limit before spending from any) the enforced limit spends nothing for it.
#[test]
fn a_shadow_members_cost_above_capacity_spends_nothing_from_the_enforced_ones() {
    let (service, _clock) = memory(Config::builder());
    let enforced = limit(5, "enforced");
    let big = limit(3, "big").shadow(true).cost(4);
    // The control, without shadow: an error, nothing spent.
    let plain = service
        .consume_all(&[("k", &enforced), ("k", &big.clone().shadow(false))])
        .now_or_never()
        .unwrap();
    assert!(
        matches!(plain, Err(Error::CostAboveCapacity { .. })),
        "{plain:?}"
    );
    let level = service.status("k", &enforced).now_or_never().unwrap();
    assert_eq!(level.unwrap().remaining, 5);

    let shadowed = service
        .consume_all(&[("k", &enforced), ("k", &big)])
        .now_or_never()
        .unwrap();
    assert!(
        matches!(shadowed, Err(Error::CostAboveCapacity { .. })),
        "{shadowed:?}"
    );
    let level = service.status("k", &enforced).now_or_never().unwrap();
    assert_eq!(level.unwrap().remaining, 5, "the enforced limit spent");
    assert_eq!(service.stats().total.allowed, 0);
    assert_eq!(by_method(&service, "enforced").0, 0);
}

/// A bad user key on a shadow member of a stack: the call is refused as `InvalidKey`, and the
/// enforced members spend nothing for it.
#[test]
fn a_bad_key_on_a_shadow_member_spends_nothing_from_the_enforced_ones() {
    let (service, _clock) = memory(Config::builder());
    let enforced = limit(5, "enforced");
    let shadow = limit(5, "shadow").shadow(true);
    let long = "k".repeat(2_000);
    let r = service
        .consume_all(&[("k", &enforced), (long.as_str(), &shadow)])
        .now_or_never()
        .unwrap();
    assert!(matches!(r, Err(Error::InvalidKey { .. })), "{r:?}");
    let level = service.status("k", &enforced).now_or_never().unwrap();
    assert_eq!(level.unwrap().remaining, 5, "the enforced limit spent");
    assert_eq!(service.stats().total.allowed, 0);
}

/// A stack of shadow limits only, on a store that cannot answer: the error is counted in the
/// total as it is for the same stack without `shadow` (and for one call).
#[test]
fn a_failing_stack_of_shadow_limits_is_counted_in_the_total_as_an_error() {
    let service = RateLimitService::with_store(
        Config::default(),
        ratelimit_tests::Broken,
        Arc::new(ratelimit_tests::clock()),
    )
    .unwrap();
    let plain = limit(5, "plain");
    let r = service
        .consume_all(&[("k", &plain)])
        .now_or_never()
        .unwrap();
    assert!(matches!(r, Err(Error::Store { .. })), "{r:?}");
    assert_eq!(service.stats().total.errors, 1);
    let shadow = limit(5, "shadow").shadow(true);
    let r = service
        .consume_all(&[("k", &shadow)])
        .now_or_never()
        .unwrap();
    assert!(matches!(r, Err(Error::Store { .. })), "{r:?}");
    assert_eq!(by_method(&service, "shadow").3, 1);
    assert_eq!(
        service.stats().total.errors,
        2,
        "the failed stack is counted nowhere in the total"
    );
}

/// The store fails on a stack's shadow member after its enforced member admitted the call:
/// the call is an error (errors stay errors under a shadow limit) and is counted as one. The
/// enforced limit has spent for it: a refused or failed call spends what its store spent
/// before failing (over-restrictive, never over; refunds are issue 26).
#[test]
fn a_store_error_on_a_shadow_member_after_the_enforced_ones_admitted_is_counted_as_an_error() {
    let (service, gate) = gated();
    let enforced = limit(5, "enforced");
    let shadow = limit(5, "shadow").shadow(true);
    gate.fail.store(true, Ordering::SeqCst);
    let r = service
        .consume_all(&[("k", &enforced), ("k", &shadow)])
        .now_or_never()
        .unwrap();
    assert!(matches!(r, Err(Error::Store { .. })), "{r:?}");
    gate.fail.store(false, Ordering::SeqCst);
    let stats = service.stats();
    let level = service.status("k", &enforced).now_or_never().unwrap();
    assert_eq!(
        (stats.total.allowed, stats.total.errors),
        (0, 1),
        "the failed call counted in the total as {:?}",
        stats.total
    );
    assert_eq!(
        level.unwrap().remaining,
        4,
        "the enforced limit spent for it"
    );
}

// ---------------------------------------------------------------------------------------------
// Looks, state shared, stacks

/// `status` and `check` with `consume(false)` on a shadow limit over its limit: nothing
/// spent, nothing counted, on every store.
#[test]
fn status_and_check_on_a_shadow_limit_count_and_spend_nothing() {
    let clock = ratelimit_tests::clock();
    let (services, _servers) =
        ratelimit_tests::on_every_store("probe-look", Config::builder, &clock);
    let rt = current_thread();
    for (store, service) in services {
        let shadow = limit(2, "looked").shadow(true);
        rt.block_on(async {
            for _ in 0..3 {
                service.consume("u", &shadow).await.unwrap();
            }
            service.reset_stats();
            for _ in 0..5 {
                let s = service.status("u", &shadow).await.unwrap();
                assert_eq!(s.remaining, 0, "{store}");
                let c = service
                    .check("u", &shadow.clone().consume(false))
                    .await
                    .unwrap();
                assert_eq!(c.remaining, 0, "{store}");
            }
            // A fresh key: looks leave it full.
            for _ in 0..5 {
                let c = service
                    .check("v", &shadow.clone().consume(false))
                    .await
                    .unwrap();
                assert!(c.allowed && !c.shadowed, "{store}");
            }
            assert_eq!(service.status("v", &shadow).await.unwrap().remaining, 2);
        });
        let stats = service.stats();
        assert_eq!(counts(stats.total), (0, 0, 0, 0, 0), "{store}");
        assert!(
            stats
                .by_method
                .get("looked")
                .is_none_or(|c| *c == Counts::default()),
            "{store}"
        );
    }
}

/// An enforced limit and a shadow limit with the same key and options (but `shadow`) decide
/// on one state: the shadow limit sees what the enforced one spent, and the other way round.
#[test]
fn an_enforced_and_a_shadow_limit_with_the_same_options_decide_on_one_state() {
    let clock = ratelimit_tests::clock();
    let (services, _servers) =
        ratelimit_tests::on_every_store("probe-same", Config::builder, &clock);
    let rt = current_thread();
    for (store, service) in services {
        let enforced = limit(4, "same");
        let shadow = enforced.clone().shadow(true);
        rt.block_on(async {
            let mut seen = Vec::new();
            for options in [&enforced, &shadow, &enforced, &shadow, &enforced, &shadow] {
                let d = service.consume("u", options).await.unwrap();
                seen.push((d.allowed, d.shadowed, d.remaining));
            }
            assert_eq!(
                seen,
                [
                    (true, false, 3),
                    (true, false, 2),
                    (true, false, 1),
                    (true, false, 0),
                    (false, false, 0),
                    (true, true, 0),
                ],
                "{store}"
            );
        });
        assert_eq!(by_method(&service, "same"), (5, 1, 1, 0, 0), "{store}");
    }
}

/// The same store key twice in one stack is an error without shadow limits; with one of the
/// two a shadow limit it must be the same error, never a double spend.
#[test]
fn the_same_key_twice_in_a_stack_with_one_shadow_is_an_error_not_a_double_spend() {
    let (service, _clock) = memory(Config::builder());
    let enforced = limit(5, "twice");
    let plain = service
        .consume_all(&[("k", &enforced), ("k", &enforced)])
        .now_or_never()
        .unwrap();
    assert!(matches!(plain, Err(Error::InvalidKey { .. })), "{plain:?}");

    let shadow = enforced.clone().shadow(true);
    let once = service
        .consume_all(&[("k", &enforced), ("k", &shadow)])
        .now_or_never()
        .unwrap();
    let level = service
        .status("k", &enforced)
        .now_or_never()
        .unwrap()
        .unwrap();
    assert!(
        matches!(once, Err(Error::InvalidKey { .. })),
        "{once:?}; remaining after one call: {}",
        level.remaining
    );
    assert_eq!(level.remaining, 5);
    // Two shadow limits on one key, the same.
    let both = service
        .consume_all(&[("k", &shadow), ("k", &shadow)])
        .now_or_never()
        .unwrap();
    assert!(matches!(both, Err(Error::InvalidKey { .. })), "{both:?}");
}

/// A stack its enforced limit refuses: the shadow member spends nothing (its level is the
/// same before and after), counts nothing, on every store; `enforce_all` reports the enforced
/// limit's refusal, never the shadow one's.
#[test]
fn a_stack_refused_by_its_enforced_limit_spends_nothing_from_its_shadow_member() {
    let clock = ratelimit_tests::clock();
    let (services, _servers) =
        ratelimit_tests::on_every_store("probe-refused", Config::builder, &clock);
    let rt = current_thread();
    for (store, service) in services {
        let enforced = limit(1, "gate");
        let shadow = limit(3, "tried").shadow(true);
        let limits = [("u", &shadow), ("u", &enforced)];
        rt.block_on(async {
            let first = service.consume_all(&limits).await.unwrap();
            assert!(first.iter().all(|d| d.allowed && !d.shadowed), "{store}");
            for _ in 0..4 {
                let d = service.consume_all(&limits).await.unwrap();
                assert!(!d[1].allowed, "{store}");
                assert!(d[0].allowed && !d[0].shadowed, "{store}");
                match service.enforce_all(&limits).await {
                    Err(Error::Exceeded(e)) => assert_eq!(e.budget.as_deref(), Some("gate")),
                    other => panic!("{store}: {other:?}"),
                }
            }
            assert_eq!(service.status("u", &shadow).await.unwrap().remaining, 2);
        });
        assert_eq!(by_method(&service, "tried"), (1, 0, 0, 0, 0), "{store}");
        assert_eq!(by_method(&service, "gate"), (1, 8, 0, 0, 0), "{store}");
        assert_eq!(counts(service.stats().total), (1, 8, 0, 0, 0), "{store}");
    }
}

/// In a stack its enforced limit refuses, a shadow member's decision reports its level now,
/// as an enforced member that would have admitted does (nothing was spent), not what the
/// call would have left.
#[test]
fn a_refused_stack_reports_its_shadow_members_level_not_what_the_call_would_have_left() {
    let (service, _clock) = memory(Config::builder());
    let gate = limit(1, "gate");
    let other = limit(5, "other");
    let shadow = limit(5, "tried").shadow(true);
    assert!(
        service
            .consume("u", &gate)
            .now_or_never()
            .unwrap()
            .unwrap()
            .allowed
    );
    let d = service
        .consume_all(&[("u", &gate), ("u", &other), ("u", &shadow)])
        .now_or_never()
        .unwrap()
        .unwrap();
    assert!(!d[0].allowed);
    // The enforced member that would have admitted: its level, 5.
    assert_eq!(d[1].remaining, 5);
    assert_eq!(d[2].remaining, 5, "the shadow member's remaining");
}

/// A stack spends from every limit or looks at every one (a mix is `MixedStack`): marking one
/// of them shadow must not change that, nor make the others spend.
#[test]
fn a_shadow_member_does_not_change_whether_a_stack_spends() {
    let (service, _clock) = memory(Config::builder());
    let spends = limit(5, "spends");
    let looks = limit(5, "looks").consume(false);
    // The control: a stack that spends beside a look is refused (`MixedStack`), nothing spent.
    let mixed = |limits: &[(&str, &Options)]| {
        let r = service.consume_all(limits).now_or_never().unwrap();
        assert!(matches!(r, Err(Error::MixedStack)), "{r:?}");
    };
    mixed(&[("k", &spends), ("k", &looks)]);
    let level = |o: &Options| {
        service
            .status("k", o)
            .now_or_never()
            .unwrap()
            .unwrap()
            .remaining
    };
    assert_eq!((level(&spends), level(&looks)), (5, 5));

    // The looking limit a shadow one, or the spending one: still a mix, still nothing spent.
    mixed(&[("k", &spends), ("k", &looks.clone().shadow(true))]);
    mixed(&[("k", &spends.clone().shadow(true)), ("k", &looks)]);
    assert_eq!(
        (level(&spends), level(&looks)),
        (5, 5),
        "the enforced limit spent beside a looking shadow member / the shadow member spent beside an enforced look"
    );
}

/// Limiting switched off: a shadow limit, alone or in a stack, decides nothing and counts
/// nothing, as an enforced one (alone or stacked) does.
#[test]
fn a_shadow_limit_with_limiting_disabled_counts_nothing() {
    let (service, _clock) = memory(Config::builder().enabled(false));
    let enforced = limit(1, "enforced");
    let shadow = limit(1, "shadow").shadow(true);
    for _ in 0..3 {
        let d = service
            .consume("k", &shadow)
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(d.allowed && !d.shadowed);
        let d = service
            .consume_all(&[("k", &enforced)])
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(d[0].allowed);
    }
    assert_eq!(
        service.stats(),
        Default::default(),
        "single calls and plain stacks"
    );
    for _ in 0..3 {
        let d = service
            .consume_all(&[("k", &enforced), ("k2", &shadow)])
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(d.iter().all(|d| d.allowed && !d.shadowed));
        let d = service
            .consume_all(&[("k", &shadow)])
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(d[0].allowed);
    }
    let stats = service.stats();
    assert_eq!(
        (counts(stats.total), by_method(&service, "shadow")),
        ((0, 0, 0, 0, 0), (0, 0, 0, 0, 0))
    );
}

/// A call under no tier with a limit of its own, on a configuration whose default tier is a
/// shadow tier, is a shadow limit: "a tier's shadow makes every limit under it one", and a
/// call naming no tier is under the default tier. Pinned here: an explicit limit (an HTTP
/// layer's, an annotated fn's `limit = ...`) stops refusing when the default tier is shadow.
#[test]
fn a_call_with_its_own_limit_under_a_shadow_default_tier_is_a_shadow_limit() {
    let (service, _clock) = memory(
        Config::builder()
            .tier(Tier::new("trial", 100).window("1h").shadow())
            .default_tier("trial"),
    );
    let own = limit(1, "own");
    let seen: Vec<(bool, bool)> = (0..3)
        .map(|_| {
            let d = service.consume("k", &own).now_or_never().unwrap().unwrap();
            (d.allowed, d.shadowed)
        })
        .collect();
    assert_eq!(seen, [(true, false), (true, true), (true, true)]);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

/// A stacked call given up while its shadow member's store answers (the store has spent it):
/// counted, as one call is (abandoned), so that the budget's counts add up to what the store
/// spent.
#[test]
fn a_stack_dropped_while_its_shadow_member_is_awaited_is_counted() {
    let (service, gate) = gated();
    let enforced = limit(5, "enforced");
    let shadow = limit(5, "shadow").shadow(true);
    // The control: one call of the shadow limit dropped while the store answers.
    gate.hang.store(true, Ordering::SeqCst);
    assert!(service.consume("k1", &shadow).now_or_never().is_none());
    gate.hang.store(false, Ordering::SeqCst);
    let spent = 5 - service
        .status("k1", &shadow)
        .now_or_never()
        .unwrap()
        .unwrap()
        .remaining;
    let (allowed, _, _, _, abandoned) = by_method(&service, "shadow");
    assert_eq!((spent, allowed + abandoned), (1, 1));
    service.reset_stats();

    gate.hang.store(true, Ordering::SeqCst);
    let limits = [("k2", &enforced), ("k2", &shadow)];
    assert!(service.consume_all(&limits).now_or_never().is_none());
    gate.hang.store(false, Ordering::SeqCst);
    let level = |o: &Options| {
        5 - service
            .status("k2", o)
            .now_or_never()
            .unwrap()
            .unwrap()
            .remaining
    };
    assert_eq!((level(&enforced), level(&shadow)), (1, 1));
    // The stacked call was given up before it answered: abandoned in every limit's scopes
    // (as a stack without shadow limits dropped while its store decides).
    assert_eq!(by_method(&service, "enforced"), (0, 0, 0, 0, 1));
    let (allowed, _, _, _, abandoned) = by_method(&service, "shadow");
    assert_eq!(
        allowed + abandoned,
        1,
        "the shadow member's spend: {:?}",
        by_method(&service, "shadow")
    );
}

// ---------------------------------------------------------------------------------------------
// Concurrency

/// 8 tasks x 50 calls on a shadow limit of 10: exactly 10 calls not shadowed, 390 shadowed,
/// all admitted, the budget left at 0, on every store.
#[test]
fn exact_counts_under_concurrency_on_a_shadow_limit() {
    let clock = ratelimit_tests::clock();
    let (services, _servers) =
        ratelimit_tests::on_every_store("probe-many", Config::builder, &clock);
    let rt = multi_thread();
    for (store, service) in services {
        for strategy in Strategy::ALL {
            let budget = format!("many-{strategy}");
            let shadow = Options::new()
                .limit(10)
                .window(LONG)
                .strategy(strategy)
                .budget(budget.clone())
                .shadow(true);
            let (plain, shadowed) = rt.block_on(hammer(&service, &shadow, 8, 50));
            assert_eq!((plain, shadowed), (10, 390), "{store} {strategy}");
            let level = rt.block_on(service.status("hot", &shadow)).unwrap();
            assert_eq!(level.remaining, 0, "{store} {strategy}");
            assert_eq!(
                by_method(&service, &budget),
                (400, 0, 390, 0, 0),
                "{store} {strategy}"
            );
        }
    }
}

/// `tasks` tasks making `calls` calls each on key `"hot"`: the calls admitted without being
/// shadowed, and those shadowed (every call must be admitted).
async fn hammer(
    service: &RateLimitService,
    options: &Options,
    tasks: usize,
    calls: usize,
) -> (u64, u64) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (service, options) = (service.clone(), options.clone());
            tokio::spawn(async move {
                let (mut plain, mut shadowed) = (0, 0);
                for _ in 0..calls {
                    let d = service.consume("hot", &options).await.unwrap();
                    assert!(d.allowed && d.retry_after.is_none());
                    match d.shadowed {
                        true => shadowed += 1,
                        false => plain += 1,
                    }
                }
                (plain, shadowed)
            })
        })
        .collect();
    let mut out = (0, 0);
    for handle in handles {
        let (p, s) = handle.await.unwrap();
        out = (out.0 + p, out.1 + s);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Redis

#[cfg(feature = "redis")]
mod redis_probes {
    use super::*;
    use ratelimit::{LeaseOptions, ProblemKind, RedisOptions, StoreConfig};
    use ratelimit_tests::redis_server::{prefix, RedisServer};
    use std::future::Future;

    fn over(options: RedisOptions, name: &str) -> RateLimitService {
        let config = Config::builder()
            .key_prefix(prefix(name))
            .store(StoreConfig::Redis(options))
            .build()
            .unwrap();
        RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap()
    }

    fn plain(server: &RedisServer) -> RedisOptions {
        RedisOptions::new(server.url()).timeout(Duration::from_secs(10))
    }

    /// Sync fns on the Redis store are refused at `init`, shadow or not, one limit or a stack
    /// of shadow limits: a store that must be waited for never runs a sync fn.
    #[test]
    fn sync_shadow_fns_are_refused_on_the_redis_store() {
        let server = RedisServer::start();
        let builder = || {
            Module::builder()
                .key_prefix(prefix("probe-sync"))
                .store(StoreConfig::Redis(plain(&server)))
        };
        let err = TestModule::new(builder()).unwrap_err();
        let found = ratelimit_tests::problems(&err);
        let sync: Vec<&str> = found
            .iter()
            .filter(|(_, kind)| *kind == ProblemKind::SyncOnWaitingStore)
            .map(|(f, _)| *f)
            .collect();
        assert!(sync.iter().any(|f| f.ends_with("::sync_trial")), "{err}");
        assert!(
            sync.iter().any(|f| f.ends_with("::sync_stacked_trial")),
            "{err}"
        );
        assert!(matches!(builder().init(), Err(Error::Declarations(_))));
        assert!(!Module::is_initialized());
    }

    /// A shadow limit on leased budgets (slices of 4): 8 tasks x 50 calls on a limit of 10,
    /// exactly 10 not shadowed, 390 shadowed; the same through `consume_now`.
    #[test]
    fn a_shadow_limit_on_leased_budgets_counts_exactly() {
        let server = RedisServer::start();
        let rt = multi_thread();
        for strategy in [Strategy::FixedWindow, Strategy::TokenBucket] {
            let service = rt.block_on(async {
                over(plain(&server).leases(LeaseOptions::new(4)), "probe-lease")
            });
            let mut shadow = Options::new()
                .limit(10)
                .window(Duration::from_secs(24 * 3_600))
                .strategy(strategy)
                .budget("leased")
                .shadow(true);
            if strategy == Strategy::TokenBucket {
                shadow = shadow.refill(1);
            }
            let (plain_calls, shadowed) = rt.block_on(hammer(&service, &shadow, 8, 50));
            assert_eq!((plain_calls, shadowed), (10, 390), "{strategy}");
            assert_eq!(
                by_method(&service, "leased"),
                (400, 0, 390, 0, 0),
                "{strategy}"
            );
            // consume_now: leased units and held refusals at once, the rest awaited.
            let now_key = format!("now-{strategy}");
            let seen = rt.block_on(async {
                let mut seen = (0, 0);
                for _ in 0..30 {
                    let d = match service.consume_now(&now_key, &shadow) {
                        Some(d) => d.unwrap(),
                        None => service.consume(&now_key, &shadow).await.unwrap(),
                    };
                    assert!(d.allowed && d.retry_after.is_none(), "{strategy}");
                    match d.shadowed {
                        true => seen.1 += 1,
                        false => seen.0 += 1,
                    }
                }
                seen
            });
            assert_eq!(seen, (10, 20), "{strategy}");
            assert_eq!(
                by_method(&service, "leased"),
                (430, 0, 410, 0, 0),
                "{strategy}"
            );
        }
    }

    /// A shadow limit's refusals held in the process (Redis refused, the store answers again
    /// at once until the retry time) are still shadowed for shadow calls; an enforced limit
    /// on another budget (same key, same quota) is untouched by them; an enforced limit with
    /// the shadow one's very options is refused (one state), with a retry time.
    #[test]
    fn held_refusals_of_a_shadow_limit_stay_shadowed_and_leave_other_budgets_alone() {
        let server = RedisServer::start();
        let rt = current_thread();
        let service = rt.block_on(async { over(plain(&server), "probe-held") });
        let shadow = limit(2, "tried").shadow(true);
        let other = limit(2, "other");
        rt.block_on(async {
            for call in 0..3 {
                let d = service.consume("u", &shadow).await.unwrap();
                assert_eq!(d.shadowed, call >= 2);
            }
            // Held now: answered at once, still shadowed.
            for _ in 0..5 {
                let d = service.consume_now("u", &shadow).expect("held").unwrap();
                assert!(d.allowed && d.shadowed && d.retry_after.is_none());
                let e = service
                    .enforce("u", &shadow)
                    .now_or_never()
                    .expect("held")
                    .unwrap();
                assert!(e.shadowed);
            }
            for _ in 0..2 {
                assert!(service.consume("u", &other).await.unwrap().allowed);
            }
            assert!(!service.consume("u", &other).await.unwrap().allowed);
            let promoted = shadow.clone().shadow(false);
            let refused = match service.consume_now("u", &promoted) {
                Some(d) => d.unwrap(),
                None => service.consume("u", &promoted).await.unwrap(),
            };
            assert!(!refused.allowed && !refused.shadowed);
            assert!(refused.retry_after.is_some());
        });
        // The promoted (enforced) call is refused in the same budget.
        assert_eq!(by_method(&service, "tried"), (13, 1, 11, 0, 0));
        assert_eq!(by_method(&service, "other"), (2, 1, 0, 0, 0));
    }

    /// An enforced limit's refusal held in the process: a shadow call with the same options
    /// is answered by it at once, admitted and marked, never refused.
    #[test]
    fn an_enforced_refusal_held_in_the_process_is_shadowed_for_a_shadow_call() {
        let server = RedisServer::start();
        let rt = current_thread();
        let service = rt.block_on(async { over(plain(&server), "probe-held-2") });
        let enforced = limit(1, "shared");
        let shadow = enforced.clone().shadow(true);
        rt.block_on(async {
            assert!(service.consume("u", &enforced).await.unwrap().allowed);
            assert!(!service.consume("u", &enforced).await.unwrap().allowed);
            let d = service.consume_now("u", &shadow).expect("held").unwrap();
            assert!(d.allowed && d.shadowed && d.retry_after.is_none());
            let d = service.consume("u", &shadow).await.unwrap();
            assert!(d.allowed && d.shadowed);
        });
        assert_eq!(by_method(&service, "shared"), (3, 1, 2, 0, 0));
    }

    /// A stacked call dropped after its first poll on Redis (the enforced limits' request
    /// sent): what Redis spent is counted (admitted or abandoned), and the shadow member,
    /// never reached, spent nothing.
    #[test]
    fn a_stack_dropped_at_its_first_poll_on_redis_counts_what_redis_spent() {
        let server = RedisServer::start();
        let rt = multi_thread();
        let service = rt.block_on(async { over(plain(&server), "probe-drop") });
        let enforced = limit(5, "enforced");
        let shadow = limit(5, "shadow").shadow(true);
        rt.block_on(async {
            // Connected, scripts loaded.
            service.consume("warm", &enforced).await.unwrap();
            service.reset_stats();
            let limits = [("k", &enforced), ("k", &shadow)];
            assert!(service.consume_all(&limits).now_or_never().is_none());
            // Wait (Redis' state, never the clock) for the request, if sent, to be done.
            let mut spent = 0;
            for _ in 0..200 {
                tokio::task::yield_now().await;
                spent = 5 - service.status("k", &enforced).await.unwrap().remaining;
                if spent == 1 {
                    break;
                }
            }
            let (allowed, _, _, _, abandoned) = by_method(&service, "enforced");
            assert!(
                spent <= allowed + abandoned,
                "{spent} spent, counted {allowed}+{abandoned}"
            );
            assert_eq!(service.status("k", &shadow).await.unwrap().remaining, 5);
        });
    }

    /// A stacked call on Redis dropped once its enforced limits have been decided, while its
    /// shadow member's request is in flight: what Redis spent for the shadow member is
    /// counted. Races the network; run it a few times.
    #[test]
    fn a_stack_dropped_while_its_shadow_member_is_in_flight_on_redis_is_counted() {
        let server = RedisServer::start();
        let rt = multi_thread();
        let service = rt.block_on(async { over(plain(&server), "probe-drop-2") });
        let enforced = limit(5, "enforced");
        let shadow = limit(5, "shadow").shadow(true);
        rt.block_on(async {
            service.consume("warm", &enforced).await.unwrap();
            service.consume("warm", &shadow).await.unwrap();
            service.reset_stats();
            let limits = [("k", &enforced), ("k", &shadow)];
            let mut call = Box::pin(service.consume_all(&limits));
            let waker = futures::task::noop_waker();
            let mut cx = std::task::Context::from_waker(&waker);
            // Polled a few times (the enforced limits' round trip, then the shadow member's),
            // and dropped wherever that left it: before any reply, between the two, or with
            // the shadow member's request in flight.
            for _ in 0..3 {
                if call.as_mut().poll(&mut cx).is_ready() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            drop(call);
            let mut spent = 0;
            for _ in 0..200 {
                tokio::task::yield_now().await;
                spent = 5 - service.status("k", &shadow).await.unwrap().remaining;
                if spent == 1 {
                    break;
                }
            }
            // A stacked call given up counts as abandoned in every limit's scopes, once.
            let (allowed, _, _, _, abandoned) = by_method(&service, "shadow");
            assert!(
                spent <= allowed + abandoned && allowed + abandoned == 1,
                "Redis spent {spent} for the shadow member, counted {allowed}+{abandoned}"
            );
        });
    }

    /// A module with the queue on, on Redis: a shadow limit over its limit never joins the
    /// queue (the awaited path).
    #[test]
    fn a_shadow_limit_on_redis_never_joins_the_queue() {
        let server = RedisServer::start();
        let rt = current_thread();
        let config = Config::builder()
            .key_prefix(prefix("probe-queue"))
            .queue_enabled(true)
            .store(StoreConfig::Redis(plain(&server)))
            .build()
            .unwrap();
        let service =
            RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap();
        let shadow = limit(2, "queued").shadow(true);
        rt.block_on(async {
            for call in 0..5 {
                let d = service.consume("u", &shadow).await.unwrap();
                assert!(d.allowed, "{call}");
                assert_eq!(d.shadowed, call >= 2, "{call}");
            }
        });
        assert_eq!(service.stats().queue.queued, 0);
        assert_eq!(by_method(&service, "queued"), (5, 0, 3, 0, 0));
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[cfg(feature = "axum")]
mod http_probes {
    use super::*;
    use axum::routing::get;
    use axum::Router;
    use ratelimit::http::RateLimitLayer;
    use tower::ServiceExt;

    async fn request(app: &Router) -> axum::response::Response {
        let request = axum::extract::Request::get("/")
            .body(axum::body::Body::empty())
            .unwrap();
        app.clone().oneshot(request).await.unwrap()
    }

    fn app(layer: RateLimitLayer) -> Router {
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer)
    }

    fn one_key() -> impl Fn(&axum::http::request::Parts) -> Option<String> + Clone {
        |_: &axum::http::request::Parts| Some("one".to_owned())
    }

    /// A layer with a shadow limit: every request 200, never a `Retry-After`, on the memory
    /// store, with the queue on, and per route.
    #[tokio::test]
    async fn a_shadow_layer_answers_200_without_retry_after() {
        let (service, _clock) = memory(Config::builder().queue_enabled(true));
        let plain =
            app(RateLimitLayer::new(service.clone(), one_key())
                .options(limit(2, "layer").shadow(true)));
        let per_route = app(RateLimitLayer::new(service.clone(), one_key())
            .options(limit(2, "routed").shadow(true))
            .per_route());
        for n in 0..5 {
            for app in [&plain, &per_route] {
                let response = request(app).await;
                assert_eq!(response.status(), 200, "request {n}");
                assert!(response.headers().get("retry-after").is_none(), "{n}");
            }
        }
        assert_eq!(by_method(&service, "layer"), (5, 0, 3, 0, 0));
        let routed: u64 = service
            .stats()
            .by_method
            .iter()
            .filter(|(name, _)| name.starts_with("routed"))
            .map(|(_, c)| c.shadowed)
            .sum();
        assert_eq!(routed, 3);
        assert_eq!(service.stats().queue.queued, 0);
    }

    /// A layer of an enforced and a shadow limit: the enforced one alone refuses (429, its
    /// `Retry-After`), and the refused requests spend nothing from the shadow one.
    #[tokio::test]
    async fn a_stacked_layer_refuses_by_its_enforced_limit_only() {
        let (service, _clock) = memory(Config::builder());
        let app = app(RateLimitLayer::new(service.clone(), one_key())
            .limit(limit(2, "gate"))
            .limit(limit(5, "tried").shadow(true)));
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let response = request(&app).await;
            let status = response.status().as_u16();
            assert_eq!(
                response.headers().get("retry-after").is_some(),
                status == 429
            );
            statuses.push(status);
        }
        assert_eq!(statuses, [200, 200, 429, 429, 429]);
        let level = service.status("one", &limit(5, "tried")).await.unwrap();
        assert_eq!(level.remaining, 3);
        assert_eq!(by_method(&service, "tried"), (2, 0, 0, 0, 0));
    }

    /// The same on Redis: the awaited path and refusals held in the process, 200 every time.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_shadow_layer_on_redis_answers_200_without_retry_after() {
        use ratelimit::{RedisOptions, StoreConfig};
        use ratelimit_tests::redis_server::{prefix, RedisServer};
        let server = RedisServer::start();
        let config = Config::builder()
            .key_prefix(prefix("probe-http"))
            .store(StoreConfig::Redis(
                RedisOptions::new(server.url()).timeout(Duration::from_secs(10)),
            ))
            .build()
            .unwrap();
        let service =
            RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap();
        let app =
            app(RateLimitLayer::new(service.clone(), one_key())
                .options(limit(2, "layer").shadow(true)));
        for n in 0..6 {
            let response = request(&app).await;
            assert_eq!(response.status(), 200, "request {n}");
            assert!(response.headers().get("retry-after").is_none(), "{n}");
        }
        assert_eq!(by_method(&service, "layer"), (6, 0, 4, 0, 0));
    }
}
