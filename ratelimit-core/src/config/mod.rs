//! Module configuration: the option table, tiers, and validation that names each bad field.

use std::time::Duration;

use crate::quota::{Overrides, Quota, QuotaError};
use crate::store::MemoryOptions;
use crate::syntax::Strategy;

mod build;
#[cfg(feature = "serde")]
mod file;
mod quotas;
mod tier;

pub(crate) use build::names;
pub use build::ConfigBuilder;
pub use tier::{ResolvedTier, Tier};

/// Where state is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// In this process's memory.
    Memory(MemoryOptions),
    /// In Redis or Redis Cluster (feature `redis`), shared by every process using it.
    #[cfg(feature = "redis")]
    Redis(crate::store::RedisOptions),
    /// A store of your own ([`StoreConfig::custom`]).
    Custom(CustomStore),
}

/// A store of your own in a configuration: `Module::builder().store(StoreConfig::custom(s))`
/// runs annotated fns on it. Compared by identity (two configurations are equal when they
/// share one store).
#[derive(Clone)]
pub struct CustomStore(pub(crate) std::sync::Arc<dyn crate::store::DynStore>);

impl std::fmt::Debug for CustomStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomStore")
    }
}

impl PartialEq for CustomStore {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomStore {}

impl StoreConfig {
    /// A store of your own (see [`Store`](crate::store::Store)): every decision of the
    /// service or module built with this configuration is made by it.
    pub fn custom(store: impl crate::store::Store) -> Self {
        StoreConfig::Custom(CustomStore(std::sync::Arc::new(store)))
    }

    /// Whether the configured store can count `quota` exactly.
    pub(crate) fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        match self {
            StoreConfig::Memory(_) => {
                let _ = quota;
                Ok(())
            }
            #[cfg(feature = "redis")]
            StoreConfig::Redis(_) => crate::store::redis::supports(quota),
            StoreConfig::Custom(store) => store.0.supports(quota),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::Memory(MemoryOptions::default())
    }
}

/// A validated configuration. Build it with [`Config::builder`].
///
/// | option              | default            | meaning                                            |
/// |---------------------|--------------------|----------------------------------------------------|
/// | `enabled`           | `true`             | `false` admits every call (the one explicit way)   |
/// | `strategy`          | `sliding-window`   | algorithm for calls that do not choose one         |
/// | `key_prefix`        | `"ratelimit"`      | prefix of every store key (no `{`, `}`, spaces)    |
/// | `default_limit`     | `100`              | limit for calls without a tier or limit; may be unset |
/// | `default_window`    | `1m`               | window for calls and tiers without one             |
/// | `burst_limit`       | `0`                | extra calls on top of any limit without its own burst |
/// | `token_refill_rate` | the limit          | token-bucket refill of the default limit, per window |
/// | `tiers`             | none               | named plans                                        |
/// | `default_tier`      | none               | tier for calls that name none                      |
/// | `store`             | memory             | where state lives                                  |
/// | `queue_enabled`     | `false`            | calls over the limit wait their turn (see below)   |
/// | `max_queue_size`    | `1000`             | waiters held at once, over every key               |
/// | `queue_timeout`     | `5s`               | the longest a call waits before `QueueTimeout`     |
///
/// **Never enable the queue on unauthenticated endpoints.** A refusal costs nothing; a
/// queued call holds memory and a place until its timeout, so an attacker who can make calls
/// fills the queue and starves legitimate callers. Queue only inside a trust boundary (after
/// authentication), and per call ([`Options::queue`](crate::Options::queue)) rather than
/// module-wide where some entry points are public.
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
    pub(crate) queue_enabled: bool,
    pub(crate) max_queue_size: usize,
    pub(crate) queue_timeout: Duration,
    /// The quota of a call with no tier and no overrides (the default limit's), resolved
    /// once when the configuration is built: the hot path of a plain call.
    pub(crate) plain: Option<Quota>,
    /// `plain`'s identity in store keys.
    pub(crate) plain_identity: Option<Box<str>>,
    /// The module's settings, as they lie under the settings of a call under no tier.
    pub(crate) plain_under: crate::resolve::Under,
    /// The default tier's index in `tiers`.
    pub(crate) default_index: Option<usize>,
    /// What comes before every store key's hash tag (`key::head`), written once here.
    pub(crate) head: Box<str>,
}

impl Default for Config {
    fn default() -> Self {
        Config::builder()
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
    /// Token-bucket refill of the default limit, tokens per window (`None`: the limit).
    pub fn token_refill_rate(&self) -> Option<u64> {
        self.token_refill_rate
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
    /// Whether calls over their limit wait (unless a call says otherwise).
    pub fn queue_enabled(&self) -> bool {
        self.queue_enabled
    }
    /// The most calls waiting at once, over every key.
    pub fn max_queue_size(&self) -> usize {
        self.max_queue_size
    }
    /// The longest a call waits in the queue.
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }
    /// The quota of a call under no tier with no overrides.
    pub(crate) fn plain_quota(&self) -> Option<Quota> {
        self.plain
    }
    /// The store key's part of `tier` (an index into the tiers; `None`: no tier), written once
    /// when the configuration was built (`key::name_part`).
    #[inline]
    pub(crate) fn tier_part(&self, tier: Option<usize>) -> Option<&str> {
        tier.map(|i| &*self.tiers[i].key_part)
    }

    /// Whether `other` resolves every call to the same limit on the same state: what decides
    /// a call's quota and store key is equal, limiting on or off in both (the queue's
    /// settings, the store and a tier's priority may differ). A reload keeps no transition to
    /// a configuration with the same limits. With limiting off in the new one alone, it holds
    /// no call to the old one's limits, nor, once replaced, any later one: dropped as the
    /// same limits, 2 an hour switched off and then loosened to 10 admitted 8 more in that
    /// hour (probes_moving_reloads).
    pub(crate) fn same_limits(&self, other: &Config) -> bool {
        let tiers = |c: &Config| {
            c.tiers
                .iter()
                .map(|t| (t.name.clone(), t.overrides, t.quota, t.shadow))
                .collect::<Vec<_>>()
        };
        (
            self.enabled,
            self.strategy,
            &self.key_prefix,
            self.default_limit,
            self.default_window,
        ) == (
            other.enabled,
            other.strategy,
            &other.key_prefix,
            other.default_limit,
            other.default_window,
        ) && (self.burst_limit, self.token_refill_rate, &self.default_tier)
            == (
                other.burst_limit,
                other.token_refill_rate,
                &other.default_tier,
            )
            && tiers(self) == tiers(other)
    }

    /// The quota for a call that names no tier and sets nothing: the default tier's, else
    /// the default limit's (`None` without either).
    pub fn default_quota(&self) -> Option<Quota> {
        let tier = self.tier_index(None).ok()?;
        self.quota(tier, &Overrides::new()).ok()
    }
}
