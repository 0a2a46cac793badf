//! Why a window, rate or strategy string was refused.

use std::fmt;

/// Why a window, rate or strategy string was refused. Every message names the input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The string was empty (or only whitespace).
    Empty,
    /// The string is not a window.
    InvalidWindow {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The window adds up to zero.
    ZeroWindow {
        /// The string as given.
        input: String,
    },
    /// The window is longer than [`MAX_WINDOW`](crate::MAX_WINDOW) or does not fit in a
    /// duration.
    TooLong {
        /// The string as given.
        input: String,
    },
    /// The string is not a rate such as `"5/minute"` or `"100/1m"`.
    InvalidRate {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The strategy name is not one of the four.
    UnknownStrategy {
        /// The string as given.
        input: String,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => f.write_str(
                "empty window: expected something like \"500ms\", \"30s\", \"1m\" or \"1h30m\"",
            ),
            ParseError::InvalidWindow { input, reason } => {
                write!(f, "invalid window {input:?}: {reason}")
            }
            ParseError::ZeroWindow { input } => {
                write!(
                    f,
                    "invalid window {input:?}: a window must be longer than zero"
                )
            }
            ParseError::TooLong { input } => {
                write!(
                    f,
                    "invalid window {input:?}: longer than the maximum of 366 days"
                )
            }
            ParseError::InvalidRate { input, reason } => {
                write!(f, "invalid rate {input:?}: {reason}")
            }
            ParseError::UnknownStrategy { input } => {
                // Every name, from the one list of strategies: "a", "b" or "c".
                write!(f, "unknown strategy {input:?}: expected ")?;
                let names = crate::Strategy::ALL.map(crate::Strategy::as_str);
                for (i, name) in names.iter().enumerate() {
                    let before = match i {
                        0 => "",
                        _ if i + 1 == names.len() => " or ",
                        _ => ", ",
                    };
                    write!(f, "{before}{name:?}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages are the ones the runtime's error type printed before this crate existed:
    /// users match on them in logs.
    #[test]
    fn messages_name_the_input() {
        let cases = [
            (
                ParseError::Empty,
                "empty window: expected something like \"500ms\", \"30s\", \"1m\" or \"1h30m\"",
            ),
            (
                ParseError::InvalidWindow {
                    input: "1x".into(),
                    reason: "unknown unit".into(),
                },
                "invalid window \"1x\": unknown unit",
            ),
            (
                ParseError::ZeroWindow { input: "0s".into() },
                "invalid window \"0s\": a window must be longer than zero",
            ),
            (
                ParseError::TooLong {
                    input: "367d".into(),
                },
                "invalid window \"367d\": longer than the maximum of 366 days",
            ),
            (
                ParseError::InvalidRate {
                    input: "5".into(),
                    reason: "no slash".into(),
                },
                "invalid rate \"5\": no slash",
            ),
            (
                ParseError::UnknownStrategy {
                    input: "leaky".into(),
                },
                "unknown strategy \"leaky\": expected \"fixed-window\", \"sliding-window\", \
                 \"sliding-window-counter\" or \"token-bucket\"",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
