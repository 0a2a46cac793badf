//! The text formats (windows, rates, strategies), from the dependency-free crate the macros
//! parse with too, so the two never disagree.

pub use ratelimit_syntax::{format_window, parse_window, ParseError, Rate, Strategy, MAX_WINDOW};
pub(crate) use ratelimit_syntax::{valid_tier_name, TIER_NAME_RULE};
