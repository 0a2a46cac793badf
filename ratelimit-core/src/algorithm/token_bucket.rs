//! Token bucket as GCRA: one timestamp per key. Its Redis script is `token_bucket.lua`, beside
//! this file.

use super::{Algorithm, Verdict, MAX_NOW, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::{Quota, MAX_TOLERANCE};

/// Token bucket as GCRA: the theoretical arrival time (`tat`) of the next call is the only
/// state. The bucket holds `limit + burst` tokens and gains one every `window / refill`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Gcra {
    pub(crate) tat: Nanos,
}

impl Algorithm for Gcra {
    const LETTER: u8 = b'T';

    /// Decides a call of weight `cost`; with `commit`, records it if allowed.
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let interval = quota.interval_nanos();
        let capacity = quota.capacity();
        let tolerance = interval.saturating_mul(capacity);
        let tat = self.tat.max(now);
        let new_tat = tat + interval * cost;
        let horizon = now + tolerance;
        if new_tat <= horizon {
            if commit {
                self.tat = new_tat;
            }
            Verdict {
                allowed: true,
                remaining: (horizon - new_tat) / interval,
                reset_at: new_tat,
                retry_after: None,
            }
        } else {
            Verdict {
                allowed: false,
                remaining: horizon.saturating_sub(tat) / interval,
                reset_at: tat,
                retry_after: Some(new_tat - horizon),
            }
        }
    }

    /// When this state is indistinguishable from a fresh one (the bucket is full).
    fn expires_at(&self, _quota: &Quota) -> Nanos {
        self.tat
    }

    /// An admitted spend's `reset_at` is the arrival time it moved the bucket to: its tokens
    /// come back one by one until then, so at `now` what it still holds is the part of its
    /// tokens not yet back (`spent - now`, at most its cost). The arrival time moves back by
    /// that, never before `now` (a full bucket): never more tokens than the spend still
    /// held (probes_refunds: giving back its whole cost after most of it had refilled
    /// admitted 18 calls at one instant against a capacity of 10). Refunds in any order give
    /// back every spend.
    ///
    /// The instant is never before the bucket's last admitted call as far as the state tells:
    /// a call admitted at `d` left the arrival time at most one tolerance past `d`, so `now` is
    /// taken no earlier than the arrival time less the tolerance (probes_refunds: a refund at
    /// a clock stepped back gave back tokens that had come back in the calls since).
    fn refund(&mut self, spent: Nanos, now: Nanos, quota: &Quota, cost: u64) -> bool {
        let tolerance = quota.interval_nanos().saturating_mul(quota.capacity());
        let now = now.max(self.tat.saturating_sub(tolerance));
        if now >= spent || self.tat <= now || cost == 0 {
            return false;
        }
        let held = quota.interval_nanos().saturating_mul(cost).min(spent - now);
        self.tat = self.tat.saturating_sub(held).max(now);
        true
    }

    /// A penalty moves the arrival time on by its tokens (at most the largest tolerance past
    /// `now`), a reward moves it back (never before `now`: a full bucket).
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        let interval = quota.interval_nanos().max(1);
        let tat = self.tat.max(now);
        let moved = interval.saturating_mul(units);
        if penalty {
            let most = now.saturating_add(MAX_TOLERANCE as Nanos);
            let next = tat.saturating_add(moved).min(most).max(tat);
            self.tat = next;
            return (next - tat) / interval;
        }
        let next = tat.saturating_sub(moved).max(now);
        let given = (tat - next) / interval;
        if given > 0 {
            self.tat = next;
        }
        given
    }

    /// An arrival time up to the largest tolerance beyond the last instant decided.
    fn written_by_a_store(&self) -> bool {
        u128::from(self.tat) <= u128::from(MAX_NOW) + MAX_TOLERANCE
    }

    fn to_words(&self) -> Vec<u64> {
        vec![self.tat]
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        match *words {
            [tat] => Ok(Gcra { tat }),
            _ => Err(NOT_A_STATE),
        }
    }
}
