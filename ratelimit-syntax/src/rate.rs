//! Rates: `"5/second"`, `"100/minute"`, `"10/1m"`.

use std::str::FromStr;
use std::time::Duration;

use crate::{parse_window, ParseError};

/// A number of calls per window, parsed from `"5/second"`, `"100/minute"`, `"10/1m"`.
///
/// ```
/// use ratelimit_syntax::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "100/minute".parse().unwrap();
/// assert_eq!((rate.limit, rate.window), (100, Duration::from_secs(60)));
/// assert_eq!("10/1m".parse::<Rate>().unwrap(), rate.with_limit(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls allowed per window.
    pub limit: u64,
    /// The window.
    pub window: Duration,
}

impl Rate {
    /// The same window with another limit.
    pub const fn with_limit(self, limit: u64) -> Self {
        Self {
            limit,
            window: self.window,
        }
    }

    /// The window named by `second`, `minute`, `hour` or `day` (also `s`, `m`, `h`, `d`, and
    /// plurals), if `unit` is one of them.
    pub fn unit_window(unit: &str) -> Option<Duration> {
        let secs = match unit {
            "second" | "seconds" | "sec" | "s" => 1,
            "minute" | "minutes" | "min" | "m" => 60,
            "hour" | "hours" | "h" => 3_600,
            "day" | "days" | "d" => 86_400,
            _ => return None,
        };
        Some(Duration::from_secs(secs))
    }
}

impl FromStr for Rate {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        let invalid = |reason: &str| ParseError::InvalidRate {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let (limit, per) = input
            .trim()
            .split_once('/')
            .ok_or_else(|| invalid("expected <limit>/<unit or window>, like \"5/minute\""))?;
        let limit: u64 = limit
            .trim()
            .parse()
            .map_err(|_| invalid("the limit must be a whole number, like the 5 in \"5/minute\""))?;
        let per = per.trim();
        let window = match Rate::unit_window(per) {
            Some(window) => window,
            None if per.starts_with(|c: char| c.is_ascii_digit()) => parse_window(per)?,
            None => {
                return Err(invalid(
                    "unknown unit (use second, minute, hour, day or a window like 1m)",
                ))
            }
        };
        Ok(Rate { limit, window })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        let rate = |s: &str| s.parse::<Rate>().unwrap();
        assert_eq!(
            rate("5/second"),
            Rate {
                limit: 5,
                window: Duration::from_secs(1)
            }
        );
        assert_eq!(rate("100/minute").window, Duration::from_secs(60));
        assert_eq!(
            rate("10/1m"),
            Rate {
                limit: 10,
                window: Duration::from_secs(60)
            }
        );
        assert_eq!(rate("3/hour").window, Duration::from_secs(3_600));
        assert_eq!(rate("3/day").window, Duration::from_secs(86_400));
        for bad in ["", "5", "x/minute", "5/fortnight", "-1/minute", "5/0s"] {
            let err = bad.parse::<Rate>().unwrap_err();
            assert!(
                err.to_string().contains(&format!("{bad:?}")) || bad == "5/0s",
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn units_name_their_window() {
        assert_eq!(Rate::unit_window("minutes"), Some(Duration::from_secs(60)));
        assert_eq!(Rate::unit_window("d"), Some(Duration::from_secs(86_400)));
        assert_eq!(Rate::unit_window("fortnight"), None);
    }
}
