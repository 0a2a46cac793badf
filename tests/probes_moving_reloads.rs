//! helper-57's probes of `Kept::against` (the kept configurations a reload judges alike
//! once, skipped per call) on a MOVING hand-driven clock: calls spread across windows while
//! reloads happen and kept configurations expire, through every entry point that resolves a
//! call under the running generation: `consume`, stacked limits (`consume_all`) and prepared
//! sites held across reloads (`Prepared::consume`, `consume_now`). `probes_kept_against`
//! holds the clock still; here windows turn.
//!
//! The rule probed, for each configuration `C` installed at `t` and replaced at `r` (or still
//! running), and each kind of call it enforces with a quota of capacity `cap` and window `W`:
//! the calls of that kind admitted (while the running configuration enforced them) at times
//! in `[t, r + W)` (a replaced configuration holds a call for one of its windows) never
//! exceed what `C`'s strategy allows on one state:
//! - sliding log: at most `cap` in any `(s - W, s]`;
//! - fixed window and sliding counter: at most `cap` in any aligned window `[kW, (k+1)W)`;
//! - token bucket: at most `cap + (b - a) / T` in any `[a, b]`, `T` its emission interval.

use std::time::Duration;

use ratelimit::{
    rate_limit, Config, ConfigBuilder, Error, Options, Prepared, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::{drawn_config, now, serial, service, Rng};

/// The windows the family draws from: a few seconds each, so a history of a few hundred
/// calls, the clock moving 0 to 7 s between them, crosses many of them.
const WINDOWS: [u64; 3] = [10, 20, 30];

fn window(rng: &mut Rng) -> Duration {
    Duration::from_secs(WINDOWS[rng.below(3) as usize])
}

/// The kinds of call the probes make, each on user key `"k"`.
fn shapes() -> Vec<(&'static str, Options)> {
    vec![
        ("plain", Options::new()),
        ("own limit 3", Options::new().limit(3)),
        ("own limit 4 burst 1", Options::new().limit(4).burst(1)),
        ("own window", Options::new().window(Duration::from_secs(45))),
        (
            "own strategy",
            Options::new().strategy(Strategy::SlidingWindow),
        ),
        ("own burst", Options::new().burst(2)),
        ("free", Options::new().tier("free")),
        ("gold", Options::new().tier("gold")),
        ("free own limit 3", Options::new().tier("free").limit(3)),
        (
            "gold own window",
            Options::new().tier("gold").window(Duration::from_secs(45)),
        ),
        ("budget b", Options::new().budget("b")),
        ("budget b own limit 2", Options::new().budget("b").limit(2)),
    ]
}

/// A configuration from the reload probes' family (`drawn_config`, as in
/// `probes_kept_against`), with windows of seconds.
fn drawn(rng: &mut Rng) -> ConfigBuilder {
    drawn_config(rng, false, window, Duration::from_secs(5))
}

/// A configuration the builder accepts (on `service`'s store, for a reload), with limiting
/// on or off as `enabled` says when it says, and the generator's state it was drawn from (to
/// draw it again: the same configuration, limiting switched).
fn valid(
    rng: &mut Rng,
    service: Option<&RateLimitService>,
    enabled: Option<bool>,
) -> (Config, u64) {
    loop {
        let from = rng.0;
        let prefix = ["rl", "rl2"][rng.below(2) as usize];
        let mut b = drawn(rng).key_prefix(prefix);
        if let Some(enabled) = enabled {
            b = b.enabled(enabled);
        }
        let built = match service {
            Some(s) => b.store(s.config().store().clone()).build(),
            None => b.build(),
        };
        if let Ok(config) = built {
            return (config, from);
        }
    }
}

/// What the running configuration holds an enforced call with `options` to: its quota, or
/// `None` when it enforces nothing for it (limiting off, a shadow tier, no quota).
fn enforced(service: &RateLimitService, options: &Options) -> Option<ratelimit::Quota> {
    let config = service.config();
    if !config.enabled() {
        return None;
    }
    let (quota, tier) = service.quota_for(options).ok()?;
    let shadow = tier.is_some_and(|t| config.tier(&t).is_some_and(|t| t.shadow));
    (!shadow).then_some(quota)
}

/// How many admissions at `times` (sorted) `quota`'s strategy allows on one state, or the
/// first pair `(from, to)` of times it would not have admitted together.
fn over(quota: &ratelimit::Quota, times: &[u64]) -> Option<(u64, u64)> {
    let (cap, w) = (quota.capacity(), quota.window().as_nanos() as u64);
    let count = |from: usize, to: usize| (to - from + 1) as u64;
    for (j, &b) in times.iter().enumerate() {
        for (i, &a) in times[..=j].iter().enumerate() {
            let too_many = match quota.strategy() {
                Strategy::SlidingWindow => b - a < w && count(i, j) > cap,
                Strategy::FixedWindow | Strategy::SlidingWindowCounter => {
                    a / w == b / w && count(i, j) > cap
                }
                Strategy::TokenBucket => {
                    let interval = w / quota.refill_per_window().max(1);
                    count(i, j) > cap + (b - a) / interval.max(1)
                }
            };
            if too_many {
                return Some((a, b));
            }
        }
    }
    None
}

/// One configuration installed: from which call on (calls are numbered: the clock may not
/// move between the last call under one configuration and the reload), when replaced, what
/// it held each kind of call to.
struct Installed {
    from: usize,
    replaced: Option<u64>,
    quotas: Vec<Option<ratelimit::Quota>>,
}

/// Which entry points a history calls through.
#[derive(Clone, Copy, PartialEq)]
enum Through {
    Consume,
    Stacked,
    Prepared,
    All,
}

/// A prepared site per kind of call, prepared under some generation and kept across reloads
/// until a history prepares it again.
fn prepared(service: &RateLimitService, shapes: &[(&str, Options)]) -> Vec<Option<Prepared>> {
    shapes
        .iter()
        .map(|(_, o)| service.prepare(o).ok())
        .collect()
}

/// One random history from `seed` on a moving clock: `reloads` reloads, with calls through
/// `through` between them; panics with the history at the first admission a configuration
/// still holding the call would not have made.
fn history(seed: u64, reloads: usize, through: Through) {
    let mut rng = Rng(seed | 1);
    let shapes = shapes();
    let (first, mut last) = valid(&mut rng, None, None);
    let (service, clock) = service(first);
    let t = || ratelimit::Clock::now(&clock);
    let mut installed: Vec<Installed> = Vec::new();
    // Per kind of call: (call number, time) of each admission.
    let mut admitted: Vec<Vec<(usize, u64)>> = vec![Vec::new(); shapes.len()];
    let mut calls = 0;
    let mut sites = prepared(&service, &shapes);
    let mut log = Vec::new();
    for step in 0..=reloads {
        if step > 0 {
            // One reload in five only switches limiting (on to off, off to on).
            let next = match rng.below(5) {
                0 => {
                    let switched = Some(!service.config().enabled());
                    valid(&mut Rng(last), Some(&service), switched).0
                }
                _ => {
                    let (next, from) = valid(&mut rng, Some(&service), None);
                    last = from;
                    next
                }
            };
            if service.reload(next).is_err() {
                log.push(format!("reload {step} refused"));
                continue;
            }
            installed.last_mut().unwrap().replaced = Some(t());
        }
        log.push(format!("at {}: config {step}: {:?}", t(), service.config()));
        let quotas: Vec<_> = shapes.iter().map(|(_, o)| enforced(&service, o)).collect();
        installed.push(Installed {
            from: calls,
            replaced: None,
            quotas: quotas.clone(),
        });
        for _ in 0..rng.below(12) {
            clock.advance(Duration::from_millis(rng.below(7_000)));
            let s = rng.below(shapes.len() as u64) as usize;
            let mode = match through {
                Through::All => rng.below(3),
                Through::Consume => 0,
                Through::Stacked => 1,
                Through::Prepared => 2,
            };
            let (name, options) = &shapes[s];
            calls += 1;
            let mut spent = vec![s];
            let allowed = match mode {
                0 => now(service.consume("k", options)).is_ok_and(|d| d.allowed),
                1 => {
                    let other = rng.below(shapes.len() as u64) as usize;
                    spent.push(other);
                    let limits = [("k", options), ("k", &shapes[other].1)];
                    now(service.consume_all(&limits)).is_ok_and(|d| d.iter().all(|d| d.allowed))
                }
                _ => {
                    if rng.below(4) == 0 {
                        sites[s] = service.prepare(options).ok();
                    }
                    let site = sites[s].as_ref();
                    let decided = match rng.below(2) {
                        0 => site.map(|p| now(p.consume("k"))),
                        _ => site.and_then(|p| p.consume_now("k")),
                    };
                    decided.is_some_and(|d| d.is_ok_and(|d| d.allowed))
                }
            };
            let names: Vec<_> = spent.iter().map(|&i| shapes[i].0).collect();
            log.push(format!("  at {}: {names:?} ({mode}): {allowed}", t()));
            if !allowed {
                continue;
            }
            for &i in spent.iter().filter(|&&i| quotas[i].is_some()) {
                admitted[i].push((calls, t()));
            }
            for &i in &spent {
                check(&installed, &admitted[i], i, || {
                    format!("seed {seed}: {name}\n{}", log.join("\n"))
                });
            }
        }
    }
    let _ = sites;
}

/// Panics with `context()` when the admissions of kind `i` (`times`) break the rule of any
/// configuration installed that held them.
fn check(installed: &[Installed], times: &[(usize, u64)], i: usize, context: impl Fn() -> String) {
    for (n, c) in installed.iter().enumerate() {
        let Some(quota) = c.quotas[i] else { continue };
        let until = (c.replaced)
            .map(|r| r + quota.window().as_nanos() as u64)
            .unwrap_or(u64::MAX);
        let held: Vec<u64> = (times.iter().copied())
            .filter(|&(call, s)| call > c.from && s < until)
            .map(|(_, s)| s)
            .collect();
        if let Some((a, b)) = over(&quota, &held) {
            panic!(
                "admitted from {a} to {b} beyond config {n}'s {quota:?}: {held:?}\n{}",
                context()
            );
        }
    }
}

#[test]
fn moving_clock_histories_through_consume_never_admit_beyond_a_held_quota() {
    for seed in 0..300 {
        history(seed * 7919 + 13, 12, Through::Consume);
    }
}

#[test]
fn moving_clock_histories_through_stacked_limits_never_admit_beyond_a_held_quota() {
    for seed in 0..300 {
        history(seed * 6_700_417 + 3, 12, Through::Stacked);
    }
}

#[test]
fn moving_clock_histories_through_prepared_sites_kept_across_reloads_never_admit_beyond_a_held_quota(
) {
    for seed in 0..300 {
        history(seed * 104_729 + 5, 12, Through::Prepared);
    }
}

#[test]
fn moving_clock_histories_through_every_entry_point_never_admit_beyond_a_held_quota() {
    for seed in 0..300 {
        history(seed * 1_000_003 + 11, 20, Through::All);
    }
}

// ---------------------------------------------------------------------------------------
// Annotated fns under a module reloaded through its live-reload API, on the module's moving
// clock: one fn with two limits (stacked), one with one, each limit a tier every drawn
// configuration sets anew.
// ---------------------------------------------------------------------------------------

#[rate_limit(tier = "mv_a", key = user)]
#[rate_limit(tier = "mv_b", key = user)]
async fn moving_stacked(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(tier = "mv_b", key = user)]
async fn moving_single(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// A module configuration: the fns' two tiers drawn like the family's, with the rest.
fn drawn_module(rng: &mut Rng) -> ConfigBuilder {
    let mut b = drawn(rng).key_prefix(["rl", "rl2"][rng.below(2) as usize]);
    for name in ["mv_a", "mv_b"] {
        let mut t = Tier::new(name, 1 + rng.below(4)).window(window(rng));
        t = t.strategy(Strategy::ALL[rng.below(4) as usize]);
        if rng.below(3) == 0 {
            t = t.burst(rng.below(3));
        }
        if rng.below(8) == 0 {
            t = t.shadow();
        }
        b = b.tier(t);
    }
    b
}

#[test]
fn moving_clock_module_reloads_never_let_an_annotated_fn_beyond_a_held_quota() {
    let _serial = serial();
    for seed in 0..60 {
        let mut rng = Rng(seed * 15_485_863 + 7);
        let clock = ratelimit_tests::clock();
        let module = loop {
            if let Ok(m) = ratelimit::ModuleBuilder::from(drawn_module(&mut rng))
                .clock(clock.clone())
                .init()
            {
                break m;
            }
        };
        let service = module.service().clone();
        let t = || ratelimit::Clock::now(&clock);
        // Kinds of call, each on its own state (an annotated fn's limit counts in a budget
        // of the fn's own): the stacked fn's two tiers, the single fn's one.
        let (a, b) = (Options::new().tier("mv_a"), Options::new().tier("mv_b"));
        let tiers = [a, b.clone(), b];
        let mut installed: Vec<Installed> = Vec::new();
        let mut admitted: Vec<Vec<(usize, u64)>> = vec![Vec::new(); 3];
        let (mut calls, mut log) = (0, Vec::new());
        for step in 0..=12 {
            if step > 0 {
                if module.reload(drawn_module(&mut rng)).is_err() {
                    continue;
                }
                installed.last_mut().unwrap().replaced = Some(t());
            }
            log.push(format!("at {}: config {step}: {:?}", t(), service.config()));
            let quotas: Vec<_> = tiers.iter().map(|o| enforced(&service, o)).collect();
            installed.push(Installed {
                from: calls,
                replaced: None,
                quotas: quotas.clone(),
            });
            for _ in 0..rng.below(10) {
                clock.advance(Duration::from_millis(rng.below(7_000)));
                calls += 1;
                let stacked = rng.below(2) == 0;
                let allowed = match stacked {
                    true => now(moving_stacked("u")).is_ok(),
                    false => now(moving_single("u")).is_ok(),
                };
                log.push(format!("  at {}: stacked {stacked}: {allowed}", t()));
                if !allowed {
                    continue;
                }
                let spent: &[usize] = if stacked { &[0, 1] } else { &[2] };
                for &i in spent.iter().filter(|&&i| quotas[i].is_some()) {
                    admitted[i].push((calls, t()));
                }
                for &i in spent {
                    check(&installed, &admitted[i], i, || {
                        format!("seed {seed}: tier {i}\n{}", log.join("\n"))
                    });
                }
            }
        }
        drop(module);
    }
}

// ---------------------------------------------------------------------------------------
// A kept configuration dropped as "the same limits" as a reload that only switches
// limiting off.
// ---------------------------------------------------------------------------------------

/// 2 an hour, 2 spent; a reload switching limiting off (every other setting the same); a
/// reload back on at 10 an hour on the same state, inside the first hour. The first
/// configuration's 2 still hold for its hour: nothing more is admitted. Dropped at the
/// switch-off as the same limits as the new configuration (`Config::same_limits` compared no
/// `enabled`), it held nothing once the switched-off one (which holds nothing) was replaced:
/// 8 more admitted in the hour.
#[test]
fn a_reload_switching_limiting_off_keeps_the_replaced_quota_for_a_later_loosening() {
    let hourly = |n: u64| {
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .default_limit(n)
            .default_window(Duration::from_secs(3_600))
    };
    let (service, clock) = service(hourly(2).build().unwrap());
    let plain = Options::new();
    let admitted = |n: usize| {
        (0..n)
            .filter(|_| now(service.consume("k", &plain)).is_ok_and(|d| d.allowed))
            .count()
    };
    assert_eq!(admitted(5), 2);
    let on_its_store =
        |b: ConfigBuilder| b.store(service.config().store().clone()).build().unwrap();
    service
        .reload(on_its_store(hourly(2).enabled(false)))
        .unwrap();
    assert_eq!(admitted(3), 3, "limiting off admits every call");
    clock.advance(Duration::from_secs(60));
    service.reload(on_its_store(hourly(10))).unwrap();
    assert_eq!(admitted(10), 0, "the first hour's 2 are spent");
    // Past the first configuration's hour, the 10 hold alone.
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(admitted(12), 10);
}
