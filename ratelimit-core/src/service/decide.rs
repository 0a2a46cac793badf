//! One decision: awaited from any store, or made at once by the memory store (for sync
//! annotated fns, which have no executor to wait with).

use super::{Backend, KeyDigest, Options, RateLimitService};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::key::{self, KeyParts};
use crate::quota::Quota;
use crate::stats::Outcome;
use crate::store::DynStore;

impl RateLimitService {
    pub(super) async fn decide(
        &self,
        key: Option<&str>,
        options: &Options<'_>,
    ) -> Result<Decision, Error> {
        let (quota, tier) = self.resolve_counted(options)?;
        let now = self.inner.clock.now();
        let parts = self.parts(options, tier, key);
        let result = match self.decide_at_once(&parts, &quota, options, now) {
            Ok(result) => result,
            Err(store) => {
                let mut k = String::with_capacity(64);
                match key::compose(&mut k, &parts, &quota) {
                    Ok(()) => {
                        let (cost, commit) = (options.cost, options.consume);
                        store.decide(&k, &quota, cost, now, commit).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        self.finish(key, options, tier, result)
    }

    /// [`resolve`](Self::resolve), counting a failure of a call that spends.
    fn resolve_counted(&self, options: &Options<'_>) -> Result<(Quota, Option<usize>), Error> {
        self.resolve(options).inspect_err(|_| {
            if options.consume {
                self.count(None, options.budget, Outcome::Error);
            }
        })
    }

    /// Whether the service decides without waiting: the memory store (called directly), or
    /// no store at all (limiting disabled). Sync annotated fns need it.
    pub(crate) fn decides_at_once(&self) -> bool {
        !self.inner.config.enabled() || matches!(self.inner.backend, Backend::Memory(_))
    }

    /// The decision, made at once when the service [`decides_at_once`](Self::decides_at_once);
    /// otherwise the store to wait for.
    #[inline]
    fn decide_at_once(
        &self,
        parts: &KeyParts<'_>,
        quota: &Quota,
        options: &Options<'_>,
        now: Nanos,
    ) -> Result<Result<Decision, Error>, &dyn DynStore> {
        let (cost, commit) = (options.cost, options.consume);
        // The memory store answers at once: called here, not through another future, since
        // every layer of future moves the decision once more.
        match &self.inner.backend {
            _ if !self.inner.config.enabled() => Ok(Ok(Decision::unlimited(now))),
            Backend::Memory(store) => Ok(Self::with_key(parts, quota, |k| {
                store.decide_at(k, quota, cost, now, commit)
            })),
            Backend::Dyn(store) => Err(&**store),
        }
    }

    /// Counts the store's answer under the call's tier and budget and names its tier.
    fn finish(
        &self,
        key: Option<&str>,
        options: &Options<'_>,
        tier: Option<usize>,
        result: Result<Decision, Error>,
    ) -> Result<Decision, Error> {
        let mut decision = match result {
            Ok(d) => d,
            Err(e) => {
                if options.consume {
                    self.count(tier, options.budget, Outcome::Error);
                }
                return Err(e);
            }
        };
        decision.tier = tier.map(|i| self.inner.config.tiers()[i].name.clone());
        if options.consume {
            if decision.allowed {
                self.count(tier, options.budget, Outcome::Allowed);
            } else {
                self.count(tier, options.budget, Outcome::Denied);
                tracing::debug!(
                    target: "ratelimit",
                    budget = options.budget.unwrap_or("-"),
                    tier = decision.tier.as_deref().unwrap_or("-"),
                    limit = decision.limit,
                    window_ms = decision.window.as_millis() as u64,
                    retry_after_ms = decision.retry_after.map_or(0, |d| d.as_millis() as u64),
                    key = %KeyDigest(key.unwrap_or("")),
                    "rate limit exceeded",
                );
            }
        }
        Ok(decision)
    }

    /// Like [`enforce_parts`](Self::enforce_parts), decided at once: the memory store (or
    /// limiting disabled) answers without waiting. Any other store must be waited for, and
    /// `function`'s call is refused with [`Error::SyncOnWaitingStore`] rather than blocked on.
    pub(crate) fn enforce_parts_now(
        &self,
        key: Option<&str>,
        options: &Options<'_>,
        function: &'static str,
    ) -> Result<Decision, Error> {
        let (quota, tier) = self.resolve_counted(options)?;
        let now = self.inner.clock.now();
        let parts = self.parts(options, tier, key);
        let result = self
            .decide_at_once(&parts, &quota, options, now)
            .unwrap_or(Err(Error::SyncOnWaitingStore { function }));
        refuse_unless_allowed(self.finish(key, options, tier, result)?, options)
    }
}

/// `Err(Error::Exceeded(..))` for a refused decision.
pub(super) fn refuse_unless_allowed(
    decision: Decision,
    options: &Options<'_>,
) -> Result<Decision, Error> {
    if decision.allowed {
        Ok(decision)
    } else {
        Err(Error::Exceeded(Box::new(Exceeded {
            decision,
            budget: options.budget.map(str::to_owned),
        })))
    }
}
