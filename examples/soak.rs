//! Soak: steady load on one service for a while, then a report of exactness, decision latency
//! and resident memory. A documented command, not a test (it runs for minutes):
//!
//! ```sh
//! cargo run --release -p ratelimit-examples --example soak -- --seconds 600
//! cargo run --release -p ratelimit-examples --features redis --example soak -- \
//!     --seconds 600 --redis redis://127.0.0.1:6379
//! ```
//!
//! Options: `--seconds N` (default 600), `--rate N` calls per second in all (default 20,000),
//! `--tasks N` (default 8), `--keys N` (default 1,000), `--limit N` per key per window
//! (default 10) and `--window W` (default `1s`), `--redis URL` (feature `redis`).
//!
//! Exactness: the fixed window, so every admission belongs to one (key, window), identified
//! by the decision's `reset_at` rounded to the nearest window boundary (on Redis, `reset_at`
//! is placed on this process's estimate of Redis' clock, so it is off the boundary by the
//! estimate's error: the largest such error is reported). No window may admit more than the
//! limit, and a window with a refusal must have admitted exactly the limit (cost 1: a call is
//! refused only when the window is full). An admission also carries Redis' own count of its
//! window (`limit - remaining`): two admissions of one count in one window mean one of them
//! was placed a whole window early or late (a round trip slower than the placement's margin,
//! see the Redis store's docs), which is reported apart, never hidden.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ratelimit::{Config, Error, Options, RateLimitService, Strategy};

/// Latency histogram: 100 ns buckets up to 10 ms, and one for everything slower.
const BUCKET_NS: u64 = 100;
const BUCKETS: usize = 100_001;

#[derive(Default)]
struct Report {
    calls: u64,
    errors: u64,
    /// (key, window end) -> (admitted, refused, the counts admitted as a bit set).
    windows: HashMap<(u32, SystemTime), (u64, u64, u64)>,
    /// The largest distance of a `reset_at` from its window's boundary.
    off_boundary: Duration,
    latency: Vec<u64>,
}

fn resident_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    (pages * 4096) as f64 / (1024.0 * 1024.0)
}

/// `at` rounded to the nearest multiple of `window` since the epoch (a fixed window's end),
/// and how far it was from it.
fn boundary(at: SystemTime, window: Duration) -> (SystemTime, Duration) {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (w, t) = (window.as_nanos().max(1), since.as_nanos());
    let end = (t + w / 2) / w * w;
    let off = Duration::from_nanos(t.abs_diff(end) as u64);
    (
        SystemTime::UNIX_EPOCH + Duration::from_nanos(end as u64),
        off,
    )
}

fn percentile(hist: &[u64], total: u64, p: f64) -> Duration {
    let want = ((total as f64) * p).ceil() as u64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= want.max(1) {
            return Duration::from_nanos((i as u64 + 1) * BUCKET_NS);
        }
    }
    Duration::MAX
}

struct Args {
    seconds: u64,
    rate: u64,
    tasks: u64,
    keys: u32,
    limit: u64,
    window: String,
    redis: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 600,
        rate: 20_000,
        tasks: 8,
        keys: 1_000,
        limit: 10,
        window: "1s".into(),
        redis: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let num = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--seconds" => a.seconds = num(),
            "--rate" => a.rate = num(),
            "--tasks" => a.tasks = num().max(1),
            "--keys" => a.keys = num().max(1) as u32,
            "--limit" => a.limit = num(),
            "--window" => a.window = value,
            "--redis" => a.redis = Some(value),
            _ => panic!("unknown option {flag}: see the docs at the top of examples/soak.rs"),
        }
    }
    a
}

fn service(a: &Args) -> Result<RateLimitService, Error> {
    let builder = Config::builder()
        .strategy(Strategy::FixedWindow)
        .key_prefix(format!("soak-{}", std::process::id()))
        .default_limit(a.limit)
        .default_window(a.window.as_str());
    let builder = match &a.redis {
        None => builder,
        #[cfg(feature = "redis")]
        Some(url) => builder.store(ratelimit::StoreConfig::Redis(
            ratelimit::RedisOptions::new(url.clone()).timeout(Duration::from_millis(100)),
        )),
        #[cfg(not(feature = "redis"))]
        Some(_) => panic!("--redis needs the `redis` feature: add --features redis"),
    };
    RateLimitService::new(builder.build()?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let a = args();
    let baseline = resident_mib();
    let service = service(&a)?;
    // Connects the Redis store up front, so the first calls do not pay for it.
    #[cfg(feature = "redis")]
    if let Some(store) = service.redis_store() {
        store.connect().await?;
    }
    let store_name = a
        .redis
        .as_deref()
        .map_or("memory".to_owned(), |u| format!("redis {u}"));
    println!(
        "soak: {store_name}, {} s, {} calls/s over {} tasks, {} keys, fixed window {} per {}",
        a.seconds, a.rate, a.tasks, a.keys, a.limit, a.window
    );
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    // Each task makes its share of the calls in a burst every 10 ms.
    let per_tick = (a.rate / a.tasks / 100).max(1);
    let keys = a.keys;
    let (limit, window) = (
        a.limit,
        ratelimit::parse_window(&a.window).expect("a window"),
    );
    let peak = Arc::new(std::sync::Mutex::new(baseline));
    let sampler = {
        let peak = Arc::clone(&peak);
        tokio::spawn(async move {
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let mut p = peak.lock().unwrap();
                *p = p.max(resident_mib());
            }
        })
    };
    let tasks: Vec<_> = (0..a.tasks)
        .map(|t| {
            let service = service.clone();
            tokio::spawn(async move {
                let mut r = Report {
                    latency: vec![0; BUCKETS],
                    ..Report::default()
                };
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let opts = Options::new();
                let mut key = String::new();
                while Instant::now() < deadline {
                    tick.tick().await;
                    for _ in 0..per_tick {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let k = (seed % u64::from(keys)) as u32;
                        key.clear();
                        use std::fmt::Write as _;
                        let _ = write!(key, "user:{k}");
                        let started = Instant::now();
                        let result = service.consume(&key, &opts).await;
                        let ns = started.elapsed().as_nanos() as u64;
                        r.latency[((ns / BUCKET_NS) as usize).min(BUCKETS - 1)] += 1;
                        r.calls += 1;
                        match result {
                            Ok(d) => {
                                let (end, off) = boundary(d.reset_at(), window);
                                r.off_boundary = r.off_boundary.max(off);
                                let w = r.windows.entry((k, end)).or_default();
                                if d.allowed {
                                    w.0 += 1;
                                    let count = limit.saturating_sub(d.remaining);
                                    if (1..=64).contains(&count) {
                                        w.2 |= 1 << (count - 1);
                                    }
                                } else {
                                    w.1 += 1;
                                }
                            }
                            Err(_) => r.errors += 1,
                        }
                    }
                }
                r
            })
        })
        .collect();
    let mut total = Report {
        latency: vec![0; BUCKETS],
        ..Report::default()
    };
    for task in tasks {
        let r = task.await.expect("a soak task panicked");
        total.calls += r.calls;
        total.errors += r.errors;
        total.off_boundary = total.off_boundary.max(r.off_boundary);
        for (i, n) in r.latency.iter().enumerate() {
            total.latency[i] += n;
        }
        for (w, (ok, no, counts)) in r.windows {
            let e = total.windows.entry(w).or_default();
            // A count seen by two tasks in one window: placed there from another window.
            e.0 += ok;
            e.1 += no;
            e.2 |= counts;
        }
    }
    let _ = sampler.await;
    let end = resident_mib();
    let peak = peak.lock().unwrap().max(end);

    let allowed: u64 = total.windows.values().map(|w| w.0).sum();
    let refused: u64 = total.windows.values().map(|w| w.1).sum();
    let permitted = a.limit * total.windows.len() as u64;
    // Admissions beyond the distinct counts Redis gave in a window were placed there from a
    // neighbouring window; beyond the limit in distinct counts is an admission over it.
    let misplaced: u64 = total
        .windows
        .values()
        .map(|w| w.0.saturating_sub(u64::from(w.2.count_ones())))
        .sum();
    let over: Vec<_> = total
        .windows
        .iter()
        .filter(|(_, w)| u64::from(w.2.count_ones()) > a.limit)
        .collect();
    let full = total.windows.values().filter(|w| w.1 > 0).count();
    let short = total
        .windows
        .values()
        .filter(|w| w.1 > 0 && u64::from(w.2.count_ones()) != a.limit)
        .count();
    println!(
        "calls: {} ({} errors), allowed {allowed}, refused {refused}",
        total.calls, total.errors
    );
    println!(
        "exactness: {} (key, window) pairs, the limit permits {permitted} in them; \
         {} windows over the limit; {full} windows refused a call, {short} of them before \
         admitting exactly {}",
        total.windows.len(),
        over.len(),
        a.limit
    );
    println!(
        "placement: reset_at at most {:?} off its window's boundary; {misplaced} admissions \
         placed a whole window early or late (a count Redis gave in another window)",
        total.off_boundary
    );
    println!(
        "decision latency: p50 {:?}, p99 {:?}, p99.9 {:?} (100 ns buckets)",
        percentile(&total.latency, total.calls, 0.50),
        percentile(&total.latency, total.calls, 0.99),
        percentile(&total.latency, total.calls, 0.999),
    );
    println!("resident memory: baseline {baseline:.1} MiB, peak {peak:.1} MiB, end {end:.1} MiB");
    if let Some(store) = service.memory_store() {
        println!("memory store: {} keys tracked at the end", store.len());
    }
    assert!(over.is_empty(), "windows over the limit: {over:?}");
    assert_eq!(short, 0, "a window refused a call before it was full");
    Ok(())
}
