//! helper-61's attacks on the queue's known turn (`service/queue.rs`, `wait.rs`: a waiter that
//! comes to the front before its line's `ready_at` waits for it without asking the store)
//! together with a reload's transition, a reset and a cancelled head. Every admission the
//! queue makes is a store's decision, so the turn can only make a waiter late: the probes
//! hold it to exact counts per window (a waiter admitted under an old, looser turn, or past a
//! moved limit's old state, would show as one too many).
//!
//! Time: Tokio's paused time, the service on a `TokioClock` that reads it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::TokioClock;
use ratelimit::{
    Config, ConfigBuilder, Decision, Error, Options, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::until;
use tokio::task::JoinHandle;
use tokio::time::Instant;

type Waiter = JoinHandle<(Result<Decision, Error>, Duration)>;

/// A service over `config` on Tokio's paused time.
fn tokio_service(config: ConfigBuilder) -> RateLimitService {
    let config = config.build().expect("valid configuration");
    RateLimitService::with_clock(config, Arc::new(TokioClock::new())).expect("service")
}

/// A call on `"k"` with `opts` spawned and waited for until the queue's `queued` count is
/// `queued`: when it ended and how (since `start`).
async fn queued(service: &RateLimitService, opts: &Options, start: Instant, n: u64) -> Waiter {
    let (svc, opts) = (service.clone(), opts.clone());
    let task = tokio::spawn(async move {
        let d = svc.consume("k", &opts).await;
        (d, start.elapsed())
    });
    let s = service.clone();
    until(move || s.stats().queue.queued == n).await;
    task
}

/// Admissions by second since the start; every other outcome is counted as `ended`.
async fn by_second(tasks: Vec<Waiter>) -> (BTreeMap<u64, u64>, u64) {
    let (mut admitted, mut ended) = (BTreeMap::new(), 0);
    for task in tasks {
        let out = tokio::time::timeout(Duration::from_secs(3_600), task).await;
        match out.expect("a waiter still waits after an hour").unwrap() {
            (Ok(d), at) if d.allowed => *admitted.entry(at.as_secs()).or_insert(0) += 1,
            (Ok(d), _) => panic!("a refusal answered to a waiter: {d:?}"),
            (Err(_), _) => ended += 1,
        }
    }
    (admitted, ended)
}

/// A token-bucket tier `"a"` of 10 plus a burst of 5 on `window`, refilled at a token every
/// 6 s whatever the window, callers waiting up to 5 minutes.
fn bucket(window: Duration) -> ConfigBuilder {
    let refill = 10 * window.as_secs() / 60;
    let tier = Tier::new("a", 10)
        .burst(5)
        .refill(refill)
        .window(window)
        .strategy(Strategy::TokenBucket);
    Config::builder()
        .tier(tier)
        .queue_enabled(true)
        .queue_timeout("5m")
        .max_queue_size(100)
}

/// The bucket of 15 at 6 s a token, spent, moved by a reload to two minutes at the same rate;
/// then 12 callers waiting. Their turns come at the old state's refill, one every 6 s: none
/// at the switch, exactly one at each 6 s inside the old window (9 by 54 s).
#[tokio::test(start_paused = true)]
async fn waiters_on_a_moved_bucket_are_admitted_at_the_old_rate_inside_the_old_window() {
    let minute = Duration::from_secs(60);
    let service = tokio_service(bucket(minute));
    let (start, opts) = (Instant::now(), Options::new().tier("a"));
    let plain = opts.clone().queue(false);
    let mut spent = 0;
    for _ in 0..16 {
        spent += u64::from(service.consume("k", &plain).await.unwrap().allowed);
    }
    assert_eq!(spent, 15);
    service.reload(bucket(2 * minute).build().unwrap()).unwrap();
    let mut tasks = Vec::new();
    for n in 1..=12 {
        tasks.push(queued(&service, &opts, start, n).await);
    }
    let (admitted, _) = by_second(tasks).await;
    let inside: BTreeMap<u64, u64> = admitted.range(..60).map(|(&s, &n)| (s, n)).collect();
    let expected: BTreeMap<u64, u64> = (1..=9).map(|i| (6 * i, 1)).collect();
    assert_eq!(inside, expected, "admitted by second: {admitted:?}");
}

/// 2 a minute (sliding log), both spent; 4 callers waiting (the head told its turn is at
/// 60 s); the key reset at 10 s. The reset gives a fresh budget of 2, which the known turn
/// leaves for 60 s: the waiters are admitted 2 at 60 s and 2 at 120 s, never more than 2 in
/// any minute, none ending otherwise.
#[tokio::test(start_paused = true)]
async fn waiters_across_a_reset_are_admitted_at_most_the_limit_a_minute() {
    let config = Config::builder()
        .queue_enabled(true)
        .queue_timeout("5m")
        .strategy(Strategy::SlidingWindow)
        .default_limit(2)
        .default_window("1m");
    let service = tokio_service(config);
    let (start, opts) = (Instant::now(), Options::new());
    let plain = opts.clone().queue(false);
    for _ in 0..2 {
        assert!(service.consume("k", &plain).await.unwrap().allowed);
    }
    let mut tasks = Vec::new();
    for n in 1..=4 {
        tasks.push(queued(&service, &opts, start, n).await);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    service.reset("k", None).await.unwrap();
    let (admitted, ended) = by_second(tasks).await;
    assert_eq!(ended, 0);
    assert_eq!(admitted.values().sum::<u64>(), 4, "{admitted:?}");
    for &at in admitted.keys() {
        let in_minute: u64 = admitted.range(at..at + 60).map(|(_, &n)| n).sum();
        assert!(
            in_minute <= 2,
            "{in_minute} admitted in the minute from {at} s"
        );
    }
}

/// 1 every 10 s (sliding log), spent; 3 callers waiting, the head dropped while it sleeps
/// until its known turn. The next head inherits the turn: it does not ask before 10 s, and
/// the two left are admitted at 10 s and 20 s exactly.
#[tokio::test(start_paused = true)]
async fn a_cancelled_head_hands_its_known_turn_on_and_nothing_overtakes_it() {
    let config = Config::builder()
        .queue_enabled(true)
        .queue_timeout("1m")
        .strategy(Strategy::SlidingWindow)
        .default_limit(1)
        .default_window("10s");
    let service = tokio_service(config);
    let (start, opts) = (Instant::now(), Options::new());
    assert!(
        service
            .consume("k", &opts.clone().queue(false))
            .await
            .unwrap()
            .allowed
    );
    let head = queued(&service, &opts, start, 1).await;
    let second = queued(&service, &opts, start, 2).await;
    let third = queued(&service, &opts, start, 3).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    head.abort();
    let _ = head.await;
    let (admitted, ended) = by_second(vec![second, third]).await;
    assert_eq!(ended, 0);
    assert_eq!(admitted, BTreeMap::from([(10, 1), (20, 1)]));
    assert_eq!(service.stats().queue.cancelled, 1);
    assert_eq!(service.stats().queue.depth, 0);
}
