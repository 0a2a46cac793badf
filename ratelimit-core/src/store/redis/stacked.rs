//! The stacked script (`lua/stacked.lua`, see its header) and its keys and arguments: the
//! limits Redis decides, the keys beside their states, and the old states a reload moved some
//! of them away from, carried into theirs first (`lua/carry.lua`; [`Stacked::carried`]).
//!
//! In a Redis Cluster every key of one run lives in one slot: the service's keys of one user
//! key share their hash tag, an old state's too (it has the same user key), and the keys
//! beside a state live in its slot (`ledger::beside`). The limits of a stacked call on keys
//! of several slots (two user keys, or one beside an fn-wide budget) are run slot by slot
//! (`slots.rs`). An old state in another slot than the limit it is carried into is read in
//! its own slot first and carried from what was read (`across_slots.rs`).

use std::sync::LazyLock;
use std::time::Instant;

use redis::cluster_routing::Slot;

use super::arguments::supported;
use super::given::{givens, grown_mark, pending_key, Given};
use super::ledger::{block_key, stamp_key};
use super::refund::draw;
use super::reply::unexpected;
use super::scripts::{carrying, numbers, Lua};
use super::RedisStore;
use crate::error::Error;
use crate::store::{Carry, Check, Mode, Stacked};

/// Several limits as one decision (`lua/stacked.lua`), the old states carried first.
pub(super) static STACKED_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(carrying(include_str!("../../../lua/stacked.lua"))));

/// The stacked script's KEYS after the limits' own (those of `asked`, in order), and its ARGV
/// (see its header), for `asked` (those of `stacked`'s checks Redis decides, in order) and
/// every state `stacked` carries (the `j`-th as `given[j]` when that is `Some`: read in
/// another slot): with `commit` an admitted call is recorded, `stamping` (with `commit`)
/// stamped for a refund with `stamp`.
pub(super) fn script_call(
    stacked: &Stacked<'_>,
    asked: &[&Check<'_>],
    commit: bool,
    stamping: bool,
    given: &[Option<Given>],
    stamp: impl FnOnce() -> u64,
) -> Result<(Vec<String>, Vec<u64>), Error> {
    let carried = stacked.carried();
    let into = |i: usize| &stacked.checks()[i];
    supported(stacked)?;
    let given = |j: usize| given.get(j).copied().flatten();
    let blocking = asked.iter().any(|c| c.quota.block().is_some());
    // The keys beside the states the script reads (see its header), then each carried state's
    // key and block key and those of the state it is carried into.
    let beside = (stamping.then_some(stamp_key as fn(&str) -> String))
        .into_iter()
        .chain(blocking.then_some(block_key as fn(&str) -> String))
        .flat_map(|name| asked.iter().map(move |c| name(c.key.as_str())));
    let carried_keys = carried.iter().enumerate().flat_map(|(j, carry)| {
        let to = into(carry.into).key.as_str();
        // A state read in another slot, or what it grew by: the mark of what was added and
        // the pending record beside the moved state in its keys' place.
        let (from, from_block) = match given(j) {
            None => (
                carry.from.as_str().to_owned(),
                block_key(carry.from.as_str()),
            ),
            Some(_) => (
                grown_mark(to, carry.from.as_str()),
                pending_key(to, carry.from.as_str()),
            ),
        };
        [from, from_block, to.to_owned(), block_key(to)]
    });
    let keys = beside.chain(carried_keys).collect();
    let mode = if stamping { 2 } else { u64::from(commit) };
    let mut args = Vec::with_capacity(3 + 5 * asked.len() + 14 * carried.len());
    args.extend([mode, u64::from(blocking) + 2 * carried.len() as u64]);
    for check in asked {
        let [index, first, second, block_us] = numbers(check.quota);
        args.extend([index, first, second, check.cost, block_us]);
    }
    for (j, carry) in carried.iter().enumerate() {
        let [index, first, second, block_us] = numbers(carry.quota);
        let (numbers_of, flag, end, erased, pending, wait, began) = match given(j) {
            None => ([index, first, second, block_us], 0, 0, 0, 0, 0, 0),
            Some(Given::Held {
                debt,
                left,
                end,
                erased,
                pending,
                wait,
                began,
            }) => (
                [index, debt, left, block_us],
                2,
                end,
                erased,
                pending,
                wait,
                began,
            ),
            Some(Given::Grown {
                from,
                to,
                lasts,
                slack,
                since,
                pending,
            }) => ([index, from, to, lasts], 4, slack, since, pending, 0, 0),
        };
        args.extend(numbers_of);
        args.extend(numbers(into(carry.into).quota));
        let flag = u64::from(carry.block_only) + flag;
        args.extend([flag, end, erased, pending, wait, began]);
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
        let sent = Instant::now();
        // Only a debt grows uncovered (a block is a time, kept by any later carry): a carry of
        // the block alone needs no check, nor the moved node's clock read before its read.
        let into = |carry: &Carry<'_>| stacked.checks()[carry.into].quota;
        let checked = commit
            && !asked.is_empty()
            && (stacked.carried().iter()).any(|carry| carry.carries_debt(into(carry)));
        let read = match (self.read_across_slots(stacked, asked, checked, sent)).await {
            Ok(read) => read,
            Err(e) => return Box::pin(self.refused_or(e, stacked, asked, stamping)).await,
        };
        let debts = (read.iter().zip(stacked.carried()))
            .any(|(read, carry)| read.is_some() && carry.carries_debt(into(carry)));
        if checked && debts {
            return Box::pin(self.run_checked(stacked, asked, stamping, read, sent)).await;
        }
        let given = givens(&read, 0, 0);
        (self.run_script(stacked, asked, commit, stamping, &given, sent)).await
    }

    /// [`run_stacked`](Self::run_stacked)'s one script, the states in `given` carried as read.
    pub(super) async fn run_script(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        commit: bool,
        stamping: bool,
        given: &[Option<Given>],
        sent: Instant,
    ) -> Result<Vec<i64>, Error> {
        let (beside, args) = script_call(stacked, asked, commit, stamping, given, draw)?;
        let keys: Vec<&str> = (asked.iter().map(|c| c.key.as_str()))
            .chain(beside.iter().map(String::as_str))
            .collect();
        self.run(&STACKED_SCRIPT, &keys, &args, false, sent).await
    }

    /// A call whose old state in another slot could not be read (`error`: its node down or
    /// slow, state of an unexpected shape there): its limits looked at without it (the states
    /// in their slot carried, as a look carries); a refusal there is the call's answer (as a
    /// refusal's reply, stamped with none), else `error`, for the failure policy to decide as
    /// if nothing had been asked. So no policy turns a refusal a live node gives into an
    /// admission (as across slots, `slots.rs`); nothing is spent, no block begun.
    #[cold]
    pub(super) async fn refused_or(
        &self,
        error: Error,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        stamping: bool,
    ) -> Result<Vec<i64>, Error> {
        if asked.is_empty() {
            return Err(error);
        }
        let slot = Slot::for_key(asked[0].key.as_str());
        let here: Vec<Carry<'_>> = (stacked.carried().iter())
            .filter(|carry| Slot::for_key(carry.from.as_str()) == slot)
            .copied()
            .collect();
        let look = Stacked::carrying(stacked.checks(), &here, stacked.now(), Mode::Look)?;
        // Within a timeout of its own: the read may have taken all of the call's.
        let looked = (self.run_script(&look, asked, false, false, &[], Instant::now())).await?;
        if looked.len() != 5 * asked.len() {
            return Err(unexpected(&looked));
        }
        if looked.chunks(5).all(|r| r[0] == 1) {
            return Err(error);
        }
        tracing::warn!(
            error = %error,
            "an old state in another Redis Cluster slot could not be read: refused by the others"
        );
        let each = if stamping { 7 } else { 5 };
        Ok(looked
            .chunks(5)
            .flat_map(|r| r.iter().copied().chain([0, 0]).take(each))
            .collect())
    }
}
