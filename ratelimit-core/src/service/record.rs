//! Counting a spending call's outcome, and the log line of a refusal.

use std::fmt;
use std::hash::{BuildHasher, Hasher};

use super::site::Site;
use super::RateLimitService;
use crate::decision::Decision;
use crate::error::Error;
use crate::stats::Outcome;

/// A key as it may appear in logs: a digest, never the key itself. The digest is keyed with
/// a seed drawn once per process, so a user id or an address cannot be recovered from a log
/// by hashing candidates (a fixed-key hash of a small space is as good as the key). Within
/// one process's logs the same key has the same digest, so refusals can still be grouped.
struct KeyDigest<'a>(&'a str);

impl fmt::Display for KeyDigest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        static SEED: std::sync::OnceLock<foldhash::quality::RandomState> =
            std::sync::OnceLock::new();
        let mut h = SEED.get_or_init(Default::default).build_hasher();
        h.write(self.0.as_bytes());
        write!(f, "#{:016x}", h.finish())
    }
}

/// The event of a refusal (or a shadow limit's would-be refusal) at `level`: the budget, tier,
/// limit, window and retry-after, the key only as a digest. A macro: `tracing` fixes an
/// event's level where it is written.
macro_rules! refusal_event {
    ($level:ident, $site:expr, $decision:expr, $key:expr, $message:literal) => {
        tracing::$level!(
            target: "ratelimit",
            budget = $site.budget().unwrap_or("-"),
            tier = $decision.tier.as_deref().unwrap_or("-"),
            limit = $decision.limit,
            window_ms = $decision.window.as_millis() as u64,
            retry_after_ms = $decision.retry_after.map_or(0, |d| d.as_millis() as u64),
            key = %KeyDigest($key.unwrap_or("")),
            $message,
        )
    };
}

impl RateLimitService {
    /// Counts a spending call's outcome: a refusal (over the limit, a full queue, a wait
    /// that timed out) as denied, any other error as an error, a shadow limit's would-be
    /// refusal as allowed and shadowed.
    #[inline(always)]
    pub(super) fn record(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        result: &Result<Decision, Error>,
    ) {
        match result {
            Ok(decision) if decision.allowed && !decision.shadowed => self.count_admitted(site),
            _ => self.record_other(site, key, result),
        }
    }

    /// [`record`](Self::record) of a plain admission (allowed, not shadowed).
    #[inline(always)]
    pub(super) fn count_admitted(&self, site: &Site<'_>) {
        let tier = site.tier_counters();
        self.count(tier, site.budget(), site.counters, Outcome::Allowed);
    }

    /// [`record`](Self::record) of anything but a plain admission: out of the admitted
    /// call's way.
    #[cold]
    #[inline(never)]
    pub(super) fn record_other(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        result: &Result<Decision, Error>,
    ) {
        let count =
            |outcome| self.count(site.tier_counters(), site.budget(), site.counters, outcome);
        match result {
            Ok(decision) if decision.shadowed => {
                count(Outcome::Allowed);
                count(Outcome::Shadowed);
                refusal_event!(
                    info,
                    site,
                    decision,
                    key,
                    "shadow rate limit would have refused"
                );
            }
            Ok(decision) if decision.allowed => count(Outcome::Allowed),
            Ok(decision) => {
                count(Outcome::Denied);
                refusal_event!(debug, site, decision, key, "rate limit exceeded");
            }
            Err(Error::QueueFull { .. } | Error::QueueTimeout { .. }) => count(Outcome::Denied),
            Err(_) => count(Outcome::Error),
        }
    }
}
