//! helper-73: a reload's transition on a store that decides on its own clock, another than
//! the service's (as Redis does, on `TIME`): here the memory store deciding at the service's
//! time plus a fixed offset, so both clocks are driven by hand. A refused call's wait during
//! the transition must be the one the same store on the service's clock tells, whatever the
//! offset: the service works out the wait a carried debt needs from the store's times beside
//! its own transition's ends (`transition::after_old_states`), and read as its own, Redis'
//! times told a wait too long by the store's lead (`probes_transition_clocks_redis`), and
//! where the carried debt needs a longer wait than the store's own, one short by its lag.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Adjustment, Request, Stacked, Store};
use ratelimit::{Decision, Error, ManualClock, MemoryStore, Options, RateLimitService};
use ratelimit_tests::{bucket_a_minute, moved, now, reload_to as reload, START};

/// The memory store on its own clock: the service's `now` plus `ahead` (or minus `behind`).
#[derive(Clone, Default)]
struct Skewed {
    store: MemoryStore,
    ahead: u64,
    behind: u64,
}

impl Skewed {
    fn at(&self, now: u64) -> u64 {
        now + self.ahead - self.behind
    }
}

impl Store for Skewed {
    async fn decide(&self, r: Request<'_>) -> Result<Decision, Error> {
        let r = Request::new(r.key(), r.quota(), r.cost(), self.at(r.now()), r.mode())?;
        self.store.decide(r).await
    }

    async fn decide_all(&self, s: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let s = Stacked::carrying(s.checks(), s.carried(), self.at(s.now()), s.mode())?;
        self.store.decide_all(s).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.store.reset(key))
    }

    fn blocks(&self) -> bool {
        true
    }

    fn carries(&self) -> bool {
        true
    }

    fn adjusts(&self) -> bool {
        true
    }

    async fn adjust(&self, a: Adjustment<'_>) -> Result<u64, Error> {
        let at = self.at(a.now());
        let a = match a.is_penalty() {
            true => Adjustment::penalty(a.key(), a.quota(), a.units(), at),
            false => Adjustment::reward(a.key(), a.quota(), a.units(), at),
        };
        self.store.adjust(a).await
    }
}

fn admitted(service: &RateLimitService, n: usize) -> usize {
    (0..n)
        .filter(|_| now(service.consume("k", &Options::new())).unwrap().allowed)
        .count()
}

/// `probes_carry_attacks`' bucket of 15 at 6 s a token, spent, moved to two minutes; a call
/// every 6 s to +54 s; refused at +55 s, the call passes at +60 s, when the old debt carried
/// into the new bucket leaves room for it: told 5 s, refused a millisecond before, admitted
/// at it, whether the store's clock is the service's, 10 s ahead of it or 10 s behind.
/// Read as the service's own, the store's times told 15 s with the store 10 s ahead (10 s
/// too long: a call at 14.999 s was admitted); 10 s behind, the store's own 5 s, which the
/// wait is never shorter than, held here.
#[test]
fn a_wait_beside_a_moved_bucket_is_the_same_whatever_the_stores_clock() {
    const SKEW: u64 = 10_000_000_000;
    let mut told = Vec::new();
    for (ahead, behind) in [(0, 0), (SKEW, 0), (0, SKEW)] {
        let clock = ManualClock::new(START);
        let config = bucket_a_minute(10, 5, 10).build().unwrap();
        let store = Skewed {
            store: MemoryStore::new(),
            ahead,
            behind,
        };
        let service = RateLimitService::with_store(config, store, Arc::new(clock.clone())).unwrap();
        assert_eq!(admitted(&service, 16), 15);
        reload(&service, moved(10, 5, 10));
        let mut got = 0;
        for _ in 0..9 {
            clock.advance(Duration::from_secs(6));
            got += admitted(&service, 2);
        }
        assert_eq!(got, 9);
        clock.advance(Duration::from_secs(1));
        let refused = now(service.consume("k", &Options::new())).unwrap();
        assert!(!refused.allowed);
        let wait = refused.retry_after.unwrap();
        clock.advance(wait - Duration::from_millis(1));
        let before = admitted(&service, 1);
        clock.advance(Duration::from_millis(1));
        let at = admitted(&service, 2);
        told.push((ahead, behind, wait, before, at));
    }
    let five = Duration::from_secs(5);
    let expected: Vec<_> = [(0, 0), (SKEW, 0), (0, SKEW)]
        .map(|(a, b)| (a, b, five, 0, 1))
        .to_vec();
    assert_eq!(told, expected);
}

/// A token-bucket tier `name` (the default tier) of 10 on `window`, refilled `refill` a
/// window.
fn bucket(name: &str, window: Duration, refill: u64) -> ratelimit::ConfigBuilder {
    let tier = ratelimit::Tier::new(name, 10)
        .burst(0)
        .refill(refill)
        .window(window)
        .strategy(ratelimit::Strategy::TokenBucket);
    ratelimit::Config::builder().tier(tier).default_tier(name)
}

/// 10 a minute (6 s a token), spent, moved to 10 per 2 s: the old bucket, decided beside the
/// moved one, is cut as its window ends so that what it leaves owing then is within the new
/// bucket's 2 s. Refused at +30 s: the call passes only at +60 s (each token the old bucket
/// gets back, the cut takes away), a wait of 30 s, which the store's own answer (a token of
/// the cut in force at +30 s, 6 s) is not. Read as the service's own, the store's times told
/// 6 s with the store 10 s behind (the call refused again at +36 s: too short by 24 s), and
/// 38.2 s with it 10 s ahead.
#[test]
fn a_wait_beside_a_draining_old_bucket_is_the_same_whatever_the_stores_clock() {
    const SKEW: u64 = 10_000_000_000;
    let mut told = Vec::new();
    for (ahead, behind) in [(0, 0), (SKEW, 0), (0, SKEW)] {
        let clock = ManualClock::new(START);
        let config = bucket("a", Duration::from_secs(60), 10).build().unwrap();
        let store = Skewed {
            store: MemoryStore::new(),
            ahead,
            behind,
        };
        let service = RateLimitService::with_store(config, store, Arc::new(clock.clone())).unwrap();
        assert_eq!(admitted(&service, 11), 10);
        reload(&service, bucket("b", Duration::from_secs(2), 10));
        clock.advance(Duration::from_secs(30));
        let refused = now(service.consume("k", &Options::new())).unwrap();
        assert!(!refused.allowed);
        let wait = refused.retry_after.unwrap();
        clock.advance(wait - Duration::from_millis(1));
        let before = admitted(&service, 1);
        clock.advance(Duration::from_millis(1));
        let at = admitted(&service, 2);
        told.push((ahead, behind, wait, before, at));
    }
    let thirty = Duration::from_secs(30);
    let expected: Vec<_> = [(0, 0), (SKEW, 0), (0, SKEW)]
        .map(|(a, b)| (a, b, thirty, 0, 2))
        .to_vec();
    assert_eq!(told, expected);
}
