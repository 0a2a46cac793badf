//! The actix-web middleware over the Redis store: a real actix server, a real client, a real
//! `redis-server`. Exact counts with concurrent clients, and a dead Redis answered by the
//! failure policy (`503` under deny, the handler never run; served under allow, with no
//! rate-limit fields).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use ratelimit::actix::RateLimit;
use ratelimit::http::{ClientIp, TrustedProxies};
use ratelimit::{FailurePolicy, Options, RateLimitService, RedisOptions};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::web::{client, statuses_by_client};

/// Serves, on loopback with one worker, a handler that counts its runs behind a per-client
/// limit of `limit` a day (no window ends during a test) on `service`; returns the base URL,
/// the runs and the server's handle.
fn serve(
    service: RateLimitService,
    limit: u64,
) -> (String, Arc<AtomicUsize>, actix_web::dev::ServerHandle) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(move || {
        let counted = Arc::clone(&counted);
        App::new()
            .route(
                "/",
                web::get().to(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(HttpResponse::Ok().body("hello"))
                }),
            )
            .wrap(
                RateLimit::new(
                    service.clone(),
                    ClientIp::x_forwarded_for(TrustedProxies::count(1)),
                )
                .options(
                    Options::new()
                        .limit(limit)
                        .window(Duration::from_secs(86_400)),
                ),
            )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    tokio::spawn(server);
    (format!("http://{addr}"), runs, handle)
}

fn redis(server: &RedisServer, policy: FailurePolicy, name: &str) -> RateLimitService {
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_millis(300))
        .on_failure(policy);
    ratelimit_tests::redis_service(options, &prefix(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_redis_get_exactly_their_limit() {
    let server = RedisServer::start();
    let (base, runs, handle) = serve(redis(&server, FailurePolicy::Deny, "actix-exact"), 20);
    let (ok, refused) = statuses_by_client::<3>(&base, 30).await;
    assert_eq!(ok, [20, 20, 20]);
    assert_eq!(refused, [10, 10, 10]);
    assert_eq!(runs.load(Ordering::SeqCst), 60);
    handle.stop(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_503_under_deny_and_served_under_allow_without_rate_limit_fields() {
    let mut server = RedisServer::start();
    let (deny, deny_runs, deny_handle) =
        serve(redis(&server, FailurePolicy::Deny, "actix-deny"), 5);
    let (allow, allow_runs, allow_handle) =
        serve(redis(&server, FailurePolicy::Allow, "actix-allow"), 5);
    let client = client();
    let get = |base: &str| {
        client
            .get(base)
            .header("x-forwarded-for", "198.51.100.7")
            .send()
    };
    let first = get(&deny).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-remaining"], "4");
    server.stop();
    let refused = get(&deny).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = refused.text().await.unwrap();
    assert!(
        body == r#"{"code":"STORE_FAILED"}"# || body == r#"{"code":"STORE_TIMEOUT"}"#,
        "{body}"
    );
    assert_eq!(deny_runs.load(Ordering::SeqCst), 1);
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
    deny_handle.stop(false).await;
    allow_handle.stop(false).await;
}
