//! The process-wide registry: `Module::init` / shutdown, refusals without a module, the
//! declaration checks, and per-method stats.
//!
//! These tests install the one global module, so they take `serial()` to run one at a time (and
//! drive their futures with `block_on` inside it rather than holding a lock across `.await`).

use std::sync::atomic::{AtomicU32, Ordering};

use futures::executor::block_on;

use ratelimit::{
    rate_limit, throttle, Error, ManualClock, Module, ModuleBuilder, ProblemKind, Tier,
};

use ratelimit_tests::serial;

fn config() -> ModuleBuilder {
    Module::builder()
        .tier(Tier::new("pro", 2).window("1m"))
        .no_default_limit()
        .clock(ManualClock::new(std::time::Duration::from_secs(1_000_000)))
}

static CHARGES: AtomicU32 = AtomicU32::new(0);

#[rate_limit(tier = "pro", key = user)]
async fn charge(user: u32) -> Result<u32, Error> {
    CHARGES.fetch_add(1, Ordering::SeqCst);
    Ok(user)
}

#[throttle(1)]
async fn ping() -> Result<(), Error> {
    Ok(())
}

#[test]
fn calls_are_refused_until_init_and_after_shutdown() {
    let _serial = serial();
    block_on(async {
        assert!(!Module::is_initialized());
        let runs = CHARGES.load(Ordering::SeqCst);
        let err = charge(1).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotInitialized {
                    function: "registry::charge"
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("`registry::charge`"), "{err}");
        assert_eq!(CHARGES.load(Ordering::SeqCst), runs, "the body ran");

        let module = config().init().unwrap();
        assert!(Module::is_initialized());
        assert_eq!(charge(1).await.unwrap(), 1);
        module.shutdown();
        assert!(!Module::is_initialized());
        assert!(matches!(charge(1).await, Err(Error::NotInitialized { .. })));

        // Dropping the handle shuts down too.
        {
            let _module = config().init().unwrap();
            ping().await.unwrap();
        }
        assert!(matches!(ping().await, Err(Error::NotInitialized { .. })));
    })
}

#[test]
fn a_second_init_is_an_error_and_leaves_the_first_running() {
    let _serial = serial();
    block_on(async {
        let first = config().init().unwrap();
        let err = config().init().unwrap_err();
        assert!(matches!(err, Error::AlreadyInitialized), "{err}");
        assert!(matches!(
            Module::init(ratelimit::Config::builder().build().unwrap()),
            Err(Error::AlreadyInitialized)
        ));
        ping().await.unwrap();
        assert!(matches!(ping().await, Err(Error::Exceeded(_))));
        assert_eq!(first.stats().by_method["registry::ping"].denied, 1);
        drop(first);
        // The registry is free again; a new module starts with fresh budgets.
        let _second = config().init().unwrap();
        ping().await.unwrap();
    })
}

#[test]
fn init_checks_every_declaration_against_the_config() {
    let _serial = serial();
    block_on(async {
        // No "pro" tier and no default limit: `charge` names a missing tier. `ping` sets its own
        // limit and is fine.
        let err = Module::builder().no_default_limit().init().unwrap_err();
        let Error::Declarations(problems) = &err else {
            panic!("{err}")
        };
        assert_eq!(problems.problems.len(), 1, "{err}");
        let p = &problems.problems[0];
        assert_eq!(p.function, "registry::charge");
        assert!(p.file.ends_with("registry.rs"), "{}", p.file);
        assert_eq!(
            p.line,
            ratelimit::declarations()
                .iter()
                .find(|d| d.function() == "registry::charge")
                .unwrap()
                .line()
        );
        assert!(
            matches!(p.kind, ProblemKind::UnknownTier { tier: "pro", .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("tier \"pro\" is not configured"),
            "{err}"
        );
        assert!(err.to_string().contains("registry.rs:"), "{err}");
        // Nothing was installed.
        assert!(!Module::is_initialized());
        assert!(matches!(ping().await, Err(Error::NotInitialized { .. })));

        // A bad configuration is reported as such, before the declarations.
        let err = Module::builder().default_window("1x").init().unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    })
}

#[test]
fn stats_have_per_method_figures() {
    let _serial = serial();
    block_on(async {
        let module = config().init().unwrap();
        charge(7).await.unwrap();
        charge(7).await.unwrap();
        assert!(matches!(charge(7).await, Err(Error::Exceeded(_))));
        let stats = module.stats();
        let counts = stats.by_method["registry::charge"];
        assert_eq!((counts.allowed, counts.denied), (2, 1));
        assert_eq!(stats.by_tier["pro"].allowed, 2);
    })
}

/// Each thread keeps a copy of the installed service; a module installed or shut down on
/// another thread must be seen on the very next call, never a stale one.
#[test]
fn other_threads_see_init_and_shutdown_at_once() {
    use std::sync::mpsc;

    let _serial = serial();
    let (to_worker, inbox) = mpsc::channel::<()>();
    let (to_main, results) = mpsc::channel::<Result<u32, Error>>();
    let worker = std::thread::spawn(move || {
        for () in inbox {
            to_main.send(block_on(charge(9))).unwrap();
        }
    });
    let call = || {
        to_worker.send(()).unwrap();
        results.recv().unwrap()
    };

    assert!(matches!(call(), Err(Error::NotInitialized { .. })));
    let first = config().init().unwrap();
    assert_eq!(call().unwrap(), 9);
    drop(first);
    assert!(matches!(call(), Err(Error::NotInitialized { .. })));
    let second = config().init().unwrap();
    // A fresh module: the worker's call is counted there, with a fresh budget.
    assert_eq!(call().unwrap(), 9);
    assert_eq!(call().unwrap(), 9);
    assert!(matches!(call(), Err(Error::Exceeded(_))));
    assert_eq!(second.stats().by_method["registry::charge"].allowed, 2);
    drop(second);
    assert!(matches!(call(), Err(Error::NotInitialized { .. })));

    drop(to_worker);
    worker.join().unwrap();
}

#[test]
fn declarations_are_listed_with_their_location() {
    let all = ratelimit::declarations();
    let names: Vec<_> = all.iter().map(|d| d.function()).collect();
    assert_eq!(names, ["registry::charge", "registry::ping"]);
    assert!(all[0].line() < all[1].line());
}
