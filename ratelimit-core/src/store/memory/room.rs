//! Room for new keys under `max_keys`: reserving it, and the one place a single-key path
//! that may store a new key runs, sweeping once for room before it says the store is full.

use std::sync::atomic::Ordering;

use super::tables::Tables;
use super::MemoryStore;
use crate::clock::Nanos;
use crate::error::Error;

impl MemoryStore {
    /// Runs `step` under `hash`'s shard write lock: the single-key paths that may store a new
    /// key (a decision, a blocked one, a penalty), the one place for what a full store does.
    /// `step` answers `Ok(None)` when it needs room for a new key and none is left: the keys
    /// expired by `now` are swept once (`sweep_for_room`, no grace) and it runs again; still
    /// none, [`Error::StoreFull`].
    pub(super) fn with_room<R>(
        &self,
        hash: u64,
        now: Nanos,
        mut step: impl FnMut(&mut Tables) -> Result<Option<R>, Error>,
    ) -> Result<R, Error> {
        for attempt in 0..2 {
            let mut tables = self.shard(hash).write();
            if let Some(done) = step(&mut tables)? {
                return Ok(done);
            }
            drop(tables);
            if attempt == 0 {
                self.sweep_for_room(now);
            }
        }
        Err(self.full())
    }

    /// The error of a call that needs room for a new key in a full store.
    pub(super) fn full(&self) -> Error {
        Error::StoreFull {
            max_keys: self.inner.options.max_keys,
        }
    }

    pub(super) fn reserve(&self) -> bool {
        self.reserve_n(1)
    }

    /// Reserves room for `n` new keys at once, or for none.
    pub(super) fn reserve_n(&self, n: usize) -> bool {
        let max = self.inner.options.max_keys;
        self.inner
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |len| {
                (len + n <= max).then_some(len + n)
            })
            .is_ok()
    }
}
