//! Probes of the bounded priority queue (`queue_enabled`, `max_queue_size`, `queue_timeout`,
//! tier priorities, `Options::queue`, `until_ready`, annotated fns that wait): ways a caller
//! who waits could be admitted past its limit, wait forever, leave a place or a slot behind,
//! or end with an error of the wrong kind. Around `queue.rs` (which this does not repeat):
//! every strategy checked against the plain path, reloads, shutdown, cancellations at the
//! moment capacity frees, costs, priority floods, two quotas on one key, failing or lying
//! stores, frozen clocks and two Tokio workers.
//!
//! Time: Tokio's paused time, with services on a `TokioClock` (which reads it) unless a test
//! says otherwise (a `ManualClock` that does not move, or that the test moves by hand). Every
//! wait that a bug could make endless is bounded ([`bounded`]), so a bug fails the test
//! rather than hanging it. Exact counts throughout; no sleeps on the wall clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::{TestModule, TokioClock};
use ratelimit::{
    rate_limit, Config, ConfigBuilder, Decision, Error, Limiter, ManualClock, MemoryStore, Module,
    Options, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::until;
use ratelimit_tests::{now, START};
use tokio::task::JoinHandle;
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Helpers.

/// A service over `config` on a `TokioClock` (Tokio's paused time).
fn tokio_service(config: ConfigBuilder) -> RateLimitService {
    let config = config.build().expect("valid configuration");
    RateLimitService::with_clock(config, Arc::new(TokioClock::new())).expect("service")
}

fn per(strategy: Strategy, limit: u64, window: Duration) -> Options {
    Options::new()
        .limit(limit)
        .window(window)
        .strategy(strategy)
}

fn fixed(limit: u64, secs: u64) -> Options {
    per(Strategy::FixedWindow, limit, Duration::from_secs(secs))
}

/// `f`, or a panic if it has not ended within a (paused) hour: a wait a bug makes endless
/// fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(3_600), f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: still waiting after an hour"),
    }
}

/// Spends `key`'s budget under `opts` until it refuses (never waiting): how many passed.
async fn exhaust(service: &RateLimitService, key: &str, opts: &Options) -> u64 {
    let plain = opts.clone().queue(false);
    let mut spent = 0;
    while service.consume(key, &plain).await.unwrap().allowed {
        spent += 1;
        assert!(spent < 10_000, "the budget never ran out");
    }
    spent
}

/// A waiter on `key` spawned and queued (the depth is `depth` once it has joined): its
/// outcome, with when (since `start`) it ended.
async fn queue_one(
    service: &RateLimitService,
    key: &'static str,
    opts: &Options,
    start: Instant,
    depth: u64,
) -> JoinHandle<(Result<Decision, Error>, Duration)> {
    let (svc, opts) = (service.clone(), opts.clone());
    let task = tokio::spawn(async move {
        let d = svc.consume(key, &opts).await;
        (d, start.elapsed())
    });
    let s = service.clone();
    until(move || s.stats().queue.depth == depth).await;
    task
}

/// The times (since `start`) at which each of `tasks` was admitted, in the tasks' order;
/// any other outcome panics.
async fn admitted_at(tasks: Vec<JoinHandle<(Result<Decision, Error>, Duration)>>) -> Vec<Duration> {
    let mut at = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match bounded("a waiter", t).await.unwrap() {
            (Ok(d), when) if d.allowed => at.push(when),
            other => panic!("waiter {i}: {other:?}"),
        }
    }
    at
}

/// Replays on the plain path (a fresh memory store, a `ManualClock`, no queue) calls made at
/// `times` (since [`START`], with their costs): each must be admitted there too; after the
/// last call of each instant but the final one the budget must be spent (a plain call of
/// `next_cost` then is refused): the queue admitted no more, and no fewer, than the limit.
fn replay_on_the_plain_path(opts: &Options, calls: &[(Duration, u64)]) {
    let (plain, clock) = ratelimit_tests::service(Config::builder().build().unwrap());
    let mut at = Duration::ZERO;
    for (i, &(when, cost)) in calls.iter().enumerate() {
        assert!(when >= at, "calls out of time order");
        clock.advance(when - at);
        at = when;
        let d = now(plain.consume("replay", &opts.clone().cost(cost).queue(false))).unwrap();
        assert!(
            d.allowed,
            "call {i} (cost {cost}) admitted by the queue at {when:?} is refused on the plain path"
        );
        if let Some(&(next, next_cost)) = calls.get(i + 1) {
            if next != when {
                let more = now(plain.status("replay", &opts.clone().cost(next_cost))).unwrap();
                assert!(
                    more.remaining < next_cost,
                    "at {when:?} the budget still had {} after the queue's last admission, \
                     yet the next waiter (cost {next_cost}) waited until {next:?}",
                    more.remaining
                );
            }
        }
    }
}

/// A memory store behind the `Store` trait (so awaited, like Redis) that counts its
/// decisions and can be switched: `OK` decides, `FAILING` answers `Error::Store`, `ONCE`
/// fails the next decision only, `LYING` refuses with a `retry_after` of zero (a store
/// breaking the promise that it never is).
#[derive(Clone, Default)]
struct Switched {
    store: MemoryStore,
    decisions: Arc<AtomicU64>,
    mode: Arc<AtomicU8>,
}

const OK: u8 = 0;
const FAILING: u8 = 1;
const ONCE: u8 = 2;
const LYING: u8 = 3;

impl Switched {
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
    fn decisions(&self) -> u64 {
        self.decisions.load(Ordering::SeqCst)
    }
}

fn down() -> Error {
    Error::Store {
        message: "down".into(),
    }
}

impl Store for Switched {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let n = self.decisions.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            FAILING => Err(down()),
            ONCE => {
                self.mode.store(OK, Ordering::SeqCst);
                Err(down())
            }
            LYING => {
                // An escape hatch, so that a queue spinning on the lie ends the test: past
                // 1_000 decisions the store is down.
                if n > 1_000 {
                    return Err(down());
                }
                let mut d = Store::decide(&self.store, request).await?;
                if !d.allowed {
                    d.retry_after = Some(Duration::ZERO);
                }
                Ok(d)
            }
            _ => Store::decide(&self.store, request).await,
        }
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.store, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.store, key).await
    }
}

fn switched_service(config: ConfigBuilder) -> (RateLimitService, Switched) {
    let store = Switched::default();
    let config = config.build().expect("valid configuration");
    let service = RateLimitService::with_store(config, store.clone(), Arc::new(TokioClock::new()))
        .expect("service");
    (service, store)
}

fn queueing() -> ConfigBuilder {
    Config::builder().queue_enabled(true).queue_timeout("1m")
}

// ---------------------------------------------------------------------------------------------
// Exactness against the plain path, every strategy.

/// Twelve waiters behind a spent budget of 3 per second, for each strategy: every admission
/// the queue makes is one the plain path makes at that instant, and at each instant the
/// queue admits until the budget is spent (no slot left while someone waits).
#[tokio::test(start_paused = true)]
async fn waiters_are_admitted_exactly_as_the_plain_path_allows_for_every_strategy() {
    for strategy in Strategy::ALL {
        let service = tokio_service(queueing().max_queue_size(100));
        let start = Instant::now();
        let opts = per(strategy, 3, Duration::from_secs(1));
        let pre = exhaust(&service, "k", &opts).await;
        assert_eq!(pre, 3, "{strategy:?}");
        let mut tasks = Vec::new();
        for i in 0..12 {
            tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
        }
        let at = admitted_at(tasks).await;
        // Arrival order is kept, so admission times never go back.
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{strategy:?}: {at:?}");
        let calls: Vec<_> = std::iter::repeat_n((Duration::ZERO, 1), 3)
            .chain(at.iter().map(|&t| (t, 1)))
            .collect();
        replay_on_the_plain_path(&opts, &calls);
        let stats = service.stats();
        assert_eq!(
            (stats.total.allowed, stats.queue.admitted, stats.queue.depth),
            (15, 12, 0),
            "{strategy:?}"
        );
        // Never more than 3 in any one second, on any strategy but the counter's estimate
        // (which the replay checks): the fixed window's seconds, the log's and bucket's
        // rolling ones.
        if strategy != Strategy::SlidingWindowCounter {
            for (i, t) in at.iter().enumerate() {
                let within = at[i..]
                    .iter()
                    .filter(|u| **u < *t + Duration::from_secs(1))
                    .count();
                assert!(within <= 3, "{strategy:?}: {within} from {t:?}: {at:?}");
            }
        }
    }
}

/// A `ManualClock` that never moves while Tokio's time runs on: the budget never frees, so
/// no waiter is admitted; the head asks the store once per refusal's `retry_after` (no
/// spinning, no herd), and every waiter ends with `QueueTimeout` as soon as the line's turn
/// is known to come after its deadline, none of them asking again.
#[tokio::test(start_paused = true)]
async fn waiters_on_a_clock_that_never_moves_time_out_at_their_deadline_asking_once_per_retry() {
    let store = Switched::default();
    let clock = ManualClock::new(START);
    let config = queueing().queue_timeout("55s").build().unwrap();
    let service = RateLimitService::with_store(config, store.clone(), Arc::new(clock)).unwrap();
    let start = Instant::now();
    // 1 per 10 s, on a window boundary: each refusal says 10 s, the queue times out at 55 s.
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let before = store.decisions();
    let mut tasks = Vec::new();
    for i in 0..5 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            // The head's refusal at 50 s says 60 s, past every deadline (55 s): all end at
            // 50 s, told the 10 s left until then.
            (Err(Error::QueueTimeout { retry_after }), at) => {
                assert_eq!(at, Duration::from_secs(50));
                assert_eq!(retry_after, Duration::from_secs(10));
            }
            other => panic!("{other:?}"),
        }
    }
    // The first arrival asks once before queueing, then the head asks at 10, 20, ..., 50 s.
    assert_eq!(store.decisions() - before, 6);
    let stats = service.stats();
    assert_eq!(
        (
            stats.total.allowed,
            stats.queue.timed_out,
            stats.queue.depth
        ),
        (1, 5, 0)
    );
}

// ---------------------------------------------------------------------------------------------
// Reloads while callers wait.

fn tiered(limit: u64, window: &str) -> ConfigBuilder {
    queueing()
        .strategy(Strategy::FixedWindow)
        .tier(Tier::new("plan", limit).window(window))
}

/// Waiters of 1 per 10 s when a reload loosens the limit to 10 per 10 s: each ends with a
/// clear outcome, and the old window admits no more than the old limit, nor any window more
/// than the new one.
#[tokio::test(start_paused = true)]
async fn waiters_across_a_loosening_reload_never_pass_the_old_limit_in_the_old_window() {
    let service = tokio_service(tiered(1, "10s"));
    let start = Instant::now();
    let opts = Options::new().tier("plan");
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    service.reload(tiered(10, "10s").build().unwrap()).unwrap();
    // Callers under the new configuration, arriving after the reload, waiting too.
    for i in 0..6 {
        let (svc, opts) = (service.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            let d = svc.consume("k", &opts).await;
            (d, start.elapsed())
        }));
        let s = service.clone();
        until(move || s.stats().queue.queued == 7 + i).await;
    }
    let mut per_window = BTreeMap::new();
    let mut timed_out = 0;
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Ok(d), at) if d.allowed => *per_window.entry(at.as_secs() / 10).or_insert(0) += 1,
            (Err(Error::QueueTimeout { .. }), _) => timed_out += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        per_window.get(&0),
        None,
        "the old window was spent: {per_window:?}"
    );
    assert!(per_window.values().all(|&n| n <= 10), "{per_window:?}");
    let admitted: u64 = per_window.values().sum();
    assert_eq!(admitted + timed_out, 12);
    assert_eq!(service.stats().queue.depth, 0);
}

/// A reload that removes the tier the callers wait on: none of them is admitted (they were
/// refused by the old limit, and the new configuration knows no such limit); each ends with
/// an error, and a new call on the tier is refused with `UnknownTier`.
#[tokio::test(start_paused = true)]
async fn a_reload_removing_the_waiters_tier_admits_none_of_them() {
    let service = tokio_service(tiered(1, "10s"));
    let start = Instant::now();
    let opts = Options::new().tier("plan");
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    let without = queueing()
        .strategy(Strategy::FixedWindow)
        .default_limit(100);
    service.reload(without.build().unwrap()).unwrap();
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Err(Error::QueueTimeout { .. } | Error::UnknownTier { .. }), _) => {}
            other => panic!("admitted or not refused as it should be: {other:?}"),
        }
    }
    assert!(matches!(
        service.consume("k", &opts).await,
        Err(Error::UnknownTier { .. })
    ));
    let stats = service.stats();
    assert_eq!(
        (stats.total.allowed, stats.queue.admitted, stats.queue.depth),
        (1, 0, 0)
    );
}

/// A reload that turns the queue off while callers wait: they end (none hangs, none is
/// admitted past the limit), and a later call over the limit is refused at once instead of
/// queueing.
#[tokio::test(start_paused = true)]
async fn a_reload_turning_the_queue_off_ends_the_waits_and_later_calls_do_not_queue() {
    let service = tokio_service(tiered(1, "10s"));
    let start = Instant::now();
    let opts = Options::new().tier("plan");
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    service
        .reload(tiered(1, "10s").queue_enabled(false).build().unwrap())
        .unwrap();
    let refused = service.consume("k", &opts).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    let mut per_window = BTreeMap::new();
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Ok(d), at) if d.allowed => *per_window.entry(at.as_secs() / 10).or_insert(0) += 1,
            (Err(Error::QueueTimeout { .. }), _) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(per_window.values().all(|&n| n <= 1), "{per_window:?}");
    assert_eq!(per_window.get(&0), None);
    assert_eq!(service.stats().queue.depth, 0);
}

/// A wait a reload ends is refused with `QueueTimeout`; the queue's `timed_out` counter says
/// it counts "calls whose wait ended with `Error::QueueTimeout`", so those are counted there
/// like any other: every wait that joined is accounted for once.
#[tokio::test(start_paused = true)]
async fn every_wait_ended_with_queue_timeout_by_a_reload_is_counted_in_timed_out() {
    let service = tokio_service(tiered(1, "10s"));
    let start = Instant::now();
    let opts = Options::new().tier("plan");
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    service.reload(tiered(2, "10s").build().unwrap()).unwrap();
    let mut timeouts = 0;
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Err(Error::QueueTimeout { .. }), _) => timeouts += 1,
            (Ok(d), _) if d.allowed => {}
            other => panic!("{other:?}"),
        }
    }
    let q = service.stats().queue;
    assert_eq!(timeouts, 3);
    assert_eq!(q.timed_out, timeouts, "{q:?}");
}

/// `until_ready` across a reload that removes its tier: its next try is resolved under the
/// new configuration and ends with `UnknownTier`, never an admission.
#[tokio::test(start_paused = true)]
async fn until_ready_across_a_reload_removing_its_tier_ends_with_unknown_tier() {
    let (service, store) = switched_service(tiered(1, "10s"));
    let opts = Options::new().tier("plan");
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let asked = store.decisions();
    let waiting = {
        let (svc, opts) = (service.clone(), opts.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            svc.until_ready("k", &opts, deadline).await
        })
    };
    // It asked once, was refused, and sleeps until the window turns.
    until(move || store.decisions() == asked + 1).await;
    let without = queueing()
        .strategy(Strategy::FixedWindow)
        .default_limit(100);
    service.reload(without.build().unwrap()).unwrap();
    match bounded("until_ready", waiting).await.unwrap() {
        Err(Error::UnknownTier { tier, .. }) => assert_eq!(tier, "plan"),
        other => panic!("{other:?}"),
    }
    assert_eq!(service.stats().total.allowed, 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation races.

/// Two slots free at once (2 per 10 s); the head is admitted and wakes the second waiter,
/// who is dropped before it runs: its turn passes to the third, admitted at that instant with
/// the slot the dropped one never used. The depth is exact after, and `max_queue_size` is
/// enforced exactly.
#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_after_being_woken_passes_its_slot_and_its_place_on() {
    let service = tokio_service(queueing().max_queue_size(4));
    let opts = fixed(2, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 2);
    let mut waiting: Vec<_> = (0..4)
        .map(|_| Box::pin(service.consume("k", &opts)))
        .collect();
    for (i, w) in waiting.iter_mut().enumerate() {
        assert!(futures::poll!(w.as_mut()).is_pending());
        assert_eq!(service.stats().queue.depth, i as u64 + 1);
    }
    let mut d = waiting.pop().unwrap();
    let mut c = waiting.pop().unwrap();
    let b = waiting.pop().unwrap();
    let mut a = waiting.pop().unwrap();
    // The window turns: only the head's timer fires.
    tokio::time::advance(Duration::from_secs(10)).await;
    match futures::poll!(a.as_mut()) {
        std::task::Poll::Ready(Ok(decision)) if decision.allowed => {}
        other => panic!("the head: {other:?}"),
    }
    drop(b);
    match futures::poll!(c.as_mut()) {
        std::task::Poll::Ready(Ok(decision)) if decision.allowed => {}
        other => panic!("the slot the dropped waiter left: {other:?}"),
    }
    // The window is spent: the fourth waits for the next.
    assert!(futures::poll!(d.as_mut()).is_pending());
    let q = service.stats().queue;
    assert_eq!((q.depth, q.admitted, q.cancelled), (1, 2, 1));
    // Exactly three more places, then the queue is full.
    let mut more: Vec<_> = (0..3)
        .map(|_| Box::pin(service.consume("k", &opts)))
        .collect();
    for m in &mut more {
        assert!(futures::poll!(m.as_mut()).is_pending());
    }
    assert_eq!(service.stats().queue.depth, 4);
    assert!(matches!(
        service.consume("k", &opts).await,
        Err(Error::QueueFull { max_queue_size: 4 })
    ));
    drop(more);
    drop(d);
    assert_eq!(service.stats().queue.depth, 0);
    assert_eq!(service.status("k", &opts).await.unwrap().remaining, 0);
}

/// A head sleeping on its refusal's `retry_after` is dropped: the next waiter becomes head at
/// once and is admitted when the window turns (not at its own deadline).
#[tokio::test(start_paused = true)]
async fn a_head_dropped_while_it_sleeps_hands_the_retry_to_the_next_waiter() {
    let service = tokio_service(queueing());
    let start = Instant::now();
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let head = queue_one(&service, "k", &opts, start, 1).await;
    let next = queue_one(&service, "k", &opts, start, 2).await;
    tokio::time::advance(Duration::from_secs(4)).await;
    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    match bounded("the next waiter", next).await.unwrap() {
        (Ok(d), at) if d.allowed => assert_eq!(at, Duration::from_secs(10)),
        other => panic!("{other:?}"),
    }
    let q = service.stats().queue;
    assert_eq!((q.admitted, q.cancelled, q.depth), (1, 1, 0));
}

// ---------------------------------------------------------------------------------------------
// Costs.

/// A cost of 0 with the queue on, with waiters on the key or not: `ZeroCost` at once, never
/// queued, never admitted.
#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_with_the_queue_on_is_zero_cost_at_once_with_or_without_waiters() {
    let service = tokio_service(queueing());
    let start = Instant::now();
    let opts = fixed(1, 10);
    let zero = opts.clone().cost(0);
    assert!(matches!(
        service.consume("k", &zero).await,
        Err(Error::ZeroCost)
    ));
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let waiter = queue_one(&service, "k", &opts, start, 1).await;
    assert!(matches!(
        service.consume("k", &zero).await,
        Err(Error::ZeroCost)
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(matches!(
        service.until_ready("k", &zero, deadline).await,
        Err(Error::ZeroCost)
    ));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(service.stats().queue.queued, 1);
    match bounded("the waiter", waiter).await.unwrap() {
        (Ok(d), at) if d.allowed => assert_eq!(at, Duration::from_secs(10)),
        other => panic!("{other:?}"),
    }
}

/// A token bucket of 2 + burst 2 (capacity 4, refilling 2 per 4 s, one token each 2 s): a
/// cost of 4 (the capacity) waits for the whole bucket; the calls of cost 1 behind it wait
/// behind it, never overtaking; a cost of 5 is refused at once, not queued.
#[tokio::test(start_paused = true)]
async fn a_cost_equal_to_capacity_waits_for_the_whole_bucket_and_nothing_overtakes_it() {
    let service = tokio_service(queueing());
    let start = Instant::now();
    let opts = per(Strategy::TokenBucket, 2, Duration::from_secs(4)).burst(2);
    assert_eq!(exhaust(&service, "k", &opts).await, 4);
    assert!(matches!(
        service.consume("k", &opts.clone().cost(5)).await,
        Err(Error::CostAboveCapacity {
            cost: 5,
            capacity: 4
        })
    ));
    let big = queue_one(&service, "k", &opts.clone().cost(4), start, 1).await;
    let mut small = Vec::new();
    for i in 0..3 {
        small.push(queue_one(&service, "k", &opts, start, i + 2).await);
    }
    let big_at = admitted_at(vec![big]).await;
    let small_at = admitted_at(small).await;
    // Four tokens take 8 s; then one more each 2 s.
    assert_eq!(big_at, [Duration::from_secs(8)]);
    let expected: Vec<_> = [10, 12, 14].map(Duration::from_secs).into();
    assert_eq!(small_at, expected);
    let calls: Vec<_> = std::iter::repeat_n((Duration::ZERO, 1), 4)
        .chain([(big_at[0], 4)])
        .chain(small_at.iter().map(|&t| (t, 1)))
        .collect();
    replay_on_the_plain_path(&opts, &calls);
}

/// Mixed costs in one line on a fixed window of 4: each window admits waiters in order
/// while their costs fit, and the first that does not fit holds the rest (a cost of 1 behind
/// a cost of 3 that does not fit never spends the remainder): no window spends over 4.
#[tokio::test(start_paused = true)]
async fn mixed_costs_in_one_line_are_admitted_in_order_within_each_window() {
    let service = tokio_service(queueing());
    let start = Instant::now();
    let opts = fixed(4, 1);
    assert_eq!(exhaust(&service, "k", &opts).await, 4);
    let costs = [3, 1, 1, 3, 2, 2, 1, 4];
    let mut tasks = Vec::new();
    for (i, cost) in costs.iter().enumerate() {
        let o = opts.clone().cost(*cost);
        tasks.push(queue_one(&service, "k", &o, start, i as u64 + 1).await);
    }
    let at = admitted_at(tasks).await;
    // 3+1 | 1+3 | 2+2 | 1 (4 does not fit after it) | 4.
    let expected: Vec<_> = [1, 1, 2, 2, 3, 3, 4, 5].map(Duration::from_secs).into();
    assert_eq!(at, expected);
    let calls: Vec<_> = std::iter::repeat_n((Duration::ZERO, 1), 4)
        .chain(at.iter().zip(costs).map(|(&t, c)| (t, c)))
        .collect();
    replay_on_the_plain_path(&opts, &calls);
    let stats = service.stats();
    assert_eq!((stats.queue.admitted, stats.queue.depth), (8, 0));
}

// ---------------------------------------------------------------------------------------------
// Priorities.

fn prioritised(max: usize) -> ConfigBuilder {
    let mut config = queueing()
        .max_queue_size(max)
        .strategy(Strategy::FixedWindow)
        .queue_timeout("10m");
    for p in 0..4 {
        config = config.tier(Tier::new(format!("p{p}"), 1).window("10s").priority(p));
    }
    config
}

/// The queue's displacement rule, modelled: arrivals in order, each with a priority; the
/// indices that keep their place.
fn survivors(arrivals: &[i32], max: usize) -> Vec<usize> {
    let mut held: Vec<usize> = Vec::new();
    for (i, &p) in arrivals.iter().enumerate() {
        if held.len() == max {
            let lowest = held.iter().map(|&j| arrivals[j]).min().unwrap();
            if lowest >= p {
                continue;
            }
            let victim = *held
                .iter()
                .filter(|&&j| arrivals[j] == lowest)
                .max()
                .unwrap();
            held.retain(|&j| j != victim);
        }
        held.push(i);
    }
    held
}

/// A flood of 24 arrivals of mixed priorities on two keys' lines sharing one bound of 5
/// places: the depth never passes 5 after any arrival; those who keep their place are
/// exactly the model's, admitted by priority then arrival, one per window per key; every
/// other ends with `QueueFull` at once.
#[tokio::test(start_paused = true)]
async fn a_priority_flood_keeps_exactly_the_highest_places_and_refuses_every_other() {
    const MAX: usize = 5;
    let service = tokio_service(prioritised(MAX));
    let start = Instant::now();
    let tiers: Vec<Options> = (0..4)
        .map(|p| Options::new().tier(format!("p{p}")))
        .collect();
    for o in &tiers {
        assert_eq!(exhaust(&service, "k", o).await, 1);
    }
    let arrivals: Vec<i32> = (0..24).map(|i| [0, 2, 1, 3, 2, 0, 1][i % 7]).collect();
    let mut waiting = Vec::new();
    for (i, &p) in arrivals.iter().enumerate() {
        let mut call = Box::pin(service.consume("k", &tiers[p as usize]));
        let polled = futures::poll!(call.as_mut());
        let depth = service.stats().queue.depth;
        assert!(depth <= MAX as u64, "after arrival {i}: {depth}");
        match polled {
            std::task::Poll::Pending => waiting.push((i, call)),
            std::task::Poll::Ready(Err(Error::QueueFull { max_queue_size: 5 })) => {}
            other => panic!("arrival {i}: {other:?}"),
        }
    }
    let ends = futures::future::join_all(
        waiting
            .into_iter()
            .map(|(i, call)| async move { (i, call.await, start.elapsed()) }),
    );
    let ends = bounded("the flood", ends).await;
    let mut admitted: Vec<(Duration, usize)> = Vec::new();
    for (i, result, at) in ends {
        match result {
            Ok(d) if d.allowed => admitted.push((at, i)),
            Err(Error::QueueFull { max_queue_size: 5 }) => assert_eq!(at, Duration::ZERO),
            other => panic!("arrival {i}: {other:?}"),
        }
    }
    // Each tier is a state of its own, so a line of its own: the places kept are the
    // model's, and each line admits its waiters in arrival order, one per 10 s window.
    admitted.sort_by_key(|&(_, i)| i);
    let mut kept: Vec<usize> = admitted.iter().map(|&(_, i)| i).collect();
    kept.sort();
    let mut model = survivors(&arrivals, MAX);
    model.sort();
    assert_eq!(kept, model);
    let mut nth_of_tier = BTreeMap::new();
    for &(at, i) in &admitted {
        let n = nth_of_tier.entry(arrivals[i]).or_insert(0u64);
        *n += 1;
        assert_eq!(at, Duration::from_secs(10 * *n), "arrival {i}");
    }
    let q = service.stats().queue;
    assert_eq!((q.admitted, q.depth), (MAX as u64, 0));
    assert_eq!(q.full, 24 - MAX as u64);
}

/// A higher-priority arrival on one key displaces the newest lowest-priority waiter on
/// another key: that waiter ends with `QueueFull` when displaced, its line's head is
/// untouched and admitted when its window turns, and the newcomer is admitted in its turn.
/// Within one line every waiter has one priority (a tier is a state of its own), so a head
/// with anyone behind it is never the one displaced.
#[tokio::test(start_paused = true)]
async fn displacing_a_waiter_of_another_key_leaves_that_lines_head_its_turn() {
    let service = tokio_service(prioritised(3));
    let start = Instant::now();
    let (low, high) = (Options::new().tier("p0"), Options::new().tier("p3"));
    assert_eq!(exhaust(&service, "a", &low).await, 1);
    assert_eq!(exhaust(&service, "b", &high).await, 1);
    let a1 = queue_one(&service, "a", &low, start, 1).await;
    let a2 = queue_one(&service, "a", &low, start, 2).await;
    let b1 = queue_one(&service, "b", &high, start, 3).await;
    tokio::time::advance(Duration::from_secs(3)).await;
    let b2 = {
        let (svc, high) = (service.clone(), high.clone());
        tokio::spawn(async move { (svc.consume("b", &high).await, start.elapsed()) })
    };
    match bounded("the displaced", a2).await.unwrap() {
        (Err(Error::QueueFull { max_queue_size: 3 }), at) => {
            assert_eq!(at, Duration::from_secs(3))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(service.stats().queue.depth, 3);
    let at = admitted_at(vec![a1, b1, b2]).await;
    assert_eq!(at, [10, 10, 20].map(Duration::from_secs));
    let q = service.stats().queue;
    assert_eq!((q.queued, q.admitted, q.full, q.depth), (4, 3, 1, 0));
}

// ---------------------------------------------------------------------------------------------
// Two quotas on one key.

/// Two options on one key, with waiters on both: 2 per second and 5 per second on the same
/// strategy and window (one state, one line), and 3 per 2 seconds (a state of its own). No
/// admission is one the plain path would refuse, for each quota.
#[tokio::test(start_paused = true)]
async fn two_quotas_on_one_key_with_waiters_on_both_admit_only_what_each_allows() {
    let service = tokio_service(queueing().max_queue_size(100).queue_timeout("6s"));
    let start = Instant::now();
    let (two, five) = (fixed(2, 1), fixed(5, 1));
    let three = per(Strategy::SlidingWindow, 3, Duration::from_secs(2));
    assert_eq!(exhaust(&service, "k", &five).await, 5);
    assert_eq!(exhaust(&service, "k", &three).await, 3);
    let mut tasks = Vec::new();
    for i in 0..18u64 {
        let o = [&two, &five, &three][(i % 3) as usize].clone();
        let (svc, o) = (service.clone(), o);
        tasks.push((
            i % 3,
            tokio::spawn(async move { (svc.consume("k", &o).await, start.elapsed()) }),
        ));
        let s = service.clone();
        until(move || s.stats().queue.queued == i + 1).await;
    }
    let mut shared: Vec<(Duration, u64)> = vec![(Duration::ZERO, 5); 5];
    let mut own: Vec<(Duration, u64)> = vec![(Duration::ZERO, 3); 3];
    let mut timed_out = 0;
    for (which, t) in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Ok(d), at) if d.allowed => match which {
                2 => own.push((at, 3)),
                _ => shared.push((at, [2, 5][which as usize])),
            },
            (Err(Error::QueueTimeout { .. }), _) => timed_out += 1,
            other => panic!("{other:?}"),
        }
    }
    shared.sort();
    own.sort();
    // Replayed as the plain path would decide them, each with its own limit on the shared
    // state.
    let (plain, clock) = ratelimit_tests::service(Config::builder().build().unwrap());
    let mut at = Duration::ZERO;
    for &(when, limit) in &shared {
        clock.advance(when - at);
        at = when;
        let o = if limit == 2 { &two } else { &five };
        assert!(
            now(plain.consume("k", &o.clone().queue(false)))
                .unwrap()
                .allowed,
            "{limit} at {when:?}: {shared:?}"
        );
    }
    let own: Vec<_> = own.iter().map(|&(t, _)| (t, 1)).collect();
    replay_on_the_plain_path(&three, &own);
    assert_eq!(shared.len() - 5 + own.len() - 3 + timed_out, 18);
    assert_eq!(service.stats().queue.depth, 0);
}

// ---------------------------------------------------------------------------------------------
// Stores that fail or lie while callers wait.

/// The store goes down while five callers wait: every one ends with the store's error when
/// its turn to ask comes, none is admitted, and the queue is empty after.
#[tokio::test(start_paused = true)]
async fn a_store_failing_while_callers_wait_ends_every_wait_with_its_error() {
    let (service, store) = switched_service(queueing());
    let start = Instant::now();
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..5 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    store.set(FAILING);
    for t in tasks {
        match bounded("a waiter", t).await.unwrap() {
            (Err(Error::Store { .. }), at) => assert_eq!(at, Duration::from_secs(10)),
            other => panic!("{other:?}"),
        }
    }
    let stats = service.stats();
    assert_eq!(
        (
            stats.total.allowed,
            stats.total.errors,
            stats.queue.admitted
        ),
        (1, 5, 0)
    );
    assert_eq!(stats.queue.depth, 0);
    // A store down from the start: a call over nothing is its error at once, not queued.
    let (broken, _) = {
        let config = queueing().build().unwrap();
        let s = RateLimitService::with_store(
            config,
            ratelimit_tests::Broken,
            Arc::new(TokioClock::new()),
        )
        .unwrap();
        (s, ())
    };
    assert!(matches!(
        broken.consume("k", &opts).await,
        Err(Error::Store { .. })
    ));
    assert_eq!(broken.stats().queue.queued, 0);
}

/// One failed answer while callers wait: only the head that got it ends with the error; the
/// next waiter takes over and the budget is spent exactly, one per window.
#[tokio::test(start_paused = true)]
async fn one_failed_answer_ends_only_the_head_that_got_it() {
    let (service, store) = switched_service(queueing());
    let start = Instant::now();
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(queue_one(&service, "k", &opts, start, i + 1).await);
    }
    store.set(ONCE);
    let mut tasks = tasks.into_iter();
    match bounded("the head", tasks.next().unwrap()).await.unwrap() {
        (Err(Error::Store { .. }), at) => assert_eq!(at, Duration::from_secs(10)),
        other => panic!("{other:?}"),
    }
    let at = admitted_at(tasks.collect()).await;
    assert_eq!(at, [10, 20, 30].map(Duration::from_secs));
}

/// A store that refuses with a `retry_after` of zero (which a decision promises never to
/// be): the head asked it again and again without time passing (under paused time, a loop
/// that never sleeps never lets the deadline come; past 1_000 decisions the test's store is
/// down, which ended it). Such a refusal is now an `UnexpectedState` error, at once.
#[tokio::test(start_paused = true)]
async fn a_store_refusing_with_a_zero_retry_after_is_not_asked_in_a_loop() {
    let (service, store) = switched_service(queueing().queue_timeout("1s"));
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    store.set(LYING);
    let before = store.decisions();
    let result = service.consume("k", &opts).await;
    let asked = store.decisions() - before;
    // A refusal of the wrong shape is an error at once: asked once, never admitted.
    assert!(
        matches!(result, Err(Error::UnexpectedState { .. })),
        "{result:?}"
    );
    assert_eq!(asked, 1, "asked {asked} times: {result:?}");
}

/// The same lying store under `until_ready`: asked in a loop the same way; an error at once
/// too.
#[tokio::test(start_paused = true)]
async fn until_ready_on_a_store_refusing_with_a_zero_retry_after_is_not_asked_in_a_loop() {
    let (service, store) = switched_service(Config::builder());
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    store.set(LYING);
    let before = store.decisions();
    let deadline = Instant::now() + Duration::from_secs(1);
    let result = service.until_ready("k", &opts, deadline).await;
    let asked = store.decisions() - before;
    // A refusal of the wrong shape is an error at once: asked once, never admitted.
    assert!(
        matches!(result, Err(Error::UnexpectedState { .. })),
        "{result:?}"
    );
    assert_eq!(asked, 1, "asked {asked} times: {result:?}");
}

// ---------------------------------------------------------------------------------------------
// Runtimes and clocks.

/// Forty waiters on two Tokio workers, the service on a `ManualClock` moved by hand one
/// window at a time (5 per 50 ms): after each step exactly 5 more are admitted, however the
/// workers interleave, and the head is then refused again (asked after the five, the budget
/// spent). The waits left are then dropped: the depth comes back to 0.
#[test]
fn waiters_on_two_workers_are_admitted_exactly_the_limit_per_step_of_the_clock() {
    let runtime = ratelimit_tests::two_workers();
    runtime.block_on(async {
        let store = Switched::default();
        let clock = ManualClock::new(START);
        let config = queueing()
            .max_queue_size(100)
            .queue_timeout("1h")
            .build()
            .unwrap();
        let service =
            RateLimitService::with_store(config, store.clone(), Arc::new(clock.clone())).unwrap();
        let window = Duration::from_millis(50);
        let opts = per(Strategy::FixedWindow, 5, window);
        assert_eq!(exhaust(&service, "k", &opts).await, 5);
        let admitted = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let (svc, opts, admitted) = (service.clone(), opts.clone(), admitted.clone());
                tokio::spawn(async move {
                    let d = svc.consume("k", &opts).await.unwrap();
                    assert!(d.allowed);
                    admitted.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        // A poll, not a timing: the waiters run on the runtime's other worker, which a
        // yield alone does not wait for; the limits themselves move only with the manual
        // clock, and 2,000 polls bound a bug to a failure instead of a hang.
        let real = |mut done: Box<dyn FnMut() -> bool>| async move {
            for _ in 0..2_000 {
                if done() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("never got there");
        };
        let s = service.clone();
        real(Box::new(move || s.stats().queue.depth == 40)).await;
        for step in 1..=3u64 {
            clock.advance(window);
            let (a, st) = (admitted.clone(), store.clone());
            let base = store.decisions();
            // Five admissions, then at least two more refusals of the head.
            real(Box::new(move || {
                a.load(Ordering::SeqCst) == 5 * step && st.decisions() >= base + 7
            }))
            .await;
            assert_eq!(admitted.load(Ordering::SeqCst), 5 * step);
            assert_eq!(service.stats().queue.admitted, 5 * step);
        }
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        let q = service.stats().queue;
        assert_eq!((q.depth, q.admitted, q.cancelled), (0, 15, 25));
        assert_eq!(admitted.load(Ordering::SeqCst), 15);
    });
}

/// A current-thread runtime with a timer but time not paused, a `ManualClock` the test never
/// moves: a wait whose turn (1,000 s away) is past its (real, short) timeout ends at once
/// with `QueueTimeout`, never admitted; and
/// `until_ready` with a deadline it cannot meet is refused at once.
#[test]
fn on_a_current_thread_runtime_a_frozen_clock_ends_waits_at_their_timeout() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let config = queueing().queue_timeout("30ms").build().unwrap();
    let service = RateLimitService::with_clock(config, Arc::new(clock)).unwrap();
    // `START` is a whole number of 1_000 s windows: each refusal says 1_000 s.
    let opts = fixed(1, 1_000);
    runtime.block_on(async {
        assert_eq!(exhaust(&service, "k", &opts).await, 1);
        match service.consume("k", &opts).await {
            // The store's refusal, on the clock that never moves: exactly the window's rest.
            Err(Error::QueueTimeout { retry_after }) => {
                assert!(retry_after == Duration::from_secs(1_000), "{retry_after:?}")
            }
            other => panic!("{other:?}"),
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        match service.until_ready("k", &opts, deadline).await {
            Err(Error::QueueTimeout { retry_after }) => {
                assert_eq!(retry_after, Duration::from_secs(1_000))
            }
            other => panic!("{other:?}"),
        }
    });
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (1, 3));
    assert_eq!((stats.queue.timed_out, stats.queue.depth), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// Annotated fns and the module.

#[rate_limit(limit = 2, window = "1m", strategy = "fixed-window", key = user, queue = true)]
async fn probe_waits(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Annotated fns that wait, in a `TestModule` (a `ManualClock` the test moves with Tokio's
/// paused time): 2 per minute; seven callers over a spent budget get exactly 2 at each
/// minute the test moves the clock to, in order, and the rest time out as soon as the line's
/// turn is known to come after their queue timeout (150 s): at 140 s, where the manual clock
/// (left at 120 s) says the next window opens 40 s later, at 180 s of Tokio's time.
#[tokio::test(start_paused = true)]
async fn annotated_waiters_get_exactly_their_limit_per_window_of_a_test_module() {
    let module = TestModule::new(Module::builder().queue_timeout("150s")).unwrap();
    let start = Instant::now();
    for _ in 0..2 {
        module.scope(probe_waits("u")).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..7u64 {
        let m = module.clone();
        tasks.push(tokio::spawn(async move {
            let r = m.scope(probe_waits("u")).await;
            (r, start.elapsed())
        }));
        let s = module.service().clone();
        until(move || s.stats().queue.depth == i + 1).await;
    }
    // Time moves on both clocks together, a minute at a time (the head's timer fires as the
    // manual clock has moved).
    for _ in 0..2 {
        module.clock().advance(Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        match bounded("an annotated waiter", t).await.unwrap() {
            (Ok(()), at) => outcomes.push(("ok", at.as_secs())),
            (Err(Error::QueueTimeout { .. }), at) => outcomes.push(("timeout", at.as_secs())),
            other => panic!("{other:?}"),
        }
    }
    let expected = [
        ("ok", 60),
        ("ok", 60),
        ("ok", 120),
        ("ok", 120),
        ("timeout", 140),
        ("timeout", 140),
        ("timeout", 140),
    ];
    assert_eq!(outcomes, expected);
    let q = module.stats().queue;
    assert_eq!((q.admitted, q.timed_out, q.depth), (4, 3, 0));
}

/// A limiter of this binary's own for each shutdown test (no global module is installed,
/// so the tests run side by side).
static QUEUED_LIMITER: Limiter = Limiter::new();
static PACING_LIMITER: Limiter = Limiter::new();

/// A module's shutdown while callers wait in its service's queue on two keys (heads sleeping
/// on their retry, waiters behind them): every one wakes at once with `NotInitialized`, and
/// nothing waits after.
#[tokio::test(start_paused = true)]
async fn module_shutdown_wakes_every_queued_service_caller_at_once_with_not_initialized() {
    let module = QUEUED_LIMITER
        .init(
            Module::builder()
                .clock(TokioClock::new())
                .queue_timeout("1m"),
        )
        .unwrap();
    let service = module.service().clone();
    let opts = fixed(1, 10).queue(true);
    assert_eq!(exhaust(&service, "a", &opts).await, 1);
    assert_eq!(exhaust(&service, "b", &opts).await, 1);
    let start = Instant::now();
    let mut queued = Vec::new();
    for i in 0..6 {
        let key = ["a", "b"][i % 2];
        queued.push(queue_one(&service, key, &opts, start, i as u64 + 1).await);
    }
    tokio::time::advance(Duration::from_secs(4)).await;
    drop(module);
    for t in queued {
        match bounded("a queued waiter", t).await.unwrap() {
            (Err(Error::NotInitialized { .. }), at) => assert_eq!(at, Duration::from_secs(4)),
            other => panic!("{other:?}"),
        }
    }
    let stats = service.stats();
    assert_eq!(
        (stats.total.allowed, stats.queue.admitted, stats.queue.depth),
        (2, 0, 0)
    );
}

/// A module's shutdown while callers pace themselves with `until_ready` on its service
/// (sleeping on a refusal's retry): like the callers waiting in the queue, none should be
/// admitted after the shutdown.
#[tokio::test(start_paused = true)]
async fn module_shutdown_admits_none_of_the_callers_waiting_in_until_ready() {
    let module = PACING_LIMITER
        .init(Module::builder().clock(TokioClock::new()))
        .unwrap();
    let service = module.service().clone();
    let opts = fixed(1, 10);
    assert_eq!(exhaust(&service, "k", &opts).await, 1);
    let start = Instant::now();
    let pacing: Vec<_> = (0..2)
        .map(|_| {
            let (svc, opts) = (service.clone(), opts.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                (svc.until_ready("k", &opts, deadline).await, start.elapsed())
            })
        })
        .collect();
    // Each asks once (refused) and sleeps on its retry; no time passes meanwhile.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    drop(module);
    for t in pacing {
        match bounded("until_ready", t).await.unwrap() {
            // Woken by the shutdown itself, not at the end of its sleep.
            (Err(Error::NotInitialized { .. }), at) => assert_eq!(at, Duration::ZERO),
            (Err(e), at) => panic!("until_ready ended with {e:?} at {at:?}"),
            (Ok(d), at) => panic!("until_ready admitted after the shutdown at {at:?}: {d:?}"),
        }
    }
    assert_eq!(service.stats().total.allowed, 1);
}
