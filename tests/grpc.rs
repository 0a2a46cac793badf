//! The tower layer on a real tonic (gRPC) server on loopback, called by a real tonic client
//! (feature `tonic`): exact OK / RESOURCE_EXHAUSTED counts from several clients at once (on
//! memory and, with `redis`, on a real Redis), the retry delay as a `RetryInfo` detail and the
//! rate-limit metadata, spoofed forwarding metadata, stacked limits all or nothing, a store
//! failure under deny, budgets per gRPC method (a streaming call counted when it opens), and an
//! annotated fn's refusal converted into a `Status` by `?`. The service is tonic's generated
//! health service; a layer inside ours counts the calls that reach it. A `ManualClock` drives
//! every limit on memory: nothing sleeps.
//!
//! Every call comes from 127.0.0.1, so tests that need several clients put the server behind
//! "one trusted proxy" (the test client) and name the client in `x-forwarded-for` metadata.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, Config, Module, RateLimitService, Strategy};
use ratelimit_tests::grpc::GrpcServer as Grpc;
use ratelimit_tests::web::{behind_one_proxy, fixed_window, per_minute};
use ratelimit_tests::{Broken, START};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const CHECK: &str = "/grpc.health.v1.Health/Check";
const WATCH: &str = "/grpc.health.v1.Health/Watch";

/// The calls these tests make.
trait Calls {
    async fn check_as(&self, ip: &str) -> Result<MetadataMap, Status>;
    async fn watch_as(&self, ip: &str) -> Result<(), Status>;
    async fn call_path_as(&self, path: &'static str, ip: &str) -> Result<(), Status>;
}

impl Calls for Grpc {
    /// A `Check` call as the client `ip` (in `x-forwarded-for`): the response's metadata, or
    /// the status it ended with.
    async fn check_as(&self, ip: &str) -> Result<MetadataMap, Status> {
        let response = HealthClient::new(self.channel.clone())
            .check(as_client(HealthCheckRequest::default(), ip))
            .await?;
        Ok(response.metadata().clone())
    }

    /// Opens a `Watch` stream as the client `ip`, and reads its first message.
    async fn watch_as(&self, ip: &str) -> Result<(), Status> {
        let response = HealthClient::new(self.channel.clone())
            .watch(as_client(HealthCheckRequest::default(), ip))
            .await?;
        let first = response.into_inner().message().await?;
        assert!(first.is_some(), "the stream opened and sent nothing");
        Ok(())
    }

    /// A unary call of `path`, a method no service of the server has, as the client `ip`.
    async fn call_path_as(&self, path: &'static str, ip: &str) -> Result<(), Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<(), ()>::default();
        let path = PathAndQuery::from_static(path);
        grpc.unary(as_client((), ip), path, codec).await.map(drop)
    }
}

fn as_client<T>(message: T, ip: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("x-forwarded-for", ip.parse().unwrap());
    request
}

/// The value of `name` in `metadata`, which must have it.
fn value<'a>(metadata: &'a MetadataMap, name: &str) -> &'a str {
    metadata
        .get(name)
        .unwrap_or_else(|| panic!("no {name} metadata"))
        .to_str()
        .unwrap()
}

/// `C` clients (`198.51.100.<c>` behind one proxy) making `each` `Check` calls at once: how
/// many each got OK, and RESOURCE_EXHAUSTED (any other answer fails the test).
async fn statuses_by_client<const C: usize>(
    server: &Arc<Grpc>,
    each: usize,
) -> ([usize; C], [usize; C]) {
    let calls: Vec<_> = (0..C)
        .flat_map(|c| (0..each).map(move |_| c))
        .map(|c| {
            let server = Arc::clone(server);
            tokio::spawn(async move { (c, server.check_as(&format!("198.51.100.{c}")).await) })
        })
        .collect();
    let (mut ok, mut exhausted) = ([0; C], [0; C]);
    for call in calls {
        match call.await.unwrap() {
            (c, Ok(_)) => ok[c] += 1,
            (c, Err(status)) => {
                refused(&status);
                exhausted[c] += 1;
            }
        }
    }
    (ok, exhausted)
}

fn refused(status: &Status) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "RATE_LIMITED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_exactly_their_limit() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(3));
    let server = Arc::new(Grpc::start(layer.grpc()).await);
    let (ok, exhausted) = statuses_by_client::<4>(&server, 5).await;
    assert_eq!(ok, [3; 4]);
    assert_eq!(exhausted, [2; 4]);
    assert_eq!(server.runs(), 12);
}

#[tokio::test]
async fn a_refusal_carries_its_retry_delay_as_retry_info_and_the_rate_limit_metadata() {
    let (limiter, clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    let first = server.check_as("198.51.100.1").await.unwrap();
    assert_eq!(value(&first, "x-ratelimit-limit"), "2");
    assert_eq!(value(&first, "x-ratelimit-remaining"), "1");
    assert_eq!(value(&first, "ratelimit-policy"), "\"default\";q=2;w=60");
    assert!(first.get("retry-after").is_none());
    server.check_as("198.51.100.1").await.unwrap();
    // START is 40 s into a minute: the window ends 20 s later.
    let status = server.check_as("198.51.100.1").await.unwrap_err();
    refused(&status);
    let retry = status.get_details_retry_info().expect("a RetryInfo detail");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(20)));
    let metadata = status.metadata();
    assert_eq!(value(metadata, "retry-after"), "20");
    assert_eq!(value(metadata, "x-ratelimit-limit"), "2");
    assert_eq!(value(metadata, "x-ratelimit-remaining"), "0");
    assert_eq!(value(metadata, "ratelimit"), "\"default\";r=0;t=20");
    assert_eq!(server.runs(), 2);
    // Admitted again once the window has passed, exactly.
    clock.advance(Duration::from_secs(19));
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    clock.advance(Duration::from_secs(1));
    server.check_as("198.51.100.1").await.unwrap();
    assert_eq!(server.runs(), 3);
    assert_eq!(START.as_secs() % 60, 40);
}

#[tokio::test]
async fn forwarding_metadata_is_ignored_past_the_trusted_proxies() {
    // No proxy trusted: the peer is the client, whatever `x-forwarded-for` claims.
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::peer()).options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    server.check_as("198.51.100.1").await.unwrap();
    server.check_as("198.51.100.2").await.unwrap();
    refused(&server.check_as("198.51.100.3").await.unwrap_err());
    // One proxy trusted: the client is the entry it added, not what the client wrote before.
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
        .options(per_minute(2));
    let server = Grpc::start(layer.grpc()).await;
    server.check_as("203.0.113.1, 198.51.100.9").await.unwrap();
    server.check_as("203.0.113.2, 198.51.100.9").await.unwrap();
    refused(
        &server
            .check_as("203.0.113.3, 198.51.100.9")
            .await
            .unwrap_err(),
    );
    server.check_as("198.51.100.10").await.unwrap();
}

#[tokio::test]
async fn stacked_limits_refuse_as_one_and_a_refused_call_spends_from_none() {
    let (limiter, _clock) = fixed_window();
    let (long, short) = (
        per_minute(5).budget("grpc-long"),
        per_minute(2).budget("grpc-short"),
    );
    let layer = RateLimitLayer::new(limiter.clone(), behind_one_proxy())
        .limit(long.clone())
        .limit(short.clone());
    let server = Grpc::start(layer.grpc()).await;
    for _ in 0..2 {
        server.check_as("198.51.100.1").await.unwrap();
    }
    for _ in 0..3 {
        refused(&server.check_as("198.51.100.1").await.unwrap_err());
    }
    assert_eq!(server.runs(), 2);
    let status = limiter.status("198.51.100.1", &long).await.unwrap();
    assert_eq!(
        status.remaining, 3,
        "a refused call spent from the long limit"
    );
}

#[tokio::test]
async fn a_store_that_cannot_answer_is_unavailable_and_the_call_never_reaches_the_service() {
    let config = Config::builder().default_limit(5).build().unwrap();
    let clock = Arc::new(ratelimit::ManualClock::new(START));
    let limiter = RateLimitService::with_store(config, Broken, clock).unwrap();
    let server = Grpc::start(RateLimitLayer::new(limiter, behind_one_proxy()).grpc()).await;
    let status = server.check_as("198.51.100.1").await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "STORE_FAILED");
    assert_eq!(value(status.metadata(), "retry-after"), "1");
    assert!(status.get_details_retry_info().is_none());
    assert_eq!(server.runs(), 0);
}

#[tokio::test]
async fn each_listed_method_has_a_budget_and_a_stream_is_counted_when_it_opens() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy())
        .options(per_minute(2))
        .per_method([CHECK, WATCH]);
    let server = Grpc::start(layer.grpc()).await;
    for _ in 0..2 {
        server.check_as("198.51.100.1").await.unwrap();
    }
    refused(&server.check_as("198.51.100.1").await.unwrap_err());
    // The stream's own budget: two opened, the third refused as it opens.
    for _ in 0..2 {
        server.watch_as("198.51.100.1").await.unwrap();
    }
    refused(&server.watch_as("198.51.100.1").await.unwrap_err());
    // Paths not listed share one budget, whatever the client invents.
    let unknown = |path| server.call_path_as(path, "198.51.100.1");
    let status = unknown("/grpc.health.v1.Health/Invented")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    let status = unknown("/other.Service/Method").await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    refused(&unknown("/another.Service/Method").await.unwrap_err());
    assert_eq!(server.runs(), 6);
}

#[tokio::test]
async fn a_method_path_that_is_not_one_refuses_every_call_as_a_configuration_error() {
    let (limiter, _clock) = fixed_window();
    let layer = RateLimitLayer::new(limiter, behind_one_proxy())
        .options(per_minute(2))
        .per_method([CHECK, "Check"]);
    let server = Grpc::start(layer.grpc()).await;
    let status = server.check_as("198.51.100.1").await.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(status.message(), "INVALID_CONFIG");
    assert_eq!(server.runs(), 0);
}

#[rate_limit(limit = 2, window = "1m", key = user)]
async fn lookup(user: &str) -> Result<usize, Status> {
    Ok(user.len())
}

#[tokio::test]
async fn an_annotated_fn_returning_status_refuses_with_resource_exhausted_by_itself() {
    let module = TestModule::new(Module::builder().strategy(Strategy::FixedWindow)).unwrap();
    module
        .scope(async {
            assert_eq!(lookup("user:1").await.unwrap(), 6);
            assert_eq!(lookup("user:1").await.unwrap(), 6);
            let status = lookup("user:1").await.unwrap_err();
            refused(&status);
            let retry = status.get_details_retry_info().expect("a RetryInfo detail");
            assert!(retry.retry_delay.is_some_and(|d| d > Duration::ZERO));
            assert_eq!(value(status.metadata(), "x-ratelimit-remaining"), "0");
            assert!(status.metadata().get("retry-after").is_some());
        })
        .await;
    // Without a running limiter the call is refused too, never passed.
    let status = lookup("user:1").await.unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(status.message(), "NOT_INITIALIZED");
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;
    use ratelimit::{FailurePolicy, Options, RedisOptions};
    use ratelimit_tests::redis_server::{prefix, RedisServer};

    fn redis(server: &RedisServer, policy: FailurePolicy, name: &str) -> RateLimitService {
        let options = RedisOptions::new(server.url())
            .timeout(Duration::from_millis(300))
            .on_failure(policy);
        ratelimit_tests::redis_service(options, &prefix(name))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_clients_on_redis_get_exactly_their_limit() {
        let redis_server = RedisServer::start();
        let limiter = redis(&redis_server, FailurePolicy::Deny, "grpc-exact");
        let day = Options::new().limit(10).window(Duration::from_secs(86_400));
        let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(day);
        let server = Arc::new(Grpc::start(layer.grpc()).await);
        let (ok, exhausted) = statuses_by_client::<3>(&server, 15).await;
        assert_eq!(ok, [10; 3]);
        assert_eq!(exhausted, [5; 3]);
        assert_eq!(server.runs(), 30);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_redis_is_unavailable_under_deny() {
        let mut redis_server = RedisServer::start();
        let limiter = redis(&redis_server, FailurePolicy::Deny, "grpc-deny");
        let layer = RateLimitLayer::new(limiter, behind_one_proxy()).options(per_minute(5));
        let server = Grpc::start(layer.grpc()).await;
        let first = server.check_as("198.51.100.7").await.unwrap();
        assert_eq!(value(&first, "x-ratelimit-remaining"), "4");
        redis_server.stop();
        let status = server.check_as("198.51.100.7").await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            ["STORE_FAILED", "STORE_TIMEOUT"].contains(&status.message()),
            "{status:?}"
        );
        assert_eq!(server.runs(), 1);
    }
}
