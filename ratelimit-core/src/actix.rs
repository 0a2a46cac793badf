//! HTTP answers in actix-web's types (feature `actix`): [`ResponseError`] for [`Error`], so an
//! annotated actix handler returning `Result<_, ratelimit::Error>` answers `429` by itself; an
//! [`Answer`] as an `HttpResponse`; the rate-limit headers merged into actix's header map.
//! What is answered is decided by [`Answer`] with no feature: this module only converts.

use std::ops::Range;

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use bytes::Bytes;

use crate::answer::Answer;
use crate::error::Error;
use crate::merge::{HeaderField, ResponseHeaders};

impl Answer {
    /// The answer as an actix-web response: its status, its headers in order, its body.
    #[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
    pub fn into_actix(self) -> HttpResponse {
        // Always one of `Error::status`'s; anything else would be a 500, never a pass.
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::with_body(status, self.body);
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            // Lowercase names of ours, and digits or printable ASCII: always valid.
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.append(HeaderName::from_static(name), value);
            }
        }
        response.map_into_boxed_body()
    }
}

/// The error's [`answer`](Error::answer): `429` with the JSON body and every rate-limit header
/// for [`Error::Exceeded`]; otherwise [`Error::status`] with `{"code":"<CODE>"}`, and
/// `Retry-After` unless it is a `500`. The error itself (and a refusal's decision) is in the
/// response's extensions.
///
/// ```
/// use actix_web::ResponseError;
/// use ratelimit_core::Error;
///
/// let error = Error::Timeout { after: std::time::Duration::from_millis(50) };
/// let response = error.error_response();
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers().get("retry-after").unwrap(), "1");
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = self.answer().into_actix();
        if let Some(decision) = self.decision() {
            response.extensions_mut().insert(decision.clone());
        }
        response.extensions_mut().insert(self.clone());
        response
    }
}

/// The typed name of `field`, without parsing it.
fn header_name(field: HeaderField) -> HeaderName {
    HeaderName::from_static(field.name())
}

#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
impl ResponseHeaders for HeaderMap {
    fn value(&self, field: HeaderField) -> Option<&[u8]> {
        self.get(header_name(field)).map(HeaderValue::as_bytes)
    }

    /// Every value a slice of one shared buffer.
    fn set(&mut self, buf: Vec<u8>, values: &[(HeaderField, Range<usize>)]) {
        let buf = Bytes::from(buf);
        for (field, span) in values {
            if let Ok(value) = HeaderValue::from_maybe_shared(buf.slice(span.clone())) {
                self.insert(header_name(*field), value);
            }
        }
    }
}
