//! Configuration from TOML or JSON (feature `serde`), through the same builder and the same
//! validation.
use std::collections::BTreeMap;
#[cfg(feature = "redis")]
use std::time::Duration;

use serde::Deserialize;

use super::{Config, StoreConfig, Tier};
use crate::error::{ConfigError, Error};
use crate::store::MemoryOptions;
use crate::syntax::parse_window;

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
    #[serde(default, deserialize_with = "unique_tiers")]
    tiers: BTreeMap<String, FileTier>,
    default_tier: Option<String>,
    store: Option<FileStore>,
    queue_enabled: Option<bool>,
    max_queue_size: Option<usize>,
    queue_timeout: Option<String>,
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
    refill: Option<u64>,
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
        #[serde(default)]
        require_noeviction: bool,
        local_refusals: Option<usize>,
    },
}

/// The tiers table, refusing a name given twice. JSON objects may repeat a key and a plain
/// map keeps the last one, so a second, looser definition of a tier would silently replace
/// the first (TOML refuses the duplicate by itself).
fn unique_tiers<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, FileTier>, D::Error> {
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = BTreeMap<String, FileTier>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of tiers")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut tiers = BTreeMap::new();
            while let Some((name, tier)) = map.next_entry::<String, FileTier>()? {
                if tiers.contains_key(&name) {
                    return Err(serde::de::Error::custom(format!(
                        "tier {name:?} is defined twice"
                    )));
                }
                tiers.insert(name, tier);
            }
            Ok(tiers)
        }
    }
    deserializer.deserialize_map(Unique)
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
        if let Some(v) = t.refill {
            tier = tier.refill(v);
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
    if let Some(v) = file.queue_enabled {
        b = b.queue_enabled(v);
    }
    if let Some(v) = file.max_queue_size {
        b = b.max_queue_size(v);
    }
    if let Some(v) = file.queue_timeout {
        b = b.queue_timeout(v);
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
            require_noeviction,
            local_refusals,
        }) => {
            use crate::store::{FailurePolicy, RedisOptions};
            let r = if cluster {
                RedisOptions::cluster(url.into_iter().chain(nodes))
            } else {
                if !nodes.is_empty() {
                    errors.push("store.nodes", "only for `cluster = true`");
                }
                RedisOptions::new(url.unwrap_or_default())
            };
            let mut r = r.require_noeviction(require_noeviction);
            if let Some(keys) = local_refusals {
                r = r.local_refusals(keys);
            }
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
