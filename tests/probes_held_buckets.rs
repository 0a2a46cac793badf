//! helper-60's probes of `Quota::held_to` (the one quota a call on a token bucket's own state
//! is decided under while replaced configurations on that state are kept) and its use in
//! `transition_of` / `Site::quota_at`, from outside, on a hand-driven clock.
//!
//! The rule probed: the state is one arrival time, and a bucket of capacity `C` and emission
//! interval `T` admits at most `C + (b - a) / T` tokens in any `[a, b]`. For each
//! configuration installed, the calls decided under it in any interval stay within that; and
//! for each configuration replaced at `r`, the calls in any interval from one it decided
//! before `r` to one decided before `r` plus its window (under whatever configurations came
//! after) stay within its bucket too.

use std::time::Duration;

use ratelimit::{
    ConfigBuilder, Options, RateLimitService, Strategy, Tier, MAX_CAPACITY, MAX_WINDOW,
};
use ratelimit_tests::{
    admitted, bucket_a_minute as bucket, now, reload_to as reload, service, Rng,
};

const MINUTE: Duration = Duration::from_secs(60);

/// 10 a minute refilled every second, all spent; a reload to 10 a minute refilled once a
/// minute, then back to the first, all at one instant. Every configuration ever installed
/// holds 10: the first one's bucket gives 10 in that instant. The first one, installed
/// again, resolves calls as the running one does and was skipped (`Kept::resolves_alike`);
/// the running quota was held to the slow one at its minute, a debt of 10 minutes where the
/// first one tolerates 10 s: 9 more were admitted, 19 at once.
#[test]
fn a_reload_back_past_a_slower_refill_keeps_the_replaced_buckets_own_tolerance() {
    let (service, _clock) = service(bucket(10, 0, 60).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 12), 10);
    reload(&service, bucket(10, 0, 1));
    assert_eq!(admitted(&service, &plain, 12), 0);
    reload(&service, bucket(10, 0, 60));
    assert_eq!(
        admitted(&service, &plain, 12),
        0,
        "admitted past 10 at once"
    );
}

/// The same through a third configuration tighter in both than the first (5 refilled every
/// second): judged alone against the running one, the first was not kept (it holds a call to
/// no less than the running quota alone), and with the slow one's minute the running
/// quota's 5 tokens became a debt of 5 minutes: 4 more were admitted, 14 at once where the
/// first bucket gives 10 and the running one 5.
#[test]
fn a_replaced_bucket_looser_than_the_running_one_still_holds_past_a_slower_refill() {
    let (service, _clock) = service(bucket(10, 0, 60).build().unwrap());
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 12), 10);
    reload(&service, bucket(10, 0, 1));
    reload(&service, bucket(5, 0, 60));
    assert_eq!(
        admitted(&service, &plain, 12),
        0,
        "admitted past 10 at once"
    );
}

// ---------------------------------------------------------------------------------------
// Random histories: buckets on one state (one window), reloads in a row, the clock moving.
// ---------------------------------------------------------------------------------------

/// What a history draws from: one window (one state), limits, bursts, refills (tokens a
/// window), the clock's steps and the costs (nanoseconds and tokens).
struct Family {
    window: Duration,
    limits: &'static [u64],
    bursts: &'static [u64],
    refills: &'static [u64],
    steps: &'static [u64],
    costs: &'static [u64],
}

/// A minute: a capacity of 0, of 1, slower and faster refills than the limit.
const MINUTES: Family = Family {
    window: MINUTE,
    limits: &[0, 1, 2, 3, 5, 10, 40],
    bursts: &[0, 1, 4],
    refills: &[1, 2, 5, 10, 60, 600, 6_000],
    steps: &[
        0,
        1_000_000,
        7_000_000,
        100_000_000,
        999_000_000,
        6_000_000_000,
        30_000_000_000,
    ],
    costs: &[1, 1, 1, 2, 3],
};

/// A microsecond, down to a token a nanosecond.
const MICROSECONDS: Family = Family {
    window: Duration::from_micros(1),
    limits: &[0, 1, 2, 5, 40, 1_000],
    bursts: &[0, 1, 4],
    refills: &[1, 3, 10, 999, 1_000],
    steps: &[0, 1, 7, 100, 333, 999, 5_000],
    costs: &[1, 1, 2, 3, 40],
};

/// The longest window, the slowest refills and the largest capacities it allows.
const LONGEST: Family = Family {
    window: MAX_WINDOW,
    limits: &[0, 1, 3, 145, 1_000_000, MAX_CAPACITY - 4],
    bursts: &[0, 1, 4],
    refills: &[1, 2, 1_000, 1_000_000_000],
    steps: &[
        0,
        1,
        1_000_000,
        1_000_000_000,
        86_400_000_000_000,
        30 * 86_400_000_000_000,
    ],
    costs: &[1, 2, 3, 1_000, 1_000_000, 1_000_000_000],
};

/// A bucket configuration drawn from `family`: the default limit, and a tier `"t"` with a
/// bucket of its own, both on its window; drawn again until the builder takes it.
fn drawn(rng: &mut Rng, family: &Family) -> ConfigBuilder {
    let pick = |rng: &mut Rng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
    loop {
        let (limit, burst) = (pick(rng, family.limits), pick(rng, family.bursts));
        let tier = Tier::new("t", pick(rng, family.limits).max(1))
            .burst(pick(rng, family.bursts))
            .refill(pick(rng, family.refills))
            .window(family.window)
            .strategy(Strategy::TokenBucket);
        let b = bucket(limit, burst, pick(rng, family.refills))
            .default_window(family.window)
            .tier(tier);
        if b.clone().build().is_ok() {
            return b;
        }
    }
}

/// One bucket as the running configuration resolves a call with `options`: its capacity, its
/// interval (nanoseconds a token) and its window; `None` when it holds nothing.
fn bucket_of(service: &RateLimitService, options: &Options) -> Option<(u64, u128, u128)> {
    let (quota, _) = service.quota_for(options).ok()?;
    let window = quota.window().as_nanos();
    Some((
        quota.capacity(),
        window / u128::from(quota.refill_per_window().max(1)),
        window,
    ))
}

/// An admitted call: its instant, cost, and the configuration that decided it.
struct Admitted {
    at: u128,
    cost: u128,
    config: usize,
}

/// One configuration installed: its bucket, and when it was replaced.
struct Installed {
    bucket: Option<(u64, u128, u128)>,
    replaced: Option<u128>,
}

/// Whether the calls `calls[from..=to]` stay within the bucket of capacity `cap` and
/// interval `t`: `tokens * t <= cap * t + (last - first)`.
fn within(calls: &[Admitted], from: usize, to: usize, (cap, t, _): (u64, u128, u128)) -> bool {
    let tokens: u128 = calls[from..=to].iter().map(|c| c.cost).sum();
    tokens * t <= u128::from(cap) * t + (calls[to].at - calls[from].at)
}

/// Checks the call just admitted (the last) against every bucket that still holds it; the
/// history in the panic.
fn check(calls: &[Admitted], installed: &[Installed], log: &[String], seed: u64) {
    let last = calls.len() - 1;
    let running = calls[last].config;
    for from in 0..=last {
        let first = &calls[from];
        let holder = &installed[first.config];
        let Some(b) = holder.bucket else { continue };
        // The running configuration's own calls; or a replaced one's, across its reload, in
        // one of its windows after it.
        let holds = match holder.replaced {
            None => first.config == running,
            Some(r) => first.config != running && calls[last].at < r + b.2,
        };
        if holds {
            assert!(
                within(calls, from, last, b),
                "seed {seed}: calls {from}..={last} past config {}'s bucket {b:?}\n{}",
                first.config,
                log.join("\n")
            );
        }
    }
}

/// One random history from `seed` on calls with `options` (`prepared`: through a site
/// prepared under each configuration, its `consume_now`).
fn history(seed: u64, family: &Family, options: &Options, prepared: bool) {
    let mut rng = Rng(seed | 1);
    let (service, clock) = service(drawn(&mut rng, family).build().unwrap());
    let mut installed = vec![Installed {
        bucket: bucket_of(&service, options),
        replaced: None,
    }];
    let mut site = service.prepare(options).ok();
    let mut calls: Vec<Admitted> = Vec::new();
    let mut log = vec![format!("config 0: {:?}", installed[0].bucket)];
    let mut at: u128 = 0;
    for _ in 0..120 {
        match rng.below(10) {
            0 => {
                let elapsed = family.steps[rng.below(family.steps.len() as u64) as usize];
                clock.advance(Duration::from_nanos(elapsed));
                at += u128::from(elapsed);
                log.push(format!("  +{elapsed} ns"));
            }
            1 => {
                let config = drawn(&mut rng, family);
                reload(&service, config);
                let n = installed.len();
                installed[n - 1].replaced = Some(at);
                let bucket = bucket_of(&service, options);
                installed.push(Installed {
                    bucket,
                    replaced: None,
                });
                site = service.prepare(options).ok();
                log.push(format!("config {n}: {bucket:?}"));
            }
            _ => {
                let cost = family.costs[rng.below(family.costs.len() as u64) as usize];
                let options = options.clone().cost(cost);
                let decided = match (&site, prepared && cost == 1) {
                    (Some(site), true) => site.consume_now("k").unwrap(),
                    _ => now(service.consume("k", &options)),
                };
                let allowed = decided.is_ok_and(|d| d.allowed);
                log.push(format!("  cost {cost}: {allowed}"));
                if allowed {
                    let config = installed.len() - 1;
                    calls.push(Admitted {
                        at,
                        cost: cost.into(),
                        config,
                    });
                    check(&calls, &installed, &log, seed);
                }
            }
        }
    }
}

#[test]
fn random_bucket_histories_stay_within_every_bucket_holding_them() {
    for seed in 0..300 {
        history(seed * 7_919 + 11, &MINUTES, &Options::new(), false);
    }
}

#[test]
fn random_tier_histories_through_prepared_sites_stay_within_every_bucket_holding_them() {
    for seed in 0..300 {
        history(
            seed * 104_729 + 3,
            &MINUTES,
            &Options::new().tier("t"),
            true,
        );
    }
}

#[test]
fn random_histories_at_a_token_a_nanosecond_stay_within_every_bucket_holding_them() {
    for seed in 0..300 {
        history(seed * 15_485_863 + 7, &MICROSECONDS, &Options::new(), false);
        history(
            seed * 15_485_867 + 9,
            &MICROSECONDS,
            &Options::new().tier("t"),
            true,
        );
    }
}

#[test]
fn random_histories_at_the_longest_window_and_largest_capacities_stay_within_every_bucket() {
    for seed in 0..300 {
        history(seed * 32_452_843 + 5, &LONGEST, &Options::new(), false);
        history(
            seed * 32_452_867 + 1,
            &LONGEST,
            &Options::new().tier("t"),
            true,
        );
    }
}
