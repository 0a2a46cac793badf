//! Probes of how the HTTP layer (feature `axum`) decides whose budget a request spends: the
//! client address (the peer, `X-Forwarded-For`, `Forwarded`, headers it never reads), keys from
//! headers and extensions, per-route budgets against the paths and methods axum routes, and
//! the answer's headers. Each end-to-end probe serves a `Router` on loopback with `ConnectInfo`
//! and sends real requests (reqwest, or raw bytes over TCP for request lines reqwest would
//! normalize); the header parsing alone goes through `oneshot`. A `ManualClock` drives every
//! limit: nothing sleeps.
//!
//! The property behind most probes: whatever a client writes, it never gets a fresh budget per
//! request, and a handler never runs more often than the budget its requests spent admits.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::routing::{any, get};
use axum::Router;
use ratelimit::http::{
    route_of, ApiKey, ClientIp, KeyExtractor, Principal, RateLimitLayer, RequestHead,
    TrustedProxies, UNMATCHED,
};
use ratelimit::{Config, ManualClock, Options, RateLimitService, Strategy};
use ratelimit_tests::web::{fixed_window, header, per_minute};
use ratelimit_tests::{remaining, service, Broken, Forwarding, START};
use reqwest::header::HeaderValue;
use reqwest::Method;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

/// A served router and a client for it.
struct Server {
    addr: SocketAddr,
    client: reqwest::Client,
}

impl Server {
    /// Serves `app` on `127.0.0.1:0`, with `ConnectInfo`.
    async fn start(app: Router) -> Server {
        Self::on("127.0.0.1:0", app).await
    }

    /// Serves `app` on `bind`, with `ConnectInfo`.
    async fn on(bind: &str, app: Router) -> Server {
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.unwrap();
        });
        Server {
            addr,
            client: ratelimit_tests::web::client(),
        }
    }

    /// A `method` request for `path` on `host` (the server's port), with `headers` (a name
    /// given twice is two lines; values are bytes, as a client may send any).
    async fn send_to(
        &self,
        host: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> reqwest::Response {
        let url = format!("http://{host}:{}{path}", self.addr.port());
        let mut request = self.client.request(method, url);
        for (name, value) in headers {
            request = request.header(*name, HeaderValue::from_bytes(value).unwrap());
        }
        request.send().await.unwrap()
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> reqwest::Response {
        let host = match self.addr {
            SocketAddr::V4(v4) => v4.ip().to_string(),
            SocketAddr::V6(_) => "[::1]".to_owned(),
        };
        self.send_to(&host, method, path, headers).await
    }

    async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        self.send(Method::GET, path, &headers)
            .await
            .status()
            .as_u16()
    }

    async fn get(&self, path: &str) -> u16 {
        self.get_with(path, &[]).await
    }

    /// The status of a request written byte for byte (`head`: its request line and header
    /// lines, without the blank line), on a connection of its own.
    async fn raw(&self, head: &[u8]) -> u16 {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut request = head.to_vec();
        request.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
        stream.write_all(&request).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let text = String::from_utf8_lossy(&answer);
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .unwrap_or_else(|| panic!("no status line in {text:?}"));
        status.parse().unwrap()
    }

    /// A GET of `target` (the request line's, as written) with a `host` header.
    async fn raw_get(&self, target: &str) -> u16 {
        let head = format!("GET {target} HTTP/1.1\r\nhost: localhost");
        self.raw(head.as_bytes()).await
    }
}

/// Handlers that count their runs by name.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<BTreeMap<&'static str, usize>>>);

impl Runs {
    /// A handler counting its runs under `name`, answering `status`.
    fn handler(
        &self,
        name: &'static str,
        status: u16,
    ) -> impl Fn() -> std::future::Ready<(axum::http::StatusCode, &'static str)> + Clone + Send + 'static
    {
        let runs = self.clone();
        move || {
            *runs.0.lock().unwrap().entry(name).or_default() += 1;
            let status = axum::http::StatusCode::from_u16(status).unwrap();
            std::future::ready((status, name))
        }
    }

    fn ok(
        &self,
        name: &'static str,
    ) -> impl Fn() -> std::future::Ready<(axum::http::StatusCode, &'static str)> + Clone + Send + 'static
    {
        self.handler(name, 200)
    }

    fn of(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }
}

/// `limit` a minute in a budget named `budget`, so a probe can read what a key has left.
fn named(limit: u64, budget: &str) -> Options {
    per_minute(limit).budget(budget.to_owned())
}

/// What `key` has left of `options`' budget.
async fn left(limiter: &RateLimitService, key: &str, options: &Options) -> u64 {
    remaining(limiter, key, options).await
}

// ---------------------------------------------------------------------------------------------
// 1. The client address: what a client writes never makes a fresh budget.

/// Headers a client sends to pose as someone else, fresh on request `i`.
fn spoofs(i: usize) -> Vec<(&'static str, String)> {
    vec![
        ("x-forwarded-for", format!("198.51.100.{i}")),
        ("x-forwarded-for", format!("203.0.113.{i}, 192.0.2.{i}")),
        ("forwarded", format!("for=198.51.100.{i}")),
        (
            "forwarded",
            format!("for=\"[2001:db8:{i:x}::1]\";proto=https"),
        ),
        ("x-real-ip", format!("192.0.2.{i}")),
        ("true-client-ip", format!("192.0.2.{i}")),
        ("cf-connecting-ip", format!("192.0.2.{i}")),
        ("x-client-ip", format!("192.0.2.{i}")),
        ("x-cluster-client-ip", format!("192.0.2.{i}")),
        ("fastly-client-ip", format!("192.0.2.{i}")),
        ("x-original-forwarded-for", format!("192.0.2.{i}")),
        ("forwarded-for", format!("192.0.2.{i}")),
        ("x-forwarded", format!("for=192.0.2.{i}")),
    ]
}

/// With no proxy trusted, a client rotating every forwarding header on each request spends
/// one budget, its socket address's, and the handler runs exactly the limit.
async fn one_budget_whatever_the_client_forwards(what: &str, key: impl KeyExtractor) {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let options = named(3, "spoofs");
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = Server::start(app).await;
    let mut admitted = 0;
    for i in 1..=40 {
        let headers = spoofs(i);
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        match server
            .send(Method::GET, "/", &headers)
            .await
            .status()
            .as_u16()
        {
            200 => admitted += 1,
            429 => {}
            other => panic!("{what}: request {i} answered {other}"),
        }
    }
    assert_eq!(admitted, 3, "{what}");
    assert_eq!(runs.of("root"), 3, "{what}");
    // The budget spent is the socket address's.
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0, "{what}");
}

#[tokio::test]
async fn a_client_rotating_forwarding_headers_spends_its_socket_addresss_budget_when_no_proxy_is_trusted(
) {
    one_budget_whatever_the_client_forwards("peer", ClientIp::peer()).await;
    let none = || TrustedProxies::count(0);
    one_budget_whatever_the_client_forwards("xff count 0", ClientIp::x_forwarded_for(none())).await;
    one_budget_whatever_the_client_forwards("forwarded count 0", ClientIp::forwarded(none())).await;
    let no_networks = || TrustedProxies::cidrs(Vec::<&str>::new()).unwrap();
    one_budget_whatever_the_client_forwards(
        "xff, no networks",
        ClientIp::x_forwarded_for(no_networks()),
    )
    .await;
    // Networks that do not hold the peer (127.0.0.1): the peer is the client.
    let elsewhere = || TrustedProxies::cidrs(["10.0.0.0/8", "fd00::/8", "::1"]).unwrap();
    one_budget_whatever_the_client_forwards(
        "xff, the peer untrusted",
        ClientIp::x_forwarded_for(elsewhere()),
    )
    .await;
    one_budget_whatever_the_client_forwards(
        "forwarded, the peer untrusted",
        ClientIp::forwarded(elsewhere()),
    )
    .await;
    // An API key nobody verified counts by its fallback, the address.
    let unknown = ApiKey::new("x-forwarded-for", |_| None, ClientIp::peer());
    one_budget_whatever_the_client_forwards("api key of a forwarding header", unknown).await;
}

/// Two proxies of ours: the client is the second entry from the right. What the client writes
/// to its left never changes its key; the first proxy's own entry (a pool of proxies) does not
/// either; a chain with too few entries counts under the peer, never the entry further left.
#[tokio::test]
async fn with_two_trusted_proxies_only_the_second_entry_from_the_right_is_the_client() {
    let (limiter, _clock) = fixed_window();
    let options = named(2, "two-proxies");
    let key = ClientIp::x_forwarded_for(TrustedProxies::count(2));
    let runs = Runs::default();
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = &Server::start(app).await;
    let xff =
        |value: String| async move { server.get_with("/", &[("x-forwarded-for", &value)]).await };

    let mut admitted = 0;
    for i in 0..30 {
        // The client's own claims (0 to 99 entries), then the client as the first proxy saw
        // it, then the first proxy as the second saw it (one of a pool).
        let claims: Vec<String> = (0..(i * 3 % 100))
            .map(|j| format!("192.0.2.{}", (i + j) % 250))
            .collect();
        let mut chain = claims;
        chain.push("203.0.113.7".into());
        chain.push(format!("10.0.0.{}", i % 7 + 1));
        match xff(chain.join(", ")).await {
            200 => admitted += 1,
            429 => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(admitted, 2);
    assert_eq!(left(&limiter, "203.0.113.7", &options).await, 0);
    // The second entry from the right is the key: another client has its own budget.
    assert_eq!(xff("198.51.100.1, 203.0.113.8, 10.0.0.1".into()).await, 200);
    assert_eq!(left(&limiter, "203.0.113.8", &options).await, 1);
    // One entry only (the first proxy was bypassed, or is misconfigured): the peer, rotating
    // what that one entry says.
    for i in 0..5 {
        let status = xff(format!("198.51.100.{i}")).await;
        assert_eq!(status, if i < 2 { 200 } else { 429 }, "{i}");
    }
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0);
    assert_eq!(runs.of("root"), 5);
}

/// Behind one proxy, entries the proxy could forward that are no address (empty, `unknown`,
/// obfuscated, zones, ports out of range, IPv4 forms `std` does not read, whitespace inside,
/// non-UTF-8 bytes, trailing commas, lines of nothing): each request a different one, all
/// count under the peer, never a budget each.
#[tokio::test]
async fn malformed_forwarded_for_entries_count_under_the_peer_never_a_budget_each() {
    let (limiter, _clock) = fixed_window();
    let options = named(3, "malformed");
    let runs = Runs::default();
    let key = ClientIp::x_forwarded_for(TrustedProxies::count(1));
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = Server::start(app).await;

    let malformed: Vec<Vec<u8>> = [
        "",
        " ",
        ",",
        ",,,,",
        "203.0.113.7,",
        "203.0.113.7, ",
        "unknown",
        "UNKNOWN",
        "_hidden",
        "_203.0.113.7",
        "\"203.0.113.7\"",
        "for=203.0.113.7",
        "203.0.113.7 203.0.113.8",
        "203.0.113.7;203.0.113.8",
        "203.0.113.7:99999",
        "203.0.113.7:-1",
        "203.0.113.7:",
        "203.0.113.7:80:80",
        "203.0.113.007",
        "0203.0.113.7",
        "0xcb.0.113.7",
        "3405803783",
        "203.113.7",
        "203.0.113.256",
        "fe80::1%eth0",
        "fe80::1%25eth0",
        "[fe80::1%eth0]:80",
        "[2001:db8::1",
        "2001:db8::1]",
        "2001:db8:::1",
        "2001:db8::1::2",
        "::ffff:203.0.113.7:80",
        "[203.0.113.7]:80",
        "203.0.113.7/24",
        "localhost",
        "example.com:80",
        "\t",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([
        b"203.0.113.\xff".to_vec(),
        b"\xc3\xa9".to_vec(),
        b"198.51.100.1, \x80\x81".to_vec(),
    ])
    .collect();

    let mut admitted = 0;
    for (i, entry) in malformed.iter().enumerate() {
        // A spoof on the left, different each time, then the malformed last entry.
        let mut value = format!("198.51.100.{i}, ").into_bytes();
        value.extend_from_slice(entry);
        let response = server
            .send(Method::GET, "/", &[("x-forwarded-for", &value)])
            .await;
        match response.status().as_u16() {
            200 => admitted += 1,
            429 => {}
            other => panic!("{:?}: {other}", String::from_utf8_lossy(entry)),
        }
        // The same as a line of its own after the client's.
        let lines = [
            ("x-forwarded-for", format!("198.51.100.{i}").into_bytes()),
            ("x-forwarded-for", entry.clone()),
        ];
        let lines: Vec<(&str, &[u8])> = lines.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        match server
            .send(Method::GET, "/", &lines)
            .await
            .status()
            .as_u16()
        {
            200 => admitted += 1,
            429 => {}
            other => panic!("{:?} on a line: {other}", String::from_utf8_lossy(entry)),
        }
    }
    assert_eq!(admitted, 3);
    assert_eq!(runs.of("root"), 3);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0);
}

/// The same for `Forwarded` behind one proxy: elements with no address, obfuscated ones,
/// unreadable lines (open quotes, non-ASCII), several `for=`, odd spacing and case.
#[tokio::test]
async fn malformed_forwarded_elements_count_under_the_peer_never_a_budget_each() {
    let (limiter, _clock) = fixed_window();
    let options = named(2, "malformed-forwarded");
    let runs = Runs::default();
    let key = ClientIp::forwarded(TrustedProxies::count(1));
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = Server::start(app).await;

    let malformed: Vec<Vec<u8>> = [
        "",
        "for=",
        "for=\"\"",
        "for=unknown",
        "for=\"unknown\"",
        "for=_hidden",
        "for=\"_SEVKISEK\"",
        "by=203.0.113.7",
        "proto=https",
        "host=203.0.113.7",
        "for=\"[2001:db8::1%eth0]\"",
        "for=\"[2001:db8::1\"",
        "for=203.0.113.7\"",
        "for=\"203.0.113.7",
        "for=\"203.0.113.7\\\"",
        "for=203.0.113.007",
        "for=203.0.113.7 203.0.113.8",
        "203.0.113.7",
        "for:203.0.113.7",
        "forwarded-for=203.0.113.7",
        ",",
        "for=203.0.113.7,",
        ";;;",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([b"for=203.0.113.\xff".to_vec(), b"for=\"\xc3\xa9\"".to_vec()])
    .collect();

    let mut admitted = 0;
    for (i, element) in malformed.iter().enumerate() {
        let mut value = format!("for=198.51.100.{i}, ").into_bytes();
        value.extend_from_slice(element);
        let response = server
            .send(Method::GET, "/", &[("forwarded", &value)])
            .await;
        match response.status().as_u16() {
            200 => admitted += 1,
            429 => {}
            other => panic!("{:?}: {other}", String::from_utf8_lossy(element)),
        }
    }
    assert_eq!(admitted, 2);
    assert_eq!(runs.of("root"), 2);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0);
}

/// One client written every way a proxy might write it (ports, brackets, case, leading zeros
/// in IPv6 groups, IPv4-mapped, spacing): one budget, in `X-Forwarded-For` and in
/// `Forwarded` alike.
#[tokio::test]
async fn one_address_written_many_ways_is_one_budget() {
    let (limiter, _clock) = fixed_window();
    let v4 = named(2, "v4");
    let v6 = named(2, "v6");
    let forwarded = named(2, "forwarded-forms");
    let one = || TrustedProxies::count(1);
    let limited = |key: ClientIp, options: &Options| {
        get(|| async { "ok" })
            .route_layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()))
    };
    let app = Router::new()
        .route("/v4", limited(ClientIp::x_forwarded_for(one()), &v4))
        .route("/v6", limited(ClientIp::x_forwarded_for(one()), &v6))
        .route(
            "/forwarded",
            limited(ClientIp::forwarded(one()), &forwarded),
        );
    let server = Server::start(app).await;

    let count = |statuses: &[u16]| {
        assert!(
            statuses.iter().all(|s| [200, 429].contains(s)),
            "{statuses:?}"
        );
        statuses.iter().filter(|s| **s == 200).count()
    };

    let v4_forms = [
        "203.0.113.7",
        " 203.0.113.7 ",
        "\t203.0.113.7",
        "203.0.113.7:1",
        "203.0.113.7:65535",
        "::ffff:203.0.113.7",
        "::FFFF:203.0.113.7",
        "::ffff:cb00:7107",
        "0:0:0:0:0:ffff:cb00:7107",
        "0000:0000:0000:0000:0000:FFFF:CB00:7107",
        "[::ffff:203.0.113.7]",
        "[::ffff:203.0.113.7]:443",
    ];
    let mut statuses = Vec::new();
    for form in v4_forms {
        // The path is the same route for every form, whatever the client says on the left.
        statuses.push(
            server
                .get_with("/v4", &[("x-forwarded-for", &format!("192.0.2.1, {form}"))])
                .await,
        );
    }
    assert_eq!(count(&statuses), 2, "{statuses:?}");
    assert_eq!(left(&limiter, "203.0.113.7", &v4).await, 0);

    let v6_forms = [
        "2001:db8:1:2::1",
        "2001:DB8:1:2::1",
        "2001:0db8:0001:0002:0000:0000:0000:0001",
        "2001:db8:1:2:0:0:0:1",
        "[2001:db8:1:2::1]",
        "[2001:db8:1:2::1]:8080",
        "2001:db8:1:2:ffff:ffff:ffff:ffff",
        "2001:db8:1:2::",
        "[2001:DB8:1:2::abcd]:1",
        // What follows a bracketed address is not read: whatever it says, the same address.
        "[2001:db8:1:2::1]]",
        "[2001:db8:1:2::1]junk",
        "[2001:db8:1:2::1]:99999",
    ];
    let mut statuses = Vec::new();
    for form in v6_forms {
        statuses.push(server.get_with("/v6", &[("x-forwarded-for", form)]).await);
    }
    assert_eq!(count(&statuses), 2, "{statuses:?}");
    assert_eq!(left(&limiter, "2001:db8:1:2::/64", &v6).await, 0);

    let forwarded_forms = [
        "for=203.0.113.7",
        "For=203.0.113.7",
        "FOR=\"203.0.113.7\"",
        "for = 203.0.113.7",
        "for=\"203.0.113.7:4711\"",
        "proto=https;for=203.0.113.7;by=10.0.0.1",
        "for=\"[::ffff:203.0.113.7]\"",
        "for=\"[::ffff:203.0.113.7]:80\"",
        "for=\"\\2\\0\\3.0.113.7\"",
        "for=203.0.113.7;for=198.51.100.1",
    ];
    let mut statuses = Vec::new();
    for form in forwarded_forms {
        let value = format!("for=192.0.2.1, {form}");
        statuses.push(
            server
                .get_with("/forwarded", &[("forwarded", &value)])
                .await,
        );
    }
    assert_eq!(count(&statuses), 2, "{statuses:?}");
    assert_eq!(left(&limiter, "203.0.113.7", &forwarded).await, 0);
}

/// On a dual-stack listener, an IPv4 client's peer address is IPv4-mapped IPv6: it counts as
/// the IPv4 address (one budget, however the client connects), and an IPv6 client per /64.
/// Trusted networks written in IPv4 hold the mapped peer too.
#[tokio::test]
async fn a_dual_stack_listeners_mapped_peer_is_one_budget_with_its_ipv4_address() {
    let (limiter, _clock) = fixed_window();
    let options = named(3, "dual-stack");
    let runs = Runs::default();
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(options.clone()));
    let server = &Server::on("[::]:0", app).await;
    let via = |host: &'static str| async move {
        server
            .send_to(host, Method::GET, "/", &[])
            .await
            .status()
            .as_u16()
    };
    assert_eq!(via("127.0.0.1").await, 200);
    assert_eq!(via("[::ffff:127.0.0.1]").await, 200);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 1);
    assert_eq!(via("127.0.0.1").await, 200);
    assert_eq!(via("[::ffff:127.0.0.1]").await, 429);
    assert_eq!(via("127.0.0.1").await, 429);
    // IPv6 loopback: a client of its own, counted per /64.
    assert_eq!(via("[::1]").await, 200);
    assert_eq!(left(&limiter, "::/64", &options).await, 2);
    assert_eq!(runs.of("root"), 4);

    // Behind a proxy trusted by an IPv4 network, the mapped peer is that proxy.
    let (limiter, _clock) = fixed_window();
    let trusted = TrustedProxies::cidrs(["127.0.0.0/8"]).unwrap();
    let app = Router::new().route("/", get(|| async { "ok" })).layer(
        RateLimitLayer::new(limiter.clone(), ClientIp::x_forwarded_for(trusted))
            .options(options.clone()),
    );
    let server = Server::on("[::]:0", app).await;
    for i in 0..4 {
        let spoof = format!("192.0.2.{i}, 203.0.113.7");
        let status = server
            .send_to(
                "[::ffff:127.0.0.1]",
                Method::GET,
                "/",
                &[("x-forwarded-for", spoof.as_bytes())],
            )
            .await
            .status()
            .as_u16();
        assert_eq!(status, if i < 3 { 200 } else { 429 }, "{i}");
    }
    assert_eq!(left(&limiter, "203.0.113.7", &options).await, 0);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 3);
    // A network written IPv4-mapped with an IPv6 prefix is refused when built, not misread.
    assert!(TrustedProxies::cidrs(["::ffff:10.0.0.0/104"]).is_err());
}

/// A header of 100 entries, and one far longer than any proxy writes: the client behind one
/// proxy keeps its one budget, or the server refuses the request; never a fresh budget.
#[tokio::test]
async fn long_forwarding_chains_never_give_a_fresh_budget() {
    let (limiter, _clock) = fixed_window();
    let options = named(2, "long-chains");
    let runs = Runs::default();
    let app = Router::new().route("/", get(runs.ok("root"))).layer(
        RateLimitLayer::new(
            limiter.clone(),
            ClientIp::x_forwarded_for(TrustedProxies::count(1)),
        )
        .options(options.clone()),
    );
    let server = Server::start(app).await;
    for (round, entries) in [100usize, 100, 1_000, 5_000, 20_000]
        .into_iter()
        .enumerate()
    {
        let mut chain: Vec<String> = (0..entries)
            .map(|i| format!("10.{}.{}.{round}", i / 250, i % 250))
            .collect();
        chain.push("203.0.113.7".into());
        let status = server
            .get_with("/", &[("x-forwarded-for", &chain.join(","))])
            .await;
        match (round, status) {
            (0 | 1, 200) => {}
            (_, 429 | 431 | 400) => {}
            (round, other) => panic!("round {round}, {entries} entries: {other}"),
        }
    }
    // 100 lines of one entry each, the proxy's last.
    let lines: Vec<String> = (0..100)
        .map(|i| format!("192.0.2.{i}"))
        .chain(["203.0.113.7".into()])
        .collect();
    let headers: Vec<(&str, &[u8])> = lines
        .iter()
        .map(|l| ("x-forwarded-for", l.as_bytes()))
        .collect();
    let status = server
        .send(Method::GET, "/", &headers)
        .await
        .status()
        .as_u16();
    assert_ne!(status, 200);
    assert_eq!(runs.of("root"), 2);
    assert_eq!(left(&limiter, "203.0.113.7", &options).await, 0);
}

// ---------------------------------------------------------------------------------------------
// 2. Keys from headers and extensions.

/// An API key header that is missing, empty, blank, huge, not ASCII, unknown or given twice
/// (an unknown key first) counts under the fallback address: one budget, never one per value,
/// never unlimited.
#[tokio::test]
async fn api_key_headers_the_lookup_does_not_know_count_under_the_address() {
    let (limiter, _clock) = fixed_window();
    let options = named(3, "api");
    let runs = Runs::default();
    let key = ApiKey::new(
        "x-api-key",
        |raw| (raw == "k-123").then(|| "account-42".to_owned()),
        ClientIp::peer(),
    );
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = Server::start(app).await;

    let huge = vec![b'k'; 16 * 1024];
    let values: Vec<Vec<Vec<u8>>> = vec![
        vec![],
        vec![b"".to_vec()],
        vec![b"   ".to_vec()],
        vec![huge.clone()],
        vec![b"k-123\xff".to_vec()],
        vec![b"\xc3\xa9".to_vec()],
        vec![b"K-123".to_vec()],
        vec![b"k-1234".to_vec()],
        vec![b"k-12".to_vec()],
        vec![b"made-up".to_vec(), b"k-123".to_vec()],
        vec![b"k-123, k-123".to_vec()],
    ];
    let mut admitted = 0;
    for lines in &values {
        let headers: Vec<(&str, &[u8])> =
            lines.iter().map(|v| ("x-api-key", v.as_slice())).collect();
        match server
            .send(Method::GET, "/", &headers)
            .await
            .status()
            .as_u16()
        {
            200 => admitted += 1,
            429 => {}
            other => panic!("{lines:?}: {other}"),
        }
    }
    assert_eq!(admitted, 3);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0);
    // The known key, with the spacing a client may add, has its own budget.
    for value in ["k-123", " k-123", "k-123\t", " k-123 "] {
        let status = server.get_with("/", &[("x-api-key", value)]).await;
        assert_eq!(
            status,
            if value == " k-123 " { 429 } else { 200 },
            "{value:?}"
        );
    }
    assert_eq!(left(&limiter, "api-key:account-42", &options).await, 0);
    assert_eq!(runs.of("root"), 6);
}

/// A lookup whose account makes a key longer than the store takes: every request is refused
/// with a typed error (`500 INVALID_KEY`), never admitted and never counted elsewhere.
#[tokio::test]
async fn an_api_key_account_too_long_for_a_key_is_an_error_never_an_admission() {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let key = ApiKey::new("x-api-key", |raw| Some(raw.repeat(200)), ClientIp::peer());
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(named(2, "long-accounts")));
    let server = Server::start(app).await;
    // "api-key:" and 200 times the raw key: 1,000 bytes pass, 1,200 do not.
    assert_eq!(server.get_with("/", &[("x-api-key", "abcde")]).await, 200);
    for i in 0..5 {
        let value = format!("abcde{i}");
        let response = server
            .send(Method::GET, "/", &[("x-api-key", value.as_bytes())])
            .await;
        assert_eq!(response.status(), 500, "{value}");
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(body["code"], "INVALID_KEY");
    }
    assert_eq!(runs.of("root"), 1);
    assert_eq!(
        left(&limiter, "127.0.0.1", &named(2, "long-accounts")).await,
        2
    );
}

/// What an authentication middleware verified, as the key.
#[derive(Clone, Debug)]
struct UserId(String);

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Signs in `authorization: Bearer user-<n>` (n below 10); anything else is anonymous.
async fn authenticate(mut request: Request, next: Next) -> axum::response::Response {
    let user = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer user-"))
        .filter(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit())
        .map(|n| UserId(format!("user-{n}")));
    if let Some(user) = user {
        request.extensions_mut().insert(user);
    }
    next.run(request).await
}

/// A required principal the request does not carry refuses it (`500`, the handler never
/// runs), however it claims to be someone; with a fallback it counts under the address.
#[tokio::test]
async fn a_request_without_its_principal_is_refused_or_counted_by_the_fallback_never_passed() {
    let (limiter, _clock) = fixed_window();
    let options = named(2, "principal");
    let runs = Runs::default();
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        // The limiter first, the authentication after: axum runs the last added first.
        .layer(
            RateLimitLayer::new(limiter.clone(), Principal::<UserId>::new())
                .options(options.clone()),
        )
        .layer(middleware::from_fn(authenticate));
    let server = Server::start(app).await;
    for claim in [
        "",
        "Bearer user-10",
        "Bearer admin",
        "Basic dXNlcg==",
        "Bearer user-",
    ] {
        let response = if claim.is_empty() {
            server.send(Method::GET, "/", &[]).await
        } else {
            server
                .send(Method::GET, "/", &[("authorization", claim.as_bytes())])
                .await
        };
        assert_eq!(response.status(), 500, "{claim:?}");
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(body["code"], "INVALID_KEY");
    }
    assert_eq!(runs.total(), 0);
    // A signed-in user has a budget of its own.
    let as_user = |n: u8| format!("Bearer user-{n}");
    assert_eq!(
        server
            .get_with("/", &[("authorization", &as_user(1))])
            .await,
        200
    );
    assert_eq!(
        server
            .get_with("/", &[("authorization", &as_user(1))])
            .await,
        200
    );
    assert_eq!(
        server
            .get_with("/", &[("authorization", &as_user(1))])
            .await,
        429
    );
    assert_eq!(left(&limiter, "principal:user-1", &options).await, 0);

    // With a fallback: the anonymous share the address's budget, whatever they claim.
    let (limiter, _clock) = fixed_window();
    let key = Principal::<UserId>::new().or(ClientIp::peer());
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()))
        .layer(middleware::from_fn(authenticate));
    let server = Server::start(app).await;
    let statuses = [
        server
            .get_with("/", &[("authorization", "Bearer user-10")])
            .await,
        server
            .get_with("/", &[("authorization", "Bearer admin")])
            .await,
        server.get_with("/", &[]).await,
        server
            .get_with("/", &[("x-forwarded-for", "192.0.2.1")])
            .await,
    ];
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 0);
}

/// A closure key made of the route template (`route_of`) and the address: every path that
/// reaches a route (percent-encoded, any id) is the same key, and probes of paths no route
/// answers share one.
#[tokio::test]
async fn a_key_of_the_route_template_is_one_budget_for_every_path_to_the_route() {
    let (limiter, _clock) = fixed_window();
    let ip = ClientIp::peer();
    let key = ratelimit::http::key_fn(move |head: &dyn RequestHead| {
        // The address's key (an IPv6 client per /64), not the address itself.
        let address = ip.extract(head).ok()??;
        Some(format!("{address} {}", route_of(head)))
    });
    let options = named(2, "by-template");
    let runs = Runs::default();
    let app = Router::new()
        .route("/orders/{id}", get(runs.ok("orders")))
        .fallback(runs.handler("fallback", 404))
        .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
    let server = Server::start(app).await;
    let mut statuses = Vec::new();
    for path in [
        "/orders/1",
        "/orders/%31",
        "/orders/01",
        "/orders/a%2Fb",
        "/orders/%00",
        "/orders/1?x=1",
    ] {
        statuses.push(server.raw_get(path).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    assert_eq!(runs.of("orders"), 2);
    assert_eq!(
        left(&limiter, "127.0.0.1 GET /orders/{id}", &options).await,
        0
    );
    for path in ["/nope", "/orders", "/orders/1/2", "//orders/1"] {
        statuses.push(server.raw_get(path).await);
    }
    assert_eq!(statuses[6..], [404, 404, 429, 429]);
    assert_eq!(runs.of("fallback"), 2);
    assert_eq!(
        left(&limiter, &format!("127.0.0.1 {UNMATCHED}"), &options).await,
        0
    );
}

/// The control of the probe above: the same exemption closure on the extractor's key (what
/// `ClientIp` counts: an IPv6 host per /64) keeps the host to one budget, and loopback exempt.
#[tokio::test]
async fn an_exemption_closure_on_the_extractors_key_keeps_an_ipv6_host_to_one_budget() {
    let (limiter, _clock) = fixed_window();
    let ip = ClientIp::peer();
    let key = ratelimit::http::key_fn(move |head: &dyn RequestHead| match ip.address(head) {
        Ok(addr) if addr.is_loopback() => None,
        Ok(_) => ip.extract(head).ok().flatten(),
        Err(_) => Some("no-address".to_owned()),
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter, key).options(per_minute(2)));
    let mut statuses = Vec::new();
    for i in 1..=6 {
        let request = by_hand(&format!("[2001:db8:1:2::{i:x}]:4000"), &[]);
        statuses.push(
            app.clone()
                .oneshot(request)
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
        for _ in 0..3 {
            let response = app.clone().oneshot(by_hand(peer, &[])).await.unwrap();
            assert_eq!(response.status(), 200, "{peer}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Per-route budgets against the paths and methods axum routes.

/// A limited route's budget spent, every way of writing its path in the request line either
/// reaches the route (and is refused) or a route that is not it (the fallback, in the shared
/// budget): the handler never runs again, and each handler ran exactly what its budget
/// admitted.
#[tokio::test]
async fn path_variants_never_run_a_handler_past_its_routes_budget() {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let app = Router::new()
        .route("/a", get(runs.ok("a")))
        .route("/orders/new", get(runs.ok("new")))
        .route("/orders/{id}", get(runs.ok("id")))
        .fallback(runs.handler("fallback", 404))
        .layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(per_minute(2))
                .per_route(),
        );
    let server = Server::start(app).await;

    assert_eq!(server.get("/a").await, 200);
    assert_eq!(server.get("/a").await, 200);
    assert_eq!(server.get("/orders/new").await, 200);
    assert_eq!(server.get("/orders/new").await, 200);
    let variants = [
        "/a",
        "/a?x=1",
        "/a?",
        "/a/",
        "//a",
        "///a",
        "/A",
        "/%61",
        "/%2561",
        "/a%2F",
        "/a%00",
        "/a;x",
        "/./a",
        "/b/../a",
        "/a/.",
        "/a/..",
        "/%2e/a",
        "http://localhost/a",
        "http://localhost/a?x",
        "HTTP://LOCALHOST/a",
        "/orders/new",
        "/orders/new/",
        "/orders//new",
        "/orders/NEW",
        "/orders/%6Eew",
        "/orders/%6eew",
        "/orders/new%20",
        "/orders/./new",
        "http://localhost/orders/new",
    ];
    for target in variants {
        let before = runs.of("id");
        let status = server.raw_get(target).await;
        // Only `/orders/{id}` (another route, with a budget of its own) may still admit one.
        assert!(
            status != 200 || runs.of("id") == before + 1,
            "{target}: {status}"
        );
    }
    assert_eq!(runs.of("a"), 2);
    assert_eq!(runs.of("new"), 2);
    // The variants that reach `/orders/{id}` (the raw path matches it) run its handler, in its
    // budget: exactly what that budget admitted.
    let by_budget = limiter.stats().by_method;
    let id = "(limit 2, window 1m) GET /orders/{id}";
    assert_eq!(by_budget[id].allowed, 2);
    assert_eq!(runs.of("id"), 2);
    let unmatched = format!("(limit 2, window 1m) {UNMATCHED}");
    assert_eq!(by_budget[&unmatched].allowed as usize, runs.of("fallback"));
    assert!(runs.of("fallback") <= 2);
}

/// A nested router: `/api/orders/{id}` is one budget, whatever the id, and a nested
/// router's own layer counts under the full template too.
#[tokio::test]
async fn nested_routes_count_under_one_template_whatever_the_path() {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let inner = Router::new()
        .route("/orders/{id}", get(runs.ok("orders")))
        .layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer())
                .options(per_minute(2))
                .per_route(),
        );
    let app = Router::new()
        .nest("/api", inner)
        .fallback(runs.handler("fallback", 404));
    let server = Server::start(app).await;
    let mut statuses = Vec::new();
    for target in [
        "/api/orders/1",
        "/api/orders/2",
        "/api/orders/3",
        "/api/orders/%34",
        "/api//orders/5",
        "/API/orders/6",
        "/api/orders/7/",
    ] {
        statuses.push(server.raw_get(target).await);
    }
    assert_eq!(runs.of("orders"), 2, "{statuses:?}");
    assert_eq!(statuses[..4], [200, 200, 429, 429]);
    let stats = limiter.stats().by_method;
    let names: Vec<&String> = stats.keys().collect();
    assert_eq!(
        stats["(limit 2, window 1m) GET /api/orders/{id}"].allowed, 2,
        "{names:?}"
    );
}

/// A route outside the limit spends nothing of a limited one, and the other way round: the
/// unlimited route answers without rate-limit headers, and the limited one admits exactly its
/// limit afterwards.
#[tokio::test]
async fn an_unlimited_route_and_a_limited_one_never_spend_each_others_budget() {
    let (limiter, _clock) = fixed_window();
    let options = named(2, "limited");
    let runs = Runs::default();
    let app = Router::new()
        .route("/limited", get(runs.ok("limited")))
        .route("/limited/{id}", get(runs.ok("limited-id")))
        .route_layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(options.clone()),
        )
        .route("/free", get(runs.ok("free")))
        .route("/free/{*rest}", get(runs.ok("free-rest")));
    let server = Server::start(app).await;

    for _ in 0..10 {
        let response = server.send(Method::GET, "/free", &[]).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("x-ratelimit-limit").is_none());
        assert_eq!(server.get("/free/limited").await, 200);
    }
    assert_eq!(left(&limiter, "127.0.0.1", &options).await, 2);
    assert_eq!(server.get("/limited").await, 200);
    assert_eq!(server.get("/limited/1").await, 200);
    assert_eq!(server.get("/limited").await, 429);
    assert_eq!(server.get("/limited/2").await, 429);
    // Spent, the free routes still answer, without the headers.
    let response = server.send(Method::GET, "/free", &[]).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("ratelimit").is_none());
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(runs.of("limited") + runs.of("limited-id"), 2);
    assert_eq!(runs.of("free") + runs.of("free-rest"), 21);
}

/// A limit on a `GET` route (a route layer on the method router): `HEAD` runs the `GET`
/// handler, so it is limited with it and never runs it past the budget; methods the route
/// does not answer never run a handler.
#[tokio::test]
async fn head_and_unnamed_methods_never_run_a_get_handler_past_its_limit() {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let app = Router::new().route(
        "/report",
        get(runs.ok("report")).route_layer(
            RateLimitLayer::new(limiter.clone(), ClientIp::peer()).options(named(2, "report")),
        ),
    );
    let server = Server::start(app).await;
    let status =
        |method: Method| async { server.send(method, "/report", &[]).await.status().as_u16() };
    assert_eq!(status(Method::HEAD).await, 200);
    assert_eq!(status(Method::GET).await, 200);
    assert_eq!(status(Method::HEAD).await, 429);
    assert_eq!(status(Method::GET).await, 429);
    for method in [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::TRACE,
    ] {
        assert_eq!(status(method.clone()).await, 405, "{method}");
    }
    for invented in ["PROBE", "get", "Get", "HEADX"] {
        let method = Method::from_bytes(invented.as_bytes()).unwrap();
        let answer = status(method).await;
        assert!([405, 429].contains(&answer), "{invented}: {answer}");
    }
    assert_eq!(runs.of("report"), 2);
}

/// One handler for every method (`any`), per route: each standard method counts in a budget
/// of its own (the documented "per route and method"), `HEAD` in `GET`'s, and every other
/// method, lowercase spellings and CORS preflights in the one shared `unmatched`. So the
/// handler runs at most the limit times the seven standard methods axum routes, plus the
/// shared budget: bounded, never a budget per invented method.
#[tokio::test]
async fn an_any_handler_per_route_runs_at_most_one_budget_per_standard_method() {
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let app = Router::new().route("/rpc", any(runs.ok("rpc"))).layer(
        RateLimitLayer::new(limiter.clone(), ClientIp::peer())
            .options(per_minute(1))
            .per_route(),
    );
    let server = Server::start(app).await;
    let mut methods: Vec<Method> = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
    ]
    .iter()
    .map(|m| Method::from_bytes(m.as_bytes()).unwrap())
    .collect();
    for invented in [
        "PROBE", "get", "post", "Get", "PURGE", "PROPFIND", "M-SEARCH", "X",
    ] {
        methods.push(Method::from_bytes(invented.as_bytes()).unwrap());
    }
    for round in 0..3 {
        for method in &methods {
            let status = server
                .send(method.clone(), "/rpc", &[])
                .await
                .status()
                .as_u16();
            assert!(
                [200, 429].contains(&status),
                "round {round}, {method}: {status}"
            );
        }
        let preflight = server
            .send(
                Method::OPTIONS,
                "/rpc",
                &[
                    ("origin", b"https://a.example"),
                    ("access-control-request-method", b"POST"),
                ],
            )
            .await;
        assert!([200, 429].contains(&preflight.status().as_u16()));
    }
    // GET (with HEAD), POST, PUT, DELETE, PATCH, OPTIONS, TRACE: 7; and `unmatched`: 1.
    assert_eq!(runs.of("rpc"), 8);
    let by_budget = limiter.stats().by_method;
    let names: Vec<&String> = by_budget.keys().collect();
    assert_eq!(by_budget.len(), 8, "{names:?}");
    let unmatched = format!("(limit 1, window 1m) {UNMATCHED}");
    assert_eq!(by_budget[&unmatched].allowed, 1);
}

// ---------------------------------------------------------------------------------------------
// 4. The answer.

/// A refusal half a second before the window ends: `Retry-After` says 1 (never 0, which
/// invites a retry at once), and the body, `RateLimit` and `X-RateLimit-Reset` agree.
#[tokio::test]
async fn a_refusal_just_before_the_window_ends_says_retry_after_1_never_0() {
    let (limiter, clock) = fixed_window();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter, ClientIp::peer()).options(named(1, "edge")));
    let server = Server::start(app).await;
    // START is 40 s into a minute: 19.5 s later, the window ends in 0.5 s.
    clock.advance(Duration::from_millis(19_500));
    let allowed = server.send(Method::GET, "/", &[]).await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(header(&allowed, "x-ratelimit-remaining"), "0");
    let refused = server.send(Method::GET, "/", &[]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(header(&refused, "ratelimit"), "\"edge\";r=0;t=1");
    assert_eq!(header(&refused, "ratelimit-policy"), "\"edge\";q=1;w=60");
    let reset = (START.as_secs() / 60 + 1) * 60;
    assert_eq!(header(&refused, "x-ratelimit-reset"), reset.to_string());
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["retryAfter"], 1);
    assert_eq!(body["code"], "RATE_LIMITED");
    // The window over, the client passes again.
    clock.advance(Duration::from_millis(500));
    assert_eq!(server.get("/").await, 200);
}

/// The token bucket and the sliding log: `Retry-After` is when the next request passes (not
/// the whole window), and a request at that moment passes while one a millisecond earlier
/// does not.
#[tokio::test]
async fn retry_after_is_when_the_next_request_passes_for_every_strategy() {
    for (strategy, limit, wait) in [
        (Strategy::TokenBucket, 4, 15),
        (Strategy::SlidingWindow, 2, 60),
        (Strategy::FixedWindow, 2, 20),
    ] {
        let (limiter, clock) = service(Config::builder().strategy(strategy).build().unwrap());
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(limiter, ClientIp::peer()).options(per_minute(limit)));
        let server = Server::start(app).await;
        for _ in 0..limit {
            assert_eq!(server.get("/").await, 200, "{strategy:?}");
        }
        let refused = server.send(Method::GET, "/", &[]).await;
        assert_eq!(refused.status(), 429, "{strategy:?}");
        assert_eq!(
            header(&refused, "retry-after"),
            wait.to_string(),
            "{strategy:?}"
        );
        clock.advance(Duration::from_secs(wait) - Duration::from_millis(1));
        assert_eq!(server.get("/").await, 429, "{strategy:?}");
        clock.advance(Duration::from_millis(1));
        assert_eq!(server.get("/").await, 200, "{strategy:?}");
    }
}

/// A store that cannot decide answers `503` on every path the layer takes (one limit per
/// route, several limits as one, by status, under a key from a header), and the handler
/// never runs.
#[tokio::test]
async fn a_store_failure_answers_503_on_every_path_of_the_layer_never_200() {
    let limiter = || {
        RateLimitService::with_store(Config::default(), Broken, Arc::new(ManualClock::new(START)))
            .unwrap()
    };
    let api_key = || ApiKey::new("x-api-key", |raw| Some(raw.to_owned()), ClientIp::peer());
    // A layer counting by status needs a store that gives spends back: one that would, but
    // is down.
    let down = Forwarding {
        store: Broken,
        refunds: true,
    };
    let refunding_but_down =
        RateLimitService::with_store(Config::default(), down, Arc::new(ManualClock::new(START)))
            .unwrap();
    let layers = [
        (
            "per route",
            RateLimitLayer::new(limiter(), ClientIp::peer())
                .options(per_minute(5))
                .per_route(),
        ),
        (
            "stacked",
            RateLimitLayer::new(limiter(), ClientIp::peer())
                .limit(per_minute(5).budget("a"))
                .limit(per_minute(50).budget("b")),
        ),
        (
            "stacked per route",
            RateLimitLayer::new(limiter(), ClientIp::peer())
                .limit(per_minute(5).budget("a"))
                .limit(per_minute(50).budget("b"))
                .per_route(),
        ),
        (
            "by status",
            RateLimitLayer::new(refunding_but_down, ClientIp::peer())
                .options(per_minute(5))
                .count_when(|_| true),
        ),
        (
            "api key",
            RateLimitLayer::new(limiter(), api_key()).options(per_minute(5)),
        ),
    ];
    for (name, layer) in layers {
        let runs = Runs::default();
        let app = Router::new()
            .route("/", get(runs.ok("root")))
            .fallback(runs.handler("fallback", 404))
            .layer(layer);
        let server = Server::start(app).await;
        for (path, headers) in [
            ("/", vec![]),
            ("/nope", vec![]),
            ("/", vec![("x-api-key", "k")]),
            ("/", vec![("x-forwarded-for", "1.2.3.4")]),
        ] {
            let headers: Vec<(&str, &[u8])> = headers
                .iter()
                .map(|(n, v): &(&str, &str)| (*n, v.as_bytes()))
                .collect();
            let response = server.send(Method::GET, path, &headers).await;
            assert_eq!(response.status(), 503, "{name} {path}");
            assert_eq!(header(&response, "retry-after"), "1", "{name}");
            let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
            assert_eq!(body["code"], "STORE_FAILED", "{name}");
        }
        assert_eq!(runs.total(), 0, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Header parsing alone (`oneshot`): what reqwest would not send.

/// A request built by hand, with `peer` as its `ConnectInfo`.
fn by_hand(peer: &str, headers: &[(&str, &[u8])]) -> axum::http::Request<Body> {
    let mut request = axum::http::Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, axum::http::HeaderValue::from_bytes(value).unwrap());
    }
    let mut request = request.body(Body::empty()).unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    request
}

/// Behind one proxy, obs-text bytes (not UTF-8, not visible ASCII) in the proxy's own line,
/// the peer as IPv4-mapped IPv6: every request counts under the peer (the proxy's address,
/// written as IPv4), one budget, never one per value.
#[tokio::test]
async fn obs_text_in_the_proxys_line_counts_under_the_mapped_peer_never_a_budget_each() {
    for header in ["x-forwarded-for", "forwarded"] {
        let (limiter, _clock) = fixed_window();
        let options = named(2, "obs-text");
        let key = match header {
            "forwarded" => ClientIp::forwarded(TrustedProxies::count(1)),
            _ => ClientIp::x_forwarded_for(TrustedProxies::count(1)),
        };
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(limiter.clone(), key).options(options.clone()));
        let mut admitted = 0;
        for i in 0..20u8 {
            let digit = [b'0' + i % 10];
            let value: Vec<u8> = match i % 4 {
                0 => [b"203.0.113.", &digit[..], b"\x80"].concat(),
                1 => [b"for=203.0.113.", &digit[..], b"\xff"].concat(),
                2 => [&[0xff, 0x80 + i][..], b", "].concat(),
                _ => [b"\t\t", &[0x80 + i][..], b"\t"].concat(),
            };
            let lines = [
                (header, &b"for=198.51.100.1, 198.51.100.1"[..]),
                (header, &value[..]),
            ];
            let request = by_hand("[::ffff:10.0.0.1]:4000", &lines);
            let response = app.clone().oneshot(request).await.unwrap();
            match response.status().as_u16() {
                200 => admitted += 1,
                429 => {}
                other => panic!("{header} {value:?}: {other}"),
            }
        }
        assert_eq!(admitted, 2, "{header}");
        assert_eq!(left(&limiter, "10.0.0.1", &options).await, 0, "{header}");
    }
}

/// Many requests at once, each with fresh spoofed forwarding headers, on each path a layer
/// decides by (one limit, per route, several limits as one): exactly the limit passes, and
/// the handler runs exactly that often.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_spoofing_requests_admit_exactly_the_limit_on_every_decision_path() {
    for path in ["one limit", "per route", "stacked"] {
        let (limiter, _clock) = fixed_window();
        let layer = RateLimitLayer::new(limiter.clone(), ClientIp::peer());
        let layer = match path {
            "one limit" => layer.options(per_minute(5)),
            "per route" => layer.options(per_minute(5)).per_route(),
            _ => layer
                .limit(per_minute(5).budget("five"))
                .limit(per_minute(500).budget("many")),
        };
        let runs = Runs::default();
        let app = Router::new().route("/", get(runs.ok("root"))).layer(layer);
        let server = Arc::new(Server::start(app).await);
        let requests: Vec<_> = (0..60)
            .map(|i| {
                let server = Arc::clone(&server);
                tokio::spawn(async move {
                    let headers = spoofs(i);
                    let headers: Vec<(&str, &[u8])> =
                        headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
                    let response = server.send(Method::GET, "/", &headers).await;
                    response.status().as_u16()
                })
            })
            .collect();
        let mut statuses = BTreeMap::new();
        for request in requests {
            *statuses.entry(request.await.unwrap()).or_insert(0) += 1;
        }
        assert_eq!(statuses, BTreeMap::from([(200, 5), (429, 55)]), "{path}");
        assert_eq!(runs.of("root"), 5, "{path}");
    }
}

/// Fail closed whatever the hooks and the order of the middleware: an error hook that
/// answers `200` still never passes the request on; a limiter keyed by a principal but run
/// before the authentication that inserts it refuses everyone, signed in or not.
#[tokio::test]
async fn an_error_hook_or_a_misordered_middleware_never_passes_a_request_on() {
    let limiter =
        RateLimitService::with_store(Config::default(), Broken, Arc::new(ManualClock::new(START)))
            .unwrap();
    let runs = Runs::default();
    let hooked = RateLimitLayer::new(limiter, ClientIp::peer()).on_error(|_: &ratelimit::Error| {
        use axum::response::IntoResponse;
        "looks fine".into_response()
    });
    let app = Router::new().route("/", get(runs.ok("root"))).layer(hooked);
    let server = Server::start(app).await;
    let response = server.send(Method::GET, "/", &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "looks fine");
    assert_eq!(runs.total(), 0);

    // The authentication added first runs second: the limiter sees no principal.
    let (limiter, _clock) = fixed_window();
    let runs = Runs::default();
    let app = Router::new()
        .route("/", get(runs.ok("root")))
        .layer(middleware::from_fn(authenticate))
        .layer(RateLimitLayer::new(limiter, Principal::<UserId>::new()).options(per_minute(5)));
    let server = Server::start(app).await;
    for claim in ["Bearer user-1", "Bearer user-2", ""] {
        assert_eq!(
            server.get_with("/", &[("authorization", claim)]).await,
            500,
            "{claim:?}"
        );
    }
    assert_eq!(runs.total(), 0);
}
