//! Waiting instead of refusing: the queue (`queue_enabled`, `Options::queue`, `queue = true`)
//! and `until_ready`.
//!
//! Time: every test runs on Tokio's paused time, and every service on a `TokioClock`, which
//! reads that paused time. Tokio moves it on by itself to the next timer when every task is
//! asleep, so the service decides at exactly the instants its waiters' timers fire: no test
//! sleeps, and no two clocks are advanced by hand.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TokioClock;
use ratelimit::{
    rate_limit, Config, ConfigBuilder, Decision, Error, MemoryStore, Module, Options,
    RateLimitService, Strategy, Tier,
};
use ratelimit_tests::until;
use tokio::time::Instant;

fn service(config: ConfigBuilder) -> RateLimitService {
    let config = config.build().expect("valid configuration");
    RateLimitService::with_clock(config, Arc::new(TokioClock::new())).expect("service")
}

fn fixed(limit: u64, window_secs: u64) -> Options {
    Options::new()
        .limit(limit)
        .window(Duration::from_secs(window_secs))
        .strategy(Strategy::FixedWindow)
}

/// A memory store that counts the decisions asked of it (how many times waiters woke), and
/// once `slow` is set takes 60 s (of Tokio's paused time) to answer, deciding only after
/// that: a decision abandoned before then spends nothing.
#[derive(Clone, Default)]
struct Watched {
    store: MemoryStore,
    decisions: Arc<AtomicU64>,
    slow: Arc<AtomicBool>,
}

impl Store for Watched {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        if self.slow.load(Ordering::Relaxed) {
            // Tokio's paused time: the store answers 60 s later on the test's clock, at once.
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Store::decide(&self.store, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.store, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.store, key).await
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_on_one_key_are_admitted_in_arrival_order_as_capacity_frees() {
    let service = service(Config::builder().queue_enabled(true).queue_timeout("1m"));
    let opts = fixed(1, 1);
    let start = Instant::now();
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5u64 {
        let (svc, order) = (service.clone(), Arc::clone(&order));
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            let decision = svc.consume("k", &opts).await.unwrap();
            assert!(decision.allowed);
            order.lock().unwrap().push((i, start.elapsed()));
        }));
        let s = service.clone();
        until(move || s.stats().queue.depth == i + 1).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let expected: Vec<_> = (0..5u64).map(|i| (i, Duration::from_secs(i + 1))).collect();
    assert_eq!(*order.lock().unwrap(), expected);
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (6, 0));
    assert_eq!(
        (stats.queue.queued, stats.queue.admitted, stats.queue.depth),
        (5, 5, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_over_its_limit_without_the_queue_is_refused_at_once() {
    let service = service(Config::builder().queue_enabled(true));
    let opts = fixed(1, 1);
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let refused = service
        .consume("k", &opts.clone().queue(false))
        .await
        .unwrap();
    assert!(!refused.allowed);
    // And the other way round: a call may wait when the module does not queue.
    let plain = self::service(Config::builder());
    assert!(plain.consume("k", &opts).await.unwrap().allowed);
    let start = Instant::now();
    assert!(plain.enforce("k", &opts.clone().queue(true)).await.is_ok());
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert!(plain.enforce("k", &opts).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_timeout_ends_with_queue_timeout_and_the_retry_after() {
    let service = service(Config::builder().queue_enabled(true).queue_timeout("3s"));
    let opts = Options::new().limit(1).window(Duration::from_secs(10));
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let start = Instant::now();
    // Its turn (10 s) is past its timeout (3 s): refused at once, told the whole 10 s, not
    // kept waiting 3 s in vain.
    match service.consume("k", &opts).await {
        Err(Error::QueueTimeout { retry_after }) => {
            assert_eq!(retry_after, Duration::from_secs(10));
            assert_eq!(
                Error::QueueTimeout { retry_after }.retry_after(),
                Some(retry_after)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (1, 1));
    assert_eq!((stats.queue.timed_out, stats.queue.depth), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_gives_its_place_back_and_spends_nothing() {
    let service = service(Config::builder().queue_enabled(true).queue_timeout("1m"));
    let opts = fixed(2, 10);
    for _ in 0..2 {
        assert!(service.consume("k", &opts).await.unwrap().allowed);
    }
    let start = Instant::now();
    let first = {
        let service = service.clone();
        let opts = opts.clone();
        tokio::spawn(async move { service.consume("k", &opts).await })
    };
    let s = service.clone();
    until(move || s.stats().queue.depth == 1).await;
    let second = {
        let service = service.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            let d = service.consume("k", &opts).await;
            (d, start.elapsed())
        })
    };
    let s = service.clone();
    until(move || s.stats().queue.depth == 2).await;
    // The head gives up: its place goes to the next waiter, who is admitted when the window
    // turns, and the one who left spent nothing.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(service.stats().queue.cancelled, 1);
    let (decision, at) = second.await.unwrap();
    assert!(decision.unwrap().allowed);
    assert_eq!(at, Duration::from_secs(10));
    assert_eq!(service.status("k", &opts).await.unwrap().remaining, 1);
    let stats = service.stats();
    assert_eq!(
        (
            stats.queue.queued,
            stats.queue.admitted,
            stats.queue.cancelled,
            stats.queue.depth
        ),
        (2, 1, 1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_at_once() {
    let service = service(
        Config::builder()
            .queue_enabled(true)
            .max_queue_size(2)
            .queue_timeout("1m"),
    );
    let opts = fixed(1, 10);
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let service = service.clone();
            let opts = opts.clone();
            tokio::spawn(async move { service.consume("k", &opts).await })
        })
        .collect();
    let s = service.clone();
    until(move || s.stats().queue.depth == 2).await;
    let start = Instant::now();
    match service.consume("other", &opts).await {
        Ok(d) if d.allowed => {} // another key with room is not held back by a full queue
        other => panic!("{other:?}"),
    }
    match service.consume("k", &opts).await {
        Err(Error::QueueFull { max_queue_size: 2 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    let mut admitted = 0;
    for w in waiters {
        match w.await.unwrap() {
            Ok(d) if d.allowed => admitted += 1,
            Err(Error::QueueTimeout { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    // One per 10 s window, for a minute: both waiters.
    assert_eq!(admitted, 2);
    assert_eq!(service.stats().queue.full, 1);
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_arrival_takes_the_place_of_the_newest_lowest_priority_waiter() {
    let service = service(
        Config::builder()
            .queue_enabled(true)
            .max_queue_size(2)
            .queue_timeout("1m")
            .strategy(Strategy::FixedWindow)
            .tier(Tier::new("free", 1).window("10s").priority(0))
            .tier(Tier::new("pro", 1).window("10s").priority(10)),
    );
    let free = Options::new().tier("free");
    let pro = Options::new().tier("pro");
    for key in ["a", "b", "c"] {
        assert!(service.consume(key, &free).await.unwrap().allowed);
    }
    assert!(service.consume("c", &pro).await.unwrap().allowed);
    let spawn = |key: &'static str, opts: Options| {
        let service = service.clone();
        let opts = opts.clone();
        tokio::spawn(async move { service.consume(key, &opts).await })
    };
    let older = spawn("a", free.clone());
    let s = service.clone();
    until(move || s.stats().queue.depth == 1).await;
    let newer = spawn("b", free.clone());
    let s = service.clone();
    until(move || s.stats().queue.depth == 2).await;
    // The queue is full: a free call is refused, a pro call displaces the newest free one.
    assert!(matches!(
        service.consume("c", &free).await,
        Err(Error::QueueFull { .. })
    ));
    let start = Instant::now();
    let pro_call = spawn("c", pro);
    match newer.await.unwrap() {
        Err(Error::QueueFull { max_queue_size: 2 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(pro_call.await.unwrap().unwrap().allowed);
    assert!(older.await.unwrap().unwrap().allowed);
    let stats = service.stats();
    assert_eq!(stats.queue.full, 2);
    assert_eq!(stats.by_tier["pro"].allowed, 2);
    assert_eq!(
        (stats.by_tier["free"].allowed, stats.by_tier["free"].denied),
        (4, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_can_never_succeed_is_refused_at_once() {
    let service = service(Config::builder().queue_enabled(true));
    let start = Instant::now();
    match service.consume("k", &Options::new().limit(2).cost(5)).await {
        Err(Error::CostAboveCapacity {
            cost: 5,
            capacity: 2,
        }) => {}
        other => panic!("{other:?}"),
    }
    let zero = Options::new().limit(0);
    let refused = service.consume("k", &zero).await;
    assert!(
        !matches!(refused, Ok(ref d) if d.allowed),
        "a limit of 0 is never admitted: {refused:?}"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(service.stats().queue.queued, 0);
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_waiters_are_each_admitted_or_timed_out_as_the_limit_allows() {
    const WAITERS: u64 = 10_000;
    let store = Watched::default();
    let config = Config::builder()
        .queue_enabled(true)
        .max_queue_size(WAITERS as usize)
        .queue_timeout("10500ms")
        .build()
        .unwrap();
    let service =
        RateLimitService::with_store(config, store.clone(), Arc::new(TokioClock::new())).unwrap();
    // 100 per one-second fixed window, starting on a window boundary (`START` is whole).
    let opts = fixed(100, 1);
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let service = service.clone();
            let opts = opts.clone();
            tokio::spawn(async move { service.consume("hot", &opts).await })
        })
        .collect();
    let (mut admitted, mut timed_out) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(d) if d.allowed => admitted += 1,
            Err(Error::QueueTimeout { .. }) => timed_out += 1,
            other => panic!("{other:?}"),
        }
    }
    // 100 at once, then 100 at each of the ten window starts within 10.5 s.
    assert_eq!((admitted, timed_out), (1_100, 8_900));
    let stats = service.stats();
    assert_eq!(
        (
            stats.queue.queued,
            stats.queue.admitted,
            stats.queue.timed_out
        ),
        (9_900, 1_000, 8_900)
    );
    assert_eq!((stats.total.allowed, stats.total.denied), (1_100, 8_900));
    // Nothing is left behind: no waiter, no line.
    assert_eq!(stats.queue.depth, 0);
    // No thundering herd: 101 decisions at first (the 101st queued; later arrivals queue
    // behind it without asking), then 101 per window: 100 admitted, and one refused head
    // that sleeps until the next window.
    assert_eq!(store.decisions.load(Ordering::Relaxed), 101 + 10 * 101);
}

#[tokio::test(start_paused = true)]
async fn until_ready_sleeps_until_retry_after_and_gives_up_at_once_on_a_deadline_it_cannot_meet() {
    let service = service(Config::builder());
    let opts = fixed(1, 1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(5);
    service.until_ready("k", &opts, deadline).await.unwrap();
    service.until_ready("k", &opts, deadline).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    match service
        .until_ready("k", &opts, Instant::now() + Duration::from_millis(500))
        .await
    {
        Err(Error::QueueTimeout { retry_after }) => {
            assert_eq!(retry_after, Duration::from_secs(1))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // With jitter, the wake-up lands within the jitter after the retry-after.
    let jitter = Duration::from_millis(200);
    service
        .until_ready_with_jitter("k", &opts, deadline, jitter)
        .await
        .unwrap();
    let at = start.elapsed();
    assert!(
        at >= Duration::from_secs(2) && at <= Duration::from_secs(2) + jitter,
        "{at:?}"
    );
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (3, 1));
    assert_eq!(
        stats.queue.queued, 0,
        "until_ready takes no place in the queue"
    );
}

#[test]
fn queue_settings_are_validated_by_name_in_the_builder_and_in_files() {
    let err = Config::builder()
        .queue_timeout("soon")
        .max_queue_size(0)
        .build()
        .unwrap_err();
    let Error::InvalidConfig(e) = &err else {
        panic!("{err}")
    };
    assert!(e.has("queue_timeout") && e.has("max_queue_size"), "{err}");
    let config = Config::from_toml_str(
        "queue_enabled = true\nmax_queue_size = 50\nqueue_timeout = \"250ms\"\n",
    )
    .unwrap();
    assert!(config.queue_enabled());
    assert_eq!(config.max_queue_size(), 50);
    assert_eq!(config.queue_timeout(), Duration::from_millis(250));
    let err = Config::from_json_str(r#"{"queue_timeout": "0s"}"#).unwrap_err();
    let Error::InvalidConfig(e) = &err else {
        panic!("{err}")
    };
    assert!(e.has("queue_timeout"), "{err}");
    let defaults = Config::default();
    assert!(!defaults.queue_enabled());
    assert_eq!(
        (defaults.max_queue_size(), defaults.queue_timeout()),
        (1_000, Duration::from_secs(5))
    );
}

#[rate_limit(limit = 1, window = "1s", strategy = "fixed-window", queue = true)]
async fn paced() -> Result<(), Error> {
    Ok(())
}

/// The one test of this binary that installs the global module.
#[tokio::test(start_paused = true)]
async fn annotated_fns_wait_and_module_shutdown_wakes_every_waiter_with_not_initialized() {
    let module = Module::builder()
        .clock(TokioClock::new())
        .queue_timeout("1m")
        .init()
        .unwrap();
    let start = Instant::now();
    // `queue = true` waits though the module does not queue by default.
    paced().await.unwrap();
    paced().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));

    let service = module.service().clone();
    let waiters: Vec<_> = (0..3).map(|_| tokio::spawn(paced())).collect();
    let s = service.clone();
    until(move || s.stats().queue.depth == 3).await;
    drop(module);
    for w in waiters {
        match w.await.unwrap() {
            Err(Error::NotInitialized { function }) => {
                assert!(function.ends_with("paced"), "{function}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1), "woken at once");
    // Nothing waiting was admitted, and nothing waits after.
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.queue.depth), (2, 0));
    let opts = fixed(1, 1).queue(true);
    match service.consume("later", &opts).await {
        Err(Error::NotInitialized { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// A call that must wait (its turn in the queue, `until_ready`) where no Tokio runtime runs,
/// or in one built without a timer, is refused with `Error::NoRuntime` rather than panicking
/// in Tokio's timer; a call that needs no wait is decided as usual there.
#[test]
fn a_call_that_must_wait_without_a_tokio_timer_is_refused_instead_of_panicking() {
    let config = Config::builder()
        .default_limit(1)
        .queue_enabled(true)
        .build()
        .unwrap();
    let service = RateLimitService::new(config).unwrap();
    let per_hour = fixed(1, 3_600);
    let no_timer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    use futures::executor::block_on as outside;
    assert!(outside(service.consume("k", &per_hour)).unwrap().allowed);
    let deadline = Instant::now() + Duration::from_secs(7_200);
    let refused = [
        outside(service.consume("k", &per_hour)),
        no_timer.block_on(service.consume("k", &per_hour)),
        outside(service.until_ready("k", &per_hour, deadline)),
        no_timer.block_on(service.until_ready("k", &per_hour, deadline)),
    ];
    for (i, result) in refused.into_iter().enumerate() {
        match result {
            Err(Error::NoRuntime { missing }) => {
                let named = ["no Tokio runtime", "enable_time"][i % 2];
                assert!(missing.contains(named), "{i}: {missing}");
            }
            other => panic!("{i}: refused for the missing timer, got {other:?}"),
        }
    }
    let counts = service.stats().total;
    assert_eq!((counts.allowed, counts.errors), (1, 4));
}

fn half_second_window() -> Options {
    Options::new()
        .limit(1)
        .window(Duration::from_millis(500))
        .strategy(Strategy::FixedWindow)
}

/// The queue's timeout bounds the whole wait, the store's answers inside it included: a head
/// whose store has not answered by the deadline abandons the answer and times out then.
#[tokio::test(start_paused = true)]
async fn a_queued_call_whose_store_answers_after_its_timeout_ends_with_queue_timeout_at_the_timeout(
) {
    let store = Watched::default();
    let config = Config::builder()
        .queue_enabled(true)
        .queue_timeout("1s")
        .build()
        .unwrap();
    let service =
        RateLimitService::with_store(config, store.clone(), Arc::new(TokioClock::new())).unwrap();
    let opts = half_second_window();
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let start = Instant::now();
    let waiter = {
        let (service, opts) = (service.clone(), opts.clone());
        tokio::spawn(async move { service.consume("k", &opts).await })
    };
    // Refused until the next window (500 ms), it waits; from then on the store takes 60 s.
    let s = service.clone();
    until(move || s.stats().queue.depth == 1).await;
    store.slow.store(true, Ordering::Relaxed);
    match waiter.await.unwrap() {
        // No figure newer than the deadline: the least retry-after.
        Err(Error::QueueTimeout { retry_after }) => {
            assert_eq!(retry_after, Duration::from_millis(1))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (1, 1));
    assert_eq!(
        (
            stats.queue.timed_out,
            stats.queue.admitted,
            stats.queue.depth
        ),
        (1, 0, 0)
    );
    // The abandoned answer spent nothing (this store decides only at its end).
    store.slow.store(false, Ordering::Relaxed);
    assert_eq!(service.status("k", &opts).await.unwrap().remaining, 1);
}

/// `until_ready`'s deadline bounds the store's answer too, the first one included.
#[tokio::test(start_paused = true)]
async fn until_ready_whose_store_answers_after_the_deadline_ends_with_queue_timeout_at_the_deadline(
) {
    let store = Watched::default();
    let service = RateLimitService::with_store(
        Config::builder().build().unwrap(),
        store.clone(),
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let opts = half_second_window();
    store.slow.store(true, Ordering::Relaxed);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(1);
    match service.until_ready("k", &opts, deadline).await {
        Err(Error::QueueTimeout { retry_after }) => {
            assert_eq!(retry_after, Duration::from_millis(1))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // A store that answers within the deadline still admits; one refusal and a sleep later
    // it answers past the deadline, and the wait ends at the deadline.
    store.slow.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(1);
    service.until_ready("k", &opts, deadline).await.unwrap();
    let waiting = service.until_ready("k", &opts, deadline);
    let slow = Arc::clone(&store.slow);
    let (result, ()) = tokio::join!(waiting, async move {
        tokio::task::yield_now().await;
        slow.store(true, Ordering::Relaxed);
    });
    assert!(
        matches!(result, Err(Error::QueueTimeout { .. })),
        "{result:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let stats = service.stats();
    assert_eq!((stats.total.allowed, stats.total.denied), (1, 2));
}

/// Displacement frees the displaced waiter's place at the moment the newcomer takes it: the
/// depth never passes `max_queue_size`, even before the displaced waiters run again.
#[tokio::test(start_paused = true)]
async fn higher_priority_arrivals_displacing_waiters_never_push_the_depth_past_max_queue_size() {
    const MAX: u64 = 4;
    let mut config = Config::builder()
        .queue_enabled(true)
        .max_queue_size(MAX as usize)
        .queue_timeout("1m")
        .strategy(Strategy::FixedWindow);
    let tiers = ["p0", "p1", "p2", "p3"];
    for (priority, name) in tiers.into_iter().enumerate() {
        config = config.tier(Tier::new(name, 1).window("10s").priority(priority as i32));
    }
    let service = service(config);
    let opts: Vec<_> = tiers.iter().map(|t| Options::new().tier(*t)).collect();
    for o in &opts {
        assert!(service.consume("k", o).await.unwrap().allowed);
    }
    let start = Instant::now();
    // Each arrival is polled once by hand (it asks, is refused, and takes a place) while no
    // displaced waiter runs: the depth is read after every single one.
    let mut waiting = Vec::new();
    for (tier, o) in opts.iter().enumerate() {
        for _ in 0..MAX {
            let mut call = Box::pin(service.consume("k", o));
            assert!(futures::poll!(call.as_mut()).is_pending());
            let arrived = waiting.len() as u64 + 1;
            assert_eq!(
                service.stats().queue.depth,
                arrived.min(MAX),
                "after arrival {arrived}"
            );
            waiting.push((tier, call));
        }
    }
    // The queue holds the four highest: an arrival of no higher priority is refused.
    assert!(matches!(
        service.consume("k", &opts[3]).await,
        Err(Error::QueueFull { max_queue_size: 4 })
    ));
    assert_eq!(service.stats().queue.depth, MAX);
    let results = futures::future::join_all(
        waiting
            .into_iter()
            .map(|(tier, call)| async move { (tier, call.await, start.elapsed()) }),
    )
    .await;
    let mut admitted_at = Vec::new();
    for (tier, result, at) in results {
        match (tier, result) {
            (3, Ok(d)) if d.allowed => admitted_at.push(at),
            (0..=2, Err(Error::QueueFull { max_queue_size: 4 })) => {
                assert_eq!(at, Duration::ZERO)
            }
            other => panic!("{other:?}"),
        }
    }
    // One per 10 s window.
    let expected: Vec<_> = (1..=4).map(|i| Duration::from_secs(10 * i)).collect();
    assert_eq!(admitted_at, expected);
    let stats = service.stats();
    assert_eq!(
        (
            stats.queue.queued,
            stats.queue.full,
            stats.queue.admitted,
            stats.queue.depth
        ),
        (16, 13, 4, 0)
    );
    assert_eq!(
        (stats.by_tier["p3"].allowed, stats.by_tier["p3"].denied),
        (5, 1)
    );
    assert_eq!(
        (stats.by_tier["p0"].allowed, stats.by_tier["p0"].denied),
        (1, 4)
    );
}
