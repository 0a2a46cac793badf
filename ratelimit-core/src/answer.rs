//! The HTTP answer to a refused or failed call, in no framework's types: its status, code,
//! headers and JSON body are decided here, once, with no feature. The `axum` adapter only
//! converts an [`Answer`] into a response; another framework's adapter can do the same.

use crate::decision::{names, retry_secs, Decision};
use crate::error::Error;

pub(crate) const CONTENT_TYPE: &str = "content-type";
const JSON: &str = "application/json";

/// What to answer over HTTP to a refused or failed call: made by [`Decision::refusal`] and
/// [`Error::answer`], the one place a status, a code, a header or a body is decided; the
/// `axum` feature's `IntoResponse` impls send exactly this.
///
/// ```
/// use ratelimit_core::Error;
///
/// let answer = Error::Store { message: "connection refused".into() }.answer();
/// assert_eq!(answer.status, 503);
/// assert_eq!(answer.header("retry-after"), Some("1"));
/// assert_eq!(answer.body, r#"{"code":"STORE_FAILED"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answer {
    /// The status code: `429`, `503` or `500` (see [`Error::status`]).
    pub status: u16,
    /// The header fields, names lowercase, in the order they are sent.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body (`Content-Type: application/json`).
    pub body: String,
}

impl Answer {
    /// A JSON answer, with `Retry-After` (in seconds) if given.
    fn json(status: u16, retry_after: Option<u64>, body: String) -> Answer {
        let mut headers = Vec::with_capacity(7);
        headers.push((CONTENT_TYPE, JSON.to_owned()));
        if let Some(secs) = retry_after {
            headers.push((names::RETRY_AFTER, secs.to_string()));
        }
        Answer {
            status,
            headers,
            body,
        }
    }

    /// The gRPC status code of this answer, from its HTTP status as gRPC maps them: `429` is
    /// `RESOURCE_EXHAUSTED` (8), `503` is `UNAVAILABLE` (14), anything else `INTERNAL` (13),
    /// never `OK`. With feature `tonic`, `tonic::Status` is built from it.
    ///
    /// ```
    /// use ratelimit_core::Error;
    ///
    /// assert_eq!(Error::Store { message: "down".into() }.answer().grpc_code(), 14);
    /// assert_eq!(Error::NoLimit.answer().grpc_code(), 13);
    /// ```
    pub fn grpc_code(&self) -> i32 {
        match self.status {
            429 => 8,
            503 => 14,
            _ => 13,
        }
    }

    /// The value of the header field `name` (lowercase), if the answer has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.as_str())
    }
}

impl Decision {
    /// The `429 Too Many Requests` for this refusal: a JSON body
    /// `{"code":"RATE_LIMITED","retryAfter":<seconds>,"limit":<limit>,"remaining":<n>}` (`n`:
    /// what remains, 0 or fewer units than a refused call of a larger cost asked for) and
    /// `Retry-After`, without the other rate-limit headers ([`headers`](Self::headers), or
    /// [`Error::answer`] for a refusal with them).
    ///
    /// ```
    /// use ratelimit_core::{Clock, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(Duration::from_secs(60));
    /// let (store, quota) = (MemoryStore::new(), Quota::per_minute(1).unwrap());
    /// store.acquire("k", &quota, 1, clock.now()).unwrap();
    /// let refused = store.acquire("k", &quota, 1, clock.now()).unwrap().refusal();
    /// assert_eq!(refused.status, 429);
    /// assert_eq!(refused.header("retry-after"), Some("60"));
    /// assert_eq!(refused.body, r#"{"code":"RATE_LIMITED","retryAfter":60,"limit":1,"remaining":0}"#);
    /// ```
    pub fn refusal(&self) -> Answer {
        let retry = self
            .header_fields(None)
            .and_then(|f| f.retry_after)
            .unwrap_or(1);
        // Numbers and fixed names only: written in the documented key order, nothing to escape.
        let body = format!(
            r#"{{"code":"{RATE_LIMITED}","retryAfter":{retry},"limit":{},"remaining":{}}}"#,
            self.limit, self.remaining
        );
        Answer::json(429, Some(retry), body)
    }
}

/// The code of a refusal over its limit.
pub(crate) const RATE_LIMITED: &str = "RATE_LIMITED";

impl Error {
    /// The status this error answers with over HTTP: `429` for [`Error::Exceeded`] (and for a
    /// full queue or a wait that timed out), `503` when the store could not decide (failure,
    /// timeout, full, state of an unexpected shape, a clock out of range), `500` for
    /// everything that is the server's own configuration (unknown tier, no limit, invalid
    /// quota or key, no module running...).
    pub fn status(&self) -> u16 {
        match self {
            Error::Exceeded(_) | Error::QueueFull { .. } | Error::QueueTimeout { .. } => 429,
            Error::Store { .. }
            | Error::Timeout { .. }
            | Error::StoreFull { .. }
            | Error::UnexpectedState { .. }
            | Error::ClockOutOfRange { .. } => 503,
            Error::UnknownTier { .. }
            | Error::NoLimit
            | Error::InvalidConfig(_)
            | Error::InvalidQuota(_)
            | Error::CostAboveCapacity { .. }
            | Error::ZeroCost
            | Error::MixedStack
            | Error::InvalidKey { .. }
            | Error::NotInitialized { .. }
            | Error::SyncOnWaitingStore { .. }
            | Error::NoRuntime { .. }
            | Error::AlreadyInitialized
            | Error::Declarations(_) => 500,
        }
    }

    /// Every code an error answers with, and its status: what an API document lists (the
    /// `utoipa` docs are built from it), the same as [`code`](Self::code) and
    /// [`status`](Self::status) say of each error.
    pub const CODES: [(&'static str, u16); 21] = [
        (RATE_LIMITED, 429),
        ("QUEUE_FULL", 429),
        ("QUEUE_TIMEOUT", 429),
        ("STORE_FULL", 503),
        ("STORE_FAILED", 503),
        ("STORE_TIMEOUT", 503),
        ("UNEXPECTED_STATE", 503),
        ("CLOCK_OUT_OF_RANGE", 503),
        ("UNKNOWN_TIER", 500),
        ("NO_LIMIT", 500),
        ("INVALID_CONFIG", 500),
        ("INVALID_QUOTA", 500),
        ("COST_ABOVE_CAPACITY", 500),
        ("ZERO_COST", 500),
        ("MIXED_STACK", 500),
        ("INVALID_KEY", 500),
        ("NOT_INITIALIZED", 500),
        ("SYNC_ON_WAITING_STORE", 500),
        ("NO_RUNTIME", 500),
        ("ALREADY_INITIALIZED", 500),
        ("DECLARATIONS", 500),
    ];

    /// The error's code, the `"code"` field of its JSON body: `RATE_LIMITED`,
    /// `STORE_FAILED`, `STORE_TIMEOUT`, `UNKNOWN_TIER`, `NOT_INITIALIZED`...
    pub fn code(&self) -> &'static str {
        match self {
            Error::Exceeded(_) => RATE_LIMITED,
            Error::QueueFull { .. } => "QUEUE_FULL",
            Error::QueueTimeout { .. } => "QUEUE_TIMEOUT",
            Error::UnknownTier { .. } => "UNKNOWN_TIER",
            Error::NoLimit => "NO_LIMIT",
            Error::InvalidConfig(_) => "INVALID_CONFIG",
            Error::InvalidQuota(_) => "INVALID_QUOTA",
            Error::CostAboveCapacity { .. } => "COST_ABOVE_CAPACITY",
            Error::ZeroCost => "ZERO_COST",
            Error::MixedStack => "MIXED_STACK",
            Error::InvalidKey { .. } => "INVALID_KEY",
            Error::StoreFull { .. } => "STORE_FULL",
            Error::Store { .. } => "STORE_FAILED",
            Error::Timeout { .. } => "STORE_TIMEOUT",
            Error::NotInitialized { .. } => "NOT_INITIALIZED",
            Error::SyncOnWaitingStore { .. } => "SYNC_ON_WAITING_STORE",
            Error::NoRuntime { .. } => "NO_RUNTIME",
            Error::AlreadyInitialized => "ALREADY_INITIALIZED",
            Error::UnexpectedState { .. } => "UNEXPECTED_STATE",
            Error::ClockOutOfRange { .. } => "CLOCK_OUT_OF_RANGE",
            Error::Declarations(_) => "DECLARATIONS",
        }
    }

    /// The HTTP answer to this error. For [`Error::Exceeded`], the decision's
    /// [`refusal`](Decision::refusal) with every rate-limit header; otherwise
    /// [`status`](Self::status) with `{"code":"<CODE>"}` (the message stays in the server: it
    /// may name internals), and `Retry-After` unless the status is `500`: the wait asked for
    /// ([`retry_after`](Self::retry_after), whole seconds rounded up), else `1` (the store may
    /// answer again soon, the queue may have room). Every `429` body carries `retryAfter`
    /// too (`{"code":"QUEUE_FULL","retryAfter":1}`), so a client reads every refusal alike.
    pub fn answer(&self) -> Answer {
        if let Error::Exceeded(exceeded) = self {
            let decision = &exceeded.decision;
            let mut answer = decision.refusal();
            if let Some(fields) = decision.header_fields(exceeded.policy.as_deref()) {
                fields.push_pairs(&mut answer.headers);
            }
            return answer;
        }
        let status = self.status();
        let retry = match self.retry_after() {
            Some(after) => Some(retry_secs(after)),
            None => (status != 500).then_some(1),
        };
        let body = match (status, retry) {
            (429, Some(retry)) => format!(r#"{{"code":"{}","retryAfter":{retry}}}"#, self.code()),
            _ => format!(r#"{{"code":"{}"}}"#, self.code()),
        };
        Answer::json(status, retry, body)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::{ConfigError, DeclarationErrors, Exceeded};
    use crate::{Clock, ManualClock, MemoryStore, Quota, QuotaError, Strategy};

    /// A refusal of a 2-a-minute fixed window 40 s into its minute, as the HTTP tests make.
    fn exceeded() -> Error {
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let quota = Quota::per_minute(2)
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        let store = MemoryStore::new();
        for _ in 0..2 {
            store.acquire("k", &quota, 1, clock.now()).unwrap();
        }
        let decision = store.acquire("k", &quota, 1, clock.now()).unwrap();
        assert!(!decision.allowed);
        Error::Exceeded(Box::new(Exceeded {
            decision,
            budget: None,
            policy: None,
        }))
    }

    #[test]
    fn each_error_answers_with_its_status_code_body_and_retry_after() {
        let errors: [(Error, u16, &str, Option<&str>); 20] = [
            (
                Error::QueueFull { max_queue_size: 1 },
                429,
                "QUEUE_FULL",
                Some("1"),
            ),
            (
                Error::QueueTimeout {
                    retry_after: Duration::from_millis(2_001),
                },
                429,
                "QUEUE_TIMEOUT",
                Some("3"),
            ),
            (
                Error::Store {
                    message: "connection refused".into(),
                },
                503,
                "STORE_FAILED",
                Some("1"),
            ),
            (
                Error::Timeout {
                    after: Duration::from_millis(50),
                },
                503,
                "STORE_TIMEOUT",
                Some("1"),
            ),
            (
                Error::StoreFull { max_keys: 1 },
                503,
                "STORE_FULL",
                Some("1"),
            ),
            (
                Error::UnexpectedState {
                    message: "a string".into(),
                },
                503,
                "UNEXPECTED_STATE",
                Some("1"),
            ),
            (
                Error::ClockOutOfRange {
                    now_nanos: u64::MAX,
                },
                503,
                "CLOCK_OUT_OF_RANGE",
                Some("1"),
            ),
            (
                Error::UnknownTier {
                    tier: "gold".into(),
                    known: "pro".into(),
                },
                500,
                "UNKNOWN_TIER",
                None,
            ),
            (Error::NoLimit, 500, "NO_LIMIT", None),
            (
                Error::InvalidConfig(ConfigError { problems: vec![] }),
                500,
                "INVALID_CONFIG",
                None,
            ),
            (
                Error::InvalidQuota(QuotaError::ZeroWindow),
                500,
                "INVALID_QUOTA",
                None,
            ),
            (
                Error::CostAboveCapacity {
                    cost: 3,
                    capacity: 2,
                },
                500,
                "COST_ABOVE_CAPACITY",
                None,
            ),
            (Error::ZeroCost, 500, "ZERO_COST", None),
            (Error::MixedStack, 500, "MIXED_STACK", None),
            (
                Error::InvalidKey { reason: "empty" },
                500,
                "INVALID_KEY",
                None,
            ),
            (
                Error::NotInitialized { function: "f" },
                500,
                "NOT_INITIALIZED",
                None,
            ),
            (
                Error::SyncOnWaitingStore { function: "f" },
                500,
                "SYNC_ON_WAITING_STORE",
                None,
            ),
            (
                Error::NoRuntime { missing: "a timer" },
                500,
                "NO_RUNTIME",
                None,
            ),
            (Error::AlreadyInitialized, 500, "ALREADY_INITIALIZED", None),
            (
                Error::Declarations(DeclarationErrors { problems: vec![] }),
                500,
                "DECLARATIONS",
                None,
            ),
        ];
        let mut listed = vec![(RATE_LIMITED, 429)];
        for (error, status, code, retry_after) in errors {
            let answer = error.answer();
            assert_eq!((error.status(), error.code()), (status, code), "{error:?}");
            listed.push((code, status));
            let mut headers = vec![(CONTENT_TYPE, JSON.to_owned())];
            headers.extend(retry_after.map(|r| (names::RETRY_AFTER, r.to_owned())));
            let body = match (status, retry_after) {
                (429, Some(r)) => format!(r#"{{"code":"{code}","retryAfter":{r}}}"#),
                _ => format!(r#"{{"code":"{code}"}}"#),
            };
            assert_eq!(
                answer,
                Answer {
                    status,
                    headers,
                    body
                },
                "{error:?}"
            );
        }
        // `CODES` lists exactly what the errors answer (an API document is built from it).
        listed.sort_unstable();
        let mut codes = Error::CODES.to_vec();
        codes.sort_unstable();
        assert_eq!(listed, codes);
    }

    #[test]
    fn a_refusal_answers_429_with_its_json_body_and_every_header() {
        let error = exceeded();
        assert_eq!((error.status(), error.code()), (429, RATE_LIMITED));
        let reset = (1_000_000 / 60 + 1) * 60;
        let header = |name: &'static str, value: &str| (name, value.to_owned());
        assert_eq!(
            error.answer(),
            Answer {
                status: 429,
                headers: vec![
                    header("content-type", "application/json"),
                    header("retry-after", "20"),
                    header("ratelimit", "\"default\";r=0;t=20"),
                    header("ratelimit-policy", "\"default\";q=2;w=60"),
                    header("x-ratelimit-limit", "2"),
                    header("x-ratelimit-remaining", "0"),
                    header("x-ratelimit-reset", &reset.to_string()),
                ],
                body: r#"{"code":"RATE_LIMITED","retryAfter":20,"limit":2,"remaining":0}"#.into(),
            }
        );
        // The decision's own refusal is the same, without the rate-limit headers.
        let refusal = error.decision().unwrap().refusal();
        assert_eq!(refusal.headers, error.answer().headers[..2]);
        assert_eq!(refusal.body, error.answer().body);
    }

    /// A sliding log of 2 per 6 s refuses a third call 2 s after the first: the next call may
    /// pass in 4 s, the budget is full in 6. `t` said 6 beside `Retry-After: 4`; the draft
    /// asks for the same point in time.
    #[test]
    fn retry_after_and_t_name_the_same_point_in_time_on_a_refusal() {
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let quota = Quota::new(2, Duration::from_secs(6))
            .unwrap()
            .with_strategy(Strategy::SlidingWindow);
        let store = MemoryStore::new();
        store.acquire("k", &quota, 1, clock.now()).unwrap();
        clock.advance(Duration::from_secs(2));
        store.acquire("k", &quota, 1, clock.now()).unwrap();
        let refused = store.acquire("k", &quota, 1, clock.now()).unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, Some(Duration::from_secs(4)));
        assert_eq!(refused.reset_after, Duration::from_secs(6));
        let answer = Error::Exceeded(Box::new(Exceeded {
            decision: refused,
            budget: None,
            policy: None,
        }))
        .answer();
        assert_eq!(answer.header("retry-after"), Some("4"));
        assert_eq!(answer.header("ratelimit"), Some("\"default\";r=0;t=4"));
        // Admitted, `t` is still the time until the budget is full.
        clock.advance(Duration::from_secs(4));
        let admitted = store.acquire("k", &quota, 1, clock.now()).unwrap();
        let headers = admitted.headers();
        assert!(headers.contains(&("ratelimit", "\"default\";r=0;t=6".to_owned())));
    }

    #[test]
    fn a_refusal_without_a_wait_still_asks_for_a_second() {
        let mut error = exceeded();
        if let Error::Exceeded(e) = &mut error {
            e.decision.retry_after = None;
        }
        let answer = error.answer();
        assert_eq!(answer.header("retry-after"), Some("1"));
        assert!(
            answer.body.contains(r#""retryAfter":1,"#),
            "{}",
            answer.body
        );
    }
}
