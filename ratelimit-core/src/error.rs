//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::decision::Decision;
use crate::quota::QuotaError;
use crate::syntax::format_window;

/// Everything that can go wrong, including a refusal.
///
/// Every variant other than [`Error::Exceeded`] also means the call was *not* allowed: the
/// limiter fails closed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The call was over its limit. Carries the decision (`retry_after`, `limit`, ...).
    Exceeded(Box<Exceeded>),
    /// A tier was asked for that is not configured.
    UnknownTier {
        /// The tier asked for.
        tier: String,
        /// The configured tiers, comma separated.
        known: String,
    },
    /// No tier and no limit were given, and the module has no default limit.
    NoLimit,
    /// The configuration is invalid; lists every problem found.
    InvalidConfig(ConfigError),
    /// The limit resolved for this call (its tier, the module's defaults and any override)
    /// cannot be enforced, by any store or by the configured one.
    InvalidQuota(QuotaError),
    /// The call's cost is above the budget's capacity: it could never be admitted.
    CostAboveCapacity {
        /// The cost asked for.
        cost: u64,
        /// `limit + burst`.
        capacity: u64,
    },
    /// A cost of zero was asked for; use `status` to look without spending.
    ZeroCost,
    /// A stacked call mixed limits that spend with limits that only look
    /// (`Options::consume(false)`): one stacked decision spends from every limit or looks at
    /// every one, and a look would admit the call without spending from the others. Look at
    /// those limits apart (`check`, `status`).
    MixedStack,
    /// The key cannot be used.
    InvalidKey {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The memory store holds `max_keys` live keys and none has expired: the new key is
    /// refused rather than tracked without a limit.
    StoreFull {
        /// The configured cap.
        max_keys: usize,
    },
    /// The store could not be reached or answered with an error.
    Store {
        /// What happened (never includes credentials).
        message: String,
    },
    /// The store did not answer in time.
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// A rate-limited function was called while the limiter that decides it is not running:
    /// the application's `Module` for most fns, a library's own `Limiter` for fns that name
    /// one (`limiter = ...`).
    NotInitialized {
        /// The function that was called.
        function: &'static str,
    },
    /// A sync (not `async`) rate-limited fn was called on a service whose store must be waited
    /// for (Redis, or any store given to `with_store`): only the memory store decides without
    /// waiting, and the call is refused rather than blocked on. `init` reports such a fn
    /// ([`ProblemKind::SyncOnWaitingStore`]), so this is seen only by a service set up without
    /// that check.
    SyncOnWaitingStore {
        /// The function that was called.
        function: &'static str,
    },
    /// The call was over its limit and would have waited, but the queue holds
    /// `max_queue_size` calls already (or a call of a higher priority took its place).
    QueueFull {
        /// The configured size.
        max_queue_size: usize,
    },
    /// The call was not admitted within its queue timeout (or its `until_ready` deadline):
    /// capacity did not free up, or the store did not answer in time. Ended as soon as the
    /// store's refusal puts the call's turn after its timeout, else at the timeout.
    QueueTimeout {
        /// How long until the budget is expected to admit a call (others may be ahead).
        retry_after: Duration,
    },
    /// The call must wait (its turn in the queue, `until_ready`) where no Tokio runtime with a
    /// timer runs: refused rather than panicked on.
    NoRuntime {
        /// What is missing.
        missing: &'static str,
    },
    /// `Module::init` was called while a module is running (drop or shut it down first).
    AlreadyInitialized,
    /// The store holds state of an unexpected shape under the call's key (written by something
    /// else, or corrupt): the call is refused and the state left as it was.
    UnexpectedState {
        /// What was found (never the key itself).
        message: String,
    },
    /// The clock reads a time the limiter cannot count from (past about the year 2226):
    /// refused rather than wrapped around.
    ClockOutOfRange {
        /// The time read.
        now_nanos: u64,
    },
    /// `Module::init` found rate-limited fns the configuration cannot enforce; lists every one.
    Declarations(DeclarationErrors),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Exceeded(exceeded) => fmt::Display::fmt(exceeded, f),
            Error::UnknownTier { tier, known } => {
                write!(f, "unknown rate-limit tier {tier:?}; configured tiers: {known}")
            }
            Error::NoLimit => f.write_str(
                "no rate limit applies: give the call a limit or a tier, or configure a default limit",
            ),
            Error::InvalidConfig(problems) => fmt::Display::fmt(problems, f),
            Error::InvalidQuota(e) => write!(f, "invalid rate limit for this call: {e}"),
            Error::CostAboveCapacity { cost, capacity } => write!(
                f,
                "cost {cost} is above the limit's capacity of {capacity} (limit + burst): this call can never be admitted"
            ),
            Error::ZeroCost => {
                f.write_str("cost must be at least 1 (use `status` to look without spending)")
            }
            Error::MixedStack => f.write_str(
                "a stacked call mixes limits that spend with limits that only look: look at those apart",
            ),
            Error::InvalidKey { reason } => write!(f, "invalid rate-limit key: {reason}"),
            Error::StoreFull { max_keys } => write!(
                f,
                "rate-limit store is full ({max_keys} live keys): call refused"
            ),
            Error::Store { message } => write!(f, "rate-limit store failed: {message}"),
            Error::Timeout { after } => write!(
                f,
                "rate-limit store did not answer within {}ms",
                after.as_millis()
            ),
            Error::NotInitialized { function } => write!(
                f,
                "rate limiter not initialised: `{function}` is rate-limited, but its limiter is not running (call `Module::init` at start-up; for a fn of a library with a `Limiter` of its own, the library builds it)"
            ),
            Error::SyncOnWaitingStore { function } => write!(
                f,
                "`{function}` is a sync fn, but its rate limiter's store must be waited for (only the memory store decides without waiting): call refused"
            ),
            Error::QueueFull { max_queue_size } => write!(
                f,
                "rate limit exceeded and the queue is full ({max_queue_size} waiting): call refused"
            ),
            Error::QueueTimeout { retry_after } => write!(
                f,
                "rate limit exceeded: no capacity freed within the queue timeout; retry after {}ms",
                retry_after.as_millis()
            ),
            Error::NoRuntime { missing } => {
                write!(f, "this call must wait, and {missing}: call refused")
            }
            Error::AlreadyInitialized => f.write_str(
                "a rate-limit module is already initialised: shut it down (or drop its handle) before calling `Module::init` again",
            ),
            Error::UnexpectedState { message } => write!(
                f,
                "state of an unexpected shape under a limiter key: refused ({message})"
            ),
            Error::ClockOutOfRange { now_nanos } => write!(
                f,
                "the clock reads {now_nanos} ns since the epoch, beyond what the limiter counts (about the year 2226): call refused"
            ),
            Error::Declarations(errors) => fmt::Display::fmt(errors, f),
        }
    }
}

/// An invalid quota is the error's source; every other variant is its own.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidQuota(e) => Some(e),
            _ => None,
        }
    }
}

impl From<QuotaError> for Error {
    fn from(e: QuotaError) -> Self {
        Error::InvalidQuota(e)
    }
}

impl From<crate::algorithm::Undecidable> for Error {
    fn from(e: crate::algorithm::Undecidable) -> Self {
        use crate::algorithm::Undecidable;
        match e {
            Undecidable::ZeroCost => Error::ZeroCost,
            Undecidable::CostAboveCapacity { cost, capacity } => {
                Error::CostAboveCapacity { cost, capacity }
            }
            Undecidable::ClockOutOfRange { now } => Error::ClockOutOfRange { now_nanos: now },
            Undecidable::UnexpectedState => Error::UnexpectedState {
                message: "the key holds another strategy's state".into(),
            },
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

    /// How long to wait before retrying, if this is a refusal (over the limit, or a wait
    /// that timed out).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::QueueTimeout { retry_after } => Some(*retry_after),
            _ => self.decision().and_then(|d| d.retry_after),
        }
    }
}

/// A refusal, with the decision and what was being limited.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Exceeded {
    /// The decision that refused the call.
    pub decision: Decision,
    /// The budget (a function path or a name), if known.
    pub budget: Option<String>,
    /// The name the refusal's rate-limit headers give its policy ([`Error::answer`]): the
    /// budget when the caller named it (`Options::budget`, an annotated fn's `name = ...`),
    /// never an fn's path; `None`: the tier, else `"default"`.
    pub policy: Option<String>,
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

/// One annotated fn the configuration (or the store) cannot enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeclarationProblem {
    /// The fn's path.
    pub function: &'static str,
    /// Where it is.
    pub file: &'static str,
    /// Its line.
    pub line: u32,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What is wrong with an annotated fn, one variant per rule `Module::init` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// `tier = "name"` names a tier the configuration does not have.
    UnknownTier {
        /// The tier named.
        tier: &'static str,
        /// The configured tiers, comma separated.
        known: String,
    },
    /// The fn relies on the module's default limit, and there is none.
    NoLimit,
    /// `tier = <expr>` chooses a tier per call, and no tier is configured.
    NoTiers,
    /// The fn's limit, resolved as the running service resolves it, cannot be enforced (under
    /// `tier`, when the fn's tier is one of several).
    Unenforceable {
        /// The tier the limit was resolved under, if any.
        tier: Option<String>,
        /// Why.
        error: QuotaError,
    },
    /// Two fns share a budget name but not its settings.
    SharedBudget {
        /// The budget.
        budget: &'static str,
        /// The other fn, its place, and both settings.
        other: &'static str,
        /// The other fn's file.
        other_file: &'static str,
        /// The other fn's line.
        other_line: u32,
        /// This fn's settings, as written.
        spec: String,
        /// The other fn's settings, as written.
        other_spec: String,
    },
    /// Two different fns fall on the same default budget name (two methods of one name
    /// annotated on their own in one module): they would share a budget by accident.
    SameDefaultName {
        /// The name.
        budget: &'static str,
        /// The other fn's file.
        other_file: &'static str,
        /// The other fn's line.
        other_line: u32,
    },
    /// The fn is sync (not `async`) and the store must be waited for (Redis, or any store
    /// given to `with_store`): it could not be decided without blocking, so it is never run
    /// there. Make it an `async fn`, or limit it with the memory store.
    SyncOnWaitingStore,
    /// The fn counts only some outcomes (`count = "err"` or `"ok"`), and the store does not
    /// give spends back ([`Store::refunds`](crate::store::Store::refunds)): every call would
    /// count. The memory store refunds; the Redis store does not yet.
    NoRefunds,
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::UnknownTier { tier, known } => {
                write!(f, "tier {tier:?} is not configured (configured tiers: {known})")
            }
            ProblemKind::NoLimit => f.write_str(
                "uses the module's default limit, but none is configured (set `default_limit` \
                 or `default_tier`, or give the fn a `limit`)",
            ),
            ProblemKind::NoTiers => f.write_str(
                "chooses its tier per call, but no tier is configured: every call would be refused",
            ),
            ProblemKind::Unenforceable { tier: None, error } => {
                write!(f, "its limit cannot be enforced: {error}")
            }
            ProblemKind::Unenforceable {
                tier: Some(tier),
                error,
            } => write!(f, "its limit cannot be enforced under tier {tier:?}: {error}"),
            ProblemKind::SharedBudget {
                budget,
                other,
                other_file,
                other_line,
                spec,
                other_spec,
            } => write!(
                f,
                "shares the budget {budget:?} with `{other}` ({other_file}:{other_line}) but \
                 with different settings ({spec} vs {other_spec})"
            ),
            ProblemKind::SameDefaultName {
                budget,
                other_file,
                other_line,
            } => write!(
                f,
                "has the same default budget name {budget:?} as the fn at {other_file}:{other_line}: \
                 give one of them `name = \"...\"`, or annotate their impl blocks so the name \
                 includes the type"
            ),
            ProblemKind::SyncOnWaitingStore => f.write_str(
                "is a sync fn, and this store must be waited for: only the memory store decides \
                 without waiting (make the fn `async`, or use the memory store)",
            ),
            ProblemKind::NoRefunds => f.write_str(
                "counts only some outcomes (`count = ..`), and this store does not give spends \
                 back, so every call would count (the memory store does; Redis does not yet)",
            ),
        }
    }
}

impl fmt::Display for DeclarationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.file, self.line, self.function, self.kind
        )
    }
}

/// Every problem found when checking the binary's declarations against a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeclarationErrors {
    /// One entry per problem, in file and line order.
    pub problems: Vec<DeclarationProblem>,
}

impl fmt::Display for DeclarationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rate-limited fn(s) cannot be enforced with this configuration",
            self.problems.len()
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DeclarationErrors {}
