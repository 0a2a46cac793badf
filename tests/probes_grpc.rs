//! Probes of the tower layer's gRPC mode (feature `tonic`): ways a call could get past a spent
//! budget, or be miscounted, on a real tonic server and client on loopback. Path variants of a
//! method counted `per_method`, forwarding metadata over several lines and in garbage, a call
//! the client gives up while the store decides, and the module shut down or replaced under a
//! `from_module` layer. A `ManualClock` drives every limit: nothing sleeps for timing.
//!
//! A probe that finds a hole is kept `#[ignore = "FOUND: .."]`; the others hold.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::store::{Request as StoreRequest, Stacked, Store};
use ratelimit::{Config, Decision, ManualClock, MemoryStore, Module, RateLimitService, Strategy};
use ratelimit_tests::grpc::GrpcServer as Grpc;
use ratelimit_tests::web::{behind_one_proxy, fixed_window, per_minute};
use ratelimit_tests::START;
use tokio::sync::Notify;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

const CHECK: &str = "/grpc.health.v1.Health/Check";

/// The calls these probes make.
trait Calls {
    async fn check_with(
        &self,
        metadata: &[(&'static str, AsciiMetadataValue)],
    ) -> Result<MetadataMap, Status>;
    async fn check_as(&self, ip: &str) -> Result<MetadataMap, Status>;
    async fn check_at(&self, path: &str, ip: &str) -> Result<HealthCheckResponse, Status>;
}

impl Calls for Grpc {
    /// A `Check` call with `metadata` (name, value; several values of one name are appended).
    async fn check_with(
        &self,
        metadata: &[(&'static str, AsciiMetadataValue)],
    ) -> Result<MetadataMap, Status> {
        let mut request = Request::new(HealthCheckRequest::default());
        for (name, value) in metadata {
            request.metadata_mut().append(*name, value.clone());
        }
        let response = HealthClient::new(self.channel.clone())
            .check(request)
            .await?;
        Ok(response.metadata().clone())
    }

    async fn check_as(&self, ip: &str) -> Result<MetadataMap, Status> {
        self.check_with(&[("x-forwarded-for", ip.parse().unwrap())])
            .await
    }

    /// A health `Check` message sent to `path` (any path the client chooses) as the client `ip`:
    /// `Ok` only when the health service's `Check` ran and answered.
    async fn check_at(&self, path: &str, ip: &str) -> Result<HealthCheckResponse, Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
        let path: PathAndQuery = path.parse().unwrap();
        let mut request = Request::new(HealthCheckRequest::default());
        request
            .metadata_mut()
            .insert("x-forwarded-for", ip.parse().unwrap());
        grpc.unary(request, path, codec)
            .await
            .map(tonic::Response::into_inner)
    }
}

fn refused(status: &Status) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "RATE_LIMITED");
}

fn remaining(metadata: &MetadataMap) -> &str {
    metadata
        .get("x-ratelimit-remaining")
        .expect("x-ratelimit-remaining")
        .to_str()
        .unwrap()
}

/// Every variant of `Check`'s path a client might send once `Check`'s budget is spent: none
/// reaches `Check` (each is refused, or is a path tonic does not route to it).
#[tokio::test]
async fn no_path_variant_reaches_a_method_whose_budget_is_spent() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy())
        .options(per_minute(2))
        .per_method([CHECK]);
    let server = Grpc::start(layer.grpc()).await;
    let ip = "198.51.100.1";
    for _ in 0..2 {
        server.check_at(CHECK, ip).await.unwrap();
    }
    refused(&server.check_at(CHECK, ip).await.unwrap_err());
    let variants = [
        "/grpc.health.v1.Health/Check?x=1",
        "/grpc.health.v1.Health/Check?",
        "/grpc.health.v1.Health/Check/",
        "/grpc.health.v1.Health/Check/extra",
        "/grpc.health.v1.Health//Check",
        "//grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/check",
        "/grpc.health.v1.health/Check",
        "/GRPC.HEALTH.V1.HEALTH/CHECK",
        "/grpc.health.v1.Health/%43heck",
        "/grpc.health.v1.Health%2FCheck",
        "/grpc%2Ehealth.v1.Health/Check",
        "/grpc.health.v1.Health/Check%00",
        "/grpc.health.v1.Health/./Check",
        "/x/../grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Check#frag",
    ];
    let mut reached = Vec::new();
    for variant in variants {
        let Ok(path) = variant.parse::<PathAndQuery>() else {
            continue; // not sendable at all
        };
        match server.check_at(path.as_str(), ip).await {
            Ok(_) => reached.push(variant),
            Err(status) => assert!(
                [Code::ResourceExhausted, Code::Unimplemented].contains(&status.code()),
                "{variant}: {status:?}"
            ),
        }
    }
    assert!(
        reached.is_empty(),
        "reached Check past its spent budget: {reached:?}"
    );
    // `Check` itself is still refused, and a query string is counted as the method.
    refused(&server.check_at(CHECK, ip).await.unwrap_err());
    assert_eq!(
        server.runs(),
        2 + 2,
        "Check twice, then two unmatched variants"
    );
}

/// `per_method([])`: no method has a budget of its own, every call shares one.
#[tokio::test]
async fn an_empty_method_list_counts_every_call_in_one_budget() {
    let (limiter, _clock) = fixed_window();
    let methods: [&str; 0] = [];
    let layer = RateLimitLayer::new(limiter, behind_one_proxy())
        .options(per_minute(2))
        .per_method(methods);
    let server = Grpc::start(layer.grpc()).await;
    server.check_as("198.51.100.1").await.unwrap();
    let status = server
        .check_at("/other.Service/Method", "198.51.100.1")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    assert_eq!(server.runs(), 2);
}

/// Behind one trusted proxy, the client is the last entry over every `x-forwarded-for` line:
/// what the client writes in earlier lines, or in garbage, never gives it a new budget.
#[tokio::test]
async fn forwarding_metadata_over_several_lines_or_in_garbage_never_makes_a_new_budget() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
        .options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let v = |s: &str| s.parse::<AsciiMetadataValue>().unwrap();
    let xff = "x-forwarded-for";
    // The proxy's line last, the client's spoofed lines before it.
    for spoof in ["203.0.113.1", "203.0.113.2"] {
        server
            .check_with(&[(xff, v(spoof)), (xff, v("198.51.100.9"))])
            .await
            .unwrap();
    }
    refused(
        &server
            .check_with(&[(xff, v("203.0.113.3")), (xff, v("198.51.100.9"))])
            .await
            .unwrap_err(),
    );
    // A thousand entries: still the last.
    let many = format!("{}198.51.100.9", "203.0.113.77, ".repeat(1_000));
    refused(&server.check_with(&[(xff, v(&many))]).await.unwrap_err());
    // The trusted entry unreadable (garbage, non-ASCII bytes, empty): counted under the peer
    // (127.0.0.1), one budget whatever the garbage.
    let garbage: [AsciiMetadataValue; 4] = [
        v("not-an-ip"),
        AsciiMetadataValue::try_from(&b"198.51.100.\xff"[..]).unwrap(),
        v(""),
        v("198.51.100.9, ,"),
    ];
    let mut outcomes = Vec::new();
    for g in &garbage {
        outcomes.push(server.check_with(&[(xff, g.clone())]).await.is_ok());
    }
    assert_eq!(outcomes, [true, true, false, false], "garbage keys");
    // With no header at all: the peer too, whose budget the garbage spent.
    refused(&server.check_with(&[]).await.unwrap_err());
    assert_eq!(server.runs(), 4);
}

/// A store that holds its first decision until the call is dropped, and reports the drop.
struct Gate {
    memory: MemoryStore,
    first: AtomicBool,
    entered: Arc<Notify>,
    dropped: Arc<Notify>,
}

struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl Store for Gate {
    async fn decide(&self, request: StoreRequest<'_>) -> Result<Decision, ratelimit::Error> {
        if self.first.swap(false, Ordering::SeqCst) {
            let _guard = OnDrop(Arc::clone(&self.dropped));
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
        Store::decide(&self.memory, request).await
    }

    async fn decide_all(&self, request: Stacked<'_>) -> Result<Vec<Decision>, ratelimit::Error> {
        if self.first.swap(false, Ordering::SeqCst) {
            let _guard = OnDrop(Arc::clone(&self.dropped));
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
        Store::decide_all(&self.memory, request).await
    }

    async fn reset(&self, key: &str) -> Result<bool, ratelimit::Error> {
        Store::reset(&self.memory, key).await
    }
}

/// A client that gives up while the store decides: the call is dropped on the server (and
/// counted as abandoned), never passed on, and spends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_the_store_decides_is_never_passed_and_spends_nothing() {
    let (entered, dropped) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let gate = Gate {
        memory: MemoryStore::new(),
        first: AtomicBool::new(true),
        entered: Arc::clone(&entered),
        dropped: Arc::clone(&dropped),
    };
    let config = Config::builder()
        .strategy(Strategy::FixedWindow)
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let limiter = RateLimitService::with_store(config, gate, clock).unwrap();
    let layer = RateLimitLayer::new(limiter.clone(), behind_one_proxy()).options(per_minute(2));
    let server = Arc::new(Grpc::start(layer.grpc()).await);
    let call = {
        let server = Arc::clone(&server);
        tokio::spawn(async move { server.check_as("198.51.100.1").await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), entered.notified())
        .await
        .expect("the store was asked");
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::timeout(std::time::Duration::from_secs(10), dropped.notified())
        .await
        .expect("the server dropped the call when the client gave up");
    assert_eq!(server.runs(), 0, "a cancelled call reached the service");
    // The store's future is dropped before the call's abandonment is counted (on a server
    // thread): wait for the count, bounded, rather than for a time.
    for _ in 0..10_000 {
        if limiter.stats().total.checks > 0 {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
    let stats = limiter.stats().total;
    assert_eq!(stats.allowed, 0, "{stats:?}");
    assert_eq!(stats.abandoned, 1, "{stats:?}");
    // Nothing spent: the next two calls are the budget's two.
    let first = server.check_as("198.51.100.1").await.unwrap();
    assert_eq!(remaining(&first), "1");
    server.check_as("198.51.100.1").await.unwrap();
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    assert_eq!(server.runs(), 2);
}

/// A `from_module` layer with no module, then a module, then it shut down, then another:
/// refused with `NOT_INITIALIZED` whenever none runs, and decided by the one running.
#[tokio::test]
async fn a_module_layer_refuses_when_no_module_runs_and_follows_the_running_one() {
    let layer = RateLimitLayer::from_module(behind_one_proxy()).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let not_initialized = |status: Status| {
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        assert_eq!(status.message(), "NOT_INITIALIZED");
    };
    not_initialized(server.check_as("198.51.100.1").await.unwrap_err());
    let clock = ManualClock::new(START);
    let module = Module::builder()
        .strategy(Strategy::FixedWindow)
        .clock(clock.clone())
        .init()
        .unwrap();
    for _ in 0..2 {
        server.check_as("198.51.100.1").await.unwrap();
    }
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    module.shutdown();
    not_initialized(server.check_as("198.51.100.1").await.unwrap_err());
    not_initialized(server.check_as("198.51.100.2").await.unwrap_err());
    // A new module: its own (empty) store, its own limits.
    let module = Module::builder()
        .strategy(Strategy::FixedWindow)
        .clock(clock.clone())
        .init()
        .unwrap();
    for _ in 0..2 {
        server.check_as("198.51.100.1").await.unwrap();
    }
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    assert_eq!(module.stats().total.allowed, 2);
    drop(module);
    not_initialized(server.check_as("198.51.100.1").await.unwrap_err());
    assert_eq!(server.runs(), 4);
    // A call waiting in the module's queue when it shuts down: refused, never admitted.
    let module = Module::builder()
        .strategy(Strategy::FixedWindow)
        .clock(clock)
        .queue_timeout("1m")
        .init()
        .unwrap();
    let layer = RateLimitLayer::from_module(behind_one_proxy()).options(per_minute(1).queue(true));
    let queued = Arc::new(Grpc::start(layer.grpc()).await);
    queued.check_as("198.51.100.5").await.unwrap();
    let waiter = {
        let queued = Arc::clone(&queued);
        tokio::spawn(async move { queued.check_as("198.51.100.5").await })
    };
    for _ in 0..5_000 {
        if module.service().stats().queue.depth == 1 {
            break;
        }
        // Polls for the waiter to be in the queue (a real server's task): no limit is timed.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(module.service().stats().queue.depth, 1, "the call waits");
    drop(module);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was woken by the shutdown")
        .unwrap();
    not_initialized(woken.unwrap_err());
    assert_eq!(queued.runs(), 1);
}

/// RFC 7239 `Forwarded` behind one proxy that appends its element to the client's line (a
/// comma-joined list, as the same header in several lines means): the client ends its own
/// element with an unclosed quoted string, which swallows the comma before the proxy's
/// element, so the line parses as one element whose `for=` is the client's choice.
#[tokio::test]

async fn an_unclosed_quote_in_forwarded_cannot_swallow_the_proxys_element() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::forwarded(TrustedProxies::count(1)))
        .options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let proxied = |client_wrote: &str| {
        // What the proxy passes on: the client's value, then its own element for the peer.
        format!("{client_wrote}, for=198.51.100.9")
            .parse::<AsciiMetadataValue>()
            .unwrap()
    };
    let mut admitted = 0;
    for n in 1..=5 {
        let spoof = proxied(&format!("for=203.0.113.{n};x=\""));
        if server.check_with(&[("forwarded", spoof)]).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 2,
        "one client (198.51.100.9) admitted past its limit of 2"
    );
}

/// The same, with the trust given as networks (the peer, 127.0.0.1, is the proxy).
#[tokio::test]

async fn an_unclosed_quote_in_forwarded_cannot_swallow_a_trusted_networks_element() {
    let (limiter, _clock) = fixed_window();
    let trusted = TrustedProxies::cidrs(["127.0.0.0/8"]).unwrap();
    let layer = RateLimitLayer::new(limiter, ClientIp::forwarded(trusted)).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let mut admitted = 0;
    for n in 1..=5 {
        let value = format!("for=203.0.113.{n};x=\", for=198.51.100.9");
        let value = value.parse::<AsciiMetadataValue>().unwrap();
        if server.check_with(&[("forwarded", value)]).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2, "one client admitted past its limit of 2");
}

/// A method path that is not one refuses every call as a configuration error, whatever the
/// order of the builder's calls: `options` (or a first `limit`) after `per_method` must not
/// forget the problem.
#[tokio::test]
async fn an_invalid_method_path_stays_a_configuration_error_after_options() {
    let mut answers = Vec::new();
    for order in ["options", "limit"] {
        let (limiter, _clock) = fixed_window();
        let layer = RateLimitLayer::new(limiter, behind_one_proxy()).per_method([CHECK, "Check"]);
        let layer = match order {
            "options" => layer.options(per_minute(2)),
            _ => layer.limit(per_minute(2)),
        };
        let server = Grpc::start(layer.grpc()).await;
        let answer = match server.check_as("198.51.100.1").await {
            Ok(_) => "OK".to_owned(),
            Err(status) => format!("{:?} {}", status.code(), status.message()),
        };
        answers.push((order, answer, server.runs()));
    }
    assert_eq!(
        answers,
        [
            ("options", "Internal INVALID_CONFIG".to_owned(), 0),
            ("limit", "Internal INVALID_CONFIG".to_owned(), 0),
        ]
    );
}

/// Binary (`-bin`) metadata of the same name is another header: it never replaces the
/// client's address.
#[tokio::test]
async fn binary_forwarding_metadata_is_not_read() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(1));
    let server = Grpc::start(layer.grpc()).await;
    for n in 1..=3u8 {
        let mut request = Request::new(HealthCheckRequest::default());
        request.metadata_mut().insert_bin(
            "x-forwarded-for-bin",
            tonic::metadata::BinaryMetadataValue::from_bytes(&[198, 51, 100, n]),
        );
        let result = HealthClient::new(server.channel.clone())
            .check(request)
            .await;
        assert_eq!(result.is_ok(), n == 1, "call {n}");
    }
    assert_eq!(server.runs(), 1);
}

/// The control of the two probes above: the proxy's element in a line of its own, which the
/// client's unclosed quote cannot reach. One budget for the client, whatever it writes.
#[tokio::test]
async fn an_unclosed_quote_in_forwarded_stays_in_its_own_line() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::forwarded(TrustedProxies::count(1)))
        .options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let v = |s: String| s.parse::<AsciiMetadataValue>().unwrap();
    let mut admitted = 0;
    for n in 1..=5 {
        let lines = [
            ("forwarded", v(format!("for=203.0.113.{n};x=\""))),
            ("forwarded", v("for=198.51.100.9".to_owned())),
        ];
        if server.check_with(&lines).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2);
}

/// Stacked limits: a call given up while the store decides them as one is dropped, counted
/// once as abandoned, never passed on, and spends from none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_stacked_limits_are_decided_is_never_passed() {
    let (entered, dropped) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let gate = Gate {
        memory: MemoryStore::new(),
        first: AtomicBool::new(true),
        entered: Arc::clone(&entered),
        dropped: Arc::clone(&dropped),
    };
    let config = Config::builder()
        .strategy(Strategy::FixedWindow)
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let limiter = RateLimitService::with_store(config, gate, clock).unwrap();
    let (long, short) = (
        per_minute(5).budget("probe-long"),
        per_minute(2).budget("probe-short"),
    );
    let layer = RateLimitLayer::new(limiter.clone(), behind_one_proxy())
        .limit(long.clone())
        .limit(short);
    let server = Arc::new(Grpc::start(layer.grpc()).await);
    let call = {
        let server = Arc::clone(&server);
        tokio::spawn(async move { server.check_as("198.51.100.1").await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), entered.notified())
        .await
        .expect("the store was asked");
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::timeout(std::time::Duration::from_secs(10), dropped.notified())
        .await
        .expect("the server dropped the call when the client gave up");
    for _ in 0..10_000 {
        if limiter.stats().total.abandoned > 0 {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
    assert_eq!(server.runs(), 0, "a cancelled call reached the service");
    let stats = limiter.stats().total;
    assert_eq!((stats.allowed, stats.abandoned), (0, 1), "{stats:?}");
    let status = limiter.status("198.51.100.1", &long).await.unwrap();
    assert_eq!(
        status.remaining, 5,
        "the cancelled call spent from the long limit"
    );
    for _ in 0..2 {
        server.check_as("198.51.100.1").await.unwrap();
    }
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    assert_eq!(server.runs(), 2);
}

/// A stream is counted once, when it opens: the messages an admitted `Watch` stream carries
/// afterwards spend nothing, and a refused one never opens.
#[tokio::test]
async fn an_admitted_streams_later_messages_are_not_counted() {
    use tonic_health::ServingStatus;
    let (limiter, _clock) = fixed_window();
    let options = per_minute(2).budget("probe-watch");
    let layer = RateLimitLayer::new(limiter.clone(), behind_one_proxy()).options(options.clone());
    let server = Grpc::start(layer.grpc()).await;
    let mut stream = HealthClient::new(server.channel.clone())
        .watch(Request::new(HealthCheckRequest::default()))
        .await
        .map(tonic::Response::into_inner);
    // No forwarding metadata: the key is the peer's.
    let stream = stream.as_mut().expect("the first stream opens");
    assert!(stream.message().await.unwrap().is_some());
    for status in [
        ServingStatus::NotServing,
        ServingStatus::Serving,
        ServingStatus::NotServing,
    ] {
        server.reporter.set_service_status("", status).await;
        assert!(stream.message().await.unwrap().is_some());
    }
    let level = limiter.status("127.0.0.1", &options).await.unwrap();
    assert_eq!(level.remaining, 1, "later messages were counted");
    let second = HealthClient::new(server.channel.clone())
        .watch(Request::new(HealthCheckRequest::default()))
        .await;
    assert!(second.is_ok());
    let third = HealthClient::new(server.channel.clone())
        .watch(Request::new(HealthCheckRequest::default()))
        .await;
    refused(&third.unwrap_err());
    assert_eq!(server.runs(), 2);
}

/// `x-forwarded-for` has no quoting: whatever the client ends its part with (a quote, a
/// backslash, a semicolon, an empty entry), the proxy's entry joined to the same line stays
/// the last, and the client one budget.
#[tokio::test]
async fn a_client_suffix_in_x_forwarded_for_cannot_swallow_the_proxys_entry() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let mut admitted = 0;
    for suffix in ["\"", "\\", ";x=\"", ",", "203.0.113.1\"", "[203.0.113.2"] {
        let value = format!("203.0.113.9{suffix}, 198.51.100.9");
        let value = value.parse::<AsciiMetadataValue>().unwrap();
        if server
            .check_with(&[("x-forwarded-for", value)])
            .await
            .is_ok()
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2);
}
