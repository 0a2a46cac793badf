//! helper-73: a reset (`RateLimitService::reset`) during a reload's transition, on a limit a
//! reload moved to another state (its tier renamed, its window changed): the key's budget is
//! forgotten as it is on a twin service that never reloaded. Forgetting only the moved
//! state, the old one, still decided beside it (and carried into it after), kept refusing.
//! Memory store, hand-driven clock.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{now, reload_to as reload, service, START};

const SEC: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier) of 3 on `window` under `strategy`, blocking a key an hour
/// once refused when `blocks`; a bucket refilled 3 a minute whatever the window.
fn limit(strategy: Strategy, name: &str, window: Duration, blocks: bool) -> ConfigBuilder {
    let mut tier = Tier::new(name, 3)
        .burst(0)
        .window(window)
        .strategy(strategy);
    if blocks {
        tier = tier.block_for(HOUR);
    }
    if strategy == Strategy::TokenBucket {
        tier = tier.refill(3 * window.as_secs() / 60);
    }
    Config::builder().tier(tier).default_tier(name)
}

/// Calls of cost 1 on `"k"` admitted of `n`.
fn admitted(service: &RateLimitService, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
        .count()
}

/// 3 spent on the twin and on a limit moved to tier `"b"` (and, with `window`, to it), a
/// refusal (an hour's block where the limit blocks), then the key reset at once (inside the
/// old window) or 90 s on (past it, where a bucket's debt or a block is carried into the
/// moved state): after the reset, each admits 3 of 5, as a fresh key does.
#[test]
fn a_reset_beside_a_moved_limit_forgets_the_budget_as_the_twin_does() {
    let mut differ = Vec::new();
    for strategy in Strategy::ALL {
        for blocks in [false, true] {
            for window in [MINUTE, 2 * MINUTE] {
                for later in [Duration::ZERO, 30 * SEC, 90 * SEC] {
                    let (twin, twin_clock) =
                        service(limit(strategy, "a", MINUTE, blocks).build().unwrap());
                    let (moved, clock) =
                        service(limit(strategy, "a", MINUTE, blocks).build().unwrap());
                    reload(&moved, limit(strategy, "b", window, blocks));
                    for s in [&twin, &moved] {
                        assert_eq!(admitted(s, 4), 3);
                    }
                    for c in [&twin_clock, &clock] {
                        c.set(START + later);
                    }
                    now(twin.reset("k", None)).unwrap();
                    now(moved.reset("k", None)).unwrap();
                    let (t, m) = (admitted(&twin, 5), admitted(&moved, 5));
                    if (t, m) != (3, 3) {
                        let what = format!("{strategy} blocks {blocks} {window:?} +{later:?}");
                        differ.push(format!("{what}: twin {t}, moved {m}"));
                    }
                }
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The default tier moved from `"a"` onto `"b"`, both kept: the default's old state is tier
/// `"a"`'s own. A reset of the default forgets `"b"`'s state and leaves `"a"`'s budget, which
/// calls naming `"a"` still spend from, as it is: 3 spent there, still refused.
#[test]
fn a_reset_beside_a_moved_default_tier_leaves_the_old_tiers_own_state() {
    for strategy in Strategy::ALL {
        let tiers = |default: &str| {
            let tier = |name: &str| {
                Tier::new(name, 3)
                    .burst(0)
                    .window(MINUTE)
                    .strategy(strategy)
            };
            Config::builder()
                .tier(tier("a"))
                .tier(tier("b"))
                .default_tier(default)
        };
        let (service, _clock) = service(tiers("a").build().unwrap());
        assert_eq!(admitted(&service, 4), 3, "{strategy}");
        reload(&service, tiers("b"));
        now(service.reset("k", None)).unwrap();
        let a = Options::new().tier("a");
        let refused = now(service.consume("k", &a)).unwrap();
        assert!(!refused.allowed, "{strategy}: tier a's budget reset too");
    }
}
