//! Rate limits for HTTP services (feature `axum`): a tower [`Layer`](tower::Layer) for axum
//! routers and any tower service over `http` requests.
//!
//! - [`RateLimitLayer`]: counts each request under a key, refuses over the limit with `429`,
//!   and fails closed (a store failure, an unknown tier or no module running is an error
//!   response, never a pass).
//! - [`KeyExtractor`]: what a request is counted under — [`ClientIp`] (the peer, or the client behind
//!   your trusted proxies, IPv6 per /64), [`ApiKey`] (verified, falling back to the address),
//!   [`Principal`] (what your authentication inserted), or any closure on the request head.
//!   There is no default key, and a key must be something the client cannot choose.
//! - [`route_of`]: per-route budgets by route template (`GET /orders/{id}`), with every
//!   request no route answers in one budget, [`UNMATCHED`].
//! - Headers on every counted response: `X-RateLimit-Limit/Remaining/Reset`, `Retry-After`
//!   on refusals, and the IETF `RateLimit` / `RateLimit-Policy` lists (one item per layer).
//! - [`Error`](crate::Error) implements `IntoResponse` (`429` with the headers for a refusal,
//!   `503` when the store could not decide, `500` for configuration), so an annotated axum
//!   handler returning `Result<_, ratelimit::Error>` answers `429` by itself.
//!
//! ```
//! use axum::{routing::get, Router};
//! use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
//! use ratelimit::{Config, Options, RateLimitService};
//! use std::time::Duration;
//!
//! let limiter = RateLimitService::new(Config::default())?;
//! let app: Router = Router::new()
//!     .route("/orders/{id}", get(|| async { "order" }))
//!     .layer(
//!         // Behind one load balancer of ours: the client is the last X-Forwarded-For entry.
//!         RateLimitLayer::new(limiter, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
//!             .options(Options::new().limit(60).window(Duration::from_secs(60)))
//!             .per_route(),
//!     );
//! // axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
//! # Ok::<(), ratelimit::Error>(())
//! ```

mod ip;
mod key;
mod layer;
mod response;
mod route;

pub use self::ip::{Cidr, CidrError, ClientIp, TrustedProxies};
pub use self::key::{ApiKey, KeyExtractor, Principal};
pub use self::layer::{RateLimit, RateLimitLayer, ResponseFuture};
pub use self::route::{route_of, UNMATCHED};
