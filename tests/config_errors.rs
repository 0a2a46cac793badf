//! What a configuration that must not build names (`probes_config`, `probes_config_more`).

use ratelimit::{Config, ConfigError, Error};

/// The problems of a configuration that must not build; panics on anything else.
#[track_caller]
pub fn invalid(result: Result<Config, Error>) -> ConfigError {
    match result {
        Err(Error::InvalidConfig(e)) => e,
        Ok(config) => panic!("accepted: {config:?}"),
        Err(other) => panic!("not a configuration error: {other:?}"),
    }
}

/// The fields an invalid configuration names, in order.
pub fn fields(e: &ConfigError) -> Vec<&str> {
    e.problems.iter().map(|(f, _)| f.as_str()).collect()
}
