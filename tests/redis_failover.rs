//! A Redis Cluster master killed under load (feature `redis`): three masters with a replica
//! each on loopback; tasks spend continuously from one key while its master is SIGKILLed.
//! Calls answer by the policy (deny) within the timeout during the failover, resume once the
//! replica is promoted, and the admissions the failover lost (acknowledged by the dead
//! master, not yet replicated: Redis replicates asynchronously) are measured and bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratelimit::{Config, Error, Options, RateLimitService, RedisOptions, StoreConfig};
use ratelimit_tests::redis_server::{prefix, RedisCluster};

const LONG: Duration = Duration::from_secs(20 * 24 * 3600);
const TIMEOUT: Duration = Duration::from_millis(300);
/// The timeout plus scheduling slack on a busy 2-core machine.
const BOUND: Duration = Duration::from_millis(900);
/// Far above what a run admits, so every admission is on record and none is refused by the
/// limit: what the store records is compared with what the callers were told.
const LIMIT: u64 = 1_000_000;
/// How long before the kill an acknowledged admission may still be unreplicated: the bound
/// on what the failover may lose (on loopback, replication lags far less).
const LAG: Duration = Duration::from_millis(250);

#[derive(Default)]
struct Seen {
    slowest: Duration,
    /// When each admitted call returned.
    admitted: Vec<Instant>,
    /// Refused with the store's error (the deny policy).
    refused: Vec<Instant>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_over_to_its_replica_and_the_overshoot_is_bounded() {
    let mut cluster = RedisCluster::start_with_replicas();
    let p = prefix("failover");
    let options = RedisOptions::cluster(cluster.urls()).timeout(TIMEOUT);
    let config = Config::builder()
        .key_prefix(p.as_str())
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    // The sliding log: exact, and without window boundaries to cross during the run.
    let opts = Options::new().limit(LIMIT).window(LONG);
    assert!(service.consume("hot", &opts).await.unwrap().allowed);

    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (service, done, seen) = (service.clone(), Arc::clone(&done), Arc::clone(&seen));
            tokio::spawn(async move {
                let opts = Options::new().limit(LIMIT).window(LONG);
                while !done.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = service.consume("hot", &opts).await;
                    let now = Instant::now();
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    s.slowest = s.slowest.max(now - started);
                    match result {
                        Ok(d) => {
                            assert!(d.allowed, "refused below the limit: {d:?}");
                            s.admitted.push(now);
                        }
                        Err(Error::Store { .. } | Error::Timeout { .. }) => s.refused.push(now),
                        Err(e) => panic!("an answer outside the deny policy: {e}"),
                    }
                }
            })
        })
        .collect();
    // Real time: the kill must land while calls are in flight.
    let wait = |what: &str, f: &dyn Fn(&Seen) -> bool, secs: u64| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f(&seen.lock().unwrap_or_else(|e| e.into_inner())) {
            assert!(Instant::now() < deadline, "waited too long for {what}");
            assert!(
                !tasks.iter().any(|t| t.is_finished()),
                "a load task stopped"
            );
            // Waiting on a real cluster's failover under load, bounded by the deadline.
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait(
        "admissions before the kill",
        &|s| s.admitted.len() > 1_000,
        20,
    );

    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("hot")
        .query(&mut cluster.nodes[0].connection())
        .unwrap();
    let master = cluster.master_of(slot).expect("a master serves the key");
    cluster.nodes[master].stop();
    let killed = Instant::now();
    // Resumes once the replica is promoted: bounded by the node timeout, the election and
    // the client's slot refresh.
    wait(
        "decisions after the failover",
        &|s| s.admitted.iter().filter(|t| **t > killed).count() > 500,
        20,
    );
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a load task panicked");
    }
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    let promoted = cluster
        .master_of(slot)
        .expect("a replica took over the slot");
    assert_ne!(promoted, master);

    let status = service.status("hot", &opts).await.unwrap();
    // The first call, plus the tasks'.
    let told = 1 + seen.admitted.len() as u64;
    let recorded = LIMIT - status.remaining;
    let lost = told.saturating_sub(recorded);
    let in_lag = seen
        .admitted
        .iter()
        .filter(|t| **t <= killed && killed - **t <= LAG)
        .count() as u64;
    let first_after = seen.admitted.iter().filter(|t| **t > killed).min().copied();
    let refused_during = seen.refused.iter().filter(|t| **t > killed).count();
    eprintln!(
        "failover: admitted {told}, recorded {recorded}, lost {lost} (bound: {in_lag} admitted in the \
         {LAG:?} before the kill); refused by the policy during the failover {refused_during}; \
         decisions resumed {:?} after the kill; slowest call {:?}",
        first_after.map(|t| t - killed),
        seen.slowest
    );
    assert!(seen.slowest < BOUND, "a call took {:?}", seen.slowest);
    assert!(
        refused_during > 0,
        "the failover was seen, and refused (deny)"
    );
    assert!(
        lost <= in_lag,
        "the failover lost {lost} admissions, more than the {in_lag} acknowledged in the {LAG:?} before the kill"
    );
    // Calls refused by the policy may have been counted by Redis without being admitted: the
    // record can only exceed what callers were told by those.
    assert!(recorded <= told + seen.refused.len() as u64);
}
