//! Redis faults under load (feature `redis`): tasks call continuously through a `deny` and an
//! `allow` service while the server is paused (`CLIENT PAUSE`), blocked (`DEBUG SLEEP`),
//! read-only (a replica) or out of memory (`maxmemory` with `noeviction`). Every call answers
//! within the store's timeout plus a margin, with the policy's answer; decisions are exact
//! again after recovery; no limiter key is ever left without an expiry.
//!
//! Real time on purpose: calls must be in flight while the fault starts and ends. No limit is
//! checked by waiting: the limits are either far from reached or counted exactly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratelimit::{
    Config, Error, FailurePolicy, Options, RateLimitService, RedisOptions, StoreConfig, Strategy,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};

/// Long enough that no window ends during a test.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);
const TIMEOUT: Duration = Duration::from_millis(200);
/// The timeout plus scheduling slack on a busy 2-core machine.
const BOUND: Duration = Duration::from_millis(600);
/// The key every deny task also spends from: at most this many admissions, ever.
const LIMITED: u64 = 60;

/// A fresh prefix that is no other prefix's beginning, so `SCAN MATCH <prefix>*` finds this
/// test's keys only.
fn fresh(name: &str) -> String {
    format!("{}x", prefix(name))
}

fn service(url: &str, prefix: &str, policy: FailurePolicy) -> RateLimitService {
    let options = RedisOptions::new(url).timeout(TIMEOUT).on_failure(policy);
    let config = Config::builder()
        .key_prefix(prefix)
        .store(StoreConfig::Redis(options))
        .build()
        .expect("valid configuration");
    RateLimitService::new(config).expect("service")
}

/// What the tasks saw.
#[derive(Debug, Default)]
struct Seen {
    slowest: Duration,
    /// Decided by Redis.
    decided: u64,
    /// `allow` admitting a call Redis could not decide (a decision that counted nothing:
    /// `limit == u64::MAX`).
    admitted_by_policy: u64,
    /// `deny` refusing with the store's error.
    refused_by_policy: u64,
    /// Admissions on the [`LIMITED`] key, and refusals of it by the policy.
    limited_admitted: u64,
    limited_errors: u64,
}

/// Tasks calling continuously until stopped: 3 on `deny`, 3 on `allow`.
struct Load {
    done: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(deny: &RateLimitService, allow: &RateLimitService) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut tasks = Vec::new();
        for (t, (service, deny)) in [(deny, true), (allow, false)]
            .into_iter()
            .flat_map(|s| std::iter::repeat_n(s, 3))
            .enumerate()
        {
            let (service, done, seen) = (service.clone(), Arc::clone(&done), Arc::clone(&seen));
            tasks.push(tokio::spawn(async move {
                // Every strategy's script sees the fault.
                // Never reached in a run; an hour, so that the sliding window counter can count
                // it exactly in Redis.
                let open = Options::new()
                    .limit(100_000)
                    .window(Duration::from_secs(3_600))
                    .strategy(Strategy::ALL[t % 4]);
                let limited = Options::new().limit(LIMITED).window(LONG);
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    n += 1;
                    let on_limited = deny && n & 1 == 0;
                    let (key, opts) = if on_limited {
                        ("limited".to_owned(), &limited)
                    } else {
                        (format!("k{t}-{}", n % 50), &open)
                    };
                    let started = Instant::now();
                    let result = service.consume(&key, opts).await;
                    let took = started.elapsed();
                    // Never held across a panic by another task: a poisoned lock is still read.
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    s.slowest = s.slowest.max(took);
                    match result {
                        Ok(d) if on_limited => {
                            s.decided += 1;
                            s.limited_admitted += u64::from(d.allowed);
                        }
                        // An allowance by policy counted nothing: `Decision::unlimited`'s
                        // limit (so an HTTP answer advertises no budget).
                        Ok(d) if !deny && d.allowed && d.limit == u64::MAX => {
                            s.admitted_by_policy += 1
                        }
                        Ok(d) if d.allowed && d.remaining > 0 => s.decided += 1,
                        Ok(d) => panic!("a call far from its limit was refused: {d:?}"),
                        Err(Error::Store { .. } | Error::Timeout { .. }) if deny => {
                            s.refused_by_policy += 1;
                            s.limited_errors += u64::from(on_limited);
                        }
                        Err(e) => panic!("deny: {deny}, an answer outside the policy: {e}"),
                    }
                }
            }));
        }
        Load { done, seen, tasks }
    }

    /// A snapshot of what the tasks saw so far.
    fn seen(&self) -> (u64, u64, u64) {
        let s = self.seen.lock().unwrap();
        (s.decided, s.admitted_by_policy, s.refused_by_policy)
    }

    /// Waits (real time, bounded) until what the tasks saw passes `f`.
    async fn wait_for(&mut self, what: &str, f: impl Fn(&Seen) -> bool) {
        if let Err(e) = self.try_wait_for(what, f).await {
            self.done.store(true, Ordering::Relaxed);
            for task in self.tasks.drain(..) {
                if let Err(why) = task.await {
                    std::panic::resume_unwind(why.into_panic());
                }
            }
            panic!("{e}");
        }
    }

    async fn try_wait_for(&self, what: &str, f: impl Fn(&Seen) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !f(&self.seen.lock().unwrap()) {
            if Instant::now() > deadline {
                return Err(format!(
                    "waited too long for {what}: {:?}",
                    self.seen.lock().unwrap()
                ));
            }
            // A task that panicked says why when the load stops.
            if self.tasks.iter().any(|t| t.is_finished()) {
                return Err("a load task stopped".into());
            }
            // Polling real servers under real load, bounded by the deadline: no limit is
            // checked by this wait.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    async fn stop(self) -> Seen {
        self.done.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a load task panicked");
        }
        Arc::try_unwrap(self.seen).unwrap().into_inner().unwrap()
    }
}

/// Every call answered in time, both policies were seen at work, and the limited key was
/// never over-admitted.
fn check(seen: &Seen, fault: &str) {
    // The figures for RELIABILITY.md (`-- --nocapture`).
    eprintln!("{fault}: {seen:?}");
    assert!(
        seen.slowest < BOUND,
        "{fault}: a call took {:?}",
        seen.slowest
    );
    assert!(
        seen.refused_by_policy > 0,
        "{fault}: deny refused during the fault"
    );
    assert!(
        seen.admitted_by_policy > 0,
        "{fault}: allow admitted during the fault"
    );
    assert!(
        seen.limited_admitted <= LIMITED,
        "{fault}: {} admitted on a limit of {LIMITED}",
        seen.limited_admitted
    );
}

/// After recovery: a fresh key under each service admits exactly its limit (polled, bounded,
/// until Redis decides again), and the limited key is spent to exactly its limit, less calls
/// Redis counted after their caller had given up (refused, never admitted).
async fn exact_again(deny: &RateLimitService, allow: &RateLimitService, seen: &Seen) {
    let five = Options::new().limit(5).window(LONG);
    for (name, s) in [("deny", deny), ("allow", allow)] {
        let key = format!("after-{name}");
        let deadline = Instant::now() + Duration::from_secs(10);
        // Redis is back when a call is decided by it (remaining 4, not the policy's
        // allowance, which counted nothing).
        loop {
            match s.consume(&key, &five).await {
                Ok(d) if d.remaining == 4 => break,
                Ok(d) => assert!(d.allowed && d.limit == u64::MAX, "{name}: {d:?}"),
                Err(Error::Store { .. } | Error::Timeout { .. }) => {}
                Err(e) => panic!("{name}: {e}"),
            }
            assert!(Instant::now() < deadline, "{name}: Redis decides again");
            // Waiting for a real server to come back, bounded by the deadline.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut admitted = 1;
        for _ in 0..7 {
            admitted += u32::from(s.consume(&key, &five).await.unwrap().allowed);
        }
        assert_eq!(admitted, 5, "{name}: exact after recovery");
    }
    let limited = Options::new().limit(LIMITED).window(LONG);
    let mut admitted = seen.limited_admitted;
    while deny.consume("limited", &limited).await.unwrap().allowed {
        admitted += 1;
    }
    assert!(
        admitted <= LIMITED,
        "{admitted} admitted on a limit of {LIMITED}"
    );
    assert!(
        admitted + seen.limited_errors >= LIMITED,
        "only calls refused during the fault may have spent without being admitted: \
         {admitted} admitted, {} refused",
        seen.limited_errors
    );
}

/// No key under `prefix` without an expiry.
fn every_key_expires(c: &mut redis::Connection, prefix: &str) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(c)
        .unwrap();
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(c).unwrap();
        // -1: no expiry; 0 is an expiry due within the millisecond; -2: gone since KEYS.
        assert_ne!(ttl, -1, "{key} has no expiry");
    }
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pause_and_debug_sleep_answer_by_policy_within_the_timeout() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let p = fresh("pause");
    let deny = service(&server.url(), &format!("{p}-d"), FailurePolicy::Deny);
    let allow = service(&server.url(), &format!("{p}-a"), FailurePolicy::Allow);
    let mut admin = server.connection();

    // CLIENT PAUSE: the server holds every client's commands for 1.5 s.
    let mut load = Load::start(&deny, &allow);
    load.wait_for("decisions before the fault", |s| s.decided > 100)
        .await;
    let before = load.seen();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_500)
        .arg("ALL")
        .query(&mut admin)
        .unwrap();
    load.wait_for("both policies at work", |s| {
        s.refused_by_policy > before.2 && s.admitted_by_policy > before.1
    })
    .await;
    // Redis decides again once the pause is over.
    let during = load.seen();
    load.wait_for("decisions after the pause", |s| s.decided > during.0 + 100)
        .await;

    // DEBUG SLEEP: the server is blocked for 1.5 s (run from a thread of its own: the
    // command itself does not answer until the sleep is over).
    let after_pause = load.seen();
    let url = server.url();
    let sleeper = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(1.5)
            .query(&mut c)
            .unwrap();
    });
    load.wait_for("both policies at work", |s| {
        s.refused_by_policy > after_pause.2 && s.admitted_by_policy > after_pause.1
    })
    .await;
    sleeper.join().unwrap();
    let during = load.seen();
    load.wait_for("decisions after the sleep", |s| s.decided > during.0 + 100)
        .await;
    let seen = load.stop().await;
    check(&seen, "pause and sleep");
    exact_again(&deny, &allow, &seen).await;
    assert!(every_key_expires(&mut admin, &p) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_replica_answers_by_policy_and_counts_exactly_once_promoted() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let p = fresh("replica");
    let mut admin = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut admin)
        .unwrap();
    // Polls until the replica has synchronised (a moment on loopback).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut admin)
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica synchronised");
        // Waiting for real replication, bounded by the deadline.
        std::thread::sleep(Duration::from_millis(20));
    }
    // The store points at the replica: every write fails with READONLY.
    let deny = service(&replica.url(), &format!("{p}-d"), FailurePolicy::Deny);
    let allow = service(&replica.url(), &format!("{p}-a"), FailurePolicy::Allow);
    match deny
        .consume("first", &Options::new().limit(5).window(LONG))
        .await
    {
        Err(Error::Store { message }) => {
            assert!(message.contains("read only replica"), "{message}")
        }
        other => panic!("a read-only replica refuses under deny: {other:?}"),
    }
    let mut load = Load::start(&deny, &allow);
    load.wait_for("both policies at work", |s| {
        s.refused_by_policy > 50 && s.admitted_by_policy > 50
    })
    .await;
    // Promoted: Redis decides again, with no restart of the services.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut admin)
        .unwrap();
    load.wait_for("decisions once promoted", |s| s.decided > 200)
        .await;
    let seen = load.stop().await;
    check(&seen, "read-only replica");
    exact_again(&deny, &allow, &seen).await;
    assert!(every_key_expires(&mut admin, &p) > 0);
    assert_eq!(
        every_key_expires(&mut primary.connection(), &p),
        0,
        "nothing reached the primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_under_noeviction_answers_by_policy_and_leaves_no_key_without_expiry() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let p = fresh("oom");
    let deny = service(&server.url(), &format!("{p}-d"), FailurePolicy::Deny);
    let allow = service(&server.url(), &format!("{p}-a"), FailurePolicy::Allow);
    let mut admin = server.connection();
    let mut load = Load::start(&deny, &allow);
    load.wait_for("decisions before the fault", |s| s.decided > 100)
        .await;
    // Any memory in use is now above the limit: every write is refused with OOM.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut admin)
        .unwrap();
    load.wait_for("both policies at work", |s| {
        s.refused_by_policy > 50 && s.admitted_by_policy > 50
    })
    .await;
    let oom = deny
        .consume("oom-probe", &Options::new().limit(5).window(LONG))
        .await;
    assert!(
        matches!(&oom, Err(Error::Store { message }) if message.contains("OOM")),
        "{oom:?}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut admin)
        .unwrap();
    let during = load.seen();
    load.wait_for("decisions after the fault", |s| s.decided > during.0 + 100)
        .await;
    let seen = load.stop().await;
    check(&seen, "out of memory");
    exact_again(&deny, &allow, &seen).await;
    assert!(every_key_expires(&mut admin, &p) > 0);
}
