//! helper-66's probes of how long a moved limit's old state is carried for, and of threads
//! racing on the first calls after a move. Memory store, hand-driven clock.
//!
//! - Threads racing: the carry is made in the stacked decision's atomic step, so threads on
//!   the first calls after a move get exactly what one bucket leaves (no carry twice, none
//!   missed), by every entry point at once.
//! - Horizons: a reload that moves a limit is kept while the old state may hold something
//!   (`Kept::carrying`), a call's own block and the latest penalty's debt included; past 64
//!   such reloads held at once the next is refused (`InvalidConfig`), never a carry dropped.
//!   What that costs is measured here: one call with its own block of two hours, or one
//!   penalty of a million tokens, holds every moving reload that long.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Error, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{bucket_a_minute, now, on_its_store, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// The bucket of 10 plus 5 at a token every 6 s on `minutes`, and tier `"z"` that never
/// refuses (for stacked calls).
fn on(minutes: u32) -> ConfigBuilder {
    bucket_a_minute(10, 5, 10 * u64::from(minutes))
        .default_window(MINUTE * minutes)
        .tier(Tier::new("z", 1_000).window(MINUTE))
}

/// 8 threads of 5 calls each on `"k"`, by turns alone, through a prepared site and stacked
/// beside `"z"`, released together: how many admitted.
fn race(service: &RateLimitService) -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    let admitted = AtomicU32::new(0);
    let barrier = std::sync::Barrier::new(8);
    let site = service.prepare(&Options::new()).unwrap();
    let z = Options::new().tier("z");
    std::thread::scope(|s| {
        for t in 0..8 {
            let (admitted, barrier, site, z) = (&admitted, &barrier, &site, &z);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..5 {
                    let allowed = match t % 3 {
                        0 => now(service.consume("k", &Options::new())).unwrap().allowed,
                        1 => site.consume_now("k").unwrap().unwrap().allowed,
                        _ => now(service.consume_all(&[("k", &Options::new()), ("k", z)]))
                            .unwrap()
                            .iter()
                            .all(|d| d.allowed),
                    };
                    admitted.fetch_add(u32::from(allowed), Ordering::SeqCst);
                }
            });
        }
    });
    admitted.into_inner()
}

/// Threads racing in the old window (both states decided with each call): exactly the
/// bucket's 15, nothing spent before.
#[test]
fn threads_racing_in_the_old_window_get_exactly_the_bucket() {
    let (service, _clock) = service(on(1).build().unwrap());
    reload(&service, on(2));
    assert_eq!(race(&service), 15);
}

/// 15 spent, moved; past the old window (30 s still owed) threads race on the first calls
/// (each may carry the old state): exactly the 10 one bucket leaves.
#[test]
fn threads_racing_on_the_first_calls_past_the_old_window_get_exactly_what_is_carried() {
    let (service, clock) = service(on(1).build().unwrap());
    for _ in 0..15 {
        assert!(now(service.consume("k", &Options::new())).unwrap().allowed);
    }
    reload(&service, on(2));
    clock.advance(MINUTE);
    assert_eq!(race(&service), 10);
}

/// Tier `name`, `limit` a minute (a fixed window, no block), the default tier. (Each reload
/// below installs a configuration of its own: one with the running one's limits is not kept
/// twice.)
fn tier(name: &str, limit: u64) -> ConfigBuilder {
    Config::builder()
        .tier(Tier::new(name, limit).window(MINUTE))
        .default_tier(name)
}

/// Reloads to `to(i)` every minute and a second, 80 of them: the index of the first refused,
/// and why, if any.
fn reloads_after(
    service: &RateLimitService,
    clock: &ratelimit::ManualClock,
    to: impl Fn(usize) -> ConfigBuilder,
) -> Option<(usize, Error)> {
    for i in 0..80 {
        clock.advance(MINUTE + Duration::from_secs(1));
        if let Err(e) = service.reload(on_its_store(service, to(i))) {
            return Some((i, e));
        }
    }
    None
}

/// A call's own block of two hours, once: reloads that move it (the default tier renamed
/// every minute and a second) are kept for it, and the 65th within the two hours is refused
/// (the running configuration kept), never the block forgotten; reloads that only change the
/// tier's limit on its own state are not kept for it: all 80 taken.
#[test]
fn a_calls_own_block_keeps_the_reloads_that_move_it_and_only_those() {
    let own = Options::new()
        .limit(2)
        .strategy(Strategy::FixedWindow)
        .block_for(2 * HOUR);
    let (moving, clock) = service(tier("t", 100).build().unwrap());
    assert!(now(moving.consume("k", &own)).unwrap().allowed);
    let refused = reloads_after(&moving, &clock, |i| tier(&format!("t{i}"), 100));
    let (i, e) = refused.expect("every moving reload taken while 64 were kept");
    assert_eq!(i, 64, "{e}");
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    let (staying, clock) = service(tier("t", 100).build().unwrap());
    assert!(now(staying.consume("k", &own)).unwrap().allowed);
    let refused = reloads_after(&staying, &clock, |i| tier("t", 101 + i as u64));
    assert!(refused.is_none(), "{refused:?}");
}

/// What one large penalty costs: a million tokens on a bucket of 10 a minute (69 days owed)
/// keeps every reload that moves the bucket for those 69 days, so the 65th moving reload is
/// refused (measured at the 65th, 65 minutes on), the running configuration kept. Without
/// the penalty, the same reloads are let go after the bucket's window and tolerance: all 80
/// taken. (An application that penalizes by the million and renames tiers often should
/// reload less often than 64 times in such a debt, or cap its penalties.)
#[test]
fn a_penalty_of_a_million_tokens_keeps_every_moving_reload_while_it_is_owed() {
    let named = |name: &str| {
        let tier = Tier::new(name, 10)
            .refill(10)
            .window(MINUTE)
            .strategy(Strategy::TokenBucket);
        Config::builder().tier(tier).default_tier(name)
    };
    let renamed = |i: usize| named(&format!("t{i}"));
    let (penalized, clock) = service(named("t").build().unwrap());
    now(penalized.penalize("k", &Options::new(), 1_000_000)).unwrap();
    let (i, e) = reloads_after(&penalized, &clock, renamed).expect("every reload taken");
    assert_eq!(i, 64, "{e}");
    let (plain, clock) = service(named("t").build().unwrap());
    assert!(reloads_after(&plain, &clock, renamed).is_none());
}

/// A call's own bucket of the configured one's window and strategy writes the configured
/// one's state: 15 of its own at a token a minute (15 minutes owed), then the default tier
/// renamed. Plain calls at +300 s, past the configured bucket's carrying (150 s): the one
/// bucket still owes 10 minutes, past the plain calls' tolerance of 90 s, so none admitted,
/// moved or not. The old state was carried for the plain calls' quota only: 15 admitted on
/// the moved state alone (probes_fleet_horizon_redis, on Redis).
#[test]
fn plain_calls_carry_the_debt_a_calls_own_bucket_left_on_their_state() {
    let named = ratelimit_tests::moves::bucket;
    let own = Options::new().refill(1);
    let mut counts = Vec::new();
    for moves in [false, true] {
        let (service, clock) = service(named("a").build().unwrap());
        let spent = (0..16)
            .filter(|_| now(service.consume("k", &own)).unwrap().allowed)
            .count();
        if moves {
            reload(&service, named("b"));
        }
        clock.advance(Duration::from_secs(300));
        let plain = (0..16)
            .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
            .count();
        counts.push((spent, plain));
    }
    assert_eq!(counts[0], (15, 0), "the one bucket");
    assert_eq!(counts[1], counts[0], "moved");
}
