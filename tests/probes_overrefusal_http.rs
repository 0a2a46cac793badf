//! Probes of over-refusal in the tower layer (helper-68): distinct clients behind trusted
//! proxies each get their whole budget (no two share a key by a parsing accident), however a
//! proxy writes their addresses; one client written two ways is one budget.

use std::net::SocketAddr;
use std::time::Duration;

use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::{Config, Options, Strategy};
use ratelimit_tests::service;
use tower::{Layer, ServiceExt};

type Inner = tower::util::ServiceFn<
    fn(
        http::Request<String>,
    ) -> std::future::Ready<Result<http::Response<String>, std::convert::Infallible>>,
>;

fn ok(
    _: http::Request<String>,
) -> std::future::Ready<Result<http::Response<String>, std::convert::Infallible>> {
    std::future::ready(Ok(http::Response::new(String::new())))
}

/// A layer of 2 a minute keyed by `client`, over a manual clock.
fn limited(client: ClientIp) -> ratelimit::http::RateLimit<Inner> {
    let (limiter, _clock) = service(
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .build()
            .unwrap(),
    );
    RateLimitLayer::new(limiter, client)
        .options(Options::new().limit(2).window(Duration::from_secs(60)))
        .layer(tower::service_fn(ok as fn(_) -> _))
}

/// The status of a GET from `peer` with `headers`.
async fn status(
    service: &ratelimit::http::RateLimit<Inner>,
    peer: &str,
    headers: &[(&str, &str)],
) -> u16 {
    let mut request = http::Request::get("/").body(String::new()).unwrap();
    request
        .extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    for (name, value) in headers {
        request.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    service
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Admitted out of 3 requests (a limit of 2: each client admits 2).
async fn admitted(
    service: &ratelimit::http::RateLimit<Inner>,
    peer: &str,
    headers: &[(&str, &str)],
) -> usize {
    let mut n = 0;
    for _ in 0..3 {
        n += usize::from(status(service, peer, headers).await == 200);
    }
    n
}

#[tokio::test]
async fn distinct_clients_behind_a_proxy_each_get_their_budget_however_it_writes_them() {
    let proxy = "10.0.0.1:4000";
    let xff = limited(ClientIp::x_forwarded_for(TrustedProxies::count(1)));
    // Each a client of its own, as a proxy appends it: 2 each, whatever came before.
    for client in [
        "203.0.113.7",
        "203.0.113.8",
        "203.0.113.9:4711",
        "2001:db8:1:1::1",
        "[2001:db8:1:2::1]:4711",
        "2001:db8:1:3::1",
    ] {
        let header = format!("198.51.100.1, {client}");
        assert_eq!(
            admitted(&xff, proxy, &[("x-forwarded-for", &header)]).await,
            2,
            "{client}"
        );
    }
    // One client written other ways: its budget is spent.
    for alias in [
        "203.0.113.7:1",
        "::ffff:203.0.113.7",
        "[2001:db8:1:1::2]",
        "2001:db8:1:1:ffff::9",
    ] {
        assert_eq!(
            admitted(&xff, proxy, &[("x-forwarded-for", alias)]).await,
            0,
            "{alias}"
        );
    }
    let forwarded = limited(ClientIp::forwarded(TrustedProxies::count(1)));
    for (i, element) in [
        "for=192.0.2.60;proto=http;by=203.0.113.43",
        "For=\"[2001:db8:cafe::17]:4711\"",
        "for=192.0.2.61, for=192.0.2.62",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            admitted(&forwarded, proxy, &[("forwarded", element)]).await,
            2,
            "element {i}: {element}"
        );
    }
    // Two proxies of ours by network: the client is the first address outside them.
    let cidrs = limited(ClientIp::x_forwarded_for(
        TrustedProxies::cidrs(["10.0.0.0/8"]).unwrap(),
    ));
    for client in ["203.0.113.20", "203.0.113.21"] {
        let header = format!("{client}, 10.0.0.2");
        assert_eq!(
            admitted(&cidrs, proxy, &[("x-forwarded-for", &header)]).await,
            2,
            "{client}"
        );
    }
}
