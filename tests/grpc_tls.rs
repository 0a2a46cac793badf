//! The tower layer on a real tonic server that serves TLS (feature `tonic`), called by a real
//! tonic client over TLS on loopback, keyed by the connection's peer. The last stop's note
//! feared a TLS server's calls keyed by their peer were all refused (tonic writes a TLS
//! connection's peer as a `TlsConnectInfo`, which the layer does not read); tonic 0.14 writes
//! the inner `TcpConnectInfo` beside it, which the layer reads, and these tests hold that: the
//! limit admits exactly its calls, on the peer's own budget. The certificates are fixtures
//! (`fixtures/tls`). A `ManualClock` drives the limit: nothing sleeps.

use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit_tests::grpc::GrpcServer as Grpc;
use ratelimit_tests::web::{fixed_window, per_minute};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn check(server: &Grpc) -> Result<(), tonic::Status> {
    HealthClient::new(server.channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .map(drop)
}

#[tokio::test]
async fn a_tls_server_keyed_by_its_peer_admits_its_limit_and_refuses_the_rest() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::peer()).options(per_minute(2));
    let server = Grpc::start_tls(layer.grpc()).await;
    check(&server).await.expect("the first call of two");
    check(&server).await.expect("the second call of two");
    let refused = check(&server).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(refused.message(), "RATE_LIMITED");
    assert_eq!(server.runs(), 2);
}

#[tokio::test]
async fn a_tls_servers_budget_is_its_peers_address() {
    // The budget is the peer's, 127.0.0.1: spent by the TLS calls, it is what `status` reads
    // for that key (not a key made of something else, nor one budget for every caller).
    let (limiter, _clock) = fixed_window();
    let options = per_minute(3).budget("tls");
    let layer = RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(options.clone());
    let server = Grpc::start_tls(layer.grpc()).await;
    check(&server).await.unwrap();
    check(&server).await.unwrap();
    let level = limiter.status("127.0.0.1", &options).await.unwrap();
    assert_eq!(level.remaining, 1);
    assert_eq!(server.runs(), 2);
}
