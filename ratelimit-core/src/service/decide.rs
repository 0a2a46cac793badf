//! The decision path of [`RateLimitService`]: resolve, compose the store key, decide, count.

use std::cell::RefCell;

use super::{Backend, Call, RateLimitService};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::key;
use crate::quota::{Overrides, Quota};
use crate::stats::Outcome;
use crate::store::MemoryStore;

/// A thread's buffers for the memory path's store keys: the key, and the suffix of the last
/// key composed (identity, budget, tier: see `key::write_suffix`) with what it was written
/// from. A call site repeats its budget, tier and overrides, so the suffix is copied rather
/// than formatted again; the buffers are reused, so a miss allocates nothing either.
struct KeyBuffers {
    key: String,
    suffix: String,
    /// (service id, tier, overrides, whether a budget) of `suffix`; the budget's text is in
    /// `budget`.
    of: Option<(u64, Option<usize>, Overrides, bool)>,
    budget: String,
}

thread_local! {
    static KEY: RefCell<KeyBuffers> = const {
        RefCell::new(KeyBuffers {
            key: String::new(),
            suffix: String::new(),
            of: None,
            budget: String::new(),
        })
    };
}

impl RateLimitService {
    /// Runs `f` with the store key of a call with `options` under `tier`, composed in a
    /// reused thread-local buffer so the memory path does not allocate.
    pub(super) fn with_key<T>(
        &self,
        options: &Call<'_>,
        tier: Option<usize>,
        key: Option<&str>,
        quota: &Quota,
        f: impl FnOnce(&str) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let parts = self.parts(options, tier, key);
        let of = Some((
            self.inner.id,
            tier,
            *options.overrides,
            options.budget.is_some(),
        ));
        let budget = options.budget.unwrap_or_default();
        KEY.with(|buffers| {
            let buffers = &mut *buffers.borrow_mut();
            if buffers.of != of || buffers.budget != budget {
                buffers.suffix.clear();
                key::write_suffix(&mut buffers.suffix, &parts, quota);
                buffers.of = of;
                buffers.budget.clear();
                buffers.budget.push_str(budget);
            }
            let suffix = &buffers.suffix;
            key::compose_around(&mut buffers.key, &parts, |out| out.push_str(suffix))?;
            f(&buffers.key)
        })
    }

    /// Like [`enforce`](Self::enforce), for a call with or without a user key (an annotated
    /// fn without `key = ...` spends from its budget alone).
    pub(crate) async fn enforce_parts(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Result<Decision, Error> {
        let decision = self.decide_waiting(key, options).await?;
        Self::admit(decision, options)
    }

    /// [`enforce_parts`](Self::enforce_parts) when the decision needs no waiting (the memory
    /// store, or limits switched off); `None` for a store behind the [`Store`] trait. The
    /// admitted decision is not returned, so it carries no tier: only a refusal names it.
    #[inline]
    pub(crate) fn enforce_now(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Option<Result<(), Error>> {
        if self.may_wait(options) {
            return None; // a refusal would wait in the queue: the async path
        }
        let decision = self.decide_now(key, options, false)?;
        Some(decision.and_then(|d| Self::admit(d, options)).map(drop))
    }

    /// Like [`enforce_parts`](Self::enforce_parts), decided at once: the memory store (or
    /// limiting disabled) answers without waiting. Any other store must be waited for, and
    /// `function`'s call (a sync annotated fn) is refused with [`Error::SyncOnWaitingStore`],
    /// counted as an error, rather than blocked on.
    pub(crate) fn enforce_parts_now(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
        function: &'static str,
    ) -> Result<Decision, Error> {
        let decision = match self.decide_now(key, options, true) {
            Some(decided) => decided?,
            None => {
                let (_, tier, _) = self.prepare(options)?;
                let refused = Err(Error::SyncOnWaitingStore { function });
                return self.finish(refused, tier, key, options, true);
            }
        };
        Self::admit(decision, options)
    }

    /// Whether the service decides without waiting: the memory store (called directly), or
    /// no store at all (limiting disabled). Sync annotated fns need it.
    pub(crate) fn decides_at_once(&self) -> bool {
        !self.inner.config.enabled() || matches!(self.inner.backend, Backend::Memory(_))
    }

    /// `Ok` with an admitted decision; a refusal as [`Error::Exceeded`].
    pub(super) fn admit(decision: Decision, options: &Call<'_>) -> Result<Decision, Error> {
        if decision.allowed {
            Ok(decision)
        } else {
            Err(Error::Exceeded(Box::new(Exceeded {
                decision,
                budget: options.budget.map(str::to_owned),
            })))
        }
    }

    pub(super) async fn decide(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Result<Decision, Error> {
        let store = match &self.inner.backend {
            Backend::Dyn(store) if self.inner.config.enabled() => store,
            Backend::Memory(store) => return self.decide_sync(Some(store), key, options, true),
            Backend::Dyn(_) => return self.decide_sync(None, key, options, true),
        };
        let (quota, tier, now) = self.prepare(options)?;
        let parts = self.parts(options, tier, key);
        let mut k = String::with_capacity(64);
        let result = match key::compose(&mut k, &parts, &quota) {
            Ok(()) => {
                let started = self.inner.latency.start();
                let decided = store
                    .decide(&k, &quota, options.cost, now, options.consume)
                    .await;
                self.inner.latency.finish(started);
                decided
            }
            Err(e) => Err(e),
        };
        self.finish(result, tier, key, options, true)
    }

    /// The decision when it needs no waiting: `None` for a store behind the [`Store`] trait.
    #[inline]
    pub(super) fn decide_now(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
        with_tier: bool,
    ) -> Option<Result<Decision, Error>> {
        match &self.inner.backend {
            Backend::Memory(store) => Some(self.decide_sync(Some(store), key, options, with_tier)),
            Backend::Dyn(_) if self.inner.config.enabled() => None,
            Backend::Dyn(_) => Some(self.decide_sync(None, key, options, with_tier)),
        }
    }

    /// A decision by the memory store, or (`None`, or limits switched off) an allowance that
    /// counts nothing. The memory store answers at once, so it is called here rather than
    /// through another future (every layer of future moves the decision once more).
    /// `with_tier`: set the decision's tier even when the call is admitted.
    #[inline]
    fn decide_sync(
        &self,
        store: Option<&MemoryStore>,
        key: Option<&str>,
        options: &Call<'_>,
        with_tier: bool,
    ) -> Result<Decision, Error> {
        let (quota, tier, now) = self.prepare(options)?;
        let result = match store {
            Some(store) if self.inner.config.enabled() => {
                let started = self.inner.latency.start();
                let decided = self.with_key(options, tier, key, &quota, |k| {
                    store.decide_at(k, &quota, options.cost, now, options.consume)
                });
                self.inner.latency.finish(started);
                decided
            }
            _ => Ok(Decision::unlimited(now)),
        };
        self.finish(result, tier, key, options, with_tier)
    }

    /// The quota, tier and time of a call; a call that cannot be resolved is counted as an
    /// error.
    #[inline]
    fn prepare(&self, options: &Call<'_>) -> Result<(Quota, Option<usize>, Nanos), Error> {
        match self.resolve(options) {
            Ok((quota, tier)) => Ok((quota, tier, self.inner.clock.now())),
            Err(e) => {
                if options.consume {
                    self.count(None, options.budget, Outcome::Error);
                }
                Err(e)
            }
        }
    }

    /// Counts the store's answer and names its tier (on a refusal always; else `with_tier`).
    #[inline]
    fn finish(
        &self,
        result: Result<Decision, Error>,
        tier: Option<usize>,
        key: Option<&str>,
        options: &Call<'_>,
        with_tier: bool,
    ) -> Result<Decision, Error> {
        let result = result.map(|mut decision| {
            if with_tier || !decision.allowed {
                decision.tier = tier.map(|i| self.inner.config.tiers()[i].name.clone());
            }
            decision
        });
        if options.consume {
            self.record(tier, options.budget, key, &result);
        }
        result
    }

    /// One decision, not counted in the statistics (the queue counts a call once, by how its
    /// wait ended); with the tier it was made under.
    pub(super) async fn decide_uncounted(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
    ) -> (Result<Decision, Error>, Option<usize>) {
        let (quota, tier) = match self.resolve(options) {
            Ok(resolved) => resolved,
            Err(e) => return (Err(e), None),
        };
        let now = self.inner.clock.now();
        let (cost, commit) = (options.cost, options.consume);
        let started = self.inner.latency.start();
        let result = match &self.inner.backend {
            _ if !self.inner.config.enabled() => Ok(Decision::unlimited(now)),
            Backend::Memory(store) => self.with_key(options, tier, key, &quota, |k| {
                store.decide_at(k, &quota, cost, now, commit)
            }),
            Backend::Dyn(store) => {
                let mut k = String::with_capacity(64);
                match key::compose(&mut k, &self.parts(options, tier, key), &quota) {
                    Ok(()) => store.decide(&k, &quota, cost, now, commit).await,
                    Err(e) => Err(e),
                }
            }
        };
        self.inner.latency.finish(started);
        let result = result.map(|mut decision| {
            decision.tier = tier.map(|i| self.inner.config.tiers()[i].name.clone());
            decision
        });
        (result, tier)
    }
}
