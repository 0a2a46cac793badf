//! Counters of decisions: overall and per tier.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Decisions counted for one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Calls decided (`allowed + denied`).
    pub checks: u64,
    /// Calls admitted.
    pub allowed: u64,
    /// Calls refused for being over the limit.
    pub denied: u64,
    /// Calls refused because no decision could be made (unknown tier, store failure, ...).
    pub errors: u64,
}

/// A snapshot of the service's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every call.
    pub total: Counts,
    /// Calls made under a tier, by tier name.
    pub by_tier: BTreeMap<String, Counts>,
    /// Calls made on behalf of a named budget (an annotated fn's path), by name.
    pub by_method: BTreeMap<String, Counts>,
}

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

/// What happened to one call, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Error,
}

impl Counters {
    pub(crate) fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Allowed => &self.allowed,
            Outcome::Denied => &self.denied,
            Outcome::Error => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counts {
        let allowed = self.allowed.load(Ordering::Relaxed);
        let denied = self.denied.load(Ordering::Relaxed);
        Counts {
            checks: allowed + denied,
            allowed,
            denied,
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn clear(&self) {
        self.allowed.store(0, Ordering::Relaxed);
        self.denied.store(0, Ordering::Relaxed);
        self.errors.store(0, Ordering::Relaxed);
    }
}
