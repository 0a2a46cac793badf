//! [`RateLimitLayer`]: the tower layer, and [`RateLimit`], the service it wraps around a route,
//! a group of routes or a whole router.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Bytes, HttpBody};
use axum::response::Response;
use axum::BoxError;
use http::request::Parts;
use http::Request;
use tower::{Layer, Service};

mod future;
mod limit;

use self::future::respond;
pub use self::future::ResponseFuture;
use self::limit::Limit;

use super::key::KeyExtractor;
use super::response::{failed, refused};
use crate::__private::KeyText;
use crate::{Attempt, Decision, Error, Module, Options, Pending, RateLimitService};

type Skipper = dyn Fn(&Parts) -> bool + Send + Sync;
type OnRefused = dyn Fn(&Decision) -> Response + Send + Sync;
type OnError = dyn Fn(&Error) -> Response + Send + Sync;

/// A tower [`Layer`] that counts every request under a key and refuses those over the limit,
/// on a whole `Router` (`.layer(..)`), a group of routes, or single routes (`.route_layer(..)`).
///
/// It is built from where the limits live — a [`RateLimitService`] ([`new`](Self::new)) or
/// the running [`Module`]'s service, looked up per request ([`from_module`](Self::from_module))
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
/// refused by an inner layer has already spent from the outer ones. (An outer layer cannot
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
pub struct RateLimitLayer {
    config: Arc<LayerConfig>,
}

#[derive(Clone)]
enum Limiter {
    Service(RateLimitService),
    Module,
}

#[derive(Clone)]
struct LayerConfig {
    limiter: Limiter,
    key: Arc<dyn KeyExtractor>,
    /// Never empty: a layer has one limit, or several decided as one.
    limits: Vec<Limit>,
    /// Whether `limits` were given (with `options` or `limit`); else it is the service's
    /// default limit, which the first `limit` replaces.
    explicit: bool,
    /// Why no request can be decided as configured (two limits in one budget): every
    /// request is refused with it.
    problem: Option<Error>,
    per_route: bool,
    headers: bool,
    skip: Option<Arc<Skipper>>,
    on_refused: Option<Arc<OnRefused>>,
    on_error: Option<Arc<OnError>>,
}

impl RateLimitLayer {
    /// Limits through `service`, counting each request under `key`'s answer.
    pub fn new(service: RateLimitService, key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Service(service), key)
    }

    /// Limits through the service annotated fns use ([`Module::current_service`]), looked up
    /// per request: the running [`Module`]'s (or, in a test, the enclosing
    /// [`TestModule::scope`](crate::testing::TestModule::scope)'s). With no module running,
    /// requests are refused with [`Error::NotInitialized`] (`500`).
    pub fn from_module(key: impl KeyExtractor) -> Self {
        Self::with(Limiter::Module, key)
    }

    fn with(limiter: Limiter, key: impl KeyExtractor) -> Self {
        RateLimitLayer {
            config: Arc::new(LayerConfig {
                limiter,
                key: Arc::new(key),
                limits: vec![Limit::new(Options::new())],
                explicit: false,
                problem: None,
                per_route: false,
                headers: true,
                skip: None,
                on_refused: None,
                on_error: None,
            }),
        }
    }

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
        self.set(|c| {
            c.limits = vec![Limit::new(options)];
            c.explicit = true;
            c.problem = None;
        })
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
        self.set(|c| {
            let limit = Limit::new(options);
            if !c.explicit {
                c.limits.clear();
                c.problem = None;
            }
            if c.problem.is_none() {
                c.problem = limit.same_budget_as(&c.limits);
            }
            c.limits.push(limit);
            c.explicit = true;
        })
    }

    /// A budget per route template and method ([`route_of`](super::route_of)): `/orders/1` and
    /// `/orders/2` share `GET /orders/{id}`, and requests no route answers share
    /// [`UNMATCHED`](super::UNMATCHED). The budget name is the limit's budget (its name, or
    /// its settings: see [Budgets](Self#budgets)), then the route: `(limit 60, window 1m)
    /// GET /orders/{id}`.
    pub fn per_route(self) -> Self {
        self.set(|c| c.per_route = true)
    }

    /// The name of the limit's policy (of the last limit added) in the `RateLimit` /
    /// `RateLimit-Policy` headers (default: the budget name, else the tier, else
    /// `"default"`). Give stacked layers and limits different names.
    pub fn policy(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(|c| {
            if let Some(limit) = c.limits.last_mut() {
                limit.policy = Some(name);
            }
        })
    }

    /// Whether to add the `X-RateLimit-*` and `RateLimit` / `RateLimit-Policy` headers
    /// (default `true`). A refusal keeps its `Retry-After` either way.
    pub fn headers(self, enabled: bool) -> Self {
        self.set(|c| c.headers = enabled)
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
    pub fn on_refused<F>(self, on_refused: F) -> Self
    where
        F: Fn(&Decision) -> Response + Send + Sync + 'static,
    {
        self.set(|c| c.on_refused = Some(Arc::new(on_refused)))
    }

    /// The response when no decision could be made (default: `Error`'s own response: `503`
    /// for the store, `500` for configuration, `{"code":"<CODE>"}`). Whatever it answers,
    /// the request is not passed on.
    pub fn on_error<F>(self, on_error: F) -> Self
    where
        F: Fn(&Error) -> Response + Send + Sync + 'static,
    {
        self.set(|c| c.on_error = Some(Arc::new(on_error)))
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field(
                "limiter",
                &match c.limiter {
                    Limiter::Service(_) => "service",
                    Limiter::Module => "module",
                },
            )
            .field("limits", &c.limits)
            .field("per_route", &c.per_route)
            .field("headers", &c.headers)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around an inner one.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<LayerConfig>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field(
                "layer",
                &RateLimitLayer {
                    config: self.config.clone(),
                },
            )
            .finish()
    }
}

enum Verdict {
    Skip,
    /// One decision per limit, every one allowed.
    Allowed(Decisions),
    /// One decision per limit, and the refusing one (of several, the longest wait).
    Refused(Decisions, usize),
    Failed(Error),
}

/// The decisions of a layer's limits, one per limit, in order: a layer of one limit (the
/// common case) keeps its decision in place.
enum Decisions {
    One(Decision),
    Several(Vec<Decision>),
}

impl Decisions {
    fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::One(one) => std::slice::from_ref(one),
            Decisions::Several(several) => several,
        }
    }
}

impl LayerConfig {
    /// What every request needs before a decision: the key and the service; or the verdict
    /// already (skipped, no key, no module).
    fn start(&self, parts: &Parts) -> Result<(KeyText, Cow<'_, RateLimitService>), Verdict> {
        if let Some(problem) = &self.problem {
            return Err(Verdict::Failed(problem.clone()));
        }
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            return Err(Verdict::Skip);
        }
        let key = match self.key.extract_text(parts) {
            Ok(Some(key)) => key,
            Ok(None) => return Err(Verdict::Skip),
            Err(e) => return Err(Verdict::Failed(e)),
        };
        let service = match &self.limiter {
            Limiter::Service(service) => Cow::Borrowed(service),
            Limiter::Module => match Module::current_service() {
                Some(service) => Cow::Owned(service),
                None => {
                    return Err(Verdict::Failed(Error::NotInitialized {
                        function: "ratelimit::http::RateLimitLayer",
                    }))
                }
            },
        };
        Ok((key, service))
    }

    /// The verdict of a layer of one limit whose store answers at once (the memory store, a
    /// call that may not wait): no future is built. Otherwise, nothing spent, what the
    /// awaited half needs: for a prepared limit, the call as far as it got (its store key
    /// composed once, asked at once once: [`Pending`]).
    fn decide_now(&self, key: &str, service: &RateLimitService, parts: &Parts) -> Now {
        let [one] = self.limits.as_slice() else {
            return Now::Later(None); // several limits: decided as one, by `decide`
        };
        let decision = match one.prepared(self.per_route, service) {
            Some(prepared) => match prepared.try_consume(key) {
                Attempt::Decided(decision) => decision,
                Attempt::Pending(pending) => return Now::Later(Some(pending)),
            },
            None => match service.consume_now(key, &one.options(self.per_route, parts)) {
                Some(decision) => decision,
                None => return Now::Later(None),
            },
        };
        Now::Decided(Self::verdict(decision.map(Decisions::One)))
    }

    /// The verdict of every limit, awaited (a store behind the `Store` trait, a call that
    /// may wait in the queue, several limits).
    async fn decide(
        &self,
        key: &str,
        service: &RateLimitService,
        parts: &Parts,
        pending: Option<Pending>,
    ) -> Verdict {
        if let Some(pending) = pending {
            return Self::verdict(pending.consume().await.map(Decisions::One));
        }
        let decisions = match self.limits.as_slice() {
            [one] => match one.prepared(self.per_route, service) {
                Some(prepared) => prepared.consume(key).await.map(Decisions::One),
                None => {
                    let options = one.options(self.per_route, parts);
                    service.consume(key, &options).await.map(Decisions::One)
                }
            },
            several => {
                let options: Vec<Cow<'_, Options>> = several
                    .iter()
                    .map(|limit| limit.options(self.per_route, parts))
                    .collect();
                let limits: Vec<(&str, &Options)> = options.iter().map(|o| (key, &**o)).collect();
                service.consume_all(&limits).await.map(Decisions::Several)
            }
        };
        Self::verdict(decisions)
    }

    fn verdict(decisions: Result<Decisions, Error>) -> Verdict {
        let decisions = match decisions {
            Ok(decisions) => decisions,
            Err(e) => return Verdict::Failed(e),
        };
        let refusing = decisions
            .as_slice()
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.allowed)
            .max_by_key(|(_, d)| d.retry_after)
            .map(|(i, _)| i);
        match refusing {
            None => Verdict::Allowed(decisions),
            Some(i) => Verdict::Refused(decisions, i),
        }
    }

    fn headers(&self, response: &mut Response, decisions: &Decisions) {
        if self.headers {
            for (limit, decision) in self.limits.iter().zip(decisions.as_slice()) {
                decision.add_headers(response.headers_mut(), limit.policy());
            }
        }
    }

    /// The answer to a request a limit refused: 429 (or the `on_refused` hook's), with
    /// the headers of every limit and the refusing decision in its extensions.
    fn refusal(&self, decisions: &Decisions, refusing: usize) -> Response {
        let decision = &decisions.as_slice()[refusing];
        let mut response = match &self.on_refused {
            Some(on_refused) => on_refused(decision),
            None => refused(decision),
        };
        self.headers(&mut response, decisions);
        response.extensions_mut().insert(decision.clone());
        response
    }

    /// The answer when no decision could be made: 503 / 500 (or the `on_error` hook's).
    fn failure(&self, error: &Error) -> Response {
        match &self.on_error {
            Some(on_error) => on_error(error),
            None => failed(error),
        }
    }
}

/// What [`LayerConfig::decide_now`] made of a request: its verdict, or what the awaited half
/// needs (a prepared limit's call as far as it got).
enum Now {
    Decided(Verdict),
    Later(Option<Pending>),
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Take the service `poll_ready` readied, leaving a fresh clone for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let (parts, body) = request.into_parts();
        let (key, service) = match config.start(&parts) {
            Ok(started) => started,
            Err(verdict) => {
                return respond(inner, config, Request::from_parts(parts, body), verdict)
            }
        };
        let pending = match config.decide_now(&key, &service, &parts) {
            Now::Decided(verdict) => {
                drop(service);
                return respond(inner, config, Request::from_parts(parts, body), verdict);
            }
            Now::Later(pending) => pending,
        };
        let service = service.into_owned();
        let future: future::Waiting<S::Error> = Box::pin(async move {
            let verdict = config.decide(&key, &service, &parts, pending).await;
            let request = Request::from_parts(parts, body);
            respond(inner, config, request, verdict).await
        });
        ResponseFuture::waiting(future)
    }
}
