//! The one place where a call's (or an annotated fn's), a tier's and the module's
//! [`Overrides`] become a [`Quota`]. The running service, `Config::build`'s checks of every
//! tier and `Module::init`'s checks of every annotated fn all go through [`quota`] (by way of
//! `Config::quota`, which lays a configuration's tier and module settings under the call's),
//! so `init` reports exactly the limits the service would refuse.

use std::time::Duration;

use crate::error::Error;
use crate::quota::{Overrides, Quota, QuotaError};

/// The quota of `call.or(tier).or(module)`: each setting comes from the first that has it,
/// the call, the tier, the module.
///
/// - The limit: none of the three ([`Error::NoLimit`]).
/// - The refill: the module's applies only to the module's limit (a tier or fn with a limit
///   of its own refills that limit per window, so a tier of 2 an hour never refills at a
///   module rate of 3,600).
/// - Window, burst and strategy: the module's layer sets them (a configuration's always
///   does); a window none sets is a window of zero, refused as such; no burst is none; no
///   strategy the default one.
///
/// A window given as text that is not one is refused with that problem, never decided under
/// another window.
pub(crate) fn quota(
    call: &Overrides,
    tier: &Overrides,
    module: &Overrides,
) -> Result<Quota, Error> {
    let own = call.or(*tier);
    let mut module = *module;
    if own.limit.is_some() {
        module.refill = None;
    }
    let layers = own.or(module);
    if let Some(e) = layers.problem() {
        return Err(e.into());
    }
    // The error made only where it is returned (`ok_or` built and dropped one on every call:
    // 29 instructions).
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
        let q = quota(&call, &tier, &module).unwrap();
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
            quota(&call, &Overrides::new(), &module),
            Err(Error::InvalidQuota(QuotaError::InvalidWindowText))
        ));
        let over = Overrides::new().window("1m");
        let q = quota(&over, &call, &module).unwrap();
        assert_eq!(q.window(), Duration::from_secs(60));
    }

    #[test]
    fn no_limit_in_any_layer_is_no_limit() {
        let module = Overrides::new().window("1s");
        assert!(matches!(
            quota(&Overrides::new(), &Overrides::new(), &module),
            Err(Error::NoLimit)
        ));
    }
}
