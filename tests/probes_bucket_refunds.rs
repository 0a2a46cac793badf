//! Probes of the token bucket's refunds by place (commit 9788f35: the state keeps, once
//! something was given back, its shift and up to 8 runs of refunds; `Gcra::refund`), kept as
//! tests. Each asserts the rule: a refund never gives back time another call spent, so the
//! bucket is never fuller than one in which the spends given back never happened (the others
//! replayed at their instants, rewards and penalties too); and, where the design promises it
//! (a capacity below 8: every refund exact, in any order), exactness against a model of
//! the intervals the spends hold.
//!
//! Memory probes run on a manual clock (no sleeps) with sweeps pushed out of the way unless a
//! probe sweeps by hand, and read the bucket's arrival time exactly (to the nanosecond) by
//! looking at its level at instants around it (`tat_of`). A probe that found a way through is
//! `#[ignore = "FOUND: .."]` with its failing assertion left in place.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    Clock as _, Config, ManualClock, MemoryOptions, Options, RateLimitService, Spent, StoreConfig,
    Strategy,
};
use ratelimit_tests::{drain, now, Rng, START};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// A token bucket of `limit` per `window` (one token every `window / limit`).
fn bucket(limit: u64, window: Duration) -> Options {
    Options::new()
        .limit(limit)
        .window(window)
        .strategy(Strategy::TokenBucket)
}

/// A memory service on a manual clock at `START`, whose sweeps (which raise the store's
/// floor of time and drop keys) never run on their own: only a probe that sweeps by hand
/// sweeps (the first call's sweep, at `START`, drops nothing and leaves no floor).
fn memory() -> (RateLimitService, ManualClock) {
    let options = MemoryOptions::default().sweep_interval(Duration::from_secs(10_000_000));
    let config = Config::builder()
        .store(StoreConfig::Memory(options))
        .build()
        .unwrap();
    ratelimit_tests::service(config)
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn remaining(service: &RateLimitService, key: &str, options: &Options) -> u64 {
    now(service.status(key, options)).unwrap().remaining
}

/// The bucket's shape: its interval and tolerance in nanoseconds, and its capacity.
#[derive(Clone, Copy, Debug)]
struct Shape {
    interval: u64,
    tolerance: u64,
    capacity: u64,
}

impl Shape {
    fn of(limit: u64, burst: u64, window: Duration) -> Self {
        let interval = nanos(window) / limit;
        Shape {
            interval,
            tolerance: interval * (limit + burst),
            capacity: limit + burst,
        }
    }
}

/// The bucket's arrival time, exactly, read from its level at instants after the clock's
/// (looks only: nothing is spent), the clock put back after: the clock's instant when the
/// bucket is full. A look at `t` answers `floor((t + tolerance - max(tat, t)) / interval)`
/// (0 past the horizon), so the first instant at which it answers one more than at `now`
/// is `tat - tolerance + (r + 1) * interval`.
fn tat_of(
    service: &RateLimitService,
    clock: &ManualClock,
    key: &str,
    options: &Options,
    shape: Shape,
) -> u64 {
    let at = clock.now();
    // The looks go through a service of their own on the same memory store, on a clock of
    // their own: moving the probed service's clock ahead and back would be a clock stepped
    // back, after which its refunds (rightly) measure from the latest time it reached
    // (`Clock::latest`).
    let store = service.memory_store().expect("a memory store").clone();
    let config = Config::builder()
        .store(StoreConfig::custom(store))
        .build()
        .unwrap();
    let (looker, looker_clock) = ratelimit_tests::service(config);
    let look = |t: u64| {
        looker_clock.set(Duration::from_nanos(t));
        remaining(&looker, key, options)
    };
    let r0 = look(at);
    let tat = if r0 >= shape.capacity {
        at
    } else {
        // The first instant answering more than r0: found by doubling, then halving.
        let (mut lo, mut step) = (at, shape.interval);
        while look(at + step) <= r0 {
            lo = at + step;
            step *= 2;
        }
        let mut hi = at + step;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if look(mid) > r0 {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi + shape.tolerance - (r0 + 1) * shape.interval
    };
    clock.set(Duration::from_nanos(at));
    tat
}

/// The intervals model of a bucket, in nanoseconds: the arrival time, and each kept spend's
/// end (the instant its last token comes back) and cost. A refund gives back what the spend
/// still holds (`end - now`, at most its cost), moving the arrival time and the end of every
/// spend after it back by that; a reward moves the arrival time back (never before `now`, in
/// whole intervals or not at all) and every spend's end with it; a penalty moves the arrival
/// time on. The rule `Gcra::refund` documents as exact below 8 spends kept, including its
/// instant: never before the arrival time less the tolerance.
#[derive(Clone, Debug)]
struct Model {
    shape: Shape,
    tat: u64,
    /// (end, cost, still held for a refund)
    spends: Vec<(u64, u64, bool)>,
}

impl Model {
    fn new(shape: Shape) -> Self {
        Model {
            shape,
            tat: 0,
            spends: Vec::new(),
        }
    }

    fn admits(&self, now: u64, cost: u64) -> bool {
        self.tat.max(now) + cost * self.shape.interval <= now + self.shape.tolerance
    }

    /// A spend the store admitted: recorded, its index (a consume is one not kept).
    fn spend(&mut self, now: u64, cost: u64, kept: bool) -> usize {
        self.tat = self.tat.max(now) + cost * self.shape.interval;
        self.spends.push((self.tat, cost, kept));
        self.spends.len() - 1
    }

    fn refund(&mut self, i: usize, now: u64) -> bool {
        let now = now.max(self.tat.saturating_sub(self.shape.tolerance));
        let (end, cost, held) = self.spends[i];
        self.spends[i].2 = false;
        if !held || now >= end || self.tat <= now || end > self.tat {
            return false;
        }
        let given = (cost * self.shape.interval).min(end - now);
        self.tat -= given;
        for s in &mut self.spends[i + 1..] {
            s.0 = s.0.saturating_sub(given);
        }
        true
    }

    fn reward(&mut self, now: u64, units: u64) {
        let tat = self.tat.max(now);
        let next = tat.saturating_sub(units * self.shape.interval).max(now);
        if (tat - next) / self.shape.interval == 0 {
            return;
        }
        let moved = self.tat - next;
        self.tat = next;
        for s in &mut self.spends {
            s.0 = s.0.saturating_sub(moved);
        }
    }

    fn penalize(&mut self, now: u64, units: u64) {
        self.tat = self.tat.max(now) + units * self.shape.interval;
    }
}

/// What happened on the probed service, replayed on a second one without the spends given
/// back: the measure of the rule.
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // a refund's fields are read through Debug, in the failure messages
enum Event {
    /// An admitted call (kept or plain) of a cost, and whether it was given back.
    Spend(u64, u64, bool),
    Reward(u64, u64),
    Penalty(u64, u64),
    /// A refund asked at an instant, of the spend at an event's index, and what it answered
    /// (for the record: the replay skips it).
    Refund(u64, usize, bool),
}

/// A fresh memory service with the events not given back replayed at their instants; the
/// service and its clock. Or the event the replay refuses though the probed service admitted
/// it (which was then fuller than the replay).
fn replay(events: &[Event], options: &Options) -> Result<(RateLimitService, ManualClock), String> {
    let (service, clock) = memory();
    for (i, event) in events.iter().enumerate() {
        match *event {
            Event::Spend(at, cost, given) => {
                if !given {
                    clock.set(Duration::from_nanos(at));
                    let d = now(service.consume("k", &options.clone().cost(cost))).unwrap();
                    if !d.allowed {
                        return Err(format!("the replay refuses event {i} ({event:?})"));
                    }
                }
            }
            Event::Reward(at, units) => {
                clock.set(Duration::from_nanos(at));
                now(service.reward("k", options, units)).unwrap();
            }
            Event::Penalty(at, units) => {
                clock.set(Duration::from_nanos(at));
                now(service.penalize("k", options, units)).unwrap();
            }
            Event::Refund(..) => {}
        }
    }
    Ok((service, clock))
}

/// What a random history may do.
#[derive(Clone, Copy)]
struct Mix {
    /// The most the clock moves on between two steps, in milliseconds (0: one instant).
    step_ms: u64,
    /// The most the clock steps back now and then, in milliseconds (0: never).
    back_ms: u64,
    /// Penalties among the steps.
    penalties: bool,
    /// Rewards among the steps. A reward moves the arrival time only when it gives back at
    /// least one whole unit, and then to `now` when it holds less than its units: a bucket
    /// holding 0.75 of a token keeps it, one holding 1.5 is emptied. So a history with more
    /// spent can end fuller than one with less, refunds or not (any spend not given back
    /// does it), and the replay is no bound: with rewards, the model alone measures.
    rewards: bool,
    /// At most this many spends kept at once, and no plain calls (the design's promise of
    /// exactness: fewer than 8 spends not given back, whatever the capacity); 0: no bound.
    kept_most: usize,
    /// With a clock stepping back: refunds asked at the latest instant reached so far (only
    /// the spends and plain calls see the clock step back).
    refunds_at_latest: bool,
}

/// The first failure of a random history on a bucket of `limit` per `window` (burst 0).
#[derive(Debug)]
#[allow(dead_code)] // read through Debug in the assertion messages
struct Broken {
    seed: u64,
    step: usize,
    what: String,
}

/// Random histories of kept spends (cost 1 to 3), plain calls, refunds of kept spends in any
/// order, and (with `mix`) rewards and penalties, on one key. After every step the
/// bucket's arrival time is read exactly and compared with the intervals model: equal with a
/// capacity below 8 (every refund answers as the model does), never before it otherwise (a
/// refund gives back at most what the model does). At the end, never before the arrival
/// time of the replay without the spends given back (the rule). With `mix.back_ms`, only the
/// rule is checked (the model's clock goes forward).
fn random_histories(limit: u64, window: Duration, seeds: u64, mix: Mix) -> Option<Broken> {
    // PROBE_SEEDS=n runs n times as many histories (a longer hunt).
    let seeds = seeds * std::env::var("PROBE_SEEDS").map_or(1, |n| n.parse().unwrap_or(1));
    let options = bucket(limit, window);
    let shape = Shape::of(limit, 0, window);
    let exact = (limit < 8 || (1..8).contains(&mix.kept_most)) && mix.back_ms == 0;
    for seed in 1..=seeds {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15
            ^ (seed ^ limit.wrapping_mul(0x1000_0001)).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let (service, clock) = memory();
        let mut at = nanos(START);
        let mut model = Model::new(shape);
        let mut events = Vec::new();
        // (spend, its model index, its event index)
        let mut held: Vec<(Spent, usize, usize)> = Vec::new();
        let steps = 10 + rng.below(50) as usize;
        let mut latest_at = at;
        for step in 0..steps {
            if mix.step_ms > 0 {
                at += rng.below(mix.step_ms + 1) * nanos(MS);
            }
            if mix.back_ms > 0 && rng.below(4) == 0 {
                at -= rng.below(mix.back_ms + 1) * nanos(MS);
                at = at.max(nanos(START));
            }
            clock.set(Duration::from_nanos(at));
            latest_at = latest_at.max(at);
            let fail = |what: String| Some(Broken { seed, step, what });
            let roll = match (mix.penalties, mix.rewards) {
                (false, false) => rng.below(8),
                (true, false) => [0, 1, 2, 3, 4, 5, 6, 7, 9][rng.below(9) as usize],
                (false, true) => rng.below(9),
                (true, true) => rng.below(10),
            };
            // With a bound on the spends kept: no plain calls, and a refund once it is reached.
            let roll = match roll {
                3 if mix.kept_most > 0 => 0,
                roll => roll,
            };
            let roll = match roll {
                0..=2 if mix.kept_most > 0 && held.len() >= mix.kept_most => 4,
                roll => roll,
            };
            match roll {
                0..=3 => {
                    // Cost 1 to 3, and now and then up to the whole capacity.
                    let most = if rng.below(8) == 0 {
                        limit
                    } else {
                        limit.min(3)
                    };
                    let cost = 1 + rng.below(most);
                    let kept = roll != 3;
                    let with = options.clone().cost(cost);
                    let (allowed, spent) = if kept {
                        let spent = now(service.spend("k", &with)).unwrap();
                        (spent.decision().allowed, Some(spent))
                    } else {
                        (now(service.consume("k", &with)).unwrap().allowed, None)
                    };
                    if mix.back_ms == 0 && model.admits(at, cost) != allowed && exact {
                        return fail(format!("admitted {allowed} cost {cost}; model {model:?}"));
                    }
                    if allowed {
                        if mix.back_ms == 0 && !model.admits(at, cost) {
                            return fail(format!("admitted past the model: {model:?}"));
                        }
                        let i = model.spend(at, cost, kept);
                        events.push(Event::Spend(at, cost, false));
                        if let Some(spent) = spent {
                            held.push((spent, i, events.len() - 1));
                        }
                    }
                }
                4..=7 if !held.is_empty() => {
                    let (spent, i, e) = held.swap_remove(rng.below(held.len() as u64) as usize);
                    if mix.refunds_at_latest {
                        clock.set(Duration::from_nanos(latest_at));
                    }
                    let gave = now(spent.refund()).unwrap();
                    clock.set(Duration::from_nanos(at));
                    let would = model.refund(i, at);
                    if exact && gave != would {
                        return fail(format!("refund gave {gave}, the model {would}"));
                    }
                    if gave {
                        let Event::Spend(when, cost, _) = events[e] else {
                            unreachable!()
                        };
                        events[e] = Event::Spend(when, cost, true);
                    }
                    let asked = if mix.refunds_at_latest { latest_at } else { at };
                    events.push(Event::Refund(asked, e, gave));
                }
                8 => {
                    let units = 1 + rng.below(3);
                    now(service.reward("k", &options, units)).unwrap();
                    model.reward(at, units);
                    events.push(Event::Reward(at, units));
                }
                9 => {
                    let units = 1 + rng.below(2);
                    now(service.penalize("k", &options, units)).unwrap();
                    model.penalize(at, units);
                    events.push(Event::Penalty(at, units));
                }
                _ => {}
            }
            if mix.back_ms == 0 {
                let got = tat_of(&service, &clock, "k", &options, shape);
                let want = model.tat.max(at);
                if (exact && got != want) || got < want {
                    return fail(format!("arrival time {got}, the model's {want}"));
                }
            }
        }
        if mix.rewards {
            continue;
        }
        // The rule, at the last instant and at the latest one the history reached.
        let (reference, reference_clock) = match replay(&events, &options) {
            Ok(replayed) => replayed,
            Err(what) => {
                return Some(Broken {
                    seed,
                    step: steps,
                    what: format!("{what}: events {events:?}"),
                })
            }
        };
        let latest = events
            .iter()
            .map(|e| match *e {
                Event::Spend(t, ..)
                | Event::Reward(t, _)
                | Event::Penalty(t, _)
                | Event::Refund(t, ..) => t,
            })
            .max()
            .unwrap_or(at)
            .max(at);
        for t in [at, latest] {
            clock.set(Duration::from_nanos(t));
            reference_clock.set(Duration::from_nanos(t));
            let got = tat_of(&service, &clock, "k", &options, shape);
            let want = tat_of(&reference, &reference_clock, "k", &options, shape);
            if got < want {
                let (a, r) = (
                    drain(&service, "k", &options),
                    drain(&reference, "k", &options),
                );
                return Some(Broken {
                    seed,
                    step: steps,
                    what: format!(
                        "at {t}: arrival time {got} before the replay's {want}: \
                         {a} admitted, {r} by the replay; events {events:?}"
                    ),
                });
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// One instant: every refund gives back its whole cost, in any order.

/// Capacities 1 to 7, spends of cost 1 to 3, plain calls and refunds in random orders, all
/// at one instant: every refund gives exactly its cost (the model's answer and arrival time
/// at every step), and the bucket is never fuller than the replay without them.
#[test]
fn refunds_at_one_instant_in_any_order_are_exact_below_eight() {
    let mix = Mix {
        step_ms: 0,
        back_ms: 0,
        penalties: false,
        rewards: false,
        kept_most: 0,
        refunds_at_latest: false,
    };
    for limit in 1..=7 {
        let found = random_histories(limit, 7 * SEC, 150, mix);
        assert!(found.is_none(), "limit {limit}: {found:?}");
    }
}

/// Capacities 8 to 40 at one instant, more than 8 spends kept and given back in random
/// orders: never fuller than the model (a refund past the runs kept gives back less or
/// nothing) nor than the replay.
#[test]
fn refunds_at_one_instant_past_eight_runs_never_give_more() {
    let mix = Mix {
        step_ms: 0,
        back_ms: 0,
        penalties: false,
        rewards: false,
        kept_most: 0,
        refunds_at_latest: false,
    };
    for limit in [8, 9, 12, 20, 40] {
        let found = random_histories(limit, 40 * SEC, 150, mix);
        assert!(found.is_none(), "limit {limit}: {found:?}");
    }
}

/// Adversarial orders at one instant on a bucket of 20: 20 spends of cost 1 kept; every
/// other one given back (10 runs: past the 8 kept, the lowest merge), then the rest forward,
/// backward, from the middle out, and every third. Whatever each refund answers, what is left
/// is exactly the capacity less the spends not given back (each refund gives its whole cost
/// or nothing), and the bucket admits exactly that.
#[test]
fn more_than_eight_spends_given_back_in_adversarial_orders_leave_exactly_what_was_kept() {
    let options = bucket(20, 20 * SEC);
    let orders: Vec<(&str, Vec<usize>)> = vec![
        ("forward", (0..20).collect()),
        ("backward", (0..20).rev().collect()),
        (
            "odd then even",
            (1..20).step_by(2).chain((0..20).step_by(2)).collect(),
        ),
        ("even then odd backward", {
            let mut v: Vec<usize> = (0..20).step_by(2).collect();
            v.extend((1..20).step_by(2).rev());
            v
        }),
        ("middle out", {
            let mut v = Vec::new();
            for d in 0..10 {
                v.push(9 - d);
                v.push(10 + d);
            }
            v
        }),
        ("every third", {
            let mut v: Vec<usize> = (0..20).step_by(3).collect();
            v.extend((1..20).step_by(3));
            v.extend((2..20).step_by(3).rev());
            v
        }),
    ];
    for (name, order) in orders {
        let (service, _clock) = memory();
        let mut spends: Vec<Option<Spent>> = (0..20)
            .map(|_| {
                let s = now(service.spend("k", &options)).unwrap();
                assert!(s.decision().allowed);
                Some(s)
            })
            .collect();
        let mut kept = 20;
        let mut refused = 0;
        for i in order {
            let gave = now(spends[i].take().unwrap().refund()).unwrap();
            if gave {
                kept -= 1;
            } else {
                refused += 1;
            }
            assert_eq!(
                remaining(&service, "k", &options),
                20 - kept,
                "{name}: after giving back {i} ({gave})"
            );
        }
        eprintln!("{name}: {refused} of 20 refunds gave nothing (runs merged)");
        assert_eq!(drain(&service, "k", &options), 20 - kept, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Time passing: partial refunds, rewards and penalties.

/// Capacities 1 to 7, the clock moving on by up to two intervals between steps (spends
/// partly refilled when given back): the arrival time equals the model's after every step
/// and every refund answers as it does; never fuller than the replay.
#[test]
fn partial_refunds_over_time_match_the_model_below_eight() {
    let mix = Mix {
        step_ms: 2_000,
        back_ms: 0,
        penalties: false,
        rewards: false,
        kept_most: 0,
        refunds_at_latest: false,
    };
    for limit in 1..=7 {
        let found = random_histories(limit, SEC * limit as u32, 150, mix);
        assert!(found.is_none(), "limit {limit}: {found:?}");
    }
}

/// As above with penalties among the steps (a penalty moves the arrival time on and leaves
/// a gap between runs): the model and the replay; and with rewards too (a reward moves
/// every spend back): the model.
#[test]
fn refunds_with_rewards_and_penalties_over_time_match_the_model_below_eight() {
    for rewards in [false, true] {
        let mix = Mix {
            step_ms: 1_500,
            back_ms: 0,
            penalties: true,
            rewards,
            kept_most: 0,
            refunds_at_latest: false,
        };
        for limit in 1..=7 {
            let found = random_histories(limit, SEC * limit as u32, 150, mix);
            assert!(
                found.is_none(),
                "limit {limit} rewards {rewards}: {found:?}"
            );
        }
    }
}

/// Capacities 8 to 30 over time, with rewards and penalties: never fuller than the model
/// nor the replay.
#[test]
fn refunds_over_time_past_eight_runs_never_give_more() {
    for (penalties, rewards) in [(false, false), (true, false), (true, true)] {
        let mix = Mix {
            step_ms: 700,
            back_ms: 0,
            penalties,
            rewards,
            kept_most: 0,
            refunds_at_latest: false,
        };
        for limit in [8, 10, 16, 30] {
            let found = random_histories(limit, SEC * limit as u32, 100, mix);
            assert!(
                found.is_none(),
                "limit {limit} penalties {penalties} rewards {rewards}: {found:?}"
            );
        }
    }
}

/// The design's promise whatever the capacity: while a key holds fewer than 8 spends not
/// given back, every refund is exact, in any order. Buckets of 12 and 30 with at most 7 spends
/// kept at once and no plain calls, at one instant and over time (with penalties too, which
/// leave gaps between runs): the arrival time equals the model's after every step, every
/// refund answers as it does.
#[test]
fn fewer_than_eight_kept_on_a_large_bucket_are_exact() {
    for (step_ms, penalties) in [(0, false), (1_500, false), (1_500, true)] {
        let mix = Mix {
            step_ms,
            back_ms: 0,
            penalties,
            rewards: false,
            kept_most: 7,
            refunds_at_latest: false,
        };
        for limit in [12u64, 30] {
            let found = random_histories(limit, SEC * limit as u32, 150, mix);
            assert!(
                found.is_none(),
                "limit {limit} step {step_ms} penalties {penalties}: {found:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A clock stepped back.

/// Found by helper 26: a refund made while the clock reads an instant before the bucket's last call (a
/// wall clock stepped back, or a caller's stale read) measures what the spend still holds
/// from that instant, bounded only by the arrival time less the tolerance, which a bucket not
/// near empty leaves far behind the last call. Bucket of 10 per 10 s (one token a second):
/// A spends 5 at `START` (its tokens back at +5 s); B spends 1 at +4.9 s (A holds 0.1 s
/// then); the clock reads `START` again and A is given back: it gives back 5 s (the bound is
/// +6 s - 10 s, before `START`), not the 0.1 s A still held at +4.9 s. At +4.9 s again the
/// bucket is full: 10 admitted there besides B, 11 at one instant against a capacity of 10;
/// without A (B alone replayed at +4.9 s) 9 are. The extra is what refilled between the
/// instant the refund reads and the bucket's last call (4.9 s here), so any refund whose
/// clock read is older than a call already decided (a stale read under contention, an NTP
/// step back) gave back up to that much of another call's time; the memory store's floor
/// (the last sweep's time, less a second) bounded it only after a sweep. Closed: a refund
/// measures from the latest time the service's clock reached (`Clock::latest`).
#[test]
fn a_refund_at_a_clock_stepped_back_never_gives_back_refilled_tokens() {
    // The default memory store (sweeps every 10 s of clock time: none runs between the
    // first call and the refund, so the store has no floor of time).
    let (service, clock) = ratelimit_tests::service(Config::default());
    let options = bucket(10, 10 * SEC);
    let a = now(service.spend("k", &options.clone().cost(5))).unwrap();
    assert!(a.decision().allowed);
    clock.set(START + 4_900 * MS);
    assert!(now(service.consume("k", &options)).unwrap().allowed, "B");
    clock.set(START);
    let gave = now(a.refund()).unwrap();
    clock.set(START + 4_900 * MS);
    let after = drain(&service, "k", &options);

    let (reference, reference_clock) = memory();
    reference_clock.set(START + 4_900 * MS);
    assert!(now(reference.consume("k", &options)).unwrap().allowed, "B");
    let without = drain(&reference, "k", &options);
    assert_eq!(without, 9);
    assert!(
        after <= without,
        "A given back ({gave}) at a clock stepped back: {} admitted at +4.9 s, {} without A",
        1 + after,
        1 + without
    );
}

/// Random histories as above with a clock that steps back by up to 3 s now and then (buckets
/// of 3, 5 and 12, a token a second): never fuller than the replay without the spends given
/// back, at the last instant and at the latest one reached. Found at once (limit 3, seed 5),
/// by the rule of the probe above: a spend of 3 kept at +15.823 s (its end +18.823 s), a
/// plain call at +18.326 s (arrival time +19.823 s), then the clock reads +17.566 s and the
/// spend is given back: 1.257 s given back (measured from +17.566 s; the bound, arrival time
/// less the tolerance, is +16.823 s) where it held 0.497 s at +18.326 s. The replay without
/// it refuses a plain call of 2 at +19.060 s that the probed bucket admitted. Closed with
/// the probe above.
#[test]
fn refunds_with_a_clock_stepping_back_never_leave_more_than_the_replay() {
    let mix = Mix {
        step_ms: 2_000,
        back_ms: 3_000,
        penalties: false,
        rewards: false,
        kept_most: 0,
        refunds_at_latest: false,
    };
    for limit in [3, 5, 12] {
        let found = random_histories(limit, SEC * limit as u32, 300, mix);
        assert!(found.is_none(), "limit {limit}: {found:?}");
    }
}

/// The same histories, the clock stepping back for the spends and plain calls only, every
/// refund asked at the latest instant reached so far: never fuller than the replay. What the
/// two probes above find is the refund's instant alone.
#[test]
fn refunds_at_the_latest_instant_with_spends_stepping_back_never_leave_more_than_the_replay() {
    let mix = Mix {
        step_ms: 2_000,
        back_ms: 3_000,
        penalties: false,
        rewards: false,
        kept_most: 0,
        refunds_at_latest: true,
    };
    for limit in [3, 5, 12] {
        let found = random_histories(limit, SEC * limit as u32, 300, mix);
        assert!(found.is_none(), "limit {limit}: {found:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Other states: a reset, a swept key made again.

/// Spends kept, the key reset, the bucket filled again: none of the old spends gives
/// anything back (in any order, some after new refunds moved the new state's shift), and
/// the new state admits nothing more.
#[test]
fn a_reset_between_spends_and_refunds_gives_nothing_to_the_new_state() {
    let options = bucket(3, 3 * SEC);
    for reverse in [false, true] {
        let (service, clock) = memory();
        let old: Vec<Spent> = (0..3)
            .map(|_| now(service.spend("k", &options)).unwrap())
            .collect();
        // A refund before the reset, so the old state has a shift and a run.
        let mut old = old.into_iter();
        assert!(now(old.next().unwrap().refund()).unwrap());
        assert!(now(service.reset_with("k", &options)).unwrap());
        clock.advance(100 * MS);
        let new: Vec<Spent> = (0..3)
            .map(|_| now(service.spend("k", &options)).unwrap())
            .collect();
        assert!(new.iter().all(|s| s.decision().allowed));
        // One new spend given back: the new state has a shift of its own.
        let mut new = new.into_iter();
        assert!(now(new.next().unwrap().refund()).unwrap());
        assert_eq!(drain(&service, "k", &options), 1);
        let mut old: Vec<Spent> = old.collect();
        if reverse {
            old.reverse();
        }
        for spent in old {
            assert!(!now(spent.refund()).unwrap(), "an old spend gave");
        }
        assert_eq!(drain(&service, "k", &options), 0);
        for spent in new {
            assert!(now(spent.refund()).unwrap());
        }
        assert_eq!(drain(&service, "k", &options), 2);
    }
}

/// Spends kept, some given back, the bucket left to refill past its arrival time and the
/// sweep's grace, swept by hand (the key goes), then made again and filled: no old spend
/// gives anything back. And without the sweep (the expired state kept, with its shift and
/// runs): the old spends hold nothing, and give nothing.
#[test]
fn a_swept_key_made_again_takes_no_old_refund() {
    let options = bucket(4, 4 * SEC);
    for sweep in [true, false] {
        let (service, clock) = memory();
        let spends: Vec<Spent> = (0..4)
            .map(|_| now(service.spend("k", &options)).unwrap())
            .collect();
        let mut spends = spends.into_iter();
        let first = spends.next().unwrap();
        let third = {
            let second = spends.next().unwrap();
            let third = spends.next().unwrap();
            assert!(now(second.refund()).unwrap());
            third
        };
        let fourth = spends.next().unwrap();
        clock.advance(6 * SEC);
        if sweep {
            let store = service.memory_store().expect("memory");
            assert_eq!(store.sweep(clock.now()), 1);
            assert_eq!(store.len(), 0);
        }
        assert_eq!(drain(&service, "k", &options), 4);
        for spent in [fourth, first, third] {
            assert!(
                !now(spent.refund()).unwrap(),
                "sweep {sweep}: an old spend gave"
            );
        }
        assert_eq!(drain(&service, "k", &options), 0, "sweep {sweep}");
    }
}

// ---------------------------------------------------------------------------------------------
// Several quotas on one state; stacked limits.

/// Three quotas on one key's state (the store key has no limit or burst in it): 3 per 3 s
/// (a token a second), 6 per 3 s (one every half second) and 3 per 3 s with a burst of 3.
/// A plain call (1 s) and a spend under each (1 s each), then the spends given back in every
/// order at one instant: each gives back exactly its own time, so the arrival time is the
/// plain call's alone; and with the clock moving on by 300 ms between refunds, never fuller than the
/// replay of the plain call alone.
#[test]
fn spends_under_three_quotas_on_one_state_give_back_exactly_their_own() {
    let small = bucket(3, 3 * SEC);
    let large = bucket(6, 3 * SEC);
    let burst = bucket(3, 3 * SEC).burst(3);
    let shape = Shape::of(3, 3, 3 * SEC);
    let read = bucket(3, 3 * SEC).burst(3);
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for step in [Duration::ZERO, 300 * MS] {
        for order in orders {
            let (service, clock) = memory();
            let start = clock.now();
            // A plain call of a second first, then the three spends of a second each: the
            // arrival time at +4 s, within every quota's tolerance when it was admitted.
            assert!(now(service.consume("k", &small)).unwrap().allowed);
            let plain_at = clock.now();
            let mut spends: Vec<Option<Spent>> = [(&small, 1u64), (&large, 2), (&burst, 1)]
                .into_iter()
                .map(|(o, cost)| {
                    let s = now(service.spend("k", &o.clone().cost(cost))).unwrap();
                    assert!(s.decision().allowed);
                    Some(s)
                })
                .collect();
            for i in order {
                clock.advance(step);
                assert!(now(spends[i].take().unwrap().refund()).unwrap());
            }
            let got = tat_of(&service, &clock, "k", &read, shape);
            if step.is_zero() {
                assert_eq!(got, start + nanos(SEC), "{order:?}");
            } else {
                let (reference, reference_clock) = memory();
                reference_clock.set(Duration::from_nanos(plain_at));
                assert!(now(reference.consume("k", &small)).unwrap().allowed);
                reference_clock.set(Duration::from_nanos(clock.now()));
                let want = tat_of(&reference, &reference_clock, "k", &read, shape);
                assert!(got >= want, "{order:?}: {got} before the replay's {want}");
                assert!(drain(&service, "k", &small) <= drain(&reference, "k", &small));
            }
        }
    }
}

/// Stacked limits on one user key, a bucket of 10 per 10 s and a fixed window of 8 per 60 s:
/// kept stacked spends (cost 1 and 2) and plain calls on the bucket alone between them,
/// given back in every order of a few: the bucket's arrival time is exactly the plain calls'
/// and the window counts exactly the spends not given back; at one instant and with 200 ms
/// between refunds (then never fuller than the replay of the plain calls).
#[test]
fn stacked_spends_on_a_bucket_and_a_window_give_back_exactly_their_own() {
    let tb = bucket(10, 10 * SEC).budget("tb");
    let fw = Options::new()
        .limit(8)
        .window(60 * SEC)
        .strategy(Strategy::FixedWindow)
        .budget("fw");
    let shape = Shape::of(10, 0, 10 * SEC);
    for step in [Duration::ZERO, 200 * MS] {
        for seed in 1..=24u64 {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
            let (service, clock) = memory();
            let mut spends = Vec::new();
            let mut plain = Vec::new();
            for cost in [1u64, 2, 1] {
                let (b, w) = (tb.clone().cost(cost), fw.clone().cost(cost));
                let s = now(service.spend_all(&[("u", &b), ("u", &w)])).unwrap();
                assert!(s.decisions().iter().all(|d| d.allowed));
                spends.push(Some(s));
                assert!(now(service.consume("u", &tb)).unwrap().allowed);
                plain.push(clock.now());
            }
            let mut order: Vec<usize> = (0..3).collect();
            for i in (1..3).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for i in order.iter().copied() {
                clock.advance(step);
                assert!(
                    now(spends[i].take().unwrap().refund()).unwrap(),
                    "{order:?}"
                );
            }
            assert_eq!(remaining(&service, "u", &fw), 8, "{order:?}");
            let got = tat_of(&service, &clock, "u", &tb, shape);
            let (reference, reference_clock) = memory();
            for at in &plain {
                reference_clock.set(Duration::from_nanos(*at));
                assert!(now(reference.consume("u", &tb)).unwrap().allowed);
            }
            reference_clock.set(Duration::from_nanos(clock.now()));
            let want = tat_of(&reference, &reference_clock, "u", &tb, shape);
            if step.is_zero() {
                assert_eq!(got, want, "{order:?}");
            } else {
                assert!(got >= want, "{order:?}: {got} before the replay's {want}");
            }
        }
    }
}

/// Two tiers on one user key, both token buckets of the same window (free: 3 per 3 s; pro: 6
/// per 3 s with a refill of 3, a burst of 2): spends under both, interleaved, given back in
/// random orders at one instant: each tier's bucket is left exactly with the spends of its
/// own not given back, and never changes with the other tier's refunds.
#[test]
fn refunds_under_two_tiers_on_one_key_give_back_to_their_own_bucket_alone() {
    for seed in 1..=40u64 {
        let config = Config::builder()
            .store(StoreConfig::Memory(
                MemoryOptions::default().sweep_interval(Duration::from_secs(10_000_000)),
            ))
            .tier(
                ratelimit::Tier::new("free", 3)
                    .window("3s")
                    .strategy(Strategy::TokenBucket),
            )
            .tier(
                ratelimit::Tier::new("pro", 6)
                    .window("3s")
                    .refill(3)
                    .burst(2)
                    .strategy(Strategy::TokenBucket),
            )
            .build()
            .unwrap();
        let (service, _clock) = ratelimit_tests::service(config);
        let (free, pro) = (Options::for_tier("free"), Options::for_tier("pro"));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        // (spend, its tier: 0 free, 1 pro, its cost)
        let mut held: Vec<(Spent, usize, u64)> = Vec::new();
        let mut spent = [0u64; 2];
        let capacity = [3u64, 8];
        for _ in 0..30 {
            if held.is_empty() || rng.below(2) == 0 {
                let tier = rng.below(2) as usize;
                let cost = 1 + rng.below(2);
                let options = [&free, &pro][tier].clone().cost(cost);
                let s = now(service.spend("u", &options)).unwrap();
                assert_eq!(
                    s.decision().allowed,
                    spent[tier] + cost <= capacity[tier],
                    "seed {seed}"
                );
                if s.decision().allowed {
                    spent[tier] += cost;
                    held.push((s, tier, cost));
                }
            } else {
                let (s, tier, cost) = held.swap_remove(rng.below(held.len() as u64) as usize);
                assert!(now(s.refund()).unwrap(), "seed {seed}");
                spent[tier] -= cost;
            }
            assert_eq!(remaining(&service, "u", &free), 3 - spent[0], "seed {seed}");
            // Pro refills 3 per 3 s: a token a second; its level in its own tokens.
            assert_eq!(remaining(&service, "u", &pro), 8 - spent[1], "seed {seed}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Threads.

/// Threads spending from one bucket (a day's window: nothing refills while they run) and
/// giving back random spends of theirs in random orders, some at once and some later: never
/// more held than the limit at any moment (counted by the threads: a spend counts from just
/// after it is admitted until just before its refund is asked), and at the end the bucket
/// holds exactly the spends not given back. Below 8 every refund gives (all exact).
#[test]
fn threads_spending_and_giving_back_on_one_bucket_leave_exactly_what_they_kept() {
    for limit in [3u64, 7, 20] {
        let (service, _clock) = memory();
        let options = bucket(limit, Duration::from_secs(86_400));
        let held = Arc::new(AtomicI64::new(0));
        let most = Arc::new(AtomicI64::new(0));
        let kept = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        std::thread::scope(|scope| {
            for t in 0..6u64 {
                let (service, options) = (service.clone(), options.clone());
                let (held, most, kept, refused) = (&held, &most, &kept, &refused);
                scope.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15
                        ^ (t + 100 * limit).wrapping_mul(0x2545_f491_4f6c_dd1d));
                    let mut mine: Vec<Spent> = Vec::new();
                    let give = |spent: Spent| {
                        held.fetch_sub(1, Ordering::SeqCst);
                        if !now(spent.refund()).unwrap() {
                            held.fetch_add(1, Ordering::SeqCst);
                            kept.fetch_add(1, Ordering::SeqCst);
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                    };
                    for _ in 0..400 {
                        let spent = now(service.spend("k", &options)).unwrap();
                        if spent.decision().allowed {
                            let h = held.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(h, Ordering::SeqCst);
                            assert!(h <= limit as i64, "{h} held against {limit}");
                            mine.push(spent);
                        }
                        while mine.len() > 2 || (!mine.is_empty() && rng.below(3) == 0) {
                            let i = rng.below(mine.len() as u64) as usize;
                            give(mine.swap_remove(i));
                        }
                    }
                    // One of each thread's kept for good, the others given back.
                    if let Some(spent) = mine.pop() {
                        kept.fetch_add(1, Ordering::SeqCst);
                        drop(spent);
                    }
                    for spent in mine {
                        give(spent);
                    }
                });
            }
        });
        let kept = kept.load(Ordering::SeqCst);
        let refused = refused.load(Ordering::SeqCst);
        eprintln!(
            "limit {limit}: kept {kept} ({refused} refunds gave nothing), most held {}",
            most.load(Ordering::SeqCst)
        );
        assert!(kept <= limit, "limit {limit}: kept {kept}");
        assert_eq!(remaining(&service, "k", &options), limit - kept, "{limit}");
        assert_eq!(drain(&service, "k", &options), limit - kept, "{limit}");
        if limit < 8 {
            assert_eq!(refused, 0, "limit {limit}: a refund below 8 gave nothing");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Redis: the same rules in lua/refund.lua, lua/stacked.lua, lua/adjust.lua and
// token_bucket.lua, on Redis' own clock. Buckets with a day's window (a token every few
// hours) unless a probe needs them to refill: the few seconds a probe runs refill nothing a
// count can see.

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;

    use ratelimit::{Error, RedisOptions};
    use ratelimit_tests::redis_server::{prefix, state_key, RedisServer};

    const DAY: Duration = Duration::from_secs(86_400);

    /// A service on `server` under prefix `p` (both Redis modules).
    pub(super) fn single(server: &RedisServer, p: &str) -> RateLimitService {
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
        ratelimit_tests::redis_service(options, p)
    }

    async fn left(service: &RateLimitService, key: &str, options: &Options) -> u64 {
        ratelimit_tests::remaining(service, key, options).await
    }

    /// The same history on Redis and on memory (a manual clock that never moves, a day's
    /// window): kept spends of cost 1 to 3, plain calls, refunds in random orders (more than
    /// 8 kept with a capacity of 20) and penalties. After every step both answer
    /// the same level and every refund the same (a refund may give nothing on both: penalties
    /// moved the arrival time past the horizon, from which a refund's instant is measured).
    /// No rewards: a reward moves the bucket only when it gives a whole unit back, and the
    /// milliseconds Redis' clock moves on while the probe runs make a bucket holding exactly
    /// one unit on memory hold a hair less on Redis (nothing given there, the bucket emptied
    /// on memory: seen as 4 left on Redis and 5 on memory). The memory probes measure rewards
    /// against the model.
    #[tokio::test]
    async fn redis_refunds_in_any_order_answer_as_memory() {
        let server = RedisServer::start();
        for limit in [5u64, 7, 20] {
            for seed in 1..=6u64 {
                let p = prefix(&format!("probes_bucket_diff_{limit}_{seed}"));
                let redis = single(&server, &p);
                let (memory, _clock) = memory();
                let options = bucket(limit, DAY);
                let mut rng =
                    Rng(0x9e37_79b9_7f4a_7c15
                        ^ (seed * 31 + limit).wrapping_mul(0x2545_f491_4f6c_dd1d));
                let mut held: Vec<(Spent, Spent)> = Vec::new();
                let mut log = Vec::new();
                for step in 0..60 {
                    let what = match rng.below(10) {
                        0..=3 => {
                            let cost = 1 + rng.below(3);
                            let with = options.clone().cost(cost);
                            let r = redis.spend("k", &with).await.unwrap();
                            let m = now(memory.spend("k", &with)).unwrap();
                            assert_eq!(r.decision().allowed, m.decision().allowed, "{step}");
                            if r.decision().allowed {
                                held.push((r, m));
                            }
                            format!("spend {cost}")
                        }
                        4 => {
                            let r = redis.consume("k", &options).await.unwrap();
                            let m = now(memory.consume("k", &options)).unwrap();
                            assert_eq!(r.allowed, m.allowed, "{step}");
                            "consume".to_string()
                        }
                        5..=7 if !held.is_empty() => {
                            let i = rng.below(held.len() as u64) as usize;
                            let (r, m) = held.swap_remove(i);
                            let (gr, gm) = (r.refund().await.unwrap(), now(m.refund()).unwrap());
                            assert_eq!(gr, gm, "limit {limit} seed {seed} step {step}");
                            format!("refund {i}: {gr}")
                        }
                        8 | 9 => {
                            redis.penalize("k", &options, 1).await.unwrap();
                            now(memory.penalize("k", &options, 1)).unwrap();
                            "penalty".to_string()
                        }
                        _ => continue,
                    };
                    let (r, m) = (
                        left(&redis, "k", &options).await,
                        remaining(&memory, "k", &options),
                    );
                    log.push(format!("{what} -> {r}/{m}"));
                    assert_eq!(
                        r, m,
                        "limit {limit} seed {seed} step {step} ({what}): {log:?}"
                    );
                }
                let (r, m) = (
                    ratelimit_tests::drained(&redis, "k", &options).await,
                    drain(&memory, "k", &options),
                );
                assert_eq!(r, m, "limit {limit} seed {seed}");
            }
        }
    }

    /// Three quotas on one key's state on Redis (3 a day, 6 a day, and 3 a day with a
    /// burst of 3): a plain call (8 h of the bucket), then a spend under each (8 h each),
    /// given back in every order: each gives back exactly its own time, so each quota reads
    /// the plain call's alone.
    #[tokio::test]
    async fn redis_spends_under_three_quotas_on_one_state_give_back_exactly_their_own() {
        let server = RedisServer::start();
        let small = bucket(3, DAY);
        let large = bucket(6, DAY);
        let burst = bucket(3, DAY).burst(3);
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for (n, order) in orders.into_iter().enumerate() {
            let service = single(&server, &prefix(&format!("probes_bucket_quotas_{n}")));
            assert!(service.consume("k", &small).await.unwrap().allowed);
            let mut spends = Vec::new();
            for (options, cost) in [(&small, 1u64), (&large, 2), (&burst, 1)] {
                let s = service
                    .spend("k", &options.clone().cost(cost))
                    .await
                    .unwrap();
                assert!(s.decision().allowed, "{order:?}");
                spends.push(Some(s));
            }
            for i in order {
                assert!(
                    spends[i].take().unwrap().refund().await.unwrap(),
                    "{order:?}"
                );
            }
            assert_eq!(left(&service, "k", &small).await, 2, "{order:?}");
            assert_eq!(left(&service, "k", &large).await, 4, "{order:?}");
            assert_eq!(left(&service, "k", &burst).await, 5, "{order:?}");
        }
    }

    /// On Redis, a bucket of 20: 20 spends kept, given back in adversarial orders (every
    /// other first: 10 runs, past the 8 kept): what is left is exactly the capacity less the
    /// spends not given back, whatever each refund answers.
    #[tokio::test]
    async fn redis_more_than_eight_spends_given_back_in_adversarial_orders() {
        let server = RedisServer::start();
        let options = bucket(20, DAY);
        let orders: Vec<(&str, Vec<usize>)> = vec![
            ("backward", (0..20).rev().collect()),
            (
                "odd then even",
                (1..20).step_by(2).chain((0..20).step_by(2)).collect(),
            ),
            ("middle out", {
                let mut v = Vec::new();
                for d in 0..10 {
                    v.push(9 - d);
                    v.push(10 + d);
                }
                v
            }),
        ];
        for (name, order) in orders {
            let p = prefix(&format!("probes_bucket_orders_{}", name.replace(' ', "_")));
            let service = single(&server, &p);
            let mut spends: Vec<Option<Spent>> = Vec::new();
            for _ in 0..20 {
                let s = service.spend("k", &options).await.unwrap();
                assert!(s.decision().allowed);
                spends.push(Some(s));
            }
            let mut kept = 20;
            for i in order {
                if spends[i].take().unwrap().refund().await.unwrap() {
                    kept -= 1;
                }
                assert_eq!(
                    left(&service, "k", &options).await,
                    20 - kept,
                    "{name}: {i}"
                );
            }
            assert_eq!(
                ratelimit_tests::drained(&service, "k", &options).await,
                20 - kept,
                "{name}"
            );
        }
    }

    /// State strings a script never writes, planted over a bucket something was given back
    /// to (a spend kept for a refund on it): every call on the key (a look, a plain call, a
    /// kept spend, a reward, a penalty, the kept spend's refund) is refused with
    /// `UnexpectedState` (a refund may also give nothing), and the planted string is left as
    /// it was: never read as a fresh state or a fuller one.
    #[tokio::test]
    async fn garbage_bucket_states_are_refused_and_left_alone() {
        let server = RedisServer::start();
        let mut redis = server.connection();
        let p = prefix("probes_bucket_garbage");
        let service = single(&server, &p);
        let options = bucket(5, DAY);
        // A valid state first, to know the key and its shape.
        let kept = service.spend("g", &options).await.unwrap();
        let other = service.spend("g", &options).await.unwrap();
        assert!(other.refund().await.unwrap());
        let state = state_key(&mut redis, &p);
        let valid: String = redis::cmd("GET").arg(&state).query(&mut redis).unwrap();
        eprintln!("a bucket given back to: {valid}");
        let tat: u64 = valid[1..].split(':').next().unwrap().parse().unwrap();
        let t = tat.to_string();
        let run = |from: u64, to: u64, time: u64| format!("{from}:{to}:{time}");
        let nine_runs: Vec<String> = (0..9).map(|i| run(10 * i + 1, 10 * i + 2, 1)).collect();
        let plants: Vec<String> = vec![
            format!("T{t}:"),
            format!("T{t}::"),
            format!("T{t}:0"),
            format!("T{t}:0:1:2:3"),
            format!("T{t}:5:1"),
            format!("T{t}:5:1:2"),
            format!("T{t}:5:2:1:3"),
            format!("T{t}:5:1:1:3"),
            format!("T{t}:5:1:2:0"),
            format!("T{t}:5:1:5:1:3:9:1"),
            format!("T{t}:5:1:5:1:5:9:1"),
            format!("T{t}:5:10:20:1:1:5:1"),
            format!("T{t}:5:{}", nine_runs.join(":")),
            format!("T{t}:05"),
            format!("T{t}:5:01:2:1"),
            format!("T0{t}"),
            format!("T{t}:99999999999999999999:1:2:3"),
            format!("T{t}:8070450532247929"),
            format!("T{t}:5:1:2:8070450532247929"),
            format!("T{t}:5:1:8070450532247929:3"),
            format!("T{t}:5:1:2:3:"),
            format!("T{t}:-5"),
            format!("T{t}:5 "),
            format!("T{t}: 5"),
            format!("T{t}:5\n"),
            format!("T{t}:+5"),
            format!("T{t}:5.0"),
            format!("T{t}:1e3"),
            format!("T{t}:0x5"),
            format!("T{t}:5:1:2:3:4"),
            "T-1".into(),
            "T".into(),
            "T:5".into(),
            format!("T{t}.5"),
            format!("T99999999999999999999:5"),
            format!("T{t}:5:1:2:3\0"),
            format!("t{t}:5"),
            format!(" T{t}:5"),
        ];
        for plant in plants {
            let _: () = redis::cmd("SET")
                .arg(&state)
                .arg(&plant)
                .query(&mut redis)
                .unwrap();
            let refused = |what: &str, r: Result<ratelimit::Decision, Error>| {
                assert!(
                    matches!(r, Err(Error::UnexpectedState { .. })),
                    "{plant:?}: {what}: {r:?}"
                );
            };
            refused("status", service.status("g", &options).await);
            refused("consume", service.consume("g", &options).await);
            let spent = service.spend("g", &options).await;
            assert!(
                matches!(spent, Err(Error::UnexpectedState { .. })),
                "{plant:?}: spend: {:?}",
                spent.map(|s| s.decision().clone())
            );
            refused("reward", service.reward("g", &options, 1).await);
            refused("penalize", service.penalize("g", &options, 1).await);
            let held: String = redis::cmd("GET").arg(&state).query(&mut redis).unwrap();
            assert_eq!(held, plant, "a call wrote over it");
        }
        // The kept spend's refund on garbage: an error or nothing, and nothing written.
        let plant = format!("T{t}:5:1:2:0");
        let _: () = redis::cmd("SET")
            .arg(&state)
            .arg(&plant)
            .query(&mut redis)
            .unwrap();
        let given = kept.refund().await;
        assert!(
            matches!(given, Ok(false) | Err(Error::UnexpectedState { .. })),
            "{given:?}"
        );
        let held: String = redis::cmd("GET").arg(&state).query(&mut redis).unwrap();
        assert_eq!(held, plant);
    }

    /// Tasks on two workers spending from one bucket and giving back random spends of
    /// theirs, some at once and some later: never more held than the limit at any moment
    /// (as the tasks count), and at the end exactly the spends not given back are spent.
    /// Below 8 every refund gives.
    #[test]
    fn tasks_spending_and_giving_back_on_one_redis_bucket_leave_exactly_what_they_kept() {
        let server = RedisServer::start();
        let runtime = ratelimit_tests::two_workers();
        for limit in [6u64, 20] {
            let service = single(&server, &prefix(&format!("probes_bucket_tasks_{limit}")));
            let options = bucket(limit, DAY);
            let held = Arc::new(AtomicI64::new(0));
            let kept = Arc::new(AtomicU64::new(0));
            let refused = Arc::new(AtomicU64::new(0));
            runtime.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                for t in 0..24u64 {
                    let (service, options) = (service.clone(), options.clone());
                    let (held, kept, refused) = (held.clone(), kept.clone(), refused.clone());
                    tasks.spawn(async move {
                        let mut rng = Rng(0x9e37_79b9_7f4a_7c15
                            ^ (t + 7 * limit).wrapping_mul(0x2545_f491_4f6c_dd1d));
                        let mut mine: Vec<Spent> = Vec::new();
                        for round in 0..12 {
                            let spent = service.spend("k", &options).await.unwrap();
                            if spent.decision().allowed {
                                let h = held.fetch_add(1, Ordering::SeqCst) + 1;
                                assert!(h <= limit as i64, "{h} held against {limit}");
                                mine.push(spent);
                            }
                            while mine.len() > 2 || (!mine.is_empty() && rng.below(3) == 0) {
                                let i = rng.below(mine.len() as u64) as usize;
                                let spent = mine.swap_remove(i);
                                held.fetch_sub(1, Ordering::SeqCst);
                                if !spent.refund().await.unwrap() {
                                    held.fetch_add(1, Ordering::SeqCst);
                                    kept.fetch_add(1, Ordering::SeqCst);
                                    refused.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            if round == 11 {
                                if let Some(spent) = mine.pop() {
                                    kept.fetch_add(1, Ordering::SeqCst);
                                    drop(spent);
                                }
                            }
                        }
                        for spent in mine {
                            held.fetch_sub(1, Ordering::SeqCst);
                            if !spent.refund().await.unwrap() {
                                held.fetch_add(1, Ordering::SeqCst);
                                kept.fetch_add(1, Ordering::SeqCst);
                                refused.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    });
                }
                while let Some(done) = tasks.join_next().await {
                    done.expect("task");
                }
                let kept = kept.load(Ordering::SeqCst);
                let refused = refused.load(Ordering::SeqCst);
                eprintln!("limit {limit}: kept {kept} ({refused} refunds gave nothing)");
                assert!(kept <= limit, "limit {limit}: kept {kept}");
                assert_eq!(left(&service, "k", &options).await, limit - kept);
                assert_eq!(
                    ratelimit_tests::drained(&service, "k", &options).await,
                    limit - kept
                );
                if limit < 8 {
                    assert_eq!(refused, 0, "limit {limit}: a refund below 8 gave nothing");
                }
            });
        }
    }

    /// A bucket with a shift (one spend given back) left to expire on Redis' clock (a
    /// bucket of 2 per 400 ms, so its state expires within 400 ms: a real wait of 500 ms),
    /// then made again by plain calls and by kept spends: no spend of the old state gives
    /// anything back, and the new state admits exactly its capacity.
    #[tokio::test]
    async fn an_expired_bucket_made_again_takes_no_old_refund() {
        let server = RedisServer::start();
        let options = bucket(2, Duration::from_millis(400));
        for kept_again in [false, true] {
            let service = single(
                &server,
                &prefix(&format!("probes_bucket_expired_{kept_again}")),
            );
            let a = service.spend("e", &options).await.unwrap();
            let b = service.spend("e", &options).await.unwrap();
            assert!(a.decision().allowed && b.decision().allowed);
            assert!(a.refund().await.unwrap());
            // Past the old arrival time (at most 400 ms away) on Redis' clock.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut new = Vec::new();
            for _ in 0..2 {
                if kept_again {
                    let s = service.spend("e", &options).await.unwrap();
                    assert!(s.decision().allowed);
                    new.push(s);
                } else {
                    assert!(service.consume("e", &options).await.unwrap().allowed);
                }
            }
            assert!(
                !b.refund().await.unwrap(),
                "kept again {kept_again}: B gave"
            );
            assert!(!service.consume("e", &options).await.unwrap().allowed);
        }
    }

    /// Kept spends, a refund, the key reset, the bucket filled again by kept spends (one of
    /// them given back, so the new state has a shift of its own): no old spend gives
    /// anything back, in either order.
    #[tokio::test]
    async fn a_redis_reset_between_spends_and_refunds_gives_nothing_to_the_new_state() {
        let server = RedisServer::start();
        let options = bucket(3, DAY);
        for reverse in [false, true] {
            let service = single(&server, &prefix(&format!("probes_bucket_reset_{reverse}")));
            let mut old = Vec::new();
            for _ in 0..3 {
                old.push(service.spend("r", &options).await.unwrap());
            }
            assert!(old.remove(0).refund().await.unwrap());
            assert!(service.reset_with("r", &options).await.unwrap());
            let mut new = Vec::new();
            for _ in 0..3 {
                let s = service.spend("r", &options).await.unwrap();
                assert!(s.decision().allowed);
                new.push(s);
            }
            assert!(new.remove(0).refund().await.unwrap());
            if reverse {
                old.reverse();
            }
            for spent in old {
                assert!(!spent.refund().await.unwrap(), "an old spend gave");
            }
            assert_eq!(left(&service, "r", &options).await, 1);
            for spent in new {
                assert!(spent.refund().await.unwrap());
            }
            assert_eq!(ratelimit_tests::drained(&service, "r", &options).await, 3);
        }
    }

    /// Stacked limits on one user key on Redis, a bucket of 10 and a fixed window of 8 (both
    /// a day): kept stacked spends of cost 1 and 2 with plain calls on the bucket between
    /// them, given back in every order: each limit is left with exactly what was not given
    /// back.
    #[tokio::test]
    async fn redis_stacked_spends_on_a_bucket_and_a_window_give_back_exactly_their_own() {
        let server = RedisServer::start();
        let tb = bucket(10, DAY).budget("tb");
        let fw = Options::new()
            .limit(8)
            .window(DAY)
            .strategy(Strategy::FixedWindow)
            .budget("fw");
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for (n, order) in orders.into_iter().enumerate() {
            let service = single(&server, &prefix(&format!("probes_bucket_stacked_{n}")));
            let mut spends = Vec::new();
            for cost in [1u64, 2, 1] {
                let (b, w) = (tb.clone().cost(cost), fw.clone().cost(cost));
                let s = service.spend_all(&[("u", &b), ("u", &w)]).await.unwrap();
                assert!(s.decisions().iter().all(|d| d.allowed));
                spends.push(Some(s));
                assert!(service.consume("u", &tb).await.unwrap().allowed);
            }
            for i in order {
                assert!(
                    spends[i].take().unwrap().refund().await.unwrap(),
                    "{order:?}"
                );
            }
            assert_eq!(left(&service, "u", &tb).await, 7, "{order:?}");
            assert_eq!(left(&service, "u", &fw).await, 8, "{order:?}");
            assert_eq!(
                ratelimit_tests::drained(&service, "u", &tb).await,
                7,
                "{order:?}"
            );
        }
    }
}

#[cfg(feature = "redis")]
mod on_redis_in_time {
    use super::on_redis::single;
    use super::*;

    use ratelimit::{LeaseOptions, RedisOptions};
    use ratelimit_tests::redis_server::{prefix, RedisServer};

    /// Random histories on Redis' own clock, on a bucket of 10 per 500 ms (a token every
    /// 50 ms): kept spends of cost 1 to 3, plain calls and refunds in random orders, with
    /// real waits of 0 to 80 ms between steps (spends partly refilled when given back, the
    /// bucket idle now and then). Every kept spend is given back by the end; the replay is a
    /// second key on the same server that gets every plain call the probed key admitted,
    /// just after it (its arrival time later by that moment: emptier by a hair); at the end
    /// the probed key is drained first, then the replay (fuller by the moment between): the
    /// probed key never admits more.
    #[tokio::test]
    async fn redis_partial_refunds_in_real_time_never_leave_more_than_a_parallel_replay() {
        let server = RedisServer::start();
        let options = bucket(10, Duration::from_millis(500));
        for seed in 1..=5u64 {
            let service = single(&server, &prefix(&format!("probes_bucket_time_{seed}")));
            let mut rng =
                Rng(0x9e37_79b9_7f4a_7c15 ^ (seed * 977).wrapping_mul(0x2545_f491_4f6c_dd1d));
            let mut held: Vec<Spent> = Vec::new();
            let mut given = 0;
            for _ in 0..24 {
                tokio::time::sleep(Duration::from_millis(rng.below(81))).await;
                match rng.below(6) {
                    0..=2 => {
                        // Kept spends are all given back by the end; plain calls never are.
                        let cost = 1 + rng.below(3);
                        let with = options.clone().cost(cost);
                        if rng.below(2) == 0 {
                            // A plain call: the replay gets it when the probed key admits it
                            // (a moment later: the replay's clock is a hair later, its
                            // arrival time too, which only makes it emptier by that hair).
                            let p = service.consume("probed", &with).await.unwrap();
                            if p.allowed {
                                let r = service.consume("replay", &with).await.unwrap();
                                assert!(
                                    r.allowed,
                                    "seed {seed}: the replay refused a call the probed key \
                                     admitted"
                                );
                            }
                        } else {
                            let p = service.spend("probed", &with).await.unwrap();
                            if p.decision().allowed {
                                held.push(p);
                            }
                        }
                    }
                    _ if !held.is_empty() => {
                        let i = rng.below(held.len() as u64) as usize;
                        if held.swap_remove(i).refund().await.unwrap() {
                            given += 1;
                        }
                    }
                    _ => {}
                }
            }
            // The spends still held are given back too: the replay never had them.
            for spent in held {
                if spent.refund().await.unwrap() {
                    given += 1;
                }
            }
            let probed = ratelimit_tests::drained(&service, "probed", &options).await;
            let replay = ratelimit_tests::drained(&service, "replay", &options).await;
            eprintln!("seed {seed}: {given} given back; {probed} admitted, {replay} by the replay");
            assert!(
                probed <= replay,
                "seed {seed}: {probed} admitted, {replay} by the replay"
            );
        }
    }

    /// With leases on (a process takes 8 units at a time for its plain calls): a second
    /// process holds a lease of the key while the first gives back a kept spend (the state
    /// then holds a shift and a run) and resets the key (lua/reset.lua keeps what leases
    /// hold out). Whatever the reset answers, nothing is admitted past the capacity less
    /// what the other process's lease holds out, and the kept spend of before gives nothing
    /// after the reset. Helper 26 saw the reset refused (`UnexpectedState` "the limiter key
    /// holds a string of no strategy while leases of it are out": reset.lua's `keep` read a
    /// bucket as `T<tat>` or `T<tat>:<shift>` only, not with its runs); it goes through now.
    #[tokio::test]
    async fn a_reset_with_leases_out_on_a_bucket_given_back_to_stays_within_the_quota() {
        let server = RedisServer::start();
        let p = prefix("probes_bucket_leases");
        let with_leases = || {
            let options = RedisOptions::new(server.url())
                .timeout(Duration::from_secs(2))
                .leases(LeaseOptions::new(8));
            ratelimit_tests::redis_service(options, &p)
        };
        let (first, second) = (with_leases(), with_leases());
        let limit = bucket(20, Duration::from_secs(86_400));
        // The second process's plain call: a lease of 8 granted to it, one unit spent.
        assert!(second.consume("l", &limit).await.unwrap().allowed);
        let kept = first.spend("l", &limit).await.unwrap();
        let other = first.spend("l", &limit).await.unwrap();
        assert!(other.refund().await.unwrap());
        let reset = first.reset_with("l", &limit).await;
        // reset.lua's `keep` reads a bucket given back to (its runs) since helper 26 saw it
        // refused: the reset goes through.
        assert!(reset.is_ok(), "{reset:?}");
        eprintln!("reset with another's lease out, after a refund: {reset:?}");
        let gave = kept.refund().await;
        eprintln!("the kept spend of before: {gave:?}");
        if reset.is_ok() {
            assert!(!gave.unwrap_or(false), "given back after the reset");
        }
        let mut admitted = 0;
        while first.consume("l", &limit).await.unwrap().allowed {
            admitted += 1;
            assert!(admitted <= 20, "past the capacity");
        }
        eprintln!("then {admitted} admitted by the first process");
        // The second process's lease still holds 8 units out of Redis (one spent by it):
        // at most 12 left for the first, whatever the reset did.
        assert!(admitted <= 12, "{admitted} admitted beside the lease");
    }
}
