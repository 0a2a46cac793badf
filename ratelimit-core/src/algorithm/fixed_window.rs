//! Fixed window: one counter per window, windows aligned to the epoch. Its Redis script is
//! `fixed_window.lua`, beside this file (and the Redis store's `lua/fixed_window_hot.lua` for a
//! window of whole milliseconds).

use super::{foreign, Algorithm, Spend, Verdict, Windowed, MAX_NOW, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::{Quota, MAX_CAPACITY};

/// Fixed window: one counter for the window `[start, start + window)`, windows aligned to
/// multiples of the window since the epoch so that every process agrees on the boundaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FixedWindow {
    pub(crate) start: Nanos,
    pub(crate) count: u64,
}

impl Algorithm for FixedWindow {
    const LETTER: u8 = b'F';

    /// Decides a call of weight `cost`; with `commit`, records it if allowed.
    #[inline]
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        self.decide_windowed(now, quota, cost, commit)
    }

    /// When this state is indistinguishable from a fresh one.
    fn expires_at(&self, quota: &Quota) -> Nanos {
        self.start + quota.window_nanos()
    }

    /// The spend's window ends at `spent`: its count goes back while that window lasts. A
    /// window emptied keeps its start (a count of zero beside a start): a caller whose clock
    /// read predates it is still decided in it, never in the window before, which a fresh
    /// state would let it count a second time (probes_refunds: 9 counted in a window of 5).
    fn refund(&mut self, spend: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool {
        let spent = spend.at;
        let same_window = self.start.checked_add(quota.window_nanos()) == Some(spent);
        if !same_window || now >= spent || self.count < cost || cost == 0 {
            return false;
        }
        self.count -= cost;
        true
    }

    /// In the window of `now` (never before the recorded one): a penalty adds to its count (up
    /// to the largest capacity), a reward takes from it.
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        let now = now.max(self.start);
        let window = quota.window_nanos();
        let start = now - now % window;
        let count = if self.start == start { self.count } else { 0 };
        let next = match penalty {
            true => count.saturating_add(units).min(MAX_CAPACITY),
            false => count - units.min(count),
        };
        // An emptied window keeps its start, as a refund's does; nothing moved, nothing is
        // written (the state of an earlier window reads as this one's 0).
        if next != count {
            *self = FixedWindow { start, count: next };
        }
        next.abs_diff(count)
    }

    /// A start up to the last instant decided, a count within the largest capacity (of zero in
    /// a fresh state, or in a window whose calls were all given back).
    fn written_by_a_store(&self) -> bool {
        self.start <= MAX_NOW && self.count <= MAX_CAPACITY
    }

    fn written_for(&self, quota: &Quota) -> bool {
        self.start % quota.window_nanos() == 0
    }

    fn to_words(&self) -> Vec<u64> {
        vec![self.start, self.count]
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        match *words {
            [start, count] => Ok(FixedWindow { start, count }),
            _ => Err(NOT_A_STATE),
        }
    }
}

impl Windowed for FixedWindow {
    #[inline(always)]
    fn start(&self) -> Nanos {
        self.start
    }

    /// The decision at `now` (never before the recorded window) in the window of `now`, from
    /// `start`.
    #[inline]
    fn decide_in(
        &mut self,
        now: Nanos,
        start: Nanos,
        window: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Verdict {
        let count = if self.start == start {
            self.count
        } else {
            // A state this window did not write: still counting at `now` by its own start,
            // yet not this window's (under one window, a state counting at `now` is the
            // window of `now`). Refused until it ends, never read as a fresh window.
            if self.count > 0 && now < self.start + window {
                return foreign(now, self.start + window);
            }
            0
        };
        let capacity = quota.capacity();
        let end = start + window;
        if count + cost <= capacity {
            if commit {
                *self = FixedWindow {
                    start,
                    count: count + cost,
                };
            }
            Verdict {
                allowed: true,
                remaining: capacity - count - cost,
                // A look (cost 0) at an unused window: full now.
                reset_at: if count + cost > 0 { end } else { now },
                retry_after: None,
            }
        } else {
            Verdict {
                allowed: false,
                remaining: capacity.saturating_sub(count),
                reset_at: end,
                retry_after: Some(end - now),
            }
        }
    }
}
