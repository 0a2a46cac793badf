//! `Module::init`'s checks: every annotated fn against the running service's configuration
//! and store, through the same resolution the service runs for each call.

use super::declaration::Declaration;
use super::spec::TierSpec;
use crate::config::{names, Config};
use crate::error::{DeclarationErrors, DeclarationProblem, Error, ProblemKind};
use crate::service::{Declared, RateLimitService};

/// Checks `declarations` against `service`: static tiers that are not configured, fns that
/// rely on a default limit the module does not have, limits that cannot be enforced (by any
/// store, or by the service's), a tier chosen per call with no tier configured, budgets shared
/// by fns that disagree on their settings, two fns on one default budget name, sync fns on a
/// store that must be waited for, and fns that count some outcomes on a store without refunds.
///
/// A fn passes exactly when the service would decide its calls (for a tier chosen per call:
/// under every configured tier), so `init` fails where the running service would refuse.
/// When all pass, the quotas and windows of their own they declare are noted as a call's
/// would be, called or not (see `RateLimitService::note_declared`).
pub fn check_declarations(
    service: &RateLimitService,
    declarations: &[&'static Declaration],
) -> Result<(), DeclarationErrors> {
    let declared = check_declarations_under(service, &service.config(), declarations)?;
    service.note_declared(declared);
    Ok(())
}

/// [`check_declarations`] under `config` (a reload's, before it runs) on `service`'s store,
/// noting nothing: what the declarations make of their own, for the reload to note once it
/// installs `config`.
pub(crate) fn check_declarations_under(
    service: &RateLimitService,
    config: &Config,
    declarations: &[&'static Declaration],
) -> Result<Declared, DeclarationErrors> {
    let mut declared = Declared::default();
    let mut errors = DeclarationErrors::default();
    let mut push = |d: &'static Declaration, kind: ProblemKind| {
        errors.problems.push(DeclarationProblem {
            function: d.function(),
            file: d.file(),
            line: d.line(),
            kind,
        })
    };
    for (i, &d) in declarations.iter().enumerate() {
        if d.is_sync() && !service.decides_at_once(config) {
            push(d, ProblemKind::SyncOnWaitingStore);
        }
        if d.refunds() && !service.refunds() {
            push(d, ProblemKind::NoRefunds);
        }
        let spec = d.spec();
        let tiers: Vec<Option<usize>> = match spec.tier() {
            TierSpec::Static(tier) => match config.tier_index(Some(tier)) {
                Ok(index) => vec![index],
                Err(_) => {
                    push(
                        d,
                        ProblemKind::UnknownTier {
                            tier,
                            known: names(config.tiers()),
                        },
                    );
                    vec![]
                }
            },
            TierSpec::Default => match config.tier_index(None) {
                Ok(index) => vec![index],
                Err(_) => vec![],
            },
            TierSpec::Dynamic if config.tiers().is_empty() => {
                push(d, ProblemKind::NoTiers);
                vec![]
            }
            TierSpec::Dynamic => (0..config.tiers().len()).map(Some).collect(),
        };
        for tier in tiers {
            let resolved = service.resolve_quota(config, tier, spec.overrides(), &mut declared);
            let problem = match resolved {
                Ok(_) => continue,
                Err(Error::NoLimit) => ProblemKind::NoLimit,
                Err(Error::InvalidQuota(error)) => ProblemKind::Unenforceable {
                    tier: (spec.tier() == TierSpec::Dynamic)
                        .then(|| tier.map(|t| config.tiers()[t].name.to_string()))
                        .flatten(),
                    error,
                },
                Err(_) => continue,
            };
            push(d, problem);
            break;
        }
        for other in &declarations[..i] {
            if other.budget() != d.budget() || std::ptr::eq(*other, d) {
                continue;
            }
            if !d.has_explicit_name() && !other.has_explicit_name() {
                push(
                    d,
                    ProblemKind::SameDefaultName {
                        budget: d.budget(),
                        other_file: other.file(),
                        other_line: other.line(),
                    },
                );
                break;
            }
            if other.spec().shape() != spec.shape() {
                push(
                    d,
                    ProblemKind::SharedBudget {
                        budget: d.budget(),
                        other: other.function(),
                        other_file: other.file(),
                        other_line: other.line(),
                        spec: spec.to_string(),
                        other_spec: other.spec().to_string(),
                    },
                );
                break;
            }
        }
    }
    if errors.problems.is_empty() {
        Ok(declared)
    } else {
        Err(errors)
    }
}
