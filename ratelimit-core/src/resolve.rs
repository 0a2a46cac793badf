//! The one place where a call's (or an annotated fn's), a tier's and the module's
//! [`Overrides`] become a [`Quota`]. The running service, `Config::build`'s checks of every
//! tier and `Module::init`'s checks of every annotated fn all go through [`quota`] (by way of
//! `Config::quota`, which lays a configuration's tier and module settings under the call's),
//! so `init` reports exactly the limits the service would refuse.

use std::time::Duration;

use crate::error::Error;
use crate::quota::{Overrides, Quota, QuotaError};

/// What lies under a call's overrides at one tier of a configuration (or under no tier): the
/// tier's settings over the module's, laid once when the configuration is built, for a call
/// that sets its own limit and for one that does not. The refill's rule lives here: the
/// module's refill applies only to the module's limit (a tier or fn with a limit of its own
/// refills that limit per window, so a tier of 2 an hour never refills at a module rate of
/// 3,600).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Under {
    /// Under a call with a limit of its own: the module's refill left out, and every limit
    /// but the call's.
    own_limit: Overrides,
    /// Under a call without one.
    no_limit: Overrides,
}

impl Under {
    /// `tier` over `module` (each setting from the first that has it).
    pub(crate) fn new(tier: &Overrides, module: &Overrides) -> Self {
        let mut without_refill = *module;
        without_refill.refill = None;
        let no_limit = match tier.limit {
            Some(_) => tier.or(without_refill),
            None => tier.or(*module),
        };
        // Under a call's own limit no other limit shows: left out, so that two configurations
        // whose only difference is a limit such a call never reads lay the same layer under it
        // (`alike`).
        let mut own_limit = tier.or(without_refill);
        own_limit.limit = None;
        Under {
            own_limit,
            no_limit,
        }
    }

    /// The layers under a call with `call`'s overrides, and over them the call's.
    #[inline]
    fn with(&self, call: &Overrides) -> Overrides {
        call.or(*self.layer(call.limit.is_some()))
    }

    /// The layer under a call with a limit of its own (`own_limit`) or without.
    #[inline]
    fn layer(&self, own_limit: bool) -> &Overrides {
        match own_limit {
            true => &self.own_limit,
            false => &self.no_limit,
        }
    }

    /// Whether a call with a limit of its own (`own_limit`), or one without, resolves over
    /// `other` exactly as over this: the same layer under its settings, so [`quota`] makes
    /// the same quota of any call's.
    pub(crate) fn alike(&self, other: &Under, own_limit: bool) -> bool {
        self.layer(own_limit) == other.layer(own_limit)
    }
}

/// The quota of `call.or(tier).or(module)`, the tier's and the module's settings laid in
/// `under` ([`Under`]): each setting comes from the first that has it, the call, the tier,
/// the module.
///
/// - The limit: none of the three ([`Error::NoLimit`]).
/// - The refill: the module's applies only to the module's limit ([`Under`]).
/// - Window, burst and strategy: the module's layer sets them (a configuration's always
///   does); a window none sets is a window of zero, refused as such; no burst is none; no
///   strategy the default one.
///
/// A window given as text that is not one is refused with that problem, never decided under
/// another window.
#[inline]
pub(crate) fn quota(call: &Overrides, under: &Under) -> Result<Quota, Error> {
    let layers = under.with(call);
    if let Some(e) = layers.problem() {
        return Err(e.into());
    }
    // The error made only where it is returned (`ok_or` built and dropped one on every call,
    // measurably: BENCHMARKS.md, `hot_path`).
    let Some(limit) = layers.limit else {
        return Err(Error::NoLimit);
    };
    let strategy = layers.strategy.unwrap_or_default();
    let quota = Quota::from_parts(
        limit,
        layers.window.unwrap_or(Duration::ZERO),
        layers.burst.unwrap_or(0),
        strategy,
        layers.refill,
    )?;
    // A refill the resolved strategy would ignore is an error, not a looser limit than the
    // configuration reads.
    if layers.refill.is_some() && strategy != crate::syntax::Strategy::TokenBucket {
        return Err(QuotaError::RefillWithoutTokenBucket.into());
    }
    Ok(quota.with_block(layers.block.unwrap_or(Duration::ZERO))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::Strategy;

    #[test]
    fn each_setting_comes_from_the_first_layer_that_has_it() {
        let module = Overrides::new()
            .limit(10)
            .window("1s")
            .burst(2)
            .strategy(Strategy::TokenBucket);
        let tier = Overrides::new().limit(5).window("1m");
        let call = Overrides::new().burst(1);
        let q = quota(&call, &Under::new(&tier, &module)).unwrap();
        assert_eq!(
            (q.limit(), q.window(), q.burst(), q.strategy()),
            (5, Duration::from_secs(60), 1, Strategy::TokenBucket)
        );
    }

    #[test]
    fn a_bad_window_is_refused_even_with_a_good_one_under_it() {
        let module = Overrides::new().limit(10).window("1s");
        let call = Overrides::new().window("10 parsecs");
        assert!(matches!(
            quota(&call, &Under::new(&Overrides::new(), &module)),
            Err(Error::InvalidQuota(QuotaError::InvalidWindowText))
        ));
        let over = Overrides::new().window("1m");
        let q = quota(&over, &Under::new(&call, &module)).unwrap();
        assert_eq!(q.window(), Duration::from_secs(60));
    }

    #[test]
    fn no_limit_in_any_layer_is_no_limit() {
        let module = Overrides::new().window("1s");
        assert!(matches!(
            quota(&Overrides::new(), &Under::new(&Overrides::new(), &module)),
            Err(Error::NoLimit)
        ));
    }
}
