//! The queue's costs, and the metrics feature's.
//!
//! - **Memory per waiter** (printed first, not timed): 10,000 calls wait on one key; the
//!   bytes allocated while they wait, divided by 10,000, counted by a global allocator. Two
//!   figures: everything (the spawned task and its future included, what a caller holds
//!   anyway), and what that is over the same futures boxed and never polled (the task
//!   header and the queue's entries).
//! - `queue/admitted_after_waiting`: `N` calls over the limit wait, then the window turns
//!   and all `N` are admitted, one waking the next: wall time per call. Against
//!   `queue/admitted_at_once`, the same `N` spawned calls admitted without waiting, the
//!   difference is the cost of a queued admission (join, timer, hand-over, leave). Tokio's
//!   paused time moves the clock: no real waiting is timed.
//! - `decision/hot_key`: one memory-store decision through the service. Run it with and
//!   without `--features metrics` (a recorder installed when the feature is on) to see the
//!   metrics' cost per decision.
//!
//! ```text
//! cargo bench -p ratelimit-core --bench queue -- --warm-up-time 1 --measurement-time 3
//! cargo bench -p ratelimit-core --bench queue --features metrics -- decision --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::FutureExt;
use ratelimit_core::testing::TokioClock;
use ratelimit_core::{Config, Options, RateLimitService, Strategy, SystemClock};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocated;

const WAITERS: usize = 10_000;
const N: u64 = 1_000;

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// `limit` per second, fixed windows (the clock starts on a window boundary).
fn per_second(limit: u64) -> Options {
    Options::new()
        .limit(limit)
        .window(Duration::from_secs(1))
        .strategy(Strategy::FixedWindow)
}

fn queued_service(max: usize) -> RateLimitService {
    let config = Config::builder()
        .queue_enabled(true)
        .max_queue_size(max)
        .queue_timeout("1m")
        .build()
        .expect("config");
    RateLimitService::with_clock(config, Arc::new(TokioClock::new())).expect("service")
}

/// Bytes per waiter with `WAITERS` calls waiting on one key.
fn memory_per_waiter() {
    let rt = paused();
    rt.block_on(async {
        let service = queued_service(WAITERS);
        let opts = per_second(1);
        assert!(service.consume("k", &opts).await.expect("decided").allowed);
        // Un-queued: the same futures, boxed, never polled.
        let before = allocated();
        let idle: Vec<_> = (0..WAITERS)
            .map(|_| {
                let service = service.clone();
                let opts = opts.clone();
                Box::pin(async move { service.consume("k", &opts).await })
            })
            .collect();
        let futures_only = allocated() - before;
        drop(idle);

        let before = allocated();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let service = service.clone();
                let opts = opts.clone();
                tokio::spawn(async move { service.consume("k", &opts).await })
            })
            .collect();
        while service.stats().queue.depth < WAITERS as u64 {
            tokio::task::yield_now().await;
        }
        let waiting = allocated() - before;
        println!(
            "memory per waiter ({WAITERS} waiting on one key): {:.0} B in all (the Tokio task \
             and its future included); {:.0} B more than the same futures boxed and never \
             polled (task header, queue entries)",
            waiting as f64 / WAITERS as f64,
            (waiting - futures_only) as f64 / WAITERS as f64,
        );
        for t in tasks {
            t.abort();
        }
    });
}

/// Spawns `n` calls on one key and runs them to completion; returns the wall time.
fn run(
    rt: &tokio::runtime::Runtime,
    service: &RateLimitService,
    limit: u64,
    spend: u64,
) -> Duration {
    rt.block_on(async {
        let opts = per_second(limit);
        for _ in 0..spend {
            assert!(service.consume("k", &opts).await.expect("decided").allowed);
        }
        let started = Instant::now();
        let tasks: Vec<_> = (0..N)
            .map(|_| {
                let service = service.clone();
                let opts = opts.clone();
                tokio::spawn(async move { service.consume("k", &opts).await })
            })
            .collect();
        for t in tasks {
            assert!(t.await.expect("task").expect("admitted").allowed);
        }
        let took = started.elapsed();
        // The next iteration starts on a fresh window (paused time: nothing real waits).
        tokio::time::advance(Duration::from_secs(2)).await;
        took
    })
}

fn queue(c: &mut Criterion) {
    memory_per_waiter();
    let mut g = c.benchmark_group("queue");
    g.throughput(Throughput::Elements(N));
    g.bench_function("admitted_after_waiting", |b| {
        let rt = paused();
        let service = rt.block_on(async { queued_service(N as usize) });
        // The budget is spent: every call waits for the next window.
        b.iter_custom(|iters| (0..iters).map(|_| run(&rt, &service, N, N)).sum());
    });
    g.bench_function("admitted_at_once", |b| {
        let rt = paused();
        let service = rt.block_on(async { queued_service(N as usize) });
        b.iter_custom(|iters| (0..iters).map(|_| run(&rt, &service, N, 0)).sum());
    });
    g.finish();
}

fn decision(c: &mut Criterion) {
    #[cfg(feature = "metrics")]
    metrics_util::debugging::DebuggingRecorder::new()
        .install()
        .expect("the only recorder");
    let config = Config::builder()
        .default_limit(1_000_000_000)
        .default_window(Duration::from_secs(1))
        .strategy(Strategy::TokenBucket)
        .build()
        .expect("config");
    let service = RateLimitService::with_clock(config, Arc::new(SystemClock)).expect("service");
    let options = Options::new().budget("bench");
    let name = if cfg!(feature = "metrics") {
        "hot_key (metrics on, recorder installed)"
    } else {
        "hot_key (metrics off)"
    };
    c.bench_function(&format!("decision/{name}"), |b| {
        b.iter(|| {
            let decision = service
                .consume(black_box("user:1"), &options)
                .now_or_never()
                .expect("the memory path completes at once");
            black_box(decision.expect("decided").allowed)
        })
    });
}

criterion_group!(benches, queue, decision);
criterion_main!(benches);
