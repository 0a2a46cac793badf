//! [`Limiter`]: a slot for one running service, built once and read by annotated fns. The
//! application's [`Module`] is one (a private `static`); a library defines its own, so its
//! limits are configured and checked by the library, not by every application that links it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;
use crate::service::RateLimitService;
use crate::sync::RwLock;

/// The application's limiter: the one [`Module::init`](super::Module::init) builds, deciding
/// every annotated fn that names no `limiter`.
pub(super) static APP: Limiter = Limiter::new();

/// Ids of running limiters, unique in the process, so an old handle never removes a newer one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A limiter a library owns: annotated fns that name it with `limiter = path::TO_STATIC` are
/// decided by the service built here, under the library's own configuration (tiers, default
/// limit, store), and checked when it is built rather than by the application's
/// [`Module::init`](super::Module::init), which neither checks nor requires them.
///
/// Define it as a `static` and build it with [`init`](Self::init). Until it is built (and
/// after its handle is dropped), its fns are refused with [`Error::NotInitialized`]. Building
/// it while it runs is [`Error::AlreadyInitialized`], as for
/// [`Module::init`](super::Module::init): a library that builds it lazily keeps the handle in
/// a `OnceLock` of its own.
///
/// ```
/// use ratelimit_core::{Limiter, Module, Tier};
///
/// /// The library's limiter: its tiers are its own business.
/// pub static LIMITS: Limiter = Limiter::new();
///
/// // In the library: `#[rate_limit(tier = "pro", limiter = LIMITS)] async fn f() ...`
/// let running = LIMITS.init(Module::builder().tier(Tier::new("pro", 10).window("1s")))?;
/// assert!(LIMITS.is_initialized());
/// assert!(LIMITS.init(Module::builder()).is_err()); // already running
/// drop(running);
/// assert!(!LIMITS.is_initialized());
/// # Ok::<(), ratelimit_core::Error>(())
/// ```
pub struct Limiter {
    slot: RwLock<Option<(u64, RateLimitService)>>,
    /// Bumped (under `slot`'s write lock) every time a service is installed or removed, so
    /// threads that cache the slot know when to read it again.
    generation: AtomicU64,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new()
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("initialized", &self.is_initialized())
            .finish()
    }
}

impl Limiter {
    /// A limiter that is not built yet: its fns are refused until [`init`](Self::init).
    pub const fn new() -> Self {
        Limiter {
            slot: RwLock::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// Whether the limiter is built and running.
    pub fn is_initialized(&self) -> bool {
        self.slot.read().is_some()
    }

    /// The running service, if any.
    pub fn service(&self) -> Option<RateLimitService> {
        self.slot.read().as_ref().map(|(_, s)| s.clone())
    }

    /// Installs `service` unless one runs; returns its id.
    pub(super) fn install(
        &self,
        service: impl FnOnce() -> Result<RateLimitService, Error>,
    ) -> Result<(u64, RateLimitService), Error> {
        let mut slot = self.slot.write();
        if slot.is_some() {
            return Err(Error::AlreadyInitialized);
        }
        let service = service()?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        *slot = Some((id, service.clone()));
        self.generation.fetch_add(1, Ordering::Release);
        Ok((id, service))
    }

    /// Removes the service installed as `id`, if it is still the one running.
    pub(super) fn remove(&self, id: u64) {
        let mut slot = self.slot.write();
        if slot.as_ref().is_some_and(|(running, _)| *running == id) {
            *slot = None;
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// The running service with the [`generation`](Self::generation) it was installed at,
    /// read together.
    pub(super) fn running(&self) -> Option<(u64, RateLimitService)> {
        let slot = self.slot.read();
        let service = slot.as_ref().map(|(_, s)| s.clone())?;
        Some((self.generation.load(Ordering::Acquire), service))
    }

    /// What [`generation`](Self::generation) counts.
    #[inline]
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}
