//! Sliding window log: one entry per admitted call; exact. Its Redis script is
//! `sliding_log.lua`, beside this file.

use std::collections::VecDeque;

use super::{Algorithm, Spend, Verdict, MAX_NOW, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::{Quota, MAX_CAPACITY};

/// Sliding window log: one entry per admitted call; exact.
///
/// A hit at `t` counts while `now < t + window`, so no rolling window of length `window` ever
/// holds more than `limit + burst` admitted calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlidingLog {
    /// (time, cost) of each admitted call, oldest first.
    hits: VecDeque<(Nanos, u32)>,
    /// Sum of the costs in `hits`.
    total: u64,
}

impl Algorithm for SlidingLog {
    const LETTER: u8 = b'L';

    /// Decides a call of weight `cost`; with `commit`, records it if allowed (and then drops
    /// entries that have left the window).
    #[inline]
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        // Never decide before the newest hit: the log stays in time order, and a caller with a
        // slightly older `now` cannot count hits that are already there as not yet made.
        let now = self.hits.back().map_or(now, |&(t, _)| now.max(t));
        let window = quota.window_nanos();
        let live_from = |t: Nanos| t + window > now;
        let expired = expired(&self.hits, |t| !live_from(t));
        let stale: u64 = self.hits.range(..expired).map(|&(_, c)| c as u64).sum();
        let used = self.total - stale;
        let capacity = quota.capacity();
        if used + cost <= capacity {
            // Full again one window after the newest hit counted: this call's, or for a look
            // (cost 0) the newest live one; a look at an empty log is full now.
            let reset_at = match (cost, self.hits.back()) {
                (0, Some(&(t, _))) if used > 0 => t + window,
                (0, _) => now,
                _ => now + window,
            };
            if commit {
                // Entries are dropped only here, where `now` becomes the newest hit: a refusal
                // at a later `now` must not drop hits that still count if the clock then goes
                // back (to no earlier than the newest hit), as the Redis script does.
                if expired > 0 {
                    self.hits.drain(..expired);
                    self.total -= stale;
                }
                self.hits.push_back((now, cost as u32));
                self.total += cost;
            }
            Verdict {
                allowed: true,
                remaining: capacity - used - cost,
                reset_at,
                retry_after: None,
            }
        } else {
            // Walk the live entries oldest first until enough would have left the window.
            let mut freed = 0;
            let mut retry_at = now + window;
            for &(t, c) in self.hits.range(expired..) {
                freed += c as u64;
                if used - freed + cost <= capacity {
                    retry_at = t + window;
                    break;
                }
            }
            let newest = self.hits.back().map_or(now, |&(t, _)| t);
            Verdict {
                allowed: false,
                remaining: capacity.saturating_sub(used),
                reset_at: newest + window,
                retry_after: Some(retry_at - now),
            }
        }
    }

    /// When this state is indistinguishable from a fresh one.
    fn expires_at(&self, quota: &Quota) -> Nanos {
        self.hits
            .back()
            .map_or(0, |&(t, _)| t + quota.window_nanos())
    }

    /// An admitted spend's `reset_at` is one window after its entry: that entry (its time
    /// and cost) leaves the log while it still counts.
    fn refund(&mut self, spend: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool {
        let spent = spend.at;
        let Some(t) = spent.checked_sub(quota.window_nanos()) else {
            return false;
        };
        if now >= spent {
            return false;
        }
        let from = self.hits.partition_point(|&(at, _)| at < t);
        let found = self
            .hits
            .range(from..)
            .take_while(|&&(at, _)| at == t)
            .position(|&(_, c)| u64::from(c) == cost);
        let Some(i) = found else { return false };
        self.hits.remove(from + i);
        self.total -= cost;
        true
    }

    /// At `now` (never before the newest entry), once the entries that left the window are
    /// dropped: a penalty is an entry of its own (the total kept within the largest capacity),
    /// a reward takes from the newest entries first.
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        // An adjustment of nothing drops nothing, as the script's writes nothing: dropped at
        // its time, the entries still counted at an older clock read (lua_adjusts).
        if units == 0 {
            return 0;
        }
        let now = self.hits.back().map_or(now, |&(t, _)| now.max(t));
        let window = quota.window_nanos();
        let expired = expired(&self.hits, |t| t + window <= now);
        let stale: u64 = self.hits.drain(..expired).map(|(_, c)| u64::from(c)).sum();
        self.total -= stale;
        if penalty {
            let added = units
                .min(MAX_CAPACITY - self.total)
                .min(u64::from(u32::MAX));
            if added > 0 {
                self.hits.push_back((now, added as u32));
                self.total += added;
            }
            return added;
        }
        let mut left = units;
        while left > 0 {
            let Some((_, cost)) = self.hits.back_mut() else {
                break;
            };
            let taken = left.min(u64::from(*cost));
            *cost -= taken as u32;
            self.total -= taken;
            left -= taken;
            if *cost == 0 {
                self.hits.pop_back();
            }
        }
        units - left
    }

    /// A total within the largest capacity, the newest entry no later than the last instant
    /// decided.
    fn written_by_a_store(&self) -> bool {
        self.total <= MAX_CAPACITY && self.entries().last().is_none_or(|(t, _)| t <= MAX_NOW)
    }

    /// The number of entries, then each entry's time and cost.
    fn to_words(&self) -> Vec<u64> {
        let mut words = vec![self.len() as u64];
        for (t, c) in self.entries() {
            words.push(t);
            words.push(u64::from(c));
        }
        words
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        // The count is compared with what the bytes hold, never multiplied: twice a count of
        // 2^63 or more wraps, and read a claimed 2^63 entries as none.
        let [n, entries @ ..] = words else {
            return Err(NOT_A_STATE);
        };
        if entries.len() % 2 != 0 || u64::try_from(entries.len() / 2) != Ok(*n) {
            return Err(NOT_A_STATE);
        }
        let mut log = SlidingLog::default();
        for pair in entries.chunks_exact(2) {
            let cost = u32::try_from(pair[1]).map_err(|_| "a log entry's cost")?;
            if !log.restore(pair[0], cost) {
                return Err("a log entry out of time order or of no cost");
            }
        }
        Ok(log)
    }
}

/// How many of `hits`, oldest first, have left the window (`gone`, true of a prefix): none
/// when the oldest has not (a log whose every entry still counts is not searched); else by a
/// binary search.
#[inline]
fn expired(hits: &VecDeque<(Nanos, u32)>, gone: impl Fn(Nanos) -> bool) -> usize {
    match hits.front() {
        Some(&(t, _)) if gone(t) => hits.partition_point(|&(t, _)| gone(t)),
        _ => 0,
    }
}

impl SlidingLog {
    /// The entries, oldest first: (time, cost).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Nanos, u32)> + '_ {
        self.hits.iter().copied()
    }

    /// Appends an entry read back from storage; `false` if it is out of time order or of
    /// cost 0 (no log this crate wrote looks like that).
    pub(crate) fn restore(&mut self, t: Nanos, cost: u32) -> bool {
        if cost == 0 || self.hits.back().is_some_and(|&(last, _)| last > t) {
            return false;
        }
        self.hits.push_back((t, cost));
        // Saturating: a total this large is refused once read (`written_by_a_store`).
        self.total = self.total.saturating_add(u64::from(cost));
        true
    }

    /// Entries held (admitted calls still in, or not yet pruned from, the log).
    pub(crate) fn len(&self) -> usize {
        self.hits.len()
    }
}
