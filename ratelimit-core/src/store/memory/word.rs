//! The memory store's one-word cells: a state that fits an atomic word, decided by one
//! compare-exchange on it ([`WordCell`], the fixed window's and the counter's; the token
//! bucket's [`BucketCell`], on the same [`update`]).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use portable_atomic::AtomicU128;

use super::cells::{adjust_written, owner, Cell, Side, StampedKey};
use crate::algorithm::{
    self, Algorithm, FixedWindow, Gcra, SlidingCounter, Verdict, Windowed, Written,
};
use crate::clock::Nanos;
use crate::quota::Quota;

/// An atomic word a cell's state lives in.
pub(super) trait Word {
    type Value: Copy + Eq;
    fn get(&self) -> Self::Value;
    fn swap_if(&self, current: Self::Value, next: Self::Value) -> Result<Self::Value, Self::Value>;
}

impl Word for AtomicU64 {
    type Value = u64;
    #[inline]
    fn get(&self) -> u64 {
        self.load(Ordering::Acquire)
    }
    #[inline]
    fn swap_if(&self, current: u64, next: u64) -> Result<u64, u64> {
        self.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
    }
}

impl Word for AtomicU128 {
    type Value = u128;
    #[inline]
    fn get(&self) -> u128 {
        self.load(Ordering::Acquire)
    }
    #[inline]
    fn swap_if(&self, current: u128, next: u128) -> Result<u128, u128> {
        self.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
    }
}

/// What [`update`] runs on a word's value: the value to store over it, and the answer.
pub(super) trait Step<V> {
    type Answer;
    fn step(&self, current: V) -> (V, Self::Answer);
}

/// A closure is a step.
impl<V, T, F: Fn(V) -> (V, T)> Step<V> for F {
    type Answer = T;
    #[inline(always)]
    fn step(&self, current: V) -> (V, T) {
        self(current)
    }
}

/// Runs `step` on the word's value until the new value is stored over the one it was
/// computed from; a step that changes nothing (a look, a refusal) stores nothing.
#[inline(always)]
pub(super) fn update<W: Word, S: Step<W::Value>>(word: &W, step: S) -> S::Answer {
    let mut current = word.get();
    loop {
        let (next, verdict) = step.step(current);
        if next == current {
            return verdict;
        }
        match word.swap_if(current, next) {
            Ok(_) => return verdict,
            Err(actual) => current = actual,
        }
    }
}

/// Two words in one: `high` in the upper 64 bits.
#[inline]
fn pack(high: u64, low: u64) -> u128 {
    (u128::from(high) << 64) | u128::from(low)
}

#[inline]
fn unpack(word: u128) -> (u64, u64) {
    ((word >> 64) as u64, word as u64)
}

/// A state that fits one 128-bit word, its expiry in the high word: [`WordCell`]'s.
pub(super) trait Packed: Algorithm {
    /// The state in a cell's word.
    fn unpacked(word: u128, window: Nanos) -> Self;
    /// The cell's word for this state.
    fn packed(&self, quota: &Quota) -> u128;
    /// [`Algorithm::decide`] on the state in a cell's word.
    fn decide_packed(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;
}

/// A cell whose state is one word ([`Packed`]): a decision is one compare-exchange.
pub(super) struct WordCell<A> {
    key: StampedKey,
    state: AtomicU128,
    algorithm: PhantomData<fn() -> A>,
}

/// [`FixedWindow`]: the window's end (high word) and count (low word); the start is
/// `end - window`.
pub(super) type FixedCell = WordCell<FixedWindow>;

/// [`SlidingCounter`]: the expiry (high word), the current and the previous window's counts
/// (32 bits each in the low word). The current window's start is the expiry less one window,
/// or two while the current window has calls. Counts fit in `u32`: a [`Quota`]'s capacity is
/// at most [`MAX_CAPACITY`](crate::quota::MAX_CAPACITY).
pub(super) type CounterCell = WordCell<SlidingCounter>;

impl<A: Packed> Cell for WordCell<A> {
    type State = A;
    fn fresh() -> Self {
        WordCell {
            key: StampedKey::default(),
            state: AtomicU128::new(0),
            algorithm: PhantomData,
        }
    }
    fn kept(&self) -> &StampedKey {
        &self.key
    }
    fn keep(&mut self, kept: StampedKey) {
        self.key = kept;
    }
    fn expires_at(&self) -> Nanos {
        unpack(self.state.load(Ordering::Acquire)).0
    }
    #[inline(always)]
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let step = Decide::<A> {
            now,
            quota,
            cost,
            commit,
            algorithm: PhantomData,
        };
        update(&self.state, step)
    }
    fn take(&mut self, _: &mut Side, quota: &Quota) -> A {
        A::unpacked(*self.state.get_mut(), quota.window_nanos())
    }
    fn put(&mut self, _: &mut Side, quota: &Quota, state: A, changed: bool) {
        if changed {
            *self.state.get_mut() = state.packed(quota);
        }
    }
    /// The word has no room for the window that wrote it: the key keeps it. Read from the
    /// word under another window as it was, a reward under a second took a minute's count
    /// (read in the minute's last second, where its end puts it) and a penalty under the
    /// minute wrote its window over a second's count (probes_two_windows).
    const MARKED: bool = true;
    /// The state's own expiry is the word's, whichever window reads it.
    #[inline(always)]
    fn written_elsewhere(&self, now: Nanos, quota: &Quota) -> Written {
        algorithm::written_elsewhere(self.key.mark(), now, quota, |_| self.expires_at())
    }
    fn claim(&mut self, _: Nanos, quota: &Quota) {
        *self.state.get_mut() = 0;
        self.key = self.key.with_mark(quota.window_nanos());
    }
    fn written_under(&mut self, quota: &Quota) -> bool {
        algorithm::written_under(self.key.mark(), quota)
    }
    /// By [`adjust_written`], on the state read under the window that wrote it.
    fn adjust(
        &mut self,
        _: &mut Side,
        now: Nanos,
        quota: &Quota,
        units: u64,
        penalty: bool,
    ) -> u64 {
        let mut written = self.key.mark();
        let word = self.state.get_mut();
        let mut state = A::unpacked(*word, owner(quota, written).window_nanos());
        let moved = adjust_written(&mut state, &mut written, now, quota, units, penalty);
        *word = state.packed(&owner(quota, written));
        if written != self.key.mark() {
            self.key = self.key.with_mark(written);
        }
        moved
    }
}

/// A [`WordCell`]'s decision, one [`update`] step: the state read from the word, decided,
/// and written back if the call spends. A named step (not a closure) so that it is inlined
/// into the loop: the counter's closure was not (measured under cachegrind: BENCHMARKS.md,
/// `hot_path`, the counter).
struct Decide<'q, A> {
    now: Nanos,
    quota: &'q Quota,
    cost: u64,
    commit: bool,
    algorithm: PhantomData<fn() -> A>,
}

impl<A: Packed> Step<u128> for Decide<'_, A> {
    type Answer = Verdict;
    #[inline(always)]
    fn step(&self, word: u128) -> (u128, Verdict) {
        let mut state = A::unpacked(word, self.quota.window_nanos());
        let verdict = state.decide_packed(self.now, self.quota, self.cost, self.commit);
        if !self.commit {
            return (word, verdict);
        }
        (state.packed(self.quota), verdict)
    }
}

impl Packed for FixedWindow {
    #[inline(always)]
    fn unpacked(word: u128, window: Nanos) -> FixedWindow {
        let (end, count) = unpack(word);
        FixedWindow {
            start: end.saturating_sub(window),
            count,
        }
    }
    #[inline(always)]
    fn packed(&self, quota: &Quota) -> u128 {
        pack(self.expires_at(quota), self.count)
    }
    /// A cell's state is written for the quota it is decided under: its window's end is
    /// kept, and a window of the cell's mark wrote it (any other is claimed first,
    /// `Cell::written_elsewhere`), or it is fresh (an end of 0).
    #[inline(always)]
    fn decide_packed(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        self.decide_written_for(now, quota, cost, commit)
    }
}

impl Packed for SlidingCounter {
    #[inline(always)]
    fn unpacked(word: u128, window: Nanos) -> SlidingCounter {
        let (expires_at, counts) = unpack(word);
        let (current, previous) = (counts >> 32, counts & u64::from(u32::MAX));
        let windows = if current > 0 { 2 } else { 1 };
        SlidingCounter {
            start: expires_at.saturating_sub(windows * window),
            current,
            previous,
        }
    }
    #[inline(always)]
    fn packed(&self, quota: &Quota) -> u128 {
        // Both at most the capacity, which a `Quota` keeps within `u32`.
        let narrow = |n: u64| n.min(u64::from(u32::MAX));
        let counts = (narrow(self.current) << 32) | narrow(self.previous);
        pack(self.expires_at(quota), counts)
    }
    /// As the fixed window's: a cell's state is written for the quota it is decided under.
    #[inline(always)]
    fn decide_packed(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        self.decide_written_for(now, quota, cost, commit)
    }
}

/// [`Gcra`]; the theoretical arrival time is also the expiry. What refunds keep
/// ([`Given`]) is in the shard's [`Side`] table, changed only under its write lock.
pub(super) struct BucketCell {
    key: StampedKey,
    tat: AtomicU64,
}

impl Cell for BucketCell {
    type State = Gcra;
    fn fresh() -> Self {
        BucketCell {
            key: StampedKey::default(),
            tat: AtomicU64::new(0),
        }
    }
    fn kept(&self) -> &StampedKey {
        &self.key
    }
    fn keep(&mut self, kept: StampedKey) {
        self.key = kept;
    }
    fn expires_at(&self) -> Nanos {
        self.tat.load(Ordering::Acquire)
    }
    #[inline(always)]
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        // A decision reads and writes the arrival time alone; the shift stays as it is.
        update(&self.tat, |tat| {
            let mut state = Gcra { tat, given: None };
            let verdict = state.decide(now, quota, cost, commit);
            (state.tat, verdict)
        })
    }
    fn shift(&self, side: &Side) -> Nanos {
        if side.is_empty() {
            return 0;
        }
        side.get(&self.key.stamp()).map_or(0, |g| g.shift)
    }
    /// What refunds keep comes out of `side` by the cell's stamp.
    fn take(&mut self, side: &mut Side, _: &Quota) -> Gcra {
        Gcra {
            tat: *self.tat.get_mut(),
            given: side.remove(&self.key.stamp()),
        }
    }
    /// ... and goes back there (a cell not kept, stamp 0, is never given back to).
    fn put(&mut self, side: &mut Side, _: &Quota, state: Gcra, _: bool) {
        *self.tat.get_mut() = state.tat;
        let stamp = self.key.stamp();
        if let Some(given) = state.given.filter(|_| stamp != 0) {
            side.insert(stamp, given);
        }
    }
    /// One arrival time counts every spend under any quota, so a decision reads it as it is
    /// (see [`algorithm::written_elsewhere`]); but a reward or a penalty moves it by its own
    /// quota's interval, which gave another quota's spends back (a reward of one under a
    /// 1 s quota on a key a 2 s quota had spent gave that quota half a call; under 3 a 3 s,
    /// a reward of one on 2 a 3 s's spends gave 1 s back where that quota's own gives
    /// nothing before 1.5 s). So the key keeps the interval of the quotas that spent on the
    /// state since it was last full, or [`MIXED`] once two intervals did, and a reward is
    /// given only under that interval (see `adjust`): its units are then every such quota's.
    const MARKED: bool = true;
    fn mark(quota: &Quota) -> Nanos {
        quota.interval_nanos()
    }
    /// `Here` under the interval kept; else `Passed`, claimed under the write lock: on a full
    /// bucket by this interval, on one that still counts as [`MIXED`] (then `Here`).
    #[inline(always)]
    fn written_elsewhere(&self, now: Nanos, quota: &Quota) -> Written {
        let kept = self.key.mark();
        if kept == quota.interval_nanos() || kept == MIXED && self.expires_at() > now {
            return Written::Here;
        }
        Written::Passed
    }
    fn claim(&mut self, now: Nanos, quota: &Quota) {
        self.key = self.key.with_mark(self.spent_under(now, quota));
    }
    /// A claim keeps the arrival time: a look reads it as it is.
    fn decide_passed(&self, now: Nanos, quota: &Quota, cost: u64) -> Verdict {
        self.decide(now, quota, cost, false)
    }
    /// A reward under another interval than the one that spent on the state gives nothing;
    /// a penalty under another marks it [`MIXED`] (so no reward gives its tokens back).
    fn adjust(
        &mut self,
        side: &mut Side,
        now: Nanos,
        quota: &Quota,
        units: u64,
        penalty: bool,
    ) -> u64 {
        let spent = self.spent_under(now, quota);
        if !penalty && spent != quota.interval_nanos() {
            return 0;
        }
        self.moved(side, quota, spent, |state| {
            state.adjust(now, quota, units, penalty)
        })
    }
}

impl BucketCell {
    /// A debt of `time` more under `quota` (`Gcra::owe`): a reload's carry of another
    /// bucket's debt (`carry.rs`), kept as a penalty of `quota`'s tokens is. The time moved.
    pub(super) fn owe(&mut self, side: &mut Side, now: Nanos, quota: &Quota, time: Nanos) -> u64 {
        let spent = self.spent_under(now, quota);
        self.moved(side, quota, spent, |state| state.owe(now, time))
    }

    /// `change` on the state (what it answers: what moved), the interval `spent` kept when
    /// it moved anything.
    fn moved(
        &mut self,
        side: &mut Side,
        quota: &Quota,
        spent: Nanos,
        change: impl FnOnce(&mut Gcra) -> u64,
    ) -> u64 {
        let mut state = self.take(side, quota);
        let moved = change(&mut state);
        self.put(side, quota, state, true);
        if moved > 0 && spent != self.key.mark() {
            self.key = self.key.with_mark(spent);
        }
        moved
    }

    /// The interval kept once `quota` spends at `now`: its own on a full bucket (or one that
    /// kept none) and where it is kept already; else [`MIXED`].
    fn spent_under(&self, now: Nanos, quota: &Quota) -> Nanos {
        let (kept, own) = (self.key.mark(), quota.interval_nanos());
        if kept == 0 || kept == own || self.expires_at() <= now {
            own
        } else {
            MIXED
        }
    }
}

/// The interval a token bucket's key keeps once quotas of two intervals spent on its state
/// since it was last full: no quota's (a reward gives nothing back).
const MIXED: Nanos = Nanos::MAX;

const _: () = assert!(std::mem::size_of::<FixedCell>() == 32);
const _: () = assert!(std::mem::size_of::<CounterCell>() == 32);
const _: () = assert!(std::mem::size_of::<BucketCell>() == 24);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::{self, State};

    proptest! {
        /// The counter's cell finds the window of `now` from the recorded one (in it, in the
        /// next, or past both: a division): a call whose `now` predates the recorded window
        /// (a clock read before another caller's) is still decided in that window, as the
        /// algorithm decides it, at every step of a clock that goes back and forth across
        /// window boundaries, up to three windows at a time.
        #[test]
        fn a_counter_cell_decides_an_older_now_in_the_recorded_window(
            calls in prop::collection::vec((any::<bool>(), 0..30_000_000u64, 1..=2u64, any::<bool>()), 1..200)
        ) {
            let q = Quota::new(5, Duration::from_millis(10))
                .unwrap()
                .with_strategy(crate::syntax::Strategy::SlidingWindowCounter);
            let (cell, mut state) = (CounterCell::fresh(), State::new(q.strategy()));
            let mut now = 1_000 * q.window_nanos();
            for (back, step, cost, commit) in calls {
                now = if back { now - step } else { now + step };
                let want = algorithm::decide(&mut state, now, &q, cost, commit).unwrap();
                prop_assert_eq!(cell.decide(now, &q, cost, commit), want);
            }
        }
    }
}
