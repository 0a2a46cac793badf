//! One OS process of the lease tests: `tasks` concurrent tasks spend one hot key through a
//! Redis store that leases slices of its budget, then the process prints
//! `allowed <n> returned <m>`: the calls admitted here, and the leased units it gave back.
//!
//! Each task makes `calls` calls, or with `calls` = 0 calls until it is refused. With
//! `give_back` = 1 the process gives its unspent units back (`RedisStore::return_leases`)
//! before it exits; otherwise they are left in Redis, spent and unused (under-admission).
//!
//! Usage: `lease-worker <url> <prefix> <strategy> <limit> <window ms> <slice> <tasks> <calls>
//! <give_back: 0|1>`

use std::time::Duration;

use ratelimit::{Config, LeaseOptions, Options, RedisOptions, Strategy};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, prefix, strategy, limit, window_ms, slice, tasks, calls, give_back] = &args[..]
    else {
        panic!(
            "usage: lease-worker <url> <prefix> <strategy> <limit> <window ms> <slice> <tasks> \
             <calls> <give_back>"
        );
    };
    let slice: u64 = slice.parse().expect("slice");
    // Generous: 4 processes x 64 tasks share 2 cores; a timeout would be an error here.
    let options = RedisOptions::new(url.as_str())
        .timeout(Duration::from_secs(10))
        .leases(LeaseOptions::new(slice).idle(Duration::from_secs(3_600)));
    let config = Config::builder().key_prefix(prefix.as_str());
    let service = ratelimit_tests::connected_worker_service(config, options).await;
    let strategy: Strategy = strategy.parse().expect("strategy");
    let limit: u64 = limit.parse().expect("limit");
    let window = Duration::from_millis(window_ms.parse().expect("window"));
    let calls: usize = calls.parse().expect("calls");
    let until_refused = calls == 0;
    let options = Options::new()
        .limit(limit)
        .window(window)
        .strategy(strategy);
    // The token bucket refills one token per window: none during the test (a refill under
    // another strategy is an error: `QuotaError::RefillWithoutTokenBucket`).
    let options = match strategy {
        Strategy::TokenBucket => options.refill(1),
        _ => options,
    };
    // Until refused: at most the whole limit, so that a bug that never refuses shows as a
    // count above the limit, not as a hang.
    let calls = if until_refused {
        limit as usize + 1
    } else {
        calls
    };
    let tasks: usize = tasks.parse().expect("tasks");
    let allowed =
        ratelimit_tests::admitted_by_tasks(&service, &options, tasks, calls, until_refused).await;
    let returned = if give_back == "1" {
        let store = service.redis_store().expect("the Redis store");
        store.return_leases().await.expect("units given back")
    } else {
        0
    };
    println!("allowed {allowed} returned {returned}");
}
