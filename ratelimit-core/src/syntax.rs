//! Windows (`"1m"`, `"1h30m"`), rate specs (`"5/minute"`) and strategies: the text the
//! configuration and the macros are written in.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The longest window accepted: one leap year. Longer windows would make counters that outlive
/// any deployment, and keep every nanosecond computation far from overflow.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// Why a window or rate string was refused. Every message names the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The string was empty (or only whitespace).
    #[error("empty window: expected something like \"500ms\", \"30s\", \"1m\" or \"1h30m\"")]
    Empty,
    /// The string is not a window.
    #[error("invalid window {input:?}: {reason}")]
    InvalidWindow {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The window adds up to zero.
    #[error("invalid window {input:?}: a window must be longer than zero")]
    ZeroWindow {
        /// The string as given.
        input: String,
    },
    /// The window is longer than [`MAX_WINDOW`] or does not fit in a duration.
    #[error("invalid window {input:?}: longer than the maximum of 366 days")]
    TooLong {
        /// The string as given.
        input: String,
    },
    /// The string is not a rate such as `"5/minute"` or `"100/1m"`.
    #[error("invalid rate {input:?}: {reason}")]
    InvalidRate {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The strategy name is not one of the four.
    #[error(
        "unknown strategy {input:?}: expected \"fixed-window\", \"sliding-window\", \
         \"sliding-window-counter\" or \"token-bucket\""
    )]
    UnknownStrategy {
        /// The string as given.
        input: String,
    },
}

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses a window such as `"500ms"`, `"30s"`, `"1m"`, `"1h"`, `"1d"` or `"1h30m"`.
///
/// Units are `ms`, `s`, `m`, `h` and `d`; a compound lists each unit at most once, largest
/// first. The result is longer than zero and at most [`MAX_WINDOW`].
///
/// ```
/// use ratelimit_core::parse_window;
/// use std::time::Duration;
///
/// assert_eq!(parse_window("1h30m").unwrap(), Duration::from_secs(5_400));
/// assert_eq!(parse_window("500ms").unwrap(), Duration::from_millis(500));
/// assert!(parse_window("1x").unwrap_err().to_string().contains("\"1x\""));
/// ```
pub fn parse_window(input: &str) -> Result<Duration, ParseError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(ParseError::Empty);
    }
    let invalid = |reason: String| ParseError::InvalidWindow {
        input: input.to_owned(),
        reason,
    };
    let too_long = || ParseError::TooLong {
        input: input.to_owned(),
    };
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut total_ms: u64 = 0;
    let mut last_unit: Option<usize> = None;
    while pos < bytes.len() {
        let start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if start == pos {
            let c = text[pos..].chars().next().unwrap_or(' ');
            return Err(invalid(format!(
                "expected a number at {c:?} (windows are positive, like \"30s\" or \"1h30m\")"
            )));
        }
        let number: u64 = text[start..pos].parse().map_err(|_| too_long())?;
        let unit_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_alphabetic() {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        if unit.is_empty() {
            return Err(invalid(format!(
                "missing unit after {number} (use ms, s, m, h or d)"
            )));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(invalid(format!(
                "unknown unit {unit:?} (use ms, s, m, h or d)"
            )));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(invalid(
                "units must appear once each, largest first (like \"1h30m\")".to_owned(),
            ));
        }
        last_unit = Some(index);
        let part = number.checked_mul(UNITS[index].1).ok_or_else(too_long)?;
        total_ms = total_ms.checked_add(part).ok_or_else(too_long)?;
    }
    if total_ms == 0 {
        return Err(ParseError::ZeroWindow {
            input: input.to_owned(),
        });
    }
    let window = Duration::from_millis(total_ms);
    if window > MAX_WINDOW {
        return Err(too_long());
    }
    Ok(window)
}

/// Formats a window the way [`parse_window`] reads it (`"1h30m"`, `"500ms"`).
pub fn format_window(window: Duration) -> String {
    let mut ms = window.as_millis() as u64;
    if ms == 0 {
        return format!("{}ns", window.as_nanos());
    }
    let mut out = String::new();
    for (name, size) in UNITS {
        if ms >= size {
            out.push_str(&format!("{}{name}", ms / size));
            ms %= size;
        }
    }
    out
}

/// A number of calls per window, parsed from `"5/second"`, `"100/minute"`, `"10/1m"`.
///
/// ```
/// use ratelimit_core::Rate;
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

/// How calls are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// One counter per window, windows aligned to the epoch. Cheapest; a client can get up to
    /// twice the limit across a window boundary (the end of one window and the start of the
    /// next).
    FixedWindow,
    /// A log of hits: exact, never more than the limit in any rolling window. Memory grows with
    /// the limit (one entry per admitted call).
    #[default]
    SlidingWindow,
    /// Previous and current window counters, the previous one weighted by how much of it still
    /// overlaps the rolling window: O(1) memory, an approximation of the sliding log.
    SlidingWindowCounter,
    /// GCRA, a token bucket kept as one timestamp: holds `limit + burst` tokens and refills
    /// `refill` tokens per window.
    TokenBucket,
}

impl Strategy {
    /// Every strategy, in a fixed order.
    pub const ALL: [Strategy; 4] = [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::SlidingWindowCounter,
        Strategy::TokenBucket,
    ];

    /// The name used in configuration and in the macros.
    pub const fn as_str(self) -> &'static str {
        match self {
            Strategy::FixedWindow => "fixed-window",
            Strategy::SlidingWindow => "sliding-window",
            Strategy::SlidingWindowCounter => "sliding-window-counter",
            Strategy::TokenBucket => "token-bucket",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        Strategy::ALL
            .into_iter()
            .find(|s| s.as_str() == input)
            .ok_or_else(|| ParseError::UnknownStrategy {
                input: input.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse() {
        let cases = [
            ("500ms", 500),
            ("1s", 1_000),
            ("30s", 30_000),
            ("1m", 60_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1h30m", 5_400_000),
            ("1m30s500ms", 90_500),
            (" 2h ", 7_200_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_window(text), Ok(Duration::from_millis(ms)), "{text}");
        }
    }

    #[test]
    fn bad_windows_are_typed_errors_naming_the_input() {
        for bad in ["0s", "1x", "-1m", "1", "m", "1m1h", "1m1m", "1.5s", "1 m"] {
            let err = parse_window(bad).unwrap_err();
            assert!(
                err.to_string().contains(&format!("{bad:?}")),
                "{bad}: {err}"
            );
        }
        assert_eq!(parse_window(""), Err(ParseError::Empty));
        assert_eq!(parse_window("   "), Err(ParseError::Empty));
        assert!(matches!(
            parse_window("0s"),
            Err(ParseError::ZeroWindow { .. })
        ));
        assert!(matches!(
            parse_window("99999999999999999999d"),
            Err(ParseError::TooLong { .. })
        ));
        assert!(matches!(
            parse_window("18446744073709551615d"),
            Err(ParseError::TooLong { .. })
        ));
        assert!(matches!(
            parse_window("367d"),
            Err(ParseError::TooLong { .. })
        ));
    }

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
    fn format_round_trips() {
        for text in ["500ms", "1s", "1h30m", "1d", "1m30s500ms"] {
            assert_eq!(format_window(parse_window(text).unwrap()), text);
        }
    }

    #[test]
    fn strategies_parse() {
        for s in Strategy::ALL {
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
        }
        assert!("leaky"
            .parse::<Strategy>()
            .unwrap_err()
            .to_string()
            .contains("token-bucket"));
    }
}
