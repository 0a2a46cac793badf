//! The one place where a configuration, a tier and a call's (or an annotated fn's)
//! [`Overrides`] become a [`Quota`]. The running service, `Config::build`'s checks of every
//! tier and `Module::init`'s checks of every annotated fn all go through [`quota`], so `init`
//! reports exactly the limits the service would refuse.

use crate::config::{names, Config};
use crate::error::Error;
use crate::quota::{Overrides, Quota, QuotaError};

/// Which configured tier a call is decided under: the one named, else the default tier, else
/// none. An unknown name is [`Error::UnknownTier`].
pub(crate) fn tier_index(config: &Config, name: Option<&str>) -> Result<Option<usize>, Error> {
    let Some(name) = name.or(config.default_tier()) else {
        return Ok(None);
    };
    match config.tiers().iter().position(|t| *t.name == *name) {
        Some(i) => Ok(Some(i)),
        None => Err(Error::UnknownTier {
            tier: name.to_owned(),
            known: names(config.tiers()),
        }),
    }
}

/// The quota for a call under `tier` (an index into `config.tiers()`) with `call`'s
/// overrides. Each setting comes from the first that has it: the call, the tier, the module.
///
/// - The limit: the call's, the tier's, else the module's `default_limit` (none:
///   [`Error::NoLimit`]).
/// - The refill: the call's, the tier's; the module's `token_refill_rate` applies only to the
///   module's default limit (a tier or fn with a limit of its own refills that limit per
///   window, so a tier of 2 an hour never refills at a module rate of 3,600).
/// - Window, burst and strategy: the call's, the tier's, else the module's.
///
/// A call whose window was given as text that is not one is refused with that problem, never
/// decided under another window.
pub(crate) fn quota(
    config: &Config,
    tier: Option<usize>,
    call: &Overrides,
) -> Result<Quota, Error> {
    if let Some(e) = call.problem() {
        return Err(e.into());
    }
    let own = tier.map_or(Overrides::new(), |i| config.tiers()[i].overrides);
    let (limit, module_limit) = match call.limit.or(own.limit) {
        Some(limit) => (limit, false),
        None => (config.default_limit().ok_or(Error::NoLimit)?, true),
    };
    let module_refill = if module_limit {
        config.token_refill_rate
    } else {
        None
    };
    Ok(Quota::from_parts(
        limit,
        call.window
            .or(own.window)
            .unwrap_or(config.default_window()),
        call.burst.or(own.burst).unwrap_or(config.burst_limit()),
        call.strategy.or(own.strategy).unwrap_or(config.strategy()),
        call.refill.or(own.refill).or(module_refill),
    )?)
}

/// Every quota a configuration fixes by itself (the default limit's and each tier's),
/// resolved by [`quota`] and checked against what the store `supports`, as
/// `(field, problem)` pairs.
pub(crate) fn config_problems(
    config: &Config,
    supports: &dyn Fn(&Quota) -> Result<(), QuotaError>,
) -> Vec<(String, QuotaError)> {
    let check = |tier: Option<usize>| -> Option<QuotaError> {
        match quota(config, tier, &Overrides::new()) {
            Ok(q) => supports(&q).err(),
            Err(Error::InvalidQuota(e)) => Some(e),
            Err(_) => None,
        }
    };
    let mut problems = Vec::new();
    if config.default_limit().is_some() {
        // The default limit, as a call under no tier meets it.
        if let Some(e) = check(None) {
            let field = match e {
                QuotaError::ZeroRefill | QuotaError::RefillTooFast | QuotaError::RefillTooSlow => {
                    "token_refill_rate"
                }
                QuotaError::ZeroWindow
                | QuotaError::WindowTooLong
                | QuotaError::InvalidWindowText => "default_window",
                _ => "default_limit",
            };
            problems.push((field.to_owned(), e));
        }
    }
    for (i, tier) in config.tiers().iter().enumerate() {
        if let Some(e) = check(Some(i)) {
            problems.push((crate::config::tier_field(&tier.name, &e), e));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Tier;
    use crate::syntax::Strategy;
    use std::time::Duration;

    fn config() -> Config {
        Config::builder()
            .strategy(Strategy::TokenBucket)
            .default_limit(10)
            .default_window("1s")
            .burst_limit(2)
            .token_refill_rate(3_600)
            .tier(Tier::new("hourly", 2).window("1h"))
            .tier(Tier::new("own", 5).window("1m").refill(1).burst(0))
            .build()
            .unwrap()
    }

    #[test]
    fn each_setting_comes_from_the_call_then_the_tier_then_the_module() {
        let c = config();
        let plain = quota(&c, None, &Overrides::new()).unwrap();
        assert_eq!(
            (plain.limit(), plain.window(), plain.burst()),
            (10, Duration::from_secs(1), 2)
        );
        assert_eq!(plain.refill_per_window(), 3_600);
        let hourly = quota(&c, Some(0), &Overrides::new()).unwrap();
        assert_eq!(
            (hourly.limit(), hourly.window(), hourly.burst()),
            (2, Duration::from_secs(3_600), 2)
        );
        let call = Overrides::new().limit(7).strategy(Strategy::FixedWindow);
        let both = quota(&c, Some(1), &call).unwrap();
        assert_eq!((both.limit(), both.window()), (7, Duration::from_secs(60)));
        assert_eq!(both.strategy(), Strategy::FixedWindow);
        assert_eq!(both.refill_per_window(), 1);
    }

    /// A module-wide refill of 3,600 per window once let a tier of 2 an hour admit 60 calls
    /// in a minute: it refilled the tier at the module's rate.
    #[test]
    fn module_refill_rate_does_not_replace_a_tiers_refill() {
        let c = config();
        let hourly = quota(&c, Some(0), &Overrides::new()).unwrap();
        assert_eq!(hourly.refill_per_window(), 2);
        let own_limit = quota(&c, None, &Overrides::new().limit(4)).unwrap();
        assert_eq!(own_limit.refill_per_window(), 4);
    }
}
