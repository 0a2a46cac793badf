//! helper-87's probes of the tickets and the give-backs counted in the erased total (each
//! history on a Cluster's steps, the old state read in its own slot, against one server's,
//! the script reading the old state beside it at its turn): what the moved bucket owes after.

use super::across::*;
use super::erased::*;
use super::twins::*;
use super::*;

/// The script of the call of id `id` that read `read`, spending `cost` seconds of the moved
/// bucket, by a pod whose read after comes within `wait` or never, on both sides.
fn script_costing(twins: &Twins<'_>, id: u64, read: &Read, wait: u64, cost: u64) {
    let held = read.held(id, wait);
    assert!(
        twins.cluster.script(cost, Some(held)),
        "refused on the Cluster"
    );
    assert!(twins.server.script(cost, None), "refused on one server");
}

/// What the moved bucket owes now on each side (microseconds), no call made.
fn owes_now(twins: &Twins<'_>) -> (u64, u64) {
    let new = twins.cluster.new;
    let owes = |s: &Across<'_>| s.end(NEW, new).saturating_sub(twins.now);
    (owes(&twins.cluster), owes(&twins.server))
}

/// The old bucket owing 10 s at a carried spend's read, spent 5 s more between the read and
/// the script (by a pod the reload has not reached), the call spending 10 s of the moved
/// bucket; its read after comes 16 s later (a 5 s pod's wait: three timeouts and a second,
/// a runtime stalled), the old bucket full again by then. One server's script carried the
/// 15 s: the moved bucket ends 25 s after the read. The read after of a full bucket counted
/// only what was erased since (`Read::grown_since`: "a bucket does not refill within a
/// call's steps"), nothing: the 5 s were lost, the moved bucket ended 20 s after (4 s owed
/// against 9 s). It now counts the whole time since the end read, less the call's ticket:
/// 10 s, over by the second the old bucket stood full before the read after.
#[test]
fn probe87_a_spend_between_read_and_script_refilled_by_a_late_read_after() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(10);
    let read = twins.cluster.read();
    assert_eq!(read.debt, 10 * S);
    twins.old_spend(5);
    script_costing(&twins, 1, &read, 16 * S, 10);
    twins.later(16 * S);
    assert_eq!(twins.cluster.read().debt, 0, "the old bucket refilled");
    twins.read_after(1, &read);
    let (on_cluster, on_server) = owes_now(&twins);
    assert_eq!((on_cluster, on_server), (10 * S, 9 * S));
}

/// The same from a full old bucket: 3 s spent on it between a carried spend's read and its
/// script, the call spending 10 s, its read after 4 s later (the old bucket full again): one
/// server's moved bucket ends 13 s after the read; the read after added nothing (6 s owed
/// against 9 s); now the 4 s since the read: 10 s (over by the second the old bucket stood
/// full before the read after, no more).
#[test]
fn probe87_a_full_old_bucket_spent_before_the_script_refilled_by_the_read_after() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let read = twins.cluster.read();
    assert_eq!(read.debt, 0);
    twins.old_spend(3);
    script_costing(&twins, 1, &read, 16 * S, 10);
    twins.later(4 * S);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = owes_now(&twins);
    assert_eq!((on_cluster, on_server), (10 * S, 9 * S));
}

/// A reward on the old state between a carried spend's read and its script of a spend made
/// before the read (4 s of 10): one server's script carries the 6 s left, the Cluster's the
/// 10 s read; the read after finds the end as it was read (moved back 4 s, 4 s erased):
/// nothing added. The Cluster over-refuses by the reward, no more.
#[test]
fn probe87_a_reward_between_read_and_script_of_a_spend_before_the_read() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(10);
    let read = twins.cluster.read();
    twins.old_reward(4);
    twins.script(1, &read);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (12 * S, 8 * S));
}

/// A spend (kept) and its refund both between a carried spend's read and its script: one
/// server's script carries what was read (10 s); the Cluster's read after finds the 4 s
/// spent and given back as grown (erased), and adds them: over by 4 s.
#[test]
fn probe87_a_spend_and_its_refund_between_read_and_script() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(10);
    let read = twins.cluster.read();
    let spent = twins.old_kept_spend(4);
    twins.old_refund(4, spent);
    twins.script(1, &read);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (16 * S, 12 * S));
}

/// A reward larger than the old bucket's whole debt (20 s of 9 s owed: 5 s before the read,
/// 4 s between the read and the script) after the script, before the read after: the bucket
/// full, its end moved back 9 s; the read after of the full bucket counts the 9 s erased
/// (at most) and adds the 4 s grown: 11 s as one server.
#[test]
fn probe87_a_reward_past_the_whole_debt_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reward(20);
    assert_eq!(twins.cluster.read().debt, 0);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// A refund, after the call's script, of a spend kept on the old state before the reload's
/// first carrying read (its stamp from before, still the state's): its 4 s were read and
/// carried; given back, the end moves back 4 s and the erased total grows 4 s: the read
/// after finds nothing grown. One server carried them too (at its script): 11 s on both
/// after one more call (the carried 9 s and two calls).
#[test]
fn probe87_a_refund_after_the_script_of_a_spend_before_the_read() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let spent = twins.old_kept_spend(4);
    let read = twins.cluster.read();
    twins.script(1, &read);
    twins.old_refund(4, spent);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// The same refund with the call's read after lost (its record standing): the next call's
/// script reads the end as the record's (moved back 4 s, erased 4 s): nothing from the
/// record; 11 s on both (the 4 s carried and then given back are not given back to the
/// moved bucket on either side).
#[test]
fn probe87_a_refund_of_a_spend_before_the_read_while_a_record_stands() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let spent = twins.old_kept_spend(4);
    let read = twins.cluster.read();
    twins.script(1, &read);
    twins.old_refund(4, spent);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// Three overlapping calls, each one's read after lost (their records replacing each other,
/// tickets merged), 2 s spent on the old state between each read and its script, each call
/// spending 5 s of the moved bucket (on top of what it missed, on one server), a reward of
/// 1 s after each script: the last call (whose read after comes) and one more then owe no
/// less than one server.
#[test]
fn probe87_three_lost_read_afters_merged_through_rewards() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let mut reads = Vec::new();
    for id in 1..=3 {
        let read = twins.cluster.read();
        twins.old_spend(2);
        script_costing(&twins, id, &read, WAIT, 5);
        twins.old_reward(1);
        reads.push(read);
    }
    twins.read_after(3, &reads[2]);
    twins.owes_no_less();
}

/// The same three overlapping calls with their reads after coming in reverse order (each
/// after the last script).
#[test]
fn probe87_three_overlapping_calls_read_after_in_reverse() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let mut reads = Vec::new();
    for id in 1..=3 {
        let read = twins.cluster.read();
        twins.old_spend(2);
        script_costing(&twins, id, &read, WAIT, 5);
        twins.old_reward(1);
        reads.push(read);
    }
    for id in (1..=3).rev() {
        twins.read_after(id, &reads[id as usize - 1]);
    }
    twins.owes_no_less();
}

/// The moved bucket reset (by a reloaded pod) between a carried spend's script and its read
/// after, 4 s spent on the old state between the read and the script: the call's slack (the
/// moved bucket's debt past the one carried, at its script) no longer stands in the moved
/// bucket; one server's reset forgot the carried 4 s too, and the next call on both sides
/// carries the old end again.
#[test]
fn probe87_the_moved_bucket_reset_while_a_ticket_stands() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let first = twins.read_and_script(1);
    twins.read_after(1, &first);
    // The moved bucket owes 6 s past what the next read carries... then is reset.
    for _ in 0..6 {
        for s in [&twins.cluster, &twins.server] {
            assert!(matches!(
                s.redis.decide_full(&new, NEW, 1, true),
                Reply::Array(_)
            ));
        }
    }
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(2, &read);
    for s in [&twins.cluster, &twins.server] {
        s.reset(NEW);
    }
    twins.read_after(2, &read);
    twins.owes_no_less();
}

/// Steady calls (200, half a second apart, each one's script before the read after of the one
/// before) while a pod in the old window rewards a second of the old state after each
/// script (the old state spent 1 s before each read by that pod): the moved bucket owes what
/// one server's does within a few seconds, never growing with the calls, and refills.
#[test]
fn probe87_two_hundred_steady_calls_each_with_a_reward_stay_bounded() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(1_000, 0, Duration::from_secs(1_000));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    let mut worst = 0;
    for id in 1..=200 {
        twins.old_spend(1);
        let read = twins.cluster.read();
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        twins.old_reward(1);
        let (c, s) = owes_now(&twins);
        assert!(
            c >= s,
            "call {id}: {c} owed on the Cluster, {s} on one server"
        );
        worst = worst.max(c - s);
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let (on_cluster, on_server) = twins.owed();
    assert!(on_cluster >= on_server);
    assert!(worst <= 2 * S, "the Cluster over by {worst} at worst");
    twins.later(on_cluster + S);
    assert_eq!(twins.owed(), (S, S), "refilled");
}

/// [`steady_through_spends_given_back`] (a spend kept and refunded after each script) over
/// 200 calls: 101 s owed on one server; the Cluster 1.5 s past it, as after 40 calls (the
/// first call's second and half second: `probe82_steady_overlapping_calls_through_spends_
/// refunded`), no more with five times the calls, and refilled.
#[test]
fn probe87_two_hundred_steady_calls_each_with_a_refund_stay_bounded() {
    let refund = |twins: &Twins<'_>, spent: u64| twins.old_refund(1, spent);
    let (owed, refilled) = steady_calls_through_spends_given_back(refund, false, 200);
    assert_eq!(owed, (102 * S + S / 2, 101 * S));
    assert_eq!(refilled, (S, S), "refilled");
}

/// [`probe87_a_full_old_bucket_spent_before_the_script_refilled_by_the_read_after`] with the
/// call's read after lost (its task dropped, a runtime shut down): 3 s spent on the full old
/// bucket between its read and its script, the old bucket full again when the next call
/// reads it (4 s later, within the first call's wait): the next script, reading a full
/// bucket while the record may still be read after, added nothing from it, and nobody added
/// the 3 s one server's script carried (7 s owed against 10 s). It now adds the time from the
/// record's end to the end read, less the record's ticket: 11 s (over by the second the old
/// bucket stood full before the next read).
#[test]
fn probe87_a_lost_read_after_its_growth_refilled_before_the_next_read() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let read = twins.cluster.read();
    twins.old_spend(3);
    script_costing(&twins, 1, &read, 16 * S, 10);
    twins.later(4 * S);
    let second = twins.cluster.read();
    assert_eq!(second.debt, 0);
    script_costing(&twins, 2, &second, 16 * S, 1);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = owes_now(&twins);
    assert_eq!((on_cluster, on_server), (11 * S, 10 * S));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::super::lua_agrees::cases() / 4))]

    /// [`a_call_whose_read_after_never_came_is_covered_by_the_next`](super::across) (the
    /// calls spending up to 12 s, what they owe then outlasting a refill of the old bucket)
    /// with the clock moving on between a call's script and its read after too (a read after
    /// come late), and between its read and its script (a call past its wait there refused,
    /// nothing written, `late` in `lua/carry.lua`; on one server not made either), the old
    /// bucket refilling meanwhile: the moved bucket
    /// owes no less than on one server, and no more than that and what the old state was
    /// spent and erased meanwhile and twice how far the clock moved on.
    #[test]
    fn probe87_calls_whose_steps_stall_are_covered(
        movers in prop::collection::vec((1..=12u64, any::<bool>()), 1..=3),
        steps in prop::collection::vec(
            prop_oneof![
                4 => (1..=3usize).prop_map(Ok),
                2 => (1..=4u64).prop_map(|c| Err(Besides::OldSpend(c))),
                1 => Just(Err(Besides::OldReset)),
                1 => (1..=4u64).prop_map(|c| Err(Besides::OldReward(c))),
                1 => (1..=4u64).prop_map(|c| Err(Besides::OldKept(c))),
                1 => Just(Err(Besides::OldRefund)),
                2 => (1..=8u64).prop_map(|s| Err(Besides::Later(s))),
            ],
            0..40,
        ),
        new_interval in prop_oneof![Just(1u64), Just(2), Just(3)],
    ) {
        let (on_cluster, on_server, moved, left) =
            interleaved_stalling(&movers, &steps, new_interval, true);
        prop_assert!(on_cluster >= on_server, "{on_cluster} owed where one server owes {on_server}");
        prop_assert!(
            on_cluster - on_server <= moved,
            "{on_cluster} owed, one server {on_server}, the old state spent, erased and the clock moved (twice) by {moved}"
        );
        prop_assert!(!left, "a pending record left");
    }
}

/// The stacked script's reply carrying `given` into the moved bucket of `side` (a spend of 1
/// when `given` is read, none for an addition), whatever it is.
fn script_reply(side: &Across<'_>, given: Given) -> Reply {
    let spends = matches!(given, Given::Held { .. });
    let checks = [check(NEW, side.new, 1)];
    let carried = side.carried();
    let mode = if spends { Mode::Spend } else { Mode::Look };
    let stacked = Stacked::carrying(&checks, &carried, T0 * 1_000, mode).unwrap();
    let asked: Vec<&Check<'_>> = if spends {
        checks.iter().collect()
    } else {
        vec![]
    };
    let given = [Some(given)];
    let (keys, args) = script_call(&stacked, &asked, spends, false, &given, || 0).unwrap();
    let keys: Vec<&str> = (asked.iter().map(|c| c.key.as_str()))
        .chain(keys.iter().map(String::as_str))
        .collect();
    side.redis.eval_source(STACKED_SCRIPT.text(), &keys, &args)
}

/// Strings no addition writes in the added total beside the moved state (`added:{from}`):
/// a carried spend's script (which reads it for its ticket) and an addition after a read
/// after each fail (`RATELIMIT_STATE`), nothing written: the moved bucket as it was, the key
/// as it was. ("0" too: an addition writes a total above 0.)
#[test]
fn probe87_garbage_in_the_added_total_fails_the_script_and_the_addition() {
    let (old, new) = seconds_buckets();
    let added = super::super::given::grown_mark(NEW, OLD);
    for garbage in ["garbage", "0", "-1", "01", "", "1.5", "9007199254740992"] {
        let twins = Twins::new(&old, &new);
        let s = &twins.cluster;
        twins.old_spend(5);
        let read = s.read();
        let set = s.redis.command(&["SET", &added, garbage]);
        assert!(set.is_ok(), "{set:?}");
        let end = s.end(NEW, &new);
        let failed = |reply: Reply| match reply {
            Reply::Error(e) => assert!(e.contains("RATELIMIT_STATE"), "{garbage:?}: {e}"),
            other => panic!("{garbage:?}: {other:?}"),
        };
        let held = read.held(1, WAIT);
        failed(script_reply(s, held));
        let grown = Given::Grown {
            from: read.end(),
            to: read.end() + 4 * S,
            lasts: 9 * S,
            slack: 0,
            since: 0,
            pending: 1,
        };
        failed(script_reply(s, grown));
        assert_eq!(s.end(NEW, &new), end, "{garbage:?}: nothing written");
        let record = super::super::given::pending_key(NEW, OLD);
        assert_eq!(s.redis.expiry(&record), None, "{garbage:?}: no record");
        let held = s.redis.command(&["GET", &added]);
        assert_eq!(held, Ok(Reply::Bulk(garbage.into())), "{garbage:?}");
    }
}

/// The added total beside the moved state gone (expired, or evicted: it expires, so a
/// `volatile-*` policy may take it) while a ticket that counted it stands: a call's read
/// after (`lost` false) or, its read after lost, the next call's script from its record
/// reads no total, and subtracts nothing of what was added since the call's script (never
/// a total below the ticket's): no less than one server owes.
#[test]
fn probe87_the_added_total_gone_while_a_ticket_stands() {
    for lost in [false, true] {
        let (old, new) = seconds_buckets();
        let twins = Twins::new(&old, &new);
        let added = super::super::given::grown_mark(NEW, OLD);
        twins.old_spend(5);
        let read = twins.cluster.read();
        twins.old_spend(3);
        twins.script(1, &read);
        twins.read_after(1, &read);
        assert!(twins.cluster.redis.expiry(&added).is_some(), "3 s added");
        let read = twins.cluster.read();
        twins.old_spend(4);
        twins.script(2, &read);
        let del = twins.cluster.redis.command(&["DEL", &added]);
        assert_eq!(del, Ok(Reply::Int(1)));
        if !lost {
            twins.read_after(2, &read);
        }
        let (on_cluster, on_server) = twins.owed();
        assert!(
            on_cluster >= on_server,
            "lost {lost}: {on_cluster} owed on the Cluster, {on_server} on one server"
        );
    }
}

/// Two calls read the old bucket (6 s owed), 1 s is spent on it, the first to script (12 s of
/// the moved bucket) loses its read after (a runtime shut down); the other, its runtime
/// stalled between its read and its script past the first's wait, scripts 2 s later: the
/// first's record was past, and the addition from it ran from the stalled call's read (the
/// same end as the record's: nothing), then the stalled call's ticket counted the first's
/// 12 s as slack, which held its read after's 1 s: the 1 s the first call missed (under its
/// 12 s on one server) was added by nobody: 18 s owed after one more call where one server
/// owed 19 s. RELIABILITY.md item 12's stall between a read and
/// its script (`probe82_a_stall_between_read_and_script_outlives_the_erased_key`), through
/// another call's record; found by `probe87_calls_whose_steps_stall_are_covered` before it
/// kept the clock from moving there. The script now refuses the stalled call's read, past
/// its wait (2 s before its script, the wait 1 s: `late` in `lua/carry.lua`), nothing
/// written, so one server does not make it either; the next call adds the first's 1 s from
/// its record: 18 s owed on both. Fails with the erased key's bound for the rule (twice the
/// wait: the stalled read not past) or with no rule.
#[test]
fn probe87_a_stall_between_read_and_script_past_another_calls_wait() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(6);
    let lost = twins.cluster.read();
    let stalled = twins.cluster.read();
    twins.old_spend(1);
    script_costing(&twins, 1, &lost, WAIT, 12);
    twins.later(2 * S);
    let refused = twins.script_or_error(2, &stalled);
    if refused.is_ok() {
        twins.read_after(2, &stalled);
    }
    let (on_cluster, on_server) = twins.owes_no_less();
    assert_eq!((on_cluster, on_server), (18 * S, 18 * S));
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.starts_with("RATELIMIT_LATE ")),
        "{refused:?}"
    );
}
