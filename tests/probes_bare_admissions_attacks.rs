//! Attacks on the bare admission (f106d70, f41f483, 16c2316): an annotated fn's admitted call
//! is told `Told::Admitted` by the memory store (`Store::decide_now_told`) when its verdict
//! admits plainly, instead of the whole decision. Each probe runs one script of annotated
//! calls twice, with a hand-driven clock: on the memory store (bare admissions), and on a
//! user store wrapping a memory store that does not override `decide_now_told` (the trait's
//! default: every answer the decision, settled and checked as before the shortcut). The
//! outcome of every call and the stats must be the same, exactly.

use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Error, MemoryOptions, MemoryStore, Module, ModuleBuilder, StoreConfig, Strategy,
    Tier,
};
use ratelimit_tests::{Forward, Hooks};

const MINUTE: Duration = Duration::from_secs(60);

/// A memory store behind the trait's defaults for the service's hidden seams (the
/// [`Forward`] store's): every call of an annotated fn is answered with its whole decision
/// (`Told::Decided`). It takes no penalties or rewards.
#[derive(Clone, Copy, Default)]
struct Decided;

type Full = Forward<MemoryStore, Decided>;

impl Hooks<MemoryStore> for Decided {
    fn adjusts(&self, _: &MemoryStore) -> bool {
        false
    }
}

fn plan(n: u64, strategy: Strategy) -> Tier {
    Tier::new("plan", n).window(MINUTE).strategy(strategy)
}

fn builder(strategy: Strategy, n: u64) -> ModuleBuilder {
    Module::builder().strategy(strategy).tier(plan(n, strategy))
}

/// A module whose tier the tiered fns name, for the probes of fns with quotas of their own.
fn plain() -> ModuleBuilder {
    builder(Strategy::default(), 5)
}

/// The two modules a script runs on: the memory store (bare admissions), and [`Full`].
fn both(make: impl Fn() -> ModuleBuilder) -> [TestModule; 2] {
    let memory = make().store(StoreConfig::Memory(MemoryOptions::default()));
    let full = make().store(StoreConfig::custom(Full::default()));
    [
        TestModule::new(memory).unwrap(),
        TestModule::new(full).unwrap(),
    ]
}

/// One call's outcome, as the fn's caller sees it: admitted, refused (with the refusal's
/// remaining, limit and wait in ms), or another error.
fn outcome(result: Result<(), Error>) -> String {
    match result {
        Ok(()) => "A".into(),
        Err(Error::Exceeded(e)) => {
            let d = &e.decision;
            let wait = d.retry_after.map(|w| w.as_millis());
            format!("D{}/{}/{:?}/{:?}", d.remaining, d.limit, wait, d.shadowed)
        }
        Err(e) => format!("E{e}"),
    }
}

/// `n` calls of `f` on `module`, their outcomes.
fn calls(module: &TestModule, n: usize, f: impl Fn() -> Result<(), Error>) -> Vec<String> {
    module.run(|| (0..n).map(|_| outcome(f())).collect())
}

/// Runs `script` on both modules: the outcomes and stats of the bare path, then the full one.
fn compare(
    make: impl Fn() -> ModuleBuilder,
    script: impl Fn(&TestModule) -> Vec<String>,
) -> [(Vec<String>, ratelimit::Stats); 2] {
    both(make).map(|module| {
        let seen = script(&module);
        let mut stats = module.stats();
        stats.generation = 0;
        (seen, stats)
    })
}

fn assert_same(
    [(bare, bare_stats), (full, full_stats)]: [(Vec<String>, ratelimit::Stats); 2],
) -> Vec<String> {
    assert_eq!(bare, full, "outcomes: bare vs full");
    assert_eq!(bare_stats, full_stats, "stats: bare vs full");
    bare
}

#[rate_limit(tier = "plan", name = "tiered")]
fn tiered() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(tier = "plan", key = user, name = "tiered-keyed")]
async fn tiered_async(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Reloads that shrink the tier's capacity under a spent state, loosen it, then shrink it to
/// zero, for every strategy: a state whose remaining exceeds the new capacity, a transition
/// holding the old quota (`transition::retry`, `under_its_quota`), a drained bucket. Would
/// catch a bare admission where the decision was refused, broken (more remaining than the
/// limit) or retried, and any count that differs.
#[test]
fn reloads_shrinking_and_loosening_admit_as_the_full_decision() {
    for strategy in Strategy::ALL {
        let script = |module: &TestModule| {
            let reload = |n| {
                let config = ratelimit_tests::on_its_store(
                    module.service(),
                    ratelimit::Config::builder()
                        .strategy(strategy)
                        .tier(plan(n, strategy)),
                );
                module.service().reload(config).unwrap();
            };
            let keyed = |user: &'static str| {
                move || futures::executor::block_on(module.scope(tiered_async(user)))
            };
            let mut seen = calls(module, 3, tiered);
            seen.extend(calls(module, 1, keyed("u")));
            reload(2);
            seen.extend(calls(module, 3, tiered));
            seen.extend(calls(module, 3, keyed("u")));
            module.clock().advance(Duration::from_secs(20));
            seen.extend(calls(module, 3, tiered));
            reload(10);
            seen.extend(calls(module, 12, tiered));
            module.clock().advance(Duration::from_secs(30));
            seen.extend(calls(module, 12, tiered));
            seen.extend(calls(module, 12, keyed("v")));
            reload(0);
            seen.extend(calls(module, 2, tiered));
            module.clock().advance(MINUTE * 2);
            reload(3);
            seen.extend(calls(module, 4, tiered));
            seen
        };
        let seen = assert_same(compare(|| builder(strategy, 5), script));
        // Both paths admitted something and refused something: a script that neither
        // admits nor refuses compares nothing.
        assert!(seen.iter().any(|s| s == "A"), "{strategy:?}: {seen:?}");
        assert!(seen.iter().any(|s| s != "A"), "{strategy:?}: {seen:?}");
    }
}

#[rate_limit(limit = 2, window = "1m", key = user, shadow = true, name = "shadowed")]
fn shadowed(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A shadow limit: its refusals become admissions marked shadowed, counted as allowed and
/// shadowed; its plain admissions are told bare. Would catch a shadowed admission counted as
/// a plain one (or the other way round) on the bare path.
#[test]
fn a_shadow_limit_counts_as_the_full_decision() {
    let script = |module: &TestModule| {
        let mut seen = calls(module, 5, || shadowed("u"));
        module.clock().advance(MINUTE);
        seen.extend(calls(module, 3, || shadowed("u")));
        seen
    };
    let seen = assert_same(compare(plain, script));
    assert_eq!(seen, vec!["A"; 8]);
    let [module, _] = both(plain);
    calls(&module, 5, || shadowed("u"));
    let total = module.stats().total;
    assert_eq!(
        (total.checks, total.allowed, total.shadowed, total.denied),
        (5, 5, 3, 0),
        "{total:?}"
    );
}

#[rate_limit(limit = 2, window = "1m", key = user, block_for = "5m", name = "blocking")]
fn blocking(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A limit with a block: its calls are decided aside (never told bare), its refusals
/// blocked. Would catch a bare admission inside a block.
#[test]
fn a_block_admits_as_the_full_decision() {
    let script = |module: &TestModule| {
        let mut seen = calls(module, 3, || blocking("u"));
        module.clock().advance(MINUTE * 2);
        seen.extend(calls(module, 1, || blocking("u")));
        module.clock().advance(MINUTE * 4);
        seen.extend(calls(module, 3, || blocking("u")));
        seen
    };
    let seen = assert_same(compare(plain, script));
    assert_eq!(seen.iter().filter(|s| *s == "A").count(), 4, "{seen:?}");
}

#[rate_limit(limit = 2, window = "1m", key = user, name = "stack-a")]
#[rate_limit(limit = 3, window = "1h", key = user, name = "stack-b")]
fn stacked(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 3, window = "1h", key = user, name = "stack-b")]
fn stack_b_alone(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Two attributes on one fn, and a fn alone on the wider of the two budgets: the stacked
/// calls spend both or neither, the single one is told bare. Would catch a bare admission
/// on one budget spending what the stack refused, or counted twice.
#[test]
fn stacked_attributes_admit_as_the_full_decision() {
    let script = |module: &TestModule| {
        let mut seen = calls(module, 3, || stacked("u"));
        seen.extend(calls(module, 2, || stack_b_alone("u")));
        module.clock().advance(MINUTE);
        seen.extend(calls(module, 2, || stacked("u")));
        module.clock().advance(MINUTE * 60);
        seen.extend(calls(module, 2, || stack_b_alone("u")));
        seen.extend(calls(module, 3, || stacked("u")));
        seen
    };
    let seen = assert_same(compare(plain, script));
    assert_eq!(seen.iter().filter(|s| *s == "A").count(), 6, "{seen:?}");
}

#[rate_limit(limit = 2, window = "1m", key = user, count = "err", name = "counted")]
fn counted(user: &str, fail: bool) -> Result<(), Error> {
    let _ = user;
    if fail {
        Err(Error::ZeroCost)
    } else {
        Ok(())
    }
}

/// A `count = "err"` fn keeps its spends (never told bare: a refund needs the stamp) and
/// gives back those that succeed; a plain fn on the same budget is told bare. Would catch a
/// kept spend told bare (its refund lost: fewer admitted) or refunded twice.
#[test]
fn kept_spends_refund_as_the_full_decision() {
    let script = |module: &TestModule| {
        let mut seen = calls(module, 3, || counted("u", false));
        seen.extend(calls(module, 3, || counted("u", true)));
        seen.extend(calls(module, 2, || counted("u", false)));
        module.clock().advance(MINUTE);
        seen.extend(calls(module, 1, || counted("u", true)));
        seen.extend(calls(module, 2, || counted("u", false)));
        seen
    };
    let seen = assert_same(compare(plain, script));
    // Successes given back, failures spent: the third failure and the successes after it
    // refused, until the window turns.
    let failed = format!("E{}", Error::ZeroCost);
    let refused = "D0/2/Some(60000)/false".to_owned();
    let a = || "A".to_owned();
    let expected = [
        a(),
        a(),
        a(),
        failed.clone(),
        failed.clone(),
        refused.clone(),
    ]
    .into_iter()
    .chain([refused.clone(), refused, failed, a(), a()])
    .collect::<Vec<_>>();
    assert_eq!(seen, expected);
}

/// A state spent under a larger capacity, then decided under a smaller one (a reload that
/// shrinks a limit, with no transition: only a loosened limit is held to its old quota), for
/// every strategy: the memory store's admission has no more remaining than the new capacity
/// and no `retry_after`, so `Verdict::admits_plainly` tells it bare exactly when the full
/// decision would pass `settle`'s shape checks. Would catch a state whose remaining exceeds
/// the quota's capacity admitted bare where the decision is an error ("more remaining than
/// its limit").
#[test]
fn a_shrunk_capacity_admits_no_more_remaining_than_it() {
    use ratelimit::{Clock, ManualClock, Quota};
    let clock = ManualClock::new(ratelimit_tests::START);
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let wide = Quota::per_minute(5).unwrap().with_strategy(strategy);
        let narrow = Quota::per_minute(2).unwrap().with_strategy(strategy);
        let first = store.acquire("k", &wide, 1, clock.now()).unwrap();
        assert_eq!((first.allowed, first.remaining), (true, 4), "{strategy:?}");
        let shrunk = store.acquire("k", &narrow, 1, clock.now()).unwrap();
        assert!(
            shrunk.remaining <= narrow.capacity() && shrunk.retry_after.is_none() == shrunk.allowed,
            "{strategy:?}: {shrunk:?}"
        );
    }
}

#[rate_limit(tier = plan, key = user, name = "per-call")]
fn per_call(user: &str, plan: &str) -> Result<(), Error> {
    let _ = (user, plan);
    Ok(())
}

#[rate_limit(tier = plan, key = user, name = "per-call-async")]
async fn per_call_async(user: &str, plan: &str) -> Result<(), Error> {
    let _ = (user, plan);
    Ok(())
}

fn per_call_builder(n: u64) -> ModuleBuilder {
    Module::builder()
        .tier(plan(n, Strategy::TokenBucket))
        .tier(Tier::new("shadow", n).window(MINUTE).shadow())
        .tier(Tier::new("blocked", n).window(MINUTE).block_for(MINUTE * 5))
}

/// A tier chosen per call (sync fns decide it on a site worked out for the call, told bare
/// too; async ones too where they decide at once): the plain tier, a shadow one and one with
/// a block, through a reload that shrinks them all. Would catch a bare admission on a per
/// call site where the decision refused, a shadowed refusal counted plain, or a tier's
/// counts that differ.
#[test]
fn a_tier_per_call_admits_as_the_full_decision() {
    let script = |module: &TestModule| {
        let mut seen = vec![];
        let round = |seen: &mut Vec<String>, n| {
            for tier in ["plan", "shadow", "blocked"] {
                seen.extend(calls(module, n, || per_call("u", tier)));
                seen.extend(calls(module, n, || {
                    futures::executor::block_on(module.scope(per_call_async("v", tier)))
                }));
            }
        };
        round(&mut seen, 4);
        let config = ratelimit_tests::on_its_store(
            module.service(),
            ratelimit::Config::builder()
                .tier(plan(1, Strategy::TokenBucket))
                .tier(Tier::new("shadow", 1).window(MINUTE).shadow())
                .tier(Tier::new("blocked", 1).window(MINUTE).block_for(MINUTE * 5)),
        );
        module.service().reload(config).unwrap();
        round(&mut seen, 2);
        module.clock().advance(MINUTE * 2);
        round(&mut seen, 3);
        module.clock().advance(MINUTE * 5);
        round(&mut seen, 3);
        seen
    };
    let seen = assert_same(compare(|| per_call_builder(3), script));
    assert!(seen.iter().any(|s| s == "A"), "{seen:?}");
    assert!(seen.iter().any(|s| s.starts_with('D')), "{seen:?}");
}
