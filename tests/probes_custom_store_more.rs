//! helper-64's probes of a store of one's own (written only against the public `Store` trait)
//! that answers at once only every other time it is asked (`decide_now`, `decide_all_now`),
//! leaving the rest to be awaited, on the entry points `probes_custom_store` does not take
//! such a store through: a prepared site (`consume`, `consume_now`, `try_consume` and its
//! `Pending`, the HTTP layer's path), stacked limits (`consume_all`), and annotated fns,
//! async and sync. The store decides honestly (a `MemoryStore` underneath), so exactly the
//! limit passes; what is attacked is each call decided exactly once: a call asked at once and
//! then awaited as well would spend twice, one the store left to be awaited and never awaited
//! would pass without a decision. Exact counts on a hand-driven clock that never moves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    Attempt, Config, Decision, Error, ManualClock, MemoryStore, Module, Options, RateLimitService,
    StoreConfig,
};
use ratelimit_tests::START;

/// A `MemoryStore` asked through a store that answers at once only every other time it is
/// asked (the first time too), single and stacked alike, and counts what it is asked.
#[derive(Default)]
struct Sometimes {
    memory: MemoryStore,
    /// Asked at once, and of those answered at once.
    asked_now: AtomicUsize,
    answered_now: AtomicUsize,
    /// Awaited.
    awaited: AtomicUsize,
}

impl Sometimes {
    fn now_this_time(&self) -> bool {
        let answers = self
            .asked_now
            .fetch_add(1, Ordering::SeqCst)
            .is_multiple_of(2);
        if answers {
            self.answered_now.fetch_add(1, Ordering::SeqCst);
        }
        answers
    }

    /// (asked at once, answered at once, awaited).
    fn counts(&self) -> (usize, usize, usize) {
        (
            self.asked_now.load(Ordering::SeqCst),
            self.answered_now.load(Ordering::SeqCst),
            self.awaited.load(Ordering::SeqCst),
        )
    }
}

/// The store shared with the test, which reads its counts.
#[derive(Clone, Default)]
struct Shared(Arc<Sometimes>);

impl Store for Shared {
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        if self.0.now_this_time() {
            Some(self.0.memory.decide_now(request).expect("the memory store"))
        } else {
            None
        }
    }

    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.0.awaited.fetch_add(1, Ordering::SeqCst);
        self.0.memory.decide(request).await
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        if self.0.now_this_time() {
            Some(
                self.0
                    .memory
                    .decide_all_now(stacked)
                    .expect("the memory store"),
            )
        } else {
            None
        }
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        self.0.awaited.fetch_add(1, Ordering::SeqCst);
        self.0.memory.decide_all(stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.0.memory, key).await
    }

    /// Says so (as a store that answers at once when it can might), so that sync fns run.
    fn decides_at_once(&self) -> bool {
        true
    }
}

fn serve(limit: u64) -> (RateLimitService, Shared) {
    let store = Shared::default();
    let config = Config::builder().default_limit(limit).build().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let service = RateLimitService::with_store(config, store.clone(), clock).unwrap();
    (service, store)
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

fn totals(service: &RateLimitService) -> (u64, u64, u64) {
    let t = service.stats().total;
    (t.allowed, t.denied, t.errors)
}

/// Twelve calls on a prepared site of a limit of 5, through `consume`, `try_consume` (the
/// HTTP layer's: its `Pending` awaited when the store did not answer at once) and `enforce`:
/// exactly 5 admitted, each call asked at once once and awaited only when that said nothing.
#[test]
fn a_prepared_site_on_a_store_answering_at_once_only_sometimes_decides_each_call_once() {
    for path in ["consume", "try_consume", "enforce"] {
        let (service, store) = serve(5);
        let site = Arc::new(service.prepare(&Options::new()).unwrap());
        let mut admitted = 0;
        for _ in 0..12 {
            let decided = match path {
                "consume" => run(site.consume("u")),
                "try_consume" => match site.try_consume("u") {
                    Attempt::Decided(decided) => decided,
                    Attempt::Pending(pending) => run(pending.consume()),
                },
                _ => match run(site.enforce("u")) {
                    Err(Error::Exceeded(e)) => Ok(e.decision),
                    other => other,
                },
            };
            admitted += u64::from(decided.unwrap().allowed);
        }
        assert_eq!(admitted, 5, "{path}");
        assert_eq!(
            store.0.counts(),
            (12, 6, 6),
            "{path}: (asked now, answered, awaited)"
        );
        assert_eq!(totals(&service), (5, 7, 0), "{path}");
    }
}

/// `consume_now` on a prepared site gives up where the store would be awaited: nothing spent,
/// nothing counted, and never an admission without a decision.
#[test]
fn a_prepared_sites_consume_now_gives_up_where_the_store_says_nothing_and_spends_nothing() {
    let (service, store) = serve(3);
    let site = service.prepare(&Options::new()).unwrap();
    let answers: Vec<Option<bool>> = (0..8)
        .map(|_| site.consume_now("v").map(|d| d.unwrap().allowed))
        .collect();
    assert_eq!(
        answers,
        [
            Some(true),
            None,
            Some(true),
            None,
            Some(true),
            None,
            Some(false),
            None
        ]
    );
    assert_eq!(store.0.counts(), (8, 4, 0));
    assert_eq!(totals(&service), (3, 1, 0));
}

/// Stacked limits (2 and 4 on one key, decided as one) on such a store: the stack is asked
/// at once once per call and awaited only when that said nothing; exactly 2 admitted of 9,
/// and the looser limit spent exactly 2 (a call decided twice would show as 3 or 4).
#[test]
fn stacked_limits_on_a_store_answering_at_once_only_sometimes_decide_each_call_once() {
    let (service, store) = serve(100);
    let tight = Options::new().limit(2).budget("tight");
    let loose = Options::new().limit(4).budget("loose");
    let mut admitted = 0;
    for _ in 0..9 {
        let decisions = run(service.consume_all(&[("k", &tight), ("k", &loose)])).unwrap();
        admitted += u64::from(decisions.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 2);
    assert_eq!(store.0.counts(), (9, 5, 4));
    let loose_left = run(service.status("k", &loose)).unwrap().remaining;
    assert_eq!(
        loose_left, 2,
        "the looser limit spent once per admitted call"
    );
}

#[ratelimit::rate_limit(limit = 3, window = "1h", key = user)]
async fn annotated(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[ratelimit::rate_limit(limit = 3, window = "1h", key = user)]
fn annotated_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Annotated fns on such a store: an async fn's call asked at once, then awaited on what the
/// first half composed when the store said nothing; a sync fn's call, which cannot wait,
/// refused as waiting when the store says nothing at once (never admitted, never blocked on,
/// never spent). Exactly the limit of 3 admitted of the async fn's 8 calls.
#[tokio::test]
async fn annotated_fns_on_a_store_answering_at_once_only_sometimes_decide_each_call_once() {
    let store = Shared::default();
    let module =
        TestModule::new(Module::builder().store(StoreConfig::custom(store.clone()))).unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..8 {
        outcomes.push(module.scope(annotated("a")).await.is_ok());
    }
    assert_eq!(outcomes.iter().filter(|ok| **ok).count(), 3, "{outcomes:?}");
    assert_eq!(store.0.counts(), (8, 4, 4));
    let mut sync = Vec::new();
    for _ in 0..6 {
        sync.push(match module.run(|| annotated_sync("s")) {
            Ok(()) => "ok",
            Err(Error::SyncOnWaitingStore { .. }) => "waits",
            Err(Error::Exceeded(_)) => "refused",
            Err(other) => panic!("{other:?}"),
        });
    }
    assert_eq!(sync, ["ok", "waits", "ok", "waits", "ok", "waits"]);
    assert_eq!(store.0.counts(), (14, 7, 4), "a sync call is never awaited");
    let mut more = Vec::new();
    for _ in 0..2 {
        more.push(module.run(|| annotated_sync("s")).is_ok());
    }
    assert_eq!(
        more,
        [false, false],
        "the fourth asked at once is refused, the next waits"
    );
}
