//! The OpenAPI documentation of the limiter's answers (feature `utoipa`) says what the HTTP
//! layer sends: every status, the JSON body's codes and fields, every header; checked against
//! live answers from a real server (with feature `axum`).

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
            serde_json::json!(["RATE_LIMITED", "QUEUE_FULL", "QUEUE_TIMEOUT"]),
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
    // One operation only: the three answers.
    let mut op = OperationBuilder::new().build();
    document(&mut op);
    let mut statuses: Vec<&str> = op.responses.responses.keys().map(|s| s.as_str()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["429", "500", "503"]);
}

/// An operation's own 429 is kept (a document has one response per status), not replaced
/// without a word: the limiter's answer is not added to it, and a warning says so.
#[test]
fn an_operations_own_429_is_kept() {
    use utoipa::openapi::{RefOr, ResponseBuilder};
    let mut op = OperationBuilder::new().build();
    let own = ResponseBuilder::new().description("our own 429").build();
    op.responses
        .responses
        .insert("429".to_owned(), RefOr::T(own));
    document(&mut op);
    match &op.responses.responses["429"] {
        RefOr::T(response) => assert_eq!(response.description, "our own 429"),
        RefOr::Ref(_) => panic!("replaced"),
    }
    assert!(op.responses.responses.contains_key("503"));
}

/// Every answer the layer sends, from a real server to a real client, is what the document
/// says: its status is documented, its code is in that status's enum, the required fields are
/// in its body, and every header it sends is documented under that status.
#[cfg(feature = "axum")]
#[tokio::test]
async fn live_answers_match_the_document() {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use axum::routing::get;
    use axum::Router;
    use ratelimit::http::{ClientIp, RateLimitLayer};
    use ratelimit::{Config, ManualClock, Options, RateLimitService};
    use ratelimit_tests::{Broken, START};

    let mut item = PathItem::new(HttpMethod::Get, OperationBuilder::new().build());
    item.post = None;
    let mut api = OpenApiBuilder::new()
        .paths(PathsBuilder::new().path("/", item))
        .build();
    RateLimitDocs.modify(&mut api);
    let doc: serde_json::Value = serde_json::from_str(&api.to_json().unwrap()).unwrap();
    let responses = &doc["paths"]["/"]["get"]["responses"];

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/")
    }
    let hello = || Router::new().route("/", get(|| async { "hello" }));
    let clock = || Arc::new(ManualClock::new(START));
    let one = Options::new().limit(1).window(Duration::from_secs(60));
    let memory = RateLimitService::with_clock(Config::default(), clock()).unwrap();
    // RATE_LIMITED: a second request in the minute.
    let limited =
        serve(hello().layer(RateLimitLayer::new(memory, ClientIp::peer()).options(one.clone())))
            .await;
    // STORE_FAILED: a store that cannot answer.
    let broken = RateLimitService::with_store(Config::default(), Broken, clock()).unwrap();
    let failing =
        serve(hello().layer(RateLimitLayer::new(broken, ClientIp::peer()).options(one.clone())))
            .await;
    // UNKNOWN_TIER: a layer naming a tier the configuration does not have.
    let tiers = RateLimitService::with_clock(Config::default(), clock()).unwrap();
    let gold = Options::new().tier("gold");
    let misconfigured =
        serve(hello().layer(RateLimitLayer::new(tiers, ClientIp::peer()).options(gold))).await;

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    assert_eq!(client.get(&limited).send().await.unwrap().status(), 200);
    let mut seen = Vec::new();
    for url in [&limited, &failing, &misconfigured] {
        let answer = client.get(url.as_str()).send().await.unwrap();
        let status = answer.status().as_u16().to_string();
        let documented = &responses[&status];
        assert!(documented.is_object(), "{url}: {status} is not documented");
        for (name, _) in answer.headers() {
            let name = name.as_str();
            if matches!(name, "content-type" | "content-length" | "date") {
                continue;
            }
            let headers = documented["headers"].as_object();
            let listed = headers.is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case(name)));
            assert!(listed, "{status}: {name} is sent but not documented");
        }
        let body: serde_json::Value =
            serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        let schema = &documented["content"]["application/json"]["schema"];
        let codes = schema["properties"]["code"]["enum"].as_array().unwrap();
        assert!(
            codes.contains(&body["code"]),
            "{status}: {} not in {codes:?}",
            body["code"]
        );
        for field in schema["required"].as_array().unwrap() {
            assert!(
                body.get(field.as_str().unwrap()).is_some(),
                "{status}: no {field}"
            );
        }
        for field in body.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(field).is_some(),
                "{status}: {field} undocumented"
            );
        }
        seen.push((status, body["code"].as_str().unwrap().to_owned()));
    }
    assert_eq!(
        seen,
        [
            ("429".to_owned(), "RATE_LIMITED".to_owned()),
            ("503".to_owned(), "STORE_FAILED".to_owned()),
            ("500".to_owned(), "UNKNOWN_TIER".to_owned()),
        ]
    );
}
