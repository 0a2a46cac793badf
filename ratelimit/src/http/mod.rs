//! Rate limits for HTTP and RPC services: the rules every adapter shares, written once against
//! a neutral [`RequestHead`], and the adapters.
//!
//! - [`KeyExtractor`]: what a request is counted under — [`ClientIp`] (the peer, or the client
//!   behind your trusted proxies, IPv6 per /64), [`ApiKey`] (verified, falling back to the
//!   address), [`Principal`] (what your authentication inserted), or any closure on the
//!   request head ([`key_fn`]). There is no default key, and a key must be something the
//!   client cannot choose.
//! - [`route_of`]: per-route budgets by route template (`GET /orders/{id}`), with every
//!   request no route answers in one budget, [`UNMATCHED`].
//! - [`RateLimitLayer`] (feature `tower`): a tower [`Layer`](tower::Layer) for any tower
//!   service over `http` requests (hyper, tower-http); with feature `axum`, for axum routers,
//!   with per-route budgets by `MatchedPath`. It counts each request under a key, refuses
//!   over the limit with `429`, and fails closed (a store failure, an unknown tier or no module
//!   running is an error response, never a pass).
//! - `ratelimit::actix::RateLimit` (feature `actix`): the same for actix-web.
//! - The same layer on a tonic (gRPC) server (feature `tonic`): [`RateLimitLayer::grpc`]
//!   answers with gRPC statuses (`RESOURCE_EXHAUSTED` with a `RetryInfo` detail), and
//!   [`RateLimitLayer::per_method`] budgets per listed gRPC method ([`grpc_method_of`]).
//! - Headers on every counted response: `X-RateLimit-Limit/Remaining/Reset`, `Retry-After`
//!   on refusals, and the IETF `RateLimit` / `RateLimit-Policy` lists (one item per limit).
//! - [`Error`](crate::Error) implements axum's `IntoResponse` and actix-web's `ResponseError`
//!   (`429` with the headers for a refusal, `503` when the store could not decide, `500` for
//!   configuration), so an annotated handler returning `Result<_, ratelimit::Error>` answers
//!   `429` by itself.
//!
#![cfg_attr(
    feature = "axum",
    doc = r#"
```
use axum::{routing::get, Router};
use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::{Config, Options, RateLimitService};
use std::time::Duration;

let limiter = RateLimitService::new(Config::default())?;
let app: Router = Router::new()
    .route("/orders/{id}", get(|| async { "order" }))
    .layer(
        // Behind one load balancer of ours: the client is the last X-Forwarded-For entry.
        RateLimitLayer::new(limiter, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
            .options(Options::new().limit(60).window(Duration::from_secs(60)))
            .per_route(),
    );
// axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>())
# Ok::<(), ratelimit::Error>(())
```
"#
)]

mod cidr;
mod head;
mod ip;
mod key;
#[cfg(feature = "tower")]
mod layer;
#[cfg(any(feature = "tower", feature = "actix"))]
mod limit;
mod route;
#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) mod rules;

pub use self::cidr::{Cidr, CidrError};
pub use self::head::RequestHead;
pub use self::ip::{ClientIp, TrustedProxies};
pub use self::key::{key_fn, ApiKey, KeyExtractor, KeyFn, Principal};
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use self::layer::GrpcAnswers;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use self::layer::{
    AnswerBody, Answers, CustomAnswers, DefaultAnswers, IntoCustom, RateLimit, RateLimitLayer,
    ResponseFuture,
};
pub use self::route::{grpc_method_of, route_of, UNMATCHED};
pub use ratelimit_core::{HeaderField, ResponseHeaders};
