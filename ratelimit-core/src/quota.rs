//! [`Quota`]: a resolved, validated limit, and [`Overrides`]: the settings every place that
//! describes a limit (the macros' spec, per-call [`Options`](crate::Options), a
//! [`Tier`](crate::Tier), the configuration file) shares.
//!
//! A `Quota` that exists is valid: its fields are private and every constructor checks them,
//! so stores never validate a quota again.

use std::fmt;
use std::time::Duration;

use crate::clock::Nanos;
use crate::syntax::{format_window, ParseError, Strategy, MAX_WINDOW};
use crate::window::Window;

mod both;
mod overrides;

pub use self::overrides::Overrides;

/// The most calls a quota may hold at once (`limit + burst`). Counts are kept in 32 bits in
/// the memory store's cells.
pub const MAX_CAPACITY: u64 = u32::MAX as u64;

/// The slowest refill times the capacity stays below this, so that no timestamp computed by the
/// token bucket overflows.
pub(crate) const MAX_TOLERANCE: u128 = 1 << 62;

/// Why a limit cannot be enforced. Each variant is one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaError {
    /// The window is zero.
    ZeroWindow,
    /// The window is longer than [`MAX_WINDOW`].
    WindowTooLong,
    /// A window was given as text that is not one (see [`Window`]).
    InvalidWindowText,
    /// `limit + burst` is above [`MAX_CAPACITY`] (or overflows).
    CapacityTooLarge,
    /// A refill rate of zero tokens per window was asked for.
    ZeroRefill,
    /// The token bucket would refill more than one token per nanosecond.
    RefillTooFast,
    /// The token bucket's capacity times its refill interval is too large to count.
    RefillTooSlow,
    /// A refill rate was given for a strategy other than the token bucket, which alone
    /// refills: the limit would not be what the configuration reads.
    RefillWithoutTokenBucket,
    /// The block after a refusal is longer than [`MAX_WINDOW`].
    BlockTooLong,
    /// The store cannot count this quota exactly.
    Unsupported {
        /// The store.
        store: &'static str,
        /// Why.
        reason: &'static str,
    },
}

impl std::fmt::Display for QuotaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaError::ZeroWindow => "the window must be longer than zero",
            QuotaError::WindowTooLong => "the window must be at most 366 days",
            QuotaError::InvalidWindowText => {
                "the window given as text is not a duration such as \"500ms\", \"30s\", \"1m\" or \"1h30m\""
            }
            QuotaError::CapacityTooLarge => "limit + burst must be at most 4294967295",
            QuotaError::ZeroRefill => "the refill rate must be at least 1 token per window",
            QuotaError::RefillTooFast => "the refill rate is above one token per nanosecond",
            QuotaError::RefillTooSlow => "limit + burst is too large for so slow a refill rate",
            QuotaError::RefillWithoutTokenBucket => {
                "a refill rate applies to the token bucket only (strategy \"token-bucket\")"
            }
            QuotaError::BlockTooLong => "the block after a refusal must be at most 366 days",
            QuotaError::Unsupported { store, reason } => {
                return write!(f, "{store} cannot enforce this limit exactly: {reason}");
            }
        })
    }
}

impl std::error::Error for QuotaError {}

/// Why a window given to per-call settings is not one: the rules [`window_for_call`] finds,
/// kept in a byte where [`Overrides`] carry them (a [`QuotaError`] takes 40, and every call's
/// options are copied with their overrides), made a [`QuotaError`] where a quota is refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BadWindow {
    /// [`QuotaError::ZeroWindow`].
    Zero,
    /// [`QuotaError::WindowTooLong`].
    TooLong,
    /// [`QuotaError::InvalidWindowText`].
    Text,
}

/// As the rule it stands for: options print as they did when they kept the rule itself.
impl fmt::Debug for BadWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error(), f)
    }
}

impl BadWindow {
    /// The rule this window breaks.
    pub(crate) const fn error(self) -> QuotaError {
        match self {
            BadWindow::Zero => QuotaError::ZeroWindow,
            BadWindow::TooLong => QuotaError::WindowTooLong,
            BadWindow::Text => QuotaError::InvalidWindowText,
        }
    }
}

/// A window as per-call settings take it, which have no build step to report to: the
/// duration, or the rule its text breaks, which every call with it is refused with. A duration
/// is left to the quota's own checks.
pub(crate) fn window_for_call(window: &Window) -> Result<Duration, BadWindow> {
    match window.duration() {
        Ok(d) => Ok(d),
        Err(ParseError::ZeroWindow { .. }) => Err(BadWindow::Zero),
        Err(ParseError::TooLong { .. }) => Err(BadWindow::TooLong),
        Err(_) => Err(BadWindow::Text),
    }
}

/// A window as a configuration field takes it: the duration, or why it cannot be a window, as
/// the message the field is reported with.
pub(crate) fn window_for_field(window: &Window) -> Result<Duration, String> {
    match window.duration() {
        Ok(d) if d.is_zero() => Err(QuotaError::ZeroWindow.to_string()),
        Ok(d) if d > MAX_WINDOW => Err(QuotaError::WindowTooLong.to_string()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// What one decision is made against: a limit per window, extra burst, a strategy, and for the
/// token bucket a refill rate.
///
/// The *capacity* (the effective limit) is `limit + burst`. A limit of zero refuses every call.
/// Every constructor validates, so a `Quota` that exists can be enforced.
///
/// ```
/// use ratelimit_core::{Quota, Strategy};
/// use std::time::Duration;
///
/// let per_user = Quota::per_minute(10)?.with_burst(5)?.with_strategy(Strategy::TokenBucket);
/// assert_eq!(per_user.capacity(), 15);
/// assert_eq!(per_user.window(), Duration::from_secs(60));
/// assert!(Quota::new(1, Duration::ZERO).is_err());
///
/// // In a const, match on the result: an invalid quota fails the build.
/// const SEARCH: Quota = match Quota::per_second(20) {
///     Ok(q) => q,
///     Err(_) => panic!("invalid quota"),
/// };
/// assert_eq!(SEARCH.limit(), 20);
/// # Ok::<(), ratelimit_core::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    window: Duration,
    burst: u64,
    strategy: Strategy,
    /// Token-bucket refill, in tokens per window; `0` means "the limit".
    refill: u64,
    /// The token bucket's emission interval, nanoseconds per token: derived from the window
    /// and the refill when the quota is made, so a decision divides once less.
    interval: Nanos,
    /// [`capacity`](Self::capacity), derived when the quota is made: every decision reads it,
    /// most of them twice or more (the cost's check, the algorithm, the decision).
    capacity: u64,
    /// How long a key stays refused once a call on it was refused (0: not at all).
    block: Nanos,
}

impl Quota {
    /// `limit` calls per `window`, sliding window, no burst.
    pub const fn new(limit: u64, window: Duration) -> Result<Self, QuotaError> {
        Self::from_parts(limit, window, 0, Strategy::SlidingWindow, None)
    }

    /// Every setting at once: `refill` of `None` refills `limit` tokens per window. Inlined:
    /// a call's own overrides make a quota on every call, which was written out to be
    /// returned and then copied where the call keeps it.
    #[inline]
    pub const fn from_parts(
        limit: u64,
        window: Duration,
        burst: u64,
        strategy: Strategy,
        refill: Option<u64>,
    ) -> Result<Self, QuotaError> {
        let refill = match refill {
            Some(0) => return Err(QuotaError::ZeroRefill),
            Some(r) => r,
            None => 0,
        };
        let quota = Quota {
            limit,
            window,
            burst,
            strategy,
            refill,
            interval: 0,
            capacity: 0,
            block: 0,
        }
        .derived();
        match quota.problem() {
            Some(e) => Err(e),
            None => Ok(quota),
        }
    }

    /// `limit` calls per second.
    pub const fn per_second(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` calls per minute.
    pub const fn per_minute(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` calls per hour.
    pub const fn per_hour(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(3_600))
    }

    /// `limit` calls per day.
    pub const fn per_day(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(86_400))
    }

    /// With `burst` extra calls.
    pub const fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        let quota = Self::from_parts(
            self.limit,
            self.window,
            burst,
            self.strategy,
            self.refill_setting(),
        );
        self.keeping_block(quota)
    }

    /// `quota` (made from this one's settings) with this one's block.
    const fn keeping_block(self, quota: Result<Self, QuotaError>) -> Result<Self, QuotaError> {
        match quota {
            Ok(mut quota) => {
                quota.block = self.block;
                Ok(quota)
            }
            Err(e) => Err(e),
        }
    }

    /// Refusing a key for `block` once a call on it was refused, whatever the algorithm says
    /// meanwhile (a block of zero: none). Needs a store that keeps blocks
    /// ([`Store::blocks`](crate::store::Store::blocks): the memory and Redis stores), or
    /// the limit cannot be enforced.
    pub const fn with_block(mut self, block: Duration) -> Result<Self, QuotaError> {
        if block.as_nanos() > MAX_WINDOW.as_nanos() {
            return Err(QuotaError::BlockTooLong);
        }
        self.block = block.as_nanos() as Nanos;
        Ok(self)
    }

    /// How long a key stays refused once a call on it was refused, if at all.
    pub const fn block(&self) -> Option<Duration> {
        match self.block {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// [`block`](Self::block) in nanoseconds (0: none).
    #[inline]
    pub(crate) const fn block_nanos(&self) -> Nanos {
        self.block
    }

    /// With another strategy (valid for any strategy: the rules do not depend on it).
    pub const fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// With a token-bucket refill rate, in tokens per window.
    pub const fn with_refill(self, refill: u64) -> Result<Self, QuotaError> {
        let quota = Self::from_parts(
            self.limit,
            self.window,
            self.burst,
            self.strategy,
            Some(refill),
        );
        self.keeping_block(quota)
    }

    /// Calls per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// Extra calls allowed on top of `limit`.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The algorithm.
    pub const fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// `limit + burst` as written, which every bound on a quota is checked on (here and in
    /// the stores' `supports`), whatever a limit of zero admits ([`capacity`](Self::capacity)).
    pub(crate) const fn written_capacity(&self) -> u64 {
        self.limit.saturating_add(self.burst)
    }

    /// The effective limit: `limit + burst`; zero for a limit of zero, which refuses every
    /// call whatever the burst (a module's `burst_limit` under a suspended tier of limit 0
    /// admitted its burst: `probes_config`).
    #[inline]
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens added per window by the token bucket.
    pub const fn refill_per_window(&self) -> u64 {
        if self.refill == 0 {
            self.limit
        } else {
            self.refill
        }
    }

    /// The refill as it was set (`None`: the limit).
    pub(crate) const fn refill_setting(&self) -> Option<u64> {
        if self.refill == 0 {
            None
        } else {
            Some(self.refill)
        }
    }

    /// The window in nanoseconds.
    pub(crate) const fn window_nanos(&self) -> Nanos {
        self.window.as_nanos() as Nanos
    }

    /// This quota with a window of `window` nanoseconds, for when a state counts by another
    /// window than this quota's ([`algorithm::written_elsewhere`](crate::algorithm)): the
    /// window alone changes (the token bucket's interval does not follow it).
    pub(crate) fn with_window_nanos(&self, window: Nanos) -> Quota {
        Quota {
            window: Duration::from_nanos(window),
            ..*self
        }
    }

    /// The token bucket's emission interval: nanoseconds per token.
    #[inline]
    pub(crate) const fn interval_nanos(&self) -> Nanos {
        self.interval
    }

    /// The token bucket's tolerance: how far past `now` its arrival time may be, the interval
    /// times the capacity. At most [`MAX_TOLERANCE`] in every quota made
    /// ([`problem`](Self::problem) bounds the interval, or the window it divides, times the
    /// capacity as written, never below this one), so the product cannot overflow. Not kept
    /// in the quota: a quota made per call (the service's) paid more for it than a decision
    /// saves (measured under cachegrind: BENCHMARKS.md, `hot_path`).
    #[inline]
    pub(crate) const fn tolerance_nanos(&self) -> Nanos {
        self.interval * self.capacity
    }

    /// With what is derived from the settings filled in: the emission interval and the
    /// capacity, worked out once here rather than on every decision.
    const fn derived(mut self) -> Self {
        let refill = self.refill_per_window();
        self.interval = self.window_nanos() / if refill == 0 { 1 } else { refill };
        self.capacity = match self.limit {
            0 => 0,
            limit => limit.saturating_add(self.burst),
        };
        self
    }

    /// The one rule book: a window longer than zero and at most [`MAX_WINDOW`], a capacity
    /// that fits the stores' counters, and for the token bucket at most one token per
    /// nanosecond and a tolerance (interval x capacity) within 2^62.
    #[inline]
    const fn problem(&self) -> Option<QuotaError> {
        if self.window.is_zero() {
            return Some(QuotaError::ZeroWindow);
        }
        if self.window.as_nanos() > MAX_WINDOW.as_nanos() {
            return Some(QuotaError::WindowTooLong);
        }
        match self.limit.checked_add(self.burst) {
            Some(c) if c <= MAX_CAPACITY => {}
            _ => return Some(QuotaError::CapacityTooLarge),
        }
        if self.refill_per_window() > self.window_nanos() {
            return Some(QuotaError::RefillTooFast);
        }
        // The tolerance (interval x capacity) must stay within 2^62. The interval is at most
        // the window, so most quotas pass without the division (a per-call override is
        // checked on every call).
        let capacity = self.written_capacity() as u128;
        if (self.window_nanos() as u128) * capacity > MAX_TOLERANCE
            && (self.interval_nanos() as u128) * capacity > MAX_TOLERANCE
        {
            return Some(QuotaError::RefillTooSlow);
        }
        None
    }

    /// Whether `other` writes the same [`identity`](Self::identity): a store key of one is a
    /// store key of the other (the same strategy and window).
    pub(crate) fn same_identity(&self, other: &Quota) -> bool {
        (self.strategy, self.window_nanos()) == (other.strategy, other.window_nanos())
    }

    /// A short, stable name for what this quota's state means: its strategy and window
    /// (`T60000` for a token bucket over a minute: the window in milliseconds, or in
    /// nanoseconds with `ns` when it is not a whole number of them). Two quotas with the same
    /// identity can share a key's state; the store key carries it so that two others never
    /// read each other's. Written on every decision, so it is a letter and one number.
    #[inline]
    pub(crate) fn identity(&self, out: &mut impl std::fmt::Write) {
        // Writing into a `String` or a store key's buffer, which never fail.
        let _ = out.write_str(match self.strategy {
            Strategy::FixedWindow => "F",
            Strategy::SlidingWindow => "L",
            Strategy::SlidingWindowCounter => "C",
            Strategy::TokenBucket => "T",
        });
        let nanos = self.window_nanos();
        let mut digits = itoa::Buffer::new();
        let _ = if nanos % 1_000_000 == 0 {
            out.write_str(digits.format(nanos / 1_000_000))
        } else {
            out.write_str(digits.format(nanos))
                .and_then(|()| out.write_str("ns"))
        };
    }
}

impl Default for Quota {
    /// 100 calls per minute, sliding window: the module's defaults.
    fn default() -> Self {
        Quota {
            limit: 100,
            window: Duration::from_secs(60),
            burst: 0,
            strategy: Strategy::SlidingWindow,
            refill: 0,
            interval: 0,
            capacity: 0,
            block: 0,
        }
        .derived()
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {}", self.limit, format_window(self.window))?;
        if self.burst > 0 {
            write!(f, " + burst {}", self.burst)?;
        }
        write!(f, ", {}", self.strategy)?;
        if self.refill != 0 {
            write!(f, ", refill {} per window", self.refill)?;
        }
        if let Some(block) = self.block() {
            write!(f, ", blocked for {} once refused", format_window(block))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_window_names_its_rule() {
        assert_eq!(
            window_for_call(&Window::from("1x")).map_err(BadWindow::error),
            Err(QuotaError::InvalidWindowText)
        );
        assert_eq!(
            window_for_call(&Window::from("")).map_err(BadWindow::error),
            Err(QuotaError::InvalidWindowText)
        );
        assert_eq!(
            window_for_call(&Window::from("0s")).map_err(BadWindow::error),
            Err(QuotaError::ZeroWindow)
        );
        assert_eq!(
            window_for_call(&Window::from("400d")).map_err(BadWindow::error),
            Err(QuotaError::WindowTooLong)
        );
        // Options print the rule itself, as when they kept a `QuotaError`.
        let bad = format!("{:?}", Overrides::new().window("1x"));
        assert!(bad.contains("problem: Some(InvalidWindowText)"), "{bad}");
        assert!(window_for_field(&Window::from("1x"))
            .unwrap_err()
            .contains("\"1x\""));
        assert_eq!(
            window_for_field(&Window::from(Duration::ZERO)),
            Err(QuotaError::ZeroWindow.to_string())
        );
        assert_eq!(
            window_for_call(&Window::from(Duration::ZERO)),
            Ok(Duration::ZERO)
        );
    }

    /// The rules as they were written before the division-free fast path, to check the two
    /// agree.
    fn reference(limit: u64, window: Duration, burst: u64, refill: u64) -> Option<QuotaError> {
        if window.is_zero() {
            return Some(QuotaError::ZeroWindow);
        }
        if window > MAX_WINDOW {
            return Some(QuotaError::WindowTooLong);
        }
        let capacity = limit.checked_add(burst)?;
        if capacity > MAX_CAPACITY {
            return Some(QuotaError::CapacityTooLarge);
        }
        let per_window = if refill == 0 { limit } else { refill };
        let nanos = window.as_nanos() as u64;
        if per_window > nanos {
            return Some(QuotaError::RefillTooFast);
        }
        let interval = nanos / per_window.max(1);
        if (interval as u128) * (capacity as u128) > MAX_TOLERANCE {
            return Some(QuotaError::RefillTooSlow);
        }
        None
    }

    #[test]
    fn constructors_check_every_rule() {
        let windows = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(10),
            Duration::from_secs(1),
            Duration::from_secs(86_400),
            MAX_WINDOW,
            MAX_WINDOW + Duration::from_nanos(1),
        ];
        let counts = [0, 1, 7, 1 << 20, 1_000_000_000, MAX_CAPACITY, u64::MAX];
        let mut checked = 0;
        for window in windows {
            for limit in counts {
                for burst in [0, 1, MAX_CAPACITY / 2, u64::MAX] {
                    for refill in [0, 1, 3, 1_000_000_000, u64::MAX] {
                        let got = Quota::from_parts(
                            limit,
                            window,
                            burst,
                            Strategy::TokenBucket,
                            (refill != 0).then_some(refill),
                        );
                        let want = match limit.checked_add(burst) {
                            None if !window.is_zero() && window <= MAX_WINDOW => {
                                Some(QuotaError::CapacityTooLarge)
                            }
                            _ => reference(limit, window, burst, refill),
                        };
                        assert_eq!(got.err(), want, "{limit} {window:?} {burst} {refill}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 900);
        assert_eq!(
            Quota::per_second(1).unwrap().with_refill(0),
            Err(QuotaError::ZeroRefill)
        );
    }

    #[test]
    fn identity_names_strategy_and_window() {
        let id = |q: Quota| {
            let mut s = String::new();
            q.identity(&mut s);
            s
        };
        let q = Quota::per_minute(5).unwrap();
        assert_eq!(id(q), "L60000");
        assert_eq!(id(q.with_strategy(Strategy::TokenBucket)), "T60000");
        assert_eq!(
            id(Quota::new(1, Duration::from_nanos(1_500)).unwrap()),
            "L1500ns"
        );
        assert_eq!(
            id(Quota::new(1, Duration::from_millis(90_500)).unwrap()),
            "L90500"
        );
    }
}
