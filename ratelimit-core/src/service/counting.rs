//! The service's counters: overall, per tier, per budget.

use std::hash::{Hash, Hasher};
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
        let counted = methods
            .get(&ByName(name))
            .map(|c| c.record_on(stripe, outcome));
        drop(methods);
        if counted.is_none() {
            self.method_counters(name).1.record_on(stripe, outcome);
        }
    }

    /// The counters of budget `name` (added if new), with the map's copy of the name.
    pub(super) fn method_counters(&self, name: &str) -> (Arc<str>, Arc<Counters>) {
        let clone = |(n, c): (&Arc<str>, &Arc<Counters>)| (Arc::clone(n), Arc::clone(c));
        if let Some(found) = self.inner.by_method.read().get_key_value(&ByName(name)) {
            return clone(found);
        }
        let mut methods = self.inner.by_method.write();
        if let Some(found) = methods.get_key_value(&ByName(name)) {
            return clone(found);
        }
        let entry = (Arc::<str>::from(name), Arc::new(Counters::budget(name)));
        methods.insert(Arc::clone(&entry.0), Arc::clone(&entry.1));
        entry
    }
}

/// A budget's name as the counters are found by: hashed as its text (the map's keys are), and
/// equal to a key with the same text, compared in place when the name is short (a budget's
/// usually is): the library's compare was a call of its own on every call counted by name
/// (BENCHMARKS.md, `hot_path`).
struct ByName<'a>(&'a str);

impl Hash for ByName<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl hashbrown::Equivalent<Arc<str>> for ByName<'_> {
    #[inline]
    fn equivalent(&self, key: &Arc<str>) -> bool {
        same_text(self.0.as_bytes(), key.as_bytes())
    }
}

/// Whether `a` and `b` are the same bytes: a text of 8 to 16 bytes as its first and its last
/// 8 (which cover it), two compares of a word each; any other as a slice.
#[inline(always)]
fn same_text(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        8..=16 => a.first_chunk::<8>() == b.first_chunk() && a.last_chunk::<8>() == b.last_chunk(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::same_text;

    #[test]
    fn names_are_the_same_only_when_every_byte_is() {
        let names = [
            "",
            "a",
            "bench-se",
            "bench-ser",
            "bench-service",
            "bench-servicf",
        ];
        let longer = ["bench-service-1", "bench-service-12", "bench-service-123"];
        for a in names.iter().chain(&longer) {
            for b in names.iter().chain(&longer) {
                assert_eq!(same_text(a.as_bytes(), b.as_bytes()), a == b, "{a} {b}");
            }
            // One byte changed anywhere: another name.
            for i in 0..a.len() {
                let mut other = a.as_bytes().to_vec();
                other[i] ^= 1;
                assert!(!same_text(a.as_bytes(), &other), "{a} at {i}");
            }
        }
    }
}
