//! Examples live beside this file; run `cargo run --example quickstart`. What the HTTP examples
//! (`axum_server`, `actix_server`) share is here.

#![forbid(unsafe_code)]

use ratelimit::{rate_limit, Error};

/// The signed-in user and their plan, from the `Authorization` header's value. A stand-in for
/// real authentication: a token the server verified, never a header taken on the client's
/// word (a client would pick a new key, and the best plan, on every request).
pub fn user(authorization: Option<&str>) -> (String, &'static str) {
    let token = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("anonymous");
    let plan = if token.starts_with("pro-") {
        "pro"
    } else {
        "free"
    };
    (token.to_owned(), plan)
}

/// Per user, under the user's plan (the examples configure `free` 5 a minute, `pro` 50).
#[rate_limit(key = user, tier = plan)]
pub async fn me(user: String, plan: &'static str) -> Result<String, Error> {
    Ok(format!("{user} on the {plan} plan\n"))
}
