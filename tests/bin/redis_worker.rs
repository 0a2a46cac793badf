//! One OS process of the multi-process tests: `tasks` concurrent tasks each make `calls`
//! calls on one key through a Redis-backed service, then the process prints `allowed <n>`.
//!
//! Usage: `redis-worker <url,url,...> <cluster: 0|1> <prefix> <strategy> <limit> <window ms>
//! <tasks> <calls per task> [refund]`; with `refund`, each task keeps its spends for a refund
//! and gives back every other one it was admitted (each refund must give back, but a token
//! bucket's past 8 spends kept out of order), and the process prints `allowed <n>` for the
//! spends it kept.

use std::time::Duration;

use ratelimit::{Config, Options, RedisOptions, Strategy};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (args, refund) = match &args[..] {
        [head @ .., mode] if args.len() == 9 && mode == "refund" => (head, true),
        all => (all, false),
    };
    let [urls, cluster, prefix, strategy, limit, window_ms, tasks, calls] = args else {
        panic!("usage: redis-worker <urls> <cluster> <prefix> <strategy> <limit> <window ms> <tasks> <calls> [refund]");
    };
    let urls: Vec<&str> = urls.split(',').collect();
    let options = if cluster == "1" {
        RedisOptions::cluster(urls)
    } else {
        RedisOptions::new(urls[0])
    }
    // Generous: 4 processes x 64 tasks share 2 cores; a timeout would be a refusal, not a
    // wrong count, but it would make the count less than the limit.
    .timeout(Duration::from_secs(10));
    let config = Config::builder().key_prefix(prefix.as_str());
    let service = ratelimit_tests::connected_worker_service(config, options).await;
    let strategy: Strategy = strategy.parse().expect("strategy");
    let limit: u64 = limit.parse().expect("limit");
    let window = Duration::from_millis(window_ms.parse().expect("window"));
    let calls: usize = calls.parse().expect("calls");
    let options = Options::new()
        .limit(limit)
        .window(window)
        .strategy(strategy);
    let tasks: usize = tasks.parse().expect("tasks");
    let allowed = match refund {
        false => ratelimit_tests::admitted_by_tasks(&service, &options, tasks, calls, false).await,
        true => kept_by_tasks(&service, &options, tasks, calls, strategy).await,
    };
    println!("allowed {allowed}");
}

/// The spends `tasks` concurrent tasks keep on one key, each making `calls` spends and giving
/// back every other one it was admitted.
async fn kept_by_tasks(
    service: &ratelimit::RateLimitService,
    options: &Options,
    tasks: usize,
    calls: usize,
    strategy: Strategy,
) -> u64 {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (service, options) = (service.clone(), options.clone());
            tokio::spawn(async move {
                let (mut kept, mut admitted) = (0u64, 0u64);
                for _ in 0..calls {
                    let spent = service
                        .spend("shared-key", &options)
                        .await
                        .expect("Redis decided");
                    if !spent.decision().allowed {
                        continue;
                    }
                    admitted += 1;
                    if admitted % 2 == 1 {
                        kept += 1;
                        continue;
                    }
                    // Every refund gives its spend back, but a token bucket's: it is exact
                    // while fewer than 8 spends are kept out of order, and past that gives
                    // back less or nothing, never more (`Gcra::refund`). Hundreds of tasks
                    // keep spends here, so such a spend may stay counted, as kept.
                    let given = spent.refund().await.expect("Redis refunded");
                    if !given {
                        assert_eq!(strategy, Strategy::TokenBucket, "{strategy}: gave nothing");
                        kept += 1;
                    }
                }
                kept
            })
        })
        .collect();
    let mut kept = 0;
    for handle in handles {
        kept += handle.await.expect("task");
    }
    kept
}
