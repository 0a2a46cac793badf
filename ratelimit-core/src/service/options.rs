//! [`Options`]: what one call asks for, owned; and [`Call`], the service's borrowed view of it.

use crate::name::Name;
use crate::quota::Overrides;
use crate::syntax::Strategy;
use crate::window::Window;

/// Per-call options: which tier, what the call costs, and [`Overrides`] of the tier's or
/// module's limit, window, burst, strategy and refill.
///
/// Owned: build them once and keep them (in a struct, a `static`, a `const`), clone them into
/// spawned tasks, or build them in the call's own expression; a service's futures do not
/// borrow them. Their names are [`Name`]s, so options naming a tier or budget by a literal
/// clone without touching a reference count.
///
/// ```
/// use ratelimit_core::{Options, Strategy};
/// use std::time::Duration;
///
/// let opts = Options::new().tier("pro").cost(5);
/// let custom = Options::new().limit(3).window("10s").strategy(Strategy::TokenBucket);
/// let same = Options::new().limit(3).window(Duration::from_secs(10)).strategy(Strategy::TokenBucket);
/// assert_eq!(custom, same);
///
/// // In a `const`: a tier known at compile time, and every numeric setting.
/// const SEARCH: Options = Options::for_tier("pro").cost(2).burst(5);
/// assert_eq!(SEARCH.tier.as_deref(), Some("pro"));
///
/// // A tier chosen at run time is owned too.
/// let plan = String::from("free");
/// let dynamic = Options::new().tier(plan);
/// ```
///
/// Not `const`: [`tier`](Self::tier), [`budget`](Self::budget) and [`window`](Self::window),
/// which convert their argument through a trait (`Into<Name>`, `Into<Window>`), and a trait
/// method cannot be called in a `const fn` on stable Rust; nor can a `const fn` replace a name
/// already set, since dropping a run-time name's `Arc` is not allowed in a `const` either. A
/// tier known at compile time goes in through the `const` constructor
/// [`for_tier`](Self::for_tier); options with a window or a budget are built once at run
/// time (a `LazyLock`, a field of your struct).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// The tier; `None` uses the default tier, else the default limit.
    pub tier: Option<Name>,
    /// The call's weight (default 1).
    pub cost: u64,
    /// The settings this call gives itself, over its tier's and the module's.
    pub overrides: Overrides,
    /// The budget's name (an annotated fn's path): used in errors, events and `stats().by_method`.
    pub budget: Option<Name>,
    /// Whether the call spends from the budget (`false` only looks, like `status`).
    pub consume: bool,
    /// Whether a call over its limit waits in the queue (`Some(true)`) or is refused at once
    /// (`Some(false)`); `None` follows the configuration's `queue_enabled`.
    pub queue: Option<bool>,
    /// Whether the limit is a shadow limit: decided, spent and counted exactly like an
    /// enforced one, but a call it would refuse is admitted, marked
    /// [`Decision::shadowed`](crate::Decision::shadowed), counted in
    /// [`Counts::shadowed`](crate::Counts::shadowed) and logged (`tracing`, info). A tier's
    /// `shadow` makes every limit under it one too.
    pub shadow: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// Cost 1, no tier, no overrides.
    pub const fn new() -> Self {
        Options {
            tier: None,
            cost: 1,
            overrides: Overrides::new(),
            budget: None,
            consume: true,
            queue: None,
            shadow: false,
        }
    }
    /// Cost 1 under `tier`, no overrides: `Options::new().tier(tier)` for a tier known at
    /// compile time, usable in a `const`.
    pub const fn for_tier(tier: &'static str) -> Self {
        Options {
            tier: Some(Name::new(tier)),
            cost: 1,
            overrides: Overrides::new(),
            budget: None,
            consume: true,
            queue: None,
            shadow: false,
        }
    }
    /// Under this tier: a literal, or a name made at run time (`String`, `Arc<str>`).
    pub fn tier(mut self, tier: impl Into<Name>) -> Self {
        self.tier = Some(tier.into());
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
    /// With this window: a [`Duration`](std::time::Duration) or text such as `"1m"` (see
    /// [`Window`]). A window that is not one makes every call with these options fail with
    /// [`Error::InvalidQuota`](crate::Error::InvalidQuota): refused, never decided under
    /// another window.
    pub fn window(mut self, window: impl Into<Window>) -> Self {
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
    /// With this token-bucket refill, tokens per window (a call whose strategy is another is
    /// [`Error::InvalidQuota`](crate::Error::InvalidQuota)).
    pub const fn refill(mut self, refill: u64) -> Self {
        self.overrides = self.overrides.refill(refill);
        self
    }
    /// Refusing the key for `block` once a call on it was refused, whatever the limit says
    /// meanwhile (see [`Quota::with_block`](crate::Quota::with_block)): on a store that keeps
    /// blocks (the memory store), else every call is refused as a limit that cannot be
    /// enforced.
    pub const fn block_for(mut self, block: std::time::Duration) -> Self {
        self.overrides = self.overrides.block_for(block);
        self
    }
    /// On behalf of this budget: a literal, or a name made at run time.
    pub fn budget(mut self, budget: impl Into<Name>) -> Self {
        self.budget = Some(budget.into());
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
    /// A shadow limit (`true`) or an enforced one (`false`, the default): see
    /// [`shadow`](Self#structfield.shadow). A way to try a new limit on real traffic before it
    /// refuses anyone.
    pub const fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The service's view of these options, borrowing their names.
    #[inline]
    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            tier: self.tier.as_deref(),
            budget: self.budget.as_deref(),
            policy: self.budget.as_deref(),
            overrides: &self.overrides,
            cost: self.cost,
            consume: self.consume,
            queue: self.queue,
            shadow: self.shadow,
        }
    }
}

/// What one call asks for, as the service decides it: [`Options`] borrowed, or an annotated
/// fn's spec with the tier chosen for this call (which may borrow from the call's arguments,
/// so it is never copied into a [`Name`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) tier: Option<&'a str>,
    pub(crate) budget: Option<&'a str>,
    /// The name a refusal's rate-limit headers give the policy: a budget named by the caller
    /// (`Options::budget`, an annotated fn's `name = ...`), never an fn's path.
    pub(crate) policy: Option<&'a str>,
    pub(crate) overrides: &'a Overrides,
    pub(crate) cost: u64,
    pub(crate) consume: bool,
    /// Whether the call may wait (see [`Options::queue`]).
    pub(crate) queue: Option<bool>,
    /// A shadow limit (see [`Options::shadow`]; a tier can make it one too).
    pub(crate) shadow: bool,
}

impl<'a> Call<'a> {
    /// Cost 1 under `tier` (`None`: the default tier, or none), no overrides, no budget.
    pub(crate) fn under(tier: Option<&'a str>) -> Self {
        const NONE: &Overrides = &Overrides::new();
        Call {
            tier,
            budget: None,
            policy: None,
            overrides: NONE,
            cost: 1,
            consume: true,
            queue: None,
            shadow: false,
        }
    }
}
