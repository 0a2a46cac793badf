//! Module configuration: the option table, tiers, and validation that names each bad field.

use std::time::Duration;

use crate::error::{ConfigError, Error};
use crate::quota::{parse_window, Quota, Strategy};
use crate::store::MemoryOptions;

/// A window given either as a [`Duration`] or as text (`"1m"`), parsed when the
/// configuration is built so that a bad string is reported with its field name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Window {
    /// Already a duration.
    Duration(Duration),
    /// Text to parse with [`parse_window`].
    Text(String),
}

impl Window {
    fn resolve(&self) -> Result<Duration, String> {
        match self {
            Window::Duration(d) if d.is_zero() => Err("the window must be longer than zero".into()),
            Window::Duration(d) if *d > crate::quota::MAX_WINDOW => {
                Err("the window must be at most 366 days".into())
            }
            Window::Duration(d) => Ok(*d),
            Window::Text(t) => parse_window(t).map_err(|e| e.to_string()),
        }
    }
}

impl From<Duration> for Window {
    fn from(d: Duration) -> Self {
        Window::Duration(d)
    }
}

impl From<&str> for Window {
    fn from(s: &str) -> Self {
        Window::Text(s.to_owned())
    }
}

impl From<String> for Window {
    fn from(s: String) -> Self {
        Window::Text(s)
    }
}

/// A named plan: its own limit, window, burst and queue priority.
///
/// ```
/// use ratelimit_core::Tier;
/// let pro = Tier::new("pro", 1_000).window("1m").burst(200).priority(10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub(crate) name: String,
    pub(crate) limit: u64,
    pub(crate) window: Option<Window>,
    pub(crate) burst: Option<u64>,
    pub(crate) priority: i32,
    pub(crate) strategy: Option<Strategy>,
}

impl Tier {
    /// A tier `name` allowing `limit` calls per window (the module's default window unless
    /// [`window`](Self::window) is set).
    pub fn new(name: impl Into<String>, limit: u64) -> Self {
        Tier {
            name: name.into(),
            limit,
            window: None,
            burst: None,
            priority: 0,
            strategy: None,
        }
    }

    /// The tier's window.
    pub fn window(mut self, window: impl Into<Window>) -> Self {
        self.window = Some(window.into());
        self
    }

    /// Extra calls on top of the limit (overrides the module's `burst_limit`).
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Queue priority: higher goes first.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The tier's own strategy (default: the module's).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where state is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// In this process's memory.
    Memory(MemoryOptions),
    /// In Redis or Redis Cluster (feature `redis`), shared by every process using it.
    #[cfg(feature = "redis")]
    Redis(crate::store::RedisOptions),
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::Memory(MemoryOptions::default())
    }
}

/// A tier after validation: its quota is ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTier {
    /// The name.
    pub name: std::sync::Arc<str>,
    /// Limit, window, burst (its own or the module's), strategy, refill.
    pub quota: Quota,
    /// Queue priority.
    pub priority: i32,
}

/// A validated configuration. Build it with [`Config::builder`].
///
/// | option              | default            | meaning                                            |
/// |---------------------|--------------------|----------------------------------------------------|
/// | `enabled`           | `true`             | `false` admits every call (the one explicit way)   |
/// | `strategy`          | `sliding-window`   | algorithm for calls that do not choose one         |
/// | `key_prefix`        | `"ratelimit"`      | prefix of every store key                          |
/// | `default_limit`     | `100`              | limit for calls without a tier or limit; may be unset |
/// | `default_window`    | `1m`               | window for calls and tiers without one             |
/// | `burst_limit`       | `0`                | extra calls on top of any limit without its own burst |
/// | `token_refill_rate` | the limit          | token-bucket refill, tokens per window             |
/// | `tiers`             | none               | named plans                                        |
/// | `default_tier`      | none               | tier for calls that name none                      |
/// | `store`             | memory             | where state lives                                  |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub(crate) enabled: bool,
    pub(crate) strategy: Strategy,
    pub(crate) key_prefix: String,
    pub(crate) default_limit: Option<u64>,
    pub(crate) default_window: Duration,
    pub(crate) burst_limit: u64,
    pub(crate) token_refill_rate: Option<u64>,
    pub(crate) tiers: Vec<ResolvedTier>,
    pub(crate) default_tier: Option<std::sync::Arc<str>>,
    pub(crate) store: StoreConfig,
}

impl Default for Config {
    fn default() -> Self {
        ConfigBuilder::default()
            .build()
            .expect("the default configuration is valid")
    }
}

impl Config {
    /// Starts a configuration from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Whether limiting is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
    /// The default strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }
    /// The prefix of every store key.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
    /// The default limit, if any.
    pub fn default_limit(&self) -> Option<u64> {
        self.default_limit
    }
    /// The default window.
    pub fn default_window(&self) -> Duration {
        self.default_window
    }
    /// The module-wide burst.
    pub fn burst_limit(&self) -> u64 {
        self.burst_limit
    }
    /// The configured tiers.
    pub fn tiers(&self) -> &[ResolvedTier] {
        &self.tiers
    }
    /// A tier by name.
    pub fn tier(&self, name: &str) -> Option<&ResolvedTier> {
        self.tiers.iter().find(|t| &*t.name == name)
    }
    /// The default tier's name.
    pub fn default_tier(&self) -> Option<&str> {
        self.default_tier.as_deref()
    }
    /// The store.
    pub fn store(&self) -> &StoreConfig {
        &self.store
    }

    /// The quota for a call that names no tier: the default tier's, else the default limit.
    pub fn default_quota(&self) -> Option<Quota> {
        if let Some(name) = &self.default_tier {
            return self.tier(name).map(|t| t.quota);
        }
        self.default_limit
            .map(|limit| self.quota(limit, self.default_window, None, None))
    }

    /// A quota for `limit` per `window` with this module's burst, strategy and refill rate
    /// filling in what is not given.
    pub fn quota(
        &self,
        limit: u64,
        window: Duration,
        burst: Option<u64>,
        strategy: Option<Strategy>,
    ) -> Quota {
        Quota::new(limit, window)
            .with_burst(burst.unwrap_or(self.burst_limit))
            .with_strategy(strategy.unwrap_or(self.strategy))
            .with_refill(self.token_refill_rate.unwrap_or(0))
    }
}

/// Builds a [`Config`]; [`build`](Self::build) validates everything and reports every problem.
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    enabled: bool,
    strategy: Strategy,
    key_prefix: String,
    default_limit: Option<u64>,
    default_window: Window,
    burst_limit: u64,
    token_refill_rate: Option<u64>,
    tiers: Vec<Tier>,
    default_tier: Option<String>,
    store: StoreConfig,
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        ConfigBuilder {
            enabled: true,
            strategy: Strategy::SlidingWindow,
            key_prefix: "ratelimit".into(),
            default_limit: Some(100),
            default_window: Window::Duration(Duration::from_secs(60)),
            burst_limit: 0,
            token_refill_rate: None,
            tiers: Vec::new(),
            default_tier: None,
            store: StoreConfig::default(),
        }
    }
}

impl ConfigBuilder {
    /// `false` admits every call without counting: the only way to switch limiting off.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }
    /// The default strategy.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }
    /// The prefix of every store key.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
    /// The limit for calls that name no tier and give no limit.
    pub fn default_limit(mut self, limit: u64) -> Self {
        self.default_limit = Some(limit);
        self
    }
    /// No default limit: a call with neither a tier nor a limit is refused with
    /// [`Error::NoLimit`].
    pub fn no_default_limit(mut self) -> Self {
        self.default_limit = None;
        self
    }
    /// The window for calls and tiers that give none.
    pub fn default_window(mut self, window: impl Into<Window>) -> Self {
        self.default_window = window.into();
        self
    }
    /// Extra calls allowed on top of every limit that has no burst of its own.
    pub fn burst_limit(mut self, burst: u64) -> Self {
        self.burst_limit = burst;
        self
    }
    /// Token-bucket refill, tokens per window (default: the limit).
    pub fn token_refill_rate(mut self, rate: u64) -> Self {
        self.token_refill_rate = Some(rate);
        self
    }
    /// Adds a tier.
    pub fn tier(mut self, tier: Tier) -> Self {
        self.tiers.push(tier);
        self
    }
    /// The tier used by calls that name none.
    pub fn default_tier(mut self, name: impl Into<String>) -> Self {
        self.default_tier = Some(name.into());
        self
    }
    /// Where state is kept.
    pub fn store(mut self, store: StoreConfig) -> Self {
        self.store = store;
        self
    }

    /// Validates and builds. Every problem is reported, each with its field.
    pub fn build(self) -> Result<Config, Error> {
        let mut errors = ConfigError::default();
        if self.key_prefix.len() > 128 {
            errors.push("key_prefix", "must be at most 128 bytes");
        }
        if self
            .key_prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            errors.push(
                "key_prefix",
                "must not contain whitespace or control characters",
            );
        }
        let default_window = self.default_window.resolve().unwrap_or_else(|e| {
            errors.push("default_window", e);
            Duration::from_secs(60)
        });
        if self.token_refill_rate == Some(0) {
            errors.push("token_refill_rate", "must be at least 1 token per window");
        }
        let partial = Config {
            enabled: self.enabled,
            strategy: self.strategy,
            key_prefix: self.key_prefix,
            default_limit: self.default_limit,
            default_window,
            burst_limit: self.burst_limit,
            token_refill_rate: self.token_refill_rate,
            tiers: Vec::new(),
            default_tier: None,
            store: self.store,
        };
        if let Some(limit) = partial.default_limit {
            let quota = partial.quota(limit, default_window, None, None);
            if let Err(e) = quota.validate() {
                errors.push("default_limit", e);
            }
        }
        let mut tiers: Vec<ResolvedTier> = Vec::with_capacity(self.tiers.len());
        for tier in &self.tiers {
            let field = |name: &str| format!("tiers.{}.{name}", tier.name);
            if tier.name.is_empty()
                || !tier
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                errors.push(
                    format!("tiers.{:?}", tier.name),
                    "a tier name is 1 or more of A-Z a-z 0-9 - _ .",
                );
                continue;
            }
            if tiers.iter().any(|t| *t.name == *tier.name) {
                errors.push(format!("tiers.{}", tier.name), "defined twice");
                continue;
            }
            let window = match &tier.window {
                None => default_window,
                Some(w) => w.resolve().unwrap_or_else(|e| {
                    errors.push(field("window"), e);
                    default_window
                }),
            };
            let quota = partial.quota(tier.limit, window, tier.burst, tier.strategy);
            if let Err(e) = quota.validate() {
                errors.push(field("limit"), e);
            }
            tiers.push(ResolvedTier {
                name: tier.name.as_str().into(),
                quota,
                priority: tier.priority,
            });
        }
        let default_tier = match self.default_tier {
            None => None,
            Some(name) => match tiers.iter().find(|t| *t.name == *name) {
                Some(t) => Some(t.name.clone()),
                None => {
                    errors.push(
                        "default_tier",
                        format!(
                            "{name:?} is not one of the configured tiers ({})",
                            names(&tiers)
                        ),
                    );
                    None
                }
            },
        };
        match &partial.store {
            StoreConfig::Memory(m) => {
                if m.max_keys == 0 {
                    errors.push("store.max_keys", "must be at least 1");
                }
                if m.sweep_interval.is_zero() {
                    errors.push("store.sweep_interval", "must be longer than zero");
                }
            }
            #[cfg(feature = "redis")]
            StoreConfig::Redis(r) => {
                for (field, problem) in r.problems() {
                    errors.push(field, problem);
                }
                if partial.key_prefix.contains(['{', '}']) {
                    errors.push(
                        "key_prefix",
                        "must not contain { or } with the Redis store (the user key is the hash tag)",
                    );
                }
                // Every quota known now must be one the scripts count exactly.
                if let Some(limit) = partial.default_limit {
                    let quota = partial.quota(limit, default_window, None, None);
                    if let (Ok(()), Err(e)) =
                        (quota.validate(), crate::store::redis::redis_limits(&quota))
                    {
                        errors.push("default_limit", e);
                    }
                }
                for tier in &tiers {
                    if let (Ok(()), Err(e)) = (
                        tier.quota.validate(),
                        crate::store::redis::redis_limits(&tier.quota),
                    ) {
                        errors.push(format!("tiers.{}.limit", tier.name), e);
                    }
                }
            }
        }
        if !errors.problems.is_empty() {
            return Err(Error::InvalidConfig(errors));
        }
        Ok(Config {
            tiers,
            default_tier,
            ..partial
        })
    }
}

pub(crate) fn names(tiers: &[ResolvedTier]) -> String {
    if tiers.is_empty() {
        return "none".into();
    }
    tiers
        .iter()
        .map(|t| &*t.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(feature = "serde")]
mod file {
    //! Configuration from TOML or JSON, through the same builder (and the same validation).

    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "snake_case")]
    struct File {
        enabled: Option<bool>,
        strategy: Option<String>,
        key_prefix: Option<String>,
        default_limit: Option<u64>,
        default_window: Option<String>,
        burst_limit: Option<u64>,
        token_refill_rate: Option<u64>,
        #[serde(default)]
        tiers: BTreeMap<String, FileTier>,
        default_tier: Option<String>,
        store: Option<FileStore>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FileTier {
        limit: u64,
        window: Option<String>,
        burst: Option<u64>,
        #[serde(default)]
        priority: i32,
        strategy: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, tag = "type", rename_all = "snake_case")]
    enum FileStore {
        Memory {
            max_keys: Option<usize>,
            sweep_interval: Option<String>,
        },
        // Always parsed, so that a file asking for Redis without the feature says so.
        #[cfg_attr(not(feature = "redis"), allow(dead_code))]
        Redis {
            url: Option<String>,
            #[serde(default)]
            nodes: Vec<String>,
            #[serde(default)]
            cluster: bool,
            timeout: Option<String>,
            connect_timeout: Option<String>,
            on_failure: Option<String>,
            pods: Option<u32>,
        },
    }

    fn parse(file: File) -> Result<Config, Error> {
        let mut b = Config::builder();
        let mut errors = ConfigError::default();
        if let Some(v) = file.enabled {
            b = b.enabled(v);
        }
        if let Some(s) = file.strategy {
            match s.parse() {
                Ok(s) => b = b.strategy(s),
                Err(e) => errors.push("strategy", e.to_string()),
            }
        }
        if let Some(v) = file.key_prefix {
            b = b.key_prefix(v);
        }
        if let Some(v) = file.default_limit {
            b = b.default_limit(v);
        }
        if let Some(v) = file.default_window {
            b = b.default_window(v);
        }
        if let Some(v) = file.burst_limit {
            b = b.burst_limit(v);
        }
        if let Some(v) = file.token_refill_rate {
            b = b.token_refill_rate(v);
        }
        for (name, t) in file.tiers {
            let mut tier = Tier::new(name.clone(), t.limit).priority(t.priority);
            if let Some(w) = t.window {
                tier = tier.window(w);
            }
            if let Some(v) = t.burst {
                tier = tier.burst(v);
            }
            if let Some(s) = t.strategy {
                match s.parse() {
                    Ok(s) => tier = tier.strategy(s),
                    Err(e) => errors.push(format!("tiers.{name}.strategy"), e.to_string()),
                }
            }
            b = b.tier(tier);
        }
        if let Some(v) = file.default_tier {
            b = b.default_tier(v);
        }
        match file.store {
            None => {}
            Some(FileStore::Memory {
                max_keys,
                sweep_interval,
            }) => {
                let mut m = MemoryOptions::default();
                if let Some(v) = max_keys {
                    m.max_keys = v;
                }
                if let Some(v) = sweep_interval {
                    match parse_window(&v) {
                        Ok(d) => m.sweep_interval = d,
                        Err(e) => errors.push("store.sweep_interval", e.to_string()),
                    }
                }
                b = b.store(StoreConfig::Memory(m));
            }
            #[cfg(not(feature = "redis"))]
            Some(FileStore::Redis { .. }) => errors.push(
                "store.type",
                "\"redis\" needs the `redis` feature of ratelimit",
            ),
            #[cfg(feature = "redis")]
            Some(FileStore::Redis {
                url,
                nodes,
                cluster,
                timeout,
                connect_timeout,
                on_failure,
                pods,
            }) => {
                use crate::store::{FailurePolicy, RedisOptions};
                let mut r = if cluster {
                    RedisOptions::cluster(url.into_iter().chain(nodes))
                } else {
                    if !nodes.is_empty() {
                        errors.push("store.nodes", "only for `cluster = true`");
                    }
                    RedisOptions::new(url.unwrap_or_default())
                };
                let mut duration = |field: &str, text: Option<String>, into: &mut Duration| {
                    if let Some(text) = text {
                        match parse_window(&text) {
                            Ok(d) => *into = d,
                            Err(e) => errors.push(field, e.to_string()),
                        }
                    }
                };
                duration("store.timeout", timeout, &mut r.timeout);
                duration(
                    "store.connect_timeout",
                    connect_timeout,
                    &mut r.connect_timeout,
                );
                r.on_failure = match on_failure.as_deref() {
                    None | Some("deny") => FailurePolicy::Deny,
                    Some("allow") => FailurePolicy::Allow,
                    Some("local") => match pods {
                        Some(pods) => FailurePolicy::Local { pods },
                        None => {
                            errors.push(
                                "store.pods",
                                "`on_failure = \"local\"` needs `pods`, the number of processes sharing each budget",
                            );
                            FailurePolicy::Deny
                        }
                    },
                    Some(other) => {
                        errors.push(
                            "store.on_failure",
                            format!("{other:?} is not one of \"deny\", \"allow\", \"local\""),
                        );
                        FailurePolicy::Deny
                    }
                };
                if pods.is_some() && !matches!(r.on_failure, FailurePolicy::Local { .. }) {
                    errors.push("store.pods", "only for `on_failure = \"local\"`");
                }
                b = b.store(StoreConfig::Redis(r));
            }
        }
        match b.build() {
            Ok(config) if errors.problems.is_empty() => Ok(config),
            Ok(_) => Err(Error::InvalidConfig(errors)),
            Err(Error::InvalidConfig(more)) => {
                errors.problems.extend(more.problems);
                Err(Error::InvalidConfig(errors))
            }
            Err(other) => Err(other),
        }
    }

    fn syntax(format: &str, e: impl std::fmt::Display) -> Error {
        let mut errors = ConfigError::default();
        errors.push(format, e.to_string());
        Error::InvalidConfig(errors)
    }

    impl Config {
        /// Reads a configuration from TOML (feature `serde`). Windows are strings (`"1m"`);
        /// tiers are tables under `[tiers.<name>]`.
        ///
        /// ```
        /// let config = ratelimit_core::Config::from_toml_str(r#"
        ///     strategy = "token-bucket"
        ///     default_window = "1m"
        ///     [tiers.pro]
        ///     limit = 1000
        ///     burst = 100
        /// "#).unwrap();
        /// assert_eq!(config.tier("pro").unwrap().quota.capacity(), 1_100);
        /// ```
        pub fn from_toml_str(text: &str) -> Result<Config, Error> {
            parse(toml::from_str(text).map_err(|e| syntax("toml", e))?)
        }

        /// Reads a configuration from JSON (feature `serde`), with the same fields as TOML.
        pub fn from_json_str(text: &str) -> Result<Config, Error> {
            parse(serde_json::from_str(text).map_err(|e| syntax("json", e))?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = Config::builder()
            .default_window("1x")
            .token_refill_rate(0)
            .key_prefix("has space")
            .tier(Tier::new("pro", 10).window("0s"))
            .tier(Tier::new("pro", 20))
            .tier(Tier::new("bad name", 1))
            .default_tier("gold")
            .store(StoreConfig::Memory(MemoryOptions {
                max_keys: 0,
                ..MemoryOptions::default()
            }))
            .build()
            .unwrap_err();
        let Error::InvalidConfig(e) = &err else {
            panic!("{err}")
        };
        for field in [
            "default_window",
            "token_refill_rate",
            "key_prefix",
            "tiers.pro.window",
            "tiers.pro",
            "tiers.\"bad name\"",
            "default_tier",
            "store.max_keys",
        ] {
            assert!(e.has(field), "{field} missing from {err}");
        }
        assert!(err.to_string().contains("\"1x\""), "{err}");
        assert!(err.to_string().contains("\"gold\""), "{err}");
    }

    #[test]
    fn effective_limit_uses_tier_burst_else_module_burst() {
        let config = Config::builder()
            .burst_limit(5)
            .tier(Tier::new("free", 10))
            .tier(Tier::new("pro", 100).burst(50).window("1h"))
            .build()
            .unwrap();
        assert_eq!(config.tier("free").unwrap().quota.capacity(), 15);
        let pro = config.tier("pro").unwrap().quota;
        assert_eq!(
            (pro.capacity(), pro.window),
            (150, Duration::from_secs(3_600))
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn files_are_validated_like_the_builder() {
        let err = Config::from_json_str(
            r#"{"default_window": "1x", "tiers": {"pro": {"limit": 5, "strategy": "leaky"}}}"#,
        )
        .unwrap_err();
        let Error::InvalidConfig(e) = &err else {
            panic!("{err}")
        };
        assert!(
            e.has("default_window") && e.has("tiers.pro.strategy"),
            "{err}"
        );
        let err = Config::from_toml_str("colour = 1").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let c = Config::from_toml_str(
            "default_tier = \"free\"\n[tiers.free]\nlimit = 3\nwindow = \"1s\"\n[store]\ntype = \"memory\"\nmax_keys = 10\n",
        )
        .unwrap();
        assert_eq!(c.default_quota().unwrap().limit, 3);
    }
}
