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
    /// The wait queue (calls that waited for capacity rather than being refused).
    pub queue: QueueCounts,
}

/// The wait queue's figures. A call that waited is counted once in [`Counts`] too, by how
/// it ended: `allowed` when admitted, `denied` when the queue was full or the wait timed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueCounts {
    /// Calls waiting now.
    pub depth: u64,
    /// Calls that joined the queue.
    pub queued: u64,
    /// Calls admitted after waiting.
    pub admitted: u64,
    /// Calls whose wait ended with [`Error::QueueTimeout`](crate::Error::QueueTimeout).
    pub timed_out: u64,
    /// Calls refused with [`Error::QueueFull`](crate::Error::QueueFull): on arrival, or
    /// displaced by a higher-priority arrival.
    pub full: u64,
    /// Waits given up by the caller (the future dropped): nothing was spent.
    pub cancelled: u64,
}

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
    /// The same counts as metrics (feature `metrics`; zero-sized without it).
    metrics: crate::metrics::Handles,
}

/// What happened to one call, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Error,
}

impl Counters {
    /// A tier's counters.
    pub(crate) fn tier(name: &str) -> Self {
        Counters {
            metrics: crate::metrics::Handles::tier(name),
            ..Default::default()
        }
    }

    /// A budget's counters.
    pub(crate) fn budget(name: &str) -> Self {
        Counters {
            metrics: crate::metrics::Handles::budget(name),
            ..Default::default()
        }
    }

    pub(crate) fn record(&self, outcome: Outcome) {
        self.metrics.record(outcome);
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
