//! The one decision pipeline. Every entry point (annotated fns, the public methods, the HTTP
//! layer, the queue) takes the same steps in the same order:
//!
//! 1. **prepare**: a [`Site`], what the call site fixes (quota, tier, budget and its
//!    counters, the store key around the user key), worked out once by whoever holds it
//!    (see `site.rs`);
//! 2. **check** the call: its user key and cost, here and nowhere else ([`Site::check`]);
//! 3. **compose** the store key, once per call;
//! 4. **decide now** when the store can ([`Store::decide_now`]), else **await** one future
//!    ([`Store::decide`]), asking it in one place (`ask.rs`), which holds the failure
//!    policy's answer for a call whose read or raise of the fleet's record failed;
//! 5. **settle** the decision (its tier named; a shadow limit's refusal turned into a marked
//!    admission) and **record** the outcome in the statistics.
//!
//! Stacked limits (`stacked.rs`) and the queue (`wait.rs`) are built from these steps.
//!
//! [`Store::decide_now`]: crate::store::Store::decide_now
//! [`Store::decide`]: crate::store::Store::decide

use std::time::Duration;

use super::ask::{Asked, RequestIn};
use super::site::Site;
use super::RateLimitService;
use crate::algorithm::{in_shape, out_of_shape};
use crate::decision::Decision;
use crate::error::{Error, Exceeded};
use crate::key::KeyBuf;
use crate::quota::Quota;
use crate::stats::Outcome;
use crate::store::Told;

/// Counts a call whose caller gave up while the store was deciding it: runs its closure when
/// dropped, unless [`defuse`](Self::defuse)d once the store answered.
pub(crate) struct IfAbandoned<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> IfAbandoned<F> {
    pub(crate) fn new(count: F) -> Self {
        IfAbandoned(Some(count))
    }

    /// The store answered: the call is counted by its outcome instead.
    pub(crate) fn defuse(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for IfAbandoned<F> {
    fn drop(&mut self) {
        if let Some(count) = self.0.take() {
            count();
        }
    }
}

/// What a caller of [`RateLimitService::decide_now`] does when the store cannot answer at once.
pub(crate) enum Then<'a> {
    /// Awaits the store next, on the store key written here.
    Await(&'a mut String),
    /// As `Await`, and the store key is written here whether the store decided at once or
    /// not: a spend kept for a refund ([`Spent`](super::Spent)) names its key.
    Keep(&'a mut String),
    /// Gives up, having spent nothing (a `*_now` method, a sync fn).
    GiveUp,
}

impl Then<'_> {
    /// Writes `store_key` out for a caller that keeps it, or awaits the store next (the
    /// store did not decide at once: `!decided`).
    #[inline(always)]
    fn write(self, store_key: &str, decided: bool) {
        let out = match self {
            Then::Keep(out) => out,
            Then::Await(out) if !decided => out,
            _ => return,
        };
        out.clear();
        out.push_str(store_key);
    }
}

impl RateLimitService {
    /// Steps 2 to 4 (and 5 when decided): the call decided at once if the store can; `None`,
    /// nothing spent, when it must be awaited. `A`, what the caller is answered in, says
    /// whether it shows an admitted decision ([`Asked`]: then its tier is named on it too; a
    /// refusal always names it). `then`: whether the caller awaits the store
    /// next, on the store key written into [`Then::Await`]'s `String` (empty); a caller that
    /// gives up instead allocates nothing.
    ///
    /// The store key is composed on the stack ([`KeyBuf`]), and the decision is the store's
    /// answer itself, named and counted where it lies, then lent to `answer` (always
    /// `Some`), which makes of it what the caller returns, always `Some` too (`None` is only
    /// ever the store's "awaited"): an annotated fn's admitted call reads one flag of it, a
    /// caller that returns the decision moves it out, `Option` and all, into its own answer
    /// ([`take`]). Not moved through each step (see [`conclude_now`](Self::conclude_now)).
    #[inline]
    pub(crate) fn decide_now<T, A: Asked>(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        then: Then<'_>,
        answer: impl FnOnce(&Site<'_>, &mut Option<A>) -> Option<T>,
    ) -> Option<T> {
        if let Err(e) = site.check(key) {
            let site = &site.lent();
            let decided = self.record_and_return(site, key, Err(e));
            return answer(site, &mut Some(A::decided(decided)));
        }
        let now = self.inner.clock.now();
        if !site.generation.config.enabled() {
            let decided = A::decided(Ok(Decision::unlimited(now)));
            return answer(&site.lent(), &mut Some(decided));
        }
        let mut composed = KeyBuf::new();
        let (store_key, hash) = match site.whole_key(key) {
            Some(whole) => whole,
            None => {
                site.compose(&mut composed, key);
                (&*composed, None)
            }
        };
        if site.holds_other_states(now) {
            let site = &site.lent();
            let decided = self.decide_both_now(site, key, store_key, now);
            let mut decided = decided.map(A::decided);
            then.write(store_key, decided.is_some());
            return self.conclude_now(site, key, &mut decided, answer);
        }
        let mut drained = None;
        let request = match site.request(store_key, now, &mut drained) {
            Ok(request) => request,
            Err(e) => {
                let site = &site.lent();
                let decided = self.record_and_return(site, key, Err(e));
                return answer(site, &mut Some(A::decided(decided)));
            }
        };
        let started = self.inner.latency.start();
        let mut decided = self.ask_store(site, RequestIn::<A>::new(request, hash));
        if let Some(told) = &mut decided {
            self.inner.latency.finish(started);
            // A bare admission is one under the request's quota, of the right shape and not
            // refused: what these two would read of its decision (`Told::Admitted`).
            if let Some(decided) = told.decision() {
                under_its_quota(request.quota(), decided);
                super::transition::retry(site, now, decided);
            }
        }
        then.write(store_key, decided.is_some());
        self.conclude_now(site, key, &mut decided, answer)
    }

    /// Step 5 of [`decide_now`](Self::decide_now) once the store answered (`Some`), on the
    /// decision where the store wrote it, then lent to `answer`. One place for the decision
    /// on the site's own state and one with a transition's old states, each borrowed where
    /// it lies: a decision is ~110 bytes, and a copy made right after the store wrote it
    /// waits on the narrower stores its wide loads span (store forwarding fails), which cost
    /// an annotated call more than its instructions did (BENCHMARKS.md, `hot_path`).
    #[inline(always)]
    fn conclude_now<T, A: Asked>(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        decided: &mut Option<A>,
        answer: impl FnOnce(&Site<'_>, &mut Option<A>) -> Option<T>,
    ) -> Option<T> {
        self.finish(site, key, decided.as_mut()?);
        answer(site, decided)
    }

    /// Every step, awaiting the store when it cannot decide at once.
    pub(crate) async fn decide(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
    ) -> Result<Decision, Error> {
        let mut store_key = String::new();
        match self.decide_now(site, key, Then::Await(&mut store_key), take) {
            Some(decided) => decided,
            None => self.decide_later(site, key, &store_key).await,
        }
    }

    /// Step 4's awaited half and step 5: the store asked on `store_key`, which step 3
    /// composed.
    pub(crate) async fn decide_later(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        store_key: &str,
    ) -> Result<Decision, Error> {
        // A caller that gives up while the store decides (the future dropped) is counted
        // once, as abandoned: the store may have spent the call.
        let abandoned = self.if_abandoned(site);
        let decided = self.ask(site, key, store_key).await;
        abandoned.defuse();
        self.record_and_return(site, key, decided)
    }

    /// Counts a call at `site` given up (its future dropped) before it was answered, once, as
    /// abandoned, when it spends: the store may have spent it. A plain call's guard around
    /// the store's awaited answer, a waiting one's around its whole wait (`wait.rs`).
    pub(super) fn if_abandoned<'a>(
        &'a self,
        site: &'a Site<'_>,
    ) -> IfAbandoned<impl FnOnce() + 'a> {
        IfAbandoned::new(move || {
            if site.spend {
                let tier = site.tier_counters();
                self.count(tier, site.budget(), site.counters, Outcome::Abandoned);
            }
        })
    }

    /// The store's awaited answer on `store_key` (user key `key`), its latency sampled and
    /// its tier named; not recorded (the queue records a call once, by how its wait ended).
    pub(crate) async fn ask(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        store_key: &str,
    ) -> Result<Decision, Error> {
        let now = self.inner.clock.now();
        if !site.generation.config.enabled() {
            return Ok(Decision::unlimited(now));
        }
        if site.holds_other_states(now) {
            let mut decided = Box::pin(self.decide_both(site, key, store_key, now)).await;
            self.settle(site, &mut decided, true);
            return decided;
        }
        let mut drained = None;
        let request = site.request(store_key, now, &mut drained)?;
        let started = self.inner.latency.start();
        let mut decided = self.ask_store_later(site, request).await;
        self.inner.latency.finish(started);
        under_its_quota(request.quota(), &mut decided);
        super::transition::retry(site, now, &mut decided);
        self.settle(site, &mut decided, true);
        decided
    }

    /// Step 5 for a decision the store made, in place: settled, the outcome recorded (a plain
    /// admission, which `settle` found or the store told bare, counted without looking at the
    /// decision again). The tier named on an admitted decision when the caller shows it.
    #[inline(always)]
    fn finish<A: Asked>(&self, site: &Site<'_>, key: Option<&str>, told: &mut A) {
        let plain = match told.decision() {
            Some(decided) => self.settle(site, decided, A::SHOWN),
            None => true,
        };
        if site.spend {
            match told.decision() {
                Some(decided) if !plain => self.record_other(&site.lent(), key, decided),
                _ => self.count_admitted(site),
            }
        }
    }

    /// Settles the store's decision at `site`, in place, before anyone reads it: names the
    /// site's tier (on a refusal always, else when `name_tier`, [`Asked::SHOWN`]: an annotated fn's admitted
    /// call never shows its decision, so it skips the `Arc` clone); and, at a shadow site,
    /// turns a refusal into an admission marked [`Decision::shadowed`]. The store's state is
    /// what the refusal left (nothing spent), as an enforced limit's would be. Errors stay
    /// errors: a shadow limit only never refuses for being over its limit.
    ///
    /// Whether the decision is a plain admission (allowed, of the right shape, not
    /// shadowed): what [`record`](Self::record) counts as allowed alone.
    #[inline(always)]
    pub(super) fn settle(
        &self,
        site: &Site<'_>,
        decided: &mut Result<Decision, Error>,
        name_tier: bool,
    ) -> bool {
        let decision = match decided {
            Ok(decision) if decision.allowed => decision,
            _ => {
                settle_refusal(&site.lent(), decided);
                return false;
            }
        };
        // An admission of the wrong shape (the rule of `broken_answer` an admission can
        // break): two compares on the way, the error out of it.
        let retry_after = decision.retry_after.is_some();
        if !in_shape(true, decision.remaining, decision.limit, retry_after) {
            settle_broken(decided);
            return false;
        }
        // A site without a tier names none: nothing to write over a store's `None`.
        if name_tier && (site.tier.is_some() || decision.tier.is_some()) {
            decision.tier = site.tier_name();
        }
        !decision.shadowed
    }

    /// Step 5 for a decision handed on by value: counts the outcome when the call spends
    /// ([`record`](Self::record)), and returns the decision.
    #[inline]
    pub(crate) fn record_and_return(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        decided: Result<Decision, Error>,
    ) -> Result<Decision, Error> {
        if site.spend {
            self.record(site, key, &decided);
        }
        decided
    }

    /// [`admit`](Self::admit) for a call whose admitted decision is not returned: out of the
    /// admitted call's way. The error as the caller hands it on (`E`: boxed for an async
    /// annotated fn, whose answer is then two words).
    #[cold]
    #[inline(never)]
    pub(crate) fn refused<E: From<Error>>(
        site: &Site<'_>,
        decided: &mut Option<Told>,
    ) -> Option<Result<(), E>> {
        let decided = decided.take().map(Told::decision);
        let decided = decided.unwrap_or(Err(Error::NoLimit));
        Some(
            decided
                .and_then(|d| Self::admit(site, d))
                .map(drop)
                .map_err(E::from),
        )
    }

    /// `Ok` with an admitted decision; a refusal as [`Error::Exceeded`].
    pub(crate) fn admit(site: &Site<'_>, decision: Decision) -> Result<Decision, Error> {
        if decision.allowed {
            Ok(decision)
        } else {
            Err(Self::exceeded(site, decision))
        }
    }

    /// A refusal at `site` as [`Error::Exceeded`].
    pub(crate) fn exceeded(site: &Site<'_>, decision: Decision) -> Error {
        Error::Exceeded(Box::new(Exceeded {
            decision,
            budget: site.budget().map(str::to_owned),
            policy: site.policy().map(str::to_owned),
        }))
    }
}

/// The answer of an annotated fn's call (async or sync), whose admitted decision nobody
/// reads: `Ok(())` from the decision's flag where it lies, without moving it; anything else
/// as [`refused`](RateLimitService::refused) makes it.
#[inline(always)]
pub(crate) fn admitted<E: From<Error>>(
    site: &Site<'_>,
    decided: &mut Option<Told>,
) -> Option<Result<(), E>> {
    match decided {
        Some(Told::Admitted) => Some(Ok(())),
        Some(Told::Decided(Ok(decision))) if decision.allowed => Some(Ok(())),
        _ => RateLimitService::refused(&site.lent(), decided),
    }
}

/// The decision [`RateLimitService::decide_now`] lends the `answer` of a caller that returns
/// it: always `Some`, in the `Option` the store answered in, so that the caller moves it out
/// once ([`take`]), leaving `None`, which needs no drop.
pub(crate) type Answer = Option<Result<Decision, Error>>;

/// The `answer` of a caller of [`RateLimitService::decide_now`] that returns the decision:
/// moved out, as the `Some` it is handed.
#[inline(always)]
pub(crate) fn take(_: &Site<'_>, decided: &mut Answer) -> Answer {
    decided.take()
}

/// [`settle`](RateLimitService::settle) of a refusal: its tier named and, at a shadow site,
/// the admission it becomes; an error if the store broke a refusal's promise
/// ([`broken_answer`]). An error stays as it is.
/// A store's answer to a request under `quota`: an error unless it is an answer under it
/// (`Decision::is_under`, the rule a stacked call's and a transition's answers are held to
/// as well). A store of your own answering under a larger limit or another window had its
/// word handed on as fact by a single call (probes_store_answers).
#[inline(always)]
fn under_its_quota(quota: &Quota, decided: &mut Result<Decision, Error>) {
    if decided.as_ref().is_ok_and(|d| !d.is_under(quota)) {
        not_under_its_quota(decided);
    }
}

#[cold]
#[inline(never)]
fn not_under_its_quota(decided: &mut Result<Decision, Error>) {
    *decided = Err(crate::algorithm::Undecidable::UnexpectedState.into());
}

#[cold]
#[inline(never)]
fn settle_refusal(site: &Site<'_>, decided: &mut Result<Decision, Error>) {
    let Ok(decision) = decided else {
        return;
    };
    if let Some(broken) = broken_answer(decision) {
        *decided = Err(broken);
        return;
    }
    decision.tier = site.tier_name();
    if site.shadow {
        shadow(decision);
    }
}

/// [`settle`](RateLimitService::settle) of an admission of the wrong shape: the error
/// [`broken_answer`] makes of it.
#[cold]
#[inline(never)]
fn settle_broken(decided: &mut Result<Decision, Error>) {
    if let Some(broken) = decided.as_ref().ok().and_then(broken_answer) {
        *decided = Err(broken);
    }
}

/// The longest wait a decision can name: every time a store decides on is a `u64` of
/// nanoseconds since the epoch (the algorithms' times end about the year 2226), and a wait
/// is rounded up to a millisecond.
const LONGEST_WAIT: Duration = Duration::from_millis(u64::MAX / 1_000_000 + 1);

/// A store's answer of a shape [`Decision`] promises it never has, which no store of this
/// crate gives: a store answering so is answering another question, and what it says is not
/// handed on as a fact. An error (the call refused), as any state of the wrong shape:
///
/// - a refusal without a `retry_after` (every refusal says how long to wait: the queue took
///   one without for a call that can never pass), or with a zero one (the queue and
///   `until_ready`, which sleep that long before asking again, asked in a loop), or with one
///   past any time a decision names (`Duration::MAX`: the queue and `until_ready` added it
///   to `Instant::now()` and panicked; `Retry-After` wrapped to 1 s);
/// - an admission with a `retry_after` (a `Retry-After` on a call let through);
/// - more `remaining` than the `limit` (`X-RateLimit-Remaining: 1002` under a limit of 2).
///
/// The one check of a store's answer, for every entry point: `settle` runs it on each
/// decision and `stacked.rs` on each of a stacked call's. The first three are
/// [`in_shape`]'s, the rule a memory store's verdict is held to before it tells an
/// admission bare (`Verdict::admits_plainly`).
#[inline]
pub(super) fn broken_answer(decision: &Decision) -> Option<Error> {
    let (allowed, remaining, limit) = (decision.allowed, decision.remaining, decision.limit);
    let wrong = match decision.retry_after {
        after if !in_shape(allowed, remaining, limit, after.is_some()) => {
            Some(out_of_shape(allowed, remaining, limit))
        }
        // A refusal's wait, which `in_shape` (the rule a verdict is held to as well) does
        // not read.
        Some(after) if after.is_zero() => Some("a refusal with a retry_after of zero"),
        Some(after) if after > LONGEST_WAIT => Some("a refusal with a retry_after past any time"),
        _ => None,
    };
    wrong.map(broken)
}

/// The error of a store's answer of the wrong shape (see [`broken_answer`]).
#[cold]
#[inline(never)]
fn broken(what: &'static str) -> Error {
    Error::UnexpectedState {
        message: format!("the store answered {what}"),
    }
}

/// A shadow limit's refusal as the admission it becomes (see `settle`).
#[cold]
pub(super) fn shadow(decision: &mut Decision) {
    decision.allowed = true;
    decision.shadowed = true;
    decision.retry_after = None;
}

impl RateLimitService {
    /// A sync annotated fn's call: every step at once, or refused with
    /// [`Error::SyncOnWaitingStore`] (recorded as an error) on a store that does not always
    /// decide at once: one that answers some calls at once (a leased budget) would admit a
    /// sync fn's calls only while that lasts. Never waits in the queue. Where the fleet's
    /// record is to be raised first (`horizon.rs`, on a store that decides at once and
    /// records it: one of one's own), it is, polled once (as a sync fn's stacked call's):
    /// refused as waiting where the store's raise is pending, answered by the failure policy
    /// where it failed unanswered (`Site::failed`), as an async fn's call. Asked of the store
    /// straight away, a sync fn's call of a window of its own wrote its state past the
    /// record, and was asked of the store where its raise had failed (probes_ask_step). The
    /// read due before its site is worked out is its caller's (`enforce_call_sync`; a
    /// prepared site is not current while one is due).
    pub(crate) fn enforce_sync(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        function: &'static str,
    ) -> Result<(), Error> {
        // Made only where it is answered: built up front, it was made and dropped on every
        // admitted call.
        let waiting = || Err(Error::SyncOnWaitingStore { function });
        if !self.decides_at_once(&site.generation.config) {
            return self.record_and_return(site, key, waiting()).map(drop);
        }
        if self.horizon_raise_at(site) {
            return self.enforce_sync_raised(site, key, function);
        }
        match self.decide_now(site, key, Then::GiveUp, admitted) {
            Some(decided) => decided,
            None => self.record_and_return(site, key, waiting()).map(drop),
        }
    }

    /// [`enforce_sync`](Self::enforce_sync) raising the fleet's record first, polled once:
    /// out of line (in line, 30 more instructions every sync fn's call: BENCHMARKS.md).
    #[cold]
    #[inline(never)]
    fn enforce_sync_raised(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        function: &'static str,
    ) -> Result<(), Error> {
        let raise = self.raise_horizon_for_call(site.generation);
        let site = match crate::drivers::poll_once(raise, Error::SyncOnWaitingStore { function }) {
            Ok(failed) => site.failed_if(failed),
            Err(e) => return self.record_and_return(site, key, Err(e)).map(drop),
        };
        match self.decide_now(&site, key, Then::GiveUp, admitted) {
            Some(decided) => decided,
            None => {
                let waiting = Err(Error::SyncOnWaitingStore { function });
                self.record_and_return(&site, key, waiting).map(drop)
            }
        }
    }
}

impl RateLimitService {
    /// Whether every decision is made at once: limiting switched off, or a store that always
    /// decides at once ([`Store::decides_at_once`](crate::store::Store::decides_at_once)). Sync
    /// annotated fns need it.
    pub(crate) fn decides_at_once(&self, config: &crate::config::Config) -> bool {
        !config.enabled() || self.inner.store.decides_at_once()
    }

    /// Whether the service's store gives spends back ([`Spent::refund`](super::Spent::refund),
    /// [`Store::refunds`](crate::store::Store::refunds)): the memory store does, Redis not
    /// yet. Where it does not, nothing spent is ever given back (every call counts).
    pub fn refunds(&self) -> bool {
        self.inner.store.refunds()
    }
}
