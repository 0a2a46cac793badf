//! [`ConfigBuilder`]: every option, and the validation that reports each bad field by name.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::{Config, ResolvedTier, StoreConfig, Tier};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::quota::window_for_field;
use crate::syntax::{ParseError, Strategy};
use crate::window::Window;

/// Builds a [`Config`]; [`build`](Self::build) validates everything and reports every problem.
///
/// `For` is what the builder ends in: a [`Config`] (from [`Config::builder`]), or a running
/// [`Module`](crate::Module) (from [`Module::builder`](crate::Module::builder), named
/// [`ModuleBuilder`](crate::ModuleBuilder)), which also takes a clock and is finished with
/// `init`. Both have every option below, declared once here.
#[must_use = "a builder does nothing until it is built (`build`, or `init` for a module)"]
pub struct ConfigBuilder<For = Config> {
    pub(crate) options: Options,
    /// The module's clock; never set on a builder for a [`Config`], which has none.
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) product: PhantomData<fn() -> For>,
}

/// Every option, each declared once: the builder's setters write these fields, and the
/// configuration file (feature `serde`) deserializes into them, so an option reaches both.
///
/// A strategy, a window and the store read from a file keep what is wrong with them until
/// [`build`](ConfigBuilder::build), which reports it by field with every other problem.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub(crate) struct Options {
    pub(crate) enabled: bool,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "super::file::strategy"))]
    pub(crate) strategy: Result<Strategy, ParseError>,
    pub(crate) key_prefix: String,
    pub(crate) default_limit: Option<u64>,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "super::file::window"))]
    pub(crate) default_window: Window,
    pub(crate) burst_limit: u64,
    pub(crate) token_refill_rate: Option<u64>,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "super::file::tiers"))]
    pub(crate) tiers: Vec<Tier>,
    pub(crate) default_tier: Option<String>,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "super::file::store"))]
    pub(crate) store: Result<StoreConfig, ConfigError>,
    pub(crate) queue_enabled: bool,
    pub(crate) max_queue_size: usize,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "super::file::window"))]
    pub(crate) queue_timeout: Window,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            enabled: true,
            strategy: Ok(Strategy::SlidingWindow),
            key_prefix: "ratelimit".into(),
            default_limit: Some(100),
            default_window: Window::from(Duration::from_secs(60)),
            burst_limit: 0,
            token_refill_rate: None,
            tiers: Vec::new(),
            default_tier: None,
            store: Ok(StoreConfig::default()),
            queue_enabled: false,
            max_queue_size: 1_000,
            queue_timeout: Window::from(Duration::from_secs(5)),
        }
    }
}

impl<For> From<Options> for ConfigBuilder<For> {
    fn from(options: Options) -> Self {
        ConfigBuilder {
            options,
            clock: None,
            product: PhantomData,
        }
    }
}

impl<For> Default for ConfigBuilder<For> {
    fn default() -> Self {
        Options::default().into()
    }
}

// By hand: derived, they would ask the same of `For` (a `Module` is neither).
impl<For> Clone for ConfigBuilder<For> {
    fn clone(&self) -> Self {
        ConfigBuilder {
            options: self.options.clone(),
            clock: self.clock.clone(),
            product: PhantomData,
        }
    }
}

impl<For> fmt::Debug for ConfigBuilder<For> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("options", &self.options)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<For> ConfigBuilder<For> {
    /// `false` admits every call without counting: the only way to switch limiting off.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.options.enabled = enabled;
        self
    }
    /// The default strategy.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.options.strategy = Ok(strategy);
        self
    }
    /// The prefix of every store key.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.key_prefix = prefix.into();
        self
    }
    /// The limit for calls that name no tier and give no limit.
    pub fn default_limit(mut self, limit: u64) -> Self {
        self.options.default_limit = Some(limit);
        self
    }
    /// No default limit: a call with neither a tier nor a limit is refused with
    /// [`Error::NoLimit`]. In a JSON file, `"default_limit": null`.
    pub fn no_default_limit(mut self) -> Self {
        self.options.default_limit = None;
        self
    }
    /// The window for calls and tiers that give none.
    pub fn default_window(mut self, window: impl Into<Window>) -> Self {
        self.options.default_window = window.into();
        self
    }
    /// Extra calls allowed on top of every limit that has no burst of its own.
    pub fn burst_limit(mut self, burst: u64) -> Self {
        self.options.burst_limit = burst;
        self
    }
    /// Token-bucket refill, tokens per window (default: the limit). The default limit's
    /// strategy must then be the token bucket: on another, which does not refill, `build`
    /// names `token_refill_rate` ([`QuotaError::RefillWithoutTokenBucket`](crate::QuotaError)).
    pub fn token_refill_rate(mut self, rate: u64) -> Self {
        self.options.token_refill_rate = Some(rate);
        self
    }
    /// Adds a tier.
    pub fn tier(mut self, tier: Tier) -> Self {
        self.options.tiers.push(tier);
        self
    }
    /// The tier used by calls that name none.
    pub fn default_tier(mut self, name: impl Into<String>) -> Self {
        self.options.default_tier = Some(name.into());
        self
    }
    /// Where state is kept.
    pub fn store(mut self, store: StoreConfig) -> Self {
        self.options.store = Ok(store);
        self
    }
    /// Whether calls over their limit wait for capacity (in a bounded queue, at most
    /// `queue_timeout`) instead of being refused at once; a call can say otherwise with
    /// [`Options::queue`](crate::Options::queue). Never on unauthenticated endpoints: see
    /// [`Config`].
    pub fn queue_enabled(mut self, enabled: bool) -> Self {
        self.options.queue_enabled = enabled;
        self
    }
    /// The most calls waiting at once, over every key (default 1000); one more is refused
    /// with [`Error::QueueFull`].
    pub fn max_queue_size(mut self, size: usize) -> Self {
        self.options.max_queue_size = size;
        self
    }
    /// The longest a call waits (default `5s`): a [`Duration`] or text such as `"500ms"`.
    /// Past it the call is refused with [`Error::QueueTimeout`], at once when the store's
    /// refusal already puts its turn past it.
    pub fn queue_timeout(mut self, timeout: impl Into<Window>) -> Self {
        self.options.queue_timeout = timeout.into();
        self
    }

    /// Validates and builds. Every problem is reported, each with its field.
    pub fn build(self) -> Result<Config, Error> {
        let o = self.options;
        let mut errors = ConfigError::default();
        if o.key_prefix.is_empty() || o.key_prefix.len() > 128 {
            errors.push("key_prefix", "must be 1 to 128 bytes");
        }
        if o.key_prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '{' || c == '}')
        {
            errors.push(
                "key_prefix",
                "must not contain whitespace, control characters, `{` or `}` (the store key's \
                 hash tag follows the prefix)",
            );
        }
        let default_window = window_for_field(&o.default_window).unwrap_or_else(|e| {
            errors.push("default_window", e);
            Duration::from_secs(60)
        });
        let queue_timeout = window_for_field(&o.queue_timeout).unwrap_or_else(|e| {
            errors.push("queue_timeout", e);
            Duration::from_secs(5)
        });
        if o.max_queue_size == 0 {
            errors.push(
                "max_queue_size",
                "must be at least 1 (switch the queue off with `queue_enabled = false`)",
            );
        }
        if o.token_refill_rate == Some(0) {
            errors.push("token_refill_rate", "must be at least 1 token per window");
        }
        let strategy = o.strategy.unwrap_or_else(|e| {
            errors.push("strategy", e.to_string());
            Strategy::default()
        });
        let store = o.store.unwrap_or_else(|e| {
            errors.problems.extend(e.problems);
            StoreConfig::default()
        });
        let mut config = Config {
            enabled: o.enabled,
            strategy,
            key_prefix: o.key_prefix,
            default_limit: o.default_limit,
            default_window,
            burst_limit: o.burst_limit,
            token_refill_rate: o.token_refill_rate.filter(|&r| r > 0),
            tiers: Vec::with_capacity(o.tiers.len()),
            default_tier: None,
            store,
            queue_enabled: o.queue_enabled,
            max_queue_size: o.max_queue_size,
            queue_timeout,
            plain: None,
            plain_identity: None,
            plain_under: Default::default(),
            default_index: None,
            head: Box::default(),
        };
        config.head = crate::key::head(&config.key_prefix);
        for tier in o.tiers {
            if config.tiers.iter().any(|t| *t.name == *tier.name) {
                errors.push(format!("tiers.{}", tier.name), "defined twice");
            } else if let Some(tier) = tier.resolve(&mut errors) {
                config.tiers.push(tier);
            }
        }
        if let Some(name) = o.default_tier {
            match config.tiers.iter().position(|t| *t.name == *name) {
                Some(i) => {
                    config.default_tier = Some(config.tiers[i].name.clone());
                    config.default_index = Some(i);
                }
                None => errors.push(
                    "default_tier",
                    format!(
                        "{name:?} is not one of the configured tiers ({})",
                        names(&config.tiers)
                    ),
                ),
            }
        }
        match &config.store {
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
            }
            StoreConfig::Custom(_) => {}
        }
        // What lies under a call's settings, at each tier and under none: every module
        // setting is known now.
        config.plain_under = config.under(None);
        for i in 0..config.tiers.len() {
            config.tiers[i].under = config.under(Some(&config.tiers[i].overrides));
        }
        // Every quota known now, resolved by the function every call goes through, and
        // checked against what the configured store can count.
        let supports = |q: &crate::Quota| config.store.supports(q);
        for (field, e) in config.quota_problems(&supports) {
            errors.push(field, e.to_string());
        }
        if !errors.problems.is_empty() {
            return Err(Error::InvalidConfig(errors));
        }
        for i in 0..config.tiers.len() {
            let quota = config.quota(Some(i), &crate::Overrides::new())?;
            config.tiers[i].quota = quota;
            config.tiers[i].identity = identity(&quota);
        }
        config.plain = config.quota(None, &crate::Overrides::new()).ok();
        config.plain_identity = config.plain.as_ref().map(identity);
        Ok(config)
    }
}

fn identity(quota: &crate::Quota) -> Box<str> {
    let mut out = String::new();
    quota.identity(&mut out);
    out.into()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryOptions;

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
            .queue_timeout("0s")
            .max_queue_size(0)
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
            "queue_timeout",
            "max_queue_size",
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
            (pro.capacity(), pro.window()),
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
        assert_eq!(c.default_quota().unwrap().limit(), 3);
    }
}
