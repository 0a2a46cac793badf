//! Running annotated fns in tests: a module of their own, on a [`ManualClock`], isolated per
//! test.
//!
//! Tests run on parallel threads of one process, so one test's global [`Module`] would be
//! every test's. A [`TestModule`] is never installed globally: [`TestModule::scope`] wraps a
//! future so that, while it is polled, annotated fns called from it use this module (like a
//! task-local). Other tests, and code outside the scope, do not see it; tasks *spawned* from
//! inside the scope do not inherit it either (wrap them with `scope` too).
//!
//! ```
//! use ratelimit_core::testing::TestModule;
//! use ratelimit_core::{Module, Options};
//! use std::time::Duration;
//!
//! # futures::executor::block_on(async {
//! let module = TestModule::new(Module::builder().default_limit(2).default_window("1m"))?;
//! module.scope(async {
//!     // Annotated fns called here are limited by `module`.
//! }).await;
//! let service = module.service();
//! assert!(service.consume("k", &Options::new()).await?.allowed);
//! module.clock().advance(Duration::from_secs(60));
//! # Ok::<(), ratelimit_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! [`Module`]: crate::Module

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::ManualClock;
use crate::error::Error;
use crate::registry::{replace_scoped, ModuleBuilder};
use crate::service::RateLimitService;
use crate::stats::Stats;

/// Where a [`TestModule`]'s clock starts: a fixed, round instant (one million seconds after
/// the epoch), so windows line up the same way in every run.
pub const START: Duration = Duration::from_secs(1_000_000);

/// A clock that follows Tokio's time: [`START`] plus the time elapsed on
/// [`tokio::time::Instant`] since the clock was made. Under Tokio's paused time
/// (`#[tokio::test(start_paused = true)]`) that is the paused clock, which Tokio moves on by
/// itself when every task is asleep, to the next timer: so a service on this clock decides
/// at exactly the time its waiters' timers fire, and a test of the queue neither sleeps nor
/// advances two clocks by hand.
///
/// Make it inside the runtime (Tokio's clock is per runtime). Read from a thread outside
/// any runtime (the memory store's sweeper) it follows the real time since it was made,
/// which only makes the sweeper late.
///
/// ```
/// use ratelimit_core::testing::{TokioClock, START};
/// use ratelimit_core::Clock;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let clock = TokioClock::new();
/// tokio::time::sleep(Duration::from_secs(90)).await; // instant under paused time
/// assert_eq!(clock.now(), (START + Duration::from_secs(90)).as_nanos() as u64);
/// # });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock standing at [`START`] now.
    pub fn new() -> Self {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl crate::Clock for TokioClock {
    fn now(&self) -> crate::Nanos {
        (START + self.start.elapsed()).as_nanos() as crate::Nanos
    }
}

/// A module for one test: its own service and [`ManualClock`], used by annotated fns only
/// inside [`scope`](Self::scope).
///
/// Built like a [`Module`](crate::Module), and checked the same way: every declaration in the
/// test binary must be enforceable under its configuration.
#[derive(Debug, Clone)]
pub struct TestModule {
    service: RateLimitService,
    clock: ManualClock,
}

impl TestModule {
    /// Builds the module on a [`ManualClock`] standing at [`START`] (the builder's own clock,
    /// if it set one, is replaced).
    pub fn new(builder: ModuleBuilder) -> Result<TestModule, Error> {
        let clock = ManualClock::new(START);
        let service = builder.clock(clock.clone()).build_checked()?;
        Ok(TestModule { service, clock })
    }

    /// The clock: advance it to move the module's time.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The service.
    pub fn service(&self) -> &RateLimitService {
        &self.service
    }

    /// The counters, per fn in `by_method`.
    pub fn stats(&self) -> Stats {
        self.service.stats()
    }

    /// Runs `f` on this thread with this module as the one the application's annotated fns
    /// use: the scope of sync fns, which have no future to wrap. Threads spawned by `f` do not
    /// inherit it (call `run` in each).
    ///
    /// ```
    /// use ratelimit_core::testing::TestModule;
    /// use ratelimit_core::Module;
    ///
    /// let module = TestModule::new(Module::builder().default_limit(2).default_window("1m"))?;
    /// let seen = module.run(|| ratelimit_core::Module::current_service().is_some());
    /// assert!(seen);
    /// assert!(ratelimit_core::Module::current_service().is_none());
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let _restore = Restore(replace_scoped(Some(self.service.clone())));
        f()
    }

    /// Runs `future` with this module as the one annotated fns use.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped {
            service: self.service.clone(),
            future: Box::pin(future),
        }
    }
}

/// A future run under a [`TestModule`]; see [`TestModule::scope`].
#[must_use = "futures do nothing unless polled"]
pub struct Scoped<F> {
    service: RateLimitService,
    future: Pin<Box<F>>,
}

impl<F> std::fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped").finish_non_exhaustive()
    }
}

/// Puts the previous scope back even if the inner future panics.
struct Restore(Option<RateLimitService>);

impl Drop for Restore {
    fn drop(&mut self) {
        replace_scoped(self.0.take());
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let service = self.service.clone();
        let _restore = Restore(replace_scoped(Some(service)));
        self.future.as_mut().poll(cx)
    }
}
