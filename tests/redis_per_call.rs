//! Issue 28 on Redis: one resolution, one key composition and one store round trip per call,
//! counted against a real `redis-server` for every entry point (an annotated fn, the service's
//! `consume`, a prepared site's `consume`, and the HTTP layer with feature `axum`).
//!
//! - **Round trips** are counted by the server: the script calls `INFO commandstats` reports.
//! - **Store calls** are counted by a store of our own around a [`RedisStore`], written
//!   against the public [`Store`] trait ([`Counting`]): which of `decide_now` and `decide`
//!   each call reaches, and with which key. Every call composes its key before it asks the
//!   store, so two asks with one key are two compositions: one ask of each kind per call, on
//!   one key, is one composition handed from the first to the second.
//! - **Resolutions** are counted by the same store: the service asks the store whether it
//!   supports a quota each time it resolves one with overrides (here: every limit, set by
//!   the call's options or the attribute), and at no other time while deciding.
//!
//! Exact counts; Redis' clock decides, a day's window so none ends during a test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    Decision, Error, LeaseOptions, Module, Options, Quota, QuotaError, RedisOptions, RedisStore,
    StoreConfig, Strategy,
};
use ratelimit_tests::redis_server::{prefix, script_calls, RedisServer};

const DAY: Duration = Duration::from_secs(86_400);

/// Calls made per entry point.
const CALLS: u64 = 40;

#[ratelimit::rate_limit(limit = 1000, window = "1d", strategy = "fixed-window", key = user)]
async fn annotated(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// [`annotated`] for one test alone: a fn holds one prepared site (for the scope or module
/// that last called it), so tests running at once on one fn prepare it again in turn.
#[ratelimit::rate_limit(limit = 1000, window = "1d", strategy = "fixed-window", key = user)]
async fn annotated_alone(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// The same limit as the annotated fn's, for the service's methods and the HTTP layer.
fn options() -> Options {
    Options::new()
        .limit(1000)
        .window(DAY)
        .strategy(Strategy::FixedWindow)
        .budget("per-call")
}

fn redis_options(server: &RedisServer) -> RedisOptions {
    RedisOptions::new(server.url()).timeout(Duration::from_secs(10))
}

/// Which of the store's single-key decisions a call reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// `decide_now`, answered in the process or not.
    Now,
    /// `decide`, awaited.
    Awaited,
}

/// What the service asked of a [`Counting`] store.
#[derive(Debug, Default)]
struct Seen {
    asked: Vec<(Asked, String)>,
    supports: u64,
}

/// A [`RedisStore`] behind a store of our own that records every decision asked of it (and
/// the key it was asked on) and every quota it was asked to support, then forwards.
#[derive(Clone)]
struct Counting {
    inner: RedisStore,
    seen: Arc<Mutex<Seen>>,
}

impl Counting {
    fn new(inner: RedisStore) -> Self {
        Counting {
            inner,
            seen: Arc::default(),
        }
    }

    fn ask(&self, asked: Asked, key: &str) {
        self.seen
            .lock()
            .unwrap()
            .asked
            .push((asked, key.to_owned()));
    }

    /// The decisions asked since the last take.
    fn take(&self) -> Vec<(Asked, String)> {
        std::mem::take(&mut self.seen.lock().unwrap().asked)
    }

    /// Quotas the service asked about so far: one per resolution.
    fn resolutions(&self) -> u64 {
        self.seen.lock().unwrap().supports
    }
}

impl Store for Counting {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.ask(Asked::Awaited, request.key().as_str());
        Store::decide(&self.inner, request).await
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.inner, stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.inner, key).await
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.ask(Asked::Now, request.key().as_str());
        Store::decide_now(&self.inner, request)
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(&self.inner, stacked)
    }

    fn decides_at_once(&self) -> bool {
        Store::decides_at_once(&self.inner)
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        self.seen.lock().unwrap().supports += 1;
        Store::supports(&self.inner, quota)
    }
}

/// A module for the annotated fn, on `store`, its keys under a fresh prefix.
fn module(store: StoreConfig, name: &str) -> TestModule {
    let builder = Module::builder().key_prefix(prefix(name)).store(store);
    TestModule::new(builder).unwrap()
}

/// Every entry point, one call each with user key `key`: the name and the call.
#[derive(Clone, Copy, Debug)]
enum Entry {
    Annotated,
    Consume,
    Prepared,
    #[cfg(feature = "axum")]
    Http,
}

impl Entry {
    const ALL: &'static [Entry] = &[
        Entry::Annotated,
        Entry::Consume,
        Entry::Prepared,
        #[cfg(feature = "axum")]
        Entry::Http,
    ];
}

/// What the entry points call through, built once per module (the prepared site and the HTTP
/// layer are held by their callers, as a caller would).
struct Callers {
    module: TestModule,
    /// Calls [`annotated_alone`] instead of [`annotated`].
    alone: bool,
    prepared: ratelimit::Prepared,
    #[cfg(feature = "axum")]
    http: axum::Router,
}

impl Callers {
    fn new(module: TestModule) -> Self {
        let prepared = module.service().prepare(&options()).unwrap();
        #[cfg(feature = "axum")]
        let http = http::app(module.service().clone());
        Callers {
            module,
            alone: false,
            prepared,
            #[cfg(feature = "axum")]
            http,
        }
    }

    /// One call through `entry` with user key `key` (for the HTTP layer, the peer's address
    /// is the key: `key` is ignored), admitted.
    async fn call(&self, entry: Entry, key: &str) {
        match entry {
            Entry::Annotated if self.alone => {
                self.module.scope(annotated_alone(key)).await.unwrap()
            }
            Entry::Annotated => self.module.scope(annotated(key)).await.unwrap(),
            Entry::Consume => {
                let decision = self.module.service().consume(key, &options()).await;
                assert!(decision.unwrap().allowed);
            }
            Entry::Prepared => assert!(self.prepared.consume(key).await.unwrap().allowed),
            #[cfg(feature = "axum")]
            Entry::Http => http::admitted(&self.http).await,
        }
    }
}

#[cfg(feature = "axum")]
mod http {
    use std::net::SocketAddr;

    use super::*;
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::{Request, StatusCode};
    use ratelimit::http::{ClientIp, RateLimitLayer};
    use ratelimit::RateLimitService;
    use tower::ServiceExt;

    /// A handler behind the layer, keyed by the peer's address, under [`options`].
    pub(super) fn app(service: RateLimitService) -> axum::Router {
        let layer = RateLimitLayer::new(service, ClientIp::peer()).options(options());
        axum::Router::new()
            .route("/", axum::routing::get(|| async { "hello" }))
            .layer(layer)
    }

    /// One request through `app`, admitted.
    pub(super) async fn admitted(app: &axum::Router) {
        let peer: SocketAddr = "203.0.113.7:40000".parse().unwrap();
        let request = Request::get("/")
            .extension(ConnectInfo(peer))
            .body(Body::empty())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
}

/// `CALLS` calls through every entry point make `CALLS` script calls on the server each:
/// one round trip per call, nothing before or after it.
#[tokio::test]
async fn each_call_is_one_script_call_on_the_server() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let store = StoreConfig::Redis(redis_options(&server));
    let callers = Callers::new(module(store, "per-call-trips"));
    for &entry in Entry::ALL {
        // The scripts loaded, this thread's buffers grown.
        callers.call(entry, "warm").await;
        let before = script_calls(&mut c);
        for _ in 0..CALLS {
            callers.call(entry, "k").await;
        }
        assert_eq!(script_calls(&mut c) - before, CALLS, "{entry:?}");
    }
}

/// Every call asks the store at once once and, when it cannot answer, awaits it once, on the
/// same key: never `decide_now` twice, never a second key composed for the awaited half.
#[tokio::test]
async fn each_call_asks_the_store_at_most_once_each_way_on_one_key() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let counting = Counting::new(RedisStore::new(redis_options(&server)).unwrap());
    let callers = Callers::new(module(
        StoreConfig::custom(counting.clone()),
        "per-call-asks",
    ));
    for &entry in Entry::ALL {
        callers.call(entry, "warm").await;
        counting.take();
        let before = script_calls(&mut c);
        for _ in 0..CALLS {
            callers.call(entry, "k").await;
            let asked = counting.take();
            // No leases and no refusals: Redis decides every call, asked once each way.
            let kinds: Vec<Asked> = asked.iter().map(|(kind, _)| *kind).collect();
            assert!(
                asked.iter().all(|(_, key)| *key == asked[0].1),
                "{entry:?}: one key"
            );
            // The HTTP layer too: `Prepared::try_consume` hands the awaited half the store
            // key it composed (`Pending`), where `consume_now` then `consume` asked twice.
            assert_eq!(kinds, [Asked::Now, Asked::Awaited], "{entry:?}: {asked:?}");
        }
        assert_eq!(script_calls(&mut c) - before, CALLS, "{entry:?}");
    }
}

/// With leases on, a call answered from its key's lease asks the store at once, once, and
/// makes no round trip; only the call that takes a slice awaits the store (one round trip).
#[tokio::test]
async fn a_call_answered_from_a_lease_makes_no_round_trip() {
    const SLICE: u64 = 16;
    let server = RedisServer::start();
    let mut c = server.connection();
    let leased = redis_options(&server).leases(LeaseOptions::new(SLICE));
    let counting = Counting::new(RedisStore::new(leased).unwrap());
    let callers = Callers::new(module(
        StoreConfig::custom(counting.clone()),
        "per-call-leases",
    ));
    // The lease script loaded (its first grant asks twice: a NOSCRIPT, then EVAL).
    callers.call(Entry::Annotated, "warm").await;
    counting.take();
    for &entry in Entry::ALL {
        let key = format!("{entry:?}");
        let before = script_calls(&mut c);
        for slice in 0..3 {
            for call in 0..SLICE {
                let trips = script_calls(&mut c);
                callers.call(entry, &key).await;
                let asked = counting.take();
                let kinds: Vec<Asked> = asked.iter().map(|(kind, _)| *kind).collect();
                let trips = script_calls(&mut c) - trips;
                assert!(
                    asked.iter().all(|(_, k)| *k == asked[0].1),
                    "{entry:?}: one key"
                );
                if call == 0 {
                    // The slice's grant: one round trip.
                    assert_eq!(kinds, [Asked::Now, Asked::Awaited], "{entry:?}: {asked:?}");
                    assert_eq!(trips, 1, "{entry:?}: slice {slice}");
                } else {
                    assert_eq!(kinds, [Asked::Now], "{entry:?}: {asked:?}");
                    assert_eq!(trips, 0, "{entry:?}: slice {slice}, call {call}");
                }
            }
        }
        assert_eq!(script_calls(&mut c) - before, 3, "{entry:?}: one per slice");
    }
}

/// The quota is resolved once per prepared site, not per call: the annotated fn's site and a
/// `prepare`d one resolve nothing per call (the fn's site is prepared by its first call, the
/// HTTP layer's by its first request); `service.consume` with options builds its site per call, so it
/// resolves once per call (and that count shows the store sees every resolution).
#[tokio::test]
async fn the_quota_is_resolved_once_per_prepared_site() {
    let server = RedisServer::start();
    let counting = Counting::new(RedisStore::new(redis_options(&server)).unwrap());
    let callers = Callers {
        alone: true,
        ..Callers::new(module(
            StoreConfig::custom(counting.clone()),
            "per-call-resolutions",
        ))
    };
    // Building the module checked the fn's limit; preparing the site resolved its options.
    for &entry in Entry::ALL {
        let before = counting.resolutions();
        callers.call(entry, "first").await;
        let first = counting.resolutions() - before;
        for _ in 1..CALLS {
            callers.call(entry, "k").await;
        }
        let resolved = counting.resolutions() - before;
        match entry {
            // Its site prepared on this module by its first call (the layer's by its first
            // request), then held.
            Entry::Annotated => assert_eq!((first, resolved), (1, 1), "{entry:?}"),
            #[cfg(feature = "axum")]
            Entry::Http => assert_eq!((first, resolved), (1, 1), "{entry:?}"),
            Entry::Consume => assert_eq!((first, resolved), (1, CALLS), "{entry:?}"),
            // Prepared before the loop.
            Entry::Prepared => assert_eq!((first, resolved), (0, 0), "{entry:?}"),
        }
    }
    // The site of a `prepare`: one resolution.
    let before = counting.resolutions();
    let prepared = callers.module.service().prepare(&options()).unwrap();
    assert_eq!(counting.resolutions() - before, 1);
    for _ in 0..CALLS {
        assert!(prepared.consume("k").await.unwrap().allowed);
    }
    assert_eq!(counting.resolutions() - before, 1);
}
