//! [`RateLimitLayer`]: the tower layer, and [`RateLimit`], the service it wraps around a route,
//! a group of routes or a whole router.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::Request;
use tower::{Layer, Service};

mod answers;
mod future;

#[cfg(feature = "tonic")]
pub use self::answers::GrpcAnswers;
pub use self::answers::{AnswerBody, Answers, CustomAnswers, DefaultAnswers, IntoCustom};
pub use self::future::ResponseFuture;
use self::future::{by_status, respond};

use super::key::KeyExtractor;
use super::rules::{Limiter, Now, Rules, Verdict};
use crate::{Decision, Error, Options, RateLimitService};

type Skipper = dyn Fn(&Parts) -> bool + Send + Sync;

/// A tower [`Layer`] that counts every request under a key and refuses those over the limit,
/// on a whole `Router` (`.layer(..)`), a group of routes, or single routes (`.route_layer(..)`).
///
/// It is built from where the limits live — a [`RateLimitService`] ([`new`](Self::new)) or
/// the running [`Module`](crate::Module)'s service, looked up per request ([`from_module`](Self::from_module))
/// — and a [`KeyExtractor`]. There is no default key: see [`KeyExtractor`] for why.
///
/// Per request, in order: the [`skip`](Self::skip) closure, the key (`None` skips the limit,
/// an error refuses), then one decision under the layer's [`options`](Self::options) (or
/// under each of its [`limit`](Self::limit)s, as one).
///
/// - **Allowed**: the request goes on, and the response gets the rate-limit headers
///   ([`headers`](Self::headers)).
/// - **Refused**: `429` with a JSON body and `Retry-After` (or [`on_refused`](Self::on_refused)'s
///   response), plus the headers; the request never reaches the inner service.
/// - **Failed** (the store failed or timed out, an unknown tier, no module running, no peer
///   address...): [`Error`]'s own response (`503` when the store could not decide, `500` for
///   the server's configuration, with `{"code":"<CODE>"}`), or [`on_error`](Self::on_error)'s.
///   The request is never passed on: the limiter fails closed.
///
/// # Several layers
///
/// Layers stacked on one route decide independently, the outermost first: each counts the
/// request in its own budget and may refuse it. They are not all-or-nothing: a request
/// refused by an inner layer has already spent from the outer ones, except from an outer
/// layer that counts by status ([`count_when`](Self::count_when)), which keeps its spend
/// until the response and gives it back when an inner layer refused. (An outer layer cannot
/// leave its decision to an inner one: it cannot know whether one will run, and deciding
/// after the inner service would run the handler first.) For limits decided as one (a request
/// one of them refuses spends from none), put them in **one** layer with
/// [`limit`](Self::limit). That includes a limit shared by many routes: give it a budget name
/// ([`Options::budget`]) and repeat it in each route's layer — every layer naming it counts
/// in the same budget, and each decides it together with its route's own limits. Either way,
/// each limit adds its item to the `RateLimit` / `RateLimit-Policy` lists (name them with
/// [`policy`](Self::policy) or their budget), and `X-RateLimit-*` describe the most
/// restrictive one (the fewest calls remaining).
///
/// # Budgets
///
/// A limit given no budget name counts in a budget named after its settings (tier, limit,
/// window, burst, strategy, refill, cost), such as `(limit 5, window 1m)`: two layers with
/// different settings never count in one budget, and every process of a fleet running the
/// same code names it alike, so pods share it in a Redis store. Unnamed limits with the
/// **same** settings share one budget (for a route's own, use [`per_route`](Self::per_route)
/// or a name). A budget name given with [`Options::budget`] is shared by every layer and fn
/// naming it, whatever their settings: within one layer, two limits in one budget are a
/// configuration error (every request answers `500`, `INVALID_CONFIG`).
///
/// ```
/// use axum::{routing::get, Router};
/// use ratelimit::http::{ClientIp, RateLimitLayer};
/// use ratelimit::{Config, Options, RateLimitService};
/// use std::time::Duration;
///
/// let service = RateLimitService::new(Config::default())?;
/// let app: Router = Router::new()
///     .route("/login", get(|| async { "ok" }))
///     // 5 a minute per client on this route only ...
///     .route_layer(
///         RateLimitLayer::new(service.clone(), ClientIp::peer())
///             .options(Options::new().limit(5).window(Duration::from_secs(60)).budget("login"))
///             .policy("login"),
///     )
///     .route("/orders/{id}", get(|| async { "order" }))
///     // ... and 100 a minute per client and per route template on every route.
///     .layer(
///         RateLimitLayer::new(service, ClientIp::peer())
///             .options(Options::new().limit(100).window(Duration::from_secs(60)))
///             .per_route()
///             .policy("per-route"),
///     );
/// # Ok::<(), ratelimit::Error>(())
/// ```
#[derive(Clone)]
pub struct RateLimitLayer<A = DefaultAnswers> {
    config: Arc<LayerConfig>,
    answers: A,
}

/// The rules every adapter shares, and this one's skipper.
#[derive(Clone)]
pub(crate) struct LayerConfig {
    pub(crate) rules: Rules,
    skip: Option<Arc<Skipper>>,
    /// Answers as a gRPC server ([`grpc`](RateLimitLayer::grpc)): every answer's HTTP status
    /// is `200`, so `count_when` cannot tell a failed call (a configuration error).
    grpc: bool,
}

impl RateLimitLayer {
    /// Limits through `service`, counting each request under `key`'s answer.
    pub fn new(service: RateLimitService, key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Service(service), key)
    }

    /// Limits through the service annotated fns use ([`Module::current_service`](crate::Module::current_service)), looked up
    /// per request: the running [`Module`](crate::Module)'s (or, in a test, the enclosing
    /// [`TestModule::scope`](crate::testing::TestModule::scope)'s). With no module running,
    /// requests are refused with [`Error::NotInitialized`] (`500`).
    pub fn from_module(key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Module, key)
    }

    fn with(limiter: Limiter, key: impl KeyExtractor) -> Self {
        RateLimitLayer {
            config: Arc::new(LayerConfig {
                rules: Rules::new("RateLimitLayer", limiter, key),
                skip: None,
                grpc: false,
            }),
            answers: DefaultAnswers,
        }
    }
}

impl<A> RateLimitLayer<A> {
    fn set(mut self, f: impl FnOnce(&mut LayerConfig)) -> Self {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// The layer's limit: a tier (`Options::new().tier("pro")`), a limit and window of its
    /// own (`Options::new().limit(10).window(..)`), a cost, a named budget (`Options::budget`:
    /// layers and fns under one name share one budget per key; unnamed, see
    /// [Budgets](Self#budgets)). Without it, the service's
    /// default tier or limit applies. Replaces any limits given before (add more with
    /// [`limit`](Self::limit));
    /// `consume(false)` is ignored (the layer always spends).
    pub fn options(self, options: Options) -> Self {
        self.set(|c| c.rules.options(options))
    }

    /// Adds a limit to the layer's [`options`](Self::options): a request is counted under the
    /// same key in every limit, and admitted only if **every** limit admits it, decided as one
    /// ([`RateLimitService::consume_all`]): a request one limit refuses spends nothing from the
    /// others. The first limit given replaces the service's default rather than adding to it;
    /// after [`options`](Self::options), `limit` adds to it.
    ///
    /// Each limit needs a budget of its own: two in one budget (the same name, or unnamed
    /// with the same settings) refuse every request as a configuration error. A name is also
    /// the limit's policy name in the headers:
    ///
    /// ```
    /// use ratelimit::http::{ClientIp, RateLimitLayer};
    /// use ratelimit::{Config, Options, RateLimitService};
    /// use std::time::Duration;
    ///
    /// let service = RateLimitService::new(Config::default())?;
    /// let login = RateLimitLayer::new(service, ClientIp::peer())
    ///     .limit(Options::new().limit(3).window(Duration::from_secs(1)).budget("login-burst"))
    ///     .limit(Options::new().limit(20).window(Duration::from_secs(3_600)).budget("login-hourly"));
    /// # Ok::<(), ratelimit::Error>(())
    /// ```
    pub fn limit(self, options: Options) -> Self {
        self.set(|c| c.rules.limit(options))
    }

    /// A budget per route template and method ([`route_of`](super::route_of)): `/orders/1` and
    /// `/orders/2` share `GET /orders/{id}`, and requests no route answers share
    /// [`UNMATCHED`](super::UNMATCHED). The budget name is the limit's budget (its name, or
    /// its settings: see [Budgets](Self#budgets)), then the route: `(limit 60, window 1m)
    /// GET /orders/{id}`.
    pub fn per_route(self) -> Self {
        self.set(|c| c.rules.per_route = true)
    }

    /// A budget per gRPC method (`/package.Service/Method`, the request's path) for each of
    /// `methods`; calls of any other path share [`UNMATCHED`](super::UNMATCHED)'s. Only listed
    /// methods get budgets of their own: the path is the client's to choose. The budget name is
    /// the limit's budget, then the method: `(limit 60, window 1m) /orders.Orders/Get`. A path
    /// that is not a method's refuses every call as a configuration error (`INTERNAL`, or
    /// `500` without [`grpc`](Self::grpc)). A streaming call is counted once, when it opens.
    /// (Any RPC protocol over HTTP whose path names the method can use it.)
    pub fn per_method<I, M>(self, methods: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        let methods = methods.into_iter().map(Into::into).collect();
        self.set(|c| c.rules.per_method(methods))
    }

    /// Answers as a gRPC server does (feature `tonic`, for a layer on a tonic `Server`):
    /// [`GrpcAnswers`]. Replaces [`on_refused`](Self::on_refused) and
    /// [`on_error`](Self::on_error) given before.
    ///
    /// Not with [`count_when`](Self::count_when): a gRPC answer's HTTP status is `200`
    /// whatever the call's status (which travels in `grpc-status`), so a limit on failed
    /// calls would give every one back. Such a layer refuses every call as a configuration
    /// error (`INTERNAL`, naming `RateLimitLayer::count_when`).
    #[cfg(feature = "tonic")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
    pub fn grpc(self) -> RateLimitLayer<GrpcAnswers> {
        let this = self.set(|c| c.grpc = true);
        RateLimitLayer {
            config: this.config,
            answers: GrpcAnswers,
        }
    }

    /// The name of the limit's policy (of the last limit added) in the `RateLimit` /
    /// `RateLimit-Policy` headers (default: the budget name, else the tier, else
    /// `"default"`). Give stacked layers and limits different names.
    pub fn policy(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(|c| c.rules.policy(name))
    }

    /// Counts only the requests whose response status `counts` says (e.g. failed logins:
    /// `.count_when(|status| status == StatusCode::UNAUTHORIZED)`): each request spends before
    /// the inner service runs, so N concurrent requests never run it more often than the
    /// limits allow, and its spend is given back (to every limit, or to none) once a response
    /// that does not count is made. A request whose response never comes (the client went
    /// away, the inner service failed) keeps its spend; so does one over the limit.
    ///
    /// A response refused by an inner rate-limit layer never counts here: what this layer
    /// spent for it goes back. The rate-limit headers describe the budget as the request
    /// found it, its own spend in it.
    ///
    /// Such a layer's requests are decided by awaiting the store (a boxed future and the kept
    /// spend: five allocations a request more than a layer without `count_when`, which pays
    /// nothing for it), and only on a store that gives spends back (the memory store; on any
    /// other every request is refused with [`Error::InvalidConfig`] naming
    /// `RateLimitLayer::count_when`). With several [`limit`](Self::limit)s, a request that
    /// does not count goes back to every one, or (one of them finding nothing to give back)
    /// to none.
    ///
    /// A gRPC answer (`content-type: application/grpc..`, such as a tonic service's inside an
    /// axum `Router`) always counts: its HTTP status is `200` whatever the call's status, so
    /// no status read from it could say it failed. Not on a [`grpc`](Self::grpc) layer,
    /// whose answers are all such: it refuses every call as a configuration error rather than
    /// count every call while saying it counts some.
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use ratelimit::http::{ClientIp, RateLimitLayer};
    /// use ratelimit::{Config, Options, RateLimitService};
    /// use std::time::Duration;
    ///
    /// let service = RateLimitService::new(Config::default())?;
    /// // 100 failed logins an hour per client address; successes are not counted.
    /// let failed_logins = RateLimitLayer::new(service, ClientIp::peer())
    ///     .options(Options::new().limit(100).window(Duration::from_secs(3_600)))
    ///     .count_when(|status| status == StatusCode::UNAUTHORIZED);
    /// # Ok::<(), ratelimit::Error>(())
    /// ```
    pub fn count_when<F>(self, counts: F) -> Self
    where
        F: Fn(http::StatusCode) -> bool + Send + Sync + 'static,
    {
        // A status `http` cannot read counts: never given back for it.
        let counts = move |code: u16| http::StatusCode::from_u16(code).map_or(true, &counts);
        self.set(|c| c.rules.count_when = Some(Arc::new(counts)))
    }

    /// Whether to add the `X-RateLimit-*` and `RateLimit` / `RateLimit-Policy` headers
    /// (default `true`). A refusal keeps its `Retry-After` either way.
    pub fn headers(self, enabled: bool) -> Self {
        self.set(|c| c.rules.headers = enabled)
    }

    /// Requests for which `skip` is `true` are not counted (nor given headers). Base it on
    /// what the client cannot choose (the path, the peer address), never on a header it can
    /// send. A health check needs no skipper: leave it outside the layer.
    pub fn skip<F>(self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.set(|c| c.skip = Some(Arc::new(skip)))
    }

    /// The response to a refusal (default: `429` with the JSON body and `Retry-After`). The
    /// layer adds its rate-limit headers and the [`Decision`] (in the extensions) to it.
    ///
    /// Its body type is the one the layer answers with: the inner service's (with axum,
    /// `axum::response::Response`, what `into_response()` makes).
    pub fn on_refused<F, B>(self, on_refused: F) -> RateLimitLayer<CustomAnswers<B>>
    where
        F: Fn(&Decision) -> http::Response<B> + Send + Sync + 'static,
        A: IntoCustom<B>,
    {
        let mut answers = self.answers.into_custom();
        answers.refused = Some(Arc::new(on_refused));
        RateLimitLayer {
            config: self.config,
            answers,
        }
    }

    /// The response when no decision could be made (default: `Error`'s own response: `503`
    /// for the store, `500` for configuration, `{"code":"<CODE>"}`). Whatever it answers,
    /// the request is not passed on. Its body type is the inner service's, as for
    /// [`on_refused`](Self::on_refused).
    pub fn on_error<F, B>(self, on_error: F) -> RateLimitLayer<CustomAnswers<B>>
    where
        F: Fn(&Error) -> http::Response<B> + Send + Sync + 'static,
        A: IntoCustom<B>,
    {
        let mut answers = self.answers.into_custom();
        answers.error = Some(Arc::new(on_error));
        RateLimitLayer {
            config: self.config,
            answers,
        }
    }
}

impl<A> fmt::Debug for RateLimitLayer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config.rules;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &c.limiter_name())
            .field("limits", &c.limits)
            .field("per_route", &c.per_route)
            .field("headers", &c.headers)
            .finish_non_exhaustive()
    }
}

impl<S, A: Clone> Layer<S> for RateLimitLayer<A> {
    type Service = RateLimit<S, A>;

    fn layer(&self, inner: S) -> RateLimit<S, A> {
        RateLimit {
            inner,
            config: self.config.clone(),
            answers: self.answers.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around an inner one.
#[derive(Clone)]
pub struct RateLimit<S, A = DefaultAnswers> {
    inner: S,
    config: Arc<LayerConfig>,
    answers: A,
}

impl<S: fmt::Debug, A: Clone> fmt::Debug for RateLimit<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field(
                "layer",
                &RateLimitLayer {
                    config: self.config.clone(),
                    answers: self.answers.clone(),
                },
            )
            .finish()
    }
}

impl<S, A, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, A>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    A: Answers<ResBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Take the service `poll_ready` readied, leaving a fresh clone for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let answers = &self.answers;
        if config.rules.count_when.is_some() {
            return by_status(inner, config, answers.clone(), request);
        }
        let (parts, body) = request.into_parts();
        if config.skip.as_ref().is_some_and(|skip| skip(&parts)) {
            let request = Request::from_parts(parts, body);
            return respond(inner, config, answers, request, Verdict::Skip);
        }
        let started = match config.rules.start(&parts) {
            Ok(started) => started,
            Err(verdict) => {
                return respond(
                    inner,
                    config,
                    answers,
                    Request::from_parts(parts, body),
                    verdict,
                )
            }
        };
        let pending = match config.rules.decide_now(&started) {
            Now::Decided(verdict) => {
                drop(started);
                let request = Request::from_parts(parts, body);
                return respond(inner, config, answers, request, verdict);
            }
            Now::Later(pending) => pending,
        };
        let started = started.into_owned();
        let answers = answers.clone();
        let future: future::Waiting<ResBody, S::Error> = Box::pin(async move {
            let verdict = config.rules.decide(started, pending).await;
            let request = Request::from_parts(parts, body);
            respond(inner, config, &answers, request, verdict).await
        });
        ResponseFuture::waiting(future)
    }
}
