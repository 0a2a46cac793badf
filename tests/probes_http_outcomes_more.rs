//! helper-64's probes of the HTTP layer (feature `axum`) around what a request's outcome
//! makes of its spend, on a real axum server and a real client on loopback: a handler that
//! panics (on a layer that counts every request and on one that counts by status,
//! `count_when`, with one limit and with two), statuses at the edges of the class a
//! `count_when` counts, and a handler's own `429` told from a rate-limit layer's refusal.
//! A `ManualClock` that never moves drives every limit: nothing sleeps, nothing refills.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing;
use axum::Router;
use ratelimit::http::{ClientIp, RateLimitLayer};
use ratelimit::{Config, Options, RateLimitService};
use ratelimit_tests::web::client;
use ratelimit_tests::{now, service};

/// The peer every request here comes from.
const PEER: &str = "127.0.0.1";

/// A budget of `limit` an hour, named.
fn hourly(limit: u64, budget: &str) -> Options {
    Options::new()
        .limit(limit)
        .window(Duration::from_secs(3_600))
        .budget(budget.to_owned())
}

/// Serves `/s/{code}` behind `layer`: the handler answers `code`, or panics for code 0; every
/// run counted in `runs`. The base URL.
async fn serve(layer: RateLimitLayer, runs: Arc<AtomicUsize>) -> String {
    let handler = move |Path(code): Path<u16>| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if code == 0 {
                panic!("the handler panics (a probe: expected)");
            }
            StatusCode::from_u16(code).unwrap()
        }
    };
    let app = Router::new()
        .route("/s/{code}", routing::get(handler))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

/// The status of `GET /s/{code}` on a connection of its own (a panic closes its connection),
/// `None` when no response came.
async fn get(base: &str, code: u16) -> Option<u16> {
    let response = client().get(format!("{base}/s/{code}")).send().await;
    response.ok().map(|r| r.status().as_u16())
}

/// What is left of `budget` for the peer.
fn left(limiter: &RateLimitService, options: &Options) -> u64 {
    now(limiter.status(PEER, options)).unwrap().remaining
}

/// A request whose handler panics has no response and keeps its spend, whatever the layer
/// counts: on a layer counting every request, on one counting only `401`s (a panic is no
/// answer that does not count), and on one with two limits counting only `401`s (both keep
/// theirs). Two panics spend a limit of 2; the next request, a `401` or a `200`, is refused
/// before the handler: it ran twice.
#[tokio::test]
async fn a_handler_that_panics_keeps_its_spend_on_every_kind_of_layer() {
    type Build = fn(RateLimitService) -> RateLimitLayer;
    let kinds: [(&str, Build); 3] = [
        ("every request", |limiter| {
            RateLimitLayer::new(limiter, ClientIp::peer()).options(hourly(2, "a"))
        }),
        ("401s", |limiter| {
            RateLimitLayer::new(limiter, ClientIp::peer())
                .options(hourly(2, "a"))
                .count_when(|status| status == StatusCode::UNAUTHORIZED)
        }),
        ("401s, two limits", |limiter| {
            RateLimitLayer::new(limiter, ClientIp::peer())
                .limit(hourly(2, "a"))
                .limit(hourly(5, "b"))
                .count_when(|status| status == StatusCode::UNAUTHORIZED)
        }),
    ];
    for (kind, layer) in kinds {
        let (limiter, _clock) = service(Config::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let base = serve(layer(limiter.clone()), Arc::clone(&runs)).await;
        for _ in 0..2 {
            assert_eq!(get(&base, 0).await, None, "{kind}: a panic has no response");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{kind}");
        assert_eq!(
            left(&limiter, &hourly(2, "a")),
            0,
            "{kind}: both panics kept"
        );
        if kind.contains("two") {
            assert_eq!(left(&limiter, &hourly(5, "b")), 3, "{kind}: in both limits");
        }
        assert_eq!(get(&base, 401).await, Some(429), "{kind}");
        assert_eq!(get(&base, 200).await, Some(429), "{kind}");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "{kind}: refused before the handler"
        );
    }
}

/// `count_when(is_server_error)`: exactly the statuses 500 to 599 count. `499`, `600`, `999`,
/// `200` and `204` are given back; `500` and `599` keep theirs: of 3, one left. Then one more
/// `500` spends the last, and the next request is refused before the handler.
#[tokio::test]
async fn statuses_at_the_edges_of_the_counted_class_count_exactly_as_it_says() {
    let (limiter, _clock) = service(Config::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let options = hourly(3, "edges");
    let layer = RateLimitLayer::new(limiter.clone(), ClientIp::peer())
        .options(options.clone())
        .count_when(|status| status.is_server_error());
    let base = serve(layer, Arc::clone(&runs)).await;
    for code in [499, 500, 599, 600, 999, 200, 204] {
        assert_eq!(get(&base, code).await, Some(code));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 7);
    assert_eq!(left(&limiter, &options), 1, "500 and 599 counted, no other");
    assert_eq!(get(&base, 500).await, Some(500));
    assert_eq!(left(&limiter, &options), 0);
    for code in [200, 500, 600] {
        assert_eq!(get(&base, code).await, Some(429), "{code}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 8);
}

/// A handler's own `429` is an answer like any other (no rate-limit layer refused it): under
/// `count_when(is_client_error)` it counts. Two of them spend a limit of 2, and the third
/// request is the layer's refusal (with its `Retry-After`), before the handler.
#[tokio::test]
async fn a_handlers_own_429_counts_as_the_status_it_is_never_as_an_inner_refusal() {
    let (limiter, _clock) = service(Config::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let options = hourly(2, "own-429");
    let layer = RateLimitLayer::new(limiter.clone(), ClientIp::peer())
        .options(options.clone())
        .count_when(|status| status.is_client_error());
    let base = serve(layer, Arc::clone(&runs)).await;
    for _ in 0..2 {
        let response = client().get(format!("{base}/s/429")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 429);
        assert!(
            response.headers().get("retry-after").is_none(),
            "the handler's own"
        );
    }
    assert_eq!(left(&limiter, &options), 0);
    let response = client().get(format!("{base}/s/200")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert!(
        response.headers().get("retry-after").is_some(),
        "the layer's"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
