//! Rate limits for actix-web (feature `actix`): [`RateLimit`], a middleware for an `App`, a
//! `scope` or a `resource` (`.wrap(RateLimit::new(..))`), with the builder, key extractors,
//! per-route budgets, answers and headers of the tower layer
//! ([`RateLimitLayer`](crate::http::RateLimitLayer), feature `tower`), decided by the same
//! rules ([`ratelimit::http`](crate::http)).
//!
//! [`Error`] implements actix-web's `ResponseError`, so an annotated handler returning
//! `Result<_, ratelimit::Error>` answers `429` (with every rate-limit header) by itself.
//!
//! ```
//! use actix_web::{web, App};
//! use ratelimit::actix::RateLimit;
//! use ratelimit::http::{ClientIp, TrustedProxies};
//! use ratelimit::{Config, Options, RateLimitService};
//!
//! let limiter = RateLimitService::new(Config::default())?;
//! let app = App::new()
//!     .route("/orders/{id}", web::get().to(|| async { "order" }))
//!     // Behind one load balancer of ours: the client is the last X-Forwarded-For entry.
//!     .wrap(
//!         RateLimit::new(limiter, ClientIp::x_forwarded_for(TrustedProxies::count(1)))
//!             .options(Options::new().limit(60).window("1m"))
//!             .per_route(),
//!     );
//! # drop(app);
//! # Ok::<(), ratelimit::Error>(())
//! ```

use std::fmt;
use std::future::{ready, Ready};
use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{BoxBody, EitherBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::HttpResponse;

mod future;
mod head;

pub use self::future::ResponseFuture;

use crate::http::rules::{Limiter, Now, RefusedHere, Rules, Verdict};
use crate::http::KeyExtractor;
use crate::{Decision, Error, Options, RateLimitService};

type Skipper = dyn Fn(&ServiceRequest) -> bool + Send + Sync;
type OnRefused = dyn Fn(&Decision) -> HttpResponse + Send + Sync;
type OnError = dyn Fn(&Error) -> HttpResponse + Send + Sync;

/// An actix-web middleware that counts every request under a key and refuses those over the
/// limit: [`wrap`](actix_web::App::wrap) an `App`, a `Scope` or a `Resource` with it.
///
/// The same rules as the tower layer, [`RateLimitLayer`](crate::http::RateLimitLayer) (feature
/// `tower`), whose documentation says each in full: built from a [`RateLimitService`]
/// ([`new`](Self::new)) or the running [`Module`](crate::Module)
/// ([`from_module`](Self::from_module)) and a [`KeyExtractor`] (no default key); per request the
/// [`skip`](Self::skip) closure, the key (`None` skips the limit, an error refuses), then one
/// decision under the [`options`](Self::options), or under each [`limit`](Self::limit) as one
/// (a request one limit refuses spends from none).
///
/// - **Allowed**: the request goes on; the response gets the rate-limit headers.
/// - **Refused**: `429` with a JSON body and `Retry-After` (or
///   [`on_refused`](Self::on_refused)'s response), plus the headers.
/// - **Failed** (the store failed or timed out, an unknown tier, no module running...):
///   `503` / `500` with `{"code":"<CODE>"}` (or [`on_error`](Self::on_error)'s). The request is
///   never passed on.
///
/// The peer address is the connection's (`ServiceRequest::peer_addr`);
/// [`ClientIp::x_forwarded_for`](crate::http::ClientIp::x_forwarded_for) and
/// [`forwarded`](crate::http::ClientIp::forwarded) count past your trusted proxies, as
/// actix-web's `ConnectionInfo::realip_remote_addr` does not (it believes any client).
/// [`per_route`](Self::per_route) budgets by the resource's `match_pattern` (`/orders/{id}`).
///
/// Several `RateLimit`s wrapped around one route decide independently (the outermost, the one
/// wrapped last, first): a request refused by an inner one has spent from the outer ones,
/// except from an outer one that counts by status ([`count_when`](Self::count_when)), which
/// gives its spend back when an inner one refused.
#[derive(Clone)]
pub struct RateLimit {
    config: Arc<Config>,
}

#[derive(Clone)]
pub(crate) struct Config {
    rules: Rules,
    skip: Option<Arc<Skipper>>,
    on_refused: Option<Arc<OnRefused>>,
    on_error: Option<Arc<OnError>>,
}

impl RateLimit {
    /// Limits through `service`, counting each request under `key`'s answer.
    pub fn new(service: RateLimitService, key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Service(service), key)
    }

    /// Limits through the service annotated fns use ([`Module::current_service`](crate::Module::current_service)),
    /// looked up per request. With no module running, requests are refused with
    /// [`Error::NotInitialized`] (`500`).
    pub fn from_module(key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Module, key)
    }

    fn with(limiter: Limiter, key: impl KeyExtractor) -> Self {
        RateLimit {
            config: Arc::new(Config {
                rules: Rules::new("RateLimit", limiter, key),
                skip: None,
                on_refused: None,
                on_error: None,
            }),
        }
    }

    fn set(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// The limit, replacing any given before (see
    /// [`RateLimitLayer::options`](crate::http::RateLimitLayer::options)).
    pub fn options(self, options: Options) -> Self {
        self.set(|c| c.rules.options(options))
    }

    /// Adds a limit, decided with the others as one: a request is admitted only if every
    /// limit admits it, and one refused spends from none. Each needs a budget of its own (two
    /// in one budget answer every request `500`, `INVALID_CONFIG`, naming `RateLimit::limit`).
    pub fn limit(self, options: Options) -> Self {
        self.set(|c| c.rules.limit(options))
    }

    /// A budget per route template and method ([`route_of`](crate::http::route_of), the
    /// pattern of the resource the path routes to, as actix decodes it): `/orders/1` and
    /// `/orders/2` share `GET /orders/{id}`, and `/%6Cogin` spends from `/login`'s.
    ///
    /// A middleware that rewrites the path (`NormalizePath`) must run before the limiter, so
    /// wrap it after: `.wrap(RateLimit::..).wrap(NormalizePath::trim())` (actix runs the last
    /// wrapped first). Inside the limiter, the request is counted under the path it came with
    /// (`/login/` as `unmatched`) and then runs the route of the rewritten one.
    pub fn per_route(self) -> Self {
        self.set(|c| c.rules.per_route = true)
    }

    /// The name of the last limit's policy in the `RateLimit` / `RateLimit-Policy` headers.
    pub fn policy(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(|c| c.rules.policy(name))
    }

    /// Counts only the requests whose response status `counts` says (e.g. failed logins:
    /// `.count_when(|status| status == StatusCode::UNAUTHORIZED)`), as the tower layer's
    /// `count_when` does: each request spends before the inner service runs and is given back
    /// once a response that does not count is made; a response refused by an inner
    /// rate-limit middleware never counts here, and a gRPC answer (`application/grpc..`,
    /// whose HTTP status is `200` whatever the call's) always does. Actix runs a handler to
    /// its end after its client went away, so that response's status decides too; a request
    /// dropped before its response (the server stopping) keeps its spend. The status is actix's own
    /// [`StatusCode`](actix_web::http::StatusCode). Only on a store that gives spends back
    /// (the memory store; on any other every request is refused with
    /// [`Error::InvalidConfig`] naming `RateLimit::count_when`). A middleware without
    /// `count_when` pays nothing for it; one with it, a boxed future and the kept spend per
    /// request.
    pub fn count_when<F>(self, counts: F) -> Self
    where
        F: Fn(actix_web::http::StatusCode) -> bool + Send + Sync + 'static,
    {
        // A status actix cannot read counts: never given back for it.
        let counts =
            move |code: u16| actix_web::http::StatusCode::from_u16(code).map_or(true, &counts);
        self.set(|c| c.rules.count_when = Some(Arc::new(counts)))
    }

    /// Whether to add the rate-limit headers (default `true`); a refusal keeps its
    /// `Retry-After` either way.
    pub fn headers(self, enabled: bool) -> Self {
        self.set(|c| c.rules.headers = enabled)
    }

    /// Requests for which `skip` is `true` are not counted (nor given headers). Base it on
    /// what the client cannot choose (the path, the peer address), never on a header.
    pub fn skip<F>(self, skip: F) -> Self
    where
        F: Fn(&ServiceRequest) -> bool + Send + Sync + 'static,
    {
        self.set(|c| c.skip = Some(Arc::new(skip)))
    }

    /// The response to a refusal (default: `429` with the JSON body and `Retry-After`). The
    /// middleware adds its rate-limit headers and the [`Decision`] (in the extensions).
    pub fn on_refused<F>(self, on_refused: F) -> Self
    where
        F: Fn(&Decision) -> HttpResponse + Send + Sync + 'static,
    {
        self.set(|c| c.on_refused = Some(Arc::new(on_refused)))
    }

    /// The response when no decision could be made (default: [`Error`]'s `ResponseError`
    /// answer). Whatever it answers, the request is not passed on.
    pub fn on_error<F>(self, on_error: F) -> Self
    where
        F: Fn(&Error) -> HttpResponse + Send + Sync + 'static,
    {
        self.set(|c| c.on_error = Some(Arc::new(on_error)))
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config.rules;
        f.debug_struct("RateLimit")
            .field("limiter", &c.limiter_name())
            .field("limits", &c.limits)
            .field("per_route", &c.per_route)
            .field("headers", &c.headers)
            .finish_non_exhaustive()
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            config: Arc::clone(&self.config),
        }))
    }
}

/// The service [`RateLimit`] wraps around an inner one.
pub struct RateLimitMiddleware<S> {
    service: Rc<S>,
    config: Arc<Config>,
}

impl<S> fmt::Debug for RateLimitMiddleware<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .field(
                "middleware",
                &RateLimit {
                    config: Arc::clone(&self.config),
                },
            )
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = ResponseFuture<S::Future, B>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        let config = Arc::clone(&self.config);
        if config.rules.count_when.is_some() {
            return future::by_status(Rc::clone(&self.service), config, request);
        }
        if config.skip.as_ref().is_some_and(|skip| skip(&request)) {
            return future::respond(&self.service, config, request, Verdict::Skip);
        }
        let started = match config.rules.start(&request) {
            Ok(started) => started,
            Err(verdict) => return future::respond(&self.service, config, request, verdict),
        };
        let pending = match config.rules.decide_now(&started) {
            Now::Decided(verdict) => {
                drop(started);
                return future::respond(&self.service, config, request, verdict);
            }
            Now::Later(pending) => pending,
        };
        let started = started.into_owned();
        let service = Rc::clone(&self.service);
        ResponseFuture::waiting(Box::pin(async move {
            let verdict = config.rules.decide(started, pending).await;
            future::respond(&service, config, request, verdict).await
        }))
    }
}

impl Config {
    /// The answer to a refusal: `429` (or the hook's), with the headers of every limit and the
    /// refusing decision in its extensions.
    pub(crate) fn refusal(
        &self,
        decisions: &crate::http::rules::Decisions,
        refusing: usize,
    ) -> HttpResponse {
        let decision = &decisions.as_slice()[refusing];
        let mut response = match &self.on_refused {
            Some(on_refused) => on_refused(decision),
            None => decision.refusal().into_actix(),
        };
        self.rules.add_headers(response.headers_mut(), decisions);
        response.extensions_mut().insert(decision.clone());
        // For an outer middleware that counts by status: what it spent goes back.
        response.extensions_mut().insert(RefusedHere);
        response
    }

    /// The answer when no decision could be made: `503` / `500` (or the hook's).
    pub(crate) fn failure(&self, error: &Error) -> HttpResponse<BoxBody> {
        match &self.on_error {
            Some(on_error) => on_error(error),
            None => actix_web::ResponseError::error_response(error),
        }
    }
}
