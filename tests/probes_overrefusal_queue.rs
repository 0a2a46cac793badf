//! Probes of over-refusal in the queue (helper-68): a waiter refused, or held, while its own
//! call would pass. Tokio's paused time, a service on a `TokioClock`, exact times.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::TokioClock;
use ratelimit::{Config, Decision, Error, Options, RateLimitService, Strategy};
use ratelimit_tests::until;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

/// A token bucket of 10 refilled one a second, waits of up to `timeout`.
fn service(timeout: Duration) -> (RateLimitService, Options) {
    let config = Config::builder()
        .queue_timeout(timeout)
        .build()
        .expect("valid configuration");
    let service = RateLimitService::with_clock(config, Arc::new(TokioClock::new())).unwrap();
    let bucket = Options::new()
        .strategy(Strategy::TokenBucket)
        .limit(10)
        .window(Duration::from_secs(10))
        .queue(true);
    (service, bucket)
}

/// Spends the 10 tokens of `options` on `"k"` (not queued), then queues three waiters behind
/// them (depths 1, 2, 3).
async fn spent_then_three_waiting(
    service: &RateLimitService,
    options: &Options,
    start: Instant,
) -> Vec<JoinHandle<(Result<Decision, Error>, Duration)>> {
    for _ in 0..10 {
        let spent = service.consume("k", &options.clone().queue(false)).await;
        assert!(spent.unwrap().allowed);
    }
    let mut waiters = Vec::new();
    for depth in 1..=3 {
        waiters.push(queued(service, options.clone(), start, depth).await);
    }
    waiters
}
/// A waiter of `options` on `"k"`, queued (the depth is `depth` once it has joined): its
/// outcome and when (since `start`) it ended.
async fn queued(
    service: &RateLimitService,
    options: Options,
    start: Instant,
    depth: u64,
) -> JoinHandle<(Result<Decision, Error>, Duration)> {
    let svc = service.clone();
    let task = tokio::spawn(async move {
        let d = svc.consume("k", &options).await;
        (d, start.elapsed())
    });
    let s = service.clone();
    until(move || s.stats().queue.depth == depth).await;
    task
}

/// A head of cost 8 whose turn (8 s away) is past its deadline (5 s) leaves at once; the call
/// of cost 1 behind it, whose token comes in a second, well within its own deadline, is
/// admitted then. It was refused at once, without asking the store: the line kept the
/// cost-8 head's turn as its own.
#[tokio::test(start_paused = true)]
async fn a_waiter_behind_a_head_whose_larger_cost_cannot_wait_is_admitted_when_its_own_call_fits() {
    let (service, bucket) = service(Duration::from_secs(5));
    let start = Instant::now();
    for _ in 0..10 {
        assert!(
            service
                .consume("k", &bucket.clone().queue(false))
                .await
                .unwrap()
                .allowed
        );
    }
    // One waiter of cost 1 first, so that the line exists: its token comes at +1 s.
    let first = queued(&service, bucket.clone(), start, 1).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    let big = queued(&service, bucket.clone().cost(8), start, 2).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    let small = queued(&service, bucket.clone(), start, 3).await;
    let (first, at) = first.await.unwrap();
    assert!(first.unwrap().allowed);
    assert_eq!(at, SECOND);
    // The cost-8 head is told at +1 s that its turn is at +9 s, past its deadline (+5.1 s).
    let (big, at) = big.await.unwrap();
    assert!(matches!(big, Err(Error::QueueTimeout { .. })), "{big:?}");
    assert_eq!(at, SECOND);
    // Its token at +2 s, inside its deadline (+5.2 s).
    let (small, at) = small.await.unwrap();
    assert!(
        matches!(small, Ok(ref d) if d.allowed),
        "refused at {at:?} with its token due at +2 s: {small:?}"
    );
    assert_eq!(at, 2 * SECOND);
}

/// A head of cost 4 that is cancelled while it waits for its turn (+4 s): the call of cost 1
/// behind it is admitted when its own token comes (+1 s), not held to the cancelled head's
/// turn.
#[tokio::test(start_paused = true)]
async fn a_waiter_behind_a_cancelled_head_of_larger_cost_is_admitted_when_its_own_call_fits() {
    let (service, bucket) = service(Duration::from_secs(5));
    let start = Instant::now();
    for _ in 0..10 {
        assert!(
            service
                .consume("k", &bucket.clone().queue(false))
                .await
                .unwrap()
                .allowed
        );
    }
    let big = queued(&service, bucket.clone().cost(4), start, 1).await;
    let small = queued(&service, bucket.clone(), start, 2).await;
    tokio::time::advance(Duration::from_millis(500)).await;
    big.abort();
    let s = service.clone();
    until(move || s.stats().queue.depth == 1).await;
    let (small, at) = small.await.unwrap();
    assert!(matches!(small, Ok(ref d) if d.allowed), "{small:?}");
    assert_eq!(at, SECOND, "held to the cancelled head's turn");
}

/// Waiters on a bucket of 10 refilled one a second, and a reload that adds a tier no call
/// uses (the waiters' limit, its key and its state unchanged): each waiter is admitted when
/// its token comes, as without the reload. Every wait begun under the replaced configuration
/// ended with `QueueTimeout` at the reload, including those whose limit it did not move (0 of
/// 3 admitted). A reload that changes their limit still ends them (the next probe).
#[tokio::test(start_paused = true)]
async fn a_reload_that_moves_no_limit_ends_no_wait() {
    let (service, bucket) = service(Duration::from_secs(5));
    let start = Instant::now();
    let waiters = spent_then_three_waiting(&service, &bucket, start).await;
    tokio::time::advance(Duration::from_millis(500)).await;
    let running = service.config();
    let again = Config::builder()
        .queue_timeout(Duration::from_secs(5))
        .tier(ratelimit::Tier::new("unused", 3))
        .store(running.store().clone())
        .build()
        .unwrap();
    service.reload(again).unwrap();
    let mut at = Vec::new();
    for waiter in waiters {
        let (outcome, when) = waiter.await.unwrap();
        if matches!(outcome, Ok(ref d) if d.allowed) {
            at.push(when);
        }
    }
    assert_eq!(at, [SECOND, 2 * SECOND, 3 * SECOND], "admitted at");
}

/// The same waiters and a reload that loosens their limit (a bucket of 20): their waits end
/// with `QueueTimeout` when they next wake (they call again under the new configuration), as the
/// README says: a call is never decided under a configuration a reload replaced.
#[tokio::test(start_paused = true)]
async fn a_reload_that_changes_the_waiters_limit_still_ends_their_waits() {
    let (service, _) = service(Duration::from_secs(5));
    let start = Instant::now();
    let default = Options::new().strategy(Strategy::TokenBucket).queue(true);
    let config = |limit| {
        Config::builder()
            .queue_timeout(Duration::from_secs(5))
            .strategy(Strategy::TokenBucket)
            .default_limit(limit)
            .default_window(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    service.reload(config(10)).unwrap();
    let waiters = spent_then_three_waiting(&service, &default, start).await;
    tokio::time::advance(Duration::from_millis(500)).await;
    service.reload(config(20)).unwrap();
    for waiter in waiters {
        let (outcome, when) = waiter.await.unwrap();
        assert!(
            matches!(outcome, Err(Error::QueueTimeout { .. })),
            "{outcome:?}"
        );
        // Each ends when it next wakes: the head at its turn (+1 s), the rest behind it.
        assert_eq!(when, SECOND);
    }
}
