//! Limits that follow outcomes (issue 26) on the memory store, with a hand-driven clock: an
//! annotated fn that counts only its failures (`count = "err"`) or only its successes
//! (`count = "ok"`), and the service's [`Spent`]: a call spends before its work runs and is
//! given back after it when its outcome should not count, so N concurrent attempts never
//! run more than the limit allows. A refund gives back only to the state it was spent from,
//! once, and never past the quota.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ratelimit::store::{Refund, Request, Stacked, Store, StoredState};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Decision, Error, Module, ModuleBuilder, Options, ProblemKind, StoreConfig,
    Strategy, Tier,
};
use tokio::sync::Semaphore;

fn config() -> ModuleBuilder {
    Module::builder()
        .default_limit(3)
        .default_window("1m")
        .tier(Tier::new("free", 2).window("1m"))
        .tier(Tier::new("pro", 5).window("1m"))
}

fn module() -> TestModule {
    TestModule::new(config()).expect("every declaration is enforceable")
}

#[derive(Debug, PartialEq)]
enum LoginError {
    WrongPassword,
    Limited,
}

impl From<Error> for LoginError {
    fn from(_: Error) -> Self {
        LoginError::Limited
    }
}

static MALLORY_RUNS: AtomicU32 = AtomicU32::new(0);
/// Holds the bodies of `login` for user "mallory" (one test's alone) until that test lets
/// them go (permits).
static GATE: Semaphore = Semaphore::const_new(0);

/// Five failed attempts per user per 15 minutes; a success does not count.
#[rate_limit(limit = 5, window = "15m", key = user, count = "err")]
async fn login(user: &str, password: &str) -> Result<String, LoginError> {
    if user == "mallory" {
        MALLORY_RUNS.fetch_add(1, Ordering::SeqCst);
        GATE.acquire().await.expect("open").forget();
    }
    check(password)?;
    Ok(format!("welcome {user}"))
}

fn check(password: &str) -> Result<(), LoginError> {
    match password {
        "right" => Ok(()),
        _ => Err(LoginError::WrongPassword),
    }
}

fn login_options() -> Options {
    Options::new()
        .budget("outcomes::login")
        .limit(5)
        .window(Duration::from_secs(900))
}

/// The remaining budget of `user` at `login`.
async fn login_remaining(m: &TestModule, user: &str) -> u64 {
    let status = m.service().status(user, &login_options()).await;
    status.expect("status").remaining
}

/// 64 concurrent attempts with a wrong password against 5 per window, on 4 worker threads:
/// the body runs exactly 5 times (the five hold their spends while running), 59 are refused
/// before it, and the 5 failures stay counted. The first test.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_wrong_passwords_run_the_body_exactly_the_limit() {
    let m = module();
    let before = MALLORY_RUNS.load(Ordering::SeqCst);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        tasks.spawn(m.scope(async { login("mallory", "guess").await }));
    }
    let mut refused = 0;
    while refused < 59 {
        match tasks.join_next().await.expect("a task").expect("joined") {
            Err(LoginError::Limited) => refused += 1,
            other => panic!("{other:?} before the gate opened"),
        }
    }
    // The 5 left were admitted; each may still be on its way from the decision into the
    // body (under a loaded machine, after the 59th refusal was joined): wait until they are
    // all in (yielding, bounded), then none more may be.
    for _ in 0..1_000_000 {
        if MALLORY_RUNS.load(Ordering::SeqCst) - before >= 5 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(MALLORY_RUNS.load(Ordering::SeqCst) - before, 5);
    GATE.add_permits(5);
    while let Some(joined) = tasks.join_next().await {
        assert_eq!(joined.expect("joined"), Err(LoginError::WrongPassword));
    }
    assert_eq!(MALLORY_RUNS.load(Ordering::SeqCst) - before, 5);
    m.scope(async {
        assert_eq!(login_remaining(&m, "mallory").await, 0);
        assert_eq!(login("mallory", "right").await, Err(LoginError::Limited));
    })
    .await;
    let stats = m.stats();
    assert_eq!(stats.total.allowed, 5);
    assert_eq!(stats.total.denied, 60);
    assert_eq!(stats.total.refunded, 0);
}

/// The right password, 64 times sequentially and 64 times concurrently on 4 worker threads
/// (a call decides, runs and refunds within one poll: at most 4 hold a spend at once): every
/// one passes, nothing is left spent, and every refund is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn right_passwords_all_pass_and_leave_nothing_spent() {
    let m = module();
    m.scope(async {
        for _ in 0..64 {
            assert_eq!(login("alice", "right").await.unwrap(), "welcome alice");
        }
        assert_eq!(login_remaining(&m, "alice").await, 5);
    })
    .await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        tasks.spawn(m.scope(async { login("bob", "right").await }));
    }
    while let Some(joined) = tasks.join_next().await {
        assert_eq!(joined.expect("joined").unwrap(), "welcome bob");
    }
    m.scope(async { assert_eq!(login_remaining(&m, "bob").await, 5) })
        .await;
    let stats = m.stats();
    assert_eq!(stats.total.allowed, 128);
    assert_eq!(stats.total.refunded, 128);
    assert_eq!(stats.by_method["outcomes::login"].refunded, 128);
}

/// Failures count, successes in between do not: after 4 failures a success leaves 1, and the
/// fifth failure the last; the window's end gives all 5 back.
#[tokio::test]
async fn only_failures_count_until_the_window_ends() {
    let m = module();
    m.scope(async {
        for _ in 0..4 {
            assert_eq!(login("carol", "nope").await, Err(LoginError::WrongPassword));
            assert!(login("carol", "right").await.is_ok());
        }
        assert_eq!(login_remaining(&m, "carol").await, 1);
        assert_eq!(login("carol", "nope").await, Err(LoginError::WrongPassword));
        assert_eq!(login("carol", "right").await, Err(LoginError::Limited));
    })
    .await;
    m.clock().advance(Duration::from_secs(900));
    m.scope(async {
        assert_eq!(login_remaining(&m, "carol").await, 5);
        assert!(login("carol", "right").await.is_ok());
    })
    .await;
}

static SENT: AtomicU32 = AtomicU32::new(0);

/// Two messages sent per minute: a send that fails (the mail server said no) does not count.
#[rate_limit(limit = 2, window = "1m", key = to, count = "ok", strategy = "token-bucket")]
async fn send(to: &str, works: bool) -> Result<(), SendError> {
    if !works {
        // An early return ends the body's block, not the fn: the refund still runs.
        return Err(SendError::Down);
    }
    SENT.fetch_add(1, Ordering::SeqCst);
    let _ = to;
    Ok(())
}

#[derive(Debug, PartialEq)]
enum SendError {
    Down,
    Limited,
}

impl From<Error> for SendError {
    fn from(e: Error) -> Self {
        assert!(matches!(e, Error::Exceeded(_)), "{e}");
        SendError::Limited
    }
}

#[tokio::test]
async fn only_successes_count_with_count_ok_on_a_token_bucket() {
    let m = module();
    m.scope(async {
        for _ in 0..10 {
            assert_eq!(send("dan", false).await, Err(SendError::Down));
        }
        assert!(send("dan", true).await.is_ok());
        assert_eq!(send("dan", false).await, Err(SendError::Down));
        assert!(send("dan", true).await.is_ok());
        assert_eq!(send("dan", true).await, Err(SendError::Limited));
    })
    .await;
    assert_eq!(m.stats().total.refunded, 11);
}

static CHECKS: AtomicU32 = AtomicU32::new(0);

/// A sync fn: decided, run and given back at once.
#[rate_limit(limit = 1, window = "1m", key = code, count = "err")]
fn verify(code: u32) -> Result<u32, Error> {
    CHECKS.fetch_add(1, Ordering::SeqCst);
    if code == 42 {
        return Ok(code);
    }
    Err(Error::Store {
        message: "bad code".into(),
    })
}

#[test]
fn a_sync_fn_counts_only_its_failures() {
    let m = module();
    m.run(|| {
        for _ in 0..3 {
            assert_eq!(verify(42).unwrap(), 42);
        }
        assert!(matches!(verify(7), Err(Error::Store { .. })));
        assert!(matches!(verify(7), Err(Error::Exceeded(_))));
    });
    assert_eq!(m.stats().total.refunded, 3);
}

#[test]
fn a_fn_that_counts_outcomes_does_not_start_on_a_store_without_refunds() {
    let store = StoreConfig::custom(ratelimit_tests::LikeMemory::without_refunds());
    let Err(Error::Declarations(errors)) = TestModule::new(config().store(store)) else {
        panic!("started")
    };
    let named: Vec<&str> = errors
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::NoRefunds)
        .map(|p| p.function)
        .collect();
    for function in ["outcomes::login", "outcomes::send", "outcomes::verify"] {
        assert!(named.contains(&function), "{function}: {errors}");
    }
}

static STACKED_RUNS: AtomicU32 = AtomicU32::new(0);

/// Five failures per user per 15 minutes and ten per client address per hour, decided as one:
/// a failure counts in both, a success in neither.
#[rate_limit(limit = 5, window = "15m", key = user, count = "err")]
#[rate_limit(limit = 10, window = "1h", key = ip)]
async fn login_from(user: &str, ip: &str, password: &str) -> Result<(), LoginError> {
    STACKED_RUNS.fetch_add(1, Ordering::SeqCst);
    check(password)
}

#[tokio::test]
async fn stacked_limits_count_failures_in_every_limit_and_successes_in_none() {
    let m = module();
    m.scope(async {
        for _ in 0..20 {
            assert!(login_from("kim", "10.0.0.1", "right").await.is_ok());
        }
        for _ in 0..5 {
            assert_eq!(
                login_from("kim", "10.0.0.1", "nope").await,
                Err(LoginError::WrongPassword)
            );
        }
        assert_eq!(
            login_from("kim", "10.0.0.1", "right").await,
            Err(LoginError::Limited)
        );
        // The address's limit spent 5 (the failures), so 5 more users may fail from it.
        for user in ["a", "b", "c", "d", "e"] {
            assert_eq!(
                login_from(user, "10.0.0.1", "x").await,
                Err(LoginError::WrongPassword)
            );
        }
        assert_eq!(
            login_from("f", "10.0.0.1", "right").await,
            Err(LoginError::Limited)
        );
    })
    .await;
    let stats = m.stats();
    assert_eq!(stats.total.refunded, 20);
    assert_eq!(stats.by_method["outcomes::login_from"].refunded, 20);
    assert_eq!(stats.by_method["outcomes::login_from#2"].refunded, 20);
}

/// A stacked spend is given back to every limit or to none: once the short limit's window
/// rolled (or its key was reset), the long limit keeps its spend too.
#[tokio::test]
async fn a_stacked_refund_gives_back_to_every_limit_or_to_none() {
    let m = module();
    let service = m.service();
    let short = Options::new()
        .limit(2)
        .window(Duration::from_secs(1))
        .budget("short");
    let long = Options::new()
        .limit(5)
        .window(Duration::from_secs(3600))
        .budget("long");
    let limits = [("lee", &short), ("lee", &long)];
    let spent = service.spend_all(&limits).await.unwrap();
    assert!(spent.decisions().iter().all(|d| d.allowed));
    assert!(spent.refundable());
    assert!(spent.refund().await.unwrap());
    assert_eq!(service.status("lee", &short).await.unwrap().remaining, 2);
    assert_eq!(service.status("lee", &long).await.unwrap().remaining, 5);

    // The long limit first: its refund alone would give back.
    let rolled = service
        .spend_all(&[("lee", &long), ("lee", &short)])
        .await
        .unwrap();
    m.clock().advance(Duration::from_secs(2));
    assert!(!rolled.refund().await.unwrap());
    assert_eq!(service.status("lee", &long).await.unwrap().remaining, 4);

    let reset = service.spend_all(&limits).await.unwrap();
    assert!(service.reset_with("lee", &short).await.unwrap());
    assert!(!reset.refund().await.unwrap());
    assert_eq!(service.status("lee", &long).await.unwrap().remaining, 3);

    // Refused by one limit: nothing was spent, nothing to give back.
    let one = Options::new()
        .limit(1)
        .window(Duration::from_secs(60))
        .budget("one");
    let kept = service.spend_all(&[("lee", &one)]).await.unwrap();
    let refused = service
        .spend_all(&[("lee", &long), ("lee", &one)])
        .await
        .unwrap();
    assert!(!refused.refundable());
    assert!(kept.refundable());
}

// ---------------------------------------------------------------------------------------------
// The service's `Spent`: refunds only to the state spent from, once, never past the quota.

fn service_module() -> TestModule {
    module()
}

/// Every strategy: a spend given back after its window rolled (for the log and the bucket:
/// after the spend stopped counting) gives nothing, and the budget is full, not over.
#[tokio::test]
async fn a_refund_after_the_window_rolled_gives_nothing() {
    for strategy in Strategy::ALL {
        let m = service_module();
        let options = Options::new()
            .limit(3)
            .window(Duration::from_secs(60))
            .strategy(strategy);
        let spent = m.service().spend("erin", &options).await.unwrap();
        assert!(spent.refundable(), "{strategy}");
        m.clock().advance(Duration::from_secs(120));
        assert!(!spent.refund().await.unwrap(), "{strategy}");
        let status = m.service().status("erin", &options).await.unwrap();
        assert_eq!(status.remaining, 3, "{strategy}");
    }
}

/// Every strategy: a spend made before a reset gives nothing to the state made after it, even
/// at the same instant (where the window, the log's entry or the bucket's arrival time would
/// all match): the key's stamp is another.
#[tokio::test]
async fn a_refund_after_a_reset_gives_nothing_to_the_new_state() {
    for strategy in Strategy::ALL {
        let m = service_module();
        let options = Options::new()
            .limit(3)
            .window(Duration::from_secs(60))
            .strategy(strategy);
        let service = m.service();
        let old = service.spend("fay", &options).await.unwrap();
        assert!(service.reset_with("fay", &options).await.unwrap());
        let new = service.spend("fay", &options).await.unwrap();
        assert!(new.decision().allowed);
        assert!(!old.refund().await.unwrap(), "{strategy}");
        assert_eq!(service.status("fay", &options).await.unwrap().remaining, 2);
        assert!(new.refund().await.unwrap(), "{strategy}");
        assert_eq!(service.status("fay", &options).await.unwrap().remaining, 3);
    }
}

/// A token bucket's key swept once full and made again by a later call: a spend of the old
/// key gives nothing to the new one, though the spend's arrival time is still ahead (a refund
/// of an earlier spend moved the old key's back, so the sweep could drop it first).
#[tokio::test]
async fn a_refund_after_the_key_was_swept_and_made_again_gives_nothing() {
    let m = service_module();
    // One token every 20 s, 3 at most.
    let options = Options::new()
        .limit(3)
        .window(Duration::from_secs(60))
        .strategy(Strategy::TokenBucket);
    let service = m.service();
    let first = service.spend("gus", &options).await.unwrap();
    let second = service.spend("gus", &options).await.unwrap();
    assert!(first.refund().await.unwrap());
    // The bucket was full again 20 s after the spend that stayed: past that and the sweep's
    // second of grace, the sweep drops the key.
    m.clock().advance(Duration::from_secs(25));
    let store = service.memory_store().expect("memory");
    assert_eq!(store.sweep(ratelimit::Clock::now(m.clock())), 1);
    let third = service.spend("gus", &options).await.unwrap();
    assert!(third.decision().allowed);
    assert!(!second.refund().await.unwrap());
    assert_eq!(service.status("gus", &options).await.unwrap().remaining, 2);
}

/// A spend under one tier is given back to that tier's state only: another tier's state,
/// spent from since, keeps its count.
#[tokio::test]
async fn a_refund_goes_to_the_tier_it_was_spent_under() {
    let m = service_module();
    let service = m.service();
    let free = Options::new().tier("free");
    let pro = Options::new().tier("pro");
    let spent = service.spend("hal", &free).await.unwrap();
    let _kept = service.spend("hal", &pro).await.unwrap();
    assert!(spent.refund().await.unwrap());
    assert_eq!(service.status("hal", &free).await.unwrap().remaining, 2);
    assert_eq!(service.status("hal", &pro).await.unwrap().remaining, 4);
}

/// Nothing to give back: a refused call, and a shadow limit's would-be refusal.
#[tokio::test]
async fn refusals_and_shadowed_calls_are_not_refundable() {
    let m = service_module();
    let service = m.service();
    let options = Options::new().limit(1).window(Duration::from_secs(60));
    assert!(service.spend("ivy", &options).await.unwrap().refundable());
    let refused = service.spend("ivy", &options).await.unwrap();
    assert!(!refused.decision().allowed);
    assert!(!refused.refundable());
    assert!(!refused.refund().await.unwrap());
    let shadow = options.clone().shadow(true);
    let shadowed = service.spend("ivy", &shadow).await.unwrap();
    assert!(shadowed.decision().shadowed);
    assert!(!shadowed.refundable());
    assert_eq!(service.status("ivy", &options).await.unwrap().remaining, 0);
}

/// `refund_now` on the memory store answers at once and takes the spend: a second call has
/// nothing to give.
#[tokio::test]
async fn refund_now_gives_back_once() {
    let m = service_module();
    let service = m.service();
    let options = Options::new().limit(2).window(Duration::from_secs(60));
    let prepared = service.prepare(&options).unwrap();
    let mut spent = prepared.spend("jo").await.unwrap();
    assert!(matches!(spent.refund_now(), Some(Ok(true))));
    assert!(matches!(spent.refund_now(), Some(Ok(false))));
    assert!(!spent.refund().await.unwrap());
    assert_eq!(service.status("jo", &options).await.unwrap().remaining, 2);
}

/// A store written against the public API alone that gives spends back: each key's bytes
/// beside a stamp no other state under the key had (`StoredState::refund` applies the rule).
#[derive(Default)]
struct StampedMap {
    map: std::sync::Mutex<std::collections::HashMap<String, (u64, Vec<u8>)>>,
    stamps: std::sync::atomic::AtomicU64,
}

impl StampedMap {
    fn decide_here(&self, request: Request<'_>) -> Result<Decision, Error> {
        let mut map = self.map.lock().unwrap();
        let key = request.key().as_str();
        let (stamp, mut state) = match map.get(key) {
            Some((stamp, bytes)) => (*stamp, StoredState::from_bytes(bytes)?),
            None => (0, StoredState::new(request.quota())),
        };
        let decision = state.decide(&request)?;
        if !(request.spends() && decision.allowed) {
            return Ok(decision);
        }
        let stamp = match stamp {
            0 => self.stamps.fetch_add(1, Ordering::Relaxed) + 1,
            kept => kept,
        };
        map.insert(key.to_owned(), (stamp, state.to_bytes()));
        Ok(decision.stamped(stamp))
    }

    fn refund_here(&self, refund: Refund<'_>) -> Result<bool, Error> {
        let mut map = self.map.lock().unwrap();
        let Some((stamp, bytes)) = map.get_mut(refund.key().as_str()) else {
            return Ok(false);
        };
        if *stamp != refund.stamp() {
            return Ok(false);
        }
        let mut state = StoredState::from_bytes(bytes)?;
        let given = state.refund(&refund);
        *bytes = state.to_bytes();
        Ok(given)
    }
}

impl Store for StampedMap {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.decide_here(request)
    }
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        Some(self.decide_here(request))
    }
    fn decides_at_once(&self) -> bool {
        true
    }
    async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Err(Error::Store {
            message: "no stacked limits here".into(),
        })
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.map.lock().unwrap().remove(key).is_some())
    }
    fn refunds(&self) -> bool {
        true
    }
    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.refund_here(refund)
    }
    fn refund_now(&self, refund: Refund<'_>) -> Option<Result<bool, Error>> {
        Some(self.refund_here(refund))
    }
}

/// A store of one's own that refunds runs `count = ..` fns: failures count, successes do
/// not, and a spend from before a reset gives nothing to the state after it.
#[tokio::test]
async fn a_store_of_ones_own_gives_spends_back_through_stored_state() {
    let store = StoreConfig::custom(StampedMap::default());
    let m = TestModule::new(config().store(store)).expect("a store that refunds starts");
    m.scope(async {
        for _ in 0..20 {
            assert!(login("mia", "right").await.is_ok());
        }
        for _ in 0..5 {
            assert_eq!(login("mia", "nope").await, Err(LoginError::WrongPassword));
        }
        assert_eq!(login("mia", "right").await, Err(LoginError::Limited));
    })
    .await;
    assert_eq!(m.stats().total.refunded, 20);
    let service = m.service();
    let options = Options::new().limit(3).window(Duration::from_secs(60));
    let old = service.spend("ned", &options).await.unwrap();
    assert!(old.refundable());
    assert!(service.reset_with("ned", &options).await.unwrap());
    let _new = service.spend("ned", &options).await.unwrap();
    assert!(!old.refund().await.unwrap());
    assert_eq!(service.status("ned", &options).await.unwrap().remaining, 2);
}
