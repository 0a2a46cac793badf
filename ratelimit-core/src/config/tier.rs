//! Tiers (named plans).

use std::sync::Arc;

use crate::quota::{Overrides, Quota};
use crate::syntax::Strategy;
use crate::window::Window;

/// A named plan: its own limit, and optionally its own window, burst, strategy, refill rate
/// and queue priority. What it does not set comes from the module.
///
/// ```
/// use ratelimit_core::{Strategy, Tier};
/// let pro = Tier::new("pro", 1_000).window("1m").burst(200).priority(10);
/// let metered = Tier::new("metered", 60).window("1h").strategy(Strategy::TokenBucket).refill(1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub(crate) name: String,
    /// What the tier sets itself but its window: always its limit.
    pub(crate) overrides: Overrides,
    /// The window, checked when the configuration is built so that a bad one is reported
    /// with its field.
    pub(crate) window: Option<Window>,
    pub(crate) priority: i32,
}

impl Tier {
    /// A tier `name` allowing `limit` calls per window (the module's default window unless
    /// [`window`](Self::window) is set).
    pub fn new(name: impl Into<String>, limit: u64) -> Self {
        Tier {
            name: name.into(),
            overrides: Overrides::new().limit(limit),
            window: None,
            priority: 0,
        }
    }

    /// The tier's window: a [`Duration`](std::time::Duration) or text such as `"1m"` (see
    /// [`Window`]).
    pub fn window(mut self, window: impl Into<Window>) -> Self {
        self.window = Some(window.into());
        self
    }

    /// Extra calls on top of the limit (overrides the module's `burst_limit`).
    pub fn burst(mut self, burst: u64) -> Self {
        self.overrides.burst = Some(burst);
        self
    }

    /// Queue priority: higher goes first.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The tier's own strategy (default: the module's).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.overrides.strategy = Some(strategy);
        self
    }

    /// The tier's own token-bucket refill, tokens per window (default: its limit; the
    /// module's `token_refill_rate` applies only to the module's default limit).
    pub fn refill(mut self, refill: u64) -> Self {
        self.overrides.refill = Some(refill);
        self
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A tier after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedTier {
    /// The name.
    pub name: Arc<str>,
    /// What the tier sets itself (its limit always; its window parsed).
    pub overrides: Overrides,
    /// The tier's quota, with the module's settings filling in what the tier does not set.
    pub quota: Quota,
    /// Queue priority.
    pub priority: i32,
    /// `quota`'s identity in store keys, written once here rather than on every call.
    pub(crate) identity: Box<str>,
}
