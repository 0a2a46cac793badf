//! What every cell of the memory store is: the `Cell` trait, the key it keeps (with its stamp)
//! and how keys are hashed; the cell of a state that fits no word (`LockedCell`). The cells of
//! one word are in `word.rs`; the tables that hold them per shard in `tables.rs`.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::{self, Algorithm, Given, SlidingLog, Spend, Verdict, Written};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::sync::Mutex;

/// How the store hashes a key, the one place: its bytes alone, with a seed drawn per store
/// (`hash_one` of a `[u8]` would hash its length first, which a single key does not need).
#[derive(Default)]
pub(super) struct KeyHasher(foldhash::fast::RandomState);

impl KeyHasher {
    #[inline]
    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        let mut hasher = self.0.build_hasher();
        hasher.write(key);
        hasher.finish()
    }
}

// Each strategy has its own table of compact cells. A lookup among more keys than the CPU
// caches hold costs a miss on the cell, so cells are kept to half a cache line: the key (16
// bytes) and the algorithm's state in one atomic word (8 or 16 bytes), from which the expiry
// is recovered too. What a cell does not store is recovered from the expiry and the quota's
// window; the window that last spent on the state is kept at the end of the key's own bytes
// (a bare key asked under another window is decided by `algorithm::written_elsewhere`, as
// the other stores decide it). One enum for all four strategies plus
// the expiry straddled two lines most of the time and was far slower than governor at 100,000
// keys (BENCHMARKS.md, `memory`).
//
// A decision is one compare-exchange on that word, like governor's GCRA: the shard is only
// read-locked around the lookup, so two threads on one key (or one shard) never wait on a
// lock, and a lost race re-runs the algorithm on the state that won. The word holds the whole
// state, so any value read is one some decision wrote: the algorithm always decides on a
// consistent state, and the exchange succeeds only if nothing was decided in between. The
// sliding log does not fit a word; its cell has a lock of its own.

/// A key's state under one strategy, as stored.
pub(super) trait Cell: Sized {
    /// The algorithm's state the cell holds.
    type State: Algorithm;
    /// A fresh state for a key not stored yet; the key is set only if the cell is kept.
    fn fresh() -> Self;
    fn kept(&self) -> &StampedKey;
    fn keep(&mut self, kept: StampedKey);
    fn key(&self) -> &[u8] {
        match Self::MARKED {
            true => self.kept().key_before_mark(),
            false => self.kept().key(),
        }
    }
    /// When the state is indistinguishable from a fresh one.
    fn expires_at(&self) -> Nanos;
    /// Decides in one atomic step: callers share the cell (under the shard's read lock).
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict;
    /// The state's shift, for a spend's receipt (see [`Algorithm::shift`]), from the shard's
    /// side table: read under the shard's read lock, it cannot change before the decision,
    /// since only a refund or an adjustment changes it, under the write lock.
    fn shift(&self, _side: &Side) -> Nanos {
        0
    }
    /// The stamp a spend decided on this cell carries.
    #[inline]
    fn stamp(&self, side: &Side) -> Stamp {
        Stamp {
            stamp: self.kept().stamp(),
            shift: self.shift(side),
        }
    }
    /// The whole state, under the shard's write lock (a token bucket's bookkeeping taken out
    /// of `side`); [`put`](Self::put) stores it back.
    fn take(&mut self, side: &mut Side, quota: &Quota) -> Self::State;
    /// Stores `state` back, taken by [`take`](Self::take), under the write lock; `changed`:
    /// whether anything was written to it (a cell whose state is a copy skips the write).
    fn put(&mut self, side: &mut Side, quota: &Quota, state: Self::State, changed: bool);
    /// Whether the cell keeps a mark of the last quota that spent on its state at the end of
    /// its key ([`mark`](Self::mark), [`StampedKey::mark`]), given it when the key is stored:
    /// a word cell's state has no room for it. The sliding log's cell keeps its window beside
    /// its state, under its own lock.
    const MARKED: bool = false;
    /// What a [`MARKED`](Self::MARKED) cell keeps of `quota`: a fixed window's or counter's
    /// window; a token bucket's interval (`word.rs`).
    fn mark(quota: &Quota) -> Nanos {
        quota.window_nanos()
    }
    /// How the state is decided under `quota` by the window kept in the key
    /// ([`algorithm::written_elsewhere`]); a cell that keeps none in its key decides it itself
    /// (the log's cell) or needs none: as it is.
    #[inline(always)]
    fn written_elsewhere(&self, _now: Nanos, _quota: &Quota) -> Written {
        Written::Here
    }
    /// Makes the state `quota`'s at `now` where [`written_elsewhere`](Self::written_elsewhere)
    /// found [`Written::Passed`] (a state another window wrote, whose window has passed:
    /// fresh), its window kept in the key. Under the shard's write lock (the key is
    /// rewritten), before the decision.
    fn claim(&mut self, _now: Nanos, _quota: &Quota) {}
    /// A look (nothing spent) at `now` where [`written_elsewhere`](Self::written_elsewhere)
    /// found [`Written::Passed`]: decided on the state a claim would leave, without claiming
    /// it (fresh; the token bucket's claim keeps its state: `word.rs`). A look writes
    /// nothing: claimed by a look, a word cell was left empty (its expiry 0) while its old
    /// window still counted at an older clock read, and a caller there claimed it back fresh
    /// (a second of 3 admitted 6); read as fresh, a bucket another window had emptied
    /// admitted a stacked call's look (its other keys spent, then the bucket refused).
    fn decide_passed(&self, now: Nanos, quota: &Quota, cost: u64) -> Verdict {
        Self::fresh().decide(now, quota, cost, false)
    }
    /// Whether the cell's state is `quota`'s window's own, for a refund (a spend is given back
    /// only under the window that wrote the state): a cell that keeps no window cannot tell.
    fn written_under(&mut self, _quota: &Quota) -> bool {
        true
    }
    /// Gives back a spend (see [`Algorithm::refund`]); without `commit`, only whether it
    /// would. Under the shard's write lock: a refund reads the state and what refunds keep
    /// in the side table as one.
    fn refund(
        &mut self,
        side: &mut Side,
        spent: Spend,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> bool {
        if !self.written_under(quota) {
            return false;
        }
        let mut state = self.take(side, quota);
        let gave = match commit {
            true => state.refund(spent, now, quota, cost),
            false => state.clone().refund(spent, now, quota, cost),
        };
        // A refund that gives nothing changes nothing (`Algorithm::refund`).
        self.put(side, quota, state, commit && gave);
        gave
    }
    /// A penalty or a reward (see [`Algorithm::adjust`]), under the shard's write lock.
    fn adjust(
        &mut self,
        side: &mut Side,
        now: Nanos,
        quota: &Quota,
        units: u64,
        penalty: bool,
    ) -> u64 {
        let mut state = self.take(side, quota);
        let moved = state.adjust(now, quota, units, penalty);
        self.put(side, quota, state, true);
        moved
    }
}

/// What token buckets given back to keep for later refunds ([`Given`]), by their cells'
/// stamps: a side table of each shard, so that a key nothing is given back to pays nothing
/// for it (the cells keep their size). An entry goes with its cell (sweep, reset).
pub(super) type Side = HashMap<u64, Box<Given>>;

/// What a spend's receipt takes from the cell it was decided on: the key's stamp (0: none
/// kept, nothing can be given back) and the state's shift ([`Cell::shift`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stamp {
    pub(super) stamp: u64,
    pub(super) shift: Nanos,
}

impl Stamp {
    /// `decision`, carrying this stamp for a refund.
    #[inline]
    pub(super) fn on(self, decision: crate::Decision) -> crate::Decision {
        decision.stamped(self.stamp).shifted(self.shift)
    }
}

/// A kept key's bytes, with what the store keeps of it in the key's own allocation, so the
/// cells keep their size:
/// - its stamp, once a spend kept for a refund was made on it: a number the store gives a
///   key's state, never twice, so that a refund finds the state its spend was made on and not
///   one added under the same key since (after a reset, or a sweep once the state expired).
///   A stamped key begins with [`STAMPED`] and the stamp (8 bytes, little-endian); a key never
///   given one (nothing spent on it was kept) pays nothing for refunds;
/// - a word cell's mark of the last quota that spent on its state ([`Cell::MARKED`]), which
///   its word has no room for: the last 8 bytes (little-endian) of every key of such a cell,
///   read by [`mark`](Self::mark) (the key's own bytes by
///   [`key_before_mark`](Self::key_before_mark)).
#[derive(Default)]
pub(super) struct StampedKey(Box<[u8]>);

/// The first byte of a stamped key: a byte no UTF-8 text holds, and store keys are text
/// ([`StoreKey`](crate::store::StoreKey)), so no key's own bytes begin with it.
const STAMPED: u8 = 0xFF;

impl StampedKey {
    /// `key`'s bytes behind `stamp` (none for 0).
    pub(super) fn new(key: &[u8], stamp: u64) -> Self {
        debug_assert!(std::str::from_utf8(key).is_ok(), "store keys are text");
        Self::with_rest(stamp, key, &[])
    }

    /// `key`'s bytes behind `stamp` (none for 0) and before `mark` ([`Cell::MARKED`]).
    pub(super) fn marked(key: &[u8], stamp: u64, mark: Nanos) -> Self {
        debug_assert!(std::str::from_utf8(key).is_ok(), "store keys are text");
        Self::with_rest(stamp, key, &mark.to_le_bytes())
    }

    /// `stamp` (none for 0), then `key` (what follows a stamp), then `mark`.
    fn with_rest(stamp: u64, key: &[u8], mark: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(9 + key.len() + mark.len());
        if stamp != 0 {
            bytes.push(STAMPED);
            bytes.extend_from_slice(&stamp.to_le_bytes());
        }
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(mark);
        StampedKey(bytes.into_boxed_slice())
    }

    /// This key behind `stamp` instead, what follows its stamp (its bytes, a mark) kept.
    pub(super) fn with_stamp(&self, stamp: u64) -> Self {
        Self::with_rest(stamp, self.key(), &[])
    }

    /// A marked key before `mark` instead.
    pub(super) fn with_mark(&self, mark: Nanos) -> Self {
        Self::marked(self.key_before_mark(), self.stamp(), mark)
    }

    /// The bytes after the stamp: the key's, and a marked cell's mark.
    #[inline]
    fn key(&self) -> &[u8] {
        match self.0.split_first() {
            Some((&STAMPED, stamped)) => stamped.get(8..).unwrap_or_default(),
            _ => &self.0,
        }
    }

    /// A marked key's own bytes, before its mark.
    #[inline]
    pub(super) fn key_before_mark(&self) -> &[u8] {
        let key = self.key();
        key.get(..key.len().wrapping_sub(8)).unwrap_or_default()
    }

    /// A marked key's mark; 0 for a key kept without one (a fresh cell's).
    #[inline]
    pub(super) fn mark(&self) -> Nanos {
        self.0
            .last_chunk::<8>()
            .map_or(0, |bytes| Nanos::from_le_bytes(*bytes))
    }

    /// Whether the key was given a stamp.
    #[inline]
    pub(super) fn is_stamped(&self) -> bool {
        self.0.first() == Some(&STAMPED)
    }

    /// The key's stamp; 0 (no key is given it) for a key without one.
    pub(super) fn stamp(&self) -> u64 {
        match self.0.split_first() {
            Some((&STAMPED, stamped)) => stamped
                .first_chunk::<8>()
                .map_or(0, |bytes| u64::from_le_bytes(*bytes)),
            _ => 0,
        }
    }
}

/// The one rule of a penalty or a reward on a state kept beside `written`, the window of the
/// last quota that spent on it (0: none recorded), by [`algorithm::written_elsewhere`], as a
/// decision: on a state another window still counts by, a reward gives nothing back (none of
/// it is this window's) and a penalty is kept by the longer of the two windows (its entries
/// or count dropped only once they left that one), which then owns the state; on one whose
/// window has passed, as on a fresh one. A penalty records its window: on a key nothing else
/// spent on, a shorter window's decision dropped it. Adjusted under its own window as it was,
/// a penalty or a reward under a second dropped a minute's log entries that had left the
/// second (3 more admitted in a minute limited to 3), a reward under the minute took a
/// second's spends, a fixed window's reward under a second took a minute's count, a penalty
/// under the minute wrote its window over a second's count, and the key's expiry became the
/// shorter window's (swept while the longer counted).
pub(super) fn adjust_written<A: Algorithm>(
    state: &mut A,
    written: &mut Nanos,
    now: Nanos,
    quota: &Quota,
    units: u64,
    penalty: bool,
) -> u64 {
    let window = quota.window_nanos();
    let under = match algorithm::written_elsewhere(*written, now, quota, |q| state.expires_at(q)) {
        Written::Here => *quota,
        Written::Elsewhere(_) if !penalty => return 0,
        Written::Elsewhere(_) => quota.with_window_nanos(window.max(*written)),
        // A reward (or a penalty of nothing) on a fresh state moves nothing, so it writes
        // nothing: the state is made fresh only by what spends on it. Written fresh, it was
        // erased while its own window still counted at an older clock read (its window kept,
        // a caller there found it empty: a second of 3 admitted 6).
        Written::Passed if !penalty || units == 0 => return 0,
        Written::Passed => {
            *state = A::default();
            *quota
        }
    };
    let moved = state.adjust(now, &under, units, penalty);
    if penalty && moved > 0 {
        *written = under.window_nanos();
    }
    moved
}

/// Makes `cell` `quota`'s under the shard's write lock, before a decision on it: a refusal
/// while another window's state still counts by its own (kept in the key), and a state whose
/// window has passed claimed, fresh ([`Cell::claim`]).
pub(super) fn claimed<C: Cell>(cell: &mut C, now: Nanos, quota: &Quota) -> Result<(), Verdict> {
    match cell.written_elsewhere(now, quota) {
        Written::Here => Ok(()),
        Written::Elsewhere(refused) => Err(refused),
        Written::Passed => {
            cell.claim(now, quota);
            Ok(())
        }
    }
}

/// `quota` under the window a state kept beside `written` counts by: its own when none is
/// recorded (0).
#[inline]
pub(super) fn owner(quota: &Quota, written: Nanos) -> Quota {
    match written {
        0 => *quota,
        kept => quota.with_window_nanos(kept),
    }
}

/// Any algorithm's state behind the cell's own lock, for a state that fits no word: the
/// [`SlidingLog`], boxed (it grows with the limit); an algorithm without a compact cell of its
/// own.
pub(super) struct LockedCell<A> {
    key: StampedKey,
    expires_at: AtomicU64,
    /// The state, and the window of the last quota that spent on it: a key asked under
    /// another window is decided by [`algorithm::written_elsewhere`] (a shorter window's
    /// spend dropped a longer one's log entries: 5 admitted in a minute limited to 3).
    state: Mutex<(A, Nanos)>,
}

impl<A: Algorithm> Cell for LockedCell<A> {
    type State = A;
    fn fresh() -> Self {
        LockedCell {
            key: StampedKey::default(),
            expires_at: AtomicU64::new(0),
            state: Mutex::default(),
        }
    }
    fn kept(&self) -> &StampedKey {
        &self.key
    }
    fn keep(&mut self, kept: StampedKey) {
        self.key = kept;
    }
    fn expires_at(&self) -> Nanos {
        self.expires_at.load(Ordering::Acquire)
    }
    fn decide(&self, now: Nanos, quota: &Quota, cost: u64, commit: bool) -> Verdict {
        let mut locked = self.state.lock();
        let (state, written) = &mut *locked;
        let ends_under = |q: &Quota| state.expires_at(q);
        let verdict = match algorithm::written_elsewhere(*written, now, quota, ends_under) {
            Written::Here => state.decide(now, quota, cost, commit),
            Written::Elsewhere(refused) => return refused,
            Written::Passed if commit => {
                *state = A::default();
                state.decide(now, quota, cost, commit)
            }
            Written::Passed => A::default().decide(now, quota, cost, false),
        };
        if commit {
            if verdict.allowed {
                *written = quota.window_nanos();
            }
            self.expires_at
                .store(state.expires_at(quota), Ordering::Release);
        }
        verdict
    }
    /// A spend is given back only to a state its own window wrote (as
    /// [`StoredState::refund`](crate::store::StoredState::refund)).
    fn written_under(&mut self, quota: &Quota) -> bool {
        algorithm::written_under(self.state.get_mut().1, quota)
    }
    /// By [`adjust_written`], the window kept beside the state.
    fn adjust(
        &mut self,
        _: &mut Side,
        now: Nanos,
        quota: &Quota,
        units: u64,
        penalty: bool,
    ) -> u64 {
        let (state, written) = self.state.get_mut();
        let moved = adjust_written(state, written, now, quota, units, penalty);
        *self.expires_at.get_mut() = state.expires_at(&owner(quota, *written));
        moved
    }
    fn take(&mut self, _: &mut Side, _: &Quota) -> A {
        std::mem::take(&mut self.state.get_mut().0)
    }
    fn put(&mut self, _: &mut Side, quota: &Quota, state: A, changed: bool) {
        if changed {
            *self.expires_at.get_mut() = state.expires_at(quota);
        }
        self.state.get_mut().0 = state;
    }
}

const _: () = assert!(std::mem::size_of::<LockedCell<Box<SlidingLog>>>() == 48);

/// A store key as a call hands it: its bytes (`&[u8]`), hashed here, or with the hash the
/// caller held ([`Hashed`]).
pub(super) trait Keyed: Copy {
    fn bytes(&self) -> &[u8];
    /// The key's hash ([`KeyHasher::hash`]).
    fn hash_in(&self, hasher: &KeyHasher) -> u64;
    /// Whether [`hash_in`](Self::hash_in) is not the hash of the key's bytes (a held hash of
    /// another text or store): checked where a call would find no state or store one.
    fn misheld(&self, hasher: &KeyHasher) -> bool;
}

impl Keyed for &[u8] {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self
    }

    #[inline(always)]
    fn hash_in(&self, hasher: &KeyHasher) -> u64 {
        hasher.hash(self)
    }

    #[inline(always)]
    fn misheld(&self, _: &KeyHasher) -> bool {
        false
    }
}

/// A key with the hash its caller held, as this store worked it out
/// ([`Store::hash_of`](crate::store::Store::hash_of)), or as a store wrapping this one handed
/// it on (of another text, or another store's): not trusted where it would find no state.
#[derive(Clone, Copy)]
pub(super) struct Hashed<'a>(pub(super) &'a [u8], pub(super) NonZeroU64);

impl Keyed for Hashed<'_> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.0
    }

    #[inline(always)]
    fn hash_in(&self, _: &KeyHasher) -> u64 {
        self.1.get()
    }

    #[inline]
    fn misheld(&self, hasher: &KeyHasher) -> bool {
        self.1.get() != hasher.hash(self.0)
    }
}
