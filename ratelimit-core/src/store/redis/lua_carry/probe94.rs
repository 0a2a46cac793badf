//! helper-94's probes of the late refusal (`late` in `lua/carry.lua`, RELIABILITY.md item
//! 12): what a refused call leaves behind, among resets, give-backs, leases and overlapping
//! calls; calls refused that never stalled (the two nodes' clocks apart, pods of other
//! timeouts); reads of fields at their bounds. The old state's node and the moved state's
//! are one stand-in here: a clock apart is the stand-in's clock set ahead or behind for each
//! step on the old state's node (its reads, spends, resets), and back for the moved state's.

use super::across::*;
use super::twins::*;
use super::*;
use crate::error::Error;

/// Whether `reply` is the stacked script's refusal of a read past its call's wait.
pub(super) fn late(reply: &Result<bool, String>) -> bool {
    reply
        .as_ref()
        .is_err_and(|e| e.starts_with("RATELIMIT_LATE "))
}

/// A key's value (`GET`'s reply) and expiry (`Redis::expiry`).
type Held = (Result<Reply, String>, Option<Option<u64>>);

/// Every key a carried spend's script may write beside the moved state, and the old state's
/// erased key: each one's value and expiry.
pub(super) fn written(twins: &Twins<'_>) -> Vec<Held> {
    use super::super::given::{grown_mark, pending_key};
    use super::super::ledger::{block_key, erased_key, stamp_key};
    let keys = [
        NEW.to_owned(),
        pending_key(NEW, OLD),
        grown_mark(NEW, OLD),
        stamp_key(NEW),
        block_key(NEW),
        erased_key(OLD),
    ];
    let redis = &twins.cluster.redis;
    (keys.iter())
        .map(|k| (redis.command(&["GET", k]), redis.expiry(k)))
        .collect()
}

/// `f` run on the old state's node of the Cluster side, whose clock is `skew` microseconds
/// ahead of the moved state's (behind, below 0); the clock then set back.
fn on_old<T>(twins: &Twins<'_>, skew: i64, f: impl FnOnce(&Twins<'_>) -> T) -> T {
    let at = twins.now.checked_add_signed(skew).unwrap();
    twins.cluster.redis.set_time(at);
    let out = f(twins);
    twins.cluster.redis.set_time(twins.now);
    out
}

/// The old state read in its own slot (`lua/level.lua`) by a pod whose read after comes
/// within `wait` of its script, as `read_across_slots` sends it (the moved state's node's
/// clock read first).
fn read_waiting(s: &Across<'_>, wait: u64) -> Read {
    let began = s.time();
    Read {
        began,
        ..s.level(wait)
    }
}

/// The old state read as `read_across_slots` reads it, the old state's node's clock `skew`
/// microseconds ahead of the moved state's (behind, below 0): the moved node's clock read
/// first, then the old state on its own.
pub(super) fn read_on_old(twins: &Twins<'_>, skew: i64) -> Read {
    let began = twins.cluster.time();
    Read {
        began,
        ..on_old(twins, skew, |t| t.cluster.level(WAIT))
    }
}

/// The script of the call of id `id` that read `read` (its pod's wait `wait`) spending
/// `cost`: on the Cluster, then, when it admitted it, on one server; the Cluster's answer.
fn script_on_both(
    twins: &Twins<'_>,
    id: u64,
    read: &Read,
    wait: u64,
    cost: u64,
) -> Result<bool, String> {
    let admitted = twins.cluster.try_script(cost, Some(read.held(id, wait)))?;
    assert!(admitted, "refused on the Cluster");
    assert!(twins.server.script(cost, None), "refused on one server");
    Ok(admitted)
}

/// A history mixing late refusals with resets, refunds, rewards, a lease and overlapping
/// calls: each late call (`with_late`) reads, stalls past its wait and is refused; without
/// them, the same calls read and are dropped before their scripts (a read writes the erased
/// key's expiry on the old state's node all the same). What the moved bucket owes after one
/// more call, on the Cluster and on one server, and whether every late call was refused with
/// nothing written beside the moved state.
fn history_with_late_calls(with_late: bool) -> ((u64, u64), bool) {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let mut all_late = true;
    let mut refuse = |twins: &mut Twins<'_>, id: u64, read: &Read| {
        twins.later(WAIT + 1);
        if with_late {
            let before = written(twins);
            let refused = twins.cluster.try_script(1, Some(read.held(id, WAIT)));
            all_late &= late(&refused) && written(twins) == before;
        }
    };
    // A call whose read after is lost (its record stands), then one refused late.
    twins.old_spend(5);
    let a = twins.cluster.read();
    twins.old_spend(2);
    twins.script(1, &a);
    let b = twins.cluster.read();
    twins.old_spend(3);
    refuse(&mut twins, 2, &b);
    // A lease out on the old state, a late call read, the lease's units given back, a reset.
    let tat = twins.old_lease(4, 9);
    let c = twins.cluster.read();
    twins.old_lease_return(2, tat, 9);
    twins.old_reset();
    refuse(&mut twins, 3, &c);
    // Two overlapping calls, a late one read between them; a reward and a refund.
    let d = twins.cluster.read();
    let e = twins.cluster.read();
    twins.old_spend(4);
    twins.script(4, &d);
    let spent = twins.old_kept_spend(3);
    twins.script(5, &e);
    twins.old_reward(1);
    twins.read_after(4, &d);
    let f = twins.cluster.read();
    twins.old_refund(3, spent);
    refuse(&mut twins, 6, &f);
    twins.read_after(5, &e);
    // A late call read while a record stands, the old state reset before its refusal.
    let g = twins.cluster.read();
    twins.old_spend(6);
    twins.script(7, &g);
    let h = twins.cluster.read();
    twins.old_reset();
    refuse(&mut twins, 8, &h);
    (twins.owes_no_less(), all_late)
}

/// Late refusals among resets, a lease, a reward, a refund and overlapping calls, against
/// the same history where each late call read and was dropped before its script: every one
/// refused with nothing written, and the moved bucket owes exactly as much on the Cluster as
/// without them, no less than one server (which never made them).
#[test]
fn probe94_late_refusals_among_resets_leases_and_give_backs_leave_nothing() {
    let (with, all_late) = history_with_late_calls(true);
    let (without, _) = history_with_late_calls(false);
    assert!(all_late, "every late call refused, nothing written");
    assert_eq!(with, without);
}

/// Two pods of different timeouts (so different waits: `read_after_within`): a pod of a
/// short one (a second here) reads the old bucket (6 s owed), a pod of a long one (3 s) reads
/// it too, 1 s is spent on it, the first scripts 12 s of the moved bucket and loses its read
/// after; the long pod's runtime stalls 2 s between its read and its script: within its own
/// wait (not late), past the first's. The first's record was past at its script, the
/// addition from it ran from the stalled call's read (nothing), and its ticket's slack held
/// the 1 s the first missed: `probe87_a_stall_between_read_and_script_past_another_calls_wait`
/// again, through a wait not the stalled call's own: 18 s owed where one server owes 19 s. A
/// record is now past for a call only once it was past before the call's read (a wait of
/// the call's own before its script: `carry` in `lua/carry.lua`): the stalled call's ticket
/// merges the first's, and its read after adds the 1 s: 19 s on both.
#[test]
fn probe94_a_long_pods_stall_past_a_short_pods_record() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(6);
    let lost = read_waiting(&twins.cluster, WAIT);
    let stalled = read_waiting(&twins.cluster, 3 * WAIT);
    twins.old_spend(1);
    assert_eq!(script_on_both(&twins, 1, &lost, WAIT, 12), Ok(true));
    twins.later(2 * S);
    let admitted = script_on_both(&twins, 2, &stalled, 3 * WAIT, 1);
    if admitted.is_ok() {
        let after = read_waiting(&twins.cluster, 3 * WAIT);
        twins.cluster.added(&stalled, &after, 2);
    }
    assert_eq!(admitted, Ok(true), "within its own wait");
    assert_eq!(twins.owes_no_less(), (19 * S, 19 * S));
}

/// The old state's node's clock behind the moved state's by a microsecond more than the
/// wait: a call that did not stall at all (its read and its script at the same instant) was
/// refused (`RATELIMIT_LATE`, `Error::Timeout`: under deny a refusal, under allow admitted
/// uncounted) at every call for as long as the clocks stayed apart, its read's age reckoned
/// from its time on the old node's clock (RELIABILITY.md item 12: a skew past the wait less
/// a call's round trips). Reckoned from the moved node's clock read before the read
/// (`Read::began`, `moved_clock`), the call carries, whatever the skew.
#[test]
fn probe94_an_unstalled_call_with_the_old_node_behind() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let within = read_on_old(&twins, -(WAIT as i64));
    assert_eq!(script_on_both(&twins, 1, &within, WAIT, 1), Ok(true));
    twins.read_after(1, &within);
    let behind = read_on_old(&twins, -(WAIT as i64) - 1);
    let carried = twins.cluster.try_script(1, Some(behind.held(2, WAIT)));
    assert_eq!(carried, Ok(true), "an unstalled call");
}

/// The old state's node's clock 8 s ahead of the moved state's: a call stalled 9 s between
/// its read and its script (past its 1 s wait) was carried, not refused (its read's time, on
/// the old node's clock, exactly its wait before the script), after a reset had erased
/// 100 s, the old state spent 28 s between; its read after lost, its record (kept on the
/// moved node's clock from the script: the wait, a full moved bucket and a second) outlived
/// the erased key its read kept (on the old node's, from the read: twice the wait, a full
/// moved bucket and 3 s): `probe82_a_stall_between_read_and_script_outlives_the_erased_key`
/// (erased.rs) open again. 17 s later the next call read the erased key made again (0), its
/// end 100 s below the record's: nothing added from it, and the stalled call's own spend was
/// lost: 3 s owed on the Cluster where one server owed 4 s. Its age now reckoned on the moved
/// node's clock alone (`Read::began`), the stall is refused (`RATELIMIT_LATE`), nothing
/// written (no record), and one server, which never made it, owes what the Cluster owes:
/// 3 s on both.
#[test]
fn probe94_a_stall_carried_with_the_old_node_ahead_outlives_the_erased_key() {
    const AHEAD: i64 = 8 * S as i64;
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(20, 0, Duration::from_secs(20));
    let mut twins = Twins::new(&old, &new);
    let first = read_on_old(&twins, AHEAD);
    twins.script(1, &first);
    let after = read_on_old(&twins, AHEAD);
    twins.cluster.added(&first, &after, 1);
    on_old(&twins, AHEAD, |t| {
        t.old_spend(100);
        t.old_reset();
    });
    let read = read_on_old(&twins, AHEAD);
    assert_eq!((read.debt, read.erased), (0, 100 * S));
    on_old(&twins, AHEAD, |t| t.old_spend(28));
    twins.later(9 * S);
    let before = written(&twins);
    let stalled = twins.cluster.try_script(1, Some(read.held(2, WAIT)));
    assert!(late(&stalled), "{stalled:?}");
    assert_eq!(written(&twins), before, "nothing written");
    // Past the erased key's expiry on the old node's clock.
    twins.later(17 * S);
    let record = super::super::given::pending_key(NEW, OLD);
    assert_eq!(twins.cluster.redis.expiry(&record), None, "no record");
    let next = read_on_old(&twins, AHEAD);
    assert!(twins.cluster.script(1, Some(next.held(99, WAIT))));
    assert!(twins.server.script(1, None));
    let after = read_on_old(&twins, AHEAD);
    twins.cluster.added(&next, &after, 99);
    let owes = |s: &Across<'_>| s.end(NEW, &new).saturating_sub(twins.now);
    assert_eq!((owes(&twins.cluster), owes(&twins.server)), (3 * S, 3 * S));
}

/// The boundary of `late` with the old state's node's clock 8 s behind, 1 s + 1 us behind,
/// level, 1 s + 1 us ahead and 8 s ahead of the moved state's: at every skew a call whose
/// script comes exactly its wait after the moved node's clock read before its read carries
/// (and its record, kept on the moved node's clock, ends no later than the erased key its
/// read kept, on the old node's, counted on one clock), and a microsecond later it is
/// refused, nothing written. Reckoned from the read's time on the old node's clock, the
/// boundary moved by the skew both ways (`probe94_an_unstalled_call_with_the_old_node_behind`,
/// `probe94_a_stall_carried_with_the_old_node_ahead_outlives_the_erased_key`).
#[test]
fn probe94_lateness_is_reckoned_on_the_moved_nodes_clock_whatever_the_skew() {
    let skews = [
        -8 * S as i64,
        -(WAIT as i64) - 1,
        0,
        WAIT as i64 + 1,
        8 * S as i64,
    ];
    for skew in skews {
        for (past, refused) in [(0, false), (1, true)] {
            let (old, new) = seconds_buckets();
            let mut twins = Twins::new(&old, &new);
            on_old(&twins, skew, |t| t.old_spend(7));
            let read = read_on_old(&twins, skew);
            assert_eq!(read.debt, 7 * S, "{skew}");
            twins.later(WAIT + past);
            let before = written(&twins);
            let reply = twins.cluster.try_script(1, Some(read.held(2, WAIT)));
            if refused {
                assert!(late(&reply), "{skew} {past}: {reply:?}");
                assert_eq!(written(&twins), before, "{skew}: nothing written");
                continue;
            }
            assert_eq!(reply, Ok(true), "{skew} {past}");
            let record = super::super::given::pending_key(NEW, OLD);
            let erased = super::super::ledger::erased_key(OLD);
            let Some(Some(record_ms)) = twins.cluster.redis.expiry(&record) else {
                panic!("{skew}: no record");
            };
            let erased_ms = on_old(&twins, skew, |t| t.cluster.redis.expiry(&erased));
            let Some(Some(erased_ms)) = erased_ms else {
                panic!("{skew}: no erased key");
            };
            let erased_ms = erased_ms.checked_add_signed(-skew / 1_000).unwrap();
            assert!(record_ms <= erased_ms, "{skew}: {record_ms} {erased_ms}");
        }
    }
}

/// A read of a debt (7 s) after a reset erased 100 s (its end 107 s past its time): carried
/// at exactly its wait, refused a microsecond past it, nothing written.
#[test]
fn probe94_the_boundary_with_a_debt_and_an_erased_total() {
    for (past, refused) in [(0, false), (1, true)] {
        let (old, new) = seconds_buckets();
        let mut twins = Twins::new(&old, &new);
        let first = twins.read_and_script(1);
        twins.read_after(1, &first);
        twins.old_spend(100);
        twins.old_reset();
        twins.old_spend(7);
        let read = twins.cluster.read();
        assert_eq!((read.debt, read.erased), (7 * S, 100 * S));
        twins.later(WAIT + past);
        let before = written(&twins);
        let reply = twins.cluster.try_script(1, Some(read.held(2, WAIT)));
        if refused {
            assert!(late(&reply), "{past}: {reply:?}");
            assert_eq!(written(&twins), before, "nothing written");
        } else {
            assert_eq!(reply, Ok(true), "{past}");
        }
    }
}

/// The erased key at the most it may hold (2^53 - 1 µs, as garbage there may be), the old
/// state then spent 7 s: the read's end past 2^53, where Lua's numbers step by two, its time
/// (`end - debt - erased` in `late`) came out a microsecond late, and a stall a microsecond
/// past its wait was carried (its record's end past 2^53 then a record no later script
/// reads: `RATELIMIT_STATE` at every carried call after). The read now finds such a key
/// holding more than any end may: `RATELIMIT_STATE`, as for other garbage there, nothing
/// written; a total an end stays within is read as before.
#[test]
fn probe94_the_erased_key_at_its_bound_is_unexpected_state() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(7);
    let key = super::super::ledger::erased_key(OLD);
    let level = |total: u64| {
        let set = (twins.cluster.redis).command(&["SET", &key, &total.to_string()]);
        assert!(set.is_ok(), "{set:?}");
        let (keys, args) = level_call(&twins.cluster.carried()[0], &new, WAIT);
        let keys = keys.each_ref().map(String::as_str);
        (twins.cluster.redis).eval_source(LEVEL_SCRIPT.text(), &keys, &args)
    };
    match level(9_007_199_254_740_991) {
        Reply::Error(e) => assert!(e.starts_with("RATELIMIT_STATE "), "{e}"),
        other => panic!("{other:?}"),
    }
    let within = 9_007_199_254_740_991 - T0 - 7 * S;
    match level(within) {
        Reply::Array(items) => assert_eq!(items[3], Reply::Int(within as i64)),
        other => panic!("{other:?}"),
    }
    match level(within + 1) {
        Reply::Error(e) => assert!(e.starts_with("RATELIMIT_STATE "), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A store whose every decision over carried states is what a carried spend's late refusal
/// on a moved bucket with room comes to (`RATELIMIT_LATE`: `Error::Timeout`, nothing
/// written), and whose single decisions go to the memory store beside it.
struct Late(MemoryStore);

impl Store for Late {
    async fn decide(&self, request: crate::store::Request<'_>) -> Result<Decision, Error> {
        self.0.decide(request).await
    }
    async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Err(Error::Timeout {
            after: Duration::from_millis(200),
        })
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.0.reset(key))
    }
}

/// What each failure policy makes of a late refusal (a store's `Error::Timeout`, the moved
/// bucket with room), no sleep: deny refuses with the error; allow admits uncounted (every
/// call, 100 here); local decides in the process's share (a moved bucket of 10 and 5 of
/// burst, two pods: 5 and 2) with the old state carried from the process's own local state,
/// which saw nothing of the store's: 7 admitted, then refused, the clock still.
#[test]
fn probe94_each_policy_answers_a_late_refusal() {
    use crate::store::{Failover, FailurePolicy};
    let old = tokens(10, 5, MINUTE);
    let new = tokens(10, 5, 2 * MINUTE);
    let decide = |store: &Failover<Late>| {
        let checks = [check(NEW, &new, 1)];
        let carried = [carry(&old)];
        let stacked = Stacked::carrying(&checks, &carried, T0 * 1_000, Mode::Spend).unwrap();
        futures::executor::block_on(store.decide_all(stacked))
    };
    let deny = Failover::new(Late(MemoryStore::new()), FailurePolicy::Deny);
    assert!(matches!(decide(&deny), Err(Error::Timeout { .. })));
    let allow = Failover::new(Late(MemoryStore::new()), FailurePolicy::Allow);
    for _ in 0..100 {
        let admitted = decide(&allow).unwrap().remove(0);
        assert!(admitted.allowed, "{admitted:?}");
    }
    let local = Failover::new(Late(MemoryStore::new()), FailurePolicy::Local { pods: 2 });
    let admitted = (0..20)
        .take_while(|_| decide(&local).unwrap().remove(0).allowed)
        .count();
    assert_eq!(admitted, 7);
}
