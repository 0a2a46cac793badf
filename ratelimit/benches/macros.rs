//! What `#[rate_limit]` costs: an annotated fn vs the same body calling the service directly
//! vs the plain fn, on the memory store, with one key and with 100k keys; and, with one key, a
//! sync annotated fn (no future) and an async one on a library's own `Limiter`.
//!
//! `cargo bench -p ratelimit --bench macros -- --warm-up-time 1 --measurement-time 3`
//! (figures: `BENCHMARKS.md`, section `macros`).
//!
//! Every call is admitted (the limit is far above what a benchmark can spend), so the figures
//! are the cost of a decision, not of a refusal. The futures are ready on first poll (the
//! memory store never waits), so they are polled once with `now_or_never`.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use futures::FutureExt;
use ratelimit::{rate_limit, Error, Limiter, Module, Options, RateLimitService, Strategy};

const KEYS: u64 = 100_000;
/// Far above anything a benchmark can spend in an hour: never refuses.
const LIMIT: u64 = 4_000_000_000;

/// The direct calls' options, built on every call as the macro's are (a `const` cannot hold a
/// window: `Options::window` takes text or a `Duration` through a trait).
fn options(budget: &'static str) -> Options {
    Options::new()
        .limit(LIMIT)
        .window(std::time::Duration::from_secs(3_600))
        .strategy(Strategy::TokenBucket)
        .budget(budget)
}

fn body(user: u64) -> Result<u64, Error> {
    Ok(black_box(user).wrapping_mul(3))
}

async fn plain(user: u64) -> Result<u64, Error> {
    body(user)
}

async fn direct_one(service: &RateLimitService, user: u64) -> Result<u64, Error> {
    service
        .enforce("bench-one-d", &options("bench-one-d"))
        .await?;
    body(user)
}

async fn direct_keyed(service: &RateLimitService, user: u64) -> Result<u64, Error> {
    // The same key the macro builds: the key's text (the budget is a part of the store key
    // of its own).
    let key = user.to_string();
    service.enforce(&key, &options("bench-key-d")).await?;
    body(user)
}

// Budget names of equal length on both sides: the service hashes them (stats, store key),
// and a longer name would cost more for reasons that are not the macro's.
#[rate_limit(
    limit = 4_000_000_000,
    window = "1h",
    strategy = "token-bucket",
    name = "bench-one-a"
)]
async fn annotated_one(user: u64) -> Result<u64, Error> {
    body(user)
}

#[rate_limit(
    limit = 4_000_000_000,
    window = "1h",
    strategy = "token-bucket",
    key = user,
    name = "bench-key-a"
)]
async fn annotated_keyed(user: u64) -> Result<u64, Error> {
    body(user)
}

#[rate_limit(
    limit = 4_000_000_000,
    window = "1h",
    strategy = "token-bucket",
    name = "bench-one-s"
)]
fn annotated_sync(user: u64) -> Result<u64, Error> {
    body(user)
}

/// A library's own limiter: its fns find their service through it rather than through the
/// application's module.
static LIBRARY: Limiter = Limiter::new();

#[rate_limit(
    limit = 4_000_000_000,
    window = "1h",
    strategy = "token-bucket",
    name = "bench-one-l",
    limiter = LIBRARY
)]
async fn annotated_limiter(user: u64) -> Result<u64, Error> {
    body(user)
}

fn ready<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("the memory store answers at once")
}

fn macros(c: &mut Criterion) {
    let module = Module::builder().init().expect("module");
    let service = module.service().clone();
    let library = LIBRARY.init(Module::builder()).expect("library limiter");

    let mut one = c.benchmark_group("macros/one_key");
    one.bench_function("plain", |b| b.iter(|| ready(plain(1)).unwrap()));
    one.bench_function("direct", |b| {
        b.iter(|| ready(direct_one(&service, 1)).unwrap())
    });
    one.bench_function("annotated", |b| b.iter(|| ready(annotated_one(1)).unwrap()));
    one.bench_function("annotated_sync", |b| b.iter(|| annotated_sync(1).unwrap()));
    one.bench_function("annotated_limiter", |b| {
        b.iter(|| ready(annotated_limiter(1)).unwrap())
    });
    one.finish();
    drop(library);

    // Both keyed variants run against the same table: fill it with both key sets first, so
    // neither is measured on a smaller (warmer) table than the other.
    for user in 0..KEYS {
        ready(direct_keyed(&service, user)).unwrap();
        ready(annotated_keyed(user)).unwrap();
    }
    let mut many = c.benchmark_group("macros/100k_keys");
    let mut user = 0u64;
    let mut next = move || {
        user = (user + 1) % KEYS;
        user
    };
    many.bench_function("plain", |b| b.iter(|| ready(plain(next())).unwrap()));
    many.bench_function("direct", |b| {
        b.iter(|| ready(direct_keyed(&service, next())).unwrap())
    });
    many.bench_function("annotated", |b| {
        b.iter(|| ready(annotated_keyed(next())).unwrap())
    });
    many.finish();

    let stats = module.stats();
    assert_eq!(stats.total.denied + stats.total.errors, 0, "{stats:?}");
    drop(module);

    // The same calls with limiting switched off (`enabled(false)`: the service answers
    // without touching the store). Both variants do the same small amount of work, so the
    // difference is the macro's own cost (registry lookup, declaration, plumbing), with less
    // noise from the store than above.
    let module = Module::builder().enabled(false).init().expect("module");
    let service = module.service().clone();
    let mut off = c.benchmark_group("macros/store_off");
    off.bench_function("direct", |b| {
        b.iter(|| ready(direct_one(&service, 1)).unwrap())
    });
    off.bench_function("annotated", |b| b.iter(|| ready(annotated_one(1)).unwrap()));
    off.finish();
}

/// Annotated minus direct, measured in interleaved batches so that both see the same machine
/// load: on a shared machine, criterion's separate runs of each variant drift by more than
/// the difference being measured. Prints the median of the per-batch differences.
fn paired() {
    const BATCH: u64 = 5_000;
    const ROUNDS: usize = 300;
    let module = Module::builder().init().expect("module");
    let service = module.service().clone();
    for user in 0..KEYS {
        ready(direct_keyed(&service, user)).unwrap();
        ready(annotated_keyed(user)).unwrap();
    }
    let mut user = 0u64;
    for keyed in [false, true] {
        let mut direct = Vec::with_capacity(ROUNDS);
        let mut diff = Vec::with_capacity(ROUNDS);
        for round in 0..ROUNDS {
            // Alternate which variant goes first, so that neither always runs on a cache or a
            // CPU warmed (or cooled) by the other.
            let mut times = [0.0f64; 2];
            for turn in 0..2 {
                let annotated = (round + turn) % 2 == 1;
                let start = Instant::now();
                for _ in 0..BATCH {
                    user = (user + 1) % KEYS;
                    match (annotated, keyed) {
                        (false, false) => ready(direct_one(&service, user)).unwrap(),
                        (false, true) => ready(direct_keyed(&service, user)).unwrap(),
                        (true, false) => ready(annotated_one(user)).unwrap(),
                        (true, true) => ready(annotated_keyed(user)).unwrap(),
                    };
                }
                times[usize::from(annotated)] = start.elapsed().as_nanos() as f64 / BATCH as f64;
            }
            direct.push(times[0]);
            diff.push(times[1] - times[0]);
        }
        direct.sort_by(f64::total_cmp);
        diff.sort_by(f64::total_cmp);
        println!(
            "macros/paired/{}: direct {:.1} ns/call; annotated - direct: median {:+.1} ns \
             (quartiles {:+.1} .. {:+.1})",
            if keyed { "100k_keys" } else { "one_key" },
            direct[ROUNDS / 2],
            diff[ROUNDS / 2],
            diff[ROUNDS / 4],
            diff[3 * ROUNDS / 4],
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = macros
}

/// `RATELIMIT_BENCH_CALLS=<direct|annotated|sync|limiter>:<n>`: make exactly `n` one-key calls of one
/// variant and exit, for counting instructions (which, unlike time, a shared machine does not
/// disturb) under `valgrind --tool=cachegrind`: run with two values of `n` and divide the
/// difference in instructions by the difference in calls.
fn count_calls(spec: &str) {
    let (variant, n) = spec
        .split_once(':')
        .expect("<direct|annotated|sync|limiter>:<n>");
    let n: u64 = n.parse().expect("a number of calls");
    let module = Module::builder().init().expect("module");
    let service = module.service().clone();
    let _library = LIBRARY.init(Module::builder()).expect("library limiter");
    for user in 0..n {
        match variant {
            "direct" => ready(direct_one(&service, user)).unwrap(),
            "annotated" => ready(annotated_one(user)).unwrap(),
            "sync" => annotated_sync(user).unwrap(),
            "limiter" => ready(annotated_limiter(user)).unwrap(),
            other => panic!("unknown variant {other:?}"),
        };
    }
}

fn main() {
    if let Ok(spec) = std::env::var("RATELIMIT_BENCH_CALLS") {
        return count_calls(&spec);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Only under `cargo bench` (not when `cargo test --benches` runs each bench once).
    if std::env::args().any(|a| a == "--bench") {
        paired();
    }
}
