//! Where limiter state lives. Every store runs the algorithm inside its own atomic step.

mod memory;
#[cfg(feature = "redis")]
pub(crate) mod redis;

#[cfg(feature = "redis")]
pub use self::redis::{FailurePolicy, RedisOptions, RedisStore};
pub use memory::{MemoryOptions, MemoryStore};

/// The longest key accepted, in bytes. Keys are made by code, not typed by people; anything
/// longer is almost certainly a whole request body used by mistake.
pub const MAX_KEY_LEN: usize = 1024;

pub(crate) fn check_key(key: &str) -> Result<(), crate::Error> {
    if key.is_empty() {
        return Err(crate::Error::InvalidKey {
            reason: "the key is empty",
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(crate::Error::InvalidKey {
            reason: "the key is longer than 1024 bytes",
        });
    }
    Ok(())
}
