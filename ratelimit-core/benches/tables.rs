//! Issue 29's table designs for the memory store, side by side with `governor` in one run:
//! what each costs a decision, alone and under contention, and per key in memory.
//!
//! Every design decides the same thing: it finds the cell of a string key shaped like a
//! store key (`ratelimit:{user:N}T3600000:17:hot_path::annotated:-`), inserting it when
//! missing, and decides GCRA on it with one compare-exchange (limits far above what a run
//! spends: every call is admitted); the clock (quanta) is read once per call. Designs:
//!
//! - `governor` 0.8 keyed by the same `String` (its `DashMap`, SipHash, its own clock read):
//!   the yardstick;
//! - 64 shards of `parking_lot::RwLock<hashbrown::HashTable>` with foldhash: the store's
//!   design before issue 29;
//! - the same shards behind crossbeam's `ShardedLock` (a read lock per thread, a writer
//!   takes all): the store's design now;
//! - `papaya::HashMap` (lock-free reads, one guard per call), its resizes blocking;
//! - `scc::HashIndex` (reads without a lock);
//! - the floor: the key hashed, one compare-exchange on a cell the hash picks (no lookup).
//!
//! Cases: one key and 100,000 keys round-robin, on one thread and on two (wall time divided
//! by the calls of both). Rounds run the designs in a rotating order; a figure is the median
//! over rounds of the design's time over governor's in the same round, [min-max]. Then the
//! heap each design holds per key at 100,000 keys (a counting allocator; the keys' own
//! strings kept outside are not counted, the table's copies are).
//!
//! ```text
//! cargo bench -p ratelimit-core --bench tables                  # RL_ROUNDS=10, RL_CALLS=500000
//! ```

use std::hash::BuildHasher;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, PoisonError};
use std::time::Instant;

use crossbeam_utils::sync::ShardedLock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocated;

const SHARDS: usize = 64;
/// Far above what a run spends: every call is admitted.
const TOLERANCE: u64 = 1 << 60;

/// One GCRA decision on `tat` at `now`, one nanosecond a call.
#[inline]
fn decide(tat: &AtomicU64, now: u64) -> bool {
    let mut seen = tat.load(Ordering::Relaxed);
    loop {
        let at = seen.max(now);
        if at - now > TOLERANCE {
            return false;
        }
        match tat.compare_exchange_weak(seen, at + 1, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now_seen) => seen = now_seen,
        }
    }
}

struct Cell {
    key: Box<[u8]>,
    tat: AtomicU64,
}

/// A table of shards behind a lock of type `L` (through [`Lock`]).
struct Shards<L> {
    shards: Vec<L>,
    hasher: foldhash::fast::RandomState,
}

/// What the sharded designs need of their lock.
trait Lock: Send + Sync {
    fn new() -> Self;
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool>;
    fn insert(&self, hash: u64, key: &[u8], now: u64, hasher: &foldhash::fast::RandomState)
        -> bool;
}

fn find_in(table: &hashbrown::HashTable<Cell>, hash: u64, key: &[u8], now: u64) -> Option<bool> {
    table
        .find(hash, |c| &*c.key == key)
        .map(|c| decide(&c.tat, now))
}

fn insert_in(
    table: &mut hashbrown::HashTable<Cell>,
    hash: u64,
    key: &[u8],
    now: u64,
    hasher: &foldhash::fast::RandomState,
) -> bool {
    if let Some(found) = find_in(table, hash, key, now) {
        return found;
    }
    let cell = Cell {
        key: key.into(),
        tat: AtomicU64::new(0),
    };
    let entry = table.insert_unique(hash, cell, |c| hasher.hash_one(&*c.key));
    decide(&entry.get().tat, now)
}

#[repr(align(128))]
struct RwShard(parking_lot::RwLock<hashbrown::HashTable<Cell>>);

impl Lock for RwShard {
    fn new() -> Self {
        RwShard(parking_lot::RwLock::new(hashbrown::HashTable::new()))
    }
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool> {
        find_in(&self.0.read(), hash, key, now)
    }
    fn insert(&self, hash: u64, key: &[u8], now: u64, h: &foldhash::fast::RandomState) -> bool {
        insert_in(&mut self.0.write(), hash, key, now, h)
    }
}

#[repr(align(128))]
struct ShardedShard(ShardedLock<hashbrown::HashTable<Cell>>);

impl Lock for ShardedShard {
    fn new() -> Self {
        ShardedShard(ShardedLock::new(hashbrown::HashTable::new()))
    }
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool> {
        let table = self.0.read().unwrap_or_else(PoisonError::into_inner);
        find_in(&table, hash, key, now)
    }
    fn insert(&self, hash: u64, key: &[u8], now: u64, h: &foldhash::fast::RandomState) -> bool {
        let mut table = self.0.write().unwrap_or_else(PoisonError::into_inner);
        insert_in(&mut table, hash, key, now, h)
    }
}

impl<L: Lock> Shards<L> {
    fn new() -> Self {
        Shards {
            shards: (0..SHARDS).map(|_| L::new()).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
    fn decide(&self, key: &[u8], now: u64) -> bool {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[(hash >> 32) as usize % SHARDS];
        match shard.find(hash, key, now) {
            Some(decided) => decided,
            None => shard.insert(hash, key, now, &self.hasher),
        }
    }
}

struct Papaya(papaya::HashMap<Box<[u8]>, AtomicU64, foldhash::fast::RandomState>);

impl Papaya {
    fn new() -> Self {
        let map = papaya::HashMap::builder()
            .hasher(foldhash::fast::RandomState::default())
            .resize_mode(papaya::ResizeMode::Blocking)
            .build();
        Papaya(map)
    }
    fn decide(&self, key: &[u8], now: u64) -> bool {
        let map = self.0.pin();
        match map.get(key) {
            Some(tat) => decide(tat, now),
            None => decide(
                map.get_or_insert_with(key.into(), || AtomicU64::new(0)),
                now,
            ),
        }
    }
}

/// `scc::HashIndex` values are cloned on update; a cell's clone copies its time.
struct SccCell(AtomicU64);

impl Clone for SccCell {
    fn clone(&self) -> Self {
        SccCell(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

struct Scc(scc::HashIndex<Box<[u8]>, SccCell, foldhash::fast::RandomState>);

impl Scc {
    fn new() -> Self {
        Scc(scc::HashIndex::with_hasher(
            foldhash::fast::RandomState::default(),
        ))
    }
    fn decide(&self, key: &[u8], now: u64) -> bool {
        if let Some(decided) = self.0.peek_with(key, |_, c| decide(&c.0, now)) {
            return decided;
        }
        let _ = self.0.insert(key.into(), SccCell(AtomicU64::new(0)));
        self.0
            .peek_with(key, |_, c| decide(&c.0, now))
            .unwrap_or(false)
    }
}

struct Floor {
    cells: Vec<AtomicU64>,
    hasher: foldhash::fast::RandomState,
}

impl Floor {
    fn new() -> Self {
        Floor {
            cells: (0..1 << 18).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
    fn decide(&self, key: &[u8], now: u64) -> bool {
        let i = self.hasher.hash_one(key) as usize & (self.cells.len() - 1);
        decide(&self.cells[i], now)
    }
}

/// One design, deciding key number `i`.
type Design = Arc<dyn Fn(usize) -> bool + Send + Sync>;

/// The designs, each on its own table, over `keys`; the clock read per call.
fn designs(keys: &Arc<Vec<String>>) -> Vec<(&'static str, Design)> {
    let clock = quanta::Clock::new();
    let base = clock.raw();
    let now = move || clock.delta_as_nanos(base, clock.raw());
    let gov: Arc<DefaultKeyedRateLimiter<String>> =
        Arc::new(RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX)));
    let (rw, sharded) = (
        Arc::new(Shards::<RwShard>::new()),
        Arc::new(Shards::<ShardedShard>::new()),
    );
    let (papaya, scc, floor) = (
        Arc::new(Papaya::new()),
        Arc::new(Scc::new()),
        Arc::new(Floor::new()),
    );
    let k = |keys: &Arc<Vec<String>>| Arc::clone(keys);
    let (k1, k2, k3, k4, k5, k6) = (k(keys), k(keys), k(keys), k(keys), k(keys), k(keys));
    let (n2, n3, n4, n5, n6) = (now.clone(), now.clone(), now.clone(), now.clone(), now);
    vec![
        (
            "governor keyed (String)",
            Arc::new(move |i| gov.check_key(&k1[i]).is_ok()),
        ),
        (
            "shards, parking_lot RwLock",
            Arc::new(move |i| rw.decide(k2[i].as_bytes(), n2())),
        ),
        (
            "shards, ShardedLock (ours)",
            Arc::new(move |i| sharded.decide(k3[i].as_bytes(), n3())),
        ),
        (
            "papaya",
            Arc::new(move |i| papaya.decide(k4[i].as_bytes(), n4())),
        ),
        (
            "scc HashIndex",
            Arc::new(move |i| scc.decide(k5[i].as_bytes(), n5())),
        ),
        (
            "floor: hash + clock + CAS",
            Arc::new(move |i| floor.decide(k6[i].as_bytes(), n6())),
        ),
    ]
}

/// Nanoseconds per call of `design` on `threads` threads over `n_keys` keys.
fn sample(design: &Design, threads: usize, n_keys: usize, calls: usize) -> f64 {
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (design, start) = (Arc::clone(design), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                let mut admitted = 0;
                for c in 0..calls {
                    admitted += usize::from(design((c + t * 7_919) % n_keys));
                }
                assert_eq!(admitted, calls, "every call is admitted");
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for worker in workers {
        worker.join().expect("a worker");
    }
    began.elapsed().as_nanos() as f64 / (calls * threads) as f64
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

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then one tiny pass.
    let benching = std::env::args().any(|a| a == "--bench");
    let (rounds, calls, n_keys) = match benching {
        true => (
            env("RL_ROUNDS", 10),
            env("RL_CALLS", 500_000),
            env("RL_KEYS", 100_000),
        ),
        false => (1, 1_000, 1_000),
    };
    let keys: Arc<Vec<String>> = Arc::new(
        (0..n_keys)
            .map(|i| format!("ratelimit:{{user:{i}}}T3600000:17:hot_path::annotated:-"))
            .collect(),
    );
    // Memory first, in a fresh heap, papaya last: its maps free their entries later (its
    // collector), which would be counted against whatever is measured next.
    memory(&keys);
    let designs = designs(&keys);
    println!(
        "load before: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for (case, keys_used, threads) in [
        ("one key, one thread", 1, 1),
        ("100,000 keys, one thread", n_keys, 1),
        ("one key, two threads", 1, 2),
        ("100,000 keys, two threads", n_keys, 2),
    ] {
        // Every key of every design exists before anything is timed.
        for (_, design) in &designs {
            sample(design, 1, keys_used, keys_used);
        }
        let k = designs.len();
        let mut times = vec![Vec::new(); k];
        let mut ratios = vec![Vec::new(); k];
        for round in 0..rounds {
            let mut this = vec![0.0; k];
            for i in 0..k {
                let d = (i + round) % k;
                this[d] = sample(&designs[d].1, threads, keys_used, calls);
            }
            for d in 0..k {
                times[d].push(this[d]);
                ratios[d].push(this[d] / this[0]);
            }
        }
        println!("{case} ({rounds} rounds)");
        for d in 0..k {
            let ratio = median(&mut ratios[d]);
            let (lo, hi) = (ratios[d][0], ratios[d][rounds - 1]);
            let t = median(&mut times[d]);
            println!(
                "  {:<28} {t:>7.1} ns/call  {ratio:>5.2}x governor [{lo:.2}-{hi:.2}]",
                designs[d].0
            );
        }
    }
    println!(
        "load after: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

/// The heap each design holds per key once `keys` are all in it.
fn memory(keys: &Arc<Vec<String>>) {
    println!(
        "heap per key at {} keys (the table's copy of the key included)",
        keys.len()
    );
    for (name, build) in [
        ("governor keyed (String)", 0),
        ("shards, parking_lot RwLock", 1),
        ("shards, ShardedLock (ours)", 2),
        ("scc HashIndex", 4),
        ("papaya", 3),
    ] {
        let before = allocated();
        let design: Design = match build {
            0 => {
                let gov: Arc<DefaultKeyedRateLimiter<String>> =
                    Arc::new(RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX)));
                let k = Arc::clone(keys);
                Arc::new(move |i| gov.check_key(&k[i]).is_ok())
            }
            1 => {
                let (t, k) = (Arc::new(Shards::<RwShard>::new()), Arc::clone(keys));
                Arc::new(move |i| t.decide(k[i].as_bytes(), 1))
            }
            2 => {
                let (t, k) = (Arc::new(Shards::<ShardedShard>::new()), Arc::clone(keys));
                Arc::new(move |i| t.decide(k[i].as_bytes(), 1))
            }
            3 => {
                let (t, k) = (Arc::new(Papaya::new()), Arc::clone(keys));
                Arc::new(move |i| t.decide(k[i].as_bytes(), 1))
            }
            _ => {
                let (t, k) = (Arc::new(Scc::new()), Arc::clone(keys));
                Arc::new(move |i| t.decide(k[i].as_bytes(), 1))
            }
        };
        for i in 0..keys.len() {
            black_box(design(i));
        }
        let per_key = (allocated() - before) as f64 / keys.len() as f64;
        let key_len = keys[keys.len() / 2].len();
        println!(
            "  {name:<28} {per_key:>6.1} B ({:.1} B besides the key's {key_len} bytes)",
            per_key - key_len as f64
        );
        drop(design);
    }
}
