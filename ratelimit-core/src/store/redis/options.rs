//! What a [`RedisStore`](super::RedisStore) is told: where Redis is, how long to wait, and the
//! [`FailurePolicy`] the service applies when Redis cannot decide.

use std::fmt;
use std::time::Duration;

use super::lease::LeaseOptions;
use super::redaction::redact;
use crate::store::FailurePolicy;

/// Where a [`RedisStore`](super::RedisStore) connects and how long it waits.
///
/// `Debug` and every error message show URLs with their credentials replaced by `***`.
///
/// ```
/// use ratelimit_core::{FailurePolicy, RedisOptions};
/// use std::time::Duration;
///
/// let single = RedisOptions::new("redis://:secret@127.0.0.1:6379/0");
/// assert!(!format!("{single:?}").contains("secret"));
///
/// let fleet = RedisOptions::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
///     .timeout(Duration::from_millis(50))
///     .on_failure(FailurePolicy::Local { pods: 8 });
/// assert!(fleet.cluster);
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// `redis://[[user]:password@]host[:port][/db]` (or `redis+unix:///path`; this build has
    /// no TLS, so `rediss://` is refused when the configuration is built): one URL
    /// for a single server, one or more seed nodes for a cluster.
    pub urls: Vec<String>,
    /// Whether `urls` are Redis Cluster nodes (keys are then routed by slot, following MOVED
    /// and ASK redirections).
    pub cluster: bool,
    /// The longest any call waits for Redis, connecting included. Default: 200 ms.
    pub timeout: Duration,
    /// The longest one connection attempt may take. Default: 1 s.
    pub connect_timeout: Duration,
    /// What happens to calls Redis cannot decide. Default: [`FailurePolicy::Deny`].
    pub on_failure: FailurePolicy,
    /// Whether to refuse every call (with [`Error::Store`](crate::Error::Store)) when Redis
    /// runs an `allkeys-*` eviction policy, under which a full Redis evicts limiter keys and
    /// their limits are lost. Checked once, on the first connection, with
    /// `CONFIG GET maxmemory-policy`; a Redis that forbids `CONFIG` cannot be checked and is
    /// used. Default: false (a warning is logged instead).
    pub require_noeviction: bool,
    /// How many refused keys the store answers itself until their `retry_after`, without a
    /// round trip (see [`RedisStore`](super::RedisStore)); 0 asks Redis for every call.
    /// Default: 10 000.
    pub local_refusals: usize,
    /// Leased budgets for hot keys (see [`LeaseOptions`]): one round trip per slice rather
    /// than per decision. Default: none.
    pub leases: Option<LeaseOptions>,
}

impl RedisOptions {
    /// A single Redis server.
    pub fn new(url: impl Into<String>) -> Self {
        RedisOptions {
            urls: vec![url.into()],
            cluster: false,
            timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(1),
            on_failure: FailurePolicy::Deny,
            require_noeviction: false,
            local_refusals: 10_000,
            leases: None,
        }
    }

    /// A Redis Cluster, reached through any of `nodes`.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisOptions {
            urls: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            ..RedisOptions::new("")
        }
    }

    /// With this per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With this connection timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// With this failure policy.
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }

    /// Whether to refuse every call when Redis may evict limiter keys (see
    /// [`require_noeviction`](Self::require_noeviction)).
    pub fn require_noeviction(mut self, required: bool) -> Self {
        self.require_noeviction = required;
        self
    }

    /// With room for this many refused keys answered in the process (0: none).
    pub fn local_refusals(mut self, keys: usize) -> Self {
        self.local_refusals = keys;
        self
    }

    /// With leased budgets for hot keys (see [`LeaseOptions`]).
    pub fn leases(mut self, leases: LeaseOptions) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Every problem with these options, as `(field, problem)` pairs.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        problems.extend(self.leases.iter().flat_map(LeaseOptions::problems));
        if self.urls.is_empty() {
            problems.push(("store.url", "give the Redis URL".to_owned()));
        }
        if !self.cluster && self.urls.len() > 1 {
            problems.push((
                "store.url",
                "a single server takes one URL; set `cluster` for several nodes".to_owned(),
            ));
        }
        for url in &self.urls {
            if redis::Client::open(url.as_str()).is_err() {
                problems.push((
                    "store.url",
                    format!(
                        "{:?} is not a Redis URL this build can use (expected \
                         redis://[[user]:password@]host[:port][/db]; no TLS, so no rediss://)",
                        redact(url)
                    ),
                ));
            }
        }
        if self.timeout.is_zero() {
            problems.push(("store.timeout", "must be longer than zero".to_owned()));
        }
        if self.connect_timeout.is_zero() {
            problems.push((
                "store.connect_timeout",
                "must be longer than zero".to_owned(),
            ));
        }
        if self.on_failure == (FailurePolicy::Local { pods: 0 }) {
            problems.push(("store.pods", "must be at least 1".to_owned()));
        }
        problems
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("RedisOptions")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("on_failure", &self.on_failure)
            .field("require_noeviction", &self.require_noeviction)
            .field("local_refusals", &self.local_refusals)
            .field("leases", &self.leases)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_this_build_cannot_use_are_refused() {
        assert!(RedisOptions::new("redis://127.0.0.1:6379/0")
            .problems()
            .is_empty());
        for bad in ["rediss://h:6379", "http://h", "redis://h:port"] {
            let problems = RedisOptions::new(bad).problems();
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert_eq!(problems[0].0, "store.url");
        }
    }
}
