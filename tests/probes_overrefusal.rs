//! Probes of over-refusal (helper-68): a limit of N per window admits N, not fewer; a refusal's
//! `retry_after` is true (a call at that time passes, one a millisecond earlier is refused);
//! `status`'s `reset_after` is true (full again then, not earlier). The memory store through
//! the service API, on a hand-driven clock, every strategy, costs above 1, burst and refill.

use std::time::Duration;

use ratelimit::{Config, ManualClock, Options, RateLimitService, Strategy};
use ratelimit_tests::{now, service, Rng};

const MS: Duration = Duration::from_millis(1);

fn memory() -> (RateLimitService, ratelimit::ManualClock) {
    service(Config::builder().build().unwrap())
}

/// Admitted out of `n` calls of `options` on `key` at the clock's instant.
fn admitted(service: &RateLimitService, key: &str, options: &Options, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume(key, options)).unwrap().allowed)
        .count()
}

/// Whether a call of `options` on `key` would pass now (a look: spends nothing).
fn would_pass(service: &RateLimitService, key: &str, options: &Options) -> bool {
    now(service.check(key, &options.clone().consume(false)))
        .unwrap()
        .allowed
}

/// The options of one drawn limit: strategy, limit, window (whole milliseconds), burst and
/// (token bucket) refill.
fn drawn(rng: &mut Rng) -> Options {
    let strategy = Strategy::ALL[rng.below(4) as usize];
    let window = Duration::from_millis([1_000, 60_000, 7, 1_500, 333][rng.below(5) as usize]);
    let mut options = Options::new()
        .strategy(strategy)
        .limit(1 + rng.below(12))
        .window(window)
        .burst(rng.below(4));
    if strategy == Strategy::TokenBucket && rng.below(2) == 0 {
        options = options.refill(1 + rng.below(5));
    }
    options
}

#[test]
fn every_strategy_admits_its_whole_capacity_at_once_whatever_the_cost() {
    for strategy in Strategy::ALL {
        for (limit, burst, cost) in [(10, 0, 1), (10, 5, 1), (10, 0, 3), (10, 2, 4), (1, 0, 1)] {
            let (service, _clock) = memory();
            let options = Options::new()
                .strategy(strategy)
                .limit(limit)
                .burst(burst)
                .window(Duration::from_secs(60))
                .cost(cost);
            let capacity = (limit + burst) as usize;
            assert_eq!(
                admitted(&service, "k", &options, 100),
                capacity / cost as usize,
                "{strategy:?} limit {limit} burst {burst} cost {cost}"
            );
            // What is left of the capacity is admitted in calls of cost 1.
            let rest = capacity % cost as usize;
            assert_eq!(
                admitted(&service, "k", &options.clone().cost(1), 100),
                rest,
                "{strategy:?} limit {limit} burst {burst} cost {cost}: the rest"
            );
        }
    }
}

/// Random histories on every strategy: each refusal's `retry_after` is when a call of the same
/// cost passes, and a millisecond before it the call is refused; each `status`'s
/// `reset_after` is when the budget is whole again.
#[test]
fn a_refusals_retry_after_is_when_the_call_passes_on_every_strategy() {
    let mut rng = Rng(0x5eed_0068);
    let (mut waits, mut remainders) = (0, 0);
    for history in 0..400 {
        let (service, clock) = memory();
        let options = drawn(&mut rng);
        let key = "k";
        for _ in 0..40 {
            let capacity_cost = 1 + rng.below(4);
            let call = options.clone().cost(capacity_cost);
            match now(service.consume(key, &call)) {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    let wait = d.retry_after.expect("a refusal says when");
                    assert!(wait > Duration::ZERO);
                    if wait > MS {
                        clock.advance(wait - MS);
                        assert!(
                            !would_pass(&service, key, &call),
                            "history {history} {options:?} cost {capacity_cost}: passes a \
                             millisecond before its retry_after {wait:?}"
                        );
                        clock.advance(MS);
                    } else {
                        clock.advance(wait);
                    }
                    assert!(
                        would_pass(&service, key, &call),
                        "history {history} {options:?} cost {capacity_cost}: refused at its \
                         retry_after {wait:?}"
                    );
                    waits += 1;
                }
                Err(ratelimit::Error::CostAboveCapacity { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
            if rng.below(5) == 0 {
                let level = now(service.status(key, &options)).unwrap();
                clock.advance(level.reset_after);
                let whole = now(service.status(key, &options)).unwrap();
                assert_eq!(
                    whole.remaining, whole.limit,
                    "history {history} {options:?}: not whole at reset_after {:?}",
                    level.reset_after
                );
            }
            if rng.below(7) == 0 {
                // `remaining` is what calls of cost 1 find now: that many pass, one more not.
                let level = now(service.status(key, &options)).unwrap();
                let one = options.clone().cost(1);
                let passed = admitted(&service, key, &one, level.remaining as usize + 1);
                assert_eq!(
                    passed, level.remaining as usize,
                    "history {history} {options:?}: status said {} remaining",
                    level.remaining
                );
                remainders += 1;
            }
            if rng.below(3) == 0 {
                clock.advance(Duration::from_millis(rng.below(400)));
            }
        }
    }
    assert!(waits > 1_000, "only {waits} refusals waited out");
    assert!(remainders > 1_000, "only {remainders} levels spent");
}

/// The configuration of the reload probes: every strategy as a tier, a default limit, a
/// burst, a refill; `extra` adds an unrelated tier (a reload that changes only it moves
/// nothing the calls use).
fn tiers(extra: bool) -> ratelimit::ConfigBuilder {
    use ratelimit::Tier;
    let mut b = Config::builder()
        .strategy(Strategy::SlidingWindow)
        .default_limit(7)
        .default_window(Duration::from_millis(1_500))
        .tier(
            Tier::new("fixed", 5)
                .window("1s")
                .strategy(Strategy::FixedWindow),
        )
        .tier(
            Tier::new("log", 4)
                .window("2s")
                .burst(2)
                .strategy(Strategy::SlidingWindow),
        )
        .tier(
            Tier::new("counter", 6)
                .window("1s")
                .strategy(Strategy::SlidingWindowCounter),
        )
        .tier(
            Tier::new("bucket", 5)
                .window("1s")
                .burst(3)
                .strategy(Strategy::TokenBucket),
        )
        .tier(
            Tier::new("slow", 4)
                .window("1s")
                .refill(2)
                .strategy(Strategy::TokenBucket),
        );
    if extra {
        b = b.tier(Tier::new("unused", 9).window("3s"));
    }
    b
}

/// A service reloaded at random with a configuration that moves none of the limits its calls
/// use (the same one, or one adding or dropping an unrelated tier) decides every call as a
/// service never reloaded: same verdict, same `remaining`, same `retry_after`. A reload that
/// changes nothing refuses nothing.
#[test]
fn a_reload_that_moves_no_limit_refuses_nothing_a_service_never_reloaded_admits() {
    let names = [
        None,
        Some("fixed"),
        Some("log"),
        Some("counter"),
        Some("bucket"),
        Some("slow"),
    ];
    for seed in 1..40u64 {
        let mut rng = Rng(seed * 0x9e37_79b9);
        let (plain, clock) = service(tiers(false).build().unwrap());
        let reloaded = RateLimitService::with_clock(
            tiers(false).build().unwrap(),
            std::sync::Arc::new(clock.clone()),
        )
        .unwrap();
        let mut extra = false;
        let mut refusals = 0;
        for step in 0..300 {
            if rng.below(6) == 0 {
                if rng.below(2) == 0 {
                    extra = !extra;
                }
                ratelimit_tests::reload_to(&reloaded, tiers(extra));
            }
            let mut options = Options::new().cost(1 + rng.below(3));
            if let Some(tier) = names[rng.below(names.len() as u64) as usize] {
                options = options.tier(tier);
            }
            let key = ["a", "b"][rng.below(2) as usize];
            let want = now(plain.consume(key, &options));
            let got = now(reloaded.consume(key, &options));
            match (&want, &got) {
                (Ok(w), Ok(g)) => {
                    assert_eq!(
                        (g.allowed, g.remaining, g.retry_after),
                        (w.allowed, w.remaining, w.retry_after),
                        "seed {seed} step {step} {options:?}"
                    );
                    refusals += usize::from(!w.allowed);
                }
                _ => assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "seed {seed} step {step}"
                ),
            }
            clock.advance(Duration::from_millis(rng.below(120)));
        }
        assert!(refusals > 40, "seed {seed}: {refusals} refusals");
    }
}

/// 10 a minute, a fixed window: the limit the clock-step probes count by.
fn ten_a_minute() -> Options {
    Options::new()
        .strategy(Strategy::FixedWindow)
        .limit(10)
        .window(Duration::from_secs(60))
}

/// What a key never used before (`"after"`) is admitted under `minute` in five minutes from
/// the clock's time, 20 calls a minute.
fn after_the_step_back(
    service: &RateLimitService,
    clock: &ratelimit::ManualClock,
    minute: &Options,
) -> usize {
    let mut total = 0;
    for _ in 0..5 {
        total += admitted(service, "after", minute, 20);
        clock.advance(Duration::from_secs(60));
    }
    total
}

/// A wall clock set a day ahead for a few seconds, then back (a host that booted with a wrong
/// clock and was corrected, a VM resumed with a stale offset): after the correction, a key
/// never used during the step (a fresh user) gets its limit every window, as before the
/// step. The memory store decided every call at the latest time a sweep ran (its floor,
/// which keeps a key dropped at the later time from being fresh at an earlier one), so time
/// stood still at the stepped time for the whole day: 10 a minute admitted 10 in 5 minutes.
/// The floor is now the latest end among the keys a sweep dropped: "before"'s window (fixed
/// windows are counted from the epoch: [START - 40 s, START + 20 s)) ended by `back`.
#[test]
fn a_key_first_used_after_a_clock_step_back_gets_its_limit_every_window() {
    let (service, clock) = memory();
    let minute = ten_a_minute();
    assert_eq!(admitted(&service, "before", &minute, 20), 10);
    let back = ratelimit_tests::START + Duration::from_secs(20);
    clock.set(back + Duration::from_secs(86_400));
    // A call during the step (any key): the memory store sweeps then.
    assert_eq!(admitted(&service, "during", &minute, 1), 1);
    clock.set(back);
    let total = after_the_step_back(&service, &clock, &minute);
    assert_eq!(total, 50, "a fresh key after the step back, five minutes");
}

/// After the same step (a day ahead, then back), a store capped at 3 keys serves one new key
/// a second under a limit of 1 a second: each key's window ends a second later, so the cap
/// never binds (the store sweeps expired keys at the cap). Time standing at the floor, no
/// key ever expired, and every new key once the store was full was `StoreFull` for the day
/// (2 of 10 admitted); the sweep during the step dropped nothing, so the floor stays low.
#[test]
fn new_keys_after_a_clock_step_back_are_not_refused_as_a_full_store() {
    use ratelimit::{MemoryOptions, MemoryStore};
    let clock = ratelimit_tests::clock();
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        MemoryStore::with_options(MemoryOptions::default().max_keys(3)),
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap();
    let second = Options::new()
        .strategy(Strategy::FixedWindow)
        .limit(1)
        .window(Duration::from_secs(1));
    let back = ratelimit_tests::START;
    clock.set(back + Duration::from_secs(86_400));
    assert_eq!(admitted(&service, "during", &second, 1), 1);
    clock.set(back);
    let served = new_keys_served(&service, &clock, &second, 10, Duration::from_secs(1));
    assert_eq!(
        served, 10,
        "one new key a second, each expired a second later"
    );
}

/// The step of the first probe with traffic during it: a key of a second's window used at
/// the stepped time and dropped by a sweep 15 s later, still during the step. A sweep holds
/// later decisions only to the latest end among the keys it drops (the memory store keeps
/// no record of which keys those were), here the stepped time plus a second: back at the
/// right time, a key never used during the step is decided there, as the dropped key
/// would be, and 10 a minute admits 10 in 5 minutes, where 50 are due.
#[test]
#[ignore = "FOUND (left): a key used during a clock step a day ahead and swept during it \
            holds the memory store's floor at its end for the day after the step back: 10 a \
            minute admits 10 in 5 minutes (50 expected). The floor is one time for every key; \
            lower, the dropped key would be fresh inside its window (fail-open). Closing it \
            needs a floor per group of keys (by hash), over-refusing only keys that share one"]
fn a_key_first_used_after_a_step_back_with_traffic_during_the_step_gets_its_limit() {
    let (service, clock) = memory();
    let second = Options::new()
        .strategy(Strategy::FixedWindow)
        .limit(1)
        .window(Duration::from_secs(1));
    let back = ratelimit_tests::START + Duration::from_secs(20);
    clock.set(back + Duration::from_secs(86_400));
    assert_eq!(admitted(&service, "during", &second, 1), 1);
    clock.advance(Duration::from_secs(15));
    // Sweeps (10 s since the last): "during" ended 14 s ago and goes.
    assert_eq!(admitted(&service, "during-too", &second, 1), 1);
    clock.set(back);
    let total = after_the_step_back(&service, &clock, &ten_a_minute());
    assert_eq!(total, 50, "a fresh key after the step back, five minutes");
}

/// Random histories of stacked calls (`consume_all`, two or three limits of every strategy on
/// one key, one cost): a refused stack passes when its longest `retry_after` has passed, and
/// not a millisecond before (its refusing limits are those whose waits it names).
#[test]
fn a_refused_stacks_longest_retry_after_is_when_the_stack_passes() {
    let mut rng = Rng(0x0068_57ac);
    let mut waits = 0;
    for history in 0..300 {
        let (service, clock) = memory();
        let limits: Vec<Options> = (0..2 + rng.below(2))
            .map(|i| drawn(&mut rng).budget(format!("b{i}")))
            .collect();
        for _ in 0..30 {
            let cost = 1 + rng.below(3);
            let stack: Vec<Options> = limits.iter().map(|o| o.clone().cost(cost)).collect();
            let looks: Vec<Options> = stack.iter().map(|o| o.clone().consume(false)).collect();
            let pairs = |of: &[Options]| -> Vec<(&'static str, Options)> {
                of.iter().map(|o| ("k", o.clone())).collect()
            };
            let decide = |of: &[Options]| {
                let owned = pairs(of);
                let borrowed: Vec<(&str, &Options)> = owned.iter().map(|(k, o)| (*k, o)).collect();
                now(service.consume_all(&borrowed))
            };
            let decisions = match decide(&stack) {
                Ok(d) => d,
                Err(ratelimit::Error::CostAboveCapacity { .. }) => continue,
                Err(other) => panic!("{other:?}"),
            };
            if decisions.iter().all(|d| d.allowed) {
                if rng.below(3) == 0 {
                    clock.advance(Duration::from_millis(rng.below(300)));
                }
                continue;
            }
            let wait = decisions
                .iter()
                .filter_map(|d| d.retry_after)
                .max()
                .expect("a refused stack says when");
            if wait > MS {
                clock.advance(wait - MS);
                let early = decide(&looks).unwrap();
                assert!(
                    !early.iter().all(|d| d.allowed),
                    "history {history} {limits:?} cost {cost}: passes 1 ms before {wait:?}"
                );
                clock.advance(MS);
            } else {
                clock.advance(wait);
            }
            let due = decide(&looks).unwrap();
            assert!(
                due.iter().all(|d| d.allowed),
                "history {history} {limits:?} cost {cost}: refused at {wait:?}: {due:?}"
            );
            waits += 1;
        }
    }
    assert!(waits > 1_000, "only {waits} refused stacks waited out");
}

/// A limit with a block (2 a minute, an hour's block once refused): looks at the key while
/// it is spent (`status`, `check` with `consume(false)`, a stack of looks) refuse nothing and
/// so begin no block; a stacked call refused by another limit begins none on this one; a
/// minute later the key admits 2 again.
#[test]
fn looks_and_other_limits_refusals_begin_no_block() {
    let (service, clock) = memory();
    let blocked = Options::new()
        .strategy(Strategy::SlidingWindow)
        .limit(2)
        .window(Duration::from_secs(60))
        .block_for(Duration::from_secs(3_600));
    let tight = Options::new()
        .limit(1)
        .window(Duration::from_secs(3_600))
        .budget("tight");
    assert_eq!(admitted(&service, "k", &blocked, 2), 2);
    assert!(!now(service.status("k", &blocked)).unwrap().allowed);
    assert!(!would_pass(&service, "k", &blocked));
    let looks = [("k", &blocked.clone().consume(false))];
    assert!(!now(service.consume_all(&looks)).unwrap()[0].allowed);
    clock.advance(Duration::from_secs(60));
    // A stack whose other limit refuses: nothing spent, no block begun on `blocked`.
    assert!(now(service.consume("k", &tight)).unwrap().allowed);
    let stack = [("k", &blocked), ("k", &tight)];
    let refused = now(service.consume_all(&stack)).unwrap();
    assert!(refused[0].allowed && !refused[1].allowed, "{refused:?}");
    assert_eq!(admitted(&service, "k", &blocked, 3), 2, "a minute later");
}

/// A store capped at 3 keys, a limit of 1 per 100 ms, one new key every 200 ms: at most one
/// key is live at any time, and at the cap "expired keys are swept first" (MemoryOptions::
/// max_keys), so no new key is refused. The sweep at the cap dropped only keys expired more
/// than its grace (a second) ago: keys expired 100, 300 and 500 ms before stayed, and 11 of
/// the 20 new keys were admitted, the rest `StoreFull`. It drops the keys expired by now.
#[test]
fn a_full_store_sweeps_the_keys_expired_by_now_before_refusing_a_new_one() {
    use ratelimit::{MemoryOptions, MemoryStore};
    let clock = ratelimit_tests::clock();
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        MemoryStore::with_options(MemoryOptions::default().max_keys(3)),
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap();
    let short = Options::new()
        .strategy(Strategy::FixedWindow)
        .limit(1)
        .window(Duration::from_millis(100));
    let served = new_keys_served(&service, &clock, &short, 20, Duration::from_millis(200));
    assert_eq!(
        served, 20,
        "one new key every 200 ms, each expired 100 ms after"
    );
}

/// The random histories of the `retry_after` probe with penalties and rewards among the calls
/// (no block): every refusal still passes at its `retry_after` and not a millisecond before.
#[test]
fn a_refusals_retry_after_is_when_the_call_passes_after_penalties_and_rewards() {
    let mut rng = Rng(0x0006_8ad1);
    let mut waits = 0;
    for history in 0..400 {
        let (service, clock) = memory();
        let options = drawn(&mut rng);
        let key = "k";
        for _ in 0..40 {
            match rng.below(8) {
                0 => drop(now(service.penalize(key, &options, 1 + rng.below(4))).unwrap()),
                1 => drop(now(service.reward(key, &options, 1 + rng.below(4))).unwrap()),
                _ => {}
            }
            let cost = 1 + rng.below(4);
            let call = options.clone().cost(cost);
            match now(service.consume(key, &call)) {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    let wait = d.retry_after.expect("a refusal says when");
                    if wait > MS {
                        clock.advance(wait - MS);
                        assert!(
                            !would_pass(&service, key, &call),
                            "history {history} {options:?} cost {cost}: passes 1 ms before {wait:?}"
                        );
                        clock.advance(MS);
                    } else {
                        clock.advance(wait);
                    }
                    assert!(
                        would_pass(&service, key, &call),
                        "history {history} {options:?} cost {cost}: refused at {wait:?}"
                    );
                    waits += 1;
                }
                Err(ratelimit::Error::CostAboveCapacity { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
            if rng.below(3) == 0 {
                clock.advance(Duration::from_millis(rng.below(400)));
            }
        }
    }
    assert!(waits > 1_000, "only {waits} refusals waited out");
}

/// Random histories of calls and reloads that tighten or loosen one limit in place (same
/// strategy and window, limit, burst and refill changing: the old quota held for an old
/// window after a loosening) or move it (another window): every refusal's `retry_after` is a
/// time the call passes at (README: "A refusal's wait beside an old state is one the call
/// passes at"); and long after the last of them the limit admits its whole capacity.
#[test]
fn a_refusals_retry_after_passes_across_reloads_that_loosen_tighten_or_move_a_limit() {
    let mut rng = Rng(0x6801_e10a);
    let mut waits = 0;
    for history in 0..200 {
        let strategy = Strategy::ALL[rng.below(4) as usize];
        let draw = |rng: &mut Rng| {
            let mut b = Config::builder()
                .strategy(strategy)
                .default_limit(1 + rng.below(8))
                .burst_limit(rng.below(3))
                .default_window(Duration::from_millis([1_000, 1_500][rng.below(2) as usize]));
            if strategy == Strategy::TokenBucket && rng.below(2) == 0 {
                b = b.token_refill_rate(1 + rng.below(6));
            }
            b
        };
        let (service, clock) = service(draw(&mut rng).build().unwrap());
        for _ in 0..40 {
            if rng.below(5) == 0 {
                ratelimit_tests::reload_to(&service, draw(&mut rng));
            }
            let call = Options::new().cost(1 + rng.below(2));
            match now(service.consume("k", &call)) {
                Ok(d) if d.allowed => {}
                Ok(d) => {
                    let wait = d.retry_after.expect("a refusal says when");
                    clock.advance(wait);
                    assert!(
                        would_pass(&service, "k", &call),
                        "history {history} {strategy:?} {call:?}: refused at its retry_after \
                         {wait:?} under {:?}",
                        service.config()
                    );
                    waits += 1;
                }
                Err(ratelimit::Error::CostAboveCapacity { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
            if rng.below(3) == 0 {
                clock.advance(Duration::from_millis(rng.below(500)));
            }
        }
        // Long after the last call and reload (every old window and debt over), the limit
        // admits its whole capacity at once: no transition outlives its horizon.
        clock.advance(Duration::from_secs(30));
        let config = service.config();
        let capacity = config.default_limit().unwrap() + config.burst_limit();
        assert_eq!(
            ratelimit_tests::drain(&service, "k", &Options::new()),
            capacity,
            "history {history} {strategy:?}: whole again under {config:?}"
        );
    }
    assert!(waits > 500, "only {waits} refusals waited out");
}

/// `n` calls of `options` on new keys (`user-0`, `user-1`, ...), the clock advanced `step`
/// after each: how many were admitted, the others refused `StoreFull` (anything else
/// panics).
fn new_keys_served(
    service: &RateLimitService,
    clock: &ManualClock,
    options: &Options,
    n: usize,
    step: Duration,
) -> usize {
    let mut served = 0;
    for user in 0..n {
        match now(service.consume(&format!("user-{user}"), options)) {
            Ok(d) if d.allowed => served += 1,
            Ok(d) => panic!("user {user} refused: {d:?}"),
            Err(ratelimit::Error::StoreFull { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
        clock.advance(step);
    }
    served
}
