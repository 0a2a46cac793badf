//! Probes of the refunds surface (issue 26), kept as tests: ways a spend given back could make
//! a budget admit more than its quota, or run a `count = "err"` body more often than the
//! limit. Each names what it checks; every one failed or would fail on a refund that reached
//! the wrong state.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::Store;
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Error, Failover, FailurePolicy, ManualClock, Module, Options, Quota,
    RateLimitService, Strategy,
};
use ratelimit_tests::START;

fn module() -> TestModule {
    TestModule::new(Module::builder().default_limit(3).default_window("1m")).expect("module")
}

fn memory(config: Config) -> (RateLimitService, ManualClock) {
    ratelimit_tests::service(config)
}

/// Threads spend and give back on one key at once: the spends held (admitted, not given back)
/// never exceed the quota at any moment, and at the end the budget is exactly the quota less
/// what is still held.
#[test]
fn concurrent_spends_and_refunds_never_hold_more_than_the_quota() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory(Config::default());
        let options = Options::new()
            .limit(5)
            .window(Duration::from_secs(3600))
            .strategy(strategy);
        let held = Arc::new(AtomicUsize::new(0));
        let kept = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (service, options, held, kept) = (&service, &options, &held, &kept);
                scope.spawn(move || {
                    for round in 0..2_000 {
                        let spent = futures::executor::block_on(service.spend("k", options));
                        let mut spent = spent.unwrap();
                        if !spent.decision().allowed {
                            continue;
                        }
                        let now_held = held.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now_held <= 5, "{strategy}: {now_held} held");
                        // A few spends are kept for good: the others go back.
                        if (thread + round) % 997 == 0 {
                            kept.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        held.fetch_sub(1, Ordering::SeqCst);
                        assert!(spent.refund_now().unwrap().unwrap(), "{strategy}");
                    }
                });
            }
        });
        let kept = kept.load(Ordering::SeqCst) as u64;
        let status = futures::executor::block_on(service.status("k", &options)).unwrap();
        assert_eq!(status.remaining, 5u64.saturating_sub(kept), "{strategy}");
    }
}

static HANGING_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 2, window = "1m", key = user, count = "err")]
async fn hangs(user: &str) -> Result<(), Error> {
    let _ = user;
    HANGING_RUNS.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

/// A `count = "err"` call cancelled while its body runs (its future dropped: a client gone, a
/// timeout around it) never learns its outcome: it keeps its spend.
#[tokio::test]
async fn a_cancelled_call_keeps_its_spend() {
    let m = module();
    m.scope(async {
        for _ in 0..2 {
            let call = tokio::time::timeout(Duration::from_millis(1), hangs("x"));
            assert!(call.await.is_err(), "the body never ends");
        }
        let refused = hangs("x");
        let refused = futures::FutureExt::now_or_never(refused).expect("refused at once");
        assert!(matches!(refused, Err(Error::Exceeded(_))), "{refused:?}");
    })
    .await;
    assert_eq!(HANGING_RUNS.load(Ordering::SeqCst), 2);
}

#[rate_limit(limit = 2, window = "1m", key = user, count = "err")]
fn panics(user: &str) -> Result<(), Error> {
    let _ = user;
    panic!("the body failed without an outcome");
}

/// A body that panics has no outcome to give its spend back by: it keeps it.
#[test]
fn a_panicking_body_keeps_its_spend() {
    let m = module();
    m.run(|| {
        for _ in 0..2 {
            assert!(std::panic::catch_unwind(|| panics("y")).is_err());
        }
        assert!(matches!(panics("y"), Err(Error::Exceeded(_))));
    });
}

/// A spend made before a reload gives back to the state it was spent from, never to the one a
/// new window moved the limit to; under the same state with a higher limit, the budget still
/// never exceeds the quota.
#[tokio::test]
async fn a_refund_after_a_reload_reaches_only_the_state_it_was_spent_from() {
    let config = |limit, window: &str| {
        Config::builder()
            .default_limit(limit)
            .default_window(window)
            .build()
            .unwrap()
    };
    let (service, _clock) = memory(config(2, "1m"));
    let options = Options::new();
    let old = service.spend("z", &options).await.unwrap();
    service.reload(config(2, "2m")).unwrap();
    // The new window is another state: a spend there, and the old refund does not reach it.
    let new = service.spend("z", &options).await.unwrap();
    assert!(new.decision().allowed);
    assert!(
        old.refund().await.unwrap(),
        "given back to the old window's state"
    );
    let left = service.status("z", &options).await.unwrap();
    assert_eq!(left.remaining, 1, "the new state keeps its spend");

    let (service, _clock) = memory(config(2, "1m"));
    let first = service.spend("w", &options).await.unwrap();
    let second = service.spend("w", &options).await.unwrap();
    service.reload(config(4, "1m")).unwrap();
    assert!(first.refund().await.unwrap());
    assert!(second.refund().await.unwrap());
    let level = service.status("w", &options).await.unwrap();
    assert!(level.remaining <= 4, "{level:?}");
}

/// A spend the failover's local share decided (the store away) is never given back: its
/// stamp names the local key, not the store's.
#[tokio::test]
async fn a_failovers_local_share_never_refunds() {
    let config = Config::builder()
        .default_limit(4)
        .default_window("1m")
        .build()
        .unwrap();
    let store = Failover::new(
        ratelimit_tests::Forwarding {
            store: ratelimit_tests::Broken,
            refunds: true,
        },
        FailurePolicy::Local { pods: 2 },
    );
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_store(config, store, Arc::new(clock)).unwrap();
    let spent = service.spend("v", &Options::new()).await.unwrap();
    assert!(spent.decision().allowed);
    assert!(!spent.refundable());
    let all = service.spend_all(&[("v", &Options::new())]).await.unwrap();
    assert!(all.decisions()[0].allowed);
    assert!(!all.refundable());
}

/// A spend that waited in the queue is given back like any other, once.
#[tokio::test(start_paused = true)]
async fn a_spend_that_waited_in_the_queue_is_given_back_once() {
    let config = Config::builder()
        .default_limit(1)
        .default_window("1s")
        .strategy(Strategy::TokenBucket)
        .queue_enabled(true)
        .queue_timeout("5s")
        .build()
        .unwrap();
    let service =
        RateLimitService::with_clock(config, Arc::new(ratelimit::testing::TokioClock::new()))
            .unwrap();
    let first = service.spend("u", &Options::new()).await.unwrap();
    assert!(first.decision().allowed);
    // Over the limit: waits for the next token, then is admitted.
    let waited = service.spend("u", &Options::new()).await.unwrap();
    assert!(waited.decision().allowed);
    assert!(waited.refundable());
    assert!(waited.refund().await.unwrap());
    let level = service.status("u", &Options::new()).await.unwrap();
    assert!(level.remaining <= 1, "{level:?}");
    assert_eq!(service.stats().total.refunded, 1);
}

/// A block holds against a clock stepped back (it ends no earlier than it said), and a
/// refund of a spend made before the refusal does not lift it.
#[tokio::test]
async fn a_block_survives_a_clock_stepped_back_and_a_refund() {
    let (service, clock) = memory(Config::default());
    let options = Options::new()
        .limit(1)
        .window(Duration::from_secs(10))
        .block_for(Duration::from_secs(100));
    let spent = service.spend("t", &options).await.unwrap();
    assert!(!service.consume("t", &options).await.unwrap().allowed);
    assert!(spent.refund().await.unwrap(), "the spend goes back");
    assert!(
        !service.consume("t", &options).await.unwrap().allowed,
        "the block holds"
    );
    clock.set(START - Duration::from_secs(30));
    let refused = service.consume("t", &options).await.unwrap();
    assert!(!refused.allowed);
    clock.set(START + Duration::from_secs(99));
    assert!(!service.consume("t", &options).await.unwrap().allowed);
    clock.set(START + Duration::from_secs(100));
    assert!(service.consume("t", &options).await.unwrap().allowed);
}

/// A shadow limit with a block refuses nothing, during the block either: its calls are
/// admitted, marked shadowed, as long as the block would have refused them.
#[tokio::test]
async fn a_shadow_limits_block_refuses_nothing() {
    let (service, clock) = memory(Config::default());
    let options = Options::new()
        .limit(1)
        .window(Duration::from_secs(10))
        .block_for(Duration::from_secs(100))
        .shadow(true);
    assert!(!service.consume("s", &options).await.unwrap().shadowed);
    for _ in 0..3 {
        let d = service.consume("s", &options).await.unwrap();
        assert!(d.allowed && d.shadowed, "{d:?}");
    }
    clock.advance(Duration::from_secs(50));
    let d = service.consume("s", &options).await.unwrap();
    assert!(
        d.allowed && d.shadowed,
        "still blocked, still admitted: {d:?}"
    );
    clock.advance(Duration::from_secs(50));
    assert!(!service.consume("s", &options).await.unwrap().shadowed);
}

/// Penalties and rewards at the edges of `u64`, on every strategy: never a wrap or a panic,
/// the penalty refusing, the reward never past the quota.
#[tokio::test]
async fn penalties_and_rewards_at_the_edges_never_wrap() {
    for strategy in Strategy::ALL {
        let (service, _clock) = memory(Config::default());
        let options = Options::new()
            .limit(5)
            .window(Duration::from_secs(60))
            .strategy(strategy);
        let level = service.penalize("e", &options, u64::MAX).await.unwrap();
        assert!(!level.allowed, "{strategy}: {level:?}");
        assert_eq!(level.remaining, 0, "{strategy}");
        let level = service.penalize("e", &options, u64::MAX).await.unwrap();
        assert!(!level.allowed, "{strategy}");
        let level = service.reward("e", &options, u64::MAX).await.unwrap();
        assert_eq!(level.remaining, 5, "{strategy}: {level:?}");
        assert!(
            service.consume("e", &options).await.unwrap().allowed,
            "{strategy}"
        );
    }
}

/// A penalty or a reward on a key held under another strategy is refused and changes
/// nothing; a reward never lifts a block.
#[tokio::test]
async fn adjustments_on_another_strategys_key_are_refused_and_a_reward_lifts_no_block() {
    let (service, _clock) = memory(Config::default());
    let memory = service.memory_store().unwrap();
    let bucket = Quota::per_minute(5)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    assert!(
        memory
            .acquire("raw", &bucket, 1, START.as_nanos() as u64)
            .unwrap()
            .allowed
    );
    let fixed = bucket.with_strategy(Strategy::FixedWindow);
    let key = ratelimit::store::StoreKey::new("raw").unwrap();
    let now = START.as_nanos() as u64;
    for adjustment in [
        ratelimit::store::Adjustment::penalty(key, &fixed, 3, now),
        ratelimit::store::Adjustment::reward(key, &fixed, 3, now),
    ] {
        let refused = futures::executor::block_on(Store::adjust(memory, adjustment));
        assert!(
            matches!(refused, Err(Error::UnexpectedState { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(memory.peek("raw", &bucket, 1, now).unwrap().remaining, 3);

    let options = Options::new()
        .limit(1)
        .window(Duration::from_secs(10))
        .block_for(Duration::from_secs(100));
    assert!(service.consume("b", &options).await.unwrap().allowed);
    assert!(!service.consume("b", &options).await.unwrap().allowed);
    let level = service.reward("b", &options, 10).await.unwrap();
    assert!(!level.allowed, "the block holds: {level:?}");
    assert!(!service.consume("b", &options).await.unwrap().allowed);
}
