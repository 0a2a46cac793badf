//! helper-75's attacks on a reset beside a moved limit (`RateLimitService::reset` /
//! `reset_with` during a reload's transition). A reset forgets the key's state under the
//! running configuration; the old states a reload moved the limit away from, which its calls
//! are still held to, stay as they are (helper-73 made a reset forget those too, for a
//! lockout: a reset during an hour's block held the whole hour; these attacks found that it
//! then handed out another limit's budget, so that rule was taken back). What must hold
//! whatever the rule: a reset never hands out a budget that is another tier's, another call's
//! own limit's, or another key's. Each compared with a twin service that never reloaded.
//! Memory store, hand-driven clock.

use std::time::Duration;

use ratelimit::{Config, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::three::{limit, tier};
use ratelimit_tests::{now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);

/// Calls of cost 1 on `key` with `options` admitted of `n`.
fn admitted_on(service: &RateLimitService, key: &str, options: &Options, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume(key, options)).unwrap().allowed)
        .count()
}

fn admitted(service: &RateLimitService, n: usize) -> usize {
    admitted_on(service, "k", &Options::new(), n)
}

/// Tier `"a"` (the default) renamed `"b"` while a new tier `"a"` of 5 on the same window is
/// added: the default's old state is the new tier `"a"`'s own. A reset of the default leaves
/// it: calls naming `"a"` find the 3 spent there, held to the old 3 for the old window (the
/// same state loosened): none admitted, where a forgotten state gave 3.
#[test]
fn a_reset_beside_a_rename_leaves_the_new_tier_of_the_old_name_its_budget() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service(limit(strategy, "a", MINUTE, false).build().unwrap());
        assert_eq!(admitted(&service, 4), 3);
        let mut new_a = Tier::new("a", 5).burst(0).window(MINUTE).strategy(strategy);
        if strategy == Strategy::TokenBucket {
            new_a = new_a.refill(5);
        }
        let renamed = Config::builder()
            .tier(tier(strategy, "b", MINUTE, false))
            .tier(new_a)
            .default_tier("b");
        reload(&service, renamed);
        now(service.reset("k", None)).unwrap();
        let a = Options::new().tier("a");
        assert_eq!(admitted_on(&service, "k", &a, 6), 0, "{strategy}");
    }
}

/// A window or strategy of a call's own (`Options::window`, `Options::strategy`) equal to
/// the tier's old one: after the tier moves (to two minutes, or to another strategy), those
/// calls keep the state the default's calls moved from, their own limit's. 3 spent there, a
/// reset of the default's key leaves them: none more of 3 in the minute, as on a twin that
/// ran the new configuration from the start (3 more where a reset forgot the old states too:
/// the default's reset forgot their budget).
#[test]
fn a_reset_of_the_default_leaves_a_calls_own_window_on_the_old_state_its_budget() {
    let mut differ = Vec::new();
    for strategy in Strategy::ALL {
        for renamed in [false, true] {
            for by_strategy in [false, true] {
                let name = if renamed { "b" } else { "a" };
                let (new_strategy, window) = match (by_strategy, strategy) {
                    (false, _) => (strategy, 2 * MINUTE),
                    (true, Strategy::SlidingWindow) => (Strategy::FixedWindow, MINUTE),
                    (true, _) => (Strategy::SlidingWindow, MINUTE),
                };
                let new = || {
                    let builder = Config::builder().tier(tier(new_strategy, name, window, false));
                    let builder = match renamed {
                        true => builder.tier(tier(new_strategy, "a", window, false)),
                        false => builder,
                    };
                    builder.default_tier(name)
                };
                let own = match by_strategy {
                    false => Options::new().tier("a").window(MINUTE),
                    true => Options::new().tier("a").strategy(strategy),
                };
                let (twin, _) = service(new().build().unwrap());
                let (moved, _) = service(limit(strategy, "a", MINUTE, false).build().unwrap());
                reload(&moved, new());
                let mut seen = Vec::new();
                for s in [&twin, &moved] {
                    let spent = admitted_on(s, "k", &own, 4);
                    now(s.reset("k", None)).unwrap();
                    seen.push((spent, admitted_on(s, "k", &own, 3)));
                }
                if seen[0] != seen[1] {
                    let what = format!("{strategy} renamed {renamed} by strategy {by_strategy}");
                    differ.push(format!("{what}: twin {:?}, moved {:?}", seen[0], seen[1]));
                }
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A reset naming another tier than the calls use (`reset_with`, tier `"c"`, kept) beside
/// a moved default: the default's budget, old and new, stays spent; `"c"`'s spent 3 comes
/// back.
#[test]
fn a_reset_of_another_tier_leaves_the_moved_defaults_states() {
    for strategy in Strategy::ALL {
        let config = |default: &str| {
            Config::builder()
                .tier(tier(strategy, default, MINUTE, false))
                .tier(tier(strategy, "c", MINUTE, false))
                .default_tier(default)
        };
        let (service, _clock) = service(config("a").build().unwrap());
        let c = Options::new().tier("c");
        assert_eq!(admitted(&service, 2), 2);
        assert_eq!(admitted_on(&service, "k", &c, 4), 3);
        reload(&service, config("b"));
        assert_eq!(admitted(&service, 2), 1, "{strategy}");
        assert!(now(service.reset_with("k", &c)).unwrap());
        assert_eq!(
            admitted(&service, 2),
            0,
            "{strategy}: the default's reset too"
        );
        assert_eq!(admitted_on(&service, "k", &c, 4), 3, "{strategy}");
    }
}

/// A memory store a service built from its configuration, handed to a second service
/// (`memory_store`, `with_store`): both reloaded (the tier moved from a minute to two), 3
/// spent through the second with their own minute, the default's key reset through the
/// first, which saw none of those calls: none more in the minute (3 more where a reset forgot
/// the old states unless this service had seen such calls).
#[test]
fn a_reset_through_a_service_sharing_its_memory_store_leaves_a_calls_own_window_its_budget() {
    let strategy = Strategy::SlidingWindow;
    let (first, clock) = service(limit(strategy, "a", MINUTE, false).build().unwrap());
    let store = first.memory_store().unwrap().clone();
    let config = ratelimit_tests::on_its_store(&first, limit(strategy, "a", MINUTE, false));
    let second = RateLimitService::with_store(config, store, std::sync::Arc::new(clock)).unwrap();
    reload(&first, limit(strategy, "a", 2 * MINUTE, false));
    reload(&second, limit(strategy, "a", 2 * MINUTE, false));
    let own = Options::new().window(MINUTE);
    assert_eq!(admitted_on(&second, "k", &own, 3), 3);
    now(first.reset("k", None)).unwrap();
    assert_eq!(admitted_on(&second, "k", &own, 3), 0);
}
