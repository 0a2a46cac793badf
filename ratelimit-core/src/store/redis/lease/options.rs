//! [`LeaseOptions`]: how a Redis store leases hot keys' budgets, and their checks.

use std::time::Duration;

#[cfg(doc)]
use super::super::RedisStore;

/// How a [`RedisStore`] leases hot keys' budgets (see [`RedisOptions::leases`]).
///
/// Leases apply to the single-key decisions that spend (`consume`, `enforce`, the macros) under
/// the fixed window and the token bucket; the sliding strategies, looks (`check`, `status`)
/// and stacked limits always ask Redis. A look sees the units leased out as spent.
///
/// ```
/// use ratelimit_core::{LeaseOptions, RedisOptions};
/// use std::time::Duration;
///
/// let options = RedisOptions::new("redis://127.0.0.1:6379/0")
///     .leases(LeaseOptions::new(32).idle(Duration::from_millis(200)));
/// assert_eq!(options.leases.unwrap().slice, 32);
/// ```
///
/// [`RedisOptions::leases`]: super::super::RedisOptions::leases
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// How many units one round trip reserves (fewer when the window or bucket has less left;
    /// at least the call's cost). At most `processes x (slice - 1)` units per window can sit
    /// unspent on processes that stopped calling (see [`idle`](Self::idle)).
    pub slice: u64,
    /// How long a leased key may go without a call before its unspent units are given back.
    /// Default: 1 s. (A fixed window's units go back only under a window of whole
    /// milliseconds on Redis 7 or later, which tells a key's window by `PEXPIRETIME`; otherwise
    /// they expire with their window.)
    pub idle: Duration,
    /// How many keys hold a lease at once; beyond that, keys ask Redis for every call.
    /// Default: 10 000.
    pub max_keys: usize,
}

impl LeaseOptions {
    /// Slices of `slice` units.
    pub fn new(slice: u64) -> Self {
        LeaseOptions {
            slice,
            idle: Duration::from_secs(1),
            max_keys: 10_000,
        }
    }

    /// Gives back a key's unspent units after it has been idle this long.
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// With at most this many leased keys.
    pub fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys;
        self
    }

    /// Every problem with these options, as `(field, problem)` pairs.
    pub(in crate::store::redis) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.slice == 0 {
            problems.push(("store.leases.slice", "must be at least 1".to_owned()));
        }
        if self.idle.is_zero() {
            problems.push(("store.leases.idle", "must be longer than zero".to_owned()));
        }
        if self.max_keys == 0 {
            problems.push(("store.leases.max_keys", "must be at least 1".to_owned()));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_out_of_range_name_their_field() {
        let problems = LeaseOptions::new(0)
            .idle(Duration::ZERO)
            .max_keys(0)
            .problems();
        let fields: Vec<_> = problems.iter().map(|p| p.0).collect();
        assert_eq!(
            fields,
            [
                "store.leases.slice",
                "store.leases.idle",
                "store.leases.max_keys"
            ]
        );
        assert!(LeaseOptions::new(1).problems().is_empty());
    }
}
