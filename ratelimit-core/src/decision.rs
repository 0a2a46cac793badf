//! [`Decision`]: what the limiter answered, and the HTTP headers that say so.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::algorithm::{Spend, Verdict};
use crate::clock::Nanos;
use crate::quota::Quota;

const MILLI: Nanos = 1_000_000;

/// The answer to one call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the call may proceed.
    pub allowed: bool,
    /// Calls (of cost 1) still available after this decision.
    pub remaining: u64,
    /// The effective limit: `limit + burst`.
    pub limit: u64,
    /// The window the limit applies to.
    pub window: Duration,
    /// When the budget is back to full, exactly, in nanoseconds since the Unix epoch: read it
    /// as a time with [`reset_at`](Self::reset_at) (rounded up to a millisecond). Kept as a
    /// number so that deciding does not pay for a time it may never be asked for; exact,
    /// because an admitted spend's is where the algorithm finds it again for a refund.
    reset_at: Nanos,
    /// How long from now until the budget is back to full (rounded up to a millisecond).
    pub reset_after: Duration,
    /// Set only when refused: how long to wait before the same call is admitted. Never zero;
    /// rounded up to a whole millisecond, so a retry exactly this much later succeeds (unless
    /// someone else spent the budget first) and one a millisecond sooner is refused. A
    /// [`Store`](crate::store::Store) refusing with zero makes the call an
    /// [`Error::UnexpectedState`](crate::Error::UnexpectedState).
    pub retry_after: Option<Duration>,
    /// The tier the decision was made under, if any.
    pub tier: Option<Arc<str>>,
    /// Admitted only because its limit is a shadow limit, which counts and reports but never
    /// refuses: the limit would have refused this call. `remaining` and `reset_after` are the
    /// limit's own (`retry_after` stays `None`, as on any admitted call).
    pub shadowed: bool,
    /// The stamp of the state an admitted spend was made on, for a refund (0: none).
    stamp: u64,
    /// That state's shift when the spend was made, for a refund (see `algorithm::Spend`).
    shift: Nanos,
}

/// Which state an admitted spend was made on, for a refund ([`Refund`](crate::store::Refund)):
/// the verdict's exact `reset_at` (where each algorithm finds the spend) and the stamp of the
/// key it was made on (0: the store kept none, so nothing can be given back).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Receipt {
    pub(crate) spent: Spend,
    pub(crate) stamp: u64,
}

/// Two decisions are equal when they say the same: the receipt (which state a spend was made
/// on) is not part of what a decision says.
impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        let Decision {
            allowed,
            remaining,
            limit,
            window,
            reset_at,
            reset_after,
            retry_after,
            tier,
            shadowed,
            stamp: _,
            shift: _,
        } = self;
        (
            allowed,
            remaining,
            limit,
            window,
            ceil_millis(*reset_at),
            reset_after,
            retry_after,
            tier,
            shadowed,
        ) == (
            &other.allowed,
            &other.remaining,
            &other.limit,
            &other.window,
            ceil_millis(other.reset_at),
            &other.reset_after,
            &other.retry_after,
            &other.tier,
            &other.shadowed,
        )
    }
}

impl Eq for Decision {}

fn ceil_millis(nanos: Nanos) -> u64 {
    nanos.div_ceil(MILLI)
}

impl Decision {
    /// Whether this answers a question under `quota`: its window, and a limit no larger than
    /// its capacity (a failover's local share is smaller), above 0 where it admits (a tier of
    /// no calls refuses under a limit of 0; nothing admits under one), or the unlimited
    /// answer (`u64::MAX`). A store's answer that is not answers another question: an error,
    /// never handed on as fact (an admission reported under 1,000 where the quota gives 2, or
    /// under a day where it counts a minute: probes_store_answers; an admission under a limit
    /// of 0, by every entry point: probes_ask_step_shapes; a tier of 0's refusal taken for
    /// one of the wrong shape: fuzz's
    /// `any_key_tier_budget_cost_and_overrides_is_refused_typed_or_admitted_exactly`).
    #[inline]
    pub(crate) fn is_under(&self, quota: &Quota) -> bool {
        self.limit == u64::MAX
            || (self.limit <= quota.capacity()
                && (self.limit > 0 || !self.allowed)
                && self.window == quota.window())
    }

    /// When the budget is back to full (on the clock the decision was made by: the service's,
    /// or Redis' for the Redis store), rounded up to a millisecond. Computed from the
    /// millisecond the decision keeps, when asked.
    ///
    /// ```
    /// use ratelimit_core::{Clock, ManualClock, MemoryStore, Quota};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let clock = ManualClock::new(Duration::from_secs(1_000));
    /// let d = MemoryStore::new().acquire("k", &Quota::per_minute(5).unwrap(), 1, clock.now()).unwrap();
    /// assert_eq!(d.reset_at(), UNIX_EPOCH + Duration::from_secs(1_060));
    /// assert_eq!(d.reset_after, Duration::from_secs(60));
    /// ```
    pub fn reset_at(&self) -> SystemTime {
        self.reset_at_time()
    }

    /// When the budget is back to full, exactly, in nanoseconds since the Unix epoch.
    #[inline]
    pub(crate) fn full_at(&self) -> Nanos {
        self.reset_at
    }

    fn reset_at_time(&self) -> SystemTime {
        // Made from nanoseconds since the epoch in a `u64` (before the year 2555): within every
        // platform's `SystemTime`, so the addition cannot overflow.
        SystemTime::UNIX_EPOCH + Duration::from_millis(ceil_millis(self.reset_at))
    }

    /// Builds a decision for a call at `now` from an algorithm's verdict reached at `at` (at
    /// or after `now`: see [`for_quota_at`](Self::for_quota_at)).
    #[inline]
    pub(crate) fn from_verdict(
        verdict: Verdict,
        at: Nanos,
        now: Nanos,
        limit: u64,
        window: Duration,
        tier: Option<Arc<str>>,
    ) -> Self {
        let reset_after = Duration::from_millis(ceil_millis(verdict.reset_at.saturating_sub(now)));
        Decision {
            allowed: verdict.allowed,
            remaining: verdict.remaining,
            limit,
            window,
            reset_at: verdict.reset_at,
            reset_after,
            // Counted by the verdict from `at`: from the call's `now`, `at - now` more. Only
            // a refusal carries one, so only a refusal pays for it.
            retry_after: verdict.retry_after.map(|n| {
                let n = n.saturating_add(at.saturating_sub(now));
                Duration::from_millis(ceil_millis(n).max(1))
            }),
            tier,
            shadowed: false,
            stamp: 0,
            shift: 0,
        }
    }

    /// With the stamp of the state an admitted spend was made on, for a store that gives
    /// spends back ([`Store::refund`](crate::store::Store::refund)): a number that no other
    /// state under the same key ever had (0: none, nothing can be given back). The refund
    /// carries it back ([`Refund::stamp`](crate::store::Refund::stamp)).
    #[inline]
    pub fn stamped(mut self, stamp: u64) -> Self {
        self.stamp = stamp;
        self
    }

    /// The stamp of the state an admitted spend was made on ([`stamped`](Self::stamped)): 0
    /// when the store kept none (a refusal, a look, a spend not kept for a refund on a store
    /// that stamps only those), and nothing can be given back.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// With the shift of the state the spend was made on (see `algorithm::Spend`).
    #[inline]
    pub(crate) fn shifted(mut self, shift: Nanos) -> Self {
        self.shift = shift;
        self
    }

    /// Which state the decision was made on.
    pub(crate) fn receipt(&self) -> Receipt {
        Receipt {
            spent: Spend {
                at: self.reset_at,
                shift: self.shift,
            },
            stamp: self.stamp,
        }
    }

    /// [`from_verdict`](Self::from_verdict) with the quota's capacity and window, no tier (the
    /// service sets it): what every store answers, of a verdict reached at the call's `now`.
    #[inline]
    pub(crate) fn for_quota(verdict: Verdict, now: Nanos, quota: &crate::Quota) -> Self {
        Self::for_quota_at(verdict, now, now, quota)
    }

    /// [`for_quota`](Self::for_quota) of a verdict reached at `at`, a time at or after the
    /// call's `now`: the memory store decides a call whose clock stepped back behind its last
    /// sweep at the sweep's floor. The decision is the call's, from its own `now`: `reset_at`
    /// is a time, but the verdict's `retry_after` counts from `at`, and told from `now` it
    /// sent a client back `at - now` too soon, into the same refusal. The one place a
    /// verdict's time is made the call's: every store path hands it the time it decided at.
    #[inline]
    pub(crate) fn for_quota_at(
        verdict: Verdict,
        at: Nanos,
        now: Nanos,
        quota: &crate::Quota,
    ) -> Self {
        Self::from_verdict(verdict, at, now, quota.capacity(), quota.window(), None)
    }

    /// An allowance that counted nothing, for a store that could not decide under
    /// [`FailurePolicy::Allow`](crate::store::FailurePolicy::Allow): as
    /// [`unlimited`](Self::unlimited), so an HTTP answer carries no rate-limit fields (it
    /// would advertise a spent budget, `r=0`, exactly when nothing is limited).
    pub(crate) fn unlimited_for(now: Nanos) -> Self {
        Self::unlimited(now)
    }

    /// An "allowed" decision for a limiter that was switched off (`enabled = false`):
    /// `remaining` and `limit` are `u64::MAX`.
    pub fn unlimited(now: Nanos) -> Self {
        Decision {
            allowed: true,
            remaining: u64::MAX,
            limit: u64::MAX,
            window: Duration::ZERO,
            reset_at: now,
            reset_after: Duration::ZERO,
            retry_after: None,
            tier: None,
            shadowed: false,
            stamp: 0,
            shift: 0,
        }
    }

    /// The standard response headers for this decision, as (name, value) pairs, in the order
    /// the HTTP answers send them:
    ///
    /// - the IETF draft `RateLimit: "<tier>";r=<remaining>;t=<seconds to reset>` and
    ///   `RateLimit-Policy: "<tier>";q=<limit>;w=<window seconds>` (policy `"default"` without
    ///   a tier);
    /// - `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds,
    ///   rounded up);
    /// - `Retry-After` in whole seconds, rounded up, only when refused.
    ///
    /// With feature `http`, `header_map` gives the same fields as a typed `http::HeaderMap`
    /// (and `merge_headers` adds them to any adapter's map); all are written from one
    /// computation of the values.
    ///
    /// ```
    /// use ratelimit_core::{Quota, ManualClock, MemoryStore, Clock};
    /// use std::time::Duration;
    ///
    /// let store = MemoryStore::new();
    /// let clock = ManualClock::new(Duration::from_secs(60));
    /// let d = store.acquire("k", &Quota::per_minute(1).unwrap(), 1, clock.now()).unwrap();
    /// let headers = d.headers();
    /// assert!(headers.contains(&("x-ratelimit-remaining", "0".to_string())));
    /// assert!(headers.contains(&("ratelimit-policy", "\"default\";q=1;w=60".to_string())));
    /// ```
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let Some(f) = self.header_fields(None) else {
            return Vec::new();
        };
        let mut headers = Vec::with_capacity(6);
        f.push_pairs(&mut headers);
        if let Some(retry) = f.retry_after {
            headers.push((names::RETRY_AFTER, retry.to_string()));
        }
        headers
    }

    /// The values of the rate-limit header fields, under `policy` (default: the tier, else
    /// `"default"`): the one place they are computed, for [`headers`](Self::headers) and the
    /// typed `header_map`. `None` for an [`unlimited`](Self::unlimited) decision.
    pub(crate) fn header_fields<'a>(&'a self, policy: Option<&'a str>) -> Option<HeaderFields<'a>> {
        if self.limit == u64::MAX {
            return None;
        }
        Some(HeaderFields {
            limit: self.limit,
            remaining: self.remaining,
            reset: ceil_millis(self.reset_at).div_ceil(1_000),
            retry_after: self.retry_after.map(retry_secs),
            name: policy.or(self.tier.as_deref()).unwrap_or("default"),
            window: secs(self.window).max(1),
            // On a refusal, `t` is the same point in time as `Retry-After` (the draft's rule),
            // not the time until the budget is full.
            reset_after: match self.retry_after {
                Some(retry) => retry_secs(retry),
                None => secs(self.reset_after),
            },
        })
    }
}

/// `d` in whole seconds, rounded up.
fn secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1_000) as u64
}

/// A `Retry-After` of `d`: whole seconds, rounded up, at least 1 (a client told 0 would retry
/// at once, into the same refusal).
pub(crate) fn retry_secs(d: Duration) -> u64 {
    secs(d).max(1)
}

/// The rate-limit header names, lowercase as HTTP/2 sends them.
pub(crate) mod names {
    pub(crate) const LIMIT: &str = "x-ratelimit-limit";
    pub(crate) const REMAINING: &str = "x-ratelimit-remaining";
    pub(crate) const RESET: &str = "x-ratelimit-reset";
    pub(crate) const POLICY: &str = "ratelimit-policy";
    pub(crate) const RATELIMIT: &str = "ratelimit";
    pub(crate) const RETRY_AFTER: &str = "retry-after";
}

/// The values of one decision's header fields: numbers, and the policy's name, which the
/// two IETF items are written from (into a caller's buffer: these run on every HTTP response).
pub(crate) struct HeaderFields<'a> {
    /// `X-RateLimit-Limit`.
    pub(crate) limit: u64,
    /// `X-RateLimit-Remaining`.
    pub(crate) remaining: u64,
    /// `X-RateLimit-Reset`: Unix seconds, rounded up.
    pub(crate) reset: u64,
    /// `Retry-After`: whole seconds, rounded up, at least 1; only when refused.
    pub(crate) retry_after: Option<u64>,
    /// The policy's name in the IETF items.
    pub(crate) name: &'a str,
    /// The window in whole seconds, rounded up, at least 1.
    pub(crate) window: u64,
    /// The `RateLimit` item's `t`: seconds until the budget is full again, rounded up; on a
    /// refusal, `Retry-After` (the same point in time, as draft-ietf-httpapi-ratelimit-headers-09
    /// asks).
    pub(crate) reset_after: u64,
}

impl HeaderFields<'_> {
    /// Appends the fields but `Retry-After` as (name, value) pairs, in the order the HTTP
    /// answers send them (a refusal has `Retry-After` among its own fields, before these).
    pub(crate) fn push_pairs(&self, out: &mut Vec<(&'static str, String)>) {
        let item = |write: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::with_capacity(self.name.len() + 32);
            write(&mut out);
            // Printable ASCII only (`push_sf_string`, digits): always UTF-8.
            String::from_utf8(out).unwrap_or_default()
        };
        out.extend([
            (names::RATELIMIT, item(&|out| self.ratelimit_item(out))),
            (names::POLICY, item(&|out| self.policy_item(out))),
            (names::LIMIT, self.limit.to_string()),
            (names::REMAINING, self.remaining.to_string()),
            (names::RESET, self.reset.to_string()),
        ]);
    }

    /// Appends this decision's `RateLimit-Policy` item, `"<name>";q=<limit>;w=<window>`.
    pub(crate) fn policy_item(&self, out: &mut Vec<u8>) {
        self.item(out, b";q=", self.limit, b";w=", self.window);
    }

    /// Appends this decision's `RateLimit` item, `"<name>";r=<remaining>;t=<reset after>`.
    pub(crate) fn ratelimit_item(&self, out: &mut Vec<u8>) {
        self.item(out, b";r=", self.remaining, b";t=", self.reset_after);
    }

    fn item(&self, out: &mut Vec<u8>, first: &[u8], a: u64, second: &[u8], b: u64) {
        push_sf_string(out, self.name);
        out.extend_from_slice(first);
        out.extend_from_slice(itoa::Buffer::new().format(a).as_bytes());
        out.extend_from_slice(second);
        out.extend_from_slice(itoa::Buffer::new().format(b).as_bytes());
    }
}

/// `name` as a structured-field string (RFC 8941): quoted, `\` and `"` escaped, and any
/// character outside printable ASCII (which a string cannot hold) replaced with `?`.
fn push_sf_string(out: &mut Vec<u8>, name: &str) {
    out.push(b'"');
    // The common case, a plain name, copied in one go.
    if name
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
        return;
    }
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push(b'\\');
                out.push(c as u8);
            }
            ' '..='~' => out.push(c as u8),
            _ => out.push(b'?'),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_are_structured_field_strings() {
        let sf_string = |name: &str| {
            let mut out = Vec::new();
            push_sf_string(&mut out, name);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(sf_string("pro"), "\"pro\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(sf_string("caf\u{e9}\n"), "\"caf??\"");
    }
}
