//! helper-57's probes of a reload's transition on a token bucket's own state (`Site::quota_at`,
//! the old quotas `transition_of` keeps on the same state): a bucket's quota is two numbers,
//! its capacity and its refill, and a reload may loosen one while it tightens the other. The
//! rule probed: since a configuration was installed, the calls it enforces never get more than
//! its bucket gives (`capacity + elapsed / interval`), nor, for one old window after a reload,
//! more than the replaced one's gives.
//!
//! Open (ignored, reported): no single quota is the tighter of two buckets whose refills
//! differ. The state is one arrival time, a debt in time: read under a slower refill the
//! faster one's spends are fewer tokens (tried: the lower capacity with the slower refill
//! admitted a third call where the old bucket of 2 had two spent, probes_kept_against seed
//! 2019358). What holds both is a decision under each quota, admitted only when both admit,
//! its spend moving the arrival time by the longer interval: each bucket's bound then holds
//! (k admissions in [a, b] move it at least k of either interval).

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy};
use ratelimit_tests::{now, service};

const MINUTE: Duration = Duration::from_secs(60);

/// A bucket of `limit` refilled `refill` tokens a minute, on the module's default limit.
fn bucket(limit: u64, refill: u64) -> ConfigBuilder {
    Config::builder()
        .strategy(Strategy::TokenBucket)
        .default_limit(limit)
        .token_refill_rate(refill)
        .default_window(MINUTE)
}

fn reload(service: &RateLimitService, builder: ConfigBuilder) {
    let store = service.config().store().clone();
    service
        .reload(builder.store(store).build().unwrap())
        .unwrap();
}

/// One call on `"k"`, admitted or not.
fn call(service: &RateLimitService) -> bool {
    now(service.consume("k", &Options::new())).is_ok_and(|d| d.allowed)
}

/// A bucket of 2 refilled every second, both spent; then a reload to 10 refilled once a
/// minute (the capacity loosened, the refill tightened) on the same state; then a call every
/// second for the minute. The new bucket gives at most its 10 (and one more a minute) since it
/// was installed. Held to the old quota alone for the old window (the lower capacity, picked
/// by capacity alone), the calls refilled at the old second's rate: 59 in the minute.
#[test]
#[ignore = "finding (helper-57, reported, open): on a token bucket's own state a reload's old \
            quota is picked by capacity alone; no one quota is the tighter of two whose \
            refills differ (a slower refill reads the faster one's spends as fewer tokens), so \
            the fix is a decision under both, not a smaller change in Site::quota_at"]
fn a_reload_loosening_a_buckets_capacity_and_slowing_its_refill_never_refills_at_the_old_rate() {
    let (service, clock) = service(bucket(2, 60).build().unwrap());
    assert!(call(&service) && call(&service) && !call(&service));
    reload(&service, bucket(10, 1));
    let mut admitted = 0;
    for _ in 0..59 {
        clock.advance(Duration::from_secs(1));
        admitted += u64::from(call(&service));
    }
    assert!(admitted <= 10, "{admitted} admitted in the minute");
}
