//! One granted slice, as this process spends it: how many units it holds, until when each
//! counts in Redis, and the arithmetic of spending, carrying and giving them back. The table
//! of leases, the grants and the returns are `lease.rs`'.

use std::time::{Duration, Instant};

use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::quota::Quota;

/// One granted slice, as this process spends it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    /// The strategy's number in the lease scripts.
    pub(super) kind: u8,
    /// How many of the store's connections had ended when the grant was sent: the lease is
    /// spent only while that is still the count (see the module's docs).
    pub(super) epoch: u64,
    /// Its field in the key's ledger (`lua/ledger.lua`): never 0.
    pub(super) id: u64,
    /// The quota the slice was priced for: its units are spent only under the same quota (the
    /// store key names the strategy and window, not the limit or the refill, and a unit's
    /// deadline is the granting quota's).
    pub(super) quota: Quota,
    /// Units granted (spent, left, or carried into the call after it).
    pub(super) granted: u64,
    /// Units not yet spent.
    pub(super) left: u64,
    /// Units of the slice spent so far (the token bucket's deadline index).
    pub(super) spent: u64,
    /// Fixed window: when the window ends; token bucket: the first unit's deadline.
    pub(super) until: Instant,
    /// Token bucket: the emission interval (each unit's deadline is one later); zero else.
    pub(super) interval: Duration,
    /// When the grant was sent, and Redis' time (ns) in its reply.
    pub(super) sent: Instant,
    pub(super) redis_now: Nanos,
    /// Redis' `remaining` and `reset_at` (ns) after the grant.
    pub(super) remaining: u64,
    pub(super) reset_at: Nanos,
    /// What `lua/lease_return.lua` checks the state against, in microseconds: the window's
    /// end, or the theoretical arrival time the grant wrote.
    pub(super) stamp_us: u64,
    /// The emission interval in microseconds (token bucket), for the return.
    pub(super) interval_us: u64,
    pub(super) last_used: Instant,
}

impl Lease {
    /// When the next unit stops counting in Redis.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let offset = self.interval.checked_mul(u32::try_from(self.spent).ok()?)?;
        self.until.checked_add(offset)
    }

    /// Whether unspent units still count in Redis at `now`.
    pub(super) fn live(&self, now: Instant) -> bool {
        self.left > 0 && self.deadline().is_some_and(|d| now < d)
    }

    /// Takes out every unit left, when they still count at `now` under `quota` (a call that
    /// needs more spends them with a new slice's): the lease as it was, holding those units.
    pub(super) fn take_rest(&mut self, quota: &Quota, now: Instant, epoch: u64) -> Option<Lease> {
        if *quota != self.quota || epoch != self.epoch || !self.live(now) {
            return None;
        }
        let taken = *self;
        self.left = 0;
        Some(taken)
    }

    /// Puts back the units [`take_rest`](Self::take_rest) took out as `taken`, when this is
    /// still the lease they were taken from.
    pub(super) fn put_back(&mut self, taken: &Lease) {
        if self.left == 0 && self.sent == taken.sent && self.spent == taken.spent {
            self.left = taken.left;
        }
    }

    /// A new slice that spent `granted` units for a call of `cost` whose other `cost -
    /// granted` units (carried from the last lease) stopped counting before it was answered:
    /// the units go back into the slice, and the call is decided on the slice alone. A call the
    /// slice cannot hold is refused, to try again at once (the slice is there for it).
    pub(super) fn respend(&mut self, carried: u64, cost: u64, now: Instant) -> (Verdict, Nanos) {
        let granted = cost - carried;
        self.left += granted;
        self.spent -= granted;
        let (quota, epoch) = (self.quota, self.epoch);
        self.spend(cost, &quota, now, epoch).unwrap_or_else(|| {
            let verdict = Verdict {
                allowed: false,
                remaining: self.remaining.saturating_add(self.left),
                reset_at: self.reset_at,
                retry_after: Some(1_000_000),
            };
            let elapsed = now.saturating_duration_since(self.sent).as_nanos() as u64;
            (verdict, self.redis_now.saturating_add(elapsed))
        })
    }

    /// When the last unit stops counting in Redis (and the ledger may drop the lease).
    pub(super) fn ends(&self) -> Option<Instant> {
        let offset = self
            .interval
            .checked_mul(u32::try_from(self.granted).ok()?)?;
        self.until.checked_add(offset)
    }

    /// Spends `cost` units at `now`, if the lease holds them and they still count (under
    /// `quota`, with no connection ended since the grant: `epoch`).
    pub(super) fn spend(
        &mut self,
        cost: u64,
        quota: &Quota,
        now: Instant,
        epoch: u64,
    ) -> Option<(Verdict, Nanos)> {
        if *quota != self.quota || epoch != self.epoch || cost > self.left || !self.live(now) {
            return None;
        }
        self.left -= cost;
        self.spent += cost;
        self.last_used = now;
        let verdict = Verdict {
            allowed: true,
            remaining: self.remaining.saturating_add(self.left),
            reset_at: self.reset_at,
            retry_after: None,
        };
        let elapsed = now.saturating_duration_since(self.sent).as_nanos() as u64;
        Some((verdict, self.redis_now.saturating_add(elapsed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quota of `capacity` calls per `seconds`.
    fn q(capacity: u64, seconds: u64) -> Quota {
        Quota::new(capacity, Duration::from_secs(seconds)).unwrap()
    }

    fn lease(kind: u8, left: u64, interval_ms: u64, until: Instant) -> Lease {
        Lease {
            kind,
            epoch: 0,
            id: 1,
            quota: q(100, 1),
            granted: left + 1,
            left,
            spent: 1,
            until,
            interval: Duration::from_millis(interval_ms),
            sent: until,
            redis_now: 0,
            remaining: 0,
            reset_at: 0,
            stamp_us: 0,
            interval_us: interval_ms * 1_000,
            last_used: until,
        }
    }

    #[test]
    fn a_fixed_window_slice_is_spent_until_its_window_ends_and_no_further() {
        let t = Instant::now();
        let end = t + Duration::from_secs(1);
        let mut l = lease(1, 3, 0, end);
        assert!(l.spend(2, &q(100, 1), t, 0).is_some());
        assert!(l.spend(2, &q(100, 1), t, 0).is_none(), "one unit left");
        assert!(l.spend(1, &q(99, 1), t, 0).is_none(), "another limit");
        assert!(l.spend(1, &q(100, 2), t, 0).is_none(), "another refill");
        assert!(
            l.spend(1, &q(100, 1), end, 0).is_none(),
            "the window has ended"
        );
        let (v, _) = l
            .spend(1, &q(100, 1), end - Duration::from_nanos(1), 0)
            .unwrap();
        assert!(v.allowed && l.left == 0);
        assert!(!l.live(t));
    }

    #[test]
    fn a_token_bucket_unit_is_spent_only_before_its_slot_is_refilled() {
        // tat0 = t: unit j (the first, j = 0, went to the call that asked) counts until
        // t + j * 10 ms.
        let t = Instant::now();
        let mut l = lease(4, 4, 10, t);
        assert!(l
            .spend(1, &q(100, 1), t + Duration::from_millis(9), 0)
            .is_some());
        // Unit 2's deadline is t + 20 ms.
        assert!(l
            .spend(1, &q(100, 1), t + Duration::from_millis(20), 0)
            .is_none());
        assert!(l
            .spend(1, &q(100, 1), t + Duration::from_millis(19), 0)
            .is_some());
        assert!(
            l.spend(1, &q(100, 1), t, 1).is_none(),
            "a connection has ended since the grant"
        );
        assert!(!l.live(t + Duration::from_millis(30)));
        assert!(l.live(t + Duration::from_millis(29)));
    }

    #[test]
    fn units_carried_to_a_grant_go_back_if_it_refuses_and_count_only_while_they_live() {
        let t = Instant::now();
        let end = t + Duration::from_secs(1);
        let mut l = lease(1, 3, 0, end);
        assert!(
            l.take_rest(&q(100, 2), t, 0).is_none(),
            "another quota's units"
        );
        let taken = l.take_rest(&q(100, 1), t, 0).unwrap();
        assert_eq!((l.left, taken.left), (0, 3));
        assert!(l.spend(1, &q(100, 1), t, 0).is_none(), "taken out");
        l.put_back(&taken);
        assert_eq!(l.left, 3);
        assert!(
            l.take_rest(&q(100, 1), end, 0).is_none(),
            "the window has ended"
        );
        // A new slice of 16 that spent 2 for a call of 5 whose 3 carried units expired
        // meanwhile: the call takes 5 of the slice.
        let mut slice = lease(1, 14, 0, end + Duration::from_secs(60));
        slice.spent = 2;
        let (verdict, _) = slice.respend(3, 5, end);
        assert!(verdict.allowed);
        assert_eq!((slice.left, slice.spent), (11, 5));
        // A slice too small for the call refuses it, keeping its units.
        let mut small = lease(1, 0, 0, end + Duration::from_secs(60));
        small.spent = 2;
        let (verdict, _) = small.respend(3, 5, end);
        assert!(!verdict.allowed && verdict.retry_after.is_some());
        assert_eq!((small.left, small.spent), (2, 0));
    }
}
