//! The middleware's response future: the inner service's own future when the request was
//! decided as it arrived, a ready answer, or the boxed path that awaits the store.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use actix_web::body::EitherBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use pin_project_lite::pin_project;

use super::Config;
use crate::http::rules::{Decisions, RefusedHere, Verdict};

pin_project! {
    /// The response future of [`RateLimitMiddleware`](super::RateLimitMiddleware): the inner
    /// service's own future, with no box, for a request decided when it arrived (one limit,
    /// on a store that answers at once); boxed when the store must be awaited, or for several
    /// limits.
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

/// An awaited decision and the inner call after it.
type Waiting<B> =
    Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>>>>;

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        /// The inner service's response, to which `decisions` add their headers.
        Called { #[pin] future: F, config: Arc<Config>, decisions: Option<Decisions> },
        /// Answered without the inner service (taken when polled).
        Answered { response: Option<ServiceResponse<EitherBody<B>>> },
        /// Decided by awaiting the store.
        Waiting { future: Waiting<B> },
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    type Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>;

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
                Poll::Ready(Ok(response.map_into_left_body()))
            }
            StateProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            StateProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B> ResponseFuture<F, B> {
    /// The future of a request decided by awaiting the store (and its inner call after).
    pub(super) fn waiting(future: Waiting<B>) -> Self {
        ResponseFuture {
            state: State::Waiting { future },
        }
    }
}

/// The response future for `verdict`: the inner service called (with the decisions' headers
/// to add), or the middleware's own answer.
pub(super) fn respond<S, B>(
    service: &Rc<S>,
    config: Arc<Config>,
    request: ServiceRequest,
    verdict: Verdict,
) -> ResponseFuture<S::Future, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let state = match verdict {
        Verdict::Skip => State::Called {
            future: service.call(request),
            config,
            decisions: None,
        },
        Verdict::Allowed(decisions) => State::Called {
            future: service.call(request),
            config,
            decisions: Some(decisions),
        },
        Verdict::Refused(decisions, refusing) => {
            let response = config.refusal(&decisions, refusing);
            State::Answered {
                response: Some(request.into_response(response).map_into_right_body()),
            }
        }
        Verdict::Failed(error) => {
            let response = config.failure(&error);
            State::Answered {
                response: Some(request.into_response(response).map_into_right_body()),
            }
        }
    };
    ResponseFuture { state }
}

/// The future of a request on a middleware that counts by response status (`count_when`): the
/// whole request (skipper, key, decision) in one boxed future, its spends kept while the
/// inner service answers, then given back unless the response counts (or an inner rate-limit
/// middleware refused it). Dropped before the response (the client went away), the spends
/// stay. Taken first and out of line, so that the common path's `call` pays one test for it.
#[inline(never)]
pub(super) fn by_status<S, B>(
    service: Rc<S>,
    config: Arc<Config>,
    request: ServiceRequest,
) -> ResponseFuture<S::Future, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    ResponseFuture::waiting(Box::pin(async move {
        let started = match &config.skip {
            Some(skip) if skip(&request) => Err(Verdict::Skip),
            _ => config.rules.start(&request),
        };
        let (verdict, kept) = match started {
            Ok(started) => config.rules.decide_kept(started).await,
            Err(verdict) => (verdict, None),
        };
        let response = respond(&service, config.clone(), request, verdict).await?;
        if let Some(kept) = kept {
            let inner = response.response();
            let refused_inside = inner.extensions().get::<RefusedHere>().is_some();
            let status = inner.status().as_u16();
            let content_type = inner.headers().get(actix_web::http::header::CONTENT_TYPE);
            let counts =
                (config.rules).counts(status, content_type.map(|c| c.as_bytes()), refused_inside);
            kept.settle(counts).await;
        }
        Ok(response)
    }))
}
