//! The OpenAPI documentation of the 429 answer (feature `utoipa`) says what the HTTP layer
//! sends: the JSON body's fields and every header.

use ratelimit::openapi::{document, RateLimitDocs};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::{OpenApiBuilder, PathsBuilder};
use utoipa::Modify;

#[test]
fn every_operation_documents_the_429_answer_with_its_body_and_headers() {
    let mut item = PathItem::new(HttpMethod::Get, OperationBuilder::new().build());
    item.post = Some(OperationBuilder::new().build());
    let mut api = OpenApiBuilder::new()
        .paths(PathsBuilder::new().path("/orders/{id}", item))
        .build();
    RateLimitDocs.modify(&mut api);
    let json: serde_json::Value = serde_json::from_str(&api.to_json().unwrap()).unwrap();
    for method in ["get", "post"] {
        let refused = &json["paths"]["/orders/{id}"][method]["responses"]["429"];
        let schema = &refused["content"]["application/json"]["schema"];
        assert_eq!(
            schema["properties"]["code"]["enum"],
            serde_json::json!(["RATE_LIMITED"]),
            "{method}: {refused}"
        );
        assert_eq!(
            schema["required"],
            serde_json::json!(["code", "retryAfter"])
        );
        for header in [
            "Retry-After",
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
            "RateLimit",
            "RateLimit-Policy",
        ] {
            assert!(
                refused["headers"].get(header).is_some(),
                "{method}: {header}"
            );
        }
    }
    // One operation only.
    let mut op = OperationBuilder::new().build();
    document(&mut op);
    assert_eq!(op.responses.responses.len(), 1);
}
