//! Token bucket as GCRA: one timestamp per key. Its Redis script is `token_bucket.lua`, beside
//! this file.

use super::{Algorithm, Spend, Verdict, MAX_NOW, NOT_A_STATE};
use crate::clock::Nanos;
use crate::quota::{Quota, MAX_TOLERANCE};

/// Token bucket as GCRA: the theoretical arrival time (`tat`) of the next call decides. The
/// bucket holds `limit + burst` tokens and gains one every `window / refill`. What refunds
/// need is kept only once something was given back ([`Given`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Gcra {
    pub(crate) tat: Nanos,
    pub(crate) given: Option<Box<Given>>,
}

/// The most runs of refunds a bucket remembers ([`Given::runs`]).
pub(crate) const RUNS_KEPT: usize = 8;

/// What a token bucket keeps once something was given back to it, for the refunds after.
///
/// A refund or a reward moves the arrival time back, and with it the end of every spend made
/// after the one given back: a spend's `reset_at` alone no longer tells where it ends. Places
/// tell spends apart: a spend's place is its `reset_at` plus the shift when it was made, the
/// arrival time it left plus every shift before it. A spend of cost `c` takes the places
/// from its place less `c` intervals to its place, after every place taken before it (a
/// spend moves the arrival time on; a refund or a reward moves it back by exactly what it
/// adds to the shift, so places never go back). See [`Gcra::refund`](Algorithm::refund).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Given {
    /// How far refunds and rewards have moved the arrival time back since the state began.
    pub(crate) shift: Nanos,
    /// Runs of places given back, lowest first, none touching the next: each the first and
    /// the last place of the spends given back in it and the time they gave back. A run of
    /// spends given back that took places one after the other is one run, exactly; past
    /// [`RUNS_KEPT`] runs, the two lowest become one, which only makes later refunds give
    /// back less.
    pub(crate) runs: Vec<(Nanos, Nanos, Nanos)>,
}

impl Given {
    /// Remembers the refund of the spend that took the places from `from` to `to`, which
    /// gave back `time`.
    fn remember(&mut self, (from, to, time): (Nanos, Nanos, Nanos)) {
        let at = self.runs.partition_point(|r| r.0 <= from);
        self.runs.insert(at, (from, to, time));
        let mut i = 0;
        while i + 1 < self.runs.len() {
            if self.runs[i].1 == self.runs[i + 1].0 {
                self.merge(i);
            } else {
                i += 1;
            }
        }
        while self.runs.len() > RUNS_KEPT {
            self.merge(0);
        }
    }

    /// Runs `i` and `i + 1` as one, from the first's first place.
    fn merge(&mut self, i: usize) {
        let next = self.runs.remove(i + 1);
        let run = &mut self.runs[i];
        run.1 = next.1;
        run.2 = run.2.saturating_add(next.2);
    }
}

impl Gcra {
    /// A debt of `time` more: the arrival time moved on by it (from `now` on a full bucket),
    /// never more than the largest tolerance past `now`. What it moved. A penalty is one of
    /// its tokens' time ([`adjust`](Algorithm::adjust)); a reload's carry one of the time
    /// another bucket owes past this one, exactly (`Carry::debt`: in whole tokens, each move
    /// rounded the debt up a token again, probes_carry_attacks).
    pub(crate) fn owe(&mut self, now: Nanos, time: Nanos) -> Nanos {
        // A debt of nothing writes nothing, as the scripts' penalty of 0: written, a full
        // bucket's arrival time at `now` was a debt no call made at an older clock read,
        // which a reward there gave back as a token (probes_windowed_keys).
        if time == 0 {
            return 0;
        }
        let tat = self.tat.max(now);
        let most = now.saturating_add(MAX_TOLERANCE as Nanos);
        let next = tat.saturating_add(time).min(most).max(tat);
        self.tat = next;
        next - tat
    }

    /// A bucket's state as a store reads it: its arrival time, and its shift and runs of
    /// refunds when something was given back to it.
    pub(crate) fn new(tat: Nanos, shift: Nanos, runs: Vec<(Nanos, Nanos, Nanos)>) -> Self {
        let given = (shift > 0 || !runs.is_empty()).then(|| Box::new(Given { shift, runs }));
        Gcra { tat, given }
    }

    /// Moves the arrival time back to `next` (before it), adding what it moved to the shift;
    /// `places`: the first and last place of the spend given back, for a refund. Nothing where
    /// the shift would pass [`MAX_NOW`], the bound of every number a store keeps (then
    /// `false`).
    fn move_back(&mut self, next: Nanos, places: Option<(Nanos, Nanos)>) -> bool {
        let moved = self.tat - next;
        let Some(shift) = self.shift().checked_add(moved).filter(|&s| s <= MAX_NOW) else {
            return false;
        };
        if moved == 0 {
            return true;
        }
        let given = self.given.get_or_insert_with(Box::default);
        given.shift = shift;
        if let Some((from, to)) = places {
            given.remember((from, to, moved));
        }
        self.tat = next;
        true
    }
}

impl Algorithm for Gcra {
    const LETTER: u8 = b'T';
    /// A reward adds to the shift: the refunds after it count it as having moved every spend.
    const REFUNDS_SURVIVE_REWARDS: bool = true;

    /// Decides a call of weight `cost`; with `commit`, records it if allowed.
    #[inline]
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let interval = quota.interval_nanos();
        let tolerance = quota.tolerance_nanos();
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
    /// tokens not yet back (`end - now`, at most its cost). The arrival time moves back by
    /// that, never before `now` (a full bucket): never more tokens than the spend still
    /// held (probes_refunds: giving back its whole cost after most of it had refilled
    /// admitted 18 calls at one instant against a capacity of 10).
    ///
    /// The spend's `end` is its `reset_at` moved back by what every refund and reward since
    /// moved it: the shift since it was made, less the refunds of spends made after it (the
    /// runs from its place on, see [`Given`]), which moved only those. Without that, a
    /// refund gave back time a later call spent (probes_redis_refunds: A and B spent, A given
    /// back, C admitted a second later, then B given back gave C's time: 4 admitted in 100 ms
    /// against a bucket of 3). Refunds of spends that took places one after the other are one
    /// run, so the runs are at most one more than the spends not given back, which a bucket
    /// holds at most its capacity of: with a capacity below [`RUNS_KEPT`] every refund is
    /// exact, in any order. Past that many runs, two become one, counted from the first's
    /// first place: a spend between them then counts their refunds as having moved it, and
    /// gives back less than it held, never more. The last spend given back (nothing spent
    /// after it) moves no other: a bucket whose spends are given back in the reverse order
    /// they were made in (one at a time: spent, then given back) keeps no shift at all.
    ///
    /// The instant is never before the bucket's last admitted call as far as the state tells:
    /// a call admitted at `d` left the arrival time at most one tolerance past `d`, so `now` is
    /// taken no earlier than the arrival time less the tolerance (probes_refunds: a refund at
    /// a clock stepped back gave back tokens that had come back in the calls since).
    fn refund(&mut self, spent: Spend, now: Nanos, quota: &Quota, cost: u64) -> bool {
        let now = now.max(self.tat.saturating_sub(quota.tolerance_nanos()));
        let cost_time = quota.interval_nanos().saturating_mul(cost);
        let Some(place) = spent.at.checked_add(spent.shift).filter(|&p| p <= MAX_NOW) else {
            return false;
        };
        let Some(from) = place.checked_sub(cost_time).filter(|_| cost > 0) else {
            return false;
        };
        let (shift, after, taken) = match &self.given {
            Some(given) => (
                given.shift,
                (given.runs.iter())
                    .filter(|r| r.0 >= place)
                    .fold(0, |sum: Nanos, r| sum.saturating_add(r.2)),
                given.runs.iter().any(|r| r.0 < place && r.1 > from),
            ),
            None => (0, 0, false),
        };
        // A shift past the state's own, refunds after the spend it did not count, or places
        // already given back: not a spend made on this state, or one given back.
        let Some(moved) = shift
            .checked_sub(spent.shift)
            .and_then(|m| m.checked_sub(after))
            .filter(|_| !taken)
        else {
            return false;
        };
        let end = spent.at.saturating_sub(moved);
        if now >= end || self.tat <= now || end > self.tat {
            return false;
        }
        let held = cost_time.min(end - now);
        let next = self.tat.saturating_sub(held).max(now);
        if place == self.tat.saturating_add(shift) {
            // The last spend (its place is the arrival time's, shifted): it moves no other
            // spend back, so nothing is added to the shift or the runs, and the next spend's
            // places start where it left them.
            self.tat = next;
            return true;
        }
        self.move_back(next, Some((from, place)))
    }

    fn shift(&self) -> Nanos {
        self.given.as_ref().map_or(0, |g| g.shift)
    }

    /// A penalty moves the arrival time on by its tokens (at most the largest tolerance past
    /// `now`), a reward moves it back (never before `now`: a full bucket), and every spend
    /// with it: it adds to the shift as a refund does, of no spend in particular (a reward
    /// whose shift would pass [`MAX_NOW`] gives nothing).
    fn adjust(&mut self, now: Nanos, quota: &Quota, units: u64, penalty: bool) -> u64 {
        let interval = quota.interval_nanos().max(1);
        let tat = self.tat.max(now);
        let moved = interval.saturating_mul(units);
        if penalty {
            return self.owe(now, moved) / interval;
        }
        let next = tat.saturating_sub(moved).max(now);
        let given = (tat - next) / interval;
        if given > 0 && !self.move_back(next, None) {
            return 0;
        }
        given
    }

    /// An arrival time up to the largest tolerance beyond the last instant decided.
    fn written_by_a_store(&self) -> bool {
        let within = |n: Nanos| n <= MAX_NOW;
        let run = |&(from, to, time): &(Nanos, Nanos, Nanos)| {
            from < to && within(to) && time > 0 && within(time)
        };
        u128::from(self.tat) <= u128::from(MAX_NOW) + MAX_TOLERANCE
            && self.given.as_ref().is_none_or(|g| {
                within(g.shift)
                    && g.runs.len() <= RUNS_KEPT
                    && g.runs.iter().all(run)
                    && g.runs.windows(2).all(|w| w[0].1 < w[1].0)
            })
    }

    /// The arrival time; once something was given back, then the shift and the runs, three
    /// words each (a bucket nothing was given back to keeps the one word it always had).
    fn to_words(&self) -> Vec<u64> {
        let mut words = vec![self.tat];
        if let Some(given) = &self.given {
            words.push(given.shift);
            let runs = given.runs.iter();
            words.extend(runs.flat_map(|&(from, to, time)| [from, to, time]));
        }
        words
    }

    fn from_words(words: &[u64]) -> Result<Self, &'static str> {
        match *words {
            [tat] => Ok(Gcra { tat, given: None }),
            [tat, shift, ref runs @ ..] if shift > 0 && runs.len() % 3 == 0 => {
                let runs = runs.chunks_exact(3).map(|r| (r[0], r[1], r[2])).collect();
                Ok(Gcra::new(tat, shift, runs))
            }
            _ => Err(NOT_A_STATE),
        }
    }
}
