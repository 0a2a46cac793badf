//! What the Lua scripts can count exactly ([`supports`]) and what a quota is to them
//! ([`arguments`]): the numbers every script, the stacked one and the lease's take.

use crate::error::Error;
use crate::quota::{Quota, QuotaError};
use crate::store::Stacked;
use crate::syntax::Strategy;

/// The Redis store counts in microseconds (the resolution of `TIME`) with Lua's doubles,
/// exact below 2^53: this keeps every product in the scripts below 2^51.
const LUA_EXACT: u128 = 1 << 51;

/// Whether the Redis scripts can count `quota` exactly.
pub(crate) fn supports(quota: &Quota) -> Result<(), QuotaError> {
    let unsupported = |reason| QuotaError::Unsupported {
        store: "the Redis store",
        reason,
    };
    if quota.block_nanos() % 1_000 != 0 {
        return Err(unsupported(
            "it counts in microseconds: the block must be a whole number of them",
        ));
    }
    let window = quota.window().as_nanos();
    if window % 1_000 != 0 {
        return Err(unsupported(
            "it counts in microseconds: the window must be a whole number of them",
        ));
    }
    let window_us = window / 1_000;
    let capacity = quota.written_capacity() as u128;
    match quota.strategy() {
        Strategy::SlidingWindowCounter if capacity * window_us > LUA_EXACT => Err(unsupported(
            "limit + burst times the window in microseconds must be at most 2^51 for the \
             sliding window counter: use a shorter window or another strategy",
        )),
        Strategy::TokenBucket => {
            let interval = window_us / quota.refill_per_window().max(1) as u128;
            if interval == 0 {
                Err(unsupported(
                    "the refill rate is above one token per microsecond",
                ))
            } else if interval * capacity > LUA_EXACT {
                Err(unsupported(
                    "limit + burst is too large for so slow a refill rate",
                ))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// ARGV[1] and ARGV[2] of `quota`'s script (see each script's header): the window and the
/// capacity, or for the token bucket the emission interval and the tolerance, in
/// microseconds. `quota` is one [`supports`] accepts.
pub(super) fn arguments(quota: &Quota) -> [u64; 2] {
    let window_us = quota.window().as_micros() as u64;
    let capacity = quota.capacity();
    match quota.strategy() {
        Strategy::TokenBucket => {
            let interval = window_us / quota.refill_per_window().max(1);
            [interval, interval * capacity]
        }
        _ => [window_us, capacity],
    }
}

/// Every carried state's quota and the quota it is carried into counted by whole
/// microseconds, as every limit the scripts decide.
pub(super) fn supported(stacked: &Stacked<'_>) -> Result<(), Error> {
    for carry in stacked.carried() {
        supports(carry.quota)?;
        supports(stacked.checks()[carry.into].quota)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn quotas_redis_cannot_count_exactly_are_refused() {
        let text = |q: Quota| supports(&q).unwrap_err().to_string();
        let q = Quota::new(10, Duration::from_nanos(1_500)).unwrap();
        assert!(text(q).contains("microseconds"));
        let q = Quota::new(1_000_000_000, Duration::from_secs(3_600))
            .unwrap()
            .with_strategy(Strategy::SlidingWindowCounter);
        assert!(text(q).contains("2^51"));
        let q = Quota::new(10, Duration::from_secs(1))
            .unwrap()
            .with_refill(2_000_000)
            .unwrap()
            .with_strategy(Strategy::TokenBucket);
        assert!(text(q).contains("microsecond"));
        for strategy in Strategy::ALL {
            let q = Quota::per_minute(1_000).unwrap().with_strategy(strategy);
            assert_eq!(supports(&q), Ok(()));
        }
    }
}
