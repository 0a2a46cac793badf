//! The table designs the `tables` bench times against `governor` (see tables.rs): each finds
//! the cell of a key, inserting it when missing, and decides GCRA on it with one
//! compare-exchange.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;

use crossbeam_utils::sync::ShardedLock;
use foldhash::fast::RandomState;

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

pub struct Cell {
    key: Box<[u8]>,
    tat: AtomicU64,
}

/// A table of shards behind a lock of type `L` (through [`Lock`]).
pub struct Shards<L> {
    shards: Vec<L>,
    hasher: RandomState,
}

/// What the sharded designs need of their lock.
pub trait Lock: Send + Sync {
    fn new() -> Self;
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool>;
    fn insert(&self, hash: u64, key: &[u8], now: u64, hasher: &RandomState) -> bool;
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
    hasher: &RandomState,
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
pub struct RwShard(parking_lot::RwLock<hashbrown::HashTable<Cell>>);

impl Lock for RwShard {
    fn new() -> Self {
        RwShard(parking_lot::RwLock::new(hashbrown::HashTable::new()))
    }
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool> {
        find_in(&self.0.read(), hash, key, now)
    }
    fn insert(&self, hash: u64, key: &[u8], now: u64, h: &RandomState) -> bool {
        insert_in(&mut self.0.write(), hash, key, now, h)
    }
}

#[repr(align(128))]
pub struct ShardedShard(ShardedLock<hashbrown::HashTable<Cell>>);

impl Lock for ShardedShard {
    fn new() -> Self {
        ShardedShard(ShardedLock::new(hashbrown::HashTable::new()))
    }
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Option<bool> {
        let table = self.0.read().unwrap_or_else(PoisonError::into_inner);
        find_in(&table, hash, key, now)
    }
    fn insert(&self, hash: u64, key: &[u8], now: u64, h: &RandomState) -> bool {
        let mut table = self.0.write().unwrap_or_else(PoisonError::into_inner);
        insert_in(&mut table, hash, key, now, h)
    }
}

impl<L: Lock> Shards<L> {
    pub fn new() -> Self {
        Shards {
            shards: (0..SHARDS).map(|_| L::new()).collect(),
            hasher: RandomState::default(),
        }
    }
    pub fn decide(&self, key: &[u8], now: u64) -> bool {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[(hash >> 32) as usize % SHARDS];
        match shard.find(hash, key, now) {
            Some(decided) => decided,
            None => shard.insert(hash, key, now, &self.hasher),
        }
    }
}

/// A cell keyed by its site (the hash of the store key around the user key) and the user key.
pub struct SiteCell {
    site: u64,
    key: Box<[u8]>,
    tat: AtomicU64,
}

/// A table of site-keyed cells behind a lock of either kind.
pub trait SiteLock: Send + Sync {
    fn new() -> Self;
    fn read(
        &self,
        f: &mut dyn FnMut(&hashbrown::HashTable<SiteCell>) -> Option<bool>,
    ) -> Option<bool>;
    fn write(&self, f: &mut dyn FnMut(&mut hashbrown::HashTable<SiteCell>) -> bool) -> bool;
}

#[repr(align(128))]
pub struct SiteShard(parking_lot::RwLock<hashbrown::HashTable<SiteCell>>);

impl SiteLock for SiteShard {
    fn new() -> Self {
        SiteShard(parking_lot::RwLock::new(hashbrown::HashTable::new()))
    }
    fn read(
        &self,
        f: &mut dyn FnMut(&hashbrown::HashTable<SiteCell>) -> Option<bool>,
    ) -> Option<bool> {
        f(&self.0.read())
    }
    fn write(&self, f: &mut dyn FnMut(&mut hashbrown::HashTable<SiteCell>) -> bool) -> bool {
        f(&mut self.0.write())
    }
}

#[repr(align(128))]
pub struct ShardedSiteShard(ShardedLock<hashbrown::HashTable<SiteCell>>);

impl SiteLock for ShardedSiteShard {
    fn new() -> Self {
        ShardedSiteShard(ShardedLock::new(hashbrown::HashTable::new()))
    }
    fn read(
        &self,
        f: &mut dyn FnMut(&hashbrown::HashTable<SiteCell>) -> Option<bool>,
    ) -> Option<bool> {
        f(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }
    fn write(&self, f: &mut dyn FnMut(&mut hashbrown::HashTable<SiteCell>) -> bool) -> bool {
        f(&mut self.0.write().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Shards keyed by (site, user key), behind locks of type `L`: only the user key is hashed
/// per call.
pub struct SiteShards<L> {
    shards: Vec<L>,
    hasher: RandomState,
}

impl<L: SiteLock> SiteShards<L> {
    pub fn new() -> Self {
        SiteShards {
            shards: (0..SHARDS).map(|_| L::new()).collect(),
            hasher: RandomState::default(),
        }
    }
    /// The user key hashed, the site's hash mixed in (one more folded multiply).
    fn hash(&self, site: u64, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(site);
        h.write(key);
        h.finish()
    }
    #[inline]
    pub fn decide(&self, site: u64, key: &[u8], now: u64) -> bool {
        let hash = self.hash(site, key);
        let shard = &self.shards[(hash >> 32) as usize % SHARDS];
        let eq = |c: &SiteCell| c.site == site && &*c.key == key;
        let found = shard.read(&mut |table| table.find(hash, eq).map(|c| decide(&c.tat, now)));
        if let Some(decided) = found {
            return decided;
        }
        shard.write(&mut |table| {
            if let Some(c) = table.find(hash, eq) {
                return decide(&c.tat, now);
            }
            let cell = SiteCell {
                site,
                key: key.into(),
                tat: AtomicU64::new(0),
            };
            let entry = table.insert_unique(hash, cell, |c| self.hash(c.site, &c.key));
            decide(&entry.get().tat, now)
        })
    }
}

pub struct Papaya(papaya::HashMap<Box<[u8]>, AtomicU64, RandomState>);

impl Papaya {
    pub fn new() -> Self {
        let map = papaya::HashMap::builder()
            .hasher(RandomState::default())
            .resize_mode(papaya::ResizeMode::Blocking)
            .build();
        Papaya(map)
    }
    pub fn decide(&self, key: &[u8], now: u64) -> bool {
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

pub struct Scc(scc::HashIndex<Box<[u8]>, SccCell, RandomState>);

impl Scc {
    pub fn new() -> Self {
        Scc(scc::HashIndex::with_hasher(RandomState::default()))
    }
    pub fn decide(&self, key: &[u8], now: u64) -> bool {
        if let Some(decided) = self.0.peek_with(key, |_, c| decide(&c.0, now)) {
            return decided;
        }
        let _ = self.0.insert(key.into(), SccCell(AtomicU64::new(0)));
        self.0
            .peek_with(key, |_, c| decide(&c.0, now))
            .unwrap_or(false)
    }
}

pub struct Floor {
    cells: Vec<AtomicU64>,
    hasher: RandomState,
}

impl Floor {
    pub fn new() -> Self {
        Floor {
            cells: (0..1 << 18).map(|_| AtomicU64::new(0)).collect(),
            hasher: RandomState::default(),
        }
    }
    pub fn decide(&self, key: &[u8], now: u64) -> bool {
        let i = self.hasher.hash_one(key) as usize & (self.cells.len() - 1);
        decide(&self.cells[i], now)
    }
}
