//! [`Overrides`]: the settings of a limit, each optional, as every place that describes one
//! gives them; `resolve.rs` makes a [`Quota`](super::Quota) of them.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use super::Quota;
use super::{window_for_call, BadWindow, QuotaError};
use crate::syntax::{format_window, Strategy};
use crate::window::Window;

/// The settings of a limit, each optional: what the macros' attribute, per-call
/// [`Options`](crate::Options), a [`Tier`](crate::Tier) and the configuration file say. The
/// one function that turns them into a [`Quota`] fills in what is missing from the tier and
/// the module (see [`RateLimitService::quota_for`](crate::RateLimitService::quota_for)).
///
/// Adding a setting means adding it here (and to its docs): every place that describes a
/// limit reads it from this struct.
///
/// ```
/// use ratelimit_core::{Overrides, QuotaError, Strategy};
/// use std::time::Duration;
///
/// const STRICT: Overrides = Overrides::new().limit(5).burst(1);
/// let bucket = STRICT.window("10s").strategy(Strategy::TokenBucket).refill(1);
/// assert_eq!(bucket.window, Some(Duration::from_secs(10)));
/// // A window that is not one is kept as the rule it breaks: resolving refuses it.
/// assert_eq!(STRICT.window("10 parsecs").problem(), Some(QuotaError::InvalidWindowText));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Overrides {
    /// Calls per window.
    pub limit: Option<u64>,
    /// The window.
    pub window: Option<Duration>,
    /// Extra calls on top of the limit.
    pub burst: Option<u64>,
    /// The algorithm.
    pub strategy: Option<Strategy>,
    /// Token-bucket refill, tokens per window.
    pub refill: Option<u64>,
    /// How long a key stays refused once a call on it was refused.
    pub block: Option<Duration>,
    /// Why a window given to [`window`](Self::window) is not one; a quota is never resolved
    /// from overrides that have a problem.
    problem: Option<BadWindow>,
}

impl Overrides {
    /// Nothing set.
    pub const fn new() -> Self {
        Overrides {
            limit: None,
            window: None,
            burst: None,
            strategy: None,
            refill: None,
            block: None,
            problem: None,
        }
    }
    /// With this limit.
    pub const fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
    /// With this window: a [`Duration`] or text such as `"1m"` (see [`Window`]). Text that is
    /// not a window is kept as its [`problem`](Self::problem): every quota resolved from these
    /// overrides is then refused with [`Error::InvalidQuota`](crate::Error::InvalidQuota).
    pub fn window(mut self, window: impl Into<Window>) -> Self {
        match window_for_call(&window.into()) {
            Ok(window) => {
                self.window = Some(window);
                self.problem = None;
            }
            Err(e) => {
                self.window = None;
                self.problem = Some(e);
            }
        }
        self
    }
    /// With this window, as a duration: the `const` form the macros' declarations use.
    pub(crate) const fn window_duration(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self.problem = None;
        self
    }
    /// With this burst.
    pub const fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }
    /// With this strategy.
    pub const fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }
    /// With this refill rate.
    pub const fn refill(mut self, refill: u64) -> Self {
        self.refill = Some(refill);
        self
    }
    /// Blocking a key for `block` once a call on it was refused (see [`Quota::with_block`]).
    pub const fn block_for(mut self, block: Duration) -> Self {
        self.block = Some(block);
        self
    }
    /// Whether nothing is set (a window that is not one counts as set: it is refused).
    pub const fn is_empty(&self) -> bool {
        self.limit.is_none()
            && self.window.is_none()
            && self.burst.is_none()
            && self.strategy.is_none()
            && self.refill.is_none()
            && self.block.is_none()
            && self.problem.is_none()
    }
    /// These settings over `under`'s: each from these when they set it, else from `under`. A
    /// window that is not one is a window set: it stands over `under`'s (and is refused when
    /// resolved).
    pub(crate) fn or(self, under: Overrides) -> Overrides {
        let (window, problem) = if self.window.is_some() || self.problem.is_some() {
            (self.window, self.problem)
        } else {
            (under.window, under.problem)
        };
        Overrides {
            limit: self.limit.or(under.limit),
            window,
            burst: self.burst.or(under.burst),
            strategy: self.strategy.or(under.strategy),
            refill: self.refill.or(under.refill),
            block: self.block.or(under.block),
            problem,
        }
    }
    /// Why no quota can be resolved from these overrides: a window given as text that is not
    /// one ([`QuotaError::InvalidWindowText`]), or that is zero or too long.
    pub const fn problem(&self) -> Option<QuotaError> {
        match self.problem {
            Some(bad) => Some(bad.error()),
            None => None,
        }
    }
}

impl fmt::Display for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut item = |f: &mut fmt::Formatter<'_>, args: fmt::Arguments<'_>| {
            let r = write!(f, "{sep}{args}");
            sep = ", ";
            r
        };
        if let Some(l) = self.limit {
            item(f, format_args!("limit {l}"))?;
        }
        if let Some(w) = self.window {
            item(f, format_args!("window {}", format_window(w)))?;
        }
        if let Some(e) = self.problem() {
            item(f, format_args!("invalid window ({e})"))?;
        }
        if let Some(b) = self.burst {
            item(f, format_args!("burst {b}"))?;
        }
        if let Some(s) = self.strategy {
            item(f, format_args!("{s}"))?;
        }
        if let Some(r) = self.refill {
            item(f, format_args!("refill {r} per window"))?;
        }
        if let Some(b) = self.block {
            item(f, format_args!("block {}", format_window(b)))?;
        }
        if sep.is_empty() {
            f.write_str("no overrides")?;
        }
        Ok(())
    }
}
