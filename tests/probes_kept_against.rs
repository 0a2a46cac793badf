//! Probes of `Kept::against` (a kept configuration judged once per reload to resolve calls as
//! the running one does, and skipped per call) and of what a configuration works out once
//! (`resolve::Under`, the key's head and tier part): an adversary's reload histories, looking
//! for a call admitted beyond a quota a transition should still hold it to.
//!
//! The rule probed: every window here is 20 days or more and the hand-driven clock never
//! moves, so every configuration a reload replaced holds every later call to its state under
//! its quota. Hence, for each configuration installed and each kind of call, the calls of that
//! kind admitted (enforced: limiting on, no shadow) since it was installed never exceed the
//! capacity it resolves that kind of call to.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{drawn_config, now, service, Rng};

/// Longer than any probe: no window turns.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// The kinds of call the probes make, each on user key `"k"`.
fn shapes() -> Vec<(&'static str, Options)> {
    vec![
        ("plain", Options::new()),
        ("own limit 3", Options::new().limit(3)),
        ("own limit 4 burst 1", Options::new().limit(4).burst(1)),
        ("own window", Options::new().window(LONG * 3)),
        (
            "own strategy",
            Options::new().strategy(Strategy::FixedWindow),
        ),
        ("own burst", Options::new().burst(2)),
        ("free", Options::new().tier("free")),
        ("gold", Options::new().tier("gold")),
        ("free own limit 3", Options::new().tier("free").limit(3)),
        (
            "gold own window",
            Options::new().tier("gold").window(LONG * 3),
        ),
        ("budget b", Options::new().budget("b")),
        ("budget b own limit 2", Options::new().budget("b").limit(2)),
    ]
}

/// A configuration drawn at random from the reload probes' family (`drawn_config`), windows
/// of 20 or 40 days.
fn drawn(rng: &mut Rng) -> ConfigBuilder {
    drawn_config(
        rng,
        true,
        |rng| [LONG, LONG * 2][rng.below(2) as usize],
        LONG,
    )
}

/// A configuration the builder accepts, drawn anew until one is.
fn valid(rng: &mut Rng, service: Option<&RateLimitService>) -> Config {
    loop {
        let b = drawn(rng);
        let prefix = ["rl", "rl2"][rng.below(2) as usize];
        let built = match service {
            Some(s) => b
                .store(s.config().store().clone())
                .key_prefix(prefix)
                .build(),
            None => b.build(),
        };
        if let Ok(config) = built {
            return config;
        }
    }
}

/// The capacity the running configuration holds an enforced call with `options` to; `None`
/// when it enforces nothing for it (limiting off, a shadow tier, no quota).
fn enforced(service: &RateLimitService, options: &Options) -> Option<u64> {
    let config = service.config();
    if !config.enabled() {
        return None;
    }
    let (quota, tier) = service.quota_for(options).ok()?;
    let shadow = tier.is_some_and(|t| config.tier(&t).is_some_and(|t| t.shadow));
    (!shadow).then(|| quota.capacity())
}

/// One configuration installed: what it holds each kind of call to, and what each kind had
/// admitted since.
struct Installed {
    caps: Vec<Option<u64>>,
    admitted: Vec<u64>,
}

/// One random history from `seed`: a configuration, then `reloads` reloads, with a few calls
/// of every kind between them; panics with the history at the first call admitted beyond a
/// quota still holding it.
fn history(seed: u64, reloads: usize) {
    let mut rng = Rng(seed | 1);
    let shapes = shapes();
    let (service, _clock) = service(valid(&mut rng, None));
    let mut installed: Vec<Installed> = Vec::new();
    let mut log = Vec::new();
    for step in 0..=reloads {
        if step > 0 {
            let next = valid(&mut rng, Some(&service));
            if service.reload(next).is_err() {
                log.push(format!("reload {step} refused"));
                continue;
            }
        }
        log.push(format!("config {step}: {:?}", service.config()));
        let caps: Vec<_> = shapes.iter().map(|(_, o)| enforced(&service, o)).collect();
        installed.push(Installed {
            admitted: vec![0; shapes.len()],
            caps: caps.clone(),
        });
        for _ in 0..8 {
            let s = rng.below(shapes.len() as u64) as usize;
            let (name, options) = &shapes[s];
            let allowed = now(service.consume("k", options)).is_ok_and(|d| d.allowed);
            log.push(format!("  {name}: {allowed}"));
            if !allowed || caps[s].is_none() {
                continue;
            }
            for (i, at) in installed.iter_mut().enumerate() {
                at.admitted[s] += 1;
                if let Some(cap) = at.caps[s] {
                    assert!(
                        at.admitted[s] <= cap,
                        "seed {seed}: {name} admitted {} since config {i}, which holds it to \
                         {cap}\n{}",
                        at.admitted[s],
                        log.join("\n")
                    );
                }
            }
        }
    }
}

#[test]
fn random_histories_of_twelve_reloads_never_admit_beyond_a_held_quota() {
    for seed in 0..400 {
        history(seed * 7919 + 13, 12);
    }
}

#[test]
fn random_histories_of_three_reloads_never_admit_beyond_a_held_quota() {
    for seed in 0..800 {
        history(seed * 104_729 + 5, 3);
    }
}

// ---------------------------------------------------------------------------------------
// One setting at a time: two configurations that differ in it alone, alternated over ten
// reloads in one window, each phase spending what it can; exact counts.
// ---------------------------------------------------------------------------------------

/// A fixed-window tier of `n` per [`LONG`].
fn tier(name: &str, n: u64) -> Tier {
    Tier::new(name, n)
        .window(LONG)
        .strategy(Strategy::FixedWindow)
}

/// The default limit of `n` per [`LONG`], fixed window, under prefix `"rl"`.
fn limit(n: u64) -> ConfigBuilder {
    Config::builder()
        .strategy(Strategy::FixedWindow)
        .default_limit(n)
        .default_window(LONG)
        .key_prefix("rl")
}

/// What calls with `options` admit in each phase: `a`, then `b` and `a` in turn, `phases`
/// in all (the reloads keep the store; the prefix is each configuration's own), each phase
/// making 10 calls.
fn alternating(
    a: impl Fn() -> ConfigBuilder,
    b: impl Fn() -> ConfigBuilder,
    options: &Options,
    phases: usize,
) -> Vec<u64> {
    let (service, _clock) = service(a().build().unwrap());
    (0..phases)
        .map(|phase| {
            if phase > 0 {
                let next = if phase % 2 == 1 { b() } else { a() };
                let store = service.config().store().clone();
                service.reload(next.store(store).build().unwrap()).unwrap();
            }
            (0..10)
                .map(|_| u64::from(now(service.consume("k", options)).unwrap().allowed))
                .sum()
        })
        .collect()
}

fn total(phases: &[u64]) -> u64 {
    phases.iter().sum()
}

/// The module's burst 0 <-> 5 (with another default limit, which a call with its own never
/// reads): a call with its own limit of 2 gets 2 in all, never the 7 the burst would give.
#[test]
fn a_module_burst_alternated_with_a_default_limit_holds_an_own_limit_to_its_first_capacity() {
    let own = Options::new().limit(2);
    let phases = alternating(|| limit(100), || limit(50).burst_limit(5), &own, 11);
    assert_eq!(total(&phases), 2, "{phases:?}");
}

/// The prefix `rl` <-> `rl2`: each prefix another state, a call with its own limit of 3 gets
/// 3 in all, not a fresh 3 per switch.
#[test]
fn a_prefix_alternated_holds_an_own_limit_to_one_budget() {
    let own = Options::new().limit(3);
    let phases = alternating(|| limit(100), || limit(100).key_prefix("rl2"), &own, 11);
    assert_eq!(total(&phases), 3, "{phases:?}");
}

/// Twin tiers, the default switched between them: a call naming no tier gets 3 in all.
#[test]
fn a_default_tier_alternated_between_twins_holds_a_plain_call_to_one_budget() {
    let twins = |default: &'static str| {
        move || {
            limit(100)
                .tier(tier("free", 3))
                .tier(tier("gold", 3))
                .default_tier(default)
        }
    };
    let (plain, own) = (Options::new(), Options::new().limit(2));
    let phases = alternating(twins("free"), twins("gold"), &plain, 11);
    assert_eq!(total(&phases), 3, "{phases:?}");
    let phases = alternating(twins("free"), twins("gold"), &own, 11);
    assert_eq!(total(&phases), 2, "{phases:?}");
}

/// A tier's window `LONG` <-> `2 LONG` (another state each): a tier call gets the tier's 3,
/// and one with its own limit of 2 its 2, in all.
#[test]
fn a_tier_window_alternated_holds_tier_calls_to_one_budget() {
    let free = |window: Duration| move || limit(100).tier(tier("free", 3).window(window));
    let calls = [
        (Options::new().tier("free"), 3),
        (Options::new().tier("free").limit(2), 2),
    ];
    for (options, most) in calls {
        let phases = alternating(free(LONG), free(LONG * 2), &options, 11);
        assert_eq!(total(&phases), most, "{options:?}: {phases:?}");
    }
}

/// A tier's strategy fixed window <-> token bucket, and its burst 0 <-> 4: the tier call
/// gets its first capacity, 3, in all.
#[test]
fn a_tier_strategy_or_burst_alternated_holds_tier_calls_to_their_first_capacity() {
    let free = || limit(100).tier(tier("free", 3));
    let bucket = || limit(100).tier(tier("free", 3).strategy(Strategy::TokenBucket));
    let burst = || limit(100).tier(tier("free", 3).burst(4));
    let options = Options::new().tier("free");
    for (name, phases) in [
        ("strategy", alternating(free, bucket, &options, 11)),
        ("burst", alternating(free, burst, &options, 11)),
    ] {
        assert_eq!(total(&phases), 3, "{name}: {phases:?}");
    }
}

/// A tier renamed `free` -> `paid` and back, under a default tier that follows it: a plain
/// call's key names the tier, so each name is another state; 3 in all.
#[test]
fn a_default_tier_renamed_and_back_holds_a_plain_call_to_one_budget() {
    let named = |name: &'static str| move || limit(100).tier(tier(name, 3)).default_tier(name);
    let phases = alternating(named("free"), named("paid"), &Options::new(), 11);
    assert_eq!(total(&phases), 3, "{phases:?}");
}

/// Limiting on <-> off: a phase with limiting off admits every call and spends nothing a
/// phase with it on counts; the phases with it on admit 2 in all.
#[test]
fn limiting_switched_off_and_on_again_holds_the_enforced_phases_to_one_budget() {
    let off = || limit(2).enabled(false);
    let phases = alternating(|| limit(2), off, &Options::new(), 11);
    let on: u64 = phases.iter().step_by(2).sum();
    assert_eq!(on, 2, "{phases:?}");
}

/// A tier shadow <-> enforced: the enforced phases admit the tier's 3 in all (the shadow
/// phases admit every call, counting them).
#[test]
fn a_tier_switched_to_shadow_and_back_holds_the_enforced_phases_to_one_budget() {
    let shadow = || limit(100).tier(tier("free", 3).shadow());
    let enforced = || limit(100).tier(tier("free", 3));
    let phases = alternating(enforced, shadow, &Options::new().tier("free"), 11);
    let on: u64 = phases.iter().step_by(2).sum();
    assert!(on <= 3, "{phases:?}");
    assert_eq!(phases[0], 3, "{phases:?}");
}

/// What calls with `options` admit under each configuration of `configs` in turn, reloaded one
/// after the other (10 calls each, the store kept).
fn through(configs: &[&dyn Fn() -> ConfigBuilder], options: &Options) -> Vec<u64> {
    let (service, _clock) = service(configs[0]().build().unwrap());
    (configs.iter().enumerate())
        .map(|(i, config)| {
            if i > 0 {
                let store = service.config().store().clone();
                service
                    .reload(config().store(store).build().unwrap())
                    .unwrap();
            }
            (0..10)
                .map(|_| u64::from(now(service.consume("k", options)).unwrap().allowed))
                .sum()
        })
        .collect()
}

/// Tier `free` moved to another window (another state), then the default limit changed, which
/// no `free` call reads: the configuration replaced last resolves a `free` call as the running
/// one does, the one replaced before it does not, and still holds it (a generation judges once
/// which calls every kept configuration resolves alike: all of them, never the last one
/// alone). 3 in all (2 with a limit of its own), not a fresh budget in the third.
#[test]
fn a_call_alike_under_the_last_replaced_configuration_is_still_held_by_an_older_one() {
    let first = || limit(100).tier(tier("free", 3));
    let moved = || limit(100).tier(tier("free", 3).window(LONG * 2));
    let default_changed = || limit(50).tier(tier("free", 3).window(LONG * 2));
    let configs: [&dyn Fn() -> ConfigBuilder; 3] = [&first, &moved, &default_changed];
    let calls = [
        (Options::new().tier("free"), 3),
        (Options::new().tier("free").limit(2), 2),
    ];
    for (options, most) in calls {
        let phases = through(&configs, &options);
        assert_eq!(total(&phases), most, "{options:?}: {phases:?}");
    }
}
