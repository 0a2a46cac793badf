//! helper-77's probes of prepared sites across a reload that moves their limit to another
//! state: a [`Prepared`] site works its transition out once, when it is prepared, where a
//! call resolved per call works it out on every call. Each probe runs one script on three
//! services on hand-driven clocks: (a) a site prepared right after the reload, (b) the
//! per-call path with the same options, (c) a twin that never reloaded (the new
//! configuration from the start), and counts admissions exactly. Memory store.
//!
//! What can change after a site was prepared was probed: penalties, rewards and resets after
//! the reload, a second reload, calls beside the site with their own block or window, the
//! clock past the old window and past the old state's carrying. The transition is worked out
//! from the generation (fixed for it) and the clock alone, so the prepared site only ever
//! holds old states the per-call path has let go: it answered as the per-call path in every
//! probe but two, where the per-call path admitted more (fixed): a call's own quota first
//! resolved after the reload (a slow bucket, a block) outlasts what the reload kept the
//! replaced configuration for (`Kept::carrying`, worked out from the own quotas seen before
//! it), and the per-call path stopped carrying its old state there while the prepared site
//! kept carrying it; a site prepared only then did as the per-call path. The horizon now
//! reads the own quotas seen so far (`Kept::carrying_with`).

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, Prepared, RateLimitService, Strategy, Tier};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::{now, on_its_store, service, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// A configuration, made afresh for each service.
type Make = fn() -> ConfigBuilder;

/// One step of a script.
#[derive(Clone)]
enum Step {
    /// The clock set to `START` plus this many seconds.
    At(u64),
    /// Calls on `"k"` with the site's options: counted.
    Calls(usize),
    /// Calls on `"k"` with other options, per call: counted.
    Beside(Options, usize),
    /// A penalty of this many units on `"k"` with the site's options.
    Penalize(u64),
    /// A reward of this many units.
    Reward(u64),
    /// `"k"` reset with the site's options.
    Reset,
    /// A reload, the twin's too when `true` (the first reload, the move, is the twin's
    /// configuration from the start).
    Reload(Make, bool),
}

/// Which of the three services a script runs on.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Way {
    Prepared,
    PerCall,
    Twin,
}

/// What one service admits at each counted step of `steps`, from `before` (the twin from
/// `after`, the first reload's configuration), its calls with `options`.
fn run((before, after): (Make, Make), options: &Options, steps: &[Step], way: Way) -> Vec<u64> {
    let first = match way {
        Way::Twin => after(),
        _ => before(),
    };
    let (service, clock) = service(first.build().unwrap());
    let mut site: Option<Prepared> = None;
    let mut moved = false;
    let mut counts = Vec::new();
    let admitted = |service: &RateLimitService, site: &Option<Prepared>, o: &Options, n| {
        (0..n)
            .map(|_| match site {
                Some(site) => u64::from(site.consume_now("k").unwrap().unwrap().allowed),
                None => u64::from(now(service.consume("k", o)).unwrap().allowed),
            })
            .sum::<u64>()
    };
    for step in steps {
        match step {
            Step::At(secs) => clock.set(START + Duration::from_secs(*secs)),
            Step::Calls(n) => counts.push(admitted(&service, &site, options, *n)),
            Step::Beside(other, n) => counts.push(admitted(&service, &None, other, *n)),
            Step::Penalize(units) => drop(now(service.penalize("k", options, *units)).unwrap()),
            Step::Reward(units) => drop(now(service.reward("k", options, *units)).unwrap()),
            Step::Reset => drop(now(service.reset_with("k", options)).unwrap()),
            Step::Reload(to, twin_too) => {
                let first = !moved;
                moved = true;
                if way == Way::Twin && (first || !twin_too) {
                    continue;
                }
                service.reload(on_its_store(&service, to())).unwrap();
                if way == Way::Prepared && first {
                    site = Some(service.prepare(options).unwrap());
                }
            }
        }
    }
    counts
}

/// The three services' counts: (prepared, per call, twin).
fn three(
    configs: (Make, Make),
    options: &Options,
    steps: &[Step],
) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let [p, c, t] =
        [Way::Prepared, Way::PerCall, Way::Twin].map(|w| run(configs, options, steps, w));
    eprintln!("prepared {p:?} = {}", p.iter().sum::<u64>());
    eprintln!("per call {c:?} = {}", c.iter().sum::<u64>());
    eprintln!("twin     {t:?} = {}", t.iter().sum::<u64>());
    (p, c, t)
}

/// Everything one service admitted.
fn total(counts: &[u64]) -> u64 {
    counts.iter().sum()
}

/// [`three`] of the moves from `in_a` to `in_b` with no options of the call's own: the
/// prepared site, the per-call path and the twin admit alike, `all` in all (`what` names the
/// case).
fn alike(steps: &[Step], all: u64, what: &str) {
    let (p, c, t) = three((in_a, in_b), &Options::new(), steps);
    assert_eq!(p, c, "{what}");
    assert_eq!(p, t, "{what}");
    assert_eq!(total(&p), all, "{what}");
}

/// A calls' step every `every` seconds from `from` to `to` (inclusive), `n` calls each.
fn sweep(from: u64, to: u64, every: u64, n: usize) -> Vec<Step> {
    (from..=to)
        .step_by(every as usize)
        .flat_map(|s| [Step::At(s), Step::Calls(n)])
        .collect()
}

fn in_a() -> ConfigBuilder {
    bucket("a")
}

fn in_b() -> ConfigBuilder {
    bucket("b")
}

fn in_c() -> ConfigBuilder {
    bucket("c")
}

/// The bucket of 15 spent, moved (tier renamed), then `after`'s steps.
fn spent_and_moved(after: impl IntoIterator<Item = Step>) -> Vec<Step> {
    let mut steps = vec![Step::At(0), Step::Calls(16), Step::Reload(in_b, false)];
    steps.extend(after);
    steps
}

// ---------------------------------------------------------------------------------------
// What may change after a site was prepared: none admits more on the prepared site.
// ---------------------------------------------------------------------------------------

/// The clock alone, every 5 s past the old window and the old state's carrying (its window
/// and tolerance): one path.
#[test]
fn the_clock_past_the_old_window_and_the_carrying_is_seen_alike() {
    let steps = spent_and_moved(sweep(0, 300, 5, 3));
    alike(&steps, 65, "the clock");
}

/// A penalty after the reload, inside the old window and past it.
#[test]
fn a_penalty_after_the_reload_is_seen_alike() {
    for (at, all) in [(30, 76), (90, 86)] {
        let mut after = vec![Step::At(at), Step::Penalize(10)];
        after.extend(sweep(at, at + 400, 5, 3));
        alike(&spent_and_moved(after), all, &format!("penalty at +{at} s"));
    }
}

/// A penalty before the reload (its debt past the tolerance, `Kept::penalized_until`).
#[test]
fn a_penalty_before_the_reload_is_seen_alike() {
    let mut steps = vec![Step::At(0), Step::Calls(16), Step::Penalize(30)];
    steps.push(Step::Reload(in_b, false));
    steps.extend(sweep(0, 600, 10, 3));
    alike(&steps, 85, "a penalty before");
}

/// A reward after the reload, inside the old window and past it.
#[test]
fn a_reward_after_the_reload_is_seen_alike() {
    for (at, all) in [(30, 58), (90, 63)] {
        let mut after = vec![Step::At(at), Step::Reward(5)];
        after.extend(sweep(at, at + 200, 5, 3));
        alike(&spent_and_moved(after), all, &format!("reward at +{at} s"));
    }
}

/// A reset after the reload. Inside the old window the old state is not reset (it holds
/// what the old window spent: probes_transition_sites), so both paths admit less than the
/// twin, whose one state was reset: the designed over-refusal, the same on both. Past it,
/// the old state's debt was carried already: all alike.
#[test]
fn a_reset_after_the_reload_is_seen_alike() {
    for (at, all, twin) in [(30, 53, 63), (90, 63, 63)] {
        let mut after = vec![Step::At(at), Step::Reset];
        after.extend(sweep(at, at + 200, 5, 3));
        let (p, c, t) = three((in_a, in_b), &Options::new(), &spent_and_moved(after));
        assert_eq!(p, c, "reset at +{at} s");
        assert_eq!((total(&p), total(&t)), (all, twin), "reset at +{at} s");
    }
}

/// A second reload (another rename) inside the old window: the prepared site is no longer
/// current and resolves per call.
#[test]
fn a_second_reload_is_seen_alike() {
    for (at, all) in [(30, 70), (90, 80)] {
        let mut after = vec![Step::At(at), Step::Reload(in_c, true)];
        after.extend(sweep(at, at + 300, 5, 3));
        alike(
            &spent_and_moved(after),
            all,
            &format!("second reload at +{at} s"),
        );
    }
}

/// Calls beside the site with their own block of an hour (on the same state) or their own
/// window of two minutes (another state), refused in the old window.
#[test]
fn calls_with_their_own_block_or_window_beside_the_site_are_seen_alike() {
    let others = [
        (Options::new().block_for(HOUR), 81),
        (Options::new().window(2 * MINUTE).refill(20), 84),
    ];
    for (other, all) in others {
        let mut after = vec![Step::At(30), Step::Beside(other.clone(), 3)];
        after.extend(sweep(30, 400, 5, 3));
        alike(&spent_and_moved(after), all, &format!("beside {other:?}"));
    }
}

// ---------------------------------------------------------------------------------------
// A call's own quota first resolved after the reload.
// ---------------------------------------------------------------------------------------

/// Tier `name` (the default tier): a bucket of 10 plus 50 on a minute, a token every 6 s (a
/// debt of 6 minutes).
fn deep(name: &str) -> ConfigBuilder {
    let tier = Tier::new(name, 10)
        .burst(50)
        .refill(10)
        .window(MINUTE)
        .strategy(Strategy::TokenBucket);
    Config::builder().tier(tier).default_tier(name)
}

fn deep_a() -> ConfigBuilder {
    deep("a")
}

fn deep_b() -> ConfigBuilder {
    deep("b")
}

/// The bucket of 60 spent by plain calls (6 minutes owed), the tier renamed; then calls with
/// their own refill of a token a minute (the same 60 tokens, an hour owed), first resolved
/// after the reload, on the same state: in the old window 54 (the old state's 6 minutes read
/// as 6 of their tokens), leaving the old state an hour owed and the new one 54 minutes.
/// Past the old window's carrying (its window and the configured bucket's tolerance: 7
/// minutes) the old state owes its hour still, and the one bucket gives 7 at +421 s, as the
/// twin does. The per-call path let the replaced configuration go there: the reload kept it
/// for the own quotas seen before it, none, and the call read the new state alone: 13.
#[test]
fn a_calls_own_slow_bucket_first_resolved_after_the_reload_keeps_the_old_debt() {
    let own = Options::new().refill(1);
    let steps = [
        Step::At(0),
        Step::Beside(Options::new(), 61),
        Step::Reload(deep_b, false),
        Step::Calls(61),
        Step::At(421),
        Step::Calls(61),
    ];
    let (p, c, t) = three((deep_a, deep_b), &own, &steps);
    assert_eq!(t, [60, 54, 7]);
    assert_eq!(p, t, "prepared");
    assert_eq!(c, t, "per call");
    // A site prepared only then (the HTTP layer's and an annotated fn's, prepared again
    // after the reload at their first call) works its transition out as the per-call path.
    let (service, clock) = service(deep_a().build().unwrap());
    for (options, n) in [(Options::new(), 60), (own.clone(), 54)] {
        for _ in 0..n {
            assert!(now(service.consume("k", &options)).unwrap().allowed);
        }
        if n == 60 {
            service.reload(on_its_store(&service, deep_b())).unwrap();
        }
    }
    clock.set(START + Duration::from_secs(421));
    let late = service.prepare(&own).unwrap();
    let admitted = (0..61)
        .filter(|_| late.consume_now("k").unwrap().unwrap().allowed)
        .count();
    assert_eq!(admitted, 7, "prepared past the carrying");
}

/// The bucket of 15 spent by plain calls, the tier renamed; calls with their own block of an
/// hour, first resolved after the reload, near the old window's end: 9 admitted, the tenth
/// refused by the old state, which blocks it for the hour. Past the configured bucket's
/// carrying (its window and tolerance), the block is the old state's alone: the one key is
/// refused for the hour, as the twin's and the prepared site's. The per-call path let the
/// replaced configuration go there (kept for the own quotas seen before the reload): 5
/// admitted at +200 s and 5 at +3,000 s, inside the hour's block.
#[test]
fn a_calls_own_block_first_resolved_after_the_reload_outlasts_the_carrying() {
    let own = Options::new().block_for(HOUR);
    let steps = [
        Step::At(0),
        Step::Beside(Options::new(), 16),
        Step::Reload(in_b, false),
        Step::At(59),
        Step::Calls(10),
        Step::At(200),
        Step::Calls(5),
        Step::At(3_000),
        Step::Calls(5),
        Step::At(3_660),
        Step::Calls(5),
    ];
    let (p, c, t) = three((in_a, in_b), &own, &steps);
    assert_eq!(t, [15, 9, 0, 0, 5]);
    assert_eq!(p, t, "prepared");
    assert_eq!(c, t, "per call");
}

/// The same block, with reloads after the move that change nothing it is held to (another
/// tier added each time), the ninth of them past the configured bucket's carrying: the
/// replaced configuration is kept past the last 8 while the block may hold (`Kept::holds_any`
/// reads the own quotas seen so far). Let go there (kept for the own quotas seen before the
/// move), the calls past it read the new state alone: 5 admitted at +300 s inside the hour's
/// block.
#[test]
fn a_ninth_reload_keeps_the_move_a_calls_own_block_first_resolved_after_it_is_held_to() {
    let own = Options::new().block_for(HOUR);
    let with_tier = |i: u64| in_b().tier(Tier::new(format!("x{i}"), i + 1).window(MINUTE));
    let (service, clock) = service(in_a().build().unwrap());
    let admitted = |options: &Options, n: usize| {
        (0..n)
            .filter(|_| now(service.consume("k", options)).unwrap().allowed)
            .count()
    };
    assert_eq!(admitted(&Options::new(), 16), 15);
    service.reload(on_its_store(&service, in_b())).unwrap();
    for i in 0..8 {
        clock.set(START + Duration::from_secs(1 + i));
        service
            .reload(on_its_store(&service, with_tier(i)))
            .unwrap();
    }
    clock.set(START + Duration::from_secs(59));
    assert_eq!(admitted(&own, 10), 9);
    clock.set(START + Duration::from_secs(200));
    service
        .reload(on_its_store(&service, with_tier(8)))
        .unwrap();
    clock.set(START + Duration::from_secs(300));
    assert_eq!(admitted(&own, 5), 0, "admitted inside the hour's block");
    clock.set(START + Duration::from_secs(3_660));
    assert_eq!(admitted(&own, 5), 5);
}

/// Tier `name` (the default tier): a bucket of `n` a minute, no burst.
fn plain_bucket(name: &str, n: u64) -> ConfigBuilder {
    let tier = Tier::new(name, n)
        .refill(n)
        .window(MINUTE)
        .strategy(Strategy::TokenBucket);
    Config::builder().tier(tier).default_tier(name)
}

/// Two replaced configurations on one old state: 10 a minute loosened to 20 a minute on the
/// same state, then the tier renamed 30 s later. A site prepared at the rename holds the old
/// state to both (`held_to`) until the later one's carrying ends; the per-call path lets the
/// first go at its own carrying's end. Every 3 s, one call each: alike. Both admit less than
/// the twin that was loosened and never renamed: the old state is decided under both
/// replaced quotas as one (the first's 6 s a token) until the later one's window ends, at
/// +90 s, where the twin holds to the first only until its own window's end, at +60 s,
/// and then admits a call every 3 s. An over-refusal, the same on every path, left as it is:
/// holding each replaced quota only to its own end would take a list of them per old state
/// (as `Transition::same` has), not a change in one place.
#[test]
fn two_replaced_configurations_on_one_old_state_are_seen_alike() {
    let run = |way: Way| {
        let (service, clock) = service(plain_bucket("a", 10).build().unwrap());
        let reload = |to: ConfigBuilder| service.reload(on_its_store(&service, to)).unwrap();
        let per_call = |n| {
            (0..n)
                .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
                .count()
        };
        let mut counts = vec![per_call(11)];
        reload(plain_bucket("a", 20));
        clock.set(START + Duration::from_secs(30));
        counts.push(per_call(21));
        if way != Way::Twin {
            reload(plain_bucket("b", 20));
        }
        let site = (way == Way::Prepared).then(|| service.prepare(&Options::new()).unwrap());
        for at in (30..=240).step_by(3) {
            clock.set(START + Duration::from_secs(at));
            counts.push(match &site {
                Some(site) => usize::from(site.consume_now("k").unwrap().unwrap().allowed),
                None => per_call(1),
            });
        }
        counts
    };
    let [p, c, t] = [Way::Prepared, Way::PerCall, Way::Twin].map(run);
    assert_eq!(p, c);
    let sum = |v: &[usize]| v.iter().sum::<usize>();
    assert_eq!((sum(&p), sum(&t)), (75, 80), "prepared and twin");
}
