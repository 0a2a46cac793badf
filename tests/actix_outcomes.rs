//! Counting by response status on the actix-web middleware (`count_when`, issue 26), against a
//! real actix server and a real client, as `http_outcomes.rs` does for the tower layer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse};
use ratelimit::actix::RateLimit;
use ratelimit::http::ClientIp;
use ratelimit::{Config, Options, RateLimitService, SystemClock};
use ratelimit_tests::service;
use ratelimit_tests::web::{client, ActixServer};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, Semaphore};

fn login_options() -> Options {
    Options::new()
        .limit(5)
        .window(Duration::from_secs(900))
        .budget("login")
}

async fn status(server: &ActixServer, path: &str) -> u16 {
    let response = server.request(reqwest::Method::GET, path, &[]).await;
    response.status().as_u16()
}

/// Failures count, successes do not; the handler never runs past the limit; a response
/// refused by an inner middleware gives back what the outer one spent.
#[tokio::test]
async fn only_failures_count_and_an_inner_refusal_gives_back() {
    let (limiter, _clock) = service(Config::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let (app_limiter, app_runs) = (limiter.clone(), runs.clone());
    let server = ActixServer::start(move || {
        let runs = app_runs.clone();
        App::new()
            .route(
                "/login",
                web::get().to(move |request: HttpRequest| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        match request.query_string() {
                            "ok" => HttpResponse::Ok().body("welcome"),
                            _ => HttpResponse::Unauthorized().finish(),
                        }
                    }
                }),
            )
            .wrap(
                RateLimit::new(app_limiter.clone(), ClientIp::peer()).options(
                    Options::new()
                        .limit(30)
                        .window(Duration::from_secs(60))
                        .budget("inner"),
                ),
            )
            .wrap(
                RateLimit::new(app_limiter.clone(), ClientIp::peer())
                    .options(login_options())
                    .count_when(|status| status == StatusCode::UNAUTHORIZED),
            )
    });
    for _ in 0..20 {
        assert_eq!(status(&server, "/login?ok").await, 200);
    }
    for _ in 0..5 {
        assert_eq!(status(&server, "/login").await, 401);
    }
    assert_eq!(status(&server, "/login?ok").await, 429);
    assert_eq!(runs.load(Ordering::SeqCst), 25);
    assert_eq!(limiter.stats().by_method["login"].refunded, 20);

    // The inner limit (30 a minute) has 5 left: 5 more pass it after a reset of the outer one
    // and the sixth is refused inside, which gives the outer spend back.
    limiter
        .reset_with("127.0.0.1", &login_options())
        .await
        .unwrap();
    for _ in 0..5 {
        assert_eq!(status(&server, "/login?ok").await, 200);
    }
    assert_eq!(status(&server, "/login").await, 429);
    let outer = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(
        outer.remaining, 5,
        "refused inside: the outer spend went back"
    );
}

/// What the handler of `/login` sees and does: `?ok` answers 200, `?hold` waits for a permit
/// of `gate` then answers 401, `?gone` tells `entered` it started then never answers (telling
/// `dropped` when its future is dropped), anything else 401. Every run counted in `runs`.
#[derive(Clone)]
struct Handler {
    runs: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    entered: Arc<Notify>,
    dropped: Arc<Notify>,
}

impl Handler {
    fn new() -> Self {
        Handler {
            runs: Arc::new(AtomicUsize::new(0)),
            gate: Arc::new(Semaphore::new(0)),
            entered: Arc::new(Notify::new()),
            dropped: Arc::new(Notify::new()),
        }
    }

    async fn answer(self, request: HttpRequest) -> HttpResponse {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match request.query_string() {
            "ok" => HttpResponse::Ok().body("welcome"),
            "hold" => {
                self.gate.acquire().await.unwrap().forget();
                HttpResponse::Unauthorized().finish()
            }
            "gone" => {
                let _dropped = OnDrop(self.dropped.clone());
                self.entered.notify_one();
                std::future::pending::<()>().await;
                HttpResponse::Ok().finish() // would not count
            }
            _ => HttpResponse::Unauthorized().finish(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// Tells the test, when dropped, that the handler's future was dropped.
struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// `/login` answered by `handler` behind `middleware`.
fn login_server(handler: &Handler, middleware: RateLimit) -> ActixServer {
    let handler = handler.clone();
    ActixServer::start(move || {
        let handler = handler.clone();
        App::new()
            .route(
                "/login",
                web::get().to(move |request: HttpRequest| handler.clone().answer(request)),
            )
            .wrap(middleware.clone())
    })
}

fn failures_only(service: RateLimitService) -> RateLimit {
    RateLimit::new(service, ClientIp::peer())
        .options(login_options())
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
}

/// 64 concurrent failing requests against 5 per window: the handler runs exactly 5 times
/// (held until the 59 others are answered), the others are refused before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_failures_run_the_handler_exactly_the_limit() {
    let (limiter, _clock) = service(Config::default());
    let handler = Handler::new();
    let server = login_server(&handler, failures_only(limiter.clone()));
    let client = client();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let request = client.get(format!("{}/login?hold", server.base)).send();
        requests.spawn(async move { request.await.unwrap().status().as_u16() });
    }
    for _ in 0..59 {
        assert_eq!(requests.join_next().await.unwrap().unwrap(), 429);
    }
    assert_eq!(handler.runs(), 5);
    handler.gate.add_permits(5);
    while let Some(done) = requests.join_next().await {
        assert_eq!(done.unwrap(), 401);
    }
    assert_eq!(handler.runs(), 5);
    let left = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(left.remaining, 0);
    assert_eq!(limiter.stats().total.refunded, 0);
}

/// 64 successful requests one after another: all pass and leave the budget full, each
/// refund counted; then 5 failures spend it all.
#[tokio::test]
async fn successes_all_pass_and_leave_nothing_spent() {
    let (limiter, _clock) = service(Config::default());
    let handler = Handler::new();
    let server = login_server(&handler, failures_only(limiter.clone()));
    for _ in 0..64 {
        assert_eq!(status(&server, "/login?ok").await, 200);
    }
    let left = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(left.remaining, 5);
    assert_eq!(limiter.stats().total.refunded, 64);
    for _ in 0..5 {
        assert_eq!(status(&server, "/login").await, 401);
    }
    assert_eq!(status(&server, "/login?ok").await, 429);
    assert_eq!(handler.runs(), 69);
}

/// On a store that does not give spends back, the middleware refuses every request with a
/// configuration error naming `count_when`; the handler never runs.
#[tokio::test]
async fn without_refunds_every_request_is_refused_as_configuration() {
    let no_refunds = RateLimitService::with_store(
        Config::builder().default_limit(5).build().unwrap(),
        ratelimit_tests::LikeMemory::without_refunds(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let handler = Handler::new();
    let server = login_server(&handler, failures_only(no_refunds));
    let response = server.request(reqwest::Method::GET, "/login?ok", &[]).await;
    assert_eq!(response.status().as_u16(), 500);
    let body = response.text().await.unwrap();
    assert!(body.contains("INVALID_CONFIG"), "{body}");
    assert_eq!(handler.runs(), 0);
}

/// Several limits on one middleware count by status as one: a request that does not count
/// goes back to every limit.
#[tokio::test]
async fn stacked_limits_give_back_together() {
    let (limiter, _clock) = service(Config::default());
    let short = Options::new()
        .limit(3)
        .window(Duration::from_secs(60))
        .budget("short");
    let long = Options::new()
        .limit(10)
        .window(Duration::from_secs(3600))
        .budget("long");
    let middleware = RateLimit::new(limiter.clone(), ClientIp::peer())
        .limit(short.clone())
        .limit(long.clone())
        .count_when(|status| status.is_client_error());
    let server = login_server(&Handler::new(), middleware);
    for _ in 0..20 {
        assert_eq!(status(&server, "/login?ok").await, 200);
    }
    for _ in 0..3 {
        assert_eq!(status(&server, "/login").await, 401);
    }
    assert_eq!(status(&server, "/login?ok").await, 429);
    let short_left = limiter.status("127.0.0.1", &short).await.unwrap().remaining;
    let long_left = limiter.status("127.0.0.1", &long).await.unwrap().remaining;
    assert_eq!((short_left, long_left), (0, 7));
}

/// A request whose future is dropped before its response keeps its spend (its outcome is
/// unknown), though its handler would have answered a status that does not count. Actix runs
/// a handler to its end after its client left (its status then decides, as for any other), so
/// the future is dropped here by stopping the server while the handler runs.
#[tokio::test]
async fn a_request_dropped_mid_handler_keeps_its_spend() {
    let (limiter, _clock) = service(Config::default());
    let handler = Handler::new();
    let server = login_server(&handler, failures_only(limiter.clone()));
    assert_eq!(status(&server, "/login?ok").await, 200);
    let mut connection = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap();
    connection
        .write_all(b"GET /login?gone HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    handler.entered.notified().await;
    drop(server); // stops its worker, dropping what runs on it
                  // Not a timing: a bound on a hang, should the server never drop the handler.
    tokio::time::timeout(Duration::from_secs(60), handler.dropped.notified())
        .await
        .expect("the stopped server kept the handler");
    drop(connection);

    let left = limiter.status("127.0.0.1", &login_options()).await.unwrap();
    assert_eq!(left.remaining, 4, "the dropped request keeps its spend");
    assert_eq!(
        limiter.stats().total.refunded,
        1,
        "only the completed request's"
    );
}
