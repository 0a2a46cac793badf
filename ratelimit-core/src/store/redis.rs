//! The shared store (feature `redis`): one EVALSHA per decision against Redis or Redis Cluster.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::Script;
use tokio::sync::OnceCell;

use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};
use crate::store::FailurePolicy;
use crate::syntax::Strategy;

/// Where a [`RedisStore`] connects and how long it waits.
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

    /// Every problem with these options, as `(field, problem)` pairs.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
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
            .finish()
    }
}

/// `url` with any `user:password@` replaced by `***@`.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_owned(),
    }
}

/// The secrets in `urls` (userinfo parts), to scrub from any text that leaves the store.
fn secrets(urls: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for url in urls {
        let Some(start) = url.find("://").map(|i| i + 3) else {
            continue;
        };
        let rest = &url[start..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            let userinfo = &rest[..at];
            out.push(userinfo.to_owned());
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    out.push(password.to_owned());
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    // Longest first, so a password inside a userinfo is not left half-replaced.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// The Redis store counts in microseconds (the resolution of `TIME`) with Lua's doubles,
/// exact below 2^53: this keeps every product in the scripts below 2^51.
const LUA_EXACT: u128 = 1 << 51;

/// Whether the Redis scripts can count `quota` exactly.
pub(crate) fn supports(quota: &Quota) -> Result<(), QuotaError> {
    let unsupported = |reason| QuotaError::Unsupported {
        store: "the Redis store",
        reason,
    };
    let window = quota.window().as_nanos();
    if window % 1_000 != 0 {
        return Err(unsupported(
            "it counts in microseconds: the window must be a whole number of them",
        ));
    }
    let window_us = window / 1_000;
    let capacity = quota.capacity() as u128;
    match quota.strategy() {
        Strategy::SlidingWindowCounter if capacity * window_us > LUA_EXACT => Err(unsupported(
            "limit + burst times the window in microseconds must be at most 2^51 for the \
             sliding window counter: use a shorter window or another strategy",
        )),
        Strategy::TokenBucket => {
            let interval = window_us / quota.refill_per_window().max(1) as u128;
            if interval == 0 {
                Err(unsupported(
                    "the refill rate is above one token per microsecond",
                ))
            } else if interval * capacity > LUA_EXACT {
                Err(unsupported(
                    "limit + burst is too large for so slow a refill rate",
                ))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// Each strategy's script behind the prelude they share (`lua/prelude.lua`: the key, cost,
/// commit flag, Redis time and integer division). Redis has no `require`, so one script is
/// the two files end to end.
macro_rules! lua {
    ($file:literal) => {
        concat!(
            include_str!("../../lua/prelude.lua"),
            include_str!(concat!("../../lua/", $file))
        )
    };
}

/// The scripts' sources, in the order of [`script`].
const SOURCES: [&str; 4] = [
    lua!("fixed_window.lua"),
    lua!("sliding_log.lua"),
    lua!("sliding_counter.lua"),
    lua!("token_bucket.lua"),
];

static SCRIPTS: LazyLock<[Script; 4]> = LazyLock::new(|| SOURCES.map(Script::new));

fn script(strategy: Strategy) -> &'static Script {
    let i = match strategy {
        Strategy::FixedWindow => 0,
        Strategy::SlidingWindow => 1,
        Strategy::SlidingWindowCounter => 2,
        Strategy::TokenBucket => 3,
    };
    &SCRIPTS[i]
}

enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

struct Inner {
    options: RedisOptions,
    secrets: Vec<String>,
    client: Client,
    connection: OnceCell<Connection>,
}

/// Limiter state in Redis, shared by every process that uses the same server (or cluster) and
/// key prefix.
///
/// - **One round trip per decision**: each strategy is one Lua script (`lua/*.lua` in this
///   crate), run with `EVALSHA` and loaded again only when Redis answers `NOSCRIPT`.
/// - **Redis' clock**: the scripts read `TIME`, so processes whose clocks disagree still make
///   the same decisions. Times are counted in microseconds, `TIME`'s resolution: a decision is
///   [`algorithm::decide`](crate::algorithm::decide) evaluated in microseconds, and
///   `reset_at` / `retry_after` are Redis' times.
/// - **One key per decision**, written with its expiry in the same script: nothing outlives
///   its window. In a cluster the user key is the hash tag, so one decision is one slot.
/// - **Bounded**: every call gives up after [`RedisOptions::timeout`]; the connection is
///   multiplexed and re-established in the background after a failure.
/// - Needs Redis 6.2 or later (`SET ... PXAT`, `KEEPTTL`) and a Tokio runtime; connects on
///   first use (or on [`connect`](Self::connect)).
/// - A quota with a capacity of zero refuses without asking Redis (its `reset_at` is then on
///   this process's clock).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.inner.options)
            .field("connected", &self.inner.connection.initialized())
            .finish()
    }
}

impl RedisStore {
    /// A store for `options`; checks the URLs but does not connect yet.
    pub fn new(options: RedisOptions) -> Result<Self, Error> {
        if let Some((field, problem)) = options.problems().into_iter().next() {
            return Err(Error::Store {
                message: format!("{field}: {problem}"),
            });
        }
        let secrets = secrets(&options.urls);
        let scrub = |e: redis::RedisError| store_error(&secrets, "invalid Redis URL", &e);
        let client = if options.cluster {
            let builder =
                redis::cluster::ClusterClientBuilder::new(options.urls.iter().map(String::as_str))
                    .connection_timeout(options.connect_timeout)
                    .response_timeout(options.timeout)
                    .min_retry_wait(5)
                    .max_retry_wait(options.timeout.as_millis().max(10) as u64);
            Client::Cluster(Box::new(builder.build().map_err(scrub)?))
        } else {
            Client::Single(redis::Client::open(options.urls[0].as_str()).map_err(scrub)?)
        };
        Ok(RedisStore {
            inner: Arc::new(Inner {
                secrets,
                options,
                client,
                connection: OnceCell::new(),
            }),
        })
    }

    /// The options.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.options
    }

    /// Connects (if not yet connected) and loads the scripts, within the timeout: call it at
    /// start-up to find out at once that Redis is unreachable.
    pub async fn connect(&self) -> Result<(), Error> {
        self.bounded(async {
            let mut connection = self.connection().await?;
            for script in SCRIPTS.iter() {
                let loaded = match &mut connection {
                    Connection::Single(c) => script.prepare_invoke().load_async(c).await,
                    Connection::Cluster(c) => script.prepare_invoke().load_async(c).await,
                };
                loaded.map_err(|e| self.error("could not load a script", &e))?;
            }
            Ok(())
        })
        .await
    }

    /// Forgets `key`; returns whether Redis held it.
    async fn forget(&self, key: &str) -> Result<bool, Error> {
        crate::key::check_store_key(key)?;
        self.bounded(async {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            let deleted: Result<u64, _> = match self.connection().await? {
                Connection::Single(mut c) => cmd.query_async(&mut c).await,
                Connection::Cluster(mut c) => cmd.query_async(&mut c).await,
            };
            deleted
                .map(|n| n > 0)
                .map_err(|e| self.error("reset failed", &e))
        })
        .await
    }

    /// The algorithm's verdict (in nanoseconds) and the Redis time it was taken at, before
    /// rounding to a [`Decision`]. `now` is the service's clock, used only for what is
    /// decided without asking Redis (a capacity of zero).
    pub(crate) async fn verdict(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<(Verdict, Nanos), Error> {
        crate::key::check_store_key(key)?;
        supports(quota)?;
        let capacity = quota.capacity();
        // The same checks as in memory, before any round trip: a zero capacity is refused
        // whatever Redis holds, so Redis is not asked.
        if let Some(verdict) = crate::algorithm::precheck(now, quota, cost, commit)? {
            return Ok((verdict, now));
        }
        let window_us = quota.window().as_micros() as u64;
        let (first, second) = match quota.strategy() {
            Strategy::TokenBucket => {
                let interval = window_us / quota.refill_per_window().max(1);
                (interval, interval * capacity)
            }
            _ => (window_us, capacity),
        };
        let mut invocation = script(quota.strategy()).key(key);
        invocation
            .arg(first)
            .arg(second)
            .arg(cost)
            .arg(u8::from(commit));
        let reply: Vec<i64> = self
            .bounded(async {
                let result = match self.connection().await? {
                    Connection::Single(mut c) => invocation.invoke_async(&mut c).await,
                    Connection::Cluster(mut c) => invocation.invoke_async(&mut c).await,
                };
                result.map_err(|e| self.error("the limiter script failed", &e))
            })
            .await?;
        verdict(&reply).ok_or_else(|| Error::Store {
            message: format!("unexpected reply from the limiter script: {reply:?}"),
        })
    }

    /// Runs `f` within the configured timeout.
    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let after = self.inner.options.timeout;
        tokio::time::timeout(after, f)
            .await
            .unwrap_or(Err(Error::Timeout { after }))
    }

    async fn connection(&self) -> Result<Connection, Error> {
        let inner = &self.inner;
        let connection = inner
            .connection
            .get_or_try_init(|| async {
                match &inner.client {
                    Client::Single(client) => {
                        // No response timeout here: every call is already bounded as a
                        // whole (see `bounded`), and a second timer per request costs.
                        let config = redis::aio::ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(inner.options.connect_timeout))
                            .set_response_timeout(None)
                            // Give up a reconnection quickly: the next call starts another,
                            // and calls meanwhile get an error (and the failure policy)
                            // instead of waiting.
                            .set_number_of_retries(1)
                            .set_min_delay(Duration::from_millis(5))
                            .set_max_delay(inner.options.timeout);
                        ConnectionManager::new_lazy_with_config(client.clone(), config)
                            .map(Connection::Single)
                            .map_err(|e| self.error("could not connect", &e))
                    }
                    Client::Cluster(client) => client
                        .get_async_connection()
                        .await
                        .map(Connection::Cluster)
                        .map_err(|e| self.error("could not connect to the cluster", &e)),
                }
            })
            .await?;
        Ok(connection.clone())
    }

    fn error(&self, context: &str, e: &redis::RedisError) -> Error {
        if e.is_timeout() {
            return Error::Timeout {
                after: self.inner.options.timeout,
            };
        }
        store_error(&self.inner.secrets, context, e)
    }
}

fn store_error(secrets: &[String], context: &str, e: &redis::RedisError) -> Error {
    let mut message = format!("{context}: {e}");
    for secret in secrets {
        message = message.replace(secret.as_str(), "***");
    }
    Error::Store { message }
}

/// `{allowed, remaining, reset_at, retry_after or -1, now}` in microseconds, to nanoseconds.
fn verdict(reply: &[i64]) -> Option<(Verdict, Nanos)> {
    let &[allowed, remaining, reset_at, retry_after, now] = reply else {
        return None;
    };
    let nanos = |us: i64| u64::try_from(us).ok()?.checked_mul(1_000);
    let verdict = Verdict {
        allowed: allowed == 1,
        remaining: u64::try_from(remaining).ok()?,
        reset_at: nanos(reset_at)?,
        retry_after: match retry_after {
            -1 => None,
            us => Some(nanos(us)?),
        },
    };
    Some((verdict, nanos(now)?))
}

impl super::Store for RedisStore {
    async fn decide(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        if cost == 0 {
            // A look at the level: the scripts decide calls that spend; cost 0 is two looks,
            // as in every store (`algorithm::level`).
            let (level, at) = self.verdict(key, quota, 0, now, false).await?;
            if level.allowed && level.remaining > 0 {
                return Ok(Decision::for_quota(level, at, quota));
            }
            let (one, at) = self.verdict(key, quota, 1, now, false).await?;
            let verdict = Verdict {
                allowed: false,
                remaining: 0,
                retry_after: one.retry_after,
                ..level
            };
            return Ok(Decision::for_quota(verdict, at, quota));
        }
        let (verdict, at) = self.verdict(key, quota, cost, now, commit).await?;
        Ok(Decision::for_quota(verdict, at, quota))
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.forget(key).await
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        supports(quota)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("redis://user:pa@ss@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("rediss://:s3cret@h/1?x=@"), "rediss://***@h/1?x=@");
        assert_eq!(
            secrets(&["redis://user:pw@h".into()]),
            vec!["user:pw".to_owned(), "pw".to_owned()]
        );
    }

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

    #[test]
    fn quotas_redis_cannot_count_exactly_are_refused() {
        let text = |q: Quota| supports(&q).unwrap_err().to_string();
        let q = Quota::new(10, Duration::from_nanos(1_500)).unwrap();
        assert!(text(q).contains("microseconds"));
        let q = Quota::new(1_000_000_000, Duration::from_secs(3_600))
            .unwrap()
            .with_strategy(Strategy::SlidingWindowCounter);
        assert!(text(q).contains("2^51"));
        let q = Quota::new(10, Duration::from_secs(1))
            .unwrap()
            .with_refill(2_000_000)
            .unwrap()
            .with_strategy(Strategy::TokenBucket);
        assert!(text(q).contains("microsecond"));
        for strategy in Strategy::ALL {
            let q = Quota::per_minute(1_000).unwrap().with_strategy(strategy);
            assert_eq!(supports(&q), Ok(()));
        }
    }
}
