//! Carried calls that overlap: each one's script before the read after of the one before,
//! a record overwritten by the next call's script, and the property over interleaved calls
//! ([`interleaved`]), some of whose reads after never come.

use super::across::*;
use super::*;

/// Calls that overlap (each one's script before the read after of the one before), carrying
/// a full old bucket nothing spends, the clock half a second on at each: nothing grew, and the
/// moved bucket owes what one server's does after 40 of them but for the first call's half
/// second. Each script finds the record of the call before it, whose read after is still to
/// come (within its wait): adding from a full read the time between two reads whole (before
/// tickets) added it at every call (19.5 s more after 40), and a moved bucket under steady
/// calls never refilled; but for the record's slack (the moved bucket owing the calls
/// before), only the first call's, whose moved bucket owed nothing (a full read counts the
/// time since: what was spent between may have refilled, `Read::grown_since`).
#[test]
fn overlapping_calls_on_a_full_old_bucket_add_only_the_first_gap() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let side = || Across {
        redis: Redis::new(T0).unwrap(),
        old: &old,
        new: &new,
        tickets: Default::default(),
    };
    let (cluster, server) = (side(), side());
    let mut now = T0;
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=40 {
        let read = cluster.read();
        let held = read.held(id, WAIT);
        assert!(cluster.script(1, Some(held)), "call {id} on the Cluster");
        assert!(server.script(1, None), "call {id} on one server");
        if let Some((read, id)) = before.take() {
            cluster.added(&read, &cluster.read(), id);
        }
        before = Some((read, id));
        now += S / 2;
        cluster.redis.set_time(now);
        server.redis.set_time(now);
    }
    let (read, id) = before.unwrap();
    cluster.added(&read, &cluster.read(), id);
    let (on_cluster, on_server) = (cluster.end(NEW, &new), server.end(NEW, &new));
    assert_eq!(on_cluster, on_server + S / 2);
    // (40 calls of a second each, half a second apart: owing 20 s after the last.)
    assert_eq!(on_server - now, 20 * S);
}

/// A call whose script overwrote the pending record of one that had read again, and never
/// read again itself (its task dropped), 3 s spent on the old state between its read and its
/// script: the first call's addition leaves the record (not its own), and the next call
/// adds what the old state grew by since the second's read but for the second's slack (the
/// moved bucket owed the first call's second past the debt it carried): what one server's
/// bucket owes (where the whole growth added was a second more). Ended by any read after,
/// the record was gone, and the moved bucket owed a second less than on one server (9 s
/// against 10).
#[test]
fn a_record_overwritten_after_a_read_after_stands_for_its_own_call() {
    let movers = [(1, false), (1, true)];
    let (first, second) = (Ok(1), Ok(2));
    let steps = [
        first,
        first,
        first,
        second,
        Err(Besides::OldSpend(3)),
        second,
        first,
    ];
    let (on_cluster, on_server, grew, left) = interleaved(&movers, &steps, 1);
    assert_eq!((on_cluster - T0, on_server - T0), (10 * S, 10 * S));
    assert_eq!(grew, 3 * S);
    assert!(!left);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::super::lua_agrees::cases() / 4))]

    /// Calls carrying a bucket read in another Cluster slot (up to three at once, their reads,
    /// scripts, reads after and additions interleaved with spends on the old state by a pod
    /// the reload has not reached, resets of it by such a pod, rewards, spends kept and
    /// refunded later, and the clock moving on, the old bucket refilling by time alone),
    /// some never reading again (their task dropped
    /// with a runtime shut down), then one more call ([`interleaved`]): the moved bucket owes
    /// no less than on one server, and no more than that and what the old state was spent
    /// and erased by resets and give-backs (a read before a reset carries the debt it read)
    /// and twice how
    /// far the clock moved on meanwhile (each part of the old state's end added once,
    /// whichever call added it: the mark and the pending record, `grow` in `lua/carry.lua`;
    /// its end moves on with the clock where it is read full, or spent again after a refill,
    /// and an addition to a moved bucket that refilled counts from the time it is made);
    /// no pending record is left.
    #[test]
    fn a_call_whose_read_after_never_came_is_covered_by_the_next(
        movers in prop::collection::vec((1..=3u64, any::<bool>()), 1..=3),
        steps in prop::collection::vec(
            prop_oneof![
                4 => (1..=3usize).prop_map(Ok),
                2 => (1..=4u64).prop_map(|c| Err(Besides::OldSpend(c))),
                1 => Just(Err(Besides::OldReset)),
                1 => (1..=4u64).prop_map(|c| Err(Besides::OldReward(c))),
                1 => (1..=4u64).prop_map(|c| Err(Besides::OldKept(c))),
                1 => Just(Err(Besides::OldRefund)),
                1 => (2..=8u64).prop_map(|s| Err(Besides::Later(s))),
            ],
            0..40,
        ),
        new_interval in prop_oneof![Just(1u64), Just(2), Just(3)],
    ) {
        let (on_cluster, on_server, moved, left) = interleaved(&movers, &steps, new_interval);
        prop_assert!(on_cluster >= on_server, "{on_cluster} owed where one server owes {on_server}");
        prop_assert!(
            on_cluster - on_server <= moved,
            "{on_cluster} owed, one server {on_server}, the old state spent, erased and the clock moved (twice) by {moved}"
        );
        prop_assert!(!left, "a pending record left");
    }
}
