//! What the layer answers when it does not pass a request on: its default refusal and error
//! responses, core's [`Answer`](crate::Answer)s (where status, code, headers and body are
//! decided) converted. The headers it adds to every counted response, merged across stacked
//! layers, are [`Decision::add_headers`]'s, the one place they are merged.

use axum::response::{IntoResponse, Response};

use crate::{Decision, Error};

/// The default refusal: `429` with `{"code":"RATE_LIMITED","retryAfter":..,"limit":..,
/// "remaining":..}` and `Retry-After` ([`Decision::too_many_requests`]).
pub(crate) fn refused(decision: &Decision) -> Response {
    decision.too_many_requests()
}

/// The default error response: [`Error`]'s own (`503` when the store could not decide, `500`
/// for the server's configuration, such as no module running or no peer address), with
/// `{"code":"<CODE>"}`.
pub(crate) fn failed(error: &Error) -> Response {
    error.clone().into_response()
}
