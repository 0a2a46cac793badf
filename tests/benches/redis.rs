//! The Redis store side by side with a raw `EVALSHA` of a trivial script, in the same run,
//! over the same kind of connection, against a `redis-server` started for the run.
//!
//! `cargo bench -p ratelimit-tests --features redis --bench redis`
//!
//! For each of `rounds` rounds, every variant runs once, interleaved, so that noise from a
//! shared machine lands on all of them alike; the figure reported is the median over rounds.
//! - latency: sequential decisions from one task (concurrency 1), median per call;
//! - throughput: 64 tasks over one multiplexed connection, decisions per second.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit::{Quota, RedisOptions, RedisStore, Strategy};
use ratelimit_tests::redis_server::{prefix, RedisServer};

const ROUNDS: usize = 7;
const SEQUENTIAL_CALLS: usize = 2_000;
const TASKS: usize = 64;
const CALLS_PER_TASK: usize = 100;

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

async fn throughput(call: &Call) -> f64 {
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
    (TASKS * CALLS_PER_TASK) as f64 / started.elapsed().as_secs_f64()
}

/// Redis' own measure of the CPU time it spent per EVALSHA since the last `CONFIG RESETSTAT`.
fn evalsha_usec_per_call(c: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .expect("evalsha stats")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let server = RedisServer::start();
    let timeout = Duration::from_secs(5);

    // The baseline: EVALSHA of `return 1`, through the same reconnecting multiplexed
    // connection the store uses.
    let client = redis::Client::open(server.url()).expect("client");
    let raw = redis::aio::ConnectionManager::new(client)
        .await
        .expect("connect");
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
        // The store's fixed-window script called raw, same arguments as the store sends:
        // separates the store's client-side cost from the script's cost inside Redis.
        let script = Arc::new(redis::Script::new(concat!(
            include_str!("../../ratelimit-core/lua/prelude.lua"),
            include_str!("../../ratelimit-core/lua/fixed_window.lua")
        )));
        let keys: Arc<Vec<String>> = Arc::new((0..64).map(|i| format!("{p}:raw:{i}")).collect());
        let raw = raw.clone();
        variants.push((
            "raw EVALSHA (fixed_window.lua)".into(),
            Arc::new(move |i| {
                let script = Arc::clone(&script);
                let keys = Arc::clone(&keys);
                let mut raw = raw.clone();
                Box::pin(async move {
                    let reply: Vec<i64> = script
                        .key(&keys[i % keys.len()])
                        .arg(60_000_000u64)
                        .arg(1_000_000u64)
                        .arg(1u64)
                        .arg(1u8)
                        .invoke_async(&mut raw)
                        .await
                        .expect("raw script");
                    assert_eq!(reply[0], 1);
                })
            }),
        ));
    }
    for strategy in Strategy::ALL {
        let store = store.clone();
        // A budget no run exhausts, spread over 64 keys: every call is an admitted decision
        // that writes, the common case.
        let quota = Quota::new(1_000_000, Duration::from_secs(60))
            .unwrap()
            .with_strategy(strategy);
        let keys: Arc<Vec<String>> =
            Arc::new((0..64).map(|i| format!("{p}:{strategy}:{i}")).collect());
        variants.push((
            strategy.to_string(),
            Arc::new(move |i| {
                let store = store.clone();
                let keys = Arc::clone(&keys);
                Box::pin(async move {
                    let d = ratelimit_tests::acquire(&store, &keys[i % keys.len()], &quota)
                        .await
                        .expect("decision");
                    assert!(d.allowed);
                })
            }),
        ));
    }

    // Warm-up: connections, scripts, allocator.
    for (_, call) in &variants {
        latency_us(call).await;
    }
    let mut latency = vec![Vec::new(); variants.len()];
    let mut rate = vec![Vec::new(); variants.len()];
    let mut server_us = vec![Vec::new(); variants.len()];
    let mut stats = server.connection();
    for _ in 0..ROUNDS {
        for (i, (_, call)) in variants.iter().enumerate() {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .exec(&mut stats)
                .expect("reset");
            latency[i].push(latency_us(call).await);
            rate[i].push(throughput(call).await);
            server_us[i].push(evalsha_usec_per_call(&mut stats));
        }
    }
    let latency: Vec<f64> = latency.into_iter().map(median).collect();
    let rate: Vec<f64> = rate.into_iter().map(median).collect();
    let server_us: Vec<f64> = server_us.into_iter().map(median).collect();
    println!(
        "| variant | latency, concurrency 1 (µs/call) | vs raw | throughput, 64 tasks (calls/s) \
         | vs raw | Redis CPU per EVALSHA (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, (name, _)) in variants.iter().enumerate() {
        println!(
            "| {name} | {:.1} | {:.2}x | {:.0} | {:.2}x | {:.2} |",
            latency[i],
            latency[i] / latency[0],
            rate[i],
            rate[i] / rate[0],
            server_us[i]
        );
    }
}
