//! A call whose runtime stalls between its read of an old state in another Cluster slot and
//! its script (`late` in `lua/carry.lua`): past its wait, refused with nothing written; within
//! it, carried as before (RELIABILITY.md item 12).

use super::across::*;
use super::twins::*;
use super::*;

/// A key's value (`GET`'s reply) and expiry (`Redis::expiry`).
type Held = (Result<Reply, String>, Option<Option<u64>>);

/// Every key a carried spend's script may write on the Cluster (the moved state and what
/// lies beside it: its pending record, the added total, its stamp and block) and the old
/// state's (its erased key): each one's value and expiry.
fn written(twins: &Twins<'_>) -> Vec<Held> {
    use super::super::given::{grown_mark, pending_key};
    use super::super::ledger::{block_key, erased_key, stamp_key};
    let keys = [
        NEW.to_owned(),
        pending_key(NEW, OLD),
        grown_mark(NEW, OLD),
        stamp_key(NEW),
        block_key(NEW),
        OLD.to_owned(),
        erased_key(OLD),
    ];
    let redis = &twins.cluster.redis;
    (keys.iter())
        .map(|k| (redis.command(&["GET", k]), redis.expiry(k)))
        .collect()
}

/// Whether `reply` is the stacked script's refusal of a read past its call's wait.
fn late(reply: &Result<(), String>) -> bool {
    reply
        .as_ref()
        .is_err_and(|e| e.starts_with("RATELIMIT_LATE "))
}

/// A call whose runtime stalls 1 µs past its wait (a second here) between its read of the old
/// bucket (10 s owed) and its script, while a record stands (an earlier call's read after
/// lost, 3 s spent between its read and its script) and 2 s were added for another's: the
/// Cluster's script refuses it (`RATELIMIT_LATE`, `Error::Timeout` to the store), every key
/// it could write as it was; the next call adds what the record stands for (2 s: 3 s grown
/// but for its slack, the second the moved bucket owed past the debt carried), and the moved
/// bucket owes what one server's does without the refused call (11 s less the microsecond).
#[test]
fn a_call_stalled_past_its_wait_between_read_and_script_is_refused_and_writes_nothing() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let first = twins.cluster.read();
    twins.old_spend(2);
    twins.script(1, &first);
    twins.read_after(1, &first);
    let lost = twins.cluster.read();
    twins.old_spend(3);
    twins.script(2, &lost);
    let stalled = twins.cluster.read();
    assert_eq!(stalled.debt, 10 * S);
    twins.later(WAIT + 1);
    let before = written(&twins);
    assert!(before[1].1.is_some(), "the lost read after's record stands");
    assert!(before[2].1.is_some(), "2 s added for the first call");
    let refused = twins.script_or_error(3, &stalled);
    assert!(late(&refused), "{refused:?}");
    assert_eq!(written(&twins), before, "nothing written");
    let (on_cluster, on_server) = twins.owes_no_less();
    assert_eq!((on_cluster, on_server), (11 * S - 1, 11 * S - 1));
}

/// A call whose script comes exactly its wait (a second) after its read, the old bucket owing
/// 5 s: carried as before (a record is past only after its wait too: `past < now`), its record
/// written and ended by its read after, nothing refused; over by the time between its read
/// and its script, as every read across slots is (7 s owed where one server owes 6 s). A
/// microsecond later the same call is refused, nothing written.
#[test]
fn a_call_just_inside_its_wait_between_read_and_script_carries_normally() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.later(WAIT);
    assert_eq!(twins.script_or_error(1, &read), Ok(()));
    assert!(written(&twins)[1].1.is_some(), "its record written");
    twins.read_after(1, &read);
    assert_eq!(written(&twins)[1].1, None, "its record ended");
    assert_eq!(twins.owes_no_less(), (7 * S, 6 * S));

    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.later(WAIT + 1);
    let before = written(&twins);
    let refused = twins.script_or_error(1, &read);
    assert!(late(&refused), "{refused:?}");
    assert_eq!(written(&twins), before, "nothing written");
}

/// A read's time is `end - debt - erased`: a stall past the wait of a call whose read found
/// resets' erased total (100 s, its end so 100 s ahead of its time) is refused all the same,
/// one that found a debt too, and a read of a full bucket (no debt, nothing erased: its end its
/// time).
#[test]
fn a_stalled_call_is_refused_whatever_its_read_held() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let first = twins.read_and_script(1);
    twins.read_after(1, &first);
    twins.old_spend(100);
    twins.old_reset();
    let erased = twins.cluster.read();
    assert_eq!((erased.debt, erased.erased), (0, 100 * S));
    twins.old_spend(7);
    let spent = twins.cluster.read();
    assert_eq!((spent.debt, spent.erased), (7 * S, 100 * S));
    assert_eq!((first.debt, first.erased), (0, 0));
    twins.later(WAIT + 1);
    let before = written(&twins);
    for (id, read) in [(2, erased), (3, spent), (4, first)] {
        let refused = twins.script_or_error(id, &read);
        assert!(late(&refused), "{id}: {refused:?}");
    }
    assert_eq!(written(&twins), before, "nothing written");
}
