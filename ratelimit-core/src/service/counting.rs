//! The service's counters: overall, per tier, per budget.

use std::cell::RefCell;
use std::sync::Arc;

use super::RateLimitService;
use crate::stats::{self, Counters, Outcome, StripeId};

/// A budget's counters as a thread keeps them: (service id, budget name, counters).
type MethodEntry = (u64, Arc<str>, Arc<Counters>);

/// The budgets a thread counted under last (with their service's id), replaced in turn: a
/// budget's calls count without the map's lock (a read lock is a write to a line every
/// thread shares), and without allocating when a thread alternates between a few budgets.
struct MethodCache {
    entries: [Option<MethodEntry>; 4],
    next: usize,
}

thread_local! {
    static METHODS: RefCell<MethodCache> = const {
        RefCell::new(MethodCache { entries: [None, None, None, None], next: 0 })
    };
}

impl RateLimitService {
    pub(super) fn count(&self, tier: Option<usize>, budget: Option<&str>, outcome: Outcome) {
        let stripe = stats::stripe();
        self.inner.total.record_on(stripe, outcome);
        self.count_scoped_on(stripe, tier, budget, outcome);
    }

    /// Counts under the tier and budget only (a stacked call counts once in the total).
    pub(super) fn count_scoped(&self, tier: Option<usize>, budget: Option<&str>, outcome: Outcome) {
        self.count_scoped_on(stats::stripe(), tier, budget, outcome);
    }

    fn count_scoped_on(
        &self,
        stripe: StripeId,
        tier: Option<usize>,
        budget: Option<&str>,
        outcome: Outcome,
    ) {
        if let Some(i) = tier {
            self.inner.by_tier[i].record_on(stripe, outcome);
        }
        if let Some(name) = budget {
            let id = self.inner.id;
            METHODS.with(|cache| {
                let mut cache = cache.borrow_mut();
                let hit = cache
                    .entries
                    .iter()
                    .flatten()
                    .find(|(i, n, _)| *i == id && **n == *name);
                if let Some((_, _, counters)) = hit {
                    counters.record_on(stripe, outcome);
                    return;
                }
                let (name, counters) = self.method_counters(name);
                counters.record_on(stripe, outcome);
                let slot = cache.next;
                cache.entries[slot] = Some((id, name, counters));
                cache.next = (slot + 1) % cache.entries.len();
            });
        }
    }

    /// The counters of budget `name` (added if new), with the map's copy of the name.
    pub(super) fn method_counters(&self, name: &str) -> (Arc<str>, Arc<Counters>) {
        let clone = |(n, c): (&Arc<str>, &Arc<Counters>)| (Arc::clone(n), Arc::clone(c));
        if let Some(found) = self.inner.by_method.read().get_key_value(name) {
            return clone(found);
        }
        let mut methods = self.inner.by_method.write();
        if let Some(found) = methods.get_key_value(name) {
            return clone(found);
        }
        let entry = (Arc::<str>::from(name), Arc::new(Counters::budget(name)));
        methods.insert(Arc::clone(&entry.0), Arc::clone(&entry.1));
        entry
    }
}
