//! The standard library's locks, taken as if they could not be poisoned: a panic while one
//! was held leaves the next holder what the panicking one left, as `parking_lot`'s locks did
//! before (the crate's own build time: one dependency tree less). Every lock here guards state
//! whose writers leave it whole at each step (a map entry inserted or removed, a flag set), so
//! what a panic leaves is a state some call could have seen anyway.

use std::sync::{self, PoisonError};
use std::time::Duration;

pub(crate) use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// [`std::sync::Mutex`] whose [`lock`](Self::lock) ignores poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex(sync::Mutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
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
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
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
        match self.0.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}
