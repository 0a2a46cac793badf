//! `#[rate_limit]`, `#[throttle]` and `#[skip_throttle]` on fns, methods and impl blocks, run
//! against per-test modules on a `ManualClock` (`ratelimit::testing`), so tests stay isolated
//! while running in parallel. No global `Module` is ever installed in this binary.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Module, ModuleBuilder, Tier};

/// Every test builds its module from this, so that every declaration in the binary (static
/// tiers, fns relying on the default limit) is enforceable.
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

fn is_exceeded<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Exceeded(_)))
}

// ---------------------------------------------------------------------------------------------
// Free fns

static PER_USER_RUNS: AtomicU32 = AtomicU32::new(0);

/// Two calls per user per minute.
#[rate_limit(limit = 2, window = "1m", key = user)]
async fn per_user(user: &str) -> Result<String, Error> {
    PER_USER_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("hello {user}"))
}

#[tokio::test]
async fn a_keyed_limit_counts_each_key_and_refuses_before_the_body() {
    let m = module();
    m.scope(async {
        let before = PER_USER_RUNS.load(Ordering::SeqCst);
        assert_eq!(per_user("ann").await.unwrap(), "hello ann");
        assert_eq!(per_user("ann").await.unwrap(), "hello ann");
        let refused = per_user("ann").await.unwrap_err();
        let Error::Exceeded(e) = &refused else {
            panic!("{refused}")
        };
        assert_eq!(e.decision.retry_after, Some(Duration::from_secs(60)));
        assert_eq!(e.budget.as_deref(), Some("macros::per_user"));
        // The refused call did not run the body.
        assert_eq!(PER_USER_RUNS.load(Ordering::SeqCst), before + 2);
        assert!(per_user("bob").await.is_ok());
    })
    .await;
    m.clock().advance(Duration::from_secs(60));
    m.scope(async { assert!(per_user("ann").await.is_ok()) })
        .await;
}

static UNINIT_RUNS: AtomicU32 = AtomicU32::new(0);

#[throttle(100)]
async fn needs_a_module() -> Result<(), Error> {
    UNINIT_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn without_a_module_calls_are_refused_and_name_the_fn() {
    let err = needs_a_module().await.unwrap_err();
    let Error::NotInitialized { function } = err else {
        panic!("{err}")
    };
    assert_eq!(function, "macros::needs_a_module");
    assert_eq!(UNINIT_RUNS.load(Ordering::SeqCst), 0);
    // A scope ends with its future: afterwards the fn is refused again.
    module().scope(needs_a_module()).await.unwrap();
    assert!(matches!(
        needs_a_module().await,
        Err(Error::NotInitialized { .. })
    ));
}

#[rate_limit]
async fn module_default() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn no_arguments_uses_the_module_default_limit() {
    module()
        .scope(async {
            for _ in 0..3 {
                module_default().await.unwrap();
            }
            assert!(is_exceeded(module_default().await));
        })
        .await;
}

#[throttle(1)]
async fn one_per_second() -> Result<(), Error> {
    Ok(())
}

#[throttle(2, "minute")]
async fn two_per_minute() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn throttle_is_n_per_unit() {
    let m = module();
    m.scope(async {
        one_per_second().await.unwrap();
        assert!(is_exceeded(one_per_second().await));
        two_per_minute().await.unwrap();
        two_per_minute().await.unwrap();
        assert!(is_exceeded(two_per_minute().await));
    })
    .await;
    m.clock().advance(Duration::from_secs(1));
    m.scope(async {
        one_per_second().await.unwrap();
        assert!(is_exceeded(two_per_minute().await));
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Tiers, cost, burst, strategy

#[rate_limit(tier = "pro", key = account)]
async fn static_tier(account: u64) -> Result<u64, Error> {
    Ok(account)
}

struct User {
    id: u64,
    plan: String,
}

impl User {
    fn plan(&self) -> &str {
        &self.plan
    }
}

static DYNAMIC_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(tier = user.plan(), key = user.id)]
async fn dynamic_tier(user: &User) -> Result<(), Error> {
    DYNAMIC_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn tiers_static_and_chosen_per_call() {
    module()
        .scope(async {
            for _ in 0..5 {
                static_tier(7).await.unwrap();
            }
            let e = static_tier(7).await.unwrap_err();
            assert_eq!(e.decision().unwrap().tier.as_deref(), Some("pro"));

            let free = User {
                id: 1,
                plan: "free".into(),
            };
            let pro = User {
                id: 1,
                plan: "pro".into(),
            };
            dynamic_tier(&free).await.unwrap();
            dynamic_tier(&free).await.unwrap();
            assert!(is_exceeded(dynamic_tier(&free).await));
            // The same key under another tier is another budget.
            dynamic_tier(&pro).await.unwrap();

            let runs = DYNAMIC_RUNS.load(Ordering::SeqCst);
            let gold = User {
                id: 2,
                plan: "gold".into(),
            };
            let err = dynamic_tier(&gold).await.unwrap_err();
            assert!(matches!(err, Error::UnknownTier { ref tier, .. } if tier == "gold"));
            assert_eq!(DYNAMIC_RUNS.load(Ordering::SeqCst), runs, "body ran");
        })
        .await;
}

#[rate_limit(limit = 10, window = "1m", cost = items.len() as u64, key = "bulk")]
async fn bulk(items: Vec<u32>) -> Result<usize, Error> {
    Ok(items.len())
}

#[rate_limit(
    limit = 2,
    burst = 1,
    window = "1s",
    strategy = "token-bucket",
    cost = 3
)]
async fn bursty() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn cost_burst_and_strategy() {
    let m = module();
    m.scope(async {
        assert_eq!(bulk(vec![1; 6]).await.unwrap(), 6);
        assert_eq!(bulk(vec![1; 4]).await.unwrap(), 4);
        // The vector is moved into the body, after the cost was taken from it.
        assert!(is_exceeded(bulk(vec![1]).await));
        // Capacity 2 + 1 = 3: one call of cost 3.
        bursty().await.unwrap();
        let e = bursty().await.unwrap_err();
        assert_eq!(e.decision().unwrap().limit, 3);
    })
    .await;
    m.clock().advance(Duration::from_millis(1_500));
    m.scope(async { bursty().await.unwrap() }).await;
}

// ---------------------------------------------------------------------------------------------
// Methods: receivers, generics, where-clauses, `impl Trait`, lifetimes

#[derive(Default)]
struct Counter {
    runs: u32,
}

impl Counter {
    #[rate_limit(limit = 1, window = "1m")]
    async fn by_ref(&self) -> Result<u32, Error> {
        Ok(self.runs)
    }

    #[rate_limit(limit = 2, window = "1m")]
    async fn by_mut(&mut self) -> Result<u32, Error> {
        self.runs += 1;
        Ok(self.runs)
    }

    #[rate_limit(limit = 1, window = "1m", key = self.runs)]
    async fn by_arc(self: Arc<Self>) -> Result<u32, Error> {
        Ok(self.runs)
    }

    #[rate_limit(limit = 1, window = "1m", key = label)]
    async fn generic<'a, T>(&self, label: &'a str, value: T) -> Result<(&'a str, T), Error>
    where
        T: Clone + Send,
    {
        Ok((label, value))
    }

    #[rate_limit(limit = 1, window = "1m", key = item.to_string())]
    async fn with_impl(&self, item: impl std::fmt::Display) -> Result<String, Error> {
        Ok(item.to_string())
    }
}

#[tokio::test]
async fn every_receiver_and_generics() {
    module()
        .scope(async {
            let mut c = Counter::default();
            assert_eq!(c.by_ref().await.unwrap(), 0);
            assert!(is_exceeded(c.by_ref().await));
            assert_eq!(c.by_mut().await.unwrap(), 1);
            assert_eq!(c.by_mut().await.unwrap(), 2);
            assert!(is_exceeded(c.by_mut().await));
            assert_eq!(c.runs, 2);
            let arc = Arc::new(c);
            assert_eq!(arc.clone().by_arc().await.unwrap(), 2);
            assert!(is_exceeded(arc.clone().by_arc().await));
            assert_eq!(arc.generic("a", 5u8).await.unwrap(), ("a", 5));
            assert_eq!(arc.generic("b", vec![1]).await.unwrap(), ("b", vec![1]));
            assert!(is_exceeded(arc.generic("a", 6u8).await));
            assert_eq!(arc.with_impl(3).await.unwrap(), "3");
            assert!(is_exceeded(arc.with_impl("3").await));
        })
        .await;
}

#[tokio::test]
async fn a_method_annotated_on_its_own_is_named_after_its_module() {
    // The attribute on one method cannot see the impl's type: `macros::by_ref`, not
    // `macros::Counter::by_ref` (annotate the impl block, or give a `name`, for that).
    let m = module();
    m.scope(async {
        Counter::default().by_ref().await.unwrap();
    })
    .await;
    let stats = m.stats();
    assert_eq!(stats.by_method["macros::by_ref"].allowed, 1);
}

// ---------------------------------------------------------------------------------------------
// Impl blocks

struct Api {
    calls: AtomicU32,
}

#[rate_limit(limit = 2, window = "1m")]
impl Api {
    async fn search(&self) -> Result<(), Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    #[throttle(1)]
    async fn export(&self) -> Result<(), Error> {
        Ok(())
    }

    #[skip_throttle]
    async fn health(&self) -> Result<(), Error> {
        Ok(())
    }

    #[skip_throttle]
    fn sync_helper(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn impl_blocks_limit_every_async_method_with_overrides_and_skips() {
    let m = module();
    let api = Api {
        calls: AtomicU32::new(0),
    };
    m.scope(async {
        api.search().await.unwrap();
        api.search().await.unwrap();
        assert!(is_exceeded(api.search().await));
        assert_eq!(api.sync_helper(), 2);
        api.export().await.unwrap();
        assert!(is_exceeded(api.export().await));
        for _ in 0..10 {
            api.health().await.unwrap();
        }
    })
    .await;
    // Skipped methods do not need a module at all.
    api.health().await.unwrap();
    assert!(matches!(
        api.search().await,
        Err(Error::NotInitialized {
            function: "macros::Api::search"
        })
    ));
    m.clock().advance(Duration::from_secs(1));
    m.scope(async { api.export().await.unwrap() }).await;
}

trait Greeter {
    async fn greet(&self, name: &str) -> Result<String, Error>;
}

struct English;

#[throttle(1)]
impl Greeter for English {
    async fn greet(&self, name: &str) -> Result<String, Error> {
        Ok(format!("hello {name}"))
    }
}

struct French;

impl Greeter for French {
    #[rate_limit(limit = 1, window = "1m", key = name)]
    async fn greet(&self, name: &str) -> Result<String, Error> {
        Ok(format!("bonjour {name}"))
    }
}

#[tokio::test]
async fn native_async_fn_in_trait_impls() {
    module()
        .scope(async {
            assert_eq!(English.greet("ann").await.unwrap(), "hello ann");
            assert!(is_exceeded(English.greet("bob").await));
            assert_eq!(French.greet("ann").await.unwrap(), "bonjour ann");
            assert!(French.greet("bob").await.is_ok());
            assert!(is_exceeded(French.greet("ann").await));
        })
        .await;
}

#[async_trait::async_trait]
trait Store {
    async fn get(&self, key: &str) -> Result<String, Error>;
    async fn put(&self, key: &str) -> Result<(), Error>;
}

struct Db;

// Order matters: the limit goes above `#[async_trait]`, so it sees `async fn`s.
#[rate_limit(limit = 1, window = "1m", key = key)]
#[async_trait::async_trait]
impl Store for Db {
    async fn get(&self, key: &str) -> Result<String, Error> {
        Ok(key.to_owned())
    }

    #[throttle(2)]
    async fn put(&self, _key: &str) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::test]
async fn async_trait_with_the_limit_above_it() {
    let m = module();
    let db: Box<dyn Store + Send + Sync> = Box::new(Db);
    m.scope(async {
        assert_eq!(db.get("a").await.unwrap(), "a");
        assert!(is_exceeded(db.get("a").await));
        db.get("b").await.unwrap();
        db.put("a").await.unwrap();
        db.put("b").await.unwrap();
        assert!(is_exceeded(db.put("c").await));
    })
    .await;
    assert_eq!(m.stats().by_method["macros::<Db as Store>::get"].denied, 1);
}

// ---------------------------------------------------------------------------------------------
// Errors, budgets, isolation, concurrency

#[derive(Debug)]
enum AppError {
    Limited(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Limited(e)
    }
}

#[rate_limit(limit = 1, window = "1m")]
async fn own_error_type() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn refusals_arrive_through_the_fns_own_error_type() {
    module()
        .scope(async {
            own_error_type().await.unwrap();
            let AppError::Limited(e) = own_error_type().await.unwrap_err();
            assert!(matches!(e, Error::Exceeded(_)));
        })
        .await;
}

#[rate_limit(limit = 3, window = "1m", name = "shared-budget")]
async fn shares_a() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 3, window = "1m", name = "shared-budget")]
async fn shares_b() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 3, window = "1m", key = 1)]
async fn same_key_a() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 3, window = "1m", key = 1)]
async fn same_key_b() -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn fns_share_a_budget_only_by_name() {
    let m = module();
    m.scope(async {
        shares_a().await.unwrap();
        shares_b().await.unwrap();
        shares_a().await.unwrap();
        assert!(is_exceeded(shares_b().await));
        for _ in 0..3 {
            same_key_a().await.unwrap();
        }
        // Same key expression, another fn: its own budget.
        same_key_b().await.unwrap();
    })
    .await;
    let stats = m.stats();
    assert_eq!(stats.by_method["shared-budget"].allowed, 3);
    assert_eq!(stats.by_method["shared-budget"].denied, 1);
}

#[tokio::test]
async fn test_modules_are_isolated_from_each_other() {
    let (a, b) = (module(), module());
    a.scope(async {
        one_per_second().await.unwrap();
        assert!(is_exceeded(one_per_second().await));
    })
    .await;
    b.scope(async { one_per_second().await.unwrap() }).await;
    // Nested scopes: the innermost wins, and the outer one is back afterwards.
    let c = module();
    a.scope(async {
        c.scope(async { one_per_second().await.unwrap() }).await;
        assert!(is_exceeded(one_per_second().await));
    })
    .await;
}

static CONCURRENT_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limit(limit = 25, window = "1m", key = tenant)]
async fn concurrent(tenant: u32) -> Result<(), Error> {
    CONCURRENT_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_passes_under_concurrency() {
    let m = module();
    let tasks: Vec<_> = (0..200)
        .map(|i| tokio::spawn(m.scope(concurrent(i % 2))))
        .collect();
    let mut allowed = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => allowed += 1,
            Err(Error::Exceeded(_)) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((allowed, refused), (50, 150));
    assert_eq!(CONCURRENT_RUNS.load(Ordering::SeqCst), 50);
    assert_eq!(m.stats().by_method["macros::concurrent"].allowed, 50);
}

mod renamed {
    use ratelimit as limiter;

    #[limiter::rate_limit(limit = 1, window = "1m", crate = "limiter")]
    pub(crate) async fn through_a_renamed_crate() -> Result<(), limiter::Error> {
        Ok(())
    }
}

#[tokio::test]
async fn the_crate_path_can_be_overridden() {
    module()
        .scope(async {
            renamed::through_a_renamed_crate().await.unwrap();
            assert!(is_exceeded(renamed::through_a_renamed_crate().await));
        })
        .await;
}

#[test]
fn declarations_list_every_annotated_fn() {
    let all = ratelimit::declarations();
    let find = |f: &str| {
        all.iter()
            .find(|d| d.function() == f)
            .unwrap_or_else(|| panic!("{f} not declared"))
    };
    let d = find("macros::per_user");
    assert!(d.file().ends_with("macros.rs"), "{}", d.file());
    assert_eq!(d.spec().limit(), Some(2));
    assert!(d.spec().is_keyed());
    assert_eq!(d.spec().to_string(), "2 per 1m, per key");
    assert!(find("macros::Api::search").line() > d.line());
    assert_eq!(find("macros::Api::export").spec().limit(), Some(1));
    assert!(all.iter().all(|d| d.function() != "macros::Api::health"));
    assert!(all
        .iter()
        .all(|d| d.function() != "macros::Api::sync_helper"));
    assert_eq!(
        find("macros::<English as Greeter>::greet").budget(),
        "macros::<English as Greeter>::greet"
    );
    assert_eq!(find("macros::shares_a").budget(), "shared-budget");
    assert_eq!(
        find("macros::static_tier").spec().tier(),
        ratelimit::TierSpec::Static("pro")
    );
}

// ---------------------------------------------------------------------------------------------
// Budget names: spelled out at compile time from `module_path!()` and the source, never from
// `type_name`, whose spelling may change between compilers (two builds of one service in a
// rolling deploy must count in the same budgets of a shared store).

mod budget_names {
    use std::marker::PhantomData;

    use ratelimit::{rate_limit, Error};

    #[rate_limit(limit = 5, window = "1m")]
    pub(crate) async fn free() -> Result<(), Error> {
        Ok(())
    }

    pub(crate) struct Repo<'a, T>(PhantomData<&'a T>);

    impl<T> Repo<'_, T> {
        pub(crate) fn new() -> Self {
            Repo(PhantomData)
        }
    }

    #[rate_limit(limit = 5, window = "1m")]
    impl<'a, T: Sync> Repo<'a, T> {
        pub(crate) async fn load(&self) -> Result<(), Error> {
            Ok(())
        }
    }

    pub(crate) trait Loader<K> {
        async fn fetch(&self, key: K) -> Result<(), Error>;
    }

    #[rate_limit(limit = 5, window = "1m")]
    impl<T: Sync> Loader<u8> for Repo<'_, T> {
        async fn fetch(&self, _key: u8) -> Result<(), Error> {
            Ok(())
        }
    }

    impl<T: Sync> Repo<'_, T> {
        #[rate_limit(limit = 5, window = "1m")]
        pub(crate) async fn alone(&self) -> Result<(), Error> {
            Ok(())
        }
    }
}

const BUDGET_NAMES: [&str; 4] = [
    "macros::budget_names::free",
    "macros::budget_names::Repo::load",
    "macros::budget_names::<Repo as Loader>::fetch",
    "macros::budget_names::alone",
];

#[test]
fn budget_names_are_the_module_path_and_the_names_as_written() {
    let declared: Vec<(&str, &str)> = ratelimit::declarations()
        .iter()
        .filter(|d| d.function().starts_with("macros::budget_names"))
        .map(|d| (d.function(), d.budget()))
        .collect();
    let expected: Vec<(&str, &str)> = BUDGET_NAMES.iter().map(|n| (*n, *n)).collect();
    assert_eq!(declared, expected);
}

#[tokio::test]
async fn calls_are_counted_under_the_budget_names() {
    use budget_names::Loader as _;

    let m = module();
    m.scope(async {
        let repo = budget_names::Repo::<String>::new();
        budget_names::free().await.unwrap();
        repo.load().await.unwrap();
        repo.fetch(1).await.unwrap();
        repo.alone().await.unwrap();
    })
    .await;
    let stats = m.stats();
    for name in BUDGET_NAMES {
        assert_eq!(stats.by_method[name].allowed, 1, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Stacked attributes

static STACKED_RUNS: AtomicU32 = AtomicU32::new(0);

/// 2 a second against bursts, 3 an hour per user: both apply, all or nothing.
#[throttle(2)]
#[rate_limit(limit = 3, window = "1h", key = user)]
async fn stacked(user: &str) -> Result<(), Error> {
    let _ = user;
    STACKED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

struct Exports;

impl Exports {
    #[rate_limit(limit = 1, window = "1s", name = "exports-burst")]
    #[rate_limit(limit = 2, window = "1h", name = "exports-hourly")]
    async fn csv(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[test]
fn stacked_attributes_all_apply_and_a_refusal_spends_from_none() {
    let module = module();
    futures::executor::block_on(module.scope(async {
        stacked("ann").await.unwrap();
        stacked("ann").await.unwrap();
        // The burst limit refuses; the hourly one spends nothing for it.
        assert!(is_exceeded(stacked("ann").await));
        module.clock().advance(Duration::from_secs(1));
        stacked("ann").await.unwrap();
        module.clock().advance(Duration::from_secs(1));
        // Now the hourly limit: 3 spent.
        let refused = stacked("ann").await.unwrap_err();
        assert_eq!(
            refused.retry_after().map(|d| d.as_secs() > 3_000),
            Some(true)
        );
        assert_eq!(STACKED_RUNS.load(Ordering::SeqCst), 3);

        Exports.csv().await.unwrap();
        assert!(is_exceeded(Exports.csv().await));
        module.clock().advance(Duration::from_secs(1));
        Exports.csv().await.unwrap();
        module.clock().advance(Duration::from_secs(1));
        assert!(is_exceeded(Exports.csv().await));
    }));
    let stats = module.stats();
    assert_eq!(stats.by_method["macros::stacked"].allowed, 3);
    assert_eq!(stats.by_method["macros::stacked"].denied, 1);
    assert_eq!(stats.by_method["macros::stacked#2"].allowed, 3);
    assert_eq!(stats.by_method["macros::stacked#2"].denied, 1);
    assert_eq!(stats.by_method["exports-hourly"].allowed, 2);
    assert_eq!(stats.total.denied, 4);
}
