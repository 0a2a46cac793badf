//! A store of one's own over another store: [`Forward`] forwards every method of the
//! [`Store`] trait to the store inside, except those its [`Hooks`] answer themselves. A test
//! that needs "that store, except ..." writes the exception alone.

use std::future::Future;
use std::num::NonZeroU64;

use ratelimit::store::{Adjustment, Horizon, Refund, Request, Stacked, Store, Told};
use ratelimit::{Decision, Error, Quota, QuotaError};

/// `inner`'s answers, except those `hooks` gives itself.
#[derive(Clone, Default)]
pub struct Forward<S, H> {
    pub inner: S,
    pub hooks: H,
}

impl<S, H> Forward<S, H> {
    /// `inner` behind `hooks`.
    pub fn new(inner: S, hooks: H) -> Self {
        Forward { inner, hooks }
    }
}

/// What a [`Forward`] store answers itself: each method as the [`Store`] method of its
/// name, given the store inside; left out, it forwards to that store. The hidden seams are
/// the exception: `hash_of` is left at the trait's default (no hash) and
/// `decide_now_hashed` / `decide_now_told` answer through the hooks' own `decide_now`, as the
/// trait's defaults do for a store of one's own, so a hook on `decide_now` is never passed by.
pub trait Hooks<S: Store>: Send + Sync + 'static {
    fn decide(
        &self,
        inner: &S,
        request: Request<'_>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        inner.decide(request)
    }

    fn decide_all(
        &self,
        inner: &S,
        stacked: Stacked<'_>,
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send {
        inner.decide_all(stacked)
    }

    fn reset(&self, inner: &S, key: &str) -> impl Future<Output = Result<bool, Error>> + Send {
        inner.reset(key)
    }

    fn decide_now(&self, inner: &S, request: Request<'_>) -> Option<Result<Decision, Error>> {
        inner.decide_now(request)
    }

    fn hash_of(&self, inner: &S, key: &str) -> Option<u64> {
        let _ = (inner, key);
        None
    }

    fn decide_now_hashed(
        &self,
        inner: &S,
        request: Request<'_>,
        hash: NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        let _ = hash;
        self.decide_now(inner, request)
    }

    fn decide_now_told(
        &self,
        inner: &S,
        request: Request<'_>,
        hash: Option<NonZeroU64>,
    ) -> Option<Told> {
        let decided = match hash {
            Some(hash) => self.decide_now_hashed(inner, request, hash),
            None => self.decide_now(inner, request),
        };
        decided.map(Told::Decided)
    }

    fn decide_all_now(
        &self,
        inner: &S,
        stacked: Stacked<'_>,
    ) -> Option<Result<Vec<Decision>, Error>> {
        inner.decide_all_now(stacked)
    }

    fn decides_at_once(&self, inner: &S) -> bool {
        inner.decides_at_once()
    }

    fn refunds(&self, inner: &S) -> bool {
        inner.refunds()
    }

    fn refund(
        &self,
        inner: &S,
        refund: Refund<'_>,
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        inner.refund(refund)
    }

    fn refund_now(&self, inner: &S, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        inner.refund_now(refund)
    }

    fn refund_all(
        &self,
        inner: &S,
        refunds: &[Refund<'_>],
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        inner.refund_all(refunds)
    }

    fn refund_all_now(&self, inner: &S, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        inner.refund_all_now(refunds)
    }

    fn adjusts(&self, inner: &S) -> bool {
        inner.adjusts()
    }

    fn adjust(
        &self,
        inner: &S,
        adjustment: Adjustment<'_>,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        inner.adjust(adjustment)
    }

    fn blocks(&self, inner: &S) -> bool {
        inner.blocks()
    }

    fn carries(&self, inner: &S) -> bool {
        inner.carries()
    }

    fn supports(&self, inner: &S, quota: &Quota) -> Result<(), QuotaError> {
        inner.supports(quota)
    }

    fn records_horizon(&self, inner: &S) -> bool {
        inner.records_horizon()
    }

    fn horizon(
        &self,
        inner: &S,
        prefix: &str,
        raise: Horizon,
    ) -> impl Future<Output = Result<Horizon, Error>> + Send {
        inner.horizon(prefix, raise)
    }

    fn answers_failures(&self, inner: &S) -> bool {
        inner.answers_failures()
    }

    fn answer_failure(
        &self,
        inner: &S,
        request: Request<'_>,
        error: Error,
    ) -> Result<Decision, Error> {
        inner.answer_failure(request, error)
    }

    fn answer_failure_all(
        &self,
        inner: &S,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error> {
        inner.answer_failure_all(stacked, error)
    }
}

impl<S: Store, H: Hooks<S>> Store for Forward<S, H> {
    fn decide(&self, request: Request<'_>) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.hooks.decide(&self.inner, request)
    }

    fn decide_all(
        &self,
        stacked: Stacked<'_>,
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send {
        self.hooks.decide_all(&self.inner, stacked)
    }

    fn reset(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send {
        self.hooks.reset(&self.inner, key)
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.hooks.decide_now(&self.inner, request)
    }

    fn hash_of(&self, key: &str) -> Option<u64> {
        self.hooks.hash_of(&self.inner, key)
    }

    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        self.hooks.decide_now_hashed(&self.inner, request, hash)
    }

    fn decide_now_told(&self, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Told> {
        self.hooks.decide_now_told(&self.inner, request, hash)
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        self.hooks.decide_all_now(&self.inner, stacked)
    }

    fn decides_at_once(&self) -> bool {
        self.hooks.decides_at_once(&self.inner)
    }

    fn refunds(&self) -> bool {
        self.hooks.refunds(&self.inner)
    }

    fn refund(&self, refund: Refund<'_>) -> impl Future<Output = Result<bool, Error>> + Send {
        self.hooks.refund(&self.inner, refund)
    }

    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        self.hooks.refund_now(&self.inner, refund)
    }

    fn refund_all(
        &self,
        refunds: &[Refund<'_>],
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        self.hooks.refund_all(&self.inner, refunds)
    }

    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        self.hooks.refund_all_now(&self.inner, refunds)
    }

    fn adjusts(&self) -> bool {
        self.hooks.adjusts(&self.inner)
    }

    fn adjust(
        &self,
        adjustment: Adjustment<'_>,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        self.hooks.adjust(&self.inner, adjustment)
    }

    fn blocks(&self) -> bool {
        self.hooks.blocks(&self.inner)
    }

    fn carries(&self) -> bool {
        self.hooks.carries(&self.inner)
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        self.hooks.supports(&self.inner, quota)
    }

    fn records_horizon(&self) -> bool {
        self.hooks.records_horizon(&self.inner)
    }

    fn horizon(
        &self,
        prefix: &str,
        raise: Horizon,
    ) -> impl Future<Output = Result<Horizon, Error>> + Send {
        self.hooks.horizon(&self.inner, prefix, raise)
    }

    fn answers_failures(&self) -> bool {
        self.hooks.answers_failures(&self.inner)
    }

    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error> {
        self.hooks.answer_failure(&self.inner, request, error)
    }

    fn answer_failure_all(
        &self,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error> {
        self.hooks.answer_failure_all(&self.inner, stacked, error)
    }
}
