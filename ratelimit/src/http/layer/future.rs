//! The layer's response future: the inner service's own future when the request was decided
//! as it arrived, a ready answer, or the boxed path that awaits the store.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use axum::BoxError;
use http::Request;
use pin_project_lite::pin_project;
use tower::Service;

use super::{Decisions, LayerConfig, Verdict};

pin_project! {
    /// The response future of [`RateLimit`]. A request decided when it arrived (one limit, on
    /// a store that answers at once: the common case) is the inner service's own future,
    /// with no box; one decided by a store that must be awaited, or by several limits, is
    /// boxed.
    pub struct ResponseFuture<F, E> {
        #[pin]
        state: State<F, E>,
    }
}

/// An awaited decision and the inner call after it.
pub(super) type Waiting<E> = Pin<Box<dyn Future<Output = Result<Response, E>> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<F, E> {
        /// The inner service's response, to which `decisions` add their headers.
        Called { #[pin] future: F, config: Arc<LayerConfig>, decisions: Option<Decisions> },
        /// Answered without the inner service (taken when polled).
        Answered { response: Option<Response> },
        /// Decided by awaiting the store.
        Waiting { future: Waiting<E> },
    }
}

impl<F, E> fmt::Debug for ResponseFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                future,
                config,
                decisions,
            } => {
                let mut response = ready!(future.poll(cx))?.map(Body::new);
                if let Some(decisions) = decisions.take() {
                    config.headers(&mut response, &decisions);
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

impl<F, E> ResponseFuture<F, E> {
    /// The future of a request decided by awaiting the store (and its inner call after).
    pub(super) fn waiting(future: Waiting<E>) -> Self {
        ResponseFuture {
            state: State::Waiting { future },
        }
    }
}

/// The response future for `verdict`: the inner service called (with the decisions'
/// headers to add), or the layer's own answer.
pub(super) fn respond<S, ReqBody, ResBody>(
    mut inner: S,
    config: Arc<LayerConfig>,
    request: Request<ReqBody>,
    verdict: Verdict,
) -> ResponseFuture<S::Future, S::Error>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>>,
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
        Verdict::Refused(decisions, refusing) => State::Answered {
            response: Some(config.refusal(&decisions, refusing)),
        },
        Verdict::Failed(error) => State::Answered {
            response: Some(config.failure(&error)),
        },
    };
    ResponseFuture { state }
}
