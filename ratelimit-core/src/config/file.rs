//! Configuration from TOML or JSON (feature `serde`), deserialized into the builder's own
//! options and validated by the same `build`.
#[cfg(feature = "redis")]
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::build::Options;
use super::tier::TierOptions;
use super::{Config, ConfigBuilder, StoreConfig, Tier};
use crate::error::{ConfigError, Error};
use crate::store::MemoryOptions;
use crate::syntax::{parse_window, ParseError, Strategy};
use crate::window::Window;

/// The `[store]` table as written: one struct with `type` a field, not an enum tagged by
/// it, so that a value of the wrong type is reported at its own key (an internally tagged enum
/// buffers the table first and loses the path: `max_keys = -1` was reported on `store`). A
/// key of the other store's is refused by [`store`], by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
struct FileStore {
    #[serde(rename = "type")]
    kind: FileStoreKind,
    max_keys: Option<usize>,
    sweep_interval: Option<String>,
    // The Redis store's, always parsed, so that a file asking for Redis without the feature
    // says so.
    url: Option<String>,
    nodes: Option<Vec<String>>,
    cluster: Option<bool>,
    timeout: Option<String>,
    connect_timeout: Option<String>,
    on_failure: Option<String>,
    pods: Option<u32>,
    require_noeviction: Option<bool>,
    local_refusals: Option<usize>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum FileStoreKind {
    Memory,
    Redis,
}

impl FileStore {
    /// The keys given that `kind`'s store does not read, by name.
    fn foreign_keys(&self) -> impl Iterator<Item = &'static str> {
        let memory = self.kind == FileStoreKind::Memory;
        [
            ("max_keys", self.max_keys.is_some(), !memory),
            ("sweep_interval", self.sweep_interval.is_some(), !memory),
            ("url", self.url.is_some(), memory),
            ("nodes", self.nodes.is_some(), memory),
            ("cluster", self.cluster.is_some(), memory),
            ("timeout", self.timeout.is_some(), memory),
            ("connect_timeout", self.connect_timeout.is_some(), memory),
            ("on_failure", self.on_failure.is_some(), memory),
            ("pods", self.pods.is_some(), memory),
            (
                "require_noeviction",
                self.require_noeviction.is_some(),
                memory,
            ),
            ("local_refusals", self.local_refusals.is_some(), memory),
        ]
        .into_iter()
        .filter_map(|(key, given, foreign)| (given && foreign).then_some(key))
    }
}

/// A strategy's name, kept as it was if it is not one, for
/// [`build`](super::ConfigBuilder::build) to report with its field.
pub(super) fn strategy<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Result<Strategy, ParseError>, D::Error> {
    Ok(String::deserialize(deserializer)?.parse())
}

pub(super) fn some_strategy<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Result<Strategy, ParseError>>, D::Error> {
    strategy(deserializer).map(Some)
}

/// A window as text (`"1m"`), checked when the configuration is built.
pub(super) fn window<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Window, D::Error> {
    Ok(Window::from(String::deserialize(deserializer)?.as_str()))
}

pub(super) fn some_window<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Window>, D::Error> {
    window(deserializer).map(Some)
}

/// The tiers table, `[tiers.<name>]`, refusing a name given twice. JSON objects may repeat a
/// key and a plain map keeps the last one, so a second, looser definition of a tier would
/// silently replace the first (TOML refuses the duplicate by itself).
pub(super) fn tiers<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Tier>, D::Error> {
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = Vec<Tier>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of tiers")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut tiers: Vec<Tier> = Vec::new();
            while let Some((name, options)) = map.next_entry::<String, TierOptions>()? {
                if tiers.iter().any(|t| t.name == name) {
                    return Err(serde::de::Error::custom(format!(
                        "tier {name:?} is defined twice"
                    )));
                }
                tiers.push(Tier { name, options });
            }
            Ok(tiers)
        }
    }
    deserializer.deserialize_map(Unique)
}

/// The `[store]` table: what it asks for, or every problem with it, by field.
pub(super) fn store<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Result<StoreConfig, ConfigError>, D::Error> {
    let mut errors = ConfigError::default();
    let table = FileStore::deserialize(deserializer)?;
    for key in table.foreign_keys() {
        let other = match table.kind {
            FileStoreKind::Memory => "redis",
            FileStoreKind::Redis => "memory",
        };
        errors.push(
            format!("store.{key}"),
            format!("only for `type = \"{other}\"`"),
        );
    }
    let store = match table.kind {
        FileStoreKind::Memory => {
            let mut m = MemoryOptions::default();
            if let Some(v) = table.max_keys {
                m.max_keys = v;
            }
            if let Some(v) = table.sweep_interval {
                match parse_window(&v) {
                    Ok(d) => m.sweep_interval = d,
                    Err(e) => errors.push("store.sweep_interval", e.to_string()),
                }
            }
            StoreConfig::Memory(m)
        }
        #[cfg(not(feature = "redis"))]
        FileStoreKind::Redis => {
            errors.push(
                "store.type",
                "\"redis\" needs the `redis` feature of ratelimit",
            );
            StoreConfig::default()
        }
        #[cfg(feature = "redis")]
        FileStoreKind::Redis => {
            use crate::store::{FailurePolicy, RedisOptions};
            let FileStore {
                url,
                nodes,
                cluster,
                timeout,
                connect_timeout,
                on_failure,
                pods,
                require_noeviction,
                local_refusals,
                ..
            } = table;
            let nodes = nodes.unwrap_or_default();
            let r = if cluster.unwrap_or(false) {
                RedisOptions::cluster(url.into_iter().chain(nodes))
            } else {
                if !nodes.is_empty() {
                    errors.push("store.nodes", "only for `cluster = true`");
                }
                RedisOptions::new(url.unwrap_or_default())
            };
            let mut r = r.require_noeviction(require_noeviction.unwrap_or(false));
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
            StoreConfig::Redis(r)
        }
    };
    Ok(if errors.problems.is_empty() {
        Ok(store)
    } else {
        Err(errors)
    })
}

/// The options in a file, or its first problem, named by field (`tiers.pro.limit`) when it
/// is in one and by `format` when it is in the text itself.
fn options<'de, D: Deserializer<'de>>(format: &str, deserializer: D) -> Result<Options, Error>
where
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = match e.path().iter().next() {
            None => format.to_string(),
            Some(_) => e.path().to_string(),
        };
        syntax(&field, e.inner())
    })
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
        ConfigBuilder::<Config>::from(options("toml", toml::Deserializer::new(text))?).build()
    }

    /// Reads a configuration from the file at `path` (feature `serde`): TOML for a name ending
    /// in `.toml`, JSON for `.json`. A file that cannot be read, is empty, or has another
    /// extension is [`Error::InvalidConfig`] naming the path.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Config, Error> {
        let path = path.as_ref();
        let field = || format!("file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| syntax(&field(), e))?;
        // Every option has a default, so an empty file would be a valid configuration: one
        // caught half written, or emptied by mistake. Refused rather than read as defaults.
        if text.trim().is_empty() {
            return Err(syntax(&field(), "the file is empty"));
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Self::from_toml_str(&text),
            Some("json") => Self::from_json_str(&text),
            _ => Err(syntax(&field(), "the name must end in .toml or .json")),
        }
    }

    /// Reads a configuration from JSON (feature `serde`), with the same fields as TOML.
    pub fn from_json_str(text: &str) -> Result<Config, Error> {
        let mut json = serde_json::Deserializer::from_str(text);
        let options = options("json", &mut json)?;
        json.end().map_err(|e| syntax("json", e))?;
        ConfigBuilder::<Config>::from(options).build()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Module;

    const EVERY_OPTION: &str = r#"
        enabled = false
        strategy = "token-bucket"
        key_prefix = "api"
        default_limit = 7
        default_window = "30s"
        burst_limit = 2
        token_refill_rate = 3
        default_tier = "pro"
        queue_enabled = true
        max_queue_size = 9
        queue_timeout = "250ms"
        [tiers.pro]
        limit = 40
        window = "1h"
        burst = 4
        priority = 5
        strategy = "token-bucket"
        refill = 6
        shadow = true
        block_for = "2h"
        [store]
        type = "memory"
        max_keys = 10
        sweep_interval = "2s"
    "#;

    fn every_option() -> crate::ModuleBuilder {
        Module::builder()
            .enabled(false)
            .strategy(Strategy::TokenBucket)
            .key_prefix("api")
            .default_limit(7)
            .default_window("30s")
            .burst_limit(2)
            .token_refill_rate(3)
            .tier(
                Tier::new("pro", 40)
                    .window(Duration::from_secs(3_600))
                    .burst(4)
                    .priority(5)
                    .strategy(Strategy::TokenBucket)
                    .refill(6)
                    .shadow()
                    .block_for(Duration::from_secs(7_200)),
            )
            .default_tier("pro")
            .queue_enabled(true)
            .max_queue_size(9)
            .queue_timeout(Duration::from_millis(250))
            .store(StoreConfig::Memory(
                MemoryOptions::default()
                    .max_keys(10)
                    .sweep_interval(Duration::from_secs(2)),
            ))
    }

    /// Every option set from a file and from `Module::builder()` comes out the same, and
    /// different from its default. The patterns below name every field of the options, so an
    /// option added to the builder does not compile here until it is set both ways.
    #[test]
    fn every_builder_option_is_set_alike_from_the_file_and_from_module_builder() {
        let from_file: Options = toml::from_str(EVERY_OPTION).unwrap();
        let from_code = every_option().options;
        assert_eq!(from_file, from_code);

        let defaults = Options::default();
        let Options {
            enabled,
            strategy,
            key_prefix,
            default_limit,
            default_window,
            burst_limit,
            token_refill_rate,
            tiers,
            default_tier,
            store,
            queue_enabled,
            max_queue_size,
            queue_timeout,
        } = &from_code;
        let [pro] = tiers.as_slice() else {
            panic!("{tiers:?}")
        };
        let unset = Tier::new("pro", 0).options;
        let TierOptions {
            limit,
            window,
            burst,
            priority,
            strategy: tier_strategy,
            refill,
            shadow,
            block_for,
        } = &pro.options;
        let left_as_default: Vec<&str> = [
            ("enabled", *enabled == defaults.enabled),
            ("strategy", *strategy == defaults.strategy),
            ("key_prefix", *key_prefix == defaults.key_prefix),
            ("default_limit", *default_limit == defaults.default_limit),
            ("default_window", *default_window == defaults.default_window),
            ("burst_limit", *burst_limit == defaults.burst_limit),
            (
                "token_refill_rate",
                *token_refill_rate == defaults.token_refill_rate,
            ),
            ("tiers", *tiers == defaults.tiers),
            ("default_tier", *default_tier == defaults.default_tier),
            ("store", *store == defaults.store),
            ("queue_enabled", *queue_enabled == defaults.queue_enabled),
            ("max_queue_size", *max_queue_size == defaults.max_queue_size),
            ("queue_timeout", *queue_timeout == defaults.queue_timeout),
            ("tiers.pro.limit", *limit == unset.limit),
            ("tiers.pro.window", *window == unset.window),
            ("tiers.pro.burst", *burst == unset.burst),
            ("tiers.pro.priority", *priority == unset.priority),
            ("tiers.pro.strategy", *tier_strategy == unset.strategy),
            ("tiers.pro.refill", *refill == unset.refill),
            ("tiers.pro.shadow", *shadow == unset.shadow),
            ("tiers.pro.block_for", *block_for == unset.block_for),
        ]
        .into_iter()
        .filter_map(|(field, same)| same.then_some(field))
        .collect();
        assert!(left_as_default.is_empty(), "not set: {left_as_default:?}");

        // And through the public readers, in both formats.
        let config = every_option().build().unwrap();
        assert_eq!(Config::from_toml_str(EVERY_OPTION).unwrap(), config);
        let json = serde_json::to_string(&toml::from_str::<toml::Value>(EVERY_OPTION).unwrap());
        assert_eq!(Config::from_json_str(&json.unwrap()).unwrap(), config);
        // No default limit: `null`, in JSON only (TOML has no null).
        assert_eq!(
            Config::from_json_str(r#"{"default_limit": null}"#).unwrap(),
            Module::builder().no_default_limit().build().unwrap()
        );
    }

    #[test]
    fn a_type_error_in_a_file_names_its_field() {
        for (text, field) in [
            ("[tiers.pro]\nlimit = \"x\"\n", "tiers.pro.limit"),
            ("[tiers.pro]\nlimit = 1\ncolour = 2\n", "tiers.pro.colour"),
            ("max_queue_size = -1", "max_queue_size"),
            ("x = [", "toml"),
        ] {
            let err = Config::from_toml_str(text).unwrap_err();
            let Error::InvalidConfig(e) = &err else {
                panic!("{err}")
            };
            assert!(e.has(field), "{field} missing from {err}");
        }
        let err = Config::from_json_str(r#"{"tiers": {"pro": {"limit": -1}}}"#).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig(e) if e.has("tiers.pro.limit")),
            "{err}"
        );
        let err = Config::from_json_str(r#"{"enabled": true} x"#).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig(e) if e.has("json")),
            "{err}"
        );
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn a_file_asking_for_redis_without_the_feature_says_so() {
        let err =
            Config::from_toml_str("[store]\ntype = \"redis\"\nurl = \"redis://h\"\n").unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig(e) if e.has("store.type")),
            "{err}"
        );
        assert!(err.to_string().contains("`redis` feature"), "{err}");
    }
}
