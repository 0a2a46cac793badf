//! helper-103's probes of the policy's answer to a call whose read or raise of the fleet's
//! horizon record fails unanswered (`Site::failed`, `Store::answer_failure`, helper-97):
//! what else such a call meets on its way, compared with what the same call meets when the
//! store itself fails (the plain failure path, `Failover::decide_now` / `decide`), or with
//! what the store holds after.
//!
//! Each service's store is a [`Hooked`] Redis store: its reads and raises of the record fail
//! while `failing` is set, its decisions (`decide`, `decide_all`) fail while `down` is set,
//! and what it answers in the process without asking Redis (`decide_now`: a refusal held, a
//! leased unit) is the Redis store's own throughout, as when Redis is away. Under a
//! [`Failover`] unless said otherwise.
//!
//! The configuration: [`bucket`]`("a")` as the default tier, and a tier `"x"`, a fixed window
//! of 8 an hour, which no reload moves. A service reloaded to [`bucket`]`("b")` at +0 s keeps
//! the replaced configuration: its first call reads the record, and the next read is due at
//! +60 s (the old bucket's window); a service never reloaded reads nothing. The calls probed
//! are on tier `"x"` (no transition: one state, one store key).
//!
//! Found and closed: a refusal the Redis store held in the process was passed over by the
//! policy's answer (1 admitted under `Allow` and `Local` against 0 on the plain failure
//! path: `Failover::answer_failure` takes it first); a try of `until_ready`, and an ask of a
//! waiter in the queue, kept their first raise's failure after the record answered again and
//! were answered by `Local`'s fresh share where Redis refused (1 against 0 each: each try
//! and each ask is the policy's only where its own read or raise failed, the queue's head
//! raising where due); a stacked call refused by its read or raise was counted nowhere in
//! the statistics (2 errors of 4). Holding: the local share, refunds, a store that answers
//! failures without an answer, a call awaited after its read fell due, leases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Horizon, Request, Stacked, Store};
use ratelimit::{
    ConfigBuilder, Decision, Error, Failover, FailurePolicy, LeaseOptions, ManualClock, Options,
    RateLimitService, RedisOptions, RedisStore, Strategy, Tier,
};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{on_its_store, until_depth, Forward, Hooks, START};

/// The policies that answer a failure otherwise than by its error.
const POLICIES: [FailurePolicy; 2] = [FailurePolicy::Allow, FailurePolicy::Local { pods: 2 }];

/// The limit of tier `"x"` (an hour's window).
const X: u64 = 8;

/// The store's error, as a lost link answers.
fn lost() -> Error {
    Error::Store {
        message: "out of reach".into(),
    }
}

/// A Redis store whose record fails while `failing`, whose decisions fail while `down`, and
/// which says it answers failures by a policy of its own where `answers` (without one:
/// [`Store::answer_failure`]'s default). The Redis store's answers in the process (held
/// refusals, leased units) stand, Redis away or not: they ask nothing of it.
type Hooked = Forward<RedisStore, Faults>;

/// What a [`Hooked`] store is told to fail.
#[derive(Clone)]
struct Faults {
    failing: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
    answers: bool,
    /// Before `failing`: the next `n` reads or raises fail, and the one after them sets the
    /// service's clock to `to` first, then goes to Redis (`Some((n, to))`, once).
    script: Arc<Mutex<Option<(u32, Duration)>>>,
    clock: ManualClock,
}

impl Faults {
    fn down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }
}

impl Hooks<RedisStore> for Faults {
    async fn decide(&self, inner: &RedisStore, request: Request<'_>) -> Result<Decision, Error> {
        match self.down() {
            true => Err(lost()),
            false => Store::decide(inner, request).await,
        }
    }
    async fn decide_all(
        &self,
        inner: &RedisStore,
        stacked: Stacked<'_>,
    ) -> Result<Vec<Decision>, Error> {
        match self.down() {
            true => Err(lost()),
            false => Store::decide_all(inner, stacked).await,
        }
    }
    async fn horizon(
        &self,
        inner: &RedisStore,
        prefix: &str,
        raise: Horizon,
    ) -> Result<Horizon, Error> {
        let scripted = {
            let mut script = self.script.lock().unwrap();
            match script.as_mut() {
                Some((n, _)) if *n > 0 => {
                    *n -= 1;
                    Some(Err(lost()))
                }
                Some((_, to)) => {
                    self.clock.set(*to);
                    *script = None;
                    Some(Ok(()))
                }
                None => None,
            }
        };
        match scripted {
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => return Store::horizon(inner, prefix, raise).await,
            None => {}
        }
        match self.failing.load(Ordering::Relaxed) {
            true => Err(lost()),
            false => Store::horizon(inner, prefix, raise).await,
        }
    }
    fn answers_failures(&self, _: &RedisStore) -> bool {
        self.answers
    }
}

/// [`bucket`]`(name)` with tier `"x"`.
fn config(name: &str) -> ConfigBuilder {
    let x = Tier::new("x", X)
        .window(Duration::from_secs(3600))
        .strategy(Strategy::FixedWindow);
    bucket(name).tier(x)
}

/// Calls on tier `"x"`.
fn x() -> Options {
    Options::new().tier("x")
}

/// A service, its clock and its store's flags (`failing`, `down`).
struct Probe {
    service: RateLimitService,
    clock: ManualClock,
    failing: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
    script: Arc<Mutex<Option<(u32, Duration)>>>,
}

impl Probe {
    /// A service on `server` under `policy` (`None`: the [`Hooked`] store alone, saying it
    /// answers failures itself), reloaded to [`bucket`]`("b")` at +0 s where `reloaded`.
    fn new(
        server: &RedisServer,
        name: &str,
        policy: Option<FailurePolicy>,
        reloaded: bool,
    ) -> Probe {
        Probe::on(server, &prefix(name), policy, reloaded)
    }

    /// [`new`](Self::new) under key prefix `at`.
    fn on(server: &RedisServer, at: &str, policy: Option<FailurePolicy>, reloaded: bool) -> Probe {
        Probe::on_config(server, at, policy, reloaded, config("a"), None)
    }

    /// [`on`](Self::on) with the configuration `first` and the Redis store's `leases`.
    fn on_config(
        server: &RedisServer,
        at: &str,
        policy: Option<FailurePolicy>,
        reloaded: bool,
        first: ConfigBuilder,
        leases: Option<LeaseOptions>,
    ) -> Probe {
        let (failing, down, script) = (Arc::default(), Arc::default(), Arc::default());
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let options = match leases {
            Some(leases) => options.leases(leases),
            None => options,
        };
        let clock = ManualClock::new(START);
        let hooks = Faults {
            failing: Arc::clone(&failing),
            down: Arc::clone(&down),
            answers: policy.is_none(),
            script: Arc::clone(&script),
            clock: clock.clone(),
        };
        let hooked: Hooked = Forward::new(RedisStore::new(options).unwrap(), hooks);
        let first = first.key_prefix(at).build().unwrap();
        let at = Arc::new(clock.clone());
        let service = match policy {
            Some(policy) => {
                let store = Failover::new(hooked, policy);
                RateLimitService::with_store(first, store, at)
            }
            None => RateLimitService::with_store(first, hooked, at),
        };
        let service = service.unwrap();
        if reloaded {
            service.reload(on_its_store(&service, config("b"))).unwrap();
        }
        Probe {
            service,
            clock,
            failing,
            down,
            script,
        }
    }

    fn at(&self, secs: u64) {
        self.clock.set(START + Duration::from_secs(secs));
    }

    fn failing(&self, on: bool) {
        self.failing.store(on, Ordering::Relaxed);
    }

    fn down(&self, on: bool) {
        self.down.store(on, Ordering::Relaxed);
    }

    /// Calls of `options` on `key` admitted out of `n` (an error counts as refused).
    async fn admitted(&self, key: &str, options: &Options, n: usize) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            let decided = self.service.consume(key, options).await;
            admitted += usize::from(decided.is_ok_and(|d| d.allowed));
        }
        admitted
    }
}

/// Whether `decided` is Redis' answer under tier `"x"` (its limit of 8), not the policy's
/// (unlimited under `Allow`, the share of 4 under `Local`).
fn by_redis(decided: &Result<Decision, Error>) -> bool {
    decided.as_ref().is_ok_and(|d| d.limit == X)
}

// ---------------------------------------------------------------------------------------
// 1. A refusal the store holds in the process.
// ---------------------------------------------------------------------------------------

/// Key `"k"` of tier `"x"` spent (8) and refused by Redis at +1 s: the Redis store holds the
/// refusal (an hour). At +61 s Redis is away (`down`, the record `failing` too) and one more
/// call: on the service that never reloaded, the plain failure path answers it with the
/// refusal held (`Failover::decide_now`: "a refusal still in force stands under every
/// policy"), 0; on the reloaded one, whose read of the record is due, the policy answered it
/// alone (`answer_failure`), past the refusal held: 1 under `Allow` (unlimited) and under
/// `Local` (the share of 4, fresh in memory) — admitted where the plain failure path, and
/// Redis, refuse. Closed (`Failover::answer_failure` takes a refusal the store holds without
/// asking its backend first, as `decide_now` does): 0 on both.
#[tokio::test]
async fn a_refusal_held_in_the_process_stands_before_the_policys_answer() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in POLICIES {
        for reloaded in [false, true] {
            let probe = Probe::new(&server, "h103-held", Some(policy), reloaded);
            probe.at(1);
            let mut counts = vec![probe.admitted("k", &x(), 9).await];
            probe.at(61);
            probe.failing(true);
            probe.down(true);
            counts.push(probe.admitted("k", &x(), 1).await);
            results.push((policy, reloaded, counts));
        }
    }
    for (policy, reloaded, counts) in &results {
        assert_eq!(
            counts,
            &[8, 0],
            "{policy:?}, reloaded {reloaded}: (all: {results:?})"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. The local share.
// ---------------------------------------------------------------------------------------

/// Under `Local { pods: 2 }` (a share of 4 of tier `"x"`'s 8): at +61 s the reloaded
/// service's read fails and 3 calls on `"k"` are answered by the policy (3 from the share);
/// then the record answers again while Redis' decisions fail, and 5 calls are answered by
/// the share as any store failure (`Failover::decide`): 1 more. 4 in all, the share. Would
/// catch a policy answer decided on another local state than a store failure's (another
/// key, another quota, a share of its own): 3 + 4 = 7; or by Redis (`Site::failed` not
/// routed: [1, 3, 4] seen so).
#[tokio::test]
async fn a_policy_answer_spends_the_local_share_a_store_failure_spends() {
    let server = RedisServer::start();
    let probe = Probe::new(
        &server,
        "h103-share",
        Some(FailurePolicy::Local { pods: 2 }),
        true,
    );
    probe.at(1);
    let mut counts = vec![probe.admitted("warm", &x(), 1).await];
    probe.at(61);
    probe.failing(true);
    counts.push(probe.admitted("k", &x(), 3).await);
    probe.failing(false);
    probe.down(true);
    counts.push(probe.admitted("k", &x(), 5).await);
    assert_eq!(counts, [1, 3, 1]);
}

// ---------------------------------------------------------------------------------------
// 3. A spend kept for a refund.
// ---------------------------------------------------------------------------------------

/// At +61 s the reloaded service's read fails and a spend kept for a refund (`spend`) on
/// `"k"` is answered by the policy: nothing to give back (`refundable` false, `refund`
/// `Ok(false)`), and Redis holds nothing of it: the record answering again, tier `"x"`'s 8
/// are all Redis' still. Would catch a policy answer stamped as a Redis spend (a refund
/// then given to Redis, which spent nothing) or the spend sent to Redis (7).
#[tokio::test]
async fn a_policy_answered_spend_gives_nothing_back_and_writes_nothing() {
    let server = RedisServer::start();
    for policy in POLICIES {
        let probe = Probe::new(&server, "h103-refund", Some(policy), true);
        probe.at(1);
        assert_eq!(probe.admitted("warm", &x(), 1).await, 1);
        probe.at(61);
        probe.failing(true);
        let spent = probe.service.spend("k", &x()).await.unwrap();
        assert!(spent.decision().allowed, "{policy:?}");
        assert_ne!(spent.decision().limit, X, "{policy:?}");
        assert!(!spent.refundable(), "{policy:?}");
        assert!(!spent.refund().await.unwrap(), "{policy:?}");
        probe.failing(false);
        assert_eq!(probe.admitted("k", &x(), 9).await, 8, "{policy:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. A store of one's own that says it answers failures, without an answer.
// ---------------------------------------------------------------------------------------

/// The [`Hooked`] store alone, saying it answers failures (`answers_failures`) but keeping
/// `answer_failure`'s default (the error). At +1 s a call with a quota of its own (a window
/// of its own, 2 h: the record raised first) whose raise fails is refused with the store's
/// error, nothing asked of Redis; at +61 s the reloaded service's read fails: a call on tier
/// `"x"` refused so too. The record answering again, the quota of its own's 8 are all Redis'
/// still, and tier `"x"`'s 8 too. Would catch the default admitting, or either call decided
/// by Redis (7).
#[tokio::test]
async fn a_store_that_answers_failures_without_an_answer_refuses_with_the_error() {
    let server = RedisServer::start();
    let probe = Probe::new(&server, "h103-own-store", None, true);
    probe.at(1);
    assert_eq!(probe.admitted("warm", &x(), 1).await, 1);
    probe.failing(true);
    let own = x().window("2h");
    let raised = probe.service.consume("own", &own).await;
    assert!(matches!(raised, Err(Error::Store { .. })), "{raised:?}");
    probe.at(61);
    let read = probe.service.consume("k", &x()).await;
    assert!(matches!(read, Err(Error::Store { .. })), "{read:?}");
    probe.failing(false);
    assert_eq!(probe.admitted("k", &x(), 9).await, 8);
    assert_eq!(probe.admitted("own", &own, 9).await, 8);
}

// ---------------------------------------------------------------------------------------
// 5. A call begun before its read was due, awaited after.
// ---------------------------------------------------------------------------------------

/// A site prepared at +59 s (current: no read due before +60 s) begins a call on `"p"`
/// (`try_consume`: the Redis store must be awaited, nothing spent); at +61 s, its read due
/// and failing, the call is awaited (`Pending::consume`): answered by the policy, never by
/// Redis on the site as worked out at +59 s (`Prepared::awaited` finds the site no longer
/// current and resolves the call again). Would catch the awaited half (`decide_later`)
/// asking Redis on a site whose read it skipped: 1 by Redis.
#[tokio::test]
async fn a_call_begun_before_its_read_was_due_and_awaited_after_is_the_policys() {
    let server = RedisServer::start();
    for policy in POLICIES {
        let probe = Probe::new(&server, "h103-pending", Some(policy), true);
        probe.at(1);
        assert_eq!(probe.admitted("warm", &x(), 1).await, 1);
        probe.at(59);
        let site = Arc::new(probe.service.prepare(&x()).unwrap());
        let pending = match site.try_consume("p") {
            ratelimit::Attempt::Pending(pending) => pending,
            ratelimit::Attempt::Decided(decided) => panic!("{policy:?}: decided {decided:?}"),
        };
        probe.at(61);
        probe.failing(true);
        let decided = pending.consume().await;
        assert!(decided.as_ref().is_ok_and(|d| d.allowed), "{decided:?}");
        assert!(!by_redis(&decided), "{policy:?}: {decided:?}");
        probe.failing(false);
        assert_eq!(probe.admitted("p", &x(), 9).await, 8, "{policy:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 6. What the statistics count.
// ---------------------------------------------------------------------------------------

/// Calls whose raise or read of the record fails, each counted once in the service's
/// totals. The reloaded service's first call (+1 s, its read answered) admitted; then with
/// the record `failing`, at +1 s a single call and a stacked one with a window of their own
/// (2 h: the record raised first), and at +61 s (a read due) a single call and a stacked one
/// on tier `"x"`. Under `Allow` the four are answered by the policy: 5 admitted; under
/// `Deny` they are refused with the store's error: 4 errors, as a single call's is counted
/// (`unresolved`, `record_and_return`). Found: a stacked call refused by its raise or read
/// was counted nowhere (`spend_stacked_in` returned the error as it came): 2 errors of 4.
/// Closed: counted as the call's error (`finish_stacked`, `unresolved_all`).
#[tokio::test]
async fn calls_whose_raise_or_read_fails_are_counted_once_each() {
    let server = RedisServer::start();
    let mut results = Vec::new();
    for policy in [FailurePolicy::Allow, FailurePolicy::Deny] {
        let probe = Probe::new(&server, "h103-stats", Some(policy), true);
        probe.at(1);
        let mut answered = vec![probe.admitted("warm", &x(), 1).await == 1];
        probe.failing(true);
        let own = x().window("2h");
        let calls = [(1, own), (61, x())];
        for (at, options) in calls {
            probe.at(at);
            let single = probe.service.consume("k", &options).await;
            let stacked = (probe.service)
                .consume_all(&[("k", &options), ("k2", &x().budget("other"))])
                .await;
            answered.extend([single.is_ok(), stacked.is_ok()]);
        }
        let total = probe.service.stats().total;
        results.push((policy, answered, [total.allowed, total.errors]));
    }
    let (all, none) = ([true; 5], [true, false, false, false, false]);
    assert_eq!(
        results,
        [
            (FailurePolicy::Allow, all.to_vec(), [5, 0]),
            (FailurePolicy::Deny, none.to_vec(), [1, 4]),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 7. A call that tries again after its raise answered again.
// ---------------------------------------------------------------------------------------

/// Service C spends the 8 of a quota of its own (tier `"x"` on a window of its own, 2 h:
/// the record raised first) on `"k"` through Redis: refused there for 2 h (Redis' clock).
/// Service A, same prefix, under `Local { pods: 2 }` (a share of 4), its raises failing:
/// 4 calls of `until_ready` with that quota answered by the share at +1 s. Its clock 10 ms
/// before the share's window ends (+800 s: the windows are whole multiples of 2 h), a fifth: its raise fails, the share refuses it for
/// 10 ms; its next try's raise answers (and the clock is past the share's window then).
/// That try is a call begun now: asked of Redis, refused for 2 h, past the deadline (5 s):
/// `QueueTimeout`, 0. Found: the try kept its first raise's failure (`ready_under`'s
/// `asking`, made once per wait) and was answered by the share again, fresh: 1 admitted
/// where Redis, answering, refuses. Closed: each try's raise says whether that try is the
/// policy's.
#[tokio::test]
async fn until_ready_whose_raise_answers_again_asks_the_store() {
    let server = RedisServer::start();
    let at = prefix("h103-until-ready");
    let own = x().window("2h");
    let c = Probe::on(&server, &at, Some(FailurePolicy::Allow), false);
    c.at(1);
    let mut counts = vec![c.admitted("k", &own, 9).await];
    let a = Probe::on(&server, &at, Some(FailurePolicy::Local { pods: 2 }), false);
    a.at(1);
    a.failing(true);
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(5);
    let mut admitted = 0;
    for _ in 0..4 {
        let decided = a.service.until_ready("k", &own, deadline()).await;
        admitted += usize::from(decided.is_ok_and(|d| d.allowed && d.limit == 4));
    }
    counts.push(admitted);
    a.failing(false);
    // The share's fixed windows are whole multiples of 2 h.
    let window_end = Duration::from_secs((START.as_secs() + 1) / 7200 * 7200 + 7200);
    a.clock.set(window_end - Duration::from_millis(10));
    *a.script.lock().unwrap() = Some((1, window_end + Duration::from_secs(1)));
    let fifth = a.service.until_ready("k", &own, deadline()).await;
    counts.push(usize::from(fifth.as_ref().is_ok_and(|d| d.allowed)));
    let script = *a.script.lock().unwrap();
    assert!(
        script.is_none(),
        "the second raise was sent: {counts:?} {fifth:?} {script:?}"
    );
    assert_eq!(counts, [8, 4, 0], "{fifth:?}");
}

/// The queue's side of the same: C spends the quota of its own's 8 on `"k"` through Redis;
/// A (`Local { pods: 2 }`, calls that may wait an hour) spends its share's 4 at +1 s with
/// its raises failing. Its clock 2 s before the share's window ends, a fifth call that may
/// wait: its raise fails, the share refuses it for 2 s and it waits in the queue; meanwhile
/// A's clock passes the share's window and the record answers again. At its turn it is a
/// call begun now: its raise answers, Redis refuses it for 2 h, past its deadline (an
/// hour): refused, 0. Found: the waiter kept its raise's failure for the whole wait
/// (`raised_then` marked its site; the queue never raised again) and was answered by the
/// share, fresh: 1 admitted where Redis, answering, refuses. Closed: the head raises the
/// record where due before each ask, and that raise (and its read) says whether the ask is
/// the policy's. Holds the test for 2 s of wall clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_raise_answers_again_asks_the_store() {
    let server = RedisServer::start();
    let at = prefix("h103-queue");
    let own = x().window("2h");
    let queued = || config("a").queue_timeout("1h");
    let c = Probe::on(&server, &at, Some(FailurePolicy::Allow), false);
    c.at(1);
    let mut counts = vec![c.admitted("k", &own, 9).await];
    let local = Some(FailurePolicy::Local { pods: 2 });
    let a = Probe::on_config(&server, &at, local, false, queued(), None);
    a.at(1);
    a.failing(true);
    counts.push(a.admitted("k", &own, 4).await);
    // The share's fixed windows are whole multiples of 2 h.
    let window_end = Duration::from_secs((START.as_secs() + 1) / 7200 * 7200 + 7200);
    a.clock.set(window_end - Duration::from_secs(2));
    let waiter = {
        let (service, own) = (a.service.clone(), own.clone().queue(true));
        tokio::spawn(async move { service.consume("k", &own).await })
    };
    until_depth(&a.service, 1).await;
    a.clock.set(window_end + Duration::from_secs(1));
    a.failing(false);
    // Redis refuses the waiter until its own window ends on Redis' clock (the wall clock):
    // past the waiter's deadline, it is refused; within it (the window ending less than an
    // hour from now, half the time), it waits on. Either way not admitted: a waiter still
    // waiting after 10 s is counted 0, as the share's fresh answer would have admitted it at
    // once. A window of Redis' ending within those 10 s is waited out first, so that Redis'
    // own next window cannot admit it meanwhile.
    let left = 7200 - redis_time(&server) % 7200;
    if left < 15 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
    let mut waiter = waiter;
    let fifth = tokio::time::timeout(Duration::from_secs(10), &mut waiter).await;
    waiter.abort();
    let admitted = match &fifth {
        Ok(decided) => decided.as_ref().unwrap().as_ref().is_ok_and(|d| d.allowed),
        Err(_) => false,
    };
    counts.push(usize::from(admitted));
    assert_eq!(counts, [8, 4, 0], "{fifth:?}");
}

/// Redis' clock, in whole seconds.
fn redis_time(server: &RedisServer) -> u64 {
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    seconds
}

// ---------------------------------------------------------------------------------------
// 8. Leases.
// ---------------------------------------------------------------------------------------

/// Service A's Redis store leases slices of 4 (`LeaseOptions::new(4)`); its raises failing,
/// 3 calls with a quota of its own (tier `"x"` on a window of its own, 2 h) on `"k"` are
/// answered by the policy, under `Allow` and `Local`: no slice granted, nothing spent in
/// Redis, so service C (no leases, same prefix) then spends all 8 there. Would catch a lease
/// granted (or a leased unit taken) for a call whose raise failed: 4 (8 less the slice).
#[tokio::test]
async fn a_call_whose_raise_fails_takes_no_lease() {
    let server = RedisServer::start();
    for policy in POLICIES {
        let at = prefix("h103-lease");
        let own = x().window("2h");
        let leases = Some(LeaseOptions::new(4));
        let a = Probe::on_config(&server, &at, Some(policy), false, config("a"), leases);
        a.at(1);
        a.failing(true);
        let answered = a.admitted("k", &own, 3).await;
        let c = Probe::on(&server, &at, Some(FailurePolicy::Deny), false);
        c.at(1);
        let counts = [answered, c.admitted("k", &own, 9).await];
        assert_eq!(counts, [3, 8], "{policy:?}");
    }
}
