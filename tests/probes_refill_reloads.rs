//! helper-57's probes of a reload's transition on a token bucket's own state (`Site::quota_at`,
//! the old quotas `transition_of` keeps on the same state): a bucket's quota is two numbers,
//! its capacity and its refill, and a reload may loosen one while it tightens the other. The
//! rule probed: since a configuration was installed, the calls it enforces never get more than
//! its bucket gives (`capacity + elapsed / interval`), nor, for one old window after a reload,
//! more than the replaced one's gives.
//!
//! Closed: the state is one arrival time, a debt in time, so the quota a call is held to is
//! `Quota::held_to`'s: the longest interval, and the least debt of each old quota's own
//! tolerance and the new one's capacity at that interval (the lower capacity with the slower
//! refill admitted a third call where the old bucket of 2 had two spent, probes_kept_against
//! seed 2019358; the lower capacity alone refilled at the old rate, below).

use std::time::Duration;

use ratelimit::{ConfigBuilder, Options, RateLimitService};
use ratelimit_tests::{bucket_a_minute, now, reload_to as reload, service};

/// A bucket of `limit` refilled `refill` tokens a minute, on the module's default limit.
fn bucket(limit: u64, refill: u64) -> ConfigBuilder {
    bucket_a_minute(limit, 0, refill)
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

/// A bucket of 10 refilled 600 a minute (a token every 100 ms), all 10 spent; then a reload
/// to the same capacity refilled 60 a minute (a token a second) on the same state, and calls
/// at once. The old bucket gives none until 100 ms have passed. Read under the new quota, its
/// 10 spends (a debt of 1 s) were one token: 9 were admitted at once, 19 in no time where
/// either bucket gives 10.
#[test]
fn a_reload_slowing_a_buckets_refill_never_reads_the_old_spends_as_fewer_tokens() {
    let (service, clock) = service(bucket(10, 600).build().unwrap());
    let spent = (0..11).filter(|_| call(&service)).count();
    assert_eq!(spent, 10);
    reload(&service, bucket(10, 60));
    let at_once = (0..20).filter(|_| call(&service)).count();
    assert_eq!(at_once, 0, "admitted at once on a spent bucket");
    // Through the old window the calls stay within the old bucket's refill too.
    let mut admitted = 0;
    for _ in 0..600 {
        clock.advance(Duration::from_millis(100));
        admitted += u64::from(call(&service));
    }
    assert!(admitted <= 60, "{admitted} admitted in the minute");
}

/// A reload that only slows a bucket's refill is reported as tightened, one that only speeds
/// it up as loosened, one that raises the capacity and slows the refill
/// as both (before, a refill change alone was reported as nothing changed).
#[test]
fn a_reload_changing_a_buckets_refill_is_reported_as_tightened_or_loosened() {
    let (service, _clock) = service(bucket(10, 60).build().unwrap());
    let store = service.config().store().clone();
    let reload = |builder: ConfigBuilder| {
        let r = service
            .reload(builder.store(store.clone()).build().unwrap())
            .unwrap();
        (r.tightened, r.loosened)
    };
    let default = || vec!["default".to_owned()];
    assert_eq!(reload(bucket(10, 6)), (default(), vec![]));
    assert_eq!(reload(bucket(10, 60)), (vec![], default()));
    assert_eq!(reload(bucket(20, 1)), (default(), default()));
}
