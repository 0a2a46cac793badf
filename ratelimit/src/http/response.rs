//! What the layer answers: the rate-limit headers it adds to every counted response, merged
//! across stacked layers, and its default refusal and error responses.
//!
//! The values themselves are computed in one place, [`Decision::header_map`] (the same
//! computation as [`Decision::headers`]); this file only decides how several layers' fields
//! share one response.

use axum::response::{IntoResponse, Response};
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::{Decision, Error};

const LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The default refusal: `429` with `{"code":"RATE_LIMITED","retryAfter":..,"limit":..,
/// "remaining":0}` and `Retry-After` ([`Decision::too_many_requests`]).
pub(crate) fn refused(decision: &Decision) -> Response {
    decision.too_many_requests()
}

/// The default error response: [`Error`]'s own (`503` when the store could not decide, `500`
/// for the server's configuration, such as no module running or no peer address), with
/// `{"code":"<CODE>"}`.
pub(crate) fn failed(error: &Error) -> Response {
    error.clone().into_response()
}

/// Adds one layer's fields to `headers`, which may already hold an inner layer's:
///
/// - `RateLimit` and `RateLimit-Policy` are lists: this layer's item is added to them, so
///   every policy is listed;
/// - `X-RateLimit-Limit/Remaining/Reset` describe one limit, the most restrictive: this
///   layer's replace what is there only if it has fewer calls remaining (or as few, and
///   resets later);
/// - `Retry-After`, on a refusal, is the longest wait any layer asks for.
pub(crate) fn add_headers(headers: &mut HeaderMap, decision: &Decision, policy: Option<&str>) {
    let mut ours = decision.header_map(policy);
    for name in [RATELIMIT, POLICY] {
        if let Some(item) = ours.remove(&name) {
            let merged = match headers.get(&name) {
                Some(existing) => list_append(existing, &item),
                None => item,
            };
            headers.insert(name, merged);
        }
    }
    let remaining = (number(headers.get(REMAINING)), number(ours.get(REMAINING)));
    let more_restrictive = match remaining {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(theirs), Some(mine)) => {
            mine < theirs
                || (mine == theirs && number(ours.get(RESET)) > number(headers.get(RESET)))
        }
    };
    if more_restrictive {
        for name in [LIMIT, REMAINING, RESET] {
            if let Some(value) = ours.remove(&name) {
                headers.insert(name, value);
            }
        }
    }
    if let Some(retry) = ours.remove(RETRY_AFTER) {
        if number(headers.get(RETRY_AFTER)) < number(Some(&retry)) {
            headers.insert(RETRY_AFTER, retry);
        }
    }
}

fn number(value: Option<&HeaderValue>) -> Option<u64> {
    value?.to_str().ok()?.parse().ok()
}

/// `existing, item`: one structured-field list in one field line.
fn list_append(existing: &HeaderValue, item: &HeaderValue) -> HeaderValue {
    let mut bytes = Vec::with_capacity(existing.len() + 2 + item.len());
    bytes.extend_from_slice(existing.as_bytes());
    bytes.extend_from_slice(b", ");
    bytes.extend_from_slice(item.as_bytes());
    // Both parts are valid values, and ", " is too.
    HeaderValue::from_bytes(&bytes).unwrap_or_else(|_| item.clone())
}
