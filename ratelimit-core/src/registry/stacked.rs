//! The entry points of a fn with several limits (stacked attributes): every limit decided by
//! one limiter as one decision, all or nothing.

use super::declaration::Declaration;
use super::runtime::{not_initialized, service_for};
use crate::error::Error;
use crate::service::{Call, RateLimitService, SpentAll};

/// [`acquire`](super::acquire) for a fn with several limits (stacked attributes): one decision, all or
/// nothing.
#[doc(hidden)]
pub async fn acquire_all(limits: &[Limit<'_>]) -> Result<(), Error> {
    let service = service_for_all(limits)?;
    service.enforce_stacked(&all_parts(limits)).await.map(drop)
}

/// [`acquire_all`] for a sync fn; see [`acquire_now`](super::acquire_now).
#[doc(hidden)]
pub fn acquire_all_now(limits: &[Limit<'_>]) -> Result<(), Error> {
    let service = service_for_all(limits)?;
    let function = limits[0].0.function();
    service
        .enforce_stacked_now(&all_parts(limits), function)
        .map(drop)
}

/// [`acquire_all`] for a fn with several limits that counts only some outcomes: the spends
/// kept for [`settle`](super::settle), which gives them back together (to every limit, or to none).
#[doc(hidden)]
pub async fn acquire_all_spent(limits: &[Limit<'_>]) -> Result<SpentAll, Error> {
    let service = service_for_all(limits)?;
    service.spend_stacked(&all_parts(limits), None, true).await
}

/// [`acquire_all_spent`] for a sync fn; see [`acquire_now`](super::acquire_now).
#[doc(hidden)]
pub fn acquire_all_spent_now(limits: &[Limit<'_>]) -> Result<SpentAll, Error> {
    let service = service_for_all(limits)?;
    let function = limits[0].0.function();
    let parts = all_parts(limits);
    let spent = service.spend_stacked(&parts, Some(function), true);
    crate::drivers::poll_once(spent, Error::SyncOnWaitingStore { function })
}

/// One limit of a call: the declaration, the user key, the tier chosen for this call, the cost.
type Limit<'a> = (&'static Declaration, Option<&'a str>, Option<&'a str>, u64);

/// The service of a fn's stacked limits: they are decided as one, by one limiter (the macros
/// make sure they name one); a limit on another is refused, never decided by the wrong one.
fn service_for_all(limits: &[Limit<'_>]) -> Result<RateLimitService, Error> {
    let Some(&(first, ..)) = limits.first() else {
        return Err(Error::NotInitialized { function: "?" });
    };
    if let Some(&(other, ..)) = limits
        .iter()
        .find(|l| !std::ptr::eq(l.0.owner(), first.owner()))
    {
        return Err(not_initialized(other));
    }
    service_for(first)
}

/// The stacked limits of one call, each with its user key.
fn all_parts<'a>(limits: &[Limit<'a>]) -> Vec<(Option<&'a str>, Call<'a>)> {
    limits
        .iter()
        .map(|&(declaration, key, tier, cost)| (key, declaration.call(tier, cost)))
        .collect()
}
