//! What the tower layer costs per gRPC call on a tonic service, without a network, in figures
//! the machine's load does not move: heap allocations per call (counted by a global allocator
//! on this thread), and a loop to run under `cachegrind` for instructions per call. Each
//! variant answers `ITERS` `grpc.health.v1.Health/Check` calls through tonic's `Routes` (the
//! service a tonic server runs), its response body read to the end, after a warm-up (the
//! store's key exists).
//!
//! ```text
//! cargo bench -p ratelimit-tests --features tonic --bench grpc_layer_cost
//! ```
//!
//! prints allocations per call for every variant. For instructions per call, run one variant
//! (`VARIANT=0..3`) under cachegrind at two loop lengths and divide the difference:
//! BENCHMARKS.md, section `grpc_layer_cost`, has the command.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, ManualClock, Options, RateLimitService, Strategy};
use ratelimit_tests::CountingAllocator;
use tower::{Layer, Service, ServiceExt};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const VARIANTS: [&str; 4] = [
    "no layer",
    "a layer that does nothing (tower::util::MapRequestLayer)",
    "RateLimitLayer::grpc, headers off",
    "RateLimitLayer::grpc, headers on",
];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The layer as `http_layer_cost` sets it: a memory store, token bucket, a limit no run
/// reaches, keyed by the peer address, on a manual clock (valgrind crashes in the system
/// clock's vDSO lookup).
fn limit(clock: &Arc<ManualClock>, headers: bool) -> RateLimitLayer<ratelimit::http::GrpcAnswers> {
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
        .grpc()
}

/// A `Check` call from `peer`: a gRPC frame of the empty request message.
fn check(peer: SocketAddr) -> http::Request<tonic::body::Body> {
    let frame = Bytes::from_static(&[0, 0, 0, 0, 0]);
    let mut request = http::Request::post("/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(Full::new(frame)))
        .unwrap();
    request.extensions_mut().insert(peer);
    request
}

/// `iters` calls through `service` after 1,000 to warm up; the allocations per call.
async fn run<S>(service: S, peer: SocketAddr, iters: u64) -> f64
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone,
{
    let one = || async {
        let response = service.clone().oneshot(check(peer)).await.unwrap();
        let grpc_status = response.headers().get("grpc-status").cloned();
        let body = response.into_body().collect().await.unwrap();
        let trailers = body.trailers().and_then(|t| t.get("grpc-status")).cloned();
        assert_eq!(
            grpc_status.or(trailers).unwrap(),
            "0",
            "the call did not pass"
        );
    };
    for _ in 0..1_000 {
        one().await;
    }
    let before = ratelimit_tests::allocations();
    for _ in 0..iters {
        one().await;
    }
    (ratelimit_tests::allocations() - before) as f64 / iters as f64
}

fn main() {
    // `cargo test --benches` runs each bench once with no `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let iters = env("ITERS", 10_000);
    let only = std::env::var("VARIANT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_764_556_800)));
    let mut per_call = [f64::NAN; 4];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let routes = || {
        let (_reporter, health) = tonic_health::server::health_reporter();
        tonic::service::Routes::new(health)
    };
    runtime.block_on(async {
        for (v, result) in per_call.iter_mut().enumerate() {
            if only.is_some_and(|only| only != v) {
                continue;
            }
            *result = match v {
                0 => run(routes(), peer, iters).await,
                1 => {
                    let nothing = tower::util::MapRequestLayer::new(|r| r);
                    run(nothing.layer(routes()), peer, iters).await
                }
                _ => run(limit(&clock, v == 3).layer(routes()), peer, iters).await,
            };
        }
    });
    println!("grpc_layer_cost: heap allocations per call, {iters} calls per variant");
    println!("| variant | allocations per call | over no layer |");
    println!("| --- | --- | --- |");
    for v in 0..4 {
        if per_call[v].is_nan() {
            continue;
        }
        println!(
            "| {} | {:.2} | {:+.2} |",
            VARIANTS[v],
            per_call[v],
            per_call[v] - per_call[0]
        );
    }
}
