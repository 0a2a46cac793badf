//! helper-73: a call given up (its future dropped) while the store decides it during a
//! reload's transition, the old state decided beside the moved one as one: counted once, as
//! abandoned, never admitted; what the store spent stands on both states (all or nothing),
//! and the limit then admits exactly what is left, as on a twin that never reloaded. A store
//! of one's own over the memory store (carrying), answering only after a wait; Tokio's
//! paused clock for the timeout, the service's hand-driven one for the limit.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::{
    Config, ConfigBuilder, Decision, Error, ManualClock, MemoryStore, Options, RateLimitService,
    Strategy, Tier,
};
use ratelimit_tests::{now, reload_to as reload, START};

const SEC: Duration = Duration::from_secs(1);

/// The memory store's answers, given after the store has spent (`spends_first`) or before
/// it has: a wait that never ends while `stalls` is set.
#[derive(Clone, Default)]
struct Stalling {
    store: MemoryStore,
    spends_first: bool,
    stalls: Arc<std::sync::atomic::AtomicBool>,
}

impl Stalling {
    async fn stall(&self) {
        if self.stalls.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl Store for Stalling {
    async fn decide(&self, r: Request<'_>) -> Result<Decision, Error> {
        if self.spends_first {
            let decided = self.store.decide(r).await;
            self.stall().await;
            return decided;
        }
        self.stall().await;
        self.store.decide(r).await
    }

    async fn decide_all(&self, s: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        if self.spends_first {
            let decided = self.store.decide_all(s).await;
            self.stall().await;
            return decided;
        }
        self.stall().await;
        self.store.decide_all(s).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.store.reset(key))
    }

    fn carries(&self) -> bool {
        true
    }
}

/// Tier `name` (the default tier) of 3 on `window` under `strategy`.
fn limit(strategy: Strategy, name: &str, window: Duration) -> ConfigBuilder {
    let mut tier = Tier::new(name, 3)
        .burst(0)
        .window(window)
        .strategy(strategy);
    if strategy == Strategy::TokenBucket {
        tier = tier.refill(3 * window.as_secs() / 60);
    }
    Config::builder().tier(tier).default_tier(name)
}

fn totals(service: &RateLimitService) -> (u64, u64, u64, u64) {
    let t = service.stats().total;
    (t.allowed, t.denied, t.errors, t.abandoned)
}

/// 1 spent, the limit moved (renamed, on two minutes), then a call given up while the store
/// stalls: counted once as abandoned. Then the calls of the minute: 1 more where the store
/// had spent the dropped call, 2 where it had not (the limit's 3 less what was spent).
#[test]
fn a_call_dropped_during_a_transition_is_counted_once_and_admits_nothing() {
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    for strategy in Strategy::ALL {
        for spends_first in [false, true] {
            let store = Stalling {
                spends_first,
                ..Stalling::default()
            };
            let clock = ManualClock::new(START);
            let config = limit(strategy, "a", 60 * SEC).build().unwrap();
            let service =
                RateLimitService::with_store(config, store.clone(), Arc::new(clock.clone()))
                    .unwrap();
            let on = format!("{strategy} spends first {spends_first}");
            assert!(
                now(service.consume("k", &Options::new())).unwrap().allowed,
                "{on}"
            );
            reload(&service, limit(strategy, "b", 120 * SEC));
            store
                .stalls
                .store(true, std::sync::atomic::Ordering::SeqCst);
            paused.block_on(async {
                let given_up = tokio::time::timeout(SEC, service.consume("k", &Options::new()));
                assert!(given_up.await.is_err(), "{on}");
            });
            store
                .stalls
                .store(false, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(totals(&service), (1, 0, 0, 1), "{on}");
            let left = (0..5)
                .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
                .count();
            assert_eq!(left, if spends_first { 1 } else { 2 }, "{on}");
        }
    }
}
