//! helper-64's probes of the actix-web middleware (feature `actix`) around what a request's
//! outcome makes of its spend, on a real actix server and a real client on loopback: a
//! handler that panics (on a middleware counting every request, and on ones counting by
//! status, `count_when`, with one limit and with two), and statuses at the edges of the class
//! a `count_when` counts. A `ManualClock` that never moves drives every limit: nothing sleeps
//! for timing, nothing refills.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpResponse};
use ratelimit::actix::RateLimit;
use ratelimit::http::ClientIp;
use ratelimit::{Config, Options, RateLimitService};
use ratelimit_tests::web::ActixServer;
use ratelimit_tests::{now, service};

const PEER: &str = "127.0.0.1";

fn hourly(limit: u64, budget: &str) -> Options {
    Options::new()
        .limit(limit)
        .window(Duration::from_secs(3_600))
        .budget(budget.to_owned())
}

/// Serves `/s/{code}` behind `middleware`: the handler answers `code`, or panics for code 0;
/// every run counted in `runs`.
fn serve(middleware: RateLimit, runs: Arc<AtomicUsize>) -> ActixServer {
    ActixServer::start(move || {
        let runs = Arc::clone(&runs);
        App::new()
            .route(
                "/s/{code}",
                web::get().to(move |code: web::Path<u16>| {
                    let runs = Arc::clone(&runs);
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let code = code.into_inner();
                        if code == 0 {
                            panic!("the handler panics (a probe: expected)");
                        }
                        HttpResponse::new(StatusCode::from_u16(code).unwrap())
                    }
                }),
            )
            .wrap(middleware.clone())
    })
}

/// The status of `GET /s/{code}` on a connection of its own, `None` when no response came
/// (within 10 s: a server that stopped answering fails the test rather than hangs it).
async fn get(server: &ActixServer, code: u16) -> Option<u16> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client.get(format!("{}/s/{code}", server.base)).send().await;
    response.ok().map(|r| r.status().as_u16())
}

fn left(limiter: &RateLimitService, options: &Options) -> u64 {
    now(limiter.status(PEER, options)).unwrap().remaining
}

/// A request whose handler panics keeps its spend, whatever the middleware counts: two panics
/// spend a limit of 2, and the next request (a `401` or a `200`) is refused before the
/// handler, which ran twice.
#[tokio::test]
async fn a_handler_that_panics_keeps_its_spend_on_every_kind_of_middleware() {
    type Build = fn(RateLimitService) -> RateLimit;
    let kinds: [(&str, Build); 3] = [
        ("every request", |limiter| {
            RateLimit::new(limiter, ClientIp::peer()).options(hourly(2, "a"))
        }),
        ("401s", |limiter| {
            RateLimit::new(limiter, ClientIp::peer())
                .options(hourly(2, "a"))
                .count_when(|status| status == StatusCode::UNAUTHORIZED)
        }),
        ("401s, two limits", |limiter| {
            RateLimit::new(limiter, ClientIp::peer())
                .limit(hourly(2, "a"))
                .limit(hourly(5, "b"))
                .count_when(|status| status == StatusCode::UNAUTHORIZED)
        }),
    ];
    for (kind, middleware) in kinds {
        let (limiter, _clock) = service(Config::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let server = serve(middleware(limiter.clone()), Arc::clone(&runs));
        let mut panicked = Vec::new();
        for _ in 0..2 {
            panicked.push(get(&server, 0).await);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{kind}: {panicked:?}");
        assert_eq!(
            left(&limiter, &hourly(2, "a")),
            0,
            "{kind}: both panics kept"
        );
        if kind.contains("two") {
            assert_eq!(left(&limiter, &hourly(5, "b")), 3, "{kind}: in both limits");
        }
        assert_eq!(get(&server, 401).await, Some(429), "{kind}");
        assert_eq!(get(&server, 200).await, Some(429), "{kind}");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "{kind}: refused before the handler"
        );
    }
}

/// `count_when(is_server_error)`: exactly 500 to 599 count; 499, 600, 999, 200 and 204 are
/// given back. Of 3, one left; one more `500` spends it; the next is refused before the
/// handler.
#[tokio::test]
async fn statuses_at_the_edges_of_the_counted_class_count_exactly_as_it_says() {
    let (limiter, _clock) = service(Config::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let options = hourly(3, "edges");
    let middleware = RateLimit::new(limiter.clone(), ClientIp::peer())
        .options(options.clone())
        .count_when(|status| status.is_server_error());
    let server = serve(middleware, Arc::clone(&runs));
    for code in [499, 500, 599, 600, 999, 200, 204] {
        assert_eq!(get(&server, code).await, Some(code));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 7);
    assert_eq!(left(&limiter, &options), 1, "500 and 599 counted, no other");
    assert_eq!(get(&server, 500).await, Some(500));
    for code in [200, 500, 600] {
        assert_eq!(get(&server, code).await, Some(429), "{code}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 8);
}
