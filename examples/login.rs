//! Brute-force protection for a login endpoint (feature `axum`): failed attempts are limited,
//! successful ones are not counted (`count = "err"` and the layer's `count_when`).
//!
//! ```text
//! cargo run -p ratelimit-examples --features axum --example login
//! for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\n' -X POST -H 'x-user: ann' -H 'x-password: guess' http://127.0.0.1:3000/login; done   # 401 x5, then 429
//! curl -i -X POST -H 'x-user: bob' -H 'x-password: secret' http://127.0.0.1:3000/login    # 200, never counted
//! ```
//!
//! - **5 failed attempts per 15 minutes per user and client address, then an hour's block**
//!   (`check` below, an annotated fn with `count = "err"` and `block_for = "1h"`): an attempt
//!   spends before the password is checked, so 64 guesses sent at once still check the
//!   password only 5 times; a right password gives its spend back; once refused, the user and
//!   address stay refused for an hour, right password or not.
//! - **100 failed logins per hour per client address**, over every user (the layer, with
//!   `count_when(|status| status == 401)`): an address trying many users is stopped too. A
//!   request refused by the per-user limit (429) is not counted here.
//!
//! Passwords: `secret` for every user. `ADDR` changes the address (default `127.0.0.1:3000`).

use std::fmt;
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{rate_limit, Error, Module, Options};

/// Who is trying, from where: the key of the per-user limit.
struct Attempt<'a> {
    user: &'a str,
    ip: std::net::IpAddr,
}

impl fmt::Display for Attempt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.user, self.ip)
    }
}

enum LoginError {
    WrongPassword,
    Limited(Error),
}

impl From<Error> for LoginError {
    fn from(error: Error) -> Self {
        LoginError::Limited(error)
    }
}

impl IntoResponse for LoginError {
    fn into_response(self) -> Response {
        match self {
            LoginError::WrongPassword => {
                (StatusCode::UNAUTHORIZED, "wrong password\n").into_response()
            }
            // 429 with `Retry-After` and the rate-limit headers (503 if the store failed).
            LoginError::Limited(error) => error.into_response(),
        }
    }
}

/// The password check, limited to 5 failures per 15 minutes per user and address, then
/// blocked for an hour.
#[rate_limit(limit = 5, window = "15m", key = attempt, count = "err", block_for = "1h")]
async fn check(attempt: &Attempt<'_>, password: &str) -> Result<(), LoginError> {
    let _ = attempt.user;
    match password {
        "secret" => Ok(()),
        _ => Err(LoginError::WrongPassword),
    }
}

async fn login(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<&'static str, LoginError> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let attempt = Attempt {
        user: header("x-user"),
        ip: peer.ip(),
    };
    check(&attempt, header("x-password")).await?;
    Ok("welcome\n")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _module = Module::builder().init()?;
    let per_address = RateLimitLayer::from_module(ClientIp::peer())
        .options(
            Options::new()
                .limit(100)
                .window("1h")
                .budget("login-per-address"),
        )
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let app = Router::new()
        .route("/login", post(login))
        .layer(per_address);

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "login on http://{addr}/login (headers x-user and x-password; the password is `secret`)"
    );
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
