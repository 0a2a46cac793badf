//! helper-64's probe of gRPC services served inside an axum `Router`
//! (`tonic::service::Routes::into_axum_router`, one port for both) behind the HTTP layer that
//! counts by status (`count_when`), with its HTTP answers (no `grpc()`): requests through
//! `oneshot`, as a server hands them on (the peer in `ConnectInfo`).
//!
//! A gRPC answer's HTTP status is `200` whatever the call's status (`grpc-status` says it):
//! counted by HTTP status, every failed call was given back, and a limit on failed calls
//! limited nothing. A gRPC answer (its `content-type` is `application/grpc..`) now always
//! counts: its status says nothing of its outcome.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, Options};
use ratelimit_tests::{now, service};
use tower::ServiceExt;

/// A unary `Check` of the health service `service` from `peer`, framed by hand: a gRPC
/// message is a flag byte, a 4-byte length and the protobuf bytes (field 1, the service
/// name, a string).
fn check(service: &str, peer: &str) -> Request<Body> {
    let mut message = vec![0x0a, u8::try_from(service.len()).unwrap()];
    message.extend_from_slice(service.as_bytes());
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&message);
    let mut request = Request::post("/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::from(frame))
        .unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    request
}

/// The HTTP status and `grpc-status` (from the header block: a call that failed is answered
/// with its status alone) of a response.
fn outcome(response: &axum::http::Response<Body>) -> (u16, Option<String>) {
    let grpc = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned());
    (response.status().as_u16(), grpc)
}

/// Five failed `Check`s (an unknown service: `NOT_FOUND`, grpc-status 5) from one peer under
/// a limit of 2 failed calls: on `e67bb5a` all five reached the service (each answered with
/// HTTP 200, each given back). Now two run and the rest are refused (`429`) before it.
#[tokio::test]
async fn failed_grpc_calls_in_an_axum_router_count_never_all_given_back() {
    let (limiter, _clock) = service(Config::default());
    let options = Options::new()
        .limit(2)
        .window(Duration::from_secs(3_600))
        .budget("grpc-failures");
    let (_reporter, health) = tonic_health::server::health_reporter();
    let app = tonic::service::Routes::new(health)
        .into_axum_router()
        .layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(options.clone())
                .count_when(|status| status != StatusCode::OK),
        );
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        let response = app
            .clone()
            .oneshot(check("no.such.Service", "192.0.2.1:1000"))
            .await
            .unwrap();
        outcomes.push(outcome(&response));
    }
    let not_found = (200, Some("5".to_owned()));
    let refused = (429, None);
    assert_eq!(
        outcomes,
        [
            not_found.clone(),
            not_found,
            refused.clone(),
            refused.clone(),
            refused
        ]
    );
    let left = now(limiter.status("192.0.2.1", &options))
        .unwrap()
        .remaining;
    assert_eq!(left, 0);
    // A call that succeeds counts too (its HTTP status tells nothing either): another peer,
    // a `SERVING` answer (`grpc-status` in the trailers), spends.
    let response = app
        .clone()
        .oneshot(check("", "192.0.2.2:1000"))
        .await
        .unwrap();
    assert_eq!(outcome(&response), (200, None));
    let left = now(limiter.status("192.0.2.2", &options))
        .unwrap()
        .remaining;
    assert_eq!(left, 1);
}
