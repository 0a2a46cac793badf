//! helper-75: `probes_resets_beside_moves_attacks` on a real Redis server: a reset beside a
//! moved limit leaves the old state a call with its own window spends from, and the old
//! state of a move by window alone. Redis decides on its own clock (a log and a bucket: no
//! window boundary of it falls inside a test); the services' hand-driven clocks only end the
//! old windows.

use std::time::Duration;

use ratelimit::{Options, RateLimitService, Strategy};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::three::limit;
use ratelimit_tests::{on_redis, reload_to as reload};

const SEC: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

async fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let d = service.consume("k", options).await.unwrap();
        admitted += usize::from(d.allowed);
    }
    admitted
}

/// The tier moved from a minute to two: calls with their own minute keep the old state, 3
/// spent there. A reset of the default's key leaves it: none more of 3, as on a twin that
/// ran the new configuration from the start.
#[tokio::test]
async fn a_reset_of_the_default_on_redis_leaves_a_calls_own_window_its_budget() {
    let server = RedisServer::start();
    let own = Options::new().window(MINUTE);
    let mut differ = Vec::new();
    for strategy in [Strategy::SlidingWindow, Strategy::TokenBucket] {
        let at = prefix("resets-attacks-own");
        let (twin, _) = on_redis(&server, &at, limit(strategy, "a", 2 * MINUTE, false));
        let at = prefix("resets-attacks-own");
        let (moved, _) = on_redis(&server, &at, limit(strategy, "a", MINUTE, false));
        reload(&moved, limit(strategy, "a", 2 * MINUTE, false));
        let mut seen = Vec::new();
        for s in [&twin, &moved] {
            let spent = admitted(s, &own, 4).await;
            s.reset("k", None).await.unwrap();
            seen.push((spent, admitted(s, &own, 3).await));
        }
        if seen[0] != seen[1] {
            differ.push(format!(
                "{strategy}: twin {:?}, moved {:?}",
                seen[0], seen[1]
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A fleet of two services on one Redis, both reloaded (the tier moved from a minute to
/// two); calls with their own minute go through one, 3 spent (no refusal: a refusal cached
/// by the caller hides a reset made elsewhere); the default's key reset through the other,
/// which never saw such a call. Its reset leaves the old state, their budget, as a fleet on
/// the new configuration from the start does: none more in the minute. (Gated on the calls
/// the resetting process saw, it forgot the state: 3 more.)
#[tokio::test]
async fn a_reset_through_another_service_leaves_a_calls_own_window_its_budget() {
    let server = RedisServer::start();
    let own = Options::new().window(MINUTE);
    let mut differ = Vec::new();
    for strategy in [Strategy::SlidingWindow, Strategy::TokenBucket] {
        let mut seen = Vec::new();
        for reloads in [false, true] {
            let at = prefix("resets-attacks-fleet-own");
            let first = limit(
                strategy,
                "a",
                if reloads { MINUTE } else { 2 * MINUTE },
                false,
            );
            let (calls, _) = on_redis(&server, &at, first.clone());
            let (resets, _) = on_redis(&server, &at, first);
            if reloads {
                reload(&calls, limit(strategy, "a", 2 * MINUTE, false));
                reload(&resets, limit(strategy, "a", 2 * MINUTE, false));
            }
            let spent = admitted(&calls, &own, 3).await;
            resets.reset("k", None).await.unwrap();
            seen.push((spent, admitted(&calls, &own, 3).await));
        }
        if seen[0] != seen[1] {
            differ.push(format!(
                "{strategy}: twin {:?}, moved {:?}",
                seen[0], seen[1]
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// What leaving the old states costs, pinned (a lockout, never an admission): the tier (a
/// log of 3 a minute, blocking an hour once refused) moved to two minutes, the key blocked
/// before the move and reset after it. Its old state is left: the block held while the old
/// window lasts and carried after it (twin: 3 at once).
#[tokio::test]
async fn a_reset_beside_a_window_only_move_on_redis_leaves_the_old_state() {
    let server = RedisServer::start();
    let plain = Options::new();
    let mut seen = Vec::new();
    for later in [Duration::ZERO, 90 * SEC] {
        let at = prefix("resets-attacks-window-only");
        let strategy = Strategy::SlidingWindow;
        let (moved, clock) = on_redis(&server, &at, limit(strategy, "a", MINUTE, true));
        assert_eq!(admitted(&moved, &plain, 4).await, 3);
        reload(&moved, limit(strategy, "a", 2 * MINUTE, true));
        clock.advance(later);
        moved.reset("k", None).await.unwrap();
        seen.push(admitted(&moved, &plain, 5).await);
    }
    assert_eq!(seen, [0, 0]);
}
