//! [`ModuleBuilder`] and [`Module`]: the process-wide service behind every annotated fn,
//! installed at start-up once every declaration has been checked.

use std::fmt;
use std::sync::Arc;

use super::check::check_declarations;
use super::limiter::Limiter;
use super::runtime::APP;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigBuilder, StoreConfig, Tier};
use crate::error::Error;
use crate::service::RateLimitService;
use crate::stats::Stats;
use crate::syntax::Strategy;
use crate::window::Window;

/// Builds a [`Module`]: every option of [`ConfigBuilder`], plus the clock.
///
/// ```
/// use ratelimit_core::{Module, Tier};
///
/// let module = Module::builder()
///     .tier(Tier::new("pro", 1_000).window("1m"))
///     .default_tier("pro")
///     .init()?;
/// assert!(module.service().config().tier("pro").is_some());
/// drop(module); // shuts the module down
/// # Ok::<(), ratelimit_core::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `init` is called"]
pub struct ModuleBuilder {
    config: ConfigBuilder,
    clock: Option<Arc<dyn Clock>>,
}

impl From<ConfigBuilder> for ModuleBuilder {
    fn from(config: ConfigBuilder) -> Self {
        ModuleBuilder {
            config,
            clock: None,
        }
    }
}

impl ModuleBuilder {
    /// Applies any [`ConfigBuilder`] option (including ones added after this builder).
    pub fn configure(mut self, f: impl FnOnce(ConfigBuilder) -> ConfigBuilder) -> Self {
        self.config = f(self.config);
        self
    }
    /// See [`ConfigBuilder::enabled`].
    pub fn enabled(self, enabled: bool) -> Self {
        self.configure(|c| c.enabled(enabled))
    }
    /// See [`ConfigBuilder::strategy`].
    pub fn strategy(self, strategy: Strategy) -> Self {
        self.configure(|c| c.strategy(strategy))
    }
    /// See [`ConfigBuilder::key_prefix`].
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        self.configure(|c| c.key_prefix(prefix))
    }
    /// See [`ConfigBuilder::default_limit`].
    pub fn default_limit(self, limit: u64) -> Self {
        self.configure(|c| c.default_limit(limit))
    }
    /// See [`ConfigBuilder::no_default_limit`].
    pub fn no_default_limit(self) -> Self {
        self.configure(ConfigBuilder::no_default_limit)
    }
    /// See [`ConfigBuilder::default_window`].
    pub fn default_window(self, window: impl Into<Window>) -> Self {
        self.configure(|c| c.default_window(window))
    }
    /// See [`ConfigBuilder::burst_limit`].
    pub fn burst_limit(self, burst: u64) -> Self {
        self.configure(|c| c.burst_limit(burst))
    }
    /// See [`ConfigBuilder::token_refill_rate`].
    pub fn token_refill_rate(self, rate: u64) -> Self {
        self.configure(|c| c.token_refill_rate(rate))
    }
    /// See [`ConfigBuilder::tier`].
    pub fn tier(self, tier: Tier) -> Self {
        self.configure(|c| c.tier(tier))
    }
    /// See [`ConfigBuilder::default_tier`].
    pub fn default_tier(self, name: impl Into<String>) -> Self {
        self.configure(|c| c.default_tier(name))
    }
    /// See [`ConfigBuilder::queue_enabled`].
    pub fn queue_enabled(self, enabled: bool) -> Self {
        self.configure(|c| c.queue_enabled(enabled))
    }
    /// See [`ConfigBuilder::max_queue_size`].
    pub fn max_queue_size(self, size: usize) -> Self {
        self.configure(|c| c.max_queue_size(size))
    }
    /// See [`ConfigBuilder::queue_timeout`].
    pub fn queue_timeout(self, timeout: impl Into<Window>) -> Self {
        self.configure(|c| c.queue_timeout(timeout))
    }
    /// See [`ConfigBuilder::store`].
    pub fn store(self, store: StoreConfig) -> Self {
        self.configure(|c| c.store(store))
    }
    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Builds the configuration and a service, checks every declaration in the binary
    /// against it, and installs it as the process-wide module.
    ///
    /// Errors: [`Error::InvalidConfig`] (every bad field), [`Error::Declarations`] (every fn
    /// the configuration cannot enforce), [`Error::AlreadyInitialized`].
    ///
    /// Only the fns decided by the application's module are checked: a library's fns that name
    /// a [`Limiter`] of their own are checked when that limiter is built.
    pub fn init(self) -> Result<Module, Error> {
        self.init_on(&APP)
    }

    /// Builds, checks the fns of `limiter` and installs the service in it.
    pub(super) fn init_on(self, limiter: &'static Limiter) -> Result<Module, Error> {
        let config = self.config.build()?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        Module::install(limiter, config, clock)
    }

    /// Builds and checks like [`init`](Self::init), without installing anything.
    pub(crate) fn build_checked(self) -> Result<RateLimitService, Error> {
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        checked(&APP, self.config.build()?, clock)
    }
}

/// A service built for `limiter`, every fn it decides checked against it.
fn checked(
    limiter: &'static Limiter,
    config: Config,
    clock: Arc<dyn Clock>,
) -> Result<RateLimitService, Error> {
    let service = RateLimitService::with_clock(config, clock)?;
    check_declarations(&service, &limiter.declarations()).map_err(Error::Declarations)?;
    Ok(service)
}

/// The running rate-limit module: the process-wide service behind the application's
/// annotated fns (from [`Module::init`]), or behind a library's (from [`Limiter::init`]).
///
/// Only one runs at a time per limiter. Dropping the handle (or [`shutdown`](Self::shutdown))
/// uninstalls it: its annotated fns are then refused with [`Error::NotInitialized`] until the
/// next `init`.
#[must_use = "dropping the module shuts it down"]
pub struct Module {
    id: u64,
    limiter: &'static Limiter,
    service: RateLimitService,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("service", &self.service)
            .finish()
    }
}

impl Module {
    /// Starts a configuration; finish with [`ModuleBuilder::init`].
    pub fn builder() -> ModuleBuilder {
        ModuleBuilder::default()
    }

    /// Installs a module with `config` on the system clock; see [`ModuleBuilder::init`].
    pub fn init(config: Config) -> Result<Module, Error> {
        Self::install(&APP, config, Arc::new(SystemClock))
    }

    fn install(
        limiter: &'static Limiter,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Module, Error> {
        let (id, service) = limiter.install(|| checked(limiter, config, clock))?;
        Ok(Module {
            id,
            limiter,
            service,
        })
    }

    /// Whether the application's module is running.
    pub fn is_initialized() -> bool {
        APP.is_initialized()
    }

    /// The service annotated fns use at this point: the innermost
    /// [`TestModule::scope`](crate::testing::TestModule::scope)'s on this task, else the running
    /// module's, else `None` (an annotated fn would be refused with [`Error::NotInitialized`]).
    /// For code that limits through the running module without holding its handle, such as
    /// the HTTP layer.
    ///
    /// ```
    /// use ratelimit_core::Module;
    ///
    /// assert!(Module::current_service().is_none());
    /// let module = Module::builder().init()?;
    /// assert!(Module::current_service().is_some());
    /// drop(module);
    /// assert!(Module::current_service().is_none());
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    pub fn current_service() -> Option<RateLimitService> {
        super::runtime::current()
    }

    /// The service (for direct `consume`, `status`, `reset`...).
    pub fn service(&self) -> &RateLimitService {
        &self.service
    }

    /// The counters, including per-fn figures in `by_method` (keyed by budget name).
    pub fn stats(&self) -> Stats {
        self.service.stats()
    }

    /// Uninstalls the module (the same as dropping it). Every annotated fn called afterwards,
    /// on any thread, is refused with [`Error::NotInitialized`], and so is every call
    /// waiting in the queue at that moment (none of them is admitted after).
    ///
    /// Each thread that called an annotated fn keeps a handle to the service it used until its
    /// next annotated call (which sees the shutdown) or its exit, so the store's memory is
    /// released then rather than at once.
    pub fn shutdown(self) {}
}

impl Drop for Module {
    fn drop(&mut self) {
        self.limiter.remove(self.id);
        // Fail closed: every call waiting in the queue ends with `NotInitialized`, and none
        // is admitted after this point.
        self.service.close_queue();
    }
}
