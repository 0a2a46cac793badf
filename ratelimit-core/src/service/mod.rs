//! [`RateLimitService`]: the API every other piece (macros, HTTP layer) goes through.

use std::cell::{Cell, RefCell};
use std::fmt;

use std::sync::Arc;

mod options;
pub(crate) mod queue;
mod record;
mod stacked;
mod wait;

pub use options::Options;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, StoreConfig};
use crate::decision::Decision;
use crate::error::{ConfigError, Error, Exceeded};
use crate::key::{self, KeyParts};
use crate::quota::{Overrides, Quota};
use crate::resolve;
use crate::stats::{Counters, Outcome, Stats};
use crate::store::{DynStore, MemoryStore, Store};

/// The store: the memory store is called directly (its decisions never wait), any other
/// through the boxed [`Store`] interface.
enum Backend {
    Memory(MemoryStore),
    Dyn(Box<dyn DynStore>),
}

/// Per-budget counters; budget names are fn paths, hashed with foldhash on every call.
type MethodCounters = hashbrown::HashMap<Box<str>, Counters, foldhash::fast::RandomState>;

struct Inner {
    /// Unique among the services of the process: what the resolution cache is keyed by.
    id: u64,
    config: Config,
    clock: Arc<dyn Clock>,
    backend: Backend,
    /// The Redis store behind the failure policy, for [`RateLimitService::redis_store`].
    #[cfg(feature = "redis")]
    redis: Option<crate::store::RedisStore>,
    total: Counters,
    by_tier: Vec<Counters>,
    by_method: parking_lot::RwLock<MethodCounters>,
    /// Calls waiting for capacity (see `queue.rs`).
    queue: queue::Queue,
    /// The decision-latency histogram (feature `metrics`; zero-sized without it).
    latency: crate::metrics::Latency,
}
/// The rate limiter: decisions, status, reset and statistics over one store.
///
/// Cheap to clone (clones share everything). Usable on its own, without any global state.
///
/// ```
/// use ratelimit_core::{Config, ManualClock, Options, RateLimitService, Tier};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// # futures::executor::block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_000_000));
/// let config = Config::builder().tier(Tier::new("free", 2).window("1m")).build()?;
/// let service = RateLimitService::with_clock(config, Arc::new(clock.clone()))?;
///
/// let free = Options::new().tier("free");
/// assert!(service.consume("user:1", &free).await?.allowed);
/// assert!(service.consume("user:1", &free).await?.allowed);
/// let refused = service.consume("user:1", &free).await?;
/// assert!(!refused.allowed);
/// assert_eq!(refused.retry_after, Some(Duration::from_secs(60)));
///
/// clock.advance(Duration::from_secs(60));
/// assert!(service.enforce("user:1", &free).await.is_ok());
/// assert_eq!(service.stats().by_tier["free"].denied, 1);
/// # Ok::<(), ratelimit_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct RateLimitService {
    inner: Arc<Inner>,
}

impl fmt::Debug for RateLimitService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RateLimitService");
        d.field("config", &self.inner.config);
        match &self.inner.backend {
            Backend::Memory(store) => d.field("store", store),
            Backend::Dyn(_) => d.field("store", &"dyn Store"),
        };
        d.finish()
    }
}

thread_local! {
    static KEY: RefCell<String> = const { RefCell::new(String::new()) };
    /// The last quota this thread resolved from overrides, with what it was resolved from
    /// (service, tier, overrides): a call site that passes the same overrides every time (an
    /// annotated fn, a handler with constant options) resolves them once per thread. A
    /// service's configuration never changes, so an entry is never stale.
    static RESOLVED: Cell<Option<Resolved>> = const { Cell::new(None) };
}

/// A quota resolved from overrides: (service id, tier, overrides, quota).
type Resolved = (u64, Option<usize>, Overrides, Quota);

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl RateLimitService {
    /// A service on the system clock, over the configured store.
    pub fn new(config: Config) -> Result<Self, Error> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// A service reading time from `clock` (a [`ManualClock`](crate::ManualClock) in tests),
    /// over the configured store.
    pub fn with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Self, Error> {
        // A clock's set-up is paid here rather than by the first decision: `SystemClock`
        // calibrates its counter on first use (10-200 ms, once per process).
        clock.now();
        match config.store().clone() {
            StoreConfig::Memory(options) => {
                let store = MemoryStore::with_options(options);
                store.start_sweeper(Arc::clone(&clock));
                Ok(Self::build(config, clock, Backend::Memory(store), None))
            }
            #[cfg(feature = "redis")]
            StoreConfig::Redis(options) => {
                let policy = options.on_failure;
                let store = crate::store::RedisStore::new(options)?;
                let failover = crate::store::Failover::new(store.clone(), policy);
                if let Some(local) = failover.fallback() {
                    local.start_sweeper(Arc::clone(&clock));
                }
                Ok(Self::build(
                    config,
                    clock,
                    Backend::Dyn(Box::new(failover)),
                    Some(store),
                ))
            }
        }
    }

    /// A service over a store of your own (see [`Store`]); `config.store()` is not used.
    /// Every quota the configuration fixes is checked against what `store` supports.
    ///
    /// ```
    /// use ratelimit_core::store::{Failover, FailurePolicy, MemoryStore};
    /// use ratelimit_core::{Config, Options, RateLimitService, SystemClock};
    /// use std::sync::Arc;
    ///
    /// # futures::executor::block_on(async {
    /// let store = Failover::new(MemoryStore::new(), FailurePolicy::Deny);
    /// let service = RateLimitService::with_store(Config::default(), store, Arc::new(SystemClock))?;
    /// assert!(service.consume("k", &Options::new()).await?.allowed);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn with_store(
        config: Config,
        store: impl Store,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Error> {
        let mut errors = ConfigError::default();
        for (field, e) in resolve::config_problems(&config, &|q| store.supports(q)) {
            errors.push(field, e.to_string());
        }
        if !errors.problems.is_empty() {
            return Err(Error::InvalidConfig(errors));
        }
        clock.now();
        Ok(Self::build(
            config,
            clock,
            Backend::Dyn(Box::new(store)),
            None,
        ))
    }

    fn build(
        config: Config,
        clock: Arc<dyn Clock>,
        backend: Backend,
        #[cfg_attr(not(feature = "redis"), allow(unused_variables))] redis: Option<RedisHandle>,
    ) -> Self {
        let by_tier = config
            .tiers()
            .iter()
            .map(|t| Counters::tier(&t.name))
            .collect();
        let store = match (&backend, &redis) {
            (Backend::Memory(_), _) => "memory",
            (Backend::Dyn(_), Some(_)) => "redis",
            (Backend::Dyn(_), None) => "custom",
        };
        RateLimitService {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                config,
                clock,
                backend,
                #[cfg(feature = "redis")]
                redis,
                total: Counters::default(),
                by_tier,
                by_method: Default::default(),
                queue: Default::default(),
                latency: crate::metrics::Latency::new(store),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The memory store, when that is the backend.
    pub fn memory_store(&self) -> Option<&MemoryStore> {
        match &self.inner.backend {
            Backend::Memory(store) => Some(store),
            Backend::Dyn(_) => None,
        }
    }

    /// The Redis store, when that is the backend (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn redis_store(&self) -> Option<&crate::store::RedisStore> {
        self.inner.redis.as_ref()
    }

    /// Decides a call with every option: spends if `options.consume`, else only looks (a
    /// cost of 0 looks at the level; see [`status`](Self::status)). A refusal is `Ok` with
    /// `allowed == false`; `Err` means no decision could be made, and the call must be
    /// refused too.
    ///
    /// When the call may wait ([`Options::queue`], or the configuration's `queue_enabled`)
    /// and is over its limit, it waits in the queue until admitted (`Ok`, allowed), or ends
    /// with [`Error::QueueFull`], [`Error::QueueTimeout`], or [`Error::NotInitialized`] if the
    /// module shuts down meanwhile. Waiting needs a Tokio runtime (its timers).
    pub async fn check(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.decide_waiting(Some(key), options).await
    }

    /// Spends one call (or `options.cost`) from `key`'s budget (waiting for capacity when
    /// the call may: see [`check`](Self::check)).
    pub async fn consume(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.check(key, &options.consume(true)).await
    }

    /// Like [`consume`](Self::consume), but a refusal is `Err(Error::Exceeded(..))` carrying
    /// the decision.
    pub async fn enforce(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.enforce_parts(Some(key), &options.consume(true)).await
    }

    /// The level of `key`'s budget now, spending and changing nothing: what remains,
    /// `reset_after` (when it is full again), and `allowed` when a call of cost 1 would pass
    /// now (with that call's `retry_after` when it would not). `options.cost` is not used.
    pub async fn status(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.check(key, &options.consume(false).cost(0)).await
    }

    /// Forgets `key`'s state under `tier` (`None`: the default tier, or no tier) with no
    /// overrides and no budget. State is kept per quota (strategy and window) and budget: to
    /// reset what calls with other options spent, use [`reset_with`](Self::reset_with).
    pub async fn reset(&self, key: &str, tier: Option<&str>) -> Result<(), Error> {
        let options = Options {
            tier,
            ..Options::new()
        };
        self.reset_with(key, &options).await.map(drop)
    }

    /// Forgets the state that calls on `key` with `options` (tier, overrides, budget) spend
    /// from; returns whether there was any.
    pub async fn reset_with(&self, key: &str, options: &Options<'_>) -> Result<bool, Error> {
        let (quota, tier) = self.resolve(options)?;
        let parts = self.parts(options, tier, Some(key));
        match &self.inner.backend {
            Backend::Memory(store) => Self::with_key(&parts, &quota, |k| Ok(store.reset(k))),
            Backend::Dyn(store) => {
                let mut k = String::new();
                key::compose(&mut k, &parts, &quota)?;
                store.reset(&k).await
            }
        }
    }

    /// A snapshot of the counters: overall, per tier, per budget.
    pub fn stats(&self) -> Stats {
        let tiers = self.inner.config.tiers();
        Stats {
            total: self.inner.total.snapshot(),
            by_tier: tiers
                .iter()
                .zip(&self.inner.by_tier)
                .map(|(t, c)| (t.name.to_string(), c.snapshot()))
                .collect(),
            by_method: self
                .inner
                .by_method
                .read()
                .iter()
                .map(|(name, c)| (name.to_string(), c.snapshot()))
                .collect(),
            queue: self.inner.queue.counts(),
        }
    }

    /// Sets every counter back to zero.
    pub fn reset_stats(&self) {
        self.inner.total.clear();
        self.inner.by_tier.iter().for_each(Counters::clear);
        self.inner.by_method.read().values().for_each(|c| c.clear());
        self.inner.queue.clear_counts();
    }

    /// The quota and tier a call with `options` is decided under: the tier's (or the
    /// module's) settings with the call's overrides, checked against what the store can
    /// count. The same resolution every call and `Module::init`'s checks go through.
    pub fn quota_for(&self, options: &Options<'_>) -> Result<(Quota, Option<Arc<str>>), Error> {
        let (quota, tier) = self.resolve(options)?;
        Ok((
            quota,
            tier.map(|i| self.inner.config.tiers()[i].name.clone()),
        ))
    }

    /// The quota under `tier` (an index into the configured tiers) with `overrides`, checked
    /// against the store.
    pub(crate) fn resolve_quota(
        &self,
        tier: Option<usize>,
        overrides: &Overrides,
    ) -> Result<Quota, Error> {
        let quota = resolve::quota(&self.inner.config, tier, overrides)?;
        let supported = match &self.inner.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Dyn(store) => store.supports(&quota),
        };
        supported?;
        Ok(quota)
    }

    pub(super) fn resolve(&self, options: &Options<'_>) -> Result<(Quota, Option<usize>), Error> {
        let tier = resolve::tier_index(&self.inner.config, options.tier)?;
        let quota = if tier.is_none() && options.overrides.is_empty() {
            // The hot path of a plain call: the default limit, resolved once at build time.
            match self.inner.config.plain_quota() {
                Some(quota) => quota,
                None => return Err(Error::NoLimit),
            }
        } else if let (Some(i), true) = (tier, options.overrides.is_empty()) {
            self.inner.config.tiers()[i].quota
        } else {
            let id = self.inner.id;
            match RESOLVED.with(Cell::get) {
                Some((i, t, o, quota)) if i == id && t == tier && o == options.overrides => quota,
                _ => {
                    let quota = self.resolve_quota(tier, &options.overrides)?;
                    RESOLVED.with(|c| c.set(Some((id, tier, options.overrides, quota))));
                    quota
                }
            }
        };
        Ok((quota, tier))
    }

    /// The parts of the store key of a call; `options` decide whether the quota's identity
    /// was written ahead (a tier's or the default limit's quota, no overrides).
    pub(super) fn parts<'a>(
        &'a self,
        options: &Options<'a>,
        tier: Option<usize>,
        key: Option<&'a str>,
    ) -> KeyParts<'a> {
        let config = &self.inner.config;
        let identity = match tier {
            _ if !options.overrides.is_empty() => None,
            Some(i) => Some(&*config.tiers()[i].identity),
            None => config.plain_identity.as_deref(),
        };
        KeyParts {
            prefix: config.key_prefix(),
            budget: options.budget,
            tier: tier.map(|i| &*config.tiers()[i].name),
            key,
            identity,
        }
    }

    /// Runs `f` with the store key of `parts`, composed in a reused thread-local buffer so
    /// the memory path does not allocate.
    fn with_key<T>(
        parts: &KeyParts<'_>,
        quota: &Quota,
        f: impl FnOnce(&str) -> Result<T, Error>,
    ) -> Result<T, Error> {
        KEY.with(|buf| {
            let mut buf = buf.borrow_mut();
            key::compose(&mut buf, parts, quota)?;
            f(&buf)
        })
    }

    /// Like [`enforce`](Self::enforce), for a call with or without a user key (an annotated
    /// fn without `key = ...` spends from its budget alone).
    pub(crate) async fn enforce_parts(
        &self,
        key: Option<&str>,
        options: &Options<'_>,
    ) -> Result<Decision, Error> {
        let decision = self.decide_waiting(key, options).await?;
        if decision.allowed {
            Ok(decision)
        } else {
            Err(Error::Exceeded(Box::new(Exceeded {
                decision,
                budget: options.budget.map(str::to_owned),
            })))
        }
    }

    async fn decide(&self, key: Option<&str>, options: &Options<'_>) -> Result<Decision, Error> {
        let (result, tier) = self.decide_uncounted(key, options).await;
        if options.consume {
            self.record(tier, options.budget, key, &result);
        }
        result
    }

    /// One decision, not counted in the statistics; with the tier it was made under.
    pub(super) async fn decide_uncounted(
        &self,
        key: Option<&str>,
        options: &Options<'_>,
    ) -> (Result<Decision, Error>, Option<usize>) {
        let (quota, tier) = match self.resolve(options) {
            Ok(resolved) => resolved,
            Err(e) => return (Err(e), None),
        };
        let now = self.inner.clock.now();
        let parts = self.parts(options, tier, key);
        let (cost, commit) = (options.cost, options.consume);
        let started = self.inner.latency.start();
        // The memory store answers at once: called here, not through another future, since
        // every layer of future moves the decision once more.
        let result = match &self.inner.backend {
            _ if !self.inner.config.enabled() => Ok(Decision::unlimited(now)),
            Backend::Memory(store) => Self::with_key(&parts, &quota, |k| {
                store.decide_at(k, &quota, cost, now, commit)
            }),
            Backend::Dyn(store) => {
                let mut k = String::with_capacity(64);
                match key::compose(&mut k, &parts, &quota) {
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

    pub(super) fn count(&self, tier: Option<usize>, budget: Option<&str>, outcome: Outcome) {
        self.inner.total.record(outcome);
        self.count_scoped(tier, budget, outcome);
    }

    /// Counts under the tier and budget only (a stacked call counts once in the total).
    pub(super) fn count_scoped(&self, tier: Option<usize>, budget: Option<&str>, outcome: Outcome) {
        if let Some(i) = tier {
            self.inner.by_tier[i].record(outcome);
        }
        if let Some(name) = budget {
            // Counted under the read lock: no Arc to clone and drop on every call.
            if let Some(counters) = self.inner.by_method.read().get(name) {
                counters.record(outcome);
                return;
            }
            let mut methods = self.inner.by_method.write();
            methods
                .entry(name.into())
                .or_insert_with(|| Counters::budget(name))
                .record(outcome);
        }
    }
}

#[cfg(feature = "redis")]
type RedisHandle = crate::store::RedisStore;
#[cfg(not(feature = "redis"))]
type RedisHandle = std::convert::Infallible;
