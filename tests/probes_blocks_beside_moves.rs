//! A block on a moved limit's old state, in the old window (the old state decided beside the
//! moved one, not yet carried: `service/transition.rs`): a refusal then must not begin the
//! block again on the moved state. Found by helper-66's chains of moves
//! (`probes_carry_chains`): a call refused by the moved state while the old one was blocked
//! blocked the moved state anew from then, told 300 s where the one bucket's block ends 299 s
//! on, and refused at 300 s where the bucket admits.
//!
//! Each history is run twice: on a service whose limit a reload moves to another state (its
//! tier renamed, its window changed at the same rate), and on a twin that never reloads. The
//! limit is the same throughout, so the two must answer every call alike, waits included.
//! Memory store, hand-driven clock.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{now, reload_to as reload, service, START};

const MINUTE: u64 = 60;
const BLOCK: Duration = Duration::from_secs(300);

/// Tier `name` (the default tier) of 3 on a window of `minutes`, blocking a key for
/// [`BLOCK`] once refused; a token bucket refilled 3 a minute whatever the window (a token
/// every 20 s: the same bucket on any window). And tier `"z"`, a thousand a minute, for
/// stacked calls.
fn limit(strategy: Strategy, name: &str, minutes: u64) -> ConfigBuilder {
    let mut tier = Tier::new(name, 3)
        .burst(0)
        .window(Duration::from_secs(MINUTE * minutes))
        .strategy(strategy)
        .block_for(BLOCK);
    if strategy == Strategy::TokenBucket {
        tier = tier.refill(3 * minutes);
    }
    let z = Tier::new("z", 1_000).window(Duration::from_secs(MINUTE));
    Config::builder().tier(tier).tier(z).default_tier(name)
}

/// The ways a call is made: alone, through a prepared site, stacked beside tier `"z"`.
#[derive(Clone, Copy, Debug)]
enum Way {
    Alone,
    Prepared,
    Stacked,
}

/// One call of `cost` on `"k"`, made `way`: admitted, and a refusal's wait.
fn call_by(service: &RateLimitService, way: Way, cost: u64) -> (bool, Option<Duration>) {
    let options = Options::new().cost(cost);
    let d = match way {
        Way::Alone => now(service.consume("k", &options)).unwrap(),
        Way::Prepared => (service.prepare(&options).unwrap().consume_now("k"))
            .expect("decided at once")
            .unwrap(),
        Way::Stacked => {
            let z = Options::new().tier("z");
            let all = now(service.consume_all(&[("k", &options), ("k", &z)])).unwrap();
            all[0].clone()
        }
    };
    (d.allowed, d.retry_after)
}

/// One call of `cost` on `"k"`, alone.
fn call(service: &RateLimitService, cost: u64) -> (bool, Option<Duration>) {
    call_by(service, Way::Alone, cost)
}

/// The history: 1 spent, the move (`moves`, none on the twin), 2 more spent beside the old
/// state (which then holds all 3), a refusal by the old state (the moved one has 1 left),
/// which begins its block; a second later a call of 2, refused by both (the old state blocked,
/// the moved one short of a token); the call again when the first refusal's block ends.
fn history(
    strategy: Strategy,
    way: Way,
    from: (&str, u64),
    moves: Option<(&str, u64)>,
) -> Vec<(bool, Option<Duration>)> {
    let (service, clock) = service(limit(strategy, from.0, from.1).build().unwrap());
    let call = |cost| call_by(&service, way, cost);
    let mut told = vec![call(1)];
    if let Some((name, minutes)) = moves {
        reload(&service, limit(strategy, name, minutes));
    }
    told.push(call(2));
    told.push(call(1));
    clock.set(START + Duration::from_secs(1));
    told.push(call(2));
    clock.set(START + BLOCK);
    told.push(call(2));
    told
}

/// The moved history answers as the twin's, which is (admitted, refused for the block,
/// refused until the block's end, admitted at it), whichever way the calls are made.
fn moved_alike(strategy: Strategy, from: (&str, u64), to: (&str, u64)) {
    for way in [Way::Alone, Way::Prepared, Way::Stacked] {
        let on = format!("{strategy:?} {way:?}");
        let twin = history(strategy, way, from, None);
        let secs = |s: u64| Some(Duration::from_secs(s));
        let expected = [
            (true, None),
            (true, None),
            (false, secs(300)),
            (false, secs(299)),
        ];
        assert_eq!(twin[..4], expected, "{on}: the twin");
        assert!(twin[4].0, "{on}: the twin refused at the block's end");
        let moved = history(strategy, way, from, Some(to));
        assert_eq!(
            moved, twin,
            "{on} moved from {from:?} to {to:?}: answered otherwise than one state"
        );
    }
}

/// The tier renamed (the same quota on another state), every strategy.
#[test]
fn a_refusal_beside_a_blocked_old_state_does_not_block_the_renamed_limit_again() {
    for strategy in Strategy::ALL {
        moved_alike(strategy, ("a", 1), ("b", 1));
    }
}

/// A token bucket moved to a longer window at the same rate, and to a shorter one.
#[test]
fn a_refusal_beside_a_blocked_old_state_does_not_block_the_bucket_moved_to_another_window_again() {
    moved_alike(Strategy::TokenBucket, ("a", 1), ("a", 2));
    moved_alike(Strategy::TokenBucket, ("a", 2), ("a", 1));
}

/// Beside a blocking bucket still decided (its old window), only its block is carried, never
/// its debt, which holds the call by itself there: 10 a minute spent, moved to 10 a second
/// (both blocking), 6 s later the old bucket has refilled a token and the call is admitted.
/// Carried with the block, the old minute's debt held the moved bucket (a second's tolerance)
/// to it: refused, and blocked for the block.
#[test]
fn beside_a_blocking_bucket_in_its_old_window_its_debt_is_not_carried() {
    let bucket = |window: Duration| {
        let tier = Tier::new("a", 10)
            .burst(0)
            .window(window)
            .strategy(Strategy::TokenBucket)
            .block_for(BLOCK);
        Config::builder().tier(tier).default_tier("a")
    };
    let (service, clock) = service(bucket(Duration::from_secs(MINUTE)).build().unwrap());
    for _ in 0..10 {
        assert!(call(&service, 1).0);
    }
    reload(&service, bucket(Duration::from_secs(1)));
    clock.set(START + Duration::from_secs(6));
    assert_eq!(call(&service, 1), (true, None));
}

/// The other way round: the moved state blocked beside an old one that is not (a penalty is
/// spent on the moved bucket alone, its old debt carried in first), and the old one refusing
/// a second later. 2 spent, the move, a penalty of 1: the call of 1 the old bucket admits
/// and the moved one refuses begins the block there; a call of 2 a second later, which the
/// old bucket refuses, began a block of its own on it, 300 s from then where the one
/// bucket's ends 299 s on (`probes_carry_chains`, seed 1068524548).
#[test]
fn a_refusal_by_the_old_state_beside_a_blocked_moved_one_does_not_block_it_again() {
    let history = |way: Way, moves: bool| {
        let (service, clock) = service(limit(Strategy::TokenBucket, "a", 1).build().unwrap());
        let call = |cost| call_by(&service, way, cost);
        let mut told = vec![call(2)];
        if moves {
            reload(&service, limit(Strategy::TokenBucket, "b", 1));
        }
        now(service.penalize("k", &Options::new(), 1)).unwrap();
        told.push(call(1));
        clock.set(START + Duration::from_secs(1));
        told.push(call(2));
        clock.set(START + BLOCK);
        told.push(call(2));
        told
    };
    let secs = |s: u64| Some(Duration::from_secs(s));
    let expected = [
        (true, None),
        (false, secs(300)),
        (false, secs(299)),
        (true, None),
    ];
    for way in [Way::Alone, Way::Prepared, Way::Stacked] {
        assert_eq!(history(way, false), expected, "{way:?}: the twin");
        assert_eq!(history(way, true), expected, "{way:?}: moved");
    }
}

/// Random histories of a blocking limit whose default tier is renamed back and forth (the
/// same quota on another state at every move; a bucket's window changed too, at the same
/// rate), against the twin that never reloads: every call admitted or refused alike, and a
/// refusal told the twin's wait (at most 2 ms longer: a transition's waits are whole
/// milliseconds, at times longer than the least). Calls of costs 1 to 3, made each way;
/// penalties on a bucket; time moving on by steps from a millisecond to past the block.
/// Before the blocks were carried, seed 12 (a bucket) was told 300 s where the twin's block
/// ends 298.001 s on; carried one way only, seed 42 was (300 s where 298 s).
#[test]
fn random_renames_of_a_blocking_limit_answer_as_one_state() {
    let steps_ms = [0, 1, 999, 1_000, 1_000, 20_000, 59_999, 61_000, 301_000];
    for seed in 0..500u64 {
        let mut rng = ratelimit_tests::Rng(seed * 7_919 + 3);
        let strategy = [
            Strategy::FixedWindow,
            Strategy::SlidingWindow,
            Strategy::TokenBucket,
        ][rng.below(3) as usize];
        let (moved, clock) = service(limit(strategy, "a", 1).build().unwrap());
        let (twin, twin_clock) = service(limit(strategy, "a", 1).build().unwrap());
        let (mut name, mut minutes) = ("a", 1);
        let mut at = Duration::ZERO;
        let mut log = vec![format!("{strategy:?}")];
        for _ in 0..60 {
            match rng.below(9) {
                0 | 1 => {
                    at += Duration::from_millis(steps_ms[rng.below(9) as usize]);
                    clock.set(START + at);
                    twin_clock.set(START + at);
                    log.push(format!("at {at:?}"));
                }
                2 => {
                    name = if name == "a" { "b" } else { "a" };
                    if strategy == Strategy::TokenBucket {
                        minutes = 1 + rng.below(2);
                    }
                    reload(&moved, limit(strategy, name, minutes));
                    log.push(format!("moved to {name}, {minutes} min"));
                }
                3 if strategy == Strategy::TokenBucket => {
                    let units = 1 + rng.below(2);
                    for service in [&moved, &twin] {
                        now(service.penalize("k", &Options::new(), units)).unwrap();
                    }
                    log.push(format!("penalty {units}"));
                }
                _ => {
                    let way = [Way::Alone, Way::Prepared, Way::Stacked][rng.below(3) as usize];
                    let cost = 1 + rng.below(3);
                    let (got, want) = (call_by(&moved, way, cost), call_by(&twin, way, cost));
                    log.push(format!("{way:?} {cost}: {got:?}, the twin {want:?}"));
                    let alike = match (got, want) {
                        ((true, _), (true, _)) => true,
                        ((false, Some(g)), (false, Some(w))) => {
                            g >= w && g <= w + Duration::from_millis(2)
                        }
                        _ => false,
                    };
                    assert!(alike, "seed {seed}:\n{}", log.join("\n"));
                }
            }
        }
    }
}
