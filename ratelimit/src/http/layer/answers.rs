//! What the layer answers when it does not pass a request on, in the inner service's own body
//! type (no conversion of the responses it passes on): core's [`Answer`](crate::Answer)s as
//! `http::Response`s, or the hooks' responses.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};

use crate::{Decision, Error};

/// A response body the layer can write its own answers in (`429`, `503`, `500`: a JSON text).
/// The layer answers in the inner service's body type, so that the responses it passes on
/// are not converted; implement this for your own body type if it is not one of these.
pub trait AnswerBody: Sized {
    /// A body holding `text`.
    fn from_answer(text: String) -> Self;
}

impl AnswerBody for String {
    fn from_answer(text: String) -> Self {
        text
    }
}

impl AnswerBody for Bytes {
    fn from_answer(text: String) -> Self {
        Bytes::from(text)
    }
}

impl AnswerBody for Full<Bytes> {
    fn from_answer(text: String) -> Self {
        Full::new(Bytes::from(text))
    }
}

impl<E: 'static> AnswerBody for BoxBody<Bytes, E> {
    fn from_answer(text: String) -> Self {
        Full::new(Bytes::from(text))
            .map_err(|never| match never {})
            .boxed()
    }
}

impl<E: 'static> AnswerBody for UnsyncBoxBody<Bytes, E> {
    fn from_answer(text: String) -> Self {
        Full::new(Bytes::from(text))
            .map_err(|never| match never {})
            .boxed_unsync()
    }
}

#[cfg(feature = "axum")]
impl AnswerBody for axum::body::Body {
    fn from_answer(text: String) -> Self {
        axum::body::Body::from(text)
    }
}

/// How a layer answers refusals and errors in the body type `B`: [`DefaultAnswers`], or the
/// hooks of [`on_refused`](super::RateLimitLayer::on_refused) /
/// [`on_error`](super::RateLimitLayer::on_error) ([`CustomAnswers`]).
pub trait Answers<B>: Clone + Send + Sync + 'static {
    /// The answer to `decision`'s refusal, before the layer adds its headers.
    fn refused(&self, decision: &Decision) -> http::Response<B>;
    /// The answer when no decision could be made.
    fn failed(&self, error: &Error) -> http::Response<B>;
}

/// Core's answers: `429` with `{"code":"RATE_LIMITED",..}` and `Retry-After`
/// ([`Decision::refusal_response`]); [`Error::into_http`] (`503` / `500`,
/// `{"code":"<CODE>"}`) when no decision could be made.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultAnswers;

impl<B: AnswerBody> Answers<B> for DefaultAnswers {
    fn refused(&self, decision: &Decision) -> http::Response<B> {
        decision.refusal_response().map(B::from_answer)
    }

    fn failed(&self, error: &Error) -> http::Response<B> {
        error.clone().into_http().map(B::from_answer)
    }
}

/// gRPC answers (feature `tonic`, [`RateLimitLayer::grpc`](super::RateLimitLayer::grpc)):
/// a refusal is the status `RESOURCE_EXHAUSTED` with the wait as a `google.rpc.RetryInfo`
/// detail ([`Decision::refusal_status`]); when no decision could be made, the error's status
/// (`UNAVAILABLE` when the store could not decide, `INTERNAL` for configuration: see
/// `From<Error> for tonic::Status`). In any body type with a default (tonic's), as gRPC
/// sends a status alone: in the response's header fields, with no message.
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcAnswers;

#[cfg(feature = "tonic")]
impl<B: Default> Answers<B> for GrpcAnswers {
    fn refused(&self, decision: &Decision) -> http::Response<B> {
        decision.refusal_status().into_http()
    }

    fn failed(&self, error: &Error) -> http::Response<B> {
        tonic::Status::from(error.clone()).into_http()
    }
}

type OnRefused<B> = dyn Fn(&Decision) -> http::Response<B> + Send + Sync;
type OnError<B> = dyn Fn(&Error) -> http::Response<B> + Send + Sync;

/// The answers of a layer given [`on_refused`](super::RateLimitLayer::on_refused) or
/// [`on_error`](super::RateLimitLayer::on_error): the hook's response, else core's.
pub struct CustomAnswers<B> {
    pub(super) refused: Option<Arc<OnRefused<B>>>,
    pub(super) error: Option<Arc<OnError<B>>>,
}

impl<B> Clone for CustomAnswers<B> {
    fn clone(&self) -> Self {
        CustomAnswers {
            refused: self.refused.clone(),
            error: self.error.clone(),
        }
    }
}

impl<B> fmt::Debug for CustomAnswers<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomAnswers")
            .field("on_refused", &self.refused.is_some())
            .field("on_error", &self.error.is_some())
            .finish()
    }
}

impl<B: AnswerBody + 'static> Answers<B> for CustomAnswers<B> {
    fn refused(&self, decision: &Decision) -> http::Response<B> {
        match &self.refused {
            Some(on_refused) => on_refused(decision),
            None => DefaultAnswers.refused(decision),
        }
    }

    fn failed(&self, error: &Error) -> http::Response<B> {
        match &self.error {
            Some(on_error) => on_error(error),
            None => DefaultAnswers.failed(error),
        }
    }
}

/// The answers a hook is added to: [`DefaultAnswers`] become [`CustomAnswers`], which keep
/// their other hook. Sealed.
pub trait IntoCustom<B>: sealed::Sealed {
    /// The same answers, ready for a hook.
    fn into_custom(self) -> CustomAnswers<B>;
}

impl<B> IntoCustom<B> for DefaultAnswers {
    fn into_custom(self) -> CustomAnswers<B> {
        CustomAnswers {
            refused: None,
            error: None,
        }
    }
}

impl<B> IntoCustom<B> for CustomAnswers<B> {
    fn into_custom(self) -> CustomAnswers<B> {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::DefaultAnswers {}
    impl<B> Sealed for super::CustomAnswers<B> {}
}
