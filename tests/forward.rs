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

/// The [`Hooks`] trait and [`Forward`]'s [`Store`] impl from one list of the trait's
/// methods: each hook, left out, forwards to the store inside, and each method of the store
/// asks its hook. The hidden seams are written out after the list.
macro_rules! forwarded {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;)*) => {
        /// What a [`Forward`] store answers itself: each method as the [`Store`] method of
        /// its name, given the store inside; left out, it forwards to that store. The hidden
        /// seams are the exception: `hash_of` is left at the trait's default (no hash) and
        /// `decide_now_hashed` / `decide_now_told` answer through the hooks' own
        /// `decide_now`, as the trait's defaults do for a store of one's own, so a hook on
        /// `decide_now` is never passed by.
        pub trait Hooks<S: Store>: Send + Sync + 'static {
            $(fn $name(&self, inner: &S $(, $arg: $ty)*) -> $out {
                inner.$name($($arg),*)
            })*

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
        }

        impl<S: Store, H: Hooks<S>> Store for Forward<S, H> {
            $(fn $name(&self $(, $arg: $ty)*) -> $out {
                self.hooks.$name(&self.inner $(, $arg)*)
            })*

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

            fn decide_now_told(
                &self,
                request: Request<'_>,
                hash: Option<NonZeroU64>,
            ) -> Option<Told> {
                self.hooks.decide_now_told(&self.inner, request, hash)
            }
        }
    };
}

forwarded! {
    fn decide(&self, request: Request<'_>) -> impl Future<Output = Result<Decision, Error>> + Send;
    fn decide_all(&self, stacked: Stacked<'_>)
        -> impl Future<Output = Result<Vec<Decision>, Error>> + Send;
    fn reset(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>>;
    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>>;
    fn decides_at_once(&self) -> bool;
    fn refunds(&self) -> bool;
    fn refund(&self, refund: Refund<'_>) -> impl Future<Output = Result<bool, Error>> + Send;
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>>;
    fn refund_all(&self, refunds: &[Refund<'_>])
        -> impl Future<Output = Result<bool, Error>> + Send;
    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>>;
    fn adjusts(&self) -> bool;
    fn adjust(&self, adjustment: Adjustment<'_>)
        -> impl Future<Output = Result<u64, Error>> + Send;
    fn blocks(&self) -> bool;
    fn carries(&self) -> bool;
    fn supports(&self, quota: &Quota) -> Result<(), QuotaError>;
    fn records_horizon(&self) -> bool;
    fn horizon(&self, prefix: &str, raise: Horizon)
        -> impl Future<Output = Result<Horizon, Error>> + Send;
    fn records_lost(&self) -> u64;
    fn connects_first(&self) -> bool;
    fn answers_failures(&self) -> bool;
    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error>;
    fn answer_failure_all(&self, stacked: Stacked<'_>, error: Error)
        -> Result<Vec<Decision>, Error>;
}
