//! helper-64's probes of a gRPC layer (feature `tonic`) that counts by outcome
//! (`RateLimitLayer::count_when`), on a real tonic server and client on loopback.
//!
//! A gRPC answer's HTTP status is `200` whatever the call's status: the status travels in the
//! `grpc-status` field (of the header block for an error answered alone, of the trailers
//! otherwise). A layer that counts by HTTP status therefore reads every call, failed or not,
//! as `200 OK`: a limit on failed calls (`count_when(|s| s != StatusCode::OK)`, the way one
//! limits failed logins over HTTP) gave every failed call back and limited nothing. Such a
//! layer is now a configuration error: every call is refused (`INTERNAL`), none reaches the
//! service. A `ManualClock` drives every limit: nothing sleeps.

use ratelimit::http::RateLimitLayer;
use ratelimit_tests::grpc::GrpcServer as Grpc;
use ratelimit_tests::web::{behind_one_proxy, fixed_window, per_minute};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// A health `Check` of `service` as the client `ip`: `NOT_FOUND` for a service the reporter
/// does not know (a failed call), `SERVING` for `""`.
async fn check(server: &Grpc, service: &str, ip: &str) -> Result<HealthCheckResponse, Status> {
    let mut request = Request::new(HealthCheckRequest {
        service: service.into(),
    });
    request
        .metadata_mut()
        .insert("x-forwarded-for", ip.parse().unwrap());
    HealthClient::new(server.channel.clone())
        .check(request)
        .await
        .map(tonic::Response::into_inner)
}

/// Five failed calls from one client under a limit of 2 failed calls a minute. On `e67bb5a`
/// all five reached the service (each `NOT_FOUND`, each given back as a `200`): the limit
/// limited nothing. Now each is refused as the configuration error it is, and none runs.
#[tokio::test]
async fn a_grpc_layer_counting_failed_calls_by_http_status_never_gives_every_failure_back() {
    for counts in [
        (|status| status != http::StatusCode::OK) as fn(http::StatusCode) -> bool,
        |status| !status.is_success(),
        |status| status.is_client_error() || status.is_server_error(),
    ] {
        let (limiter, _clock) = fixed_window();
        let layer = RateLimitLayer::new(limiter, behind_one_proxy())
            .options(per_minute(2))
            .grpc()
            .count_when(counts);
        let server = Grpc::start(layer).await;
        let mut codes = Vec::new();
        for _ in 0..5 {
            let status = check(&server, "no.such.Service", "198.51.100.1")
                .await
                .unwrap_err();
            codes.push(status.code());
        }
        assert!(
            server.runs() <= 2,
            "{} failed calls reached the service under a limit of 2 failures: {codes:?}",
            server.runs()
        );
        assert_eq!(codes, [Code::Internal; 5]);
        assert_eq!(server.runs(), 0);
        // A call that would succeed is refused alike: the layer decides nothing it cannot
        // count.
        let status = check(&server, "", "198.51.100.1").await.unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        assert_eq!(server.runs(), 0);
    }
}

/// The order of the builder's calls makes no difference: `count_when` before `grpc`, and
/// with several limits decided as one.
#[tokio::test]
async fn count_when_before_grpc_or_on_stacked_limits_is_refused_alike() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy())
        .limit(per_minute(2).budget("a"))
        .limit(per_minute(3).budget("b"))
        .count_when(|status| status != http::StatusCode::OK)
        .grpc();
    let server = Grpc::start(layer).await;
    for _ in 0..4 {
        let status = check(&server, "no.such.Service", "198.51.100.2")
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
    }
    assert_eq!(server.runs(), 0);
}

/// Without `count_when`, the same gRPC layer counts every call: the third failed call is
/// refused and two reach the service (the control: the refusals above are the fix's, not
/// a server that refuses everything).
#[tokio::test]
async fn a_grpc_layer_without_count_when_counts_every_call() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(
            check(&server, "no.such.Service", "198.51.100.3")
                .await
                .unwrap_err()
                .code(),
        );
    }
    assert_eq!(
        codes,
        [
            Code::NotFound,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::ResourceExhausted
        ]
    );
    assert_eq!(server.runs(), 2);
}
