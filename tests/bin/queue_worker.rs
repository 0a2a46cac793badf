//! One OS process of the Redis queue test: `waiters` concurrent calls on one key, each
//! waiting in this process's queue (every wake-up asks Redis again). Prints one line per
//! call: `admitted <window end, ms>` (the fixed window it was admitted in, by Redis' clock),
//! `timed_out`, or `error <what>`.
//!
//! Usage: `queue-worker <url> <prefix> <limit> <window ms> <waiters> <queue timeout ms>`

use std::time::Duration;

use ratelimit::{Config, Error, Options, RedisOptions, Strategy};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, prefix, limit, window_ms, waiters, timeout_ms] = &args[..] else {
        panic!("usage: queue-worker <url> <prefix> <limit> <window ms> <waiters> <timeout ms>");
    };
    let config = Config::builder()
        .key_prefix(prefix.as_str())
        .queue_enabled(true)
        .max_queue_size(10_000)
        .queue_timeout(Duration::from_millis(timeout_ms.parse().expect("timeout")));
    let redis = RedisOptions::new(url.as_str()).timeout(Duration::from_secs(10));
    let service = ratelimit_tests::connected_worker_service(config, redis).await;
    let options = Options::new()
        .limit(limit.parse().expect("limit"))
        .window(Duration::from_millis(window_ms.parse().expect("window")))
        .strategy(Strategy::FixedWindow);
    let calls: Vec<_> = (0..waiters.parse::<usize>().expect("waiters"))
        .map(|_| {
            let service = service.clone();
            let options = options.clone();
            tokio::spawn(async move { service.consume("shared-key", &options).await })
        })
        .collect();
    for call in calls {
        match call.await.expect("task") {
            Ok(d) if d.allowed => println!(
                "admitted {}",
                d.reset_at()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis())
            ),
            Err(Error::QueueTimeout { .. }) => println!("timed_out"),
            other => println!("error {other:?}"),
        }
    }
}
