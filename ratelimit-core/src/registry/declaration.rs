//! [`Declaration`]: one annotated fn, as the macros submit it to `inventory`.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::limiter::{Limiter, APP};
use super::spec::{Spec, TierSpec};
use crate::service::{Call, Prepared, RateLimitService};

/// One rate-limited fn, as the attribute macros declare it: its path, budget, source location
/// and [`Spec`]. Built in a `static` by the generated code; list them with [`declarations`].
pub struct Declaration {
    function: &'static str,
    name: Option<&'static str>,
    file: &'static str,
    line: u32,
    spec: Spec,
    limiter: Option<&'static Limiter>,
    sync: bool,
    /// The fn counts only some outcomes (`count = ..`): its spends are given back after the
    /// others, so its store must refund.
    refunds: bool,
    /// The fn's call site prepared on its limiter's running service (see [`Held`]).
    prepared: ArcSwapOption<Held>,
}

/// A declaration's prepared call site, with the generation of its limiter it was prepared
/// at: it stands for the running service while that generation runs. `None`: prepared on a
/// testing scope's service, for calls under that service only.
pub(super) struct Held {
    pub(super) generation: Option<u64>,
    pub(super) prepared: Prepared,
}

impl Declaration {
    /// Used by the macros. `function` is built at compile time from `module_path!()`, the
    /// impl's self type as written and the fn's name, so it is the same in every build of the
    /// same source (two builds in a rolling deploy share their Redis budgets).
    #[doc(hidden)]
    pub const fn new(
        function: &'static str,
        name: Option<&'static str>,
        file: &'static str,
        line: u32,
        spec: Spec,
    ) -> Self {
        Declaration {
            function,
            name,
            file,
            line,
            spec,
            limiter: None,
            sync: false,
            refunds: false,
            prepared: ArcSwapOption::const_empty(),
        }
    }

    /// Used by the macros: `limiter = path` (the fn is decided by a library's [`Limiter`]).
    #[doc(hidden)]
    pub const fn with_limiter(mut self, limiter: &'static Limiter) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Used by the macros: the fn is not `async` (decided without waiting, so only on the
    /// memory store).
    #[doc(hidden)]
    pub const fn with_sync(mut self) -> Self {
        self.sync = true;
        self
    }

    /// Used by the macros: the fn counts only some outcomes (`count = "err"` or `"ok"`), so
    /// its spends are given back after the others.
    #[doc(hidden)]
    pub const fn with_refunds(mut self) -> Self {
        self.refunds = true;
        self
    }

    /// Whether the fn gives back the spends of the outcomes it does not count: it runs only on
    /// a store that refunds ([`Store::refunds`](crate::store::Store::refunds)).
    pub fn refunds(&self) -> bool {
        self.refunds
    }

    /// The fn's path: `crate::module::function`, `crate::module::Type::method` (in an
    /// annotated impl block), `crate::module::<Type as Trait>::method` (in an annotated trait
    /// impl), or `crate::module::method` (a method annotated on its own).
    #[inline]
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The budget the fn spends from: its `name = "..."`, else its path. Fns that share a
    /// name share one budget.
    #[inline]
    pub fn budget(&self) -> &'static str {
        match self.name {
            Some(name) => name,
            None => self.function,
        }
    }

    /// Whether the budget was named with `name = "..."` (rather than taken from the path).
    pub fn has_explicit_name(&self) -> bool {
        self.name.is_some()
    }

    /// The source file of the fn.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The line of the fn in its file.
    pub fn line(&self) -> u32 {
        self.line
    }

    /// What the attribute asked for.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The crate that declared the fn: the first segment of its [`function`](Self::function)
    /// path (as `module_path!()` spells it, `-` become `_`).
    pub fn crate_name(&self) -> &'static str {
        match self.function.find("::") {
            Some(end) => &self.function[..end],
            None => self.function,
        }
    }

    /// The library [`Limiter`] that decides the fn's calls (`limiter = ...`), or `None` for
    /// the application's [`Module`](super::Module).
    #[inline]
    pub fn limiter(&self) -> Option<&'static Limiter> {
        self.limiter
    }

    /// Whether the fn is sync (not `async`): it is decided without waiting, which only the
    /// memory store can do.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// The limiter that decides the fn: its own, else the application's.
    #[inline]
    pub(super) fn owner(&self) -> &'static Limiter {
        match self.limiter {
            Some(limiter) => limiter,
            None => &APP,
        }
    }

    /// One call of the fn: the tier chosen for this call (or its static one), its cost, its
    /// budget. Borrowed: a tier chosen per call is never copied.
    pub(super) fn call<'a>(&'static self, tier: Option<&'a str>, cost: u64) -> Call<'a> {
        Call {
            tier: match (tier, self.spec.tier()) {
                (Some(tier), _) => Some(tier),
                (None, TierSpec::Static(tier)) => Some(tier),
                (None, _) => None,
            },
            budget: Some(self.budget()),
            policy: self.name,
            overrides: self.spec.overrides(),
            cost,
            consume: true,
            queue: self.spec.queue(),
            shadow: self.spec.shadow(),
        }
    }

    /// Runs `f` on the fn's call site prepared on `on` (a testing scope's service), else on
    /// its limiter's running service, preparing it first if that service has not been seen
    /// yet. `None`: no service runs, or the fn's options do not resolve (the caller reports
    /// the error through the per-call path).
    #[inline]
    pub(super) fn with_prepared<T>(
        &'static self,
        on: Option<&RateLimitService>,
        f: impl FnOnce(&Arc<Held>) -> T,
    ) -> Option<T> {
        let kept = self.prepared.load();
        let prepared;
        // One call of `f`, on the kept site or on the one just prepared: inlined here once.
        let held = match &*kept {
            Some(held) if self.stands_for(held, on) => held,
            _ => {
                prepared = self.prepare(on)?;
                &prepared
            }
        };
        Some(f(held))
    }

    /// [`with_prepared`](Self::with_prepared)'s site, held (for a call that awaits its store).
    pub(super) fn held(&'static self, on: Option<&RateLimitService>) -> Option<Arc<Held>> {
        match self.prepared.load_full() {
            Some(held) if self.stands_for(&held, on) => Some(held),
            _ => self.prepare(on),
        }
    }

    /// Whether `held` decides this fn's calls under `on` (a scope's service), or else under
    /// its limiter's running service.
    #[inline]
    fn stands_for(&self, held: &Held, on: Option<&RateLimitService>) -> bool {
        // Prepared under a configuration a reload has since replaced: prepared again.
        if !held.prepared.is_current() {
            return false;
        }
        match (on, held.generation) {
            (None, Some(generation)) => generation == self.owner().generation(),
            (Some(service), None) => held.prepared.service().same_as(service),
            _ => false,
        }
    }

    /// Prepares the fn's call site on `on`, else on its limiter's running service, and keeps
    /// it.
    #[cold]
    fn prepare(&'static self, on: Option<&RateLimitService>) -> Option<Arc<Held>> {
        let owner = self.owner();
        let (generation, service) = match on {
            Some(service) => (None, service.clone()),
            None => owner.running().map(|(g, s)| (Some(g), s))?,
        };
        let prepared = service.prepare_call(&self.call(None, 1)).ok()?;
        let held = Arc::new(Held {
            generation,
            prepared,
        });
        self.prepared.store(Some(Arc::clone(&held)));
        // Shut down meanwhile: what was just kept must not hold the old service alive.
        if generation.is_some_and(|g| g != owner.generation()) {
            self.prepared
                .compare_and_swap(&Some(Arc::clone(&held)), None);
        }
        Some(held)
    }

    /// Forgets the prepared call site (its limiter's service has stopped), releasing the
    /// service it held.
    pub(super) fn forget_prepared(&self) {
        self.prepared.store(None);
    }
}

impl Limiter {
    /// The annotated fns decided by this limiter, sorted by file and line.
    pub fn declarations(&'static self) -> Vec<&'static Declaration> {
        declarations()
            .into_iter()
            .filter(|d| std::ptr::eq(d.owner(), self))
            .collect()
    }
}

impl fmt::Debug for Declaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declaration")
            .field("function", &self.function)
            .field("name", &self.name)
            .field("file", &self.file)
            .field("line", &self.line)
            .field("spec", &self.spec)
            .field("own_limiter", &self.limiter.is_some())
            .field("sync", &self.sync)
            .field("refunds", &self.refunds)
            .finish()
    }
}

/// A [`Declaration`] as submitted to `inventory`.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registered(pub &'static Declaration);

inventory::collect!(Registered);

/// Every rate-limited fn in the binary, sorted by file and line: the application's and
/// every linked library's (see [`Declaration::crate_name`] and [`Declaration::limiter`] to
/// tell them apart; [`Limiter::declarations`] lists one limiter's).
///
/// ```
/// for d in ratelimit_core::declarations() {
///     println!("{} ({}:{}): {}", d.function(), d.file(), d.line(), d.spec());
/// }
/// ```
pub fn declarations() -> Vec<&'static Declaration> {
    let mut all: Vec<&'static Declaration> = inventory::iter::<Registered>
        .into_iter()
        .map(|r| r.0)
        .collect();
    all.sort_by_key(|d| (d.file, d.line));
    all
}
