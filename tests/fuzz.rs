//! Hostile input, generated with proptest: the parsers (`parse_window`, `Rate`, `Strategy`),
//! the configuration files (arbitrary text, and documents of the right shape with wrong
//! types, huge numbers, unknown fields and bad tiers) and the key path
//! (`RateLimitService::consume` with arbitrary keys, tiers, budgets, costs and overrides),
//! and the bytes a custom store reads back (`StoredState::from_bytes`: arbitrary bytes, and
//! valid encodings mutated).
//!
//! Each property says three things: nothing panics; every refusal is a typed error (the
//! variant the input calls for, when the input decides it); and nothing is admitted that a
//! valid equivalent call would refuse. Time is a `ManualClock` that never moves inside a
//! case, so every count is exact.
//!
//! The macro's argument parser is not called here (a proc-macro crate cannot be called from
//! a test): it parses windows, rates and strategies with the same `ratelimit-syntax`
//! functions fuzzed below, and integers with `syn`'s `base10_parse`.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratelimit::store::{Mode, Request, StoreKey, StoredState};
use ratelimit::{
    format_window, parse_window, Config, Error, ManualClock, MemoryStore, Name, Nanos, Options,
    ParseError, Quota, Rate, RateLimitService, Strategy as Algorithm, Tier, MAX_CAPACITY,
    MAX_KEY_LEN, MAX_WINDOW,
};
use ratelimit_tests::{now, START};

fn config() -> ProptestConfig {
    // A fixed seed: the same cases on every run, so CI is deterministic. To explore new
    // inputs, run with `PROPTEST_RNG_SEED=<n>` (or raise `PROPTEST_CASES`).
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026);
    ProptestConfig {
        cases: ratelimit_tests::proptest_cases(256),
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}

/// Text that looks like a window more often than random text does.
fn window_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ ]{0,2}[0-9]{0,24}(ms|s|m|h|d|x|µs|)[0-9]{0,6}(ms|s|m|h|d|)[ ]{0,2}",
        "[0-9]{1,3}(d|h|m|s|ms){1,3}",
        "[0-9+\\-.eE_]{0,12}(ms|s)",
    ]
}

fn strategy_name() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        Just("fixed-window".to_owned()),
        "(fixed|sliding|token)[-_ ]?(window|bucket|counter|log)?[-_ ]?(counter)?",
        "(FIXED-WINDOW|Sliding-Window| token-bucket |sliding-window-counter\u{0})",
    ]
}

/// The error a parse refusal must be: one of the typed kinds, its message naming the input.
fn check_parse_error(input: &str, e: &ParseError) {
    let text = e.to_string();
    match e {
        ParseError::Empty => assert!(input.trim().is_empty(), "{input:?}: {text}"),
        ParseError::InvalidWindow { input: i, .. }
        | ParseError::ZeroWindow { input: i }
        | ParseError::TooLong { input: i }
        | ParseError::InvalidRate { input: i, .. }
        | ParseError::UnknownStrategy { input: i } => {
            assert!(text.contains(&format!("{i:?}")), "names the input: {text}");
        }
        other => panic!("an unexpected kind of parse error: {other:?}"),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn windows_parse_to_a_bounded_duration_or_a_typed_error(input in window_like()) {
        match parse_window(&input) {
            Ok(window) => {
                prop_assert!(window > Duration::ZERO && window <= MAX_WINDOW, "{input:?}");
                prop_assert_eq!(window.subsec_nanos() % 1_000_000, 0, "whole milliseconds");
                // What comes out is read back the same way.
                prop_assert_eq!(parse_window(&format_window(window)).ok(), Some(window));
            }
            Err(e) => check_parse_error(&input, &e),
        }
    }

    #[test]
    fn rates_parse_to_a_valid_window_or_a_typed_error(
        limit in prop_oneof![any::<String>(), "[+-]?[0-9]{0,22}", Just(String::new())],
        sep in prop_oneof![Just("/"), Just(" / "), Just("//"), Just(""), Just("per")],
        per in prop_oneof![window_like(), "(second|minute|hour|day|sec|min)s?", any::<String>()],
    ) {
        let input = format!("{limit}{sep}{per}");
        match input.parse::<Rate>() {
            Ok(rate) => {
                prop_assert!(rate.window > Duration::ZERO && rate.window <= MAX_WINDOW);
                prop_assert_eq!(Some(rate.limit), limit.trim().parse::<u64>().ok(), "{:?}", input);
            }
            Err(e) => check_parse_error(&input, &e),
        }
    }

    #[test]
    fn strategies_parse_to_one_of_four_or_a_typed_error(input in strategy_name()) {
        match input.parse::<Algorithm>() {
            Ok(s) => {
                prop_assert!(Algorithm::ALL.contains(&s));
                prop_assert_eq!(s.as_str().parse::<Algorithm>().ok(), Some(s));
            }
            Err(e) => check_parse_error(&input, &e),
        }
    }

    #[test]
    fn arbitrary_text_is_a_config_or_an_invalid_config_error(text in any::<String>()) {
        for result in [Config::from_toml_str(&text), Config::from_json_str(&text)] {
            match result {
                Ok(config) => check_config_admits_exactly(&config, &Doc(Vec::new()))?,
                Err(Error::InvalidConfig(e)) => prop_assert!(!e.problems.is_empty()),
                Err(other) => prop_assert!(false, "not a configuration error: {other:?}"),
            }
        }
    }

    #[test]
    fn structured_but_wrong_documents_are_refused_by_field_or_admit_exactly(doc in document()) {
        for (format, text, result) in [
            ("toml", doc.toml(), Config::from_toml_str(&doc.toml())),
            ("json", doc.json(), Config::from_json_str(&doc.json())),
        ] {
            match result {
                Ok(config) => check_config_admits_exactly(&config, &doc)?,
                Err(Error::InvalidConfig(e)) => prop_assert!(!e.problems.is_empty(), "{format}: {text}"),
                Err(other) => prop_assert!(false, "{format}: not a configuration error: {other:?}\n{text}"),
            }
        }
    }

}

proptest! {
    // Most generated calls are refused before any state is touched; more cases reach the
    // counting.
    #![proptest_config(ProptestConfig { cases: ratelimit_tests::proptest_cases(1024), ..config() })]

    #[test]
    fn any_key_tier_budget_cost_and_overrides_is_refused_typed_or_admitted_exactly(
        call in call(),
        free in 0u64..8,
        default_limit in prop::option::of(0u64..8),
    ) {
        key_path(&call, free, default_limit)?;
    }
}

// ---------------------------------------------------------------------------------------
// Configuration documents.

/// A value of the right shape for some field, or of a wrong one.
#[derive(Debug, Clone)]
enum Val {
    /// Kept as text: it may not fit any integer type.
    Int(String),
    Float(f64),
    Str(String),
    Bool(bool),
    Arr(Vec<Val>),
    Obj(Vec<(String, Val)>),
}

/// A document: top-level fields in order (duplicates possible: both formats refuse them).
#[derive(Debug, Clone)]
struct Doc(Vec<(String, Val)>);

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Val {
    fn json(&self) -> String {
        match self {
            Val::Int(n) => n.clone(),
            Val::Float(f) => format!("{f:?}"),
            Val::Str(s) => quote(s),
            Val::Bool(b) => b.to_string(),
            Val::Arr(v) => format!(
                "[{}]",
                v.iter().map(Val::json).collect::<Vec<_>>().join(",")
            ),
            Val::Obj(f) => format!(
                "{{{}}}",
                f.iter()
                    .map(|(k, v)| format!("{}:{}", quote(k), v.json()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
    fn toml(&self) -> String {
        match self {
            Val::Obj(f) => format!(
                "{{{}}}",
                f.iter()
                    .map(|(k, v)| format!("{} = {}", quote(k), v.toml()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Val::Arr(v) => format!(
                "[{}]",
                v.iter().map(Val::toml).collect::<Vec<_>>().join(", ")
            ),
            other => other.json(),
        }
    }
    /// The value as a `u64`, when it is one.
    fn as_u64(&self) -> Option<u64> {
        match self {
            Val::Int(n) => n.parse().ok(),
            _ => None,
        }
    }
}

impl Doc {
    fn json(&self) -> String {
        Val::Obj(self.0.clone()).json()
    }
    fn toml(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{} = {}\n", quote(k), v.toml()))
            .collect()
    }
    fn field(&self, name: &str) -> Option<&Val> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

fn integer() -> impl Strategy<Value = Val> {
    prop_oneof![
        (0u64..20).prop_map(|n| Val::Int(n.to_string())),
        Just(Val::Int(MAX_CAPACITY.to_string())),
        Just(Val::Int((MAX_CAPACITY + 1).to_string())),
        Just(Val::Int(u64::MAX.to_string())),
        Just(Val::Int("18446744073709551616".into())),
        Just(Val::Int("-1".into())),
        Just(Val::Int(i64::MIN.to_string())),
        Just(Val::Int("99999999999999999999999999999999999999".into())),
        any::<i64>().prop_map(|n| Val::Int(n.to_string())),
        prop_oneof![Just(1e300), Just(-0.0), Just(2.5), Just(f64::MAX)].prop_map(Val::Float),
    ]
}

fn scalar() -> impl Strategy<Value = Val> {
    prop_oneof![
        integer(),
        window_like().prop_map(Val::Str),
        strategy_name().prop_map(Val::Str),
        any::<bool>().prop_map(Val::Bool),
        Just(Val::Str("redis".into())),
        Just(Val::Str("memory".into())),
    ]
}

fn value() -> impl Strategy<Value = Val> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Val::Arr),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..3).prop_map(Val::Obj),
        ]
    })
}

fn tier_name() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just("free".to_owned()),
        2 => Just("pro".to_owned()),
        1 => Just(String::new()),
        2 => "[a-z]{1,6}",
        1 => any::<String>(),
    ]
}

fn tier() -> impl Strategy<Value = Val> {
    let small = (0u64..12).prop_map(|n| Val::Int(n.to_string()));
    let window = prop_oneof![
        3 => "[1-9][0-9]{0,2}(ms|s|m|h)".prop_map(Val::Str),
        1 => window_like().prop_map(Val::Str),
    ];
    let field = prop_oneof![
        (Just("window"), window),
        (
            Just("burst"),
            prop_oneof![3 => small.clone(), 1 => integer()]
        ),
        (Just("priority"), integer()),
        (Just("strategy"), strategy_name().prop_map(Val::Str)),
        (
            Just("refill"),
            prop_oneof![3 => small.clone(), 1 => integer()]
        ),
        (Just("limits"), integer()),
        (Just("window"), integer()),
    ]
    .prop_map(|(k, v)| (k.to_owned(), v));
    let limit = prop::option::weighted(0.9, prop_oneof![4 => small, 1 => integer()]);
    prop_oneof![
        6 => (limit, prop::collection::vec(field, 0..3)).prop_map(|(limit, mut fields)| {
            if let Some(limit) = limit {
                fields.insert(0, ("limit".to_owned(), limit));
            }
            Val::Obj(fields)
        }),
        1 => value(),
    ]
}

fn store() -> impl Strategy<Value = Val> {
    let field = prop_oneof![
        (
            Just("type"),
            prop_oneof![
                Just(Val::Str("memory".into())),
                Just(Val::Str("redis".into())),
                scalar()
            ]
        ),
        (Just("max_keys"), integer()),
        (Just("sweep_interval"), window_like().prop_map(Val::Str)),
        (Just("url"), Just(Val::Str("redis://127.0.0.1:1".into()))),
        (Just("timeout"), window_like().prop_map(Val::Str)),
        (
            Just("on_failure"),
            prop_oneof![
                Just(Val::Str("allow".into())),
                Just(Val::Str("local".into())),
                scalar()
            ]
        ),
        (Just("pods"), integer()),
        (Just("cluster"), scalar()),
        (Just("nodes"), value()),
    ]
    .prop_map(|(k, v)| (k.to_owned(), v));
    prop::collection::vec(field, 0..4).prop_map(Val::Obj)
}

fn document() -> impl Strategy<Value = Doc> {
    let field = prop_oneof![
        (
            Just("enabled"),
            prop_oneof![4 => any::<bool>().prop_map(Val::Bool), 1 => scalar()]
        ),
        (Just("strategy"), strategy_name().prop_map(Val::Str)),
        (
            Just("key_prefix"),
            prop_oneof![
                Just(Val::Str("app".into())),
                any::<String>().prop_map(Val::Str),
                scalar()
            ]
        ),
        (Just("default_limit"), integer()),
        (Just("default_window"), window_like().prop_map(Val::Str)),
        (Just("burst_limit"), integer()),
        (Just("token_refill_rate"), integer()),
        (
            Just("tiers"),
            prop_oneof![
                4 => prop::collection::vec((tier_name(), tier()), 1..4).prop_map(Val::Obj),
                1 => value(),
            ]
        ),
        (
            Just("default_tier"),
            prop_oneof![tier_name().prop_map(Val::Str), scalar()]
        ),
        (Just("store"), prop_oneof![4 => store(), 1 => value()]),
        (Just("unknown_field"), value()),
        (Just("enabled "), any::<bool>().prop_map(Val::Bool)),
    ]
    .prop_map(|(k, v)| (k.to_owned(), v));
    // Half the documents have tiers, so that more of them get as far as a service.
    let tiers = prop::option::weighted(
        0.5,
        prop::collection::vec((tier_name(), tier()), 1..4).prop_map(Val::Obj),
    );
    (tiers, prop::collection::vec(field, 0..5)).prop_map(|(tiers, mut fields)| {
        if let Some(tiers) = tiers {
            fields.insert(0, ("tiers".to_owned(), tiers));
        }
        Doc(fields)
    })
}

/// A configuration that parsed: limiting is off only when the document says `enabled =
/// false` in so many words; each tier holds the limit and burst the document gave it; and a
/// service over it admits exactly `capacity` calls of every tier at one instant.
fn check_config_admits_exactly(config: &Config, doc: &Doc) -> Result<(), TestCaseError> {
    let disabled = matches!(doc.field("enabled"), Some(Val::Bool(false)));
    prop_assert_eq!(config.enabled(), !disabled, "{:?}", doc);
    if let Some(Val::Obj(tiers)) = doc.field("tiers") {
        for (name, t) in tiers {
            let Val::Obj(fields) = t else { continue };
            let get = |f: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == f)
                    .and_then(|(_, v)| v.as_u64())
            };
            let resolved = config
                .tier(name)
                .expect("every tier of a valid document is kept");
            prop_assert_eq!(Some(resolved.quota.limit()), get("limit"));
            let burst = get("burst").unwrap_or(config.burst_limit());
            prop_assert_eq!(resolved.quota.burst(), burst);
        }
    }
    let clock = ManualClock::new(START);
    // The document's store is not the point here (a Redis store would try to connect).
    let service = RateLimitService::with_store(config.clone(), MemoryStore::new(), Arc::new(clock))
        .map_err(|e| {
            TestCaseError::fail(format!("a parsed configuration builds a service: {e}"))
        })?;
    let mut cases: Vec<(Option<&str>, u64)> = config
        .tiers()
        .iter()
        .map(|t| (Some(&*t.name), t.quota.capacity()))
        .collect();
    if config.default_tier().is_none() {
        if let Some(q) = config.default_quota() {
            cases.push((None, q.capacity()));
        }
    }
    for (tier, capacity) in cases {
        let mut opts = Options::new();
        opts.tier = tier.map(|t| Name::from(t.to_owned()));
        let calls = capacity.min(40) + 1;
        let mut admitted = 0;
        for _ in 0..calls {
            match now(service.consume("user", &opts)) {
                Ok(d) => admitted += u64::from(d.allowed),
                Err(e) => prop_assert!(false, "tier {tier:?}: {e}"),
            }
        }
        let want = if config.enabled() {
            capacity.min(calls)
        } else {
            calls
        };
        prop_assert_eq!(admitted, want, "tier {:?}, capacity {}", tier, capacity);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The key path.

#[derive(Debug, Clone)]
struct Call {
    key: String,
    tier: Option<String>,
    budget: Option<String>,
    cost: u64,
    limit: Option<u64>,
    window: Option<Duration>,
    burst: Option<u64>,
    strategy: Option<Algorithm>,
    refill: Option<u64>,
}

impl Call {
    fn options(&self) -> Options {
        let mut o = Options::new().cost(self.cost);
        o.tier = self.tier.clone().map(Name::from);
        o.budget = self.budget.clone().map(Name::from);
        o.overrides.limit = self.limit;
        o.overrides.window = self.window;
        o.overrides.burst = self.burst;
        o.overrides.strategy = self.strategy;
        o.overrides.refill = self.refill;
        o
    }
}

fn hostile_key() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z{}:#\\-0-9]{0,10}",
        Just(String::new()),
        Just("{".into()),
        Just("}{".into()),
        Just("a:1:b".into()),
        (0usize..4).prop_map(|d| "k".repeat(MAX_KEY_LEN - 2 + d)),
        (0usize..4).prop_map(|d| "é".repeat(MAX_KEY_LEN / 2 - 2 + d)),
    ]
}

fn big_or_small() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..12,
        1 => Just(MAX_CAPACITY),
        1 => Just(MAX_CAPACITY + 1),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let window = prop_oneof![
        (1u64..5_000).prop_map(Duration::from_millis),
        (0u64..3).prop_map(Duration::from_nanos),
        Just(MAX_WINDOW),
        Just(MAX_WINDOW + Duration::from_nanos(1)),
        Just(Duration::MAX),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ];
    (
        (
            hostile_key(),
            prop::option::of(prop_oneof![1 => tier_name(), 2 => Just("free".to_owned())]),
            prop::option::of(prop_oneof![any::<String>(), Just("a:b".to_owned())]),
            prop_oneof![4 => 1u64..4, 1 => Just(0u64), 1 => big_or_small()],
        ),
        (
            prop::option::weighted(0.5, big_or_small()),
            prop::option::weighted(0.3, window),
            prop::option::weighted(0.3, big_or_small()),
            prop::option::of(prop::sample::select(Algorithm::ALL.to_vec())),
            prop::option::weighted(0.3, big_or_small()),
        ),
    )
        .prop_map(
            |((key, tier, budget, cost), (limit, window, burst, strategy, refill))| Call {
                key,
                tier,
                budget,
                cost,
                limit,
                window,
                burst,
                strategy,
                refill,
            },
        )
}

fn key_path_service(free: u64, default_limit: Option<u64>) -> RateLimitService {
    let mut b = Config::builder()
        .tier(Tier::new("free", free).window("1m"))
        .tier(
            Tier::new("pro", 5)
                .window("1s")
                .burst(2)
                .strategy(Algorithm::TokenBucket),
        );
    b = match default_limit {
        Some(limit) => b.default_limit(limit),
        None => b.no_default_limit(),
    };
    let config = b.build().expect("a valid configuration");
    RateLimitService::with_clock(config, Arc::new(ManualClock::new(START))).expect("service")
}

fn key_path(call: &Call, free: u64, default_limit: Option<u64>) -> Result<(), TestCaseError> {
    let service = key_path_service(free, default_limit);
    let opts = call.options();
    // What the input decides: the resolution's error, then the key's, then the cost's.
    let expected_error: Option<String> = match service.quota_for(&opts) {
        Err(e) => Some(e.to_string()),
        Ok(_) if call.key.is_empty() || call.key.len() > MAX_KEY_LEN => {
            Some(Error::InvalidKey { reason: "" }.to_string())
        }
        Ok(_) => None,
    };
    let first = now(service.consume(&call.key, &opts));
    if let Some(want) = expected_error {
        match &first {
            Ok(d) => prop_assert!(false, "admitted or decided despite {want}: {d:?}"),
            Err(Error::InvalidKey { .. }) => {
                prop_assert!(want.starts_with("invalid rate-limit key"))
            }
            Err(e) => prop_assert_eq!(e.to_string(), want),
        }
        prop_assert_eq!(service.stats().total.allowed, 0);
        prop_assert!(
            service.memory_store().unwrap().is_empty(),
            "a refused call left state"
        );
        return Ok(());
    }
    let (quota, _) = service.quota_for(&opts).unwrap();
    let capacity = quota.capacity();
    if call.cost == 0 {
        prop_assert!(matches!(first, Err(Error::ZeroCost)), "{:?}", first);
        return Ok(());
    }
    if capacity == 0 {
        // A limit of 0 refuses every call, told to come back in a window.
        let refused = first.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!refused.allowed);
        // `retry_after` is exact to the millisecond, rounded up.
        let retry = refused.retry_after.unwrap_or_default();
        prop_assert!(retry >= quota.window() && retry < quota.window() + Duration::from_millis(1));
        return Ok(());
    }
    if call.cost > capacity {
        prop_assert!(
            matches!(first, Err(Error::CostAboveCapacity { cost, capacity: c }) if cost == call.cost && c == capacity),
            "{:?}",
            first
        );
        prop_assert!(service.memory_store().unwrap().is_empty());
        return Ok(());
    }
    // A decidable call: at one instant, calls are admitted while their costs fit in the
    // capacity, and the same calls on a plain key with no budget (the valid equivalent,
    // in a service of its own) are admitted exactly alike.
    let equivalent = key_path_service(free, default_limit);
    let plain = Call {
        key: "k".into(),
        budget: None,
        ..call.clone()
    };
    let fits = capacity / call.cost;
    let calls = fits.min(30) + 1;
    let mut spent = 0u64;
    let mut outcome = vec![first.map(|d| d.allowed).map_err(|e| e.to_string())];
    for _ in 1..calls {
        outcome.push(
            now(service.consume(&call.key, &opts))
                .map(|d| d.allowed)
                .map_err(|e| e.to_string()),
        );
    }
    let mut reference = Vec::new();
    for _ in 0..calls {
        reference.push(
            now(equivalent.consume(&plain.key, &plain.options()))
                .map(|d| d.allowed)
                .map_err(|e| e.to_string()),
        );
    }
    prop_assert_eq!(
        &outcome,
        &reference,
        "same calls, a valid key: same answers"
    );
    for (i, o) in outcome.iter().enumerate() {
        prop_assert_eq!(
            o,
            &Ok(i < fits as usize),
            "call {} of cost {} under {:?}",
            i,
            call.cost,
            quota
        );
        if *o == Ok(true) {
            spent += call.cost;
        }
    }
    prop_assert!(spent <= capacity);
    // Another key, another budget: untouched by what this one spent. (Its first 8 characters
    // and one more: not the key itself, which a key of 9 ending in that one would be.)
    let prefix: String = call.key.chars().take(8).collect();
    let last = if call.key.chars().nth(8) == Some('x') {
        'y'
    } else {
        'x'
    };
    let other = format!("{prefix}{last}");
    prop_assert_eq!(
        now(service.consume(&other, &opts)).map(|d| d.allowed).ok(),
        Some(true)
    );
    Ok(())
}

/// Keys that differ only where an ambiguous encoding would lose the difference never share
/// a budget.
#[test]
fn keys_tiers_and_budgets_that_look_alike_never_share_a_budget() {
    let config = Config::builder()
        .tier(Tier::new("a", 1).window("1m"))
        .tier(Tier::new("a-b", 1).window("1m"))
        .tier(Tier::new("b", 1).window("1m"))
        .default_limit(1)
        .build()
        .unwrap();
    let service = RateLimitService::with_clock(config, Arc::new(ManualClock::new(START))).unwrap();
    let cases: &[(Option<&str>, Option<&str>, &str)] = &[
        (Some("a"), None, "b:c"),
        (Some("a-b"), None, "c"),
        (Some("a"), None, "-b:c"),
        (Some("a"), Some("b"), "c"),
        (Some("b"), Some("a"), "c"),
        (None, Some("a:b"), "c"),
        (None, Some("a"), "b:c"),
        (None, None, "a:b:c"),
        (None, None, "{a}b"),
        (None, None, "{a}"),
        (None, None, "a}b{"),
        (Some("a"), Some("1:b"), "c"),
        (Some("a"), Some("1"), "b:c"),
        (None, Some("-"), "c"),
        (None, None, "-:c"),
    ];
    for (tier, budget, key) in cases {
        let mut opts = Options::new();
        opts.tier = tier.map(|t| Name::from(t.to_owned()));
        opts.budget = budget.map(|b| Name::from(b.to_owned()));
        let d = now(service.consume(key, &opts)).unwrap();
        assert!(
            d.allowed,
            "{tier:?} {budget:?} {key:?} shares a budget with an earlier case"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Stored state: what a custom store reads back.

proptest! {
    // A case costs microseconds, and most random bytes are refused at the first byte.
    #![proptest_config(ProptestConfig { cases: ratelimit_tests::proptest_cases(4096), ..config() })]

    #[test]
    fn arbitrary_bytes_are_unexpected_state_or_a_state_that_re_encodes_to_them(
        bytes in state_bytes(),
    ) {
        let start = START.as_nanos() as Nanos;
        for strategy in Algorithm::ALL {
            let quota = Quota::per_second(3).unwrap().with_strategy(strategy);
            check_read(&bytes, &quota, start)?;
        }
    }

    #[test]
    fn mutated_stored_states_are_unexpected_state_or_re_encode_to_the_same_bytes(
        (quota, bytes, at) in written(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        // Unmutated, every state a store writes is read back as it was.
        prop_assert_eq!(StoredState::from_bytes(&bytes).map(|s| s.to_bytes()).ok(), Some(bytes.clone()));
        let mut bytes = bytes;
        for m in &mutations {
            m.apply(&mut bytes);
        }
        check_read(&bytes, &quota, at)?;
    }
}

/// The one property of reading stored bytes: [`Error::UnexpectedState`], or a state that
/// writes back the same bytes; and deciding on such a state at `now` is a decision or
/// `UnexpectedState` (the state left as it was), never a panic, and what it would write is
/// read back as it is.
fn check_read(bytes: &[u8], quota: &Quota, now: Nanos) -> Result<(), TestCaseError> {
    let state = match StoredState::from_bytes(bytes) {
        Err(Error::UnexpectedState { .. }) => return Ok(()),
        Err(other) => return Err(TestCaseError::fail(format!("{bytes:?}: {other}"))),
        Ok(state) => state,
    };
    // Version 1 bytes are written back in version 2, with no window recorded.
    let rewritten = match bytes {
        [1, tag, words @ ..] => [&[2, *tag][..], &[0; 8], words].concat(),
        _ => bytes.to_vec(),
    };
    prop_assert_eq!(state.to_bytes(), rewritten);
    state.expires_at(quota);
    for (cost, commit) in [(0, false), (1, false), (1, true), (quota.capacity(), true)] {
        let mut decided = state.clone();
        let mode = if commit { Mode::Spend } else { Mode::Look };
        let request = Request::new(StoreKey::new("k").unwrap(), quota, cost, now, mode).unwrap();
        match decided.decide(&request) {
            Ok(_) => {
                decided.expires_at(quota);
                let written = decided.to_bytes();
                prop_assert_eq!(StoredState::from_bytes(&written).ok(), Some(decided));
            }
            Err(Error::UnexpectedState { .. }) => prop_assert_eq!(&decided, &state),
            Err(other) => return Err(TestCaseError::fail(format!("{bytes:?}: {other}"))),
        }
    }
    Ok(())
}

/// Words a decoder must be careful with: small ones, the bounds and just past them, times
/// near these tests' clock and near 2^63, and any other.
fn word() -> impl Strategy<Value = u64> {
    let start = START.as_nanos() as u64;
    prop_oneof![
        any::<u64>(),
        0u64..8,
        prop::sample::select(vec![
            MAX_CAPACITY,
            MAX_CAPACITY + 1,
            1 << 62,
            (1 << 63) - (1 << 60),
            (1 << 63) - (1 << 60) + 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX,
        ]),
        (start - 3_000_000_000)..(start + 3_000_000_000),
    ]
}

/// Arbitrary bytes, or ones that get past the first two: the version, a strategy's letter
/// (or not), then whole words.
fn state_bytes() -> impl Strategy<Value = Vec<u8>> {
    let words = (
        prop::sample::select(b"FCTLX".to_vec()),
        prop::collection::vec(word(), 0..8),
        1u8..=2,
    )
        .prop_map(|(tag, words, version)| {
            // Version 2's first word is the window recorded; version 1 has none.
            let mut bytes = vec![version, tag];
            for w in words {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            bytes
        });
    prop_oneof![any::<Vec<u8>>(), words]
}

/// A state as a store writes it: calls of random costs at random steps under a random quota,
/// with the instant of the last one.
fn written() -> impl Strategy<Value = (Quota, Vec<u8>, Nanos)> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..6,
        prop::sample::select(vec![1_000u64, 1_000_000, 1_000_000_000, 60_000_000_000]),
        prop::collection::vec((0u64..2_000_000_000, 1u64..6), 0..8),
    )
        .prop_map(|(strategy, limit, window, calls)| {
            let quota = Quota::new(limit, Duration::from_nanos(window))
                .unwrap()
                .with_strategy(strategy);
            let mut state = StoredState::new(&quota);
            let mut at = START.as_nanos() as Nanos;
            for (step, cost) in calls {
                at += step;
                let key = StoreKey::new("k").unwrap();
                let request = Request::spend(key, &quota, cost.min(limit), at).unwrap();
                state.decide(&request).unwrap();
            }
            (quota, state.to_bytes(), at)
        })
}

/// One change to stored bytes, as corruption or another program's write would make it.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR a byte (at an index taken modulo the length).
    Flip(usize, u8),
    /// Overwrite a whole word after the version and letter.
    Word(usize, u64),
    /// Keep only a prefix.
    Truncate(usize),
    /// Append bytes.
    Append(Vec<u8>),
}

impl Mutation {
    fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Mutation::Flip(i, x) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] ^= x;
            }
            Mutation::Word(i, w) if bytes.len() >= 10 => {
                let at = 2 + 8 * (i % ((bytes.len() - 2) / 8));
                bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
            Mutation::Truncate(n) => bytes.truncate(*n),
            Mutation::Append(more) => bytes.extend_from_slice(more),
            _ => {}
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<usize>(), word()).prop_map(|(i, w)| Mutation::Word(i, w)),
        (0usize..48).prop_map(Mutation::Truncate),
        prop::collection::vec(any::<u8>(), 1..17).prop_map(Mutation::Append),
    ]
}
