//! [`Options`]: what one call asks for.

use std::time::Duration;

use crate::quota::Overrides;
use crate::syntax::Strategy;

/// Per-call options: which tier, what the call costs, and [`Overrides`] of the tier's or
/// module's limit, window, burst, strategy and refill.
///
/// ```
/// use ratelimit_core::{Options, Strategy};
/// use std::time::Duration;
///
/// let opts = Options::new().tier("pro").cost(5);
/// let custom = Options::new().limit(3).window(Duration::from_secs(10)).strategy(Strategy::TokenBucket);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options<'a> {
    /// The tier; `None` uses the default tier, else the default limit.
    pub tier: Option<&'a str>,
    /// The call's weight (default 1).
    pub cost: u64,
    /// The settings this call gives itself, over its tier's and the module's.
    pub overrides: Overrides,
    /// The budget's name (an annotated fn's path): used in errors, events and `stats().by_method`.
    pub budget: Option<&'a str>,
    /// Whether the call spends from the budget (`false` only looks, like `status`).
    pub consume: bool,
    /// Whether a call over its limit waits in the queue (`Some(true)`) or is refused at once
    /// (`Some(false)`); `None` follows the configuration's `queue_enabled`.
    pub queue: Option<bool>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options::new()
    }
}

impl<'a> Options<'a> {
    /// Cost 1, no tier, no overrides.
    pub const fn new() -> Self {
        Options {
            tier: None,
            cost: 1,
            overrides: Overrides::new(),
            budget: None,
            consume: true,
            queue: None,
        }
    }
    /// Under this tier.
    pub const fn tier(mut self, tier: &'a str) -> Self {
        self.tier = Some(tier);
        self
    }
    /// With this weight.
    pub const fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }
    /// With this limit.
    pub const fn limit(mut self, limit: u64) -> Self {
        self.overrides = self.overrides.limit(limit);
        self
    }
    /// With this window.
    pub const fn window(mut self, window: Duration) -> Self {
        self.overrides = self.overrides.window(window);
        self
    }
    /// With this burst.
    pub const fn burst(mut self, burst: u64) -> Self {
        self.overrides = self.overrides.burst(burst);
        self
    }
    /// With this strategy.
    pub const fn strategy(mut self, strategy: Strategy) -> Self {
        self.overrides = self.overrides.strategy(strategy);
        self
    }
    /// With this token-bucket refill, tokens per window.
    pub const fn refill(mut self, refill: u64) -> Self {
        self.overrides = self.overrides.refill(refill);
        self
    }
    /// On behalf of this budget.
    pub const fn budget(mut self, budget: &'a str) -> Self {
        self.budget = Some(budget);
        self
    }
    /// Whether this call waits for capacity when over its limit (in the service's bounded
    /// queue, at most its `queue_timeout`) rather than being refused; the default follows
    /// `queue_enabled`. Never on unauthenticated endpoints: see [`Config`](crate::Config).
    pub const fn queue(mut self, queue: bool) -> Self {
        self.queue = Some(queue);
        self
    }
    /// Whether to spend (`true`, the default) or only look.
    pub const fn consume(mut self, consume: bool) -> Self {
        self.consume = consume;
        self
    }
}
