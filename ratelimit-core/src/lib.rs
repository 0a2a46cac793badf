//! The engine behind [`ratelimit`](https://docs.rs/ratelimit): quotas, the four algorithms,
//! the stores, and [`RateLimitService`].
//!
//! Most users depend on the `ratelimit` facade instead; everything public here is re-exported
//! there.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "actix")]
mod actix;
mod algorithm;
mod answer;
mod clock;
mod config;
mod decision;
mod drivers;
mod error;
#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "http")]
mod http;
mod key;
mod merge;
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
mod metrics;
mod name;
mod quota;
mod registry;
mod resolve;
mod service;
mod stats;
pub mod store;
mod stripe;
mod sync;
mod syntax;
pub mod testing;
mod window;

pub use answer::Answer;
pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use config::{Config, ConfigBuilder, CustomStore, ResolvedTier, StoreConfig, Tier};
pub use decision::Decision;
pub use error::{ConfigError, DeclarationErrors, DeclarationProblem, Error, Exceeded, ProblemKind};
pub use key::MAX_KEY_LEN;
pub use merge::{HeaderField, ResponseHeaders};
pub use name::Name;
pub use quota::{Overrides, Quota, QuotaError, MAX_CAPACITY};
#[cfg(feature = "notify")]
pub use registry::FileWatch;
pub use registry::{
    check_declarations, declarations, Declaration, Limiter, Module, ModuleBuilder, Spec, TierSpec,
};
pub use service::{
    Attempt, Options, Pending, Prepared, RateLimitService, Reloaded, Spent, SpentAll,
};
pub use stats::{Counts, QueueCounts, Stats};
pub use store::failover::{Failover, FailurePolicy};
pub use store::memory::{MemoryOptions, MemoryStore};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::redis::{LeaseOptions, RedisOptions, RedisStore};
pub use syntax::{format_window, parse_window, ParseError, Rate, Strategy, MAX_WINDOW};
pub use window::Window;

/// Support for the code the attribute macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::{
        acquire, acquire_all, acquire_all_now, acquire_all_spent, acquire_all_spent_now,
        acquire_here, acquire_now, acquire_spent, acquire_spent_now, acquire_tier, counts, refuse,
        settle, settle_now, Here, KeyArg, KeyDirect, KeyDisplayed, KeyPart, KeySlot, KeyText,
        Later, Outcome, Refusal, RefusalError, Registered,
    };
}
