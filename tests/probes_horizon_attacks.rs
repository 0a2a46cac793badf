//! helper-83's attacks on the carrying horizon of a moved limit (`Kept::carrying_with`,
//! `transition_of`'s `held_for`, the own quotas noted by `note_outlasts`): quotas of a
//! call's own of several shapes on the configured limit's state, then reloads that move it
//! (the default tier renamed, the window changed at the same rate, the key prefix changed,
//! two in a row, and there and back), then calls with and without the quota of their own.
//! Each against the twin, the same service and calls that never reloaded: a move must hand
//! out no budget the one state would not (fail-open), and must not refuse past what the one
//! state refuses for long (a moved bucket refills). Memory store, hand-driven clock, exact
//! counts.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, ManualClock, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::moves::{Move, MOVES};
use ratelimit_tests::{now, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier) under `strategy`: 10 plus `burst` a minute-long `window`
/// multiple (`minutes`), a bucket refilled `refill` tokens a minute whatever the window,
/// blocking a key `block` once refused, under key prefix `prefix`.
#[derive(Debug, Clone, Copy)]
struct Limit {
    strategy: Strategy,
    burst: u64,
    refill: u64,
    block: Option<Duration>,
}

impl Limit {
    /// A bucket of 10 plus 5 a token every 6 s (a tolerance of 90 s).
    const BUCKET: Limit = Limit {
        strategy: Strategy::TokenBucket,
        burst: 5,
        refill: 10,
        block: None,
    };

    fn config(&self, name: &str, minutes: u32, prefix: &str) -> ConfigBuilder {
        let mut tier = Tier::new(name, 10)
            .burst(self.burst)
            .window(MINUTE * minutes)
            .strategy(self.strategy);
        if self.strategy == Strategy::TokenBucket {
            tier = tier.refill(self.refill * u64::from(minutes));
        }
        if let Some(block) = self.block {
            tier = tier.block_for(block);
        }
        Config::builder()
            .tier(tier)
            .default_tier(name)
            .key_prefix(prefix)
    }

    /// A service on the first configuration (tier `"a"`, a minute, prefix `"p"`).
    fn service(&self) -> (RateLimitService, ManualClock) {
        service(self.config("a", 1, "p").build().unwrap())
    }

    /// Makes `how`'s reloads on `service` (ten seconds apart where two), the clock moved on
    /// by them and back to where it was.
    fn moving(&self, service: &RateLimitService, clock: &ManualClock, how: Move) {
        let reloads = how.reloads();
        for &(name, minutes, other_prefix) in reloads {
            let prefix = if other_prefix { "q" } else { "p" };
            let config = self.config(name, minutes, prefix).build().unwrap();
            service.reload(config).unwrap();
            if reloads.len() > 1 {
                clock.advance(Duration::from_secs(10));
            }
        }
    }
}

/// Calls of `options` on `"k"` admitted of `n`.
fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", options)).unwrap().allowed)
        .count()
}

/// Runs `script` on `limit`'s service, `how` moving it where `script` says (its `moving`
/// argument): the counts it returns.
fn run(
    limit: Limit,
    how: Move,
    script: impl Fn(&RateLimitService, &ManualClock, &dyn Fn()) -> Vec<usize>,
) -> Vec<usize> {
    let (service, clock) = limit.service();
    let moving = || limit.moving(&service, &clock, how);
    script(&service, &clock, &moving)
}

/// `script` on the twin and on every move: the moved counts that differ from the twin's,
/// each with its move.
fn against_the_twin(
    limit: Limit,
    moves: &[Move],
    script: impl Fn(&RateLimitService, &ManualClock, &dyn Fn()) -> Vec<usize> + Copy,
) -> (Vec<usize>, Vec<(Move, Vec<usize>)>) {
    let twin = run(limit, Move::None, script);
    let differ = (moves.iter())
        .map(|&how| (how, run(limit, how, script)))
        .filter(|(_, counts)| *counts != twin)
        .collect();
    (twin, differ)
}

/// The clock at `secs` past the service's start.
fn at(clock: &ManualClock, secs: u64) {
    clock.set(ratelimit_tests::START + Duration::from_secs(secs));
}

// ---------------------------------------------------------------------------------------
// 1. A quota of its own wrote the configured state; plain calls after (Fix A), every move.
// ---------------------------------------------------------------------------------------

/// 15 calls with their own refill of a token a minute (15 minutes owed on the configured
/// bucket's state), moved, then plain calls at +300 s (past the configured carrying, 150 s)
/// and again at +16 min (the debt paid): none, then 15, on every move as on the twin.
#[test]
fn plain_calls_after_a_slow_bucket_of_its_own_on_every_move() {
    let own = Options::new().refill(1);
    let (twin, differ) = against_the_twin(Limit::BUCKET, &MOVES, |service, clock, moving| {
        let mut counts = vec![admitted(service, &own, 16)];
        moving();
        at(clock, 300);
        counts.push(admitted(service, &Options::new(), 16));
        at(clock, 16 * 60);
        counts.push(admitted(service, &Options::new(), 16));
        counts
    });
    assert_eq!(twin, [15, 0, 15], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

// ---------------------------------------------------------------------------------------
// 2. The mirror: the configured limit wrote the state; calls with a quota of their own after.
// ---------------------------------------------------------------------------------------

/// A bucket of 10 plus 5 refilled a token a minute (14 minutes of tolerance: 15 plain calls
/// leave 15 minutes owed), and calls with their own refill of 600 a minute on the same state
/// (a tolerance of 1.5 s: their quota outlasts a reload by 61.5 s, the configured one by 15
/// minutes). 15 plain calls, moved, then own calls at +100 s (past their own quota's
/// carrying, inside the configured one's): the one state owes 14 more minutes and refuses
/// them all; and at +16 min, all 15.
#[test]
fn calls_with_a_fast_bucket_of_their_own_after_plain_calls_left_a_slow_debt() {
    let slow = Limit {
        refill: 1,
        ..Limit::BUCKET
    };
    let own = Options::new().refill(600);
    let (twin, differ) = against_the_twin(slow, &MOVES, |service, clock, moving| {
        let mut counts = vec![admitted(service, &Options::new(), 16)];
        moving();
        at(clock, 100);
        counts.push(admitted(service, &own, 16));
        at(clock, 16 * 60);
        counts.push(admitted(service, &own, 16));
        counts
    });
    assert_eq!(twin, [15, 0, 15], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// The same on the default limit of a configuration without tiers (the configured quota
/// the module's own, not a tier's), moved by another key prefix: none at +100 s, as the
/// twin.
#[test]
fn calls_with_a_fast_bucket_of_their_own_under_the_default_limit_carry_its_slow_debt() {
    let own = Options::new().refill(600);
    let mut runs = Vec::new();
    for moves in [false, true] {
        let (service, clock) = service(ratelimit_tests::bucket_a_minute(10, 5, 1).build().unwrap());
        let mut counts = vec![admitted(&service, &Options::new(), 16)];
        if moves {
            let to = ratelimit_tests::bucket_a_minute(10, 5, 1).key_prefix("q");
            service.reload(to.build().unwrap()).unwrap();
        }
        at(&clock, 100);
        counts.push(admitted(&service, &own, 16));
        runs.push(counts);
    }
    assert_eq!(runs[0], [15, 0], "twin");
    assert_eq!(runs[1], runs[0], "moved");
}

/// The same through a site prepared after the move (its transition worked out once, at
/// `prepare`) and through stacked calls (`consume_all`, beside tier-free calls of a limit
/// that never refuses): none at +100 s, 15 at +16 min, as the twin.
#[test]
fn a_prepared_site_and_stacked_calls_with_a_fast_bucket_of_their_own_carry_the_slow_debt() {
    let slow = Limit {
        refill: 1,
        ..Limit::BUCKET
    };
    let own = Options::new().refill(600);
    let wide = Options::new().limit(1_000).refill(1_000);
    for prepared in [true, false] {
        let (twin, differ) = against_the_twin(slow, &MOVES, |service, clock, moving| {
            let mut counts = vec![admitted(service, &Options::new(), 16)];
            moving();
            let site = service.prepare(&own).unwrap();
            let one = || match prepared {
                true => site.consume_now("k").unwrap().unwrap().allowed,
                false => (now(service.consume_all(&[("k", &own), ("w", &wide)])).unwrap())
                    .iter()
                    .all(|d| d.allowed),
            };
            at(clock, 100);
            counts.push((0..16).filter(|_| one()).count());
            at(clock, 16 * 60);
            counts.push((0..16).filter(|_| one()).count());
            counts
        });
        assert_eq!(twin, [15, 0, 15], "twin, prepared: {prepared}");
        assert!(differ.is_empty(), "prepared: {prepared}: {differ:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 3. Blocks of their own on the configured state.
// ---------------------------------------------------------------------------------------

/// The bucket (no block of its own configured): 13 plain calls, then 3 with their own block
/// of an hour (2 admitted, the third refused and blocking the key), moved; at +300 s calls
/// with the block (refused inside it) and plain calls (a quota without a block reads none:
/// the bucket, refilled, admits 15); at +1 h 2 min the calls with the block: 15.
#[test]
fn a_block_of_its_own_on_the_bucket_holds_its_calls_and_not_the_plain_ones() {
    let own = Options::new().block_for(HOUR);
    let (twin, differ) = against_the_twin(Limit::BUCKET, &MOVES, |service, clock, moving| {
        let mut counts = vec![admitted(service, &Options::new(), 13)];
        counts.push(admitted(service, &own, 3));
        moving();
        at(clock, 300);
        counts.push(admitted(service, &own, 5));
        counts.push(admitted(service, &Options::new(), 16));
        at(clock, 3_720);
        counts.push(admitted(service, &own, 16));
        counts
    });
    assert_eq!(twin, [13, 2, 0, 15, 15], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// Every strategy with a configured block of a minute, and calls with their own limit of 2
/// and block of an hour on the same state: 3 of them (2 admitted, the third blocking the key
/// an hour), moved; at +300 s plain calls (their quota has a block, so they read the key's:
/// refused inside the hour) and own calls; at +1 h 2 min the plain calls, the block over.
#[test]
fn a_longer_block_of_its_own_holds_the_plain_calls_on_every_strategy() {
    let mut found = Vec::new();
    for strategy in Strategy::ALL {
        let limit = Limit {
            strategy,
            burst: 0,
            refill: 10,
            block: Some(MINUTE),
        };
        let own = Options::new().limit(2).block_for(HOUR);
        let (twin, differ) = against_the_twin(limit, &MOVES, |service, clock, moving| {
            let mut counts = vec![admitted(service, &own, 3)];
            moving();
            at(clock, 300);
            counts.push(admitted(service, &Options::new(), 11));
            counts.push(admitted(service, &own, 3));
            at(clock, 3_720);
            counts.push(admitted(service, &Options::new(), 11));
            counts
        });
        assert_eq!(twin, [2, 0, 0, 10], "twin, {strategy}");
        if !differ.is_empty() {
            found.push((strategy, differ));
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

// ---------------------------------------------------------------------------------------
// 4. A penalty, and resets of the key, beside the quota of its own.
// ---------------------------------------------------------------------------------------

/// 15 plain calls and a penalty of 40 (330 s owed), moved; plain calls at +200 s (past the
/// configured carrying, inside the penalty's debt): none; at +400 s: 15.
#[test]
fn a_penalty_is_carried_past_the_configured_carrying_on_every_move() {
    let (twin, differ) = against_the_twin(Limit::BUCKET, &MOVES, |service, clock, moving| {
        let mut counts = vec![admitted(service, &Options::new(), 15)];
        now(service.penalize("k", &Options::new(), 40)).unwrap();
        moving();
        at(clock, 200);
        counts.push(admitted(service, &Options::new(), 16));
        at(clock, 400);
        counts.push(admitted(service, &Options::new(), 16));
        counts
    });
    assert_eq!(twin, [15, 0, 15], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// Never refused forever: 15 plain calls and a penalty of a million tokens (100,000 minutes,
/// about 69 days owed), moved; plain calls a minute before the debt ends (none) and a
/// minute after (15), on every move as on the twin: the moved bucket refills.
#[test]
fn a_moved_bucket_under_a_penalty_of_69_days_refills_when_the_twin_does() {
    let (twin, differ) = against_the_twin(Limit::BUCKET, &MOVES, |service, clock, moving| {
        let mut counts = vec![admitted(service, &Options::new(), 15)];
        now(service.penalize("k", &Options::new(), 1_000_000)).unwrap();
        moving();
        // 15 spent and a million tokens at 6 s each: 6,000,090 s owed, 90 s tolerated.
        at(clock, 6_000_000 - 60);
        counts.push(admitted(service, &Options::new(), 16));
        at(clock, 6_000_090 + 60);
        counts.push(admitted(service, &Options::new(), 16));
        counts
    });
    assert_eq!(twin, [15, 0, 15], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// 15 calls with their own refill of a token a minute (15 minutes owed), moved, and at
/// +300 s the key reset: by `reset` (the plain calls' state), or `reset_with` the quota of
/// its own (the same state, moved or not), then plain calls at once, and at +21 min.
///
/// Over-refusal, stated: a reset forgets the running configuration's state only (helper-75,
/// probes_resets_beside_moves_attacks), and the old state, carried for the quota of its own
/// seen (up to 16 minutes), brings its debt back: none of the 15 the twin's reset gives,
/// until the quota of its own's carrying ends (at +21 min, 15 as the twin). Before the own
/// quotas seen were carried for, the carrying ended at 150 s: 15 at +300 s.
#[test]
fn a_reset_after_a_move_beside_a_slow_bucket_of_its_own_refuses_until_its_carrying_ends() {
    let own = Options::new().refill(1);
    for with_own in [false, true] {
        let (twin, differ) = against_the_twin(Limit::BUCKET, &MOVES, |service, clock, moving| {
            let mut counts = vec![admitted(service, &own, 16)];
            moving();
            at(clock, 300);
            match with_own {
                false => now(service.reset("k", None)).unwrap(),
                true => drop(now(service.reset_with("k", &own)).unwrap()),
            }
            counts.push(admitted(service, &Options::new(), 16));
            at(clock, 21 * 60);
            counts.push(admitted(service, &Options::new(), 16));
            counts
        });
        assert_eq!(twin, [15, 15, 15], "twin, reset with its own: {with_own}");
        let refused = [15, 0, 15].to_vec();
        let expected: Vec<(Move, Vec<usize>)> = (MOVES.iter())
            .filter(|&&how| how != Move::Back)
            .map(|&how| (how, refused.clone()))
            .collect();
        assert_eq!(differ, expected, "reset with its own: {with_own}");
    }
}

// ---------------------------------------------------------------------------------------
// 4b. There and back with calls between; the refusal of a 65th moving reload.
// ---------------------------------------------------------------------------------------

/// Renamed at 0 and back at +75 s, plain calls between and after, each time against the
/// twin: 15 at 0; 11 at +70 s (past the old window: the old state carried, refilled 70 s);
/// at +80 s, back on the first state (held to the second, decided on it), 2; at +200 s, 15.
/// And with a slow bucket of its own first (15 minutes owed): none until the debt is paid,
/// 15 at +16 min.
#[test]
fn there_and_back_with_calls_between_gives_what_the_one_state_gives() {
    let rename = |service: &RateLimitService, name: &str| {
        let config = Limit::BUCKET.config(name, 1, "p").build().unwrap();
        service.reload(config).unwrap();
    };
    for own_first in [false, true] {
        let mut runs = Vec::new();
        for moves in [false, true] {
            let (service, clock) = Limit::BUCKET.service();
            let plain = Options::new();
            let mut counts = match own_first {
                true => vec![admitted(&service, &Options::new().refill(1), 16)],
                false => vec![admitted(&service, &plain, 16)],
            };
            if moves {
                rename(&service, "b");
            }
            at(&clock, 70);
            counts.push(admitted(&service, &plain, 16));
            at(&clock, 75);
            if moves {
                rename(&service, "a");
            }
            at(&clock, 80);
            counts.push(admitted(&service, &plain, 16));
            at(&clock, 200);
            counts.push(admitted(&service, &plain, 16));
            at(&clock, 16 * 60);
            counts.push(admitted(&service, &plain, 16));
            runs.push(counts);
        }
        let twin = match own_first {
            true => [15, 0, 0, 0, 15],
            false => [15, 11, 2, 15, 15],
        };
        assert_eq!(runs[0], twin, "twin, own first: {own_first}");
        assert_eq!(runs[1], runs[0], "there and back, own first: {own_first}");
    }
}

/// A call's own block of two hours, once, then the default tier renamed every minute and
/// a second (as probes_carry_horizons): the 65th is refused, saying when another is taken
/// (the first kept, replaced at +61 s, carried 2 h 1 min: 55m56s after the refusal at
/// +3,965 s) and what holds it (the moved limit's old state, a quota of its own among what
/// may hold it).
#[test]
fn a_65th_moving_reload_held_by_an_own_block_is_refused_saying_when_and_why() {
    let own = Options::new()
        .limit(2)
        .strategy(Strategy::FixedWindow)
        .block_for(2 * HOUR);
    let (service, clock) = service_of(
        Config::builder()
            .tier(Tier::new("t", 100).window("1m"))
            .default_tier("t"),
    );
    assert!(now(service.consume("k", &own)).unwrap().allowed);
    let renamed = |i: usize| {
        Config::builder()
            .tier(Tier::new(format!("t{i}"), 100).window("1m"))
            .default_tier(format!("t{i}"))
    };
    let step = MINUTE + Duration::from_secs(1);
    let reload = |b: ConfigBuilder| service.reload(b.build().unwrap());
    let (i, e) = refused_among(&clock, step, reload, renamed).expect("a reload refused");
    assert_eq!(i, 64, "{e}");
    let told = e.to_string();
    assert!(
        told.contains("reload again in 55m56s at the soonest"),
        "{told}"
    );
    assert!(
        told.contains("may hold a debt or a block for 2h1m"),
        "{told}"
    );
    at(&clock, 61 + 7_260 - 1);
    assert!(reload(renamed(100)).is_err(), "a second before");
    at(&clock, 61 + 7_260);
    assert!(reload(renamed(101)).is_ok(), "taken from then");
}

/// How long one valid quota of its own can hold moving reloads, stated: a bucket of 100 on
/// the longest window (366 days) refilled a token a window (a tolerance of 100 windows, well
/// within 2^62 ns: such a quota is valid), spent once, holds every reload that moves it
/// for 101 windows, about a century: the 65th moving reload is refused, saying so (the
/// calls are held no longer than the one state holds them:
/// `a_moved_bucket_under_a_penalty_of_69_days_refills_when_the_twin_does`). The same from an
/// annotated fn declaring it, called or not. What the error says is what an
/// operator can do: reload less often, or restart (which carries nothing).
#[test]
fn a_valid_quota_of_its_own_can_hold_moving_reloads_for_a_century_and_says_so() {
    let own = Options::new()
        .limit(100)
        .window(Duration::from_secs(366 * 86_400))
        .refill(1)
        .strategy(Strategy::TokenBucket);
    let tier = |name: String| {
        Config::builder()
            .tier(Tier::new(name.clone(), 100).window("1m"))
            .default_tier(name)
    };
    let (service, clock) = service_of(tier("t".into()));
    assert!(now(service.consume("k", &own)).unwrap().allowed);
    let renamed = |i: usize| tier(format!("t{i}"));
    let step = MINUTE + Duration::from_secs(1);
    let reload = |b: ConfigBuilder| service.reload(b.build().unwrap());
    let (i, e) = refused_among(&clock, step, reload, renamed).expect("a reload refused");
    assert_eq!(i, 64, "{e}");
    let told = e.to_string();
    assert!(told.contains("reload again in 36965d22h54m56s"), "{told}");
    assert!(told.contains("a debt or a block for 36966d"), "{told}");
}

// ---------------------------------------------------------------------------------------
// 5. Quotas and windows of their own that annotated fns declare (Fix B), never called.
// ---------------------------------------------------------------------------------------

/// Declared on the default limit with a window of its own of a day, never called: every
/// module of this binary notes it as it starts.
#[ratelimit::rate_limit(window = "1d", name = "h83-daily")]
async fn daily() -> Result<(), ratelimit::Error> {
    Ok(())
}

/// Declared on the default limit with a limit of its own (a quota of its own on the default
/// limit's window), never called.
#[ratelimit::rate_limit(limit = 2, name = "h83-two")]
async fn two() -> Result<(), ratelimit::Error> {
    Ok(())
}

/// Declared on tier `"gold"`, never called: a configuration without that tier is refused.
#[ratelimit::rate_limit(tier = "gold", name = "h83-gold")]
async fn gold() -> Result<(), ratelimit::Error> {
    Ok(())
}

/// Tier `name` of 10 a fixed `window` (the default tier) and `"gold"` beside it: what every
/// module of this binary is checked under (`"gold"` for `h83-gold`).
fn fixed(name: &str, window: &str) -> ConfigBuilder {
    Config::builder()
        .tier(
            Tier::new(name, 10)
                .window(window)
                .strategy(Strategy::FixedWindow),
        )
        .tier(Tier::new("gold", 5).window("1m"))
        .default_tier(name)
}

/// Reloads by `reload` to `to(i)`, `every` apart, 80 of them: the index of the first
/// refused and its error, if any.
fn refused_among(
    clock: &ManualClock,
    every: Duration,
    reload: impl Fn(ConfigBuilder) -> Result<ratelimit::Reloaded, ratelimit::Error>,
    to: impl Fn(usize) -> ConfigBuilder,
) -> Option<(usize, ratelimit::Error)> {
    (0..80).find_map(|i| {
        clock.advance(every);
        reload(to(i)).err().map(|e| (i, e))
    })
}

/// A window of its own of a day declared on a fn never called (`h83-daily`) holds every
/// reload that changes a limit for that day, moving or not (`Kept::holds_any`): reloads of
/// the tier's limit every minute and a second, the 65th refused with `InvalidConfig` (the
/// running configuration kept); a day after the first, reloads are taken again. A service
/// that is not a module (no declarations noted) takes all 80.
#[test]
fn a_declared_day_never_called_holds_every_reload_a_day_and_then_lets_go() {
    let module = ratelimit::testing::TestModule::new(fixed("t", "1m").into()).unwrap();
    let (service, clock) = (module.service(), module.clock());
    let on_its = |b: ConfigBuilder| ratelimit_tests::on_its_store(service, b);
    let reload = |b: ConfigBuilder| service.reload(on_its(b));
    let limit = |i: usize| {
        let tier = Tier::new("t", 11 + i as u64)
            .window("1m")
            .strategy(Strategy::FixedWindow);
        Config::builder()
            .tier(tier)
            .tier(Tier::new("gold", 5).window("1m"))
            .default_tier("t")
    };
    let step = MINUTE + Duration::from_secs(1);
    let (i, e) = refused_among(clock, step, reload, limit).expect("a reload refused");
    assert_eq!(i, 64, "{e}");
    assert!(matches!(e, ratelimit::Error::InvalidConfig(_)), "{e}");
    // It says when, and what holds it: the day 61 s before the first reload let go.
    let (wait, what) = (86_400 - 64 * 61, "a window of its own of 1d");
    let told = format!("reload again in {} at the soonest", format_secs(wait));
    assert!(e.to_string().contains(&told), "{e}");
    assert!(e.to_string().contains(what), "{e}");
    assert_eq!(
        service.stats().generation,
        64,
        "the running configuration kept"
    );
    // The oldest held (replaced at +61 s) lets go a day after: at +86,461 s, not a second
    // before.
    at(clock, 86_460);
    assert!(reload(limit(100)).is_err(), "refused inside the day");
    at(clock, 86_461);
    assert!(reload(limit(100)).is_ok(), "taken again past the day");
    // Not a module: none noted, all taken.
    let (plain, clock) = service_of(fixed("t", "1m"));
    let refused = refused_among(&clock, step, |b| plain.reload(b.build().unwrap()), limit);
    assert!(refused.is_none(), "{refused:?}");
    let _ = (daily, two, gold);
}

/// `secs` as the error writes a duration (`format_window`: `22h56m16s`).
fn format_secs(secs: u64) -> String {
    let (h, m, s) = (secs / 3_600, secs / 60 % 60, secs % 60);
    [(h, "h"), (m, "m"), (s, "s")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect()
}

/// A plain service (not a module) over `builder`.
fn service_of(builder: ConfigBuilder) -> (RateLimitService, ManualClock) {
    service(builder.build().unwrap())
}

/// A module's reload the declarations refuse (tier `"gold"`, which `h83-gold` names, gone)
/// changes nothing: the running configuration goes on, and so does how long later reloads
/// are held. Its tier of a year's window gives `h83-two`'s limit of its own a year's window
/// under it: noted as the declarations are checked, before the refusal, every moving reload
/// after it was held a year, and the 65th within it refused (reloads every half hour, the
/// default tier renamed). Without the refused reload, the declared day (`h83-daily`) holds
/// at most 48 at once: all 80 taken.
#[test]
fn a_reload_the_declarations_refuse_holds_no_later_reload() {
    let _one = ratelimit_tests::serial();
    let mut refused = Vec::new();
    for refused_first in [false, true] {
        let clock = ratelimit_tests::clock();
        let builder = ratelimit::ModuleBuilder::from(fixed("t", "1m")).clock(clock.clone());
        let module = builder.init().unwrap();
        if refused_first {
            let yearly = Tier::new("t", 10)
                .window("366d")
                .strategy(Strategy::FixedWindow);
            let bad = Config::builder().tier(yearly).default_tier("t");
            let e = module.reload(bad).unwrap_err();
            assert!(matches!(e, ratelimit::Error::Declarations(_)), "{e}");
            assert_eq!(module.stats().generation, 0);
        }
        let renamed = |i: usize| fixed(&format!("t{i}"), "1m");
        let at = refused_among(&clock, 30 * MINUTE, |b| module.reload(b), renamed);
        refused.push(at.map(|(i, e)| (i, e.to_string())));
        drop(module);
    }
    assert_eq!(refused[0], None, "without the refused reload");
    assert_eq!(refused[1], refused[0], "after the refused reload");
}
