//! [`RateLimitService`]: the API every other piece (macros, HTTP layer) goes through.

use std::cell::RefCell;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::config::{names, Config, StoreConfig};
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::quota::{Quota, Strategy};
use crate::stats::{Counters, Outcome, Stats};
use crate::store::MemoryStore;

/// Per-call options: which tier, what the call costs, and overrides of the tier's or module's
/// limit, window, burst and strategy.
///
/// ```
/// use ratelimit_core::{Options, Strategy};
/// use std::time::Duration;
///
/// let opts = Options::new().tier("pro").cost(5);
/// let custom = Options::new().limit(3).window(Duration::from_secs(10)).strategy(Strategy::TokenBucket);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options<'a> {
    /// The tier; `None` uses the default tier, else the default limit.
    pub tier: Option<&'a str>,
    /// The call's weight (default 1).
    pub cost: u64,
    /// Overrides the limit.
    pub limit: Option<u64>,
    /// Overrides the window.
    pub window: Option<Duration>,
    /// Overrides the burst.
    pub burst: Option<u64>,
    /// Overrides the strategy.
    pub strategy: Option<Strategy>,
    /// The budget's name (an annotated fn's path): used in errors, events and `stats().by_method`.
    pub budget: Option<&'a str>,
    /// Whether the call spends from the budget (`false` only looks, like `status`).
    pub consume: bool,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options::new()
    }
}

impl<'a> Options<'a> {
    /// Cost 1, no tier, no overrides.
    pub const fn new() -> Self {
        Options {
            tier: None,
            cost: 1,
            limit: None,
            window: None,
            burst: None,
            strategy: None,
            budget: None,
            consume: true,
        }
    }
    /// Under this tier.
    pub const fn tier(mut self, tier: &'a str) -> Self {
        self.tier = Some(tier);
        self
    }
    /// With this weight.
    pub const fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }
    /// With this limit.
    pub const fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
    /// With this window.
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }
    /// With this burst.
    pub const fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }
    /// With this strategy.
    pub const fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }
    /// On behalf of this budget.
    pub const fn budget(mut self, budget: &'a str) -> Self {
        self.budget = Some(budget);
        self
    }
    /// Whether to spend (`true`, the default) or only look.
    pub const fn consume(mut self, consume: bool) -> Self {
        self.consume = consume;
        self
    }
}

enum Backend {
    Memory(MemoryStore),
    #[cfg(feature = "redis")]
    Redis(crate::store::redis::RedisBackend),
}

/// Per-budget counters; budget names are fn paths, hashed with foldhash on every call.
type MethodCounters = hashbrown::HashMap<Box<str>, Counters, foldhash::fast::RandomState>;

struct Inner {
    config: Config,
    clock: Arc<dyn Clock>,
    backend: Backend,
    total: Counters,
    by_tier: Vec<Counters>,
    by_method: parking_lot::RwLock<MethodCounters>,
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
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => d.field("store", redis),
        };
        d.finish()
    }
}

thread_local! {
    static KEY: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A key as it may appear in logs: a hash, never the key itself.
struct KeyDigest<'a>(&'a str);

impl fmt::Display for KeyDigest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut h =
            std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().build_hasher();
        h.write(self.0.as_bytes());
        write!(f, "#{:016x}", h.finish())
    }
}

impl RateLimitService {
    /// A service on the system clock.
    pub fn new(config: Config) -> Result<Self, Error> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// A service reading time from `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Self, Error> {
        // A clock's set-up is paid here rather than by the first decision: `SystemClock`
        // calibrates its counter on first use (10-200 ms, once per process).
        clock.now();
        let backend = match config.store() {
            StoreConfig::Memory(options) => {
                let store = MemoryStore::with_options(*options);
                store.start_sweeper(Arc::clone(&clock));
                Backend::Memory(store)
            }
            #[cfg(feature = "redis")]
            StoreConfig::Redis(options) => Backend::Redis(crate::store::redis::RedisBackend::new(
                options.clone(),
                &clock,
            )?),
        };
        let by_tier = config.tiers().iter().map(|_| Counters::default()).collect();
        Ok(RateLimitService {
            inner: Arc::new(Inner {
                config,
                clock,
                backend,
                total: Counters::default(),
                by_tier,
                by_method: Default::default(),
            }),
        })
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
            #[cfg(feature = "redis")]
            Backend::Redis(_) => None,
        }
    }

    /// The Redis store, when that is the backend (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn redis_store(&self) -> Option<&crate::store::RedisStore> {
        match &self.inner.backend {
            Backend::Redis(redis) => Some(&redis.store),
            Backend::Memory(_) => None,
        }
    }

    /// Decides a call with every option: spends if `options.consume`, else only looks.
    /// A refusal is `Ok` with `allowed == false`; `Err` means no decision could be made, and
    /// the call must be refused too.
    pub async fn check(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        let (quota, tier) = match self.resolve(options) {
            Ok(resolved) => resolved,
            Err(e) => {
                if options.consume {
                    self.count(None, options.budget, Outcome::Error);
                }
                return Err(e);
            }
        };
        let now = self.inner.clock.now();
        if !self.inner.config.enabled() {
            if options.consume {
                self.count(tier, options.budget, Outcome::Allowed);
            }
            return Ok(Decision::unlimited(now));
        }
        let tier_name = tier.map(|i| &self.inner.config.tiers()[i].name);
        let tier_key = tier_name.map(|n| &**n);
        let result = match &self.inner.backend {
            Backend::Memory(store) => self.with_store_key(key, tier_key, |store_key| {
                // `resolve` hands out validated quotas only.
                store.decide_valid(store_key, &quota, options.cost, now, options.consume)
            }),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => match self.redis_key(key, tier_key) {
                Ok(store_key) => {
                    redis
                        .check(&store_key, &quota, options.cost, options.consume, now)
                        .await
                }
                Err(e) => Err(e),
            },
        };
        let mut decision = match result {
            Ok(d) => d,
            Err(e) => {
                if options.consume {
                    self.count(tier, options.budget, Outcome::Error);
                }
                return Err(e);
            }
        };
        decision.tier = tier_name.cloned();
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
                    key = %KeyDigest(key),
                    "rate limit exceeded",
                );
            }
        }
        Ok(decision)
    }

    /// Spends one call (or `options.cost`) from `key`'s budget.
    pub async fn consume(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.check(key, &options.consume(true)).await
    }

    /// Like [`consume`](Self::consume), but a refusal is `Err(Error::Exceeded(..))` carrying
    /// the decision.
    pub async fn enforce(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        let decision = self.consume(key, options).await?;
        if decision.allowed {
            Ok(decision)
        } else {
            Err(Error::Exceeded(Box::new(Exceeded {
                decision,
                budget: options.budget.map(str::to_owned),
            })))
        }
    }

    /// What [`consume`](Self::consume) would answer, without spending anything or changing
    /// any state.
    pub async fn status(&self, key: &str, options: &Options<'_>) -> Result<Decision, Error> {
        self.check(key, &options.consume(false)).await
    }

    /// Forgets `key`'s state under `tier` (`None`: the default tier, or no tier).
    pub async fn reset(&self, key: &str, tier: Option<&str>) -> Result<(), Error> {
        let options = Options {
            tier,
            ..Options::new()
        };
        let scope = self
            .tier_of(&options)?
            .map(|i| &*self.inner.config.tiers()[i].name);
        match &self.inner.backend {
            Backend::Memory(store) => self.with_store_key(key, scope, |store_key| {
                store.reset(store_key);
                Ok(())
            }),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.reset(&self.redis_key(key, scope)?).await,
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
        }
    }

    /// Sets every counter back to zero.
    pub fn reset_stats(&self) {
        self.inner.total.clear();
        self.inner.by_tier.iter().for_each(Counters::clear);
        self.inner.by_method.read().values().for_each(|c| c.clear());
    }

    /// The quota and tier (index) a call with `options` is decided under.
    pub fn quota_for(&self, options: &Options<'_>) -> Result<(Quota, Option<Arc<str>>), Error> {
        let (quota, tier) = self.resolve(options)?;
        Ok((
            quota,
            tier.map(|i| self.inner.config.tiers()[i].name.clone()),
        ))
    }

    fn tier_of(&self, options: &Options<'_>) -> Result<Option<usize>, Error> {
        let config = &self.inner.config;
        let name = match options.tier {
            Some(name) => name,
            None => match config.default_tier() {
                Some(name) => name,
                None => return Ok(None),
            },
        };
        match config.tiers().iter().position(|t| *t.name == *name) {
            Some(i) => Ok(Some(i)),
            None => Err(Error::UnknownTier {
                tier: name.to_owned(),
                known: names(config.tiers()),
            }),
        }
    }

    /// The quota for `options`, validated: a tier's and the default limit's quotas were
    /// validated when the configuration was built (it cannot be built otherwise), and a
    /// quota with overrides is validated here. The memory store relies on it
    /// (`MemoryStore::decide_valid`).
    fn resolve(&self, options: &Options<'_>) -> Result<(Quota, Option<usize>), Error> {
        let config = &self.inner.config;
        let tier = self.tier_of(options)?;
        let base = match tier {
            Some(i) => config.tiers()[i].quota,
            None => {
                let limit = options
                    .limit
                    .or(config.default_limit())
                    .ok_or(Error::NoLimit)?;
                config.quota(limit, config.default_window(), None, None)
            }
        };
        let overridden = options.limit.is_some()
            || options.window.is_some()
            || options.burst.is_some()
            || options.strategy.is_some();
        if !overridden {
            return Ok((base, tier));
        }
        let quota = Quota {
            limit: options.limit.unwrap_or(base.limit),
            window: options.window.unwrap_or(base.window),
            burst: options.burst.unwrap_or(base.burst),
            strategy: options.strategy.unwrap_or(base.strategy),
            refill: base.refill,
        };
        quota
            .validate()
            .map_err(|reason| Error::InvalidQuota { reason })?;
        Ok((quota, tier))
    }

    /// Runs `f` with the store key `<prefix>:<tier or ->:<key>`, built in a reused
    /// thread-local buffer so the hot path does not allocate.
    fn with_store_key<T>(
        &self,
        key: &str,
        tier: Option<&str>,
        f: impl FnOnce(&str) -> Result<T, Error>,
    ) -> Result<T, Error> {
        crate::store::check_key(key)?;
        KEY.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.clear();
            // push_str, not write!: no formatting machinery on every call.
            buf.push_str(self.inner.config.key_prefix());
            buf.push(':');
            buf.push_str(tier.unwrap_or("-"));
            buf.push(':');
            buf.push_str(key);
            f(&buf)
        })
    }

    /// The Redis key `<prefix>:<tier or ->:{<key>}`: the user key is the hash tag, so in a
    /// cluster every budget of one user lives in one slot.
    #[cfg(feature = "redis")]
    fn redis_key(&self, key: &str, tier: Option<&str>) -> Result<String, Error> {
        crate::store::check_key(key)?;
        Ok(format!(
            "{}:{}:{{{key}}}",
            self.inner.config.key_prefix(),
            tier.unwrap_or("-")
        ))
    }

    fn count(&self, tier: Option<usize>, budget: Option<&str>, outcome: Outcome) {
        self.inner.total.record(outcome);
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
            methods.entry(name.into()).or_default().record(outcome);
        }
    }
}
