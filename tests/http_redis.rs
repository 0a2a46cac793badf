//! The HTTP layer over the Redis store: a real server, a real client, a real `redis-server`.
//! Exact counts with concurrent clients, and a dead Redis answered by the failure policy
//! (`503` under deny, the handler never run; served under allow).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::{FailurePolicy, Options, RateLimitService, RedisOptions};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::web::{client, statuses_by_client};

/// Serves `app` on loopback with `ConnectInfo`; returns its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

/// A router whose handler counts its runs, behind a per-client limit of `limit` a day
/// (no window ends during a test) on `service`.
fn app(service: RateLimitService, limit: u64) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let layer = RateLimitLayer::new(service, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
        .options(
            Options::new()
                .limit(limit)
                .window(Duration::from_secs(86_400)),
        );
    let router = Router::new()
        .route(
            "/",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "hello" }
            }),
        )
        .layer(layer);
    (router, runs)
}

/// `timeout`: short where Redis is meant to be away (its 503 comes at once), long where every
/// call must reach it: 300 ms timed out once under the whole suite on two cores, a 503 among
/// the exact counts.
fn redis(
    server: &RedisServer,
    policy: FailurePolicy,
    name: &str,
    timeout: Duration,
) -> RateLimitService {
    let options = RedisOptions::new(server.url())
        .timeout(timeout)
        .on_failure(policy);
    ratelimit_tests::redis_service(options, &prefix(name))
}

const AWAY: Duration = Duration::from_millis(300);
const THERE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_redis_get_exactly_their_limit() {
    let server = RedisServer::start();
    let (app, runs) = app(redis(&server, FailurePolicy::Deny, "http-exact", THERE), 20);
    let base = serve(app).await;
    let (ok, refused) = statuses_by_client::<3>(&base, 30).await;
    assert_eq!(ok, [20, 20, 20]);
    assert_eq!(refused, [10, 10, 10]);
    assert_eq!(runs.load(Ordering::SeqCst), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_503_under_deny_and_served_under_allow_without_rate_limit_fields() {
    let mut server = RedisServer::start();
    let (deny, deny_runs) = app(redis(&server, FailurePolicy::Deny, "http-deny", AWAY), 5);
    let (allow, allow_runs) = app(redis(&server, FailurePolicy::Allow, "http-allow", AWAY), 5);
    let (deny, allow) = (serve(deny).await, serve(allow).await);
    let client = client();
    let get = |base: &str| {
        client
            .get(base)
            .header("x-forwarded-for", "198.51.100.7")
            .send()
    };
    assert_eq!(get(&deny).await.unwrap().status(), 200);
    server.stop();
    let refused = get(&deny).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = refused.text().await.unwrap();
    assert!(
        body == r#"{"code":"STORE_FAILED"}"# || body == r#"{"code":"STORE_TIMEOUT"}"#,
        "{body}"
    );
    // The handler ran for the first request only.
    assert_eq!(deny_runs.load(Ordering::SeqCst), 1);
    // Allow: availability over the limit, said so in the configuration. Nothing was
    // decided, so nothing is advertised: a spent budget (`r=0`) would make polite clients
    // back off exactly when nothing is limited.
    let served = get(&allow).await.unwrap();
    assert_eq!(served.status(), 200);
    for field in [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-remaining",
        "retry-after",
    ] {
        assert!(served.headers().get(field).is_none(), "{field} sent");
    }
    assert_eq!(allow_runs.load(Ordering::SeqCst), 1);
}

/// A limit with no budget name is named after its settings, so two pods running the same code
/// share its budget in Redis, and a layer with other settings keeps a budget of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_share_an_unnamed_layers_budget_and_not_another_layers() {
    let server = RedisServer::start();
    let fleet = prefix("http-pods");
    let pod = || {
        let options = RedisOptions::new(server.url()).timeout(Duration::from_millis(300));
        let service = ratelimit_tests::redis_service(options, &fleet);
        let layer = |limit| {
            RateLimitLayer::new(
                service.clone(),
                ClientIp::x_forwarded_for(TrustedProxies::count(1)),
            )
            .options(
                Options::new()
                    .limit(limit)
                    .window(Duration::from_secs(86_400)),
            )
        };
        Router::new()
            .route("/login", get(|| async { "ok" }))
            .route_layer(layer(5))
            .route("/search", get(|| async { "hits" }))
            .layer(layer(100))
    };
    let pods = [serve(pod()).await, serve(pod()).await];
    let client = client();
    let status = |pod: usize, path: &'static str| {
        client
            .get(format!("{}{path}", pods[pod]))
            .header("x-forwarded-for", "198.51.100.9")
            .send()
    };
    // Spent on the other route, the 100 a day does not spend the 5 a day.
    for i in 0..6 {
        assert_eq!(status(i % 2, "/search").await.unwrap().status(), 200);
    }
    for i in 0..5 {
        assert_eq!(status(i % 2, "/login").await.unwrap().status(), 200);
    }
    // The 5 a day is one budget across both pods.
    for pod in 0..2 {
        assert_eq!(status(pod, "/login").await.unwrap().status(), 429);
    }
    let search = status(1, "/search").await.unwrap();
    assert_eq!(search.headers()["x-ratelimit-remaining"], "86");
}

/// `count_when` on Redis (issue 26): only 401s count. Concurrent failing requests from one
/// client run the handler exactly the limit's times, the rest refused before it; successful
/// requests from another all pass and leave nothing spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_when_on_redis_counts_only_the_failures() {
    let server = RedisServer::start();
    let service = redis(&server, FailurePolicy::Deny, "http_redis_count_when", THERE);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let options = Options::new()
        .limit(5)
        .window(Duration::from_secs(86_400))
        .budget("login");
    let layer = RateLimitLayer::new(
        service.clone(),
        ClientIp::x_forwarded_for(TrustedProxies::count(1)),
    )
    .options(options.clone())
    .count_when(|status| status == axum::http::StatusCode::UNAUTHORIZED);
    let router = Router::new()
        .route(
            "/login",
            get(move |query: axum::extract::RawQuery| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    match query.0.as_deref() {
                        Some("ok") => axum::http::StatusCode::OK,
                        _ => axum::http::StatusCode::UNAUTHORIZED,
                    }
                }
            }),
        )
        .layer(layer);
    let base = serve(router).await;
    let http = client();
    let send = |ip: &'static str, query: &'static str| {
        let (http, url) = (http.clone(), format!("{base}/login{query}"));
        async move {
            let response = http.get(url).header("x-forwarded-for", ip).send().await;
            response.unwrap().status().as_u16()
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..24 {
        tasks.spawn(send("10.0.0.1", ""));
    }
    let mut statuses = Vec::new();
    while let Some(status) = tasks.join_next().await {
        statuses.push(status.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses.iter().filter(|&&s| s == 401).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429).count(),
        19,
        "{statuses:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    for _ in 0..24 {
        assert_eq!(send("10.0.0.2", "?ok").await, 200);
    }
    // Nothing left spent: the client's five failures still run, the sixth is refused.
    for _ in 0..5 {
        assert_eq!(send("10.0.0.2", "").await, 401);
    }
    assert_eq!(send("10.0.0.2", "").await, 429);
    assert_eq!(runs.load(Ordering::SeqCst), 34);
}
