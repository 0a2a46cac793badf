//! A library that rate-limits its own fns with a [`Limiter`] of its own, under tiers of its
//! own (`pro`, `batch`): an application that links it configures none of them, and its
//! `Module::init` neither checks nor requires them.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

use ratelimit::{rate_limit, throttle, Error, Limiter, Module, ModuleBuilder, Tier};

/// The library's limiter: built by [`init`], never by the application's module.
pub static LIMITS: Limiter = Limiter::new();

/// The library's own configuration: tier `pro` (2 a minute) and `batch` (3 a minute).
pub fn config() -> ModuleBuilder {
    Module::builder()
        .tier(Tier::new("pro", 2).window("1m"))
        .tier(Tier::new("batch", 3).window("1m"))
        .no_default_limit()
}

/// Builds the library's limiter on `builder` (the library's [`config`], with a clock of the
/// caller's choosing in tests).
pub fn init(builder: ModuleBuilder) -> Result<Module, Error> {
    LIMITS.init(builder)
}

/// Under the library's tier `pro`, per user.
#[rate_limit(tier = "pro", key = user, limiter = LIMITS)]
pub async fn fetch(user: u32) -> Result<u32, Error> {
    Ok(user)
}

/// A sync fn under the library's tier `batch`.
#[rate_limit(tier = "batch", limiter = crate::LIMITS)]
pub fn compress(data: &[u8]) -> Result<usize, Error> {
    Ok(data.len())
}

/// A client whose methods share the library's limiter.
#[derive(Debug, Default)]
pub struct Client;

#[throttle(1, "minute", limiter = LIMITS)]
impl Client {
    /// One a minute (the block's limit), sync.
    pub fn ping(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Its own limit, still on the library's limiter (the block's).
    #[rate_limit(tier = "pro")]
    pub async fn upload(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Not limited, as it says.
    #[ratelimit::skip_throttle]
    pub fn name(&self) -> &'static str {
        "client"
    }
}
