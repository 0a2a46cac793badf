//! What the HTTP layer allocates per request, over the same app without it: counted by a
//! global allocator on this thread, through `tower::ServiceExt::oneshot` (no network), on the
//! apps of the HTTP benches. Guards the layer's per-request work: the two shared buffers of the
//! header values, and nothing for the response future (not boxed when the store answers at
//! once), the key of an IPv4 peer, or one limit; and what counting by status adds.

#[path = "benches/support/http_apps.rs"]
#[allow(dead_code)] // the variant names, for the benches
mod http_apps;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use futures::FutureExt;
use ratelimit::ManualClock;
use ratelimit_tests::CountingAllocator;
use tower::ServiceExt;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations of one request through `app` (its request and response included).
fn allocations_per_request(app: &Router) -> u64 {
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    let one = || {
        let request = Request::get("/")
            .extension(ConnectInfo(peer))
            .body(Body::empty())
            .unwrap();
        // Every part of these apps answers at once: no runtime needed.
        let response = app
            .clone()
            .oneshot(request)
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(response.status().is_success());
    };
    one(); // the store's key, grown buffers
    let before = ratelimit_tests::allocations();
    one();
    ratelimit_tests::allocations() - before
}

#[test]
fn the_layer_allocates_a_fixed_few_per_request() {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_764_556_800)));
    let [none, _, _, headers_off, headers_on] =
        http_apps::apps(clock).map(|app| app.with_state(()));
    let none = allocations_per_request(&none);
    // axum's plumbing for any `Router::layer` (2); the layer's own future is not boxed.
    assert_eq!(allocations_per_request(&headers_off) - none, 2);
    // Plus the header values' buffer and its shared count (2), and the header map growing
    // from 2 fields to 7 (2: what adding the same fields statically costs too).
    assert_eq!(allocations_per_request(&headers_on) - none, 6);
}

/// A layer that counts by status (`count_when`) keeps each request's spend until its status
/// is known, and gives it back (a `200` does not count here): the price of that path, paid
/// only by such layers, over the common one's.
#[test]
fn counting_by_status_allocates_a_fixed_few_more() {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_764_556_800)));
    let service = ratelimit::RateLimitService::with_clock(
        ratelimit::Config::builder()
            .strategy(ratelimit::Strategy::TokenBucket)
            .build()
            .unwrap(),
        clock.clone(),
    )
    .unwrap();
    let counting = Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .layer(
            ratelimit::http::RateLimitLayer::new(
                service.clone(),
                ratelimit::http::ClientIp::peer(),
            )
            .options(
                ratelimit::Options::new()
                    .limit(4_000_000_000)
                    .window(Duration::from_secs(3_600)),
            )
            .headers(false)
            .count_when(|status| status.is_client_error()),
        )
        .with_state(());
    let [none, _, _, headers_off, _] = http_apps::apps(clock).map(|app| app.with_state(()));
    let common = allocations_per_request(&headers_off) - allocations_per_request(&none);
    let counting = allocations_per_request(&counting) - allocations_per_request(&none);
    assert_eq!(
        service.stats().total.refunded,
        2,
        "both requests given back"
    );
    // The boxed future (the request is decided by awaiting the spend), and four for the spend
    // kept and given back (the store key and the parts it keeps, the refund's list among
    // them).
    assert_eq!(counting - common, 5);
}
