//! The queue over Redis (feature `redis`): waiters live in each process, and every wake-up
//! asks Redis again. Two processes wait on one key: every waiter is admitted or times out,
//! and no window (by Redis' clock) admits more than the limit.
//!
//! Real time here (Redis keeps its own clock), so the figures are bounds, not instants.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use ratelimit_tests::redis_server::{prefix, RedisServer};

/// Runs two `queue-worker` processes at once; returns each admission's window end and the
/// number of waits that timed out.
fn two_processes(server: &RedisServer, prefix: &str, args: [&str; 4]) -> (Vec<u64>, usize) {
    let [limit, window_ms, waiters, timeout_ms] = args;
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_queue-worker"))
                .args([&server.url(), prefix, limit, window_ms, waiters, timeout_ms])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start queue-worker")
        })
        .collect();
    let (mut admitted, mut timed_out) = (Vec::new(), 0);
    for child in children {
        let out = child.wait_with_output().expect("queue-worker ran");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("admitted", at)) => admitted.push(at.parse().expect("window end")),
                None if line == "timed_out" => timed_out += 1,
                _ => panic!("a waiter ended otherwise: {line}"),
            }
        }
    }
    (admitted, timed_out)
}

/// Admissions per fixed window, by its end as the decision reported it, rounded to the
/// nearest window boundary: the fixed window's short reply places `reset_at` with the
/// process's estimate of Redis' clock (within half a round trip, see `store/redis/reply.rs`),
/// so one window's ends may differ by a millisecond; admission itself is Redis' alone.
fn per_window(admitted: &[u64], window_ms: u64) -> BTreeMap<u64, u64> {
    let mut windows = BTreeMap::new();
    for &end in admitted {
        let boundary = (end + window_ms / 2) / window_ms * window_ms;
        *windows.entry(boundary).or_default() += 1;
    }
    windows
}

#[test]
fn two_processes_waiting_on_one_key_are_all_admitted_and_never_over_the_limit() {
    let server = RedisServer::start();
    // 2 x 30 waiters, 10 per 500 ms: six windows' worth, well within the 20 s timeout.
    let (admitted, timed_out) =
        two_processes(&server, &prefix("queue-all"), ["10", "500", "30", "20000"]);
    assert_eq!((admitted.len(), timed_out), (60, 0));
    let windows = per_window(&admitted, 500);
    assert!(windows.values().all(|&n| n <= 10), "{windows:?}");
    assert!(windows.len() >= 6, "{windows:?}");
}

#[test]
fn two_processes_waiting_past_their_timeout_time_out_and_never_go_over_the_limit() {
    let server = RedisServer::start();
    // 2 x 40 waiters, 10 per second, 1.5 s to wait: at most three windows are reached.
    let (admitted, timed_out) =
        two_processes(&server, &prefix("queue-some"), ["10", "1000", "40", "1500"]);
    assert_eq!(admitted.len() + timed_out, 80);
    let windows = per_window(&admitted, 1000);
    assert!(windows.values().all(|&n| n <= 10), "{windows:?}");
    assert!(windows.len() <= 3, "{windows:?}");
    // Capacity is never left unused while waiters remain: the first window and the next
    // one each admit their whole limit.
    assert!(admitted.len() >= 20, "{windows:?}");
}
