//! What a store is asked for several limits decided as one: [`Stacked`], its [`Check`]s and
//! the old states it carries ([`Carry`]). Checked when made, as a [`Request`] is.
//!
//! [`Request`]: super::Request

use super::request::{Mode, Request, StoreKey};
use crate::algorithm;
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;

/// One limit of a [`Stacked`] call: a key, its quota, the call's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'a> {
    /// The store key.
    pub key: StoreKey<'a>,
    /// The limit.
    pub quota: &'a Quota,
    /// What the call costs under it.
    pub cost: u64,
}

/// A state a reload moved one of a stacked call's limits away from (another window, tier
/// name or key prefix: another store key), which may still hold something the moved limit's
/// state must not forget ([`Stacked::carried`]): a token bucket's debt, a block. (Or, while
/// that old state is decided with the call too, the moved state, whose block the old one
/// must not forget either: [`block_only`](Self::block_only).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carry<'a> {
    /// The old state's key.
    pub from: StoreKey<'a>,
    /// The limit it was decided under.
    pub quota: &'a Quota,
    /// The check whose state it is carried into (an index into [`Stacked::checks`]).
    pub into: usize,
    /// Whether only its block is carried ([`block`](Self::block); its debt not:
    /// [`carries_debt`](Self::carries_debt)). So it is while the old state is still decided
    /// with the call (its old window), both ways: the old state into the moved one, and the
    /// moved one into the old (`from` then the moved state's key, `quota` its quota). There
    /// each state's debt holds the call by itself (carried, the old one's whole debt held
    /// the moved state to it), but a refusal by one beside the other's block began a block
    /// of its own from then, past the block's end (a bucket blocked for 300 s, the moved
    /// state refusing a second later: told 300 s where the one bucket's block ends 299 s
    /// on: probes_blocks_beside_moves).
    pub block_only: bool,
}

impl Carry<'_> {
    /// The debt, in time, that carries what the old state owes into the moved limit's
    /// state: when both are token buckets, the old one full again at `from_full_at` (a look
    /// of cost 0 at it: its `reset_at`) and the moved one at `into_full_at` under `into`, at
    /// `now`, the time that leaves the moved bucket full again exactly when the old one is
    /// (`Gcra::owe`, from the later of `into_full_at` and `now`); 0 when it is already, or
    /// either is another algorithm. A token bucket's state is a debt in time (as a reload on
    /// one state keeps it, whatever the refill: `Quota::held_to`), so the debt is carried as
    /// time: carried as tokens, at each bucket's interval, a slower old bucket's debt drained
    /// slower than the moved one's and was carried again at every call, the moved bucket held
    /// to the old refill and its refusals' waits untrue (probes_draining_attacks); carried in
    /// whole tokens of the moved bucket, each chained move rounded it up a token again (8
    /// admitted where the bucket gives 10: probes_carry_attacks). The one rule every store
    /// carries by (`lua/carry.lua`'s `carried_time` too, in microseconds).
    pub fn debt(
        &self,
        from_full_at: Nanos,
        into: &Quota,
        into_full_at: Nanos,
        now: Nanos,
    ) -> Nanos {
        if !self.carries_debt(into) {
            return 0;
        }
        from_full_at.saturating_sub(into_full_at.max(now))
    }

    /// Whether a debt is carried at all into a state under `into` ([`debt`](Self::debt)):
    /// both are token buckets, and more than the block is carried
    /// ([`block_only`](Self::block_only)). A store reads neither state for it otherwise.
    pub fn carries_debt(&self, into: &Quota) -> bool {
        !self.block_only && self.quota.carries_debt_into(into)
    }

    /// Until when the moved limit's state is blocked for a block on the old state until
    /// `from_blocked_until` (its [`block`](Quota::block) in force at `now`): when the moved
    /// limit's quota has a block (a quota without one reads none, on any state).
    pub fn block(&self, into: &Quota, from_blocked_until: Nanos, now: Nanos) -> Option<Nanos> {
        (into.block_nanos() > 0 && self.quota.block_nanos() > 0 && from_blocked_until > now)
            .then_some(from_blocked_until)
    }
}

/// A call decided against several limits as one ([`Store::decide_all`](super::Store::decide_all)),
/// at one time and in one mode. Made checked: every check's cost as for a [`Request`], and no
/// key twice (its two looks would both see the state before either spent).
#[derive(Debug, Clone, Copy)]
pub struct Stacked<'a> {
    checks: &'a [Check<'a>],
    carried: &'a [Carry<'a>],
    now: Nanos,
    mode: Mode,
    /// Where the checks of old states begin ([`with_old_states_from`](Self::with_old_states_from)).
    olds_at: usize,
}

impl<'a> Stacked<'a> {
    /// `checks` at `now` in `mode`, checked.
    pub fn new(checks: &'a [Check<'a>], now: Nanos, mode: Mode) -> Result<Self, Error> {
        Self::carrying(checks, &[], now, mode)
    }

    /// `checks` at `now` in `mode`, each state `carried` names carried into its check's
    /// first ([`carried`](Self::carried)), checked: each carried into a check there is, from
    /// another key than that check's.
    pub fn carrying(
        checks: &'a [Check<'a>],
        carried: &'a [Carry<'a>],
        now: Nanos,
        mode: Mode,
    ) -> Result<Self, Error> {
        for (i, check) in checks.iter().enumerate() {
            if checks[..i].iter().any(|other| other.key == check.key) {
                return Err(Error::InvalidKey {
                    reason: "the same key twice in one stacked decision",
                });
            }
            algorithm::check_cost(check.quota, check.cost, mode.spends())?;
        }
        for carry in carried {
            if checks.get(carry.into).is_none_or(|c| c.key == carry.from) {
                return Err(Error::InvalidKey {
                    reason: "a state carried into no other check of the stacked decision",
                });
            }
        }
        Ok(Stacked {
            checks,
            carried,
            now,
            mode,
            olds_at: checks.len(),
        })
    }

    /// The limits, in order.
    pub fn checks(&self) -> &'a [Check<'a>] {
        self.checks
    }

    /// The same call, told that its checks from `at` on are old states a reload moved some
    /// of its limits away from, still decided with the call (their old window): a store that
    /// decides the checks in more than one step decides those first (on a Cluster, their
    /// slots before the others': `store/redis/slots.rs`). None are, unless told.
    pub(crate) fn with_old_states_from(self, at: usize) -> Self {
        Stacked {
            olds_at: at.min(self.checks.len()),
            ..self
        }
    }

    /// Whether the check of `key` is one of an old state
    /// ([`with_old_states_from`](Self::with_old_states_from)); read by the Redis store alone.
    #[cfg(feature = "redis")]
    pub(crate) fn is_old_state(&self, key: StoreKey<'_>) -> bool {
        self.checks[self.olds_at..].iter().any(|c| c.key == key)
    }

    /// Where the checks of old states begin (the number of checks when none are).
    pub(crate) fn olds_at(&self) -> usize {
        self.olds_at
    }

    /// The old states a reload moved some of the limits away from, each carried into its
    /// check's state before anything is decided, in one atomic step with the decision, so
    /// that the moved limit's state is never fresher than the old one's: a token bucket
    /// (both token buckets) owes at least the time the old one owes ([`Carry::debt`], added
    /// to its arrival time as a [`Store::adjust`](super::Store::adjust) penalty adds its
    /// tokens' time; not for a carry of the block only, [`Carry::block_only`]), and a key
    /// blocked on the old state is blocked on the moved one until the same time when the
    /// moved limit's quota blocks ([`Carry::block`]). Written in every mode, a look's too
    /// (what is carried is what the state is). A store that does this says so with
    /// [`Store::carries`](super::Store::carries).
    pub fn carried(&self) -> &'a [Carry<'a>] {
        self.carried
    }

    /// Each limit as the one-limit request it is, in order.
    pub fn requests(&self) -> impl Iterator<Item = Request<'a>> + 'a {
        let (now, mode) = (self.now, self.mode);
        self.checks
            .iter()
            .map(move |c| Request::checked(c.key, c.quota, c.cost, now, mode))
    }

    /// The time of the decision.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Whether the call spends or looks.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the call spends.
    pub fn spends(&self) -> bool {
        self.mode.spends()
    }

    /// The same call as a look at every limit.
    pub fn as_look(&self) -> Self {
        Stacked {
            mode: Mode::Look,
            ..*self
        }
    }
}
