//! [`RateLimitService`]: the API every other piece (macros, HTTP layer) goes through.

use std::fmt;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod adjust;
mod ask;
mod calls;
mod counting;
mod generation;
mod held;
mod horizon;
mod options;
mod pipeline;
mod prepared;
pub(crate) mod queue;
mod record;
mod reload;
mod site;
mod spent;
mod stacked;
mod transition;
mod wait;

pub(crate) use generation::{Generation, Kept, KEPT_PREVIOUS};
pub(crate) use options::Call;
pub use options::Options;
pub(crate) use prepared::Begun;
pub use prepared::{Attempt, Pending, Prepared};
pub use reload::Reloaded;
pub use spent::{Spent, SpentAll};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, StoreConfig};
use crate::error::{ConfigError, Error};
use crate::quota::{Overrides, Quota};
use crate::stats::{Counters, Stats};
use crate::store::{DynStore, MemoryStore, Store};

/// Per-budget counters; budget names are fn paths. A prepared site holds its budget's, so the
/// map is read when a site is prepared, and by calls that name a budget without one.
type MethodCounters = hashbrown::HashMap<Arc<str>, Arc<Counters>, foldhash::fast::RandomState>;

struct Inner {
    /// The running configuration (see [`Generation`]).
    current: arc_swap::ArcSwap<Generation>,
    /// `current`'s number, read by a prepared site on every call to learn whether it was
    /// prepared under the running generation.
    generation: std::sync::atomic::AtomicU64,
    /// Held by a reload from its check to its swap: two reloads never interleave.
    reloading: crate::sync::Mutex<()>,
    /// The annotated fns a module or limiter decides on this service, set once as it is
    /// built: every reload is checked against them and notes what they declare, whether it
    /// comes through `Module::reload` or `service().reload()` (which installed a config an
    /// fn could not run under, and noted none of its declarations).
    declarations: Option<Box<dyn Declarations>>,
    /// The longest window of its own (a per-call `window` override) a call has been worked
    /// out with, under any configuration, in nanoseconds (0: none): such a call is held to
    /// every configuration replaced within that window (`Kept::in_force`), so a reload keeps
    /// each for it (`Kept::holds_any`). Noted per configuration, one no call with an own
    /// window was worked out under was kept past the last 8 only for its configured windows,
    /// though later calls with their own hour were held to it: a ninth reload dropped it, 3
    /// admitted over its quota of 2 (probes_lent_sites).
    own_windows: AtomicU64,
    /// When the latest debt a penalty on a token bucket may have left ends (nanoseconds on
    /// the service's clock; 0: none): a reload moving a bucket to another state keeps the
    /// replaced configuration, whose old states calls carry from, until then at least
    /// (`Kept::penalized_until`). A penalty may leave more debt than a decision can (past
    /// the tolerance): kept only for the old window plus the tolerance, a moved bucket asked
    /// first three minutes after a reload forgot a penalty of four minutes
    /// (probes_transition_carry).
    penalized_until: AtomicU64,
    /// The longest a quota a call's own overrides made may hold something past the reload
    /// that moves it to another state (`Quota::outlasts_by`: its window and its bucket's
    /// tolerance or its block), in nanoseconds (0: none): a reload moving a limit keeps the
    /// replaced configuration that long (`Kept::carrying`). Kept only for the configured
    /// limits, a call's own block of an hour (or a bucket refilled a token a minute) was
    /// forgotten a minute after the default tier switched: 2 admitted at 90 s where the key
    /// was blocked (probes_carry_attacks). Read again by every transition worked out
    /// (`Kept::in_force`): a call's own quota first resolved after a reload outlasts what
    /// the reload kept for (probes_prepared_transitions). Raised too by the declarations of
    /// annotated fns, called or not, as a module starts and as a reload of it is installed
    /// (`note_declared`): in a fleet, another pod may have spent them (`own_windows`
    /// likewise).
    own_outlasts: AtomicU64,
    /// What this service knows of its fleet's reload horizon, recorded in the store
    /// (`horizon.rs`): read into `own_outlasts`, `own_windows` and its own penalty bound.
    fleet: horizon::Fleet,
    /// Whether the store came from the configuration (`config.store()`), which a reload
    /// then may not change; a store of the caller's own (`with_store`) ignores it.
    store_from_config: bool,
    clock: Arc<dyn Clock>,
    /// The store, through the [`Store`] trait only: every decision asks it the same way.
    store: Arc<dyn DynStore>,
    /// The memory store when the configuration built one, for [`RateLimitService::memory_store`].
    memory: Option<MemoryStore>,
    /// The Redis store behind the failure policy, for [`RateLimitService::redis_store`].
    #[cfg(feature = "redis")]
    redis: Option<crate::store::RedisStore>,
    total: Counters,
    by_method: crate::sync::RwLock<MethodCounters>,
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
        d.field("config", &self.config());
        match &self.inner.memory {
            Some(store) => d.field("store", store),
            None => d.field("store", &"dyn Store"),
        };
        d.finish()
    }
}

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
                let backend = (Arc::new(store.clone()) as Arc<dyn DynStore>, Some(store));
                Ok(Self::build(config, clock, backend, None).store_from_config())
            }
            #[cfg(feature = "redis")]
            StoreConfig::Redis(options) => {
                let policy = options.on_failure;
                let store = crate::store::RedisStore::new(options)?;
                let failover = crate::store::Failover::new(store.clone(), policy);
                if let Some(local) = failover.fallback() {
                    local.start_sweeper(Arc::clone(&clock));
                }
                Ok(
                    Self::build(config, clock, (Arc::new(failover), None), Some(store))
                        .store_from_config(),
                )
            }
            StoreConfig::Custom(custom) => {
                Ok(Self::build(config, clock, (custom.0, None), None).store_from_config())
            }
        }
    }

    /// A service over a store of your own (see [`Store`]); `config.store()` is not used.
    /// Every quota the configuration fixes is checked against what `store` supports.
    ///
    /// ```
    /// use ratelimit_core::{Failover, FailurePolicy, MemoryStore};
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
        // What the service will ask of it (`DynStore::supports`: blocks too), not the
        // trait's own answer alone: a tier's `block_for` on a store keeping none was taken
        // and never enforced (`probes_config`).
        for (field, e) in config.quota_problems(&|q| DynStore::supports(&store, q)) {
            errors.push(field, e.to_string());
        }
        if !errors.problems.is_empty() {
            return Err(Error::InvalidConfig(errors));
        }
        clock.now();
        Ok(Self::build(config, clock, (Arc::new(store), None), None))
    }

    fn build(
        config: Config,
        clock: Arc<dyn Clock>,
        (store, memory): (Arc<dyn DynStore>, Option<MemoryStore>),
        #[cfg_attr(not(feature = "redis"), allow(unused_variables))] redis: Option<RedisHandle>,
    ) -> Self {
        warn_shadow_tiers(&config);
        let kind = match (&memory, &redis) {
            (Some(_), _) => "memory",
            (None, Some(_)) => "redis",
            (None, None) => "custom",
        };
        RateLimitService {
            inner: Arc::new(Inner {
                current: arc_swap::ArcSwap::from_pointee(Generation::new(config, 0, None)),
                generation: std::sync::atomic::AtomicU64::new(0),
                reloading: crate::sync::Mutex::new(()),
                declarations: None,
                own_windows: AtomicU64::new(0),
                penalized_until: AtomicU64::new(0),
                own_outlasts: AtomicU64::new(0),
                fleet: horizon::Fleet::new(store.records_horizon(), store.records_lost()),
                store_from_config: false,
                clock,
                store,
                memory,
                #[cfg(feature = "redis")]
                redis,
                total: Counters::default(),
                by_method: Default::default(),
                queue: Default::default(),
                latency: crate::metrics::Latency::new(kind),
            }),
        }
    }

    /// Whether `other` is this service (a clone of it), not another with its own state.
    pub fn same_as(&self, other: &RateLimitService) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The service built from its configuration's `store`: a reload may not change it.
    fn store_from_config(mut self) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a service just built is not shared")
            .store_from_config = true;
        self
    }

    /// The running configuration (the one the last [`reload`](Self::reload) installed).
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.inner.current.load().config)
    }

    /// The running generation: what a call is decided under, whole. A guard, not a clone of
    /// the `Arc`: no write to a count shared by every thread on each call.
    #[inline]
    pub(crate) fn generation(&self) -> arc_swap::Guard<Arc<Generation>> {
        self.inner.current.load()
    }

    /// Whether `generation` is the running one.
    #[inline]
    pub(crate) fn runs(&self, generation: &Generation) -> bool {
        self.inner
            .generation
            .load(std::sync::atomic::Ordering::Acquire)
            == generation.number
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The memory store, when that is the backend.
    pub fn memory_store(&self) -> Option<&MemoryStore> {
        self.inner.memory.as_ref()
    }

    /// The Redis store, when that is the backend (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn redis_store(&self) -> Option<&crate::store::RedisStore> {
        self.inner.redis.as_ref()
    }

    /// A snapshot of the counters: overall, per tier, per budget.
    pub fn stats(&self) -> Stats {
        let current = self.inner.current.load();
        Stats {
            total: self.inner.total.snapshot(),
            generation: current.number,
            by_tier: current
                .config
                .tiers()
                .iter()
                .zip(&current.by_tier)
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
        self.inner
            .current
            .load()
            .by_tier
            .iter()
            .for_each(|c| c.clear());
        self.inner.by_method.read().values().for_each(|c| c.clear());
        self.inner.queue.clear_counts();
    }

    /// The quota and tier a call with `options` is decided under: the tier's (or the
    /// module's) settings with the call's overrides, checked against what the store can
    /// count. The same resolution every call and `Module::init`'s checks go through.
    pub fn quota_for(&self, options: &Options) -> Result<(Quota, Option<Arc<str>>), Error> {
        let generation = self.generation();
        let config = &generation.config;
        let mut own = None;
        let resolved = self.resolve(config, &options.call(), &mut own)?;
        let tier = resolved.tier.map(|i| config.tiers()[i].name.clone());
        Ok((*resolved.quota, tier))
    }

    /// The quota under `tier` (an index into the configured tiers) with `overrides`, checked
    /// against the store: what the declarations of annotated fns are checked by, as a module
    /// starts and reloads. A quota their overrides make is added to `declared`, which the
    /// service notes as a call's would be ([`note_declared`](Self::note_declared)) once the
    /// configuration runs, called or not: another pod running the same fns may have spent it
    /// on the state a reload moves. Noted only when resolved per call, a pod that had not
    /// called the fn itself let the move go at its ninth reload while the other pod's block
    /// of an hour held the old state: 5 admitted inside it (probes_fleet_horizon_redis).
    pub(crate) fn resolve_quota(
        &self,
        config: &Config,
        tier: Option<usize>,
        overrides: &Overrides,
        declared: &mut Declared,
    ) -> Result<Quota, Error> {
        let quota = config.quota(tier, overrides)?;
        self.inner.store.supports(&quota)?;
        if !overrides.is_empty() {
            declared.outlasts = declared.outlasts.max(quota.outlasts_by());
            if let Some(window) = overrides.window {
                declared.window = declared.window.max(window);
            }
        }
        Ok(quota)
    }

    /// The service, every reload of it checked against `declarations` (the fns a module or
    /// limiter built it for).
    pub(crate) fn checking_reloads(mut self, declarations: Box<dyn Declarations>) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a service just built is not shared")
            .declarations = Some(declarations);
        self
    }

    /// Notes what the declarations of a configuration that now runs (or is about to, under
    /// the reload's lock) make of their own ([`resolve_quota`](Self::resolve_quota)). Not
    /// before: noted as a reload's declarations were checked, a reload they then refused (a
    /// tier an fn names gone) left its quotas noted though nothing ran under it, and a window
    /// of a year there held every moving reload after it a year: the 65th refused, where
    /// all 80 were taken without it (probes_horizon_attacks).
    pub(crate) fn note_declared(&self, declared: Declared) {
        self.note_outlasts(declared.outlasts);
        self.note_own_window(declared.window);
    }

    /// Notes how long a quota a call's own overrides made may hold a moved state
    /// ([`Inner::own_outlasts`]): a load and a compare unless it outlasts every one before it.
    #[inline]
    fn note_outlasts(&self, outlasts: crate::clock::Nanos) {
        let latest = &self.inner.own_outlasts;
        if outlasts > latest.load(Ordering::Relaxed) {
            latest.fetch_max(outlasts, Ordering::Relaxed);
        }
    }

    /// Notes that a call with its own `window` is worked out ([`Inner::own_windows`]): a
    /// load and a compare unless it is the longest yet: inlined, as every call with its own
    /// window makes it (a call of its own was a sixth of the load and compare).
    #[inline]
    pub(super) fn note_own_window(&self, window: std::time::Duration) {
        let window = window.as_nanos().min(u128::from(u64::MAX)) as u64;
        let own = &self.inner.own_windows;
        if window > own.load(Ordering::Relaxed) {
            own.fetch_max(window, Ordering::Relaxed);
        }
    }

    /// The quota and tier (an index into `config`'s tiers) of a call with `options` under
    /// `config`: the configuration's own quota, borrowed with its identity in store keys, or
    /// one the call's overrides make, resolved into `own` (its identity written per call).
    #[inline]
    pub(super) fn resolve<'a>(
        &self,
        config: &'a Config,
        options: &Call<'_>,
        own: &'a mut Option<Quota>,
    ) -> Result<Resolved<'a>, Error> {
        let tier = config.tier_index(options.tier)?;
        if !options.overrides.is_empty() {
            let quota = own.insert(config.quota(tier, options.overrides)?);
            self.inner.store.supports(quota)?;
            self.note_outlasts(quota.outlasts_by());
            return Ok(Resolved {
                quota,
                tier,
                identity: None,
            });
        }
        let (quota, identity) = match tier {
            Some(i) => {
                let tier = &config.tiers()[i];
                (&tier.quota, &*tier.identity)
            }
            // The hot path of a plain call: the default limit, resolved once at build time.
            // The error made only where it is returned (`ok_or` built and dropped one on every
            // call, measurably: BENCHMARKS.md, `hot_path`).
            None => match (&config.plain, &config.plain_identity) {
                (Some(plain), Some(identity)) => (plain, &**identity),
                _ => return Err(Error::NoLimit),
            },
        };
        Ok(Resolved {
            quota,
            tier,
            identity: Some(identity),
        })
    }
}

/// The longest any quota of their own that annotated fns declare under a configuration may
/// hold a moved state (`Quota::outlasts_by`), and their longest window of their own: what
/// [`RateLimitService::resolve_quota`] gathers and [`RateLimitService::note_declared`]
/// notes once the configuration runs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Declared {
    outlasts: crate::clock::Nanos,
    window: std::time::Duration,
}

/// The annotated fns a service decides, as a reload sees them ([`Inner::declarations`]):
/// implemented by the registry, which this module does not import.
pub(crate) trait Declarations: Send + Sync {
    /// Checks every fn under `config` on `service`'s store, before `config` runs: what they
    /// declare of their own, or every problem.
    fn check(&self, service: &RateLimitService, config: &Config) -> Result<Declared, Error>;
    /// Tells what `config`, now running, means for the fns (the shadow fns, logged).
    fn installed(&self, config: &Config);
}

/// What [`RateLimitService::resolve`] makes of a call's options under a configuration.
pub(super) struct Resolved<'a> {
    pub(super) quota: &'a Quota,
    /// An index into the configuration's tiers.
    pub(super) tier: Option<usize>,
    /// The quota's identity in store keys when the configuration wrote it (its own quota).
    pub(super) identity: Option<&'a str>,
}

/// Logs every shadow tier of `config` at warn level, as a service starts or reloads: shadow is
/// only ever an explicit choice, and never a quiet one.
fn warn_shadow_tiers(config: &Config) {
    for tier in config.tiers().iter().filter(|t| t.shadow) {
        tracing::warn!(
            target: "ratelimit",
            tier = &*tier.name,
            "shadow tier: its limits count and report, and refuse nothing",
        );
    }
}

#[cfg(feature = "redis")]
type RedisHandle = crate::store::RedisStore;
#[cfg(not(feature = "redis"))]
type RedisHandle = std::convert::Infallible;
