//! A stacked call's answer: the store's decisions matched to its checks and folded into one
//! per limit ([`fold`]), then counted and named for every limit
//! ([`RateLimitService::finish_stacked`]).

use super::super::site::Site;
use super::super::transition;
use super::super::RateLimitService;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::stats::Outcome;
use crate::store::Check;

impl RateLimitService {
    /// Counts the store's answer for every limit and names their tiers.
    pub(super) fn finish_stacked(
        &self,
        sites: &[Site<'_>],
        result: Result<Vec<Decision>, Error>,
    ) -> Result<Vec<Decision>, Error> {
        let commit = sites.iter().all(|s| s.spend);
        // A refusal of the wrong shape makes the call an error, counted as one.
        let result = result.and_then(|decided| {
            match decided
                .iter()
                .find_map(super::super::pipeline::broken_answer)
            {
                Some(broken) => Err(broken),
                None => Ok(decided),
            }
        });
        let mut decisions = match result {
            Ok(d) => d,
            Err(e) => {
                if commit {
                    self.inner.total.record(Outcome::Error);
                    for site in sites {
                        self.count_scoped(
                            site.tier_counters(),
                            site.budget(),
                            None,
                            Outcome::Error,
                        );
                    }
                }
                return Err(e);
            }
        };
        // The call passes when every enforced limit admits it: a shadow limit refuses nothing.
        let admitted = decisions
            .iter()
            .zip(sites)
            .all(|(d, s)| s.shadow || d.allowed);
        let mut shadowed = false;
        for (decision, site) in decisions.iter_mut().zip(sites) {
            decision.tier = site.tier_name();
            if !admitted && decision.allowed {
                // This limit would have admitted the call, but another refused it and nothing
                // was spent: its remaining is the level now, not what the call would have left
                // (every algorithm's `remaining` for a cost c is the level less c, exactly).
                decision.remaining = decision
                    .remaining
                    .saturating_add(site.cost)
                    .min(decision.limit);
            }
            let refused = !decision.allowed;
            if site.shadow && refused {
                super::super::pipeline::shadow(decision);
            }
            if commit {
                // Each budget counts what happened in it: admitted (a shadow limit's would-be
                // refusal shadowed too), refused by its own limit, or (refused by another
                // limit) nothing.
                let count =
                    |outcome| self.count_scoped(site.tier_counters(), site.budget(), None, outcome);
                match (admitted, refused) {
                    (true, _) => count(Outcome::Allowed),
                    (false, true) if !site.shadow => count(Outcome::Denied),
                    (false, _) => {}
                }
                if admitted && site.shadow && refused {
                    count(Outcome::Shadowed);
                    shadowed = true;
                }
            }
        }
        if commit {
            self.inner.total.record(if admitted {
                Outcome::Allowed
            } else {
                Outcome::Denied
            });
            if shadowed {
                self.inner.total.record(Outcome::Shadowed);
            }
        }
        Ok(decisions)
    }
}

/// One decision per limit from the store's one per check (`owners`: each check's limit, the
/// limits' own first, in order): a limit held to old states by a reload gets the one its
/// state and theirs make together (`transition::one_at`; alone, `transition::retried`).
///
/// The store's answer is matched to the checks first: one decision per check, each under its
/// check's quota: its window, and a limit no larger than its capacity (a failover's local
/// share is smaller; its unlimited answer, `u64::MAX`, aside). A store answering in another
/// order had another limit's refusal reported under this one's budget (probes_custom_store);
/// admissions stayed all or nothing, what was reported did not.
pub(super) fn fold(
    decided: Vec<Decision>,
    checks: &[Check<'_>],
    owners: &[usize],
    sites: &[Site<'_>],
    now: Nanos,
) -> Result<Vec<Decision>, Error> {
    let under_its_quota = |(d, check): (&Decision, &Check<'_>)| d.is_under(check.quota);
    if decided.len() != owners.len() || !decided.iter().zip(checks).all(under_its_quota) {
        return Err(crate::algorithm::Undecidable::UnexpectedState.into());
    }
    if owners.len() == sites.len() {
        return Ok(transition::retried(sites, now, decided));
    }
    let mut by_limit: Vec<Vec<Decision>> = (0..sites.len()).map(|_| Vec::new()).collect();
    for (decision, &owner) in decided.into_iter().zip(owners) {
        by_limit[owner].push(decision);
    }
    let one = |(decisions, site)| transition::one_at(site, now, decisions);
    by_limit.into_iter().zip(sites).map(one).collect()
}
