//! Probes of live reload (issue 27): ways a reload could admit more than the tighter of the
//! configurations it switches between, or miscount. Exact counts, a hand-driven clock (a
//! `ManualClock`, or Tokio's paused time for the queue), 64 tasks on the memory store and,
//! with the `redis` feature, a real Redis server and Cluster. Redis decides on its own clock:
//! windows are 20 days there, and the manual clock is advanced only to end a transition.
//!
//! The ten found wrong (a second reload ending the first one's transition, stacked calls not
//! held to a moved limit's old state, queued calls kept under the old configuration,
//! `remaining` overstated during a move, a shadow quota held as if enforced) were fixed in
//! `service/site.rs` (`transition_of` over every kept configuration), `transition.rs`,
//! `stacked.rs` and `wait.rs`; their probes pass.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    rate_limit, Attempt, Config, ConfigBuilder, Error, Module, Options, RateLimitService, Strategy,
    Tier,
};
use ratelimit_tests::until;
use ratelimit_tests::{clock, on_every_store, on_its_store, serial, two_workers};

/// Long enough that no Redis window (on the server's clock) turns during a test.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// The default limit of `n` per [`LONG`] fixed window.
fn limit(n: u64) -> ConfigBuilder {
    Config::builder()
        .strategy(Strategy::FixedWindow)
        .default_limit(n)
        .default_window(LONG)
}

/// A fixed-window tier of `n` per [`LONG`].
fn tier(name: &str, n: u64) -> Tier {
    Tier::new(name, n)
        .window(LONG)
        .strategy(Strategy::FixedWindow)
}

/// What `n` calls, one after the other, admit on `"shared-key"`.
async fn spend(service: &RateLimitService, options: &Options, n: usize) -> u64 {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += u64::from(
            service
                .consume("shared-key", options)
                .await
                .unwrap()
                .allowed,
        );
    }
    admitted
}

/// What 64 tasks, each making `calls` calls on `"shared-key"` with `options`, admit.
async fn by_64(service: &RateLimitService, options: &Options, calls: usize) -> u64 {
    ratelimit_tests::admitted_by_tasks(service, options, 64, calls, false).await
}

/// What 64 tasks, each making `calls` stacked calls on `limits` (all on user key `"u"`),
/// admit (every limit admitting).
async fn stacked_by_64(service: &RateLimitService, limits: &[Options], calls: usize) -> u64 {
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (service, limits) = (service.clone(), limits.to_vec());
            tokio::spawn(async move {
                let pairs: Vec<(&str, &Options)> = limits.iter().map(|o| ("u", o)).collect();
                let mut admitted = 0u64;
                for _ in 0..calls {
                    let decisions = service.consume_all(&pairs).await.unwrap();
                    admitted += u64::from(decisions.iter().all(|d| d.allowed));
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for handle in handles {
        admitted += handle.await.unwrap();
    }
    admitted
}

// ---------------------------------------------------------------------------------------
// Transitions stacked: two reloads inside one old window.
// ---------------------------------------------------------------------------------------

/// 10 -> 3 -> 10 inside one window, 2 spent under the first: the tightening counts the 2,
/// the loosening holds to the 3 for one window: 64 tasks get exactly 1.
#[test]
fn reload_10_to_3_to_10_inside_one_window_never_exceeds_3() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-10-3-10", || limit(10), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 2).await, 2, "{store}");
            let r = service.reload(on_its_store(&service, limit(3))).unwrap();
            assert_eq!(r.tightened, ["default"], "{store}");
            let r = service.reload(on_its_store(&service, limit(10))).unwrap();
            assert_eq!(r.loosened, ["default"], "{store}");
            assert_eq!(by_64(&service, &plain, 3).await, 1, "{store}");
            if store == "memory" {
                clock.advance(LONG);
                assert_eq!(by_64(&service, &plain, 3).await, 10, "{store}");
            }
        });
    }
}

/// 3 -> 10 (loosened: the 3 hold for one old window), then the very same configuration again
/// (a second SIGHUP, a config-management tool re-applying the file) inside that window: the
/// 3 spent are all the old window allows, so 64 tasks must get nothing.
#[test]

fn a_second_identical_reload_inside_a_loosening_keeps_the_old_quota() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-3-10-10", || limit(3), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 3).await, 3, "{store}");
            service.reload(on_its_store(&service, limit(10))).unwrap();
            assert_eq!(by_64(&service, &plain, 1).await, 0, "{store}: first reload");
            let r = service.reload(on_its_store(&service, limit(10))).unwrap();
            assert!(r.loosened.is_empty() && r.changed.is_empty(), "{store}");
            got.push((store, by_64(&service, &plain, 3).await));
        });
    }
    assert!(
        got.iter().all(|&(_, n)| n == 0),
        "admitted in the old window after the second reload: {got:?}"
    );
}

/// The same through a reload that touches only another tier: the default limit, loosened
/// from 3 to 10 by the first reload, keeps its old quota when a second one changes `other`.
#[test]

fn a_reload_of_another_tier_inside_a_loosening_keeps_the_old_quota() {
    let rt = two_workers();
    let clock = clock();
    let with_other = |default: u64, other: u64| limit(default).tier(tier("other", other));
    let (services, _servers) = on_every_store("probe-other-tier", || with_other(3, 5), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 3).await, 3, "{store}");
            service
                .reload(on_its_store(&service, with_other(10, 5)))
                .unwrap();
            assert_eq!(by_64(&service, &plain, 1).await, 0, "{store}: first reload");
            let r = service
                .reload(on_its_store(&service, with_other(10, 6)))
                .unwrap();
            assert_eq!(r.loosened, ["other"], "{store}");
            got.push((store, by_64(&service, &plain, 3).await));
        });
    }
    assert!(
        got.iter().all(|&(_, n)| n == 0),
        "admitted in the old window after the second reload: {got:?}"
    );
}

/// A tier removed and put back with a higher limit inside one window of it: its state (3
/// spent) carries over, and the window it was spent in allowed 3: nothing more.
#[test]

fn a_tier_removed_and_restored_looser_inside_one_window_keeps_its_old_quota() {
    let rt = two_workers();
    let clock = clock();
    let gold = |n: u64| move || Config::builder().tier(tier("gold", n));
    let (services, _servers) = on_every_store("probe-tier-back", gold(3), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        rt.block_on(async {
            let on_gold = Options::new().tier("gold");
            assert_eq!(spend(&service, &on_gold, 3).await, 3, "{store}");
            let r = service
                .reload(on_its_store(
                    &service,
                    Config::builder().tier(tier("silver", 5)),
                ))
                .unwrap();
            assert_eq!(r.removed, ["gold"], "{store}");
            assert!(matches!(
                service.consume("shared-key", &on_gold).await,
                Err(Error::UnknownTier { .. })
            ));
            let r = service.reload(on_its_store(&service, gold(10)())).unwrap();
            assert_eq!(r.added, ["gold"], "{store}");
            got.push((store, by_64(&service, &on_gold, 3).await));
        });
    }
    assert!(
        got.iter().all(|&(_, n)| n == 0),
        "admitted in the old window after the restore: {got:?}"
    );
}

/// A window change (3 per W -> 10 per 2W) holds to the old state for one old window; a
/// second reload inside it (the same configuration again) must not let go of the old state.
#[test]

fn a_second_reload_inside_a_window_change_keeps_checking_the_old_state() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-window-twice", || limit(3), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 3).await, 3, "{store}");
            let longer = || limit(10).default_window(LONG * 2);
            let r = service.reload(on_its_store(&service, longer())).unwrap();
            assert_eq!(r.changed, ["default"], "{store}");
            assert_eq!(by_64(&service, &plain, 1).await, 0, "{store}: first reload");
            service.reload(on_its_store(&service, longer())).unwrap();
            got.push((store, by_64(&service, &plain, 3).await));
        });
    }
    assert!(
        got.iter().all(|&(_, n)| n == 0),
        "admitted in the old window after the second reload: {got:?}"
    );
}

/// Another key prefix is another state: the old one is checked for one old window.
#[test]
fn a_prefix_change_holds_to_the_old_budget_for_one_old_window() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-prefix", || limit(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 2).await, 2, "{store}");
            let running = service.config();
            let moved = limit(10)
                .store(running.store().clone())
                .key_prefix(format!("{}-moved", running.key_prefix()))
                .build()
                .unwrap();
            service.reload(moved).unwrap();
            assert_eq!(by_64(&service, &plain, 3).await, 1, "{store}");
            if store == "memory" {
                clock.advance(LONG);
                // The new state alone, in a window of its own that has turned: 10.
                assert_eq!(by_64(&service, &plain, 3).await, 10, "{store}");
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// Kept configurations a call with its own limit resolves alike (`Kept::resolves_alike`,
// worked out per reload): each differs from the running one in what such a call reads.
// ---------------------------------------------------------------------------------------

/// A call with a limit of its own of 2, its 2 spent; the module's burst raised from 0 to 5
/// (the default limit as it was): the call's capacity 2 -> 7 on the same state, held to 2
/// for one old window. The module's default limit, which such a call never reads, is not
/// all that differs.
#[test]
fn a_module_burst_raised_holds_a_call_with_its_own_limit_to_its_old_capacity() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-own-burst", || limit(100), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let own = Options::new().limit(2);
            assert_eq!(spend(&service, &own, 2).await, 2, "{store}");
            let burst = limit(100).burst_limit(5);
            service.reload(on_its_store(&service, burst)).unwrap();
            assert_eq!(by_64(&service, &own, 2).await, 0, "{store}");
            if store == "memory" {
                clock.advance(LONG);
                assert_eq!(by_64(&service, &own, 2).await, 7, "{store}");
            }
        });
    }
}

/// The same limits under another key prefix: another state, so a call with a limit of its
/// own of 3, 2 spent, gets 1 more in the old window, not a fresh 3.
#[test]
fn a_prefix_change_holds_a_call_with_its_own_limit_to_its_old_state() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-own-prefix", || limit(100), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let own = Options::new().limit(3);
            assert_eq!(spend(&service, &own, 2).await, 2, "{store}");
            let running = service.config();
            let moved = limit(100)
                .store(running.store().clone())
                .key_prefix(format!("{}-moved", running.key_prefix()))
                .build()
                .unwrap();
            service.reload(moved).unwrap();
            assert_eq!(by_64(&service, &own, 3).await, 1, "{store}");
        });
    }
}

/// Two tiers alike but for their names, the default one switched from the first to the
/// second: a call naming no tier, with a limit of its own of 3 and 2 spent under the first,
/// moves to another state (the tier's name is part of its key) and gets 1 more in the old
/// window, not a fresh 3.
#[test]
fn a_default_tier_switched_to_its_twin_holds_a_call_with_its_own_limit_to_its_old_state() {
    let rt = two_workers();
    let clock = clock();
    let twins = |default: &'static str| {
        move || {
            limit(100)
                .tier(tier("free", 5))
                .tier(tier("basic", 5))
                .default_tier(default)
        }
    };
    let (services, _servers) = on_every_store("probe-own-twin", twins("free"), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let own = Options::new().limit(3);
            assert_eq!(spend(&service, &own, 2).await, 2, "{store}");
            service
                .reload(on_its_store(&service, twins("basic")()))
                .unwrap();
            assert_eq!(by_64(&service, &own, 3).await, 1, "{store}");
        });
    }
}

// ---------------------------------------------------------------------------------------
// Prepared sites.
// ---------------------------------------------------------------------------------------

/// A prepared site held across two reloads (5 -> 2 -> 5): not current after either, its calls
/// decided under the running configuration with the transition, counted exactly.
#[test]
fn a_prepared_site_held_across_two_reloads_counts_exactly() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-prepared-2", || limit(5), &clock);
    for (store, service) in services {
        let site = service.prepare(&Options::new()).unwrap();
        rt.block_on(async {
            assert!(site.consume("p").await.unwrap().allowed, "{store}");
            assert!(site.is_current(), "{store}");
            service.reload(on_its_store(&service, limit(2))).unwrap();
            assert!(!site.is_current(), "{store}");
            assert!(site.consume("p").await.unwrap().allowed, "{store}");
            assert!(!site.consume("p").await.unwrap().allowed, "{store}");
            service.reload(on_its_store(&service, limit(5))).unwrap();
            assert!(!site.is_current(), "{store}");
            assert!(!site.consume("p").await.unwrap().allowed, "{store}");
            let status = site.status("p").await.unwrap();
            assert_eq!((status.limit, status.remaining), (2, 0), "{store}");
            let again = service.prepare(&Options::new()).unwrap();
            assert!(again.is_current(), "{store}");
            assert!(!again.consume("p").await.unwrap().allowed, "{store}");
            assert!(again.enforce("p").await.is_err(), "{store}");
            if store == "memory" {
                clock.advance(LONG);
                let mut admitted = 0;
                for _ in 0..8 {
                    admitted += u64::from(site.consume("p").await.unwrap().allowed);
                }
                assert_eq!(admitted, 5, "{store}");
                assert!(!again.consume("p").await.unwrap().allowed, "{store}");
            }
        });
        let total = service.stats().total;
        let want = if store == "memory" { (7, 8) } else { (2, 4) };
        assert_eq!((total.allowed, total.denied), want, "{store}");
    }
}

/// `consume_now` on a stale prepared site: decided under the running configuration on the
/// memory store (a transition to another state too); on Redis, `None` spends nothing.
#[test]
fn consume_now_on_a_stale_prepared_site_decides_under_the_running_configuration() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-now", || limit(5), &clock);
    for (store, service) in services {
        let site = Arc::new(service.prepare(&Options::new()).unwrap());
        rt.block_on(async {
            assert!(site.consume("n").await.unwrap().allowed, "{store}");
            service.reload(on_its_store(&service, limit(2))).unwrap();
            let mut admitted = 0;
            for _ in 0..5 {
                let decided = match site.consume_now("n") {
                    Some(decided) => decided,
                    None => site.consume("n").await,
                };
                admitted += u64::from(decided.unwrap().allowed);
            }
            assert_eq!(admitted, 1, "{store}");
            // Another window (and strategy): the old state, full, is checked with it.
            let moved = limit(10)
                .default_window(LONG * 2)
                .strategy(Strategy::TokenBucket);
            service.reload(on_its_store(&service, moved)).unwrap();
            let mut admitted = 0;
            for _ in 0..5 {
                let decided = match site.consume_now("n") {
                    Some(decided) => decided,
                    None => site.consume("n").await,
                };
                admitted += u64::from(decided.unwrap().allowed);
            }
            // try_consume on the stale site: the pending half decides under the running one.
            for _ in 0..5 {
                let decided = match site.try_consume("n") {
                    Attempt::Decided(decided) => decided,
                    Attempt::Pending(pending) => pending.consume().await,
                };
                admitted += u64::from(decided.unwrap().allowed);
            }
            assert_eq!(admitted, 0, "{store}");
            if store == "memory" {
                assert_eq!(
                    site.consume_now("n").map(|d| d.unwrap().allowed),
                    Some(false)
                );
            }
        });
    }
}

/// A reload that removes the tier a prepared site was prepared for: every call at the site
/// is an error (counted as one), none admitted, whichever entry point.
#[test]
fn a_reload_removing_a_prepared_sites_tier_makes_its_calls_errors() {
    let rt = two_workers();
    let clock = clock();
    let gold = || Config::builder().tier(tier("gold", 5));
    let (services, _servers) = on_every_store("probe-removed", gold, &clock);
    for (store, service) in services {
        let site = Arc::new(service.prepare(&Options::new().tier("gold")).unwrap());
        rt.block_on(async {
            assert!(site.consume("r").await.unwrap().allowed, "{store}");
            let silver = Config::builder().tier(tier("silver", 1_000));
            service.reload(on_its_store(&service, silver)).unwrap();
            assert!(site.consume("r").await.is_err(), "{store}");
            assert!(site.enforce("r").await.is_err(), "{store}");
            assert!(site.status("r").await.is_err(), "{store}");
            assert!(matches!(site.consume_now("r"), Some(Err(_))), "{store}");
            let tried = match site.try_consume("r") {
                Attempt::Decided(decided) => decided,
                Attempt::Pending(pending) => pending.consume().await,
            };
            assert!(tried.is_err(), "{store}");
            assert!(service.prepare(&Options::new().tier("gold")).is_err());
        });
        let total = service.stats().total;
        assert_eq!((total.allowed, total.denied), (1, 0), "{store}");
        assert_eq!(total.errors, 4, "{store}: {total:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Looks, remaining, cost during a transition.
// ---------------------------------------------------------------------------------------

/// `status` during a transition (same state, then another) spends nothing: after 50 looks
/// the calls admit exactly what was left.
#[test]
fn status_during_a_transition_spends_nothing() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-status", || limit(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 1).await, 1, "{store}");
            service.reload(on_its_store(&service, limit(10))).unwrap();
            for _ in 0..50 {
                let status = service.status("shared-key", &plain).await.unwrap();
                assert!(status.allowed, "{store}");
                assert_eq!((status.limit, status.remaining), (3, 2), "{store}");
            }
            let site = service.prepare(&plain).unwrap();
            for _ in 0..50 {
                assert!(site.status("shared-key").await.unwrap().allowed, "{store}");
            }
            assert_eq!(by_64(&service, &plain, 3).await, 2, "{store}");
        });
    }
}

/// The same across a reload to another window: looks on both states spend from neither.
#[test]
fn status_during_a_transition_to_another_state_spends_nothing() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-status-moved", || limit(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 1).await, 1, "{store}");
            let moved = limit(10).default_window(LONG * 2);
            service.reload(on_its_store(&service, moved)).unwrap();
            for _ in 0..50 {
                assert!(
                    service.status("shared-key", &plain).await.unwrap().allowed,
                    "{store}"
                );
            }
            assert_eq!(by_64(&service, &plain, 3).await, 2, "{store}");
        });
    }
}

/// During a transition to another state the decision says what remains: after 2 of the old
/// window's 3 are spent, a look says 1 remains, and the call that spends it says 0 (what the
/// next call gets: a refusal). The HTTP layer's `RateLimit-Remaining` reads this.
#[test]

fn remaining_during_a_transition_to_another_state_is_what_the_next_calls_get() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-remaining", || limit(3), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 2).await, 2, "{store}");
            let moved = limit(10).default_window(LONG * 2);
            service.reload(on_its_store(&service, moved)).unwrap();
            let look = service.status("shared-key", &plain).await.unwrap();
            let last = service.consume("shared-key", &plain).await.unwrap();
            let refused = service.consume("shared-key", &plain).await.unwrap();
            assert!(last.allowed && !refused.allowed, "{store}");
            got.push((store, look.remaining, last.remaining));
        });
    }
    assert!(
        got.iter().all(|&(_, look, last)| (look, last) == (1, 0)),
        "(store, remaining looked, remaining after the last call): {got:?}"
    );
}

/// A cost above the old capacity (3) but within the new (10), during a transition (the
/// default limit on the same state; tier `t` moved to another window; a stacked call; a
/// prepared site): never admitted, nothing spent.
#[test]
fn a_cost_above_the_old_capacity_during_a_transition_is_never_admitted() {
    let rt = two_workers();
    let clock = clock();
    let config = |n: u64, window: Duration| {
        limit(n)
            .tier(tier("t", n).window(window))
            .tier(tier("s", 100))
    };
    let (services, _servers) = on_every_store("probe-cost", || config(3, LONG), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let r = service
                .reload(on_its_store(&service, config(10, LONG * 2)))
                .unwrap();
            assert_eq!(
                (r.loosened, r.changed),
                (vec!["default".to_owned()], vec!["t".to_owned()])
            );
            let costly = Options::new().cost(5);
            let not_admitted =
                |r: Result<ratelimit::Decision, Error>| !matches!(r, Ok(d) if d.allowed);
            assert!(not_admitted(service.consume("c", &costly).await), "{store}");
            let site = service.prepare(&costly).unwrap();
            assert!(not_admitted(site.consume("c").await), "{store}");
            let stacked = service
                .consume_all(&[("c", &costly), ("c", &Options::new().tier("s"))])
                .await;
            assert!(
                !matches!(&stacked, Ok(d) if d.iter().all(|d| d.allowed)),
                "{store}"
            );
            // Nothing was spent: the old window's 3 are all there (at a cost of 3, once).
            let three = Options::new().cost(3);
            assert!(
                service.consume("c", &three).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                !service.consume("c", &three).await.unwrap().allowed,
                "{store}"
            );
            // Another state: the old window's quota is checked with the call, cost and all.
            let on_t = |cost: u64| Options::new().tier("t").cost(cost);
            assert!(
                not_admitted(service.consume("d", &on_t(5)).await),
                "{store}"
            );
            assert!(
                service.consume("d", &on_t(3)).await.unwrap().allowed,
                "{store}"
            );
            assert!(
                !service.consume("d", &on_t(3)).await.unwrap().allowed,
                "{store}"
            );
        });
    }
}

// ---------------------------------------------------------------------------------------
// Stacked calls.
// ---------------------------------------------------------------------------------------

/// A stacked call (`consume_all`) one of whose limits a reload loosened (3 -> 10, same
/// state): the old 3 hold for the old window.
#[test]
fn a_stacked_call_on_a_loosened_limit_holds_to_the_tighter() {
    let rt = two_workers();
    let clock = clock();
    let tiers = |a: u64| move || Config::builder().tier(tier("a", a)).tier(tier("b", 100));
    let (services, _servers) = on_every_store("probe-stack-loose", tiers(3), &clock);
    for (store, service) in services {
        let limits = [Options::new().tier("a"), Options::new().tier("b")];
        rt.block_on(async {
            assert_eq!(stacked_by_64(&service, &limits, 1).await, 3, "{store}");
            let r = service.reload(on_its_store(&service, tiers(10)())).unwrap();
            assert_eq!(r.loosened, ["a"], "{store}");
            assert_eq!(stacked_by_64(&service, &limits, 3).await, 0, "{store}");
            if store == "memory" {
                clock.advance(LONG);
                assert_eq!(stacked_by_64(&service, &limits, 3).await, 10, "{store}");
            }
        });
    }
}

/// A stacked call one of whose limits a reload moved to another window (3 per W -> 10 per
/// 2W): for one old window the old state holds, as it does for a single call; and a cost of
/// 5 (above the old capacity) is never admitted.
#[test]

fn a_stacked_call_on_a_limit_moved_to_another_window_holds_to_the_old_budget() {
    let rt = two_workers();
    let clock = clock();
    let tiers = |a: Tier| move || Config::builder().tier(a.clone()).tier(tier("b", 100));
    let (services, _servers) = on_every_store("probe-stack-moved", tiers(tier("a", 3)), &clock);
    let mut got = Vec::new();
    for (store, service) in services {
        let limits = [Options::new().tier("a"), Options::new().tier("b")];
        rt.block_on(async {
            assert_eq!(stacked_by_64(&service, &limits, 1).await, 3, "{store}");
            let moved = tiers(tier("a", 10).window(LONG * 2))();
            let r = service.reload(on_its_store(&service, moved)).unwrap();
            assert_eq!(r.changed, ["a"], "{store}");
            // The single call sees the old state...
            assert_eq!(spend_u(&service, &limits[0]).await, 0, "{store}: single");
            // ...and so must the stacked one; and a cost above the old capacity, on a key
            // with nothing spent, is refused (an error) as a single call's is.
            let costly = Options::new().tier("a").cost(5);
            let single = service.consume("e", &costly).await;
            assert!(!matches!(single, Ok(d) if d.allowed), "{store}");
            let stacked = service
                .consume_all(&[("e", &costly), ("e", &limits[1])])
                .await
                .is_ok_and(|d| d.iter().all(|d| d.allowed));
            got.push((store, stacked_by_64(&service, &limits, 3).await, stacked));
        });
    }
    assert!(
        got.iter()
            .all(|&(_, admitted, costly)| admitted == 0 && !costly),
        "(store, admitted in the old window, cost 5 admitted): {got:?}"
    );
}

/// One call on user key `"u"`: 1 if admitted.
async fn spend_u(service: &RateLimitService, options: &Options) -> u64 {
    u64::from(service.consume("u", options).await.unwrap().allowed)
}

// ---------------------------------------------------------------------------------------
// Switching off and on; shadow; tier names and windows while calls are in flight.
// ---------------------------------------------------------------------------------------

/// `enabled(false)` admits everything and spends nothing; switched on again inside the
/// window, the 2 spent before count: 64 tasks get exactly 1.
#[test]
fn a_reload_to_disabled_and_back_counts_what_was_spent_before() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store("probe-disabled", || limit(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            let plain = Options::new();
            assert_eq!(spend(&service, &plain, 2).await, 2, "{store}");
            service
                .reload(on_its_store(&service, limit(3).enabled(false)))
                .unwrap();
            assert_eq!(by_64(&service, &plain, 2).await, 128, "{store}");
            service.reload(on_its_store(&service, limit(3))).unwrap();
            assert_eq!(by_64(&service, &plain, 3).await, 1, "{store}");
        });
    }
}

/// What 64 tasks calling `options` 20 times each got: (admitted and not shadowed, shadowed).
async fn shadow_counts_by_64(service: &RateLimitService, options: &Options) -> (u64, u64) {
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (service, options) = (service.clone(), options.clone());
            tokio::spawn(async move {
                let (mut enforced, mut shadowed) = (0u64, 0u64);
                for _ in 0..20 {
                    let d = service.consume("shared-key", &options).await.unwrap();
                    enforced += u64::from(d.allowed && !d.shadowed);
                    shadowed += u64::from(d.shadowed);
                    tokio::task::yield_now().await;
                }
                (enforced, shadowed)
            })
        })
        .collect();
    let mut out = (0, 0);
    for handle in handles {
        let (e, s) = handle.await.unwrap();
        out = (out.0 + e, out.1 + s);
    }
    out
}

/// A shadow tier promoted to enforced while 64 tasks call: the store spends exactly the
/// limit (5) whichever side each call was decided on; nothing after the switch passes.
#[test]
fn a_shadow_tier_promoted_while_64_tasks_call_spends_exactly_its_limit() {
    let rt = two_workers();
    let clock = clock();
    let beta = |shadow: bool| {
        move || {
            let t = tier("beta", 5);
            Config::builder().tier(if shadow { t.shadow() } else { t })
        }
    };
    let (services, _servers) = on_every_store("probe-shadow-race", beta(true), &clock);
    for (store, service) in services {
        let options = Options::new().tier("beta");
        let (enforced, _) = rt.block_on(async {
            let calling = {
                let (service, options) = (service.clone(), options.clone());
                tokio::spawn(async move { shadow_counts_by_64(&service, &options).await })
            };
            tokio::task::yield_now().await;
            service
                .reload(on_its_store(&service, beta(false)()))
                .unwrap();
            calling.await.unwrap()
        });
        assert_eq!(enforced, 5, "{store}");
        rt.block_on(async {
            let d = service.consume("shared-key", &options).await.unwrap();
            assert!(!d.allowed && !d.shadowed, "{store}");
        });
    }
}

/// A shadow tier of 3 promoted to an enforced 10: the old configuration refused nothing
/// (shadow), the new one allows 10, so the tighter of the two is 10: 7 more after the 3
/// spent. The transition must not enforce the shadow quota.
#[test]

fn a_shadow_tier_promoted_and_loosened_is_not_held_to_its_shadow_quota() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store(
        "probe-shadow-loose",
        || Config::builder().tier(tier("beta", 3).shadow()),
        &clock,
    );
    let mut got = Vec::new();
    for (store, service) in services {
        let options = Options::new().tier("beta");
        rt.block_on(async {
            assert_eq!(spend(&service, &options, 5).await, 5, "{store}");
            let enforced = Config::builder().tier(tier("beta", 10));
            service.reload(on_its_store(&service, enforced)).unwrap();
            got.push((store, by_64(&service, &options, 3).await));
        });
    }
    assert!(
        got.iter().all(|&(_, n)| n == 7),
        "admitted after the promotion: {got:?}"
    );
}

/// The default tier renamed (free: 3 -> basic: 10) while 64 tasks call on it: another state,
/// so both are checked for one old window: exactly 3 in all; after it, basic's 10 alone.
#[test]
fn a_default_tier_renamed_while_64_tasks_call_admits_exactly_the_old_budget() {
    let rt = two_workers();
    let clock = clock();
    let named = |name: &'static str, n: u64| {
        move || {
            Config::builder()
                .tier(tier(name, n))
                .tier(tier("other", 1_000))
                .default_tier(name)
        }
    };
    let (services, _servers) = on_every_store("probe-default-tier", named("free", 3), &clock);
    for (store, service) in services {
        let admitted = rt.block_on(async {
            let calling = {
                let service = service.clone();
                tokio::spawn(async move { by_64(&service, &Options::new(), 20).await })
            };
            tokio::task::yield_now().await;
            service
                .reload(on_its_store(&service, named("basic", 10)()))
                .unwrap();
            calling.await.unwrap()
        });
        assert_eq!(admitted, 3, "{store}");
        if store == "memory" {
            clock.advance(LONG);
            let after = rt.block_on(by_64(&service, &Options::new(), 3));
            // basic's 10, less what it spent with free's last calls in the transition.
            assert!(after <= 10, "{store}: {after}");
        }
    }
}

/// A tier's window and strategy changed while 64 tasks call on it (3 per W fixed -> 10 per
/// 2W token bucket): exactly 3 in the old window.
#[test]
fn a_tier_window_changed_while_64_tasks_call_admits_exactly_the_old_budget() {
    let rt = two_workers();
    let clock = clock();
    let (services, _servers) = on_every_store(
        "probe-tier-window",
        || Config::builder().tier(tier("t", 3)),
        &clock,
    );
    for (store, service) in services {
        let options = Options::new().tier("t");
        let admitted = rt.block_on(async {
            let calling = {
                let (service, options) = (service.clone(), options.clone());
                tokio::spawn(async move { by_64(&service, &options, 20).await })
            };
            tokio::task::yield_now().await;
            let moved = Config::builder().tier(
                Tier::new("t", 10)
                    .window(LONG * 2)
                    .strategy(Strategy::TokenBucket),
            );
            service.reload(on_its_store(&service, moved)).unwrap();
            calling.await.unwrap()
        });
        assert_eq!(admitted, 3, "{store}");
    }
}

// ---------------------------------------------------------------------------------------
// Every strategy loosened.
// ---------------------------------------------------------------------------------------

/// Every strategy loosened from 3 to 10 on the same state with 1 spent: 64 tasks get
/// exactly the 2 the old window leaves (memory, Redis, Cluster).
#[test]
fn every_strategy_loosened_from_3_to_10_admits_exactly_3_inside_the_old_window() {
    let rt = two_workers();
    let clock = clock();
    let strategies = [
        ("fw", Strategy::FixedWindow),
        ("sw", Strategy::SlidingWindow),
        ("swc", Strategy::SlidingWindowCounter),
        ("tb", Strategy::TokenBucket),
    ];
    let tiers = move |n: u64| {
        move || {
            strategies.iter().fold(Config::builder(), |b, (name, s)| {
                b.tier(Tier::new(*name, n).window(LONG).strategy(*s))
            })
        }
    };
    let (services, _servers) = on_every_store("probe-strategies", tiers(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            for (name, _) in &strategies {
                let options = Options::new().tier(*name);
                assert_eq!(spend(&service, &options, 1).await, 1, "{store} {name}");
            }
            let r = service.reload(on_its_store(&service, tiers(10)())).unwrap();
            assert_eq!(r.loosened.len(), 4, "{store}");
            for (name, _) in &strategies {
                let options = Options::new().tier(*name);
                assert_eq!(by_64(&service, &options, 3).await, 2, "{store} {name}");
            }
            if store == "memory" {
                clock.advance(LONG);
                for (name, _) in &strategies {
                    let options = Options::new().tier(*name);
                    let after = by_64(&service, &options, 3).await;
                    assert!(after <= 10, "{store} {name}: {after}");
                }
            }
        });
    }
}

/// The same with the reload racing 64 calling tasks: exactly 3 per strategy.
#[test]
fn every_strategy_loosened_while_64_tasks_call_admits_exactly_3() {
    let rt = two_workers();
    let clock = clock();
    let strategies = [
        ("fw", Strategy::FixedWindow),
        ("sw", Strategy::SlidingWindow),
        ("swc", Strategy::SlidingWindowCounter),
        ("tb", Strategy::TokenBucket),
    ];
    let tiers = move |n: u64| {
        move || {
            strategies.iter().fold(Config::builder(), |b, (name, s)| {
                b.tier(Tier::new(*name, n).window(LONG).strategy(*s))
            })
        }
    };
    let (services, _servers) = on_every_store("probe-strategies-race", tiers(3), &clock);
    for (store, service) in services {
        for (i, (name, _)) in strategies.iter().enumerate() {
            let options = Options::new().tier(*name);
            let admitted = rt.block_on(async {
                let calling = {
                    let (service, options) = (service.clone(), options.clone());
                    tokio::spawn(async move { by_64(&service, &options, 10).await })
                };
                tokio::task::yield_now().await;
                // Alternately loosened and tightened back: each loosening from 3 holds to 3.
                let n = if i % 2 == 0 { 10 } else { 3 };
                service.reload(on_its_store(&service, tiers(n)())).unwrap();
                calling.await.unwrap()
            });
            assert_eq!(admitted, 3, "{store} {name}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// The queue.
// ---------------------------------------------------------------------------------------

/// Calls waiting in the queue when a reload tightens their limit (10 -> 3 per second, same
/// state): once the reload is in, no second may admit more than 3, whichever configuration
/// a waiter started under.
#[tokio::test(start_paused = true)]

async fn waiters_across_a_tightening_reload_are_admitted_at_the_new_limit() {
    use ratelimit::testing::TokioClock;
    use tokio::time::Instant;
    let per_second = |n: u64| {
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .default_limit(n)
            .default_window(Duration::from_secs(1))
            .queue_enabled(true)
            .queue_timeout("1m")
            .build()
            .unwrap()
    };
    let service =
        RateLimitService::with_clock(per_second(10), Arc::new(TokioClock::new())).unwrap();
    let start = Instant::now();
    let plain = Options::new();
    assert_eq!(spend(&service, &plain, 10).await, 10);
    let admitted_at = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..30 {
        let (service, admitted_at) = (service.clone(), Arc::clone(&admitted_at));
        tasks.push(tokio::spawn(async move {
            let d = service.consume("shared-key", &Options::new()).await;
            if matches!(d, Ok(d) if d.allowed) {
                admitted_at.lock().unwrap().push(start.elapsed().as_secs());
            }
        }));
    }
    let s = service.clone();
    until(move || s.stats().queue.depth == 30).await;
    service.reload(per_second(3)).unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let mut per_window = std::collections::BTreeMap::new();
    for second in admitted_at.lock().unwrap().iter() {
        *per_window.entry(*second).or_insert(0u64) += 1;
    }
    assert!(
        per_window.values().all(|&n| n <= 3),
        "admitted per second after the reload to 3: {per_window:?}"
    );
}

/// Waiters across a reload that moves the limit to another window (3 per second -> 10 per
/// 2 seconds): once the transition ends, waiters decided under the old configuration spend
/// the old state, which nothing checks any more, on top of the new one's 10.
#[tokio::test(start_paused = true)]

async fn waiters_across_a_window_change_add_nothing_to_the_new_limit() {
    use ratelimit::testing::TokioClock;
    use tokio::time::Instant;
    let config = |n: u64, secs: u64| {
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .default_limit(n)
            .default_window(Duration::from_secs(secs))
            .queue_enabled(true)
            .queue_timeout("1m")
            .build()
            .unwrap()
    };
    let service = RateLimitService::with_clock(config(3, 1), Arc::new(TokioClock::new())).unwrap();
    let start = Instant::now();
    assert_eq!(spend(&service, &Options::new(), 3).await, 3);
    let admitted_at = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |tasks: &mut Vec<_>, n: usize| {
        for _ in 0..n {
            let (service, admitted_at) = (service.clone(), Arc::clone(&admitted_at));
            tasks.push(tokio::spawn(async move {
                let d = service.consume("shared-key", &Options::new()).await;
                if matches!(d, Ok(d) if d.allowed) {
                    admitted_at
                        .lock()
                        .unwrap()
                        .push(start.elapsed().as_millis() as u64);
                }
            }));
        }
    };
    let mut tasks = Vec::new();
    spawn(&mut tasks, 30);
    let s = service.clone();
    until(move || s.stats().queue.depth == 30).await;
    service.reload(config(10, 2)).unwrap();
    // New callers under the new configuration, waiting too.
    spawn(&mut tasks, 30);
    for task in tasks {
        task.await.unwrap();
    }
    let times = admitted_at.lock().unwrap().clone();
    // Every 2 s window of the new limit (aligned: START is a whole even second).
    let mut per_window = std::collections::BTreeMap::new();
    for ms in &times {
        *per_window.entry(ms / 2000).or_insert(0u64) += 1;
    }
    assert!(
        per_window.values().all(|&n| n <= 10),
        "admitted per 2 s window: {per_window:?}"
    );
}

// ---------------------------------------------------------------------------------------
// A module's annotated fn.
// ---------------------------------------------------------------------------------------

#[rate_limit(tier = "probe_gold", key = user)]
async fn probe_gold(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// An annotated fn through two module reloads inside one window (2 -> 3 -> 3): the 2 spent
/// are all the old window allows.
#[test]

fn an_annotated_fn_reloaded_twice_inside_the_old_window_keeps_the_old_quota() {
    let _serial = serial();
    let gold = |n: u64| Module::builder().tier(tier("probe_gold", n));
    let module = gold(2).init().unwrap();
    let rt = two_workers();
    rt.block_on(async {
        probe_gold("g").await.unwrap();
        probe_gold("g").await.unwrap();
        assert!(probe_gold("g").await.is_err());
    });
    module.reload(gold(3)).unwrap();
    rt.block_on(async { assert!(probe_gold("g").await.is_err()) });
    module.reload(gold(3)).unwrap();
    rt.block_on(async { assert!(probe_gold("g").await.is_err(), "second reload") });
}
