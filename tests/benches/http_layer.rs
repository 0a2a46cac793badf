//! What the HTTP layer costs: requests per second through a small axum app with and without
//! `RateLimitLayer` (memory store, a limit no run reaches, keyed by the peer address), driven
//! by `wrk` on loopback, in interleaved rounds of one run (without, with, with, without...).
//!
//! `cargo bench -p ratelimit-tests --features axum --bench http_layer` (needs `wrk`:
//! `apt-get install -y wrk`). `ROUNDS`, `SECONDS` and `CONNECTIONS` change the run;
//! `HEADERS=0` leaves the rate-limit headers out.
//! Figures: BENCHMARKS.md, section "HTTP layer".

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, Options, RateLimitService, Strategy};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}/")
}

/// `wrk`'s requests per second and 99th percentile latency (µs) for `url`.
fn wrk(url: &str, seconds: u64, connections: u64) -> (f64, f64) {
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            url,
        ])
        .output()
        .expect("wrk runs (apt-get install -y wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}"));
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(|v| micros(v.trim()))
        .unwrap_or_else(|| panic!("no 99% latency in wrk's output:\n{text}"));
    (rps, p99)
}

/// `wrk`'s latency text (`812.00us`, `1.23ms`) in microseconds.
fn micros(text: &str) -> f64 {
    let split = text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n,
        "ms" => n * 1_000.0,
        "s" => n * 1_000_000.0,
        _ => f64::NAN,
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    // `cargo test --benches` runs each bench once with no `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let (rounds, seconds, connections) =
        (env("ROUNDS", 6), env("SECONDS", 5), env("CONNECTIONS", 32));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (plain, limited) = runtime.block_on(async {
        let app = || Router::new().route("/", get(|| async { "hello" }));
        let config = Config::builder()
            .strategy(Strategy::TokenBucket)
            .build()
            .unwrap();
        let service = RateLimitService::new(config).unwrap();
        // `HEADERS=0`: the decision alone, without the five rate-limit headers on every
        // response (their bytes, not the decision, are most of what a tiny response costs).
        let layer = RateLimitLayer::new(service, ClientIp::peer())
            .options(
                Options::new()
                    .limit(4_000_000_000)
                    .window(Duration::from_secs(3_600)),
            )
            .headers(env("HEADERS", 1) == 1);
        (serve(app()).await, serve(app().layer(layer)).await)
    });
    // Warm-up: connections, allocator, the store's shards.
    wrk(&plain, 1, connections);
    wrk(&limited, 1, connections);
    let mut ratios = Vec::new();
    let mut added_p99 = Vec::new();
    for round in 0..rounds {
        // Alternate the order, so neither variant always runs on the other's warm caches.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut results = [(0.0, 0.0); 2];
        for with_layer in order {
            let url = if with_layer { &limited } else { &plain };
            results[usize::from(with_layer)] = wrk(url, seconds, connections);
        }
        let [(rps_plain, p99_plain), (rps_layer, p99_layer)] = results;
        println!(
            "round {round}: without {rps_plain:.0} req/s (p99 {p99_plain:.0} µs), with the layer \
             {rps_layer:.0} req/s (p99 {p99_layer:.0} µs): {:.3}x",
            rps_layer / rps_plain
        );
        ratios.push(rps_layer / rps_plain);
        added_p99.push(p99_layer - p99_plain);
    }
    println!(
        "http_layer: throughput with the layer / without, median of {rounds} rounds: {:.3}x; \
         p99 latency added, median: {:.0} µs",
        median(ratios),
        median(added_p99)
    );
}
