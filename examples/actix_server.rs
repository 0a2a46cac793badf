//! An actix-web API limited the ways a service behind a load balancer needs (feature `actix`),
//! the same limits as `axum_server.rs` through the same rules.
//!
//! ```text
//! cargo run -p ratelimit-examples --features actix --example actix_server
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
//!   `GET /orders/{id}`, actix-web's `match_pattern`; paths no route answers share one budget).
//! - **`/login`**, stacked: 3 a minute against bursts and 10 an hour per client, decided as
//!   one (a refusal by one spends nothing from the other).
//! - **`/me`**, annotated: per user and by the user's plan (tiers `free` and `pro`), answering
//!   `429` through `impl ResponseError for ratelimit::Error`.
//! - **`/health`** is outside every limit.
//!
//! `ADDR` changes the address (default `127.0.0.1:3000`).

use actix_web::{web, App, HttpRequest, HttpServer};
use ratelimit::actix::RateLimit;
use ratelimit::http::{ClientIp, TrustedProxies};
use ratelimit::{Error, Module, Options, Tier};
use ratelimit_examples::user;

async fn order(id: web::Path<u64>) -> String {
    format!("order {id}\n")
}

async fn login() -> &'static str {
    "welcome\n"
}

async fn me(request: HttpRequest) -> Result<String, Error> {
    let authorization = request.headers().get("authorization");
    let (user, plan) = user(authorization.and_then(|v| v.to_str().ok()));
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
    let app = move || {
        let login_limits = RateLimit::from_module(client())
            .limit(per_minute(3).budget("login-burst"))
            .limit(Options::new().limit(10).window("1h").budget("login-hourly"));
        App::new()
            .route("/health", web::get().to(|| async { "ok\n" }))
            .service(
                web::scope("")
                    .route("/orders/{id}", web::get().to(order))
                    .service(
                        web::resource("/login")
                            .route(web::post().to(login))
                            .wrap(login_limits),
                    )
                    .route("/me", web::get().to(me))
                    // The last wrapped runs first: every client's budget, then the route's.
                    .wrap(
                        RateLimit::from_module(client())
                            .options(per_minute(20))
                            .per_route()
                            .policy("per-route"),
                    )
                    .wrap(
                        RateLimit::from_module(client())
                            .options(per_minute(100).budget("per-client"))
                            .policy("per-client"),
                    ),
            )
    };

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let server = HttpServer::new(app).bind(&addr)?;
    for bound in server.addrs() {
        println!("listening on http://{bound}");
    }
    server.run().await?;
    drop(module);
    Ok(())
}
