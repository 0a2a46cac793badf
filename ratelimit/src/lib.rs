//! Rate-limit any async function, in one process or across a fleet, and fail closed.
//!
//! This release carries the engine: [`RateLimitService`] over the in-memory store, four
//! algorithms, tiers with burst, and statistics. See the README for the road ahead (attribute
//! macros with a global registry, Redis, the HTTP layer).
//!
//! ```
//! use ratelimit::{Config, Options, RateLimitService, Strategy, Tier};
//!
//! # futures::executor::block_on(async {
//! let config = Config::builder()
//!     .strategy(Strategy::TokenBucket)
//!     .tier(Tier::new("pro", 1_000).window("1m").burst(100))
//!     .build()?;
//! let limiter = RateLimitService::new(config)?;
//!
//! let decision = limiter.consume("api-key:42", &Options::new().tier("pro")).await?;
//! assert!(decision.allowed);
//! assert_eq!(decision.limit, 1_100);
//! # Ok::<(), ratelimit::Error>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub use ratelimit_core::{
    algorithm, format_window, parse_window, store, Clock, Config, ConfigBuilder, ConfigError,
    Counts, Decision, Error, Exceeded, ManualClock, MemoryOptions, MemoryStore, Nanos, Options,
    Quota, QuotaError, Rate, RateLimitService, ResolvedTier, Stats, StoreConfig, Strategy,
    SystemClock, Tier, Window, MAX_WINDOW,
};

pub use ratelimit_core::{
    check_declarations, declarations, testing, Declaration, DeclarationErrors, DeclarationProblem,
    Module, ModuleBuilder, Spec, TierSpec,
};
pub use ratelimit_macros::{rate_limit, skip_throttle, throttle};

/// What the attribute macros expand to. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use inventory;
    pub use ratelimit_core::__private::{acquire, key, refuse, Refusal, Registered};
    pub use ratelimit_core::{Declaration, Spec, Strategy};
}

/// The names most programs need.
pub mod prelude {
    pub use crate::{rate_limit, throttle, Module};
    pub use crate::{Config, Decision, Error, Options, Quota, RateLimitService, Strategy, Tier};
}
