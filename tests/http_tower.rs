//! The tower layer without axum (feature `tower`): any `tower::Service<http::Request<B>>`, here
//! a `service_fn` answering `http::Response<String>`, as a hyper or tower-http user has. The
//! peer is the `SocketAddr` the server put in the request's extensions; the layer answers in
//! the inner service's body type.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, Options, Strategy};
use ratelimit_tests::service;
use tower::{Layer, ServiceExt};

fn request(peer: Option<&str>) -> http::Request<String> {
    let mut request = http::Request::get("/").body(String::new()).unwrap();
    if let Some(peer) = peer {
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
    }
    request
}

#[tokio::test]
async fn a_plain_tower_service_is_limited_per_peer_and_answered_in_its_own_body_type() {
    let (limiter, _clock) = service(
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .build()
            .unwrap(),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let inner = tower::service_fn(move |_: http::Request<String>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, std::convert::Infallible>(http::Response::new("hello".to_owned())) }
    });
    let layer = RateLimitLayer::new(limiter, ClientIp::peer())
        .options(Options::new().limit(2).window(Duration::from_secs(60)));
    let service = layer.layer(inner);

    for remaining in ["1", "0"] {
        let response = service
            .clone()
            .oneshot(request(Some("203.0.113.7:4000")))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-ratelimit-remaining"], remaining);
        assert_eq!(response.body(), "hello");
    }
    let refused = service
        .clone()
        .oneshot(request(Some("203.0.113.7:4001")))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "20");
    assert_eq!(refused.headers()["ratelimit"], "\"default\";r=0;t=20");
    assert_eq!(
        refused.body(),
        r#"{"code":"RATE_LIMITED","retryAfter":20,"limit":2,"remaining":0}"#
    );
    // Another peer has a budget of its own.
    let other = service
        .clone()
        .oneshot(request(Some("198.51.100.1:4000")))
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    // No peer address: an error answer, never a pass.
    let no_peer = service.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(no_peer.status(), 500);
    assert_eq!(no_peer.body(), r#"{"code":"INVALID_KEY"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
