//! One limit of a layer: its options, the budget it counts in, and its policy name.

use std::borrow::Cow;
use std::fmt::Write;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::{ConfigError, Error, Name, Options, Overrides, Prepared, RateLimitService};

/// One limit of a layer.
#[derive(Clone, Debug)]
pub(crate) struct Limit {
    /// Always spending (`consume`): a layer counts what it lets through. Its budget is
    /// `budget`.
    options: Options,
    /// The budget given (`Options::budget`), else [`default_budget`]'s.
    budget: Name,
    /// Whether `budget` was given: only then is it the policy's name too.
    named: bool,
    pub(crate) policy: Option<String>,
    /// The limit prepared on the service that decided it last (a layer that follows the
    /// running module sees it change), shared by the layer's clones.
    prepared: Arc<ArcSwapOption<Prepared>>,
}

impl Limit {
    pub(crate) fn new(options: Options) -> Self {
        let (budget, named) = match &options.budget {
            Some(budget) => (budget.clone(), true),
            None => (default_budget(&options), false),
        };
        Limit {
            options: options.consume(true).budget(budget.clone()),
            budget,
            named,
            policy: None,
            prepared: Arc::default(),
        }
    }

    /// The limit prepared on `service`, when its options do not change per request (no
    /// budget per route) and resolve; else `None`, and the per-call path decides (and
    /// reports the error).
    pub(crate) fn prepared(
        &self,
        per_route: bool,
        service: &RateLimitService,
    ) -> Option<Arc<Prepared>> {
        if per_route {
            return None;
        }
        let held = self.prepared.load();
        match &*held {
            Some(prepared) if prepared.service().same_as(service) && prepared.is_current() => {
                Some(Arc::clone(prepared))
            }
            _ => {
                let prepared = Arc::new(service.prepare(&self.options).ok()?);
                self.prepared.store(Some(Arc::clone(&prepared)));
                Some(prepared)
            }
        }
    }

    /// The error of a layer with this limit and `others` when one of them counts in its
    /// budget: a layer decides its limits under one key, so two in one budget would spend it
    /// twice per request, or under two settings at once.
    pub(crate) fn same_budget_as(&self, others: &[Limit], builder: &str) -> Option<Error> {
        others.iter().any(|l| l.budget == self.budget).then(|| {
            Error::InvalidConfig(ConfigError {
                problems: vec![(
                    format!("{builder}::limit"),
                    format!(
                        "two limits of this layer count in the budget {:?}: each needs one of \
                         its own (other settings, or another `Options::budget`)",
                        self.budget.as_str()
                    ),
                )],
            })
        })
    }

    /// The options a request is counted under: the limit's own, or (per route: `route`,
    /// [`route_of`](super::route_of)'s) with the route after the limit's budget.
    pub(crate) fn options(&self, route: Option<&str>) -> Cow<'_, Options> {
        match route {
            None => Cow::Borrowed(&self.options),
            Some(route) => {
                let budget = format!("{} {route}", self.budget);
                Cow::Owned(self.options.clone().budget(Name::from(budget)))
            }
        }
    }

    /// The name of its item in `RateLimit` / `RateLimit-Policy`: a made-up budget name is
    /// not one (the headers then say the tier, or `"default"`).
    pub(crate) fn policy(&self) -> Option<&str> {
        let budget = self.named.then_some(self.budget.as_str());
        self.policy.as_deref().or(budget)
    }
}

/// The budget of a limit given no name: its settings in brackets, e.g. `(limit 5, window
/// 1m)`. A store key holds the window and strategy but not the limit, so a name shared by
/// every unnamed limit would count two layers' requests in one budget; made from the
/// settings, it is the same in every process of a fleet (pods running one code share their
/// budgets in Redis), and limits with the same settings share one.
fn default_budget(options: &Options) -> Name {
    let mut name = String::from("(");
    let mut sep = "";
    if let Some(tier) = &options.tier {
        let _ = write!(name, "tier {tier}");
        sep = ", ";
    }
    if options.overrides != Overrides::new() {
        let _ = write!(name, "{sep}{}", options.overrides);
        sep = ", ";
    }
    if options.cost != 1 {
        let _ = write!(name, "{sep}cost {}", options.cost);
        sep = ", ";
    }
    if sep.is_empty() {
        name.push_str("default");
    }
    name.push(')');
    Name::from(name)
}
