//! The Redis store side by side with the peers' own scripts for the same algorithms and a raw
//! `EVALSHA` of a trivial script, in the same run, over the same kind of connection, against a
//! `redis-server` started for the run.
//!
//! `cargo bench -p ratelimit-tests --features redis --bench redis` (`ROUNDS=n` to change the
//! number of rounds, 7 by default)
//!
//! The peers (see `peers/README.md`): alisaifee/limits' `incr_expire.lua` (fixed window),
//! `acquire_moving_window.lua` (sliding log) and `acquire_sliding_window.lua` (sliding
//! counter), and go-redis/redis_rate's `allowN` (GCRA), read from `benches/peers/*.lua` and
//! called as those libraries call them. Without the files, the peers are left out.
//!
//! Each strategy and its peer are driven the same way: `RateLimitService::consume` over 64 user
//! keys, the service built with `RateLimitService::with_store` on our `RedisStore` or on
//! `PeerStore`, a `Store` whose `decide` is one `EVALSHA` of the peer's script through
//! redis-rs' `MultiplexedConnection` with no response timeout (the client the store uses,
//! without the store's bound on every call: the cheapest way the client offers). So both
//! sides pay the same service-level work (resolving the limit, composing the key, the
//! decision, the stats) and the same client, and differ only in the script, in reading its
//! reply, and in our deadline. `PEER_CONNECTION=manager` puts the peers (and the raw
//! baselines) on redis-rs' default `ConnectionManager` instead, which bounds every call with
//! a Tokio timer of 500 ms.
//!
//! Two more variants call the fixed window's two stores by `Store::decide`, without the
//! service, to tell the store's cost from the service's. `AA=1` adds the fixed window's peer
//! against itself: the bench's noise floor. Every store measured has a connection of its own
//! (a peer sharing the baseline's connection measured 3% cheaper in client CPU than the same
//! peer on one of its own).
//! `ONLY=<prefix>,<prefix>` keeps the baseline and the variants whose names start with one of
//! them. `CALLS=n` makes `n` sequential calls of the last variant kept and stops, for
//! instructions per call under cachegrind (at two values of `n`); with `CONCURRENT=1`, by 64
//! tasks at once, as the throughput runs make them.
//!
//! For each round, every variant runs once, interleaved, the order reversed every other round
//! (balanced), so that noise from a shared machine lands on all of them alike; the figure
//! reported is the median over rounds.
//! - latency: sequential decisions from one task (concurrency 1), median per call;
//! - throughput: 64 tasks over one multiplexed connection, decisions per second, and the
//!   client's CPU time per decision (the bench process's CPU clock: Redis runs apart).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit::store::{Request, Stacked, Store, StoreKey};
use ratelimit::{
    Clock, Config, Decision, Error, ManualClock, Nanos, Options, Quota, RateLimitService,
    RedisOptions, RedisStore, Strategy, SystemClock,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};

const ROUNDS: usize = 7;
/// Every quota: a budget no run exhausts, so every call is an admitted decision that writes.
const LIMIT: u64 = 1_000_000;
const WINDOW_S: u64 = 60;
const SEQUENTIAL_CALLS: usize = 2_000;
const TASKS: usize = 64;
const CALLS_PER_TASK: usize = 400;

type Call = Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The median of `SEQUENTIAL_CALLS` sequential calls, each timed: robust to the preemptions
/// of a shared machine, which a mean is not.
async fn latency_us(call: &Call) -> f64 {
    let mut each = Vec::with_capacity(SEQUENTIAL_CALLS);
    for i in 0..SEQUENTIAL_CALLS {
        let started = Instant::now();
        call(i).await;
        each.push(started.elapsed().as_secs_f64() * 1e6);
    }
    median(each)
}

/// The CPU time this process (the client: Redis runs in a process of its own) has used.
fn client_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Decisions per second, and the client's CPU time per decision (µs), at 64 tasks.
async fn throughput(call: &Call) -> (f64, f64) {
    let cpu = client_cpu();
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let call = Arc::clone(call);
            tokio::spawn(async move {
                for i in 0..CALLS_PER_TASK {
                    call(t * CALLS_PER_TASK + i).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let calls = (TASKS * CALLS_PER_TASK) as f64;
    let cpu_us = (client_cpu() - cpu).as_secs_f64() * 1e6 / calls;
    (calls / started.elapsed().as_secs_f64(), cpu_us)
}

/// Redis' own measure of the CPU time it spent per EVALSHA since the last `CONFIG RESETSTAT`
/// (0 when there was none).
fn evalsha_usec_per_call(c: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        // No EVALSHA at all (refusals answered in the process).
        .unwrap_or(0.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let server = RedisServer::start();
    let timeout = Duration::from_secs(5);

    // The baseline: EVALSHA of `return 1`, through the multiplexed connection the store
    // uses.
    let raw = PeerConnection::open(&server.url()).await;
    let trivial = Arc::new(redis::Script::new("return 1"));
    let _: i64 = trivial.invoke_async(&mut raw.clone()).await.expect("load");

    let store = RedisStore::new(RedisOptions::new(server.url()).timeout(timeout)).expect("store");
    store.connect().await.expect("connect");

    let mut variants: Vec<(String, Call)> = Vec::new();
    {
        let trivial = Arc::clone(&trivial);
        let raw = raw.clone();
        variants.push((
            "raw EVALSHA (`return 1`)".into(),
            Arc::new(move |_| {
                let trivial = Arc::clone(&trivial);
                let mut raw = raw.clone();
                Box::pin(async move {
                    let _: i64 = trivial.invoke_async(&mut raw).await.expect("raw");
                })
            }),
        ));
    }
    let p = prefix("bench");
    {
        // The store's fixed-window hot path for a cost of 1 called raw, as a quota's own
        // script (its capacity and window written in, no argument; see `scripts.rs`, which
        // also puts the fixed window's full script behind it for state of the wrong shape,
        // never reached here): separates the store's client-side cost from the script's cost
        // inside Redis.
        let script = Arc::new(redis::Script::new(&format!(
            "local capacity, window, cost = {LIMIT}, {}, 1\n\
             local count = redis.pcall('INCR', KEYS[1])\n{}",
            WINDOW_S * 1_000,
            include_str!("../../ratelimit-core/lua/fixed_window_hot.lua"),
        )));
        let keys: Arc<Vec<String>> = Arc::new((0..64).map(|i| format!("{p}:raw:{i}")).collect());
        let raw = raw.clone();
        variants.push((
            "raw EVALSHA (fixed_window_hot.lua)".into(),
            Arc::new(move |i| {
                let script = Arc::clone(&script);
                let keys = Arc::clone(&keys);
                let mut raw = raw.clone();
                Box::pin(async move {
                    // An admitted call's reply: the count alone.
                    let reply: i64 = script
                        .key(&keys[i % keys.len()])
                        .invoke_async(&mut raw)
                        .await
                        .expect("raw script");
                    assert!((1..=LIMIT as i64).contains(&reply));
                })
            }),
        ));
    }
    for strategy in Strategy::ALL {
        // A service of its own per strategy, on one store, as each peer has its own.
        let ours = service(store.clone(), &format!("{p}:ours:{strategy}"));
        let opts = admitting(strategy);
        variants.push((strategy.to_string(), consume(&ours, &opts)));
        // A connection of its own, as our store has one.
        let own = PeerConnection::open(&server.url()).await;
        if let Some((name, peer)) = peer(strategy, &own) {
            let peers = service(peer, &format!("{p}:peer:{strategy}"));
            variants.push((name, consume(&peers, &opts)));
        }
    }

    // Issue 26: a spend kept for a refund and given back, two round trips (the stacked script
    // stamping the key, then lua/refund.lua): what counting by outcome costs over `consume`.
    // Redis' CPU is per script run, two per call.
    for strategy in [Strategy::FixedWindow, Strategy::TokenBucket] {
        let ours = service(store.clone(), &format!("{p}:kept:{strategy}"));
        // 1,000 an hour: a bucket's token comes back every 3.6 s, long after the refund (at
        // the plain variants' rate, every 60 us, it would be back before a loaded round trip
        // ends: the refund would rightly give nothing). Every spend is given back, so the
        // 64 tasks never hold more than 64 units.
        let hourly = admitting(strategy)
            .limit(1_000)
            .window(Duration::from_secs(3_600));
        variants.push((
            format!("{strategy}, kept and refunded"),
            kept(&ours, &hourly),
        ));
    }

    // `AA=1`: the bench's own noise floor. The fixed window's peer against itself, each on a
    // connection of its own as every store measured has: the same code on both sides, so any
    // ratio away from 1.00 is the measurement's.
    if std::env::var_os("AA").is_some() {
        let opts = admitting(Strategy::FixedWindow);
        for (name, at) in [
            ("A/A fixed-window".to_owned(), "aa-own"),
            (
                "peer for A/A fixed-window: limits_incr_expire".to_owned(),
                "aa-peer",
            ),
        ] {
            let own = PeerConnection::open(&server.url()).await;
            if let Some((_, peer)) = peer(Strategy::FixedWindow, &own) {
                let peers = service(peer, &format!("{p}:{at}"));
                variants.push((name, consume(&peers, &opts)));
            }
        }
    }

    // The fixed window and its peer called as a `Store` (`Store::decide`), without the
    // service: what each store costs apart from the service's work, which both sides share.
    let fixed = Quota::new(LIMIT, Duration::from_secs(WINDOW_S))
        .unwrap()
        .with_strategy(Strategy::FixedWindow);
    let mut direct: Vec<(&str, Arc<dyn DirectStore>)> = vec![(
        "direct fixed-window (Store::decide)",
        Arc::new(store.clone()),
    )];
    let own = PeerConnection::open(&server.url()).await;
    if let Some((_, peer)) = peer(Strategy::FixedWindow, &own) {
        direct.push((
            "direct peer for fixed-window (Store::decide)",
            Arc::new(peer),
        ));
    }
    for (name, direct) in direct {
        let keys: Arc<Vec<String>> = Arc::new(
            (0..64)
                .map(|i| format!("{p}:direct:{}:{{user{i}}}", variants.len()))
                .collect(),
        );
        let quota = fixed;
        variants.push((
            name.to_owned(),
            Arc::new(move |i| {
                let (direct, keys) = (Arc::clone(&direct), Arc::clone(&keys));
                Box::pin(async move {
                    let now = SystemClock.now();
                    let d = direct
                        .decide_boxed(&keys[i % keys.len()], &quota, now)
                        .await
                        .expect("decision");
                    assert!(d.allowed);
                })
            }),
        ));
    }

    // One hot key already refused (limit 1, spent): answered in the process until its retry
    // time, against the same store asking Redis for every call (`local_refusals(0)`).
    let every_call = RedisStore::new(
        RedisOptions::new(server.url())
            .timeout(timeout)
            .local_refusals(0),
    )
    .expect("store");
    // Not under cachegrind (`CALLS`): `acquire` reads the system clock.
    let refused = [
        ("refused hot key, answered locally", store.clone()),
        ("refused hot key, asking Redis", every_call),
    ];
    for (name, store) in refused
        .into_iter()
        .filter(|_| std::env::var_os("CALLS").is_none())
    {
        let quota = Quota::new(1, Duration::from_secs(3_600)).unwrap();
        let key = Arc::new(format!("{p}:hot:{name}"));
        let _ = ratelimit_tests::acquire(&store, &key, &quota).await;
        variants.push((
            name.to_owned(),
            Arc::new(move |_| {
                let store = store.clone();
                let key = Arc::clone(&key);
                Box::pin(async move {
                    let d = ratelimit_tests::acquire(&store, &key, &quota)
                        .await
                        .expect("decision");
                    assert!(!d.allowed);
                })
            }),
        ));
    }

    // `ONLY=a,b`: the baseline and the variants whose names start with `a` or `b` (for a
    // profile of one of them, or more rounds of a few; the ratios compare what is left).
    if let Ok(only) = std::env::var("ONLY") {
        let mut i = 0;
        variants.retain(|(name, _)| {
            i += 1;
            i == 1 || only.split(',').any(|o| name.starts_with(o))
        });
    }

    // Warm-up: connections, scripts, allocator.
    for (_, call) in &variants {
        latency_us(call).await;
    }
    // `CALLS=n` (with `ONLY=<one variant>`): after the warm-up, `n` sequential calls of the
    // last variant left and nothing else, to run under cachegrind at two values of `n`:
    // instructions per call in the process, which the host's noise does not move.
    // With `CONCURRENT=1`, the `n` calls are made as the throughput runs make them: by 64
    // tasks at once (`n / 64` each).
    if let Some(calls) = std::env::var("CALLS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        let (_, call) = variants.last().expect("a variant");
        if std::env::var_os("CONCURRENT").is_some() {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let call = Arc::clone(call);
                    tokio::spawn(async move {
                        for i in 0..calls / TASKS {
                            call(t * calls + i).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
        } else {
            for i in 0..calls {
                call(i).await;
            }
        }
        return;
    }
    let mut latency = vec![Vec::new(); variants.len()];
    let mut rate = vec![Vec::new(); variants.len()];
    let mut server_us = vec![Vec::new(); variants.len()];
    let mut client_us = vec![Vec::new(); variants.len()];
    let mut stats = server.connection();
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS);
    // `THROUGHPUT_ONLY=1`: no latency runs (for a profile of the throughput runs alone).
    let profile_throughput = std::env::var_os("THROUGHPUT_ONLY").is_some();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let call = &variants[i].1;
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .exec(&mut stats)
                .expect("reset");
            if profile_throughput {
                latency[i].push(0.0);
            } else {
                latency[i].push(latency_us(call).await);
            }
            let (r, cpu) = throughput(call).await;
            rate[i].push(r);
            client_us[i].push(cpu);
            server_us[i].push(evalsha_usec_per_call(&mut stats));
        }
    }
    let latency: Vec<f64> = latency.into_iter().map(median).collect();
    // Each pair's ratios are taken round by round, then their median: the host's speed drifts
    // by as much as the pairs differ over a run, and a ratio within one round cancels it.
    let per_round = |xs: &[Vec<f64>], o: usize, i: usize| -> (f64, f64, f64) {
        let ratios: Vec<f64> = xs[o].iter().zip(&xs[i]).map(|(a, b)| a / b).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        (median(ratios), lo, hi)
    };
    let round_rates = rate.clone();
    let round_server_us = server_us.clone();
    let round_client_us = client_us.clone();
    let rate: Vec<f64> = rate.into_iter().map(median).collect();
    let server_us: Vec<f64> = server_us.into_iter().map(median).collect();
    let client_us: Vec<f64> = client_us.into_iter().map(median).collect();
    println!(
        "| variant | latency, concurrency 1 (µs/call) | vs raw | throughput, 64 tasks (calls/s) \
         | vs raw | Redis CPU per EVALSHA (µs) | client CPU per call (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut pairs = Vec::new();
    for (i, (name, _)) in variants.iter().enumerate() {
        // "peer for X: file" beside "X", and "direct peer for X" beside "direct X".
        let (direct, peer) = match name.strip_prefix("direct ") {
            Some(rest) => ("direct ", rest),
            None => ("", name.as_str()),
        };
        if let Some(ours) = peer.strip_prefix("peer for ") {
            let ours = format!("{direct}{}", ours.split(": ").next().unwrap_or(""));
            if let Some(o) = variants.iter().position(|(n, _)| *n == ours) {
                pairs.push((ours, name.clone(), o, i));
            }
        }
        println!(
            "| {name} | {:.1} | {:.2}x | {:.0} | {:.2}x | {:.2} | {:.2} |",
            latency[i],
            latency[i] / latency[0],
            rate[i],
            rate[i] / rate[0],
            server_us[i],
            client_us[i]
        );
    }
    let find = |prefix: &str| variants.iter().position(|(n, _)| n.starts_with(prefix));
    if let (Some(local), Some(asking)) = (
        find("refused hot key, answered"),
        find("refused hot key, asking"),
    ) {
        println!(
            "\nrefused calls on one hot key, answered locally / asking Redis: throughput {:.1}x, \
             latency {:.2}x",
            rate[local] / rate[asking],
            latency[local] / latency[asking]
        );
    }
    if !pairs.is_empty() {
        println!();
        println!(
            "| algorithm | peer | throughput, ours / peer: ratio of medians | median of \
             per-round ratios (min-max) | latency, ours / peer | Redis CPU per call, ours / \
             peer (µs) | median of per-round ratios | client CPU per call, ours / peer (µs): \
             median of per-round ratios |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|");
        for (ours, peer, o, i) in pairs {
            let (r, lo, hi) = per_round(&round_rates, o, i);
            let (cpu, _, _) = per_round(&round_server_us, o, i);
            let (client, _, _) = per_round(&round_client_us, o, i);
            println!(
                "| {ours} | {peer} | {:.2} | **{r:.2}** ({lo:.2}-{hi:.2}) | {:.2} \
                 | {:.2} / {:.2} = {:.2} | {cpu:.2} | {:.2} / {:.2}: {client:.2} |",
                rate[o] / rate[i],
                latency[o] / latency[i],
                server_us[o],
                server_us[i],
                server_us[o] / server_us[i],
                client_us[o],
                client_us[i]
            );
        }
    }
}

/// A store called directly, behind one box as the service's `DynStore` boxes it.
trait DirectStore: Send + Sync {
    fn decide_boxed<'a>(
        &'a self,
        key: &'a str,
        quota: &'a Quota,
        now: Nanos,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>;
}

impl<S: Store> DirectStore for S {
    fn decide_boxed<'a>(
        &'a self,
        key: &'a str,
        quota: &'a Quota,
        now: Nanos,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>> {
        Box::pin(async move {
            let request = Request::spend(StoreKey::one_window(key)?, quota, 1, now)?;
            self.decide(request).await
        })
    }
}

/// A service over `store`, on the system clock, its keys under `prefix`.
fn service(store: impl Store, prefix: &str) -> Arc<RateLimitService> {
    let config = Config::builder()
        .key_prefix(prefix)
        .build()
        .expect("config");
    // Under cachegrind (`CALLS`), a hand-driven clock: valgrind cannot run the system
    // clock's vDSO set-up. The Redis store decides on Redis' clock either way.
    let clock: Arc<dyn Clock> = match std::env::var_os("CALLS") {
        Some(_) => Arc::new(ManualClock::new(Duration::from_secs(1_800_000_000))),
        None => Arc::new(SystemClock),
    };
    let service = RateLimitService::with_store(config, store, clock);
    Arc::new(service.expect("service"))
}

/// A budget no run exhausts, spread over 64 keys: every call is an admitted decision that
/// writes, the common case.
fn admitting(strategy: Strategy) -> Options {
    Options::new()
        .limit(LIMIT)
        .window(Duration::from_secs(WINDOW_S))
        .strategy(strategy)
}

/// Calls `service.consume` on 64 user keys; every call must be admitted.
fn consume(service: &Arc<RateLimitService>, opts: &Options) -> Call {
    let keys: Arc<Vec<String>> = Arc::new((0..64).map(|i| format!("user{i}")).collect());
    let (service, opts) = (Arc::clone(service), opts.clone());
    Arc::new(move |i| {
        let (service, keys, opts) = (Arc::clone(&service), Arc::clone(&keys), opts.clone());
        Box::pin(async move {
            let d = service
                .consume(&keys[i % keys.len()], &opts)
                .await
                .expect("decision");
            assert!(d.allowed);
        })
    })
}

/// A spend kept for a refund, then given back (the stamp held: it is).
fn kept(service: &Arc<RateLimitService>, opts: &Options) -> Call {
    let keys: Arc<Vec<String>> = Arc::new((0..64).map(|i| format!("user{i}")).collect());
    let (service, opts) = (Arc::clone(service), opts.clone());
    Arc::new(move |i| {
        let (service, keys, opts) = (Arc::clone(&service), Arc::clone(&keys), opts.clone());
        Box::pin(async move {
            let spent = service
                .spend(&keys[i % keys.len()], &opts)
                .await
                .expect("decision");
            assert!(spent.decision().allowed);
            assert!(spent.refund().await.expect("refund"), "{opts:?}");
        })
    })
}

/// A peer's script as a [`Store`]: one `EVALSHA` per decision, called as its library calls it,
/// the reply read into a [`Decision`] as far as it says anything (`allowed`, and `remaining`
/// where it is given).
struct PeerStore {
    strategy: Strategy,
    script: redis::Script,
    connection: PeerConnection,
}

/// The peers' connection: a bare `MultiplexedConnection` with no response timeout, or with
/// `PEER_CONNECTION=manager` redis-rs' default `ConnectionManager` (a 500 ms timer per call).
#[derive(Clone)]
enum PeerConnection {
    Bare(redis::aio::MultiplexedConnection),
    Manager(redis::aio::ConnectionManager),
}

impl PeerConnection {
    async fn open(url: &str) -> Self {
        let client = redis::Client::open(url).expect("client");
        if std::env::var("PEER_CONNECTION").as_deref() == Ok("manager") {
            let manager = redis::aio::ConnectionManager::new(client);
            return PeerConnection::Manager(manager.await.expect("connect"));
        }
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let bare = client.get_multiplexed_async_connection_with_config(&config);
        PeerConnection::Bare(bare.await.expect("connect"))
    }
}

impl redis::aio::ConnectionLike for PeerConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            PeerConnection::Bare(c) => c.req_packed_command(cmd),
            PeerConnection::Manager(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            PeerConnection::Bare(c) => c.req_packed_commands(cmd, offset, count),
            PeerConnection::Manager(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            PeerConnection::Bare(c) => c.get_db(),
            PeerConnection::Manager(c) => c.get_db(),
        }
    }
}

impl Store for PeerStore {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let (key, quota) = (request.key().as_str(), request.quota());
        let (cost, now) = (request.cost(), request.now());
        let limit = quota.capacity();
        let window_s = quota.window().as_secs().max(1);
        let mut invocation = self.script.prepare_invoke();
        match self.strategy {
            // limits: INCR, EXPIRE on the first hit; the count is compared by the client.
            Strategy::FixedWindow => invocation.key(key).arg(window_s),
            // limits: the client's time in seconds, the limit, the expiry, the amount.
            Strategy::SlidingWindow => {
                let now_s = now as f64 / 1e9;
                invocation
                    .key(key)
                    .arg(now_s)
                    .arg(limit)
                    .arg(window_s)
                    .arg(cost)
            }
            // limits: the previous and current windows' keys (one hash tag), the limit, the
            // window in seconds, the amount.
            Strategy::SlidingWindowCounter => invocation
                .key(format!("{key}:previous"))
                .key(format!("{key}:current"))
                .arg(limit)
                .arg(window_s)
                .arg(cost),
            // redis_rate: burst, rate, period in seconds, cost.
            Strategy::TokenBucket => invocation
                .key(key)
                .arg(limit)
                .arg(limit)
                .arg(window_s)
                .arg(cost),
        };
        let reply: redis::Value = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| Error::Store {
                message: e.to_string(),
            })?;
        let (allowed, remaining) = match reply {
            redis::Value::Int(n) if self.strategy == Strategy::FixedWindow => {
                let n = n as u64;
                (n <= limit, limit.saturating_sub(n))
            }
            redis::Value::Int(n) => (n == 1, 0),
            redis::Value::Array(items) => match items[..] {
                [redis::Value::Int(allowed), redis::Value::Int(remaining), ..] => {
                    (allowed != 0, remaining as u64)
                }
                _ => (false, 0),
            },
            _ => (false, 0),
        };
        let mut decision = Decision::unlimited(now);
        decision.allowed = allowed;
        decision.remaining = remaining;
        decision.limit = limit;
        decision.window = quota.window();
        Ok(decision)
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        // Not atomic: the bench decides one limit at a time.
        let mut decisions = Vec::new();
        for request in stacked.requests() {
            decisions.push(self.decide(request).await?);
        }
        Ok(decisions)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(key);
        let n: u64 = cmd
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| Error::Store {
                message: e.to_string(),
            })?;
        Ok(n > 0)
    }
}

/// The peer's store for `strategy`, over the connection `raw`, and the variant's name; `None`
/// when its file is not in `benches/peers/`.
fn peer(strategy: Strategy, raw: &PeerConnection) -> Option<(String, PeerStore)> {
    let file = match strategy {
        Strategy::FixedWindow => "limits_incr_expire.lua",
        Strategy::SlidingWindow => "limits_acquire_moving_window.lua",
        Strategy::SlidingWindowCounter => "limits_acquire_sliding_window.lua",
        Strategy::TokenBucket => "redis_rate_allow_n.lua",
    };
    let path = format!("{}/benches/peers/{file}", env!("CARGO_MANIFEST_DIR"));
    let Ok(source) = std::fs::read_to_string(&path) else {
        eprintln!("{path} not found: the peer for {strategy} is left out");
        return None;
    };
    let name = format!("peer for {strategy}: {}", file.trim_end_matches(".lua"));
    let store = PeerStore {
        strategy,
        script: redis::Script::new(&source),
        connection: raw.clone(),
    };
    Some((name, store))
}
