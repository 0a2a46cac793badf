//! A call during a reload's transition on another state than its own: a limit whose window,
//! strategy, tier name or key prefix a reload changed reads a fresh state, so for one old
//! window each call is decided on the old state (under the old quota) and the new one (under
//! the new quota) as one, all or nothing: the switch never hands out a fresh budget on top of
//! what the old window spent. (A limit on the same state needs none of this: `Site::quota_at`.)

use super::site::{Site, Transition};
use super::RateLimitService;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::store::{Check, Mode, Stacked, StoreKey};

impl RateLimitService {
    /// The call decided on both states at once when the store can; `None`, nothing spent,
    /// when it must be awaited ([`decide_both`](Self::decide_both)).
    #[cold]
    pub(super) fn decide_both_now(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        store_key: &str,
        old: &Transition,
        now: Nanos,
    ) -> Option<Result<Decision, Error>> {
        let old_key = old_store_key(old, key);
        let checks = checks(site, store_key, &old_key, old);
        match stacked(site, &checks, now) {
            Ok(stacked) => Some(self.inner.store.decide_all_now(stacked)?.and_then(one)),
            Err(e) => Some(Err(e)),
        }
    }

    /// [`decide_both_now`](Self::decide_both_now), awaited.
    #[cold]
    pub(super) async fn decide_both(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        store_key: &str,
        old: &Transition,
        now: Nanos,
    ) -> Result<Decision, Error> {
        let old_key = old_store_key(old, key);
        let checks = checks(site, store_key, &old_key, old);
        let stacked = stacked(site, &checks, now)?;
        self.inner.store.decide_all(stacked).await.and_then(one)
    }
}

/// The old state's store key for user key `key` (checked with the call).
fn old_store_key(old: &Transition, key: Option<&str>) -> String {
    let mut out = String::with_capacity(64);
    if let Some(around) = &old.old_key {
        around.write(&mut out, key);
    }
    out
}

/// The new state first, then the old.
fn checks<'a>(
    site: &'a Site<'_>,
    store_key: &'a str,
    old_key: &'a str,
    old: &'a Transition,
) -> [Check<'a>; 2] {
    [
        Check {
            key: StoreKey::composed(store_key),
            quota: &site.quota,
            cost: site.cost,
        },
        Check {
            key: StoreKey::composed(old_key),
            quota: &old.quota,
            cost: site.cost,
        },
    ]
}

fn stacked<'a>(site: &Site<'_>, checks: &'a [Check<'a>], now: Nanos) -> Result<Stacked<'a>, Error> {
    let mode = if site.spend { Mode::Spend } else { Mode::Look };
    Stacked::new(checks, now, mode)
}

/// The call's one decision from the two: the new limit's when both admit (or when it refuses),
/// else the old one's refusal. Anything but two decisions is a store answering another
/// question: an error, never an admission.
fn one(decisions: Vec<Decision>) -> Result<Decision, Error> {
    let [new, old]: [Decision; 2] = decisions
        .try_into()
        .map_err(|_| Error::from(crate::algorithm::Undecidable::UnexpectedState))?;
    Ok(if new.allowed && !old.allowed {
        old
    } else {
        new
    })
}
