//! An old state a reload moved a limit away from, in another Cluster slot than the limit it
//! is carried into (`lua/level.lua`, `lua/carry.lua`'s `given` and `grown`): keys without a
//! user key, whose empty tag `{}` Redis does not take for one, so each is hashed whole. It is
//! read in its own slot first (`lua/level.lua`) and carried from what was read
//! (`RedisStore::run_stacked`), a spend checked by a read after it
//! (`run_checked`), with a pending record beside the moved state for a read after that never
//! comes: one script over both, Redis refused it whole (`CROSSSLOT`), and every call of such a
//! budget for as long as its old state was carried. (But for a block carried alone between two
//! states both decided with the call, `Carry::block_only`: each holds the call by its own
//! check, so across slots it is not carried, `slots.rs`.)

use std::sync::LazyLock;
use std::time::Instant;

use super::arguments::arguments;
use super::given::{givens, Given, Read, Ticket};
use super::ledger::{block_key, erased_key};
use super::refund::draw;
use super::reply::unexpected;
use super::scripts::{carrying, numbers, Lua};
use super::RedisStore;
use crate::clock::Nanos;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Carry, Check, Mode, Stacked};

mod reads;

/// What a state carried from another Cluster slot holds, read in its own
/// (`lua/level.lua`, behind `lua/carry.lua`): see [`RedisStore::run_stacked`].
pub(super) static LEVEL_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(carrying(include_str!("../../../lua/level.lua"))));

/// How long after a carried spend's script (on the moved state's node) its read after and
/// the addition after it have come, or never will (microseconds): the script's reply within
/// the call's `timeout`, then the read after and the addition within one each
/// ([`RedisStore::recheck`]), and a second for the runtime. A pending record older than that
/// stands for a call whose read after never came (`pending_of` in `lua/carry.lua`), and a
/// read older than that at its call's script is refused, nothing written (`late` there:
/// [`Error::Timeout`], a runtime stalled between the two; admitted, its record outlived what
/// its read kept, and its spend or another call's was lost).
pub(super) fn read_after_within(timeout: std::time::Duration) -> u64 {
    let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
    // Far below 2^53 with any TIME added: no clock reaches it.
    micros
        .saturating_mul(3)
        .saturating_add(1_000_000)
        .min(1 << 50)
}

impl RedisStore {
    /// [`run_script`](Self::run_script) for a spend that carries states read in another slot
    /// (`read`), checked by reading them again after it. A pod still in its old window (a
    /// reload reaches pods at different times) spends on the old state and on the moved one,
    /// slot by slot: one that did so between the read and the script had its spend on the
    /// moved state already there while the old one was carried as before it, one spend
    /// counted where one script counts it twice; the next call's carry, the old debt over the
    /// moved one's, then covered this call's spend too. Five pods' first calls after the move
    /// read the old state before five others spent: the 5 spent before the move were
    /// forgotten, 15 admitted after it where one server admits 10 (cluster_moves_attacks).
    ///
    /// So what the old state's debt grew by between the two reads (at least what was missed)
    /// is added to the moved state (a run carrying it, [`Given::Grown`]) but for the call's
    /// [`Ticket`], what the moved bucket held of it already (its slack at the script, and
    /// what was added after): never less than one script leaves, whatever else ran
    /// meanwhile (an addition is never covered by a later carry as a spend is; so given back
    /// and decided again, the spends of the other calls made meanwhile were: 11 admitted of
    /// 10). Once for the same growth, however many calls read before it, and never past a
    /// bucket spent from now: added by each, five calls locked the moved bucket for 210 s
    /// where it holds 90. (Added whole, what a spend and its give-back both after the script
    /// read as grown, the give-back counted in the erased total, drifted to 81 s owed where
    /// one server owes 21 s after 40 calls; but for the slack, 22 s.) The call stays admitted
    /// when its limit had room for what it missed ([`shortfall`]), else it is refused, its
    /// spend kept (an over-refusal, only while others write the old state). A refusal needs
    /// no check (nothing spent). A read after that fails is a read that failed
    /// (`refused_or`), the spend kept. A script whose read is past the call's wait
    /// ([`read_after_within`]: a runtime stalled between them) refuses, nothing written:
    /// [`Error::Timeout`], for the failure policy (its age reckoned on the script's node's
    /// clock alone, read before the read: [`moved_clock`](Self::moved_clock)); told before
    /// the call's own timeout ran out (that clock stepped, or the slot's primary changed
    /// since the clock read), looked at without the carry first, as a read that failed
    /// (`refused_or`). A block begun on the old state meanwhile (by a
    /// refusal, which spends nothing there) is one after this call's, which the next call
    /// reads.
    ///
    /// The script, the read after and its addition run as a task of their own
    /// ([`Owned::spend`]), which the call waits for: a call dropped once its script is sent
    /// (a timeout above it, a client gone), whether the script still waits or has answered,
    /// has what it missed added all the same. Run in the call's future, they were dropped
    /// with it, and the next carry covered its spend: 5 admitted after it where 4 were left
    /// (`carries/`); without a runtime (a future polled outside Tokio) they run in the
    /// call's. A runtime shut down meanwhile drops the task, and a read after that fails
    /// adds nothing: for those the script leaves the call's pending record beside the moved
    /// state, which the read after ends ([`recheck`](Self::recheck)) and which, left
    /// standing, has the next call's script add what the old state grew by since the call's
    /// read (`grow` in `lua/carry.lua`): 4 admitted after a runtime shut down, as one server
    /// leaves, where the next carry covered the call's spend and 5 were
    /// (`cluster_recheck_attacks`).
    #[cold]
    pub(super) async fn run_checked(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        stamping: bool,
        read: Vec<Option<Read>>,
        sent: Instant,
    ) -> Result<Vec<i64>, Error> {
        let each = if stamping { 7 } else { 5 };
        // The script and the read after it: a task of its own, which the caller only waits
        // for. A script sent runs whether or not anyone waits for its reply: spawned only
        // once its reply came, the read after was left undone by a call dropped while the
        // script waited, its spend covered by the next carry all the same (`carries/`).
        let (owned, store) = (Owned::of(stacked, asked), self.clone());
        let task = async move { owned.spend(&store, stamping, &read, sent).await };
        let spent = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => match runtime.spawn(task).await {
                Ok(spent) => spent,
                Err(e) => {
                    let e = Error::Store {
                        message: format!("a carried spend's task did not finish: {e}"),
                    };
                    return Box::pin(self.refused_or(e, stacked, asked, stamping)).await;
                }
            },
            Err(_) => task.await,
        };
        let (reply, rechecked) = match spent {
            // A timeout before the call's own ran out is the script's refusal of a read past
            // its wait (`late` in `lua/carry.lua`), a live node's answer (its clock stepped
            // since the clock read before the read): looked at without the carry, as a read
            // that failed, so that no policy admits a call the moved limit refuses (`Allow`
            // admitted it uncounted on a spent bucket:
            // `probe94_a_late_carry_on_a_spent_bucket_is_refused_not_an_error`, carries/).
            Err(e @ Error::Timeout { .. }) if sent.elapsed() < self.inner.options.timeout => {
                return Box::pin(self.refused_or(e, stacked, asked, stamping)).await
            }
            spent => spent?,
        };
        let grown = match rechecked {
            None => return Ok(reply),
            Some(Rechecked::Unread(e)) => {
                return Box::pin(self.refused_or(e, stacked, asked, stamping)).await
            }
            Some(Rechecked::Unadded(e)) => {
                tracing::warn!(
                    error = %e,
                    "an old state in another Redis Cluster slot was written while carried, and \
                     what it owes more could not be added: refused"
                );
                return Ok(refused(&reply, each, &vec![1; asked.len()]));
            }
            Some(Rechecked::Grown(grown)) => grown,
        };
        if grown.is_empty() {
            return Ok(reply);
        }
        let carried = stacked.carried();
        let by: Vec<(Carry<'_>, u64)> = grown.iter().map(|&(j, by)| (carried[j], by)).collect();
        let short = shortfall(stacked, asked, &by, &reply, each);
        if short.iter().all(|&s| s == 0) {
            return Ok(reply);
        }
        Ok(refused(&reply, each, &short))
    }

    /// [`run_checked`](Self::run_checked)'s script (`read` carried as read) and, when it
    /// admitted the call, its read after ([`recheck`](Self::recheck)): the script's reply,
    /// and what the read after made of it (`None`: refused, nothing to check).
    async fn spend_checked(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        stamping: bool,
        read: &[Option<Read>],
        sent: Instant,
    ) -> Result<(Vec<i64>, Option<Rechecked>), Error> {
        let each = if stamping { 7 } else { 5 };
        // The call's pending record, written by its script: a task dropped before its read
        // after (a runtime shut down) leaves it for the next call's script to add what it
        // missed (`lua/carry.lua`).
        let pending = draw();
        let wait = read_after_within(self.inner.options.timeout);
        let given = givens(read, pending, wait);
        let mut reply = (self.run_script(stacked, asked, true, stamping, &given, sent)).await?;
        // After the limits' replies, a ticket for each debt read (`tickets` in
        // `lua/carry.lua`), in order.
        let into = |carry: &Carry<'_>| stacked.checks()[carry.into].quota;
        let debts = (read.iter().zip(stacked.carried()))
            .filter(|(read, carry)| read.is_some() && carry.carries_debt(into(carry)))
            .count();
        if reply.len() != each * asked.len() + 2 * debts {
            return Err(unexpected(&reply));
        }
        let tickets = reply.split_off(each * asked.len());
        if reply.chunks(each).any(|r| r[0] != 1) {
            return Ok((reply, None));
        }
        let mut tickets = tickets.chunks(2).map(|t| match t {
            [slack, since] if *slack >= 0 && *since >= 0 => Ok(Ticket {
                slack: slack.unsigned_abs(),
                since: since.unsigned_abs(),
            }),
            _ => Err(unexpected(&t)),
        });
        let tickets = (read.iter().zip(stacked.carried()))
            .map(
                |(read, carry)| match read.is_some() && carry.carries_debt(into(carry)) {
                    true => tickets.next().transpose(),
                    false => Ok(None),
                },
            )
            .collect::<Result<Vec<Option<Ticket>>, Error>>()?;
        let rechecked = self.recheck(stacked, asked, read, &tickets, pending).await;
        Ok((reply, Some(rechecked)))
    }

    /// [`run_checked`](Self::run_checked)'s read after its script, and what the old states'
    /// debts grew by since `read` (the read before it) added to the moved states: for each
    /// state so added, its index in `stacked.carried()` and the microseconds it grew by. Run
    /// for every debt carried, grown or not: it ends the call's pending record (`pending`,
    /// its id; see `grow` in `lua/carry.lua`), which left standing has the next call add what
    /// the old state grew by since this call's read, as for a call whose task never read again.
    async fn recheck(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        read: &[Option<Read>],
        tickets: &[Option<Ticket>],
        pending: u64,
    ) -> Rechecked {
        // Within a timeout of its own (as `refused_or`'s look): the read and the script may
        // have taken all of the call's, and a check that times out refuses a call whose spend
        // is kept.
        let again = match (self.read_across_slots(stacked, asked, false, Instant::now())).await {
            Ok(again) => again,
            Err(e) => return Rechecked::Unread(e),
        };
        let into = |carry: &Carry<'_>| stacked.checks()[carry.into].quota;
        let grown: Vec<(usize, Carry<'_>, u64, Given)> = (stacked.carried().iter().enumerate())
            .filter(|(_, carry)| carry.carries_debt(into(carry)))
            .filter_map(
                |(j, carry)| match (read.get(j), again.get(j), tickets.get(j)) {
                    (Some(Some(before)), Some(Some(after)), Some(Some(ticket))) => {
                        let by = after.grown_since(before);
                        let from = before.end();
                        let (to, lasts) = (from.saturating_add(by), after.debt);
                        // What the moved bucket is owed of it (`added` in `lua/carry.lua`), at
                        // most: by how much the call may be short.
                        let owed = by.saturating_sub(ticket.slack);
                        Some((
                            j,
                            *carry,
                            owed,
                            Given::Grown {
                                from,
                                to,
                                lasts,
                                slack: ticket.slack,
                                since: ticket.since,
                                pending,
                            },
                        ))
                    }
                    _ => None,
                },
            )
            .collect();
        if grown.is_empty() {
            return Rechecked::Grown(Vec::new());
        }
        let grew = grown.iter().any(|&(_, _, by, _)| by > 0);
        let carried: Vec<Carry<'_>> = grown.iter().map(|&(_, carry, _, _)| carry).collect();
        let added: Vec<Option<Given>> = grown.iter().map(|&(_, _, _, g)| Some(g)).collect();
        let adding = Stacked::carrying(stacked.checks(), &carried, stacked.now(), Mode::Look);
        let done = match adding {
            Ok(adding) => {
                (self.run_script(&adding, &[], false, false, &added, Instant::now())).await
            }
            Err(e) => Err(e),
        };
        match done {
            // Nothing to add: the call's record left standing has the next call add what
            // grew since its read (more than is owed, never less).
            Err(e) if !grew => {
                tracing::debug!(error = %e, "a carried spend's pending record was left standing");
            }
            Err(e) => return Rechecked::Unadded(e),
            Ok(_) => {}
        }
        let grown = grown.iter().filter(|&&(_, _, by, _)| by > 0);
        Rechecked::Grown(grown.map(|&(j, _, by, _)| (j, by)).collect())
    }
}

/// What [`RedisStore::recheck`] made of a carried spend's read after its script.
enum Rechecked {
    /// The old states read again: what each that grew grew by (its index among the carried
    /// states, microseconds), added to its moved state.
    Grown(Vec<(usize, u64)>),
    /// The read failed (as the read before it may).
    Unread(Error),
    /// Read, grown, and the addition failed.
    Unadded(Error),
}

/// A stacked call's checks, carried states and asked limits, owned: for
/// [`RedisStore::spend_checked`] run as a task of its own (`run_checked`), which borrows
/// nothing of the call that spawned it.
struct Owned {
    /// Each check's key, whether it names its window, quota and cost.
    checks: Vec<(String, bool, Quota, u64)>,
    /// Each carried state's key, whether it names its window, quota, the check it is carried
    /// into and whether its block alone is.
    carried: Vec<(String, bool, Quota, usize, bool)>,
    /// The checks Redis decides, by index.
    asked: Vec<usize>,
    now: Nanos,
    mode: Mode,
}

impl Owned {
    fn of(stacked: &Stacked<'_>, asked: &[&Check<'_>]) -> Owned {
        let key = |k: &crate::store::StoreKey<'_>| (k.as_str().to_owned(), k.names_its_window());
        let checks = stacked.checks();
        Owned {
            checks: (checks.iter())
                .map(|c| {
                    let (k, one) = key(&c.key);
                    (k, one, *c.quota, c.cost)
                })
                .collect(),
            carried: (stacked.carried().iter())
                .map(|c| {
                    let (k, one) = key(&c.from);
                    (k, one, *c.quota, c.into, c.block_only)
                })
                .collect(),
            // Keys are one per check (`Stacked::carrying`): an asked limit is the check of its
            // key.
            asked: (asked.iter())
                .filter_map(|a| checks.iter().position(|c| c.key == a.key))
                .collect(),
            now: stacked.now(),
            mode: stacked.mode(),
        }
    }

    /// [`RedisStore::spend_checked`] on the call these are the parts of, made again.
    async fn spend(
        &self,
        store: &RedisStore,
        stamping: bool,
        read: &[Option<Read>],
        sent: Instant,
    ) -> Result<(Vec<i64>, Option<Rechecked>), Error> {
        fn key(k: &str, one: bool) -> Result<crate::store::StoreKey<'_>, Error> {
            match one {
                true => crate::store::StoreKey::one_window(k),
                false => crate::store::StoreKey::new(k),
            }
        }
        let checks = (self.checks.iter())
            .map(|(k, one, quota, cost)| {
                let (key, cost) = (key(k, *one)?, *cost);
                Ok(Check { key, quota, cost })
            })
            .collect::<Result<Vec<Check<'_>>, Error>>()?;
        let carried = (self.carried.iter())
            .map(|(k, one, quota, into, block_only)| {
                let (from, into, block_only) = (key(k, *one)?, *into, *block_only);
                Ok(Carry {
                    from,
                    quota,
                    into,
                    block_only,
                })
            })
            .collect::<Result<Vec<Carry<'_>>, Error>>()?;
        let stacked = Stacked::carrying(&checks, &carried, self.now, self.mode)?;
        let asked: Vec<&Check<'_>> = self.asked.iter().map(|&i| &checks[i]).collect();
        (store.spend_checked(&stacked, &asked, stamping, read, sent)).await
    }
}

/// For each limit of `asked` (admitted, `reply` `each` integers a limit), by how much the
/// debts `grown` (each carried into its check, by so many microseconds) exceed its room
/// after the call (its `remaining` tokens' time: a token bucket's, the only state whose
/// debt is carried): 0 where the call fitted whatever they held when it was decided.
fn shortfall(
    stacked: &Stacked<'_>,
    asked: &[&Check<'_>],
    grown: &[(Carry<'_>, u64)],
    reply: &[i64],
    each: usize,
) -> Vec<u64> {
    (asked.iter().zip(reply.chunks(each)))
        .map(|(check, r)| {
            let into = |carry: &Carry<'_>| stacked.checks()[carry.into].key == check.key;
            let owed = (grown.iter().filter(|(carry, _)| into(carry)))
                .fold(0u64, |sum, &(_, by)| sum.saturating_add(by));
            let interval_us = check.quota.interval_nanos() / 1_000;
            let room = r[1].unsigned_abs().saturating_mul(interval_us);
            owed.saturating_sub(room)
        })
        .collect()
}

/// `reply` (admitted, `each` integers a limit) told as a refusal by the limits short of room
/// (`short` above 0: nothing left, waiting that long), the others as they were, no stamp.
fn refused(reply: &[i64], each: usize, short: &[u64]) -> Vec<i64> {
    let mut out = reply.to_vec();
    for (r, &short) in out.chunks_mut(each).zip(short) {
        if short > 0 {
            let wait = i64::try_from(short).unwrap_or(i64::MAX);
            (r[0], r[1], r[3]) = (0, 0, wait);
            r[2] = r[2].saturating_add(wait);
        }
        if each == 7 {
            r[6] = 0;
        }
    }
    out
}

/// [`LEVEL_SCRIPT`]'s KEYS and ARGV (see its header) for `carry`, carried into a state under
/// `into`, by a call whose read after comes within `wait` of its script or never.
pub(super) fn level_call(carry: &Carry<'_>, into: &Quota, wait: u64) -> ([String; 3], [u64; 6]) {
    let [index, first, second, block_us] = numbers(carry.quota);
    let block_us = if into.block_nanos() > 0 { block_us } else { 0 };
    let from = carry.from.as_str();
    // What the call writes beside the moved state from this read is kept no longer than that
    // after the debt: its pending record, written by its script (within `wait` of the read),
    // a full moved bucket after its read after can come (`wait` later), and a second later;
    // a second more for the milliseconds and one for the nodes' clocks (`lua/carry.lua`).
    let [_, tolerance] = arguments(into);
    let kept = (wait.saturating_mul(2))
        .saturating_add(tolerance)
        .saturating_add(3_000_000);
    (
        [from.to_owned(), block_key(from), erased_key(from)],
        [
            index,
            first,
            second,
            block_us,
            u64::from(carry.carries_debt(into)),
            kept.min(1 << 50),
        ],
    )
}
