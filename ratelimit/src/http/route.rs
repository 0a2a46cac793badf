//! Per-route budgets: a request's route template and method, the name its budget goes by.

use super::head::RequestHead;

/// The route of every request no route answers: a `404`, a method no router knows, an
/// `OPTIONS` preflight. Per route, they share one budget (of each limit). Probing for paths
/// is counted like any other request.
pub const UNMATCHED: &str = "unmatched";

/// The route a request was routed to, as `"<METHOD> <template>"`: `/orders/1` and `/orders/2`
/// are both `GET /orders/{id}`. [`UNMATCHED`] when no route matched (the limiter runs as a
/// layer of a fallback), for a CORS preflight, and for a method outside the standard ones (a
/// client inventing methods would otherwise invent budgets).
///
/// The template is the head's [`route`](RequestHead::route): with axum, its `MatchedPath`, set
/// by the router before the route's layers run (use it from a layer added with `Router::layer`
/// or `Router::route_layer`, not one wrapped around the whole router as a service: there every
/// request is [`UNMATCHED`]); with actix-web, the resource's `match_pattern`.
///
/// A standard method on a known path that the route does not answer (a `405`) is counted
/// under its own `"<METHOD> <template>"`: the limiter runs before the router knows. That is at
/// most eight budgets per route, so still bounded.
///
/// `HEAD` is counted as `GET`: axum answers it with the `GET` handler, so a budget of its own
/// would let that handler run twice the limit (where a framework does not, one budget for
/// both is only stricter).
///
/// [`RateLimitLayer::per_route`](super::RateLimitLayer::per_route) puts this after each
/// limit's budget name; a closure key extractor can use it as a part of the key.
pub fn route_of(head: &dyn RequestHead) -> String {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ];
    let method = head.method();
    let preflight = method == "OPTIONS" && head.header("access-control-request-method").is_some();
    match head.route() {
        Some(path) if !preflight && STANDARD.contains(&method) => {
            let method = if method == "HEAD" { "GET" } else { method };
            format!("{method} {path}")
        }
        _ => UNMATCHED.to_owned(),
    }
}

/// The gRPC method a request calls (`/package.Service/Method`, its path) when it is one of
/// `methods`, else [`UNMATCHED`]: the budget of a limit counted per gRPC method
/// ([`RateLimitLayer::per_method`](super::RateLimitLayer::per_method)). Only the methods listed
/// get budgets of their own: the path is the client's to choose, and a budget per path a
/// client invents would let it fill the store.
pub fn grpc_method_of(head: &dyn RequestHead, methods: &[String]) -> String {
    let path = head.path();
    match methods.iter().find(|m| *m == path) {
        Some(method) => method.clone(),
        None => UNMATCHED.to_owned(),
    }
}

/// Why `method` is not a gRPC method path (`/package.Service/Method`), if it is not.
#[cfg(feature = "tower")]
pub(crate) fn not_a_grpc_method(method: &str) -> Option<String> {
    let parts: Option<(&str, &str)> = method
        .strip_prefix('/')
        .and_then(|rest| rest.split_once('/'));
    let printable = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
    match parts {
        Some((service, name)) if printable(service) && printable(name) => None,
        _ => Some(format!(
            "{method:?} is not a gRPC method path: `/package.Service/Method`"
        )),
    }
}
