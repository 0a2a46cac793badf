//! helper-66's attacks on carrying a moved limit's old state into its new one
//! (`Stacked::carried`, `service/transition.rs`) through the ways a call reaches it that the
//! single call does not take: a stacked call beside a shadow limit, a call's own quota
//! (overrides), penalties and rewards. Memory store, hand-driven clock.
//!
//! The rule probed: a limit a reload moves to another state (window, tier name, default
//! tier, prefix) admits no more than its one bucket (or block) would have, whatever the way
//! in: the debt and the block the old state holds past the old window reach the new state.

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::{bucket_a_minute, now, reload_to as reload, service};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Calls of `options` on `"k"` admitted out of `n`, at the clock's instant.
fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", options)).is_ok_and(|d| d.allowed))
        .count()
}

/// `bucket_a_minute(limit, burst, refill)` on a window of two minutes at the same rate:
/// the same bucket on another state.
fn moved(limit: u64, burst: u64, refill: u64) -> ConfigBuilder {
    bucket_a_minute(limit, burst, refill * 2).default_window(2 * MINUTE)
}

// ---------------------------------------------------------------------------------------
// A stacked call with a shadow limit.
// ---------------------------------------------------------------------------------------

/// Tier `"a"`, a bucket of 10 plus 5 at a token every 6 s (moved by the reload to two
/// minutes at the same rate), and a shadow tier `"s"`, stacked. A stacked call with a shadow
/// limit decides its enforced limits as one stack of their own, which left out the states
/// carried into them: past the old window the moved bucket read a fresh state, 15 admitted
/// where the bucket had given back 10.
#[test]
fn a_moved_bucket_stacked_beside_a_shadow_limit_keeps_its_debt_past_the_old_window() {
    let tiers = |a: Tier| {
        Config::builder()
            .tier(a.strategy(Strategy::TokenBucket).burst(5))
            .tier(Tier::new("s", 1).window(MINUTE).shadow())
    };
    let bucket = Tier::new("a", 10).refill(10).window(MINUTE);
    let (service, clock) = service(tiers(bucket).build().unwrap());
    let (a, s) = (Options::new().tier("a"), Options::new().tier("s"));
    assert_eq!(admitted(&service, &a, 16), 15);
    reload(
        &service,
        tiers(Tier::new("a", 10).refill(20).window(2 * MINUTE)),
    );
    clock.advance(MINUTE);
    let stacked = (0..20)
        .filter(|_| {
            now(service.consume_all(&[("k", &a), ("k", &s)]))
                .is_ok_and(|d| d.iter().all(|d| d.allowed))
        })
        .count();
    assert_eq!(stacked, 10, "the bucket gives back 10 in a minute");
}
