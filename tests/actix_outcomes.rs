//! Counting by response status on the actix-web middleware (`count_when`, issue 26), against a
//! real actix server and a real client, as `http_outcomes.rs` does for the tower layer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse};
use ratelimit::actix::RateLimit;
use ratelimit::http::ClientIp;
use ratelimit::{Config, Options};
use ratelimit_tests::service;
use ratelimit_tests::web::ActixServer;

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
