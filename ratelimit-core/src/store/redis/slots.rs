//! Stacked limits whose keys live in different Redis Cluster slots: limits on two user keys
//! (a user's and an address's, the README's `login`), or a user's limit beside an fn-wide
//! budget. No script reads keys of two slots (Redis answers `CROSSSLOT`, and every such call
//! was refused), so such a call is decided slot by slot, the slots of a moved limit's old
//! states first, then in the order of its limits (`slot_groups`), each slot's limits as one
//! in one script (`run_stacked`):
//!
//! - every slot's limits spend, stamped, while none has refused: a call every slot admits has
//!   spent from every limit;
//! - once one refuses, the slots after it are only looked at, except a slot with a limit that
//!   blocks (`Quota::block`), which is asked to spend as one script would ask it, so that its
//!   refusal begins its block; what any slot spent for the refused call is given back by its
//!   stamp (`give_back`) and looked at again before the call is answered: a refused call,
//!   once answered, has spent from no limit, and its figures are the looks one script gives;
//! - an error in a slot (its node down or slow, state of an unexpected shape) is asked past
//!   as a refusal is (the slots after it only looked at, but those with a blocking limit),
//!   and what the slots spent is given back the same way. A slot that refuses makes the call
//!   a refusal, the failed slot's limits told as admitting with nothing left (their figures
//!   unknown), so no failure policy turns a refusal a live node gave into an admission;
//!   without one the error is the call's answer, for the failure policy to decide as if
//!   nothing had been asked.
//!
//! Each limit's own spend is atomic in its slot, so no limit ever admits more than it holds,
//! whatever runs at once. What differs from one script is only ever a refusal: between a
//! slot's spend and its give-back another call sees those units spent (and may be refused
//! for them, never admitted); a call dropped in between, or a give-back Redis fails, leaves
//! them spent until the window lets them go (held to the limit: fail closed, logged).
//! Refunds of a spend kept across slots are given back slot by slot, once every slot said it
//! would give its own back (none given back where one would not, as one script gives none);
//! a key reset between the two, or an error in a later slot, leaves the earlier slots' given.

use redis::cluster_routing::Slot;

use super::reply::{full, unexpected};
use super::round_trip::Client;
use super::RedisStore;
use crate::decision::Decision;
use crate::error::Error;
use crate::store::{Carry, Check, Refund, Stacked};

/// The indices of `items` grouped by the Cluster slot of `key(item)`, each group in order,
/// the groups in the order of their first item.
fn by_slot<T>(items: &[T], key: impl Fn(&T) -> &str) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Slot, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let slot = Slot::for_key(key(item));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

impl RedisStore {
    /// Whether the store is a Cluster's (whose keys of one script must share a slot).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.inner.client, Client::Cluster(..))
    }

    /// `asked` (the limits of `stacked` Redis decides) grouped by their keys' slots, in the
    /// order they are decided; `None` on one server, or when every key lies in one slot (one
    /// script decides them).
    ///
    /// The one place that orders them: the slots of old states a reload moved a limit away
    /// from, still decided with the call ([`Stacked::is_old_state`]), first; then the others,
    /// each in the order of its first limit. A pod still in the old window spends on the old
    /// state and on the moved one, and a pod past it (a mover) carries the greater of the
    /// old state's debt, read first in its own slot, and the moved state's, then reads the old
    /// state again and adds what it grew by (`across_slots.rs`). The moved state's slot
    /// first, a mover whose read, script and read again all fell between an old-window pod's
    /// two spends took that pod's spend on the moved state for the old debt (the greater of
    /// the two) and saw its spend on the old state nowhere: 15 admitted after the move where
    /// one server admits 10
    /// (`an_old_window_pods_spend_on_the_old_state_after_a_movers_read_after_is_carried`,
    /// tests/cluster_moves_attacks.rs). The old state's slot first, every spend a carry finds
    /// on the moved state is one whose spend on the old state came before: before the first
    /// read (in the debt carried, once) or after it (added by the read again). The cost is
    /// an over-refusal (fails closed): an old-state spend a read saw whose spend on the moved
    /// state lands after the mover's script is counted twice, and one the moved state then
    /// refuses (given back on the old state, as any slot's spend for a refused call: the
    /// module's header) is counted there for a call never admitted: 0 to 10 admitted where
    /// 10 are (`concurrent_movers_and_old_window_pods_admit_what_one_bucket_holds`, ignored).
    pub(super) fn slot_groups(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
    ) -> Option<Vec<Vec<usize>>> {
        if !self.is_cluster() {
            return None;
        }
        let mut groups = by_slot(asked, |c| c.key.as_str());
        // Stable: the order of first limits within each kind.
        groups.sort_by_key(|group| !group.iter().any(|&i| stacked.is_old_state(asked[i].key)));
        (groups.len() > 1).then_some(groups)
    }

    /// [`run_stacked`](Self::run_stacked)'s reply for `asked` (in order, `each` integers a
    /// limit: 7 when `stamping`, else 5), whose keys lie in the slots of `groups`: decided
    /// slot by slot (see the module's header). `commit`: the call spends.
    pub(super) async fn run_across_slots(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        groups: &[Vec<usize>],
        commit: bool,
        stamping: bool,
    ) -> Result<Vec<i64>, Error> {
        let each = if stamping { 7 } else { 5 };
        let mut parts: Vec<Vec<i64>> = Vec::with_capacity(groups.len());
        let mut spent = Vec::new();
        let mut refused = false;
        // The first error (a node down or slow, state of an unexpected shape): the call's
        // answer unless a slot refuses it, which it then is (under `FailurePolicy::Allow`, a
        // limit of 1 its live node refused admitted 3 more for an error in a slot only looked
        // at: cluster_stacks_attacks). Later slots are asked as after a refusal.
        let mut failed: Option<Error> = None;
        for (g, group) in groups.iter().enumerate() {
            let blocks = group.iter().any(|&i| asked[i].quota.block().is_some());
            let settled = refused || failed.is_some();
            let spends = commit && (!settled || blocks);
            let part = match self.run_group(stacked, asked, group, spends).await {
                Ok(part) => part,
                Err(e) => {
                    failed.get_or_insert(e);
                    parts.push(Vec::new());
                    continue;
                }
            };
            let admitted = part.chunks(if spends { 7 } else { 5 }).all(|r| r[0] == 1);
            if spends && admitted {
                spent.push(g);
            }
            refused |= !admitted;
            parts.push(part);
        }
        if refused || failed.is_some() {
            // What any slot spent is given back, every spend before any look, so that a
            // look Redis fails leaves none of them (an error kept it: a limit of 3 with one
            // call admitted was at 0, not 2, after two errors in a later slot).
            self.give_back_spent(stacked, asked, groups, &parts, &spent)
                .await;
        }
        if !refused {
            if let Some(e) = failed {
                return Err(e);
            }
        }
        if refused {
            for &g in &spent {
                parts[g] = match self.run_group(stacked, asked, &groups[g], false).await {
                    Ok(part) => part,
                    Err(e) => {
                        failed.get_or_insert(e);
                        Vec::new()
                    }
                };
            }
        }
        if let Some(e) = failed {
            // Refused by another slot: a slot that failed is told as a look that admits with
            // nothing left, at the refusal's instant (its figures unknown, the call refused).
            tracing::warn!(
                error = %e,
                "a stacked call refused in one Redis Cluster slot failed in another: refused"
            );
            let now = (parts.iter().find_map(|p| p.get(4).copied())).unwrap_or(0);
            for (group, part) in groups.iter().zip(&mut parts) {
                if part.is_empty() {
                    *part = group.iter().flat_map(|_| [1, 0, now, -1, now]).collect();
                }
            }
        }
        let mut reply = vec![0; each * asked.len()];
        for (group, part) in groups.iter().zip(&parts) {
            let width = part.len() / group.len().max(1);
            for (j, &i) in group.iter().enumerate() {
                let r = &part[j * width..(j + 1) * width];
                let n = width.min(each);
                reply[i * each..i * each + n].copy_from_slice(&r[..n]);
            }
        }
        Ok(reply)
    }

    /// The stacked script on the limits `group` of `asked` (one slot's), with the states
    /// `stacked` carries into them: spending and stamped (7 integers a limit) when `spends`,
    /// else a look (5).
    async fn run_group(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        group: &[usize],
        spends: bool,
    ) -> Result<Vec<i64>, Error> {
        let checks: Vec<Check<'_>> = group.iter().map(|&i| *asked[i]).collect();
        // A block carried alone between two states both decided with the call (`Carry::
        // block_only`) is carried only within a slot: across two (a budget without a user key,
        // each key hashed whole) no script reads both, and the run was refused whole
        // (CROSSSLOT) for the whole old window, whatever the call. Each state's block holds
        // the call by its own check in its own slot meanwhile; a refusal in one slot may then
        // begin a block beside the other's (longer, never shorter).
        let same_slot = |carry: &Carry<'_>, into: &str| {
            !carry.block_only || Slot::for_key(carry.from.as_str()) == Slot::for_key(into)
        };
        let carried: Vec<Carry<'_>> = stacked
            .carried()
            .iter()
            .filter_map(|carry| {
                let into = stacked.checks().get(carry.into)?.key;
                let at = checks.iter().position(|c| c.key == into)?;
                same_slot(carry, into.as_str()).then_some(Carry { into: at, ..*carry })
            })
            .collect();
        let mode = match spends {
            true => crate::store::Mode::Keep,
            false => crate::store::Mode::Look,
        };
        let one = Stacked::carrying(&checks, &carried, stacked.now(), mode)?;
        let mine: Vec<&Check<'_>> = checks.iter().collect();
        let part = self.run_stacked(&one, &mine, spends, spends).await?;
        if part.len() != if spends { 7 } else { 5 } * checks.len() {
            return Err(unexpected(&part));
        }
        Ok(part)
    }

    /// Gives back what the slots `spent` (of `groups`, their stamped replies in `parts`)
    /// spent for a call another slot refused or failed, slot by slot.
    async fn give_back_spent(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        groups: &[Vec<usize>],
        parts: &[Vec<i64>],
        spent: &[usize],
    ) {
        for &g in spent {
            self.give_back_group(stacked, asked, &groups[g], &parts[g])
                .await;
        }
    }

    /// Gives back what the limits `group` of `asked` spent for a call another slot refused
    /// or failed (their stamped replies, `part`): a give-back that fails leaves the spend
    /// (fail closed), logged.
    async fn give_back_group(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        group: &[usize],
        part: &[i64],
    ) {
        let mut refunds = Vec::with_capacity(group.len());
        for (j, &i) in group.iter().enumerate() {
            let (check, r) = (asked[i], &part[j * 7..(j + 1) * 7]);
            let Some((verdict, at)) = full(&r[..5]) else {
                return;
            };
            let (shift, stamp) = (r[5].max(0) as u64 * 1_000, r[6].max(0) as u64);
            let receipt = Decision::for_quota(verdict, at, check.quota)
                .stamped(stamp)
                .shifted(shift)
                .receipt();
            refunds.push(Refund::of(
                check.key,
                check.quota,
                check.cost,
                receipt,
                stacked.now(),
            ));
        }
        match self.give_back(&refunds).await {
            Ok(true) => {}
            given => tracing::warn!(
                ?given,
                "a stacked call refused in one Redis Cluster slot kept what it spent in another: \
                 held there until its window lets it go"
            ),
        }
    }

    /// Gives back `refunds` slot by slot on a Cluster (one script each), all at once
    /// elsewhere: whether every one was.
    pub(super) async fn give_back_by_slot(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        if !self.is_cluster() {
            return self.give_back(refunds).await;
        }
        let groups = by_slot(refunds, |r| r.key().as_str());
        if groups.len() < 2 {
            return self.give_back(refunds).await;
        }
        let slots: Vec<Vec<Refund<'_>>> = (groups.iter())
            .map(|group| group.iter().map(|&i| refunds[i]).collect())
            .collect();
        // Every slot asked first, nothing written: one that would give nothing back (its key
        // reset, or the spend no longer counting) gives none back anywhere, as one script
        // would not (each slot given back on its own, a reset limit's answered "not given
        // back" while the other limit was: cluster_stacks_attacks).
        for these in &slots {
            if !self.would_give_back(these).await? {
                return Ok(false);
            }
        }
        let mut all = true;
        for these in &slots {
            all &= self.give_back(these).await?;
        }
        Ok(all)
    }
}
