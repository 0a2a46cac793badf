//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::decision::Decision;
use crate::quota::format_window;

/// Everything that can go wrong, including a refusal.
///
/// Every variant other than [`Error::Exceeded`] also means the call was *not* allowed: the
/// limiter fails closed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The call was over its limit. Carries the decision (`retry_after`, `limit`, ...).
    #[error("{0}")]
    Exceeded(Box<Exceeded>),
    /// A tier was asked for that is not configured.
    #[error("unknown rate-limit tier {tier:?}; configured tiers: {known}")]
    UnknownTier {
        /// The tier asked for.
        tier: String,
        /// The configured tiers, comma separated.
        known: String,
    },
    /// No tier and no limit were given, and the module has no default limit.
    #[error(
        "no rate limit applies: give the call a limit or a tier, or configure a default limit"
    )]
    NoLimit,
    /// The configuration is invalid; lists every problem found.
    #[error("{0}")]
    InvalidConfig(ConfigError),
    /// A per-call override (limit, window, burst) makes a quota that cannot be enforced.
    #[error("invalid rate limit for this call: {reason}")]
    InvalidQuota {
        /// What is wrong.
        reason: String,
    },
    /// The call's cost is above the budget's capacity: it could never be admitted.
    #[error("cost {cost} is above the limit's capacity of {capacity} (limit + burst): this call can never be admitted")]
    CostAboveCapacity {
        /// The cost asked for.
        cost: u64,
        /// `limit + burst`.
        capacity: u64,
    },
    /// A cost of zero was asked for; use `status` to look without spending.
    #[error("cost must be at least 1 (use `status` to look without spending)")]
    ZeroCost,
    /// The key cannot be used.
    #[error("invalid rate-limit key: {reason}")]
    InvalidKey {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The memory store holds `max_keys` live keys and none has expired: the new key is
    /// refused rather than tracked without a limit.
    #[error("rate-limit store is full ({max_keys} live keys): call refused")]
    StoreFull {
        /// The configured cap.
        max_keys: usize,
    },
    /// The store could not be reached or answered with an error.
    #[error("rate-limit store failed: {message}")]
    Store {
        /// What happened (never includes credentials).
        message: String,
    },
    /// The store did not answer in time.
    #[error("rate-limit store did not answer within {}ms", after.as_millis())]
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// A rate-limited function was called while no module is initialised.
    #[error("rate limiter not initialised: `{function}` is rate-limited, but no `Module` is running (call `Module::init` at start-up)")]
    NotInitialized {
        /// The function that was called.
        function: &'static str,
    },
    /// `Module::init` was called while a module is running (drop or shut it down first).
    #[error("a rate-limit module is already initialised: shut it down (or drop its handle) before calling `Module::init` again")]
    AlreadyInitialized,
    /// `Module::init` found rate-limited fns the configuration cannot enforce; lists every one.
    #[error("{0}")]
    Declarations(crate::registry::DeclarationErrors),
    /// The store holds state under the call's key that this quota's limiter did not write
    /// (another type, another strategy's encoding, or corrupt data). The call is refused and
    /// the state left as it is: it is never read as a fresh key.
    #[error("state of an unexpected shape under a limiter key: refused ({message})")]
    UnexpectedState {
        /// What was found instead of the expected state (never the key or the value).
        message: String,
    },
}

impl From<crate::algorithm::Undecidable> for Error {
    fn from(e: crate::algorithm::Undecidable) -> Self {
        use crate::algorithm::Undecidable;
        match e {
            Undecidable::ZeroCost => Error::ZeroCost,
            Undecidable::CostAboveCapacity { cost, capacity } => {
                Error::CostAboveCapacity { cost, capacity }
            }
        }
    }
}

impl Error {
    /// The decision, if this is a refusal.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Error::Exceeded(e) => Some(&e.decision),
            _ => None,
        }
    }

    /// How long to wait before retrying, if this is a refusal.
    pub fn retry_after(&self) -> Option<Duration> {
        self.decision().and_then(|d| d.retry_after)
    }
}

/// A refusal, with the decision and what was being limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// The decision that refused the call.
    pub decision: Decision,
    /// The budget (a function path or a name), if known.
    pub budget: Option<String>,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.decision;
        f.write_str("rate limit exceeded")?;
        if let Some(budget) = &self.budget {
            write!(f, " for `{budget}`")?;
        }
        write!(f, ": {} per {}", d.limit, format_window(d.window))?;
        if let Some(tier) = &d.tier {
            write!(f, " (tier {tier:?})")?;
        }
        if let Some(retry) = d.retry_after {
            write!(f, "; retry after {}ms", retry.as_millis())?;
        }
        Ok(())
    }
}

/// Every problem found in a configuration, each naming its field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigError {
    /// `(field, problem)` pairs, e.g. `("tiers.pro.window", "invalid window \"1x\": ...")`.
    pub problems: Vec<(String, String)>,
}

impl ConfigError {
    pub(crate) fn push(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.problems.push((field.into(), problem.into()));
    }

    /// Whether a problem was reported for `field`.
    pub fn has(&self, field: &str) -> bool {
        self.problems.iter().any(|(f, _)| f == field)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid rate-limit configuration")?;
        for (field, problem) in &self.problems {
            write!(f, "\n  - {field}: {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
