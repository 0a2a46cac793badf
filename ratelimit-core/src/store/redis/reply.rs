//! The scripts' replies, read as verdicts, and the estimate of Redis' clock that the short
//! replies are read with.
//!
//! Every script can give the full reply, five integers `{allowed, remaining, reset_at,
//! retry_after or -1, now}` in microseconds. A call that records can get a short one instead,
//! one integer, with no time read (fixed window) or no table built inside Redis, costs that
//! show against the peers' scripts:
//! - a fixed window of whole milliseconds (see `lua/fixed_window_hot.lua`): for an admitted
//!   call, the window's count alone; its window is the one that holds Redis' `TIME` (windows
//!   are aligned to multiples of the window since the epoch), so its end, `reset_at`, is placed
//!   with the estimate of Redis' clock. A call sent within a few milliseconds of a window's
//!   edge (four half round trips of the last measurement and [`EDGE_SLACK_US`]) asks for the
//!   full reply instead, since there the estimate cannot tell the window; only a round trip
//!   slower than that margin can still place a count one window early or late; after Redis'
//!   clock went back it is the end of the window of `TIME`, not of the recorded
//!   one. For a refusal, the count and the milliseconds left in the window, Redis' own, so
//!   the wait (`retry_after`) is exact;
//! - the sliding log (see `algorithm/sliding_log.lua`), for an admitted call recorded at Redis'
//!   `TIME`: the units in the window with the call's, full again one window after that time;
//! - the sliding window counter (see `algorithm/sliding_counter.lua`), for an admitted call recorded
//!   in the window of Redis' `TIME` (of 10 ms or more): the remaining calls and the window's
//!   number modulo [`WINDOWS`], resolved to the nearest such window to the estimate of Redis'
//!   clock (so exact while the estimate is within 512 windows, 5 s at the least).
//!
//! The counts and the milliseconds left are Redis' own; only the absolute times of the
//! decision (`reset_at`) are placed with [`RedisClock`], this process's estimate of Redis'
//! `TIME`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;
use crate::syntax::Strategy;

/// How long an estimate of Redis' clock is used before a full reply refreshes it.
const REFRESH_US: u64 = 1_000_000;

/// The modulus of the window numbers a short reply carries.
pub(super) const WINDOWS: u64 = 1_024;

/// A script's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// The five integers, read.
    Full(Verdict, Nanos),
    /// The fixed window's short reply to a refusal: the count with the call's cost added,
    /// and the milliseconds from Redis' millisecond to the window's end.
    Short { count: u64, left_ms: u64 },
    /// The fixed window's short reply to an admitted call: the count with its cost, at most
    /// the capacity, in the window that holds Redis' time.
    Admitted { count: u64 },
    /// The sliding log's short reply: an admitted call, recorded at Redis' time, and the
    /// units in the window with its cost.
    Logged { count: u64 },
    /// The sliding window counter's short reply: an admitted call, recorded in the window
    /// whose number (window start / window) is `number` modulo [`WINDOWS`].
    Counted { number: u64, remaining: u64 },
}

impl Reply {
    /// Reads the reply of `quota`'s script; `None` for anything else.
    pub(super) fn parse(value: &redis::Value, quota: &Quota) -> Option<Reply> {
        match value {
            redis::Value::Int(n) if quota.strategy() == Strategy::SlidingWindow => {
                Some(Reply::Logged {
                    count: u64::try_from(*n).ok()?,
                })
            }
            redis::Value::Int(n) if quota.strategy() == Strategy::SlidingWindowCounter => {
                let n = u64::try_from(*n).ok()?;
                let m = quota.capacity().checked_add(1)?;
                Some(Reply::Counted {
                    number: n / m,
                    remaining: n % m,
                })
            }
            redis::Value::Int(n) if quota.strategy() == Strategy::FixedWindow => {
                let n = u64::try_from(*n).ok()?;
                if n <= quota.capacity() {
                    return Some(Reply::Admitted { count: n });
                }
                let m = quota.capacity().checked_mul(2)?.checked_add(1)?;
                Some(Reply::Short {
                    count: n % m,
                    left_ms: n / m,
                })
            }
            redis::Value::Array(items) => {
                let ints: Vec<i64> = items
                    .iter()
                    .map(|v| match v {
                        redis::Value::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect::<Option<_>>()?;
                match ints[..] {
                    [count, left] if quota.strategy() == Strategy::FixedWindow => {
                        Some(Reply::Short {
                            count: u64::try_from(count).ok()?,
                            left_ms: u64::try_from(left).ok()?,
                        })
                    }
                    _ => full(&ints).map(|(v, at)| Reply::Full(v, at)),
                }
            }
            _ => None,
        }
    }

    /// The verdict, and Redis' time it is placed at: for a short reply, `now_us` (Redis'
    /// time in microseconds, or this process's estimate of it); `cost` is the call's, `quota`
    /// the one it was decided under.
    pub(super) fn verdict(self, cost: u64, quota: &Quota, now_us: u64) -> Option<(Verdict, Nanos)> {
        let capacity = quota.capacity();
        let (count, left_ms) = match self {
            Reply::Full(verdict, at) => return Some((verdict, at)),
            Reply::Short { count, left_ms } => (count, left_ms),
            Reply::Logged { count } | Reply::Admitted { count } => {
                if count < cost || count > capacity {
                    return None;
                }
                let window_us = u64::try_from(quota.window().as_micros()).ok()?;
                // The log is full again one window after the call; the fixed window at the
                // end of the window that holds Redis' time.
                let reset_us = match self {
                    Reply::Logged { .. } => now_us.checked_add(window_us)?,
                    _ => (now_us / window_us.max(1) + 1).checked_mul(window_us)?,
                };
                return admitted(capacity - count, reset_us, now_us);
            }
            Reply::Counted { number, remaining } => {
                if number >= WINDOWS || remaining.checked_add(cost)? > capacity {
                    return None;
                }
                let window_us = u64::try_from(quota.window().as_micros()).ok()?;
                let start = nearest_window(number, now_us, window_us)?.checked_mul(window_us)?;
                return admitted(remaining, start.checked_add(2 * window_us)?, now_us);
            }
        };
        if left_ms == 0 || count < cost {
            return None;
        }
        let reset_at = (now_us / 1_000).checked_add(left_ms)?.checked_mul(1_000)?;
        let allowed = count <= capacity;
        let verdict = Verdict {
            allowed,
            remaining: if allowed {
                capacity - count
            } else {
                capacity.saturating_sub(count - cost)
            },
            reset_at: reset_at.checked_mul(1_000)?,
            retry_after: (!allowed).then(|| (reset_at - now_us) * 1_000),
        };
        Some((verdict, now_us.checked_mul(1_000)?))
    }
}

/// An admitted call's verdict from a short reply: `remaining` left, full again at `reset_us`,
/// decided at `now_us`.
fn admitted(remaining: u64, reset_us: u64, now_us: u64) -> Option<(Verdict, Nanos)> {
    let verdict = Verdict {
        allowed: true,
        remaining,
        reset_at: reset_us.checked_mul(1_000)?,
        retry_after: None,
    };
    Some((verdict, now_us.checked_mul(1_000)?))
}

/// The number (start / `window_us`) of the window nearest to the one `now_us` is in whose
/// number is `number` modulo [`WINDOWS`].
fn nearest_window(number: u64, now_us: u64, window_us: u64) -> Option<u64> {
    let here = now_us / window_us.max(1);
    let ahead = (number + WINDOWS - here % WINDOWS) % WINDOWS;
    if ahead < WINDOWS / 2 {
        here.checked_add(ahead)
    } else {
        here.checked_sub(WINDOWS - ahead)
    }
}

/// `{allowed, remaining, reset_at, retry_after or -1, now}` in microseconds, to nanoseconds
/// (a token bucket's state shift after them, when not 0, is for the stacked script's
/// receipts: not part of the verdict).
pub(super) fn full(reply: &[i64]) -> Option<(Verdict, Nanos)> {
    let (&[allowed, remaining, reset_at, retry_after, now]
    | &[allowed, remaining, reset_at, retry_after, now, _]) = reply
    else {
        return None;
    };
    let nanos = |us: i64| u64::try_from(us).ok()?.checked_mul(1_000);
    let verdict = Verdict {
        allowed: allowed == 1,
        remaining: u64::try_from(remaining).ok()?,
        reset_at: nanos(reset_at)?,
        retry_after: match retry_after {
            -1 => None,
            us => Some(nanos(us)?),
        },
    };
    Some((verdict, nanos(now)?))
}

/// This process's estimate of Redis' `TIME`: the offset from its monotonic clock measured on the
/// last full reply, the midpoint of the round trip standing for the instant Redis read it
/// (so the estimate is within half a round trip, plus the clocks' drift since, at most a
/// second). It only places the short reply's decision in time (`reset_at`); what is admitted
/// is decided by Redis alone.
#[derive(Debug, Default)]
pub(super) struct RedisClock {
    /// Redis' microseconds minus this process's.
    offset_us: AtomicI64,
    /// This process's microseconds when `offset_us` was measured; 0 before the first time.
    measured_us: AtomicU64,
    /// Half that measurement's round trip: the offset's error bound when it was taken.
    half_trip_us: AtomicU64,
}

/// Beside the error of the last measurement, how far from a fixed window's edge the estimate
/// is not trusted to tell the window: the clocks' drift within [`REFRESH_US`] and a round trip
/// slower than the one measured.
const EDGE_SLACK_US: u64 = 2_000;

impl RedisClock {
    /// This process's clock at `at`, in microseconds: monotonic (a system clock set back or
    /// forward does not move the estimate), from a base taken once per process, plus one
    /// (0 stands for "never measured"). Taken from an `Instant` the caller already read, so
    /// a call reads the clock once for its timeout, its held refusals and its estimate.
    pub(super) fn local_us(at: Instant) -> u64 {
        static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
        at.saturating_duration_since(*BASE).as_micros() as u64 + 1
    }

    /// Whether the next call should ask for the full reply, to measure Redis' time again.
    fn stale(&self, local_us: u64) -> bool {
        let measured = self.measured_us.load(Ordering::Acquire);
        measured == 0 || local_us.abs_diff(measured) > REFRESH_US
    }

    /// Records Redis' time read by a script between `sent_us` and `received_us` (this
    /// process's clock).
    pub(super) fn measured(&self, redis_us: u64, sent_us: u64, received_us: u64) {
        let local = sent_us / 2 + received_us / 2;
        self.offset_us
            .store(redis_us as i64 - local as i64, Ordering::Relaxed);
        self.half_trip_us
            .store(received_us.saturating_sub(sent_us) / 2, Ordering::Relaxed);
        self.measured_us.store(local.max(1), Ordering::Release);
    }

    /// Whether a call on `quota` sent at `local_us` should ask for the full reply: to measure
    /// Redis' time again ([`stale`](Self::stale)), or because a fixed window's short reply
    /// could not be placed in its window ([`near_edge`](Self::near_edge)). One round trip
    /// either way.
    pub(super) fn wants_full(&self, local_us: u64, quota: &Quota) -> bool {
        self.stale(local_us)
            || (quota.strategy() == Strategy::FixedWindow
                && self.near_edge(local_us, quota.window().as_micros() as u64))
    }

    /// Whether a call sent at `local_us` may reach Redis so near an edge of a fixed window of
    /// `window_us` that the estimate cannot tell which window its count belongs to: such a
    /// call asks for the full reply (Redis' own time), so that its `reset_at` is Redis'. Away
    /// from the edges (all but a few milliseconds of a window) the short reply is placed
    /// exactly.
    fn near_edge(&self, local_us: u64, window_us: u64) -> bool {
        if window_us == 0 {
            return true;
        }
        let margin = self
            .half_trip_us
            .load(Ordering::Relaxed)
            .saturating_mul(4)
            .saturating_add(EDGE_SLACK_US);
        let into = self.redis_us(local_us) % window_us;
        into < margin || window_us - into <= margin
    }

    /// Redis' time now, as estimated from `local_us`.
    pub(super) fn redis_us(&self, local_us: u64) -> u64 {
        local_us.saturating_add_signed(self.offset_us.load(Ordering::Relaxed))
    }
}

/// A reply no limiter script gives (of another type, or out of range): a store error.
pub(super) fn unexpected(reply: &dyn std::fmt::Debug) -> Error {
    Error::Store {
        message: format!("unexpected reply from the limiter script: {reply:?}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quota(strategy: Strategy) -> Quota {
        Quota::new(10, Duration::from_secs(2))
            .unwrap()
            .with_strategy(strategy)
    }

    #[test]
    fn the_short_reply_unpacks_the_count_and_the_milliseconds_left() {
        let fixed = quota(Strategy::FixedWindow);
        let packed = 250 * 21 + 11;
        let reply = Reply::parse(&redis::Value::Int(packed), &fixed).unwrap();
        assert_eq!(
            reply,
            Reply::Short {
                count: 11,
                left_ms: 250
            }
        );
        // Refused: the count with the cost (2) is above the capacity; 9 were spent before.
        let now = 1_750_000_000_123_456;
        let (v, at) = reply.verdict(2, &fixed, now).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.remaining, 1);
        assert_eq!(v.reset_at, (1_750_000_000_123 + 250) * 1_000_000);
        assert_eq!(v.retry_after, Some((250_000 - 456) * 1_000));
        assert_eq!(at, now * 1_000);
        let (v, _) = Reply::Short {
            count: 10,
            left_ms: 1,
        }
        .verdict(1, &fixed, now)
        .unwrap();
        assert!(v.allowed && v.remaining == 0 && v.retry_after.is_none());
    }

    /// Near a fixed window's edge (within four half round trips and the slack) the estimate
    /// is not trusted to place a count; elsewhere it is.
    #[test]
    fn calls_near_a_window_edge_are_told_to_ask_for_redis_time() {
        let clock = RedisClock::default();
        // Redis 5 s ahead; measured over a round trip of 200 µs: margin 4 * 100 + 2,000.
        let local = 1_750_000_000_000_000;
        clock.measured(local + 5_000_000 + 100, local, local + 200);
        let window = 1_000_000;
        let at = |into: u64| local - 5_000_000 + into; // Redis at `into` µs into a window
        assert!(clock.near_edge(at(0), window));
        assert!(clock.near_edge(at(2_399), window));
        assert!(!clock.near_edge(at(2_400), window));
        assert!(!clock.near_edge(at(500_000), window));
        assert!(!clock.near_edge(at(997_599), window));
        assert!(clock.near_edge(at(997_600), window));
        assert!(clock.near_edge(at(999_999), window));
        // A window shorter than the margin: always Redis' time.
        assert!(clock.near_edge(at(1_000), 4_000));
        assert!(clock.near_edge(at(2_000), 4_000));
    }

    /// The verdict of an admitted call's short reply at `now`: its remaining calls and reset.
    fn admission(reply: Reply, cost: u64, quota: &Quota, now: u64) -> (u64, Nanos) {
        let (v, at) = reply.verdict(cost, quota, now).unwrap();
        assert!(v.allowed && v.retry_after.is_none(), "{v:?}");
        assert_eq!(at, now * 1_000);
        (v.remaining, v.reset_at)
    }

    #[test]
    fn the_fixed_windows_admitted_count_is_placed_in_the_window_of_the_estimate() {
        let fixed = quota(Strategy::FixedWindow); // a 2 s window, capacity 10
        let reply = Reply::parse(&redis::Value::Int(7), &fixed).unwrap();
        assert_eq!(reply, Reply::Admitted { count: 7 });
        // Redis' time as estimated: the window [1_750_000_000 s, +2 s) holds it.
        let now = 1_750_000_001_999_999;
        let end = 1_750_000_002_000_000 * 1_000;
        assert_eq!(admission(reply, 2, &fixed, now), (3, end));
        let next = admission(reply, 7, &fixed, now + 1);
        assert_eq!(next, (3, end + 2_000_000_000), "the next window");
        // Up to the capacity is an admission; above it, a refusal's packed reply.
        let full = Reply::parse(&redis::Value::Int(10), &fixed).unwrap();
        assert_eq!(full, Reply::Admitted { count: 10 });
        assert!(matches!(
            Reply::parse(&redis::Value::Int(11), &fixed),
            Some(Reply::Short { .. })
        ));
        // A count below the call's cost cannot be an admission of it.
        for (count, cost) in [(0, 1), (1, 2)] {
            let reply = Reply::Admitted { count };
            assert_eq!(reply.verdict(cost, &fixed, now), None, "{reply:?}");
        }
    }

    #[test]
    fn the_sliding_logs_short_reply_is_an_admission_full_one_window_later() {
        let log = quota(Strategy::SlidingWindow);
        let reply = Reply::parse(&redis::Value::Int(7), &log).unwrap();
        assert_eq!(reply, Reply::Logged { count: 7 });
        let now = 1_750_000_000_123_456;
        let full_again = (now + 2_000_000) * 1_000;
        assert_eq!(admission(reply, 3, &log, now), (3, full_again));
    }

    #[test]
    fn a_short_reply_that_cannot_be_ours_is_no_verdict() {
        let fixed = quota(Strategy::FixedWindow);
        for bad in [
            Reply::Short {
                count: 5,
                left_ms: 0,
            },
            Reply::Short {
                count: 0,
                left_ms: 5,
            },
        ] {
            assert_eq!(bad.verdict(1, &fixed, 1_000_000), None, "{bad:?}");
        }
        assert_eq!(Reply::parse(&redis::Value::Int(-1), &fixed), None);
        assert_eq!(Reply::parse(&redis::Value::Nil, &fixed), None);
        // The log's count is the units in the window with the call's: at least its cost, at
        // most the capacity (it was admitted).
        let log = quota(Strategy::SlidingWindow);
        for (count, cost) in [(2, 3), (11, 1)] {
            let reply = Reply::Logged { count };
            assert_eq!(reply.verdict(cost, &log, 1_000_000), None, "{reply:?}");
        }
        assert_eq!(Reply::parse(&redis::Value::Int(-1), &log), None);
        // The counter's remaining calls leave room for the call's cost, and its window
        // number is below the modulus.
        let counter = quota(Strategy::SlidingWindowCounter);
        for (number, remaining) in [(0, 10), (WINDOWS, 0)] {
            let reply = Reply::Counted { number, remaining };
            assert_eq!(reply.verdict(1, &counter, 1_000_000), None, "{reply:?}");
        }
        // The token bucket gives no short reply; only the fixed window a pair.
        assert_eq!(
            Reply::parse(&redis::Value::Int(5), &quota(Strategy::TokenBucket)),
            None
        );
        let pair = redis::Value::Array(vec![redis::Value::Int(5), redis::Value::Int(5)]);
        for strategy in [Strategy::SlidingWindowCounter, Strategy::TokenBucket] {
            assert_eq!(Reply::parse(&pair, &quota(strategy)), None);
        }
    }

    #[test]
    fn the_counters_short_reply_is_placed_in_the_nearest_window_with_its_number() {
        let counter = quota(Strategy::SlidingWindowCounter); // a 2 s window, capacity 10
        let window_us = 2_000_000;
        let n = 875_000_123; // the window Redis recorded the call in
        let reply = Reply::parse(
            &redis::Value::Int(((n % WINDOWS) * 11 + 4) as i64),
            &counter,
        );
        assert_eq!(
            reply,
            Some(Reply::Counted {
                number: n % WINDOWS,
                remaining: 4
            })
        );
        // The estimate of Redis' clock up to 511 windows either side of it: the same window.
        for estimate_n in [n - 511, n - 1, n, n + 1, n + 511] {
            let now = estimate_n * window_us + 1_234;
            let (v, at) = reply.unwrap().verdict(6, &counter, now).unwrap();
            assert!(v.allowed && v.remaining == 4 && v.retry_after.is_none());
            assert_eq!(
                v.reset_at,
                (n + 2) * window_us * 1_000,
                "estimate in {estimate_n}"
            );
            assert_eq!(at, now * 1_000);
        }
        assert_eq!(nearest_window(0, 0, window_us), Some(0));
        assert_eq!(
            nearest_window(WINDOWS - 1, 0, window_us),
            None,
            "before the epoch"
        );
    }
}
