//! The paths users take, side by side with `governor`'s keyed `check_key` in one run
//! (issue 13): an annotated fn (`key = user`, token bucket and fixed window; the token bucket
//! also as a sync fn),
//! `RateLimitService::consume`, and the bare memory store, on one key and over 100,000 keys;
//! two threads on one key; eight tasks on a 2-worker Tokio runtime over 10,000 keys; the
//! sliding log and the sliding-window counter. Each group also runs the floor of any keyed
//! decision (the key hashed, the clock read, one compare-exchange: see `floor`), issue 29's
//! yardstick: every variant's ratio to it is printed beside its ratio to governor.
//!
//! Every call is admitted (limits far above what a run spends) and reads the clock: governor
//! its quanta clock inside `check_key`, ours `SystemClock` (inside the service; per call for
//! the bare store). Governor is keyed by the same `u64` the annotated fns take (`String` keys
//! are a variant of their own, for the figures of earlier runs).
//!
//! **Order.** Each group's variants run in rounds; round `r` runs them in the cyclic order
//! starting at variant `r mod k` (a Latin square over `k` rounds, `k >= 3`): no variant runs
//! twice in a row, within a round or across two, and each runs in every position equally
//! often. A figure is the median over rounds of the variant's time divided by governor's time
//! *in the same round*; the min and max of those ratios follow. The machine's load
//! (`/proc/loadavg`) is printed before and after.
//!
//! ```text
//! cargo bench -p ratelimit-tests --bench hot_path                       # the real run (quiet machine)
//! RL_ROUNDS=3 RL_CALLS=2000 cargo bench -p ratelimit-tests --bench hot_path   # smoke test
//! ```
//!
//! `RL_ROUNDS` (default 30, rounded up to a multiple of each group's variant count),
//! `RL_CALLS` (calls per sample, default 200,000), `RL_KEYS` (default 100,000); for a
//! profile, `RL_GROUP` (`one`, `unkeyed`, `writers`, `keys`, `sliding`, `threads`, `tasks`) runs one group and
//! `RL_ONLY` (part of a name) keeps the two governor variants and the named ones; for
//! instruction counts, `RL_IR` (part of a name) runs only that variant, `RL_CALLS` calls on
//! one key on a `ManualClock`, under `valgrind --tool=cachegrind` (BENCHMARKS.md).
//! Allocations per call (counted on the calling thread) are printed for the one-thread cases.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use governor::{Quota as GQuota, RateLimiter};
use ratelimit::{
    rate_limit, Error, ManualClock, MemoryStore, Module, Options, Quota, RateLimitService, Strategy,
};
use ratelimit_tests::{allocations, CountingAllocator};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Far above anything a run spends in an hour: never refuses.
const LIMIT: u64 = 4_000_000_000;
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

// Named as its path, which the sync fn below shares: one budget, so that the module's table
// holds one fn's keys, as governor's map does (a figure over 100,000 keys is a table of them).
#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "token-bucket", key = user,
    name = "hot_path::annotated_bucket")]
async fn annotated_bucket(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

// A sync fn: decided at once on the memory store, no future. On the fn above's budget.
#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "token-bucket", key = user,
    name = "hot_path::annotated_bucket")]
fn annotated_sync(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "fixed-window", key = user)]
async fn annotated_fixed(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "sliding-window-counter", key = user)]
async fn annotated_counter(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

// One entry per admitted call: a short window keeps the log a few thousand entries long.
#[rate_limit(limit = 10_000_000, window = "10ms", strategy = "sliding-window", key = user)]
async fn annotated_log(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

// Unkeyed (issue 29): one budget for every caller, against governor's direct limiter.
#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "token-bucket")]
async fn unkeyed_bucket(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

#[rate_limit(limit = 4_000_000_000, window = "1h", strategy = "fixed-window")]
async fn unkeyed_fixed(user: u64) -> Result<u64, Error> {
    Ok(black_box(user))
}

fn options(strategy: Strategy) -> Options {
    let o = Options::new().strategy(strategy).budget("bench-service");
    match strategy {
        Strategy::SlidingWindow => o.limit(10_000_000).window(Duration::from_millis(10)),
        _ => o.limit(LIMIT).window(HOUR),
    }
}

fn quota(strategy: Strategy) -> Quota {
    match strategy {
        Strategy::SlidingWindow => Quota::new(10_000_000, Duration::from_millis(10)),
        _ => Quota::new(LIMIT, HOUR),
    }
    .expect("valid quota")
    .with_strategy(strategy)
}

fn ready<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("the memory store answers at once")
}

/// One call on key number `k`.
type Call = Arc<dyn Fn(u64) -> bool + Send + Sync>;

/// The variants of the one-thread groups; governor first (the baseline).
fn variants(
    service: &RateLimitService,
    keys: &Arc<Vec<String>>,
    strategies: &[Strategy],
) -> Vec<(String, Call)> {
    let clock = Arc::clone(service.clock());
    // `service.consume` and a prepared site on a service of their own (the same options, so
    // one budget): the module's store then holds the annotated fns' keys alone, and each
    // table as many keys as governor's map.
    let own = RateLimitService::with_clock(ratelimit::Config::default(), Arc::clone(&clock))
        .expect("service");
    let gov = Arc::new(RateLimiter::keyed(GQuota::per_second(NonZeroU32::MAX)));
    let gov_s = Arc::new(RateLimiter::keyed(GQuota::per_second(NonZeroU32::MAX)));
    let mut out: Vec<(String, Call)> = vec![(
        "governor check_key(u64)".into(),
        Arc::new(move |k| gov.check_key(&k).is_ok()),
    )];
    let k2 = Arc::clone(keys);
    out.push((
        "governor check_key(String)".into(),
        Arc::new(move |k| gov_s.check_key(&k2[k as usize]).is_ok()),
    ));
    out.push((
        "floor: hash + clock + CAS".into(),
        floor(Arc::clone(keys), &clock),
    ));
    for &strategy in strategies {
        let annotated: Call = match strategy {
            Strategy::TokenBucket => Arc::new(|k| ready(annotated_bucket(k)).is_ok()),
            Strategy::FixedWindow => Arc::new(|k| ready(annotated_fixed(k)).is_ok()),
            Strategy::SlidingWindowCounter => Arc::new(|k| ready(annotated_counter(k)).is_ok()),
            _ => Arc::new(|k| ready(annotated_log(k)).is_ok()),
        };
        out.push((format!("annotated {strategy}"), Arc::clone(&annotated)));
        if strategy == Strategy::TokenBucket {
            out.push((
                format!("annotated sync fn {strategy}"),
                Arc::new(|k| annotated_sync(k).is_ok()),
            ));
        }
        let (svc, names, opts) = (own.clone(), Arc::clone(keys), options(strategy));
        out.push((
            format!("service.consume {strategy}"),
            Arc::new(move |k| {
                ready(svc.consume(&names[k as usize], &opts)).is_ok_and(|d| d.allowed)
            }),
        ));
        if strategy == Strategy::TokenBucket {
            // Issue 27: a service reloaded 8 times (each default limit another), whose calls
            // resolved per call find their transition under every kept configuration (inside
            // their windows: the calls' own window is an hour).
            let reloaded =
                RateLimitService::with_clock(ratelimit::Config::default(), Arc::clone(&clock))
                    .expect("service");
            for i in 0..8 {
                let config = ratelimit::Config::builder().default_limit(100 + i).build();
                reloaded.reload(config.expect("config")).expect("reload");
            }
            let (names, opts) = (Arc::clone(keys), options(strategy));
            out.push((
                format!("service.consume after 8 reloads {strategy}"),
                Arc::new(move |k| {
                    ready(reloaded.consume(&names[k as usize], &opts)).is_ok_and(|d| d.allowed)
                }),
            ));
        }
        let prepared = Arc::new(own.prepare(&options(strategy)).expect("prepared"));
        let names = Arc::clone(keys);
        out.push((
            format!("prepared.consume_now {strategy}"),
            Arc::new(move |k| {
                let decided = prepared.consume_now(&names[k as usize]);
                decided.is_some_and(|d| d.is_ok_and(|d| d.allowed))
            }),
        ));
        out.push((
            format!("store {strategy}"),
            bare_store(
                MemoryStore::new(),
                Arc::clone(keys),
                quota(strategy),
                &clock,
            ),
        ));
        // The store on the annotated fn's own store keys (prefix, hash tag, the quota's
        // identity, the budget's path): the floor under the annotated call, which composes
        // such a key and decides on it. Checked against the key the fn spends from.
        let (budget, identity) = match strategy {
            Strategy::TokenBucket => ("annotated_bucket", "T3600000"),
            Strategy::FixedWindow => ("annotated_fixed", "F3600000"),
            _ => continue,
        };
        let budget = format!("hot_path::{budget}");
        let store_key =
            |k: &str| format!("ratelimit:{{{k}}}{identity}:{}:{budget}:-", budget.len());
        let q = quota(strategy);
        let probe = u64::MAX; // a user no group calls
        assert!(annotated(probe), "{strategy}: the probe refused");
        let modules = service.memory_store().expect("the module's memory store");
        let held = modules.reset(&store_key(&probe.to_string()));
        assert!(held, "{strategy}: not the fn's store key");
        let long: Arc<Vec<String>> = Arc::new(keys.iter().map(|k| store_key(k)).collect());
        // On the module's own store: the fn's cells, in tables as large as the fn's (every
        // variant's keys are in them), not a store of its own holding these keys alone.
        out.push((
            format!("store {strategy}, annotated key"),
            bare_store(modules.clone(), long, q, &clock),
        ));
    }
    out
}

/// The unkeyed group (issue 29): governor's direct (unkeyed) `check` first, the floor of an
/// unkeyed decision (the clock read and one compare-exchange on one cell), and the annotated
/// fns without `key`.
fn unkeyed(clock: &Arc<dyn ratelimit::Clock>) -> Vec<(String, Call)> {
    use std::sync::atomic::AtomicU64;
    let gov = Arc::new(RateLimiter::direct(GQuota::per_second(NonZeroU32::MAX)));
    let (cell, clock) = (Arc::new(AtomicU64::new(0)), Arc::clone(clock));
    vec![
        (
            "governor check (direct)".into(),
            Arc::new(move |_| gov.check().is_ok()),
        ),
        (
            "floor: clock + CAS".into(),
            Arc::new(move |_| {
                let now = clock.now();
                let seen = cell.load(Ordering::Relaxed);
                let next = seen.max(now) + 1;
                cell.compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            }),
        ),
        (
            "unkeyed annotated token-bucket".into(),
            Arc::new(|k| ready(unkeyed_bucket(k)).is_ok()),
        ),
        (
            "unkeyed annotated fixed-window".into(),
            Arc::new(|k| ready(unkeyed_fixed(k)).is_ok()),
        ),
    ]
}

/// Calls that write their key's shard (issue 29's `tables`: a writer takes every thread's
/// read lock of a shard): a spend kept and given back, a decision under a quota with a block,
/// two stacked limits. Against `consume` on the same service (and governor), one key.
fn writers(service: &RateLimitService, keys: &Arc<Vec<String>>) -> Vec<(String, Call)> {
    let plain = options(Strategy::TokenBucket);
    let (svc, names, opts) = (service.clone(), Arc::clone(keys), plain.clone());
    let consume: Call =
        Arc::new(move |k| ready(svc.consume(&names[k as usize], &opts)).is_ok_and(|d| d.allowed));
    // A spend is given back only while it still holds time: a token every 86 ms, not the
    // other variants' one a nanosecond (every spend is given back: the budget never runs out).
    let (svc, names) = (service.clone(), Arc::clone(keys));
    let opts = plain
        .clone()
        .budget("bench-refunds")
        .limit(1_000_000)
        .window(DAY);
    let refunded: Call = Arc::new(move |k| {
        let mut spent = ready(svc.spend(&names[k as usize], &opts)).expect("a spend");
        spent
            .refund_now()
            .is_some_and(|given| given.is_ok_and(|given| given))
    });
    let (svc, names) = (service.clone(), Arc::clone(keys));
    let opts = plain
        .clone()
        .budget("bench-blocks")
        .block_for(Duration::from_secs(1));
    let blocked: Call =
        Arc::new(move |k| ready(svc.consume(&names[k as usize], &opts)).is_ok_and(|d| d.allowed));
    let (svc, names) = (service.clone(), Arc::clone(keys));
    let (first, second) = (plain.clone().budget("bench-a"), plain.budget("bench-b"));
    let stacked: Call = Arc::new(move |k| {
        let key = names[k as usize].as_str();
        let limits = [(key, &first), (key, &second)];
        ready(svc.consume_all(&limits)).is_ok_and(|all| all.iter().all(|d| d.allowed))
    });
    let gov = Arc::new(RateLimiter::keyed(GQuota::per_second(NonZeroU32::MAX)));
    vec![
        (
            "governor check_key(u64)".into(),
            Arc::new(move |k| gov.check_key(&k).is_ok()),
        ),
        ("writers: service.consume token-bucket".into(), consume),
        ("writers: spend and refund token-bucket".into(), refunded),
        (
            "writers: consume under a block token-bucket".into(),
            blocked,
        ),
        ("writers: consume_all of two token-bucket".into(), stacked),
    ]
}

/// The floor of any keyed decision (issue 29): the key hashed (`foldhash`), the clock read,
/// and one compare-exchange on a cell the hash picks (a table of 4,096 cells, no lookup and no
/// key comparison): what no limiter can go below.
fn floor(keys: Arc<Vec<String>>, clock: &Arc<dyn ratelimit::Clock>) -> Call {
    use std::hash::BuildHasher;
    use std::sync::atomic::AtomicU64;
    let cells: Arc<Vec<AtomicU64>> = Arc::new((0..4_096).map(|_| AtomicU64::new(0)).collect());
    let (hasher, clock) = (foldhash::fast::FixedState::default(), Arc::clone(clock));
    Arc::new(move |k| {
        let hash = hasher.hash_one(keys[k as usize].as_bytes());
        let now = clock.now();
        let cell = &cells[hash as usize & 4_095];
        let seen = cell.load(Ordering::Relaxed);
        let next = seen.max(now) + 1;
        cell.compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// A memory store of its own called directly on `keys`, the clock read per call.
fn bare_store(
    store: MemoryStore,
    keys: Arc<Vec<String>>,
    quota: Quota,
    clock: &Arc<dyn ratelimit::Clock>,
) -> Call {
    let clock = Arc::clone(clock);
    Arc::new(move |k| {
        let now = clock.now();
        store
            .acquire(&keys[k as usize], &quota, 1, now)
            .is_ok_and(|d| d.allowed)
    })
}

/// Round `r`'s order of `k` variants: cyclic, starting at `r mod k`.
fn order(round: usize, k: usize) -> impl Iterator<Item = usize> {
    (0..k).map(move |i| (round + i) % k)
}

/// Rounds asked for (`RL_ROUNDS`), set once by `main`.
static ROUNDS: AtomicUsize = AtomicUsize::new(30);

fn rounds_for(k: usize) -> usize {
    ROUNDS.load(Ordering::Relaxed).div_ceil(k) * k
}

/// Runs `sample(variant)` (ns per call) in balanced rounds; prints each variant's median
/// ns and its median ratio to variant 0 (governor) over rounds, with min and max.
fn report(group: &str, names: &[String], mut sample: impl FnMut(usize) -> f64, unit: &str) {
    let k = names.len();
    assert!(k >= 3, "the balanced order needs three variants or more");
    let rounds = rounds_for(k);
    let mut times = vec![Vec::with_capacity(rounds); k];
    for round in 0..rounds {
        for v in order(round, k) {
            times[v].push(sample(v));
        }
    }
    let median = |xs: &mut Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    // Issue 29: each variant against the floor too, where the group runs one (the same
    // median of per-round ratios); and against governor keyed by a string, where the group
    // runs it: the baseline issues 28 and 29 name ("keyed by the same string key").
    let floor = names.iter().position(|n| n.starts_with("floor"));
    let string = names.iter().position(|n| n.ends_with("check_key(String)"));
    let against = |v: usize, base: usize| {
        let mut r: Vec<f64> = (0..rounds).map(|r| times[v][r] / times[base][r]).collect();
        median(&mut r)
    };
    println!("\n{group} ({rounds} rounds)");
    for v in 0..k {
        let mut ratios: Vec<f64> = (0..rounds).map(|r| times[v][r] / times[0][r]).collect();
        let ratio = median(&mut ratios);
        let (lo, hi) = (ratios[0], ratios[rounds - 1]);
        let t = median(&mut times[v].clone());
        let over_floor = floor.map_or(String::new(), |f| {
            format!("   {:>5.2}x floor", against(v, f))
        });
        let over_string = string.map_or(String::new(), |s| {
            format!("   {:>5.2}x String", against(v, s))
        });
        println!(
            "  {:<44} {t:>10.1} {unit}   {ratio:>5.2}x governor [{lo:.2}-{hi:.2}]{over_string}{over_floor}",
            names[v]
        );
    }
}

/// Whether `RL_ONLY` (a substring of a variant's name) lets this variant run; the baseline
/// and two variants always stay, for the balanced order.
fn selected(cases: Vec<(String, Call)>) -> Vec<(String, Call)> {
    let Ok(only) = std::env::var("RL_ONLY") else {
        return cases;
    };
    cases
        .into_iter()
        .enumerate()
        .filter(|(i, (name, _))| *i < 2 || name.contains(&only))
        .map(|(_, c)| c)
        .collect()
}

fn single_thread(group: &str, cases: &[(String, Call)], keys: u64, calls: usize) {
    let names: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    // Every key of every variant exists before any measurement: no variant is timed on a
    // smaller table than another.
    for (name, call) in cases {
        for k in 0..keys {
            assert!(call(k), "{name}: refused");
        }
        let before = allocations();
        for k in 0..keys.min(1_000) {
            call(k);
        }
        let allocs = allocations() - before;
        println!(
            "  {group} / {name}: {:.2} allocations per call",
            allocs as f64 / keys.min(1_000) as f64
        );
    }
    let mut next = vec![0u64; cases.len()];
    report(
        group,
        &names,
        |v| {
            let call = &cases[v].1;
            let start = Instant::now();
            let mut k = next[v];
            for _ in 0..calls {
                k = if k + 1 == keys { 0 } else { k + 1 };
                black_box(call(black_box(k)));
            }
            next[v] = k;
            start.elapsed().as_nanos() as f64 / calls as f64
        },
        "ns/call",
    );
}

fn two_threads(cases: &[(String, Call)], calls: usize) {
    let names: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    report(
        "two threads on one key (wall time / calls of both)",
        &names,
        |v| {
            let call = &cases[v].1;
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for _ in 0..calls {
                            black_box(call(black_box(0)));
                        }
                    });
                }
            });
            start.elapsed().as_nanos() as f64 / (2 * calls) as f64
        },
        "ns/call",
    );
}

fn tokio_tasks(cases: &[(String, Call)], calls: usize) {
    const TASKS: u64 = 8;
    const KEYS: u64 = 10_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let names: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let per_task = (calls as u64 / TASKS).max(1);
    let mut rates = vec![Vec::new(); cases.len()];
    report(
        "eight tasks on a 2-worker Tokio runtime, 10,000 keys",
        &names,
        |v| {
            let start = Instant::now();
            runtime.block_on(async {
                let tasks: Vec<_> = (0..TASKS)
                    .map(|t| {
                        let call = Arc::clone(&cases[v].1);
                        tokio::spawn(async move {
                            for i in 0..per_task {
                                black_box(call((t + i * TASKS) % KEYS));
                                if i % 1024 == 0 {
                                    tokio::task::yield_now().await;
                                }
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("task");
                }
            });
            let ns = start.elapsed().as_nanos() as f64 / (TASKS * per_task) as f64;
            rates[v].push(1e9 / ns);
            ns
        },
        "ns/decision",
    );
    for (v, name) in names.iter().enumerate() {
        let r = &mut rates[v];
        r.sort_by(f64::total_cmp);
        println!(
            "  {name:<44} {:>10.2} M decisions/s (median)",
            r[r.len() / 2] / 1e6
        );
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_else(|_| "unknown".into())
        .trim()
        .to_owned()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then one tiny pass.
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = if benching {
        env("RL_CALLS", 200_000)
    } else {
        100
    };
    let n_keys = if benching {
        env("RL_KEYS", 100_000)
    } else {
        1_000
    } as u64;
    ROUNDS.store(
        if benching { env("RL_ROUNDS", 30) } else { 3 },
        Ordering::Relaxed,
    );
    println!(
        "load before: {}  (RL_CALLS={calls}, RL_KEYS={n_keys})",
        loadavg()
    );
    // `RL_IR=<part of a variant's name>`: only that variant, `RL_CALLS` calls on one key, on
    // a `ManualClock` (valgrind cannot run `SystemClock`'s first read: rustix's vDSO lookup
    // faults under it), for instruction counts: run it with two `RL_CALLS` under
    // `valgrind --tool=cachegrind --cache-sim=no` and divide the difference.
    let ir = std::env::var("RL_IR").ok();
    let module = match ir {
        Some(_) => Module::builder().clock(ManualClock::new(Duration::from_secs(1_000_000))),
        None => Module::builder(),
    }
    .init()
    .expect("module");
    let service = module.service().clone();
    let keys: Arc<Vec<String>> = Arc::new((0..n_keys).map(|i| i.to_string()).collect());
    let main = [Strategy::TokenBucket, Strategy::FixedWindow];

    if let Some(only) = ir {
        let mut cases = variants(&service, &keys, &Strategy::ALL);
        cases.extend(unkeyed(service.clock()));
        cases.extend(writers(&service, &keys));
        let (name, call) = cases
            .iter()
            .find(|(name, _)| name.contains(&only))
            .expect("RL_IR names a variant");
        for _ in 0..calls {
            assert!(call(black_box(0)), "{name}: refused");
        }
        println!("{name}: {calls} calls");
        return;
    }

    let group = std::env::var("RL_GROUP").unwrap_or_default();
    if "one".contains(&group) {
        let one = selected(variants(&service, &keys, &main));
        single_thread("one key", &one, 1, calls);
    }
    if "unkeyed".contains(&group) {
        single_thread("unkeyed", &unkeyed(service.clock()), 1, calls);
    }
    if "writers".contains(&group) {
        single_thread("writers, one key", &writers(&service, &keys), 1, calls / 2);
    }
    if "keys".contains(&group) {
        let many = selected(variants(&service, &keys, &main));
        single_thread("100,000 keys", &many, n_keys, calls);
    }
    if "sliding".contains(&group) {
        let slow = [Strategy::SlidingWindowCounter, Strategy::SlidingWindow];
        let slow = selected(variants(&service, &keys, &slow));
        single_thread(
            "one key, sliding-window counter and sliding log",
            &slow,
            1,
            calls / 4,
        );
    }
    // Two threads beside governor keyed by a string too (the baseline issue 29 names).
    let bucket: Vec<(String, Call)> = variants(&service, &keys, &[Strategy::TokenBucket]);
    if "threads".contains(&group) {
        two_threads(&bucket, calls);
    }
    if "tasks".contains(&group) {
        let tasks: Vec<(String, Call)> = bucket
            .into_iter()
            .filter(|(name, _)| !name.starts_with("store") && !name.contains("String"))
            .collect();
        tokio_tasks(&tasks, calls);
    }

    let stats = module.stats();
    assert_eq!(stats.total.denied + stats.total.errors, 0, "{stats:?}");
    println!("\nload after: {}", loadavg());
}
