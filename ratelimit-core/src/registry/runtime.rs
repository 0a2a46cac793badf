//! The process-wide slot the macros' generated code reads on every call, and the entry
//! point it calls. No lock on the hot path: one thread-local and one shared atomic.

use std::cell::RefCell;

use super::declaration::Declaration;
use super::key_text::KeyText;
use super::limiter::Limiter;
use super::spec::TierSpec;
use crate::error::Error;
use crate::service::{Call, RateLimitService, Site, SiteOutcome};

/// The application's limiter: the one [`Module::init`](super::Module::init) builds, deciding
/// every annotated fn that names no `limiter`.
pub(super) static APP: Limiter = Limiter::new();

/// What this thread knows: a [`testing`](crate::testing) scope's service, its copy of
/// [`APP`] (valid while `APP`'s generation has not moved), the call sites it decided at, and
/// the buffer their store keys are composed in. One thread-local, so the hot path makes one
/// thread-local access and reads one shared atomic, and takes no lock.
struct Local {
    scoped: Option<RateLimitService>,
    generation: u64,
    cached: Option<RateLimitService>,
    /// The last [`SITES`] call sites decided here, replaced in turn (`next`).
    sites: [Option<SiteEntry>; SITES],
    next: usize,
    buffer: Vec<u8>,
}

/// A call site: its declaration (a `'static` address, so never reused by another), the id of
/// the service that resolved it (ids are never reused either), and the resolution (`None`:
/// that service does not decide the fn's calls at once; they take the general path).
type SiteEntry = (&'static Declaration, u64, Option<Site>);

/// Call sites a thread keeps resolved.
const SITES: usize = 8;

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local {
            scoped: None,
            generation: u64::MAX,
            cached: None,
            sites: [None, None, None, None, None, None, None, None],
            next: 0,
            buffer: Vec::new(),
        })
    };
}

/// The service the application's annotated fns use: the innermost
/// [`testing`](crate::testing) scope's on this task, else the running [`Module`]'s, else
/// none.
///
/// [`Module`]: super::Module
#[inline]
pub(crate) fn current() -> Option<RateLimitService> {
    match with_current(|_| None::<()>) {
        Now::Later(service) => Some(service),
        Now::Done(()) | Now::None => None,
    }
}

/// What [`with_current`] did.
pub(crate) enum Now<T> {
    /// `f` answered on the current service.
    Done(T),
    /// `f` could not answer at once: the current service, to wait on.
    Later(RateLimitService),
    /// No service is installed.
    None,
}

/// Runs `f` on the current service (see [`current`]) without taking a handle to it: a
/// handle is an `Arc` clone and drop, an atomic add on a line every thread shares. Only when
/// `f` cannot answer (`None`: a store that must be awaited) is the service cloned.
#[inline]
pub(crate) fn with_current<T>(f: impl FnOnce(&RateLimitService) -> Option<T>) -> Now<T> {
    LOCAL.with(|local| {
        let generation = APP.generation();
        // Held mutably only by `at_site`, around a decision on the memory store: a clock of
        // the user's own that calls an annotated fn gets here. It decides on what `APP`
        // holds, as the call below does for a call made from inside a decision.
        let stale = local
            .try_borrow()
            .map_or(true, |l| l.generation != generation);
        if stale {
            // Read under the lock: what we cache is at least as new as `generation`, so a
            // stale copy is always one whose generation no longer matches.
            let fresh = APP.service();
            match local.try_borrow_mut() {
                Ok(mut local) => {
                    local.cached = fresh;
                    local.generation = generation;
                }
                // A call made while this thread is inside a decision (from a tracing
                // subscriber, say) uses what it just read, and leaves the cache alone.
                Err(_) if local.try_borrow().map_or(true, |l| l.scoped.is_none()) => {
                    return match fresh {
                        Some(service) => match f(&service) {
                            Some(done) => Now::Done(done),
                            None => Now::Later(service),
                        },
                        None => Now::None,
                    };
                }
                Err(_) => {}
            }
        }
        let local = local.borrow();
        let Some(service) = local.scoped.as_ref().or(local.cached.as_ref()) else {
            return Now::None;
        };
        match f(service) {
            Some(done) => Now::Done(done),
            None => Now::Later(service.clone()),
        }
    })
}

/// Decides a call of an application's fn (no library limiter, no tier chosen per call) at its
/// call site, resolved once per thread and service (see [`Site`]): `None` when the general
/// path decides it (no service, another store, the queue, a key it must encode or refuse).
#[inline]
fn at_site(
    declaration: &'static Declaration,
    key: Option<&KeyText>,
    cost: u64,
) -> Option<Result<(), Error>> {
    // A refusal's decision is handed out through `refused`, not returned: the closure's
    // result stays two words, so the admitted path does not move a `Decision`-sized value
    // out of it (a move the profile showed stalling on store forwarding: BENCHMARKS.md,
    // `hot_path`).
    let mut refused = None;
    LOCAL.with(|local| {
        let generation = APP.generation();
        // Borrowed already: a call from inside a decision takes the general path.
        let mut local = local.try_borrow_mut().ok()?;
        let Local {
            scoped,
            generation: seen,
            cached,
            sites,
            next,
            buffer,
        } = &mut *local;
        if *seen != generation {
            *cached = APP.service();
            *seen = generation;
            *sites = Default::default();
        }
        let service = scoped.as_ref().or(cached.as_ref())?;
        let id = service.id();
        let found = sites.iter().position(
            |entry| matches!(entry, Some((d, i, _)) if std::ptr::eq(*d, declaration) && *i == id),
        );
        let at = match found {
            Some(at) => at,
            None => {
                let site = service.site(&call(declaration, None, cost));
                let at = *next;
                sites[at] = Some((declaration, id, site));
                *next = (at + 1) % SITES;
                at
            }
        };
        let Some((_, _, Some(site))) = &sites[at] else {
            return None;
        };
        match service.enforce_site(site, key.map(KeyText::as_bytes), cost, buffer) {
            SiteOutcome::Admitted(..) | SiteOutcome::Answered(_) => Some(()),
            SiteOutcome::Decided(result, tier) => {
                refused = Some((service.clone(), result, tier));
                Some(())
            }
            SiteOutcome::General | SiteOutcome::Await => None,
        }
    })?;
    // A refusal is finished (counted, logged) with the thread's state released: what it runs
    // (a tracing subscriber) may call annotated fns.
    Some(match refused {
        None => Ok(()),
        Some((service, result, tier)) => {
            let key = key.map(|k| &**k);
            service.finish_site((result, tier), key, &call(declaration, None, cost))
        }
    })
}

/// The service that decides `declaration`'s calls: its library's [`Limiter`]'s, else the
/// application's (see [`current`]).
#[inline]
fn service_for(declaration: &'static Declaration) -> Result<RateLimitService, Error> {
    let service = match declaration.limiter() {
        None => current(),
        Some(limiter) => limiter.service(),
    };
    service.ok_or(Error::NotInitialized {
        function: declaration.function(),
    })
}

/// The service of a fn's stacked limits: they are decided as one, by one limiter (the macros
/// make sure they name one); a limit on another is refused, never decided by the wrong one.
fn service_for_all(limits: &[Limit<'_>]) -> Result<RateLimitService, Error> {
    let Some(&(first, ..)) = limits.first() else {
        return Err(Error::NotInitialized { function: "?" });
    };
    if let Some(&(other, ..)) = limits
        .iter()
        .find(|l| !std::ptr::eq(l.0.owner(), first.owner()))
    {
        return Err(Error::NotInitialized {
            function: other.function(),
        });
    }
    service_for(first)
}

/// Sets this thread's testing scope, returning the previous one.
pub(crate) fn replace_scoped(service: Option<RateLimitService>) -> Option<RateLimitService> {
    LOCAL.with(|local| std::mem::replace(&mut local.borrow_mut().scoped, service))
}

/// One limit of a call: the declaration, the user key, the tier chosen for this call, the cost.
type Limit<'a> = (&'static Declaration, Option<&'a str>, Option<&'a str>, u64);

/// What an annotated async fn tries before [`acquire`]: the decision at its call site (see
/// `at_site`), made without building `acquire`'s future; `None` when it must be awaited.
#[doc(hidden)]
#[inline]
pub fn acquire_here(
    declaration: &'static Declaration,
    key: Option<&KeyText>,
    tier: Option<&str>,
    cost: u64,
) -> Option<Result<(), Error>> {
    if tier.is_some() || declaration.limiter().is_some() {
        return None;
    }
    at_site(declaration, key, cost)
}

/// The check every annotated async fn runs before its body: `Ok` to proceed; `Err` is the
/// refusal (over the limit, no module, unknown tier, store failure...). A decision the store
/// makes at once (the memory store; a Redis store's leased budget or a refusal it holds) is
/// made on the thread's copy of the service, without a handle to it and without a future.
#[doc(hidden)]
pub async fn acquire(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    let options = call(declaration, tier, cost);
    let service = match declaration.limiter() {
        // A library's own limiter: its service, never the application's.
        Some(_) => service_for(declaration)?,
        None => match with_current(|service| service.enforce_now(key, &options)) {
            Now::Done(decided) => return decided,
            Now::Later(service) => service,
            Now::None => {
                return Err(Error::NotInitialized {
                    function: declaration.function(),
                })
            }
        },
    };
    // Boxed: the waiting path's futures are large, and this future is part of every
    // annotated fn's, moved whole wherever it goes (see `RateLimitService::check`'s).
    match Box::pin(service.enforce_parts(key, &options)).await {
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
pub async fn acquire_all(limits: &[Limit<'_>]) -> Result<(), Error> {
    let service = service_for_all(limits)?;
    service.enforce_stacked(&all_parts(limits)).await.map(drop)
}

/// [`acquire`] for a sync fn: decided at once by the memory store, without an executor. Any
/// other store must be waited for, so the call is refused with [`Error::SyncOnWaitingStore`]
/// (and `init` does not start with such a fn: see
/// [`ProblemKind::SyncOnWaitingStore`](crate::ProblemKind::SyncOnWaitingStore)).
#[doc(hidden)]
pub fn acquire_now(
    declaration: &'static Declaration,
    key: Option<&KeyText>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    if let Some(decided) = acquire_here(declaration, key, tier, cost) {
        return decided;
    }
    let key = key.map(|k| &**k);
    let service = service_for(declaration)?;
    let options = call(declaration, tier, cost);
    service
        .enforce_parts_now(key, &options, declaration.function())
        .map(drop)
}

/// [`acquire_all`] for a sync fn; see [`acquire_now`].
#[doc(hidden)]
pub fn acquire_all_now(limits: &[Limit<'_>]) -> Result<(), Error> {
    let service = service_for_all(limits)?;
    let function = limits[0].0.function();
    service
        .enforce_stacked_now(&all_parts(limits), function)
        .map(drop)
}

/// The stacked limits of one call, each with its user key.
fn all_parts<'a>(limits: &[Limit<'a>]) -> Vec<(Option<&'a str>, Call<'a>)> {
    limits
        .iter()
        .map(|&(declaration, key, tier, cost)| (key, call(declaration, tier, cost)))
        .collect()
}

/// One call of an annotated fn: its spec, the tier chosen for this call (or its static one),
/// its cost, its budget. Borrowed: a tier chosen per call is never copied.
fn call<'a>(declaration: &'static Declaration, tier: Option<&'a str>, cost: u64) -> Call<'a> {
    Call {
        tier: match (tier, declaration.spec().tier()) {
            (Some(tier), _) => Some(tier),
            (None, TierSpec::Static(tier)) => Some(tier),
            (None, _) => None,
        },
        budget: Some(declaration.budget()),
        overrides: declaration.spec().overrides(),
        cost,
        consume: true,
        queue: declaration.spec().queue(),
    }
}

/// What an annotated fn's return type must be: a `Result`, whatever it is called (an alias
/// or a re-export is one too, so the macro need not see the name). Its error type must then be
/// a [`RefusalError`]: two traits, so that each failure says which part is missing.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a rate-limited fn must return `Result<_, E>` where `E: From<ratelimit::Error>`, not `{Self}`",
    label = "this return type cannot carry a rate-limit refusal",
    note = "return `Result<T, ratelimit::Error>`, or `Result<T, E>` with `impl From<ratelimit::Error> for E`",
    note = "in an `impl` block with a limit, mark a method `#[skip_throttle]` to exempt it"
)]
pub trait Refusal {
    /// The error type of the `Result`.
    type Error;
    /// `Err(error)`.
    fn refusal(error: Self::Error) -> Self;

    /// The refusal as this type.
    fn refused(error: Error) -> Self
    where
        Self: Sized,
        Self::Error: RefusalError,
    {
        Self::refusal(Self::Error::from_refusal(error))
    }
}

impl<T, E> Refusal for Result<T, E> {
    type Error = E;
    fn refusal(error: E) -> Self {
        Err(error)
    }
}

/// An error type a refusal can travel as. The bound is asked of the error type itself, so the
/// compiler reports this message rather than a bare `From` (`io::Error`, `fmt::Error`, ...).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a rate-limited fn's error type must have `From<ratelimit::Error>`; `{Self}` has not",
    label = "this return type's error cannot carry a rate-limit refusal",
    note = "return `Result<T, ratelimit::Error>`, or `Result<T, E>` with an error type of your own that has `impl From<ratelimit::Error> for E`",
    note = "in an `impl` block with a limit, mark a method `#[skip_throttle]` to exempt it"
)]
pub trait RefusalError {
    /// The refusal as this error type.
    fn from_refusal(error: Error) -> Self;
}

impl<E: From<Error>> RefusalError for E {
    fn from_refusal(error: Error) -> Self {
        E::from(error)
    }
}

/// Converts a refusal into the annotated fn's return type (one whose type the expansion cannot
/// write: `impl Trait`).
#[doc(hidden)]
pub fn refuse<R>(error: Error) -> R
where
    R: Refusal,
    R::Error: RefusalError,
{
    R::refused(error)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::registry::Spec;
    use crate::store::MemoryStore;
    use crate::{Config, ManualClock};

    static SYNC: Declaration =
        Declaration::new("app::sync", None, "app.rs", 1, Spec::new().with_limit(1)).with_sync();
    static SYNC_2: Declaration =
        Declaration::new("app::sync#2", None, "app.rs", 1, Spec::new().with_limit(1)).with_sync();
    static OTHER: Limiter = Limiter::new();
    static ELSEWHERE: Declaration =
        Declaration::new("lib::other", None, "lib.rs", 1, Spec::new().with_limit(1))
            .with_limiter(&OTHER)
            .with_sync();

    /// Runs `f` with `service` as this thread's scope.
    fn scoped<R>(service: RateLimitService, f: impl FnOnce() -> R) -> R {
        let previous = replace_scoped(Some(service));
        let result = f();
        replace_scoped(previous);
        result
    }

    fn service(store: Option<MemoryStore>) -> RateLimitService {
        let clock = Arc::new(ManualClock::new(std::time::Duration::from_secs(1_000_000)));
        match store {
            None => RateLimitService::with_clock(Config::default(), clock),
            Some(store) => RateLimitService::with_store(Config::default(), store, clock),
        }
        .unwrap()
    }

    #[test]
    fn a_sync_fn_on_a_store_that_must_be_waited_for_is_refused() {
        // Any store given to `with_store` is awaited (even a memory store): never blocked on.
        let waiting = service(Some(MemoryStore::new()));
        let limits = [(&SYNC, None, None, 1), (&SYNC_2, None, None, 1)];
        let refusals = scoped(waiting.clone(), || {
            [acquire_now(&SYNC, None, None, 1), acquire_all_now(&limits)]
        });
        for refusal in refusals {
            assert!(
                matches!(
                    refusal,
                    Err(Error::SyncOnWaitingStore {
                        function: "app::sync"
                    })
                ),
                "{refusal:?}"
            );
        }
        // Counted as errors, not as admitted calls.
        assert_eq!(waiting.stats().total.errors, 2);
        assert_eq!(waiting.stats().total.allowed, 0);

        // The service's own memory store decides at once.
        let memory = service(None);
        scoped(memory.clone(), || {
            assert!(acquire_now(&SYNC, None, None, 1).is_ok());
            assert!(matches!(
                acquire_now(&SYNC, None, None, 1),
                Err(Error::Exceeded(_))
            ));
        });
    }

    /// A call site is kept per thread and service: another service resolves it again and
    /// decides on its own state; back on the first, its state and counters are where they
    /// were.
    #[test]
    fn a_call_site_is_resolved_again_for_another_service() {
        let exceeded = |r: Result<(), Error>| matches!(r, Err(Error::Exceeded(_)));
        let text = |key: &str| {
            let mut text = KeyText::new();
            let _ = std::fmt::Write::write_str(&mut text, key);
            text
        };
        let (k, other) = (text("k"), text("other"));
        let first = service(None);
        scoped(first.clone(), || {
            assert!(acquire_now(&SYNC, Some(&k), None, 1).is_ok());
            assert!(exceeded(acquire_now(&SYNC, Some(&k), None, 1)));
        });
        let second = service(None);
        scoped(second.clone(), || {
            assert!(acquire_now(&SYNC, Some(&k), None, 1).is_ok());
        });
        scoped(first.clone(), || {
            assert!(exceeded(acquire_now(&SYNC, Some(&k), None, 1)));
            assert!(acquire_now(&SYNC, Some(&other), None, 1).is_ok());
        });
        let counts = first.stats().by_method["app::sync"];
        assert_eq!((counts.allowed, counts.denied), (2, 2));
        assert_eq!(second.stats().by_method["app::sync"].allowed, 1);
    }

    #[test]
    fn a_library_fn_is_never_decided_by_the_applications_service() {
        // A testing scope stands in for the application's module, never for a library's
        // limiter: not built, the library's fn is refused. Stacked with an application fn
        // (the macros never emit it), it is refused too, rather than decided by the
        // application's service.
        let limits = [(&SYNC, None, None, 1), (&ELSEWHERE, None, None, 1)];
        let refusals = scoped(service(None), || {
            [
                acquire_now(&ELSEWHERE, None, None, 1),
                acquire_all_now(&limits),
            ]
        });
        for refusal in refusals {
            assert!(
                matches!(
                    refusal,
                    Err(Error::NotInitialized {
                        function: "lib::other"
                    })
                ),
                "{refusal:?}"
            );
        }
    }
}
