//! The script in the stand-in and the algorithm side by side ([`Pair`]): one clock moved for
//! both, every call decided on both and compared, with the documented differences (see
//! `lua_agrees.rs`, whose properties and `lua_refunds.rs`' run through it).

use std::time::Duration;

use super::arguments::{arguments, supports};
use super::lua_standin::{self, Redis};
use super::reply::Reply;
use crate::algorithm::{self, State, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::{Strategy as Kind, MAX_WINDOW};

pub(super) const KEY: &str = "rl:{user}:lua";
/// Where Redis' clock starts (mid-2025), and the span it stays in (2020 to about 2096): every
/// time the scripts compute from there stays below 2^53.
pub(super) const T0: u64 = 1_750_000_000_000_000;
pub(super) const T_MIN: u64 = 1_600_000_000_000_000;
pub(super) const T_MAX: u64 = 4_000_000_000_000_000;
pub(super) const BOUND: u64 = 1 << 51;
pub(super) const MAX_WINDOW_US: u64 = MAX_WINDOW.as_secs() * 1_000_000;

/// A quota's settings, its window in microseconds.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) strategy: Kind,
    pub(super) limit: u64,
    pub(super) burst: u64,
    pub(super) window_us: u64,
    pub(super) refill: Option<u64>,
}

impl Limits {
    pub(super) fn new(
        strategy: Kind,
        (limit, burst): (u64, u64),
        window_us: u64,
        refill: Option<u64>,
    ) -> Self {
        Limits {
            strategy,
            limit,
            burst,
            window_us,
            refill,
        }
    }

    /// The quota the store is given.
    pub(super) fn quota(&self) -> Quota {
        self.with_window(Duration::from_micros(self.window_us))
    }

    /// The same quota with its window read as microseconds: what the algorithm decides on.
    pub(super) fn in_micros(&self) -> Quota {
        self.with_window(Duration::from_nanos(self.window_us))
    }

    /// Only the bucket refills; the other strategies get one token per microsecond, which
    /// they never read, so that `Quota`'s refill rules (the same for every strategy) accept
    /// any limit in microseconds read as nanoseconds.
    fn with_window(&self, window: Duration) -> Quota {
        let refill = match self.strategy {
            Kind::TokenBucket => self.refill,
            _ => Some(self.window_us),
        };
        Quota::from_parts(self.limit, window, self.burst, self.strategy, refill)
            .unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }

    /// Cut down to what `supports` accepts: at most one token per microsecond, and capacity
    /// times the window (counter) or the emission interval (bucket) within 2^51.
    pub(super) fn fit(mut self) -> Limits {
        let most = BOUND / (self.limit + self.burst).max(1);
        match self.strategy {
            Kind::SlidingWindowCounter => self.window_us = self.window_us.min(most),
            Kind::TokenBucket => {
                let refill = self.refill.unwrap_or(self.limit).max(1);
                if refill > self.window_us {
                    self.refill = Some(self.window_us);
                } else if self.window_us / refill > most {
                    self.refill = Some(self.window_us / most + 1);
                }
            }
            _ => {}
        }
        self
    }
}

/// How the clock moves before a call.
#[derive(Debug, Clone)]
pub(super) enum Move {
    /// A few microseconds on (or back, when negative).
    Tick(i64),
    /// Per mille of the span (a window, or the bucket's tolerance) on (or back).
    Shift(i64),
    /// To the next window (or emission interval) boundary, give or take a microsecond.
    Boundary(i64),
    /// To the microsecond the key's millisecond expiry passes, give or take one.
    Expiry(i64),
    /// To when the last refusal said to retry, give or take one.
    Retry(i64),
    /// To the last reset time, give or take one.
    Reset(i64),
}

impl Move {
    pub(super) fn apply(&self, now: u64, limits: &Limits, redis: &Redis, marks: &Marks) -> u64 {
        let [first, second] = arguments(&limits.quota());
        let (unit, span) = match limits.strategy {
            Kind::TokenBucket => (first, second),
            _ => (first, first),
        };
        let near = |t: Option<u64>, d: i64| t.map_or(now, |t| t.saturating_add_signed(d));
        let share = |p: i64| (span as i128 * p as i128 / 1_000) as i64;
        let next = match *self {
            Move::Tick(d) => now.saturating_add_signed(d),
            Move::Shift(p) => now.saturating_add_signed(share(p)),
            Move::Boundary(d) => near(Some((now / unit + 1) * unit), d),
            Move::Expiry(d) => near(redis.expiry(KEY).flatten().map(|ms| (ms + 1) * 1_000), d),
            Move::Retry(d) => near(marks.retry_at, d),
            Move::Reset(d) => near(marks.reset_at, d),
        };
        next.clamp(T_MIN, T_MAX)
    }
}

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
