//! HTTP answers in the `http` crate's types (feature `http`): the rate-limit headers merged
//! into a typed [`HeaderMap`], an [`Answer`] as an `http::Response`; and with feature `axum`,
//! [`IntoResponse`] for [`Answer`] and [`Error`], so an annotated axum handler returning
//! `Result<_, ratelimit::Error>` answers `429` by itself. What is answered (status, code,
//! headers, body) is decided without any feature, by [`Answer`], and the headers are merged
//! by [`Decision::merge_headers`]: this module only converts.

use std::ops::Range;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::StatusCode;

use crate::answer::Answer;
use crate::decision::{names, Decision};
use crate::error::Error;
use crate::merge::{HeaderField, ResponseHeaders};

const LIMIT: HeaderName = HeaderName::from_static(names::LIMIT);
const REMAINING: HeaderName = HeaderName::from_static(names::REMAINING);
const RESET: HeaderName = HeaderName::from_static(names::RESET);
const POLICY: HeaderName = HeaderName::from_static(names::POLICY);
const RATELIMIT: HeaderName = HeaderName::from_static(names::RATELIMIT);

/// The typed name of `field`, without parsing it.
fn header_name(field: HeaderField) -> HeaderName {
    match field {
        HeaderField::RateLimit => RATELIMIT,
        HeaderField::Policy => POLICY,
        HeaderField::Limit => LIMIT,
        HeaderField::Remaining => REMAINING,
        HeaderField::Reset => RESET,
        HeaderField::RetryAfter => RETRY_AFTER,
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl ResponseHeaders for HeaderMap {
    fn value(&self, field: HeaderField) -> Option<&[u8]> {
        self.get(header_name(field)).map(HeaderValue::as_bytes)
    }

    /// Every value a slice of one shared buffer: two allocations for all the fields (the
    /// buffer, and the count its slices share).
    fn set(&mut self, buf: Vec<u8>, values: &[(HeaderField, Range<usize>)]) {
        let buf = Bytes::from(buf);
        for (field, span) in values {
            // Digits, `push_sf_string`'s printable ASCII and values already in the map: always
            // valid, so nothing is skipped in practice.
            if let Ok(value) = HeaderValue::from_maybe_shared(buf.slice(span.clone())) {
                self.insert(header_name(*field), value);
            }
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl Decision {
    /// The rate-limit headers of this decision (see [`headers`](Self::headers)) as a typed
    /// map, the IETF items named `policy` (default: the tier, else `"default"`). Empty for an
    /// [`unlimited`](Self::unlimited) decision.
    ///
    /// ```
    /// use ratelimit_core::{Clock, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(Duration::from_secs(60));
    /// let quota = Quota::per_minute(2).unwrap();
    /// let d = MemoryStore::new().acquire("k", &quota, 1, clock.now()).unwrap();
    /// let map = d.header_map(Some("burst"));
    /// assert_eq!(map["x-ratelimit-remaining"], "1");
    /// assert_eq!(map["ratelimit-policy"], "\"burst\";q=2;w=60");
    /// assert!(map.get("retry-after").is_none());
    /// ```
    pub fn header_map(&self, policy: Option<&str>) -> HeaderMap {
        let mut map = HeaderMap::new();
        self.add_headers(&mut map, policy);
        map
    }

    /// Adds this decision's rate-limit headers to `headers`, which may already hold other
    /// limits' (stacked layers, a layer around an annotated handler), without overwriting
    /// them:
    ///
    /// - `RateLimit` and `RateLimit-Policy` are lists: this decision's item (named `policy`,
    ///   default: the tier, else `"default"`) is appended, so every policy is listed;
    /// - `X-RateLimit-Limit/Remaining/Reset` describe one limit, the most restrictive: this
    ///   decision's replace what is there only if it has fewer calls remaining (or as few, and
    ///   resets later);
    /// - `Retry-After`, on a refusal, is the longest wait asked for.
    ///
    /// Nothing is added for an [`unlimited`](Self::unlimited) decision.
    ///
    /// ```
    /// use ratelimit_core::{Clock, ManualClock, MemoryStore, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(Duration::from_secs(60));
    /// let store = MemoryStore::new();
    /// let burst = store.acquire("k:burst", &Quota::per_second(2).unwrap(), 1, clock.now()).unwrap();
    /// let hourly = store.acquire("k:hourly", &Quota::per_hour(100).unwrap(), 1, clock.now()).unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// burst.add_headers(&mut headers, Some("burst"));
    /// hourly.add_headers(&mut headers, Some("hourly"));
    /// assert_eq!(headers["ratelimit-policy"], "\"burst\";q=2;w=1, \"hourly\";q=100;w=3600");
    /// assert_eq!(headers["x-ratelimit-remaining"], "1");
    /// ```
    pub fn add_headers(&self, headers: &mut HeaderMap, policy: Option<&str>) {
        self.merge_headers(headers, policy);
    }

    /// The `429 Too Many Requests` for this refusal, its [`refusal`](Self::refusal) answer: a
    /// JSON body `{"code":"RATE_LIMITED","retryAfter":<seconds>,"limit":<limit>,"remaining":<n>}`
    /// and `Retry-After`, without the other rate-limit headers (add
    /// [`header_map`](Self::header_map) for those). The decision is in the response's
    /// extensions. `too_many_requests` (feature `axum`) is the same as an axum response.
    pub fn refusal_response(&self) -> http::Response<String> {
        let mut response = self.refusal().into_http();
        response.extensions_mut().insert(self.clone());
        response
    }
}

impl Answer {
    /// The answer as an `http::Response`: its status, its headers in order, its body.
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn into_http(self) -> http::Response<String> {
        let mut response = http::Response::new(self.body);
        // Always one of `Error::status`'s; anything else would be a 500, never a pass.
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.reserve(self.headers.len());
        for (name, value) in self.headers {
            // Lowercase names of ours, and digits or `push_sf_string`'s printable ASCII: always
            // valid, so nothing is skipped in practice.
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.append(HeaderName::from_static(name), value);
            }
        }
        response
    }
}

impl Error {
    /// The error's [`answer`](Error::answer) as an `http::Response`: `429` with the JSON body
    /// and every rate-limit header for [`Error::Exceeded`]; otherwise [`Error::status`] with
    /// `{"code":"<CODE>"}` (the message stays in the server: it may name internals), and
    /// `Retry-After` unless it is a `500`. The error itself (and a refusal's decision) is in
    /// the response's extensions, for logging middleware.
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn into_http(self) -> http::Response<String> {
        let mut response = self.answer().into_http();
        if let Some(decision) = self.decision() {
            response.extensions_mut().insert(decision.clone());
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// The same answers as axum responses.
#[cfg(feature = "axum")]
mod axum_answers {
    use axum::body::Body;
    use axum::response::{IntoResponse, Response};

    use crate::answer::Answer;
    use crate::decision::Decision;
    use crate::error::Error;

    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    impl Decision {
        /// [`refusal_response`](Self::refusal_response) as an axum response.
        pub fn too_many_requests(&self) -> Response {
            self.refusal_response().map(Body::from)
        }
    }

    /// The answer as it is: its status, its headers in order, its body.
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    impl IntoResponse for Answer {
        fn into_response(self) -> Response {
            self.into_http().map(Body::from)
        }
    }

    /// The error's answer, as [`Error::into_http`] makes it.
    ///
    /// ```
    /// use axum::response::IntoResponse;
    /// use ratelimit_core::Error;
    ///
    /// let response = Error::Timeout { after: std::time::Duration::from_millis(50) }.into_response();
    /// assert_eq!(response.status(), 503);
    /// assert!(response.extensions().get::<Error>().is_some());
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    impl IntoResponse for Error {
        fn into_response(self) -> Response {
            self.into_http().map(Body::from)
        }
    }
}
