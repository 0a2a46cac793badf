//! Shared helpers for the integration tests.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{Config, ManualClock, RateLimitService};

#[cfg(feature = "redis")]
#[path = "redis_server.rs"]
pub mod redis_server;

/// Pods on a Redis Cluster whose fn-wide budget a reload moves (`cluster_moves_attacks`,
/// `cluster_recheck_attacks`).
#[cfg(feature = "redis")]
#[path = "cluster_pods.rs"]
pub mod cluster_pods;

/// A store of one's own over another, forwarding all but what its hooks answer.
#[path = "forward.rs"]
mod forward;
pub use forward::{Forward, Hooks};

/// What a configuration that must not build names (`probes_config`, `probes_config_more`).
pub mod config_errors;

/// A store over the public API only, `StoredState` bytes in a map (`probes_custom_store`,
/// `probes_transition_carry`).
pub mod stored_map;

/// A global allocator that counts, on each thread, the allocations made and the bytes held (for
/// tests and benches that show a path allocates nothing, or that memory comes back). A binary
/// installs it with `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`
/// and reads [`allocations`] or [`net_bytes`].
pub struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static NET_BYTES: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// Allocations (and reallocations) made so far on this thread, when [`CountingAllocator`] is
/// the global allocator.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(std::cell::Cell::get)
}

/// Bytes allocated less bytes freed so far on this thread, when [`CountingAllocator`] is the
/// global allocator.
pub fn net_bytes() -> i64 {
    NET_BYTES.with(std::cell::Cell::get)
}

/// Counts one allocation (or reallocation) on this thread, `bytes` more held.
fn counted(allocation: bool, bytes: i64) {
    if allocation {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    }
    let _ = NET_BYTES.try_with(|n| n.set(n.get() + bytes));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter is a `const`-initialised thread-local `Cell` (no allocation, no
// destructor), so counting cannot re-enter the allocator.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        counted(true, layout.size() as i64);
        // SAFETY: the caller's `layout` is passed on as received.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        counted(false, -(layout.size() as i64));
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        counted(true, size as i64 - layout.size() as i64);
        // SAFETY: as for `dealloc`; `size` is the caller's.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

/// A property test's number of cases: `default`, or `PROPTEST_CASES` when it is set. A count
/// written in a `ProptestConfig` overrides the variable `ProptestConfig::default()` reads, so
/// without this a run could not ask a property for more cases than it names.
pub fn proptest_cases(default: u32) -> u32 {
    let set = std::env::var("PROPTEST_CASES").ok();
    set.and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// A fixed starting instant: `1_000_000 s` since the epoch, a whole second (so one-second
/// fixed windows start here) but 40 s into a minute (a one-minute fixed window ends 20 s
/// later). Tests that depend on a boundary compute it from the window.
pub const START: Duration = Duration::from_secs(1_000_000);

/// Calls `f` `n` times: (admitted, refused over the limit). Any other error panics.
pub fn tally<T: std::fmt::Debug>(
    n: usize,
    f: impl Fn() -> Result<T, ratelimit::Error>,
) -> (u32, u32) {
    let (mut admitted, mut refused) = (0, 0);
    for _ in 0..n {
        match f() {
            Ok(_) => admitted += 1,
            Err(ratelimit::Error::Exceeded(_)) => refused += 1,
            Err(other) => panic!("neither admitted nor refused: {other:?}"),
        }
    }
    (admitted, refused)
}

/// `threads` OS threads, each in `module`'s scope, released together by a barrier, calling
/// `f` `calls` times (a sync annotated fn, say): (admitted, refused over the limit).
pub fn hammer<T: std::fmt::Debug>(
    module: &ratelimit::testing::TestModule,
    threads: usize,
    calls: usize,
    f: impl Fn() -> Result<T, ratelimit::Error> + Sync,
) -> (u32, u32) {
    use std::sync::atomic::{AtomicU32, Ordering};
    let (admitted, refused) = (AtomicU32::new(0), AtomicU32::new(0));
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                module.run(|| {
                    barrier.wait();
                    let (a, r) = tally(calls, &f);
                    admitted.fetch_add(a, Ordering::SeqCst);
                    refused.fetch_add(r, Ordering::SeqCst);
                })
            });
        }
    });
    (admitted.into_inner(), refused.into_inner())
}

/// Lets spawned tasks run until `done` holds, no time passing (a test's tasks join a queue
/// or reach a step between two of its own): a panic when they never get there.
pub async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the spawned tasks never got there");
}

/// Until `service`'s queue holds `depth` waiters (spawned calls run meanwhile, on the wall
/// clock, as a Redis store's answers need; 20 s at most).
pub async fn until_depth(service: &RateLimitService, depth: u64) {
    for _ in 0..20_000 {
        if service.stats().queue.depth == depth {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the queue never held {depth}");
}

/// A manual clock at [`START`].
pub fn clock() -> ManualClock {
    ManualClock::new(START)
}

/// Runs the tests of one binary that install a process-wide module or limiter one at a time:
/// hold the guard for the whole test (and drive futures with `block_on` inside it rather than
/// holding it across `.await`).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static GLOBAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GLOBAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `(fn, problem)` pairs of an `Error::Declarations`; panics on any other error.
pub fn problems(err: &ratelimit::Error) -> Vec<(&'static str, ratelimit::ProblemKind)> {
    let ratelimit::Error::Declarations(e) = err else {
        panic!("not a declarations error: {err}")
    };
    e.problems
        .iter()
        .map(|p| (p.function, p.kind.clone()))
        .collect()
}

/// A service over `config` driven by a fresh manual clock at [`START`].
pub fn service(config: Config) -> (RateLimitService, ManualClock) {
    let clock = clock();
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone()))
        .expect("the test configuration is valid");
    (service, clock)
}

/// `builder`'s configuration on `service`'s store and key prefix, for a reload (a reload
/// keeps the store; another prefix would be other budgets).
pub fn on_its_store(service: &RateLimitService, builder: ratelimit::ConfigBuilder) -> Config {
    let running = service.config();
    builder
        .store(running.store().clone())
        .key_prefix(running.key_prefix())
        .build()
        .unwrap()
}

/// Tier `"moves"`: a token bucket of 10 plus 5 on `window`, refilled 10 a minute (15 at a
/// token every 6 s, whatever the window): the budget a reload moves on a Redis Cluster
/// (`cluster_moves`, `cluster_moves_attacks`).
pub fn moves_bucket(window: Duration) -> ratelimit::Tier {
    let refill = 10 * window.as_secs() / 60;
    ratelimit::Tier::new("moves", 10)
        .burst(5)
        .refill(refill)
        .window(window)
        .strategy(ratelimit::Strategy::TokenBucket)
}

/// A token bucket of `limit` (plus `burst`) refilled `refill` tokens a minute, the module's
/// default limit: the reload probes of a bucket's own state.
pub fn bucket_a_minute(limit: u64, burst: u64, refill: u64) -> ratelimit::ConfigBuilder {
    Config::builder()
        .strategy(ratelimit::Strategy::TokenBucket)
        .default_limit(limit)
        .burst_limit(burst)
        .token_refill_rate(refill)
        .default_window(Duration::from_secs(60))
}

/// Reloads `service` to `builder` on its own store (and key prefix).
pub fn reload_to(service: &RateLimitService, builder: ratelimit::ConfigBuilder) {
    service.reload(on_its_store(service, builder)).unwrap();
}

/// Hour-long sliding-log limits and what calls admit under them, for the probes of reloads
/// and their transitions (`probes_prepared_shortcuts`, `probes_lent_sites`).
pub mod hourly {
    use std::time::Duration;

    use ratelimit::{Config, ConfigBuilder, Options, RateLimitService, Strategy, Tier};

    const HOUR: Duration = Duration::from_secs(3_600);

    /// The default limit of `n` per hour, sliding log.
    pub fn limit(n: u64) -> ConfigBuilder {
        Config::builder()
            .strategy(Strategy::SlidingWindow)
            .default_limit(n)
            .default_window(HOUR)
    }

    /// A sliding-log tier of `n` per hour.
    pub fn tier(name: &str, n: u64) -> Tier {
        Tier::new(name, n)
            .window(HOUR)
            .strategy(Strategy::SlidingWindow)
    }

    /// Reloads `service` with `builder` on its own store and prefix.
    pub fn reload(service: &RateLimitService, builder: ConfigBuilder) {
        service
            .reload(super::on_its_store(service, builder))
            .unwrap();
    }

    /// Admitted calls of a prepared site's `consume_now` on `key`, out of `n`.
    pub fn admitted_now(site: &ratelimit::Prepared, key: &str, n: usize) -> u64 {
        (0..n)
            .map(|_| u64::from(site.consume_now(key).unwrap().unwrap().allowed))
            .sum()
    }

    /// Admitted calls of the service's per-call `consume` on `key`, out of `n`.
    pub fn admitted_per_call(
        service: &RateLimitService,
        key: &str,
        options: &Options,
        n: usize,
    ) -> u64 {
        (0..n)
            .map(|_| u64::from(super::now(service.consume(key, options)).unwrap().allowed))
            .sum()
    }
}

/// Runs a future that the memory store completes without waiting.
pub fn now<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Spends one call from `key` on a bare store (no service), at the system clock's time: the
/// Redis scripts read Redis' own clock, and the memory store needs some `now`.
pub async fn acquire(
    store: &impl ratelimit::store::Store,
    key: &str,
    quota: &ratelimit::Quota,
) -> Result<ratelimit::Decision, ratelimit::Error> {
    use ratelimit::store::{Request, StoreKey};
    use ratelimit::Clock as _;
    let now = ratelimit::SystemClock.now();
    // A key of one window, as the service's: the Redis store's hot script decides it.
    let request = Request::spend(StoreKey::one_window(key)?, quota, 1, now)?;
    ratelimit::store::Store::decide(store, request).await
}

/// What a `tracing` subscriber writes, kept for a test to read.
#[derive(Clone, Default)]
pub struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A worker process's service: `config` on the Redis store with `options`, connected (the
/// multi-process tests' `tests/bin/*` workers).
#[cfg(feature = "redis")]
pub async fn connected_worker_service(
    config: ratelimit::ConfigBuilder,
    options: ratelimit::RedisOptions,
) -> RateLimitService {
    let config = config
        .store(ratelimit::StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    let service = RateLimitService::new(config).expect("service");
    service
        .redis_store()
        .expect("the Redis store")
        .connect()
        .await
        .expect("Redis is reachable");
    service
}

/// What `tasks` concurrent tasks admit on one key (`"shared-key"`) of a worker process's
/// service, each making `calls` calls with `options`, or stopping at its first refusal when
/// `stop_at_refusal` (the multi-process tests' `tests/bin/*` workers, the reload tests).
pub async fn admitted_by_tasks(
    service: &RateLimitService,
    options: &ratelimit::Options,
    tasks: usize,
    calls: usize,
    stop_at_refusal: bool,
) -> u64 {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (service, options) = (service.clone(), options.clone());
            tokio::spawn(async move {
                let mut allowed = 0u64;
                for _ in 0..calls {
                    let decision = service
                        .consume("shared-key", &options)
                        .await
                        .expect("Redis decided");
                    if !decision.allowed && stop_at_refusal {
                        break;
                    }
                    allowed += u64::from(decision.allowed);
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for handle in handles {
        allowed += handle.await.expect("task");
    }
    allowed
}

/// A service on the Redis store with `options`, its keys under `prefix`.
#[cfg(feature = "redis")]
pub fn redis_service(options: ratelimit::RedisOptions, prefix: &str) -> RateLimitService {
    let config = Config::builder()
        .key_prefix(prefix)
        .store(ratelimit::StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    RateLimitService::new(config).expect("service")
}

/// A store that cannot answer, as a Redis that is down would: every decision is
/// [`Error::Store`](ratelimit::Error::Store).
pub struct Broken;

impl ratelimit::store::Store for Broken {
    async fn decide(
        &self,
        _: ratelimit::store::Request<'_>,
    ) -> Result<ratelimit::Decision, ratelimit::Error> {
        Err(ratelimit::Error::Store {
            message: "connection refused".into(),
        })
    }

    async fn decide_all(
        &self,
        _: ratelimit::store::Stacked<'_>,
    ) -> Result<Vec<ratelimit::Decision>, ratelimit::Error> {
        Err(ratelimit::Error::Store {
            message: "connection refused".into(),
        })
    }

    async fn reset(&self, _key: &str) -> Result<bool, ratelimit::Error> {
        Ok(false)
    }
}

/// `store`'s decisions behind a store of one's own that keeps no blocks, takes no penalties
/// and, unless `refunds`, gives nothing back (with `refunds`, says it would, and gives back
/// nothing: [`Broken`] behind it is a store that refunds but is down).
pub struct Forwarding<S> {
    pub store: S,
    pub refunds: bool,
}

/// The memory store's decisions behind a store without refunds, blocks or penalties.
pub type LikeMemory = Forwarding<ratelimit::MemoryStore>;

impl LikeMemory {
    /// Without refunds (and without blocks).
    pub fn without_refunds() -> Self {
        Forwarding {
            store: ratelimit::MemoryStore::new(),
            refunds: false,
        }
    }
}

impl<S: ratelimit::store::Store> ratelimit::store::Store for Forwarding<S> {
    async fn decide(
        &self,
        request: ratelimit::store::Request<'_>,
    ) -> Result<ratelimit::Decision, ratelimit::Error> {
        self.store.decide(request).await
    }

    async fn decide_all(
        &self,
        stacked: ratelimit::store::Stacked<'_>,
    ) -> Result<Vec<ratelimit::Decision>, ratelimit::Error> {
        self.store.decide_all(stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, ratelimit::Error> {
        self.store.reset(key).await
    }

    fn refunds(&self) -> bool {
        self.refunds
    }
}

/// A service of `config()` on every store a case runs on, by name, all on `clock` (the
/// memory store; with the `redis` feature also a real Redis server and a real Cluster, their
/// keys under a fresh prefix from `name`), and the servers behind them: they stop when the
/// guard drops, at the end of the test (a server kept in a `static` is never dropped, and
/// would outlive the test binary).
#[cfg_attr(not(feature = "redis"), allow(unused_variables))]
pub fn on_every_store(
    name: &str,
    config: impl Fn() -> ratelimit::ConfigBuilder,
    clock: &ManualClock,
) -> (
    Vec<(&'static str, RateLimitService)>,
    Box<dyn std::any::Any>,
) {
    let memory = RateLimitService::with_store(
        config().build().expect("valid configuration"),
        ratelimit::MemoryStore::new(),
        Arc::new(clock.clone()),
    )
    .expect("service");
    #[allow(unused_mut)]
    let mut all = vec![("memory", memory)];
    #[cfg(feature = "redis")]
    {
        use redis_server::{prefix, RedisCluster, RedisServer};
        let (server, cluster) = (RedisServer::start(), RedisCluster::start());
        let single = ratelimit::RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let nodes =
            ratelimit::RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(2));
        for (store, options) in [("redis", single), ("cluster", nodes)] {
            let built = config()
                .key_prefix(prefix(name))
                .store(ratelimit::StoreConfig::Redis(options))
                .build()
                .expect("valid configuration");
            let service =
                RateLimitService::with_clock(built, Arc::new(clock.clone())).expect("service");
            all.push((store, service));
        }
        return (all, Box::new((server, cluster)));
    }
    #[allow(unreachable_code)]
    (all, Box::new(()))
}

/// A Tokio runtime with two workers (the machine's cores), for tests whose tasks race.
pub fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Helpers of the HTTP and gRPC tests (axum, actix and tonic alike): limits on a manual clock,
/// the client behind a proxy, and (over HTTP) a loopback client and the statuses of concurrent
/// clients.
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub mod web {
    use std::time::Duration;

    use ratelimit::http::{ClientIp, TrustedProxies};
    use ratelimit::{Config, ManualClock, Options, RateLimitService, Strategy};

    /// A fixed window (its reset falls where the tests' arithmetic says: [`START`](super::START)
    /// is 40 s into a minute, so it resets 20 s later) over a manual clock.
    pub fn fixed_window() -> (RateLimitService, ManualClock) {
        super::service(
            Config::builder()
                .strategy(Strategy::FixedWindow)
                .build()
                .unwrap(),
        )
    }

    /// `limit` a minute.
    pub fn per_minute(limit: u64) -> Options {
        Options::new().limit(limit).window(Duration::from_secs(60))
    }

    /// The client behind one trusted proxy (the test client), named in `X-Forwarded-For`.
    pub fn behind_one_proxy() -> ClientIp {
        ClientIp::x_forwarded_for(TrustedProxies::count(1))
    }

    /// A client that never goes through a proxy from the environment: these requests are for
    /// loopback.
    #[cfg(any(feature = "axum", feature = "actix"))]
    pub fn client() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    /// The value of `name` in `response`, which must have it.
    #[cfg(any(feature = "axum", feature = "actix"))]
    pub fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
        response
            .headers()
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
    }

    /// An actix server on `127.0.0.1:0` serving `app()` (one worker), and a client for it.
    /// The server stops when this is dropped.
    #[cfg(feature = "actix")]
    pub struct ActixServer {
        /// `http://127.0.0.1:<port>`.
        pub base: String,
        client: reqwest::Client,
        handle: actix_web::dev::ServerHandle,
    }

    #[cfg(feature = "actix")]
    impl ActixServer {
        /// Serves `app()`.
        pub fn start<F, T, B>(app: F) -> ActixServer
        where
            F: Fn() -> actix_web::App<T> + Send + Clone + 'static,
            B: actix_web::body::MessageBody + 'static,
            T: actix_web::dev::ServiceFactory<
                    actix_web::dev::ServiceRequest,
                    Config = (),
                    Response = actix_web::dev::ServiceResponse<B>,
                    Error = actix_web::Error,
                    InitError = (),
                > + 'static,
        {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = actix_web::HttpServer::new(app)
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
            let handle = server.handle();
            tokio::spawn(server);
            ActixServer {
                base: format!("http://{addr}"),
                client: client(),
                handle,
            }
        }

        /// A `method` request for `path` with `headers` (a name given twice is two lines).
        pub async fn request(
            &self,
            method: reqwest::Method,
            path: &str,
            headers: &[(&str, &str)],
        ) -> reqwest::Response {
            let mut request = self.client.request(method, format!("{}{path}", self.base));
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.send().await.unwrap()
        }
    }

    #[cfg(feature = "actix")]
    impl Drop for ActixServer {
        fn drop(&mut self) {
            drop(self.handle.stop(false));
        }
    }

    /// `C` clients (`198.51.100.<c>` behind one proxy) sending `each` GETs to `url` at once:
    /// how many each got `200`, and `429` (any other status fails the test).
    #[cfg(any(feature = "axum", feature = "actix"))]
    pub async fn statuses_by_client<const C: usize>(
        url: &str,
        each: usize,
    ) -> ([usize; C], [usize; C]) {
        let client = client();
        let requests: Vec<_> = (0..C)
            .flat_map(|c| (0..each).map(move |_| c))
            .map(|c| {
                let request = client
                    .get(url)
                    .header("x-forwarded-for", format!("198.51.100.{c}"))
                    .send();
                tokio::spawn(async move { (c, request.await.unwrap().status().as_u16()) })
            })
            .collect();
        let (mut ok, mut refused) = ([0; C], [0; C]);
        for request in requests {
            match request.await.unwrap() {
                (c, 200) => ok[c] += 1,
                (c, 429) => refused[c] += 1,
                (c, other) => panic!("client {c}: {other}"),
            }
        }
        (ok, refused)
    }
}

/// The gRPC tests' server (feature `tonic`): tonic's generated health service on loopback behind
/// a rate-limit layer, a layer inside it counting the calls that reach the service, and a
/// channel to it.
#[cfg(feature = "tonic")]
pub mod grpc {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use ratelimit::http::{GrpcAnswers, RateLimitLayer};
    use tokio::sync::oneshot;
    use tonic::transport::{
        Certificate, Channel, ClientTlsConfig, Identity, Server, ServerTlsConfig,
    };

    const TLS_CA: &str = include_str!("fixtures/tls/ca.pem");
    const TLS_CERT: &str = include_str!("fixtures/tls/server.pem");
    const TLS_KEY: &str = include_str!("fixtures/tls/server.key");

    /// The calls that got past the rate-limit layer: a layer inside it counts them.
    #[derive(Clone)]
    struct Counted<S> {
        inner: S,
        runs: Arc<AtomicUsize>,
    }

    impl<S: tower::Service<R>, R> tower::Service<R> for Counted<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: R) -> S::Future {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.inner.call(request)
        }
    }

    /// A tonic server on `127.0.0.1:0` serving the health service behind `layer` (then the
    /// counting layer), and a channel to it. The server stops when this is dropped.
    pub struct GrpcServer {
        /// A connected channel to the server.
        pub channel: Channel,
        /// The health service's reporter (its `Watch` streams end when it is dropped).
        pub reporter: tonic_health::server::HealthReporter,
        runs: Arc<AtomicUsize>,
        _stop: oneshot::Sender<()>,
    }

    impl GrpcServer {
        /// Serves the health service behind `layer`.
        pub async fn start(layer: RateLimitLayer<GrpcAnswers>) -> GrpcServer {
            GrpcServer::serve(layer, false).await
        }

        /// [`start`](Self::start) over TLS, with the certificate in `fixtures/tls` (a test
        /// CA's, for `localhost` and 127.0.0.1, valid until 2126); the channel trusts that CA.
        pub async fn start_tls(layer: RateLimitLayer<GrpcAnswers>) -> GrpcServer {
            GrpcServer::serve(layer, true).await
        }

        async fn serve(layer: RateLimitLayer<GrpcAnswers>, tls: bool) -> GrpcServer {
            let (reporter, health) = tonic_health::server::health_reporter();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let runs = Arc::new(AtomicUsize::new(0));
            let counted = Arc::clone(&runs);
            let (stop, stopped) = oneshot::channel::<()>();
            let mut builder = Server::builder();
            if tls {
                let identity = Identity::from_pem(TLS_CERT, TLS_KEY);
                builder = builder
                    .tls_config(ServerTlsConfig::new().identity(identity))
                    .unwrap();
            }
            let server = builder
                .layer(layer)
                .layer(tower::layer::layer_fn(move |inner| Counted {
                    inner,
                    runs: Arc::clone(&counted),
                }))
                .add_service(health)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        stopped.await.ok();
                    },
                );
            tokio::spawn(server);
            let endpoint = match tls {
                false => Channel::from_shared(format!("http://{addr}")).unwrap(),
                true => {
                    let trust = ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(TLS_CA))
                        .domain_name("localhost");
                    Channel::from_shared(format!("https://localhost:{}", addr.port()))
                        .unwrap()
                        .tls_config(trust)
                        .unwrap()
                }
            };
            GrpcServer {
                channel: endpoint.connect().await.unwrap(),
                reporter,
                runs,
                _stop: stop,
            }
        }

        /// The calls that reached the service.
        pub fn runs(&self) -> usize {
            self.runs.load(Ordering::SeqCst)
        }
    }
}

/// Calls of cost 1 admitted on `key` at the clock's instant, until the first refusal (a store
/// that answers at once).
pub fn drain(service: &RateLimitService, key: &str, options: &ratelimit::Options) -> u64 {
    now(drained(service, key, options))
}

/// [`drain`] on any store: calls of cost 1 admitted on `key`, until the first refusal.
pub async fn drained(service: &RateLimitService, key: &str, options: &ratelimit::Options) -> u64 {
    let options = options.clone().cost(1);
    let mut admitted = 0;
    while service.consume(key, &options).await.unwrap().allowed {
        admitted += 1;
        assert!(admitted < 100_000, "never refused");
    }
    admitted
}

/// What `key`'s budget under `options` has left now (`status`).
pub async fn remaining(service: &RateLimitService, key: &str, options: &ratelimit::Options) -> u64 {
    let level = service.status(key, options).await.expect("status");
    level.remaining
}

/// A tiny deterministic generator (xorshift) for the probes' random histories, seeded by
/// whoever makes it.
pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A configuration drawn at random from a small family in which every setting that decides a
/// call's quota or state varies: limiting on or off, strategy, key prefix (one of two when
/// `prefixes`), default limit, window (`window` draws each), burst, refill, each tier's
/// limit, window, burst, strategy, block (`block` long) and shadow, the tiers present and the
/// default tier. The reload probes' histories (`probes_kept_against`, `probes_moving_reloads`).
pub fn drawn_config(
    rng: &mut Rng,
    prefixes: bool,
    window: fn(&mut Rng) -> Duration,
    block: Duration,
) -> ratelimit::ConfigBuilder {
    use ratelimit::{Strategy, Tier};
    let strategy = Strategy::ALL[rng.below(4) as usize];
    let mut b = Config::builder()
        .enabled(rng.below(8) != 0)
        .strategy(strategy);
    if prefixes {
        b = b.key_prefix(["rl", "rl2"][rng.below(2) as usize]);
    }
    b = b.default_window(window(rng)).burst_limit(rng.below(3));
    b = match rng.below(4) {
        0 => b.no_default_limit(),
        n => b.default_limit(n + 1),
    };
    if strategy == Strategy::TokenBucket && rng.below(3) == 0 {
        b = b.token_refill_rate(1 + rng.below(3));
    }
    let mut names = Vec::new();
    for name in ["free", "gold"] {
        if rng.below(3) == 0 {
            continue;
        }
        let mut t = Tier::new(name, 1 + rng.below(4));
        if rng.below(2) == 0 {
            t = t.window(window(rng));
        }
        if rng.below(2) == 0 {
            t = t.strategy(Strategy::ALL[rng.below(4) as usize]);
        }
        if rng.below(3) == 0 {
            t = t.burst(rng.below(3));
        }
        if rng.below(6) == 0 {
            t = t.block_for(block);
        }
        if rng.below(8) == 0 {
            t = t.shadow();
        }
        b = b.tier(t);
        names.push(name);
    }
    if !names.is_empty() && rng.below(2) == 0 {
        b = b.default_tier(names[rng.below(names.len() as u64) as usize]);
    }
    b
}

/// Calls of `options` on `"k"` admitted out of `n`, at the clock's instant (the probes of
/// reloads and their transitions).
pub fn admitted(service: &RateLimitService, options: &ratelimit::Options, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", options)).is_ok_and(|d| d.allowed))
        .count()
}

/// [`bucket_a_minute`]`(limit, burst, refill)` on a window of two minutes at the same rate
/// (twice the refill a window): the same bucket on another state, where a reload moves it.
pub fn moved(limit: u64, burst: u64, refill: u64) -> ratelimit::ConfigBuilder {
    bucket_a_minute(limit, burst, refill * 2).default_window(Duration::from_secs(120))
}

/// Tiers of 3 a key under any strategy, blocking an hour once refused or not, for the probes
/// of resets beside a moved limit (`probes_resets_beside_moves_attacks`, and `_redis`).
pub mod three {
    use std::time::Duration;

    use ratelimit::{Config, ConfigBuilder, Strategy, Tier};

    const HOUR: Duration = Duration::from_secs(3_600);

    /// Tier `name` of 3 on `window` under `strategy` (a bucket refilled 3 a minute whatever
    /// the window), blocking a key an hour once refused when `blocks`.
    pub fn tier(strategy: Strategy, name: &str, window: Duration, blocks: bool) -> Tier {
        let mut tier = Tier::new(name, 3)
            .burst(0)
            .window(window)
            .strategy(strategy);
        if blocks {
            tier = tier.block_for(HOUR);
        }
        if strategy == Strategy::TokenBucket {
            tier = tier.refill(3 * window.as_secs() / 60);
        }
        tier
    }

    /// [`tier`] as the default tier, alone.
    pub fn limit(strategy: Strategy, name: &str, window: Duration, blocks: bool) -> ConfigBuilder {
        Config::builder()
            .tier(tier(strategy, name, window, blocks))
            .default_tier(name)
    }
}

/// A service on `server` under key prefix `at` (a fleet's services share one), on a
/// hand-driven clock at [`START`], with a 2 s timeout.
#[cfg(feature = "redis")]
pub fn on_redis(
    server: &redis_server::RedisServer,
    at: &str,
    config: ratelimit::ConfigBuilder,
) -> (RateLimitService, ManualClock) {
    on_redis_with(within(server)(), at, config)
}

/// [`on_redis`] with Redis `options` of the caller's (a Cluster's, another timeout).
#[cfg(feature = "redis")]
pub fn on_redis_with(
    options: ratelimit::RedisOptions,
    at: &str,
    config: ratelimit::ConfigBuilder,
) -> (RateLimitService, ManualClock) {
    let config = config
        .key_prefix(at)
        .store(ratelimit::StoreConfig::Redis(options))
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

/// The reloads that move a default limit's state, for the probes of the carrying horizon
/// (`probes_horizon_attacks`, and `_redis`), each against the twin that never reloads.
pub mod moves {
    /// How a reload moves the default limit's state, if at all.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Move {
        /// No reload: the twin.
        None,
        /// The default tier renamed `"a"` to `"b"`.
        Rename,
        /// The window doubled at the same rate (the same bucket on another state).
        Window,
        /// Another key prefix.
        Prefix,
        /// Renamed, then renamed again (`"a"` to `"b"` to `"c"`).
        Twice,
        /// Renamed, and back (`"a"` to `"b"` to `"a"`).
        Back,
    }

    /// Every move but the twin's.
    pub const MOVES: [Move; 5] = [
        Move::Rename,
        Move::Window,
        Move::Prefix,
        Move::Twice,
        Move::Back,
    ];

    /// Tier `name` as the default tier: a bucket of 10 plus 5 on a minute, a token every 6 s
    /// (a tolerance of 90 s: its old state carried 150 s past a move).
    pub fn bucket(name: &str) -> ratelimit::ConfigBuilder {
        let tier = ratelimit::Tier::new(name, 10)
            .burst(5)
            .refill(10)
            .window(std::time::Duration::from_secs(60))
            .strategy(ratelimit::Strategy::TokenBucket);
        ratelimit::Config::builder().tier(tier).default_tier(name)
    }

    /// A reload of a move: the default tier's name, its window in minutes, and whether under
    /// another key prefix.
    pub type Reload = (&'static str, u32, bool);

    impl Move {
        /// The reloads the move makes, in order (from tier `"a"`, a minute, the first prefix).
        pub fn reloads(self) -> &'static [Reload] {
            match self {
                Move::None => &[],
                Move::Rename => &[("b", 1, false)],
                Move::Window => &[("a", 2, false)],
                Move::Prefix => &[("a", 1, true)],
                Move::Twice => &[("b", 1, false), ("c", 1, false)],
                Move::Back => &[("b", 1, false), ("a", 1, false)],
            }
        }
    }
}

/// A fleet of services on one store under one key prefix, each on a hand-driven clock, or its
/// twin (one service): the fleet-horizon probes run one script on both and compare what each
/// admitted. Pod `i` of the twin is its one service, whatever `i`.
pub struct Pods {
    pub pods: Vec<(RateLimitService, ManualClock)>,
    /// How far each pod's clock runs ahead (one entry per pod).
    pub skew: Vec<Duration>,
    pub prefix: String,
}

impl Pods {
    /// `pods` under `prefix`, pod `i`'s clock `skew[i]` seconds ahead, every clock at
    /// [`START`] (plus its skew).
    pub fn new(pods: Vec<(RateLimitService, ManualClock)>, skew: &[u64], prefix: String) -> Self {
        assert_eq!(pods.len(), skew.len(), "a skew per pod");
        let out = Pods {
            pods,
            skew: skew.iter().map(|&s| Duration::from_secs(s)).collect(),
            prefix,
        };
        out.at(0);
        out
    }

    /// Whether more than one service: the fleet, not the twin.
    pub fn fleet(&self) -> bool {
        self.pods.len() > 1
    }

    /// Pod `i` (0: A, 1: B, ...); the twin's one service for all.
    pub fn pod(&self, i: usize) -> &RateLimitService {
        &self.pods[i.min(self.pods.len() - 1)].0
    }

    /// Every pod's clock at `secs` past [`START`] (plus its skew).
    pub fn at(&self, secs: u64) {
        for ((_, clock), skew) in self.pods.iter().zip(&self.skew) {
            clock.set(START + Duration::from_secs(secs) + *skew);
        }
    }

    /// Every pod reloaded to `to` (the twin once).
    pub fn reload_all(&self, to: impl Fn() -> ratelimit::ConfigBuilder) {
        for (service, _) in &self.pods {
            service.reload(on_its_store(service, to())).unwrap();
        }
    }

    /// Pod `i` reloaded to `to` (the twin: its one service).
    pub fn reload(&self, i: usize, to: ratelimit::ConfigBuilder) {
        let service = self.pod(i);
        service.reload(on_its_store(service, to)).unwrap();
    }

    /// Calls of `options` on `key` by pod `i` admitted out of `n`.
    pub async fn admitted(
        &self,
        i: usize,
        key: &str,
        options: &ratelimit::Options,
        n: usize,
    ) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            let decided = self.pod(i).consume(key, options).await.unwrap();
            admitted += usize::from(decided.allowed);
        }
        admitted
    }

    /// Calls of `options` on `key` by pod `i`, `n` of them: how many were admitted, and how
    /// many failed (a link found dead by its first call after a restart).
    pub async fn admitted_or_failed(
        &self,
        i: usize,
        key: &str,
        options: &ratelimit::Options,
        n: usize,
    ) -> (usize, usize) {
        let (mut admitted, mut failed) = (0, 0);
        for _ in 0..n {
            match self.pod(i).consume(key, options).await {
                Ok(decided) => admitted += usize::from(decided.allowed),
                Err(_) => failed += 1,
            }
        }
        (admitted, failed)
    }

    /// Until pod `i` answers a plain call (which raises nothing) again, after its store went
    /// away: `tries` of them 50 ms apart (a real reconnect, not a limit's time).
    pub async fn until_answered(&self, i: usize, tries: usize) {
        for _ in 0..tries {
            if (self
                .pod(i)
                .consume("ping", &ratelimit::Options::new())
                .await)
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("pod {i} never answered again");
    }

    /// [`until_answered`](Self::until_answered) for every pod.
    pub async fn until_all_answered(&self, tries: usize) {
        for i in 0..self.pods.len() {
            self.until_answered(i, tries).await;
        }
    }
}

#[cfg(feature = "redis")]
impl Pods {
    /// One pod per entry of `skew` (one entry: the twin) on Redis `options`, each on `first`,
    /// under one fresh prefix from `name`.
    pub fn on_redis(
        options: impl Fn() -> ratelimit::RedisOptions,
        name: &str,
        skew: &[u64],
        first: impl Fn() -> ratelimit::ConfigBuilder,
    ) -> Pods {
        Pods::made(name, skew, |at| on_redis_with(options(), at, first()))
    }

    /// One pod per entry of `skew`, each made by `pod` under one fresh prefix from `name`.
    pub fn made(
        name: &str,
        skew: &[u64],
        mut pod: impl FnMut(&str) -> (RateLimitService, ManualClock),
    ) -> Pods {
        let at = redis_server::prefix(name);
        let pods = skew.iter().map(|_| pod(&at)).collect();
        Pods::new(pods, skew, at)
    }
}

/// Redis options of the fleet-horizon probes: `server`'s, a 2 s timeout (as [`on_redis`]).
#[cfg(feature = "redis")]
pub fn within(server: &redis_server::RedisServer) -> impl Fn() -> ratelimit::RedisOptions + '_ {
    || ratelimit::RedisOptions::new(server.url()).timeout(Duration::from_secs(2))
}

/// Runs `script` on a fleet of two pods and on its twin (one pod), each made by `pods` (given
/// how many), clocks level: what each admitted, the fleet's first.
pub async fn fleet_and_twin_of<F>(
    pods: impl Fn(usize) -> Pods,
    script: F,
) -> (Vec<usize>, Vec<usize>)
where
    F: AsyncFn(&Pods) -> Vec<usize>,
{
    let fleet = script(&pods(2)).await;
    let twin = script(&pods(1)).await;
    (fleet, twin)
}

/// [`fleet_and_twin_of`] pods on `server` ([`within`]), each on `first`, under a fresh prefix
/// from `name` for each of the two.
#[cfg(feature = "redis")]
pub async fn fleet_and_twin<F>(
    server: &redis_server::RedisServer,
    name: &str,
    first: impl Fn() -> ratelimit::ConfigBuilder + Copy,
    script: F,
) -> (Vec<usize>, Vec<usize>)
where
    F: AsyncFn(&Pods) -> Vec<usize>,
{
    let pods = |n| Pods::on_redis(within(server), name, &vec![0; n], first);
    fleet_and_twin_of(pods, script).await
}

/// What a [`HorizonHooked`] store does with a raise or read of the fleet's horizon record
/// before Redis sees it.
#[cfg(feature = "redis")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Before {
    /// Forwarded to Redis.
    Forward,
    /// The store's error (a link lost, Redis out of reach).
    Fail,
    /// Never answered: the call waits until it is dropped (a pod stopped, a cancelled call).
    Hang,
}

/// A [`RedisStore`](ratelimit::RedisStore) whose raises and reads of the horizon record are
/// first put to a hook (see [`Before`]); every other call forwarded as it is, except that
/// every decision asks Redis (no held refusal or leased unit answered in the process).
#[cfg(feature = "redis")]
pub type HorizonHooked<H> = Forward<ratelimit::RedisStore, HorizonHook<H>>;

/// The hook of a [`HorizonHooked`] store: what it does with each raise or read.
#[cfg(feature = "redis")]
#[derive(Clone)]
pub struct HorizonHook<H>(pub H);

/// `inner` whose raises and reads of the horizon record are first put to `hook`.
#[cfg(feature = "redis")]
pub fn horizon_hooked<H>(inner: ratelimit::RedisStore, hook: H) -> HorizonHooked<H> {
    Forward::new(inner, HorizonHook(hook))
}

#[cfg(feature = "redis")]
impl<H> Hooks<ratelimit::RedisStore> for HorizonHook<H>
where
    H: Fn(&ratelimit::store::Horizon) -> Before + Send + Sync + 'static,
{
    fn decide_now(
        &self,
        _: &ratelimit::RedisStore,
        _: ratelimit::store::Request<'_>,
    ) -> Option<Result<ratelimit::Decision, ratelimit::Error>> {
        None
    }

    async fn horizon(
        &self,
        inner: &ratelimit::RedisStore,
        prefix: &str,
        raise: ratelimit::store::Horizon,
    ) -> Result<ratelimit::store::Horizon, ratelimit::Error> {
        match (self.0)(&raise) {
            Before::Forward => {}
            Before::Fail => {
                return Err(ratelimit::Error::Store {
                    message: "the horizon record is out of reach".into(),
                })
            }
            Before::Hang => std::future::pending::<()>().await,
        }
        ratelimit::store::Store::horizon(inner, prefix, raise).await
    }
}
