//! A store written only against the public API: state kept as bytes in a map, the crate's
//! algorithms run on it through `StoredState` inside the map's lock. What a user plugging in
//! their own storage (a database row, a KV service with transactions) writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Check, Failover, FailurePolicy, Store, StoredState};
use ratelimit::{
    Config, Decision, Error, ManualClock, Nanos, Options, Quota, QuotaError, RateLimitService,
    Strategy, Tier,
};
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
    async fn decide(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        let mut map = self.map.lock().unwrap();
        let mut state = match map.get(key) {
            Some((bytes, expires)) if *expires > now => StoredState::from_bytes(bytes)?,
            _ => StoredState::new(quota),
        };
        let decision = state.decide(now, quota, cost, commit)?;
        if commit && decision.allowed {
            let expires = state.expires_at(quota);
            map.insert(key.to_owned(), (state.to_bytes(), expires));
        }
        Ok(decision)
    }

    async fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        commit: bool,
    ) -> Result<Vec<Decision>, Error> {
        let mut map = self.map.lock().unwrap();
        let mut states = Vec::with_capacity(checks.len());
        for check in checks {
            states.push(match map.get(check.key) {
                Some((bytes, expires)) if *expires > now => StoredState::from_bytes(bytes)?,
                _ => StoredState::new(check.quota),
            });
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for (check, state) in checks.iter().zip(&mut states) {
            decisions.push(state.decide(now, check.quota, check.cost, false)?);
        }
        if commit && decisions.iter().all(|d| d.allowed) {
            for (i, (check, state)) in checks.iter().zip(&mut states).enumerate() {
                decisions[i] = state.decide(now, check.quota, check.cost, true)?;
                let expires = state.expires_at(check.quota);
                map.insert(check.key.to_owned(), (state.to_bytes(), expires));
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
