//! Issue 29's table designs for the memory store, side by side with `governor` in one run:
//! what each costs a decision, alone and under contention, and per key in memory.
//!
//! Every design decides the same thing: it finds the cell of a string key shaped like a
//! store key (`ratelimit:{user:N}T3600000:17:hot_path::annotated:-`), inserting it when
//! missing (the writer path), and decides GCRA on it with one compare-exchange on an
//! `AtomicU64` (limits far above what a run spends: every call is admitted); the clock
//! (`quanta`, raw counter and `delta_as_nanos` from a base) is read once per call. Designs:
//!
//! - `governor` 0.8 keyed by the same `String` (its `DashMap`, SipHash, its own clock
//!   read): the yardstick, every figure is a ratio to it;
//! - 64 shards of `parking_lot::RwLock<hashbrown::HashTable>` with foldhash, cells holding
//!   a `Box<[u8]>` key and the `AtomicU64`: the store's design before issue 29;
//! - the same shards behind crossbeam's `ShardedLock` (a read lock per thread, a writer
//!   takes all): the store's design now;
//! - the `RwLock` shards keyed by site: a cell holds the site's id (a hash of the store key
//!   around the user key, computed once per site) and the short user key (`user:N`); a call
//!   hashes only the user key, the site's hash mixed in, and compares a `u64` and the short
//!   key: what keys hashed once and compared cheaply would gain; and the same cells behind
//!   `ShardedLock`s (the two changes together);
//! - `papaya::HashMap` (lock-free reads, one guard per call), its resizes blocking;
//! - `scc::HashIndex` (reads without a lock);
//! - the floor: the key hashed, the clock read, one compare-exchange on a cell the hash picks
//!   (no lookup, no table).
//!
//! Cases: one key and `RL_KEYS` keys round-robin, on one thread and on two (wall time from
//! the common start divided by the calls of both: throughput, not latency). **Order:** each
//! case runs in rounds, every design timed once a round; round `r` starts at design
//! `r mod k` and goes round the list (the rounds are rounded up to a multiple of `k`, so each
//! design runs in every position equally often). A figure is the median over rounds of the
//! design's time over governor's *in the same round*, [min-max], then the median ns/call.
//! Then the heap each design holds per key once `RL_KEYS` keys are in it (a counting
//! allocator; the key strings kept outside the tables are not counted, the tables' copies
//! are).
//!
//! ```text
//! RL_ROUNDS=10 cargo bench -p ratelimit-core --bench tables
//! RL_ROUNDS=1 RL_CALLS=2000 RL_KEYS=1000 cargo bench -p ratelimit-core --bench tables  # smoke
//! ```
//!
//! `RL_ROUNDS` (default 10, rounded up as above), `RL_CALLS` (calls per thread per sample,
//! default 200,000), `RL_KEYS` (default 100,000); `RL_SHORT=1` gives every design the short
//! key (`user:N`) instead of the store key. Under `cargo test --benches` (no `--bench`
//! argument) one tiny pass runs.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use foldhash::fast::RandomState;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocated;

#[path = "support/table_designs.rs"]
mod table_designs;
use table_designs::{
    Floor, Papaya, RwShard, Scc, ShardedShard, ShardedSiteShard, Shards, SiteShard, SiteShards,
};

/// One design, deciding key number `i`.
type Design = Arc<dyn Fn(usize) -> bool + Send + Sync>;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Governor,
    RwShards,
    ShardedShards,
    SiteShards,
    ShardedSiteShards,
    Papaya,
    Scc,
    Floor,
}

/// Every design, governor first (the ratios' denominator).
const KINDS: [(Kind, &str); 8] = [
    (Kind::Governor, "governor keyed (String)"),
    (Kind::RwShards, "shards, parking_lot RwLock"),
    (Kind::ShardedShards, "shards, ShardedLock (ours)"),
    (Kind::SiteShards, "shards, (site, user key)"),
    (Kind::ShardedSiteShards, "ShardedLock, (site, user key)"),
    (Kind::Papaya, "papaya"),
    (Kind::Scc, "scc HashIndex"),
    (Kind::Floor, "floor: hash + clock + CAS"),
];

/// The keys of a run: the whole key each design but one looks up, and the site's form.
struct Keys {
    /// The store key (or the user key alone under `RL_SHORT`).
    whole: Arc<Vec<String>>,
    /// The user keys (`user:N`), for the site-keyed shards.
    user: Arc<Vec<String>>,
    /// The site's id: the parts of the store key around the user key, hashed once.
    site: u64,
}

impl Keys {
    fn new(n: usize, short: bool) -> Self {
        let user: Vec<String> = (0..n).map(|i| format!("user:{i}")).collect();
        let whole = match short {
            true => user.clone(),
            false => (user.iter())
                .map(|u| format!("ratelimit:{{{u}}}T3600000:17:hot_path::annotated:-"))
                .collect(),
        };
        let site =
            RandomState::default().hash_one(("ratelimit:{", "}T3600000:17:hot_path::annotated:-"));
        Keys {
            whole: Arc::new(whole),
            user: Arc::new(user),
            site,
        }
    }
}

/// A fresh table of `kind` over `keys`, the clock read once per call.
fn build(kind: Kind, keys: &Keys, clock: &quanta::Clock) -> Design {
    let (clock, base) = (clock.clone(), clock.raw());
    let now = move || clock.delta_as_nanos(base, clock.raw());
    let k = Arc::clone(&keys.whole);
    match kind {
        Kind::Governor => {
            let gov: DefaultKeyedRateLimiter<String> =
                RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
            Arc::new(move |i| gov.check_key(&k[i]).is_ok())
        }
        Kind::RwShards => {
            let t = Shards::<RwShard>::new();
            Arc::new(move |i| t.decide(k[i].as_bytes(), now()))
        }
        Kind::ShardedShards => {
            let t = Shards::<ShardedShard>::new();
            Arc::new(move |i| t.decide(k[i].as_bytes(), now()))
        }
        Kind::SiteShards => {
            let t = SiteShards::<SiteShard>::new();
            let (user, site) = (Arc::clone(&keys.user), keys.site);
            Arc::new(move |i| t.decide(site, user[i].as_bytes(), now()))
        }
        Kind::ShardedSiteShards => {
            let t = SiteShards::<ShardedSiteShard>::new();
            let (user, site) = (Arc::clone(&keys.user), keys.site);
            Arc::new(move |i| t.decide(site, user[i].as_bytes(), now()))
        }
        Kind::Papaya => {
            let t = Papaya::new();
            Arc::new(move |i| t.decide(k[i].as_bytes(), now()))
        }
        Kind::Scc => {
            let t = Scc::new();
            Arc::new(move |i| t.decide(k[i].as_bytes(), now()))
        }
        Kind::Floor => {
            let t = Floor::new();
            Arc::new(move |i| t.decide(k[i].as_bytes(), now()))
        }
    }
}

/// Nanoseconds per call of `design` on `threads` threads over `n_keys` keys, `calls` each:
/// wall time from the first thread's start to the last one's end (each thread reads its own
/// times after a common barrier, so a late-scheduled spawner adds nothing).
fn sample(design: &Design, threads: usize, n_keys: usize, calls: usize) -> f64 {
    let start = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let mut admitted = 0;
                    for c in 0..calls {
                        admitted += usize::from(design(black_box((c + t * 7_919) % n_keys)));
                    }
                    let ended = Instant::now();
                    assert_eq!(admitted, calls, "every call is admitted");
                    (began, ended)
                })
            })
            .collect();
        (workers.into_iter())
            .map(|w| w.join().expect("a worker"))
            .collect()
    });
    let began = spans.iter().map(|s| s.0).min().expect("a thread");
    let ended = spans.iter().map(|s| s.1).max().expect("a thread");
    (ended - began).as_nanos() as f64 / (calls * threads) as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then one tiny pass.
    let benching = std::env::args().any(|a| a == "--bench");
    let (rounds, calls, n_keys) = match benching {
        true => (
            env("RL_ROUNDS", 10).max(1),
            env("RL_CALLS", 200_000).max(1),
            env("RL_KEYS", 100_000).max(1),
        ),
        false => (1, 1_000, 1_000),
    };
    let k = KINDS.len();
    let rounds = match benching {
        true => rounds.div_ceil(k) * k,
        false => 1,
    };
    let keys = Keys::new(n_keys, env("RL_SHORT", 0) != 0);
    let clock = quanta::Clock::new();
    println!(
        "load before: {}  (rounds {rounds}, RL_CALLS={calls}, RL_KEYS={n_keys}, key {:?})",
        loadavg(),
        keys.whole[n_keys - 1]
    );
    // Memory first, in a fresh heap (see `memory`).
    memory(&keys, &clock);
    let designs: Vec<Design> = KINDS
        .iter()
        .map(|&(d, _)| build(d, &keys, &clock))
        .collect();
    let many = format!("{n_keys} keys");
    for (keys_used, threads) in [(1, 1), (n_keys, 1), (1, 2), (n_keys, 2)] {
        // Every key of every design exists before anything is timed.
        for design in &designs {
            sample(design, 1, keys_used, keys_used);
        }
        let mut times = vec![Vec::new(); k];
        let mut ratios = vec![Vec::new(); k];
        for round in 0..rounds {
            let mut this = vec![0.0; k];
            for i in 0..k {
                let d = (i + round) % k;
                this[d] = sample(&designs[d], threads, keys_used, calls);
            }
            for d in 0..k {
                times[d].push(this[d]);
                ratios[d].push(this[d] / this[0]);
            }
        }
        let case = if keys_used == 1 { "one key" } else { &many };
        let thread = if threads == 1 {
            "one thread"
        } else {
            "two threads"
        };
        println!("\n{case}, {thread} ({rounds} rounds): ratio to governor [min-max], ns/call");
        for d in 0..k {
            let ratio = median(&mut ratios[d]);
            let (lo, hi) = (ratios[d][0], ratios[d][rounds - 1]);
            let t = median(&mut times[d]);
            println!(
                "  {:<28} {ratio:>5.2}x [{lo:.2}-{hi:.2}]  {t:>7.1} ns",
                KINDS[d].1
            );
        }
    }
    println!("\nload after: {}", loadavg());
}

/// The heap each design holds per key once every key is in it. Papaya and scc free what
/// they replace (a resized table) through their collectors, later: they run last, so that
/// what they still hold is not counted against another design.
fn memory(keys: &Keys, clock: &quanta::Clock) {
    let n = keys.whole.len();
    println!("\nheap per key at {n} keys (the table's copy of the key included)");
    for kind in [
        Kind::Governor,
        Kind::RwShards,
        Kind::ShardedShards,
        Kind::SiteShards,
        Kind::ShardedSiteShards,
        Kind::Scc,
        Kind::Papaya,
    ] {
        let before = allocated();
        let design = build(kind, keys, clock);
        for i in 0..n {
            black_box(design(i));
        }
        let per_key = (allocated() - before) as f64 / n as f64;
        let stored = match kind {
            Kind::SiteShards | Kind::ShardedSiteShards => &keys.user,
            _ => &keys.whole,
        };
        let key_len = stored.iter().map(String::len).sum::<usize>() as f64 / n as f64;
        let name = KINDS.iter().find(|(d, _)| *d == kind).expect("listed").1;
        println!(
            "  {name:<28} {per_key:>6.1} B ({:>4.1} B besides the key's {key_len:.1} bytes)",
            per_key - key_len
        );
        drop(design);
    }
}
