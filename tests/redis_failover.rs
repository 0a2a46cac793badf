//! A Redis Cluster master killed under load (feature `redis`): three masters with a replica
//! each on loopback; tasks spend continuously from one key while its master is SIGKILLed.
//! Calls answer by the policy (deny) within the timeout during the failover, resume once the
//! replica is promoted, and the admissions the failover lost (acknowledged by the dead
//! master, not yet replicated: Redis replicates asynchronously) are measured and bounded.
//!
//! Leases (`RedisOptions::leases`) under the same failover, and under
//! `FailurePolicy::Local` on a single server that is killed or frozen: what they admit above
//! the limit is measured and bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use ratelimit::{
    Config, Decision, Error, FailurePolicy, LeaseOptions, Options, RateLimitService, RedisOptions,
    StoreConfig, Strategy,
};
use ratelimit_tests::redis_server::{prefix, RedisCluster, RedisServer};

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

/// The configuration of a service over `options`, its keys under prefix `p`.
fn config(options: RedisOptions, p: &str) -> Config {
    Config::builder()
        .key_prefix(p)
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap()
}

/// `consume` on the key "hot": its answer, when it returned and how long it took.
async fn timed(
    service: &RateLimitService,
    opts: &Options,
) -> (Result<Decision, Error>, Instant, Duration) {
    let started = Instant::now();
    let result = service.consume("hot", opts).await;
    let now = Instant::now();
    (result, now, now - started)
}

/// Polls `ready` until it holds, for at most `secs` seconds.
fn wait_until(what: &str, secs: u64, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(Instant::now() < deadline, "waited too long for {what}");
        // Waiting on a real cluster's failover under load, bounded by the deadline.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The cluster slot of `key` (the service hash-tags it, so its own slot).
fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.nodes[0].connection())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_over_to_its_replica_and_the_overshoot_is_bounded() {
    let mut cluster = RedisCluster::start_with_replicas();
    let p = prefix("failover");
    let options = RedisOptions::cluster(cluster.urls()).timeout(TIMEOUT);
    let service = RateLimitService::new(config(options, &p)).unwrap();
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
                    let (result, now, took) = timed(&service, &opts).await;
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    s.slowest = s.slowest.max(took);
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
        wait_until(what, secs, || {
            assert!(
                !tasks.iter().any(|t| t.is_finished()),
                "a load task stopped"
            );
            f(&seen.lock().unwrap_or_else(|e| e.into_inner()))
        });
    };
    wait(
        "admissions before the kill",
        &|s| s.admitted.len() > 1_000,
        20,
    );

    let slot = slot_of(&cluster, "hot");
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

/// Units per lease grant in the lease tests.
const SLICE: u64 = 32;
/// The leased key's limit under the failover: reached only after the replica took over.
const LEASED_LIMIT: u64 = 3_000;
/// After the kill, no grant is answered for longer than this (failure detection alone takes
/// `cluster-node-timeout`, 1 s): admissions recorded up to then may come from grants the dead
/// master acknowledged whose callers were slow to record them.
const STILL_OLD: Duration = Duration::from_millis(500);

/// A leased call may wait for the grant another call has in flight, then send its own: both
/// within the call's one timeout (it took twice the timeout while each had its own), plus
/// the scheduling slack of `BOUND`.
const LEASE_BOUND: Duration = BOUND;

/// What the lease tasks of the failover saw.
#[derive(Default)]
struct Leased {
    slowest: Duration,
    /// When each admitted call returned, and through which process (service).
    admitted: Vec<(Instant, usize)>,
    /// Refused with the store's error (deny), and by the limit.
    refused: Vec<Instant>,
    limit_refusals: u64,
}

/// Two processes (services) leasing slices of one key (fixed window, 3,000) spend it, 4 tasks
/// each, until the limit refuses them; the key's master is killed mid-run. Leases on a
/// Cluster do not end with the failover (redis-rs reconnects unseen), so a grant the dead
/// master acknowledged and never replicated is spent in full on top of the new master's
/// count: at most one slice per grant acknowledged in the replication-lag window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_over_a_failover_overshoot_by_at_most_a_slice_per_lost_grant() {
    let mut cluster = RedisCluster::start_with_replicas();
    let p = prefix("lease-failover");
    let opts = Options::new()
        .limit(LEASED_LIMIT)
        .window(LONG)
        .strategy(Strategy::FixedWindow);
    let processes: Vec<RateLimitService> = (0..2)
        .map(|_| {
            let options = RedisOptions::cluster(cluster.urls())
                .timeout(TIMEOUT)
                .leases(LeaseOptions::new(SLICE));
            RateLimitService::new(config(options, &p)).unwrap()
        })
        .collect();

    let seen = Arc::new(Mutex::new(Leased::default()));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (process, service) = (t % 2, processes[t % 2].clone());
            let (seen, opts) = (Arc::clone(&seen), opts.clone());
            tokio::spawn(async move {
                loop {
                    let (result, now, took) = timed(&service, &opts).await;
                    {
                        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                        s.slowest = s.slowest.max(took);
                        match result {
                            Ok(d) if d.allowed => s.admitted.push((now, process)),
                            Ok(_) => {
                                s.limit_refusals += 1;
                                return;
                            }
                            Err(Error::Store { .. } | Error::Timeout { .. }) => s.refused.push(now),
                            Err(e) => panic!("an answer outside the deny policy: {e}"),
                        }
                    }
                    // Paced (real time), so that the limit lasts past the failover: about 4,000
                    // calls a second across the 8 tasks at most.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect();
    let admitted = || {
        seen.lock()
            .unwrap_or_else(|e| e.into_inner())
            .admitted
            .len()
    };
    wait_until("admissions before the kill", 20, || {
        assert!(!tasks.iter().any(|t| t.is_finished()), "a task stopped");
        admitted() > 600
    });
    let slot = slot_of(&cluster, "hot");
    let master = cluster.master_of(slot).expect("a master serves the key");
    cluster.nodes[master].stop();
    let killed = Instant::now();
    let at_kill = admitted() as u64;
    assert!(
        at_kill + 2 * SLICE < LEASED_LIMIT / 2,
        "the limit was nearly spent before the kill ({at_kill})"
    );
    wait_until("every task refused by the limit", 30, || {
        tasks.iter().all(|t| t.is_finished())
    });
    for task in tasks {
        task.await.expect("a lease task panicked");
    }
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    assert_ne!(cluster.master_of(slot), Some(master));
    // Looks see the units leased out as spent: the whole limit went in grants.
    let status = processes[0].status("hot", &opts).await.unwrap();

    let told = seen.admitted.len() as u64;
    // Between two grants a process spends the whole slice of the first (cost 1, a full slice:
    // far from the limit), so `n` admissions in a window hold at most (n - 1) / SLICE + 1
    // acknowledged grants.
    let window = killed - LAG..=killed + STILL_OLD;
    let grants_in_lag: u64 = (0..processes.len())
        .map(|p| {
            let n = seen
                .admitted
                .iter()
                .filter(|(t, at)| *at == p && window.contains(t))
                .count() as u64;
            if n == 0 {
                0
            } else {
                (n - 1) / SLICE + 1
            }
        })
        .sum();
    let bound = LEASED_LIMIT + grants_in_lag * SLICE;
    let after = seen
        .admitted
        .iter()
        .filter(|(t, _)| *t > killed + STILL_OLD);
    let resumed = after.map(|(t, _)| *t - killed).min();
    let refused_during = seen.refused.iter().filter(|t| **t > killed).count();
    eprintln!(
        "lease failover (slices of {SLICE}, limit {LEASED_LIMIT}, 2 processes x 4 tasks): \
         admitted {told} ({at_kill} before the kill), over the limit {}; bound {bound} \
         (at most {grants_in_lag} grants acknowledged in the {LAG:?} before the kill); refused by \
         the policy during the failover {refused_during}; resumed {resumed:?} after the kill; \
         slowest call {:?}",
        told.saturating_sub(LEASED_LIMIT),
        seen.slowest
    );
    assert_eq!(status.remaining, 0, "the limit was reached");
    assert_eq!(
        seen.limit_refusals, 8,
        "every task ended refused by the limit"
    );
    assert!(seen.slowest < LEASE_BOUND, "a call took {:?}", seen.slowest);
    assert!(refused_during > 0, "the failover was seen, and refused");
    assert!(
        resumed.is_some(),
        "the new master granted slices after the failover"
    );
    assert!(
        told <= bound,
        "{told} admitted: more than the limit and a slice per grant acknowledged in the {LAG:?} \
         before the kill ({bound})"
    );
}

/// `limit` per window under `strategy` (the bucket refilling one token a window).
fn leased_options(limit: u64, strategy: Strategy) -> Options {
    let options = Options::new().limit(limit).window(LONG).strategy(strategy);
    match strategy {
        Strategy::TokenBucket => options.refill(1),
        _ => options,
    }
}

/// `calls` calls at once on `key`: (admitted from the lease, admitted from memory, errors).
/// The service runs on a hand-driven clock far from the wall clock: a decision Redis (or its
/// lease) made has a `reset_at` on Redis' clock, one the in-memory fallback made on the
/// service's.
async fn spend(service: &RateLimitService, key: &str, opts: &Options, calls: usize) -> [u64; 3] {
    let by_redis = |d: &Decision| d.reset_at() > std::time::UNIX_EPOCH + LONG * 100;
    let mut seen = [0; 3];
    for result in join_all((0..calls).map(|_| service.consume(key, opts))).await {
        match result {
            Ok(d) if d.allowed && by_redis(&d) => seen[0] += 1,
            Ok(d) if d.allowed => seen[1] += 1,
            Ok(_) => {}
            Err(_) => seen[2] += 1,
        }
    }
    seen
}

/// Leases under `FailurePolicy::Local { pods: 2 }` on a single server that is killed (SIGKILL)
/// or frozen (SIGSTOP, so calls time out). A lease's unspent units may be spent until the
/// process sees the failure (nothing asks Redis meanwhile: they were counted there before);
/// once a connection is lost, no leased unit is spent, and the process decides from memory
/// with half the limit. What one process admits through the outage is at most its slice
/// (counted in Redis) plus `limit / pods`: leases add nothing to the policy's own bound.
#[tokio::test]
async fn leases_under_the_local_policy_stop_at_a_lost_connection_and_add_nothing_to_its_bound() {
    const LIMIT: u64 = 128;
    const PODS: u32 = 2;
    let share = LIMIT / u64::from(PODS);
    let mut server = RedisServer::start();
    for strategy in [Strategy::FixedWindow, Strategy::TokenBucket] {
        for frozen in [false, true] {
            let options = RedisOptions::new(server.url())
                .timeout(TIMEOUT)
                .leases(LeaseOptions::new(SLICE))
                .on_failure(FailurePolicy::Local { pods: PODS });
            let config = config(options, &prefix("lease-local"));
            let service =
                RateLimitService::with_clock(config, Arc::new(ratelimit_tests::clock())).unwrap();
            let opts = leased_options(LIMIT, strategy);
            // One grant each: 5 units spent, 27 left in the process.
            for key in ["hot", "late"] {
                assert_eq!(spend(&service, key, &opts, 5).await, [5, 0, 0]);
            }
            let fault = if frozen { "SIGSTOP" } else { "SIGKILL" };
            if frozen {
                server.pause();
            } else {
                server.stop();
            }
            // Real time, bounded by the timeout per batch: a frozen server's calls time out.
            let started = Instant::now();
            let mut hot = [0; 3];
            for _ in 0..2 {
                let batch = spend(&service, "hot", &opts, 100).await;
                (0..3).for_each(|i| hot[i] += batch[i]);
            }
            // The failure has been seen (calls were decided from memory): a lease still
            // holding units is not spent any more.
            let late = spend(&service, "late", &opts, 40).await;
            let took = started.elapsed();
            eprintln!(
                "{strategy}, {fault}, Local {{ pods: {PODS} }}, limit {LIMIT}, slices of \
                 {SLICE}: during the outage \"hot\" admitted {} leased + {} from memory \
                 ({} errors), \"late\" (27 leased units left) {} leased + {} from memory; {took:?}",
                hot[0], hot[1], hot[2], late[0], late[1]
            );
            assert!(hot[0] <= SLICE - 5, "{strategy}, {fault}: {hot:?}");
            assert_eq!(hot[1], share, "{strategy}, {fault}: {hot:?}");
            assert_eq!(hot[2], 0, "the policy answers every call");
            assert_eq!(
                late,
                [0, 40, 0],
                "{strategy}, {fault}: leased units spent after the connection was lost"
            );
            // Everything \"hot\" admitted: at most its slice (in Redis) and the share.
            assert!(5 + hot[0] + hot[1] <= SLICE + share);
            if frozen {
                server.resume();
            } else {
                server.restart();
            }
        }
    }
}
