//! The shared store (feature `redis`): one EVALSHA per decision against Redis or Redis Cluster.
//!
//! - `options`: [`RedisOptions`] and [`FailurePolicy`], what the user configures;
//! - `redaction`: credentials kept out of `Debug` and error messages;
//! - `scripts`: the Lua scripts, one per strategy, and the quotas they count exactly;
//! - `store`: [`RedisStore`], the connection and one script call per decision;
//! - `eviction`: Redis' eviction policy, checked once per store;
//! - `backend`: the store behind its failure policy, what the service holds.

mod backend;
mod eviction;
mod options;
mod redaction;
mod scripts;
mod store;

pub(crate) use backend::RedisBackend;
pub use options::{FailurePolicy, RedisOptions};
pub(crate) use scripts::redis_limits;
pub use store::RedisStore;
