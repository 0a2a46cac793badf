//! One hot key, 64 tasks, through `RateLimitService::consume` on the Redis store: leased
//! budgets (`RedisOptions::leases`) against one round trip per decision, in the same run,
//! against a `redis-server` started for the run.
//!
//! `cargo bench -p ratelimit-tests --features redis --bench redis_lease` (`ROUNDS=n`, 7 by
//! default; `CALLS=n` calls per task, 2,000 by default: fewer leave a slice of 1,024 a handful of grants)
//!
//! For each round and strategy (fixed window, token bucket), every variant runs once on a fresh
//! key, interleaved, the order reversed every other round; the figure reported is the median
//! over rounds. Every call is admitted (a million a day; the bucket refills one token every
//! 86.4 ms, so no leased unit outlives its slot). Besides throughput, the Redis script calls
//! per decision, counted by Redis (`INFO commandstats`), which the machine's load does not
//! change.

use std::time::{Duration, Instant};

use ratelimit::{LeaseOptions, Options, RateLimitService, RedisOptions, Strategy};
use ratelimit_tests::redis_server::{prefix, script_calls, RedisServer};

const TASKS: usize = 64;
const DAY: Duration = Duration::from_secs(24 * 3_600);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// 64 tasks making `calls` calls each on `key`: decisions per second.
async fn throughput(service: &RateLimitService, key: &str, options: &Options, calls: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (service, key, options) = (service.clone(), key.to_owned(), options.clone());
            tokio::spawn(async move {
                for _ in 0..calls {
                    let d = service.consume(&key, &options).await.expect("decided");
                    assert!(d.allowed, "the bench's budget ran out");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (TASKS * calls) as f64 / started.elapsed().as_secs_f64()
}

fn service(server: &RedisServer, leases: Option<u64>) -> RateLimitService {
    let mut options = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
    if let Some(slice) = leases {
        options = options.leases(LeaseOptions::new(slice));
    }
    ratelimit_tests::redis_service(options, &prefix("lease-bench"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let (rounds, calls) = (env("ROUNDS", 7), env("CALLS", 2_000));
    let server = RedisServer::start();
    let mut c = server.connection();
    let variants = [
        ("one round trip per decision", service(&server, None)),
        ("leases, slices of 16", service(&server, Some(16))),
        ("leases, slices of 64", service(&server, Some(64))),
        ("leases, slices of 256", service(&server, Some(256))),
        ("leases, slices of 1024", service(&server, Some(1024))),
    ];
    println!("one hot key, {TASKS} tasks x {calls} calls, {rounds} rounds (median)");
    for strategy in [Strategy::FixedWindow, Strategy::TokenBucket] {
        let options = Options::new()
            .limit(1_000_000)
            .window(DAY)
            .strategy(strategy);
        // Scripts loaded (a NOSCRIPT each), so that only decisions are counted below.
        for (_, service) in &variants {
            let key = format!("warm-{strategy}");
            assert!(
                service
                    .consume(&key, &options)
                    .await
                    .expect("decided")
                    .allowed
            );
        }
        let mut per_second = vec![Vec::new(); variants.len()];
        let mut trips = vec![0.0; variants.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..variants.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (_, service) = &variants[i];
                let key = format!("hot-{strategy}-{round}-{i}");
                let before = script_calls(&mut c);
                per_second[i].push(throughput(service, &key, &options, calls).await);
                trips[i] = (script_calls(&mut c) - before) as f64 / (TASKS * calls) as f64;
            }
        }
        let baseline = median(per_second[0].clone());
        println!("\n{strategy}");
        for (i, (name, _)) in variants.iter().enumerate() {
            let rate = median(per_second[i].clone());
            println!(
                "  {name:<30} {rate:>12.0} decisions/s  {:>6.2}x  {:.4} Redis calls/decision",
                rate / baseline,
                trips[i]
            );
        }
    }
}
