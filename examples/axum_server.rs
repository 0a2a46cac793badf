//! An HTTP API limited the ways a service behind a load balancer needs (feature `axum`).
//!
//! ```text
//! cargo run -p ratelimit-examples --features axum --example axum_server
//! curl -i -H 'x-forwarded-for: 203.0.113.9' http://127.0.0.1:3000/orders/1
//! curl -i -X POST -H 'x-forwarded-for: 203.0.113.9' http://127.0.0.1:3000/login   # 3 a minute
//! curl -i -H 'authorization: Bearer pro-user-1' http://127.0.0.1:3000/me
//! curl -i http://127.0.0.1:3000/health                                             # never limited
//! ```
//!
//! - **Every client**, counted from the right of `X-Forwarded-For` behind one trusted proxy
//!   (the load balancer; a client adding its own entries on the left changes nothing): 100
//!   requests a minute over every limited route.
//! - **Per route template**: 20 a minute per client on each (`/orders/1` and `/orders/2` share
//!   `GET /orders/{id}`; paths no route answers share one budget).
//! - **`/login`**, stacked: 3 a minute against bursts and 10 an hour per client, decided as
//!   one (a refusal by one spends nothing from the other).
//! - **`/me`**, annotated: per user and by the user's plan (tiers `free` and `pro`), answering
//!   `429` through `impl IntoResponse for ratelimit::Error`.
//! - **`/health`** is outside every limit.
//!
//! `ADDR` changes the address (default `127.0.0.1:3000`).

use std::net::SocketAddr;

use axum::extract::Path;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::{Error, Module, Options, Tier};
use ratelimit_examples::user;

async fn order(Path(id): Path<u64>) -> String {
    format!("order {id}\n")
}

async fn login() -> &'static str {
    "welcome\n"
}

async fn me(headers: HeaderMap) -> Result<String, Error> {
    let (user, plan) = user(headers.get("authorization").and_then(|v| v.to_str().ok()));
    ratelimit_examples::me(user, plan).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let module = Module::builder()
        .tier(Tier::new("free", 5).window("1m"))
        .tier(Tier::new("pro", 50).window("1m"))
        .init()?;

    let client = || ClientIp::x_forwarded_for(TrustedProxies::count(1));
    let per_minute = |n| Options::new().limit(n).window("1m");
    let login_limits = RateLimitLayer::from_module(client())
        .limit(per_minute(3).budget("login-burst"))
        .limit(Options::new().limit(10).window("1h").budget("login-hourly"));

    let app = Router::new()
        .route("/orders/{id}", get(order))
        .route("/login", post(login).route_layer(login_limits))
        .route("/me", get(me))
        .layer(
            RateLimitLayer::from_module(client())
                .options(per_minute(20))
                .per_route()
                .policy("per-route"),
        )
        .layer(
            RateLimitLayer::from_module(client())
                .options(per_minute(100).budget("per-client"))
                .policy("per-client"),
        )
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
