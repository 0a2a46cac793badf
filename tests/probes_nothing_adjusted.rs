//! helper-73: an adjustment of nothing (`penalize` or `reward` of 0 units) changes nothing
//! anyone can see: each probe runs one history on two services, one of which adjusts by
//! nothing before every step, and compares every decision, every level and the number of
//! keys the store holds. Histories cross a reload that moves the limit (another tier name
//! and window: the old state decided beside the new one, blocks carried between them), a
//! reload that keeps the state under another limit (a state written under another quota),
//! and a clock read older than what the store recorded. The memory store, on a hand-driven
//! clock; `probes_nothing_adjusted_redis` runs the same on Redis.

use std::time::Duration;

use ratelimit::{
    Config, ConfigBuilder, Decision, ManualClock, Options, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::{now, reload_to as reload, START};

const SEC: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier) of `limit` per `window` under `strategy`, blocking a key
/// an hour once refused when `blocks`.
fn tier(
    name: &str,
    limit: u64,
    window: Duration,
    strategy: Strategy,
    blocks: bool,
) -> ConfigBuilder {
    let mut tier = Tier::new(name, limit)
        .burst(0)
        .window(window)
        .strategy(strategy);
    if blocks {
        tier = tier.block_for(HOUR);
    }
    Config::builder().tier(tier).default_tier(name)
}

/// One step of a history.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// A call of this cost.
    Call(u64),
    /// The level (`status`).
    Look,
    /// The clock moved on (or, with `back`, back) by this much.
    Advance(Duration),
    Back(Duration),
    /// A reload to the configuration of this index in `configs`.
    Reload(usize),
}

/// What one service saw along `steps`: each call's and look's decision and the store's keys
/// after each step. With `nothing`, a penalty and a reward of nothing before every step.
fn history(
    configs: &[ConfigBuilder],
    steps: &[Step],
    nothing: bool,
) -> Vec<(Step, Option<Decision>, usize)> {
    let (service, clock): (RateLimitService, ManualClock) =
        ratelimit_tests::service(configs[0].clone().build().unwrap());
    let store = service.memory_store().unwrap().clone();
    let options = Options::new();
    let mut seen = Vec::new();
    let mut at = START;
    for &step in steps {
        if nothing {
            let level = now(service.penalize("k", &options, 0)).unwrap();
            let again = now(service.reward("k", &options, 0)).unwrap();
            assert_eq!(level, again, "{step:?}");
        }
        let decided = match step {
            Step::Call(cost) => Some(now(service.consume("k", &options.clone().cost(cost)))),
            Step::Look => Some(now(service.status("k", &options))),
            Step::Advance(by) => {
                at += by;
                clock.set(at);
                None
            }
            Step::Back(by) => {
                at -= by;
                clock.set(at);
                None
            }
            Step::Reload(i) => {
                reload(&service, configs[i].clone());
                None
            }
        };
        seen.push((step, decided.map(Result::unwrap), store.len()));
    }
    seen
}

/// Where the two histories first differ, if anywhere.
fn differs(configs: &[ConfigBuilder], steps: &[Step], what: &str) -> Option<String> {
    let plain = history(configs, steps, false);
    let adjusted = history(configs, steps, true);
    let differ = (plain.iter().zip(&adjusted).enumerate()).find(|(_, (p, a))| p != a);
    let (i, (p, a)) = differ?;
    Some(format!(
        "{what}: step {i}:\n without: {p:?}\n with:    {a:?}"
    ))
}

/// Every case's history the same with and without the adjustments of nothing.
fn same_histories(cases: impl IntoIterator<Item = (Vec<ConfigBuilder>, Vec<Step>, String)>) {
    let differ: Vec<String> = (cases.into_iter())
        .filter_map(|(configs, steps, what)| differs(&configs, &steps, &what))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

use Step::*;

/// 2 spent, the limit moved (another tier name and window), 1 spent on both, refused by the
/// old state (a block begins there when the limits block), a refusal later in the old
/// window, the clock read 20 s back and on again, then past the old window and the block.
fn moving_history() -> Vec<Step> {
    vec![
        Call(1),
        Call(1),
        Look,
        Reload(1),
        Look,
        Call(1),
        Call(1),
        Look,
        Advance(30 * SEC),
        Call(2),
        Look,
        Back(20 * SEC),
        Look,
        Call(1),
        Advance(20 * SEC),
        Advance(35 * SEC),
        Call(1),
        Look,
        Advance(HOUR),
        Call(1),
        Call(3),
        Look,
    ]
}

#[test]
fn nothing_adjusted_beside_a_moved_limit_changes_nothing() {
    let cases = Strategy::ALL.into_iter().flat_map(|strategy| {
        [false, true].map(|blocks| {
            let configs = vec![
                tier("a", 3, 60 * SEC, strategy, blocks),
                tier("b", 3, 120 * SEC, strategy, blocks),
            ];
            (
                configs,
                moving_history(),
                format!("{strategy} blocks {blocks}"),
            )
        })
    });
    same_histories(cases);
}

/// The same state under another limit (the same tier and window, 3 then 5 then 2): a state
/// written under another quota, adjusted by nothing while the reloads' transitions hold it.
#[test]
fn nothing_adjusted_on_a_state_another_quota_wrote_changes_nothing() {
    let cases = Strategy::ALL.into_iter().flat_map(|strategy| {
        [false, true].map(|blocks| {
            let configs = vec![
                tier("a", 3, 60 * SEC, strategy, blocks),
                tier("a", 5, 60 * SEC, strategy, blocks),
                tier("a", 2, 60 * SEC, strategy, blocks),
            ];
            let steps = vec![
                Call(1),
                Call(1),
                Call(1),
                Call(1),
                Reload(1),
                Look,
                Call(1),
                Advance(10 * SEC),
                Call(2),
                Reload(2),
                Look,
                Call(1),
                Back(5 * SEC),
                Call(1),
                Look,
                Advance(65 * SEC),
                Call(1),
                Call(1),
                Look,
                Advance(HOUR),
                Call(2),
                Look,
            ];
            (configs, steps, format!("{strategy} blocks {blocks}"))
        })
    });
    same_histories(cases);
}

/// A fresh key adjusted by nothing is stored by nothing, and a look at it is a fresh one's.
#[test]
fn nothing_adjusted_on_a_fresh_key_stores_nothing() {
    let cases = Strategy::ALL.into_iter().map(|strategy| {
        let configs = vec![tier("a", 3, 60 * SEC, strategy, true)];
        let steps = vec![Look, Advance(SEC), Look, Back(2 * SEC), Look, Call(1)];
        (configs, steps, format!("{strategy}"))
    });
    same_histories(cases);
}
