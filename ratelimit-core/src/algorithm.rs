//! The four algorithms as pure state machines: `decide(state, now, quota, cost, commit)`, one
//! file each ([`Algorithm`]); what they share is here: the [`Verdict`], the checks made before
//! any of them runs, the look at the level, and the [`State`] of a key under any of them.
//!
//! Nothing here reads a clock, locks or allocates beyond the sliding log's own entries; stores
//! run these inside their atomic step. Capacity checks (`cost` above `limit + burst`, a zero
//! limit) are made by [`decide`] before any algorithm runs.

use std::fmt;

use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::Strategy;

mod fixed_window;
mod sliding_counter;
mod sliding_log;
mod table;
mod token_bucket;

pub(crate) use fixed_window::FixedWindow;
pub(crate) use sliding_counter::SlidingCounter;
pub(crate) use sliding_log::SlidingLog;
pub(crate) use table::{algorithms, State};
pub(crate) use token_bucket::{Gcra, Given};

/// What an algorithm's file provides: its state, how it decides, when it expires, and its
/// encoding in a stored state's bytes ([`StoredState`](crate::store::StoredState)). Every
/// store decides through it.
pub(crate) trait Algorithm: Default + Clone + PartialEq + fmt::Debug {
    /// The letter after the version byte in a stored state's bytes.
    const LETTER: u8;

    /// Decides a call of weight `cost`; with `commit`, records it if allowed. `quota`'s
    /// capacity is not zero and `cost` at most that capacity ([`precheck`]).
    ///
    /// Every implementation is `#[inline]`: a cell calls it inside its compare-exchange loop,
    /// and a build that left it out of line there returned its `Verdict` through memory and
    /// read it back in wider loads than the stores that wrote it (BENCHMARKS.md, `hot_path`).
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;

    /// When this state is indistinguishable from a fresh one, so its key can be dropped.
    fn expires_at(&self, quota: &Quota) -> Nanos;

    /// Gives back an admitted spend of `cost` made where `spent` says (its verdict's exact
    /// `reset_at`, and the state's [`shift`](Self::shift) then), at
    /// `now`; whether anything was given back. Nothing once the spend no longer counts (its
    /// window rolled, its entry left the log, its tokens came back), and never more than it
    /// spent: the budget never grows past the quota. Whether this state is the one the spend
    /// was made on (not one reset or created since) is the store's to know: see
    /// [`Refund`](crate::store::Refund).
    fn refund(&mut self, spent: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool;

    /// How far refunds and rewards have moved this state's spends back since it began (see
    /// [`Spend::shift`]): the token bucket's; 0 for an algorithm that finds a spend by its
    /// window or its entry.
    fn shift(&self) -> Nanos {
        0
    }

    /// Whether a spend made before a reward can still be given back after it. A reward gives
    /// back units no spend is named for: an algorithm that counts units (a window's count, a
    /// log's entries) cannot tell afterwards whether a spend's unit is still counted, so a
    /// refund would give a unit back twice (probes_memory_adjustments: a reward emptied the
    /// budget, two calls came in, and a refund of a spend from before it let a fifth call
    /// in against a limit of 2 and a reward of 2). Such a reward gives the key a new stamp:
    /// every spend before it keeps its unit (fail closed). The token bucket tells (its shift).
    const REFUNDS_SURVIVE_REWARDS: bool = false;

    /// What the application decides after the fact, at `now`: a penalty spends `units` from
    /// the budget whatever it holds (past the limit too: the key is refused until they have
    /// come back), a reward gives back up to `units` of what it holds now (never past the
    /// quota). Returns the units spent or given back; the state stays one a store writes.
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64;

    /// Whether a store of this crate could have written this state, whatever the quota (see
    /// [`State::written_by_a_store`]).
    fn written_by_a_store(&self) -> bool;

    /// Whether a store deciding with `quota` could have written this state, beyond
    /// [`written_by_a_store`](Self::written_by_a_store): a window starting on one of
    /// `quota`'s boundaries.
    fn written_for(&self, _quota: &Quota) -> bool {
        true
    }

    /// The state as the words (little-endian `u64`s) after its letter.
    fn to_words(&self) -> Vec<u64>;

    /// Reads the words [`to_words`](Self::to_words) wrote; else what is wrong with them
    /// ([`NOT_A_STATE`] for words of another shape).
    fn from_words(words: &[u64]) -> Result<Self, &'static str>;
}

/// Where an admitted spend is found again for a refund: its verdict's exact `reset_at`, and
/// how far refunds and rewards had moved the state's spends back when it was made
/// ([`Algorithm::shift`]). A token bucket's refund of a spend made before others were given
/// back needs the second: each of those moved the spend's end back, so its `reset_at` alone
/// would give back time a later call spent (probes_redis_refunds: 4 admitted in 100 ms
/// against a bucket of 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spend {
    pub(crate) at: Nanos,
    pub(crate) shift: Nanos,
}

/// What bytes of no algorithm's shape are.
pub(crate) const NOT_A_STATE: &str = "not a limiter state";

/// The outcome of one decision, in nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Whether the call may proceed.
    pub(crate) allowed: bool,
    /// Calls (of cost 1) still available after this decision.
    pub(crate) remaining: u64,
    /// When the budget is back to full.
    pub(crate) reset_at: Nanos,
    /// When refused: how long until the same call would be admitted (never zero).
    pub(crate) retry_after: Option<Nanos>,
}

impl Verdict {
    /// Whether this verdict is an admission whose [`Decision`](crate::Decision) under `quota`
    /// would pass the service's check of a store's answer: [`in_shape`] read on the verdict,
    /// with the limit its decision is made with (`quota`'s capacity, and its window: such a
    /// decision is under `quota`, `Decision::is_under`, by how it is made). A store may then
    /// tell it bare ([`Told::Admitted`](crate::store::Told::Admitted)).
    #[inline(always)]
    pub(crate) fn admits_plainly(&self, quota: &crate::Quota) -> bool {
        let retry_after = self.retry_after.is_some();
        self.allowed && in_shape(true, self.remaining, quota.capacity(), retry_after)
    }
}

/// Whether an answer (a [`Verdict`] or the [`Decision`](crate::Decision) made of one) that
/// admits (`allowed`) or refuses, with `remaining` under `limit` and a `retry_after` or not,
/// has the shape every answer has: an admission no `retry_after`, a refusal one; no more
/// `remaining` than the `limit`. The one rule of an answer's shape, wherever it is read:
/// the service's check of a store's answer (`settle` on an admission, `broken_answer`, which
/// adds what a refusal's wait must be) and a verdict before its decision is made
/// ([`Verdict::admits_plainly`]). [`out_of_shape`] names what is wrong where it is not.
#[inline(always)]
pub(crate) fn in_shape(allowed: bool, remaining: u64, limit: u64, retry_after: bool) -> bool {
    remaining <= limit && retry_after != allowed
}

/// What is wrong with an answer [`in_shape`] finds out of shape (the words of its error).
#[cold]
pub(crate) fn out_of_shape(allowed: bool, remaining: u64, limit: u64) -> &'static str {
    match allowed {
        _ if remaining > limit => "more remaining than its limit",
        true => "an admission with a retry_after",
        false => "a refusal without a retry_after",
    }
}

/// Why a call could not be decided at all (as opposed to refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undecidable {
    /// `cost` is zero on a call that spends.
    ZeroCost,
    /// `cost` is above `limit + burst`: no amount of waiting would admit it.
    CostAboveCapacity {
        /// The cost asked for.
        cost: u64,
        /// The quota's capacity.
        capacity: u64,
    },
    /// `now` is past [`MAX_NOW`]: deciding would overflow.
    ClockOutOfRange {
        /// The time read.
        now: Nanos,
    },
    /// The key holds another strategy's state, or one no store writes (see
    /// [`State::written_by_a_store`]).
    UnexpectedState,
}

/// The refusal of a call on a state another window wrote (a store's key asked under two
/// quotas: the service's keys carry the quota, a bare store's may not), until `end`, when
/// it counts no more: fail closed, never a fresh budget beside the other's spends.
#[cold]
pub(crate) fn foreign(now: Nanos, end: Nanos) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        reset_at: end,
        retry_after: Some(end - now),
    }
}

/// How a state kept beside `written`, the window (in nanoseconds) of the last quota that spent
/// on it, is decided under another quota ([`written_elsewhere`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// As it is: its own window, none recorded (0), or a token bucket's (one time that only
    /// moves forward: read under any quota, it counts every spend).
    Here,
    /// Refused: it still counts by the window that wrote it, until this refusal's `reset_at`.
    Elsewhere(Verdict),
    /// As a fresh state: it counted by another window, which has passed.
    Passed,
}

/// The one rule for a state asked under a quota whose window is not the one that last spent
/// on it (a bare store key asked under two quotas: the service's keys carry the quota): while
/// the state still counts by its own window (until `ends_under(quota with that window)`, its
/// expiry there) it is [`foreign`], refused; after, it is fresh. Read under the other window
/// as it was, a shorter window's spend dropped a sliding log's entries of a longer one (5
/// admitted in a minute limited to 3), and a state a custom store kept by its last window
/// lost what it counted (probes_custom_store). Stores that keep a state beside the window
/// that wrote it use it: [`StoredState`](crate::store::StoredState) and the memory store's
/// locked cells (the compact cells keep their window's end: [`foreign`]).
pub(crate) fn written_elsewhere(
    written: Nanos,
    now: Nanos,
    quota: &Quota,
    ends_under: impl FnOnce(&Quota) -> Nanos,
) -> Written {
    if written_under(written, quota) || quota.strategy() == Strategy::TokenBucket {
        return Written::Here;
    }
    let end = ends_under(&quota.with_window_nanos(written));
    if now < end {
        Written::Elsewhere(foreign(now, end))
    } else {
        Written::Passed
    }
}

/// Whether a state kept beside `written` (the window of the last quota that spent on it; 0
/// for none recorded) is `quota`'s window's own: the one test of [`written_elsewhere`], and
/// of what a refund may give back to (a spend is given back only under the window that wrote
/// the state).
#[inline]
pub(crate) fn written_under(written: Nanos, quota: &Quota) -> bool {
    written == 0 || written == quota.window_nanos()
}

/// The start of the window of `now` for a state whose recorded window starts at `start` (on
/// the window's boundaries, `start <= now`): the recorded window's, found without a
/// division; past it, worked out (out of line: once a window, the spend that moves the state
/// on makes it the recorded one). Where a memory store's cell decides the fixed window and
/// the counter, which always hold a state written for the quota they are decided under
/// (`Algorithm::written_for`). The window after the recorded one is not found by a compare
/// too: under cachegrind that cost the fixed window's calls more than it saved the counter.
#[inline(always)]
pub(crate) fn window_from(start: Nanos, now: Nanos, window: Nanos) -> Nanos {
    match now - start < window {
        true => start,
        false => window_of(now, window),
    }
}

/// The start of the window of `now`: a division, out of the line of [`window_from`]'s calls.
#[cold]
#[inline(never)]
fn window_of(now: Nanos, window: Nanos) -> Nanos {
    now - now % window
}

/// An algorithm whose state counts in windows aligned to the epoch (the fixed window, the
/// counter): where a call falls is one rule for both, here; what it counts there is each
/// one's own [`decide_in`](Self::decide_in).
pub(crate) trait Windowed: Algorithm {
    /// The start of the recorded window.
    fn start(&self) -> Nanos;

    /// The decision at `now` (never before the recorded window) in the window from `start`.
    fn decide_in(
        &mut self,
        now: Nanos,
        start: Nanos,
        window: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Verdict;

    /// [`Algorithm::decide`] for any state. A caller whose `now` predates the recorded window
    /// (it read the clock before a concurrent caller moved the key to the next window) is
    /// decided in that window: going back would reset the count and admit a second
    /// window's worth.
    #[inline(always)]
    fn decide_windowed(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let now = now.max(self.start());
        let window = quota.window_nanos();
        self.decide_in(now, now - now % window, window, quota, cost, commit)
    }

    /// [`decide_windowed`](Self::decide_windowed) on a state written for `quota`
    /// ([`written_for`](Algorithm::written_for): its start on the window's boundaries, as a
    /// fresh state's), as a store that keeps a state under its own window holds it: a `now`
    /// inside the recorded window is in it, and the window of `now` is worked out (a
    /// division) only past it ([`window_from`]).
    #[inline(always)]
    fn decide_written_for(
        &mut self,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Verdict {
        debug_assert!(
            self.written_for(quota),
            "a state off the window's boundaries"
        );
        let now = now.max(self.start());
        let window = quota.window_nanos();
        let start = window_from(self.start(), now, window);
        self.decide_in(now, start, window, quota, cost, commit)
    }
}

/// The latest time decided (about the year 2226): every timestamp an algorithm computes is at
/// most `now` plus two windows plus a token bucket's tolerance (2^62 ns), which stays within
/// `u64` from here.
pub(crate) const MAX_NOW: Nanos = (1 << 63) - (1 << 60);

/// The one rule of the clock's range: a time past [`MAX_NOW`] is `ClockOutOfRange`.
#[inline]
pub(crate) fn check_now(now: Nanos) -> Result<(), Undecidable> {
    if now > MAX_NOW {
        return Err(Undecidable::ClockOutOfRange { now });
    }
    Ok(())
}

/// The checks of a call's cost under `quota`, before any state is read: a cost of zero may
/// not spend (it is a look at the level: see [`level`]), and a cost above a non-zero capacity
/// can never pass. The pipeline checks every call with it; [`precheck`] again, for callers of
/// a store.
#[inline]
pub(crate) fn check_cost(quota: &Quota, cost: u64, commit: bool) -> Result<(), Undecidable> {
    if cost == 0 && commit {
        return Err(Undecidable::ZeroCost);
    }
    let capacity = quota.capacity();
    if capacity > 0 && cost > capacity {
        return Err(Undecidable::CostAboveCapacity { cost, capacity });
    }
    Ok(())
}

/// The checks made before any algorithm runs: an error for a call that can never be decided
/// (see [`check_cost`]), a refusal for a capacity of zero, `None` when the algorithm decides.
#[inline]
pub(crate) fn precheck(
    now: Nanos,
    quota: &Quota,
    cost: u64,
    commit: bool,
) -> Result<Option<Verdict>, Undecidable> {
    let fixed = precheck_time(now, quota)?;
    check_cost(quota, cost, commit)?;
    Ok(fixed)
}

/// [`precheck`] of a call whose cost was checked when it was made (a
/// [`Request`](crate::store::Request)): the clock's range, and the refusal of a capacity of
/// zero.
#[inline]
pub(crate) fn precheck_time(now: Nanos, quota: &Quota) -> Result<Option<Verdict>, Undecidable> {
    check_now(now)?;
    Ok(zero_capacity(now, quota))
}

/// The refusal of every call under a capacity of zero, at a `now` within range
/// ([`check_now`]); `None` for any other capacity.
#[inline]
pub(crate) fn zero_capacity(now: Nanos, quota: &Quota) -> Option<Verdict> {
    if quota.capacity() == 0 {
        let window = quota.window_nanos();
        return Some(Verdict {
            allowed: false,
            remaining: 0,
            reset_at: now + window,
            retry_after: Some(window),
        });
    }
    None
}

/// Runs `decide(cost, commit)`; a cost of zero is a look at the level *now*: what remains
/// without spending anything, when the budget is full again, and `allowed` when a call of
/// cost 1 would pass (with that call's `retry_after` when it would not). Every store decides
/// through this, so "status" means the same everywhere.
#[inline]
pub(crate) fn level(
    cost: u64,
    commit: bool,
    mut decide: impl FnMut(u64, bool) -> Verdict,
) -> Verdict {
    let infallible = level_or(cost, commit, |cost, commit| {
        Ok::<_, std::convert::Infallible>(decide(cost, commit))
    });
    match infallible {
        Ok(verdict) => verdict,
        Err(never) => match never {},
    }
}

/// [`level`] over a `decide` that may fail (a store's whole step, lock and lookup included).
#[inline]
pub(crate) fn level_or<E>(
    cost: u64,
    commit: bool,
    mut decide: impl FnMut(u64, bool) -> Result<Verdict, E>,
) -> Result<Verdict, E> {
    if cost > 0 {
        return decide(cost, commit);
    }
    look(decide)
}

/// [`level_or`] for a cost of 0, out of the hot path of calls that spend.
#[cold]
#[inline(never)]
fn look<E>(mut decide: impl FnMut(u64, bool) -> Result<Verdict, E>) -> Result<Verdict, E> {
    let level = decide(0, false)?;
    if !needs_retry(&level) {
        return Ok(level);
    }
    Ok(with_retry(level, decide(1, false)?))
}

/// Whether a look at the level (`level`, a cost-0 verdict) must also ask when a call of cost 1
/// would pass: when it would not pass now.
pub(crate) fn needs_retry(level: &Verdict) -> bool {
    !(level.allowed && level.remaining > 0)
}

/// A look at the level that found nothing left: refused, with the `retry_after` of a call of
/// cost 1 (`one`). With [`needs_retry`], the rule of [`level`] for a store that cannot run
/// its two steps through a closure (the Redis store awaits each).
pub(crate) fn with_retry(level: Verdict, one: Verdict) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        retry_after: one.retry_after,
        ..level
    }
}

/// Decides one call against `state`. A key that holds another strategy's state, or a state
/// no store writes (a count or a time past the bounds the algorithms keep to, a window
/// starting off the quota's boundaries), is
/// [`Undecidable::UnexpectedState`]: refused, never read as a fresh key.
///
/// A quota with a capacity of zero refuses every call, with `retry_after` one window (the
/// soonest a reconfigured limit could take effect).
pub(crate) fn decide(
    state: &mut State,
    now: Nanos,
    quota: &Quota,
    cost: u64,
    commit: bool,
) -> Result<Verdict, Undecidable> {
    if let Some(verdict) = precheck(now, quota, cost, commit)? {
        return Ok(verdict);
    }
    if !state.written_for(quota) {
        return Err(Undecidable::UnexpectedState);
    }
    Ok(level(cost, commit, |cost, commit| {
        state.decide_raw(now, quota, cost, commit)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::Strategy;
    use std::time::Duration;

    const SEC: Nanos = 1_000_000_000;

    fn run(state: &mut State, now: Nanos, q: &Quota) -> Verdict {
        decide(state, now, q, 1, true).unwrap()
    }

    #[test]
    fn every_strategy_admits_capacity_then_refuses() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(5)
                .unwrap()
                .with_burst(2)
                .unwrap()
                .with_strategy(strategy);
            let mut s = State::new(strategy);
            let now = 1_000 * SEC;
            for i in 0..7 {
                let v = run(&mut s, now, &q);
                assert!(v.allowed, "{strategy} call {i}");
                assert_eq!(v.remaining, 6 - i, "{strategy}");
            }
            let v = run(&mut s, now, &q);
            assert!(!v.allowed, "{strategy}");
            assert!(v.retry_after.unwrap() > 0, "{strategy}");
        }
    }

    #[test]
    fn zero_limit_refuses_and_big_cost_is_an_error() {
        let q = Quota::per_second(0).unwrap();
        let mut s = State::new(q.strategy());
        let v = decide(&mut s, SEC, &q, 1, true).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.retry_after, Some(SEC));
        let q = Quota::per_second(3).unwrap();
        assert_eq!(
            decide(&mut s, SEC, &q, 4, true),
            Err(Undecidable::CostAboveCapacity {
                cost: 4,
                capacity: 3
            })
        );
        assert_eq!(decide(&mut s, SEC, &q, 0, true), Err(Undecidable::ZeroCost));
    }

    #[test]
    fn status_does_not_change_state() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(3).unwrap().with_strategy(strategy);
            let mut s = State::new(strategy);
            run(&mut s, 10 * SEC, &q);
            let before = s.clone();
            let v = decide(&mut s, 10 * SEC, &q, 1, false).unwrap();
            assert!(v.allowed);
            assert_eq!(v.remaining, 1);
            assert_eq!(s, before, "{strategy}");
        }
    }

    #[test]
    fn counter_weights_previous_window() {
        let q = Quota::new(10, Duration::from_secs(10))
            .unwrap()
            .with_strategy(Strategy::SlidingWindowCounter);
        let mut s = State::new(q.strategy());
        for _ in 0..10 {
            assert!(run(&mut s, 100 * SEC, &q).allowed);
        }
        // Halfway through the next window, half of the previous 10 still count.
        let v = run(&mut s, 115 * SEC, &q);
        assert!(v.allowed);
        assert_eq!(v.remaining, 4);
    }

    /// redis-cell's published GCRA table: capacity 5, one token a second. After the calls at
    /// 8.0 s and 9.5 s, a look at 9.5 s shows 4 remaining, full again in 1 s.
    #[test]
    fn a_look_reports_the_level_now_as_in_the_gcra_table() {
        let q = Quota::new(5, Duration::from_secs(5))
            .unwrap()
            .with_strategy(Strategy::TokenBucket);
        let mut s = State::new(q.strategy());
        assert!(run(&mut s, 8 * SEC, &q).allowed);
        assert!(run(&mut s, 9 * SEC + SEC / 2, &q).allowed);
        let before = s.clone();
        let look = decide(&mut s, 9 * SEC + SEC / 2, &q, 0, false).unwrap();
        assert_eq!(s, before);
        assert!(look.allowed);
        assert_eq!(look.remaining, 4);
        assert_eq!(look.reset_at - (9 * SEC + SEC / 2), SEC);
        assert_eq!(look.retry_after, None);
    }

    #[test]
    fn a_look_spends_nothing_and_says_when_a_call_would_pass() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(2).unwrap().with_strategy(strategy);
            let mut s = State::new(strategy);
            let now = 100 * SEC;
            let fresh = decide(&mut s, now, &q, 0, false).unwrap();
            assert_eq!((fresh.allowed, fresh.remaining), (true, 2), "{strategy}");
            assert_eq!(
                fresh.reset_at, now,
                "{strategy}: an unused budget is full now"
            );
            run(&mut s, now, &q);
            run(&mut s, now, &q);
            let full = decide(&mut s, now, &q, 0, false).unwrap();
            assert_eq!((full.allowed, full.remaining), (false, 0), "{strategy}");
            let refused = decide(&mut s, now, &q, 1, false).unwrap();
            assert_eq!(full.retry_after, refused.retry_after, "{strategy}");
            assert!(full.retry_after.is_some(), "{strategy}");
        }
    }

    #[test]
    fn a_clock_near_the_end_of_u64_is_refused_not_wrapped() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(3).unwrap().with_strategy(strategy);
            let mut s = State::new(strategy);
            for now in [MAX_NOW + 1, u64::MAX - 5, u64::MAX] {
                assert_eq!(
                    decide(&mut s, now, &q, 1, true),
                    Err(Undecidable::ClockOutOfRange { now }),
                    "{strategy}"
                );
            }
            // At the last instant decided, every strategy still counts exactly.
            for i in 0..3 {
                assert!(run(&mut s, MAX_NOW, &q).allowed, "{strategy} call {i}");
            }
            assert!(!run(&mut s, MAX_NOW, &q).allowed, "{strategy}");
        }
    }

    /// A refusal at a later `now` used to drop the log's expired entries; after the clock
    /// went back (to no earlier than the newest hit) a dropped hit counted again, and the log
    /// admitted more than its capacity within one window. The Redis script never did.
    #[test]
    fn a_refusal_keeps_log_entries_that_count_again_when_the_clock_goes_back() {
        let q = Quota::new(4, Duration::from_micros(3)).unwrap();
        let mut s = State::new(q.strategy());
        let t = 1_000 * SEC;
        assert!(decide(&mut s, t + 2_000, &q, 1, true).unwrap().allowed);
        assert!(decide(&mut s, t + 3_000, &q, 3, true).unwrap().allowed);
        assert!(!decide(&mut s, t + 5_000, &q, 4, true).unwrap().allowed);
        // Both hits are in (t + 1 us, t + 4 us]: 4 units, the capacity.
        let v = decide(&mut s, t + 4_000, &q, 1, true).unwrap();
        assert!(!v.allowed, "{v:?}");
    }

    /// States no store of this crate writes (read back through `StoredState::from_bytes`
    /// from a corrupt or foreign value): a count past the largest capacity, a time past the
    /// last one decided. Deciding on them overflowed: a panic in a debug build, and in a
    /// release build a fixed window whose count wrapped to 0 or a bucket whose arrival time
    /// wrapped admitted the call and reset the key. They are refused as unexpected.
    fn states_no_store_writes(now: Nanos, window: Nanos) -> Vec<State> {
        let start = now - now % window;
        let log = |t: Nanos| {
            let mut log = SlidingLog::default();
            assert!(log.restore(t, 1));
            State::Log(Box::new(log))
        };
        let counter = |start, previous, current| {
            State::Counter(SlidingCounter {
                start,
                current,
                previous,
            })
        };
        vec![
            State::Fixed(FixedWindow {
                start,
                count: u64::MAX,
            }),
            State::Fixed(FixedWindow {
                start: u64::MAX - 1,
                count: 0,
            }),
            counter(start, 0, u64::MAX),
            counter(start, u64::MAX, 0),
            counter(MAX_NOW + 1, 0, 0),
            State::Bucket(Gcra::new(u64::MAX - 1, 0, Vec::new())),
            State::Bucket(Gcra::new(SEC, MAX_NOW + 1, Vec::new())),
            State::Bucket(Gcra::new(SEC, 1, vec![(SEC, 2 * SEC, 0)])),
            State::Bucket(Gcra::new(SEC, 1, vec![(2 * SEC, SEC, 1)])),
            State::Bucket(Gcra::new(
                SEC,
                1,
                vec![(SEC, 3 * SEC, 1), (2 * SEC, 4 * SEC, 1)],
            )),
            log(u64::MAX - 1),
        ]
    }

    #[test]
    fn a_stored_state_past_what_a_store_writes_is_refused_not_wrapped() {
        let now = 1_000 * SEC;
        for state in states_no_store_writes(now, SEC) {
            let q = Quota::per_second(3)
                .unwrap()
                .with_strategy(state.strategy());
            for (cost, commit) in [(1, true), (1, false), (0, false)] {
                let mut s = state.clone();
                assert_eq!(
                    decide(&mut s, now, &q, cost, commit),
                    Err(Undecidable::UnexpectedState),
                    "{state:?} cost {cost}"
                );
                assert_eq!(s, state);
            }
        }
    }

    /// The bounds are the ones a store reaches: a state at them is decided.
    #[test]
    fn a_stored_state_at_what_a_store_writes_is_decided() {
        let q = Quota::per_second(3).unwrap();
        let counts = [3, crate::quota::MAX_CAPACITY];
        for strategy in Strategy::ALL {
            let q = q.with_strategy(strategy);
            let mut s = State::new(strategy);
            for _ in 0..3 {
                assert!(run(&mut s, MAX_NOW, &q).allowed, "{strategy}");
            }
            assert!(!run(&mut s, MAX_NOW, &q).allowed, "{strategy}");
            for count in counts {
                let mut full = match strategy {
                    Strategy::FixedWindow => State::Fixed(FixedWindow {
                        start: MAX_NOW - MAX_NOW % SEC,
                        count,
                    }),
                    Strategy::SlidingWindowCounter => State::Counter(SlidingCounter {
                        start: MAX_NOW - MAX_NOW % SEC,
                        current: count,
                        previous: count,
                    }),
                    _ => continue,
                };
                assert!(!run(&mut full, MAX_NOW, &q).allowed, "{strategy}");
            }
        }
    }

    #[test]
    fn another_strategys_state_is_refused_not_reset() {
        let fixed = Quota::per_second(1)
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        let bucket = fixed.with_strategy(Strategy::TokenBucket);
        let mut s = State::new(fixed.strategy());
        run(&mut s, SEC, &fixed);
        let before = s.clone();
        assert_eq!(
            decide(&mut s, SEC, &bucket, 1, true),
            Err(Undecidable::UnexpectedState)
        );
        assert_eq!(s, before);
    }

    /// Where the spend `v` admitted on `state` is found again.
    fn spend(state: &State, v: &Verdict) -> Spend {
        Spend {
            at: v.reset_at,
            shift: state.shift(),
        }
    }

    /// The level (a look of cost 0) of `state` at `now`.
    fn level_of(state: &State, now: Nanos, q: &Quota) -> Verdict {
        decide(&mut state.clone(), now, q, 0, false).unwrap()
    }

    proptest::proptest! {
        /// A spend given back at once leaves the level as it was before the spend, after any
        /// history; every spend given back (in any order, at one instant) leaves it full.
        #[test]
        fn a_refund_gives_back_the_whole_spend(
            history in proptest::collection::vec((0..700_000_000u64, 1..=3u64), 0..30),
            costs in proptest::collection::vec(1..=3u64, 1..8),
            order in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 8),
        ) {
            for strategy in Strategy::ALL {
                let q = Quota::new(9, Duration::from_millis(1_500))
                    .unwrap()
                    .with_burst(2)
                    .unwrap()
                    .with_strategy(strategy);
                let mut state = State::new(strategy);
                let mut now = 1_000 * SEC;
                for &(step, cost) in &history {
                    now += step;
                    decide(&mut state, now, &q, cost, true).unwrap();
                }
                now += 3 * SEC; // every earlier spend has stopped counting
                let empty = level_of(&state, now, &q);
                let mut spent = Vec::new();
                for &cost in &costs {
                    let before = level_of(&state, now, &q);
                    let v = decide(&mut state, now, &q, cost, true).unwrap();
                    if v.allowed {
                        let mut back = state.clone();
                        proptest::prop_assert!(back.refund(spend(&state, &v), now, &q, cost), "{}", strategy);
                        proptest::prop_assert_eq!(level_of(&back, now, &q), before, "{}", strategy);
                        spent.push((spend(&state, &v), cost));
                    }
                }
                // In any order (a token bucket's capacity here is below `RUNS_KEPT`).
                for pick in &order[..spent.len()] {
                    let (at, cost) = spent.remove(pick.index(spent.len()));
                    proptest::prop_assert!(state.refund(at, now, &q, cost), "{}", strategy);
                    proptest::prop_assert!(state.written_by_a_store(), "{}", strategy);
                }
                proptest::prop_assert_eq!(level_of(&state, now, &q), empty, "{}", strategy);
            }
        }

        /// Refunds of spends made at other instants never take the budget past the quota and
        /// leave a state a store writes; a refund of a spend that stopped counting gives
        /// nothing and changes nothing.
        #[test]
        fn a_refund_never_grows_the_budget_past_the_quota(
            calls in proptest::collection::vec((0..400_000_000u64, 1..=3u64, 0..4usize), 1..60),
        ) {
            for strategy in Strategy::ALL {
                let q = Quota::new(5, Duration::from_secs(1))
                    .unwrap()
                    .with_strategy(strategy);
                let mut state = State::new(strategy);
                let mut now = 1_000 * SEC;
                let mut spent: Vec<(Spend, u64)> = Vec::new();
                for &(step, cost, pick) in &calls {
                    now += step;
                    let v = decide(&mut state, now, &q, cost, true).unwrap();
                    if v.allowed {
                        spent.push((spend(&state, &v), cost));
                    }
                    if pick < spent.len() {
                        let (at, cost) = spent.remove(pick);
                        let before = state.clone();
                        let gave = state.refund(at, now, &q, cost);
                        if !gave {
                            proptest::prop_assert_eq!(&state, &before, "{}", strategy);
                        }
                        if now >= at.at {
                            proptest::prop_assert!(!gave, "{} gave back a spend past its reset", strategy);
                        }
                    }
                    proptest::prop_assert!(state.written_by_a_store(), "{} {:?}", strategy, state);
                    let level = level_of(&state, now, &q);
                    proptest::prop_assert!(level.remaining <= q.capacity(), "{}", strategy);
                }
            }
        }
    }

    proptest::proptest! {
        /// A penalty then a reward of the same units at one instant leave the level as it
        /// was; any sequence of them keeps a state a store writes and a level within the
        /// quota; a penalty past the capacity refuses until its units have come back.
        #[test]
        fn penalties_and_rewards_keep_the_budget_within_its_bounds(
            steps in proptest::collection::vec((0..300_000_000u64, 1..=12u64, proptest::bool::ANY), 1..40),
        ) {
            for strategy in Strategy::ALL {
                let q = Quota::new(5, Duration::from_secs(1))
                    .unwrap()
                    .with_strategy(strategy);
                let mut state = State::new(strategy);
                let mut now = 1_000 * SEC;
                for &(step, units, penalty) in &steps {
                    now += step;
                    let before = level_of(&state, now, &q);
                    let mut there_and_back = state.clone();
                    let moved = there_and_back.adjust(now, &q, units, true);
                    proptest::prop_assert_eq!(there_and_back.adjust(now, &q, moved, false), moved, "{}", strategy);
                    proptest::prop_assert_eq!(level_of(&there_and_back, now, &q), before, "{}", strategy);
                    state.adjust(now, &q, units, penalty);
                    proptest::prop_assert!(state.written_by_a_store(), "{} {:?}", strategy, state);
                    let level = level_of(&state, now, &q);
                    proptest::prop_assert!(level.remaining <= q.capacity(), "{}", strategy);
                    if penalty && units > q.capacity() {
                        proptest::prop_assert!(!level.allowed, "{} admitted past a penalty", strategy);
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Token bucket: spends at moving instants, and refunds of any of them in any order,
        /// never leave the arrival time before the one the spends not given back make alone
        /// (replayed at their instants, each admitted): a refund never gives back time
        /// another call spent (probes_redis_refunds: A and B spent, A given back, C admitted
        /// a second later, B given back: 4 admitted in 100 ms against a bucket of 3).
        #[test]
        fn bucket_refunds_never_give_back_another_calls_time(
            calls in proptest::collection::vec(
                (0..1_500_000_000u64, 1..=3u64, 0..24usize),
                1..120,
            ),
            // Past `RUNS_KEPT`, runs of refunds are merged.
            limit in proptest::prop_oneof![proptest::strategy::Just(3u64), proptest::strategy::Just(20)],
        ) {
            let q = Quota::new(limit, Duration::from_secs(limit))
                .unwrap()
                .with_strategy(Strategy::TokenBucket);
            let interval = q.interval_nanos();
            let mut state = State::new(Strategy::TokenBucket);
            let mut now = 1_000 * SEC;
            // (instant, cost, spend, given back)
            let mut spent: Vec<(Nanos, u64, Spend, bool)> = Vec::new();
            for &(step, cost, pick) in &calls {
                now += step;
                let v = decide(&mut state, now, &q, cost, true).unwrap();
                if v.allowed {
                    spent.push((now, cost, spend(&state, &v), false));
                }
                let open: Vec<usize> = (0..spent.len()).filter(|&i| !spent[i].3).collect();
                if let Some(&i) = open.get(pick) {
                    spent[i].3 = true;
                    state.refund(spent[i].2, now, &q, spent[i].1);
                }
                let State::Bucket(bucket) = &state else { unreachable!() };
                let alone = spent
                    .iter()
                    .filter(|s| !s.3)
                    .fold(0, |tat: Nanos, s| tat.max(s.0) + interval * s.1);
                // (Any arrival time up to `now` is a full bucket.)
                proptest::prop_assert!(
                    bucket.tat.max(now) >= alone.max(now),
                    "{bucket:?} below {alone} at {now}"
                );
            }
        }
    }

    #[test]
    fn a_refund_after_the_window_rolled_gives_nothing() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(3).unwrap().with_strategy(strategy);
            let mut s = State::new(strategy);
            let now = 1_000 * SEC;
            let v = run(&mut s, now, &q);
            let before = s.clone();
            // The fixed window and the counter roll at the aligned boundary, the log's entry
            // and the bucket's token at their `reset_at`.
            let rolled = match strategy {
                Strategy::FixedWindow | Strategy::SlidingWindowCounter => now + SEC,
                _ => v.reset_at,
            };
            assert!(!s.refund(spend(&s, &v), rolled, &q, 1), "{strategy}");
            assert_eq!(s, before, "{strategy}");
            assert!(s.refund(spend(&s, &v), rolled - 1, &q, 1), "{strategy}");
            // The only spend given back: giving it again finds nothing to give.
            let after = s.clone();
            assert!(!s.refund(spend(&s, &v), rolled - 1, &q, 1), "{strategy}");
            assert_eq!(s, after, "{strategy}");
        }
    }
}
