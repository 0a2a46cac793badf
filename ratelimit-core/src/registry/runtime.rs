//! The process-wide slot the macros' generated code reads on every call, and the entry
//! point it calls. No lock on the hot path: one thread-local and one shared atomic.

use std::cell::RefCell;
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::declaration::Declaration;
use super::spec::TierSpec;
use crate::error::Error;
use crate::service::{Options, RateLimitService};

/// The installed module: its id (so an old handle never removes a newer module) and service.
pub(super) static CURRENT: RwLock<Option<(u64, RateLimitService)>> = RwLock::new(None);
pub(super) static NEXT_ID: AtomicU64 = AtomicU64::new(1);
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
pub(super) fn set_current(
    current: &mut Option<(u64, RateLimitService)>,
    new: Option<(u64, RateLimitService)>,
) {
    *current = new;
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The user key of a keyed call, as text. The budget is a part of the store key of its own
/// (see `key.rs`), so it is not repeated here.
#[doc(hidden)]
pub fn key(declaration: &'static Declaration, key: &dyn fmt::Display) -> String {
    let _ = declaration;
    let mut out = String::with_capacity(24);
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
    let options = options(declaration, tier, cost);
    match service.enforce_parts(key, &options).await {
        Ok(_) => Ok(()),
        // A wait ended by the module shutting down names the fn, like a call after it.
        Err(Error::NotInitialized { .. }) => Err(Error::NotInitialized {
            function: declaration.function(),
        }),
        Err(e) => Err(e),
    }
}

/// [`acquire`] for a fn with several limits (stacked attributes): one decision, all or
/// nothing.
#[doc(hidden)]
pub async fn acquire_all(
    limits: &[(&'static Declaration, Option<&str>, Option<&str>, u64)],
) -> Result<(), Error> {
    let Some(service) = current() else {
        return Err(Error::NotInitialized {
            function: limits.first().map_or("?", |l| l.0.function()),
        });
    };
    let options: Vec<Options<'_>> = limits
        .iter()
        .map(|&(declaration, _, tier, cost)| options(declaration, tier, cost))
        .collect();
    let parts: Vec<(Option<&str>, &Options<'_>)> = limits
        .iter()
        .zip(&options)
        .map(|(&(_, key, _, _), options)| (key, options))
        .collect();
    service.enforce_stacked(&parts).await.map(drop)
}

/// The options of one call of an annotated fn: its spec, the tier chosen for this call (or
/// its static one), its cost, its budget.
fn options<'a>(declaration: &'static Declaration, tier: Option<&'a str>, cost: u64) -> Options<'a> {
    let mut options = Options::new().cost(cost).budget(declaration.budget());
    options.overrides = *declaration.spec().overrides();
    options.queue = declaration.spec().queue();
    options.tier = match (tier, declaration.spec().tier()) {
        (Some(tier), _) => Some(tier),
        (None, TierSpec::Static(tier)) => Some(tier),
        (None, _) => None,
    };
    options
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
