//! The HTTP layer (feature `axum`) against a real server and a real client: each test serves
//! a `Router` on `127.0.0.1:0` with `ConnectInfo`, drives a `ManualClock`, and never sleeps to
//! check a limit.
//!
//! Every request comes from 127.0.0.1, so tests that need several clients put the server
//! behind "one trusted proxy" (the test client) and name the client in `X-Forwarded-For`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::routing::get;
use axum::Router;
use ratelimit::http::{ApiKey, ClientIp, RateLimitLayer, TrustedProxies, UNMATCHED};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Answer, Config, Decision, Error, ManualClock, Module, Options, RateLimitService,
    Strategy,
};
use ratelimit_tests::web::{behind_one_proxy, fixed_window, header, per_minute};
use ratelimit_tests::{service, Broken, START};
use serde_json::{json, Value};

const MINUTE: Duration = Duration::from_secs(60);

/// A served router and a client for it.
struct Server {
    base: String,
    client: reqwest::Client,
}

impl Server {
    async fn start(app: Router) -> Server {
        Self::serve(app, true).await
    }

    async fn serve(app: Router, connect_info: bool) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if connect_info {
                let app = app.into_make_service_with_connect_info::<SocketAddr>();
                axum::serve(listener, app).await.unwrap();
            } else {
                axum::serve(listener, app).await.unwrap();
            }
        });
        Server {
            base: format!("http://{addr}"),
            client: ratelimit_tests::web::client(),
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.get_with(path, &[]).await
    }

    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    /// The status of a GET as the client `ip` behind one trusted proxy.
    async fn status_as(&self, path: &str, ip: &str) -> u16 {
        self.get_with(path, &[("x-forwarded-for", ip)])
            .await
            .status()
            .as_u16()
    }
}

fn hello() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/health", get(|| async { "ok" }))
}

#[tokio::test]
async fn each_key_gets_exactly_its_limit_until_the_window_ends() {
    let (limiter, clock) = fixed_window();
    let app =
        hello().layer(RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(3)));
    let server = Server::start(app).await;

    for _ in 0..3 {
        assert_eq!(server.status_as("/", "203.0.113.1").await, 200);
    }
    assert_eq!(server.status_as("/", "203.0.113.1").await, 429);
    assert_eq!(server.status_as("/", "203.0.113.1").await, 429);
    // Another client has a budget of its own.
    for _ in 0..3 {
        assert_eq!(server.status_as("/", "203.0.113.2").await, 200);
    }
    assert_eq!(server.status_as("/", "203.0.113.2").await, 429);

    clock.advance(MINUTE);
    assert_eq!(server.status_as("/", "203.0.113.1").await, 200);
}

#[tokio::test]
async fn a_refusal_is_429_with_a_json_body_and_every_header() {
    let (limiter, _clock) = fixed_window();
    let app = hello().layer(RateLimitLayer::new(limiter, ClientIp::peer()).options(per_minute(2)));
    let server = Server::start(app).await;
    server.get("/").await;
    server.get("/").await;

    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    // START is 40 s into a minute: the fixed window resets 20 s later.
    let reset = (START.as_secs() / 60 + 1) * 60;
    assert_eq!(reset - START.as_secs(), 20);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(header(&refused, "x-ratelimit-limit"), "2");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&refused, "x-ratelimit-reset"), reset.to_string());
    assert_eq!(header(&refused, "ratelimit-policy"), "\"default\";q=2;w=60");
    assert_eq!(header(&refused, "ratelimit"), "\"default\";r=0;t=20");
    assert_eq!(header(&refused, "content-type"), "application/json");
    assert_eq!(
        refused.text().await.unwrap(),
        r#"{"code":"RATE_LIMITED","retryAfter":20,"limit":2,"remaining":0}"#
    );
}

#[tokio::test]
async fn allowed_responses_carry_the_headers_too() {
    let (limiter, clock) = fixed_window();
    let app = hello().layer(
        RateLimitLayer::new(limiter, ClientIp::peer())
            .options(per_minute(5))
            .policy("per-ip"),
    );
    let server = Server::start(app).await;

    let first = server.get("/").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-ratelimit-limit"), "5");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "4");
    assert_eq!(header(&first, "ratelimit-policy"), "\"per-ip\";q=5;w=60");
    assert_eq!(header(&first, "ratelimit"), "\"per-ip\";r=4;t=20");
    assert!(first.headers().get("retry-after").is_none());

    clock.advance(Duration::from_secs(5));
    let second = server.get("/").await;
    assert_eq!(header(&second, "x-ratelimit-remaining"), "3");
    assert_eq!(header(&second, "ratelimit"), "\"per-ip\";r=3;t=15");
    assert_eq!(second.text().await.unwrap(), "hello");
}

#[tokio::test]
async fn headers_can_be_turned_off_but_a_refusal_keeps_retry_after() {
    let (limiter, _clock) = fixed_window();
    let app = hello().layer(
        RateLimitLayer::new(limiter, ClientIp::peer())
            .options(per_minute(1))
            .headers(false),
    );
    let server = Server::start(app).await;
    let allowed = server.get("/").await;
    assert!(allowed.headers().get("x-ratelimit-remaining").is_none());
    assert!(allowed.headers().get("ratelimit").is_none());
    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert!(refused.headers().get("ratelimit-policy").is_none());
}

#[tokio::test]
async fn a_client_adding_x_forwarded_for_entries_cannot_change_its_key() {
    let (limiter, _clock) = fixed_window();
    let app =
        hello().layer(RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(2)));
    let server = Server::start(app).await;

    // What our one proxy forwards: whatever the client sent, then the address it saw.
    let spoofs = [
        "203.0.113.7",
        "1.1.1.1, 203.0.113.7",
        "2.2.2.2, 3.3.3.3, 203.0.113.7",
        "garbage, 203.0.113.7",
    ];
    assert_eq!(server.status_as("/", spoofs[0]).await, 200);
    assert_eq!(server.status_as("/", spoofs[1]).await, 200);
    for spoof in &spoofs {
        assert_eq!(server.status_as("/", spoof).await, 429, "{spoof}");
    }
    // Two header lines are one list: the last entry of the last line is the proxy's.
    let two_lines = server
        .client
        .get(format!("{}/", server.base))
        .header("x-forwarded-for", "9.9.9.9")
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(two_lines.status(), 429);
    // Without the header, the request did not come through the proxy: counted under the
    // peer (the proxy's address), not let through.
    assert_eq!(server.get("/").await.status(), 200);
}

#[tokio::test]
async fn trusted_proxy_networks_believe_only_their_own_reports() {
    let (limiter, _clock) = fixed_window();
    let trusted = TrustedProxies::cidrs(["127.0.0.0/8", "10.0.0.0/8"]).unwrap();
    let app = hello().layer(
        RateLimitLayer::new(limiter, ClientIp::x_forwarded_for(trusted)).options(per_minute(1)),
    );
    let server = Server::start(app).await;
    // 127.0.0.1 (trusted) says 10.0.0.2 (trusted) said the client is 203.0.113.7; the
    // client's own claim of 10.9.9.9 further left is ignored.
    let chain = "10.9.9.9, 203.0.113.7, 10.0.0.2";
    assert_eq!(server.status_as("/", chain).await, 200);
    assert_eq!(server.status_as("/", "203.0.113.7").await, 429);
    assert_eq!(server.status_as("/", "203.0.113.8").await, 200);
}

#[tokio::test]
async fn forwarded_is_counted_from_the_right() {
    let (limiter, _clock) = fixed_window();
    let key = ClientIp::forwarded(TrustedProxies::count(1));
    let app = hello().layer(RateLimitLayer::new(limiter, key).options(per_minute(1)));
    let server = Server::start(app).await;
    let forwarded = |value: &'static str| [("forwarded", value)];

    let first = forwarded("for=\"[2001:db8:cafe::17]:4711\";proto=https");
    assert_eq!(server.get_with("/", &first).await.status(), 200);
    // The client's own element on the left changes nothing; the same /64 is the same key.
    let spoofed = forwarded("for=198.51.100.1, for=\"[2001:db8:cafe::99]\";by=10.0.0.1");
    assert_eq!(server.get_with("/", &spoofed).await.status(), 429);
    let other = forwarded("for=198.51.100.1;proto=http");
    assert_eq!(server.get_with("/", &other).await.status(), 200);
    assert_eq!(server.get_with("/", &other).await.status(), 429);
}

#[tokio::test]
async fn ipv6_clients_count_per_64_and_mapped_ipv4_counts_as_ipv4() {
    let (limiter, _clock) = fixed_window();
    let app =
        hello().layer(RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(2)));
    let server = Server::start(app).await;

    assert_eq!(server.status_as("/", "2001:db8:1:2::1").await, 200);
    assert_eq!(
        server
            .status_as("/", "2001:db8:1:2:ffff:ffff:ffff:ffff")
            .await,
        200
    );
    assert_eq!(server.status_as("/", "[2001:db8:1:2::abcd]:443").await, 429);
    assert_eq!(server.status_as("/", "2001:db8:1:3::1").await, 200);

    assert_eq!(server.status_as("/", "::ffff:203.0.113.9").await, 200);
    assert_eq!(server.status_as("/", "203.0.113.9").await, 200);
    assert_eq!(server.status_as("/", "::ffff:cb00:7109").await, 429);
}

#[tokio::test]
async fn a_configurable_ipv6_prefix_widens_the_group() {
    let (limiter, _clock) = fixed_window();
    let key = behind_one_proxy().ipv6_prefix(48);
    let app = hello().layer(RateLimitLayer::new(limiter, key).options(per_minute(1)));
    let server = Server::start(app).await;
    assert_eq!(server.status_as("/", "2001:db8:1:2::1").await, 200);
    assert_eq!(server.status_as("/", "2001:db8:1:3::1").await, 429);
}

#[tokio::test]
async fn a_verified_api_key_has_its_own_budget_and_anything_else_falls_back_to_the_address() {
    let (limiter, _clock) = fixed_window();
    let key = ApiKey::new(
        "x-api-key",
        |raw| (raw == "k-123").then(|| "account-42".to_owned()),
        ClientIp::peer(),
    );
    let app = hello().layer(RateLimitLayer::new(limiter, key).options(per_minute(2)));
    let server = Server::start(app).await;
    let with_key = |value: &'static str| [("x-api-key", value)];

    assert_eq!(server.get_with("/", &with_key("k-123")).await.status(), 200);
    assert_eq!(server.get_with("/", &with_key("k-123")).await.status(), 200);
    assert_eq!(server.get_with("/", &with_key("k-123")).await.status(), 429);
    // Unknown keys are not fresh budgets: they share the address's.
    assert_eq!(
        server.get_with("/", &with_key("made-up-1")).await.status(),
        200
    );
    assert_eq!(
        server.get_with("/", &with_key("made-up-2")).await.status(),
        200
    );
    assert_eq!(server.get("/").await.status(), 429);
}

#[tokio::test]
async fn a_key_of_none_skips_the_limit_and_adds_no_headers() {
    let (limiter, _clock) = fixed_window();
    let peer = ClientIp::peer();
    // Documented as the trap it is: a key that is `None` when a header is present.
    let key = move |parts: &axum::http::request::Parts| {
        if parts.uri.path() == "/health" {
            return None;
        }
        Some(
            peer.address(parts)
                .map_or("no-address".into(), |a| a.to_string()),
        )
    };
    let app = hello().layer(RateLimitLayer::new(limiter, key).options(per_minute(1)));
    let server = Server::start(app).await;
    for _ in 0..5 {
        let health = server.get("/health").await;
        assert_eq!(health.status(), 200);
        assert!(health.headers().get("x-ratelimit-limit").is_none());
    }
    assert_eq!(server.get("/").await.status(), 200);
    assert_eq!(server.get("/").await.status(), 429);
}

#[tokio::test]
async fn the_skipper_exempts_a_class_of_requests() {
    let (limiter, _clock) = fixed_window();
    let app = hello().layer(
        RateLimitLayer::new(limiter, ClientIp::peer())
            .options(per_minute(1))
            .skip(|parts| parts.uri.path().starts_with("/health")),
    );
    let server = Server::start(app).await;
    assert_eq!(server.get("/").await.status(), 200);
    assert_eq!(server.get("/").await.status(), 429);
    for _ in 0..3 {
        let health = server.get("/health").await;
        assert_eq!(health.status(), 200);
        assert!(health.headers().get("ratelimit").is_none());
    }
}

#[tokio::test]
async fn per_route_budgets_follow_the_route_template_head_spends_from_get_and_unmatched_share_one()
{
    let (limiter, _clock) = fixed_window();
    let app = Router::new()
        .route("/orders/{id}", get(|| async { "order" }))
        .route("/users/{id}", get(|| async { "user" }))
        .layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(per_minute(2))
                .per_route(),
        );
    let server = Server::start(app).await;

    assert_eq!(server.get("/orders/1").await.status(), 200);
    assert_eq!(server.get("/orders/2").await.status(), 200);
    assert_eq!(server.get("/orders/3").await.status(), 429);
    assert_eq!(server.get("/users/1").await.status(), 200);
    // HEAD runs the GET handler: it spends from GET's budget, not from one of its own.
    let head = |path: &str| server.client.head(format!("{}{path}", server.base)).send();
    assert_eq!(head("/users/2").await.unwrap().status(), 200);
    assert_eq!(head("/users/3").await.unwrap().status(), 429);
    assert_eq!(server.get("/users/4").await.status(), 429);
    // Probing for paths is counted, in one budget.
    assert_eq!(server.get("/nope/1").await.status(), 404);
    assert_eq!(server.get("/nope/2").await.status(), 404);
    assert_eq!(server.get("/nope/3").await.status(), 429);
    // A CORS preflight is not a route's request either.
    let preflight = server
        .client
        .request(
            axum::http::Method::OPTIONS,
            format!("{}/orders/1", server.base),
        )
        .header("origin", "https://example.com")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 429);
    // Inventing methods does not invent budgets either.
    let invented = axum::http::Method::from_bytes(b"PROBE").unwrap();
    let response = server
        .client
        .request(invented, format!("{}/orders/1", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);

    // Each budget is the route after the limit's budget: unnamed, its settings.
    let by_budget = limiter.stats().by_method;
    let orders = "(limit 2, window 1m) GET /orders/{id}";
    assert_eq!(by_budget[orders].allowed, 2);
    assert_eq!(by_budget[orders].denied, 1);
    let unmatched = format!("(limit 2, window 1m) {UNMATCHED}");
    assert_eq!(by_budget[&unmatched].allowed, 2);
    assert_eq!(by_budget[&unmatched].denied, 3);
}

#[tokio::test]
async fn stacked_layers_list_both_policies_and_report_the_most_restrictive() {
    let (limiter, _clock) = fixed_window();
    let app = Router::new()
        .route("/login", get(|| async { "ok" }))
        .route_layer(
            // Inner: 2 a minute (added first, runs second).
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(per_minute(2).budget("login-burst"))
                .policy("burst"),
        );
    let app = app.route_layer(
        // Outer: 10 an hour.
        RateLimitLayer::new(limiter, ClientIp::peer())
            .options(
                Options::new()
                    .limit(10)
                    .window(Duration::from_secs(3600))
                    .budget("login-hourly"),
            )
            .policy("hourly"),
    );
    let server = Server::start(app).await;

    let first = server.get("/login").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        "\"burst\";q=2;w=60, \"hourly\";q=10;w=3600"
    );
    let reset_hour = (START.as_secs() / 3600 + 1) * 3600 - START.as_secs();
    assert_eq!(
        header(&first, "ratelimit"),
        format!("\"burst\";r=1;t=20, \"hourly\";r=9;t={reset_hour}")
    );
    // The burst layer has fewer calls left: X-RateLimit-* are its.
    assert_eq!(header(&first, "x-ratelimit-limit"), "2");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "1");

    server.get("/login").await;
    let refused = server.get("/login").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(header(&refused, "x-ratelimit-limit"), "2");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    // Not all-or-nothing (yet): the refused call was spent from the hourly budget too.
    assert_eq!(
        header(&refused, "ratelimit"),
        format!("\"burst\";r=0;t=20, \"hourly\";r=7;t={reset_hour}")
    );
}

/// Two layers whose limits have no budget name, with the same window: each counts in a
/// budget of its own (once one counter for both, so `/search` spent `/login`'s 5).
#[tokio::test]
async fn two_unnamed_layers_count_in_budgets_of_their_own() {
    let (limiter, _clock) = fixed_window();
    let app = Router::new()
        .route("/login", get(|| async { "ok" }))
        .route_layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(per_minute(5)))
        .route("/search", get(|| async { "hits" }))
        .layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(per_minute(100)));
    let server = Server::start(app).await;

    for _ in 0..5 {
        assert_eq!(server.get("/search").await.status(), 200);
    }
    for _ in 0..5 {
        assert_eq!(server.get("/login").await.status(), 200);
    }
    assert_eq!(server.get("/login").await.status(), 429);
    // The 100 a minute counted all 11 requests, once each: this is the 12th.
    let search = server.get("/search").await;
    assert_eq!(search.status(), 200);
    assert_eq!(header(&search, "x-ratelimit-remaining"), "88");
    // Neither is the budget of a call to the service without a name.
    assert_eq!(
        limiter
            .status("127.0.0.1", &per_minute(5))
            .await
            .unwrap()
            .remaining,
        5
    );
}

#[tokio::test]
async fn two_unnamed_per_route_layers_count_in_budgets_of_their_own() {
    let (limiter, _clock) = fixed_window();
    let per_route = |limit| {
        RateLimitLayer::new(limiter.clone(), ClientIp::peer())
            .options(per_minute(limit))
            .per_route()
    };
    let app = Router::new()
        .route("/orders/{id}", get(|| async { "order" }))
        .layer(per_route(3))
        .layer(per_route(10));
    let server = Server::start(app).await;

    for _ in 0..3 {
        assert_eq!(server.get("/orders/1").await.status(), 200);
    }
    let refused = server.get("/orders/1").await;
    assert_eq!(refused.status(), 429);
    // The inner 3 a minute refused the 4th; the outer 10 a minute counted all 4.
    assert_eq!(
        header(&refused, "ratelimit"),
        "\"default\";r=0;t=20, \"default\";r=6;t=20"
    );
}

/// A layer's limits are decided together under one key: two of them in one budget would
/// spend it twice per request, or under two settings at once.
#[tokio::test]
async fn two_limits_of_one_layer_in_one_budget_are_a_configuration_error() {
    let (limiter, _clock) = fixed_window();
    let layers = [
        RateLimitLayer::new(limiter.clone(), ClientIp::peer())
            .limit(per_minute(5).budget("api"))
            .limit(Options::new().limit(100).window("1h").budget("api")),
        RateLimitLayer::new(limiter.clone(), ClientIp::peer())
            .limit(per_minute(5))
            .limit(per_minute(5)),
    ];
    for layer in layers {
        let (app, calls) = counted();
        let server = Server::start(app.layer(layer)).await;
        let response = server.get("/").await;
        assert_eq!(response.status(), 500);
        assert_eq!(
            response.json_value().await,
            json!({"code": "INVALID_CONFIG"})
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
    // Nothing was counted.
    let total = limiter.stats().total;
    assert_eq!((total.allowed, total.denied), (0, 0));
}

#[tokio::test]
async fn several_limits_in_one_layer_are_all_or_nothing() {
    let (limiter, _clock) = fixed_window();
    let hourly = Options::new()
        .limit(10)
        .window(Duration::from_secs(3600))
        .budget("hourly");
    let app = Router::new()
        .route("/login", get(|| async { "ok" }))
        .route_layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .limit(per_minute(2).budget("burst"))
                .limit(hourly),
        );
    let server = Server::start(app).await;
    let reset_hour = (START.as_secs() / 3600 + 1) * 3600 - START.as_secs();

    let first = server.get("/login").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        "\"burst\";q=2;w=60, \"hourly\";q=10;w=3600"
    );
    assert_eq!(
        header(&first, "ratelimit"),
        format!("\"burst\";r=1;t=20, \"hourly\";r=9;t={reset_hour}")
    );
    assert_eq!(header(&first, "x-ratelimit-limit"), "2");

    server.get("/login").await;
    for _ in 0..3 {
        let refused = server.get("/login").await;
        assert_eq!(refused.status(), 429);
        assert_eq!(header(&refused, "retry-after"), "20");
        assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
        // Refused by the burst limit, the call spent nothing from the hourly one: the same
        // `r` every time, its level (8 left; see the status below).
        assert_eq!(
            header(&refused, "ratelimit"),
            format!("\"burst\";r=0;t=20, \"hourly\";r=8;t={reset_hour}")
        );
    }
    let hourly = Options::new()
        .limit(10)
        .window(Duration::from_secs(3600))
        .budget("hourly");
    assert_eq!(
        limiter
            .status("127.0.0.1", &hourly)
            .await
            .unwrap()
            .remaining,
        8
    );
}

/// Layers decide one by one (the outer one cannot know whether an inner one will run), so a
/// global limit and a route's own are made all or nothing by naming the global budget in the
/// route's layer too: one budget shared by every route that names it, decided as one with the
/// route's limit.
#[tokio::test]
async fn a_global_budget_named_in_a_route_layer_is_shared_and_all_or_nothing() {
    let (limiter, _clock) = fixed_window();
    let global = || per_minute(5).budget("global");
    let layer = || RateLimitLayer::new(limiter.clone(), behind_one_proxy());
    let app = Router::new()
        .route("/search", get(|| async { "hits" }))
        .route_layer(layer().limit(global()))
        .merge(
            Router::new()
                .route("/login", get(|| async { "ok" }))
                .route_layer(layer().limit(global()).limit(per_minute(2).budget("login"))),
        );
    let server = Server::start(app).await;
    let left = |ip: &'static str, options: Options| {
        let limiter = limiter.clone();
        async move { limiter.status(ip, &options).await.unwrap().remaining }
    };

    // The login limit refuses: the global budget keeps what the refused calls did not spend.
    assert_eq!(server.status_as("/login", "10.0.0.1").await, 200);
    assert_eq!(server.status_as("/login", "10.0.0.1").await, 200);
    for _ in 0..4 {
        assert_eq!(server.status_as("/login", "10.0.0.1").await, 429);
    }
    assert_eq!(left("10.0.0.1", global()).await, 3);
    for _ in 0..3 {
        assert_eq!(server.status_as("/search", "10.0.0.1").await, 200);
    }
    assert_eq!(server.status_as("/search", "10.0.0.1").await, 429);

    // The global limit refuses (spent on another route): the login budget is untouched.
    for _ in 0..5 {
        assert_eq!(server.status_as("/search", "10.0.0.2").await, 200);
    }
    for _ in 0..3 {
        assert_eq!(server.status_as("/login", "10.0.0.2").await, 429);
    }
    assert_eq!(left("10.0.0.2", per_minute(2).budget("login")).await, 2);
    assert_eq!(left("10.0.0.2", global()).await, 0);
}

#[tokio::test]
async fn on_refused_shapes_the_refusal_and_keeps_the_headers() {
    let (limiter, _clock) = fixed_window();
    let app = hello().layer(
        RateLimitLayer::new(limiter, ClientIp::peer())
            .options(per_minute(1))
            .on_refused(|decision: &Decision| {
                use axum::response::IntoResponse;
                let wait = decision.retry_after.unwrap_or_default().as_secs();
                (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    format!("slow down for {wait}s"),
                )
                    .into_response()
            }),
    );
    let server = Server::start(app).await;
    server.get("/").await;
    let refused = server.get("/").await;
    assert_eq!(refused.status(), 503);
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(refused.text().await.unwrap(), "slow down for 20s");
}

/// A router whose handler counts its calls, so a test can show it never ran.
fn counted() -> (Router, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let app = Router::new().route(
        "/",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "ran" }
        }),
    );
    (app, calls)
}

#[tokio::test]
async fn a_store_failure_is_503_and_the_request_is_not_passed_on() {
    let clock = ManualClock::new(START);
    let limiter = RateLimitService::with_store(Config::default(), Broken, Arc::new(clock)).unwrap();
    let (app, calls) = counted();
    let server =
        Server::start(app.layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()))).await;

    let response = server.get("/").await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "retry-after"), "1");
    assert_eq!(response.json_value().await, json!({"code": "STORE_FAILED"}));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The error hook shapes the answer; the request still does not pass.
    let (app, calls) = counted();
    let hooked = RateLimitLayer::new(limiter, ClientIp::peer()).on_error(|error: &Error| {
        use axum::response::IntoResponse;
        (axum::http::StatusCode::BAD_GATEWAY, error.code()).into_response()
    });
    let server = Server::start(app.layer(hooked)).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 502);
    assert_eq!(response.text().await.unwrap(), "STORE_FAILED");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unknown_tier_is_refused_as_a_configuration_error() {
    let (limiter, _clock) = fixed_window();
    let (app, calls) = counted();
    let layer = RateLimitLayer::new(limiter, ClientIp::peer()).options(Options::new().tier("gold"));
    let server = Server::start(app.layer(layer)).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 500);
    assert_eq!(response.json_value().await, json!({"code": "UNKNOWN_TIER"}));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn with_no_module_running_the_module_layer_refuses_with_500() {
    assert!(!Module::is_initialized());
    let (app, calls) = counted();
    let server = Server::start(app.layer(RateLimitLayer::from_module(ClientIp::peer()))).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.json_value().await,
        json!({"code": "NOT_INITIALIZED"})
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn without_connect_info_the_peer_key_is_an_error_not_a_pass() {
    let (limiter, _clock) = fixed_window();
    let (app, calls) = counted();
    let app = app.layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    let server = Server::serve(app, false).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 500);
    assert_eq!(response.json_value().await, json!({"code": "INVALID_KEY"}));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[rate_limit(limit = 2, window = "1m")]
async fn annotated() -> Result<&'static str, Error> {
    Ok("annotated")
}

#[rate_limit(limit = 1, window = "1m", name = "login")]
async fn named_login() -> Result<&'static str, Error> {
    Ok("login")
}

/// Runs every request of the router inside `module`'s scope, as a global `Module` would
/// (a global one would be every test's in this binary).
fn in_scope(app: Router, module: TestModule) -> Router {
    app.layer(middleware::from_fn(move |request: Request, next: Next| {
        let module = module.clone();
        async move { module.scope(next.run(request)).await }
    }))
}

#[tokio::test]
async fn an_annotated_handler_answers_429_through_into_response() {
    let module = TestModule::new(Module::builder().strategy(Strategy::FixedWindow)).unwrap();
    let app = in_scope(Router::new().route("/", get(annotated)), module.clone());
    let server = Server::start(app).await;

    assert_eq!(server.get("/").await.text().await.unwrap(), "annotated");
    assert_eq!(server.get("/").await.status(), 200);
    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(header(&refused, "x-ratelimit-limit"), "2");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&refused, "ratelimit"), "\"default\";r=0;t=20");
    assert_eq!(
        refused.json_value().await,
        json!({"code": "RATE_LIMITED", "retryAfter": 20, "limit": 2, "remaining": 0})
    );

    module.clock().advance(MINUTE);
    assert_eq!(server.get("/").await.status(), 200);
}

/// A response as it is sent: its status, its headers in order, its body. `Content-Length`,
/// which axum's router adds, is the framing of the body, not part of the answer: checked
/// against the body and left out.
async fn as_sent(response: axum::response::Response) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let status = response.status().as_u16();
    let mut length = None;
    let mut headers = Vec::new();
    for (name, value) in response.headers() {
        let value = value.to_str().unwrap().to_owned();
        match name.as_str() {
            "content-length" => length = Some(value),
            _ => headers.push((name.to_string(), value)),
        }
    }
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    assert_eq!(length, Some(body.len().to_string()));
    (status, headers, body.to_vec())
}

/// The neutral answer as [`as_sent`] reads a response.
fn answered(answer: &Answer) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = answer
        .headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect();
    (answer.status, headers, answer.body.clone().into_bytes())
}

/// The axum adapter decides nothing: a refusal (through `IntoResponse for Error` and through
/// the layer) and a store error are sent exactly as core's framework-neutral `Answer` says.
#[tokio::test]
async fn the_axum_answers_are_the_neutral_answers_byte_for_byte() {
    use tower::ServiceExt;
    let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    let request = || {
        Request::get("/")
            .extension(axum::extract::ConnectInfo(peer))
            .body(axum::body::Body::empty())
            .unwrap()
    };

    // An annotated handler's refusal: `IntoResponse for Error`.
    let module = TestModule::new(Module::builder().strategy(Strategy::FixedWindow)).unwrap();
    let app = in_scope(Router::new().route("/", get(annotated)), module);
    for _ in 0..2 {
        assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 200);
    }
    let refused = app.oneshot(request()).await.unwrap();
    let error = refused.extensions().get::<Error>().cloned().unwrap();
    assert_eq!(error.code(), "RATE_LIMITED");
    // An unnamed fn's policy is "default": its path stays in the server.
    assert!(refused.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"default\";"));
    assert_eq!(as_sent(refused).await, answered(&error.answer()));

    // A fn named `name = "login"`: its refusal names its policy so.
    let module = TestModule::new(Module::builder()).unwrap();
    let app = in_scope(Router::new().route("/", get(named_login)), module);
    assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 200);
    let refused = app.oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), 429);
    let policy = refused.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.starts_with("\"login\";q=1;w=60"), "{policy}");
    assert!(refused.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"login\";r=0;"));

    // The layer's refusal: the decision's own, then its rate-limit headers.
    let (limiter, _clock) = fixed_window();
    let app = hello().layer(RateLimitLayer::new(limiter, ClientIp::peer()).options(per_minute(1)));
    assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 200);
    let refused = app.oneshot(request()).await.unwrap();
    let decision = refused.extensions().get::<Decision>().cloned().unwrap();
    let mut expected = decision.refusal();
    let headers = decision.headers().into_iter();
    expected
        .headers
        .extend(headers.filter(|(name, _)| *name != "retry-after"));
    assert_eq!(expected.headers.len(), 7);
    assert_eq!(as_sent(refused).await, answered(&expected));

    // A store that fails: `503`, through the layer.
    let clock = Arc::new(ManualClock::new(START));
    let limiter = RateLimitService::with_store(Config::default(), Broken, clock).unwrap();
    let app = hello().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    let failed = app.oneshot(request()).await.unwrap();
    let error = failed.extensions().get::<Error>().cloned().unwrap();
    assert_eq!((error.status(), error.code()), (503, "STORE_FAILED"));
    assert_eq!(as_sent(failed).await, answered(&error.answer()));
}

#[tokio::test]
async fn the_module_layer_limits_through_the_running_module() {
    let module = TestModule::new(Module::builder().strategy(Strategy::FixedWindow)).unwrap();
    let (app, calls) = counted();
    let app = app.layer(RateLimitLayer::from_module(ClientIp::peer()).options(per_minute(1)));
    let server = Server::start(in_scope(app, module.clone())).await;
    assert_eq!(server.get("/").await.status(), 200);
    assert_eq!(server.get("/").await.status(), 429);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(module.stats().total.denied, 1);
}

/// `reqwest` without its `json` feature: the body through `serde_json`.
trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}

/// A request through `app` without a network (`tower::ServiceExt::oneshot`), for tests that
/// drive Tokio's paused time, which a real socket and client would not follow.
async fn oneshot_status(app: Router) -> u16 {
    use tower::ServiceExt;
    let request = Request::get("/").body(axum::body::Body::empty()).unwrap();
    app.oneshot(request).await.unwrap().status().as_u16()
}

/// A layer whose limit may wait in the queue cannot be decided in `call`: it takes the
/// awaited (boxed) path, waits for room, and is refused with a 429 once its turn is known to
/// come after `queue_timeout`. Tokio's time is paused (it moves only when every task waits) and the limit's clock
/// is the manual one: nothing sleeps.
#[tokio::test(start_paused = true)]
async fn a_layer_whose_limit_may_queue_waits_for_room_then_times_out() {
    let (limiter, clock) = service(
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .queue_enabled(true)
            .queue_timeout(Duration::from_secs(90))
            .build()
            .unwrap(),
    );
    let app = hello().layer(
        RateLimitLayer::new(limiter, |_: &axum::http::request::Parts| {
            Some("one".to_owned())
        })
        .options(per_minute(1)),
    );
    assert_eq!(oneshot_status(app.clone()).await, 200);
    // The second waits in the line; the window ends while it waits: admitted.
    let waiting = tokio::spawn(oneshot_status(app.clone()));
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "the second request waits, not refused at once"
    );
    clock.advance(MINUTE);
    assert_eq!(waiting.await.unwrap(), 200);
    // The third waits for a window that, on the manual clock, never ends: it asks again at
    // each turn it is told, and is refused, 429, never let through, at the first answer that
    // puts its turn past its 90 s (not kept waiting for them to pass).
    let started = tokio::time::Instant::now();
    assert_eq!(oneshot_status(app).await, 429);
    assert!(started.elapsed() < Duration::from_secs(90));
}

/// A shadow limit through the layer (issue 27): every request it would refuse is answered
/// by the handler, counted as shadowed; stacked with an enforced limit, the enforced one
/// alone refuses.
#[tokio::test]
async fn a_shadow_limit_answers_every_request_and_counts_what_it_would_refuse() {
    let (limiter, _clock) = fixed_window();
    let shadow = RateLimitLayer::new(limiter.clone(), behind_one_proxy())
        .options(per_minute(2).budget("trial").shadow(true));
    let stacked = RateLimitLayer::new(limiter.clone(), behind_one_proxy())
        .limit(per_minute(3).budget("enforced"))
        .limit(per_minute(1).budget("tried").shadow(true));
    let app = Router::new()
        .route("/shadow", get(|| async { "hello" }).layer(shadow))
        .route("/stacked", get(|| async { "hello" }).layer(stacked));
    let server = Server::start(app).await;

    for n in 0..5 {
        let response = server
            .get_with("/shadow", &[("x-forwarded-for", "203.0.113.9")])
            .await;
        assert_eq!(response.status(), 200, "request {n}");
        assert!(response.headers().get("retry-after").is_none());
        let remaining = if n < 2 { 1 - n } else { 0 };
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            remaining.to_string()
        );
    }
    let statuses: Vec<u16> = {
        let mut out = Vec::new();
        for _ in 0..5 {
            out.push(server.status_as("/stacked", "203.0.113.9").await);
        }
        out
    };
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.by_method["trial"].allowed,
            stats.by_method["trial"].shadowed
        ),
        (5, 3)
    );
    assert_eq!(
        (
            stats.by_method["tried"].allowed,
            stats.by_method["tried"].shadowed
        ),
        (3, 2)
    );
    assert_eq!(stats.by_method["enforced"].denied, 2);
}
