//! The memory store side by side with `governor`'s keyed limiter, in the same run.
//!
//! Every group holds `governor` and ours, so the figures share one machine state:
//!
//! - `hot_key`: one key, called over and over;
//! - `keys_100k`: 100,000 pre-created `String` keys, called round-robin;
//! - `contended_2_threads`: two threads on one key; the figure is wall time divided by the
//!   calls made by both threads together (throughput, not latency).
//!
//! Each case reads its own clock per call, as it would in production: `governor` its quanta
//! clock inside `check_key`, ours [`SystemClock`] (the store takes `now` as an argument; the
//! counter laid over the wall clock, re-anchored every 100 ms). Two more token-bucket cases
//! split the store from its clock: `now given` reads the clock once, outside the loop;
//! `quanta clock` reads governor's clock instead of ours, converted per call. The `clock`
//! group times the two clocks alone.
//!
//! Limits are huge so that every call is allowed (1e9 per second, one token per nanosecond,
//! for both). The sliding log keeps one entry per admitted call, so its case uses a 10 ms
//! window (limit 1e7): the log stays a few thousand entries long instead of growing for
//! the whole run, and the cost of pruning it is part of the figure.
//!
//! The service case polls `RateLimitService::consume` once with a no-op waker (the memory
//! path is ready at the first poll), which adds key composition, tier resolution and stats to
//! the token-bucket store call.
//!
//! ```text
//! cargo bench -p ratelimit-core --bench memory -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! `RL_KEYS=10000` (say) changes the key count of `keys_100k`, to see where caches end.

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::Reference as _;
use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter};
use ratelimit_core::{
    Clock, Config, MemoryStore, Options, Quota, RateLimitService, Strategy, SystemClock, Tier,
};

const KEYS: usize = 100_000;
fn n_keys() -> usize {
    std::env::var("RL_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KEYS)
}
const PER_SECOND: u32 = 1_000_000_000;

fn governor() -> DefaultKeyedRateLimiter<String> {
    RateLimiter::keyed(GQuota::per_second(
        NonZeroU32::new(PER_SECOND).expect("non-zero"),
    ))
}

/// Our quota for `strategy`, big enough that every call of the run is allowed.
fn quota(strategy: Strategy) -> Quota {
    match strategy {
        // One entry per call: a short window keeps the log short (see the module docs).
        Strategy::SlidingWindow => Quota::new(10_000_000, Duration::from_millis(10)).unwrap(),
        _ => Quota::new(PER_SECOND as u64, Duration::from_secs(1)).unwrap(),
    }
    .with_strategy(strategy)
}

fn service() -> RateLimitService {
    let config = Config::builder()
        .tier(
            Tier::new("bench", PER_SECOND as u64)
                .window("1s")
                .strategy(Strategy::TokenBucket),
        )
        .build()
        .expect("valid config");
    RateLimitService::with_clock(config, Arc::new(SystemClock)).expect("service")
}

const OPTIONS: Options = Options::for_tier("bench");

/// Polls `consume` once: the memory path never awaits.
fn consume(service: &RateLimitService, key: &str) -> bool {
    let waker = futures::task::noop_waker_ref();
    let mut cx = Context::from_waker(waker);
    let fut = pin!(service.consume(key, &OPTIONS));
    match fut.poll(&mut cx) {
        Poll::Ready(decision) => decision.expect("decided").allowed,
        Poll::Pending => unreachable!("the memory path completes at the first poll"),
    }
}

fn keys() -> Vec<String> {
    (0..n_keys()).map(|i| format!("user:{i}")).collect()
}

/// Every case as a closure over a key, so that the three groups run the same code.
type Case = (String, Box<dyn Fn(&String) -> bool + Send + Sync>);

fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let gov = governor();
    cases.push((
        "governor/check_key".into(),
        Box::new(move |k| gov.check_key(k).is_ok()),
    ));
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let q = quota(strategy);
        cases.push((
            format!("store/{strategy}"),
            Box::new(move |k| {
                store
                    .acquire(k, &q, 1, SystemClock.now())
                    .expect("decided")
                    .allowed
            }),
        ));
    }
    // The same call with `now` read once, outside the loop: what the store itself costs.
    let store = MemoryStore::new();
    let q = quota(Strategy::TokenBucket);
    let now = SystemClock.now();
    cases.push((
        "store/token-bucket(now given)".into(),
        Box::new(move |k| store.acquire(k, &q, 1, now).expect("decided").allowed),
    ));
    // The same call with `now` from governor's clock (quanta: an unfenced `rdtsc`, scaled)
    // laid over the wall clock: ours with the clock governor reads.
    let store = MemoryStore::new();
    let quanta = governor::clock::DefaultClock::default();
    let (wall, start) = (SystemClock.now(), governor::clock::Clock::now(&quanta));
    cases.push((
        "store/token-bucket(quanta clock)".into(),
        Box::new(move |k| {
            let elapsed = governor::clock::Clock::now(&quanta).duration_since(start);
            let now = wall + elapsed.as_u64();
            store.acquire(k, &q, 1, now).expect("decided").allowed
        }),
    ));
    let svc = service();
    cases.push((
        "service/consume(token-bucket)".into(),
        Box::new(move |k| consume(&svc, k)),
    ));
    cases
}

fn hot_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_key");
    group.throughput(Throughput::Elements(1));
    let key = String::from("user:42");
    for (name, case) in cases() {
        assert!(case(&key));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(case(black_box(&key))))
        });
    }
    group.finish();
}

fn keys_100k(c: &mut Criterion) {
    let mut group = c.benchmark_group("keys_100k");
    group.throughput(Throughput::Elements(1));
    let keys = keys();
    for (name, case) in cases() {
        // Pre-create every key, so the run measures lookups of known keys.
        assert!(keys.iter().all(&case));
        let mut i = 0;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let key = &keys[i];
                i += 1;
                if i == keys.len() {
                    i = 0;
                }
                black_box(case(black_box(key)))
            })
        });
    }
    group.finish();
}

fn contended_2_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended_2_threads");
    group.throughput(Throughput::Elements(1));
    let key = String::from("user:42");
    for (name, case) in cases() {
        assert!(case(&key));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| {
                // `iters` calls shared by two threads; wall time from the common start.
                let per_thread = iters.div_ceil(2);
                let start = Barrier::new(2);
                let times = std::thread::scope(|s| {
                    let run = || {
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..per_thread {
                            black_box(case(black_box(&key)));
                        }
                        (t, Instant::now())
                    };
                    let other = s.spawn(run);
                    let mine = run();
                    [mine, other.join().expect("bench thread")]
                });
                let first = times.iter().map(|t| t.0).min().expect("two threads");
                let last = times.iter().map(|t| t.1).max().expect("two threads");
                last - first
            })
        });
    }
    group.finish();
}

/// The clocks each side reads per call: ours (wall time: quanta's counter plus an offset
/// re-anchored to `CLOCK_REALTIME`) and governor's default (quanta, from the TSC).
fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let quanta = governor::clock::DefaultClock::default();
    group.bench_function("governor/DefaultClock::now", |b| {
        b.iter(|| black_box(governor::clock::Clock::now(&quanta)))
    });
    group.bench_function("ours/SystemClock::now", |b| {
        b.iter(|| black_box(SystemClock.now()))
    });
    group.finish();
}

criterion_group!(benches, clock, hot_key, keys_100k, contended_2_threads);
criterion_main!(benches);
