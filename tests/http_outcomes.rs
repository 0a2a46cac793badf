//! Counting by response status on the HTTP layer (`count_when`, issue 26), against a real
//! axum server and a real client, on a `ManualClock`: a request spends before the handler runs
//! and is given back when its status does not count, so concurrent requests never run the
//! handler more often than the limit allows.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, Options, RateLimitService, SystemClock};
use ratelimit_tests::service;
use ratelimit_tests::web::client;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, Semaphore};

/// Serves `app` on loopback; the base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

async fn status(client: &reqwest::Client, url: &str) -> u16 {
    client.get(url).send().await.unwrap().status().as_u16()
}

fn login_options() -> Options {
    Options::new()
        .limit(5)
        .window(Duration::from_secs(900))
        .budget("login")
}

/// `/login?ok` answers 200, `/login` 401; every run counted, and the ones in `held` wait for
/// a permit of `gate` first.
fn login_app(layer: RateLimitLayer, runs: Arc<AtomicUsize>, gate: Arc<Semaphore>) -> Router {
    let handler = move |query: axum::extract::RawQuery| {
        let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            match query.0.as_deref() {
                Some("ok") => StatusCode::OK,
                Some("hold") => {
                    gate.acquire().await.unwrap().forget();
                    StatusCode::UNAUTHORIZED
                }
                _ => StatusCode::UNAUTHORIZED,
            }
        }
    };
    Router::new().route("/login", get(handler)).layer(layer)
}

fn failures_only(service: RateLimitService) -> RateLimitLayer {
    RateLimitLayer::new(service, ClientIp::peer())
        .options(login_options())
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
}

/// 64 concurrent failing requests against 5 per window: the handler runs exactly 5 times
/// (the five hold their spends while they run), the 59 others are refused before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_failures_run_the_handler_exactly_the_limit() {
    let (limiter, _clock) = service(Config::default());
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(0)));
    let base = serve(login_app(
        failures_only(limiter.clone()),
        runs.clone(),
        gate.clone(),
    ))
    .await;
    let client = client();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (client, url) = (client.clone(), format!("{base}/login?hold"));
        requests.spawn(async move { status(&client, &url).await });
    }
    let mut refused = 0;
    while refused < 59 {
        assert_eq!(requests.join_next().await.unwrap().unwrap(), 429);
        refused += 1;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    gate.add_permits(5);
    while let Some(done) = requests.join_next().await {
        assert_eq!(done.unwrap(), 401);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    let status = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(status.remaining, 0);
}

/// Successful requests, 64 of them one after another from one client: all pass (each spends,
/// runs and gives back before its response is written) and the budget is full after them;
/// the refunds are counted. (At once they could not all pass: a request in flight holds its
/// spend until its status is known, so at most the limit run at a time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successes_all_pass_and_leave_nothing_spent() {
    let (limiter, _clock) = service(Config::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let app = login_app(
        failures_only(limiter.clone()),
        runs,
        Arc::new(Semaphore::new(0)),
    );
    let base = serve(app).await;
    let client = client();
    for _ in 0..64 {
        assert_eq!(status(&client, &format!("{base}/login?ok")).await, 200);
    }
    let status_now = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(status_now.remaining, 5);
    assert_eq!(limiter.stats().total.refunded, 64);
    // Four failures, then successes in any number, then one more failure: the fifth.
    for _ in 0..4 {
        assert_eq!(status(&client, &format!("{base}/login")).await, 401);
    }
    for _ in 0..10 {
        assert_eq!(status(&client, &format!("{base}/login?ok")).await, 200);
    }
    assert_eq!(status(&client, &format!("{base}/login")).await, 401);
    assert_eq!(status(&client, &format!("{base}/login?ok")).await, 429);
}

/// An outer layer that counts every response it serves and an inner one that refuses: the
/// request refused inside was not served, so what the outer layer spent for it goes back.
#[tokio::test]
async fn a_refusal_by_an_inner_layer_gives_back_what_the_outer_one_spent() {
    let (limiter, _clock) = service(Config::default());
    let outer = Options::new()
        .limit(10)
        .window(Duration::from_secs(60))
        .budget("outer");
    let inner = Options::new()
        .limit(2)
        .window(Duration::from_secs(60))
        .budget("inner");
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(inner))
        .layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(outer.clone())
                .count_when(|_| true),
        );
    let base = serve(app).await;
    let client = client();
    let statuses: Vec<u16> =
        futures::future::join_all((0..5).map(|_| status(&client, &base))).await;
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [200, 200, 429, 429, 429], "{statuses:?}");
    let outer_left = limiter.status("127.0.0.1", &outer).await.unwrap().remaining;
    assert_eq!(outer_left, 8, "the outer layer keeps only the 2 served");
}

/// Several limits on one layer count by status as one: a request that does not count goes
/// back to every limit.
#[tokio::test]
async fn stacked_limits_on_one_layer_give_back_together() {
    let (limiter, _clock) = service(Config::default());
    let short = Options::new()
        .limit(3)
        .window(Duration::from_secs(60))
        .budget("short");
    let long = Options::new()
        .limit(10)
        .window(Duration::from_secs(3600))
        .budget("long");
    let layer = RateLimitLayer::new(limiter.clone(), ClientIp::peer())
        .limit(short.clone())
        .limit(long.clone())
        .count_when(|status| status.is_client_error());
    let runs = Arc::new(AtomicUsize::new(0));
    let base = serve(login_app(layer, runs, Arc::new(Semaphore::new(0)))).await;
    let client = client();
    for _ in 0..20 {
        assert_eq!(status(&client, &format!("{base}/login?ok")).await, 200);
    }
    for _ in 0..3 {
        assert_eq!(status(&client, &format!("{base}/login")).await, 401);
    }
    assert_eq!(status(&client, &format!("{base}/login?ok")).await, 429);
    let short_left = limiter.status("127.0.0.1", &short).await.unwrap().remaining;
    let long_left = limiter.status("127.0.0.1", &long).await.unwrap().remaining;
    assert_eq!((short_left, long_left), (0, 7));
}

/// On a store that does not give spends back, a layer that counts by status would count
/// every request: it refuses them with a configuration error instead, and on a store that
/// cannot answer the store's error; the handler never runs.
#[tokio::test]
async fn without_refunds_or_with_a_broken_store_the_handler_never_runs() {
    let config = || Config::builder().default_limit(5).build().unwrap();
    let no_refunds = RateLimitService::with_store(
        config(),
        ratelimit_tests::LikeMemory::without_refunds(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let broken = RateLimitService::with_store(
        config(),
        ratelimit_tests::Forwarding {
            store: ratelimit_tests::Broken,
            refunds: true,
        },
        Arc::new(SystemClock),
    )
    .unwrap();
    for (limiter, code) in [(no_refunds, "INVALID_CONFIG"), (broken, "STORE_FAILED")] {
        let runs = Arc::new(AtomicUsize::new(0));
        let app = login_app(
            failures_only(limiter),
            runs.clone(),
            Arc::new(Semaphore::new(0)),
        );
        let base = serve(app).await;
        let response = client()
            .get(format!("{base}/login?ok"))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_server_error(), "{}", response.status());
        let body = response.text().await.unwrap();
        assert!(body.contains(code), "{body}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}

/// Tells the test, when dropped, that the handler's future was dropped.
struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// A client that goes away while its handler runs: the server drops the request's future and
/// the spend stays (the outcome is unknown), though the handler would have answered a status
/// that does not count. A raw TCP client, closed once the handler has started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_handler_keeps_its_spend() {
    let (limiter, _clock) = service(Config::default());
    let (entered, dropped) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (on_entry, on_drop) = (entered.clone(), dropped.clone());
    let handler = move |query: axum::extract::RawQuery| {
        let (on_entry, on_drop) = (on_entry.clone(), on_drop.clone());
        async move {
            if query.0.as_deref() == Some("ok") {
                return StatusCode::OK;
            }
            let _dropped = OnDrop(on_drop);
            on_entry.notify_one();
            std::future::pending::<()>().await;
            StatusCode::OK // would not count
        }
    };
    let app = Router::new()
        .route("/login", get(handler))
        .layer(failures_only(limiter.clone()));
    let base = serve(app).await;
    let mut connection = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    connection
        .write_all(b"GET /login HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    entered.notified().await;
    drop(connection);
    // Not a timing: a bound on a hang, should the server never notice the client left.
    tokio::time::timeout(Duration::from_secs(60), dropped.notified())
        .await
        .expect("the server kept the handler of a client that left");

    let client = client();
    assert_eq!(status(&client, &format!("{base}/login?ok")).await, 200);
    let left = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(
        left.remaining, 4,
        "the request whose client left keeps its spend"
    );
    assert_eq!(
        limiter.stats().total.refunded,
        1,
        "only the completed request's"
    );
}
