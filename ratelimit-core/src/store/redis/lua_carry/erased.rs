//! The time resets erased from an old state and the pending records of four parts, on the
//! stand-in at a hand-driven clock: helper-82's probes.

use super::across::*;
use super::twins::*;
use super::*;

// helper-82's probes of the erased total and the four-part pending records, on the stand-in
// at a hand-driven clock: each history run on a Cluster's steps (a read in the old state's
// slot, the script, the read after, its addition) and on one server (the script reading the
// old state beside it, at its turn), the twin; what the moved bucket owes after compared.

/// A reward on the old state (by a pod the reload has not reached: `service.reward`) between
/// a carried spend's script and its read after, of the 4 s spent there between its read and
/// its script: one server's script carried those 4 s into the moved bucket before the reward
/// (a reward of the old state reaches no moved state), so it owes 11 s after one more call.
/// The reward moved the old end back as a reset does, and was found by the read after as
/// nothing grown: 7 s. Closed: a give-back adds what it moved the end back by to the erased
/// total, as a reset does (`erase_given` in `lua/beside.lua`), so the read after finds the
/// 4 s; what a spend and its give-back both after the script then read as grown is not
/// added where the moved bucket already owed it (its slack: `tickets` in `lua/carry.lua`;
/// [`probe82_steady_overlapping_calls_through_spends_refunded`]): 11 s on both.
#[test]
fn probe82_a_reward_of_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reward(4);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// The same with a refund of those 4 s (a spend kept on the old state, given back after the
/// call's script, `lua/refund.lua`): 7 s owed where one server owes 11 s, before refunds
/// counted in the erased total; 11 s on both.
#[test]
fn probe82_a_refund_on_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    let spent = twins.old_kept_spend(4);
    twins.script(1, &read);
    twins.old_refund(4, spent);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// The same reward left standing with the call's pending record (its read after never came):
/// the next call read the old end moved back, and added nothing from its record: 7 s against
/// 11 s, before rewards counted in the erased total; 11 s on both (the next call's read
/// finds the erased total grown, and adds from the record).
#[test]
fn probe82_a_reward_of_the_old_state_while_a_record_stands() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reward(4);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// Two resets between a carried spend's script and its read after, 3 s spent on the old
/// state between them: the erased total holds both (9 s, then 3 s), so the read after adds
/// the 4 s the call missed and the 3 s the twin's second reset erased (over by what the old
/// state was spent and erased since, never under).
#[test]
fn probe82_two_resets_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reset();
    twins.old_spend(3);
    twins.old_reset();
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (14 * S, 11 * S));
}

/// A reset before any carrying read made the erased key writes none (nothing carries the old
/// state yet): the first read finds it full, as the twin's first script does; then a reset
/// after the read, before the script (the twin's script reads the old state reset): the
/// erased total holds it, and the Cluster owes no less.
#[test]
fn probe82_a_reset_before_the_first_read_and_before_the_script() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    twins.old_reset();
    let erased = super::super::ledger::erased_key(OLD);
    assert_eq!(twins.cluster.redis.expiry(&erased), None, "nothing written");
    let read = twins.cluster.read();
    assert_eq!((read.debt, read.erased), (0, 0));
    twins.old_spend(6);
    twins.script(1, &read);
    twins.read_after(1, &read);
    let read = twins.cluster.read();
    twins.old_spend(2);
    twins.old_reset();
    twins.script(2, &read);
    twins.read_after(2, &read);
    let (on_cluster, on_server) = twins.owed();
    // One server: 6 s carried, the three calls' 3 s; the Cluster the 2 s spent then erased
    // between the second call's read and its script too, but for the second the moved
    // bucket already owed past the debt that call carried (its slack: `tickets` in
    // `lua/carry.lua`).
    assert_eq!((on_cluster, on_server), (10 * S, 9 * S));
}

/// A runtime stalled between a carried spend's script and its read after past its wait: the
/// next call, reading the old state still owing (its record past or not), adds the 4 s the
/// first missed once; the first call's read after, coming late, adds nothing on top (the
/// mark): the twin's 10 s after one more call, exactly.
#[test]
fn probe82_a_read_after_late_past_its_wait_adds_nothing_twice() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.later(WAIT + S);
    let second = twins.read_and_script(2);
    twins.read_after(1, &read);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (10 * S, 10 * S));
}

/// The same stall, the old bucket refilled by time alone before the next call reads it (12 s
/// later, full): the first call's record past its wait, the next call adds from it up to the
/// time read (7 s, where 4 were missed), and the late read after of the full bucket adds
/// nothing: an over-refusal of at most the time between the two reads, never an admission.
#[test]
fn probe82_a_read_after_late_past_a_refill_over_refuses_boundedly() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.later(12 * S);
    let second = twins.read_and_script(2);
    assert_eq!(second.debt, 0);
    twins.read_after(1, &read);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (9 * S, 2 * S));
    assert!(on_cluster - on_server <= 12 * S);
}

/// Pods with different store timeouts: the first call's pod waits 16 s for its read after (a
/// 5 s timeout: three and a second), which never comes; the next call, by a pod of a 100 ms
/// timeout (1.3 s), reads the old bucket refilled 10 s later, full, within the first record's
/// wait: nothing is added from it, and it is overwritten. What the first call missed (4 s
/// spent between its read and its script) is lost: RELIABILITY.md item 12's leftover, bounded
/// by the writer's wait (a 5 s pod's is 16 s of the old bucket), never by the reader's.
#[test]
fn probe82_a_record_of_a_slow_pod_read_full_by_a_fast_one() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let (slow, fast) = (16 * S, 1_300_000);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script_waiting(1, &read, slow);
    twins.later(10 * S);
    let second = twins.cluster.read();
    assert_eq!(second.debt, 0);
    twins.script_waiting(2, &second, fast);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    // One server: 2 s; the Cluster lost the 4 s: at the end of the first call's carry (6 s,
    // refilled by now) nothing more.
    assert_eq!(on_server, 2 * S);
    assert!(
        on_server - on_cluster.min(on_server) <= 4 * S,
        "{on_cluster} against {on_server}"
    );
}

/// A lease granted on the old state (4 s, by a pod the reload has not reached, its hot key)
/// between a carried spend's read and its script, and 3 s of it given back unspent (the pod
/// idle) before the read after: one server's script carried the lease whole (11 s owed after
/// one more call); the read after found the old end moved back and added 1 s: 8 s, before
/// a lease's units given back counted in the erased total (`lua/lease_return.lua`); 11 s on
/// both.
#[test]
fn probe82_a_lease_given_back_on_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    let tat = twins.old_lease(4, 9);
    assert_eq!(tat, T0 + 9 * S);
    twins.script(1, &read);
    twins.old_lease_return(3, tat, 9);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// A reset of the old state with a lease out (4 s granted between a carried spend's read and
/// its script, kept counted by the reset: `lua/reset.lua`) before the read after: the reset
/// added the whole end it found to the erased key (9 s), the leased 4 s it kept too, which
/// the read after counts twice: 15 s owed where one server owes 11 s, an over-refusal of the
/// leased units' time, no more (which a return of them, not counted, would take back).
#[test]
fn probe82_a_reset_with_a_lease_out_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_lease(4, 9);
    twins.script(1, &read);
    twins.old_reset();
    assert_eq!(twins.cluster.end(OLD, &old), T0 + 4 * S, "the lease kept");
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (15 * S, 11 * S));
}

/// A runtime stalled 10 s between a carried spend's read and its script (a script sent late
/// runs all the same: the call's timeout is checked when its future is polled again), the
/// old state spent 28 s meanwhile, after a reset had erased 100 s (the erased total then
/// 100 s), its read after lost (a runtime shut down): its record, written at the script,
/// outlived the erased key its read kept (from the read: twice its wait, a full moved bucket
/// and 3 s; the record from the script: its wait, a full moved bucket and a second), and the
/// next call, reading the key made again (0), read ends 100 s below the record's: nothing was
/// added from it, and the carry's rule took the old debt left (2 s). Lost: the stalled call's
/// own spend (1 s: 3 s owed where one server owed 4 s), as when its record expires
/// (`probe_a_standing_record_then_expired`, carries/: 5 against 4), only sooner. The script
/// now refuses a read past its call's wait (`late` in `lua/carry.lua`: its time,
/// `end - debt - erased`, 10 s before the script, the wait 1 s), nothing written: the call an
/// error (`Error::Timeout`, which the failure policy answers), so not made on one server
/// either: 3 s owed on both. Fails with the rule counting the read's time without the erased
/// total (`end - debt`: 90 s ahead of the script, never past) or with no rule.
#[test]
fn probe82_a_stall_between_read_and_script_outlives_the_erased_key() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(20, 0, Duration::from_secs(20));
    let mut twins = Twins::new(&old, &new);
    let first = twins.read_and_script(1);
    twins.read_after(1, &first);
    twins.old_spend(100);
    twins.old_reset();
    let read = twins.cluster.read();
    assert_eq!((read.debt, read.erased), (0, 100 * S));
    twins.old_spend(28);
    twins.later(10 * S);
    let stalled = twins.script_or_error(2, &read);
    twins.later(16 * S);
    let erased = super::super::ledger::erased_key(OLD);
    assert_eq!(
        twins.cluster.redis.expiry(&erased),
        None,
        "the erased key expired"
    );
    let (on_cluster, on_server) = twins.owes_no_less();
    assert_eq!((on_cluster, on_server), (3 * S, 3 * S));
    assert!(
        stalled
            .as_ref()
            .is_err_and(|e| e.starts_with("RATELIMIT_LATE ")),
        "{stalled:?}"
    );
}

/// Steady overlapping calls (each one's script before the read after of the one before, half
/// a second apart, 60 of them) carrying an old bucket a pod in the old window spends 5 s of
/// at the 20th and resets at the 22nd (the erased total grows once): the moved bucket owes
/// what one server's does (31 s; 36.5 s when what the reset erased and the half second
/// between two reads were added whole: the moved bucket owed them already, its slack) but
/// for the first call's half second between its read and its read after (a full read counts
/// the time since, `Read::grown_since`: 31.5 s), and refills: no lockout.
#[test]
fn probe82_steady_overlapping_calls_through_a_reset_still_refill() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=60 {
        let read = twins.cluster.read();
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        match id {
            20 => twins.old_spend(5),
            22 => twins.old_reset(),
            _ => {}
        }
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (31 * S + S / 2, 31 * S));
    twins.later(on_cluster + S);
    assert_eq!(twins.owed(), (S, S), "refilled");
}

/// Steady overlapping calls (half a second apart, 40 of them) while a pod in the old window
/// spends 1 s on the old state and has it given back between each two (`give_back`: refunded
/// or reset), after the call's script, or (`first_before_script`) the first spend before the
/// first call's script: what the moved bucket then owes on the Cluster and on one server.
pub(super) fn steady_through_spends_given_back(
    give_back: impl Fn(&Twins<'_>, u64),
    first_before_script: bool,
) -> ((u64, u64), (u64, u64)) {
    steady_calls_through_spends_given_back(give_back, first_before_script, 40)
}

/// [`steady_through_spends_given_back`] over `calls` calls, the moved bucket a token a second
/// and of 100 or `calls` tokens, the larger (none refused).
pub(super) fn steady_calls_through_spends_given_back(
    give_back: impl Fn(&Twins<'_>, u64),
    first_before_script: bool,
    calls: u64,
) -> ((u64, u64), (u64, u64)) {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let size = calls.max(100);
    let new = tokens(size, 0, Duration::from_secs(size));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=calls {
        let read = twins.cluster.read();
        let early = (first_before_script && id == 1).then(|| twins.old_kept_spend(1));
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        let spent = early.unwrap_or_else(|| twins.old_kept_spend(1));
        give_back(&twins, spent);
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let owed = twins.owed();
    twins.later(owed.0 + S);
    (owed, twins.owed())
}

/// [`steady_through_spends_given_back`], refunded: each spend and its refund fall after one
/// call's script and before the next's, so one server's moved bucket owes what the calls
/// spent, 21 s. A refund counted in the erased total (as a reset's) reads each pair as growth
/// a call may have missed; added whole, 81 s after 40 calls, towards a lockout. Added but for
/// what the moved bucket already owed past the debt carried (its slack, `tickets` in
/// `lua/carry.lua`), only the first call's (nothing owed before it): 22 s, and no more
/// however many calls follow. That second is owed: the Cluster cannot tell this history from
/// one where the first spend came before the first call's script, where one server owes it
/// ([`probe82_a_first_spend_before_the_script_refunded_after_it`]). And the half second
/// between the first call's read and its read after, a full read counting the time since
/// (`Read::grown_since`): 22.5 s.
#[test]
fn probe82_steady_overlapping_calls_through_spends_refunded() {
    let refund = |twins: &Twins<'_>, spent: u64| twins.old_refund(1, spent);
    let (owed, refilled) = steady_through_spends_given_back(refund, false);
    assert_eq!(owed, (22 * S + S / 2, 21 * S));
    assert_eq!(refilled, (S, S), "refilled");
}

/// [`probe82_steady_overlapping_calls_through_spends_refunded`] with the first spend made
/// between the first call's read and its script (refunded after it, as before): the same
/// steps on the old state's node, which the Cluster cannot tell apart, where one server's
/// first script carried that second: 22 s on both, and the Cluster the half second between
/// the first call's read and its read after (`Read::grown_since` of a full read).
#[test]
fn probe82_a_first_spend_before_the_script_refunded_after_it() {
    let refund = |twins: &Twins<'_>, spent: u64| twins.old_refund(1, spent);
    let (owed, _) = steady_through_spends_given_back(refund, true);
    assert_eq!(owed, (22 * S + S / 2, 22 * S));
}

/// [`steady_through_spends_given_back`] with resets where the refunds were (by a pod the
/// reload has not reached): before slacks, each read as growth a call may have missed (the
/// 1 s and the half second to the next read), 81 s owed where one server owes 21 s after 40
/// calls; now the first call's second and half second, as refunds (22.5 s), and refilled.
#[test]
fn probe82_steady_overlapping_calls_through_resets_drift_boundedly() {
    let reset = |twins: &Twins<'_>, _: u64| twins.old_reset();
    let (owed, refilled) = steady_through_spends_given_back(reset, false);
    assert_eq!(owed, (22 * S + S / 2, 21 * S));
    assert_eq!(refilled, (S, S), "refilled");
}

/// Strings no script writes in the erased key beside a carried old bucket: a reward, a refund
/// and a lease's units given back each fail (`RATELIMIT_STATE`), the bucket as it was (a
/// give-back left undone counts as spent), and the key as it was.
#[test]
fn garbage_in_the_erased_key_fails_every_give_back() {
    let (old, new) = seconds_buckets();
    let erased = super::super::ledger::erased_key(OLD);
    for garbage in ["garbage", "-1", "01", "", "1.5", "9007199254740992"] {
        let twins = Twins::new(&old, &new);
        let s = &twins.cluster;
        twins.old_spend(5);
        let spent = twins.old_kept_spend(4);
        let tat = twins.old_lease(4, 9);
        let set = s.redis.command(&["SET", &erased, garbage]);
        assert!(set.is_ok(), "{set:?}");
        let end = s.end(OLD, &old);
        let failed = |reply: Reply| match reply {
            Reply::Error(e) => assert!(e.contains("RATELIMIT_STATE"), "{garbage:?}: {e}"),
            other => panic!("{garbage:?}: {other:?}"),
        };
        use super::super::arguments::arguments;
        use super::super::scripts::{stacked_index, ADJUST_SCRIPT};
        let [first, second] = arguments(&old);
        let index = stacked_index(old.strategy()) as u64;
        let stamp = super::super::ledger::stamp_key(OLD);
        let keys = [OLD, stamp.as_str(), erased.as_str()];
        let args = [index, first, second, 4, 5, 0];
        failed(s.redis.eval_source(ADJUST_SCRIPT.text(), &keys, &args));
        failed(s.refund(&old, 4, spent));
        use super::super::lease::RETURN_SCRIPT;
        let ledger = super::super::ledger::ledger_key(OLD);
        let args = [4, 3, tat, old.interval_nanos() / 1_000, 9];
        let keys = [OLD, ledger.as_str(), erased.as_str()];
        failed(s.redis.eval_source(RETURN_SCRIPT.text(), &keys, &args));
        assert_eq!(s.end(OLD, &old), end, "{garbage:?}: nothing given back");
        let held = s.redis.command(&["GET", &erased]);
        assert_eq!(held, Ok(Reply::Bulk(garbage.into())), "{garbage:?}");
    }
}

/// A reward, a refund and a lease's units given back on an old bucket nothing carries (no
/// erased key: no read kept one) write no erased key: nothing is written for keys nobody
/// carries.
#[test]
fn give_backs_of_a_bucket_nothing_carries_write_no_erased_key() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let tat = twins.old_lease(4, 9);
    twins.old_lease_return(3, tat, 9);
    let spent = twins.old_kept_spend(4);
    twins.old_refund(4, spent);
    twins.old_reward(2);
    let erased = super::super::ledger::erased_key(OLD);
    assert_eq!(twins.cluster.redis.expiry(&erased), None, "nothing written");
}
