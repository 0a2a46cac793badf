//! The standard library's locks, taken as if they could not be poisoned: a panic while one
//! was held leaves the next holder what the panicking one left, as `parking_lot`'s locks did
//! before (the crate's own build time: one dependency tree less). Every lock here guards state
//! whose writers leave it whole at each step (a map entry inserted or removed, a flag set), so
//! what a panic leaves is a state some call could have seen anyway.

use std::sync::{self, LockResult, PoisonError};
use std::time::Duration;

pub(crate) use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// The guard a lock gave, poisoned or not: the one place the rule above lives (the memory
/// store's `ShardedLock` shards take theirs through it too).
#[inline]
pub(crate) fn unpoisoned<G>(locked: LockResult<G>) -> G {
    locked.unwrap_or_else(PoisonError::into_inner)
}

/// [`std::sync::Mutex`] whose [`lock`](Self::lock) ignores poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex(sync::Mutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        unpoisoned(self.0.lock())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        unpoisoned(self.0.get_mut())
    }
}

/// [`std::sync::RwLock`] whose [`read`](Self::read) and [`write`](Self::write) ignore
/// poisoning.
#[derive(Debug, Default)]
pub(crate) struct RwLock<T>(sync::RwLock<T>);

impl<T> RwLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        RwLock(sync::RwLock::new(value))
    }

    #[inline]
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        unpoisoned(self.0.read())
    }

    #[inline]
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        unpoisoned(self.0.write())
    }
}

/// [`std::sync::Condvar`] over a [`Mutex`], ignoring poisoning.
#[derive(Debug, Default)]
pub(crate) struct Condvar(sync::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Self {
        Condvar(sync::Condvar::new())
    }

    /// Waits for a notification or `timeout` (or a spurious wake-up), the lock released
    /// meanwhile.
    pub(crate) fn wait_for<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T> {
        unpoisoned(self.0.wait_timeout(guard, timeout)).0
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}
