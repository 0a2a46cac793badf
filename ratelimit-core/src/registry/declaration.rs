//! [`Declaration`]: one annotated fn, as the macros submit it to `inventory`.

use std::fmt;

use super::limiter::Limiter;
use super::runtime::APP;
use super::spec::Spec;

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
    pub fn limiter(&self) -> Option<&'static Limiter> {
        self.limiter
    }

    /// Whether the fn is sync (not `async`): it is decided without waiting, which only the
    /// memory store can do.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// The limiter that decides the fn: its own, else the application's.
    pub(super) fn owner(&self) -> &'static Limiter {
        match self.limiter {
            Some(limiter) => limiter,
            None => &APP,
        }
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
