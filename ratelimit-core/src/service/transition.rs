//! A call during a reload's transition on other states than its own: a limit whose window,
//! strategy, tier name or key prefix a reload changed reads a fresh state, so for one old
//! window each call is decided on the old states (under their old quotas) and the new one as
//! one, all or nothing: the switch never hands out a fresh budget on top of what the old
//! window spent. (A limit on the same state needs none of this: `Site::quota_at`.)

use std::time::Duration;

use super::held::OldState;
use super::site::Site;
use super::RateLimitService;
use crate::algorithm::{precheck, Algorithm, Gcra, MAX_NOW};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, MAX_TOLERANCE};
use crate::store::{Carry, Check, Mode, Stacked, StoreKey};
use crate::syntax::Strategy;

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
        let old_quotas = old_quotas(site, now);
        let mut drained = None;
        let checks = checks(site, store_key, &old_keys, &old_quotas, now, &mut drained);
        let carried: Vec<Carry<'_>> = carries(site, &old_keys, now, (checks[0], 0), 1).collect();
        match stacked(site, &checks, &carried, now) {
            Ok(stacked) => Some(
                (self.ask_store(site, stacked)?)
                    .and_then(|decided| one_of(site, now, decided, &checks)),
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
        let old_quotas = old_quotas(site, now);
        let mut drained = None;
        let checks = checks(site, store_key, &old_keys, &old_quotas, now, &mut drained);
        let carried: Vec<Carry<'_>> = carries(site, &old_keys, now, (checks[0], 0), 1).collect();
        let stacked = stacked(site, &checks, &carried, now)?;
        let decided = self.ask_store_later(site, stacked).await;
        decided.and_then(|decided| one_of(site, now, decided, &checks))
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

/// The quotas of the old states a call at `now` is decided on, of those [`old_store_keys`]
/// wrote the keys of, in order ([`OldState::quota_at`]).
pub(super) fn old_quotas(site: &Site<'_>, now: Nanos) -> Vec<Quota> {
    (site.other_states_at(now))
        .filter(|old| old.decided_at(now))
        .map(|old| old.quota_at(now, site.cost))
        .collect()
}

/// The checks of the old states a call at `now` is decided on, of those
/// [`old_store_keys`] wrote the keys of, under [`old_quotas`], in order.
pub(super) fn old_checks<'a>(
    site: &'a Site<'_>,
    old_keys: &'a [String],
    quotas: &'a [Quota],
    now: Nanos,
) -> impl Iterator<Item = Check<'a>> {
    site.other_states_at(now)
        .zip(old_keys)
        .filter(move |(old, _)| old.decided_at(now))
        .zip(quotas)
        .map(|((_, key), quota)| Check {
            key: StoreKey::composed(key),
            quota,
            cost: site.cost,
        })
}

/// The old states a call at `now` carries into its own state (`own`, the check at `into`),
/// of those [`old_store_keys`] wrote the keys of: what a token bucket's debt or a block
/// outlasts the old window by is not forgotten when the old state stops being decided (a
/// bucket of 15 spent and moved to another window gave 15 again a minute later where it
/// refills 10, probes_transition_others; an hour's block, forgotten after the minute).
///
/// While an old state is decided with the call (its check the `k`-th old one, at `olds_at +
/// k`), its block alone, both ways ([`Carry::block_only`], `OldState::block_carried_at`):
/// the two states are one limit's, so a block on either holds both, and a refusal by the
/// other then is one during that block, which begins none of its own. Carried one way
/// only, a block begun on the moved state by a refusal the old one admitted (a penalty
/// spent on the moved state alone: `adjust.rs`) was begun again on the old state a second
/// later, 300 s from then (probes_carry_chains).
pub(super) fn carries<'a>(
    site: &'a Site<'_>,
    old_keys: &'a [String],
    now: Nanos,
    (own, into): (Check<'a>, usize),
    olds_at: usize,
) -> impl Iterator<Item = Carry<'a>> {
    let olds = move || site.other_states_at(now).zip(old_keys);
    let into_own = olds().filter_map(move |(old, key)| {
        let block_only = match (old.carried_at(now), old.block_carried_at(now)) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => return None,
        };
        Some(Carry {
            from: StoreKey::composed(key),
            quota: &old.quota,
            into,
            block_only,
        })
    });
    // After those, so that a block carried in from one old state reaches every other.
    let into_olds = (olds().filter(move |(old, _)| old.decided_at(now)))
        .enumerate()
        .filter(move |(_, (old, _))| old.block_carried_at(now))
        .map(move |(k, _)| Carry {
            from: own.key,
            quota: own.quota,
            into: olds_at + k,
            block_only: true,
        });
    into_own.chain(into_olds)
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
    old_quotas: &'a [Quota],
    now: Nanos,
    drained: &'a mut Option<Quota>,
) -> Vec<Check<'a>> {
    let own = Check {
        key: StoreKey::composed(store_key),
        quota: site.quota_at(now, drained),
        cost: site.cost,
    };
    std::iter::once(own)
        .chain(old_checks(site, old_keys, old_quotas, now))
        .collect()
}

fn stacked<'a>(
    site: &Site<'_>,
    checks: &'a [Check<'a>],
    carried: &'a [Carry<'a>],
    now: Nanos,
) -> Result<Stacked<'a>, Error> {
    let mode = Mode::of(site.spend, false);
    // The old states after the site's own ([`checks`]): decided first where a store decides
    // in steps (`Stacked::with_old_states_from`).
    Ok(Stacked::carrying(checks, carried, now, mode)?.with_old_states_from(1))
}

/// [`one`] of a store's answer to `checks` (the call's state and the old ones): any other
/// number of decisions, or one not under its check's quota (`Decision::is_under`), is a store
/// answering another question, an error. Taken as it
/// came, an answer without the old states' decisions admitted a call those refused: the
/// old window a reload holds a moved limit to, passed on the store's word (2 spent of a
/// minute's 2, then admitted under the new hour's limit: probes_custom_store).
fn one_of(
    site: &Site<'_>,
    now: Nanos,
    decisions: Vec<Decision>,
    checks: &[Check<'_>],
) -> Result<Decision, Error> {
    let under = |(d, check): (&Decision, &Check<'_>)| d.is_under(check.quota);
    if decisions.len() != checks.len() || !decisions.iter().zip(checks).all(under) {
        return Err(crate::algorithm::Undecidable::UnexpectedState.into());
    }
    one_at(site, now, decisions)
}

/// [`one`] of the decisions at `site` at `now` (its own state's first, then the old
/// states'), a refusal's wait made one its own state admits at too ([`wait_at`]): the old
/// states' quotas hold until their windows end and admit from their wait on, but a
/// draining cut on its own state may refuse then what it admits now (probes_draining_attacks:
/// its own state admitting under 2 tokens of 30 s, an old one refusing "retry after 12 s",
/// and 12 s later its own refusing under the cut to 1, "18 s").
pub(super) fn one_at(
    site: &Site<'_>,
    now: Nanos,
    decisions: Vec<Decision>,
) -> Result<Decision, Error> {
    let own = decisions.first().map(|d| (d.allowed, d.reset_after));
    let passes = after_old_states(site, now, &decisions);
    let mut one = one(decisions)?;
    if let (Some((allowed, debt)), Some(_), false) = (own, site.transition, one.allowed) {
        if let (Some(told), Some(passes)) = (one.retry_after, passes) {
            let at_least = Duration::from_nanos(passes.saturating_sub(now));
            one.retry_after = Some(told.max(at_least));
        }
        wait_at(site, now, allowed, debt, &mut one);
    }
    Ok(one)
}

/// When a call refused at `site` at `now` passes the old states it was decided on (their
/// `decisions`, after its own state's) whose token-bucket debt is carried into its own
/// state once their windows end (`OldState::then`); `None` with none. Past its window, such
/// a state's debt is carried into the site's, as time under whatever quota holds the site
/// then: the call passes once that leaves room for its cost, which is where the wait
/// reaches past its window, or where the old state refuses the call before it (under a
/// quota cut as its window ends, `OldState::quota_at`, a token less each interval, its debt
/// drains only about as fast as the cut tightens: admitting now, it may refuse the same call
/// later; then from the old bucket full again or the window's end, whichever is first).
/// Longer than the least wait at times, never one the call is refused at again: the store's
/// wait, under the quotas in force now, sent the call back to the same refusal
/// (probes_draining_attacks: 6 a half minute moved to 5 per 0.2 s, refused at +90 s
/// "retry after 150 s", refused then by the carried debt). Waiting for the whole carried
/// debt to drain held a call refused at +55 s for 89 s where it passes at +60 s, and the
/// queue's waiters with it (probes_carry_attacks).
fn after_old_states(site: &Site<'_>, now: Nanos, decisions: &[Decision]) -> Option<Nanos> {
    let cost = site.cost;
    let olds: Vec<(&OldState, Nanos)> = (site.other_states_at(now))
        .filter(|old| old.decided_at(now))
        .zip(decisions.iter().skip(1))
        .filter(|(old, _)| old.then > 0)
        .map(|(old, d)| {
            // A look's `reset_at` is after the call.
            let spent = match d.allowed {
                true => old.quota.interval_nanos().saturating_mul(cost),
                false => 0,
            };
            (old, full_at(d, now).saturating_sub(spent))
        })
        .collect();
    if olds.is_empty() {
        return None;
    }
    // Whether the old state admits the call at `at` while decided on: the bucket's rule
    // under the quota in force then, the cut one a token less each interval.
    let admits = |old: &OldState, full_at: Nanos, at: Nanos| {
        let quota = old.quota_at(at, cost);
        let owed = full_at.saturating_sub(at);
        let spends = quota.interval_nanos().saturating_mul(cost);
        owed.saturating_add(spends) <= quota.tolerance_nanos()
    };
    // Past its window, its debt is carried into the site's state (`Carry::debt`): that state
    // full again no sooner than the old one, which admits the call once that leaves its cost
    // within the tolerance of the quota then.
    let own_full = decisions.first().map_or(0, |d| {
        let spent = site.quota_at(now, &mut None).interval_nanos();
        full_at(d, now).saturating_sub(spent.saturating_mul(cost) * u64::from(d.allowed))
    });
    let carried = |full_at: Nanos, at: Nanos| {
        let quota = *site.quota_at(at, &mut None);
        let spends = quota.interval_nanos().saturating_mul(cost);
        (own_full.max(at).max(full_at))
            .saturating_add(spends)
            .saturating_sub(quota.tolerance_nanos())
    };
    let told = decisions.iter().filter_map(|d| d.retry_after).max();
    let mut at = now.saturating_add(told.map_or(0, |w| w.as_nanos() as Nanos));
    loop {
        let before = at;
        for &(old, full_at) in &olds {
            if !old.decided_at(at) {
                at = at.max(carried(full_at, at));
            } else if !admits(old, full_at, at) {
                at = at.max(full_at.min(old.until));
            }
        }
        if at == before {
            return Some(at);
        }
    }
}

/// When decision `d` of a call at `now` says its state is full again, on the service's clock
/// (`now`'s): the store's `reset_at` where it is on that clock (within the millisecond
/// `reset_after` is rounded up to from `now`), else `now` plus `reset_after`. The Redis store
/// decides on Redis' clock and names Redis' times: read beside the service's `now` and its
/// transitions' ends, a bucket refused "retry after 5.993 s" by the old state of a moved
/// limit was told 60 s, Redis' clock a few milliseconds on from a hand-driven one equal to it
/// (probes_transition_clocks_redis; on one machine's clock, Redis reads `TIME` after the
/// service reads its own: less than the millisecond the waits are rounded to was enough);
/// a store's clock 10 s behind the service's told 6 s where
/// an old bucket draining as its window ends admits the call only 30 s on, refused again at
/// the wait (probes_transition_clocks). Counted from `now`, a wait is one clock's, at most a
/// millisecond longer.
fn full_at(d: &Decision, now: Nanos) -> Nanos {
    const MILLI: Nanos = 1_000_000;
    let after = d.reset_after.as_nanos().min(u128::from(Nanos::MAX)) as Nanos;
    let from_now = now.saturating_add(after);
    match d.full_at() {
        at if at <= from_now && at.saturating_add(MILLI) > from_now => at,
        _ => from_now,
    }
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

/// A call's decision at `site`, a refusal during a reload's transition with the wait
/// [`wait_at`] tells: on an admission, one test on the way.
#[inline]
pub(super) fn retry(site: &Site<'_>, now: Nanos, decided: &mut Result<Decision, Error>) {
    if let Ok(d) = decided {
        if !d.allowed && site.transition.is_some() {
            // A copy: the site the hot path holds never escapes, so it stays in registers
            // (borrowed, `prepared.consume_now` paid 27 instructions more, cachegrind).
            wait_at(&{ *site }, now, false, d.reset_after, d);
        }
    }
}

/// `decided` (the store's decisions of a call's checks, those of `sites`' own states first,
/// in order) with each refusal on a site's own state given the wait [`wait_at`] tells.
pub(super) fn retried(sites: &[Site<'_>], now: Nanos, mut decided: Vec<Decision>) -> Vec<Decision> {
    for (site, decision) in sites.iter().zip(&mut decided) {
        if site.transition.is_some() && !decision.allowed {
            wait_at(site, now, false, decision.reset_after, decision);
        }
    }
    decided
}

/// A refusal at `site` at `now` while a reload's transition holds its own state (a token
/// bucket's) to an old quota: its `retry_after`, when the next quota in force does not
/// admit the same call then, made the first wait after which it does. The held quota is cut
/// as the old window ends (`Quota::draining_by`), a token less each interval, and the debt
/// drains a token an interval too: the store's answer (the next token under the cut in force
/// now) sent the call back into the same refusal, again and again until the window's end
/// (probes_draining_attacks: 10 a minute reloaded to 10 a second, all spent, refused at +30 s
/// "retry after 6 s", and refused so until +60 s). Likewise a wait past a transition's end,
/// where the next quota decides. The instants tried are those where the quota in force
/// changes or admits by its own rule: each entry's start, where its cut bottoms out at the
/// call's cost, where its bucket uncut admits, and the site's quota after the last; each
/// tried as `Site::quota_at` decides then (`Gcra`'s own rule), the debt read at most a
/// millisecond long (`reset_after`), so a wait found is one the call passes at. A wait may be
/// longer than the least: between a cut's steps the call may pass for a moment, which a
/// client waiting whole milliseconds would not hit. Nothing is changed on a quota with a
/// block (its wait is the store's: the later of the block's end and the state's own, in one
/// place, `blocked_verdict`) or where no instant tried admits the call. `admitted`
/// and `debt`: whether the site's own state admitted the call and its `reset_after` (with
/// old states, `decision` is theirs and its own state's admission; the wait stays no
/// shorter than `decision`'s, which theirs admit from: [`one_at`]).
#[cold]
#[inline(never)]
pub(super) fn wait_at(
    site: &Site<'_>,
    now: Nanos,
    admitted: bool,
    debt: Duration,
    decision: &mut Decision,
) -> Option<()> {
    let transition = site.transition?;
    let wait = decision.retry_after?;
    let quota_at = |at: Nanos| *site.quota_at(at, &mut None);
    let in_force = quota_at(now);
    if in_force.strategy() != Strategy::TokenBucket || in_force.block_nanos() > 0 {
        return None;
    }
    let shape = |q: &Quota| (q.capacity(), q.interval_nanos());
    let told = now.saturating_add(wait.as_nanos().min(u128::from(Nanos::MAX)) as Nanos);
    let cost = site.cost;
    let spent = |q: &Quota, tokens: u64| q.interval_nanos().saturating_mul(tokens);
    // The arrival time before the call: an admission's `reset_at` is after it.
    let debt = debt.as_nanos().min(u128::from(Nanos::MAX)) as Nanos;
    let tat = now
        .saturating_add(debt)
        .saturating_sub(spent(&in_force, u64::from(admitted) * cost));
    if !admitted && shape(&quota_at(told)) == shape(&in_force) {
        return None;
    }
    // What a store decides at `at` (`algorithm::precheck`, then the bucket's own rule), on
    // an arrival time within what a store keeps, as every store's is.
    if u128::from(tat) > u128::from(MAX_NOW) + MAX_TOLERANCE {
        return None;
    }
    let admits = |at: Nanos| {
        let quota = quota_at(at);
        match precheck(at, &quota, cost, false) {
            Ok(None) => (Gcra::new(tat, 0, Vec::new()).decide(at, &quota, cost, false)).allowed,
            Ok(Some(fixed)) => fixed.allowed,
            Err(_) => false,
        }
    };
    let least = cost.max(1);
    let mut tried = vec![told];
    let mut start = now;
    for held in transition.same.iter().filter(|held| now < held.until) {
        let (q, end) = (&held.quota, held.then.saturating_add(held.until));
        tried.push(start);
        tried.push((tat.saturating_add(spent(q, cost))).saturating_sub(q.tolerance_nanos()));
        let bottom = end.saturating_sub(spent(q, least + 1)).saturating_add(1);
        tried.push(
            bottom.max(
                tat.saturating_add(spent(q, cost))
                    .saturating_sub(spent(q, least)),
            ),
        );
        start = held.until;
    }
    tried.push(
        start.max(
            tat.saturating_add(spent(site.quota, cost))
                .saturating_sub(site.quota.tolerance_nanos()),
        ),
    );
    const MILLI: Nanos = 1_000_000;
    let best = (tried.into_iter())
        .map(|at| {
            at.saturating_sub(now)
                .div_ceil(MILLI)
                .max(1)
                .saturating_mul(MILLI)
        })
        .filter(|&w| u128::from(w) >= wait.as_nanos() && admits(now.saturating_add(w)))
        .min()?;
    decision.retry_after = Some(Duration::from_nanos(best));
    Some(())
}
