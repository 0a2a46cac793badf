//! OpenAPI documentation of the limiter's answers (feature `utoipa`), as the HTTP layer and
//! `impl IntoResponse for Error` send them: `429 Too Many Requests` (every refusal's code, its
//! JSON body, `Retry-After` and the rate-limit headers), `503` (the store could not decide)
//! and `500` (the limiter's configuration), their codes taken from [`Error::CODES`].
//!
//! ```
//! use ratelimit::openapi::RateLimitDocs;
//! use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
//! use utoipa::openapi::{OpenApiBuilder, PathsBuilder};
//! use utoipa::Modify;
//!
//! let mut api = OpenApiBuilder::new()
//!     .paths(PathsBuilder::new().path(
//!         "/orders/{id}",
//!         PathItem::new(HttpMethod::Get, OperationBuilder::new().build()),
//!     ))
//!     .build();
//! RateLimitDocs.modify(&mut api); // every operation can answer 429, 503 and 500
//! let get = api.paths.paths["/orders/{id}"].get.as_ref().unwrap();
//! assert!(get.responses.responses.contains_key("429"));
//! ```

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, RefOr, Response, ResponseBuilder};
use utoipa::Modify;

use crate::Error;

/// The codes answered with `status`, from [`Error::CODES`]: the document lists what the wire
/// can carry, from the one list the answers are checked against.
fn codes(status: u16) -> Vec<&'static str> {
    Error::CODES
        .iter()
        .filter(|(_, s)| *s == status)
        .map(|(code, _)| *code)
        .collect()
}

fn integer(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .description(Some(description))
}

fn header(description: &str, ty: Type) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(ty))
        .description(Some(description))
        .build()
}

/// A JSON answer: `description`, its body's schema.
fn json(description: &str, body: utoipa::openapi::schema::Object) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(body)).build(),
    )
}

/// `Retry-After`, which every answer but a `500` carries.
fn retry_after() -> utoipa::openapi::header::Header {
    header("Seconds to wait before retrying", Type::Integer)
}

/// `{"code": <one of status's codes>}`, the body every answer has.
fn body(status: u16, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .property(
            "code",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(codes(status)))
                .description(Some(description)),
        )
        .required("code")
}

/// The `429` answer, for every refusal: `RATE_LIMITED` (over the limit:
/// `{"code":"RATE_LIMITED","retryAfter":<seconds>,"limit":..,"remaining":..}` with the
/// `X-RateLimit-*` / IETF `RateLimit` headers), `QUEUE_FULL` and `QUEUE_TIMEOUT` (a call that
/// would have waited: `{"code":..,"retryAfter":<seconds>}`); each with `Retry-After`.
pub fn too_many_requests() -> Response {
    let body = body(
        429,
        "RATE_LIMITED: over the limit; QUEUE_FULL / QUEUE_TIMEOUT: no room to wait, or the wait ran out",
    )
    .property("retryAfter", integer("Seconds to wait before retrying"))
    .required("retryAfter")
    .property("limit", integer("RATE_LIMITED only: the limit, burst included"))
    .property(
        "remaining",
        integer(
            "RATE_LIMITED only: units left in the window: 0, or fewer than a refused call of a \
             larger cost asked for",
        ),
    )
    .build();
    json(
        "Too many requests: over the rate limit, or no room to wait for it",
        body,
    )
    .header("Retry-After", retry_after())
    .header(
        "X-RateLimit-Limit",
        header(
            "RATE_LIMITED only: the limit, burst included",
            Type::Integer,
        ),
    )
    .header(
        "X-RateLimit-Remaining",
        header("RATE_LIMITED only: calls left in the window", Type::Integer),
    )
    .header(
        "X-RateLimit-Reset",
        header(
            "RATE_LIMITED only: when the budget is full again, Unix seconds",
            Type::Integer,
        ),
    )
    .header(
        "RateLimit",
        header(
            "RATE_LIMITED only: IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers-09), \
                 every policy's remaining and t, on a 429 the same point in time as Retry-After",
            Type::String,
        ),
    )
    .header(
        "RateLimit-Policy",
        header(
            "RATE_LIMITED only: IETF RateLimit-Policy field, every policy's quota and window",
            Type::String,
        ),
    )
    .build()
}

/// The `503` answer: the limiter's store could not decide (`STORE_FAILED`, `STORE_TIMEOUT`,
/// `STORE_FULL`, ...), with `Retry-After`; the request did not run.
pub fn service_unavailable() -> Response {
    let body = body(503, "Why no decision could be made").build();
    json(
        "The rate limiter could not decide; the request did not run",
        body,
    )
    .header("Retry-After", retry_after())
    .build()
}

/// The `500` answer: the limiter's own configuration is wrong (`UNKNOWN_TIER`,
/// `NOT_INITIALIZED`, ...); the request did not run.
pub fn internal_error() -> Response {
    let body = body(500, "The limiter's configuration problem").build();
    json(
        "The rate limiter is misconfigured; the request did not run",
        body,
    )
    .build()
}

/// Adds the limiter's answers (`429`, `503`, `500`) to `operation` (an operation the HTTP
/// layer limits, or an annotated handler). A status the operation documents already keeps
/// its own description, and a warning says so: a document has one response per status, and
/// the limiter's would hide the operation's (merge them by hand if both can be sent).
pub fn document(operation: &mut Operation) {
    let answers = [
        ("429", too_many_requests()),
        ("503", service_unavailable()),
        ("500", internal_error()),
    ];
    for (status, response) in answers {
        let responses = &mut operation.responses.responses;
        if responses.contains_key(status) {
            tracing::warn!(
                target: "ratelimit",
                operation = operation.operation_id.as_deref().unwrap_or("-"),
                status,
                "ratelimit::openapi: the operation documents this status already; the limiter's \
                 answer is not added to it",
            );
            continue;
        }
        responses.insert(status.to_owned(), RefOr::T(response));
    }
}

/// A [`Modify`] that documents the limiter's answers on every operation of the API: for an API
/// whose every route sits behind a `RateLimitLayer`. For some routes only, call [`document`]
/// on their operations.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateLimitDocs;

impl Modify for RateLimitDocs {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ]
            .into_iter()
            .flatten()
            {
                document(operation);
            }
        }
    }
}
