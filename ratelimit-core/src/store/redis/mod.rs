//! The shared store (feature `redis`): one EVALSHA per decision against Redis or Redis Cluster.
//!
//! - `options`: [`RedisOptions`], what the user configures;
//! - `redaction`: credentials kept out of `Debug` and error messages;
//! - `refusals`: refusals answered in the process until their retry time;
//! - `refund`: spends kept to be given back, stamped, and their refunds; penalties, rewards;
//! - `lease`: hot keys' budgets leased by the slice (opt-in), spent in the process;
//! - `local`: what the store answers in the process (the checks, held refusals, leased units);
//! - `reply`: the scripts' replies read as verdicts, and the estimate of Redis' clock;
//! - `scripts`: the Lua scripts, one per strategy, and the quotas they count exactly;
//! - `store`: [`RedisStore`], what it decides and how it answers the `Store` trait;
//! - `stacked`: the stacked script, its keys and arguments, the old states carried with it;
//! - `across_slots`: an old state in another Cluster slot, read there first and again after
//!   a spend, with the pending record of a read after that never came;
//! - `round_trip`: the connection a call uses, bounded by the timeout, and a script run on it;
//! - `link`: one server's connection, its calls bounded by one deadline per connection;
//! - `eviction`: Redis' eviction policy, checked once per store.
//!
//! The failure policy is applied by the generic [`Failover`](crate::store::Failover) wrapper.

mod across_slots;
#[cfg(test)]
mod agrees;
mod arguments;
#[cfg(test)]
mod carries;
mod eviction;
mod given;
mod horizon;
mod lease;
mod ledger;
mod link;
mod local;
#[cfg(test)]
mod lua_adjusts;
#[cfg(test)]
mod lua_agrees;
#[cfg(test)]
mod lua_blocks;
#[cfg(test)]
mod lua_carry;
#[cfg(test)]
mod lua_log_tags;
#[cfg(test)]
mod lua_pair;
#[cfg(test)]
mod lua_planted;
#[cfg(test)]
mod lua_refunds;
#[cfg(test)]
mod lua_standin;
#[cfg(test)]
mod lua_windows;
mod options;
mod redaction;
/// Real `redis-server` processes and Clusters for the tests on a server (`agrees`, `carries`).
#[cfg(test)]
#[allow(dead_code, unreachable_pub)]
#[path = "../../../../tests/redis_server.rs"]
mod redis_server;
mod refund;
mod refusals;
mod reply;
mod round_trip;
mod scripts;
mod slots;
mod stacked;
mod store;

pub(crate) use arguments::supports;
pub use lease::LeaseOptions;
pub use options::RedisOptions;
pub use store::RedisStore;
