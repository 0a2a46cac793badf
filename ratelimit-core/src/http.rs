//! HTTP answers in axum's types (feature `axum`): the rate-limit headers as a typed
//! [`HeaderMap`], merged across stacked limits, and [`IntoResponse`] for [`Answer`] and
//! [`Error`], so an annotated axum handler returning `Result<_, ratelimit::Error>` answers
//! `429` by itself. What is answered (status, code, headers, body) is decided without any
//! feature, by [`Answer`]: this module only converts it.

use std::ops::Range;

use axum::body::{Body, Bytes};
use axum::http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::answer::Answer;
use crate::decision::{names, Decision};
use crate::error::Error;

const LIMIT: HeaderName = HeaderName::from_static(names::LIMIT);
const REMAINING: HeaderName = HeaderName::from_static(names::REMAINING);
const RESET: HeaderName = HeaderName::from_static(names::RESET);
const POLICY: HeaderName = HeaderName::from_static(names::POLICY);
const RATELIMIT: HeaderName = HeaderName::from_static(names::RATELIMIT);

#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
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
    /// let burst = store.acquire("k", &Quota::per_second(2).unwrap(), 1, clock.now()).unwrap();
    /// let hourly = store.acquire("k", &Quota::per_hour(100).unwrap(), 1, clock.now()).unwrap();
    /// let mut headers = axum::http::HeaderMap::new();
    /// burst.add_headers(&mut headers, Some("burst"));
    /// hourly.add_headers(&mut headers, Some("hourly"));
    /// assert_eq!(headers["ratelimit-policy"], "\"burst\";q=2;w=1, \"hourly\";q=100;w=3600");
    /// assert_eq!(headers["x-ratelimit-remaining"], "1");
    /// ```
    pub fn add_headers(&self, headers: &mut HeaderMap, policy: Option<&str>) {
        let Some(f) = self.header_fields(policy) else {
            return;
        };
        // Every value is written into one buffer and handed out as slices of it: two
        // allocations for all the fields (the buffer, and the count its slices share).
        let mut buf = Vec::with_capacity(2 * f.name.len() + 128);
        let mut list = |field: &HeaderName, item: &dyn Fn(&mut Vec<u8>)| {
            let start = buf.len();
            if let Some(existing) = headers.get(field) {
                buf.extend_from_slice(existing.as_bytes());
                buf.extend_from_slice(b", ");
            }
            item(&mut buf);
            start..buf.len()
        };
        let ratelimit = list(&RATELIMIT, &|out| f.ratelimit_item(out));
        let policy = list(&POLICY, &|out| f.policy_item(out));
        let more_restrictive = match number(headers.get(&REMAINING)) {
            None => true,
            Some(theirs) => {
                f.remaining < theirs
                    || (f.remaining == theirs && Some(f.reset) > number(headers.get(&RESET)))
            }
        };
        let retry = f
            .retry_after
            .filter(|&retry| number(headers.get(RETRY_AFTER)) < Some(retry));
        let mut push_number = |n: u64| {
            let start = buf.len();
            buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            start..buf.len()
        };
        let numbers = more_restrictive.then(|| {
            [
                push_number(f.limit),
                push_number(f.remaining),
                push_number(f.reset),
            ]
        });
        let retry = retry.map(push_number);
        let buf = Bytes::from(buf);
        // Digits, `push_sf_string`'s printable ASCII and values already in the map: always
        // valid, so nothing is skipped in practice.
        let mut insert = |name: HeaderName, span: Range<usize>| {
            if let Ok(value) = HeaderValue::from_maybe_shared(buf.slice(span)) {
                headers.insert(name, value);
            }
        };
        insert(RATELIMIT, ratelimit);
        insert(POLICY, policy);
        if let Some([limit, remaining, reset]) = numbers {
            insert(LIMIT, limit);
            insert(REMAINING, remaining);
            insert(RESET, reset);
        }
        if let Some(retry) = retry {
            insert(RETRY_AFTER, retry);
        }
    }

    /// The `429 Too Many Requests` for this refusal, its [`refusal`](Self::refusal) answer: a
    /// JSON body `{"code":"RATE_LIMITED","retryAfter":<seconds>,"limit":<limit>,"remaining":<n>}`
    /// and `Retry-After`, without the other rate-limit headers (add
    /// [`header_map`](Self::header_map) for those, as `impl IntoResponse for Error` does). The
    /// decision is in the response's extensions.
    pub fn too_many_requests(&self) -> Response {
        let mut response = self.refusal().into_response();
        response.extensions_mut().insert(self.clone());
        response
    }
}

/// The answer as it is: its status, its headers in order, its body.
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
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

/// The error's [`answer`](Error::answer): `429` with the JSON body and every rate-limit header
/// for [`Error::Exceeded`]; otherwise [`Error::status`] with `{"code":"<CODE>"}` (the message
/// stays in the server: it may name internals), and `Retry-After` unless it is a `500`. The
/// error itself (and a refusal's decision) is in the response's extensions, for logging
/// middleware.
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
        let mut response = self.answer().into_response();
        if let Some(decision) = self.decision() {
            response.extensions_mut().insert(decision.clone());
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// A header's value as a number, if it is one.
fn number(value: Option<&HeaderValue>) -> Option<u64> {
    value?.to_str().ok()?.parse().ok()
}
