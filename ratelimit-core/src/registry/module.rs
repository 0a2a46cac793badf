//! [`ModuleBuilder`] and [`Module`]: the process-wide service behind every annotated fn,
//! installed at start-up once every declaration has been checked.

use std::fmt;
use std::sync::Arc;

use super::check::{check_declarations, check_declarations_under};
use super::declaration::Declaration;
use super::limiter::{Limiter, APP};
use super::spec::TierSpec;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigBuilder};
use crate::error::Error;
use crate::service::{Declarations, Declared, RateLimitService, Reloaded};
use crate::stats::Stats;

/// Builds a [`Module`]: the [`ConfigBuilder`] itself, so every option of a [`Config`] is
/// set the same way here, plus the module's clock, and finished with
/// [`init`](ConfigBuilder::init).
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
pub type ModuleBuilder = ConfigBuilder<Module>;

impl From<ConfigBuilder> for ModuleBuilder {
    fn from(config: ConfigBuilder) -> Self {
        config.options.into()
    }
}

/// What only a module's builder has; every option is on [`ConfigBuilder`] for both.
impl ConfigBuilder<Module> {
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
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        Module::install(limiter, self.build()?, clock)
    }

    /// Builds and checks like [`init`](Self::init), without installing anything.
    pub(crate) fn build_checked(self) -> Result<RateLimitService, Error> {
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        checked(&APP, self.build()?, clock)
    }
}

/// A service built for `limiter`, every fn it decides checked against it, now and at every
/// reload.
fn checked(
    limiter: &'static Limiter,
    config: Config,
    clock: Arc<dyn Clock>,
) -> Result<RateLimitService, Error> {
    let service = RateLimitService::with_clock(config, clock)?;
    let declarations = limiter.declarations();
    check_declarations(&service, &declarations).map_err(Error::Declarations)?;
    warn_shadow_fns(&service.config(), &declarations);
    Ok(service.checking_reloads(Box::new(Fns(limiter))))
}

/// The fns `0` decides, as its service's reloads check them ([`Declarations`]).
struct Fns(&'static Limiter);

impl Declarations for Fns {
    fn check(&self, service: &RateLimitService, config: &Config) -> Result<Declared, Error> {
        check_declarations_under(service, config, &self.0.declarations())
            .map_err(Error::Declarations)
    }

    fn installed(&self, config: &Config) {
        warn_shadow_fns(config, &self.0.declarations());
    }
}

/// Logs every shadow fn at warn level, as a module starts or reloads under `config`: one
/// declared `shadow = true`, and one whose tier (named, the default, or any a per-call tier may
/// choose) is a shadow tier, however explicit its own limit. Shadow is only ever an explicit
/// choice, and never a quiet one.
fn warn_shadow_fns(config: &Config, declarations: &[&'static Declaration]) {
    let shadow_tier = |name: Option<&str>| {
        let index = config.tier_index(name).ok().flatten();
        index
            .filter(|&i| config.tiers()[i].shadow)
            .map(|i| &*config.tiers()[i].name)
    };
    for d in declarations {
        let through = match d.spec().tier() {
            TierSpec::Static(name) => shadow_tier(Some(name)),
            TierSpec::Default => shadow_tier(None),
            TierSpec::Dynamic => config.tiers().iter().find(|t| t.shadow).map(|t| &*t.name),
        };
        if !d.spec().shadow() && through.is_none() {
            continue;
        }
        tracing::warn!(
            target: "ratelimit",
            function = d.function(),
            file = d.file(),
            line = d.line(),
            tier = through.unwrap_or("-"),
            "shadow limit: counts and reports, refuses nothing",
        );
    }
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

    /// Replaces the running configuration with `builder`'s (its clock is not used: the
    /// module keeps its own), checked exactly as [`init`](ModuleBuilder::init) checks: the
    /// configuration's fields, then every annotated fn this module decides, every problem
    /// reported at once. On any problem nothing changes and the running configuration goes on
    /// deciding. See [`RateLimitService::reload`] for what carries over and what a call sees.
    ///
    /// ```
    /// use ratelimit_core::{Module, Tier};
    ///
    /// let module = Module::builder().tier(Tier::new("pro", 100).window("1m")).init()?;
    /// let reloaded = module.reload(Module::builder().tier(Tier::new("pro", 500).window("1m")))?;
    /// assert_eq!(reloaded.loosened, ["pro"]);
    /// // A configuration that does not validate leaves the running one.
    /// assert!(module.reload(Module::builder().tier(Tier::new("", 1))).is_err());
    /// assert_eq!(module.stats().generation, 1);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    pub fn reload(&self, builder: impl Into<ModuleBuilder>) -> Result<Reloaded, Error> {
        self.service.reload(builder.into().build()?)
    }

    /// [`reload`](Self::reload) from the TOML or JSON file at `path` (feature `serde`;
    /// [`Config::from_file`]): a file that cannot be read, does not parse or does not validate
    /// leaves the running configuration, and the error says why. An application that built
    /// its module from a file reloads from the same path, say on `SIGHUP` (the `reload`
    /// example).
    #[cfg(feature = "serde")]
    pub fn reload_from_file(&self, path: impl AsRef<std::path::Path>) -> Result<Reloaded, Error> {
        self.service.reload(Config::from_file(path)?)
    }

    /// Reloads from the file at `path` whenever it changes (feature `notify`): as
    /// [`reload_from_file`](Self::reload_from_file), each outcome logged (`info` when it took
    /// over, `warn` with the problems when the running limits stay). A change that leaves the
    /// configuration as it runs reloads nothing. Watching stops when the returned handle is
    /// dropped: keep it beside the module, and drop it with the module (it holds the service).
    /// The file's directory is watched, so an editor that replaces the file is seen too; the
    /// file is read 50 ms after a change, and an empty file is refused, but a file written in
    /// place can still be caught half written: write a temporary file and rename it over.
    #[cfg(feature = "notify")]
    pub fn watch_file(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> Result<super::watch::FileWatch, Error> {
        let service = self.service.clone();
        super::watch::FileWatch::start(path.as_ref(), move |config| {
            if config == *service.config() {
                return None;
            }
            Some(service.reload(config))
        })
    }

    /// Uninstalls the module (the same as dropping it). Every annotated fn called afterwards,
    /// on any thread, is refused with [`Error::NotInitialized`], and so is every call
    /// waiting in the queue at that moment (none of them is admitted after).
    ///
    /// The service (and its store's memory) is released once the calls in flight on it end.
    pub fn shutdown(self) {}
}

impl Limiter {
    /// Builds the service from `builder` (configuration and clock), checks every annotated fn
    /// that names this limiter against it (the checks [`Module::init`] runs for the
    /// application's fns), and installs it.
    ///
    /// Errors: [`Error::InvalidConfig`], [`Error::Declarations`] (every fn of this limiter the
    /// configuration cannot enforce, by path, so naming its crate),
    /// [`Error::AlreadyInitialized`] (it is running: drop its handle first).
    pub fn init(&'static self, builder: impl Into<ModuleBuilder>) -> Result<Module, Error> {
        builder.into().init_on(self)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.limiter.remove(self.id);
        // The fns' prepared call sites hold the service: released now, not at their next call.
        for declaration in self.limiter.declarations() {
            declaration.forget_prepared();
        }
        // Fail closed: every call waiting in the queue ends with `NotInitialized`, and none
        // is admitted after this point.
        self.service.close_queue();
    }
}
