//! What every adapter decides alike, written once against the [`RequestHead`]: the limiter,
//! the key, the limits (one, or several decided as one), per-route budgets, and the verdict
//! of a request. An adapter turns the verdict into its framework's response.

use std::borrow::Cow;
use std::sync::Arc;

use super::head::RequestHead;
use super::key::KeyExtractor;
use super::limit::Limit;
#[cfg(feature = "tower")]
use super::route::not_a_grpc_method;
use super::route::{grpc_method_of, route_of};
use crate::__private::KeyText;
use crate::{
    Attempt, Decision, Error, Module, Options, Pending, RateLimitService, Spent, SpentAll,
};
use ratelimit_core::ResponseHeaders;

/// Where a layer's limits live.
#[derive(Clone)]
pub(crate) enum Limiter {
    Service(RateLimitService),
    Module,
}

/// An adapter's rules: built by its builder, shared by its clones.
#[derive(Clone)]
pub(crate) struct Rules {
    /// The builder's name, in configuration errors (`RateLimitLayer`).
    builder: &'static str,
    limiter: Limiter,
    key: Arc<dyn KeyExtractor>,
    /// Never empty: a layer has one limit, or several decided as one.
    pub(crate) limits: Vec<Limit>,
    /// Whether `limits` were given (with `options` or `limit`); else it is the service's
    /// default limit, which the first `limit` replaces.
    explicit: bool,
    /// Why no request can be decided as configured (two limits in one budget): every
    /// request is refused with it.
    problem: Option<Error>,
    /// Why the method list of `per_method` cannot be used (a path that is not a method's):
    /// every request is refused with it, whatever limits are set before or after.
    methods_problem: Option<Error>,
    pub(crate) per_route: bool,
    /// Per gRPC method: the methods with a budget of their own (`per_method`).
    pub(crate) methods: Option<Arc<[String]>>,
    pub(crate) headers: bool,
    /// Which response statuses count (`count_when`): a request spends before the handler
    /// runs and is given back after it when its status does not count. `None`: every
    /// request counts, and nothing is kept.
    pub(crate) count_when: Option<Arc<CountWhen>>,
}

/// Whether a response of this status counts against the limits.
pub(crate) type CountWhen = dyn Fn(u16) -> bool + Send + Sync;

impl Rules {
    pub(crate) fn new(builder: &'static str, limiter: Limiter, key: impl KeyExtractor) -> Self {
        Rules {
            builder,
            limiter,
            key: Arc::new(key),
            limits: vec![Limit::new(Options::new())],
            explicit: false,
            problem: None,
            methods_problem: None,
            per_route: false,
            methods: None,
            headers: true,
            count_when: None,
        }
    }

    /// The builder's `options`: replaces every limit.
    pub(crate) fn options(&mut self, options: Options) {
        self.limits = vec![Limit::new(options)];
        self.explicit = true;
        self.problem = None;
    }

    /// The builder's `limit`: adds one, decided with the others as one.
    pub(crate) fn limit(&mut self, options: Options) {
        let limit = Limit::new(options);
        if !self.explicit {
            self.limits.clear();
            self.problem = None;
        }
        if self.problem.is_none() {
            self.problem = limit.same_budget_as(&self.limits, self.builder);
        }
        self.limits.push(limit);
        self.explicit = true;
    }

    /// The builder's `per_method`: a budget per gRPC method listed, the others in one. A path
    /// that is not a method's is a configuration problem (every request refused with it).
    #[cfg(feature = "tower")]
    pub(crate) fn per_method(&mut self, methods: Vec<String>) {
        let problems: Vec<(String, String)> = methods
            .iter()
            .filter_map(|m| not_a_grpc_method(m))
            .map(|problem| (format!("{}::per_method", self.builder), problem))
            .collect();
        self.methods_problem =
            (!problems.is_empty()).then_some(Error::InvalidConfig(crate::ConfigError { problems }));
        self.per_route = true;
        self.methods = Some(methods.into());
    }

    /// The builder's `policy`: names the last limit's policy.
    pub(crate) fn policy(&mut self, name: String) {
        if let Some(limit) = self.limits.last_mut() {
            limit.policy = Some(name);
        }
    }

    /// `"service"` or `"module"`, for `Debug`.
    pub(crate) fn limiter_name(&self) -> &'static str {
        match self.limiter {
            Limiter::Service(_) => "service",
            Limiter::Module => "module",
        }
    }

    /// What every request needs before a decision: the key, the service and (per route) the
    /// route; or the verdict already (no key, no module, a configuration problem).
    pub(crate) fn start(&self, head: &dyn RequestHead) -> Result<Started<'_>, Verdict> {
        if let Some(problem) = self.problem.as_ref().or(self.methods_problem.as_ref()) {
            return Err(Verdict::Failed(problem.clone()));
        }
        let key = match self.key.extract_text(head) {
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
                        function: self.builder,
                    }))
                }
            },
        };
        let route = self.per_route.then(|| match &self.methods {
            Some(methods) => grpc_method_of(head, methods),
            None => route_of(head),
        });
        Ok(Started {
            key,
            service,
            route,
        })
    }

    /// The verdict of a layer of one limit whose store answers at once (the memory store, a
    /// call that may not wait): no future is built. Otherwise, nothing spent, what the
    /// awaited half needs: for a prepared limit, the call as far as it got (its store key
    /// composed once, asked at once once: [`Pending`]).
    pub(crate) fn decide_now(&self, started: &Started<'_>) -> Now {
        let [one] = self.limits.as_slice() else {
            return Now::Later(None); // several limits: decided as one, by `decide`
        };
        let (key, service) = (&*started.key, &*started.service);
        let decision = match one.prepared(self.per_route, service) {
            Some(prepared) => match prepared.try_consume(key) {
                Attempt::Decided(decision) => decision,
                Attempt::Pending(pending) => return Now::Later(Some(pending)),
            },
            None => match service.consume_now(key, &one.options(started.route.as_deref())) {
                Some(decision) => decision,
                None => return Now::Later(None),
            },
        };
        Now::Decided(Self::verdict(decision.map(Decisions::One)))
    }

    /// The verdict of every limit, awaited (a store behind the `Store` trait, a call that
    /// may wait in the queue, several limits).
    pub(crate) async fn decide(&self, started: Started<'_>, pending: Option<Pending>) -> Verdict {
        if let Some(pending) = pending {
            return Self::verdict(pending.consume().await.map(Decisions::One));
        }
        let (key, service, route) = (&*started.key, &*started.service, started.route.as_deref());
        let decisions = match self.limits.as_slice() {
            [one] => match one.prepared(self.per_route, service) {
                Some(prepared) => prepared.consume(key).await.map(Decisions::One),
                None => {
                    let options = one.options(route);
                    service.consume(key, &options).await.map(Decisions::One)
                }
            },
            several => {
                let options: Vec<Cow<'_, Options>> =
                    several.iter().map(|limit| limit.options(route)).collect();
                let limits: Vec<(&str, &Options)> = options.iter().map(|o| (key, &**o)).collect();
                service.consume_all(&limits).await.map(Decisions::Several)
            }
        };
        Self::verdict(decisions)
    }

    /// The verdict of a layer that counts by response status (`count_when`), its spends kept
    /// to be given back once the response is known ([`Kept::settle`]). Always awaited: only
    /// such layers pay for keeping a spend. A service whose store does not give spends back
    /// refuses every request with a configuration error: it would count every one.
    pub(crate) async fn decide_kept(&self, started: Started<'_>) -> (Verdict, Option<Kept>) {
        let (key, service, route) = (&*started.key, &*started.service, started.route.as_deref());
        if !service.refunds() {
            let problem = Error::InvalidConfig(crate::ConfigError {
                problems: vec![(
                    format!("{}::count_when", self.builder),
                    "the service's store does not give spends back (the memory store does, \
                     Redis does not yet): every request would count"
                        .into(),
                )],
            });
            return (Verdict::Failed(problem), None);
        }
        let kept = match self.limits.as_slice() {
            [one] => match one.prepared(self.per_route, service) {
                Some(prepared) => prepared.spend(key).await.map(Kept::One),
                None => service.spend(key, &one.options(route)).await.map(Kept::One),
            },
            several => {
                let options: Vec<Cow<'_, Options>> =
                    several.iter().map(|limit| limit.options(route)).collect();
                let limits: Vec<(&str, &Options)> = options.iter().map(|o| (key, &**o)).collect();
                service.spend_all(&limits).await.map(Kept::Several)
            }
        };
        match kept {
            Ok(kept) => (Self::verdict(Ok(kept.decisions())), Some(kept)),
            Err(e) => (Verdict::Failed(e), None),
        }
    }

    /// Whether a response with `status` and `content_type` counts: not when an inner rate
    /// limiter refused the request (the request was not served: what this layer spent for it
    /// goes back); always for a gRPC answer (`application/grpc..`, gRPC-Web too), whose HTTP
    /// status is `200` whatever the call's (which `grpc-status` says, often in the trailers),
    /// so that no failed call is given back for it; else as `count_when` says.
    pub(crate) fn counts(
        &self,
        status: u16,
        content_type: Option<&[u8]>,
        refused_inside: bool,
    ) -> bool {
        const GRPC: &[u8] = b"application/grpc";
        let grpc = content_type
            .and_then(|c| c.get(..GRPC.len()))
            .is_some_and(|c| c.eq_ignore_ascii_case(GRPC));
        !refused_inside && (grpc || self.count_when.as_ref().is_none_or(|counts| counts(status)))
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

    /// Adds every limit's rate-limit headers to `headers` (unless turned off).
    pub(crate) fn add_headers<H: ResponseHeaders + ?Sized>(
        &self,
        headers: &mut H,
        decisions: &Decisions,
    ) {
        if self.headers {
            for (limit, decision) in self.limits.iter().zip(decisions.as_slice()) {
                decision.merge_headers(headers, limit.policy());
            }
        }
    }
}

/// A request whose key is known, and the service to decide it.
pub(crate) struct Started<'a> {
    key: KeyText,
    service: Cow<'a, RateLimitService>,
    /// The route, when budgets are per route.
    route: Option<String>,
}

impl Started<'_> {
    /// The same, owning its service: for a future that outlives the rules' borrow.
    pub(crate) fn into_owned(self) -> Started<'static> {
        Started {
            key: self.key,
            service: Cow::Owned(self.service.into_owned()),
            route: self.route,
        }
    }
}

/// What became of a request.
pub(crate) enum Verdict {
    Skip,
    /// One decision per limit, every one allowed.
    Allowed(Decisions),
    /// One decision per limit, and the refusing one (of several, the longest wait).
    Refused(Decisions, usize),
    Failed(Error),
}

/// The decisions of a layer's limits, one per limit, in order: a layer of one limit (the
/// common case) keeps its decision in place.
pub(crate) enum Decisions {
    One(Decision),
    Several(Vec<Decision>),
}

impl Decisions {
    pub(crate) fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::One(one) => std::slice::from_ref(one),
            Decisions::Several(several) => several,
        }
    }
}

/// Marks a response refused by a rate-limit layer or middleware, for the ones around it
/// (`count_when`): what they spent for the request goes back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefusedHere;

/// A request's spends, kept while its response is made ([`Rules::decide_kept`]).
pub(crate) enum Kept {
    One(Spent),
    Several(SpentAll),
}

impl Kept {
    fn decisions(&self) -> Decisions {
        match self {
            Kept::One(spent) => Decisions::One(spent.decision().clone()),
            Kept::Several(spent) => Decisions::Several(spent.decisions().to_vec()),
        }
    }

    /// Gives the spends back unless the response `counts` (as an annotated fn's are: a
    /// refund the store could not make leaves them counted, logged, never an allowance).
    pub(crate) async fn settle(self, counts: bool) {
        match self {
            Kept::One(spent) => crate::__private::settle(spent, counts).await,
            Kept::Several(spent) => crate::__private::settle(spent, counts).await,
        }
    }
}

/// What [`Rules::decide_now`] made of a request: its verdict, or what the awaited half
/// needs (a prepared limit's call as far as it got).
pub(crate) enum Now {
    Decided(Verdict),
    Later(Option<Pending>),
}
