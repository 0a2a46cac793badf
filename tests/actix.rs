//! The actix-web middleware (feature `actix`) against a real actix server on loopback and a
//! real client: exact counts from several clients at once, spoofed forwarding headers, stacked
//! limits all or nothing, a store failure under deny, the header values, per-route budgets,
//! and an annotated handler answering `429` through `ResponseError`. A `ManualClock` drives
//! every limit: nothing sleeps.
//!
//! Every request comes from 127.0.0.1, so tests that need several clients put the server
//! behind "one trusted proxy" (the test client) and name the client in `X-Forwarded-For`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse};
use ratelimit::actix::RateLimit;
use ratelimit::http::{key_fn, ClientIp, RequestHead, TrustedProxies, UNMATCHED};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, ManualClock, Module, Options, RateLimitService, Strategy,
};
use ratelimit_tests::web::{
    behind_one_proxy, fixed_window, header, per_minute, ActixServer as Server,
};
use ratelimit_tests::{Broken, START};

const MINUTE: Duration = Duration::from_secs(60);

/// The tests' requests, on [`ActixServer::request`].
trait Requests {
    async fn get(&self, path: &str) -> reqwest::Response;
    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response;
    async fn status_as(&self, path: &str, ip: &str) -> u16;
}

impl Requests for Server {
    async fn get(&self, path: &str) -> reqwest::Response {
        self.get_with(path, &[]).await
    }

    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        self.request(reqwest::Method::GET, path, headers).await
    }

    /// The status of a GET as the client `ip` behind one trusted proxy.
    async fn status_as(&self, path: &str, ip: &str) -> u16 {
        self.get_with(path, &[("x-forwarded-for", ip)])
            .await
            .status()
            .as_u16()
    }
}

/// A handler that counts its runs, so a test can show it never ran.
fn counter() -> (
    Arc<AtomicUsize>,
    impl Fn() -> HttpResponse + Clone + Send + 'static,
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    (runs, move || {
        counted.fetch_add(1, Ordering::SeqCst);
        HttpResponse::Ok().body("hello")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_exactly_their_limit() {
    let (limiter, _clock) = fixed_window();
    let (runs, handler) = counter();
    let server = Server::start(move || {
        let handler = handler.clone();
        App::new()
            .route("/", web::get().to(move || std::future::ready(handler())))
            .wrap(RateLimit::new(limiter.clone(), behind_one_proxy()).options(per_minute(20)))
    });
    let (ok, refused) = ratelimit_tests::web::statuses_by_client::<3>(&server.base, 30).await;
    assert_eq!(ok, [20, 20, 20]);
    assert_eq!(refused, [10, 10, 10]);
    assert_eq!(runs.load(Ordering::SeqCst), 60);
}

#[tokio::test]
async fn a_refusal_is_429_with_a_json_body_and_every_header() {
    let (limiter, _clock) = fixed_window();
    let server = Server::start(move || {
        App::new()
            .route("/", web::get().to(|| async { "hello" }))
            .wrap(RateLimit::new(limiter.clone(), ClientIp::peer()).options(per_minute(2)))
    });
    let allowed = server.get("/").await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(header(&allowed, "x-ratelimit-remaining"), "1");
    assert_eq!(header(&allowed, "ratelimit"), "\"default\";r=1;t=20");
    assert!(allowed.headers().get("retry-after").is_none());
    server.get("/").await;

    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    let reset = (START.as_secs() / 60 + 1) * 60;
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
async fn a_client_adding_forwarded_entries_cannot_change_its_key() {
    let (limiter, _clock) = fixed_window();
    let cidrs = TrustedProxies::cidrs(["127.0.0.0/8"]).unwrap();
    let (count, by_network) = (limiter.clone(), limiter);
    let server = Server::start(move || {
        App::new()
            .route("/", web::get().to(|| async { "hello" }))
            .service(
                web::resource("/cidr")
                    .route(web::get().to(|| async { "hello" }))
                    .wrap(
                        RateLimit::new(
                            by_network.clone(),
                            ClientIp::x_forwarded_for(cidrs.clone()),
                        )
                        .options(per_minute(1).budget("cidr")),
                    ),
            )
            .wrap(RateLimit::new(count.clone(), behind_one_proxy()).options(per_minute(2)))
    });
    // Behind one proxy the client is the last entry; whatever it writes to its left is
    // ignored, so these are all the one client 203.0.113.1.
    let spoofs = [
        "203.0.113.1",
        "6.6.6.6, 203.0.113.1",
        "10.0.0.1, 7.7.7.7, 203.0.113.1",
    ];
    assert_eq!(server.status_as("/", spoofs[0]).await, 200);
    assert_eq!(server.status_as("/", spoofs[1]).await, 200);
    for spoof in &spoofs {
        assert_eq!(server.status_as("/", spoof).await, 429, "{spoof}");
    }
    assert_eq!(server.status_as("/", "203.0.113.2").await, 200);

    // Trusted by network: the test client (127.0.0.1) is a proxy, 10.9.9.9 is not trusted,
    // so the client is 203.0.113.7 whatever stands to its left.
    let cidr = |xff: &'static str| server.status_as("/cidr", xff);
    assert_eq!(cidr("203.0.113.7").await, 200);
    assert_eq!(cidr("10.9.9.9, 203.0.113.7").await, 429);
    assert_eq!(cidr("198.51.100.1, 203.0.113.7").await, 429);
    assert_eq!(cidr("203.0.113.8").await, 200);
}

#[tokio::test]
async fn several_limits_in_one_middleware_are_all_or_nothing() {
    let (limiter, _clock) = fixed_window();
    let hourly = || {
        Options::new()
            .limit(10)
            .window(Duration::from_secs(3600))
            .budget("hourly")
    };
    let served = limiter.clone();
    let server = Server::start(move || {
        App::new()
            .route("/login", web::get().to(|| async { "ok" }))
            .wrap(
                RateLimit::new(served.clone(), ClientIp::peer())
                    .limit(per_minute(2).budget("burst"))
                    .limit(hourly()),
            )
    });
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
        // Refused by the burst limit, the request spent nothing from the hourly one.
        assert_eq!(
            header(&refused, "ratelimit"),
            format!("\"burst\";r=0;t=20, \"hourly\";r=8;t={reset_hour}")
        );
    }
    let level = limiter.status("127.0.0.1", &hourly()).await.unwrap();
    assert_eq!(level.remaining, 8);
}

#[tokio::test]
async fn two_limits_in_one_budget_are_a_configuration_error_naming_the_builder() {
    let (limiter, _clock) = fixed_window();
    let (runs, handler) = counter();
    let server = Server::start(move || {
        let handler = handler.clone();
        App::new()
            .route("/", web::get().to(move || std::future::ready(handler())))
            .wrap(
                RateLimit::new(limiter.clone(), ClientIp::peer())
                    .limit(per_minute(2).budget("same"))
                    .limit(per_minute(5).budget("same")),
            )
    });
    let response = server.get("/").await;
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"code":"INVALID_CONFIG"}"#
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_store_failure_is_503_under_deny_and_the_request_is_not_passed_on() {
    let clock = ManualClock::new(START);
    let limiter = RateLimitService::with_store(Config::default(), Broken, Arc::new(clock)).unwrap();
    let (runs, handler) = counter();
    let hooked = limiter.clone();
    let server =
        Server::start(move || {
            let (plain, custom) = (handler.clone(), handler.clone());
            App::new()
                .service(
                    web::resource("/hooked")
                        .route(web::get().to(move || std::future::ready(custom())))
                        .wrap(RateLimit::new(hooked.clone(), ClientIp::peer()).on_error(
                            |error: &Error| HttpResponse::BadGateway().body(error.code()),
                        )),
                )
                .service(
                    web::resource("/")
                        .route(web::get().to(move || std::future::ready(plain())))
                        .wrap(RateLimit::new(limiter.clone(), ClientIp::peer())),
                )
        });
    let response = server.get("/").await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "retry-after"), "1");
    assert_eq!(response.text().await.unwrap(), r#"{"code":"STORE_FAILED"}"#);
    let hooked = server.get("/hooked").await;
    assert_eq!(hooked.status(), 502);
    assert_eq!(hooked.text().await.unwrap(), "STORE_FAILED");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn with_no_module_running_the_module_middleware_refuses_with_500() {
    let (runs, handler) = counter();
    let server = Server::start(move || {
        let handler = handler.clone();
        App::new()
            .route("/", web::get().to(move || std::future::ready(handler())))
            .wrap(RateLimit::from_module(ClientIp::peer()))
    });
    let response = server.get("/").await;
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"code":"NOT_INITIALIZED"}"#
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn per_route_budgets_follow_the_match_pattern_and_unmatched_share_one() {
    let (limiter, _clock) = fixed_window();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let routes = Arc::clone(&seen);
    // A key closure on the neutral head, recording the route each request is budgeted by.
    let server = Server::start(move || {
        let routes = Arc::clone(&routes);
        let key = key_fn(move |head: &dyn RequestHead| {
            routes.lock().unwrap().push(ratelimit::http::route_of(head));
            Some("one-client".to_owned())
        });
        App::new()
            .route("/orders/{id}", web::get().to(|| async { "order" }))
            .route("/orders/{id}", web::post().to(|| async { "created" }))
            .wrap(
                RateLimit::new(limiter.clone(), key)
                    .options(per_minute(2))
                    .per_route(),
            )
    });
    assert_eq!(server.get("/orders/1").await.status(), 200);
    assert_eq!(server.get("/orders/2").await.status(), 200);
    assert_eq!(server.get("/orders/3").await.status(), 429);
    let post = server
        .request(reqwest::Method::POST, "/orders/1", &[])
        .await;
    assert_eq!(post.status(), 200, "POST has a budget of its own");
    assert_eq!(server.get("/nowhere").await.status(), 404);
    assert_eq!(server.get("/elsewhere").await.status(), 404);
    assert_eq!(server.get("/anywhere").await.status(), 429);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "GET /orders/{id}",
            "GET /orders/{id}",
            "GET /orders/{id}",
            "POST /orders/{id}",
            UNMATCHED,
            UNMATCHED,
            UNMATCHED,
        ]
    );
}

#[tokio::test]
async fn the_skipper_exempts_and_on_refused_shapes_the_refusal_with_the_headers() {
    let (limiter, _clock) = fixed_window();
    let server = Server::start(move || {
        App::new()
            .route("/", web::get().to(|| async { "hello" }))
            .route("/health", web::get().to(|| async { "ok" }))
            .wrap(
                RateLimit::new(limiter.clone(), ClientIp::peer())
                    .options(per_minute(1))
                    .skip(|request| request.path() == "/health")
                    .on_refused(|decision: &Decision| {
                        HttpResponse::TooManyRequests().body(format!("limit {}", decision.limit))
                    }),
            )
    });
    assert_eq!(server.get("/").await.status(), 200);
    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    assert_eq!(refused.text().await.unwrap(), "limit 1");
    for _ in 0..3 {
        let health = server.get("/health").await;
        assert_eq!(health.status(), 200);
        assert!(health.headers().get("ratelimit").is_none());
    }
}

#[rate_limit(limit = 2, window = "1m")]
async fn annotated() -> Result<&'static str, Error> {
    Ok("annotated")
}

#[tokio::test]
async fn an_annotated_handler_answers_429_through_response_error() {
    let module = TestModule::new(Module::builder().strategy(Strategy::FixedWindow)).unwrap();
    let scoped = module.clone();
    let server = Server::start(move || {
        let module = scoped.clone();
        App::new().route(
            "/",
            web::get().to(move || {
                let module = module.clone();
                async move { module.scope(annotated()).await }
            }),
        )
    });
    assert_eq!(server.get("/").await.text().await.unwrap(), "annotated");
    assert_eq!(server.get("/").await.status(), 200);
    let refused = server.get("/").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "20");
    assert_eq!(header(&refused, "x-ratelimit-limit"), "2");
    assert_eq!(header(&refused, "ratelimit"), "\"default\";r=0;t=20");
    assert_eq!(
        refused.text().await.unwrap(),
        r#"{"code":"RATE_LIMITED","retryAfter":20,"limit":2,"remaining":0}"#
    );
    module.clock().advance(MINUTE);
    assert_eq!(server.get("/").await.status(), 200);
}
