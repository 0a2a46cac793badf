//! The apps the HTTP benches compare, one per variant, shared by `http_layer` (through `wrk`)
//! and `http_layer_cost` (allocations and instructions, without a network).

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use axum::routing::get;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Clock, Config, Options, RateLimitService, Strategy};

/// How many variants.
pub const N: usize = 5;

/// The variants, in the order of [`apps`].
pub const VARIANTS: [&str; N] = [
    "no layer",
    "no layer, the five headers added statically (parsed once)",
    "a middleware that does nothing (axum::middleware::from_fn)",
    "layer, headers off",
    "layer, headers on",
];

/// One app per variant: a one-route app answering `"hello"`; the layer on a memory store,
/// token bucket, a limit no run reaches, keyed by the peer address, its time from `clock`
/// (`ManualClock` under valgrind, which crashes in the system clock's vDSO lookup).
pub fn apps(clock: Arc<dyn Clock>) -> [Router; N] {
    let app = || Router::new().route("/", get(|| async { "hello" }));
    // The same five fields, with values of the same length as the layer's, fixed and
    // parsed once (`from_static`): the floor of adding them, what their bytes cost (written
    // by the server, parsed by the client) with nothing computed per request.
    let static_headers = Router::new().route(
        "/",
        get(|| async {
            let field = |name, value| {
                (
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            };
            (
                [
                    field("x-ratelimit-limit", "4000000000"),
                    field("x-ratelimit-remaining", "3999999999"),
                    field("x-ratelimit-reset", "1764556800"),
                    field("ratelimit-policy", "\"default\";q=4000000000;w=3600"),
                    field("ratelimit", "\"default\";r=3999999999;t=3600"),
                ],
                "hello",
            )
        }),
    );
    let layer = |headers: bool| {
        let config = Config::builder()
            .strategy(Strategy::TokenBucket)
            .build()
            .unwrap();
        let service = RateLimitService::with_clock(config, clock.clone()).unwrap();
        RateLimitLayer::new(service, ClientIp::peer())
            .options(
                Options::new()
                    .limit(4_000_000_000)
                    .window(Duration::from_secs(3_600)),
            )
            .headers(headers)
    };
    [
        app(),
        static_headers,
        app().layer(axum::middleware::from_fn(
            |request: axum::extract::Request, next: axum::middleware::Next| async move {
                next.run(request).await
            },
        )),
        app().layer(layer(false)),
        app().layer(layer(true)),
    ]
}
