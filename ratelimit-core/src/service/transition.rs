//! A call during a reload's transition on other states than its own: a limit whose window,
//! strategy, tier name or key prefix a reload changed reads a fresh state, so for one old
//! window each call is decided on the old states (under their old quotas) and the new one as
//! one, all or nothing: the switch never hands out a fresh budget on top of what the old
//! window spent. (A limit on the same state needs none of this: `Site::quota_at`.)

use super::site::Site;
use super::RateLimitService;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Check, Mode, Stacked, StoreKey};

impl RateLimitService {
    /// The call decided on its state and the old ones at once when the store can; `None`,
    /// nothing spent, when it must be awaited ([`decide_both`](Self::decide_both)).
    #[cold]
    pub(super) fn decide_both_now(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        store_key: &str,
        now: Nanos,
    ) -> Option<Result<Decision, Error>> {
        let old_keys = old_store_keys(site, key, now);
        let mut drained = None;
        let checks = checks(site, store_key, &old_keys, now, &mut drained);
        match stacked(site, &checks, now) {
            Ok(stacked) => Some(
                (self.inner.store.decide_all_now(stacked)?)
                    .and_then(|decided| one_of(decided, &checks)),
            ),
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
        now: Nanos,
    ) -> Result<Decision, Error> {
        let old_keys = old_store_keys(site, key, now);
        let mut drained = None;
        let checks = checks(site, store_key, &old_keys, now, &mut drained);
        let stacked = stacked(site, &checks, now)?;
        let decided = self.inner.store.decide_all(stacked).await;
        decided.and_then(|decided| one_of(decided, &checks))
    }
}

/// The store keys of the old states in force for user key `key` (checked with the call).
pub(super) fn old_store_keys(site: &Site<'_>, key: Option<&str>, now: Nanos) -> Vec<String> {
    site.other_states_at(now)
        .map(|old| {
            let mut out = String::with_capacity(64);
            old.key.write(&mut out, key);
            out
        })
        .collect()
}

/// The old states' checks, in the order of [`old_store_keys`].
pub(super) fn old_checks<'a>(
    site: &'a Site<'_>,
    old_keys: &'a [String],
    now: Nanos,
) -> impl Iterator<Item = Check<'a>> {
    site.other_states_at(now)
        .zip(old_keys)
        .map(|(old, key)| Check {
            key: StoreKey::composed(key),
            quota: &old.quota,
            cost: site.cost,
        })
}

/// The site's own state first, under the quota it is held to now (a reload's tighter one on
/// the same state while it lasts: `Site::quota_at`, as a call with no old states is), then
/// the old ones. Under the site's own quota, a call with old states to check was decided on
/// its own state by the new, looser limit: 3 admitted where the first configuration's 2
/// still held (probes_prepared_shortcuts).
fn checks<'a>(
    site: &'a Site<'_>,
    store_key: &'a str,
    old_keys: &'a [String],
    now: Nanos,
    drained: &'a mut Option<Quota>,
) -> Vec<Check<'a>> {
    let own = Check {
        key: StoreKey::composed(store_key),
        quota: site.quota_at(now, drained),
        cost: site.cost,
    };
    std::iter::once(own)
        .chain(old_checks(site, old_keys, now))
        .collect()
}

fn stacked<'a>(site: &Site<'_>, checks: &'a [Check<'a>], now: Nanos) -> Result<Stacked<'a>, Error> {
    let mode = Mode::of(site.spend, false);
    Stacked::new(checks, now, mode)
}

/// [`one`] of a store's answer to `checks` (the call's state and the old ones): any other
/// number of decisions, or one not under its check's quota (`Decision::is_under`), is a store
/// answering another question, an error. Taken as it
/// came, an answer without the old states' decisions admitted a call those refused: the
/// old window a reload holds a moved limit to, passed on the store's word (2 spent of a
/// minute's 2, then admitted under the new hour's limit: probes_custom_store).
fn one_of(decisions: Vec<Decision>, checks: &[Check<'_>]) -> Result<Decision, Error> {
    let under = |(d, check): (&Decision, &Check<'_>)| d.is_under(check.quota);
    if decisions.len() != checks.len() || !decisions.iter().zip(checks).all(under) {
        return Err(crate::algorithm::Undecidable::UnexpectedState.into());
    }
    one(decisions)
}

/// The call's one decision from its state's and the old ones': when every one admits, the
/// one with the least remaining (what the next calls will find); else the refusal to wait
/// for longest. No decision at all is a store answering another question: an error, never an
/// admission.
pub(super) fn one(decisions: Vec<Decision>) -> Result<Decision, Error> {
    let refused = decisions.iter().any(|d| !d.allowed);
    let pick = decisions.into_iter().reduce(|a, b| match refused {
        true if !b.allowed && (a.allowed || b.retry_after > a.retry_after) => b,
        true => a,
        false if b.remaining < a.remaining => b,
        false => a,
    });
    pick.ok_or_else(|| crate::algorithm::Undecidable::UnexpectedState.into())
}
