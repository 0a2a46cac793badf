//! gRPC answers in tonic's types (feature `tonic`): a refusal as `RESOURCE_EXHAUSTED`, an
//! error as its [`Answer::grpc_code`], so an annotated tonic method returning
//! `Result<_, tonic::Status>` answers a refusal by itself (`?` converts). What is answered is
//! decided by [`Answer`] with no feature: this module only converts.
//!
//! The retry delay travels the standard way, as a `google.rpc.RetryInfo` in the status'
//! details (`grpc-status-details-bin`), to the millisecond; the answer's header fields
//! (`retry-after` in seconds and, for a refusal, the rate-limit fields) go with it as
//! metadata. The message is the answer's code (`RATE_LIMITED`, `STORE_FAILED`, ...): an
//! error's own message may name internals and stays in the server.

use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataKey};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::answer::{Answer, CONTENT_TYPE, RATE_LIMITED};
use crate::decision::Decision;
use crate::error::Error;

impl Answer {
    /// The answer as a gRPC status: [`grpc_code`](Self::grpc_code), the message `code`,
    /// `retry_after` as a `RetryInfo` detail (none: no details), and every header field but
    /// the content type as metadata.
    fn into_status(self, code: &str, retry_after: Option<Duration>) -> Status {
        let details = match retry_after {
            Some(after) => ErrorDetails::with_retry_info(Some(after)),
            None => ErrorDetails::new(),
        };
        let mut status = Status::with_error_details(Code::from(self.grpc_code()), code, details);
        let metadata = status.metadata_mut();
        for (name, value) in self.headers {
            if name == CONTENT_TYPE {
                continue;
            }
            // Lowercase names of ours, and digits or printable ASCII: always valid.
            if let Ok(value) = value.parse::<AsciiMetadataValue>() {
                metadata.append(MetadataKey::from_static(name), value);
            }
        }
        status
    }
}

impl Decision {
    /// This refusal as a gRPC status: `RESOURCE_EXHAUSTED`, message `RATE_LIMITED`, the wait
    /// as a `RetryInfo` detail (at least 1 ms) and `retry-after` (seconds, rounded up) as
    /// metadata; the other rate-limit fields are added by whoever sends it (the layer adds
    /// every limit's).
    ///
    /// ```
    /// use ratelimit_core::{Clock, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    /// use tonic_types::StatusExt;
    ///
    /// let clock = ManualClock::new(Duration::from_secs(60));
    /// let (store, quota) = (MemoryStore::new(), Quota::per_minute(1).unwrap());
    /// store.acquire("k", &quota, 1, clock.now()).unwrap();
    /// let status = store.acquire("k", &quota, 1, clock.now()).unwrap().refusal_status();
    /// assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    /// assert_eq!(status.metadata().get("retry-after").unwrap(), "60");
    /// let retry = status.get_details_retry_info().unwrap().retry_delay;
    /// assert_eq!(retry, Some(Duration::from_secs(60)));
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
    pub fn refusal_status(&self) -> Status {
        let retry = self.retry_after.unwrap_or(Duration::from_millis(1));
        self.refusal().into_status(RATE_LIMITED, Some(retry))
    }
}

/// The error's [`answer`](Error::answer) as a gRPC status: a refusal
/// ([`Error::Exceeded`]) is `RESOURCE_EXHAUSTED` with its `RetryInfo` and every rate-limit
/// field as metadata; a full queue or a wait that timed out is `RESOURCE_EXHAUSTED` too; a
/// store that could not decide is `UNAVAILABLE` (with `retry-after`); the server's own
/// configuration is `INTERNAL`. Never `OK`.
///
/// ```
/// use ratelimit_core::Error;
///
/// let status = tonic::Status::from(Error::Timeout { after: std::time::Duration::from_millis(50) });
/// assert_eq!(status.code(), tonic::Code::Unavailable);
/// assert_eq!(status.message(), "STORE_TIMEOUT");
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let retry = error.retry_after();
        error.answer().into_status(error.code(), retry)
    }
}
