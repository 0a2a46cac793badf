//! The text formats of [`ratelimit`](https://docs.rs/ratelimit): windows (`"500ms"`, `"1m"`,
//! `"1h30m"`), rates (`"5/minute"`, `"100/1m"`) and strategy names (`"token-bucket"`).
//!
//! The runtime and the attribute macros both parse with this crate, so a window the macro
//! accepts at compile time is the window the runtime enforces. It has no dependencies: the
//! proc-macro crate builds it for the host without building the runtime.
//!
//! ```
//! use ratelimit_syntax::{parse_window, Rate, Strategy};
//! use std::time::Duration;
//!
//! assert_eq!(parse_window("1h30m")?, Duration::from_secs(5_400));
//! let rate: Rate = "100/minute".parse()?;
//! assert_eq!((rate.limit, rate.window), (100, Duration::from_secs(60)));
//! assert_eq!("token-bucket".parse::<Strategy>()?, Strategy::TokenBucket);
//! # Ok::<(), ratelimit_syntax::ParseError>(())
//! ```
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod error;
mod name;
mod rate;
mod strategy;
mod window;

pub use error::ParseError;
pub use name::{valid_tier_name, TIER_NAME_RULE};
pub use rate::Rate;
pub use strategy::Strategy;
pub use window::{format_window, parse_window, MAX_WINDOW};
