//! OpenAPI documentation of the limiter's answers (feature `utoipa`): the `429 Too Many
//! Requests` response with its JSON body and its `Retry-After` and rate-limit headers, as the
//! HTTP layer and `impl IntoResponse for Error` send them.
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
//! RateLimitDocs.modify(&mut api); // every operation can answer 429
//! let get = api.paths.paths["/orders/{id}"].get.as_ref().unwrap();
//! assert!(get.responses.responses.contains_key("429"));
//! ```

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, RefOr, Response, ResponseBuilder};
use utoipa::Modify;

/// The `429` answer: `{"code":"RATE_LIMITED","retryAfter":<seconds>,"limit":..,"remaining":..}`
/// with `Retry-After` and the `X-RateLimit-*` / IETF `RateLimit` headers.
pub fn too_many_requests() -> Response {
    let integer = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .description(Some(description))
    };
    let body = ObjectBuilder::new()
        .property(
            "code",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["RATE_LIMITED"]))
                .description(Some("Always RATE_LIMITED for a refusal")),
        )
        .required("code")
        .property("retryAfter", integer("Seconds to wait before retrying"))
        .required("retryAfter")
        .property("limit", integer("The limit, burst included"))
        .property("remaining", integer("Units left in the window: 0, or fewer than a refused call of a larger cost asked for"))
        .build();
    let header = |description: &str, ty: Type| {
        HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(ty))
            .description(Some(description))
            .build()
    };
    ResponseBuilder::new()
        .description("Too many requests: over the rate limit")
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(body)).build(),
        )
        .header(
            "Retry-After",
            header("Seconds to wait before retrying", Type::Integer),
        )
        .header(
            "X-RateLimit-Limit",
            header("The limit, burst included", Type::Integer),
        )
        .header(
            "X-RateLimit-Remaining",
            header("Calls left in the window", Type::Integer),
        )
        .header(
            "X-RateLimit-Reset",
            header("When the budget is full again, Unix seconds", Type::Integer),
        )
        .header(
            "RateLimit",
            header(
                "IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers-09): every policy's remaining and t, on a 429 the same point in time as Retry-After",
                Type::String,
            ),
        )
        .header(
            "RateLimit-Policy",
            header(
                "IETF RateLimit-Policy field: every policy's quota and window",
                Type::String,
            ),
        )
        .build()
}

/// Adds the `429` answer to `operation` (an operation the HTTP layer limits, or an annotated
/// handler).
pub fn document(operation: &mut Operation) {
    operation
        .responses
        .responses
        .insert("429".to_owned(), RefOr::T(too_many_requests()));
}

/// A [`Modify`] that documents the `429` answer on every operation of the API: for an API
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
