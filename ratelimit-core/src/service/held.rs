//! What a reload's transition holds a site's calls to: the old quotas kept on its own state
//! and the old states it is decided on too ([`Transition`], worked out by `transition_of`
//! when a site is worked out), and the quota a call at an instant is decided under
//! (`held_at`, behind `Site::quota_at`).

use std::sync::Arc;

use super::{Call, Generation, RateLimitService};
use crate::clock::Nanos;
use crate::key::{Around, KeyParts};
use crate::quota::Quota;

/// The old quotas a site's calls are also held to, each until one of its windows after the
/// reload that replaced it (see [`Site::transition`]), from every replaced configuration the
/// generation keeps (a second reload does not end the first one's transition).
#[derive(Debug, Clone)]
pub(crate) struct Transition {
    /// On the site's own state (the same store key), by when they end, soonest first: the
    /// quota that holds a call to the site's and to every old one in force until then
    /// ([`Quota::held_to`]: for each entry, those ending with it or later). A call is decided
    /// under the first entry not ended (`Site::quota_at`).
    pub(crate) same: Vec<HeldUntil>,
    /// Old states (another window, strategy, tier name or prefix): decided with the site's
    /// own as one, all or nothing, while in force (`transition.rs`).
    pub(crate) others: Vec<OldState>,
}

/// A [`Transition`] while [`transition_of`](RateLimitService::transition_of) works it out.
#[derive(Default)]
struct Building {
    same: Vec<(Quota, Nanos)>,
    others: Vec<OldState>,
}

/// One entry of [`Transition::same`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldUntil {
    pub(crate) quota: Quota,
    pub(crate) until: Nanos,
    /// The debt the quota holding after `until` tolerates (the next entry's, or the site's
    /// own after the last): a bucket's calls leave no more owing at `until`
    /// ([`Quota::draining_by`]).
    pub(crate) then: Nanos,
}

/// A state a reload moved a limit away from: decided with the call for one of its windows,
/// and carried into the moved limit's state ([`Carry`](crate::store::Carry)) for as long as
/// it may hold what that carries.
#[derive(Debug, Clone)]
pub(crate) struct OldState {
    /// Its store key around the user key.
    pub(crate) key: Around,
    pub(crate) quota: Quota,
    /// Until when it is decided with the call.
    pub(crate) until: Nanos,
    /// Until when it is carried into the site's state (`Quota::outlasts_by` past the reload;
    /// `until` where it holds nothing the site's quota carries: `Quota::carries_into`). On a
    /// store that does not carry ([`Store::carries`](crate::store::Store::carries)), it is
    /// decided with the call as long instead (`until` is this).
    pub(crate) carry_until: Nanos,
    /// The debt the site's quota tolerates, when a token bucket's debt is carried from it:
    /// what a call decided on it may leave owing at `until` ([`Quota::draining_by`]); 0
    /// where none is carried.
    pub(crate) then: Nanos,
    /// Whether its block is carried into the site's state, and the site's into it, while it
    /// is decided with the call too ([`Carry::block_only`](crate::store::Carry)): on a store
    /// that carries, both quotas with a block.
    pub(crate) blocks: bool,
}

impl OldState {
    /// Whether a call at `now` is decided on it too.
    #[inline]
    pub(crate) fn decided_at(&self, now: Nanos) -> bool {
        now < self.until
    }

    /// Whether a call at `now` carries it into its own state: once it is no longer decided
    /// on. While it is, it holds the call by itself, and carried then, its whole debt held
    /// the site's state to it: a bucket of 10 a minute, spent, moved to 10 a second, every
    /// call refused for the minute (a second's tolerance under a minute's debt), where the
    /// old bucket alone admits 9.
    #[inline]
    pub(crate) fn carried_at(&self, now: Nanos) -> bool {
        !self.decided_at(now) && now < self.carry_until
    }

    /// Whether a call at `now` carries its block alone into its own state, and its own
    /// state's into it: while it is decided on, where it [`blocks`](Self::blocks).
    #[inline]
    pub(crate) fn block_carried_at(&self, now: Nanos) -> bool {
        self.blocks && self.decided_at(now)
    }

    /// The quota a call of `cost` at `now` is decided under on it: its own, a token bucket
    /// whose debt is carried after cut as its window ends so that what it leaves owing then
    /// is within what the site's quota tolerates ([`Quota::draining_by`], as a same state's
    /// held quota is): carried whole, a bucket of 10 a minute spent at its refill and moved to
    /// 10 a second refused every call for a minute after the old window.
    #[inline]
    pub(crate) fn quota_at(&self, now: Nanos, cost: u64) -> Quota {
        match self.then {
            0 => self.quota,
            then => (self.quota.draining_by(self.until, then, now, cost)).unwrap_or(self.quota),
        }
    }
}

/// [`Site::quota_at`] during a transition, out of the line of every other call.
#[cold]
#[inline(never)]
pub(super) fn held_at<'q>(
    own: &'q Quota,
    transition: &'q Transition,
    cost: u64,
    now: Nanos,
    drained: &'q mut Option<Quota>,
) -> &'q Quota {
    let Some(held) = transition.same.iter().find(|held| now < held.until) else {
        return own;
    };
    match held.quota.draining_by(held.until, held.then, now, cost) {
        Some(cut) => drained.insert(cut),
        None => &held.quota,
    }
}

impl RateLimitService {
    /// The transition of a call with `options`, resolved to `quota` under `tier` in
    /// `generation`: when the generation before it resolves the same call to the same state
    /// (the same store key: prefix, tier, budget, strategy and window) under a lower capacity,
    /// that quota, for one of its windows after the switch. A reload that tightens needs none
    /// (the state carries over under the new, lower limit); a call the old configuration did
    /// not resolve has no old budget to hold to.
    #[cold]
    pub(super) fn transition_of(
        &self,
        generation: &Generation,
        options: &Call<'_>,
        quota: &Quota,
        tier: Option<usize>,
    ) -> Option<Transition> {
        let name = |config: &crate::config::Config, tier: Option<usize>| {
            tier.map(|i| Arc::clone(&config.tiers()[i].name))
        };
        let mut transition = Building::default();
        let now = self.inner.clock.now();
        let own = options.overrides.window.map(|w| w.as_nanos() as u64);
        // Read now, not at the reload: a call's own quota first resolved since may hold its
        // old state longer than any seen before it (`Kept::carrying_with`).
        let outlasts = self
            .inner
            .own_outlasts
            .load(std::sync::atomic::Ordering::Relaxed);
        // A penalty made through another service of the fleet, as read from the store's
        // record (`horizon.rs`): its debt may be on the old state as this one's would.
        let penalized = (self.inner.fleet.penalized).load(std::sync::atomic::Ordering::Relaxed);
        // The old quotas on the site's state holding a call to no less than its own alone
        // (`Quota::held_to`), as one: the least tolerance of them until the last ends. Each
        // matters only beside a slower old one, whose interval stretches the site's capacity.
        let mut harmless: Option<(Quota, Nanos)> = None;
        let mut keep_harmless = |old: Quota, until: Nanos| {
            harmless = Some(match harmless {
                Some((q, u)) if q.tolerance_nanos() <= old.tolerance_nanos() => (q, u.max(until)),
                Some((_, u)) => (old, u.max(until)),
                None => (old, until),
            });
        };
        for kept in generation.previous() {
            // Past every window it could hold this call to, or resolving it to the same quota
            // on the same state (harmless, below): nothing to resolve.
            if !kept.in_force(now, own, outlasts, penalized) || kept.resolves_alike(options, tier) {
                continue;
            }
            let old_config = &*kept.config;
            // Limiting switched off refused nothing: no budget to hold to.
            if !old_config.enabled() {
                continue;
            }
            // A call the old configuration did not resolve had no budget there to hold to; a
            // shadow limit refused nothing.
            let mut resolved = None;
            let Ok(old) = self.resolve(old_config, options, &mut resolved) else {
                continue;
            };
            let (old, old_tier) = (*old.quota, old.tier);
            if options.shadow || old_tier.is_some_and(|i| old_config.tiers()[i].shadow) {
                continue;
            }
            let old_name = name(old_config, old_tier);
            let same_state = old_config.key_prefix() == generation.config.key_prefix()
                && old_name == name(&generation.config, tier)
                && old.same_identity(quota);
            let until = kept.replaced_at.saturating_add(old.window_nanos());
            if same_state {
                match quota
                    .held_to(std::iter::once(&old))
                    .holds_no_less_than(quota)
                {
                    true => keep_harmless(old, until),
                    false => transition.same.push((old, until)),
                }
                continue;
            }
            let parts = KeyParts {
                head: &old_config.head,
                budget: options.budget,
                tier: old_config.tier_part(old_tier),
                key: None,
                identity: None,
            };
            let key = Around::new(&parts, &old);
            // What the old state may hold past its window is carried into the site's
            // (`transition.rs`); decided whole so long on a store that does not carry. A call's
            // own quota of the same window and strategy wrote the same state (`outlasts`, as
            // a penalty did): carried only for the quota this call resolves to, plain calls
            // read the moved state alone once the configured bucket's carrying ended, where a
            // quota of its own had left 15 minutes owed: 15 admitted where the one bucket
            // gave none (probes_carry_horizons, probes_fleet_horizon_redis).
            // The other way round, the configured limit at the old tier wrote the state a
            // call's own quota of its window and strategy resolves to: carried for the own
            // quota alone (a bucket of its own refilled 600 a minute: 61.5 s), calls with it
            // read the moved state alone while the configured bucket's debt (a token a
            // minute: 15 minutes) still held the old one, 15 admitted at +100 s where the
            // one state gave none (probes_horizon_attacks).
            let configured = match old_tier {
                Some(i) => Some(old_config.tiers()[i].quota),
                None => old_config.plain_quota(),
            };
            let configured =
                (configured.filter(|q| q.same_identity(&old))).map_or(0, |q| q.outlasts_by());
            let held_for = old.outlasts_by().max(outlasts).max(configured);
            let carry_until = match old.carries_into(quota) {
                true => (kept.replaced_at.saturating_add(held_for))
                    .max(kept.penalized_until)
                    .max(penalized),
                false => until,
            };
            let carries = self.inner.store.carries();
            let until = match carries {
                true => until,
                false => carry_until,
            };
            let blocks = carries && old.block_nanos() > 0 && quota.block_nanos() > 0;
            let then = match old.carries_debt_into(quota) {
                true => quota.tolerance_nanos().max(1),
                false => 0,
            };
            // Two replaced configurations on one old state: held to both, the longer. Both
            // wrote the state: the slower one's capacity at the longest interval is its own
            // tolerance (`Quota::held_to`).
            match transition.others.iter_mut().find(|o| o.key == key) {
                Some(held) => {
                    let (slower, other) = match old.interval_nanos() >= held.quota.interval_nanos()
                    {
                        true => (old, held.quota),
                        false => (held.quota, old),
                    };
                    held.quota = slower.held_to(std::iter::once(&other));
                    held.until = held.until.max(until);
                    held.carry_until = held.carry_until.max(carry_until);
                    held.blocks |= blocks;
                }
                None => transition.others.push(OldState {
                    key,
                    quota: old,
                    until,
                    carry_until,
                    then,
                    blocks,
                }),
            }
        }
        // Each entry holds to the site's quota and every old one in force as long as it is,
        // the harmless ones' too, those resolving the call alike among them (the site's own
        // quota, limiting on): left out, beside a slower old one their tolerance was lost
        // (probes_held_buckets: 10 a second spent, reloads to 10 a minute and then 5 a
        // second: 14 admitted at once where the first bucket held 10; back to 10 a second,
        // 19). Looked for only where a slower one is kept: most calls have none.
        if !transition.same.is_empty() {
            for kept in generation.previous() {
                if kept.in_force(now, own, outlasts, penalized)
                    && kept.resolves_alike(options, tier)
                    && kept.config.enabled()
                {
                    keep_harmless(
                        *quota,
                        kept.replaced_at.saturating_add(quota.window_nanos()),
                    );
                }
            }
            transition.same.extend(harmless);
        }
        transition.same.sort_by_key(|&(_, until)| until);
        let olds: Vec<Quota> = transition.same.iter().map(|&(old, _)| old).collect();
        for (i, (held, _)) in transition.same.iter_mut().enumerate() {
            *held = quota.held_to(olds[i..].iter());
        }
        // Kept where it holds a call to less than the site's quota alone does: those that do
        // not are the last (each holds to a part of the olds of the one before it), the
        // harmless ones past the others' ends.
        (transition.same).retain(|(held, _)| !held.holds_no_less_than(quota));
        // What each entry's calls may leave owing at its end: what the next one tolerates
        // then (itself cut by its own next, as the time to its end allows), the site's quota
        // after the last.
        let mut next: Option<HeldUntil> = None;
        let mut same: Vec<HeldUntil> = (transition.same.iter().rev())
            .map(|&(held, until)| {
                let then = match next {
                    None => quota.tolerance_nanos(),
                    Some(n) => (n.quota.tolerance_nanos())
                        .min(n.then.saturating_add(n.until.saturating_sub(until))),
                };
                *next.insert(HeldUntil {
                    quota: held,
                    until,
                    then,
                })
            })
            .collect();
        same.reverse();
        (!transition.same.is_empty() || !transition.others.is_empty()).then_some(Transition {
            same,
            others: transition.others,
        })
    }
}
