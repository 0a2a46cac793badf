//! The entry points the macros' generated code calls, and the service they decide on: the fn's
//! call site prepared on its limiter's running service (held in its declaration), or a testing
//! scope's service on this thread. No lock and no handle taken on the hot path.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::declaration::{Declaration, Held};
use super::key_text::KeyText;
use super::limiter::APP;
use crate::error::Error;
use crate::service::{Begun, RateLimitService, Spent};

/// Threads with a [`testing`](crate::testing) scope: while there is none (always, outside
/// tests) a call does not look for one.
static SCOPES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's [`testing`](crate::testing) scope's service.
    static SCOPED: RefCell<Option<RateLimitService>> = const { RefCell::new(None) };
}

/// The service the application's annotated fns use: the innermost
/// [`testing`](crate::testing) scope's on this task, else the running [`Module`]'s, else
/// none.
///
/// [`Module`]: super::Module
pub(crate) fn current() -> Option<RateLimitService> {
    scoped().or_else(|| APP.service())
}

/// This thread's testing scope's service, if it has one.
#[inline]
fn scoped() -> Option<RateLimitService> {
    if SCOPES.load(Ordering::Acquire) == 0 {
        return None;
    }
    this_threads_scope()
}

#[inline(never)]
fn this_threads_scope() -> Option<RateLimitService> {
    SCOPED.with(|s| s.try_borrow().ok().and_then(|s| s.clone()))
}

/// Sets this thread's testing scope, returning the previous one.
pub(crate) fn replace_scoped(service: Option<RateLimitService>) -> Option<RateLimitService> {
    let is_some = service.is_some();
    let previous = SCOPED.with(|s| std::mem::replace(&mut *s.borrow_mut(), service));
    match (previous.is_some(), is_some) {
        (false, true) => drop(SCOPES.fetch_add(1, Ordering::AcqRel)),
        (true, false) => drop(SCOPES.fetch_sub(1, Ordering::AcqRel)),
        _ => {}
    }
    previous
}

/// How a call of `declaration` is decided.
enum Decider {
    /// On its call site prepared on this thread's testing scope's service (`Some`), else on
    /// its limiter's running service.
    Prepared(Option<RateLimitService>),
    /// On this service, with a site worked out for this call alone (a tier chosen per call).
    Service(RateLimitService),
}

/// The testing scope's service that decides `declaration`'s calls on this thread, if any: a
/// scope stands in for the application's module, never for a library's limiter.
#[inline]
fn scope_for(declaration: &'static Declaration) -> Option<RateLimitService> {
    match declaration.limiter() {
        None => scoped(),
        Some(_) => None,
    }
}

/// Who decides `declaration`'s call with a tier chosen per call (`tier`) or none.
#[inline]
fn decider(declaration: &'static Declaration, tier: Option<&str>) -> Result<Decider, Error> {
    let scope = scope_for(declaration);
    match tier {
        None => Ok(Decider::Prepared(scope)),
        Some(_) => match scope {
            Some(service) => Ok(Decider::Service(service)),
            None => service_for(declaration).map(Decider::Service),
        },
    }
}

/// The service that decides `declaration`'s calls: this thread's testing scope's (for an
/// application's fn), else its limiter's running one.
pub(super) fn service_for(declaration: &'static Declaration) -> Result<RateLimitService, Error> {
    let service = match declaration.limiter() {
        None => scoped().or_else(|| APP.service()),
        Some(limiter) => limiter.service(),
    };
    service.ok_or_else(|| not_initialized(declaration))
}

pub(super) fn not_initialized(declaration: &'static Declaration) -> Error {
    Error::NotInitialized {
        function: declaration.function(),
    }
}

/// A wait ended by the module shutting down names the fn, like a call after it.
fn named(declaration: &'static Declaration, result: Result<(), Error>) -> Result<(), Error> {
    result.map_err(|e| named_error(declaration, e))
}

fn named_error(declaration: &'static Declaration, error: Error) -> Error {
    match error {
        Error::NotInitialized { .. } => not_initialized(declaration),
        other => other,
    }
}

/// What [`acquire_here`] made of an annotated async fn's call. Two words, returned in
/// registers: a larger value (a `Result<(), Error>` is 48 bytes) went through memory, and the
/// fn's read of it, right after the stores that wrote it, stalled (BENCHMARKS.md,
/// `hot_path`). What is not the admitted call is boxed: a refusal allocates already, and a
/// call that awaits its store allocates its future.
#[doc(hidden)]
pub enum Here {
    /// Admitted at once: the body runs.
    Admitted,
    /// Decided at once otherwise: the refusal, or the error.
    Refused(Box<Error>),
    /// Not decided, nothing spent: [`acquire`] awaits it.
    Later(Later),
}

const _: () = assert!(std::mem::size_of::<Here>() <= 2 * std::mem::size_of::<usize>());

/// A call [`acquire_here`] could not decide at once, as far as it got, owning what
/// [`acquire`] needs to finish it: the fn's prepared site, when it asked the store on it, and
/// the store key it composed (so that `acquire` only awaits the store, on that key, neither
/// composing it again nor asking the store at once a second time); the site without a store
/// key for a call that may wait in the queue; no site when none is prepared (no running
/// service, or options that do not resolve: `acquire` tries again, then says which). With the
/// user key's text, copied from where the fn wrote it, and the cost.
#[doc(hidden)]
pub struct Later(Box<Waiting>);

struct Waiting {
    held: Option<Arc<Held>>,
    store_key: Option<String>,
    key: Option<KeyText>,
    cost: u64,
}

impl Later {
    #[cold]
    fn new(
        held: Option<Arc<Held>>,
        store_key: Option<String>,
        key: Option<&str>,
        cost: u64,
    ) -> Self {
        Later(Box::new(Waiting {
            held,
            store_key,
            key: key.map(KeyText::from),
            cost,
        }))
    }
}

/// What an annotated async fn with no tier chosen per call tries before [`acquire`]: the
/// decision made at once on its prepared call site (the memory store; a Redis store's leased
/// budget or a refusal it holds), without building `acquire`'s future; [`Here::Later`] when
/// it must be awaited. `key`: the user key's text where the fn wrote it ([`KeySlot`]).
///
/// [`KeySlot`]: super::KeySlot
#[doc(hidden)]
#[inline]
pub fn acquire_here(declaration: &'static Declaration, key: Option<&str>, cost: u64) -> Here {
    let scope = scope_for(declaration);
    let here = declaration.with_prepared(scope.as_ref(), move |held| {
        match held.prepared.enforce_now(key, cost) {
            Begun::Decided(Ok(())) => Here::Admitted,
            begun => Here::not_admitted(begun, held, key, cost),
        }
    });
    here.unwrap_or_else(|| Here::Later(Later::new(None, None, key, cost)))
}

impl Here {
    /// [`acquire_here`]'s answer for a call not admitted at once: out of the admitted call's
    /// way.
    #[cold]
    #[inline(never)]
    fn not_admitted(
        begun: Begun<Result<(), Box<Error>>>,
        held: &Arc<Held>,
        key: Option<&str>,
        cost: u64,
    ) -> Here {
        let later =
            |store_key| Here::Later(Later::new(Some(Arc::clone(held)), store_key, key, cost));
        match begun {
            Begun::Decided(Ok(())) => Here::Admitted,
            Begun::Decided(Err(e)) => Here::Refused(e),
            Begun::Later(store_key) => later(Some(store_key)),
            Begun::Waits => later(None),
        }
    }
}

/// The check every annotated async fn runs before its body when [`acquire_here`] could not
/// decide it: `Ok` to proceed; `Err` is the refusal (over the limit, no module, store
/// failure...).
///
/// A boxed future that owns what it needs (in [`Later`]): the fn's own future holds one
/// pointer across the wait, not this future's state and the key's text (a call decided at
/// once, on the memory store, never builds it; each move of the fn's future copies what it
/// holds).
#[doc(hidden)]
pub fn acquire(
    later: Later,
    declaration: &'static Declaration,
) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> {
    Box::pin(async move {
        let Waiting {
            held,
            store_key,
            key,
            cost,
        } = *later.0;
        let key = key.as_deref();
        match held {
            Some(held) => {
                let store_key = store_key.as_deref();
                let decided = held.prepared.enforce_later(key, cost, store_key).await;
                named(declaration, decided)
            }
            None => decide(declaration, key, None, cost).await,
        }
    })
}

/// [`acquire`] for an annotated async fn with a tier chosen per call (`tier = ..`): decided on
/// a site worked out for the call. A boxed future that owns the call's key (see `acquire`).
#[doc(hidden)]
pub fn acquire_tier<'a>(
    declaration: &'static Declaration,
    key: Option<KeyText>,
    tier: Option<&'a str>,
    cost: u64,
) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
    Box::pin(async move { decide(declaration, key.as_deref(), tier, cost).await })
}

/// Every step of an annotated async fn's call, with no site prepared for it yet: on its
/// prepared site (prepared now) when the call has no tier of its own, else on one worked out
/// for the call.
async fn decide(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    let service = match decider(declaration, tier)? {
        Decider::Service(service) => service,
        Decider::Prepared(scope) => match declaration.held(scope.as_ref()) {
            Some(held) => {
                let decided = held.prepared.enforce_later(key, cost, None).await;
                return named(declaration, decided);
            }
            // No service, or options that do not resolve: reported below.
            None => service_for(declaration)?,
        },
    };
    let call = declaration.call(tier, cost);
    let decided = service.enforce_call(&call, key).await;
    named(declaration, decided)
}

/// [`acquire`] for a sync fn: decided at once by a store that always decides at once (the
/// memory store), without an executor. Any other store must be waited for, so the call is
/// refused with [`Error::SyncOnWaitingStore`] (and `init` does not start with such a fn: see
/// [`ProblemKind::SyncOnWaitingStore`](crate::ProblemKind::SyncOnWaitingStore)).
///
/// One word, as [`acquire_here`]'s [`Here`] is two: the refusal or error boxed (a refusal
/// allocates already), so that the fn reads the answer from a register rather than a 48-byte
/// `Result<(), Error>` just written to memory (BENCHMARKS.md, `hot_path`).
#[doc(hidden)]
#[inline]
pub fn acquire_now(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Box<Error>> {
    // A tier chosen per call is decided on a site worked out for the call.
    if tier.is_none() {
        let scope = scope_for(declaration);
        let function = declaration.function();
        let decided = declaration.with_prepared(scope.as_ref(), |held| {
            held.prepared
                .enforce_sync(key, cost, function)
                .map_err(Box::new)
        });
        if let Some(decided) = decided {
            return decided;
        }
    }
    acquire_now_resolved(declaration, key, tier, cost).map_err(Box::new)
}

/// [`acquire_now`] of a call its prepared site does not decide: a tier chosen per call, or no
/// prepared site (no running service, or options that do not resolve: the service says which).
#[cold]
#[inline(never)]
fn acquire_now_resolved(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    let service = match decider(declaration, tier)? {
        Decider::Service(service) => service,
        Decider::Prepared(_) => service_for(declaration)?,
    };
    let function = declaration.function();
    service.enforce_call_sync(&declaration.call(tier, cost), key, function)
}

/// [`acquire`] for a fn that counts only some outcomes (`count = "err"` or `"ok"`): the call
/// spends before its body runs, as every annotated call does, and the spend is kept for
/// [`settle`] to give back after the body, when its outcome does not count. So N concurrent
/// calls never run the body more often than the limit allows.
#[doc(hidden)]
pub async fn acquire_spent(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<Spent, Error> {
    let service = match decider(declaration, tier)? {
        Decider::Service(service) => service,
        Decider::Prepared(scope) => match declaration.held(scope.as_ref()) {
            Some(held) => {
                let spent = Box::pin(held.prepared.spend_with(key, cost, true)).await;
                return spent.map_err(|e| named_error(declaration, e));
            }
            None => service_for(declaration)?,
        },
    };
    let call = declaration.call(tier, cost);
    let spent = Box::pin(service.enforce_call_spent(&call, key)).await;
    spent.map_err(|e| named_error(declaration, e))
}

/// [`acquire_spent`] for a sync fn: decided at once, as [`acquire_now`].
#[doc(hidden)]
pub fn acquire_spent_now(
    declaration: &'static Declaration,
    key: Option<&KeyText>,
    tier: Option<&str>,
    cost: u64,
) -> Result<Spent, Error> {
    let key = key.map(|k| &**k);
    let function = declaration.function();
    let decided = match decider(declaration, tier)? {
        Decider::Prepared(scope) => {
            let held = declaration.with_prepared(scope.as_ref(), |held| {
                held.prepared.spend_now(key, cost, true)
            });
            match held {
                Some(decided) => decided,
                None => {
                    let call = declaration.call(tier, cost);
                    service_for(declaration)?.enforce_call_spent_now(&call, key)
                }
            }
        }
        Decider::Service(service) => {
            service.enforce_call_spent_now(&declaration.call(tier, cost), key)
        }
    };
    decided.unwrap_or_else(|| Err(Error::SyncOnWaitingStore { function }))
}

/// After the body of a fn that counts only some outcomes: gives the spend (of one limit or
/// several) back when the outcome does not count (`counts` is false). A refund the store could
/// not make leaves the spend counted (logged): never an allowance.
#[doc(hidden)]
pub async fn settle<D>(spent: Spent<D>, counts: bool) {
    if !counts {
        logged(spent.refund().await);
    }
}

/// [`settle`] for a sync fn.
#[doc(hidden)]
pub fn settle_now<D>(mut spent: Spent<D>, counts: bool) {
    if !counts {
        logged(spent.refund_now().unwrap_or(Ok(false)));
    }
}

fn logged(refunded: Result<bool, Error>) {
    if let Err(error) = refunded {
        tracing::warn!(target: "ratelimit", %error, "could not give a spend back: it stays counted");
    }
}

/// Whether an annotated fn's outcome counts under `count = ..`: implemented for `Result`
/// under any name (an alias, a re-export), so anything else is a type error spanned on the
/// return type.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`count = ..` needs a fn returning `Result<_, _>`, not `{Self}`",
    label = "this return type has no success or failure to count by"
)]
pub trait Outcome {
    /// Whether the call failed.
    fn failed(&self) -> bool;
}

impl<T, E> Outcome for Result<T, E> {
    fn failed(&self) -> bool {
        self.is_err()
    }
}

/// `outcome`'s count under `count = "err"` (`errors`) or `count = "ok"`.
#[doc(hidden)]
pub fn counts<O: Outcome>(outcome: &O, errors: bool) -> bool {
    outcome.failed() == errors
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
    use crate::registry::{acquire_all_now, Limiter, Spec};
    use crate::store::{MemoryStore, Request, Stacked, Store};
    use crate::Decision;

    /// A store that always awaits: the memory store's decisions, never made at once.
    struct Waiting(MemoryStore);

    impl Store for Waiting {
        async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
            self.0.decide(request).await
        }
        async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
            self.0.decide_all(stacked).await
        }
        async fn reset(&self, key: &str) -> Result<bool, Error> {
            Store::reset(&self.0, key).await
        }
    }
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

    fn service(store: Option<Waiting>) -> RateLimitService {
        let clock = Arc::new(ManualClock::new(std::time::Duration::from_secs(1_000_000)));
        match store {
            None => RateLimitService::with_clock(Config::default(), clock),
            Some(store) => RateLimitService::with_store(Config::default(), store, clock),
        }
        .unwrap()
    }

    #[test]
    fn a_sync_fn_on_a_store_that_must_be_waited_for_is_refused() {
        // A store that does not always decide at once is never blocked on.
        let waiting = service(Some(Waiting(MemoryStore::new())));
        let limits = [(&SYNC, None, None, 1), (&SYNC_2, None, None, 1)];
        let refusals = scoped(waiting.clone(), || {
            [
                acquire_now(&SYNC, None, None, 1).map_err(|e| *e),
                acquire_all_now(&limits),
            ]
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
            assert!(acquire_now(&SYNC, None, None, 1).map_err(|e| *e).is_ok());
            assert!(matches!(
                acquire_now(&SYNC, None, None, 1).map_err(|e| *e),
                Err(Error::Exceeded(_))
            ));
        });
    }

    /// A call site is kept per thread and service: another service resolves it again and
    /// decides on its own state; back on the first, its state and counters are where they
    /// were.
    #[test]
    fn a_call_site_is_resolved_again_for_another_service() {
        let exceeded =
            |r: Result<(), Box<Error>>| matches!(r.map_err(|e| *e), Err(Error::Exceeded(_)));
        let (k, other) = ("k", "other");
        let first = service(None);
        scoped(first.clone(), || {
            assert!(acquire_now(&SYNC, Some(k), None, 1).is_ok());
            assert!(exceeded(acquire_now(&SYNC, Some(k), None, 1)));
        });
        let second = service(None);
        scoped(second.clone(), || {
            assert!(acquire_now(&SYNC, Some(k), None, 1).is_ok());
        });
        scoped(first.clone(), || {
            assert!(exceeded(acquire_now(&SYNC, Some(k), None, 1)));
            assert!(acquire_now(&SYNC, Some(other), None, 1).is_ok());
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
                acquire_now(&ELSEWHERE, None, None, 1).map_err(|e| *e),
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
