//! The per-call API: decisions, looks and resets whose futures own their [`Options`], so that
//! options built in the call's own expression, or kept anywhere, never have to outlive it.

use std::future::Future;

use super::pipeline::Then;
use super::site::{Held, Site};
use super::{Call, Options, RateLimitService};
use crate::decision::Decision;
use crate::error::Error;
use crate::store::BoxFuture;

/// A public decision begun ([`RateLimitService::start`]).
pub(crate) enum Started<'a> {
    /// Decided at once, and recorded.
    Now(Result<Decision, Error>),
    /// The rest of it, to await.
    Later(BoxFuture<'a, Result<Decision, Error>>),
}

/// An enforced call's answer (`Mode::Enforce`) made in place: a refusal as
/// [`Error::Exceeded`] (`RateLimitService::admit`); an admission or an error as it is. Lent
/// the site ([`Site::lent`]): handed the call's own, it made the whole site be written out
/// before every public call's decision, enforced or not (BENCHMARKS.md, `hot_path`).
#[cold]
#[inline(never)]
fn enforce_in_place(site: &Site<'_>, decided: &mut super::pipeline::Answer) {
    if let Some(answer) = decided.take() {
        *decided = Some(answer.and_then(|d| RateLimitService::admit(site, d)));
    }
}

/// What a public decision does with its options.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
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
    const AS_ASKED: u8 = 0;
    const SPEND: u8 = 1;
    const ENFORCE: u8 = 2;
    const LOOK: u8 = 3;

    /// The mode a future of [`RateLimitService::owned`] was made for: worked out when it is
    /// compiled, where a code that is none is an error.
    const fn of(code: u8) -> Mode {
        match code {
            Mode::AS_ASKED => Mode::AsAsked,
            Mode::SPEND => Mode::Spend,
            Mode::ENFORCE => Mode::Enforce,
            Mode::LOOK => Mode::Look,
            _ => panic!("not a mode's code"),
        }
    }

    /// The call as this mode makes it.
    pub(super) fn apply(self, call: Call<'_>) -> Call<'_> {
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
        self.owned::<{ Mode::AS_ASKED }>(key, options)
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
        self.owned::<{ Mode::SPEND }>(key, options)
    }

    /// Like [`consume`](Self::consume), but a refusal is `Err(Error::Exceeded(..))` carrying
    /// the decision.
    pub fn enforce<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned::<{ Mode::ENFORCE }>(key, options)
    }

    /// The level of `key`'s budget now, spending and changing nothing: what remains,
    /// `reset_after` (when it is full again), and `allowed` when a call of cost 1 would pass
    /// now (with that call's `retry_after` when it would not). `options.cost` is not used.
    pub fn status<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.owned::<{ Mode::LOOK }>(key, options)
    }

    /// The future of a public decision: it keeps its own clone of `options`, so it borrows
    /// only the service and the key. One type for each mode ([`Mode::of`]), so that each
    /// method's future is compiled for its own: with the mode a field of one future for all
    /// four, every poll matched on it (where the call is made, whether a refusal is an error).
    fn owned<'a, const MODE: u8>(
        &'a self,
        key: &'a str,
        options: &Options,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        let options = options.clone();
        async move {
            let mode = const { Mode::of(MODE) };
            let call = mode.apply(options.call());
            let (generation, mut held) = (self.generation(), Held::default());
            let mut failed = false;
            if self.horizon_due(&generation) {
                match Box::pin(self.read_horizon_if_due(&generation)).await {
                    Ok(unanswered) => failed = unanswered,
                    Err(e) => return Err(self.unresolved(&call, e)),
                }
            }
            // Nothing but the boxed rest of the call is held across the wait (see `start`).
            let later = match self.site(&generation, &call, &mut held) {
                Ok(site) => match self.start(site.failed_if(failed), Some(key), mode) {
                    Started::Now(decided) => return decided,
                    Started::Later(later) => later,
                },
                Err(e) => return Err(self.unresolved(&call, e)),
            };
            later.await
        }
    }

    /// A call whose options could not be resolved: the error, recorded when it spends.
    pub(crate) fn unresolved(&self, call: &Call<'_>, error: Error) -> Error {
        if call.consume {
            self.count(None, call.budget, None, crate::stats::Outcome::Error);
        }
        error
    }

    /// An annotated fn's call with `call`'s options, its site worked out for this call alone
    /// (a tier chosen per call, a testing scope): a refusal is an error.
    pub(crate) async fn enforce_call(
        &self,
        call: &Call<'_>,
        key: Option<&str>,
    ) -> Result<(), Error> {
        let (generation, mut held) = (self.generation(), Held::default());
        let failed = self.horizon_due(&generation)
            && Box::pin(self.read_horizon_if_due(&generation))
                .await
                .map_err(|e| self.unresolved(call, e))?;
        let site = self
            .site(&generation, call, &mut held)
            .map_err(|e| self.unresolved(call, e))?;
        let decided = match self.start(site.failed_if(failed), key, Mode::Enforce) {
            Started::Now(decided) => decided,
            Started::Later(later) => later.await,
        };
        decided.map(drop)
    }

    /// [`enforce_call`](Self::enforce_call) kept for a refund (an annotated fn that counts
    /// only some outcomes).
    pub(crate) async fn enforce_call_spent(
        &self,
        call: &Call<'_>,
        key: Option<&str>,
    ) -> Result<super::Spent, Error> {
        let (generation, mut held) = (self.generation(), Held::default());
        let failed = self.horizon_due(&generation)
            && Box::pin(self.read_horizon_if_due(&generation))
                .await
                .map_err(|e| self.unresolved(call, e))?;
        let site = self
            .site(&generation, call, &mut held)
            .map_err(|e| self.unresolved(call, e))?;
        self.spend_at(site.failed_if(failed), key, true).await
    }

    /// [`enforce_call_spent`](Self::enforce_call_spent) decided at once; `None`, nothing
    /// spent, when it must be awaited.
    pub(crate) fn enforce_call_spent_now(
        &self,
        call: &Call<'_>,
        key: Option<&str>,
    ) -> Option<Result<super::Spent, Error>> {
        let (generation, mut held) = (self.generation(), Held::default());
        if self.horizon_due(&generation) {
            return None;
        }
        match self.site(&generation, call, &mut held) {
            Ok(site) => self.spend_now(site, key, true),
            Err(e) => Some(Err(self.unresolved(call, e))),
        }
    }

    /// [`enforce_call`](Self::enforce_call) for a sync fn (see `enforce_sync`).
    pub(crate) fn enforce_call_sync(
        &self,
        call: &Call<'_>,
        key: Option<&str>,
        function: &'static str,
    ) -> Result<(), Error> {
        let (generation, mut held) = (self.generation(), Held::default());
        // The fleet's record read where due before the site is worked out, as an async fn's
        // call reads it (`enforce_call`), polled once: a sync fn cannot wait (refused as
        // waiting where the store's read is pending). Read nowhere, a sync fn's call was
        // asked of the store where its read would have failed (probes_ask_step).
        let failed = self.horizon_due(&generation)
            && crate::drivers::poll_once(
                self.read_horizon_if_due(&generation),
                Error::SyncOnWaitingStore { function },
            )
            .map_err(|e| self.unresolved(call, e))?;
        let site = self
            .site(&generation, call, &mut held)
            .map_err(|e| self.unresolved(call, e))?;
        self.enforce_sync(&site.failed_if(failed), key, function)
    }

    /// A public decision at `site` begun at once: decided when the store can and the call may
    /// not wait ([`Started::Now`]); otherwise the rest of it to await (the store, or the
    /// queue), boxed and owning the site ([`Started::Later`]). A caller's future then holds
    /// one pointer across its wait, never the site, the store key and the decision: each move
    /// of a future copies all it holds, and the memory store's calls never wait. Inlined, so
    /// that neither the site nor the decision is copied on the way in and out (a copy read
    /// back right after it was written stalls: BENCHMARKS.md, `hot_path`).
    #[inline]
    pub(crate) fn start<'a>(
        &'a self,
        site: Site<'a>,
        key: Option<&'a str>,
        mode: Mode,
    ) -> Started<'a> {
        let answer = move |site: &Site<'_>, decided: Result<Decision, Error>| match mode {
            Mode::Enforce => decided.and_then(|d| Self::admit(site, d)),
            _ => decided,
        };
        if self.horizon_raise_at(&site) {
            return Started::Later(Box::pin(self.raised_then(site, key, answer)));
        }
        if site.may_wait {
            return Started::Later(Box::pin(async move {
                let decided = self.decide_waiting(&site, key).await;
                answer(&site, decided)
            }));
        }
        let mut store_key = String::new();
        // An enforced refusal made an error where the store's answer lies, so that any other
        // answer is moved out as it is (a `match` on the mode around it was one more move of
        // the decision on every call).
        let now = |site: &Site<'_>, decided: &mut super::pipeline::Answer| {
            if mode == Mode::Enforce && !matches!(decided, Some(Ok(d)) if d.allowed) {
                enforce_in_place(&site.lent(), decided);
            }
            decided.take()
        };
        match self.decide_now(&site, key, Then::Await(&mut store_key), now) {
            Some(decided) => Started::Now(decided),
            None => Started::Later(Box::pin(async move {
                let decided = self.decide_later(&site, key, &store_key).await;
                answer(&site, decided)
            })),
        }
    }

    /// A call at `site` whose quota or window of its own outlasts what the store's record of
    /// the fleet's horizon holds (`horizon.rs`): the record raised first, then decided. A
    /// record that cannot be raised refuses the call with the store's error, recorded as
    /// the call's, or has it answered by the store's failure policy (`Site::failed`): the
    /// state is never written past the record.
    #[cold]
    async fn raised_then<'a>(
        &'a self,
        site: Site<'a>,
        key: Option<&'a str>,
        answer: impl FnOnce(&Site<'_>, Result<Decision, Error>) -> Result<Decision, Error>,
    ) -> Result<Decision, Error> {
        let site = match self.raise_horizon_for_call(site.generation).await {
            Ok(failed) => site.failed_if(failed),
            Err(e) => return self.record_and_return(&site, key, Err(e)),
        };
        let decided = match site.may_wait {
            true => self.decide_waiting(&site, key).await,
            false => self.decide(&site, key).await,
        };
        answer(&site, decided)
    }

    /// [`consume`](Self::consume) decided now, with no future: `Some` when nothing has to be
    /// awaited (the memory store, limiting disabled, or a store that answers this call at
    /// once, such as a Redis store spending a leased budget or repeating a refusal still in
    /// force: see [`Store::decide_now`](crate::store::Store::decide_now)) and the call may not wait
    /// in the queue; `None`, having spent and counted nothing, when it must be awaited (a round
    /// trip, or a call that would wait when refused): call [`consume`](Self::consume) then.
    ///
    /// For code that decides inside a poll or a `tower::Service::call` and would otherwise
    /// box a future per call (the HTTP layer does this). A caller that decides with the same
    /// options again and again holds a [`prepare`](Self::prepare)d site instead.
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
        self.decide_now_call(&options.call(), key)
    }

    /// [`consume_now`](Self::consume_now) of `call`.
    pub(crate) fn decide_now_call(
        &self,
        call: &Call<'_>,
        key: &str,
    ) -> Option<Result<Decision, Error>> {
        let call = Mode::Spend.apply(*call);
        let (generation, mut held) = (self.generation(), Held::default());
        let site = match self.site(&generation, &call, &mut held) {
            Ok(site) => site,
            Err(e) => return Some(Err(self.unresolved(&call, e))),
        };
        // The fleet's horizon to read or raise first: awaited (`horizon.rs`).
        if site.may_wait || self.horizon_due(&generation) || self.horizon_raise_at(&site) {
            return None;
        }
        self.decide_now(&site, Some(key), Then::GiveUp, super::pipeline::take)
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
        let (generation, mut held) = (self.generation(), Held::default());
        let store_key = self
            .site(&generation, call, &mut held)?
            .store_key(Some(key))?;
        self.inner.store.reset(&store_key).await
    }
}
