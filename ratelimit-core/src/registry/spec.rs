//! [`Spec`]: what an annotated fn's attribute asked for.

use std::fmt;
use std::time::Duration;

use crate::quota::Overrides;
use crate::syntax::{format_window, Strategy};

/// Which tier an annotated fn is limited under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierSpec {
    /// None named: the module's default tier, else its default limit (unless the fn sets a
    /// `limit` of its own).
    Default,
    /// `tier = "pro"`: checked against the configuration by [`Module`](super::Module) at
    /// start-up.
    Static(&'static str),
    /// `tier = <expr>`: chosen per call; an unknown tier refuses the call.
    Dynamic,
}

/// What an annotated fn asked for, as written in its attribute (windows already parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    overrides: Overrides,
    tier: TierSpec,
    keyed: bool,
    cost: Option<u64>,
    queue: Option<bool>,
    shadow: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec::new()
    }
}

impl Spec {
    /// Nothing set: the module's default limit, one budget for the whole fn, cost 1.
    pub const fn new() -> Self {
        Spec {
            overrides: Overrides::new(),
            tier: TierSpec::Default,
            keyed: false,
            cost: Some(1),
            queue: None,
            shadow: false,
        }
    }
    /// `limit = n`.
    #[doc(hidden)]
    pub const fn with_limit(mut self, limit: u64) -> Self {
        self.overrides = self.overrides.limit(limit);
        self
    }
    /// `window = "..."`, in nanoseconds (a `Duration` cannot be built from text in a const).
    #[doc(hidden)]
    pub const fn with_window_nanos(mut self, nanos: u64) -> Self {
        self.overrides = self.overrides.window_duration(Duration::from_nanos(nanos));
        self
    }
    /// `block_for = "..."`, in nanoseconds.
    #[doc(hidden)]
    pub const fn with_block_nanos(mut self, nanos: u64) -> Self {
        self.overrides = self.overrides.block_for(Duration::from_nanos(nanos));
        self
    }
    /// `burst = n`.
    #[doc(hidden)]
    pub const fn with_burst(mut self, burst: u64) -> Self {
        self.overrides = self.overrides.burst(burst);
        self
    }
    /// `strategy = "..."`.
    #[doc(hidden)]
    pub const fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.overrides = self.overrides.strategy(strategy);
        self
    }
    /// `refill = n`.
    #[doc(hidden)]
    pub const fn with_refill(mut self, refill: u64) -> Self {
        self.overrides = self.overrides.refill(refill);
        self
    }
    /// `tier = "name"`.
    #[doc(hidden)]
    pub const fn with_static_tier(mut self, tier: &'static str) -> Self {
        self.tier = TierSpec::Static(tier);
        self
    }
    /// `tier = <expr>`.
    #[doc(hidden)]
    pub const fn with_dynamic_tier(mut self) -> Self {
        self.tier = TierSpec::Dynamic;
        self
    }
    /// `key = <expr>`.
    #[doc(hidden)]
    pub const fn with_key(mut self) -> Self {
        self.keyed = true;
        self
    }
    /// `cost = <literal>`.
    #[doc(hidden)]
    pub const fn with_fixed_cost(mut self, cost: u64) -> Self {
        self.cost = Some(cost);
        self
    }
    /// `cost = <expr>`.
    #[doc(hidden)]
    pub const fn with_dynamic_cost(mut self) -> Self {
        self.cost = None;
        self
    }
    /// `queue = true | false`.
    #[doc(hidden)]
    pub const fn with_queue(mut self, queue: bool) -> Self {
        self.queue = Some(queue);
        self
    }

    /// `shadow = true | false`.
    #[doc(hidden)]
    pub const fn with_shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Whether the limit is a shadow limit (`shadow = true`): decided and counted, never
    /// refusing (see [`Options::shadow`](crate::Options::shadow)).
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// Whether calls over the limit wait in the queue (`Some(true)`) or are refused at once
    /// (`Some(false)`); `None` follows the module's `queue_enabled`.
    pub fn queue(&self) -> Option<bool> {
        self.queue
    }

    /// The settings the fn gives itself (limit, window, burst, strategy, refill).
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }
    /// The fn's own limit, if it sets one.
    pub fn limit(&self) -> Option<u64> {
        self.overrides.limit
    }
    /// The fn's own window, if it sets one.
    pub fn window(&self) -> Option<Duration> {
        self.overrides.window
    }
    /// The fn's own burst, if it sets one.
    pub fn burst(&self) -> Option<u64> {
        self.overrides.burst
    }
    /// The fn's own strategy, if it sets one.
    pub fn strategy(&self) -> Option<Strategy> {
        self.overrides.strategy
    }
    /// The tier.
    pub fn tier(&self) -> TierSpec {
        self.tier
    }
    /// Whether calls are counted per key (`key = ...`) rather than in one budget.
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }
    /// The fixed cost of a call; `None` when it is computed per call.
    pub fn cost(&self) -> Option<u64> {
        self.cost
    }

    /// The settings two declarations must agree on to share one budget.
    pub(crate) fn shape(&self) -> (Overrides, TierSpec, bool) {
        (self.overrides, self.tier, self.keyed)
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.overrides.limit, self.tier) {
            (Some(limit), tier) => {
                write!(f, "{limit} per ")?;
                match self.overrides.window {
                    Some(w) => f.write_str(&format_window(w))?,
                    None => f.write_str("default window")?,
                }
                match tier {
                    TierSpec::Default => {}
                    TierSpec::Static(t) => write!(f, ", tier {t:?}")?,
                    TierSpec::Dynamic => f.write_str(", tier chosen per call")?,
                }
            }
            (None, TierSpec::Default) => f.write_str("module default")?,
            (None, TierSpec::Static(t)) => write!(f, "tier {t:?}")?,
            (None, TierSpec::Dynamic) => f.write_str("tier chosen per call")?,
        }
        if let (None, Some(w)) = (self.overrides.limit, self.overrides.window) {
            write!(f, ", window {}", format_window(w))?;
        }
        if let Some(b) = self.overrides.burst {
            write!(f, ", burst {b}")?;
        }
        if let Some(s) = self.overrides.strategy {
            write!(f, ", {s}")?;
        }
        if let Some(r) = self.overrides.refill {
            write!(f, ", refill {r}")?;
        }
        if let Some(b) = self.overrides.block {
            write!(f, ", blocked for {} once refused", format_window(b))?;
        }
        f.write_str(if self.keyed {
            ", per key"
        } else {
            ", one budget"
        })?;
        match self.cost {
            Some(1) => {}
            Some(c) => write!(f, ", cost {c}")?,
            None => f.write_str(", cost per call")?,
        }
        match self.queue {
            Some(true) => f.write_str(", waits"),
            Some(false) => f.write_str(", never waits"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_like_the_attribute() {
        let cases = [
            (Spec::new(), "module default, one budget"),
            (
                Spec::new()
                    .with_limit(10)
                    .with_window_nanos(60_000_000_000)
                    .with_key(),
                "10 per 1m, per key",
            ),
            (
                Spec::new().with_static_tier("pro").with_fixed_cost(3),
                "tier \"pro\", one budget, cost 3",
            ),
            (
                Spec::new()
                    .with_dynamic_tier()
                    .with_strategy(Strategy::TokenBucket)
                    .with_burst(2)
                    .with_dynamic_cost(),
                "tier chosen per call, burst 2, token-bucket, one budget, cost per call",
            ),
            (
                Spec::new().with_limit(5).with_static_tier("free"),
                "5 per default window, tier \"free\", one budget",
            ),
        ];
        for (spec, text) in cases {
            assert_eq!(spec.to_string(), text);
        }
    }
}
