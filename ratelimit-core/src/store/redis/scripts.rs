//! The Lua scripts (`lua/*.lua`), one per strategy, and the limits within which they count
//! exactly.

use std::sync::LazyLock;

use redis::Script;

use crate::quota::{Quota, QuotaError};
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
    let window = quota.window().as_nanos();
    if window % 1_000 != 0 {
        return Err(unsupported(
            "it counts in microseconds: the window must be a whole number of them",
        ));
    }
    let window_us = window / 1_000;
    let capacity = quota.capacity() as u128;
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

/// Each strategy's script behind the prelude they share (`lua/prelude.lua`: the key, cost,
/// commit flag, Redis time and integer division). Redis has no `require`, so one script is
/// the two files end to end.
macro_rules! lua {
    ($file:literal) => {
        concat!(
            include_str!("../../../lua/prelude.lua"),
            include_str!(concat!("../../../lua/", $file))
        )
    };
}

/// A strategy's script as a function of `(KEYS, ARGV, fell)`, for the stacked and lease
/// scripts and the fixed window's hot path (`fell`: see `lua/fixed_window.lua`).
macro_rules! wrapped {
    ($name:literal, $file:literal) => {
        concat!(
            "local function ",
            $name,
            "(KEYS, ARGV, fell)\n",
            include_str!("../../../lua/prelude.lua"),
            include_str!(concat!("../../../lua/", $file)),
            "\nend\n"
        )
    };
}

// For the lease script (`lease.rs`), which runs two of the scripts as functions too.
pub(super) use wrapped;

/// The fixed window's hot path (`lua/fixed_window_hot.lua`, see its header) behind the line
/// that increments the key, with the whole script behind it as a function, called only on
/// state of the wrong shape for its error reply (a look: `fell` answers before anything is
/// read or written).
macro_rules! fixed_window_hot {
    ($increment:literal) => {
        concat!(
            $increment,
            "\n",
            include_str!("../../../lua/fixed_window_hot.lua"),
            wrapped!("fixed_window", "fixed_window.lua"),
            "return fixed_window(KEYS, {ARGV[2] .. '000', ARGV[1], ARGV[3] or '1', '0', '1'}, true)\n"
        )
    };
}

/// Several limits as one decision (`lua/stacked.lua`), over the four scripts as functions.
const STACKED: &str = concat!(
    wrapped!("fixed_window", "fixed_window.lua"),
    wrapped!("sliding_log", "sliding_log.lua"),
    wrapped!("sliding_counter", "sliding_counter.lua"),
    wrapped!("token_bucket", "token_bucket.lua"),
    include_str!("../../../lua/stacked.lua"),
);

pub(super) static STACKED_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STACKED));

/// The number `lua/stacked.lua` knows a strategy by: its index in [`SOURCES`], from 1 (the
/// order of its `scripts` table and of [`STACKED`]'s functions).
pub(super) fn stacked_index(strategy: Strategy) -> usize {
    index(strategy) + 1
}

/// The single-key scripts: the four strategies' (in the order of [`index`]), then the fixed
/// window's hot path for a cost of 1 ([`HOT_ONE`]) and for more ([`HOT_MORE`]).
const SOURCES: [&str; 6] = [
    concat!("local fell\n", lua!("fixed_window.lua")),
    lua!("sliding_log.lua"),
    lua!("sliding_counter.lua"),
    lua!("token_bucket.lua"),
    fixed_window_hot!("local cost, count = 1, redis.pcall('INCR', KEYS[1])"),
    fixed_window_hot!("local cost, count = ARGV[3] + 0, redis.pcall('INCRBY', KEYS[1], ARGV[3])"),
];
const HOT_ONE: usize = 4;
const HOT_MORE: usize = 5;

pub(super) static SCRIPTS: LazyLock<[Script; 6]> = LazyLock::new(|| SOURCES.map(Script::new));

fn index(strategy: Strategy) -> usize {
    match strategy {
        Strategy::FixedWindow => 0,
        Strategy::SlidingWindow => 1,
        Strategy::SlidingWindowCounter => 2,
        Strategy::TokenBucket => 3,
    }
}

/// The source of [`SCRIPTS`]`[script]`.
#[cfg(test)]
pub(super) fn source(script: usize) -> &'static str {
    SOURCES[script]
}

/// One single-key decision as Redis is asked it: which of [`SCRIPTS`], with which arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    /// The index in [`SCRIPTS`].
    pub(super) script: usize,
    args: [u64; 5],
    len: usize,
}

impl Call {
    /// The script's `ARGV`, as numbers (sent as decimal text).
    pub(super) fn args(&self) -> &[u64] {
        &self.args[..self.len]
    }
}

/// How a decision on `quota` is asked: `cost` (0 to look at the level), `commit` to record an
/// admitted call, `full` for the full reply (see each script's header). A fixed window of
/// whole milliseconds that records without the full reply is its hot path, with the
/// arguments it reads: the capacity, the window in milliseconds, and the cost when not 1.
/// `quota` is one [`supports`] accepts.
pub(super) fn call(quota: &Quota, cost: u64, commit: bool, full: bool) -> Call {
    let window_us = quota.window().as_micros() as u64;
    if quota.strategy() == Strategy::FixedWindow
        && commit
        && !full
        && cost > 0
        && window_us % 1_000 == 0
    {
        let (script, len) = if cost == 1 {
            (HOT_ONE, 2)
        } else {
            (HOT_MORE, 3)
        };
        return Call {
            script,
            args: [quota.capacity(), window_us / 1_000, cost, 0, 0],
            len,
        };
    }
    let [first, second] = arguments(quota);
    Call {
        script: index(quota.strategy()),
        args: [first, second, cost, u64::from(commit), u64::from(full)],
        len: 5,
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
