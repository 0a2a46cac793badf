//! A configuration's quotas: the tier a call is decided under, and the quota of a call, with
//! the tier's and the module's settings laid under the call's (by [`resolve`]); and the quotas
//! the configuration fixes by itself, checked.

use super::{names, Config};
use crate::error::Error;
use crate::quota::{Overrides, Quota, QuotaError};
use crate::resolve::{self, Under};

impl Config {
    /// Which configured tier a call is decided under: the one named, else the default tier
    /// (its index found once, when the configuration was built), else none. An unknown name
    /// is [`Error::UnknownTier`].
    #[inline]
    pub(crate) fn tier_index(&self, name: Option<&str>) -> Result<Option<usize>, Error> {
        let Some(name) = name else {
            return Ok(self.default_index);
        };
        match self.tiers().iter().position(|t| *t.name == *name) {
            Some(i) => Ok(Some(i)),
            None => Err(self.unknown_tier(name)),
        }
    }

    #[cold]
    #[inline(never)]
    fn unknown_tier(&self, name: &str) -> Error {
        Error::UnknownTier {
            tier: name.to_owned(),
            known: names(self.tiers()),
        }
    }

    /// The quota for a call under `tier` (an index into `self.tiers()`) with `call`'s
    /// overrides: [`resolve::quota`] of the call over the tier's and the module's settings (its
    /// `default_limit`, whose absence is [`Error::NoLimit`] when neither the call nor the tier
    /// has a limit; `default_window`, `burst_limit`, `strategy`, and `token_refill_rate` for
    /// the default limit only), laid once when the configuration was built ([`Under`]).
    #[inline]
    pub(crate) fn quota(&self, tier: Option<usize>, call: &Overrides) -> Result<Quota, Error> {
        let under = match tier {
            Some(i) => &self.tiers()[i].under,
            None => &self.plain_under,
        };
        resolve::quota(call, under)
    }

    /// What lies under a call's settings at `tier` (`None`: under no tier), the tier's own over
    /// the module's: laid when the configuration is built.
    pub(super) fn under(&self, tier: Option<&Overrides>) -> Under {
        Under::new(tier.unwrap_or(&Overrides::new()), &self.module_overrides())
    }

    /// The module's settings, as the layer under every tier's and call's.
    fn module_overrides(&self) -> Overrides {
        let mut module = Overrides::new()
            .window_duration(self.default_window())
            .burst(self.burst_limit())
            .strategy(self.strategy());
        module.limit = self.default_limit();
        module.refill = self.token_refill_rate;
        module
    }

    /// Every quota the configuration fixes by itself (the default limit's and each tier's),
    /// resolved by [`quota`](Self::quota) and checked against what the store `supports`, as
    /// `(field, problem)` pairs.
    pub(crate) fn quota_problems(
        &self,
        supports: &dyn Fn(&Quota) -> Result<(), QuotaError>,
    ) -> Vec<(String, QuotaError)> {
        let check = |tier: Option<usize>| -> Option<QuotaError> {
            match self.quota(tier, &Overrides::new()) {
                Ok(q) => supports(&q).err(),
                Err(Error::InvalidQuota(e)) => Some(e),
                Err(_) => None,
            }
        };
        // A capacity overflow with a limit that fits alone is the module's burst's doing; a
        // refill too fast with none written is a window too short for its limit.
        let by_burst = |limit: Option<u64>, own_burst: Option<u64>| {
            own_burst.is_none()
                && self.burst_limit() > 0
                && limit.is_some_and(|l| l <= crate::quota::MAX_CAPACITY)
        };
        let mut problems = Vec::new();
        if self.default_limit().is_some() {
            // The default limit, as a call under no tier meets it.
            if let Some(e) = check(None) {
                let field = match (&e, setting(&e)) {
                    (QuotaError::CapacityTooLarge, _) if by_burst(self.default_limit(), None) => {
                        "burst_limit"
                    }
                    (QuotaError::RefillTooFast, _) if self.token_refill_rate.is_none() => {
                        "default_window"
                    }
                    (_, "refill") => "token_refill_rate",
                    (_, "window") => "default_window",
                    _ => "default_limit",
                };
                problems.push((field.to_owned(), e));
            }
        }
        for (i, tier) in self.tiers().iter().enumerate() {
            if let Some(e) = check(Some(i)) {
                let own = &tier.overrides;
                let field = match e {
                    QuotaError::CapacityTooLarge if by_burst(own.limit, own.burst) => {
                        "burst_limit".to_owned()
                    }
                    QuotaError::RefillTooFast if own.refill.is_none() => {
                        format!("tiers.{}.window", tier.name)
                    }
                    _ => tier_field(&tier.name, &e),
                };
                problems.push((field, e));
            }
        }
        problems
    }
}

/// Which setting `e` is about, the one place for it: `"window"`, `"refill"` or `"limit"`.
fn setting(e: &QuotaError) -> &'static str {
    match e {
        QuotaError::ZeroWindow | QuotaError::WindowTooLong | QuotaError::InvalidWindowText => {
            "window"
        }
        QuotaError::ZeroRefill
        | QuotaError::RefillTooFast
        | QuotaError::RefillTooSlow
        | QuotaError::RefillWithoutTokenBucket => "refill",
        _ => "limit",
    }
}

/// The field of a tier's setting that `e` is about.
fn tier_field(tier: &str, e: &QuotaError) -> String {
    format!("tiers.{tier}.{}", setting(e))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Tier};
    use crate::quota::Overrides;
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
        let plain = c.quota(None, &Overrides::new()).unwrap();
        assert_eq!(
            (plain.limit(), plain.window(), plain.burst()),
            (10, Duration::from_secs(1), 2)
        );
        assert_eq!(plain.refill_per_window(), 3_600);
        let hourly = c.quota(Some(0), &Overrides::new()).unwrap();
        assert_eq!(
            (hourly.limit(), hourly.window(), hourly.burst()),
            (2, Duration::from_secs(3_600), 2)
        );
        let call = Overrides::new().limit(7);
        let both = c.quota(Some(1), &call).unwrap();
        assert_eq!((both.limit(), both.window()), (7, Duration::from_secs(60)));
        assert_eq!(both.strategy(), Strategy::TokenBucket);
        assert_eq!(both.refill_per_window(), 1);
        // The tier's refill under a strategy the call switches to, which does not refill:
        // refused, not a limit looser than the configuration reads.
        let fixed = Overrides::new().limit(7).strategy(Strategy::FixedWindow);
        assert!(matches!(
            c.quota(Some(1), &fixed),
            Err(crate::Error::InvalidQuota(
                crate::QuotaError::RefillWithoutTokenBucket
            ))
        ));
    }

    /// A module-wide refill of 3,600 per window once let a tier of 2 an hour admit 60 calls
    /// in a minute: it refilled the tier at the module's rate.
    #[test]
    fn module_refill_rate_does_not_replace_a_tiers_refill() {
        let c = config();
        let hourly = c.quota(Some(0), &Overrides::new()).unwrap();
        assert_eq!(hourly.refill_per_window(), 2);
        let own_limit = c.quota(None, &Overrides::new().limit(4)).unwrap();
        assert_eq!(own_limit.refill_per_window(), 4);
    }
}
