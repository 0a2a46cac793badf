//! A library that owns its limits (`ratelimit-test-library`: a `Limiter` of its own, tiers
//! `pro` and `batch`), linked into this app, whose module knows none of its tiers.
//!
//! The app's module and the library's limiter are process-wide, so the tests take `serial()`
//! to run one at a time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use futures::executor::block_on;

use ratelimit::{throttle, Error, ManualClock, Module, ProblemKind};
use ratelimit_test_library::{self as library, Client, LIMITS};

use ratelimit_tests::serial;

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(1_000_000))
}

/// The app's own fn, on the app's module.
#[throttle(1, "hour")]
async fn app_ping() -> Result<(), Error> {
    Ok(())
}

#[test]
fn the_apps_module_neither_checks_nor_requires_the_librarys_tiers() {
    let _serial = serial();
    block_on(async {
        // No tier at all: the library's `tier = "pro"` and `tier = "batch"` are not the app's
        // business.
        let app = Module::builder().clock(clock()).init().unwrap();
        app_ping().await.unwrap();
        assert!(matches!(app_ping().await, Err(Error::Exceeded(_))));

        // The app's module does not decide the library's fns: until the library builds its
        // limiter, they are refused, naming the fn (and so its crate).
        let err = library::fetch(1).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotInitialized {
                    function: "ratelimit_test_library::fetch"
                }
            ),
            "{err}"
        );
        assert!(matches!(
            library::compress(b"abc"),
            Err(Error::NotInitialized {
                function: "ratelimit_test_library::compress"
            })
        ));
        assert!(matches!(
            Client.ping(),
            Err(Error::NotInitialized {
                function: "ratelimit_test_library::Client::ping"
            })
        ));

        let lib = library::init(library::config().clock(clock())).unwrap();
        assert_eq!(library::fetch(1).await.unwrap(), 1);
        assert_eq!(library::fetch(1).await.unwrap(), 1);
        let refused = library::fetch(1).await.unwrap_err();
        assert_eq!(refused.decision().unwrap().tier.as_deref(), Some("pro"));
        assert_eq!(library::fetch(2).await.unwrap(), 2, "another key");
        // The library's calls are counted by the library's service, not the app's.
        let budget = "ratelimit_test_library::fetch";
        assert_eq!(lib.stats().by_method[budget].allowed, 3);
        assert_eq!(lib.stats().by_method[budget].denied, 1);
        assert!(!app.stats().by_method.contains_key(budget));
        // And the app's fns stay the app's: the library's limiter does not decide them.
        assert!(matches!(app_ping().await, Err(Error::Exceeded(_))));
        assert_eq!(lib.stats().by_method.get("library::app_ping"), None);

        // Shutting the app's module down leaves the library's running, and the other way.
        drop(app);
        assert!(matches!(
            app_ping().await,
            Err(Error::NotInitialized { .. })
        ));
        assert_eq!(library::fetch(3).await.unwrap(), 3);
        drop(lib);
        assert!(matches!(
            library::fetch(4).await,
            Err(Error::NotInitialized { .. })
        ));
    })
}

#[test]
fn the_librarys_limiter_checks_its_own_fns_when_it_is_built() {
    let _serial = serial();
    // Without the library's tiers, building its limiter fails, naming every fn of the
    // library that needs them, and none of the app's.
    let err = LIMITS.init(Module::builder().clock(clock())).unwrap_err();
    let found = ratelimit_tests::problems(&err);
    let unknown = |tier| ProblemKind::UnknownTier {
        tier,
        known: "none".to_owned(),
    };
    assert_eq!(
        found,
        [
            ("ratelimit_test_library::fetch", unknown("pro")),
            ("ratelimit_test_library::compress", unknown("batch")),
            ("ratelimit_test_library::Client::upload", unknown("pro")),
        ],
        "{err}"
    );
    assert!(
        err.to_string().contains("ratelimit_test_library::fetch"),
        "{err}"
    );
    assert!(!LIMITS.is_initialized(), "a failed build installs nothing");

    // Built, it runs until its handle is dropped; building it again meanwhile is an error.
    let running = library::init(library::config().clock(clock())).unwrap();
    assert!(matches!(
        library::init(library::config()),
        Err(Error::AlreadyInitialized)
    ));
    assert!(LIMITS.is_initialized());
    drop(running);
    assert!(!LIMITS.is_initialized());
    // And the app's module starts whatever the library asks of its own limiter.
    Module::builder().init().unwrap().shutdown();
}

#[test]
fn declarations_say_which_crate_and_limiter_they_belong_to() {
    let _serial = serial();
    let mine = LIMITS.declarations();
    let names: Vec<&str> = mine.iter().map(|d| d.function()).collect();
    assert_eq!(
        names,
        [
            "ratelimit_test_library::fetch",
            "ratelimit_test_library::compress",
            "ratelimit_test_library::Client::ping",
            "ratelimit_test_library::Client::upload",
        ]
    );
    for d in &mine {
        assert_eq!(d.crate_name(), "ratelimit_test_library");
        assert!(std::ptr::eq(d.limiter().unwrap(), &LIMITS));
    }
    assert!(mine[1].is_sync() && mine[2].is_sync() && !mine[0].is_sync());
    // Every declaration of the binary is listed, the app's on no limiter of its own.
    let all = ratelimit::declarations();
    let app: Vec<_> = all.iter().filter(|d| d.limiter().is_none()).collect();
    assert_eq!(app.len(), 1);
    assert_eq!(app[0].function(), "library::app_ping");
    assert_eq!(app[0].crate_name(), "library");
    assert_eq!(all.len(), 5);
}

#[test]
fn a_librarys_sync_fns_admit_exactly_the_limit_across_threads() {
    let _serial = serial();
    let clock = clock();
    let lib = library::init(library::config().clock(clock.clone())).unwrap();
    const THREADS: usize = 8;
    const CALLS: usize = 10;
    let admitted = AtomicU32::new(0);
    let refused = AtomicU32::new(0);
    let barrier = Barrier::new(THREADS);
    let round = || {
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..CALLS {
                        match library::compress(b"data") {
                            Ok(4) => admitted.fetch_add(1, Ordering::SeqCst),
                            Err(Error::Exceeded(_)) => refused.fetch_add(1, Ordering::SeqCst),
                            other => panic!("{other:?}"),
                        };
                    }
                });
            }
        });
    };
    round();
    assert_eq!(admitted.load(Ordering::SeqCst), 3, "tier batch: 3 a minute");
    assert_eq!(refused.load(Ordering::SeqCst), (THREADS * CALLS) as u32 - 3);
    clock.advance(Duration::from_secs(60));
    round();
    assert_eq!(admitted.load(Ordering::SeqCst), 6);

    // The impl block's sync method: one a minute; its non-`Result` method is left alone.
    Client.ping().unwrap();
    assert!(matches!(Client.ping(), Err(Error::Exceeded(_))));
    assert_eq!(Client.name(), "client");
    // Its async method with a limit of its own, on the library's limiter too.
    block_on(async {
        Client.upload().await.unwrap();
        Client.upload().await.unwrap();
        assert!(Client.upload().await.is_err());
    });
    drop(lib);
}
