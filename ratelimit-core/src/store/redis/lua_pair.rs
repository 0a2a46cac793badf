//! The script in the stand-in and the algorithm side by side ([`Pair`]): one clock moved for
//! both, every call decided on both and compared, with the documented differences (see
//! `lua_agrees.rs`, whose properties and `lua_refunds.rs`' run through it).

use super::lua_agrees::{Limits, Move, KEY, T0};
use super::lua_standin::{self, Redis};
use super::reply::Reply;
use super::scripts::supports;
use crate::algorithm::{self, State, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::Strategy as Kind;

/// What the last call left to aim the clock at.
#[derive(Default)]
pub(super) struct Marks {
    pub(super) retry_at: Option<u64>,
    pub(super) reset_at: Option<u64>,
}

/// The script's verdict, in microseconds, as the store asks for it and parses its reply
/// (short replies placed at `now`, the estimate of Redis' clock being exact here).
pub(super) fn script(
    redis: &Redis,
    quota: &Quota,
    now: u64,
    cost: u64,
    commit: bool,
    full: bool,
) -> Verdict {
    let args = (cost, commit, full);
    let reply = match full {
        true => redis.decide_full(quota, KEY, cost, commit),
        false => redis.decide(quota, KEY, cost, commit),
    };
    let value = |r: &lua_standin::Reply| match r {
        lua_standin::Reply::Int(i) => Some(redis::Value::Int(*i)),
        _ => None,
    };
    let value = match &reply {
        lua_standin::Reply::Array(items) => items
            .iter()
            .map(value)
            .collect::<Option<_>>()
            .map(redis::Value::Array),
        r => value(r),
    };
    let (v, at) = value
        .and_then(|v| Reply::parse(&v, quota))
        .and_then(|r| r.verdict(cost, quota, now))
        .unwrap_or_else(|| {
            panic!(
                "{} replied {reply:?} to {args:?} at {now}",
                quota.strategy()
            )
        });
    assert_eq!(at / 1_000, now, "the script's `now` is TIME");
    Verdict {
        reset_at: v.reset_at / 1_000,
        retry_after: v.retry_after.map(|n| n / 1_000),
        ..v
    }
}

/// One algorithm's own step, without `decide`'s checks and its handling of looks.
fn raw(state: &mut State, now: Nanos, q: &Quota, cost: u64, commit: bool) -> Verdict {
    state.decide_raw(now, q, cost, commit)
}

/// The time the state was recorded at, before which nothing is decided.
fn recorded(state: &State) -> Option<Nanos> {
    match state {
        State::Fixed(s) => Some(s.start),
        State::Counter(s) => Some(s.start),
        State::Log(s) => s.entries().last().map(|(t, _)| t),
        State::Bucket(_) => None,
    }
}

/// Every look at `state` now is the same as at a fresh state.
fn same_as_fresh(state: &State, now: Nanos, q: &Quota, what: &str) {
    let fresh = State::new(q.strategy());
    for cost in [0, 1, q.capacity().div_ceil(2), q.capacity()] {
        let (mut a, mut b) = (state.clone(), fresh.clone());
        assert_eq!(
            algorithm::decide(&mut a, now, q, cost, false),
            algorithm::decide(&mut b, now, q, cost, false),
            "{what}: the key expired at {now} but its state still counts, cost {cost}: {state:?}"
        );
    }
}

/// The script in the stand-in and the algorithm side by side, at one clock.
pub(super) struct Pair {
    limits: Limits,
    /// The quota the store is given.
    pub(super) quota: Quota,
    /// The same quota read in microseconds: what the algorithm decides on.
    pub(super) q: Quota,
    pub(super) redis: Redis,
    fresh: State,
    pub(super) state: State,
    pub(super) now: u64,
    marks: Marks,
    /// A refund was given: a sliding log's key may then outlive its state (see `expiry`).
    pub(super) refunded: bool,
}

impl Pair {
    /// `shared`: the fixed window's hot path through the shared script rather than the
    /// quota's own.
    pub(super) fn new(limits: &Limits, shared: bool) -> Pair {
        let quota = limits.quota();
        assert_eq!(supports(&quota), Ok(()), "{limits:?}");
        let redis = Redis::new(T0).expect("the scripts compile");
        if shared {
            redis.share_hot();
        }
        let fresh = State::new(limits.strategy);
        Pair {
            limits: limits.clone(),
            quota,
            q: limits.in_micros(),
            redis,
            state: fresh.clone(),
            fresh,
            now: T0,
            marks: Marks::default(),
            refunded: false,
        }
    }

    /// Sets both clocks to `now`.
    pub(super) fn set_time(&mut self, now: u64) {
        self.now = now;
        self.redis.set_time(now);
    }

    /// Moves both clocks.
    pub(super) fn tick(&mut self, moved: &Move) {
        self.set_time(moved.apply(self.now, &self.limits, &self.redis, &self.marks));
    }

    /// The key is gone once its state counts no more (the state is then fresh again), and
    /// expires when the state does. A refund does not move a sliding log's expiry back (it
    /// removes an entry, the newest maybe): the key may then outlive its state.
    pub(super) fn expiry(&mut self, what: &str) {
        let (limits, q, now) = (&self.limits, &self.q, self.now);
        match self.redis.expiry(KEY) {
            None if self.state != self.fresh => {
                same_as_fresh(&self.state, now, q, what);
                self.state = self.fresh.clone();
            }
            None => {}
            Some(ms) => {
                let expires = self.state.expires_at(q);
                // The fixed window's integer count (whole milliseconds) expires at its
                // window's last millisecond, gone exactly when the window ends; every other
                // state at its end rounded up (it holds its time and may outlive it).
                let integer = limits.strategy == Kind::FixedWindow && limits.window_us % 1_000 == 0;
                let expected = if integer {
                    expires / 1_000 - 1
                } else {
                    expires.div_ceil(1_000)
                };
                if self.refunded && limits.strategy == Kind::SlidingWindow {
                    let ms = ms.expect("the log's key expires");
                    assert!(
                        ms >= expected,
                        "{what}: expiry {ms} before that of {:?}",
                        self.state
                    );
                } else {
                    assert_eq!(ms, Some(expected), "{what}: expiry of {:?}", self.state);
                }
            }
        }
    }

    /// A call on both sides at the clock, compared: the script's verdict and the algorithm's,
    /// in microseconds (`None`: decided without asking Redis, by the same code). `full`: the
    /// script is asked for the full reply (as the stacked script asks a spend kept for a
    /// refund), else as the store asks a single key.
    pub(super) fn decide(
        &mut self,
        cost: u64,
        commit: bool,
        full: bool,
        what: &str,
    ) -> Option<(Verdict, Verdict)> {
        let (limits, q, quota, redis, now) =
            (&self.limits, &self.q, &self.quota, &self.redis, self.now);
        let state = &mut self.state;
        let behind = recorded(state).map_or(0, |t| t.saturating_sub(now));
        let mut before = state.clone();
        let expected = algorithm::decide(state, now, q, cost, commit);
        if algorithm::precheck(now, q, cost, commit) != Ok(None) {
            // Decided without asking Redis, by the same code.
            assert!(cost > q.capacity() || q.capacity() == 0, "{what}");
            assert_eq!(*state, before, "{what}");
            return None;
        }
        let expected = expected.expect("decided");
        // Lua measures a refusal's wait from TIME, Rust from the recorded time; the fixed
        // window's admitted count is placed in the window of TIME (whole milliseconds only:
        // the hot path's, which a full reply does not take).
        let hot = limits.strategy == Kind::FixedWindow && limits.window_us % 1_000 == 0 && !full;
        let from_time = |v: Verdict, recorded: bool| Verdict {
            retry_after: v.retry_after.map(|r| r + behind),
            reset_at: if hot && recorded && v.allowed && behind > 0 {
                (now / limits.window_us + 1) * limits.window_us
            } else {
                v.reset_at
            },
            ..v
        };
        let got = if cost == 0 {
            let look = script(redis, quota, now, 0, false, full);
            let rust = raw(&mut before, now, q, 0, false);
            assert_eq!(look, from_time(rust, false), "{what}: the look of cost 0");
            algorithm::level(0, false, |c, k| script(redis, quota, now, c, k, full))
        } else {
            script(redis, quota, now, cost, commit, full)
        };
        assert_eq!(
            got,
            from_time(expected, commit),
            "{what}: cost {cost}, commit {commit}"
        );
        self.marks.retry_at = got.retry_after.map(|r| now + r).or(self.marks.retry_at);
        self.marks.reset_at = Some(got.reset_at);
        Some((got, expected))
    }
}
