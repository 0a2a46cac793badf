//! The layer's response future: the inner service's own future when the request was decided
//! as it arrived, a ready answer, or the boxed path that awaits the store.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::Request;
use pin_project_lite::pin_project;
use tower::Service;

use super::super::rules::{Decisions, RefusedHere, Verdict};
use super::{Answers, LayerConfig};

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit). A request decided when it
    /// arrived (one limit, on a store that answers at once: the common case) is the inner
    /// service's own future, with no box; one decided by a store that must be awaited, or by
    /// several limits, is boxed.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

/// An awaited decision and the inner call after it.
pub(super) type Waiting<B, E> = Pin<Box<dyn Future<Output = Result<http::Response<B>, E>> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        /// The inner service's response, to which `decisions` add their headers.
        Called { #[pin] future: F, config: Arc<LayerConfig>, decisions: Option<Decisions> },
        /// Answered without the inner service (taken when polled).
        Answered { response: Option<http::Response<B>> },
        /// Decided by awaiting the store.
        Waiting { future: Waiting<B, E> },
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                future,
                config,
                decisions,
            } => {
                let mut response = ready!(future.poll(cx))?;
                if let Some(decisions) = decisions.take() {
                    config.rules.add_headers(response.headers_mut(), &decisions);
                }
                Poll::Ready(Ok(response))
            }
            StateProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            StateProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The future of a request decided by awaiting the store (and its inner call after).
    pub(super) fn waiting(future: Waiting<B, E>) -> Self {
        ResponseFuture {
            state: State::Waiting { future },
        }
    }
}

/// The response future for `verdict`: the inner service called (with the decisions'
/// headers to add), or the layer's own answer (with the headers of every limit and, on a
/// refusal, the refusing decision in its extensions).
pub(super) fn respond<S, A, ReqBody, B>(
    mut inner: S,
    config: Arc<LayerConfig>,
    answers: &A,
    request: Request<ReqBody>,
    verdict: Verdict,
) -> ResponseFuture<S::Future, B, S::Error>
where
    S: Service<Request<ReqBody>, Response = http::Response<B>>,
    A: Answers<B>,
{
    let state = match verdict {
        Verdict::Skip => State::Called {
            future: inner.call(request),
            config,
            decisions: None,
        },
        Verdict::Allowed(decisions) => State::Called {
            future: inner.call(request),
            config,
            decisions: Some(decisions),
        },
        Verdict::Refused(decisions, refusing) => {
            let decision = &decisions.as_slice()[refusing];
            let mut response = answers.refused(decision);
            config.rules.add_headers(response.headers_mut(), &decisions);
            response.extensions_mut().insert(decision.clone());
            // For an outer layer that counts by status: what it spent goes back.
            response.extensions_mut().insert(RefusedHere);
            State::Answered {
                response: Some(response),
            }
        }
        Verdict::Failed(error) => State::Answered {
            response: Some(answers.failed(&error)),
        },
    };
    ResponseFuture { state }
}

/// The future of a request on a layer that counts by response status (`count_when`): the
/// whole request (skipper, key, decision) in one boxed future, its spends kept while the
/// inner service answers, then given back unless the response counts (or an inner rate-limit
/// layer refused it). Dropped before the response (the client went away), the spends stay.
/// Taken first and out of line, so that the common path's `call` pays one test for it.
#[inline(never)]
pub(super) fn by_status<S, A, ReqBody, B>(
    inner: S,
    config: Arc<LayerConfig>,
    answers: A,
    request: Request<ReqBody>,
) -> ResponseFuture<S::Future, B, S::Error>
where
    S: Service<Request<ReqBody>, Response = http::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    A: Answers<B>,
    ReqBody: Send + 'static,
    B: Send + 'static,
{
    ResponseFuture::waiting(Box::pin(async move {
        let (parts, body) = request.into_parts();
        let started = match &config.skip {
            Some(skip) if skip(&parts) => Err(Verdict::Skip),
            _ if config.grpc => Err(Verdict::Failed(count_when_on_grpc())),
            _ => config.rules.start(&parts),
        };
        let (verdict, kept) = match started {
            Ok(started) => config.rules.decide_kept(started).await,
            Err(verdict) => (verdict, None),
        };
        let request = Request::from_parts(parts, body);
        let response = respond(inner, config.clone(), &answers, request, verdict).await?;
        if let Some(kept) = kept {
            let refused_inside = response.extensions().get::<RefusedHere>().is_some();
            let status = response.status().as_u16();
            let content_type = response.headers().get(http::header::CONTENT_TYPE);
            let counts =
                (config.rules).counts(status, content_type.map(|c| c.as_bytes()), refused_inside);
            kept.settle(counts).await;
        }
        Ok(response)
    }))
}

/// A layer that counts by status answering as a gRPC server: every answer's HTTP status is
/// `200` (the call's status travels in `grpc-status`), so no failed call could count.
#[cold]
fn count_when_on_grpc() -> crate::Error {
    crate::Error::InvalidConfig(crate::ConfigError {
        problems: vec![(
            "RateLimitLayer::count_when".into(),
            "a gRPC layer's answers all have the HTTP status 200 (the call's status is in \
             `grpc-status`): every call would be given back"
                .into(),
        )],
    })
}
