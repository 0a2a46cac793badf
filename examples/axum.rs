//! A small HTTP API with per-client and per-route limits (feature `axum`).
//!
//! Run with `cargo run -p ratelimit-examples --features axum --example axum`, then
//! `curl -i http://127.0.0.1:3000/orders/1` a few times (`ADDR` changes the address).
//!
//! - every route template gets 20 requests a minute per client (`/orders/1` and `/orders/2`
//!   share `GET /orders/{id}`; unknown paths share one budget);
//! - across all routes, a client gets 5 requests a second and 100 a minute, decided as one;
//! - `/export` is also an annotated fn with a budget of its own, answering `429` through
//!   `impl IntoResponse for ratelimit::Error`;
//! - `/health` is outside the layers.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{rate_limit, Error, Module, Options};

async fn order(Path(id): Path<u64>) -> String {
    format!("order {id}\n")
}

/// Expensive: 2 a minute for everyone together, however many clients ask.
#[rate_limit(limit = 2, window = "1m")]
async fn export() -> Result<&'static str, Error> {
    Ok("export started\n")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let module = Module::builder().init()?;

    // Behind a load balancer, count `ClientIp::x_forwarded_for(TrustedProxies::count(1))`
    // instead: the peer would be the balancer.
    let per_route = RateLimitLayer::from_module(ClientIp::peer())
        .options(Options::new().limit(20).window(Duration::from_secs(60)))
        .per_route()
        .policy("per-route");
    let per_client = RateLimitLayer::from_module(ClientIp::peer())
        .limit(
            Options::new()
                .limit(5)
                .window(Duration::from_secs(1))
                .budget("burst"),
        )
        .limit(
            Options::new()
                .limit(100)
                .window(Duration::from_secs(60))
                .budget("per-client"),
        );

    let app = Router::new()
        .route("/orders/{id}", get(order))
        .route("/export", get(export))
        .layer(per_route)
        .layer(per_client)
        .route("/health", get(|| async { "ok\n" }));

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    drop(module);
    Ok(())
}
