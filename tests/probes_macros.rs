//! Probes of the attribute macros at run time: signatures, keys and placements the expansion
//! might leave unlimited, limit twice, or point at the wrong budget or key. Every probe runs
//! in a `TestModule` on a hand-driven clock (or a library `Limiter` of its own, for the ones
//! that must fail `init`), and asserts exact counts: calls admitted, bodies run, key
//! expressions evaluated.
//!
//! What must not compile (a method a macro call writes in an annotated `impl`, a limit under
//! an alias or `cfg_attr` on a fn limited already) is in `tests/ui/fail/probe_*.rs`.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Limiter, Module, ModuleBuilder, ProblemKind, Tier};
use ratelimit_tests::problems;

const MINUTE: Duration = Duration::from_secs(60);

/// Every module of this binary: each declaration below (bar the library limiters') is
/// enforceable under it.
fn config() -> ModuleBuilder {
    Module::builder()
        .default_limit(3)
        .default_window("1m")
        .tier(Tier::new("free", 2).window("1m"))
}

fn module() -> TestModule {
    TestModule::new(config()).expect("every declaration is enforceable")
}

fn exceeded<T: fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Exceeded(_)))
}

/// How many of `n` calls of `f` were admitted; panics on any error but a refusal.
async fn admitted<T: fmt::Debug, F: std::future::Future<Output = Result<T, Error>>>(
    n: u32,
    mut f: impl FnMut() -> F,
) -> u32 {
    let mut ok = 0;
    for _ in 0..n {
        match f().await {
            Ok(_) => ok += 1,
            Err(Error::Exceeded(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    ok
}

// ---------------------------------------------------------------------------------------------
// Key expressions: evaluated once, before the body, on the arguments as passed.

static KEY_EVALS: AtomicU32 = AtomicU32::new(0);
static STACKED_KEY_EVALS: AtomicU32 = AtomicU32::new(0);

fn counted_key(user: &str) -> &str {
    KEY_EVALS.fetch_add(1, Ordering::SeqCst);
    user
}

fn counted_stacked_key(user: &str) -> &str {
    STACKED_KEY_EVALS.fetch_add(1, Ordering::SeqCst);
    user
}

#[rate_limit(limit = 2, window = "1m", key = counted_key(user))]
async fn side_effect_key(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = counted_stacked_key(user))]
#[rate_limit(limit = 5, window = "1m", key = counted_stacked_key(user))]
fn side_effect_stacked(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[tokio::test]
async fn a_key_with_side_effects_is_evaluated_once_per_call_even_when_refused() {
    // Evaluated twice, a key could be one budget's for the check and another's for the spend.
    let m = module();
    m.scope(async {
        assert_eq!(admitted(4, || side_effect_key("ann")).await, 2);
    })
    .await;
    assert_eq!(KEY_EVALS.load(Ordering::SeqCst), 4);
    m.run(|| {
        let results: Vec<bool> = (0..4).map(|_| side_effect_stacked("ann").is_ok()).collect();
        assert_eq!(results, [true, true, false, false]);
    });
    // Two stacked limits, each its key once per call.
    assert_eq!(STACKED_KEY_EVALS.load(Ordering::SeqCst), 8);
}

static SHADOW_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 1, window = "1m", key = user)]
async fn shadowed_in_body(user: &str) -> Result<String, Error> {
    // The body rebinds `user` to one value for every call: the key is the argument's.
    let user = "everyone";
    SHADOW_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(user.to_owned())
}

#[tokio::test]
async fn a_key_named_like_a_binding_the_body_shadows_is_the_arguments_value() {
    // Read after the body's `let`, every call would fall on the key "everyone".
    module()
        .scope(async {
            assert!(shadowed_in_body("ann").await.is_ok());
            assert!(shadowed_in_body("bob").await.is_ok());
            assert!(exceeded(&shadowed_in_body("ann").await));
            assert_eq!(SHADOW_RUNS.load(Ordering::SeqCst), 2);
        })
        .await;
}

#[rate_limit(limit = 1, window = "1m", key = a)]
async fn pattern_arg((a, b): (u32, u32), [c, _]: [u8; 2]) -> Result<u32, Error> {
    Ok(a + b + u32::from(c))
}

#[rate_limit(limit = 1, window = "1m", key = id)]
async fn renamed_by_pattern(Wrapper { inner: id }: Wrapper) -> Result<u32, Error> {
    Ok(id)
}

struct Wrapper {
    inner: u32,
}

#[tokio::test]
async fn keys_bound_by_patterns_in_the_arguments_are_one_budget_per_value() {
    module()
        .scope(async {
            assert_eq!(pattern_arg((1, 2), [3, 4]).await.unwrap(), 6);
            // Same `a`, other `b`: the same key.
            assert!(exceeded(&pattern_arg((1, 9), [0, 0]).await));
            assert!(pattern_arg((2, 2), [3, 4]).await.is_ok());
            assert!(renamed_by_pattern(Wrapper { inner: 7 }).await.is_ok());
            assert!(exceeded(&renamed_by_pattern(Wrapper { inner: 7 }).await));
            assert!(renamed_by_pattern(Wrapper { inner: 8 }).await.is_ok());
        })
        .await;
}

#[rate_limit(limit = 3, window = "1m", key = key)]
async fn any_key<K: fmt::Display>(key: K) -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn a_key_is_its_text_whatever_its_type_one_budget_across_a_generic_fns_instances() {
    // `String`, `&&str`, `Cow`, an integer and a `char` written "7" are one key (one text); a
    // key written some other way by its type (a direct integer path, say) would split it.
    let m = module();
    m.scope(async {
        let s: &str = "7";
        any_key("7".to_owned()).await.unwrap();
        any_key(&s).await.unwrap();
        any_key(Cow::Borrowed("7")).await.unwrap();
        assert!(exceeded(&any_key(7u64).await));
        assert!(exceeded(&any_key(7i8).await));
        assert!(exceeded(&any_key('7').await));
        any_key(8u8).await.unwrap();
    })
    .await;
    let stats = m.stats();
    let counts = &stats.by_method["probes_macros::any_key"];
    assert_eq!((counts.allowed, counts.denied), (4, 3));
}

/// A key whose `Display` writes nothing.
struct Blank;

impl fmt::Display for Blank {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}

/// A key whose `Display` fails after writing.
struct Failing;

impl fmt::Display for Failing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("half")?;
        Err(fmt::Error)
    }
}

static ODD_KEY_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 1, window = "1m", key = key)]
async fn odd_key<K: fmt::Display>(key: K) -> Result<(), Error> {
    ODD_KEY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn an_empty_or_failing_key_is_refused_every_time_never_one_shared_budget_or_a_pass() {
    // Admitted, every such call would share one budget (or none at all).
    module()
        .scope(async {
            for _ in 0..3 {
                assert!(matches!(
                    odd_key(Blank).await,
                    Err(Error::InvalidKey { .. })
                ));
                assert!(matches!(
                    odd_key(Failing).await,
                    Err(Error::InvalidKey { .. })
                ));
                assert!(matches!(odd_key("").await, Err(Error::InvalidKey { .. })));
            }
            assert_eq!(ODD_KEY_RUNS.load(Ordering::SeqCst), 0);
            // "half", what the failing key wrote first, is a key of its own, untouched.
            odd_key("half").await.unwrap();
        })
        .await;
}

static COST_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1m", cost = units)]
async fn priced(units: u64) -> Result<(), Error> {
    COST_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_cost_of_zero_per_call_is_an_error_not_a_free_pass_once_the_budget_is_spent() {
    // A cost of 0 admitted would be a call that never spends: unlimited.
    let m = module();
    m.scope(async {
        priced(3).await.unwrap();
        assert!(exceeded(&priced(1).await));
        for _ in 0..3 {
            let err = priced(0).await.unwrap_err();
            assert!(!matches!(err, Error::Exceeded(_)), "{err}");
        }
        assert!(priced(4).await.is_err());
    })
    .await;
    assert_eq!(COST_RUNS.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Receivers, generics, `where` clauses, lifetimes, `impl Trait`

#[derive(Clone)]
struct Account {
    id: u32,
}

impl Account {
    #[rate_limit(limit = 1, window = "1m", key = self.id, name = "by-value")]
    async fn by_value(self) -> Result<u32, Error> {
        Ok(self.id)
    }

    #[rate_limit(limit = 1, window = "1m", key = self.id, name = "by-box")]
    async fn by_box(self: Box<Self>) -> Result<u32, Error> {
        Ok(self.id)
    }

    #[rate_limit(limit = 1, window = "1m", key = self.id, name = "by-arc")]
    fn by_arc(self: Arc<Self>) -> Result<u32, Error> {
        Ok(self.id)
    }

    #[rate_limit(limit = 2, window = "1m", key = tag.as_ref(), name = "where-clause")]
    async fn generic<'a, T>(&self, tag: &'a T, _other: impl fmt::Debug) -> Result<&'a T, Error>
    where
        T: AsRef<str> + ?Sized + Sync,
    {
        Ok(tag)
    }
}

#[tokio::test]
async fn every_receiver_keys_on_self_per_value() {
    let m = module();
    m.scope(async {
        let (a, b) = (Account { id: 1 }, Account { id: 2 });
        assert_eq!(a.clone().by_value().await.unwrap(), 1);
        assert!(exceeded(&a.clone().by_value().await));
        assert_eq!(b.clone().by_value().await.unwrap(), 2);
        assert_eq!(Box::new(a.clone()).by_box().await.unwrap(), 1);
        assert!(exceeded(&Box::new(a.clone()).by_box().await));
        assert_eq!(Arc::new(a.clone()).by_arc().unwrap(), 1);
        assert!(exceeded(&Arc::new(a.clone()).by_arc()));
        assert_eq!(Arc::new(b.clone()).by_arc().unwrap(), 2);
        assert_eq!(*a.generic("x", 1u8).await.unwrap(), *"x");
        assert!(a.generic(&String::from("x"), 'c').await.is_ok());
        assert!(exceeded(&a.generic("x", 2u16).await));
        assert!(a.generic("y", 3u8).await.is_ok());
    })
    .await;
    let stats = m.stats();
    for (budget, allowed, denied) in [
        ("by-value", 2, 1),
        ("by-box", 1, 1),
        ("by-arc", 2, 1),
        ("where-clause", 3, 1),
    ] {
        let c = &stats.by_method[budget];
        assert_eq!((c.allowed, c.denied), (allowed, denied), "{budget}");
    }
}

// ---------------------------------------------------------------------------------------------
// Impl blocks: a method's own limit replaces the block's; macro calls

struct Reports;

#[rate_limit(limit = 1, window = "1m")]
impl Reports {
    async fn daily(&self) -> Result<(), Error> {
        Ok(())
    }

    #[rate_limit(limit = 3, window = "1m", key = user)]
    async fn own(&self, user: &str) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }

    #[throttle(2, "minute")]
    fn own_sync(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::test]
async fn a_methods_own_limit_replaces_its_blocks_never_spends_from_both() {
    // Spending from both, `own` would pass once a minute (the block's 1), not 3 times per user.
    let m = module();
    m.scope(async {
        assert_eq!(admitted(5, || Reports.own("ann")).await, 3);
        assert_eq!(admitted(5, || Reports.own("bob")).await, 3);
        assert_eq!(admitted(5, || Reports.daily()).await, 1);
    })
    .await;
    m.run(|| {
        let results: Vec<bool> = (0..3).map(|_| Reports.own_sync().is_ok()).collect();
        assert_eq!(results, [true, true, false]);
    });
    let stats = m.stats();
    assert_eq!(stats.by_method["probes_macros::Reports::own"].allowed, 6);
    assert_eq!(
        stats.by_method["probes_macros::Reports::own_sync"].allowed,
        2
    );
    assert_eq!(stats.by_method["probes_macros::Reports::daily"].allowed, 1);
    assert_eq!(stats.by_method.len(), 3, "{:?}", stats.by_method.keys());
}

struct ByPath;

#[ratelimit::rate_limit(limit = 1, window = "1m")]
impl ByPath {
    #[ratelimit::throttle(3, "minute")]
    async fn own(&self) -> Result<(), Error> {
        Ok(())
    }

    #[ratelimit::skip_throttle]
    async fn skipped(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::test]
async fn attributes_written_by_their_path_are_read_as_their_names_are() {
    // Unread, `own` would spend from the block's limit too, and `skipped` would be limited.
    let m = module();
    m.scope(async {
        assert_eq!(admitted(4, || ByPath.own()).await, 3);
        assert_eq!(admitted(4, || ByPath.skipped()).await, 4);
    })
    .await;
    let stats = m.stats();
    assert_eq!(stats.by_method["probes_macros::ByPath::own"].allowed, 3);
    assert!(!stats
        .by_method
        .contains_key("probes_macros::ByPath::skipped"));
    assert!(!stats.by_method.contains_key("probes_macros::own"));
}

struct Generated;

/// Writes a method that limits itself.
macro_rules! limited_method {
    ($name:ident) => {
        #[throttle(2, "minute")]
        async fn $name(&self) -> Result<(), Error> {
            Ok(())
        }
    };
}

/// Writes a method with no limit.
macro_rules! plain_method {
    ($name:ident) => {
        async fn $name(&self) -> Result<(), Error> {
            Ok(())
        }
    };
}

#[throttle(1, "minute")]
impl Generated {
    // What these write is exempt from the block's limit, as the mark says: without it, a
    // compile error (`tests/ui/fail/probe_macro_call_in_impl.rs`), never a silent pass.
    #[skip_throttle]
    limited_method!(made_by_macro);
    #[skip_throttle]
    plain_method!(exempt_by_choice);

    async fn written(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::test]
async fn a_macro_call_in_an_annotated_impl_is_exempt_only_when_marked_and_limits_itself() {
    let m = module();
    m.scope(async {
        assert_eq!(admitted(4, || Generated.made_by_macro()).await, 2);
        assert_eq!(admitted(4, || Generated.exempt_by_choice()).await, 4);
        assert_eq!(admitted(4, || Generated.written()).await, 1);
    })
    .await;
    // A method annotated on its own is named after its module, not its type.
    assert_eq!(
        m.stats().by_method["probes_macros::made_by_macro"].allowed,
        2
    );
}

static STACKED_BLOCK_RUNS: AtomicU32 = AtomicU32::new(0);

struct Stacked;

#[throttle(2, "minute")]
#[rate_limit(limit = 3, window = "1h", key = user)]
impl Stacked {
    async fn fetch(&self, user: &str) -> Result<(), Error> {
        let _ = user;
        STACKED_BLOCK_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn fetch_now(&self, user: &str) -> Result<(), Error> {
        let _ = user;
        STACKED_BLOCK_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn limits_stacked_on_an_impl_block_stack_on_each_method_as_one() {
    // Expanded one after the other, the second would limit methods the first had limited
    // already: two checks, and a call refused by the second spends from the first.
    let m = module();
    m.scope(async {
        assert_eq!(admitted(3, || Stacked.fetch("ann")).await, 2);
    })
    .await;
    m.clock().advance(MINUTE);
    m.scope(async {
        // The hourly limit per user: 2 spent, so 1 left (the refusal spent nothing).
        assert_eq!(admitted(3, || Stacked.fetch("ann")).await, 1);
        assert_eq!(admitted(1, || Stacked.fetch("bob")).await, 1);
    })
    .await;
    m.run(|| {
        let results: Vec<bool> = (0..3).map(|_| Stacked.fetch_now("ann").is_ok()).collect();
        assert_eq!(results, [true, true, false]);
    });
    assert_eq!(STACKED_BLOCK_RUNS.load(Ordering::SeqCst), 6);
    let stats = m.stats();
    assert_eq!(
        stats.by_method["probes_macros::Stacked::fetch#2"].allowed,
        4
    );
    assert_eq!(stats.by_method["probes_macros::Stacked::fetch"].denied, 1);
}

// ---------------------------------------------------------------------------------------------
// Budgets: modules, macros, `cfg_attr`, stacking

mod billing {
    use ratelimit::{throttle, Error};

    #[throttle(1, "minute")]
    pub(crate) async fn charge() -> Result<(), Error> {
        Ok(())
    }
}

mod shipping {
    use ratelimit::{throttle, Error};

    #[throttle(1, "minute")]
    pub(crate) async fn charge() -> Result<(), Error> {
        Ok(())
    }
}

macro_rules! limited_fn {
    ($name:ident, $n:literal) => {
        #[throttle($n, "minute")]
        async fn $name() -> Result<(), Error> {
            Ok(())
        }
    };
}

limited_fn!(made_one, 1);
limited_fn!(made_two, 2);

#[tokio::test]
async fn fns_of_one_name_in_two_modules_and_fns_a_macro_writes_each_have_their_own_budget() {
    let m = module();
    m.scope(async {
        assert_eq!(admitted(3, billing::charge).await, 1);
        assert_eq!(admitted(3, shipping::charge).await, 1);
        assert_eq!(admitted(3, made_one).await, 1);
        assert_eq!(admitted(3, made_two).await, 2);
    })
    .await;
    let stats = m.stats();
    for name in [
        "probes_macros::billing::charge",
        "probes_macros::shipping::charge",
        "probes_macros::made_one",
        "probes_macros::made_two",
    ] {
        assert!(stats.by_method[name].denied > 0, "{name}");
    }
}

static CFG_RUNS: AtomicU32 = AtomicU32::new(0);

#[throttle(2, "minute")]
#[cfg_attr(all(), rate_limit(limit = 3, window = "1h"))]
#[cfg_attr(any(), rate_limit(limit = 1, window = "1h"))]
async fn cfg_stacked() -> Result<(), Error> {
    CFG_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[cfg_attr(all(), rate_limit(limit = 1, window = "1m"))]
async fn cfg_only() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn a_limit_behind_cfg_attr_applies_when_on_and_stacks_as_one_with_the_others() {
    // Read as a second, separate check (or dropped), a refusal by one would spend the other.
    let m = module();
    m.scope(async {
        assert_eq!(admitted(3, cfg_stacked).await, 2);
        assert_eq!(admitted(2, cfg_only).await, 1);
    })
    .await;
    m.clock().advance(MINUTE);
    m.scope(async {
        // The hourly limit: 2 spent, not 3 (the refused call spent nothing from it).
        assert_eq!(admitted(3, cfg_stacked).await, 1);
    })
    .await;
    assert_eq!(CFG_RUNS.load(Ordering::SeqCst), 3);
    let stats = m.stats();
    assert_eq!(stats.by_method["probes_macros::cfg_stacked#2"].allowed, 3);
    assert!(!stats
        .by_method
        .keys()
        .any(|k| k.starts_with("probes_macros::cfg_stacked#3")));
}

// ---------------------------------------------------------------------------------------------
// Error types, recursion, trait default methods

#[derive(Debug)]
struct Opaque;

impl fmt::Display for Opaque {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("opaque")
    }
}

impl std::error::Error for Opaque {}

/// An error type whose conversion from the crate's error keeps nothing of it.
#[derive(Debug, PartialEq)]
enum Lossy {
    Anything,
}

impl From<Error> for Lossy {
    fn from(_: Error) -> Self {
        Lossy::Anything
    }
}

#[throttle(1, "minute")]
async fn boxed_error() -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    Err(Box::new(Opaque))
}

#[throttle(1, "minute")]
async fn nested_result() -> Result<Result<u8, Error>, Lossy> {
    Ok(Ok(1))
}

#[tokio::test]
async fn a_refusal_is_an_err_of_the_outer_result_whatever_the_error_type_makes_of_it() {
    // Turned into the inner `Result` or lost in a box, a refusal could read as a success.
    module()
        .scope(async {
            let body = boxed_error().await.unwrap_err();
            assert!(body.downcast_ref::<Opaque>().is_some());
            let refused = boxed_error().await.unwrap_err();
            assert!(matches!(
                refused.downcast_ref::<Error>(),
                Some(Error::Exceeded(_))
            ));
            assert!(matches!(nested_result().await, Ok(Ok(1))));
            assert!(matches!(nested_result().await, Err(Lossy::Anything)));
        })
        .await;
}

static RECURSIVE_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1m")]
fn recursive(depth: u32) -> Result<u32, Error> {
    RECURSIVE_RUNS.fetch_add(1, Ordering::SeqCst);
    if depth == 0 {
        return Ok(0);
    }
    Ok(recursive(depth - 1)? + 1)
}

static ASYNC_RECURSIVE_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 3, window = "1m")]
async fn async_recursive(depth: u32) -> Result<u32, Error> {
    ASYNC_RECURSIVE_RUNS.fetch_add(1, Ordering::SeqCst);
    if depth == 0 {
        return Ok(0);
    }
    Ok(Box::pin(async_recursive(depth - 1)).await? + 1)
}

#[tokio::test]
async fn a_fn_calling_itself_spends_once_per_call_and_the_call_past_the_limit_is_refused() {
    let m = module();
    m.run(|| {
        assert!(exceeded(&recursive(5)));
        assert_eq!(RECURSIVE_RUNS.load(Ordering::SeqCst), 3);
    });
    m.scope(async {
        assert_eq!(async_recursive(2).await.unwrap(), 2);
        assert!(exceeded(&async_recursive(0).await));
    })
    .await;
    assert_eq!(ASYNC_RECURSIVE_RUNS.load(Ordering::SeqCst), 3);
}

trait Greeter {
    #[throttle(2, "minute")]
    async fn greet(&self) -> Result<(), Error> {
        Ok(())
    }
}

struct Ann;
struct Bob;

impl Greeter for Ann {}
impl Greeter for Bob {}

#[tokio::test]
async fn a_limited_default_method_of_a_trait_is_one_budget_for_every_implementor() {
    let m = module();
    m.scope(async {
        Ann.greet().await.unwrap();
        Bob.greet().await.unwrap();
        assert!(exceeded(&Ann.greet().await));
        assert!(exceeded(&Bob.greet().await));
    })
    .await;
    assert_eq!(m.stats().by_method["probes_macros::greet"].allowed, 2);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: before the module, after it, in two modules

static LIFECYCLE_RUNS: AtomicU32 = AtomicU32::new(0);

struct Jobs;

#[rate_limit(limit = 1, window = "1m")]
impl Jobs {
    async fn run(&self) -> Result<(), Error> {
        LIFECYCLE_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn run_now(&self) -> Result<(), Error> {
        LIFECYCLE_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn calls_outside_every_module_are_refused_before_after_and_between_two_modules() {
    let not_initialized = |r: Result<(), Error>| matches!(r, Err(Error::NotInitialized { .. }));
    assert!(not_initialized(Jobs.run().await));
    assert!(not_initialized(Jobs.run_now()));
    let (a, b) = (module(), module());
    a.scope(async { Jobs.run().await.unwrap() }).await;
    a.run(|| Jobs.run_now().unwrap());
    assert!(not_initialized(Jobs.run().await));
    assert!(not_initialized(Jobs.run_now()));
    b.scope(async { Jobs.run().await.unwrap() }).await;
    b.run(|| Jobs.run_now().unwrap());
    drop((a, b));
    assert!(not_initialized(Jobs.run().await));
    assert!(not_initialized(Jobs.run_now()));
    assert_eq!(LIFECYCLE_RUNS.load(Ordering::SeqCst), 4);
}

// ---------------------------------------------------------------------------------------------
// Default budget names that collide: a startup error naming both, never one budget by accident.
// The fns are a library limiter's, so that only its `init` sees them.

static COLLIDING: Limiter = Limiter::new();

mod colliding {
    use super::COLLIDING;
    use ratelimit::{rate_limit, Error};

    pub(crate) fn first() -> impl std::future::Future<Output = Result<(), Error>> {
        #[rate_limit(limit = 1, window = "1m", limiter = COLLIDING)]
        async fn nested() -> Result<(), Error> {
            Ok(())
        }
        nested()
    }

    pub(crate) fn second() -> impl std::future::Future<Output = Result<(), Error>> {
        #[rate_limit(limit = 1, window = "1m", limiter = COLLIDING)]
        async fn nested() -> Result<(), Error> {
            Ok(())
        }
        nested()
    }

    pub(crate) struct Page<T>(pub(crate) T);

    #[rate_limit(limit = 1, window = "1m", limiter = COLLIDING)]
    impl Page<u8> {
        pub(crate) async fn load(&self) -> Result<u8, Error> {
            Ok(self.0)
        }
    }

    #[rate_limit(limit = 1, window = "1m", limiter = COLLIDING)]
    impl Page<u16> {
        pub(crate) async fn load(&self) -> Result<u16, Error> {
            Ok(self.0)
        }
    }
}

#[tokio::test]
async fn fns_that_fall_on_one_default_budget_name_fail_init_and_stay_refused() {
    // Admitted, `nested` in `first` and in `second` (and `Page<u8>::load` and
    // `Page<u16>::load`) would spend one budget between them.
    let err = COLLIDING
        .init(Module::builder().default_limit(1))
        .unwrap_err();
    let mut found: Vec<(&str, bool)> = problems(&err)
        .into_iter()
        .map(|(f, kind)| (f, matches!(kind, ProblemKind::SameDefaultName { .. })))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("probes_macros::colliding::Page::load", true),
            ("probes_macros::colliding::nested", true)
        ]
    );
    for refused in [
        colliding::first().await,
        colliding::second().await,
        colliding::Page(1u8).load().await.map(drop),
        colliding::Page(1u16).load().await.map(drop),
    ] {
        assert!(matches!(refused, Err(Error::NotInitialized { .. })));
    }
}

// ---------------------------------------------------------------------------------------------
// `-> Self` in a trait impl: exempt as a constructor only where `Self` is no `Result` (where
// it is one, a compile error: `tests/ui/fail/probe_self_is_a_result.rs`).

trait Make: Sized {
    fn make() -> Self;
    fn fetch(&self) -> Result<u8, Error>;
}

struct Built<T>(T);

static MAKE_RUNS: AtomicU32 = AtomicU32::new(0);

#[throttle(1, "minute")]
impl<T: Default> Make for Built<T> {
    fn make() -> Self {
        MAKE_RUNS.fetch_add(1, Ordering::SeqCst);
        Built(T::default())
    }

    fn fetch(&self) -> Result<u8, Error> {
        Ok(1)
    }
}

#[tokio::test]
async fn a_constructor_of_a_trait_impl_whose_self_is_no_result_stays_exempt_the_rest_limited() {
    let m = module();
    m.run(|| {
        for _ in 0..3 {
            let built = Built::<u8>::make();
            assert_eq!(built.0, 0);
        }
        let built = Built::<u8>::make();
        assert!(built.fetch().is_ok());
        assert!(exceeded(&built.fetch()));
    });
    // Outside any module too: nothing to refuse.
    let _ = Built::<String>::make();
    assert_eq!(MAKE_RUNS.load(Ordering::SeqCst), 5);
}
