//! Tiers (named plans) and windows given as text or as durations.

use std::sync::Arc;
use std::time::Duration;

use crate::quota::{Overrides, Quota};
use crate::syntax::{parse_window, Strategy, MAX_WINDOW};

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
    /// The duration, or why it is not one.
    pub(crate) fn resolve(&self) -> Result<Duration, String> {
        match self {
            Window::Duration(d) if d.is_zero() => Err("the window must be longer than zero".into()),
            Window::Duration(d) if *d > MAX_WINDOW => {
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
    /// The limit is always set; the window only when given as a duration (text is parsed
    /// when the configuration is built, see `window_text`).
    pub(crate) overrides: Overrides,
    pub(crate) window_text: Option<String>,
    pub(crate) priority: i32,
}

impl Tier {
    /// A tier `name` allowing `limit` calls per window (the module's default window unless
    /// [`window`](Self::window) is set).
    pub fn new(name: impl Into<String>, limit: u64) -> Self {
        Tier {
            name: name.into(),
            overrides: Overrides::new().limit(limit),
            window_text: None,
            priority: 0,
        }
    }

    /// The tier's window: a [`Duration`] or text such as `"1m"`.
    pub fn window(mut self, window: impl Into<Window>) -> Self {
        match window.into() {
            Window::Duration(d) => {
                self.overrides.window = Some(d);
                self.window_text = None;
            }
            Window::Text(t) => {
                self.overrides.window = None;
                self.window_text = Some(t);
            }
        }
        self
    }

    /// Extra calls on top of the limit (overrides the module's `burst_limit`).
    pub fn burst(mut self, burst: u64) -> Self {
        self.overrides.burst = Some(burst);
        self
    }

    /// Queue priority: higher goes first.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The tier's own strategy (default: the module's).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.overrides.strategy = Some(strategy);
        self
    }

    /// The tier's own token-bucket refill, tokens per window (default: its limit; the
    /// module's `token_refill_rate` applies only to the module's default limit).
    pub fn refill(mut self, refill: u64) -> Self {
        self.overrides.refill = Some(refill);
        self
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        &self.name
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
    /// `quota`'s identity in store keys, written once here rather than on every call.
    pub(crate) identity: Box<str>,
}
