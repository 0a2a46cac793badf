//! The stacked script (`lua/stacked.lua`, see its header) and its keys and arguments: the
//! limits Redis decides, the keys beside their states, and the old states a reload moved some
//! of them away from, carried into theirs first (`lua/carry.lua`; [`Stacked::carried`]).
//!
//! In a Redis Cluster every key of one run lives in one slot: the service's keys of one user
//! key share their hash tag, an old state's too (it has the same user key), and the keys
//! beside a state live in its slot (`ledger::beside`). The limits of a stacked call on keys
//! of several slots (two user keys, or one beside an fn-wide budget) are run slot by slot
//! (`slots.rs`). An old state in another slot than the limit it is carried into (keys
//! without a user key, whose empty tag `{}` Redis does not take for one, so each is hashed
//! whole) is refused by Redis whole (`CROSSSLOT`, an [`Error::InvalidKey`]) before anything
//! is read: never half carried, never carried in part and decided. (But for a block carried
//! alone between two states both decided with the call, `Carry::block_only`: each holds the
//! call by its own check, so across slots it is not carried, `slots.rs`.)
//!
//! [`Error::InvalidKey`]: crate::Error::InvalidKey

use std::sync::LazyLock;
use std::time::Instant;

use super::ledger::{block_key, stamp_key};
use super::refund::draw;
use super::scripts::{arguments, stacked_index, supports, Lua, FUNCTIONS};
use super::RedisStore;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Check, Stacked};

/// Several limits as one decision (`lua/stacked.lua`), the old states carried first.
pub(super) static STACKED_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(carrying(include_str!("../../../lua/stacked.lua"))));

/// `body` behind the strategies' functions and `lua/carry.lua` (the tests run the carry's
/// rule alone behind them: `lua_carry.rs`).
pub(super) fn carrying(body: &str) -> String {
    [FUNCTIONS, include_str!("../../../lua/carry.lua"), body].concat()
}

/// A quota's four numbers as the stacked script takes a limit's: its strategy, the two
/// numbers its script takes, its block in microseconds.
fn numbers(quota: &Quota) -> [u64; 4] {
    let [first, second] = arguments(quota);
    let index = stacked_index(quota.strategy()) as u64;
    [index, first, second, quota.block_nanos() / 1_000]
}

/// The stacked script's KEYS after the limits' own (those of `asked`, in order), and its ARGV
/// (see its header), for `asked` (those of `stacked`'s checks Redis decides, in order) and
/// every state `stacked` carries: with `commit` an admitted call is recorded, `stamping`
/// (with `commit`) stamped for a refund with `stamp`.
pub(super) fn script_call(
    stacked: &Stacked<'_>,
    asked: &[&Check<'_>],
    commit: bool,
    stamping: bool,
    stamp: impl FnOnce() -> u64,
) -> Result<(Vec<String>, Vec<u64>), Error> {
    let carried = stacked.carried();
    let into = |i: usize| &stacked.checks()[i];
    for carry in carried {
        // Both counted by whole microseconds, as every limit the scripts decide.
        supports(carry.quota)?;
        supports(into(carry.into).quota)?;
    }
    let blocking = asked.iter().any(|c| c.quota.block().is_some());
    // The keys beside the states the script reads (see its header), then each carried state's
    // key and block key and those of the state it is carried into.
    let beside = (stamping.then_some(stamp_key as fn(&str) -> String))
        .into_iter()
        .chain(blocking.then_some(block_key as fn(&str) -> String))
        .flat_map(|name| asked.iter().map(move |c| name(c.key.as_str())));
    let carried_keys = carried.iter().flat_map(|carry| {
        let (from, to) = (carry.from.as_str(), into(carry.into).key.as_str());
        [
            from.to_owned(),
            block_key(from),
            to.to_owned(),
            block_key(to),
        ]
    });
    let keys = beside.chain(carried_keys).collect();
    let mode = if stamping { 2 } else { u64::from(commit) };
    let mut args = Vec::with_capacity(3 + 5 * asked.len() + 9 * carried.len());
    args.extend([mode, u64::from(blocking) + 2 * carried.len() as u64]);
    for check in asked {
        let [index, first, second, block_us] = numbers(check.quota);
        args.extend([index, first, second, check.cost, block_us]);
    }
    for carry in carried {
        args.extend(numbers(carry.quota));
        args.extend(numbers(into(carry.into).quota));
        args.push(u64::from(carry.block_only));
    }
    if stamping {
        args.push(stamp());
    }
    Ok((keys, args))
}

impl RedisStore {
    /// Runs the stacked script ([`script_call`]) in one round trip: its reply, five integers
    /// per limit asked (seven stamping); none when none is asked, which carries the states
    /// alone (a run is made only when something is asked or carried).
    pub(super) async fn run_stacked(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        commit: bool,
        stamping: bool,
    ) -> Result<Vec<i64>, Error> {
        if asked.is_empty() && stacked.carried().is_empty() {
            return Ok(Vec::new());
        }
        let (beside, args) = script_call(stacked, asked, commit, stamping, draw)?;
        let keys: Vec<&str> = (asked.iter().map(|c| c.key.as_str()))
            .chain(beside.iter().map(String::as_str))
            .collect();
        self.run(&STACKED_SCRIPT, &keys, &args, false, Instant::now())
            .await
    }
}
