//! [`RedisBackend`]: the Redis store with its failure policy applied.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::options::{FailurePolicy, RedisOptions};
use super::store::RedisStore;
use crate::algorithm::Verdict;
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::quota::Quota;
use crate::store::MemoryStore;
use crate::Error;

/// The Redis store with its failure policy applied: what the service holds.
pub(crate) struct RedisBackend {
    pub(crate) store: RedisStore,
    /// The in-memory limiter used while Redis is away, for [`FailurePolicy::Local`].
    fallback: Option<MemoryStore>,
    /// Whether the last decision failed: failures are logged when they start and when they
    /// end, not once per call.
    failing: AtomicBool,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.store, f)
    }
}

impl RedisBackend {
    pub(crate) fn new(options: RedisOptions, clock: &Arc<dyn Clock>) -> Result<Self, Error> {
        let fallback = match options.on_failure {
            FailurePolicy::Local { .. } => {
                let store = MemoryStore::new();
                store.start_sweeper(Arc::clone(clock));
                Some(store)
            }
            _ => None,
        };
        Ok(RedisBackend {
            store: RedisStore::new(options)?,
            fallback,
            failing: AtomicBool::new(false),
        })
    }

    /// A decision from Redis or, when Redis cannot give one, from the failure policy. `now`
    /// is the local clock, used only by the local fallback.
    pub(crate) async fn check(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        commit: bool,
        now: Nanos,
    ) -> Result<Decision, Error> {
        let error = match self.store.decision(key, quota, cost, commit).await {
            // State of an unexpected shape is a store failure too: refused under `Deny`.
            Err(
                e @ (Error::Store { .. } | Error::Timeout { .. } | Error::UnexpectedState { .. }),
            ) => e,
            other => {
                if self.failing.load(Ordering::Relaxed)
                    && self.failing.swap(false, Ordering::Relaxed)
                {
                    tracing::warn!(target: "ratelimit", "Redis is deciding again");
                }
                return other;
            }
        };
        let policy = self.store.options().on_failure;
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "ratelimit",
                %error,
                policy = policy.as_str(),
                "Redis cannot decide: calls follow the failure policy until it can",
            );
        }
        match (policy, &self.fallback) {
            (FailurePolicy::Allow, _) => {
                let window = quota.window.as_nanos() as Nanos;
                let verdict = Verdict {
                    allowed: true,
                    remaining: 0,
                    reset_at: now + window,
                    retry_after: None,
                };
                Ok(Decision::for_quota(verdict, now, quota))
            }
            (FailurePolicy::Local { pods }, Some(local)) => {
                let share = Quota {
                    limit: quota.limit / u64::from(pods.max(1)),
                    burst: quota.burst / u64::from(pods.max(1)),
                    ..*quota
                };
                if commit {
                    local.acquire(key, &share, cost, now)
                } else {
                    local.peek(key, &share, cost, now)
                }
            }
            _ => Err(error),
        }
    }

    /// Forgets `key` in Redis (and in the local fallback).
    pub(crate) async fn reset(&self, key: &str) -> Result<(), Error> {
        if let Some(local) = &self.fallback {
            local.reset(key);
        }
        self.store.reset(key).await.map(|_| ())
    }
}
