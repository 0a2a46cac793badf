//! The record of a fleet's reload horizon a store keeps per key prefix
//! ([`Store::horizon`](super::Store::horizon)): [`Horizon`], and a penalty's end in it,
//! [`Penalty`].

/// How long what a fleet's services wrote under one key prefix may hold a state a reload
/// moves to another ([`Store::horizon`](super::Store::horizon)): each field in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Horizon {
    /// The longest a quota a call's own overrides made may hold something past the reload
    /// that moves it (its window and its bucket's tolerance or its block).
    pub outlasts: crate::clock::Nanos,
    /// The longest window of its own a call was worked out with.
    pub window: crate::clock::Nanos,
    /// The latest penalty's debt at the latest, bounded before the penalty is written.
    pub penalty_bound: Penalty,
    /// The latest penalty's debt as noted after it was written: exact where the bound is
    /// loose (a service tells another's end hidden under its own bound by it).
    pub penalty_end: Penalty,
    /// In what a store returns, the latest bound raised by a service other than
    /// `penalty_bound`'s (none in a raise): what that service reads of the others' bounds,
    /// never its own ([`raised`](Self::raised)). With the largest bound alone, a smaller one
    /// another service raised lay under it, and where that service's exact end was lost
    /// after its penalty (its raise failed, its call dropped, its pod stopped), the largest
    /// bound's raiser read nothing of it: 15 admitted against none
    /// (probes_horizon_ids_redis).
    pub penalty_other: Penalty,
    /// In a raise, how long from now the store keeps the record at least (a store whose
    /// keys expire: the record may expire after it, never before; 0 in a read, and in what
    /// a store returns). The service asks twice the longest of what it raises, and raises
    /// again at its first write past half of that.
    pub keep_nanos: crate::clock::Nanos,
}

/// When a penalty's debt ends, in a [`Horizon`]: as time left, never as an instant, so that
/// services whose clocks disagree read one end (a store shared by a fleet counts it on a
/// clock of its own: Redis' `TIME`). Kept as an instant on one service's clock, another
/// whose clock ran 300 s ahead read it 300 s short: 15 admitted where one service admitted
/// none (probes_horizon_record_redis).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Penalty {
    /// How long from now the debt lasts at most (0: none, or ended).
    pub left: crate::clock::Nanos,
    /// Which service raised it ([`RateLimitService`](crate::RateLimitService)'s id, never 0;
    /// 0 with no end).
    pub by: u64,
}

impl Penalty {
    /// The one of the two that ends later.
    pub fn max(self, other: Penalty) -> Penalty {
        if other.left > self.left {
            other
        } else {
            self
        }
    }
}

impl Horizon {
    /// The record `self` raised by `raise`, as a store raises it: each duration and the
    /// exact end the larger; `raise`'s bound into `penalty_bound` where it ends later (the
    /// former one, if another service's, into `penalty_other`), else into `penalty_other`
    /// where it ends later and another service than `penalty_bound`'s raised it. So
    /// `penalty_other` stays the latest bound of a service other than `penalty_bound`'s.
    pub fn raised(self, raise: Horizon) -> Horizon {
        let (bound, asked) = (self.penalty_bound, raise.penalty_bound);
        let mut other = self.penalty_other;
        if asked.left > bound.left && asked.by != bound.by {
            other = bound;
        } else if asked.left <= bound.left && asked.by != bound.by {
            other = other.max(asked);
        }
        Horizon {
            outlasts: self.outlasts.max(raise.outlasts),
            window: self.window.max(raise.window),
            penalty_bound: bound.max(asked),
            penalty_end: self.penalty_end.max(raise.penalty_end),
            penalty_other: other,
            keep_nanos: self.keep_nanos.max(raise.keep_nanos),
        }
    }

    /// The latest bound raised by a service other than `id` (none: a zero [`Penalty`]).
    pub fn bound_of_others(self, id: u64) -> Penalty {
        [self.penalty_bound, self.penalty_other]
            .into_iter()
            .find(|bound| bound.by != id)
            .unwrap_or_default()
    }
}
