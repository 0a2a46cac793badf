//! The one quota that holds a call on one state to several: a reload's transition keeps a
//! replaced configuration's quota on a state (the same store key, so the same strategy and
//! window) for one of its windows, and a call there is decided under what all of them give.

use super::Quota;
use crate::clock::Nanos;
use crate::syntax::Strategy;

impl Quota {
    /// A quota under which the calls on one state get no more than `self` (the running
    /// configuration's, which decides every call on the state since it was installed) and no
    /// more than any of `old` (replaced ones, whose calls wrote the state) gives. Every quota
    /// has the same strategy and window.
    ///
    /// - A windowed strategy counts calls in the window: the lowest capacity.
    /// - A token bucket's state is a debt in time (its arrival time), and its two limits are
    ///   the debt it tolerates (capacity times interval) and what a token costs (the
    ///   interval). The quota given costs the longest interval and tolerates the least debt
    ///   of: each old quota's own tolerance (its spends wrote the state at its interval, so
    ///   a debt within it is within its capacity) and the running one's capacity at the
    ///   longest interval (every spend since it was installed is at that interval). Its
    ///   capacity is what that debt holds of the interval, at least 1 where every quota has
    ///   one: a quota of 1 admits one call only on an empty debt, which every bucket of
    ///   capacity 1 or more admits too. Smaller changes are wrong: the lowest capacity
    ///   alone kept a faster old refill (59 calls in a minute where the new bucket gave 10,
    ///   probes_refill_reloads); the lowest capacity at the longest interval read a faster
    ///   bucket's spends as fewer tokens (probes_kept_against seed 2019358).
    ///
    /// The longest block of them all is kept.
    pub(crate) fn held_to<'a>(&'a self, old: impl Iterator<Item = &'a Quota> + Clone) -> Quota {
        let all = || std::iter::once(self).chain(old.clone());
        let block = all().map(|q| q.block).max().unwrap_or(self.block);
        let lowest = all().min_by_key(|q| q.capacity).unwrap_or(self);
        let slowest = all().max_by_key(|q| q.interval).unwrap_or(self);
        if self.strategy != Strategy::TokenBucket || all().all(|q| q.interval == self.interval) {
            return Quota { block, ..*lowest };
        }
        let interval = slowest.interval;
        let tolerance = old
            .map(Quota::tolerance_nanos)
            .fold(self.capacity.saturating_mul(interval), Nanos::min);
        let capacity = match lowest.capacity {
            0 => 0,
            _ => (tolerance / interval).max(1),
        };
        let refill = Some(slowest.refill_per_window());
        match Quota::from_parts(capacity, slowest.window, 0, Strategy::TokenBucket, refill) {
            Ok(held) => Quota { block, ..held },
            // Within every quota's bounds, so always made; were it not, no call passes.
            Err(_) => Quota {
                block,
                limit: 0,
                burst: 0,
                capacity: 0,
                ..*lowest
            },
        }
    }

    /// Whether `self`, made by [`held_to`](Self::held_to), holds a call to no less than
    /// `alone` does: the same capacity at the same interval, so `alone` may decide by itself.
    pub(crate) fn holds_no_less_than(&self, alone: &Quota) -> bool {
        (self.capacity, self.interval) == (alone.capacity, alone.interval)
    }

    /// `self`, a token bucket held to until `until` ([`held_to`](Self::held_to)), for a
    /// call of `cost` at `now` when a quota tolerating a debt of `then` holds after it: its
    /// tolerance cut to `then` plus the time left until `until`, so that what its calls
    /// leave owing at `until` is within what the next quota tolerates (`None` where that
    /// cuts nothing, or it is not a bucket). Held whole, a burst spent at a slower refill
    /// was read at the faster one after the transition: 10 a minute reloaded to 10 a second,
    /// calls refused for up to the minute's whole tolerance after its window
    /// (probes_draining_buckets). Never below the call's own cost (nor 1), so that a cost the
    /// held quota takes is never an error: such a call may leave at most its own cost owing.
    /// Only ever lower than `self`: a call is held to no more than the transition gives.
    /// Not for a quota with a block, held whole as before: there a refusal of the cut's
    /// alone began the block, and the key was refused for the whole block past the window
    /// where the debt it spared was drained long before (probes_draining_attacks: 5 calls
    /// at once at +50 s of a reload from 10 a minute to 10 a second, blocking for an hour:
    /// 1 admitted and every call refused until +3,650 s, where held whole all 5 were and
    /// the calls from +80 s again).
    pub(crate) fn draining_by(
        &self,
        until: Nanos,
        then: Nanos,
        now: Nanos,
        cost: u64,
    ) -> Option<Quota> {
        if self.strategy != Strategy::TokenBucket || self.capacity == 0 || self.block > 0 {
            return None;
        }
        let room = then.saturating_add(until.saturating_sub(now));
        let capacity = (room / self.interval.max(1)).max(cost).max(1);
        (capacity < self.capacity).then(|| Quota {
            limit: capacity,
            burst: 0,
            capacity,
            // Explicit: a refill of "the limit" would follow the new limit.
            refill: self.refill_per_window(),
            ..*self
        })
    }

    /// Whether an old state under this quota, one a reload moved a limit away from (another
    /// store key), holds what the moved limit's state under `into` must carry
    /// ([`Carry`](crate::store::Carry)): a token bucket's debt (both token buckets), a block
    /// (both with one).
    pub(crate) fn carries_into(&self, into: &Quota) -> bool {
        self.carries_debt_into(into) || (self.block_nanos() > 0 && into.block_nanos() > 0)
    }

    /// Whether an old state under this quota carries a token bucket's debt into a moved
    /// limit's under `into`: both are token buckets ([`Carry::debt`](crate::store::Carry)).
    pub(crate) fn carries_debt_into(&self, into: &Quota) -> bool {
        self.strategy == Strategy::TokenBucket && into.strategy == Strategy::TokenBucket
    }

    /// How long past a reload that moved a limit away from a state under this quota that
    /// state may hold something ([`carries_into`](Self::carries_into)): it is decided with
    /// the call for one window after the reload, when a token bucket's debt is at most its
    /// tolerance and a block begun then lasts its block. A penalty may leave more debt than
    /// the tolerance: what outlasts this is carried only by a call within it.
    #[inline]
    pub(crate) fn outlasts_by(&self) -> Nanos {
        let debt = match self.strategy {
            Strategy::TokenBucket => self.tolerance_nanos(),
            _ => 0,
        };
        self.window_nanos()
            .saturating_add(debt.max(self.block_nanos()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bucket(limit: u64, refill: u64) -> Quota {
        let minute = Duration::from_secs(60);
        Quota::from_parts(limit, minute, 0, Strategy::TokenBucket, Some(refill)).unwrap()
    }

    #[test]
    fn an_old_bucket_with_a_lower_capacity_and_a_faster_refill_holds_to_its_debt_at_the_new_interval(
    ) {
        // Old: 2 at 1 a second (a debt of 2 s); new: 10 at 1 a minute.
        let (old, new) = (bucket(2, 60), bucket(10, 1));
        let held = new.held_to([&old].into_iter());
        assert_eq!(held.interval_nanos(), new.interval_nanos());
        assert_eq!(held.capacity(), 1);
        // Old: 20 at 1 a second (20 s); new 30 at 6 a minute (10 s a token): 2.
        let held = bucket(30, 6).held_to([&bucket(20, 60)].into_iter());
        assert_eq!((held.capacity(), held.refill_per_window()), (2, 6));
    }

    #[test]
    fn an_old_bucket_tighter_in_both_holds_alone_and_a_windowed_one_to_the_lowest_capacity() {
        // Old: 2 a minute; new: 10 at 1 a second: the old alone (its debt, its interval).
        let (old, new) = (bucket(2, 1), bucket(10, 60));
        assert_eq!(new.held_to([&old].into_iter()), old);
        // A new bucket of lower capacity and slower refill still reads the old one's spends
        // (1 s each) as fewer tokens: held to the old one's debt of 10 s, one call at a time.
        let held = old.held_to([&new].into_iter());
        assert_eq!(
            (held.capacity(), held.interval_nanos()),
            (1, old.interval_nanos())
        );
        // Equal capacities, the old one's refill faster: its debt of 1 s at the new second.
        let held = bucket(10, 60).held_to([&bucket(10, 600)].into_iter());
        assert_eq!((held.capacity(), held.refill_per_window()), (1, 60));
        let minute = Duration::from_secs(60);
        let fixed = |n| {
            Quota::new(n, minute)
                .unwrap()
                .with_strategy(Strategy::FixedWindow)
        };
        assert_eq!(
            fixed(5).held_to([&fixed(3), &fixed(4)].into_iter()),
            fixed(3)
        );
        let blocked = fixed(5).with_block(minute).unwrap();
        assert_eq!(
            blocked.held_to([&fixed(3)].into_iter()).block(),
            Some(minute)
        );
    }

    #[test]
    fn a_held_bucket_drains_its_debt_by_its_end_never_below_the_calls_cost() {
        let second = 1_000_000_000;
        // Held to 10 a minute (6 s a token, 60 s of debt); 10 a second (1 s) after it.
        let held = bucket(10, 10);
        let (until, then) = (60 * second, second);
        assert_eq!(held.draining_by(until, then, 0, 1), None);
        // 31 s left: 32 s of room, 5 tokens of 6 s.
        let cut = held.draining_by(until, then, 29 * second, 1).unwrap();
        assert_eq!(
            (cut.capacity(), cut.interval_nanos()),
            (5, held.interval_nanos())
        );
        assert_eq!(cut.refill_per_window(), 10);
        // At the end, one token, or the call's own cost.
        assert_eq!(
            held.draining_by(until, then, until, 1).unwrap().capacity(),
            1
        );
        assert_eq!(
            held.draining_by(until, then, until, 4).unwrap().capacity(),
            4
        );
        // Neither a bucket of none nor a windowed quota is cut.
        assert_eq!(bucket(0, 10).draining_by(until, then, until, 1), None);
        let fixed = Quota::new(10, Duration::from_secs(60))
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        assert_eq!(fixed.draining_by(until, then, until, 1), None);
        // Nor one with a block.
        let blocking = held.with_block(Duration::from_secs(1)).unwrap();
        assert_eq!(blocking.draining_by(until, then, until, 1), None);
    }

    #[test]
    fn a_bucket_of_no_capacity_held_with_another_admits_nothing() {
        assert_eq!(
            bucket(10, 1)
                .held_to([&bucket(0, 60)].into_iter())
                .capacity(),
            0
        );
    }
}
