//! The engine behind [`ratelimit`](https://docs.rs/ratelimit): quotas, the four algorithms,
//! the stores, and [`RateLimitService`].
//!
//! Most users depend on the `ratelimit` facade instead; everything public here is re-exported
//! there.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod algorithm;
mod clock;
mod config;
mod decision;
mod error;
mod quota;
mod registry;
mod service;
mod stats;
pub mod store;
pub mod testing;

pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use config::{Config, ConfigBuilder, ResolvedTier, StoreConfig, Tier, Window};
pub use decision::Decision;
pub use error::{ConfigError, Error, Exceeded};
pub use quota::{format_window, parse_window, Quota, QuotaError, Rate, Strategy, MAX_WINDOW};
pub use registry::{
    check_declarations, declarations, Declaration, DeclarationErrors, DeclarationProblem, Module,
    ModuleBuilder, Spec, TierSpec,
};
pub use service::{Options, RateLimitService};
pub use stats::{Counts, Stats};
#[cfg(feature = "redis")]
pub use store::{FailurePolicy, RedisOptions, RedisStore};
pub use store::{MemoryOptions, MemoryStore};

/// Support for the code the attribute macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::{acquire, key, refuse, Refusal, Registered};
}
