//! What one leased decision costs in the process, in figures the machine's load does not
//! move: heap allocations per decision (counted by a global allocator on this thread), and a
//! loop to run under `cachegrind` for instructions per decision.
//!
//! One thread, a service on a `ManualClock` over a Redis store (started for the run) leasing
//! slices of the whole budget: after the first call (the one grant), every decision is spent
//! from the lease. `ITERS` decisions (100,000 by default) through `consume` (polled once: it
//! is ready at once) and, as many, through `consume_now`; each path's allocations per decision
//! are printed.
//!
//! ```text
//! cargo bench -p ratelimit-tests --features redis --bench redis_lease_cost
//! ```
//!
//! For instructions per decision, run one path (`PATH_ONLY=consume` or `consume_now`, with
//! `STRATEGY=fixed-window` or `token-bucket`) under cachegrind at two loop lengths and divide
//! the difference by the difference of `ITERS`:
//!
//! ```text
//! for n in 0 100000; do ITERS=$n PATH_ONLY=consume valgrind --tool=cachegrind \
//!   --cache-sim=no --cachegrind-out-file=/dev/null target/release/deps/redis_lease_cost-* \
//!   --bench 2>&1 | grep 'I *refs'; done
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ratelimit::{
    Config, LeaseOptions, ManualClock, Options, RateLimitService, RedisOptions, StoreConfig,
    Strategy,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const DAY: Duration = Duration::from_secs(24 * 3_600);
const LIMIT: u64 = 1_000_000;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs each bench once with no `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let iters = env("ITERS", 100_000);
    assert!(iters < LIMIT / 2, "ITERS: at most {}", LIMIT / 2 - 1);
    let only = std::env::var("PATH_ONLY").ok();
    let strategies: Vec<Strategy> = match std::env::var("STRATEGY") {
        Ok(s) => vec![s.parse().expect("STRATEGY")],
        Err(_) => vec![Strategy::FixedWindow, Strategy::TokenBucket],
    };
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let options = RedisOptions::new(server.url())
        .timeout(Duration::from_secs(30))
        .leases(LeaseOptions::new(LIMIT).idle(Duration::from_secs(3_600)));
    let config = Config::builder()
        .key_prefix(prefix("lease-cost"))
        .store(StoreConfig::Redis(options))
        .build()
        .expect("configuration");
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000_000)));
    let service =
        runtime.block_on(async { RateLimitService::with_clock(config, clock).expect("service") });
    println!("one leased key, {iters} decisions per path, one thread");
    for strategy in strategies {
        let options = Options::new().limit(LIMIT).window(DAY).strategy(strategy);
        // The bucket refills one token every 30 minutes (about as slow as the Redis store
        // allows a million tokens): under valgrind too, no leased unit outlives its slot
        // (unit `j` of a slice counts for `j` refill intervals).
        let options = match strategy {
            Strategy::TokenBucket => options.window(Duration::from_secs(1_800)).refill(1),
            _ => options,
        };
        let key = format!("hot-{strategy}");
        runtime.block_on(async {
            // The grant: the whole budget leased to this process.
            let first = service.consume(&key, &options).await.expect("decided");
            assert!(first.allowed);
            // Warm: this thread's buffers and caches.
            let warm = service.consume(&key, &options).now_or_never();
            assert!(
                warm.expect("leased: ready at once")
                    .expect("decided")
                    .allowed
            );
        });
        let _entered = runtime.enter();
        let consume = || {
            let decided = service.consume(&key, &options).now_or_never();
            decided
                .expect("leased: ready at once")
                .expect("decided")
                .allowed
        };
        let consume_now = || match service.consume_now(&key, &options) {
            Some(decided) => decided.expect("decided").allowed,
            // Not decided at once (before this change, for any store but memory): awaited.
            None => consume(),
        };
        let paths: [(&str, &dyn Fn() -> bool); 2] =
            [("consume", &consume), ("consume_now", &consume_now)];
        for (name, path) in paths {
            if only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let before = ratelimit_tests::allocations();
            for _ in 0..iters {
                assert!(path(), "the budget ran out");
            }
            let allocations = ratelimit_tests::allocations() - before;
            println!(
                "  {strategy:<14} {name:<12} {:.2} allocations per decision",
                allocations as f64 / iters.max(1) as f64
            );
        }
    }
}
