//! helper-66's random chains of moves: one bucket (a capacity and an interval drawn per
//! history, with or without a block) moved again and again between tiers `"a"` and `"b"`
//! (the default tier renamed) and windows of one and two minutes, each move another state;
//! calls of costs 1 to 3 alone, through a prepared site and stacked beside a limit that never
//! refuses; penalties; looks; refusals waited out. Memory store, a hand-driven clock that only
//! goes on.
//!
//! Every configuration is the same bucket, so the calls must behave as one bucket's, whatever
//! the moves (`Model`, a GCRA over every admission and penalty, in nanoseconds):
//! - never more: each admission is one the bucket admits, and none inside a block begun by a
//!   refusal (every refused spend begins one where the bucket blocks, as the store does);
//! - a refusal's wait is one the same call passes at (retried then: admitted);
//! - no lockout: the wait is at most the bucket's own (or the block's end, where that is
//!   later) and two milliseconds (waits are whole milliseconds). A carry rounded the old
//!   debt up to a whole token of the moved bucket, and a chained move rounded it again, a
//!   token a move and a penalty
//!   (`probes_carry_attacks::chained_moves_do_not_round_a_debt_up_a_token_each`): the debt is
//!   carried exactly now. A block was begun again on one of the two states decided in the
//!   old window by a refusal while the other was blocked (seeds 1149428, 1068524548: told
//!   300 s where the one bucket's block ends 299 s on; with penalties during blocks, a block
//!   63 s longer): the block is carried both ways meanwhile now (`Carry::block_only`,
//!   `probes_blocks_beside_moves`), and this bound held a token looser no longer;
//! - a look that says a call passes is not refused by the next call.
//!
//! Penalties are made during blocks too (a blocked refusal's wait is the later of the block's
//! end and the bucket's own:
//! `probes_carry_attacks::a_blocked_refusals_wait_is_when_the_call_passes_after_a_penalty`).

use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, Decision, Error, Options, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::{now, reload_to as reload, service, Rng, START};

const MINUTE: u64 = 60_000_000_000;
const MS: u128 = 1_000_000;

/// The bucket of a history: capacity, interval (ns), block (ns, 0: none).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    capacity: u64,
    interval: u64,
    block: u64,
}

/// The configuration with the bucket as default tier `name` on a window of `minutes`, and tier
/// `"z"` (a thousand a minute) for stacked calls.
fn config(bucket: Bucket, name: &str, minutes: u64) -> ConfigBuilder {
    let window = Duration::from_nanos(MINUTE * minutes);
    let mut tier = Tier::new(name, bucket.capacity)
        .burst(0)
        .refill(MINUTE * minutes / bucket.interval)
        .window(window)
        .strategy(Strategy::TokenBucket);
    if bucket.block > 0 {
        tier = tier.block_for(Duration::from_nanos(bucket.block));
    }
    let z = Tier::new("z", 1_000)
        .window(Duration::from_nanos(MINUTE))
        .strategy(Strategy::SlidingWindow);
    Config::builder().tier(tier).tier(z).default_tier(name)
}

/// One bucket over every admission and penalty (nanoseconds since the start).
struct Model {
    bucket: Bucket,
    tat: u128,
    blocked_until: u128,
}

impl Model {
    fn tolerance(&self) -> u128 {
        u128::from(self.bucket.capacity * self.bucket.interval)
    }
    /// When a call of `cost` at `at` passes.
    fn passes_at(&self, at: u128, cost: u64) -> u128 {
        let due = (self.tat.max(at) + u128::from(cost * self.bucket.interval))
            .saturating_sub(self.tolerance());
        due.max(at).max(self.blocked_until)
    }
    fn spend(&mut self, at: u128, units: u64) {
        self.tat = self.tat.max(at) + u128::from(units * self.bucket.interval);
    }
}

/// What a history does.
#[derive(Clone, Copy)]
struct Plan {
    penalties: bool,
    retries: bool,
    looks: bool,
}

/// One call of `cost` at `way` (0 alone, 1 prepared, 2 stacked beside `"z"`): admitted, and
/// the wait of a refusal.
fn call(
    service: &RateLimitService,
    site: &ratelimit::Prepared,
    way: u64,
    cost: u64,
) -> (bool, Option<Duration>) {
    let options = Options::new().cost(cost);
    let decided: Result<Decision, Error> = match way {
        0 => now(service.consume("k", &options)),
        1 => site.consume_now("k").unwrap(),
        _ => {
            let z = Options::new().tier("z");
            now(service.consume_all(&[("k", &options), ("k", &z)])).map(|d| d[0].clone())
        }
    };
    match decided {
        Ok(d) => (d.allowed, d.retry_after),
        Err(Error::CostAboveCapacity { .. }) => (false, None),
        Err(e) => panic!("neither admitted nor refused: {e}"),
    }
}

fn history(seed: u64, plan: Plan) -> usize {
    let mut rng = Rng(seed | 1);
    let pick = |rng: &mut Rng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
    let bucket = Bucket {
        capacity: pick(&mut rng, &[2, 3, 5, 10]),
        interval: pick(&mut rng, &[1, 6, 20]) * 1_000_000_000,
        block: pick(&mut rng, &[0, 0, 300]) * 1_000_000_000,
    };
    let (mut name, mut minutes) = ("a", 1);
    let (service, clock) = service(config(bucket, name, minutes).build().unwrap());
    let mut site = service.prepare(&Options::new()).unwrap();
    let mut model = Model {
        bucket,
        tat: 0,
        blocked_until: 0,
    };
    let mut at: u128 = 0;
    let mut log = vec![format!("{bucket:?}")];
    let mut retried = 0;
    let steps = [
        0, 1, 100, 999, 1_000, 6_000, 20_000, 30_000, 61_000, 200_000,
    ];
    for _ in 0..200 {
        match rng.below(10) {
            0 | 1 => {
                at += u128::from(pick(&mut rng, &steps)) * MS;
                clock.set(START + Duration::from_nanos(at as u64));
                log.push(format!("at {} ms", at / MS));
            }
            2 => {
                name = ["a", "b"][rng.below(2) as usize];
                minutes = 1 + rng.below(2);
                reload(&service, config(bucket, name, minutes));
                site = service.prepare(&Options::new()).unwrap();
                log.push(format!("reload {name} {minutes} min"));
            }
            3 if plan.penalties => {
                let units = 1 + rng.below(3);
                now(service.penalize("k", &Options::new(), units)).unwrap();
                model.spend(at, units);
                log.push(format!("penalty {units} (model tat {} ms)", model.tat / MS));
            }
            4 if plan.looks => {
                let look = now(service.status("k", &Options::new())).unwrap();
                if look.allowed {
                    let (admitted, wait) = call(&service, &site, 0, 1);
                    log.push(format!("look {} then {admitted} {wait:?}", look.remaining));
                    let said =
                        format!("seed {seed}: a look said a call passes\n{}", log.join("\n"));
                    assert!(admitted, "{said}");
                    check_admitted(&mut model, at, 1, seed, &log);
                }
            }
            _ => {
                let cost = 1 + rng.below(3);
                let way = if cost == 1 {
                    rng.below(3)
                } else {
                    2 * rng.below(2)
                };
                let (admitted, wait) = call(&service, &site, way, cost);
                log.push(format!(
                    "way {way} cost {cost}: {admitted} {wait:?} (model tat {} ms)",
                    model.tat / MS
                ));
                if admitted {
                    check_admitted(&mut model, at, cost, seed, &log);
                    continue;
                }
                let Some(wait) = wait else { continue };
                if bucket.block > 0 && at >= model.blocked_until {
                    model.blocked_until = at + u128::from(bucket.block);
                }
                let due = model.passes_at(at, cost) - at;
                let slack = 2 * MS;
                assert!(
                    wait.as_nanos() <= due + slack,
                    "seed {seed}: told {wait:?} where the bucket passes in {due} ns\n{}",
                    log.join("\n")
                );
                if plan.retries && rng.below(2) == 0 {
                    at += wait.as_nanos();
                    clock.set(START + Duration::from_nanos(at as u64));
                    let (again, _) = call(&service, &site, way, cost);
                    log.push(format!("at {} ns, again: {again}", at));
                    retried += 1;
                    let said = format!(
                        "seed {seed}: refused again {wait:?} later\n{}",
                        log.join("\n")
                    );
                    assert!(again, "{said}");
                    check_admitted(&mut model, at, cost, seed, &log);
                }
            }
        }
    }
    retried
}

/// An admission of `cost` at `at`: one the bucket admits, outside any block; spent on it.
fn check_admitted(model: &mut Model, at: u128, cost: u64, seed: u64, log: &[String]) {
    let passes = model.passes_at(at, cost);
    assert!(
        passes <= at,
        "seed {seed}: admitted {} ns before the bucket passes it\n{}",
        passes - at,
        log.join("\n")
    );
    model.spend(at, cost);
}

#[test]
fn random_chains_of_moves_stay_one_bucket() {
    let plan = Plan {
        penalties: false,
        retries: false,
        looks: false,
    };
    for seed in 0..300 {
        history(seed * 7_927 + 13, plan);
    }
}

#[test]
fn random_chains_of_moves_with_penalties_and_looks_stay_one_bucket() {
    let plan = Plan {
        penalties: true,
        retries: false,
        looks: true,
    };
    for seed in 0..300 {
        history(seed * 104_723 + 5, plan);
    }
}

#[test]
fn random_chains_of_moves_a_refusals_wait_is_when_the_call_passes() {
    let plan = Plan {
        penalties: true,
        retries: true,
        looks: true,
    };
    let retried: usize = (0..300)
        .map(|seed| history(seed * 15_485_863 + 1, plan))
        .sum();
    assert!(retried > 1_000, "{retried} refusals waited out");
}
