//! Strategy names: `"fixed-window"`, `"sliding-window"`, `"sliding-window-counter"`,
//! `"token-bucket"`.

use std::fmt;
use std::str::FromStr;

use crate::ParseError;

/// How calls are counted.
///
/// ```
/// use ratelimit_syntax::Strategy;
///
/// assert_eq!("token-bucket".parse::<Strategy>().unwrap(), Strategy::TokenBucket);
/// assert_eq!(Strategy::default().to_string(), "sliding-window");
/// ```
// Not `#[non_exhaustive]`: every store implements every strategy, and a match in the runtime
// with a catch-all arm would be a place where a new strategy silently does something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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

    #[test]
    fn the_default_is_the_sliding_log() {
        assert_eq!(Strategy::default(), Strategy::SlidingWindow);
    }
}
