//! What the HTTP layer costs per request without a network, in figures the machine's load
//! does not move: heap allocations per request (counted by a global allocator on this
//! thread), and a loop to run under `cachegrind` for instructions per request. Each variant
//! of `http_layer` (the same apps) answers `ITERS` requests through
//! `tower::ServiceExt::oneshot`, after a warm-up (the store's key exists, buffers are grown).
//!
//! ```text
//! cargo bench -p ratelimit-tests --features axum --bench http_layer_cost
//! ```
//!
//! prints allocations per request for every variant. For instructions per request, run one
//! variant (`VARIANT=0..4`) under cachegrind at two loop lengths and divide the difference:
//! BENCHMARKS.md, section `http_layer_cost`, has the command.

#[path = "support/http_apps.rs"]
mod http_apps;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use ratelimit::ManualClock;
use ratelimit_tests::CountingAllocator;
use tower::ServiceExt;

use http_apps::{apps, N, VARIANTS};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One request through `app`, as a server with `ConnectInfo` would pass it; the response is
/// checked and dropped.
async fn one(app: &Router, peer: SocketAddr) {
    let request = Request::get("/")
        .extension(ConnectInfo(peer))
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert!(response.status().is_success());
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    // A manual clock: valgrind crashes in the system clock's vDSO lookup.
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_764_556_800)));
    // With its state given, as `into_make_service` gives it: the routes are built once,
    // not per request.
    let apps = apps(clock).map(|app| app.with_state(()));
    let mut per_request = [f64::NAN; N];
    for (v, app) in apps.iter().enumerate() {
        if only.is_some_and(|only| only != v) {
            continue;
        }
        runtime.block_on(async {
            for _ in 0..1_000 {
                one(app, peer).await;
            }
            let before = ratelimit_tests::allocations();
            for _ in 0..iters {
                one(app, peer).await;
            }
            per_request[v] = (ratelimit_tests::allocations() - before) as f64 / iters as f64;
        });
    }
    println!("http_layer_cost: heap allocations per request, {iters} requests per variant");
    println!("| variant | allocations per request | over no layer |");
    println!("| --- | --- | --- |");
    for v in 0..N {
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
