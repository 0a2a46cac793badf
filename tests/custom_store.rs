//! A store written only against the public API: state kept as bytes in a map, the crate's
//! algorithms run on it through `StoredState` inside the map's lock. What a user plugging in
//! their own storage (a database row, a KV service with transactions) writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store, StoredState};
use ratelimit::{
    Config, Decision, Error, ManualClock, Nanos, Options, Quota, QuotaError, RateLimitService,
    StoreConfig, Strategy, Tier,
};
use ratelimit::{Failover, FailurePolicy};
use ratelimit_tests::START;

/// Each key's state as bytes, with the time it expires.
type Entries = HashMap<String, (Vec<u8>, Nanos)>;

/// State as bytes with an expiry, under one lock: the transaction.
#[derive(Clone, Default)]
struct MapStore {
    map: Arc<Mutex<Entries>>,
    /// Refuse quotas above this capacity, as a store with small counters would.
    max_capacity: Option<u64>,
}

impl Store for MapStore {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let (key, quota, now) = (request.key().as_str(), request.quota(), request.now());
        let mut map = self.map.lock().unwrap();
        let mut state = match map.get(key) {
            Some((bytes, expires)) if *expires > now => StoredState::from_bytes(bytes)?,
            _ => StoredState::new(quota),
        };
        let decision = state.decide(&request)?;
        if request.spends() && decision.allowed {
            let expires = state.expires_at(quota);
            map.insert(key.to_owned(), (state.to_bytes(), expires));
        }
        Ok(decision)
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let (checks, now) = (stacked.checks(), stacked.now());
        let mut map = self.map.lock().unwrap();
        let mut states = Vec::with_capacity(checks.len());
        for check in checks {
            states.push(match map.get(check.key.as_str()) {
                Some((bytes, expires)) if *expires > now => StoredState::from_bytes(bytes)?,
                _ => StoredState::new(check.quota),
            });
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for (request, state) in stacked.requests().zip(&mut states) {
            decisions.push(state.decide(&request.as_look())?);
        }
        if stacked.spends() && decisions.iter().all(|d| d.allowed) {
            for (i, (request, state)) in stacked.requests().zip(&mut states).enumerate() {
                decisions[i] = state.decide(&request)?;
                let expires = state.expires_at(request.quota());
                map.insert(
                    request.key().as_str().to_owned(),
                    (state.to_bytes(), expires),
                );
            }
        }
        Ok(decisions)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.map.lock().unwrap().remove(key).is_some())
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        match self.max_capacity {
            Some(max) if quota.capacity() > max => Err(QuotaError::Unsupported {
                store: "the map store",
                reason: "it counts at most 1,000 calls per key",
            }),
            _ => Ok(()),
        }
    }
}

fn service(store: impl Store, config: Config) -> (RateLimitService, ManualClock) {
    let clock = ManualClock::new(START);
    let service = RateLimitService::with_store(config, store, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

#[test]
fn a_custom_store_decides_every_strategy_exactly() {
    for strategy in Strategy::ALL {
        let store = MapStore::default();
        let config = Config::builder()
            .strategy(strategy)
            .tier(Tier::new("free", 3).window("1m"))
            .build()
            .unwrap();
        let (service, clock) = service(store.clone(), config);
        let free = Options::new().tier("free");
        run(async {
            for remaining in (0..3).rev() {
                let d = service.consume("user", &free).await.unwrap();
                assert_eq!((d.allowed, d.remaining), (true, remaining), "{strategy}");
            }
            let refused = service.consume("user", &free).await.unwrap();
            assert!(!refused.allowed, "{strategy}");
            let wait = refused.retry_after.unwrap();
            clock.advance(wait - Duration::from_millis(1));
            assert!(
                !service.consume("user", &free).await.unwrap().allowed,
                "{strategy}"
            );
            clock.advance(Duration::from_millis(1));
            assert!(
                service.consume("user", &free).await.unwrap().allowed,
                "{strategy}"
            );
            assert_eq!(store.map.lock().unwrap().len(), 1, "{strategy}");
            service.reset("user", Some("free")).await.unwrap();
            assert!(store.map.lock().unwrap().is_empty(), "{strategy}");
        });
    }
}

#[test]
fn garbage_in_a_custom_store_is_refused_under_deny_and_left_as_it_was() {
    let store = MapStore::default();
    let (service, _) = service(
        Failover::new(store.clone(), FailurePolicy::Deny),
        Config::default(),
    );
    run(async {
        service.consume("user", &Options::new()).await.unwrap();
        let key = store.map.lock().unwrap().keys().next().unwrap().clone();
        let garbage = (b"not a limiter state".to_vec(), u64::MAX);
        store
            .map
            .lock()
            .unwrap()
            .insert(key.clone(), garbage.clone());
        let refused = service.consume("user", &Options::new()).await;
        assert!(
            matches!(refused, Err(Error::UnexpectedState { .. })),
            "{refused:?}"
        );
        assert_eq!(store.map.lock().unwrap()[&key], garbage);
    });
}

#[test]
fn limits_a_custom_store_cannot_count_are_refused_at_build_and_per_call() {
    let store = MapStore {
        max_capacity: Some(1_000),
        ..MapStore::default()
    };
    let config = Config::builder()
        .tier(Tier::new("huge", 5_000))
        .build()
        .unwrap();
    let clock: Arc<ManualClock> = Arc::new(ManualClock::new(START));
    let err = RateLimitService::with_store(config, store.clone(), clock).unwrap_err();
    assert!(err.to_string().contains("tiers.huge.limit"), "{err}");
    let (service, _) = service(store, Config::default());
    let err = run(service.consume("k", &Options::new().limit(2_000))).unwrap_err();
    assert!(
        matches!(err, Error::InvalidQuota(QuotaError::Unsupported { .. })),
        "{err}"
    );
}

#[test]
fn a_custom_store_decides_stacked_limits_all_or_nothing() {
    let (service, _) = service(MapStore::default(), Config::default());
    let burst = Options::new()
        .limit(2)
        .window(Duration::from_secs(1))
        .budget("burst");
    let daily = Options::new()
        .limit(5)
        .window(Duration::from_secs(86_400))
        .budget("daily");
    let limits = [("user", &burst), ("user", &daily)];
    run(async {
        assert!(service.enforce_all(&limits).await.is_ok());
        assert!(service.enforce_all(&limits).await.is_ok());
        assert!(service.enforce_all(&limits).await.is_err());
        assert_eq!(service.status("user", &daily).await.unwrap().remaining, 3);
    });
}

/// [`MapStore`] that answers at once ([`Store::decide_now`]) while `at_once` is set, as a
/// leased budget does, and records every key each method is asked about.
#[derive(Clone, Default)]
struct AtOnceStore {
    map: MapStore,
    at_once: Arc<std::sync::atomic::AtomicBool>,
    asked_now: Arc<Mutex<Vec<String>>>,
    awaited: Arc<Mutex<Vec<String>>>,
}

impl Store for AtOnceStore {
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        let key = request.key().as_str();
        self.asked_now.lock().unwrap().push(key.to_owned());
        if !self.at_once.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let decided = self.map.decide(request);
        Some(futures::FutureExt::now_or_never(decided).expect("the map answers at once"))
    }

    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let key = request.key().as_str();
        self.awaited.lock().unwrap().push(key.to_owned());
        self.map.decide(request).await
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.map.decide_all(stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.map.reset(key).await
    }
}

/// The public API's calls on a store that may answer at once are decided at their call site
/// (kept per thread): each call asks `decide_now` exactly once, and when it cannot answer,
/// `decide` once, on the same key, with what was admitted at once counted once.
#[test]
fn a_store_answering_at_once_is_asked_once_per_call_on_the_key_it_is_awaited_on() {
    let store = AtOnceStore::default();
    store
        .at_once
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let config = Config::builder().default_limit(3).build().unwrap();
    let (service, _) = service(store.clone(), config);
    let options = Options::new().budget("search");
    run(async {
        for _ in 0..3 {
            assert!(service.consume("user", &options).await.unwrap().allowed);
        }
        assert!(!service.consume("user", &options).await.unwrap().allowed);
        let at_once = service
            .consume_now("user", &options)
            .expect("answered at once");
        assert!(!at_once.unwrap().allowed);
    });
    let asked: Vec<String> = store.asked_now.lock().unwrap().drain(..).collect();
    assert_eq!(asked.len(), 5, "{asked:?}");
    assert!(asked.iter().all(|k| *k == asked[0]), "{asked:?}");
    assert!(store.awaited.lock().unwrap().is_empty());

    // Not at once: asked once, then awaited once, on the same key.
    store
        .at_once
        .store(false, std::sync::atomic::Ordering::Relaxed);
    run(async {
        assert!(service.consume("other", &options).await.unwrap().allowed);
        // A braced key is the general path's (its digest): the same one ask and one wait.
        assert!(service.consume("a{b}", &options).await.unwrap().allowed);
    });
    let asked = store.asked_now.lock().unwrap().clone();
    let awaited = store.awaited.lock().unwrap().clone();
    assert_eq!(asked, awaited);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("{other}"), "{asked:?}");
    assert!(asked[1].contains("{#"), "{asked:?}");

    let stats = service.stats();
    let counts = |c: ratelimit::Counts| (c.allowed, c.denied);
    assert_eq!(counts(stats.total), (5, 2));
    assert_eq!(counts(stats.by_method["search"]), (5, 2));
}

/// The bytes of a sliding log: its entry count as written, then each entry's (time, cost).
fn log_bytes(claimed: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    let mut bytes = vec![1, b'L'];
    bytes.extend_from_slice(&claimed.to_le_bytes());
    for (t, cost) in entries {
        bytes.extend_from_slice(&t.to_le_bytes());
        bytes.extend_from_slice(&cost.to_le_bytes());
    }
    bytes
}

/// Puts `bytes` under the only key `store` holds (after one call through `service` made it),
/// then asks for a call: it must be `UnexpectedState`, with the bytes left as they were.
fn refused_on(service: &RateLimitService, store: &MapStore, bytes: Vec<u8>) {
    run(async {
        let key = store.map.lock().unwrap().keys().next().unwrap().clone();
        let stored = (bytes, u64::MAX);
        store
            .map
            .lock()
            .unwrap()
            .insert(key.clone(), stored.clone());
        for _ in 0..2 {
            let decided = service.consume("user", &Options::new()).await;
            assert!(
                matches!(decided, Err(Error::UnexpectedState { .. })),
                "{decided:?}"
            );
        }
        let status = service.status("user", &Options::new()).await;
        assert!(
            matches!(status, Err(Error::UnexpectedState { .. })),
            "{status:?}"
        );
        assert_eq!(store.map.lock().unwrap()[&key], stored);
    });
}

/// A log claiming 2^63 entries: `2 * n` overflowed while checking the length against the
/// bytes, a panic in a debug build; in a release build it wrapped to 0 and the bytes read as
/// an empty log, a fresh budget. 2^63 + 1 entries with one written wrapped to that one.
#[test]
fn a_sliding_log_claiming_2_pow_63_entries_is_unexpected_state_not_a_fresh_key() {
    let now = START.as_nanos() as u64;
    for bytes in [
        log_bytes(1 << 63, &[]),
        log_bytes((1 << 63) + 1, &[(now, 1)]),
        log_bytes(u64::MAX, &[(now, 1)]),
    ] {
        let decoded = StoredState::from_bytes(&bytes);
        assert!(
            matches!(decoded, Err(Error::UnexpectedState { .. })),
            "{decoded:?}"
        );
        let store = MapStore::default();
        let config = Config::builder()
            .strategy(Strategy::SlidingWindow)
            .default_limit(3)
            .build()
            .unwrap();
        let (service, _) = service(store.clone(), config);
        run(service.consume("user", &Options::new())).unwrap();
        refused_on(&service, &store, bytes);
    }
}

/// A fixed window or counter state whose start is not on a window boundary (a start this
/// window never had, e.g. one bit of it flipped) was read as another window's: a fresh
/// budget on a key that had spent it all.
#[test]
fn a_stored_window_starting_off_its_boundaries_is_unexpected_state_not_a_fresh_budget() {
    for strategy in [Strategy::FixedWindow, Strategy::SlidingWindowCounter] {
        let store = MapStore::default();
        let config = Config::builder()
            .strategy(strategy)
            .default_limit(3)
            .build()
            .unwrap();
        let (service, _) = service(store.clone(), config);
        run(async {
            for _ in 0..3 {
                assert!(
                    service
                        .consume("user", &Options::new())
                        .await
                        .unwrap()
                        .allowed
                );
            }
        });
        let spent = store.map.lock().unwrap().values().next().unwrap().0.clone();
        let mut shifted = spent;
        // The start is the first word after the version, the strategy and the window's.
        shifted[10] ^= 1;
        refused_on(&service, &store, shifted);
    }
}

#[ratelimit::rate_limit(limit = 2, window = "1m", key = user)]
async fn on_map_store(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Annotated fns run on any store, not only the two this crate ships: the module is built on
/// a store written against the public API alone, and every call of the fn is decided there.
#[tokio::test]
async fn annotated_fns_run_on_a_store_written_against_the_public_api() {
    let store = MapStore::default();
    let builder = ratelimit::Module::builder().store(StoreConfig::custom(store.clone()));
    let module = ratelimit::testing::TestModule::new(builder).unwrap();
    assert!(module.scope(on_map_store("u")).await.is_ok());
    assert!(module.scope(on_map_store("u")).await.is_ok());
    let refused = module.scope(on_map_store("u")).await;
    assert!(matches!(refused, Err(Error::Exceeded(_))), "{refused:?}");
    assert!(module.scope(on_map_store("v")).await.is_ok());
    // The state is the store's own, under the fn's budget.
    let keys: Vec<String> = store.map.lock().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.contains("on_map_store")), "{keys:?}");
    let counts = module.stats().total;
    assert_eq!((counts.allowed, counts.denied), (3, 1));
    // A minute on, the budget is whole again.
    module.clock().advance(Duration::from_secs(60));
    assert!(module.scope(on_map_store("u")).await.is_ok());
}
