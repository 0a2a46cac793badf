//! A carried spend stalled between its read of the old state (in another Cluster slot) and its
//! script, on a real Cluster (`late` in `lua/carry.lua`): its read aged by hand (its time
//! and the moved node's clock read before it earlier, its debt as much longer: the same end,
//! a read made that long before), no sleep.

use std::time::Instant;

use super::moved::*;
use super::*;
use crate::store::redis::across_slots::read_after_within;
use crate::store::redis::given::{grown_mark, Read};

/// A spend of 1 on `moved`'s moved bucket carrying its old state, as `RedisStore::run_stacked`
/// makes it (read in the old state's slot, then the script and its read after,
/// `run_checked`), the read aged by `aged` microseconds: the script's reply (five integers).
pub(super) async fn spend_read_aged(moved: &Moved, aged: u64) -> Result<Vec<i64>, Error> {
    let checks = [check(&moved.into, &moved.new, 1)];
    let carried = [carry(&moved.from, &moved.old)];
    let stacked = Stacked::carrying(&checks, &carried, NOW, Mode::Spend).unwrap();
    let asked: Vec<&Check<'_>> = checks.iter().collect();
    let store = &moved.store;
    let read = store.read_across_slots(&stacked, &asked, true, Instant::now());
    let read: Vec<Option<Read>> = (read.await.unwrap().into_iter())
        .map(|r| {
            r.map(|r| Read {
                at: r.at - aged,
                debt: r.debt + aged,
                began: r.began - aged,
                ..r
            })
        })
        .collect();
    assert!(read[0].is_some(), "read in its own slot");
    (store.run_checked(&stacked, &asked, false, read, Instant::now())).await
}

/// A carried spend whose read is a second past its wait (three timeouts and a second: 7 s
/// with a 2 s timeout) at its script: refused with `Error::Timeout` (for the failure policy:
/// under the default, deny, a refusal), nothing written beside the moved state (no moved
/// bucket, no pending record, no added total); the moved bucket of 15 then admits 10, the
/// old state's 30 s carried, as if the stalled call had never come. Admitted, it wrote its
/// record from a read older than the erased key it kept, and the next carry covered its
/// spend (`probe82_a_stall_between_read_and_script_outlives_the_erased_key`, lua_carry/).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_carried_spend_is_refused_on_a_cluster_and_writes_nothing() {
    let timeout = Duration::from_secs(2);
    let mut moved = Moved::new("stalled-past-its-wait", timeout).await;
    let wait = read_after_within(timeout);
    assert_eq!(wait, 7_000_000);
    let spent = spend_read_aged(&moved, wait + 1_000_000).await;
    assert!(
        matches!(spent, Err(Error::Timeout { after }) if after == timeout),
        "{spent:?}"
    );
    let mark = grown_mark(&moved.into, &moved.from);
    assert!(
        !exists(&mut moved.masters[0], &moved.into),
        "no moved bucket"
    );
    assert!(!exists(&mut moved.masters[0], &mark), "no added total");
    assert_eq!(record_of(&mut moved), None, "no record");
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (10, true));
}

/// The same call, its read a second inside its wait: admitted, its record ended by its read
/// after, the old state's 30 s carried 6 s over (the read's age, a token of the moved
/// bucket: every read across slots is carried from its script's clock), so 8 admitted after
/// it of the 15 (9 with a read of no age).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_spend_read_within_its_wait_carries_on_a_cluster() {
    let timeout = Duration::from_secs(2);
    let mut moved = Moved::new("stalled-within-its-wait", timeout).await;
    let wait = read_after_within(timeout);
    let spent = spend_read_aged(&moved, wait - 1_000_000).await.unwrap();
    assert_eq!(spent[0], 1, "admitted: {spent:?}");
    assert_eq!(record_of(&mut moved), None, "its record ended");
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (8, true));
}
