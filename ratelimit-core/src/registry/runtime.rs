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
        let generation = GENERATION.load(Ordering::Acquire);
        if local.borrow().generation != generation {
            // Read under the lock: what we cache is at least as new as `generation`, so a
            // stale copy is always one whose generation no longer matches.
            let fresh = CURRENT.read().as_ref().map(|(_, s)| s.clone());
            match local.try_borrow_mut() {
                Ok(mut local) => {
                    local.cached = fresh;
                    local.generation = generation;
                }
                // A call made while this thread is inside a decision (from a tracing
                // subscriber, say) uses what it just read, and leaves the cache alone.
                Err(_) if local.borrow().scoped.is_none() => {
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

/// The user key of a keyed call, as text: up to [`KeyText::INLINE`] bytes in place, so a
/// call with a short key (an id, an address) allocates nothing. The budget is a part of the
/// store key of its own (see `key.rs`), so it is not repeated here.
#[doc(hidden)]
pub fn key(declaration: &'static Declaration, key: &dyn fmt::Display) -> KeyText {
    let _ = declaration;
    let mut out = KeyText::Inline {
        len: 0,
        bytes: [0; KeyText::INLINE],
    };
    // `KeyText`'s `write_str` never fails; a `Display` that does leaves what it wrote, which
    // the store refuses if empty.
    let _ = write!(out, "{key}");
    out
}

/// A keyed call's user key as text (see [`key`]); derefs to `str`.
#[doc(hidden)]
pub enum KeyText {
    /// A short key, in place: `bytes[..len]`, whole `str`s appended one after another.
    Inline {
        len: u8,
        bytes: [u8; KeyText::INLINE],
    },
    /// A key longer than [`KeyText::INLINE`] bytes.
    Heap(String),
}

impl KeyText {
    /// The longest key kept in place.
    pub const INLINE: usize = 46;
}

impl fmt::Write for KeyText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match self {
            KeyText::Inline { len, bytes } => {
                let at = usize::from(*len);
                match bytes.get_mut(at..at + s.len()) {
                    Some(room) => {
                        room.copy_from_slice(s.as_bytes());
                        *len += s.len() as u8;
                    }
                    None => {
                        let mut heap = String::with_capacity(at + s.len());
                        heap.push_str(self);
                        heap.push_str(s);
                        *self = KeyText::Heap(heap);
                    }
                }
            }
            KeyText::Heap(heap) => heap.push_str(s),
        }
        Ok(())
    }
}

impl std::ops::Deref for KeyText {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        match self {
            // Only whole `str`s are copied in, so the bytes are UTF-8; were they not, the
            // empty key that stands for them is refused by the store, never admitted.
            KeyText::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            KeyText::Heap(heap) => heap,
        }
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are user data: never printed.
        f.write_str("KeyText(..)")
    }
}

/// The check every annotated fn runs before its body: `Ok` to proceed; `Err` is the refusal
/// (over the limit, no module, unknown tier, store failure...). With the memory store the
/// decision is made on the thread's copy of the service, without a handle to it.
#[doc(hidden)]
pub async fn acquire(
    declaration: &'static Declaration,
    key: Option<&str>,
    tier: Option<&str>,
    cost: u64,
) -> Result<(), Error> {
    let options = options(declaration, tier, cost);
    let service = match with_current(|service| service.enforce_now(key, &options)) {
        Now::Done(decided) => return decided,
        Now::Later(service) => service,
        Now::None => {
            return Err(Error::NotInitialized {
                function: declaration.function(),
            })
        }
    };
    service.enforce_parts(key, &options).await.map(drop)
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
