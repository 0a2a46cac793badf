//! Step 4, asking the store: the one place the service asks its store for a call's
//! decision, at once ([`ask_store`](RateLimitService::ask_store)) or awaited
//! ([`ask_store_later`](RateLimitService::ask_store_later)), whatever the question (one call,
//! a stacked call, a transition's old states with the call: a [`Question`]).
//!
//! The rule it holds for every caller: a call whose read or raise of the fleet's reload
//! horizon record failed unanswered ([`Site::failed`]) is answered by the store's failure
//! policy ([`Store::answer_failure`], [`Store::answer_failure_all`]: `Failover::instead`),
//! never asked of the store, which, on a link that answers again, would decide it on what
//! this service alone knew, or write its state before the record (15 admitted against none
//! on one service: probes_horizon_surfaces_redis, horizon_policy_answers_redis). Checked
//! before at each place the store was asked (a call, its awaited half, a transition's both
//! ways, a stacked call's enforced and shadow limits), it is here once, so that an entry
//! point added later takes it by asking here.
//!
//! [`Store::answer_failure`]: crate::store::Store::answer_failure
//! [`Store::answer_failure_all`]: crate::store::Store::answer_failure_all

use std::marker::PhantomData;
use std::num::NonZeroU64;

use super::site::Site;
use super::RateLimitService;
use crate::decision::Decision;
use crate::error::Error;
use crate::store::{BoxFuture, DynStore, Request, Stacked, Told};

/// What the service asks its store about a call, and how each of the three answers is had:
/// the store's at once, the store's awaited, or the failure policy's.
pub(super) trait Question: Copy + Send {
    /// What the store answers.
    type Answer;

    /// The store's answer when it decides at once; `None`, nothing spent, when it must be
    /// awaited.
    fn store_answer_now(self, store: &dyn DynStore) -> Option<Self::Answer>;

    /// The store's awaited answer.
    fn store_answer_later<'s>(self, store: &'s dyn DynStore) -> BoxFuture<'s, Self::Answer>
    where
        Self: 's;

    /// The store's failure policy's answer, as to any decision the store could not make
    /// (out of line: [`policy_answer_to`], [`policy_answer_to_all`]).
    fn policy_answer(self, store: &dyn DynStore) -> Self::Answer;
}

impl Question for Request<'_> {
    type Answer = Result<Decision, Error>;

    #[inline(always)]
    fn store_answer_now(self, store: &dyn DynStore) -> Option<Self::Answer> {
        store.decide_now(self)
    }

    fn store_answer_later<'s>(self, store: &'s dyn DynStore) -> BoxFuture<'s, Self::Answer>
    where
        Self: 's,
    {
        store.decide(self)
    }

    #[inline(always)]
    fn policy_answer(self, store: &dyn DynStore) -> Self::Answer {
        policy_answer_to(store, self)
    }
}

impl Question for Stacked<'_> {
    type Answer = Result<Vec<Decision>, Error>;

    #[inline]
    fn store_answer_now(self, store: &dyn DynStore) -> Option<Self::Answer> {
        store.decide_all_now(self)
    }

    fn store_answer_later<'s>(self, store: &'s dyn DynStore) -> BoxFuture<'s, Self::Answer>
    where
        Self: 's,
    {
        store.decide_all(self)
    }

    #[inline(always)]
    fn policy_answer(self, store: &dyn DynStore) -> Self::Answer {
        policy_answer_to_all(store, self)
    }
}

/// What a caller of [`RateLimitService::decide_now`] is answered in, which says whether it
/// shows an admitted call's decision: the decision itself (`Result<Decision, Error>`), for
/// every caller that returns it; [`Told`], for an annotated fn's call (async or sync), which
/// never shows it, and which the store may then tell a plain admission bare
/// ([`Told::Admitted`]: the ~110-byte decision not made, nor read here). Whatever else the
/// store answers is the decision, for every caller alike.
pub(crate) trait Asked: Sized {
    /// Whether an admitted call's decision is shown (its tier named on it).
    const SHOWN: bool;

    /// The store's answer to `request` (on a key of hash `hash` in it, when held), when it
    /// decides at once.
    fn ask(store: &dyn DynStore, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Self>;

    /// A decision (or error) made here, not by the store.
    fn decided(decided: Result<Decision, Error>) -> Self;

    /// The decision, where it lies; `None` for a bare admission.
    fn decision(&mut self) -> Option<&mut Result<Decision, Error>>;
}

impl Asked for Result<Decision, Error> {
    const SHOWN: bool = true;

    #[inline(always)]
    fn ask(store: &dyn DynStore, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Self> {
        match hash {
            Some(hash) => store.decide_now_hashed(request, hash),
            None => store.decide_now(request),
        }
    }

    #[inline(always)]
    fn decided(decided: Result<Decision, Error>) -> Self {
        decided
    }

    #[inline(always)]
    fn decision(&mut self) -> Option<&mut Result<Decision, Error>> {
        Some(self)
    }
}

impl Asked for Told {
    const SHOWN: bool = false;

    #[inline(always)]
    fn ask(store: &dyn DynStore, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Self> {
        store.decide_now_told(request.unshown(), hash)
    }

    #[inline(always)]
    fn decided(decided: Result<Decision, Error>) -> Self {
        Told::Decided(decided)
    }

    #[inline(always)]
    fn decision(&mut self) -> Option<&mut Result<Decision, Error>> {
        match self {
            Told::Decided(decided) => Some(decided),
            Told::Admitted => None,
        }
    }
}

/// A call's request as [`decide_now`](RateLimitService::decide_now) asks it: on the store-key
/// hash its site holds, where it holds one, and answered in `A` (the decision, or for an
/// annotated fn's call, which never shows an admitted one, maybe a bare admission: see
/// [`Asked`]).
pub(super) struct RequestIn<'a, A> {
    request: Request<'a>,
    hash: Option<NonZeroU64>,
    answer: PhantomData<fn() -> A>,
}

impl<'a, A> RequestIn<'a, A> {
    #[inline(always)]
    pub(super) fn new(request: Request<'a>, hash: Option<NonZeroU64>) -> Self {
        RequestIn {
            request,
            hash,
            answer: PhantomData,
        }
    }
}

impl<A> Clone for RequestIn<'_, A> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for RequestIn<'_, A> {}

impl<A: Asked> Question for RequestIn<'_, A> {
    type Answer = A;

    #[inline(always)]
    fn store_answer_now(self, store: &dyn DynStore) -> Option<A> {
        A::ask(store, self.request, self.hash)
    }

    fn store_answer_later<'s>(self, store: &'s dyn DynStore) -> BoxFuture<'s, A>
    where
        Self: 's,
    {
        let request = self.request;
        Box::pin(async move { A::decided(store.decide(request).await) })
    }

    #[inline(always)]
    fn policy_answer(self, store: &dyn DynStore) -> A {
        A::decided(policy_answer_to(store, self.request))
    }
}

/// Whom the store is asked for: a call's site, or a stacked call's sites (each of which
/// carries the call's [`Site::failed`]).
pub(super) trait AskedFor {
    /// Whether the call's read or raise of the fleet's record failed unanswered: it is then
    /// answered by the store's failure policy, never asked of the store.
    fn answered_by_policy(&self) -> bool;
}

impl AskedFor for Site<'_> {
    #[inline(always)]
    fn answered_by_policy(&self) -> bool {
        self.failed
    }
}

impl AskedFor for [Site<'_>] {
    #[inline]
    fn answered_by_policy(&self) -> bool {
        self.iter().any(|site| site.failed)
    }
}

impl RateLimitService {
    /// The store's answer to `question`, asked for `asked_for`, when it decides at once
    /// (`None`, nothing spent, when it must be awaited: [`ask_store_later`](Self::ask_store_later));
    /// the failure policy's where the call's read or raise of the fleet's record failed
    /// unanswered (see the module's docs). Every decision the service asks its store for at
    /// once is asked here.
    #[inline(always)]
    pub(super) fn ask_store<Q: Question>(
        &self,
        asked_for: &(impl AskedFor + ?Sized),
        question: Q,
    ) -> Option<Q::Answer> {
        let store = &*self.inner.store;
        match asked_for.answered_by_policy() {
            false => question.store_answer_now(store),
            true => Some(question.policy_answer(store)),
        }
    }

    /// [`ask_store`](Self::ask_store)'s awaited form: the store's awaited answer to
    /// `question`, or the failure policy's (see the module's docs). Every decision the
    /// service awaits from its store is asked here.
    pub(super) async fn ask_store_later<Q: Question>(
        &self,
        asked_for: &(impl AskedFor + ?Sized),
        question: Q,
    ) -> Q::Answer {
        let store = &*self.inner.store;
        match asked_for.answered_by_policy() {
            false => question.store_answer_later(store).await,
            true => question.policy_answer(store),
        }
    }
}

/// The failure policy's answer to a call's `request` ([`Store::answer_failure`]), out of the
/// way of every call the store is asked for (taking the request, not the question around
/// it: an annotated call's question, passed whole, was copied on the way to the store, 12
/// instructions a call).
///
/// [`Store::answer_failure`]: crate::store::Store::answer_failure
#[cold]
#[inline(never)]
fn policy_answer_to(store: &dyn DynStore, request: Request<'_>) -> Result<Decision, Error> {
    store.answer_failure(request, super::horizon::unanswered())
}

/// [`policy_answer_to`] of a stacked call (or a call with a transition's old states).
#[cold]
#[inline(never)]
fn policy_answer_to_all(
    store: &dyn DynStore,
    stacked: Stacked<'_>,
) -> Result<Vec<Decision>, Error> {
    store.answer_failure_all(stacked, super::horizon::unanswered())
}
