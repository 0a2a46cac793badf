//! The memory store's cells: one compact layout per strategy, and a shard's tables of them.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::algorithm::{FixedWindow, Gcra, SlidingCounter, SlidingLog, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::Strategy;

// Each strategy has its own table of compact cells. A lookup among more keys than the CPU
// caches hold costs a miss on the cell, so cells are kept to half a cache line: the key (16
// bytes), when the key may be dropped (8), and what the algorithm needs beyond that (8).
// What a cell does not store is recovered from the expiry and the quota's window (a key
// whose window changes between calls starts a new window unless the recovered start happens
// to line up, as a stored start had to). One enum for all four strategies plus the expiry
// took 56 bytes, straddled two lines most of the time, and measured 1.7 times governor's
// time at 100,000 keys (BENCHMARKS.md).

/// A key's state under one strategy, as stored.
pub(super) trait Cell: Sized {
    /// A fresh state for a key not stored yet; the key is set only if the cell is kept.
    fn fresh() -> Self;
    fn key(&self) -> &[u8];
    fn set_key(&mut self, key: &[u8]);
    /// When the state is indistinguishable from a fresh one.
    fn expires_at(&self) -> Nanos;
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;
    fn table(tables: &mut Tables) -> &mut HashTable<Self>;
}

/// [`FixedWindow`]; the window's start is `end - window`.
pub(super) struct FixedCell {
    key: Box<[u8]>,
    end: Nanos,
    count: u64,
}

/// [`SlidingLog`]; the log is boxed (it grows with the limit).
pub(super) struct LogCell {
    key: Box<[u8]>,
    expires_at: Nanos,
    log: Box<SlidingLog>,
}

/// [`SlidingCounter`]; the current window's start is the expiry less one window, or two while
/// the current window has calls. Counts fit in `u32`: a [`Quota`]'s capacity is at most
/// [`MAX_CAPACITY`](crate::quota::MAX_CAPACITY).
pub(super) struct CounterCell {
    key: Box<[u8]>,
    expires_at: Nanos,
    current: u32,
    previous: u32,
}

/// [`Gcra`]; the theoretical arrival time is also the expiry.
pub(super) struct BucketCell {
    key: Box<[u8]>,
    tat: Nanos,
}

const _: () = assert!(std::mem::size_of::<FixedCell>() == 32);
const _: () = assert!(std::mem::size_of::<LogCell>() == 32);
const _: () = assert!(std::mem::size_of::<CounterCell>() == 32);
const _: () = assert!(std::mem::size_of::<BucketCell>() == 24);

impl Cell for FixedCell {
    fn fresh() -> Self {
        FixedCell {
            key: Box::default(),
            end: 0,
            count: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.end
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let window = quota.window_nanos();
        let mut state = FixedWindow {
            start: self.end.saturating_sub(window),
            count: self.count,
        };
        let verdict = state.decide(now, quota, cost, commit);
        if commit {
            self.end = state.expires_at(quota);
            self.count = state.count;
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.fixed
    }
}

impl Cell for LogCell {
    fn fresh() -> Self {
        LogCell {
            key: Box::default(),
            expires_at: 0,
            log: Box::default(),
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let verdict = self.log.decide(now, quota, cost, commit);
        if commit {
            self.expires_at = self.log.expires_at(quota);
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.log
    }
}

impl Cell for CounterCell {
    fn fresh() -> Self {
        CounterCell {
            key: Box::default(),
            expires_at: 0,
            current: 0,
            previous: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let window = quota.window_nanos();
        let windows = if self.current > 0 { 2 } else { 1 };
        let mut state = SlidingCounter {
            start: self.expires_at.saturating_sub(windows * window),
            current: self.current as u64,
            previous: self.previous as u64,
        };
        let verdict = state.decide(now, quota, cost, commit);
        if commit {
            self.expires_at = state.expires_at(quota);
            // Both at most the capacity, which a `Quota` keeps within `u32`.
            self.current = u32::try_from(state.current).unwrap_or(u32::MAX);
            self.previous = u32::try_from(state.previous).unwrap_or(u32::MAX);
        }
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.counter
    }
}

impl Cell for BucketCell {
    fn fresh() -> Self {
        BucketCell {
            key: Box::default(),
            tat: 0,
        }
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn set_key(&mut self, key: &[u8]) {
        self.key = key.into();
    }
    fn expires_at(&self) -> Nanos {
        self.tat
    }
    fn decide(&mut self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let mut state = Gcra { tat: self.tat };
        let verdict = state.decide(now, quota, cost, commit);
        self.tat = state.tat;
        verdict
    }
    fn table(tables: &mut Tables) -> &mut HashTable<Self> {
        &mut tables.bucket
    }
}

/// One shard: a table per strategy. A key is in at most one of them: a call on a key held
/// under another strategy is refused with [`Error::UnexpectedState`], as
/// [`algorithm::decide`] refuses it.
#[derive(Default)]
pub(super) struct Tables {
    fixed: HashTable<FixedCell>,
    log: HashTable<LogCell>,
    counter: HashTable<CounterCell>,
    bucket: HashTable<BucketCell>,
}

impl Tables {
    /// Removes `key` from every table; returns how many entries went.
    pub(super) fn remove_all(&mut self, hash: u64, key: &[u8]) -> usize {
        fn remove<C: Cell>(table: &mut HashTable<C>, hash: u64, key: &[u8]) -> usize {
            match table.find_entry(hash, |c| c.key() == key) {
                Ok(entry) => {
                    entry.remove();
                    1
                }
                Err(_) => 0,
            }
        }
        remove(&mut self.fixed, hash, key)
            + remove(&mut self.log, hash, key)
            + remove(&mut self.counter, hash, key)
            + remove(&mut self.bucket, hash, key)
    }

    /// Whether `key` is held under a strategy other than `strategy`.
    pub(super) fn held_by_other(&self, strategy: Strategy, hash: u64, key: &[u8]) -> bool {
        let has = |s: Strategy| {
            s != strategy
                && match s {
                    Strategy::FixedWindow => self.fixed.find(hash, |c| c.key() == key).is_some(),
                    Strategy::SlidingWindow => self.log.find(hash, |c| c.key() == key).is_some(),
                    Strategy::SlidingWindowCounter => {
                        self.counter.find(hash, |c| c.key() == key).is_some()
                    }
                    Strategy::TokenBucket => self.bucket.find(hash, |c| c.key() == key).is_some(),
                }
        };
        Strategy::ALL.into_iter().any(has)
    }

    /// Drops the cells expired at `now` and gives back memory that is mostly unused.
    pub(super) fn sweep(&mut self, now: Nanos, hasher: &foldhash::fast::RandomState) -> usize {
        fn sweep<C: Cell>(
            table: &mut HashTable<C>,
            now: Nanos,
            hasher: &foldhash::fast::RandomState,
        ) -> usize {
            let before = table.len();
            table.retain(|cell| cell.expires_at() > now);
            if table.capacity() > 16 && table.len() * 4 < table.capacity() {
                let target = table.len() * 2;
                table.shrink_to(target, |c| hasher.hash_one(c.key()));
            }
            before - table.len()
        }
        sweep(&mut self.fixed, now, hasher)
            + sweep(&mut self.log, now, hasher)
            + sweep(&mut self.counter, now, hasher)
            + sweep(&mut self.bucket, now, hasher)
    }
}
