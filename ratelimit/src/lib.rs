//! Rate-limit any async function, in one process or across a fleet, and fail closed.
//!
//! Annotate an async fn with [`macro@rate_limit`] or [`macro@throttle`], start a [`Module`] at
//! start-up, and every call asks the limiter first. Underneath is [`RateLimitService`]: four
//! algorithms, tiers with burst, statistics, over the in-memory store or (feature `redis`)
//! Redis and Redis Cluster. The service is usable on its own, without any global state:
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
//!
//! # Attribute macros
//!
//! [`macro@rate_limit`], [`macro@throttle`] and [`macro@skip_throttle`] limit any async fn or
//! method through the process-wide [`Module`]. [`Module::builder`] takes every
//! [`ConfigBuilder`] option; `init` checks every annotated fn in the binary against the
//! configuration ([`declarations`] lists them) and fails with all the problems at once.
//! Dropping the module shuts it down; an annotated fn called with no module running is refused
//! with [`Error::NotInitialized`], never let through. A sync fn (or method) returning a
//! `Result` is decided at once on the memory store, without an executor; `init` refuses it on
//! a store that must be waited for. A library limits its own fns with a [`Limiter`] of its
//! own (`limiter = LIMITS`), configured and checked by the library, not by the application.
//!
//! ```
//! use ratelimit::{rate_limit, Error, Module, Tier};
//!
//! #[rate_limit(tier = "pro", key = account)]
//! async fn report(account: u64) -> Result<String, Error> {
//!     Ok(format!("report for {account}"))
//! }
//!
//! # futures::executor::block_on(async {
//! let module = Module::builder().tier(Tier::new("pro", 2).window("1m")).init()?;
//! report(1).await?;
//! report(1).await?;
//! assert!(matches!(report(1).await, Err(Error::Exceeded(_))));
//! let budget = ratelimit::declarations()[0].budget(); // `<crate>::<module>::report`
//! assert_eq!(module.stats().by_method[budget].denied, 1);
//! drop(module);
//! assert!(matches!(report(1).await, Err(Error::NotInitialized { .. })));
//! # Ok::<(), Error>(())
//! # }).unwrap();
//! ```
//!
//! # Testing annotated code
//!
//! Tests share one process, so a global module would leak between them. A
//! [`testing::TestModule`] runs on a [`ManualClock`] and applies only to the futures run in
//! its [`scope`](testing::TestModule::scope):
//!
//! ```
//! use ratelimit::testing::TestModule;
//! use ratelimit::{throttle, Error, Module};
//! use std::time::Duration;
//!
//! #[throttle(1)]
//! async fn ping() -> Result<(), Error> {
//!     Ok(())
//! }
//!
//! # futures::executor::block_on(async {
//! let module = TestModule::new(Module::builder())?;
//! module.scope(async {
//!     ping().await?;
//!     assert!(ping().await.is_err());
//!     Ok::<(), Error>(())
//! }).await?;
//! module.clock().advance(Duration::from_secs(1));
//! module.scope(ping()).await?;
//! // Outside any scope (and with no module running), the fn is refused.
//! assert!(matches!(ping().await, Err(Error::NotInitialized { .. })));
//! # Ok::<(), Error>(())
//! # }).unwrap();
//! ```
//!
//! # HTTP services (features `tower`, `axum`, `actix`)
//!
//! `ratelimit::http::RateLimitLayer` limits any tower service over `http` requests (feature
//! `tower`) and axum routers (feature `axum`); `ratelimit::actix::RateLimit` does the same for
//! actix-web (feature `actix`). Both are keyed by what a client cannot choose (its address,
//! the client behind your trusted proxies, a verified API key or principal), per route
//! template if asked, answer `429` with a JSON body and the rate-limit headers, and fail
//! closed, by the same rules written once against a neutral request head. `Error` implements
//! axum's `IntoResponse` and actix-web's `ResponseError`, so an annotated handler answers
//! `429` by itself. See `ratelimit::http`.
//!
//! # Waiting instead of refusing
//!
//! With `queue_enabled` (module-wide), `Options::queue(true)` (per call) or
//! `#[rate_limit(..., queue = true)]` (per fn), a call over its limit waits its turn in a
//! bounded queue (`max_queue_size`, `queue_timeout`; higher tier `priority` keeps its place
//! when the queue is full) and is admitted as soon as capacity frees, or ends with
//! `Error::QueueFull` / `Error::QueueTimeout`. `RateLimitService::until_ready` paces a single
//! caller without the queue. **Never queue calls an unauthenticated client can make**: each
//! one holds memory and a place until its timeout. Waiting needs a Tokio runtime.
//!
//! # Metrics (feature `metrics`)
//!
//! Decision counters per tier and budget, the queue's figures and decision latency, through
//! the `metrics` facade (any exporter); see `examples/metrics.rs`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "notify")]
#[cfg_attr(docsrs, doc(cfg(feature = "notify")))]
pub use ratelimit_core::FileWatch;
pub use ratelimit_core::{
    format_window, parse_window, store, Answer, Attempt, Clock, Config, ConfigBuilder, ConfigError,
    Counts, CustomStore, Decision, Error, Exceeded, ManualClock, MemoryOptions, MemoryStore, Name,
    Nanos, Options, Overrides, ParseError, Pending, Prepared, QueueCounts, Quota, QuotaError, Rate,
    RateLimitService, Reloaded, ResolvedTier, Spent, SpentAll, Stats, StoreConfig, Strategy,
    SystemClock, Tier, Window, MAX_CAPACITY, MAX_KEY_LEN, MAX_WINDOW,
};
pub use ratelimit_core::{Failover, FailurePolicy};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use ratelimit_core::{LeaseOptions, RedisOptions, RedisStore};

pub use ratelimit_core::{
    check_declarations, declarations, testing, Declaration, DeclarationErrors, DeclarationProblem,
    Limiter, Module, ModuleBuilder, ProblemKind, Spec, TierSpec,
};
pub use ratelimit_macros::{rate_limit, skip_throttle, throttle};

pub mod http;

#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
pub mod actix;

#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
pub mod openapi;

/// What the attribute macros expand to. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use inventory;
    pub use ratelimit_core::__private::{
        acquire, acquire_all, acquire_all_now, acquire_all_spent, acquire_all_spent_now,
        acquire_here, acquire_now, acquire_spent, acquire_spent_now, acquire_tier, counts, refuse,
        settle, settle_now, Here, KeyArg, KeyDirect, KeyDisplayed, KeyPart, KeySlot, KeyText,
        Outcome, Refusal, RefusalError, Registered,
    };
    pub use ratelimit_core::{Declaration, Spec, Strategy};
}

/// The names most programs need.
pub mod prelude {
    pub use crate::{rate_limit, throttle, Module};
    pub use crate::{Config, Decision, Error, Options, Quota, RateLimitService, Strategy, Tier};
}

/// The README's code blocks, compiled and run as doctests so the front page cannot rot.
#[cfg(all(doctest, feature = "redis", feature = "axum"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
