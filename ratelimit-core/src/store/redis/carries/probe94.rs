//! helper-94's probes of the late refusal (`late` in `lua/carry.lua`) on a real Cluster: a
//! carried spend's read aged by hand (`stalled::spend_read_aged`), no sleep.

use super::moved::*;
use super::stalled::spend_read_aged;
use super::*;
use crate::store::redis::across_slots::read_after_within;

/// The moved bucket spent whole (10 admitted after the old state's 30 s carried), then a
/// carried spend whose read is a second past its wait at its script, its own timeout not run
/// out (what a call that did not stall meets when the old state's node's clock is behind the
/// moved one's by more than the wait: its read aged by hand here). The script's
/// `RATELIMIT_LATE` was the store's `Error::Timeout`, which `FailurePolicy::Allow` admits
/// uncounted (and `Local` decides in the process's share) although the moved bucket, on a
/// live node, refuses the call: a refusal turned into an admission by the policy, which a
/// read across slots that fails never is (`refused_or`). A timeout before the call's own ran
/// out is now looked at as such a read (`run_checked`): the moved bucket's refusal, nothing
/// written, which no policy admits. A carried spend as late on a bucket with
/// room is still `Error::Timeout` (`a_stalled_carried_spend_is_refused_on_a_cluster_and_writes_nothing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe94_a_late_carry_on_a_spent_bucket_is_refused_not_an_error() {
    let timeout = Duration::from_secs(2);
    let mut moved = Moved::new("late-on-a-spent-bucket", timeout).await;
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (10, true));
    let wait = read_after_within(timeout);
    let spent = spend_read_aged(&moved, wait + 1_000_000).await;
    assert_eq!(record_of(&mut moved), None, "no record");
    let reply = spent.expect("the moved bucket's refusal, not an error");
    assert_eq!((reply[0], reply[1]), (0, 0), "{reply:?}");
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (0, true));
}
