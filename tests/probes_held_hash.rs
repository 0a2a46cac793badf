//! Probes of the held hash (e84e78c): a prepared site without user keys asks its store once
//! for its fixed store key's hash (`Store::hash_of`) and hands it back with every call
//! (`decide_now_hashed`); the memory store then finds the key's cell by that hash, checked
//! against the key's text in debug builds only. A wrong held hash would find no state and
//! decide on a fresh one. Each probe compares exact counts through the held-hash path (an
//! unkeyed annotated fn on a memory store) with the text path (the same fn on a store that
//! holds no hash, or the memory store asked by the key's text), with a hand-driven clock.
//! Run in release too: the debug check hides a mismatch there.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratelimit::store::{Refund, Request, Stacked, Store, StoreKey};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Decision, Error, MemoryOptions, MemoryStore, Module, ModuleBuilder, Quota,
    StoreConfig, Strategy, Tier,
};

const HOUR: Duration = Duration::from_secs(3_600);

/// Every module here: a tier the tiered fn names, one hour, sliding log.
fn builder(store: StoreConfig) -> ModuleBuilder {
    Module::builder()
        .strategy(Strategy::SlidingWindow)
        .tier(plan(3))
        .store(store)
}

fn plan(n: u64) -> Tier {
    Tier::new("plan", n)
        .window(HOUR)
        .strategy(Strategy::SlidingWindow)
}

#[rate_limit(limit = 3, window = "1h", strategy = "sliding-window", name = "held")]
fn held() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(tier = "plan", name = "tiered")]
fn tiered() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(
    limit = 3,
    window = "1h",
    strategy = "sliding-window",
    name = "outcome",
    count = "err"
)]
fn outcome(fail: bool) -> Result<(), Error> {
    if fail {
        Err(Error::ZeroCost)
    } else {
        Ok(())
    }
}

/// Stacked on the budget `held` spends from (same limit, window and strategy: one store
/// key), decided by text (`decide_all`), with a wide limit of its own.
#[rate_limit(limit = 3, window = "1h", strategy = "sliding-window", name = "held")]
#[rate_limit(limit = 10, window = "1h", strategy = "sliding-window", name = "wide")]
fn stacked_on_held() -> Result<(), Error> {
    Ok(())
}

/// How a [`Wrap`] hands the held hash on.
#[derive(Clone, Copy, PartialEq)]
enum Hashes {
    /// Not at all: `hash_of` is the trait's default (none), every call is hashed by text.
    None,
    /// Forwards `hash_of` and `decide_now_hashed` to the memory store it wraps.
    Forwarded,
    /// Forwards `hash_of` of the key it is given, then decides on the key rewritten under a
    /// namespace, handing the hash on: a held hash of another text.
    OfAnotherText,
    /// Asks another memory store (another seed) for the hash, decides on its own.
    OfAnotherStore,
}

/// A user store wrapping a [`MemoryStore`], recording the last key and quota it decided.
#[derive(Clone)]
struct Wrap {
    inner: MemoryStore,
    other: MemoryStore,
    hashes: Hashes,
    seen: Arc<Mutex<Option<(String, Quota)>>>,
}

impl Wrap {
    fn new(hashes: Hashes) -> Self {
        Wrap {
            inner: MemoryStore::new(),
            other: MemoryStore::new(),
            hashes,
            seen: Arc::default(),
        }
    }

    fn key(&self, key: &str) -> String {
        match self.hashes {
            Hashes::OfAnotherText => format!("ns:{key}"),
            _ => key.to_owned(),
        }
    }

    /// `request` on the rewritten key, handed to `f`.
    fn on<R>(&self, request: Request<'_>, f: impl FnOnce(Request<'_>) -> R) -> R {
        let key = self.key(request.key().as_str());
        *self.seen.lock().unwrap() = Some((key.clone(), *request.quota()));
        let store_key = StoreKey::one_window(&key).unwrap();
        let rewritten = Request::new(
            store_key,
            request.quota(),
            request.cost(),
            request.now(),
            request.mode(),
        )
        .unwrap();
        f(rewritten)
    }

    /// The level of the last key decided, by its text, at `now`.
    fn remaining(&self, now: u64) -> u64 {
        let (key, quota) = self.seen.lock().unwrap().clone().unwrap();
        self.inner.peek(&key, &quota, 0, now).unwrap().remaining
    }

    /// A spend of one on the last key decided, by its text, at `now`.
    fn spend_by_text(&self, now: u64) -> bool {
        let (key, quota) = self.seen.lock().unwrap().clone().unwrap();
        self.inner.acquire(&key, &quota, 1, now).unwrap().allowed
    }
}

impl Store for Wrap {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let decided = self.on(request, |r| Store::decide_now(&self.inner, r));
        decided.unwrap()
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.inner, stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.inner.reset(&self.key(key)))
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.on(request, |r| Store::decide_now(&self.inner, r))
    }

    fn hash_of(&self, key: &str) -> Option<u64> {
        match self.hashes {
            Hashes::None => None,
            Hashes::Forwarded | Hashes::OfAnotherText => Store::hash_of(&self.inner, key),
            Hashes::OfAnotherStore => Store::hash_of(&self.other, key),
        }
    }

    fn decide_now_hashed(
        &self,
        request: Request<'_>,
        hash: std::num::NonZeroU64,
    ) -> Option<Result<Decision, Error>> {
        self.on(request, |r| Store::decide_now_hashed(&self.inner, r, hash))
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        Store::decide_all_now(&self.inner, stacked)
    }

    fn decides_at_once(&self) -> bool {
        true
    }

    fn refunds(&self) -> bool {
        true
    }

    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        Store::refund_now(&self.inner, refund).unwrap()
    }

    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        Store::refund_now(&self.inner, refund)
    }

    async fn refund_all(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        Store::refund_all_now(&self.inner, refunds).unwrap()
    }

    fn refund_all_now(&self, refunds: &[Refund<'_>]) -> Option<Result<bool, Error>> {
        Store::refund_all_now(&self.inner, refunds)
    }
}

fn on_wrap(hashes: Hashes) -> (TestModule, Wrap) {
    let wrap = Wrap::new(hashes);
    let module = TestModule::new(builder(StoreConfig::custom(wrap.clone()))).unwrap();
    (module, wrap)
}

fn now(module: &TestModule) -> u64 {
    use ratelimit::Clock;
    module.clock().now()
}

/// Admitted calls of `f` out of `n`, on `module`.
fn admitted(module: &TestModule, n: usize, f: impl Fn() -> Result<(), Error>) -> usize {
    module.run(|| (0..n).filter(|_| f().is_ok()).count())
}

// ---------------------------------------------------------------------------------------
// User stores wrapping a memory store.
// ---------------------------------------------------------------------------------------

/// A store forwarding both `hash_of` and `decide_now_hashed` unchanged: the fn's calls and
/// spends by the key's text share one state. Would catch a held hash the memory store does
/// not find the text's state by.
#[test]
fn a_store_forwarding_the_held_hash_shares_one_state_with_the_text() {
    let (module, wrap) = on_wrap(Hashes::Forwarded);
    assert_eq!(admitted(&module, 1, held), 1);
    assert_eq!(wrap.remaining(now(&module)), 2);
    assert!(wrap.spend_by_text(now(&module)));
    assert_eq!(admitted(&module, 5, held), 1);
    assert_eq!(wrap.remaining(now(&module)), 0);
    assert!(!wrap.spend_by_text(now(&module)));
}

/// A store with no `hash_of` (the default): every call hashed by text, one state. Would
/// catch a held hash used though the store gave none.
#[test]
fn a_store_without_hash_of_decides_by_text() {
    let (module, wrap) = on_wrap(Hashes::None);
    assert_eq!(admitted(&module, 2, held), 2);
    assert!(wrap.spend_by_text(now(&module)));
    assert_eq!(admitted(&module, 5, held), 0);
}

/// A store that rewrites keys under a namespace and forwards both `hash_of` (of the key it
/// was given) and `decide_now_hashed` (on the key rewritten): the memory store is handed a
/// hash of another text. Spends by the rewritten text must still be the fn's own state.
#[test]
fn a_held_hash_of_another_text_is_not_a_second_state() {
    let (module, wrap) = on_wrap(Hashes::OfAnotherText);
    assert_eq!(admitted(&module, 3, held), 3);
    assert_eq!(wrap.remaining(now(&module)), 0);
    assert!(!wrap.spend_by_text(now(&module)));
    assert_eq!(wrap.inner.len(), 1);
    // And the other way: the text spends first.
    let (module, wrap) = on_wrap(Hashes::OfAnotherText);
    assert_eq!(admitted(&module, 1, held), 1);
    assert!(wrap.spend_by_text(now(&module)));
    assert!(wrap.spend_by_text(now(&module)));
    assert_eq!(admitted(&module, 5, held), 0);
}

/// A store that asks another memory store (another seed) for the hash and decides on its
/// own: a held hash of another store.
#[test]
fn a_held_hash_of_another_store_is_not_a_second_state() {
    let (module, wrap) = on_wrap(Hashes::OfAnotherStore);
    assert_eq!(admitted(&module, 3, held), 3);
    assert_eq!(wrap.remaining(now(&module)), 0);
    assert!(!wrap.spend_by_text(now(&module)));
    assert_eq!(wrap.inner.len(), 1);
    let (module, wrap) = on_wrap(Hashes::OfAnotherStore);
    assert_eq!(admitted(&module, 1, held), 1);
    assert!(wrap.spend_by_text(now(&module)));
    assert!(wrap.spend_by_text(now(&module)));
    assert_eq!(admitted(&module, 5, held), 0);
}

// ---------------------------------------------------------------------------------------
// The memory store itself, against the same store asked by text.
// ---------------------------------------------------------------------------------------

/// A reset by the key's text, a sweep after the window, then the fn again: each time
/// exactly the limit, and the text sees the fn's spends. Would catch a held hash that finds
/// a state a reset or a sweep dropped, or misses the one stored after.
#[test]
fn a_reset_and_a_sweep_leave_one_state_for_the_held_hash_and_the_text() {
    let (module, wrap) = on_wrap(Hashes::Forwarded);
    assert_eq!(admitted(&module, 5, held), 3);
    let (key, _) = wrap.seen.lock().unwrap().clone().unwrap();
    assert!(wrap.inner.reset(&key));
    assert_eq!(wrap.remaining(now(&module)), 3);
    assert_eq!(admitted(&module, 5, held), 3);
    assert_eq!(wrap.remaining(now(&module)), 0);
    module.clock().advance(HOUR * 2);
    assert_eq!(wrap.inner.sweep(now(&module)), 1);
    assert_eq!(wrap.inner.len(), 0);
    assert_eq!(admitted(&module, 1, held), 1);
    assert_eq!(wrap.remaining(now(&module)), 2);
    assert_eq!(admitted(&module, 5, held), 2);
    assert_eq!(wrap.inner.len(), 1);
}

/// A store full of other keys: the fn's first call is a new key, refused (`StoreFull`),
/// never admitted on a state it cannot keep; room made, exactly the limit.
#[test]
fn a_full_store_refuses_the_held_hash_a_new_key() {
    let store = MemoryStore::with_options(MemoryOptions::default().max_keys(1));
    let module = TestModule::new(builder(StoreConfig::custom(store.clone()))).unwrap();
    let quota = Quota::per_hour(1).unwrap();
    assert!(
        store
            .acquire("other", &quota, 1, now(&module))
            .unwrap()
            .allowed
    );
    let refused = module.run(held);
    assert!(
        matches!(refused, Err(Error::StoreFull { .. })),
        "{refused:?}"
    );
    assert!(store.reset("other"));
    assert_eq!(admitted(&module, 5, held), 3);
    assert_eq!(store.len(), 1);
}

/// Refunds (`count = "err"`): successes given back, failures kept, through the held hash;
/// the same counts on a store that holds none.
#[test]
fn refunds_through_the_held_hash_count_as_by_text() {
    let run = |module: &TestModule| {
        module.run(|| {
            let mut ran = 0;
            for fail in [false, false, false, false, true, true, true, true, false] {
                if !matches!(outcome(fail), Err(Error::Exceeded(_))) {
                    ran += 1;
                }
            }
            ran
        })
    };
    let (held_module, held_wrap) = on_wrap(Hashes::Forwarded);
    let (text_module, text_wrap) = on_wrap(Hashes::None);
    let (a, b) = (run(&held_module), run(&text_module));
    assert_eq!((a, b), (7, 7));
    assert_eq!(held_wrap.remaining(now(&held_module)), 0);
    assert_eq!(text_wrap.remaining(now(&text_module)), 0);
}

/// Reloads that move the tier to another quota (5, then 2): the fn's calls through the held
/// hash (re-prepared after each reload) admit what the same calls admit on a store that
/// holds no hash, through the transitions.
#[test]
fn reloads_to_new_quotas_admit_as_by_text() {
    let script = |module: &TestModule| {
        let mut admitted_each = vec![];
        admitted_each.push(admitted(module, 2, tiered));
        let reload = |n| {
            let config = ratelimit_tests::on_its_store(
                module.service(),
                ratelimit::Config::builder()
                    .strategy(Strategy::SlidingWindow)
                    .tier(plan(n)),
            );
            module.service().reload(config).unwrap();
        };
        reload(5);
        admitted_each.push(admitted(module, 6, tiered));
        module.clock().advance(Duration::from_secs(60));
        reload(2);
        admitted_each.push(admitted(module, 6, tiered));
        module.clock().advance(HOUR);
        admitted_each.push(admitted(module, 6, tiered));
        admitted_each
    };
    let (held_module, _) = on_wrap(Hashes::Forwarded);
    let (text_module, _) = on_wrap(Hashes::None);
    let memory = TestModule::new(builder(StoreConfig::Memory(MemoryOptions::default()))).unwrap();
    let by_text = script(&text_module);
    assert_eq!(script(&held_module), by_text);
    assert_eq!(script(&memory), by_text);
}

/// A reload that changes the key prefix: the fn's state moves to a new key; through the
/// held hash as by text.
#[test]
fn a_reload_to_a_new_prefix_admits_as_by_text() {
    let script = |module: &TestModule| {
        let a = admitted(module, 2, held);
        let config = ratelimit_tests::on_its_store(
            module.service(),
            ratelimit::Config::builder()
                .strategy(Strategy::SlidingWindow)
                .tier(plan(3))
                .key_prefix("moved"),
        );
        module.service().reload(config).unwrap();
        (a, admitted(module, 6, held), admitted(module, 6, tiered))
    };
    let (held_module, _) = on_wrap(Hashes::Forwarded);
    let (text_module, _) = on_wrap(Hashes::None);
    assert_eq!(script(&held_module), script(&text_module));
}

/// Two test modules (two memory stores, two seeds) on one thread, in turns: each fn call
/// decided on its own module's store at exactly its limit. Would catch a site prepared (and
/// its hash held) under one module used under the other.
#[test]
fn two_modules_in_turn_on_one_thread_each_count_their_own() {
    let memory =
        || TestModule::new(builder(StoreConfig::Memory(MemoryOptions::default()))).unwrap();
    let (a, b) = (memory(), memory());
    let (mut on_a, mut on_b) = (0, 0);
    for _ in 0..5 {
        on_a += admitted(&a, 1, held);
        on_b += admitted(&b, 1, held);
    }
    assert_eq!((on_a, on_b), (3, 3));
    assert_eq!(a.service().memory_store().unwrap().len(), 1);
    assert_eq!(b.service().memory_store().unwrap().len(), 1);
    // A third, new, after the two: its own count too.
    let c = memory();
    assert_eq!(admitted(&c, 5, held), 3);
    assert_eq!(admitted(&a, 5, held), 0);
}

/// The application's `Module` initialised, shut down and initialised again (a new memory
/// store behind a wrapper that forwards the held hash): the fn's calls after the second init
/// are decided on the new store alone, at exactly its limit, and its text sees them. Would
/// catch a site (and its hash) kept from the first module deciding after the second init.
#[test]
fn a_module_initialised_again_decides_on_its_new_store() {
    let _serial = ratelimit_tests::serial();
    let clock = ratelimit_tests::clock();
    let on = |wrap: &Wrap| builder(StoreConfig::custom(wrap.clone())).clock(clock.clone());
    let first = Wrap::new(Hashes::Forwarded);
    let module = on(&first).init().unwrap();
    let on_first = (0..2).filter(|_| held().is_ok()).count();
    module.shutdown();
    let second = Wrap::new(Hashes::Forwarded);
    let module = on(&second).init().unwrap();
    let on_second = (0..5).filter(|_| held().is_ok()).count();
    module.shutdown();
    let clock = ratelimit::Clock::now(&clock);
    assert_eq!((on_first, on_second), (2, 3));
    assert_eq!(first.remaining(clock), 1);
    assert_eq!(second.remaining(clock), 0);
    assert_eq!((first.inner.len(), second.inner.len()), (1, 1));
}

/// A stacked fn sharing the budget `held` spends from (decided by text, all or nothing)
/// and the fn through the held hash, in turns: exactly the limit between them. Would catch
/// a held hash finding another state than the stacked decision's text.
#[test]
fn a_stacked_fn_on_the_same_budget_shares_the_held_hash_state() {
    let module = TestModule::new(builder(StoreConfig::Memory(MemoryOptions::default()))).unwrap();
    let (mut single, mut stacked) = (0, 0);
    for _ in 0..4 {
        single += admitted(&module, 1, held);
        stacked += admitted(&module, 1, stacked_on_held);
    }
    assert_eq!((single, stacked), (2, 1));
    module.clock().advance(HOUR * 2);
    assert_eq!(admitted(&module, 2, stacked_on_held), 2);
    assert_eq!(admitted(&module, 5, held), 1);
}
