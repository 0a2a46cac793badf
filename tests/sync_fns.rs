//! Sync (not `async`) annotated fns on the memory store: a free fn, a method annotated on its
//! own, an impl block's sync methods, stacked limits. Decided at once, without an executor,
//! with exact counts across OS threads; time is a `TestModule`'s manual clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Module, Tier};
use ratelimit_tests::hammer;

static RUNS: AtomicU32 = AtomicU32::new(0);

/// Taken by every test that calls `resize`: the tests of a file run on parallel threads, and
/// one test's runs of `resize` counted in another's `RUNS` (10 runs seen where the hammer's
/// 5 ran, once in 25 runs of the file).
static RESIZE: Mutex<()> = Mutex::new(());

fn resize_alone() -> MutexGuard<'static, ()> {
    RESIZE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[rate_limit(limit = 5, window = "1m")]
fn resize(width: u32) -> Result<u32, Error> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(width * 2)
}

#[rate_limit(tier = plan, key = user)]
fn export(user: &str, plan: &str) -> Result<String, Error> {
    Ok(format!("{user}:{plan}"))
}

#[throttle(4, "minute")]
#[rate_limit(limit = 2, window = "1m", key = user)]
fn stacked(user: u32) -> Result<u32, Error> {
    Ok(user)
}

struct Cache;

impl Cache {
    #[throttle(3, "minute", name = "cache-get")]
    fn get(&self, key: &str) -> Result<usize, Error> {
        Ok(key.len())
    }
}

mod store {
    /// A `Result` by another path, as `io::Result` is.
    pub type Result<T> = std::result::Result<T, ratelimit::Error>;
}

struct Disk {
    bytes: u64,
}

#[rate_limit(limit = 2, window = "1m")]
impl Disk {
    /// A constructor: no `Result`, left alone.
    fn new() -> Self {
        Disk { bytes: 0 }
    }

    /// A getter: exempt, as it says.
    #[skip_throttle]
    fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Sync, returns a `Result`: limited.
    fn write(&mut self, n: u64) -> Result<u64, Error> {
        self.bytes += n;
        Ok(self.bytes)
    }

    /// Written with a path: limited too.
    fn flush(&self) -> store::Result<()> {
        Ok(())
    }

    /// Async: limited as ever.
    async fn sync_all(&self) -> Result<(), Error> {
        Ok(())
    }

    #[skip_throttle]
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// `Result` under other names: the macro cannot see through them, and limits them all.
mod api {
    pub type ApiResult<T> = Result<T, ratelimit::Error>;
    pub use std::result::Result as Res;
    pub type Fallible<T, E = ratelimit::Error> = Result<T, E>;
}

static ALIASED_RUNS: AtomicU32 = AtomicU32::new(0);

struct Aliased;

#[rate_limit(limit = 2, window = "1m")]
impl Aliased {
    fn aliased(&self) -> api::ApiResult<u32> {
        ALIASED_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(1)
    }

    fn reexported(&self) -> api::Res<u32, Error> {
        Ok(2)
    }

    fn defaulted(&self) -> api::Fallible<u32> {
        Ok(3)
    }

    /// A getter is exempt only as it says.
    #[skip_throttle]
    fn name(&self) -> &'static str {
        "aliased"
    }
}

fn module() -> TestModule {
    TestModule::new(
        Module::builder()
            .tier(Tier::new("free", 1).window("1m"))
            .tier(Tier::new("pro", 3).window("1m")),
    )
    .expect("every declaration is enforceable")
}

#[test]
fn a_sync_fn_admits_exactly_its_limit_across_threads() {
    let _alone = resize_alone();
    let module = module();
    let before = RUNS.load(Ordering::SeqCst);
    assert_eq!(hammer(&module, 8, 25, || resize(10)), (5, 195));
    assert_eq!(
        RUNS.load(Ordering::SeqCst) - before,
        5,
        "refused calls never run"
    );
    module.clock().advance(Duration::from_secs(60));
    assert_eq!(hammer(&module, 8, 25, || resize(10)), (5, 195));
    let stats = module.stats().by_method["sync_fns::resize"];
    assert_eq!((stats.allowed, stats.denied), (10, 390));
}

/// The refusal a sync fn returns is the whole decision (it crosses `acquire_now` boxed): its
/// budget, limit and the wait until the next call passes.
#[test]
fn a_sync_fns_refusal_arrives_whole() {
    let _alone = resize_alone();
    let module = module();
    module.run(|| {
        for _ in 0..5 {
            resize(1).expect("within the limit");
        }
        let Err(Error::Exceeded(refusal)) = resize(1) else {
            panic!("the sixth call passed");
        };
        assert_eq!(refusal.budget.as_deref(), Some("sync_fns::resize"));
        assert_eq!(refusal.decision.limit, 5);
        assert!(!refusal.decision.allowed);
        assert!(refusal
            .decision
            .retry_after
            .is_some_and(|d| d > Duration::ZERO));
    });
}

#[test]
fn a_sync_fn_outside_any_module_is_refused() {
    let _alone = resize_alone();
    let runs = RUNS.load(Ordering::SeqCst);
    assert!(matches!(
        resize(1),
        Err(Error::NotInitialized {
            function: "sync_fns::resize"
        })
    ));
    assert_eq!(RUNS.load(Ordering::SeqCst), runs);
}

#[test]
fn a_sync_fn_chooses_its_tier_per_call() {
    let module = module();
    let (free, pro) = hammer(&module, 4, 10, || export("ann", "free"));
    assert_eq!((free, pro), (1, 39));
    assert_eq!(hammer(&module, 4, 10, || export("ann", "pro")), (3, 37));
    module.run(|| {
        assert!(matches!(
            export("ann", "gold"),
            Err(Error::UnknownTier { .. })
        ))
    });
}

#[test]
fn stacked_limits_on_a_sync_fn_are_decided_as_one() {
    let module = module();
    // Per user 2 a minute, 4 a minute overall: two users use the whole of it.
    assert_eq!(hammer(&module, 8, 10, || stacked(1)), (2, 78));
    assert_eq!(hammer(&module, 8, 10, || stacked(2)), (2, 78));
    // A third user is refused by the overall limit, and spends nothing from their own.
    let refused = module.run(|| stacked(3)).unwrap_err();
    assert_eq!(refused.decision().unwrap().limit, 4);
    module.clock().advance(Duration::from_secs(60));
    assert_eq!(hammer(&module, 8, 10, || stacked(3)), (2, 78));
}

#[test]
fn a_sync_method_annotated_on_its_own_is_limited() {
    let module = module();
    assert_eq!(hammer(&module, 6, 5, || Cache.get("k")), (3, 27));
    assert_eq!(module.stats().by_method["cache-get"].allowed, 3);
}

#[test]
fn an_impl_blocks_sync_methods_returning_result_are_limited() {
    let module = module();
    module.run(|| {
        let mut disk = Disk::new();
        assert_eq!(disk.write(3).unwrap(), 3);
        assert_eq!(disk.write(3).unwrap(), 6);
        assert!(matches!(disk.write(3), Err(Error::Exceeded(_))));
        assert_eq!(disk.bytes(), 6, "the refused call did not run");
        disk.flush().unwrap();
        disk.flush().unwrap();
        assert!(matches!(disk.flush(), Err(Error::Exceeded(_))));
        for _ in 0..5 {
            disk.check().unwrap();
        }
    });
    futures::executor::block_on(module.scope(async {
        let disk = Disk::new();
        disk.sync_all().await.unwrap();
        disk.sync_all().await.unwrap();
        assert!(disk.sync_all().await.is_err());
    }));
    let stats = module.stats();
    assert_eq!(stats.by_method["sync_fns::Disk::write"].denied, 1);
    assert_eq!(stats.by_method["sync_fns::Disk::flush"].denied, 1);
    assert!(!stats.by_method.contains_key("sync_fns::Disk::check"));
    // Across threads, exactly the limit.
    assert_eq!(
        hammer(&module, 8, 10, || Disk::new().write(1)),
        (0, 80),
        "spent"
    );
    module.clock().advance(Duration::from_secs(60));
    assert_eq!(hammer(&module, 8, 10, || Disk::new().write(1)), (2, 78));
}

#[test]
fn a_sync_method_returning_an_alias_of_result_is_limited_not_skipped() {
    let runs = ALIASED_RUNS.load(Ordering::SeqCst);
    assert!(matches!(
        Aliased.aliased(),
        Err(Error::NotInitialized {
            function: "sync_fns::Aliased::aliased"
        })
    ));
    assert_eq!(
        ALIASED_RUNS.load(Ordering::SeqCst),
        runs,
        "refused before init"
    );
    let declared = ratelimit::declarations()
        .into_iter()
        .find(|d| d.function() == "sync_fns::Aliased::aliased")
        .expect("declared");
    assert!(declared.is_sync());
    let module = module();
    assert_eq!(hammer(&module, 4, 5, || Aliased.aliased()), (2, 18));
    assert_eq!(ALIASED_RUNS.load(Ordering::SeqCst) - runs, 2);
}

#[test]
fn a_sync_method_returning_a_generic_result_re_export_is_limited_not_skipped() {
    assert!(matches!(
        Aliased.reexported(),
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        Aliased.defaulted(),
        Err(Error::NotInitialized { .. })
    ));
    let functions: Vec<&str> = ratelimit::declarations()
        .into_iter()
        .map(|d| d.function())
        .collect();
    for method in ["reexported", "defaulted"] {
        assert!(functions.contains(&&*format!("sync_fns::Aliased::{method}")));
    }
    let module = module();
    assert_eq!(hammer(&module, 4, 5, || Aliased.reexported()), (2, 18));
    assert_eq!(hammer(&module, 4, 5, || Aliased.defaulted()), (2, 18));
}

#[test]
fn a_getter_marked_skip_throttle_is_never_limited() {
    for _ in 0..10 {
        assert_eq!(Aliased.name(), "aliased"); // no module either
    }
    assert!(!ratelimit::declarations()
        .into_iter()
        .any(|d| d.function() == "sync_fns::Aliased::name"));
}
