//! The per-call API: decisions, looks and resets whose futures own their [`Options`], so that
//! options built in the call's own expression, or kept anywhere, never have to outlive it.

use std::future::Future;

use super::site::AtSite;
use super::{Backend, Call, Options, RateLimitService};
use crate::decision::Decision;
use crate::error::Error;
use crate::key;

/// What a public decision does with its options.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `check`: spends or looks as `options.consume` says.
    AsAsked,
    /// `consume`.
    Spend,
    /// `enforce`: spends, and a refusal is an error.
    Enforce,
    /// `status`: looks, at cost 0.
    Look,
}

impl Mode {
    /// The call as this mode makes it.
    fn apply(self, call: Call<'_>) -> Call<'_> {
        match self {
            Mode::AsAsked => call,
            Mode::Spend | Mode::Enforce => Call {
                consume: true,
                ..call
            },
            Mode::Look => Call {
                consume: false,
                cost: 0,
                ..call
            },
        }
    }
}

impl RateLimitService {
    /// Decides a call with every option: spends if `options.consume`, else only looks (a
    /// cost of 0 looks at the level; see [`status`](Self::status)). A refusal is `Ok` with
    /// `allowed == false`; `Err` means no decision could be made, and the call must be
    /// refused too.
    ///
    /// The future borrows the service and `key`, not `options` (it keeps a clone of them, which
    /// copies literal names and shares run-time ones): options built in the call's own
    /// expression may be dropped before it is awaited. Nothing is decided before it is polled.
    ///
    /// When the call may wait ([`Options::queue`], or the configuration's `queue_enabled`)
    /// and is over its limit, it waits in the queue until admitted (`Ok`, allowed), or ends
    /// with [`Error::QueueFull`], [`Error::QueueTimeout`], or [`Error::NotInitialized`] if the
    /// module shuts down meanwhile. [`consume`](Self::consume) and [`enforce`](Self::enforce)
    /// wait the same way. Waiting needs a Tokio runtime with its timer: a call that must wait
    /// where there is none is refused with [`Error::NoRuntime`].
    pub fn check<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned(key, options, Mode::AsAsked)
    }

    /// Spends one call (or `options.cost`) from `key`'s budget. Like every method here, the
    /// future does not borrow `options` (see [`check`](Self::check)).
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService, Tier};
    ///
    /// # futures::executor::block_on(async {
    /// let config = Config::builder().tier(Tier::new("pro", 5).window("1m")).build()?;
    /// let service = RateLimitService::new(config)?;
    /// let pending = service.consume("user:1", &Options::new().tier("pro"));
    /// assert!(pending.await?.allowed);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn consume<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned(key, options, Mode::Spend)
    }

    /// Like [`consume`](Self::consume), but a refusal is `Err(Error::Exceeded(..))` carrying
    /// the decision.
    pub fn enforce<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned(key, options, Mode::Enforce)
    }

    /// The level of `key`'s budget now, spending and changing nothing: what remains,
    /// `reset_after` (when it is full again), and `allowed` when a call of cost 1 would pass
    /// now (with that call's `retry_after` when it would not). `options.cost` is not used.
    pub fn status<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned(key, options, Mode::Look)
    }

    /// The future of a public decision: it keeps its own clone of `options`, so it borrows
    /// only the service and the key.
    fn owned<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
        mode: Mode,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        let options = options.clone();
        async move {
            let call = mode.apply(options.call());
            // A decision that cannot wait, on a store that answers at once, is made here,
            // without polling the nested futures of the waiting path.
            if let Some(decided) = self.decided_now(key, &call, mode) {
                return decided;
            }
            // The path that waits (a round trip, the queue), boxed: its futures are large,
            // and a future is moved whole (into its caller's, into an executor), so without
            // the box every call, the memory store's above included, would move them.
            Box::pin(async {
                match mode {
                    Mode::Enforce => self.enforce_parts(Some(key), &call).await,
                    _ => self.decide_waiting(Some(key), &call).await,
                }
            })
            .await
        }
    }

    /// [`consume`](Self::consume) decided now, with no future: `Some` when nothing has to be
    /// awaited (the memory store, limiting disabled, or a store that answers this call at
    /// once, such as a Redis store spending a leased budget or repeating a refusal still in
    /// force: see [`Store::decide_now`](crate::store::Store::decide_now)) and the call may not wait
    /// in the queue; `None`, having spent and counted nothing, when it must be awaited (a round
    /// trip, or a call that would wait when refused): call [`consume`](Self::consume) then.
    ///
    /// For code that decides inside a poll or a `tower::Service::call` and would otherwise
    /// box a future per call (the HTTP layer does this).
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService};
    ///
    /// let service = RateLimitService::new(Config::builder().default_limit(1).build()?)?;
    /// let options = Options::new();
    /// assert!(service.consume_now("user:1", &options).unwrap()?.allowed);
    /// assert!(!service.consume_now("user:1", &options).unwrap()?.allowed);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    pub fn consume_now(&self, key: &str, options: &Options) -> Option<Result<Decision, Error>> {
        let call = Mode::Spend.apply(options.call());
        self.decided_now(key, &call, Mode::Spend)
    }

    /// The decision of a public call with `mode`, when it can be made at once (see
    /// [`consume_now`](Self::consume_now)); `None` when it has to be awaited.
    fn decided_now(
        &self,
        key: &str,
        call: &Call<'_>,
        mode: Mode,
    ) -> Option<Result<Decision, Error>> {
        if self.may_wait(call) {
            return None;
        }
        let decided = match self.decide_at_site(key, call) {
            AtSite::Decided(decided) => decided,
            // The store was asked at once and cannot answer: asking again gets the same.
            AtSite::Await => return None,
            AtSite::General => self.decide_now(Some(key), call, true)?,
        };
        Some(match mode {
            Mode::Enforce => decided.and_then(|d| Self::admit(d, call)),
            _ => decided,
        })
    }

    /// Forgets `key`'s state under `tier` (`None`: the default tier, or no tier) with no
    /// overrides and no budget. State is kept per quota (strategy and window) and budget: to
    /// reset what calls with other options spent, use [`reset_with`](Self::reset_with).
    pub async fn reset(&self, key: &str, tier: Option<&str>) -> Result<(), Error> {
        self.reset_call(key, &Call::under(tier)).await.map(drop)
    }

    /// Forgets the state that calls on `key` with `options` (tier, overrides, budget) spend
    /// from; returns whether there was any. The future does not borrow `options`.
    pub fn reset_with<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<bool, Error>> + Send + 'a {
        let options = options.clone();
        async move { self.reset_call(key, &options.call()).await }
    }

    async fn reset_call(&self, key: &str, call: &Call<'_>) -> Result<bool, Error> {
        let (quota, tier) = self.resolve(call)?;
        let parts = self.parts(call, tier, Some(key));
        match &self.inner.backend {
            Backend::Memory(store) => {
                self.with_key(call, tier, Some(key), &quota, |k| Ok(store.reset(k)))
            }
            Backend::Dyn(store) => {
                let mut k = String::new();
                key::compose(&mut k, &parts, &quota)?;
                store.reset(&k).await
            }
        }
    }
}
