//! [`DynStore`]: [`Store`] with its futures boxed, so the service holds any store behind one
//! pointer; every `Store` is one, by the blanket impl here.

use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;

use super::{Adjustment, Horizon, Refund, Request, Stacked, Store, Told};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};

/// A boxed future, for stores behind `dyn`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Store`] with its futures boxed, so the service can hold any store behind one pointer.
pub(crate) trait DynStore: Send + Sync + 'static {
    fn decide<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Result<Decision, Error>>;
    fn decide_all<'a>(
        &'a self,
        stacked: Stacked<'a>,
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>>;
    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>>;
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>>;
    fn hash_of(&self, key: &str) -> Option<u64>;
    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: NonZeroU64,
    ) -> Option<Result<Decision, Error>>;
    fn decide_now_told(&self, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Told>;
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>>;
    fn decides_at_once(&self) -> bool;
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError>;
    fn refunds(&self) -> bool;
    fn refund<'a>(&'a self, refund: Refund<'a>) -> BoxFuture<'a, Result<bool, Error>>;
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>>;
    fn refund_all<'a>(&'a self, refunds: &'a [Refund<'a>]) -> BoxFuture<'a, Result<bool, Error>>;
    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>>;
    fn adjusts(&self) -> bool;
    fn carries(&self) -> bool;
    fn adjust<'a>(&'a self, adjustment: Adjustment<'a>) -> BoxFuture<'a, Result<u64, Error>>;
    fn records_horizon(&self) -> bool;
    fn horizon<'a>(
        &'a self,
        prefix: &'a str,
        raise: Horizon,
    ) -> BoxFuture<'a, Result<Horizon, Error>>;
    fn records_lost(&self) -> u64;
    fn connects_first(&self) -> bool;
    fn answers_failures(&self) -> bool;
    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error>;
    fn answer_failure_all(
        &self,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error>;
}

impl<S: Store> DynStore for S {
    fn decide<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Result<Decision, Error>> {
        Box::pin(Store::decide(self, request))
    }
    fn decide_all<'a>(
        &'a self,
        stacked: Stacked<'a>,
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>> {
        Box::pin(Store::decide_all(self, stacked))
    }
    fn reset<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(Store::reset(self, key))
    }
    #[inline]
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        Store::decide_now(self, request)
    }
    fn hash_of(&self, key: &str) -> Option<u64> {
        Store::hash_of(self, key)
    }
    #[inline]
    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        Store::decide_now_hashed(self, request, hash)
    }
    #[inline]
    fn decide_now_told(&self, request: Request<'_>, hash: Option<NonZeroU64>) -> Option<Told> {
        Store::decide_now_told(self, request, hash)
    }
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(self, stacked)
    }
    fn decides_at_once(&self) -> bool {
        Store::decides_at_once(self)
    }
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        if !Store::blocks(self) {
            without_blocks(quota)?;
        }
        Store::supports(self, quota)
    }
    fn refunds(&self) -> bool {
        Store::refunds(self)
    }
    fn refund<'a>(&'a self, refund: Refund<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(Store::refund(self, refund))
    }
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        Store::refund_now(self, refund)
    }
    fn refund_all<'a>(&'a self, refunds: &'a [Refund<'a>]) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(Store::refund_all(self, refunds))
    }
    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        Store::refund_all_now(self, refunds)
    }
    fn adjusts(&self) -> bool {
        Store::adjusts(self)
    }
    fn carries(&self) -> bool {
        Store::carries(self)
    }
    fn adjust<'a>(&'a self, adjustment: Adjustment<'a>) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(Store::adjust(self, adjustment))
    }
    fn records_horizon(&self) -> bool {
        Store::records_horizon(self)
    }
    fn horizon<'a>(
        &'a self,
        prefix: &'a str,
        raise: Horizon,
    ) -> BoxFuture<'a, Result<Horizon, Error>> {
        Box::pin(Store::horizon(self, prefix, raise))
    }
    #[inline]
    fn records_lost(&self) -> u64 {
        Store::records_lost(self)
    }
    fn connects_first(&self) -> bool {
        Store::connects_first(self)
    }
    fn answers_failures(&self) -> bool {
        Store::answers_failures(self)
    }
    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error> {
        Store::answer_failure(self, request, error)
    }
    fn answer_failure_all(
        &self,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error> {
        Store::answer_failure_all(self, stacked, error)
    }
}

/// A quota with a block, on a store that keeps none: not enforceable.
fn without_blocks(quota: &Quota) -> Result<(), QuotaError> {
    match quota.block() {
        Some(_) => Err(QuotaError::Unsupported {
            store: "this store",
            reason: "it keeps no blocks (`block_for`): the memory and Redis stores do",
        }),
        None => Ok(()),
    }
}
