//! [`Failover`]: what happens to a call when its store cannot decide it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Adjustment, Carry, Check, MemoryStore, Refund, Request, Stacked, Store};
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};

/// What a [`Failover`] does with a call its store cannot decide (unreachable, erroring,
/// slower than its timeout, or holding state of an unexpected shape under the key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Refuse the call with the store's error ([`Error::Store`], [`Error::Timeout`] or
    /// [`Error::UnexpectedState`]). The default: nothing passes unlimited by accident.
    #[default]
    Deny,
    /// Admit the call, unlimited (the decision says `remaining: 0`), and log a warning when
    /// failures start. Only when availability matters more than the limit, and said so in the
    /// configuration.
    Allow,
    /// Decide in this process's memory with each limit (and burst) divided by `pods`, so that
    /// a fleet of `pods` processes stays within the shared budget while the store is away.
    Local {
        /// How many processes share each budget; at least 1.
        pods: u32,
    },
}

impl FailurePolicy {
    /// The name used in configuration files: `deny`, `allow` or `local`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Deny => "deny",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Local { .. } => "local",
        }
    }
}

/// A store with a [`FailurePolicy`]: decisions come from `S` while it answers, and from the
/// policy when it cannot. Knows `S` only through the [`Store`] trait.
///
/// Failures are logged when they start and when they end, not once per call.
pub struct Failover<S> {
    store: S,
    policy: FailurePolicy,
    /// The in-memory limiter used while the store is away, for [`FailurePolicy::Local`].
    fallback: Option<MemoryStore>,
    failing: AtomicBool,
}

impl<S: fmt::Debug> fmt::Debug for Failover<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<S: Store> Failover<S> {
    /// `store` under `policy`. With [`FailurePolicy::Local`], the fallback is a
    /// [`MemoryStore`] whose idle keys are swept by the calls themselves.
    pub fn new(store: S, policy: FailurePolicy) -> Self {
        let fallback = matches!(policy, FailurePolicy::Local { .. }).then(MemoryStore::new);
        Failover {
            store,
            policy,
            fallback,
            failing: AtomicBool::new(false),
        }
    }

    /// The store behind the policy.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The policy.
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// The in-memory fallback of [`FailurePolicy::Local`].
    #[cfg(feature = "redis")]
    pub(crate) fn fallback(&self) -> Option<&MemoryStore> {
        self.fallback.as_ref()
    }
}

/// Whether `error` means the store could not decide (as opposed to a call that can never be
/// decided, such as a cost above the capacity, which no policy should turn into an allowance).
fn is_store_failure(error: &Error) -> bool {
    matches!(
        error,
        Error::Store { .. } | Error::Timeout { .. } | Error::UnexpectedState { .. }
    )
}

impl<S> Failover<S> {
    /// Logs, once, that decisions come from the store again.
    fn recovered(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            tracing::warn!(target: "ratelimit", "the store is deciding again");
        }
    }

    /// Logs, once, that the store cannot decide.
    fn failed(&self, error: &Error) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "ratelimit",
                %error,
                policy = self.policy.as_str(),
                "the store cannot decide: calls follow the failure policy until it can",
            );
        }
    }
}

impl<S: Store> Failover<S> {
    /// The policy's answer to a single decision the store could not make (`error`), the
    /// failure logged.
    fn instead(&self, error: Error, request: &Request<'_>) -> Result<Decision, Error> {
        self.failed(&error);
        match (self.policy, &self.fallback) {
            (FailurePolicy::Allow, _) => Ok(Decision::unlimited_for(request.now())),
            (FailurePolicy::Local { pods }, Some(local)) => {
                let share = share(request.quota(), pods)?;
                let (key, cost, now) = (request.key(), request.cost(), request.now());
                let local =
                    local.decide_request(&Request::new(key, &share, cost, now, request.mode())?);
                // Its stamp names the local key, not the store's: a refund is the store's
                // alone, so a spend made here is never given back.
                local.map(|decision| decision.stamped(0))
            }
            _ => Err(error),
        }
    }

    /// [`instead`](Self::instead) for a stacked decision.
    fn instead_all(&self, error: Error, stacked: &Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let (checks, now) = (stacked.checks(), stacked.now());
        self.failed(&error);
        match (self.policy, &self.fallback) {
            (FailurePolicy::Allow, _) => Ok(checks
                .iter()
                .map(|_| Decision::unlimited_for(now))
                .collect()),
            (FailurePolicy::Local { pods }, Some(local)) => {
                let shares = checks
                    .iter()
                    .map(|c| share(c.quota, pods))
                    .collect::<Result<Vec<_>, _>>()?;
                let local_checks: Vec<Check<'_>> = checks
                    .iter()
                    .zip(&shares)
                    .map(|(c, quota)| Check { quota, ..*c })
                    .collect();
                // The moved limits' old states are carried in the local share too: built
                // without them, a moved bucket's local state forgot its old debt while the
                // store was away.
                let carried = stacked.carried();
                let carried_shares = (carried.iter())
                    .map(|c| share(c.quota, pods))
                    .collect::<Result<Vec<_>, _>>()?;
                let local_carried: Vec<Carry<'_>> = (carried.iter())
                    .zip(&carried_shares)
                    .map(|(c, quota)| Carry { quota, ..*c })
                    .collect();
                let local_stack =
                    Stacked::carrying(&local_checks, &local_carried, now, stacked.mode())?;
                let local = local.decide_all_at(&local_stack);
                // Never given back: see `instead`.
                local.map(|all| all.into_iter().map(|d| d.stamped(0)).collect())
            }
            _ => Err(error),
        }
    }
}

/// This process's share of `quota` while the store is away: limit, burst and refill divided
/// by `pods`, its block kept (made without it, a local refusal began no block: a key the
/// quota blocks for an hour once refused was admitted again as the local window turned).
fn share(quota: &Quota, pods: u32) -> Result<Quota, Error> {
    let pods = u64::from(pods.max(1));
    let share = Quota::from_parts(
        quota.limit() / pods,
        quota.window(),
        quota.burst() / pods,
        quota.strategy(),
        quota.refill_setting().map(|r| (r / pods).max(1)),
    )?;
    Ok(match quota.block() {
        Some(block) => share.with_block(block)?,
        None => share,
    })
}

impl<S: Store> Store for Failover<S> {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        match self.store.decide(request).await {
            Err(e) if is_store_failure(&e) => self.instead(e, &request),
            other => {
                self.recovered();
                other
            }
        }
    }

    /// The store's answer at once, under the policy: a failure is answered by the policy, as
    /// in [`decide`](Store::decide). A decision the store made without asking its backend (a
    /// leased unit, a refusal still in force) stands under every policy: it is the store's
    /// own, recorded there before; and it says nothing of whether the backend answers now,
    /// so it neither starts nor ends the failure (nor logs).
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        Some(match self.store.decide_now(request)? {
            Err(e) if is_store_failure(&e) => self.instead(e, &request),
            other => other,
        })
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        match self.store.decide_all(stacked).await {
            Err(e) if is_store_failure(&e) => self.instead_all(e, &stacked),
            other => {
                self.recovered();
                other
            }
        }
    }

    fn records_horizon(&self) -> bool {
        self.store.records_horizon()
    }

    /// The store's record, whatever the policy: the horizon is not a decision. A record that
    /// cannot be raised or read has the call that needed it answered by the policy
    /// ([`answer_failure`](Store::answer_failure)), or refused under `Deny`; a record of an
    /// unexpected shape refuses it under every policy.
    async fn horizon(&self, prefix: &str, raise: super::Horizon) -> Result<super::Horizon, Error> {
        self.store.horizon(prefix, raise).await
    }

    /// The store's: a record lost is lost whatever the policy.
    fn records_lost(&self) -> u64 {
        self.store.records_lost()
    }

    /// The store's.
    fn connects_first(&self) -> bool {
        self.store.connects_first()
    }

    /// Under `Allow` and `Local`: a failure is answered by the policy.
    fn answers_failures(&self) -> bool {
        self.policy != FailurePolicy::Deny
    }

    /// The policy's answer, as to any decision the store could not make (the one place it is
    /// made: [`decide`](Store::decide) and the rest answer failures through it too); but a
    /// refusal the store holds without asking its backend (a Redis store's refusal still in
    /// force) stands first, as in [`decide_now`](Store::decide_now), whatever the policy.
    /// Asked as a look, so that nothing is spent (a leased unit is never taken for a look),
    /// and taken only where it refuses. Past it, a key refused until its retry time was
    /// admitted by `Allow` or a fresh local share where the plain failure path refused it:
    /// 1 against 0 (probes_policy_answers_redis).
    fn answer_failure(&self, request: Request<'_>, error: Error) -> Result<Decision, Error> {
        if let Some(Ok(held)) = self.store.decide_now(request.as_look()) {
            if !held.allowed {
                return Ok(held);
            }
        }
        self.instead(error, &request)
    }

    fn answer_failure_all(
        &self,
        stacked: Stacked<'_>,
        error: Error,
    ) -> Result<Vec<Decision>, Error> {
        self.instead_all(error, &stacked)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        if let Some(local) = &self.fallback {
            local.reset(key);
        }
        self.store.reset(key).await
    }

    fn decides_at_once(&self) -> bool {
        self.store.decides_at_once()
    }

    /// The store's refunds; a spend the local share decided is never given back (its
    /// decision carries no stamp).
    fn refunds(&self) -> bool {
        self.store.refunds()
    }

    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.store.refund(refund).await
    }

    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        self.store.refund_now(refund)
    }

    async fn refund_all(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.store.refund_all(refunds).await
    }

    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        self.store.refund_all_now(refunds)
    }

    /// The store's penalties and rewards (never the local share's: it decides only while the
    /// store is away, and its state is not the store's).
    fn adjusts(&self) -> bool {
        self.store.adjusts()
    }

    async fn adjust(&self, adjustment: Adjustment<'_>) -> Result<u64, Error> {
        self.store.adjust(adjustment).await
    }

    /// The store's carrying of moved limits (the local share, a memory store, carries too).
    fn carries(&self) -> bool {
        self.store.carries()
    }

    /// The store's blocks (the local share, a memory store, keeps them too).
    fn blocks(&self) -> bool {
        self.store.blocks()
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        self.store.supports(quota)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{Mode, StoreKey};
    use crate::syntax::Strategy;

    /// A store that never answers: every decision is a store failure.
    struct Away;

    impl Store for Away {
        async fn decide(&self, _: Request<'_>) -> Result<Decision, Error> {
            Err(Error::Store {
                message: "away".into(),
            })
        }
        async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
            Err(Error::Store {
                message: "away".into(),
            })
        }
        async fn reset(&self, _: &str) -> Result<bool, Error> {
            Ok(false)
        }
    }

    const SEC: u64 = 1_000_000_000;
    const NOW: u64 = 1_700_000_000 * SEC;

    fn local() -> Failover<Away> {
        Failover::new(Away, FailurePolicy::Local { pods: 1 })
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        futures::executor::block_on(f)
    }

    /// While the store is away, a moved bucket's local state carries its old local state:
    /// 15 spent at 6 s a token on the old key, the moved bucket (the same, another key) gives
    /// nothing at once and 1 after 6 s. Built without the carried states, it gave 15.
    #[test]
    fn the_local_share_carries_a_moved_limits_old_state() {
        let store = local();
        let bucket = |window: u64, refill: u64| {
            let window = Duration::from_secs(window);
            Quota::from_parts(10, window, 5, Strategy::TokenBucket, Some(refill)).unwrap()
        };
        let (old, moved) = (bucket(60, 10), bucket(120, 20));
        let (from, into) = (StoreKey::new("old").unwrap(), StoreKey::new("new").unwrap());
        for _ in 0..15 {
            let spend = Request::spend(from, &old, 1, NOW).unwrap();
            assert!(run(store.decide(spend)).unwrap().allowed);
        }
        let admitted = |at: u64| {
            let checks = [Check {
                key: into,
                quota: &moved,
                cost: 1,
            }];
            let carried = [Carry {
                from,
                quota: &old,
                into: 0,
                block_only: false,
            }];
            let stacked = Stacked::carrying(&checks, &carried, at, Mode::Spend).unwrap();
            run(store.decide_all(stacked)).unwrap()[0].allowed
        };
        assert!(!admitted(NOW), "the old debt forgotten at once");
        assert!(admitted(NOW + 6 * SEC));
        assert!(!admitted(NOW + 6 * SEC));
    }

    /// A call whose store failed before it was asked (the fleet's record unread) is answered
    /// by the policy, never by the store, which answers: under `Allow` unlimited, under
    /// `Local` the share (2 of a limit of 4 over 2 pods, the third refused), under `Deny` the
    /// error, whatever the memory store behind would have admitted; `answers_failures` says
    /// which.
    #[test]
    fn a_failure_answered_before_the_store_is_the_policys_alone() {
        let quota = Quota::per_minute(4).unwrap();
        let key = StoreKey::new("k").unwrap();
        let request = Request::spend(key, &quota, 1, NOW).unwrap();
        let unread = || Error::Store {
            message: "unread".into(),
        };
        let allow = Failover::new(MemoryStore::new(), FailurePolicy::Allow);
        assert!(allow.answers_failures());
        let answered = allow.answer_failure(request, unread()).unwrap();
        assert_eq!((answered.allowed, answered.limit), (true, u64::MAX));
        let local = Failover::new(MemoryStore::new(), FailurePolicy::Local { pods: 2 });
        assert!(local.answers_failures());
        let admitted: Vec<bool> = (0..3)
            .map(|_| local.answer_failure(request, unread()).unwrap().allowed)
            .collect();
        assert_eq!(admitted, [true, true, false]);
        // The store behind it was never asked: its 4 are whole.
        assert_eq!(run(local.store().decide(request)).unwrap().remaining, 3);
        let deny = Failover::new(MemoryStore::new(), FailurePolicy::Deny);
        assert!(!deny.answers_failures());
        let refused = deny.answer_failure(request, unread());
        assert!(matches!(refused, Err(Error::Store { .. })), "{refused:?}");
        let checks = [Check {
            key,
            quota: &quota,
            cost: 1,
        }];
        let stacked = Stacked::new(&checks, NOW, Mode::Spend).unwrap();
        let all = allow.answer_failure_all(stacked, unread()).unwrap();
        assert_eq!(all[0].limit, u64::MAX);
        assert!(deny.answer_failure_all(stacked, unread()).is_err());
    }

    /// While the store is away, a local refusal under a quota with a block blocks the key:
    /// 2 a second blocking for an hour, the third call refused, and the key still refused a
    /// minute later. The local share dropped the block: 2 admitted again a second later.
    #[test]
    fn the_local_share_keeps_a_quotas_block() {
        let store = local();
        let quota = Quota::per_second(2)
            .unwrap()
            .with_block(Duration::from_secs(3_600))
            .unwrap();
        let key = StoreKey::new("k").unwrap();
        let spend = |at: u64| run(store.decide(Request::spend(key, &quota, 1, at).unwrap()));
        let admitted: usize = (0..3)
            .map(|_| usize::from(spend(NOW).unwrap().allowed))
            .sum();
        assert_eq!(admitted, 2);
        assert!(
            !spend(NOW + 60 * SEC).unwrap().allowed,
            "the block forgotten"
        );
    }
}
