//! Probes of the surfaces that landed with issue 28's pipeline: the one checked `Request` a
//! store is asked with, the store key composed on the stack around the user key, an annotated
//! fn's awaited half reusing what `acquire_here` composed, and the HTTP layer's keys. Each
//! test is named after the way through it checks; a store that records every request it is
//! handed checks that none arrives unchecked.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use ratelimit::store::{Check, Mode, Request, Stacked, Store, StoreKey, StoredState};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, Failover, FailurePolicy, ManualClock, MemoryStore, Module,
    ModuleBuilder, Options, Quota, RateLimitService, StoreConfig, Strategy, Tier,
};
use ratelimit_tests::START;

// ---------------------------------------------------------------------------------------------
// A store that records what it is handed, and answers only when its gate is open.

/// One request as a store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    key: String,
    cost: u64,
    spend: bool,
    capacity: u64,
}

#[derive(Default)]
struct Inner {
    memory: MemoryStore,
    seen: Mutex<Vec<Seen>>,
    /// Closed: `decide` waits (after recording what it was asked) until it opens.
    closed: AtomicBool,
    /// Decisions the memory store made behind the gate (spent or looked).
    decided: AtomicU64,
}

/// The memory store behind the `Store` trait alone (every decision awaited), recording each
/// request and refusing to decide one a store must never see.
#[derive(Clone, Default)]
struct Recording(Arc<Inner>);

impl Recording {
    fn seen(&self) -> Vec<Seen> {
        self.0.seen.lock().unwrap().clone()
    }
    fn keys(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.key).collect()
    }
    fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
    }
    fn open(&self) {
        self.0.closed.store(false, Ordering::SeqCst);
    }
    fn decided(&self) -> u64 {
        self.0.decided.load(Ordering::SeqCst)
    }

    fn record(&self, request: &Request<'_>) {
        let seen = Seen {
            key: request.key().as_str().to_owned(),
            cost: request.cost(),
            spend: request.spends(),
            capacity: request.quota().capacity(),
        };
        // What the `Store` contract promises a store: a key of 1 to 4096 bytes, a spend of
        // at least 1, no cost above the capacity.
        assert!(
            (1..=4096).contains(&seen.key.len()),
            "a store was handed a key of {} bytes",
            seen.key.len()
        );
        assert!(!seen.spend || seen.cost >= 1, "a spend of cost 0: {seen:?}");
        assert!(
            seen.cost <= seen.capacity,
            "a cost above capacity: {seen:?}"
        );
        self.0.seen.lock().unwrap().push(seen);
    }

    fn gate(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |_| match self.0.closed.load(Ordering::SeqCst) {
            true => Poll::Pending,
            false => Poll::Ready(()),
        })
    }
}

impl Store for Recording {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.record(&request);
        self.gate().await;
        self.0.decided.fetch_add(1, Ordering::SeqCst);
        Store::decide(&self.0.memory, request).await
    }
    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let keys: Vec<_> = stacked.checks().iter().map(|c| c.key).collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(
                !keys[..i].contains(key),
                "the same key twice in a stacked call"
            );
        }
        for request in stacked.requests() {
            self.record(&request);
        }
        self.gate().await;
        self.0.decided.fetch_add(1, Ordering::SeqCst);
        Store::decide_all(&self.0.memory, stacked).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        assert!(
            (1..=4096).contains(&key.len()),
            "reset of {} bytes",
            key.len()
        );
        Store::reset(&self.0.memory, key).await
    }
}

/// A store whose backend is always away.
struct Away;

impl Store for Away {
    async fn decide(&self, _: Request<'_>) -> Result<Decision, Error> {
        Err(Error::Store {
            message: "away".into(),
        })
    }
    async fn decide_all(&self, _: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Err(Error::Store {
            message: "away".into(),
        })
    }
    async fn reset(&self, _: &str) -> Result<bool, Error> {
        Err(Error::Store {
            message: "away".into(),
        })
    }
}

fn recording(config: Config) -> (RateLimitService, Recording, ManualClock) {
    let store = Recording::default();
    let clock = ManualClock::new(START);
    let service =
        RateLimitService::with_store(config, store.clone(), Arc::new(clock.clone())).unwrap();
    (service, store, clock)
}

fn run<T>(f: impl Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

/// Polls `future` once, with a waker that does nothing.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    future.poll_unpin(&mut Context::from_waker(&waker))
}

fn one_per_minute() -> Config {
    Config::builder()
        .default_limit(1)
        .default_window("1m")
        .key_prefix("rl")
        .build()
        .unwrap()
}

fn is_invalid_key<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidKey { .. }))
}

/// FNV-1a, 64 bits, as the store key's digest tag computes it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------------------------
// 1. The checked request.

/// Every public way a call reaches a store, with a key and options; what each answered.
fn every_entry_point(
    service: &RateLimitService,
    key: &str,
    options: &Options,
) -> Vec<(&'static str, Result<bool, Error>)> {
    let allowed = |d: Result<Decision, Error>| d.map(|d| d.allowed);
    let mut out = vec![
        ("consume", allowed(run(service.consume(key, options)))),
        ("enforce", allowed(run(service.enforce(key, options)))),
        ("check", allowed(run(service.check(key, options)))),
        ("status", allowed(run(service.status(key, options)))),
        (
            "consume_all",
            run(service.consume_all(&[(key, options)])).map(|d| d[0].allowed),
        ),
        (
            "consume_now",
            service
                .consume_now(key, options)
                .map(allowed)
                .unwrap_or(Ok(true)),
        ),
        ("reset", run(service.reset_with(key, options)).map(|_| true)),
    ];
    if let Ok(prepared) = service.prepare(options) {
        let prepared = Arc::new(prepared);
        out.push(("prepared.consume", allowed(run(prepared.consume(key)))));
        out.push(("prepared.enforce", allowed(run(prepared.enforce(key)))));
        out.push(("prepared.status", allowed(run(prepared.status(key)))));
        let attempt = match prepared.try_consume(key) {
            ratelimit::Attempt::Decided(d) => allowed(d),
            ratelimit::Attempt::Pending(p) => allowed(run(p.consume())),
        };
        out.push(("prepared.try_consume", attempt));
    }
    out
}

#[test]
fn an_empty_or_overlong_user_key_never_reaches_a_store_by_any_entry_point() {
    let (service, store, _) = recording(one_per_minute());
    for key in [String::new(), "k".repeat(1025), "é".repeat(513)] {
        for (entry, answer) in every_entry_point(&service, &key, &Options::new()) {
            assert!(
                is_invalid_key(&answer),
                "{entry} ({} bytes): {answer:?}",
                key.len()
            );
        }
    }
    assert!(store.seen().is_empty(), "{:?}", store.seen());
}

#[test]
fn a_user_key_of_exactly_1024_bytes_is_decided_and_1025_refused_whatever_its_characters() {
    let (service, store, _) = recording(one_per_minute());
    // 1024 bytes: ASCII, 2-byte and 4-byte characters, a brace (the digest tag), a NUL.
    let keys = [
        "k".repeat(1024),
        "é".repeat(512),
        "🦀".repeat(256),
        format!("{{{}", "x".repeat(1023)),
        format!("\0{}", "x".repeat(1023)),
    ];
    for key in &keys {
        assert_eq!(key.len(), 1024);
        let d = run(service.consume(key, &Options::new())).unwrap();
        assert!(d.allowed);
        assert!(!run(service.consume(key, &Options::new())).unwrap().allowed);
        let mut over = key.clone();
        over.push('x');
        assert!(is_invalid_key(
            &run(service.consume(&over, &Options::new()))
        ));
    }
    // Each its own budget: two calls each, one store key each.
    let keys_seen = store.keys();
    assert_eq!(keys_seen.len(), 2 * keys.len());
    let distinct: std::collections::BTreeSet<_> = keys_seen.iter().collect();
    assert_eq!(distinct.len(), keys.len());
}

#[test]
fn a_spend_of_cost_0_or_above_capacity_never_reaches_a_store_by_any_entry_point() {
    let (service, store, _) = recording(one_per_minute());
    for cost in [0, 2, u64::MAX] {
        let options = Options::new().limit(1).window("1m").cost(cost);
        for (entry, answer) in every_entry_point(&service, "user", &options) {
            match entry {
                // A look of cost 0 is the level now; a reset spends nothing.
                "status" | "prepared.status" | "reset" => {
                    assert!(answer.is_ok(), "{entry} cost {cost}: {answer:?}")
                }
                _ if cost == 0 => assert!(
                    matches!(answer, Err(Error::ZeroCost)),
                    "{entry} cost {cost}: {answer:?}"
                ),
                _ => assert!(
                    matches!(answer, Err(Error::CostAboveCapacity { .. })),
                    "{entry} cost {cost}: {answer:?}"
                ),
            }
        }
    }
    // Only the looks of cost 0 reached the store.
    for seen in store.seen() {
        assert!(!seen.spend && seen.cost == 0, "{seen:?}");
    }
    // And nothing was spent: the one call of the minute still passes.
    assert!(
        run(service.consume("user", &Options::new()))
            .unwrap()
            .allowed
    );
}

#[test]
fn a_look_of_cost_above_capacity_is_an_error_not_a_look_the_store_answers() {
    let (service, store, _) = recording(one_per_minute());
    let look = Options::new().limit(1).window("1m").cost(2).consume(false);
    assert!(matches!(
        run(service.consume("user", &look)),
        Err(Error::CostAboveCapacity { .. })
    ));
    assert!(store.seen().is_empty());
}

#[test]
fn the_same_limit_twice_in_a_stacked_call_is_refused_before_the_store_and_spends_nothing() {
    let (service, store, _) = recording(one_per_minute());
    let options = Options::new().budget("b");
    // The same budget with another limit and the same window and strategy: one store key.
    let same_key = Options::new().budget("b").limit(5);
    for pair in [
        [("user", &options), ("user", &options)],
        [("user", &options), ("user", &same_key)],
    ] {
        let answer = run(service.consume_all(&pair));
        assert!(is_invalid_key(&answer), "{answer:?}");
    }
    assert!(store.seen().is_empty());
    // Two users, or two budgets, are two keys: decided.
    let other = Options::new().budget("c");
    let both = run(service.consume_all(&[("user", &options), ("user", &other)])).unwrap();
    assert!(both.iter().all(|d| d.allowed));
    assert!(!run(service.consume("user", &options)).unwrap().allowed);
}

#[test]
fn a_stacked_call_with_one_bad_cost_or_key_reaches_no_store_and_spends_from_no_limit() {
    let (service, store, _) = recording(one_per_minute());
    let good = Options::new().budget("a");
    let too_costly = Options::new().budget("b").cost(2);
    let zero = Options::new().budget("c").cost(0);
    assert!(matches!(
        run(service.consume_all(&[("user", &good), ("user", &too_costly)])),
        Err(Error::CostAboveCapacity { .. })
    ));
    assert!(matches!(
        run(service.consume_all(&[("user", &good), ("user", &zero)])),
        Err(Error::ZeroCost)
    ));
    let long = "k".repeat(1025);
    assert!(is_invalid_key(&run(
        service.consume_all(&[("user", &good), (long.as_str(), &good)])
    )));
    assert!(store.seen().is_empty(), "{:?}", store.seen());
    assert!(run(service.consume("user", &good)).unwrap().allowed);
}

#[test]
fn a_budget_name_long_enough_to_push_the_store_key_past_4096_bytes_is_refused_before_the_store() {
    let (service, store, _) = recording(one_per_minute());
    let user = "u".repeat(1024);
    for budget_len in [1024, 1025, 3100, 5000] {
        let options = Options::new().budget("b".repeat(budget_len));
        for (entry, answer) in every_entry_point(&service, &user, &options) {
            // Decided (the key fits) or refused as an invalid key: never a store handed a
            // key it was promised would not come.
            assert!(
                answer.is_ok()
                    || is_invalid_key(&answer)
                    || matches!(answer, Err(Error::Exceeded(_))),
                "{entry} budget {budget_len}: {answer:?}"
            );
        }
    }
    // `Recording::record` asserted each key's length; a budget name of 1024 bytes is
    // decided, a longer one refused.
    assert!(store.seen().iter().all(|s| s.key.len() <= 4096));
    let decided = |budget_len| {
        let options = Options::new().budget("c".repeat(budget_len));
        run(service.consume(&user, &options))
    };
    assert!(decided(1024).unwrap().allowed);
    assert!(is_invalid_key(&decided(1025)));
    assert!(is_invalid_key(&run(service.consume_all(&[
        ("u", &Options::new().budget("d")),
        ("u", &Options::new().budget("d".repeat(1025))),
    ]))));
}

#[test]
fn a_tier_name_long_enough_to_push_the_store_key_past_4096_bytes_is_a_configuration_error() {
    let tier = |len| {
        Config::builder()
            .tier(Tier::new("t".repeat(len), 1).window("1m"))
            .build()
    };
    assert!(tier(1024).is_ok());
    assert!(tier(1025).is_err());
    assert!(tier(5000).is_err());
    // At the longest of every part, the key fits.
    let config = Config::builder()
        .key_prefix("p".repeat(128))
        .tier(Tier::new("t".repeat(1024), 1).window("1m"))
        .build()
        .unwrap();
    let (service, store, _) = recording(config);
    let options = Options::new()
        .tier("t".repeat(1024))
        .budget("b".repeat(1024));
    let user = format!("{{{}", "u".repeat(1023));
    assert!(run(service.consume(&user, &options)).unwrap().allowed);
    assert!(!run(service.consume(&user, &options)).unwrap().allowed);
    assert!(store.keys()[0].len() <= 4096);
}

#[test]
fn failovers_local_share_never_admits_a_cost_above_the_shares_capacity() {
    let clock = ManualClock::new(START);
    let config = Config::builder()
        .default_limit(10)
        .default_window("1m")
        .build()
        .unwrap();
    let store = Failover::new(Away, FailurePolicy::Local { pods: 2 });
    let service = RateLimitService::with_store(config, store, Arc::new(clock)).unwrap();
    // The share is 5: a cost of 6 fits the quota, not the share. An error, not an allowance.
    let six = run(service.consume("user", &Options::new().cost(6)));
    assert!(
        matches!(six, Err(Error::CostAboveCapacity { .. })),
        "{six:?}"
    );
    // A cost of 5 fills the share exactly; the next unit is refused.
    assert!(
        run(service.consume("user", &Options::new().cost(5)))
            .unwrap()
            .allowed
    );
    assert!(
        !run(service.consume("user", &Options::new()))
            .unwrap()
            .allowed
    );
    // Looks of cost 0 and 1 under the share: nothing left, nothing spent.
    let look = |cost| run(service.check("user", &Options::new().cost(cost).consume(false)));
    assert_eq!(look(0).unwrap().remaining, 0);
    assert!(!look(0).unwrap().allowed);
    assert!(!look(1).unwrap().allowed);
}

/// A service on a store that is away, under `FailurePolicy::Local { pods }`, `limit` a minute.
fn local_share(limit: u64, pods: u32) -> RateLimitService {
    let config = Config::builder()
        .default_limit(limit)
        .default_window("1m")
        .build()
        .unwrap();
    let store = Failover::new(Away, FailurePolicy::Local { pods });
    RateLimitService::with_store(config, store, Arc::new(ManualClock::new(START))).unwrap()
}

#[test]
fn failovers_local_share_of_a_limit_smaller_than_the_pods_is_an_error_never_an_allowance() {
    let service = local_share(2, 3);
    // A share of 0: every call refused (or an error), never admitted.
    let refused = |d: Result<Decision, Error>| d.map_or(true, |d| !d.allowed);
    for _ in 0..3 {
        let answer = run(service.consume("user", &Options::new()));
        assert!(refused(answer.clone()), "{answer:?}");
    }
    assert!(refused(run(service.status("user", &Options::new()))));
    // Stacked under the same policy: no limit admits.
    let stacked = run(service.consume_all(&[("user", &Options::new())]));
    assert!(stacked.map_or(true, |d| !d[0].allowed));
}

#[test]
fn failovers_local_stacked_share_keeps_every_limit_all_or_nothing() {
    let service = local_share(10, 2);
    let small = Options::new().budget("small").limit(4);
    let large = Options::new().budget("large");
    // Shares 2 and 5: two calls pass both, the third is refused by the small one and spends
    // nothing from the large one.
    let mut admitted = 0;
    for _ in 0..4 {
        let d = run(service.consume_all(&[("user", &small), ("user", &large)])).unwrap();
        admitted += u64::from(d.iter().all(|d| d.allowed));
    }
    assert_eq!(admitted, 2);
    let rest = run(service.consume("user", &large.clone().cost(3))).unwrap();
    assert!(rest.allowed, "{rest:?}");
    assert_eq!(rest.remaining, 0);
}

/// A state spent under one quota, then decided under another of the same strategy (a limit
/// lowered in the configuration: the store key names the window and strategy, not the limit),
/// or of another strategy.
#[test]
fn stored_state_decided_under_a_lower_limit_refuses_and_under_another_strategy_is_unexpected() {
    let key = StoreKey::new("k").unwrap();
    for strategy in Strategy::ALL {
        let high = Quota::per_minute(10).unwrap().with_strategy(strategy);
        let low = Quota::per_minute(3).unwrap().with_strategy(strategy);
        let now = START.as_nanos() as u64;
        let mut state = StoredState::new(&high);
        for _ in 0..10 {
            let spend = Request::spend(key, &high, 1, now).unwrap();
            assert!(state.decide(&spend).unwrap().allowed, "{strategy}");
        }
        let mut lowered = StoredState::from_bytes(&state.to_bytes()).unwrap();
        for mode in [Mode::Spend, Mode::Look] {
            for cost in [0, 1, 3] {
                let Ok(request) = Request::new(key, &low, cost, now + 1, mode) else {
                    assert_eq!((mode, cost), (Mode::Spend, 0), "{strategy}");
                    continue;
                };
                let d = lowered.decide(&request);
                assert!(
                    matches!(&d, Ok(d) if !d.allowed) || d.is_err(),
                    "{strategy} {mode:?} cost {cost}: {d:?}"
                );
            }
        }
        for other in Strategy::ALL.into_iter().filter(|s| *s != strategy) {
            let q = Quota::per_minute(10).unwrap().with_strategy(other);
            for mode in [Mode::Spend, Mode::Look] {
                let mut s = StoredState::from_bytes(&state.to_bytes()).unwrap();
                let d = s.decide(&Request::new(key, &q, 1, now, mode).unwrap());
                assert!(
                    matches!(d, Err(Error::UnexpectedState { .. })),
                    "{strategy} under {other}: {d:?}"
                );
                assert_eq!(s, state, "left as it was");
            }
        }
    }
}

/// Looks of cost 0 and 1 on a fresh, a half-spent and a spent budget, on the memory store and
/// on a custom store (through `StoredState`), every strategy: the same answers, nothing spent.
#[test]
fn looks_of_cost_0_and_1_agree_on_the_memory_store_and_a_custom_store_and_spend_nothing() {
    for strategy in Strategy::ALL {
        let config = || {
            Config::builder()
                .default_limit(2)
                .default_window("1m")
                .strategy(strategy)
                .build()
                .unwrap()
        };
        let (memory, _) = ratelimit_tests::service(config());
        let (custom, _, _) = recording(config());
        let look = |service: &RateLimitService, cost| {
            let d = run(service.check("u", &Options::new().cost(cost).consume(false))).unwrap();
            (d.allowed, d.remaining)
        };
        for spent in 0..=2u64 {
            for cost in [0, 1] {
                let (m, c) = (look(&memory, cost), look(&custom, cost));
                assert_eq!(m, c, "{strategy} spent {spent} cost {cost}");
                // A look of cost 0 is the level; of cost 1, what would remain after it.
                let remaining = (2 - spent).saturating_sub(cost);
                assert_eq!(
                    m,
                    (spent < 2, remaining),
                    "{strategy} spent {spent} cost {cost}"
                );
            }
            if spent < 2 {
                assert!(run(memory.consume("u", &Options::new())).unwrap().allowed);
                assert!(run(custom.consume("u", &Options::new())).unwrap().allowed);
            }
        }
        assert!(!run(memory.consume("u", &Options::new())).unwrap().allowed);
        assert!(!run(custom.consume("u", &Options::new())).unwrap().allowed);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The store key around the user key.

/// The store key the recording store saw for one call with `key` and `options`.
fn store_key_of(key: &str, options: &Options) -> String {
    let (service, store, _) = recording(one_per_minute());
    run(service.consume(key, options)).unwrap();
    let prepared = service.prepare(options).unwrap();
    run(prepared.consume(key)).unwrap();
    let keys = store.keys();
    assert_eq!(keys.len(), 2);
    assert_eq!(
        keys[0], keys[1],
        "composed per call and around the user key"
    );
    keys[0].clone()
}

#[test]
fn a_user_key_with_braces_colons_or_a_digest_lookalike_never_shares_a_budget_with_another() {
    let braced = "{x}";
    let digest_lookalike = format!("#{:016x}", fnv1a(braced.as_bytes()));
    let users: Vec<String> = [
        "a",
        "a}",
        "{a",
        "{a}",
        "a{",
        "}a",
        "a:b",
        "a:",
        ":a",
        braced,
        &digest_lookalike,
        "-",
        "}F60000:-:-",
        "a}T60000:-:-",
        "a\0",
        "\0",
        "é",
        "e\u{301}",
        "a{b}:c",
        "a}{b",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (service, store, _) = recording(one_per_minute());
    let options = Options::new().budget("b");
    for user in &users {
        assert!(
            run(service.consume(user, &options)).unwrap().allowed,
            "{user:?} found its budget spent by another"
        );
    }
    for user in &users {
        assert!(
            !run(service.consume(user, &options)).unwrap().allowed,
            "{user:?}"
        );
    }
    let keys: std::collections::BTreeSet<_> = store.keys().into_iter().collect();
    assert_eq!(keys.len(), users.len());
}

#[test]
fn budgets_tiers_and_user_keys_that_run_into_each_other_compose_to_different_store_keys() {
    let config = || {
        Config::builder()
            .default_limit(1)
            .default_window("1m")
            .key_prefix("rl")
            .tier(Tier::new("t", 1).window("1m"))
            .tier(Tier::new("t-1", 1).window("1m"))
            .build()
            .unwrap()
    };
    let (service, store, _) = recording(config());
    // (user key, budget, tier): pairs that a naive join would give one key.
    let calls: Vec<(&str, Option<&'static str>, Option<&'static str>)> = vec![
        ("c", Some("a:b"), None),
        ("b:c", Some("a"), None),
        ("b:c", Some("a"), Some("t")),
        ("c", Some("a:b"), Some("t")),
        ("c", Some("1:a"), None),
        ("c", None, Some("t")),
        ("c", Some("t"), None),
        ("c", Some("-"), None),
        ("c", None, None),
        ("c", Some("t-1"), None),
        ("c", None, Some("t-1")),
        ("c}", Some("x"), None),
        ("c", Some("x}"), None),
        ("c", Some("{x"), None),
        ("{c", Some("x"), None),
    ];
    for (user, budget, tier) in &calls {
        let mut options = Options::new();
        if let Some(budget) = budget {
            options = options.budget(*budget);
        }
        if let Some(tier) = tier {
            options = options.tier(*tier);
        }
        assert!(
            run(service.consume(user, &options)).unwrap().allowed,
            "{user:?} {budget:?} {tier:?} shares a budget"
        );
        assert!(!run(service.consume(user, &options)).unwrap().allowed);
    }
    let keys: std::collections::BTreeSet<_> = store.keys().into_iter().collect();
    assert_eq!(keys.len(), calls.len());
}

#[test]
fn two_quotas_of_one_budget_that_read_state_differently_never_share_a_store_key() {
    let (service, store, _) = recording(one_per_minute());
    let quotas = [
        Options::new().limit(1).window("1m"),
        Options::new().limit(1).window("60s"),
        Options::new()
            .limit(1)
            .window("1m")
            .strategy(Strategy::FixedWindow),
        Options::new()
            .limit(1)
            .window("1m")
            .strategy(Strategy::SlidingWindow),
        Options::new()
            .limit(1)
            .window("1m")
            .strategy(Strategy::SlidingWindowCounter),
        Options::new()
            .limit(1)
            .window("1m")
            .strategy(Strategy::TokenBucket),
        Options::new().limit(1).window("61s"),
        Options::new()
            .limit(1)
            .window(Duration::from_nanos(60_000_000_001)),
    ];
    for options in &quotas {
        run(service.consume("u", options)).unwrap();
    }
    let keys = store.keys();
    // "1m" and "60s" are one quota, and the sliding window is the default strategy; the
    // others each their own key.
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[0], keys[3]);
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), quotas.len() - 2, "{keys:#?}");
}

/// The store key is composed on the stack up to 184 bytes and moves to the heap past that:
/// user keys around that boundary, with multi-byte characters across it, compose to exactly
/// the key a short one does with the user key replaced.
#[test]
fn user_keys_around_the_stack_buffers_boundary_compose_whole_and_distinct() {
    let options = Options::new().budget("app::module::function");
    let short = store_key_of("K", &options);
    let (head, tail) = short.split_once("{K}").unwrap();
    let room = 184 - head.len() - tail.len() - 2;
    let mut users = Vec::new();
    for len in room.saturating_sub(4)..=room + 4 {
        users.push("k".repeat(len));
        // A multi-byte character straddling the boundary at each offset.
        for (c, width) in [('é', 2), ('€', 3), ('🦀', 4)] {
            if len >= width {
                users.push(format!("{}{c}", "k".repeat(len - width)));
                users.push(format!(
                    "{}{c}kk",
                    "k".repeat(len.saturating_sub(width + 2))
                ));
            }
        }
    }
    users.push("k".repeat(1024));
    users.push("🦀".repeat(256));
    for user in &users {
        assert_eq!(
            store_key_of(user, &options),
            format!("{head}{{{user}}}{tail}"),
            "{} bytes",
            user.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Annotated fns: keys as text, and the awaited half.

fn module_config() -> ModuleBuilder {
    Module::builder()
        .default_limit(1)
        .default_window("1m")
        .tier(Tier::new("free", 1).window("1m"))
        .tier(Tier::new("pro", 2).window("1m"))
}

fn test_module() -> TestModule {
    TestModule::new(module_config()).unwrap()
}

/// A test module on a recording store (every call awaited).
fn test_module_on(store: &Recording) -> TestModule {
    TestModule::new(module_config().store(StoreConfig::custom(store.clone()))).unwrap()
}

#[rate_limit(limit = 1, window = "1m", key = user)]
async fn by_str(user: &str) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = id)]
async fn by_u64(id: u64) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = id)]
async fn by_i128(id: i128) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = shown)]
async fn by_display(shown: &Shown) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(tier = tier, key = user)]
async fn by_tier(user: &str, tier: &str) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "1m", key = user, queue = true)]
async fn queued(user: &str) -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user, cost = cost)]
async fn costly(user: &str, cost: u64) -> Result<(), Error> {
    Ok(())
}

/// A key type written through `Display`: `text`, then failing when `fail`.
struct Shown {
    text: String,
    fail: bool,
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)?;
        if self.fail {
            return Err(std::fmt::Error);
        }
        Ok(())
    }
}

fn exceeded(r: Result<(), Error>) -> bool {
    matches!(r, Err(Error::Exceeded(_)))
}

#[test]
fn integer_keys_of_every_length_each_get_their_own_budget() {
    let module = test_module();
    let mut ids: Vec<u64> = (0..20).map(|p| 10u64.pow(p)).collect();
    ids.extend([0, 9, 99, u64::MAX, u64::MAX - 1]);
    let signed: Vec<i128> = vec![i128::MIN, i128::MAX, -1, 0, 1, -(10i128.pow(37))];
    module.run(|| {
        run(async {
            for &id in &ids {
                assert!(by_u64(id).await.is_ok(), "{id}");
                assert!(exceeded(by_u64(id).await), "{id}");
            }
            for &id in &signed {
                assert!(by_i128(id).await.is_ok(), "{id}");
                assert!(exceeded(by_i128(id).await), "{id}");
            }
        })
    });
    let counts = &module.stats().by_method;
    let u = counts
        .iter()
        .find(|(k, _)| k.ends_with("by_u64"))
        .unwrap()
        .1;
    assert_eq!((u.allowed, u.denied), (ids.len() as u64, ids.len() as u64));
}

#[test]
fn string_keys_around_the_inline_key_texts_boundary_are_whole_and_distinct() {
    let store = Recording::default();
    let module = test_module_on(&store);
    let mut users = Vec::new();
    for len in 40..=52 {
        users.push("k".repeat(len));
        users.push(format!("{}🦀", "k".repeat(len - 4)));
        users.push(format!("{}é", "k".repeat(len - 2)));
    }
    users.push("k".repeat(1024));
    run(module.scope(async {
        for user in &users {
            assert!(by_str(user).await.is_ok(), "{} bytes", user.len());
            assert!(exceeded(by_str(user).await), "{} bytes", user.len());
        }
        let over = "k".repeat(1025);
        assert!(matches!(by_str(&over).await, Err(Error::InvalidKey { .. })));
        assert!(matches!(by_str("").await, Err(Error::InvalidKey { .. })));
    }));
    let keys = store.keys();
    assert_eq!(keys.len(), 2 * users.len());
    for (user, pair) in users.iter().zip(keys.chunks(2)) {
        assert_eq!(pair[0], pair[1]);
        assert!(
            pair[0].contains(&format!("{{{user}}}")),
            "{} bytes",
            user.len()
        );
    }
}

#[test]
fn a_display_key_that_fails_partway_is_refused_not_counted_under_what_it_wrote() {
    let module = test_module();
    let alice = Shown {
        text: "tenant:".into(),
        fail: true,
    };
    let bob = Shown {
        text: "tenant:".into(),
        fail: true,
    };
    let shared = Shown {
        text: "tenant:".into(),
        fail: false,
    };
    run(module.scope(async {
        // A key that could not be written is no key: refused, never the prefix it wrote,
        // which would put every failing value (and "tenant:" itself) in one budget.
        assert!(matches!(
            by_display(&alice).await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            by_display(&bob).await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(by_display(&shared).await.is_ok());
        let empty = Shown {
            text: String::new(),
            fail: false,
        };
        assert!(matches!(
            by_display(&empty).await,
            Err(Error::InvalidKey { .. })
        ));
    }));
}

/// The future of a keyed fn on a store that awaits, polled once under one scope (so
/// `acquire_here` prepared its site there and composed the key), then finished under
/// another scope: decided by one service, counted once.
#[test]
fn an_annotated_call_begun_under_one_scope_and_finished_under_another_is_decided_once() {
    let (store_a, store_b) = (Recording::default(), Recording::default());
    let (a, b) = (test_module_on(&store_a), test_module_on(&store_b));
    store_a.close();
    let mut call = Box::pin(by_str("user"));
    assert!(a.run(|| poll_once(&mut call)).is_pending());
    assert_eq!(store_a.seen().len(), 1);
    store_a.open();
    let done = b.run(|| poll_once(&mut call));
    assert!(matches!(done, Poll::Ready(Ok(()))), "{done:?}");
    assert_eq!((store_a.seen().len(), store_a.decided()), (1, 1));
    assert!(store_b.seen().is_empty());
    let count = |m: &TestModule| m.stats().total;
    assert_eq!((count(&a).allowed, count(&a).abandoned), (1, 0));
    assert_eq!(count(&b).checks + count(&b).allowed, 0);
    // A's budget is spent; B's is not.
    assert!(exceeded(run(a.scope(by_str("user")))));
    assert!(run(b.scope(by_str("user"))).is_ok());
}

/// The same, finished on another thread with no scope at all.
#[test]
fn an_annotated_call_begun_under_a_scope_and_finished_on_another_thread_is_decided_once() {
    let store = Recording::default();
    let module = test_module_on(&store);
    store.close();
    let mut call = Box::pin(by_str("user"));
    assert!(module.run(|| poll_once(&mut call)).is_pending());
    store.open();
    let done = std::thread::spawn(move || poll_once(&mut call))
        .join()
        .unwrap();
    assert!(matches!(done, Poll::Ready(Ok(()))), "{done:?}");
    assert_eq!((store.seen().len(), store.decided()), (1, 1));
    assert_eq!(module.stats().total.allowed, 1);
}

/// Dropped while the store decides: counted once as abandoned, nothing admitted; the store
/// never decided it (it was still behind the gate), so the budget is whole.
#[test]
fn an_annotated_call_dropped_while_the_store_decides_is_counted_once_and_admits_nothing() {
    let store = Recording::default();
    let module = test_module_on(&store);
    store.close();
    let mut call = Box::pin(by_str("user"));
    assert!(module.run(|| poll_once(&mut call)).is_pending());
    drop(call);
    store.open();
    let total = module.stats().total;
    assert_eq!((total.allowed, total.denied, total.abandoned), (0, 0, 1));
    assert_eq!(store.decided(), 0);
    assert!(run(module.scope(by_str("user"))).is_ok());
    assert!(exceeded(run(module.scope(by_str("user")))));
    let total = module.stats().total;
    assert_eq!((total.allowed, total.denied, total.abandoned), (1, 1, 1));
}

/// Never polled: nothing asked, nothing counted.
#[test]
fn an_annotated_call_never_polled_asks_and_counts_nothing() {
    let store = Recording::default();
    let module = test_module_on(&store);
    module.run(|| drop(by_str("user")));
    assert!(store.seen().is_empty());
    assert_eq!(module.stats().total, ratelimit::Counts::default());
}

#[test]
fn an_annotated_call_with_a_per_call_tier_or_a_queue_or_a_cost_is_asked_and_counted_once() {
    let store = Recording::default();
    let module = test_module_on(&store);
    run(module.scope(async {
        assert!(by_tier("u", "pro").await.is_ok());
        assert!(by_tier("u", "pro").await.is_ok());
        assert!(exceeded(by_tier("u", "pro").await));
        assert!(by_tier("u", "free").await.is_ok());
        assert!(by_tier("u", "gold").await.is_err());
        assert!(costly("u", 2).await.is_ok());
        assert!(matches!(
            costly("v", 3).await,
            Err(Error::CostAboveCapacity { .. })
        ));
        assert!(matches!(costly("v", 0).await, Err(Error::ZeroCost)));
    }));
    // Queued: decided by the store, once (the second waits or is refused; either way once).
    let queued_module = test_module_on(&store);
    run(queued_module.scope(async {
        assert!(queued("q").await.is_ok());
    }));
    let seen = store.seen();
    // 4 tier calls + 1 cost call + 1 queued call reached the store; the unknown tier and the
    // bad costs did not.
    assert_eq!(seen.iter().filter(|s| s.spend).count(), 6, "{seen:#?}");
    let total = module.stats().total;
    assert_eq!((total.allowed, total.denied), (4, 1));
    assert_eq!(queued_module.stats().total.allowed, 1);
}

/// The module dropped and a new one initialised between `acquire_here` and the store's
/// answer: the call is decided by the service it began on, once; the new module counts
/// nothing of it and its budget is whole.
#[test]
fn an_annotated_call_in_flight_when_its_module_is_replaced_is_decided_once_by_the_first() {
    let _serial = ratelimit_tests::serial();
    let (first_store, second_store) = (Recording::default(), Recording::default());
    let clock = || ManualClock::new(START);
    let first = module_config()
        .store(StoreConfig::custom(first_store.clone()))
        .clock(clock())
        .init()
        .unwrap();
    let first_service = Module::current_service().unwrap();
    first_store.close();
    let mut call = Box::pin(by_str("user"));
    assert!(poll_once(&mut call).is_pending());
    drop(first);
    let second = module_config()
        .store(StoreConfig::custom(second_store.clone()))
        .clock(clock())
        .init()
        .unwrap();
    first_store.open();
    let done = poll_once(&mut call);
    assert!(matches!(done, Poll::Ready(Ok(()))), "{done:?}");
    assert_eq!((first_store.seen().len(), first_store.decided()), (1, 1));
    assert!(second_store.seen().is_empty());
    assert_eq!(first_service.stats().total.allowed, 1);
    assert_eq!(Module::current_service().unwrap().stats().total.checks, 0);
    assert!(run(by_str("user")).is_ok());
    assert!(exceeded(run(by_str("user"))));
    drop(second);
    assert!(matches!(
        run(by_str("user")),
        Err(Error::NotInitialized { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// A library's limiter.

static LIBRARY: ratelimit::Limiter = ratelimit::Limiter::new();

#[rate_limit(limit = 1, window = "1m", key = user, limiter = LIBRARY)]
async fn library_fn(user: &str) -> Result<(), Error> {
    Ok(())
}

/// A library's fn begun on its limiter and finished under an application's scope (or after
/// the limiter stopped): decided once, by the library's limiter, never by the scope.
#[test]
fn a_library_call_in_flight_is_decided_once_by_its_own_limiter_never_by_a_scope() {
    let _serial = ratelimit_tests::serial();
    let library_store = Recording::default();
    let app_store = Recording::default();
    let app = test_module_on(&app_store);
    let running = LIBRARY
        .init(
            Module::builder()
                .store(StoreConfig::custom(library_store.clone()))
                .clock(ManualClock::new(START)),
        )
        .unwrap();
    let library_service = LIBRARY.service().unwrap();
    library_store.close();
    let mut call = Box::pin(library_fn("user"));
    assert!(app.run(|| poll_once(&mut call)).is_pending());
    library_store.open();
    assert!(matches!(
        app.run(|| poll_once(&mut call)),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(library_store.decided(), 1);
    assert!(app_store.seen().is_empty());
    assert_eq!(library_service.stats().total.allowed, 1);
    assert!(exceeded(run(app.scope(library_fn("user")))));
    drop(running);
    assert!(matches!(
        run(app.scope(library_fn("other"))),
        Err(Error::NotInitialized { .. })
    ));
    assert!(app_store.seen().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Stacked checks built by hand: the store-facing constructors.

#[test]
fn a_stacked_call_built_by_hand_refuses_a_repeated_key_a_zero_spend_and_a_cost_above_capacity() {
    let (a, b) = (StoreKey::new("a").unwrap(), StoreKey::new("b").unwrap());
    let q = Quota::per_minute(2).unwrap();
    let check = |key, cost| Check {
        key,
        quota: &q,
        cost,
    };
    let cases: [(&[Check<'_>], Mode, bool); 6] = [
        (&[check(a, 1), check(a, 1)], Mode::Spend, false),
        (&[check(a, 1), check(a, 1)], Mode::Look, false),
        (&[check(a, 1), check(b, 0)], Mode::Spend, false),
        (&[check(a, 1), check(b, 3)], Mode::Look, false),
        (&[check(a, 0), check(b, 0)], Mode::Look, true),
        (&[check(a, 2), check(b, 1)], Mode::Spend, true),
    ];
    for (checks, mode, ok) in cases {
        assert_eq!(
            Stacked::new(checks, 0, mode).is_ok(),
            ok,
            "{checks:?} {mode:?}"
        );
    }
    assert!(StoreKey::new("").is_err());
    assert!(StoreKey::new(&"k".repeat(4097)).is_err());
    assert!(StoreKey::new(&"k".repeat(4096)).is_ok());
    assert!(Request::spend(a, &q, 0, 0).is_err());
    assert!(Request::look(a, &q, 3, 0).is_err());
    assert!(Request::look(a, &q, 0, 0).is_ok());
}

// ---------------------------------------------------------------------------------------------
// 4. The HTTP layer's keys, from what a client sends.

#[cfg(feature = "axum")]
mod http {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request as HttpRequest, StatusCode};
    use axum::routing::get;
    use axum::Router;
    use ratelimit::http::RateLimitLayer;
    use tower::ServiceExt;

    /// An app limited to one request a minute per `x-user` header (a closure extractor, as a
    /// user writes one: the header as it comes), on the memory store or a recording store.
    fn app(store: Option<&Recording>) -> Router {
        let config = one_per_minute();
        let clock = Arc::new(ManualClock::new(START));
        let service = match store {
            None => RateLimitService::with_clock(config, clock),
            Some(store) => RateLimitService::with_store(config, store.clone(), clock),
        }
        .unwrap();
        let key = |parts: &axum::http::request::Parts| {
            let value = parts.headers.get("x-user")?;
            Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
        };
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(service, key))
    }

    fn status(app: &Router, user: &[u8]) -> StatusCode {
        let request = HttpRequest::get("/")
            .header("x-user", user)
            .body(Body::empty())
            .unwrap();
        run(app.clone().oneshot(request)).unwrap().status()
    }

    #[test]
    fn a_header_key_of_1024_bytes_is_limited_and_a_longer_or_empty_one_refused_never_passed() {
        for store in [None, Some(Recording::default())] {
            let app = app(store.as_ref());
            let exact = vec![b'k'; 1024];
            assert_eq!(status(&app, &exact), StatusCode::OK);
            assert_eq!(status(&app, &exact), StatusCode::TOO_MANY_REQUESTS);
            for bad in [vec![b'k'; 1025], vec![b'k'; 8000], Vec::new()] {
                for _ in 0..3 {
                    let answer = status(&app, &bad);
                    assert!(!answer.is_success(), "{} bytes: {answer}", bad.len());
                }
            }
            if let Some(store) = store {
                assert_eq!(store.seen().len(), 2);
            }
        }
    }

    #[test]
    fn header_keys_with_braces_colons_and_odd_bytes_each_get_their_own_budget() {
        let store = Recording::default();
        let app = app(Some(&store));
        let users: [&[u8]; 9] = [
            b"a",
            b"a}",
            b"{a}",
            b"a:",
            b"a:-",
            "é".as_bytes(),
            b"\xff",
            b"a\tb",
            b"}L60000:-:-",
        ];
        for user in users {
            assert_eq!(status(&app, user), StatusCode::OK, "{user:?}");
        }
        for user in users {
            assert_eq!(
                status(&app, user),
                StatusCode::TOO_MANY_REQUESTS,
                "{user:?}"
            );
        }
        let keys: std::collections::BTreeSet<_> = store.keys().into_iter().collect();
        assert_eq!(keys.len(), users.len());
    }
}

// ---------------------------------------------------------------------------------------------
// Redis: the checked request and the store key against a real server.

#[cfg(feature = "redis")]
mod redis_probes {
    use super::*;
    use ratelimit::RedisOptions;
    use ratelimit_tests::redis_server::{prefix, RedisServer};

    /// No window boundary, refill or expiry during a test.
    const LONG: &str = "20d";

    fn service(server: &RedisServer, name: &str, strategy: Strategy) -> RateLimitService {
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let config = Config::builder()
            .key_prefix(prefix(name))
            .default_limit(2)
            .default_window(LONG)
            .strategy(strategy)
            .store(StoreConfig::Redis(options))
            .build()
            .unwrap();
        RateLimitService::new(config).unwrap()
    }

    #[tokio::test]
    async fn looks_of_cost_0_and_1_on_redis_agree_with_the_memory_store_and_spend_nothing() {
        let server = RedisServer::start();
        for strategy in Strategy::ALL {
            let redis = service(&server, "looks", strategy);
            let (memory, _) = ratelimit_tests::service(
                Config::builder()
                    .default_limit(2)
                    .default_window(LONG)
                    .strategy(strategy)
                    .build()
                    .unwrap(),
            );
            for spent in 0..=2u64 {
                for cost in [0, 1] {
                    let look = Options::new().cost(cost).consume(false);
                    let r = redis.check("u", &look).await.unwrap();
                    let m = memory.check("u", &look).await.unwrap();
                    assert_eq!(
                        (r.allowed, r.remaining),
                        (m.allowed, m.remaining),
                        "{strategy} spent {spent} cost {cost}"
                    );
                    assert_eq!(r.allowed, spent < 2, "{strategy} spent {spent} cost {cost}");
                }
                if spent < 2 {
                    assert!(redis.consume("u", &Options::new()).await.unwrap().allowed);
                    assert!(memory.consume("u", &Options::new()).await.unwrap().allowed);
                }
            }
            assert!(!redis.consume("u", &Options::new()).await.unwrap().allowed);
        }
    }

    #[tokio::test]
    async fn user_keys_with_braces_digests_and_1024_bytes_each_get_their_own_budget_on_redis() {
        let server = RedisServer::start();
        let redis = service(&server, "keys", Strategy::FixedWindow);
        let braced = "{x}";
        let lookalike = format!("#{:016x}", fnv1a(braced.as_bytes()));
        let users = [
            "a".to_owned(),
            "a}".to_owned(),
            "{a}".to_owned(),
            braced.to_owned(),
            lookalike,
            "a\0".to_owned(),
            "é".repeat(512),
            format!("{{{}", "k".repeat(1023)),
            "}L1728000000:-:-".to_owned(),
        ];
        for round in 0..3 {
            for user in &users {
                let d = redis.consume(user, &Options::new()).await.unwrap();
                assert_eq!(d.allowed, round < 2, "{user:?} round {round}");
            }
        }
        for bad in [String::new(), "k".repeat(1025)] {
            assert!(is_invalid_key(&redis.consume(&bad, &Options::new()).await));
        }
        let options = Options::new().budget("b");
        assert!(is_invalid_key(
            &redis.consume_all(&[("u", &options), ("u", &options)]).await
        ));
        assert!(matches!(
            redis.consume("u", &Options::new().cost(3)).await,
            Err(Error::CostAboveCapacity { .. })
        ));
        assert!(matches!(
            redis.consume("u", &Options::new().cost(0)).await,
            Err(Error::ZeroCost)
        ));
    }

    /// An annotated fn on Redis whose future is dropped right after `acquire_here` handed
    /// the call to the store (the first poll): counted as abandoned or decided, once; never
    /// both, never admitted without a unit spent.
    #[tokio::test]
    async fn an_annotated_call_on_redis_dropped_after_its_first_poll_is_counted_once() {
        let server = RedisServer::start();
        let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        let module = TestModule::new(
            module_config()
                .key_prefix(prefix("dropped"))
                .store(StoreConfig::Redis(options)),
        )
        .unwrap();
        // Connect first, so the first poll reaches Redis.
        assert!(module.scope(by_str("warm-up")).await.is_ok());
        let mut call = Box::pin(module.scope(by_str("user")));
        let first = poll_once(&mut call);
        drop(call);
        let total = module.stats().total;
        match first {
            Poll::Ready(r) => assert!(r.is_ok()),
            Poll::Pending => assert_eq!(total.abandoned, 1, "{total:?}"),
        }
        assert_eq!(total.allowed + total.abandoned, 2, "{total:?}");
        // Whatever the store did with the dropped call, the budget admits at most what is
        // left: 1 if the dropped call spent, else 1 then a refusal.
        let next = module.scope(by_str("user")).await;
        let after = module.scope(by_str("user")).await;
        assert!(exceeded(after), "a second unit for a budget of one");
        let _ = next;
    }
}
