//! Step 1 of the pipeline: [`Site`], what every call of one call site shares (whatever its
//! user key), and the checks and store key of one call there. `prepared.rs` holds one for a
//! caller that makes many calls.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use super::held::{held_at, OldState, Transition};
use super::{Call, Generation, RateLimitService};
use crate::clock::Nanos;
use crate::error::Error;
use crate::key::{self, Around, KeyParts};
use crate::quota::Quota;
use crate::stats::Counters;
use crate::store::{Mode, Request, StoreKey};

/// What a call site fixes, borrowed from whoever prepared it: the resolved quota and tier,
/// the budget and its counters, the store key's parts around the user key, what a call costs
/// and whether it spends. `Copy`: see [`lent`](Self::lent).
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    /// The generation the site was worked out under: the whole call is decided under it.
    pub(crate) generation: &'a Generation,
    /// Borrowed: a prepared site's own, the configuration's, or one a call's overrides
    /// resolved into its [`Held`].
    pub(crate) quota: &'a Quota,
    pub(crate) tier: Option<usize>,
    /// The budget's and the policy's names ([`budget`](Self::budget), [`policy`](Self::policy)).
    pub(crate) names: Names<'a>,
    /// The budget's counters when the caller holds them; else found when a call is recorded.
    pub(crate) counters: Option<&'a Counters>,
    /// The store key around the user key.
    pub(crate) key: SiteKey<'a>,
    pub(crate) cost: u64,
    /// Whether `cost` was checked under `quota` already ([`check`](Self::check)'s second
    /// rule): a prepared site's own cost, checked once when it was prepared.
    pub(crate) cost_checked: bool,
    /// Whether calls spend (else they look).
    pub(crate) spend: bool,
    /// Whether a spend is kept to be given back ([`Spent`](super::Spent)): the store is asked
    /// for a stamped decision ([`Mode::Keep`]).
    pub(crate) kept: bool,
    /// Whether a refused call waits in the queue.
    pub(crate) may_wait: bool,
    /// A shadow limit: a call it would refuse is admitted, marked and counted
    /// (`RateLimitService::settle`).
    pub(crate) shadow: bool,
    /// Whether the store failed this call before its decision, unanswered (its read or raise
    /// of the fleet's reload horizon, `horizon.rs`), on a store that answers such failures by
    /// a policy: its decision is that policy's ([`Store::answer_failure`]), never asked of
    /// the store. Asked of it, on a link that answered again, it was decided on what this
    /// service alone knew, or written past the record: 1 and 15 admitted against none on
    /// one service under `Allow` and `Local` (probes_horizon_surfaces_redis).
    ///
    /// [`Store::answer_failure`]: crate::store::Store::answer_failure
    pub(crate) failed: bool,
    /// After a reload that loosened this limit, the old, tighter quota on the same state,
    /// until one of its windows has passed since the switch (see `reload.rs`): a prepared
    /// site's own, or one worked out for one call, in its [`Held`].
    pub(crate) transition: Option<&'a Transition>,
}

/// What a site worked out for one call borrows that the configuration does not hold: a
/// quota the call's overrides make, a reload's transition. A local of whoever works the
/// site out ([`RateLimitService::site`]); a prepared site holds its own.
#[derive(Default)]
pub(crate) struct Held {
    quota: Option<Quota>,
    /// Boxed: only calls during a transition pay for it.
    transition: Option<Box<Transition>>,
}

/// A call without a transition drops nothing: checked where the call ends, the transition
/// dropped out of line (the drop glue of `Held` was a call on every call, its registers
/// saved before the check).
impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        if let Some(transition) = self.transition.take() {
            drop_transition(transition);
        }
    }
}

#[cold]
#[inline(never)]
fn drop_transition(transition: Box<Transition>) {
    drop(transition);
}

/// Where a site's budget and policy names are read (a refusal's error and log line, a call
/// counted by its budget's name), from whoever holds them: read where a call needs them,
/// which for a prepared site's admitted call is nowhere (its counters are held), not copied
/// into each call's site.
#[derive(Clone, Copy)]
pub(crate) enum Names<'a> {
    /// A call's own options'.
    Call {
        budget: Option<&'a str>,
        /// The policy's name on a refusal (see `Call::policy`).
        policy: Option<&'a str>,
    },
    /// A prepared site's.
    Prepared(&'a super::Prepared),
}

/// A site's store key, without the user key.
#[derive(Clone, Copy)]
pub(crate) enum SiteKey<'a> {
    /// Composed per call (a site worked out for one call) from the parts its generation's
    /// configuration wrote (the head, the tier's part), its budget, and the quota's identity
    /// when the configuration wrote that too ([`parts`](Site::parts)).
    Parts { identity: Option<&'a str> },
    /// Written ahead, around the user key (a prepared site), with the hash its store finds
    /// the key of a call without a user key by, if the store gave one (`Store::hash_of`).
    Around(&'a Around, Option<NonZeroU64>),
}

impl<'a> Site<'a> {
    /// The site, copied, for a step out of line (an error, a refusal, a transition): the
    /// call's own site then never has its address taken, so a site built for one call (a
    /// prepared site's, `Prepared::site`) is not written out on the admitted call's way,
    /// its fields read where they are used. Only the out-of-line step pays for the copy.
    #[inline(always)]
    pub(crate) fn lent(&self) -> Site<'a> {
        *self
    }

    /// The site, answered by the store's failure policy where `failed` ([`failed`](Self::failed)).
    #[inline(always)]
    pub(crate) fn failed_if(self, failed: bool) -> Site<'a> {
        Site {
            failed: self.failed || failed,
            ..self
        }
    }

    /// The budget's name, if the site has one.
    #[inline]
    pub(crate) fn budget(&self) -> Option<&'a str> {
        match self.names {
            Names::Call { budget, .. } => budget,
            Names::Prepared(prepared) => prepared.budget(),
        }
    }

    /// The policy's name on a refusal (see `Call::policy`), if the site has one.
    #[inline]
    pub(crate) fn policy(&self) -> Option<&'a str> {
        match self.names {
            Names::Call { policy, .. } => policy,
            Names::Prepared(prepared) => prepared.policy(),
        }
    }

    /// The counters of the site's tier, if it has one.
    #[inline]
    pub(crate) fn tier_counters(&self) -> Option<&Counters> {
        self.tier.map(|i| &*self.generation.by_tier[i])
    }

    /// The site's tier's name, if it has one.
    #[inline]
    pub(crate) fn tier_name(&self) -> Option<Arc<str>> {
        self.tier
            .map(|i| Arc::clone(&self.generation.config.tiers()[i].name))
    }

    /// Step 2: the checks of a call that do not depend on the store's state: its user key,
    /// and its cost under the quota (`algorithm::check_cost`), unless a prepared site checked
    /// that once ([`cost_checked`](Self::cost_checked)). One place for every entry point; a
    /// store checks again for callers that use it directly.
    #[inline]
    pub(crate) fn check(&self, key: Option<&str>) -> Result<(), Error> {
        if let Some(key) = key {
            key::check_user_key(key)?;
        }
        if !self.cost_checked {
            crate::algorithm::check_cost(self.quota, self.cost, self.spend)?;
        }
        Ok(())
    }

    /// Whether a spend of `cost` passes [`check`](Self::check)'s cost rule under `quota`:
    /// what a prepared site works out once for its own cost.
    pub(crate) fn cost_fits(quota: &Quota, cost: u64) -> bool {
        crate::algorithm::check_cost(quota, cost, true).is_ok()
    }

    /// Step 3: the store key of a call with user `key` (checked), in `out`.
    #[inline(always)]
    pub(crate) fn compose(&self, out: &mut impl fmt::Write, key: Option<&str>) {
        match &self.key {
            SiteKey::Around(around, _) => around.write(out, key),
            SiteKey::Parts { identity } => {
                let parts = self.parts(key, *identity);
                key::write_around(out, &parts, |out| {
                    key::write_suffix(out, &parts, self.quota);
                });
            }
        }
    }

    /// The parts of the store key of a site worked out for one call, with user `key`.
    #[inline(always)]
    fn parts<'k>(&'k self, key: Option<&'k str>, identity: Option<&'k str>) -> KeyParts<'k> {
        let config = &*self.generation.config;
        KeyParts {
            head: &config.head,
            budget: self.budget(),
            tier: config.tier_part(self.tier),
            key,
            identity,
        }
    }

    /// The store key of a call with user `key` when the site holds it written whole (a
    /// prepared site's call without a user key), and its hash in the store if the site holds
    /// that too: nothing to compose, nor to hash.
    #[inline(always)]
    pub(crate) fn whole_key(&self, key: Option<&str>) -> Option<(&'a str, Option<NonZeroU64>)> {
        match (self.key, key) {
            (SiteKey::Around(around, hash), None) => Some((around.whole(), hash)),
            _ => None,
        }
    }

    /// The old states a call at `now` is also decided on or carries into its own (none
    /// outside a transition): [`OldState::decided_at`], [`OldState::carried_at`].
    #[inline]
    pub(crate) fn other_states_at(&self, now: Nanos) -> impl Iterator<Item = &OldState> {
        let others = match self.transition {
            Some(t) => &t.others[..],
            None => &[],
        };
        others
            .iter()
            .filter(move |o| o.decided_at(now) || o.carried_at(now))
    }

    /// Whether a call at `now` is also decided on an old state, or carries one.
    #[inline]
    pub(crate) fn holds_other_states(&self, now: Nanos) -> bool {
        self.transition.is_some() && self.other_states_at(now).next().is_some()
    }

    /// The store key around the user key, written out (for a site prepared once).
    pub(crate) fn around(&self) -> Around {
        match &self.key {
            SiteKey::Parts { identity } => Around::new(&self.parts(None, *identity), self.quota),
            SiteKey::Around(around, _) => Around::clone(around),
        }
    }

    /// Step 4's request on the store key step 3 composed, at `now` (the call checked): under
    /// the site's quota, or a reload's tighter one while it lasts ([`Site::transition`]), which
    /// a cost within the new quota may still be above (an error, as for any quota).
    #[inline(always)]
    pub(crate) fn request<'k>(
        &'k self,
        store_key: &'k str,
        now: Nanos,
        drained: &'k mut Option<Quota>,
    ) -> Result<Request<'k>, Error> {
        let mode = Mode::of(self.spend, self.kept);
        let quota = self.quota_at(now, drained);
        if self.transition.is_some() {
            crate::algorithm::check_cost(quota, self.cost, self.spend)?;
        }
        Ok(Request::checked(
            StoreKey::composed(store_key),
            quota,
            self.cost,
            now,
            mode,
        ))
    }

    /// The quota a call at `now` is decided under: the site's own, or while a reload's
    /// transition holds its state, the first entry not ended, cut for a bucket whose debt
    /// must drain by its end ([`Quota::draining_by`], written in `drained`).
    #[inline]
    pub(crate) fn quota_at<'q>(&'q self, now: Nanos, drained: &'q mut Option<Quota>) -> &'q Quota {
        match self.transition {
            None => self.quota,
            Some(t) => held_at(self.quota, t, self.cost, now, drained),
        }
    }

    /// The store key of a call with user `key`, checked and composed (for the paths that
    /// hand it to an awaited store: reset, stacked limits, the queue's line); the key
    /// checked, not the cost (a reset spends nothing).
    pub(crate) fn store_key(&self, key: Option<&str>) -> Result<String, Error> {
        if let Some(key) = key {
            key::check_user_key(key)?;
        }
        let mut out = String::with_capacity(64);
        self.compose(&mut out, key);
        Ok(out)
    }
}

impl RateLimitService {
    /// Step 1 for one call: the site of a call with `options` under `generation` (the
    /// running one, loaded once for the call), borrowing from both, and from `held`, the
    /// caller's local for what neither holds (a quota the call's overrides make, a reload's
    /// transition). What [`prepare`](Self::prepare) holds instead when a caller makes many.
    #[inline(always)]
    pub(crate) fn site<'a>(
        &'a self,
        generation: &'a Generation,
        options: &Call<'a>,
        held: &'a mut Held,
    ) -> Result<Site<'a>, Error> {
        let config = &*generation.config;
        // A budget name is a part of the store key: bounded like a user key, so that the key
        // a store is handed stays within the 4096 bytes it was promised.
        if options.budget.is_some_and(|b| b.len() > key::MAX_KEY_LEN) {
            return Err(Error::InvalidKey {
                reason: "the budget name is longer than 1024 bytes",
            });
        }
        let resolved = self.resolve(config, options, &mut held.quota)?;
        let (quota, tier) = (resolved.quota, resolved.tier);
        if let Some(window) = options.overrides.window {
            self.note_own_window(window);
        }
        let shadow = options.shadow || tier.is_some_and(|i| config.tiers()[i].shadow);
        let transition = match generation.holds_none(options, tier) {
            true => None,
            false => match self.transition_of(generation, options, quota, tier) {
                Some(t) => Some(&**held.transition.insert(Box::new(t))),
                None => None,
            },
        };
        Ok(Site {
            generation,
            quota,
            tier,
            names: Names::Call {
                budget: options.budget,
                policy: options.policy,
            },
            counters: None,
            key: SiteKey::Parts {
                identity: resolved.identity,
            },
            cost: options.cost,
            cost_checked: false,
            spend: options.consume,
            kept: false,
            // A shadow limit never refuses, so it never makes a call wait.
            may_wait: !shadow && self.may_wait(config, options),
            shadow,
            failed: false,
            transition,
        })
    }
}
