//! The sliding-window counter, with its `u64` fast path beside the exact `u128` form. Its
//! Redis script is `sliding_counter.lua`, beside this file.

use super::{foreign, Algorithm, Spend, Verdict, Windowed, MAX_NOW, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::{Quota, MAX_CAPACITY};

/// Sliding window counter: the current and previous aligned windows' counts, the previous one
/// weighted by the share of it still inside the rolling window.
///
/// The estimate is `previous * (window - elapsed) / window + current`; comparisons are made in
/// exact integer arithmetic, so `retry_after` is the first instant the estimate admits the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SlidingCounter {
    pub(crate) start: Nanos,
    pub(crate) current: u64,
    pub(crate) previous: u64,
}

impl SlidingCounter {
    /// When a state this window did not write stops counting: `Some` while it still counts
    /// at `now` by its own start, yet is neither the window of `now` nor the one before it
    /// (under one window, a state counting at `now` is one of those two). Never read as a
    /// fresh state until then.
    #[inline]
    fn foreign_until(&self, now: Nanos, start: Nanos, window: Nanos) -> Option<Nanos> {
        if self.start == start || self.start + window == start {
            return None;
        }
        let windows = match (self.current, self.previous) {
            (0, 0) => return None,
            (0, _) => 1,
            _ => 2,
        };
        let end = self.start + windows * window;
        (now < end).then_some(end)
    }

    #[inline]
    fn at(&self, start: Nanos, window: Nanos) -> (u64, u64) {
        if self.start == start {
            (self.previous, self.current)
        } else if self.start + window == start {
            (self.current, 0)
        } else {
            (0, 0)
        }
    }

    /// When the budget is full again: two windows after the start while the current window
    /// has calls, one while only the previous one has, now when neither has.
    #[inline]
    fn reset_at(now: Nanos, start: Nanos, window: Nanos, previous: u64, current: u64) -> Nanos {
        if current > 0 {
            start + 2 * window
        } else if previous > 0 {
            start + window
        } else {
            now
        }
    }

    /// [`decide`](Algorithm::decide)'s verdict in exact `u128` arithmetic, at `now` in the window
    /// from `start` whose counts are `(previous, current)`: every call the fast path does not
    /// take. An admitted call is recorded by the caller.
    #[inline(never)]
    fn exact(
        now: Nanos,
        start: Nanos,
        (previous, current): (u64, u64),
        quota: &Quota,
        cost: u64,
    ) -> Verdict {
        let window = quota.window_nanos();
        let w = window as u128;
        let elapsed = (now - start) as u128;
        let capacity = quota.capacity();
        // used * w, exactly: previous * (w - elapsed) + current * w
        let used_w = previous as u128 * (w - elapsed) + current as u128 * w;
        let budget_w = capacity as u128 * w;
        let reset_at =
            |previous: u64, current: u64| Self::reset_at(now, start, window, previous, current);
        if used_w + cost as u128 * w <= budget_w {
            let remaining = ((budget_w - used_w - cost as u128 * w) / w) as u64;
            Verdict {
                allowed: true,
                remaining,
                reset_at: reset_at(previous, current + cost),
                retry_after: None,
            }
        } else {
            let retry_at = if current + cost <= capacity {
                // Wait in this window until the previous window's weight has shrunk enough:
                // previous * (w - e) <= (capacity - current - cost) * w.
                let spare = (capacity - current - cost) as u128 * w;
                start + window - (spare / previous as u128) as Nanos
            } else {
                // Wait into the next window, where this window's count becomes "previous":
                // current * (w - e) <= (capacity - cost) * w.
                let spare = (capacity - cost) as u128 * w;
                start + 2 * window - (spare / current as u128).min(w) as Nanos
            };
            let remaining = (budget_w.saturating_sub(used_w) / w) as u64;
            Verdict {
                allowed: false,
                remaining,
                reset_at: reset_at(previous, current),
                retry_after: Some(retry_at - now),
            }
        }
    }
}

impl Algorithm for SlidingCounter {
    const LETTER: u8 = b'C';

    /// Decides a call of weight `cost`; with `commit`, records it if allowed.
    ///
    /// An admitted call with `previous` at most what this call leaves of the capacity (the
    /// usual case far from the limit) is decided in `u64` with one division at most, none
    /// when there is no previous window; any other call in the exact `u128` form
    /// ([`exact`](Self::exact)). Both give the same verdict and state (a proptest checks it).
    #[inline]
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        self.decide_windowed(now, quota, cost, commit)
    }

    /// When this state is indistinguishable from a fresh one.
    fn expires_at(&self, quota: &Quota) -> Nanos {
        let window = quota.window_nanos();
        if self.current > 0 {
            self.start + 2 * window
        } else {
            self.start + window
        }
    }

    /// An admitted spend's `reset_at` is two windows after the start of the window it was
    /// counted in: its count goes back while that window is the current one. A window whose
    /// every call was given back is as if it had none: the state is the previous window's
    /// (`previous` becomes its `current`; the window before it, which only a caller whose
    /// clock read predates the current window still weighs, is dropped), or a fresh one.
    fn refund(&mut self, spend: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool {
        let spent = spend.at;
        let window = quota.window_nanos();
        let same_window = self.start.checked_add(2 * window) == Some(spent);
        if !same_window || now >= self.start + window || self.current < cost || cost == 0 {
            return false;
        }
        self.current -= cost;
        if self.current == 0 {
            *self = match self.previous {
                0 => SlidingCounter::default(),
                previous => SlidingCounter {
                    start: self.start - window,
                    current: previous,
                    previous: 0,
                },
            };
        }
        true
    }

    /// In the window of `now` (never before the recorded one): a penalty adds to its count (up
    /// to the largest capacity), a reward takes from it (the previous window's weight stays);
    /// a window left with no count steps back to the previous one, as a refund's does.
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        let window = quota.window_nanos();
        let now = now.max(self.start);
        let start = now - now % window;
        let (previous, current) = self.at(start, window);
        let next = match penalty {
            true => current.saturating_add(units).min(MAX_CAPACITY),
            false => current - units.min(current),
        };
        if next == current {
            // Nothing moved, nothing is written (an earlier window's state reads as this one's).
            return 0;
        }
        *self = match (next, previous) {
            (0, 0) => SlidingCounter::default(),
            (0, previous) => SlidingCounter {
                start: start - window,
                current: previous,
                previous: 0,
            },
            (current, previous) => SlidingCounter {
                start,
                current,
                previous,
            },
        };
        next.abs_diff(current)
    }

    /// Counts within the largest capacity, and a current count of zero only in a fresh
    /// state (a recorded call counts at least 1; a refund that empties a window steps back to
    /// the previous one, see `refund`).
    fn written_by_a_store(&self) -> bool {
        self.start <= MAX_NOW
            && self.current <= MAX_CAPACITY
            && self.previous <= MAX_CAPACITY
            && (self.current > 0 || (self.start == 0 && self.previous == 0))
    }

    fn written_for(&self, quota: &Quota) -> bool {
        self.start % quota.window_nanos() == 0
    }

    fn to_words(&self) -> Vec<u64> {
        vec![self.start, self.previous, self.current]
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        match *words {
            [start, previous, current] => Ok(SlidingCounter {
                start,
                previous,
                current,
            }),
            _ => Err(NOT_A_STATE),
        }
    }
}

impl Windowed for SlidingCounter {
    #[inline(always)]
    fn start(&self) -> Nanos {
        self.start
    }

    /// The decision at `now` (never before the recorded window) in the window of `now`, from
    /// `start`. Inlined into the memory store's cell: a call here cost instructions on every
    /// decision (BENCHMARKS.md, `memory`).
    #[inline(always)]
    fn decide_in(
        &mut self,
        now: Nanos,
        start: Nanos,
        window: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Verdict {
        if let Some(end) = self.foreign_until(now, start, window) {
            return foreign(now, end);
        }
        let (previous, current) = self.at(start, window);
        let capacity = quota.capacity();
        // What this call would leave: capacity - current - cost, when that is not negative.
        let spare = capacity
            .checked_sub(current)
            .and_then(|left| left.checked_sub(cost));
        let verdict = match spare {
            // previous * (w - e) <= previous * w <= spare * w: admitted. The previous window
            // weighs ceil(previous * (w - e) / w), so `remaining`, the exact form's
            // floor((spare * w - previous * (w - e)) / w), is `spare` less that weight.
            Some(spare) if previous <= spare => Verdict {
                allowed: true,
                remaining: spare - (previous - share(previous, now - start, window)),
                reset_at: Self::reset_at(now, start, window, previous, current + cost),
                retry_after: None,
            },
            _ => Self::exact(now, start, (previous, current), quota, cost),
        };
        if commit && verdict.allowed {
            *self = SlidingCounter {
                start,
                current: current + cost,
                previous,
            };
        }
        verdict
    }
}

/// floor(n * part / whole) for `part < whole`, in `u64` when the product fits; at most one
/// division, none when `n` or `part` is zero.
#[inline]
fn share(n: u64, part: u64, whole: u64) -> u64 {
    if n == 0 || part == 0 {
        return 0;
    }
    match n.checked_mul(part) {
        Some(product) => product / whole,
        None => (u128::from(n) * u128::from(part) / u128::from(whole)) as u64,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::syntax::MAX_WINDOW;

    /// The counter as it decided before the fast path, all in the exact form: the reference.
    fn reference(
        s: &mut SlidingCounter,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Verdict {
        let now = now.max(s.start);
        let window = quota.window_nanos();
        let start = now - now % window;
        // A state another window wrote (neither this window nor the one before), still
        // counting by its own start: refused until it ends.
        let windows = if s.current > 0 {
            2
        } else {
            u64::from(s.previous > 0)
        };
        let own = s.start == start || s.start + window == start;
        if !own && windows > 0 && now < s.start + windows * window {
            return crate::algorithm::foreign(now, s.start + windows * window);
        }
        let (previous, current) = s.at(start, window);
        let verdict = SlidingCounter::exact(now, start, (previous, current), quota, cost);
        if commit && verdict.allowed {
            *s = SlidingCounter {
                start,
                current: current + cost,
                previous,
            };
        }
        verdict
    }

    /// A number in `0..=max`: small, anywhere, or at the top.
    fn up_to(max: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            0..=max.min(3),
            0..=max,
            max.saturating_sub(3)..=max,
            Just(max / 2),
        ]
    }

    /// Windows from a nanosecond to the longest, and limits up to the largest capacity.
    fn quota() -> impl Strategy<Value = Quota> {
        let longest = MAX_WINDOW.as_nanos() as u64;
        let window = prop_oneof![1..=longest, up_to(longest), Just(3_600_000_000_000)];
        (window, up_to(MAX_CAPACITY)).prop_filter_map("a valid quota", |(window, limit)| {
            let quota = Quota::new(limit.max(1), Duration::from_nanos(window.max(1))).ok()?;
            Some(quota.with_strategy(crate::syntax::Strategy::SlidingWindowCounter))
        })
    }

    /// A state in or near `now`'s window (or anywhere: an older window, a window recorded
    /// under another length, so not aligned), counts up to the capacity's bound and beyond
    /// this quota's capacity.
    fn state(quota: &Quota) -> impl Strategy<Value = SlidingCounter> {
        let window = quota.window_nanos();
        let capacity = quota.capacity();
        let aligned = (0..=MAX_NOW / window).prop_map(move |k| k * window);
        let start = prop_oneof![aligned, 0..=MAX_NOW];
        let count = prop_oneof![up_to(capacity), up_to(MAX_CAPACITY)];
        (start, count.clone(), count).prop_map(|(start, previous, current)| SlidingCounter {
            start,
            current,
            previous,
        })
    }

    /// One call: how far after the state's start (or the previous call) it comes, its cost
    /// (0 for a look), and whether it spends.
    fn calls(quota: &Quota) -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
        let window = quota.window_nanos();
        let step = prop_oneof![up_to(3 * window), Just(0), up_to(MAX_NOW)];
        let cost = up_to(quota.capacity());
        prop::collection::vec((step, cost, any::<bool>()), 1..8)
    }

    fn case() -> impl Strategy<Value = (Quota, SlidingCounter, bool, Vec<(u64, u64, bool)>)> {
        quota().prop_flat_map(|q| (Just(q), state(&q), any::<bool>(), calls(&q)))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        /// The `u64` fast path decides every call as the exact `u128` form does, and leaves
        /// the same state, from any state a store can hold (counts up to the largest
        /// capacity, windows up to the longest, times up to the last one decided).
        #[test]
        fn the_fast_path_decides_as_the_exact_form((q, initial, back, calls) in case()) {
            let (mut fast, mut exact) = (initial, initial);
            let mut now = initial.start;
            for (step, cost, commit) in calls {
                // A step forward, or (with `back`) the same step backwards: a clock read
                // before another caller's.
                now = if back { now.saturating_sub(step) } else { now.saturating_add(step) };
                now = now.min(MAX_NOW);
                let commit = commit && cost > 0;
                let got = fast.decide(now, &q, cost, commit);
                let want = reference(&mut exact, now, &q, cost, commit);
                prop_assert_eq!(got, want, "{:?} at {} cost {}", q, now, cost);
                prop_assert_eq!(fast, exact);
            }
        }
    }

    /// The fast path's product `previous * elapsed` passes `u64` when both are large: the
    /// weight is then taken in `u128`, still exact.
    #[test]
    fn a_weight_past_u64_is_exact() {
        let window = MAX_WINDOW.as_nanos() as u64;
        let q = Quota::new(MAX_CAPACITY, Duration::from_nanos(window))
            .unwrap()
            .with_strategy(crate::syntax::Strategy::SlidingWindowCounter);
        let start = (MAX_NOW / window) * window - window;
        let previous = MAX_CAPACITY / 2;
        let now = start + window + window / 2 + 1;
        assert!(previous.checked_mul(now - start - window).is_none());
        let initial = SlidingCounter {
            start,
            current: previous,
            previous: 0,
        };
        let (mut fast, mut exact) = (initial, initial);
        let got = fast.decide(now, &q, 1, true);
        assert!(got.allowed);
        assert_eq!(got, reference(&mut exact, now, &q, 1, true));
        assert_eq!(fast, exact);
    }
}
