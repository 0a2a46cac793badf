//! The decision path of [`RateLimitService`]: resolve, compose the store key, decide, count.

use std::cell::RefCell;

use super::{Backend, Call, RateLimitService};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::key;
use crate::quota::{Overrides, Quota};
use crate::store::{DynStore, MemoryStore};

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
            let Ok(mut buffers) = buffers.try_borrow_mut() else {
                // Borrowed already: a decision made from inside one (a store or clock of the
                // user's own that calls the service) composes its key on its own.
                let mut k = String::new();
                key::compose(&mut k, &parts, quota)?;
                return f(&k);
            };
            let buffers = &mut *buffers;
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
    /// store, limits switched off, or a store that answers at once: [`Store::decide_now`]);
    /// `None`, having spent nothing, when it must be awaited. The admitted decision is not
    /// returned, so it carries no tier: only a refusal names it.
    ///
    /// [`Store::decide_now`]: crate::store::Store::decide_now
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
        // Only a service that always decides at once: a store that answers some calls at
        // once (a leased budget) would admit a sync fn's calls only while that lasts.
        let decided = match self.decides_at_once() {
            true => self.decide_now(key, options, true),
            false => None,
        };
        let decision = match decided {
            Some(decided) => decided?,
            None => {
                let refused = match self.resolve(options) {
                    Ok((_, tier)) => (Err(Error::SyncOnWaitingStore { function }), tier),
                    Err(e) => (Err(e), None),
                };
                return self.counted(refused, key, options);
            }
        };
        Self::admit(decision, options)
    }

    /// Whether the service decides without waiting: the memory store (called directly), or
    /// no store at all (limiting disabled). Sync annotated fns need it.
    #[inline]
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

    /// One decision, counted (when it spends) in the statistics.
    pub(super) async fn decide(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Result<Decision, Error> {
        let decided = self.decide_uncounted(key, options).await;
        self.counted(decided, key, options)
    }

    /// The decision when it needs no waiting, counted: the memory store, limits switched
    /// off, or a store behind the [`Store`](crate::store::Store) trait that answers at once
    /// ([`Store::decide_now`](crate::store::Store::decide_now)); `None`, having spent and counted
    /// nothing, when the store must be awaited. `with_tier`: name the tier on an admitted
    /// decision too (a refusal always names it).
    #[inline(always)]
    pub(super) fn decide_now(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
        with_tier: bool,
    ) -> Option<Result<Decision, Error>> {
        let decided = match self.resolve(options) {
            Ok((quota, tier)) => {
                let now = self.inner.clock.now();
                let result = match self.decide_at_once(key, options, &quota, tier, now) {
                    Ok(result) => result,
                    Err(store) => {
                        self.decide_in_store_now(store, key, options, &quota, tier, now)?
                    }
                };
                (self.name_tier(result, tier, with_tier), tier)
            }
            Err(e) => (Err(e), None),
        };
        Some(self.counted(decided, key, options))
    }

    /// `store`'s answer at once, when it has one ([`Store::decide_now`]): the store key
    /// composed in the thread's buffer, the latency sampled as the awaited path samples it.
    /// `None` when it must be awaited.
    ///
    /// [`Store::decide_now`]: crate::store::Store::decide_now
    #[inline(never)]
    fn decide_in_store_now(
        &self,
        store: &dyn DynStore,
        key: Option<&str>,
        options: &Call<'_>,
        quota: &Quota,
        tier: Option<usize>,
        now: Nanos,
    ) -> Option<Result<Decision, Error>> {
        let decided = self.with_key(options, tier, key, quota, |k| {
            let decided = self.ask_now(store, k, quota, options.cost, now, options.consume);
            decided.transpose()
        });
        decided.transpose()
    }

    /// `store`'s answer at once on store key `key` ([`Store::decide_now`]), its latency
    /// sampled when there is one, as the awaited path samples every decision.
    ///
    /// [`Store::decide_now`]: crate::store::Store::decide_now
    #[inline]
    pub(super) fn ask_now(
        &self,
        store: &dyn DynStore,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Option<Result<Decision, Error>> {
        let latency = &self.inner.latency;
        let started = latency.start();
        let decided = store.decide_now(key, quota, cost, now, commit);
        if decided.is_some() {
            latency.finish(started);
        }
        decided
    }

    /// One decision, not counted in the statistics (the queue counts a call once, by how its
    /// wait ended); with the tier it was made under, named on the decision.
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
        let result = match self.decide_at_once(key, options, &quota, tier, now) {
            Ok(result) => result,
            Err(store) => {
                let mut k = String::with_capacity(64);
                match key::compose(&mut k, &self.parts(options, tier, key), &quota) {
                    Ok(()) => {
                        let started = self.inner.latency.start();
                        let decided =
                            (store.decide(&k, &quota, options.cost, now, options.consume)).await;
                        self.inner.latency.finish(started);
                        decided
                    }
                    Err(e) => Err(e),
                }
            }
        };
        (self.name_tier(result, tier, true), tier)
    }

    /// The store's answer when it needs no waiting: the memory store (called here rather than
    /// through another future, since every layer of future moves the decision once more), or
    /// an allowance that counts nothing when limits are switched off. Otherwise the store to
    /// wait for.
    #[inline(always)]
    fn decide_at_once(
        &self,
        key: Option<&str>,
        options: &Call<'_>,
        quota: &Quota,
        tier: Option<usize>,
        now: Nanos,
    ) -> Result<Result<Decision, Error>, &dyn DynStore> {
        match &self.inner.backend {
            _ if !self.inner.config.enabled() => Ok(Ok(Decision::unlimited(now))),
            Backend::Memory(store) => {
                Ok(self.decide_in_memory(store, key, options, quota, tier, now))
            }
            Backend::Dyn(store) => Err(&**store),
        }
    }

    /// The memory store's answer, its latency sampled.
    #[inline(always)]
    fn decide_in_memory(
        &self,
        store: &MemoryStore,
        key: Option<&str>,
        options: &Call<'_>,
        quota: &Quota,
        tier: Option<usize>,
        now: Nanos,
    ) -> Result<Decision, Error> {
        let started = self.inner.latency.start();
        let decided = self.with_key(options, tier, key, quota, |k| {
            store.decide_at(k, quota, options.cost, now, options.consume)
        });
        self.inner.latency.finish(started);
        decided
    }

    /// Names the tier on the decision: on a refusal always, else when `with_tier` (an
    /// annotated fn's admitted call never shows its decision, so it skips the `Arc` clone).
    #[inline(always)]
    pub(super) fn name_tier(
        &self,
        result: Result<Decision, Error>,
        tier: Option<usize>,
        with_tier: bool,
    ) -> Result<Decision, Error> {
        result.map(|mut decision| {
            if with_tier || !decision.allowed {
                decision.tier = tier.map(|i| self.inner.config.tiers()[i].name.clone());
            }
            decision
        })
    }

    /// Counts a decision (or the error that stood for it) when the call spends.
    #[inline(always)]
    pub(super) fn counted(
        &self,
        (result, tier): (Result<Decision, Error>, Option<usize>),
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Result<Decision, Error> {
        if options.consume {
            self.record(tier, options.budget, key, &result);
        }
        result
    }
}
