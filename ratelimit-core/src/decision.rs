//! [`Decision`]: what the limiter answered, and the HTTP headers that say so.

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Verdict;
use crate::clock::Nanos;

const MILLI: Nanos = 1_000_000;

/// The answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// When the budget is back to full, in milliseconds since the Unix epoch.
    pub reset_at: u64,
    /// How long from now until the budget is back to full (rounded up to a millisecond).
    pub reset_after: Duration,
    /// Set only when refused: how long to wait before the same call is admitted. Never zero;
    /// rounded up to a whole millisecond, so a retry exactly this much later succeeds (unless
    /// someone else spent the budget first) and one a millisecond sooner is refused.
    pub retry_after: Option<Duration>,
    /// The tier the decision was made under, if any.
    pub tier: Option<Arc<str>>,
}

fn ceil_millis(nanos: Nanos) -> u64 {
    nanos.div_ceil(MILLI)
}

impl Decision {
    /// Builds a decision from an algorithm's verdict taken at `now`.
    pub(crate) fn from_verdict(
        verdict: Verdict,
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
            reset_at: ceil_millis(verdict.reset_at),
            reset_after,
            retry_after: verdict
                .retry_after
                .map(|n| Duration::from_millis(ceil_millis(n).max(1))),
            tier,
        }
    }

    /// [`from_verdict`](Self::from_verdict) with the quota's capacity and window, no tier (the
    /// service sets it): what every store answers.
    pub(crate) fn for_quota(verdict: Verdict, now: Nanos, quota: &crate::Quota) -> Self {
        Self::from_verdict(verdict, now, quota.capacity(), quota.window(), None)
    }

    /// An allowance that counted nothing, for a store that could not decide under
    /// [`FailurePolicy::Allow`](crate::store::FailurePolicy::Allow): `remaining: 0`.
    pub(crate) fn unlimited_for(quota: &crate::Quota, now: Nanos) -> Self {
        let verdict = Verdict {
            allowed: true,
            remaining: 0,
            reset_at: now.saturating_add(quota.window().as_nanos() as Nanos),
            retry_after: None,
        };
        Self::for_quota(verdict, now, quota)
    }

    /// An "allowed" decision for a limiter that was switched off (`enabled = false`):
    /// `remaining` and `limit` are `u64::MAX`.
    pub fn unlimited(now: Nanos) -> Self {
        Decision {
            allowed: true,
            remaining: u64::MAX,
            limit: u64::MAX,
            window: Duration::ZERO,
            reset_at: ceil_millis(now),
            reset_after: Duration::ZERO,
            retry_after: None,
            tier: None,
        }
    }

    /// The standard response headers for this decision, as (name, value) pairs:
    ///
    /// - `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds,
    ///   rounded up);
    /// - `Retry-After` in whole seconds, rounded up, only when refused;
    /// - the IETF draft `RateLimit-Policy: "<tier>";q=<limit>;w=<window seconds>` and
    ///   `RateLimit: "<tier>";r=<remaining>;t=<seconds to reset>` (policy `"default"` without
    ///   a tier).
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
        if self.limit == u64::MAX {
            return Vec::new();
        }
        let policy = self.tier.as_deref().unwrap_or("default");
        let secs = |d: Duration| d.as_millis().div_ceil(1_000);
        let mut headers = vec![
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            (
                "x-ratelimit-reset",
                self.reset_at.div_ceil(1_000).to_string(),
            ),
            (
                "ratelimit-policy",
                format!(
                    "\"{policy}\";q={};w={}",
                    self.limit,
                    secs(self.window).max(1)
                ),
            ),
            (
                "ratelimit",
                format!(
                    "\"{policy}\";r={};t={}",
                    self.remaining,
                    secs(self.reset_after)
                ),
            ),
        ];
        if let Some(retry) = self.retry_after {
            headers.push(("retry-after", secs(retry).max(1).to_string()));
        }
        headers
    }
}
