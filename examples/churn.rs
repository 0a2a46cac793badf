//! Key churn, the full run: 1,000,000 distinct keys over four windows and four strategies on
//! the memory store, through `RateLimitService` on a `ManualClock`; then the clock moves past
//! every expiry and the store's own background sweeper (no call from us) empties it.
//! Reports resident memory (from `/proc/self/statm`) at baseline, at the peak and after the
//! sweep. `tests/churn.rs` checks the same with fewer keys in a debug build.
//!
//! Run with `cargo run --release -p ratelimit-examples --example churn [-- --keys N]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit::{
    Config, Error, ManualClock, MemoryOptions, Options, RateLimitService, StoreConfig, Strategy,
};

/// Resident memory in MiB, or 0 where `/proc` is not available.
fn resident_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    (pages * 4096) as f64 / (1024.0 * 1024.0)
}

const WINDOWS: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(300),
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut keys: usize = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--keys", Some(n)) => keys = n.parse().expect("--keys takes a number"),
            _ => panic!("usage: churn [--keys N]"),
        }
    }
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    // The sweeper thread wakes every second of real time and sweeps at the clock's time.
    let config = Config::builder()
        .store(StoreConfig::Memory(
            MemoryOptions::default()
                .max_keys(keys)
                .sweep_interval(Duration::from_secs(1)),
        ))
        .build()?;
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone()))?;
    let baseline = resident_mib();
    println!("resident memory at baseline: {baseline:.1} MiB");
    // A second round on the same store: resident memory that the allocator kept after the
    // first sweep is reused, not added to, if nothing leaked.
    for round in 1..=2 {
        println!("round {round}:");
        churn(&service, &clock, keys).await?;
    }
    println!("allowed: {} of {}", service.stats().total.allowed, 2 * keys);
    Ok(())
}

async fn churn(service: &RateLimitService, clock: &ManualClock, keys: usize) -> Result<(), Error> {
    let baseline = resident_mib();
    let store = service.memory_store().expect("memory store").clone();
    let started = Instant::now();
    let (mut peak_rss, mut peak_keys) = (baseline, 0);
    for i in 0..keys {
        let opts = Options::new()
            .limit(3)
            .window(WINDOWS[i % 4])
            .strategy(Strategy::ALL[(i / 4) % 4]);
        let d = service.consume(&format!("user:{i}"), &opts).await?;
        assert!(d.allowed, "a new key has its whole budget");
        if i % 1_000 == 999 {
            // 100 ms of clock per 1,000 keys: the short windows expire during the run.
            clock.advance(Duration::from_millis(100));
            peak_keys = peak_keys.max(store.len());
            if i % 50_000 == 49_999 {
                peak_rss = peak_rss.max(resident_mib());
            }
        }
    }
    let loaded = started.elapsed();
    peak_rss = peak_rss.max(resident_mib());
    let at_end = store.len();
    // Past every expiry: two of the longest windows (the sliding window counter keeps the
    // previous window), plus the sweep's one-second grace.
    clock.advance(2 * WINDOWS[3] + Duration::from_secs(2));
    let idle = Instant::now();
    // Waits for the background sweeper: real time, bounded.
    while !store.is_empty() && idle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let swept_in = idle.elapsed();
    let after = resident_mib();
    println!(
        "  keys: {keys} distinct, {loaded:.2?} to decide ({:.0} ns per call)",
        loaded.as_nanos() as f64 / keys as f64
    );
    println!("  tracked: peak {peak_keys}, {at_end} when the last key was decided (the calls swept the short windows as they went)");
    println!("  after the clock passed every expiry: {} keys, emptied by the background sweeper in {swept_in:.2?} with no call", store.len());
    println!("  resident memory: before {baseline:.1} MiB, peak {peak_rss:.1} MiB, after the sweep {after:.1} MiB");

    assert!(store.is_empty(), "the sweeper emptied the store");
    Ok(())
}
