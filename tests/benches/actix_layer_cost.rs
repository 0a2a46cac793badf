//! What the actix-web middleware costs per request without a network, in figures the
//! machine's load does not move: heap allocations per request (counted by a global allocator
//! on this thread), and a loop to run under `cachegrind` for instructions per request. Each
//! variant answers `ITERS` requests through `actix_web::test::call_service` (the app's
//! service built once, as a worker builds it), after a warm-up (the store's key exists).
//!
//! ```text
//! cargo bench -p ratelimit-tests --features actix --bench actix_layer_cost
//! ```
//!
//! prints allocations per request for every variant. For instructions per request, run one
//! variant (`VARIANT=0..3`) under cachegrind at two loop lengths and divide the difference:
//! BENCHMARKS.md, section `actix_layer_cost`, has the command.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::{test, web, App};
use ratelimit::actix::RateLimit;
use ratelimit::http::ClientIp;
use ratelimit::{Config, ManualClock, Options, RateLimitService, Strategy};
use ratelimit_tests::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const VARIANTS: [&str; 4] = [
    "no middleware",
    "a middleware that does nothing (actix_web::middleware::from_fn)",
    "ratelimit::actix::RateLimit, headers off",
    "ratelimit::actix::RateLimit, headers on",
];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The middleware as `http_layer_cost` sets its layer: a memory store, token bucket, a limit
/// no run reaches, keyed by the peer address, on a manual clock (valgrind crashes in the
/// system clock's vDSO lookup).
fn limit(clock: &Arc<ManualClock>, headers: bool) -> RateLimit {
    let config = Config::builder()
        .strategy(Strategy::TokenBucket)
        .build()
        .unwrap();
    let service = RateLimitService::with_clock(config, clock.clone()).unwrap();
    RateLimit::new(service, ClientIp::peer())
        .options(
            Options::new()
                .limit(4_000_000_000)
                .window(Duration::from_secs(3_600)),
        )
        .headers(headers)
}

/// `iters` requests through `app` after 1,000 to warm up; the allocations per request.
async fn run<S, B>(app: &S, peer: SocketAddr, iters: u64) -> f64
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let one = || async {
        let request = test::TestRequest::get()
            .uri("/")
            .peer_addr(peer)
            .to_request();
        let response = app.call(request).await.unwrap();
        assert!(response.status().is_success());
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
    let mut per_request = [f64::NAN; 4];
    let hello = || web::get().to(|| async { "hello" });
    actix_web::rt::System::new().block_on(async {
        for (v, result) in per_request.iter_mut().enumerate() {
            if only.is_some_and(|only| only != v) {
                continue;
            }
            *result = match v {
                0 => {
                    run(
                        &test::init_service(App::new().route("/", hello())).await,
                        peer,
                        iters,
                    )
                    .await
                }
                1 => {
                    let nothing = actix_web::middleware::from_fn(
                        |request, next: actix_web::middleware::Next<_>| next.call(request),
                    );
                    let app = App::new().route("/", hello()).wrap(nothing);
                    run(&test::init_service(app).await, peer, iters).await
                }
                _ => {
                    let app = App::new().route("/", hello()).wrap(limit(&clock, v == 3));
                    run(&test::init_service(app).await, peer, iters).await
                }
            };
        }
    });
    println!("actix_layer_cost: heap allocations per request, {iters} requests per variant");
    println!("| variant | allocations per request | over no middleware |");
    println!("| --- | --- | --- |");
    for v in 0..4 {
        if per_request[v].is_nan() {
            continue;
        }
        println!(
            "| {} | {:.2} | {:+.2} |",
            VARIANTS[v],
            per_request[v],
            per_request[v] - per_request[0]
        );
    }
}
