//! The scripts against the algorithms they follow, on a real `redis-server`: every verdict
//! Redis gives (admitted and refused, spent and looked at, across windows, refills and
//! expiries) must be the one `algorithm::decide` gives at Redis' own time. In the crate,
//! because the algorithms and the raw verdicts are not public.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::redis_server;
use super::{RedisOptions, RedisStore};
use crate::algorithm::{self, State, Verdict};
use crate::quota::Quota;
use crate::syntax::Strategy;

/// A verdict in microseconds, the unit the scripts count in.
fn micros(v: Verdict) -> Verdict {
    Verdict {
        reset_at: v.reset_at / 1_000,
        retry_after: v.retry_after.map(|n| n / 1_000),
        ..v
    }
}

#[tokio::test]
async fn every_strategy_decides_like_the_memory_algorithm() {
    let server = redis_server::RedisServer::start();
    let store = RedisStore::new(RedisOptions::new(server.url()).timeout(Duration::from_secs(2)))
        .expect("store");
    let p = redis_server::prefix("same");
    // A small xorshift: varied costs and peeks, the same sequence every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for strategy in Strategy::ALL {
        // A 20 ms window: the run crosses many windows, refills and expiries.
        let quota = Quota::from_parts(5, Duration::from_millis(20), 2, strategy, None).unwrap();
        // The same quota with every duration read as microseconds.
        let in_micros =
            Quota::from_parts(5, Duration::from_nanos(20_000), 2, strategy, None).unwrap();
        let key = format!("{p}:{strategy}");
        let mut state = State::new(strategy);
        let mut outcomes = BTreeMap::new();
        let started = Instant::now();
        let mut calls = 0;
        // Runs for a few windows' worth of real time; each call is compared exactly.
        while started.elapsed() < Duration::from_millis(120) || calls < 200 {
            let r = next();
            let cost = 1 + r % 3;
            let commit = r % 5 != 0;
            let (verdict, now) = store
                .verdict(&key, &quota, cost, 0, commit, true, true)
                .await
                .unwrap();
            let expected =
                algorithm::decide(&mut state, now / 1_000, &in_micros, cost, commit).unwrap();
            assert_eq!(
                micros(verdict),
                expected,
                "{strategy}, call {calls}, cost {cost}, commit {commit}"
            );
            *outcomes.entry(verdict.allowed).or_insert(0) += 1;
            calls += 1;
        }
        assert!(
            outcomes.len() == 2,
            "{strategy}: both admitted and refused calls are compared: {outcomes:?}"
        );
    }
}
