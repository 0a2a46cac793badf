//! The service's counters: overall, per tier, per budget.

use std::sync::Arc;

use super::RateLimitService;
use crate::stats::{Counters, Outcome};
use crate::stripe::{self, StripeId};

impl RateLimitService {
    /// Counts an outcome in the total and under the tier and budget. `counters`: the budget's,
    /// when the caller holds them (a prepared site); else they are found by name.
    #[inline(always)]
    pub(super) fn count(
        &self,
        tier: Option<&Counters>,
        budget: Option<&str>,
        counters: Option<&Counters>,
        outcome: Outcome,
    ) {
        let stripe = stripe::stripe();
        self.inner.total.record_on(stripe, outcome);
        self.count_scoped_on(stripe, tier, budget, counters, outcome);
    }

    /// Counts under the tier and budget only (a stacked call counts once in the total).
    pub(super) fn count_scoped(
        &self,
        tier: Option<&Counters>,
        budget: Option<&str>,
        counters: Option<&Counters>,
        outcome: Outcome,
    ) {
        self.count_scoped_on(stripe::stripe(), tier, budget, counters, outcome);
    }

    #[inline(always)]
    fn count_scoped_on(
        &self,
        stripe: StripeId,
        tier: Option<&Counters>,
        budget: Option<&str>,
        counters: Option<&Counters>,
        outcome: Outcome,
    ) {
        if let Some(tier) = tier {
            tier.record_on(stripe, outcome);
        }
        match (counters, budget) {
            (Some(counters), _) => counters.record_on(stripe, outcome),
            (None, Some(name)) => self.count_by_name(stripe, name, outcome),
            (None, None) => {}
        }
    }

    /// Counts under budget `name`, found by name (a call whose site does not hold its
    /// counters): out of line, so that a prepared site's call carries none of it.
    #[inline(never)]
    fn count_by_name(&self, stripe: StripeId, name: &str, outcome: Outcome) {
        // Counted under the read lock, which is released before a new budget's counters
        // are added under the write lock.
        let methods = self.inner.by_method.read();
        let counted = methods.get(name).map(|c| c.record_on(stripe, outcome));
        drop(methods);
        if counted.is_none() {
            self.method_counters(name).1.record_on(stripe, outcome);
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
