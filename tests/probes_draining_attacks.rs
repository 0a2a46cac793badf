//! helper-63's attacks on `Quota::draining_by` (a token bucket held to a slower old refill for
//! one window after a reload tolerates less debt toward the window's end, so that what its
//! calls leave owing there is what the quota after it tolerates) and its use in
//! `Site::quota_at`, from outside, on a hand-driven clock.
//!
//! What is probed: the cut only ever lowers what is admitted (every configuration's bucket
//! still holds its calls, through chains of reloads, costs, tiers, prepared sites, stacked
//! calls, penalties and a clock stepped back); past the last transition the running bucket
//! alone decides on a debt within its tolerance plus one call's cost at the slowest refill
//! (no lockout); and a refusal's `retry_after` is a time at which the same call passes.

use std::time::Duration;

use ratelimit::{ConfigBuilder, Decision, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{bucket_a_minute, now, reload_to as reload, service, Rng};

const SECOND: Duration = Duration::from_secs(1);

/// A bucket of `limit` refilled `refill` tokens a minute.
fn bucket(limit: u64, refill: u64) -> ConfigBuilder {
    bucket_a_minute(limit, 0, refill)
}

/// One call of `cost` on `"k"`; any error fails.
fn call(service: &RateLimitService, cost: u64) -> Decision {
    match now(service.consume("k", &Options::new().cost(cost))) {
        Ok(decided) => decided,
        Err(e) => panic!("a call of cost {cost} answered {e}"),
    }
}

/// 10 a minute reloaded at once to 10 a second, all 10 spent at the reload: a debt of the old
/// minute, drained by its end. Half way, a call is refused: the cut tolerates 5 old tokens
/// (30 s) where the debt is 30 s. Its `retry_after` said 6 s (the cut's own GCRA answer), yet
/// 6 s later the cut tolerates 4 tokens and the debt is 24 s: refused again, and again every
/// time, until the window's end. The call passes only at +60 s: the wait is 30 s.
#[test]
fn a_refusal_under_a_draining_cut_says_when_the_call_passes_not_the_cuts_next_token() {
    let (service, clock) = service(bucket(10, 10).build().unwrap());
    reload(&service, bucket(10, 600));
    assert_eq!((0..11).filter(|_| call(&service, 1).allowed).count(), 10);
    clock.advance(30 * SECOND);
    let refused = call(&service, 1);
    assert!(!refused.allowed);
    let wait = refused.retry_after.unwrap();
    clock.advance(wait - Duration::from_millis(1));
    assert!(!call(&service, 1).allowed, "admitted before {wait:?}");
    clock.advance(Duration::from_millis(1));
    assert!(call(&service, 1).allowed, "refused {wait:?} later");
    assert_eq!(wait, 30 * SECOND);
}

/// 4 refilled 2 a minute (30 s a token), all spent: a debt of 120 s; reloaded to 2 refilled
/// 10 a minute (6 s a token, 12 s of debt). Held for the old minute to 2 tokens of 30 s, a
/// call at once is refused "retry after 90 s" (the held bucket's next token), past the
/// minute, where the running bucket reads the debt left, 30 s, at its own refill: refused
/// until 114 s, when 6 s of debt are left. (Before the draining cut too: no cut at the
/// reload's instant.)
#[test]
fn a_refusal_whose_wait_ends_past_the_transition_says_when_the_running_bucket_admits() {
    let (service, clock) = service(bucket(4, 2).build().unwrap());
    assert_eq!((0..5).filter(|_| call(&service, 1).allowed).count(), 4);
    reload(&service, bucket(2, 10));
    let refused = call(&service, 1);
    assert!(!refused.allowed);
    let wait = refused.retry_after.unwrap();
    clock.advance(wait - Duration::from_millis(1));
    assert!(!call(&service, 1).allowed, "admitted before {wait:?}");
    clock.advance(Duration::from_millis(1));
    assert!(call(&service, 1).allowed, "refused {wait:?} later");
    assert_eq!(wait, 114 * SECOND);
}

// ---------------------------------------------------------------------------------------
// Random histories: two lanes (the default limit, and tier "t") on one key, on one window;
// reloads in runs of one to three, calls of several costs, alone, stacked or through a
// prepared site; penalties; the clock stepped on and, in some histories, back.
// ---------------------------------------------------------------------------------------

const MINUTE: Duration = Duration::from_secs(60);
const LIMITS: [u64; 7] = [0, 1, 2, 3, 5, 10, 40];
const BURSTS: [u64; 3] = [0, 1, 4];
const REFILLS: [u64; 7] = [1, 2, 5, 10, 60, 600, 6_000];
const STEPS: [u64; 8] = [
    0,
    1_000_000,
    7_000_000,
    100_000_000,
    999_000_000,
    6_000_000_000,
    30_000_000_000,
    59_999_999_999,
];
const COSTS: [u64; 5] = [1, 1, 1, 2, 3];

/// A bucket configuration: the default limit, and a tier `"t"` with its own bucket, both a
/// minute; drawn again until the builder takes it.
fn drawn(rng: &mut Rng, plan: Plan) -> ConfigBuilder {
    let pick = |rng: &mut Rng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
    loop {
        let tier = Tier::new("t", pick(rng, &LIMITS).max(1))
            .burst(pick(rng, &BURSTS))
            .refill(pick(rng, &REFILLS))
            .window(MINUTE * (1 + u32::from(plan.windows && rng.below(2) == 0)))
            .strategy(Strategy::TokenBucket);
        let limit = pick(rng, &LIMITS[usize::from(plan.live || plan.retries)..]);
        let b = bucket_a_minute(limit, pick(rng, &BURSTS), pick(rng, &REFILLS)).tier(tier);
        if b.clone().build().is_ok() {
            return b;
        }
    }
}

/// A lane's bucket under the running configuration: capacity, interval (ns a token).
fn bucket_of(service: &RateLimitService, options: &Options) -> Option<(u64, u128)> {
    let (quota, _) = service.quota_for(options).ok()?;
    let window = quota.window().as_nanos();
    Some((
        quota.capacity(),
        window / u128::from(quota.refill_per_window().max(1)),
    ))
}

/// An admitted call on one lane: its instant on the clock (which may have stepped back), the
/// latest instant the clock had shown by then, its cost and the configuration that decided
/// it.
struct Admitted {
    at: i128,
    latest: i128,
    cost: u128,
    config: usize,
}

/// One configuration installed: each lane's bucket, and when it was replaced.
struct Installed {
    buckets: [Option<(u64, u128)>; 2],
    /// Each lane's window (nanoseconds): a replaced configuration holds its calls for it.
    windows: [u128; 2],
    replaced: Option<i128>,
}

/// The rule: the calls a bucket holds, from any of them to the last, take at most
/// `capacity + elapsed / interval` tokens, `elapsed` from the first's instant to the latest
/// the clock had shown at the last (the memory store decides a call whose clock stepped back
/// at its last sweep, no later than that; a bucket's arrival time never goes back). A
/// configuration holds its own calls; a replaced one, its calls and every later one before
/// its window after its replacement ends on the clock (as the service holds it).
fn check(calls: &[Admitted], installed: &[Installed], lane: usize, log: &[String], seed: u64) {
    let last = calls.len() - 1;
    let running = calls[last].config;
    let mut tokens: u128 = 0;
    for from in (0..=last).rev() {
        tokens += calls[from].cost;
        let first = &calls[from];
        let holder = &installed[first.config];
        let Some((cap, t)) = holder.buckets[lane] else {
            continue;
        };
        let holds = match holder.replaced {
            None => first.config == running,
            Some(r) => first.config != running && calls[last].at < r + holder.windows[lane] as i128,
        };
        let elapsed = calls[last].latest - first.at;
        assert!(
            !holds || (tokens * t) as i128 <= (u128::from(cap) * t) as i128 + elapsed,
            "seed {seed}: lane {lane} calls {from}..={last} past config {}'s bucket {:?}\n{}",
            first.config,
            (cap, t),
            log.join("\n")
        );
    }
}

/// What a history does.
#[derive(Clone, Copy)]
struct Plan {
    /// Steps the clock back as well as on.
    back: bool,
    /// Penalizes now and then (a penalty only ever takes).
    penalties: bool,
    /// After each refusal, now and then, waits its `retry_after` and calls again.
    retries: bool,
    /// Tier `"t"` on a window of a minute or two (another state, held to as one with it).
    windows: bool,
    /// Checks the debt past the last window (`drained_by_the_end`). Here and with `retries`,
    /// every bucket drawn holds a token at least (a capacity of 0 tells no debt, and refuses
    /// for good whatever its `retry_after`).
    live: bool,
}

/// Past the last reload's window (the last transition's end, every configuration's window
/// being a minute), each lane's running bucket alone decides: its debt there is within the
/// debt at the reload drained for the window, its own tolerance, or one call's cost at the
/// slowest refill of any bucket, whichever is most (`reset_after` is rounded up to a
/// millisecond, twice: 2 ms more).
fn drained_by_the_end(
    service: &RateLimitService,
    installed: &[Installed],
    debts: [u128; 2],
    log: &[String],
    seed: u64,
) {
    for (lane, options) in lanes().iter().enumerate() {
        let Some((cap, t)) = installed[installed.len() - 1].buckets[lane] else {
            continue;
        };
        let slowest = (installed.iter().filter_map(|i| i.buckets[lane]))
            .map(|(_, t)| t)
            .max()
            .unwrap_or(t);
        let bound = debts[lane]
            .saturating_sub(MINUTE.as_nanos())
            .max(u128::from(cap) * t)
            .max(3 * slowest)
            + 2_000_000;
        let debt = now(service.status("k", options))
            .unwrap()
            .reset_after
            .as_nanos();
        assert!(
            debt <= bound,
            "seed {seed}: lane {lane} owes {debt} ns past the last window, bound {bound}\n{}",
            log.join("\n")
        );
    }
}

/// Each lane's debt now (`status`'s `reset_after`).
fn debts(service: &RateLimitService) -> [u128; 2] {
    let lanes = lanes();
    let debt = |o: &Options| now(service.status("k", o)).map_or(0, |d| d.reset_after.as_nanos());
    [debt(&lanes[0]), debt(&lanes[1])]
}

/// The lanes' options: the default limit and tier `"t"`.
fn lanes() -> [Options; 2] {
    [Options::new(), Options::new().tier("t")]
}

/// One random history from `seed`; the refusals waited out (`Plan::retries`).
fn history(seed: u64, plan: Plan) -> usize {
    let mut rng = Rng(seed | 1);
    let (service, clock) = service(drawn(&mut rng, plan).build().unwrap());
    let lanes = lanes();
    let buckets = |s: &RateLimitService| [bucket_of(s, &lanes[0]), bucket_of(s, &lanes[1])];
    let windows = |s: &RateLimitService| {
        let window = |o: &Options| s.quota_for(o).map_or(0, |(q, _)| q.window().as_nanos());
        [window(&lanes[0]), window(&lanes[1])]
    };
    let mut installed = vec![Installed {
        buckets: buckets(&service),
        windows: windows(&service),
        replaced: None,
    }];
    let prepare = |s: &RateLimitService| [s.prepare(&lanes[0]).ok(), s.prepare(&lanes[1]).ok()];
    let mut prepared = prepare(&service);
    let mut calls: [Vec<Admitted>; 2] = [Vec::new(), Vec::new()];
    let mut log = vec![format!("config 0: {:?}", installed[0].buckets)];
    // The clock's offset from the start, and the latest it showed.
    let (mut at, mut latest): (u128, u128) = (0, 0);
    let start = ratelimit_tests::START;
    let mut last_reload: Option<(u128, [u128; 2])> = None;
    let mut retried = 0;
    for _ in 0..160 {
        match rng.below(12) {
            0 | 1 => {
                let step = u128::from(STEPS[rng.below(STEPS.len() as u64) as usize]);
                at = match plan.back && rng.below(4) == 0 {
                    true => at.saturating_sub(step),
                    false => at + step,
                };
                clock.set(start + Duration::from_nanos(at as u64));
                latest = latest.max(at);
                log.push(format!("  at {at} ns"));
            }
            2 => {
                for _ in 0..=rng.below(3) {
                    reload(&service, drawn(&mut rng, plan));
                    let n = installed.len();
                    installed[n - 1].replaced = Some(at as i128);
                    installed.push(Installed {
                        buckets: buckets(&service),
                        windows: windows(&service),
                        replaced: None,
                    });
                    log.push(format!(
                        "config {n}: {:?} {:?}",
                        installed[n].buckets, installed[n].windows
                    ));
                    if rng.below(2) == 0 {
                        let step = u128::from(STEPS[rng.below(4) as usize]);
                        at += step;
                        clock.set(start + Duration::from_nanos(at as u64));
                        latest = latest.max(at);
                        log.push(format!("  at {at} ns"));
                    }
                }
                prepared = prepare(&service);
                last_reload = Some((at, debts(&service)));
            }
            3 if plan.penalties => {
                let lane = rng.below(2) as usize;
                let units = COSTS[rng.below(COSTS.len() as u64) as usize];
                let _ = now(service.penalize("k", &lanes[lane], units));
                log.push(format!("  lane {lane} penalized {units}"));
            }
            _ => {
                let cost = COSTS[rng.below(COSTS.len() as u64) as usize];
                let way = rng.below(4);
                let lane = rng.below(2) as usize;
                let options = [lanes[0].clone().cost(cost), lanes[1].clone().cost(cost)];
                let decide = |way: u64| -> (bool, Option<Duration>) {
                    match way {
                        // Stacked: both lanes as one.
                        0 => {
                            match now(service.consume_all(&[("k", &options[0]), ("k", &options[1])]))
                            {
                                Ok(d) => (d.iter().all(|d| d.allowed), None),
                                Err(_) => (false, None),
                            }
                        }
                        1 if cost == 1 && prepared[lane].is_some() => {
                            let site = prepared[lane].as_ref().unwrap();
                            match site.consume_now("k").unwrap() {
                                Ok(d) => (d.allowed, d.retry_after),
                                Err(_) => (false, None),
                            }
                        }
                        _ => match now(service.consume("k", &options[lane])) {
                            Ok(d) => (d.allowed, d.retry_after),
                            Err(_) => (false, None),
                        },
                    }
                };
                let (allowed, retry) = decide(way);
                log.push(format!(
                    "  way {way} lane {lane} cost {cost}: {allowed} {retry:?}"
                ));
                let spent: &[usize] = match (allowed, way) {
                    (false, _) => &[],
                    (true, 0) => &[0, 1],
                    (true, _) => std::slice::from_ref(&lane),
                };
                for &l in spent {
                    let config = installed.len() - 1;
                    calls[l].push(Admitted {
                        at: at as i128,
                        latest: latest as i128,
                        cost: cost.into(),
                        config,
                    });
                    check(&calls[l], &installed, l, &log, seed);
                }
                if let (true, Some(wait)) = (plan.retries && rng.below(3) == 0, retry) {
                    let then = at + wait.as_nanos();
                    at = then;
                    clock.set(start + Duration::from_nanos(at as u64));
                    latest = latest.max(at);
                    log.push(format!("  at {at} ns"));
                    let (again, _) = decide(way);
                    retried += 1;
                    assert!(
                        again,
                        "seed {seed}: refused again {wait:?} later\n{}",
                        log.join("\n")
                    );
                    let config = installed.len() - 1;
                    calls[lane].push(Admitted {
                        at: at as i128,
                        latest: latest as i128,
                        cost: cost.into(),
                        config,
                    });
                    check(&calls[lane], &installed, lane, &log, seed);
                }
            }
        }
    }
    if let (true, Some((r, debts))) = (plan.live, last_reload) {
        let end = r + MINUTE.as_nanos();
        if at <= end {
            clock.set(start + Duration::from_nanos(end as u64));
            drained_by_the_end(&service, &installed, debts, &log, seed);
        }
    }
    retried
}

const PLAIN: Plan = Plan {
    back: false,
    penalties: false,
    retries: false,
    live: false,
    windows: false,
};

#[test]
fn random_chains_of_reloads_stay_within_every_bucket_holding_their_calls() {
    for seed in 0..400 {
        let _ = history(seed * 7_927 + 13, PLAIN);
        history(
            seed * 7_933 + 1,
            Plan {
                live: true,
                ..PLAIN
            },
        );
    }
}

#[test]
fn random_chains_with_penalties_and_a_clock_stepped_back_stay_within_every_bucket() {
    let plan = Plan {
        back: true,
        penalties: true,
        ..PLAIN
    };
    for seed in 0..400 {
        let _ = history(seed * 104_723 + 5, plan);
    }
}

/// Tier `"t"` moving between a window of a minute and one of two (another state, decided
/// as one with the old while its window lasts) beside reloads on the same state.
#[test]
fn random_chains_mixing_moved_and_same_states_stay_within_every_bucket_holding_their_calls() {
    let plan = Plan {
        windows: true,
        ..PLAIN
    };
    for seed in 0..400 {
        let _ = history(seed * 32_452_843 + 7, plan);
    }
}

#[test]
fn random_chains_a_refusals_retry_after_is_when_the_same_call_passes() {
    let plan = Plan {
        retries: true,
        ..PLAIN
    };
    let moving = Plan {
        windows: true,
        ..plan
    };
    let retried: usize = (0..400)
        .map(|seed| history(seed * 15_485_857 + 3, plan) + history(seed * 15_485_863 + 1, moving))
        .sum();
    assert!(retried > 1_000, "{retried} refusals waited out");
}

/// Tier `"t"`: a bucket of 10 refilled `refill` a minute, blocking a key for an hour once a
/// call on it is refused.
fn blocking(refill: u64) -> ConfigBuilder {
    let tier = Tier::new("t", 10)
        .refill(refill)
        .window(MINUTE)
        .strategy(Strategy::TokenBucket)
        .block_for(Duration::from_secs(3_600));
    bucket(10, 10).tier(tier)
}

/// 10 a minute reloaded to 10 a second, both blocking a key for an hour once a call on it is
/// refused; nothing spent until +50 s, then 5 calls at once: from an empty bucket either
/// configuration admits all 5, and held whole the transition did (a debt of 30 s). Cut to
/// drain by +60 s (11 s of room: 1 token of 6 s), the second is refused, and the refusal
/// blocks the key for the hour: every call refused until +3,650 s, where the old code
/// admitted again from +80 s at 10 a second.
#[test]
fn a_refusal_by_a_draining_cut_blocks_a_key_past_the_window() {
    let (service, clock) = service(blocking(10).build().unwrap());
    reload(&service, blocking(600));
    clock.advance(50 * SECOND);
    let t = Options::new().tier("t");
    let call = || now(service.consume("k", &t)).unwrap().allowed;
    let burst = (0..5).filter(|_| call()).count();
    clock.advance(30 * SECOND);
    let mut after = 0;
    for _ in 0..40 {
        after += usize::from(call());
        clock.advance(Duration::from_millis(100));
    }
    assert_eq!((burst, after), (5, 40), "admitted at +50 s, and from +80 s");
}
