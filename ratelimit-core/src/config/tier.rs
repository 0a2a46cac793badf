//! Tiers (named plans).

use std::sync::Arc;

use crate::error::ConfigError;
use crate::quota::{window_for_field, Overrides, Quota};
use crate::syntax::{valid_tier_name, ParseError, Strategy, TIER_NAME_RULE};
use crate::window::Window;

/// A named plan: its own limit, and optionally its own window, burst, strategy, refill rate
/// and queue priority. What it does not set comes from the module.
///
/// ```
/// use ratelimit_core::{Strategy, Tier};
/// let pro = Tier::new("pro", 1_000).window("1m").burst(200).priority(10);
/// let metered = Tier::new("metered", 60).window("1h").strategy(Strategy::TokenBucket).refill(1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub(crate) name: String,
    pub(crate) options: TierOptions,
}

/// A tier's options, each declared once: [`Tier`]'s setters write these fields and a tier's
/// table in the configuration file (feature `serde`) deserializes into them. A window or a
/// strategy keeps what is wrong with it until the configuration is built, which reports it
/// with its field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub(crate) struct TierOptions {
    pub(crate) limit: u64,
    #[cfg_attr(
        feature = "serde",
        serde(default, deserialize_with = "super::file::some_window")
    )]
    pub(crate) window: Option<Window>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(crate) burst: Option<u64>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(crate) priority: i32,
    #[cfg_attr(
        feature = "serde",
        serde(default, deserialize_with = "super::file::some_strategy")
    )]
    pub(crate) strategy: Option<Result<Strategy, ParseError>>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(crate) refill: Option<u64>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(crate) shadow: bool,
    #[cfg_attr(
        feature = "serde",
        serde(default, deserialize_with = "super::file::some_window")
    )]
    pub(crate) block_for: Option<Window>,
}

impl Tier {
    /// A tier `name` allowing `limit` calls per window (the module's default window unless
    /// [`window`](Self::window) is set).
    pub fn new(name: impl Into<String>, limit: u64) -> Self {
        Tier {
            name: name.into(),
            options: TierOptions {
                limit,
                window: None,
                burst: None,
                priority: 0,
                strategy: None,
                refill: None,
                shadow: false,
                block_for: None,
            },
        }
    }

    /// The tier's window: a [`Duration`](std::time::Duration) or text such as `"1m"` (see
    /// [`Window`]).
    pub fn window(mut self, window: impl Into<Window>) -> Self {
        self.options.window = Some(window.into());
        self
    }

    /// Extra calls on top of the limit (overrides the module's `burst_limit`).
    pub fn burst(mut self, burst: u64) -> Self {
        self.options.burst = Some(burst);
        self
    }

    /// Refusing a key for `block` once a call on it under the tier was refused, whatever the
    /// limit says meanwhile: a [`Duration`](std::time::Duration) or text such as `"1h"` (see
    /// [`Quota::with_block`](crate::Quota::with_block)). Only on a store that keeps blocks.
    pub fn block_for(mut self, block: impl Into<Window>) -> Self {
        self.options.block_for = Some(block.into());
        self
    }

    /// Queue priority: higher goes first.
    pub fn priority(mut self, priority: i32) -> Self {
        self.options.priority = priority;
        self
    }

    /// The tier's own strategy (default: the module's).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.options.strategy = Some(Ok(strategy));
        self
    }

    /// The tier's own token-bucket refill, tokens per window (default: its limit; the
    /// module's `token_refill_rate` applies only to the module's default limit). An error
    /// naming `tiers.<name>.refill` when the tier's strategy is not the token bucket.
    pub fn refill(mut self, refill: u64) -> Self {
        self.options.refill = Some(refill);
        self
    }

    /// Makes every limit under the tier a shadow limit: decided and counted, never refusing
    /// (see [`Options::shadow`](crate::Options::shadow)). `init` logs each shadow tier at
    /// warn level: shadow is only ever this explicit choice.
    pub fn shadow(mut self) -> Self {
        self.options.shadow = true;
        self
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tier as the configuration keeps it, its problems pushed to `errors` (`None` for a
    /// bad name). Its quota is filled in once every module setting is known.
    pub(crate) fn resolve(self, errors: &mut ConfigError) -> Option<ResolvedTier> {
        if !valid_tier_name(&self.name) {
            errors.push(format!("tiers.{:?}", self.name), TIER_NAME_RULE);
            return None;
        }
        // A part of every store key of the tier: bounded like a user key (see `key.rs`).
        if self.name.len() > crate::key::MAX_KEY_LEN {
            errors.push("tiers", "a tier name is at most 1024 bytes");
            return None;
        }
        let TierOptions {
            limit,
            window,
            burst,
            priority,
            strategy,
            refill,
            shadow,
            block_for,
        } = self.options;
        let mut overrides = Overrides::new().limit(limit);
        overrides.burst = burst;
        overrides.refill = refill;
        let field = |setting: &str| format!("tiers.{}.{setting}", self.name);
        match window.as_ref().map(window_for_field) {
            Some(Ok(w)) => overrides = overrides.window(w),
            Some(Err(e)) => errors.push(field("window"), e),
            None => {}
        }
        match strategy {
            Some(Ok(s)) => overrides.strategy = Some(s),
            Some(Err(e)) => errors.push(field("strategy"), e.to_string()),
            None => {}
        }
        match block_for.as_ref().map(window_for_field) {
            Some(Ok(b)) => overrides.block = Some(b),
            Some(Err(e)) => errors.push(field("block_for"), e),
            None => {}
        }
        Some(ResolvedTier {
            name: self.name.as_str().into(),
            overrides,
            quota: Quota::default(),
            priority,
            shadow,
            identity: Box::default(),
            under: crate::resolve::Under::default(),
            key_part: crate::key::name_part(Some(&self.name)),
        })
    }
}

/// A tier after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedTier {
    /// The name.
    pub name: Arc<str>,
    /// What the tier sets itself (its limit always; its window parsed).
    pub overrides: Overrides,
    /// The tier's quota, with the module's settings filling in what the tier does not set.
    pub quota: Quota,
    /// Queue priority.
    pub priority: i32,
    /// Whether every limit under the tier is a shadow limit ([`Tier::shadow`]).
    pub shadow: bool,
    /// `quota`'s identity in store keys, written once here rather than on every call.
    pub(crate) identity: Box<str>,
    /// Its settings over the module's, as they lie under a call's (laid once here).
    pub(crate) under: crate::resolve::Under,
    /// Its part of a store key (`key::name_part`), written once here.
    pub(crate) key_part: Box<str>,
}
