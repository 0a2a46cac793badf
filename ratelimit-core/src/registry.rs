//! The registry behind the attribute macros: every annotated fn's [`Declaration`], the one
//! process-wide service installed by [`Module`], and the per-call entry point the generated code
//! goes through.
//!
//! Fail closed throughout: no module (never initialised, or shut down), an unknown tier, a store
//! that cannot answer — each refuses the call. Nothing here admits a call because something is
//! missing.

use std::cell::RefCell;
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::clock::{Clock, SystemClock};
use crate::config::{names, Config, ConfigBuilder, StoreConfig, Tier, Window};
use crate::error::Error;
use crate::quota::{format_window, Strategy};
use crate::service::{Options, RateLimitService};
use crate::stats::Stats;

/// Which tier an annotated fn is limited under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierSpec {
    /// None named: the module's default tier, else its default limit (unless the fn sets a
    /// `limit` of its own).
    Default,
    /// `tier = "pro"`: checked against the configuration by [`Module`] at start-up.
    Static(&'static str),
    /// `tier = <expr>`: chosen per call; an unknown tier refuses the call.
    Dynamic,
}

/// What an annotated fn asked for, as written in its attribute (windows already parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    limit: Option<u64>,
    window: Option<Duration>,
    burst: Option<u64>,
    strategy: Option<Strategy>,
    tier: TierSpec,
    keyed: bool,
    cost: Option<u64>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec::new()
    }
}

impl Spec {
    /// Nothing set: the module's default limit, one budget for the whole fn, cost 1.
    pub const fn new() -> Self {
        Spec {
            limit: None,
            window: None,
            burst: None,
            strategy: None,
            tier: TierSpec::Default,
            keyed: false,
            cost: Some(1),
        }
    }
    /// `limit = n`.
    #[doc(hidden)]
    pub const fn with_limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
    /// `window = "..."`, in nanoseconds (a `Duration` cannot be built from text in a const).
    #[doc(hidden)]
    pub const fn with_window_nanos(mut self, nanos: u64) -> Self {
        self.window = Some(Duration::from_nanos(nanos));
        self
    }
    /// `burst = n`.
    #[doc(hidden)]
    pub const fn with_burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }
    /// `strategy = "..."`.
    #[doc(hidden)]
    pub const fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }
    /// `tier = "name"`.
    #[doc(hidden)]
    pub const fn with_static_tier(mut self, tier: &'static str) -> Self {
        self.tier = TierSpec::Static(tier);
        self
    }
    /// `tier = <expr>`.
    #[doc(hidden)]
    pub const fn with_dynamic_tier(mut self) -> Self {
        self.tier = TierSpec::Dynamic;
        self
    }
    /// `key = <expr>`.
    #[doc(hidden)]
    pub const fn with_key(mut self) -> Self {
        self.keyed = true;
        self
    }
    /// `cost = <literal>`.
    #[doc(hidden)]
    pub const fn with_fixed_cost(mut self, cost: u64) -> Self {
        self.cost = Some(cost);
        self
    }
    /// `cost = <expr>`.
    #[doc(hidden)]
    pub const fn with_dynamic_cost(mut self) -> Self {
        self.cost = None;
        self
    }

    /// The fn's own limit, if it sets one.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }
    /// The fn's own window, if it sets one.
    pub fn window(&self) -> Option<Duration> {
        self.window
    }
    /// The fn's own burst, if it sets one.
    pub fn burst(&self) -> Option<u64> {
        self.burst
    }
    /// The fn's own strategy, if it sets one.
    pub fn strategy(&self) -> Option<Strategy> {
        self.strategy
    }
    /// The tier.
    pub fn tier(&self) -> TierSpec {
        self.tier
    }
    /// Whether calls are counted per key (`key = ...`) rather than in one budget.
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }
    /// The fixed cost of a call; `None` when it is computed per call.
    pub fn cost(&self) -> Option<u64> {
        self.cost
    }

    /// The settings two declarations must agree on to share one budget.
    fn shape(
        &self,
    ) -> (
        Option<u64>,
        Option<Duration>,
        Option<u64>,
        Option<Strategy>,
        TierSpec,
        bool,
    ) {
        (
            self.limit,
            self.window,
            self.burst,
            self.strategy,
            self.tier,
            self.keyed,
        )
    }

    fn options(&self) -> Options<'static> {
        Options {
            tier: match self.tier {
                TierSpec::Static(t) => Some(t),
                _ => None,
            },
            limit: self.limit,
            window: self.window,
            burst: self.burst,
            strategy: self.strategy,
            ..Options::new()
        }
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.limit, self.tier) {
            (Some(limit), tier) => {
                write!(f, "{limit} per ")?;
                match self.window {
                    Some(w) => f.write_str(&format_window(w))?,
                    None => f.write_str("default window")?,
                }
                match tier {
                    TierSpec::Default => {}
                    TierSpec::Static(t) => write!(f, ", tier {t:?}")?,
                    TierSpec::Dynamic => f.write_str(", tier chosen per call")?,
                }
            }
            (None, TierSpec::Default) => f.write_str("module default")?,
            (None, TierSpec::Static(t)) => write!(f, "tier {t:?}")?,
            (None, TierSpec::Dynamic) => f.write_str("tier chosen per call")?,
        }
        if let Some(b) = self.burst {
            write!(f, ", burst {b}")?;
        }
        if let Some(s) = self.strategy {
            write!(f, ", {s}")?;
        }
        f.write_str(if self.keyed {
            ", per key"
        } else {
            ", one budget"
        })?;
        match self.cost {
            Some(1) => Ok(()),
            Some(c) => write!(f, ", cost {c}"),
            None => f.write_str(", cost per call"),
        }
    }
}

/// One rate-limited fn, as the attribute macros declare it: its budget, path, source location
/// and [`Spec`]. Built in a `static` by the generated code; list them with [`declarations`].
pub struct Declaration {
    function: &'static str,
    name: Option<&'static str>,
    file: &'static str,
    line: u32,
    spec: Spec,
}

impl Declaration {
    /// Used by the macros: `function` is the fn's path, spelled out at compile time from
    /// `module_path!()` and the names as written, so that it is the same whichever compiler
    /// built the binary.
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
        }
    }

    /// The fn's path: `crate::module::function`, `crate::module::Type::method` in an annotated
    /// `impl` block, `crate::module::<Type as Trait>::method` in an annotated trait impl, and
    /// `crate::module::method` for a method annotated on its own.
    #[inline]
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The budget the fn spends from: its `name = "..."`, else its path. Fns that share a
    /// name share one budget.
    #[inline]
    pub fn budget(&'static self) -> &'static str {
        match self.name {
            Some(name) => name,
            None => self.function(),
        }
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
}

impl fmt::Debug for Declaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declaration")
            .field("function", &self.function)
            .field("name", &self.name)
            .field("file", &self.file)
            .field("line", &self.line)
            .field("spec", &self.spec)
            .finish()
    }
}

/// A [`Declaration`] as submitted to `inventory`.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registered(pub &'static Declaration);

inventory::collect!(Registered);

/// Every rate-limited fn in the binary, sorted by file and line.
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

/// One declaration the configuration cannot enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationProblem {
    /// The fn's path.
    pub function: String,
    /// Where it is.
    pub file: &'static str,
    /// Its line.
    pub line: u32,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for DeclarationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.file, self.line, self.function, self.problem
        )
    }
}

/// Every problem found when checking the binary's declarations against a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeclarationErrors {
    /// One entry per problem, in file and line order.
    pub problems: Vec<DeclarationProblem>,
}

impl fmt::Display for DeclarationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rate-limited fn(s) cannot be enforced with this configuration",
            self.problems.len()
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DeclarationErrors {}

/// Checks `declarations` against `config`: static tiers that are not configured, fns that rely
/// on a default limit the module does not have, limits that cannot be enforced, and budgets
/// shared by fns that disagree on their settings.
pub fn check_declarations(
    config: &Config,
    declarations: &[&'static Declaration],
) -> Result<(), DeclarationErrors> {
    let mut errors = DeclarationErrors::default();
    let mut push = |d: &'static Declaration, problem: String| {
        errors.problems.push(DeclarationProblem {
            function: d.function().to_owned(),
            file: d.file,
            line: d.line,
            problem,
        })
    };
    for (i, &d) in declarations.iter().enumerate() {
        let spec = &d.spec;
        match spec.tier {
            TierSpec::Static(tier) if config.tier(tier).is_none() => push(
                d,
                format!(
                    "tier {tier:?} is not configured (configured tiers: {})",
                    names(config.tiers())
                ),
            ),
            TierSpec::Default
                if spec.limit.is_none()
                    && config.default_limit().is_none()
                    && config.default_tier().is_none() =>
            {
                push(
                    d,
                    "uses the module's default limit, but none is configured (set \
                     `default_limit` or `default_tier`, or give the fn a `limit`)"
                        .to_owned(),
                )
            }
            _ => {
                if let Some(limit) = spec.limit {
                    let window = spec.window.unwrap_or(config.default_window());
                    if let Err(e) = config
                        .quota(limit, window, spec.burst, spec.strategy)
                        .validate()
                    {
                        push(d, format!("its limit cannot be enforced: {e}"));
                    }
                }
            }
        }
        if let Some(other) = declarations[..i]
            .iter()
            .find(|o| o.budget() == d.budget() && o.spec.shape() != spec.shape())
        {
            push(
                d,
                format!(
                    "shares the budget {:?} with `{}` ({}:{}) but with different settings \
                     ({} vs {})",
                    d.budget(),
                    other.function(),
                    other.file,
                    other.line,
                    spec,
                    other.spec
                ),
            );
        }
    }
    if errors.problems.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The installed module: its id (so an old handle never removes a newer module) and service.
static CURRENT: RwLock<Option<(u64, RateLimitService)>> = RwLock::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Bumped (under `CURRENT`'s write lock) every time a module is installed or removed.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// What this thread knows: a [`testing`](crate::testing) scope's service, and its copy of
/// `CURRENT`, valid while `GENERATION` has not moved. One thread-local, so the hot path makes
/// one thread-local access and reads one shared atomic, and takes no lock.
struct Local {
    scoped: Option<RateLimitService>,
    generation: u64,
    cached: Option<RateLimitService>,
}

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local { scoped: None, generation: u64::MAX, cached: None })
    };
}

/// The service annotated fns use: the innermost [`testing`](crate::testing) scope's on this
/// task, else the running [`Module`]'s, else none.
#[inline]
pub(crate) fn current() -> Option<RateLimitService> {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if let Some(scoped) = &local.scoped {
            return Some(scoped.clone());
        }
        let generation = GENERATION.load(Ordering::Acquire);
        if local.generation != generation {
            // Read under the lock: what we cache is at least as new as `generation`, so a
            // stale copy is always one whose generation no longer matches.
            local.cached = CURRENT.read().as_ref().map(|(_, s)| s.clone());
            local.generation = generation;
        }
        local.cached.clone()
    })
}

/// Sets this thread's testing scope, returning the previous one.
pub(crate) fn replace_scoped(service: Option<RateLimitService>) -> Option<RateLimitService> {
    LOCAL.with(|local| std::mem::replace(&mut local.borrow_mut().scoped, service))
}

/// Replaces the installed module (under the write lock) and moves the generation on, so that
/// every thread's cached copy is refreshed on its next call.
fn set_current(
    current: &mut Option<(u64, RateLimitService)>,
    new: Option<(u64, RateLimitService)>,
) {
    *current = new;
    GENERATION.fetch_add(1, Ordering::Release);
}

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
    pub fn init(self) -> Result<Module, Error> {
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        Module::install(self.config.build()?, clock)
    }

    /// Builds and checks like [`init`](Self::init), without installing anything.
    pub(crate) fn build_checked(self) -> Result<RateLimitService, Error> {
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let config = self.config.build()?;
        check_declarations(&config, &declarations()).map_err(Error::Declarations)?;
        RateLimitService::with_clock(config, clock)
    }
}

/// The running rate-limit module: the process-wide service behind every annotated fn.
///
/// Only one runs at a time. Dropping the handle (or [`shutdown`](Self::shutdown)) uninstalls
/// it: annotated fns are then refused with [`Error::NotInitialized`] until the next `init`.
#[must_use = "dropping the module shuts it down"]
pub struct Module {
    id: u64,
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
        Self::install(config, Arc::new(SystemClock))
    }

    fn install(config: Config, clock: Arc<dyn Clock>) -> Result<Module, Error> {
        let mut current = CURRENT.write();
        if current.is_some() {
            return Err(Error::AlreadyInitialized);
        }
        check_declarations(&config, &declarations()).map_err(Error::Declarations)?;
        let service = RateLimitService::with_clock(config, clock)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        set_current(&mut current, Some((id, service.clone())));
        Ok(Module { id, service })
    }

    /// Whether a module is running.
    pub fn is_initialized() -> bool {
        CURRENT.read().is_some()
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
    /// on any thread, is refused with [`Error::NotInitialized`].
    ///
    /// Each thread that called an annotated fn keeps a handle to the service it used until its
    /// next annotated call (which sees the shutdown) or its exit, so the store's memory is
    /// released then rather than at once.
    pub fn shutdown(self) {}
}

impl Drop for Module {
    fn drop(&mut self) {
        let mut current = CURRENT.write();
        if current.as_ref().is_some_and(|(id, _)| *id == self.id) {
            set_current(&mut current, None);
        }
    }
}

/// Builds the store key of a keyed call: the budget, then the caller's key, so two fns never
/// share a key by accident.
#[doc(hidden)]
pub fn key(declaration: &'static Declaration, key: &dyn fmt::Display) -> String {
    let budget = declaration.budget();
    let mut out = String::with_capacity(budget.len() + 24);
    out.push_str(budget);
    out.push('#');
    let _ = write!(out, "{key}");
    out
}

/// The check every annotated fn runs before its body: `Ok` to proceed; `Err` is the refusal
/// (over the limit, no module, unknown tier, store failure...).
#[doc(hidden)]
pub async fn acquire(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    let Some(service) = current() else {
        return Err(Error::NotInitialized {
            function: declaration.function(),
        });
    };
    let mut options = declaration.spec.options();
    if tier.is_some() {
        options.tier = tier;
    }
    options.cost = cost;
    options.budget = Some(declaration.budget());
    let key = key.unwrap_or(options.budget.unwrap_or_default());
    service.enforce(key, &options).await.map(drop)
}

/// What an annotated fn's return type must be able to do: carry a refusal. Implemented for
/// `Result<T, E>` where `E: From<Error>`.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a rate-limited fn must return `Result<_, E>` where `E: From<ratelimit::Error>`, not `{Self}`",
    label = "this return type cannot carry a rate-limit refusal",
    note = "return `Result<T, ratelimit::Error>`, or `Result<T, E>` with `impl From<ratelimit::Error> for E`"
)]
pub trait Refusal {
    /// The refusal as this type.
    fn refusal(error: Error) -> Self;
}

impl<T, E: From<Error>> Refusal for Result<T, E> {
    fn refusal(error: Error) -> Self {
        Err(E::from(error))
    }
}

/// Converts a refusal into the annotated fn's return type.
#[doc(hidden)]
pub fn refuse<R: Refusal>(error: Error) -> R {
    R::refusal(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_like_the_attribute() {
        let cases = [
            (Spec::new(), "module default, one budget"),
            (
                Spec::new()
                    .with_limit(10)
                    .with_window_nanos(60_000_000_000)
                    .with_key(),
                "10 per 1m, per key",
            ),
            (
                Spec::new().with_static_tier("pro").with_fixed_cost(3),
                "tier \"pro\", one budget, cost 3",
            ),
            (
                Spec::new()
                    .with_dynamic_tier()
                    .with_strategy(Strategy::TokenBucket)
                    .with_burst(2)
                    .with_dynamic_cost(),
                "tier chosen per call, burst 2, token-bucket, one budget, cost per call",
            ),
            (
                Spec::new().with_limit(5).with_static_tier("free"),
                "5 per default window, tier \"free\", one budget",
            ),
        ];
        for (spec, text) in cases {
            assert_eq!(spec.to_string(), text);
        }
    }
}
