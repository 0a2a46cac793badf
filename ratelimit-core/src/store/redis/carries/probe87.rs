//! helper-87's probes of the give-backs counted in the erased total on a real Cluster, each
//! against one server's count for the same history (the twin).

use super::records::*;

/// A reward of 20 on the old state (past all it owes: the bucket full) while a
/// carried spend's record stands (its read after held past the timeout): the next read
/// finds the old bucket full, the erased total grown by the 60 s given back, and adds from
/// the record what the call missed: 4 admitted after, as one server (whose script carried
/// the 5 more before the reward).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe87_a_standing_record_then_the_old_state_rewarded_past_its_debt() {
    let one = on_one_server(Then::RewardOldPastItsDebt).await;
    let cluster = on_a_cluster(Then::RewardOldPastItsDebt).await;
    assert_eq!((cluster, one), (4, 4));
}

/// A reward of 5 on the moved state while the record stands: given back on both sides from
/// the same debt (66 s, to 36 s), and the next carry takes the old debt (60 s) again, the
/// record's addition within it: 5 admitted after on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe87_a_standing_record_then_the_moved_state_rewarded() {
    let one = on_one_server(Then::RewardMoved).await;
    let cluster = on_a_cluster(Then::RewardMoved).await;
    assert_eq!((cluster, one), (5, 5));
}
