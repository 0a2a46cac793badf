//! Changing limits while running (issue 27): `reload` on a service and on a module. Exact
//! counts, a hand-driven clock, 64 tasks on the memory store and, with the `redis` feature, a
//! real Redis server and Cluster.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{
    rate_limit, Config, Error, Module, Options, ProblemKind, RateLimitService, Strategy, Tier,
};
use ratelimit_tests::{on_every_store, on_its_store, serial};

/// Long enough that no Redis window (on the server's clock) turns during a test.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

fn limit(n: u64) -> impl Fn() -> ratelimit::ConfigBuilder {
    move || {
        Config::builder()
            .strategy(Strategy::FixedWindow)
            .default_limit(n)
            .default_window(LONG)
    }
}

/// What 64 tasks, each making `calls` calls on `"shared-key"`, admit.
async fn admitted_by_64_tasks(service: &RateLimitService, calls: usize) -> u64 {
    ratelimit_tests::admitted_by_tasks(service, &Options::new(), 64, calls, false).await
}

/// Tightened from 10 to 3 with 2 spent: the state carries over, so 64 tasks get exactly one
/// more call; the next window admits exactly 3.
#[test]
fn a_reload_from_10_to_3_admits_exactly_what_the_tighter_limit_leaves() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (services, _servers) = on_every_store("reload-tight", limit(10), &clock);
    for (store, service) in services {
        rt.block_on(async {
            for _ in 0..2 {
                assert!(
                    service
                        .consume("shared-key", &Options::new())
                        .await
                        .unwrap()
                        .allowed
                );
            }
            let reloaded = service.reload(on_its_store(&service, limit(3)())).unwrap();
            assert_eq!(reloaded.tightened, ["default"], "{store}");
            assert_eq!(admitted_by_64_tasks(&service, 3).await, 1, "{store}");
            if store == "memory" {
                clock.advance(LONG);
                assert_eq!(admitted_by_64_tasks(&service, 3).await, 3, "{store}");
            }
        });
        assert_eq!(service.stats().generation, 1, "{store}");
    }
}

/// Loosened from 3 to 10 with the 3 spent: inside the old window the old, tighter limit
/// holds (64 tasks get nothing); after one old window the new limit holds, exactly.
#[test]
fn a_reload_from_3_to_10_admits_nothing_more_inside_the_old_window() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (services, _servers) = on_every_store("reload-loose", limit(3), &clock);
    for (store, service) in services {
        rt.block_on(async {
            for _ in 0..3 {
                assert!(
                    service
                        .consume("shared-key", &Options::new())
                        .await
                        .unwrap()
                        .allowed
                );
            }
            let reloaded = service.reload(on_its_store(&service, limit(10)())).unwrap();
            assert_eq!(reloaded.loosened, ["default"], "{store}");
            assert_eq!(admitted_by_64_tasks(&service, 3).await, 0, "{store}");
            // A call the old window refuses says when the old window ends.
            let refused = service
                .consume("shared-key", &Options::new())
                .await
                .unwrap();
            assert!(!refused.allowed && refused.retry_after.is_some(), "{store}");
            clock.advance(LONG);
            // Memory: a new window of 10. Redis (its own clock: the window has not turned):
            // the new limit of 10 over the 3 spent.
            let want = if store == "memory" { 10 } else { 7 };
            assert_eq!(admitted_by_64_tasks(&service, 3).await, want, "{store}");
        });
    }
}

/// A reload that changes a limit's window (or strategy) moves it to another state, fresh:
/// for one old window each call is decided on the old state too, as one, so the switch hands
/// out no new budget on top of what the old window spent; after it, the new limit alone.
#[test]
fn a_reload_to_another_window_holds_to_the_old_budget_for_one_old_window() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (services, _servers) = on_every_store("reload-window", limit(3), &clock);
    for (store, service) in services {
        for (round, strategy) in [Strategy::FixedWindow, Strategy::TokenBucket]
            .into_iter()
            .enumerate()
        {
            rt.block_on(async {
                // Each round on a state of its own: round 1 starts from the old window again.
                let old = limit(3)().default_window(LONG * (2 * round as u32 + 1));
                service.reload(on_its_store(&service, old)).unwrap();
                clock.advance(LONG * (2 * round as u32 + 1));
                for _ in 0..3 {
                    assert!(
                        service
                            .consume("shared-key", &Options::new())
                            .await
                            .unwrap()
                            .allowed
                    );
                }
                let new = limit(10)()
                    .default_window(LONG * (2 * round as u32 + 2))
                    .strategy(strategy);
                let reloaded = service.reload(on_its_store(&service, new)).unwrap();
                assert_eq!(reloaded.changed, ["default"], "{store}");
                assert_eq!(
                    admitted_by_64_tasks(&service, 3).await,
                    0,
                    "{store} {strategy}"
                );
                clock.advance(LONG * (2 * round as u32 + 1));
                assert_eq!(
                    admitted_by_64_tasks(&service, 3).await,
                    10,
                    "{store} {strategy}"
                );
            });
        }
    }
}

/// A prepared site follows a reload at once (deciding under the running configuration), and
/// tells that it should be prepared again.
#[test]
fn a_prepared_site_decides_under_the_reloaded_configuration() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (services, _servers) = on_every_store("reload-prepared", limit(5), &clock);
    for (store, service) in services {
        let site = service.prepare(&Options::new()).unwrap();
        rt.block_on(async {
            assert!(site.consume("p").await.unwrap().allowed);
            service.reload(on_its_store(&service, limit(1)())).unwrap();
            assert!(!site.is_current(), "{store}");
            assert!(!site.consume("p").await.unwrap().allowed, "{store}");
            assert!(site.enforce("p").await.is_err(), "{store}");
            assert_eq!(site.status("p").await.unwrap().limit, 1, "{store}");
            let again = service.prepare(&Options::new()).unwrap();
            assert!(again.is_current());
            assert!(!again.consume("p").await.unwrap().allowed, "{store}");
        });
    }
}

/// A reload with problems changes nothing: every problem named at once, the running
/// configuration deciding on with its counts.
#[test]
fn a_reload_with_problems_changes_nothing_and_names_every_problem() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (mut services, _servers) = on_every_store("reload-bad", limit(2), &clock);
    // The memory store from the configuration (`on_every_store`'s is the caller's own, whose
    // `config.store()` is not used, so another there is no problem).
    let from_config = limit(2)().build().unwrap();
    services[0].1 = RateLimitService::with_clock(from_config, Arc::new(clock.clone())).unwrap();
    for (store, service) in services {
        rt.block_on(async {
            assert!(service.consume("b", &Options::new()).await.unwrap().allowed);
        });
        let other_store = limit(1)()
            .store(ratelimit::StoreConfig::Memory(
                ratelimit::MemoryOptions::default().max_keys(7),
            ))
            .build()
            .unwrap();
        match service.reload(other_store) {
            Err(Error::InvalidConfig(e)) => {
                let fields: Vec<&str> = e.problems.iter().map(|(f, _)| f.as_str()).collect();
                // The memory service was built from its configuration too.
                assert_eq!(fields, ["store"], "{store}");
            }
            other => panic!("{store}: {other:?}"),
        }
        assert_eq!(service.stats().generation, 0, "{store}");
        rt.block_on(async {
            assert!(service.consume("b", &Options::new()).await.unwrap().allowed);
            assert!(!service.consume("b", &Options::new()).await.unwrap().allowed);
        });
        assert_eq!(service.config().default_limit(), Some(2), "{store}");
    }
}

/// Two reloads racing: each installs a whole configuration, one after the other.
#[test]
fn two_racing_reloads_each_install_a_whole_configuration() {
    let service =
        RateLimitService::with_clock(Config::default(), Arc::new(ratelimit_tests::clock()))
            .unwrap();
    let configs = [
        Config::builder()
            .tier(Tier::new("a", 1).window("1m"))
            .tier(Tier::new("b", 1).window("1m"))
            .build()
            .unwrap(),
        Config::builder()
            .tier(Tier::new("a", 9).window("1h"))
            .build()
            .unwrap(),
    ];
    for _ in 0..50 {
        std::thread::scope(|scope| {
            for config in &configs {
                let (service, config) = (&service, config.clone());
                scope.spawn(move || service.reload(config).unwrap());
            }
        });
        let running = service.config();
        assert!(configs.contains(&running), "{running:?}");
    }
    assert_eq!(service.stats().generation, 100);
}

/// Promoting a shadow tier is a reload: the counts carry over and the next call over the
/// limit is refused.
#[test]
fn a_shadow_tier_promoted_by_a_reload_refuses_the_next_call() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let tier = |shadow: bool| {
        move || {
            let beta = Tier::new("beta", 5).window(LONG);
            Config::builder().tier(if shadow { beta.shadow() } else { beta })
        }
    };
    let (services, _servers) = on_every_store("reload-shadow", tier(true), &clock);
    for (store, service) in services {
        let beta = Options::new().tier("beta");
        rt.block_on(async {
            let mut shadowed = 0;
            for _ in 0..20 {
                let d = service.consume("s", &beta).await.unwrap();
                assert!(d.allowed, "{store}");
                shadowed += u64::from(d.shadowed);
            }
            assert_eq!(shadowed, 15, "{store}");
            service
                .reload(on_its_store(&service, tier(false)()))
                .unwrap();
            let d = service.consume("s", &beta).await.unwrap();
            assert!(!d.allowed && !d.shadowed, "{store}");
        });
        let counts = service.stats().by_tier["beta"];
        assert_eq!(
            (counts.allowed, counts.shadowed, counts.denied),
            (20, 15, 1),
            "{store}"
        );
    }
}

#[rate_limit(tier = "gold", key = user)]
async fn gold_only(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// `Module::reload` checks every annotated fn as `init` does: a configuration without the
/// fn's tier is refused naming the fn, and the running one goes on deciding it. A reload that
/// passes reaches the fn at its next call.
#[test]
fn a_module_reload_checks_every_annotated_fn_and_reaches_it() {
    let _serial = serial();
    let gold = |limit: u64| Module::builder().tier(Tier::new("gold", limit).window(LONG));
    let module = gold(2).init().unwrap();
    let rt = ratelimit_tests::two_workers();
    rt.block_on(async {
        gold_only("g").await.unwrap();
    });
    match module.reload(Module::builder().tier(Tier::new("silver", 5).window("1m"))) {
        Err(Error::Declarations(e)) => {
            assert!(e
                .problems
                .iter()
                .any(|p| p.function.ends_with("::gold_only")
                    && matches!(p.kind, ProblemKind::UnknownTier { .. })));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(module.stats().generation, 0);
    rt.block_on(async {
        gold_only("g").await.unwrap();
        assert!(matches!(gold_only("g").await, Err(Error::Exceeded(_))));
    });
    let reloaded = module.reload(gold(3)).unwrap();
    assert_eq!(
        (reloaded.generation, reloaded.loosened.clone()),
        (1, vec!["gold".to_owned()])
    );
    rt.block_on(async {
        // Loosened: the old limit of 2 holds for one old window.
        assert!(matches!(gold_only("g").await, Err(Error::Exceeded(_))));
    });
    let reloaded = module.reload(gold(1)).unwrap();
    assert_eq!(reloaded.tightened, ["gold"]);
    rt.block_on(async {
        assert!(matches!(gold_only("h").await, Ok(())));
        assert!(matches!(gold_only("h").await, Err(Error::Exceeded(_))));
    });
}

/// A module's service reloaded directly (`module.service().reload(..)`) checks the module's
/// annotated fns as `Module::reload` does. Before, only `Module::reload` checked them: the
/// service took a configuration without the tier `gold_only` names, and every call of it
/// was refused from then on (`UnknownTier` at each call) where the reload should have been.
#[test]
fn a_modules_service_reloaded_directly_checks_its_annotated_fns() {
    let _serial = serial();
    let gold = |limit: u64| Config::builder().tier(Tier::new("gold", limit).window(LONG));
    let module = Module::init(gold(2).build().unwrap()).unwrap();
    let rt = ratelimit_tests::two_workers();
    rt.block_on(async { gold_only("d").await.unwrap() });
    let silver = Config::builder().tier(Tier::new("silver", 5).window("1m"));
    match module.service().reload(silver.build().unwrap()) {
        Err(Error::Declarations(e)) => assert!(e
            .problems
            .iter()
            .any(|p| p.function.ends_with("::gold_only")
                && matches!(p.kind, ProblemKind::UnknownTier { .. }))),
        other => panic!("{other:?}"),
    }
    assert_eq!(module.stats().generation, 0);
    rt.block_on(async {
        gold_only("d").await.unwrap();
        assert!(matches!(gold_only("d").await, Err(Error::Exceeded(_))));
    });
    // A configuration the fn runs under is taken, through the service as through the module.
    let reloaded = module.service().reload(gold(1).build().unwrap()).unwrap();
    assert_eq!(
        (reloaded.generation, reloaded.tightened),
        (1, vec!["gold".to_owned()])
    );
    rt.block_on(async { assert!(matches!(gold_only("e").await, Ok(()))) });
}

/// A fleet in a rolling deploy: two services (pods) on one Redis, one still on a limit of 3,
/// one already on 10. They share each key's state and each decides under its own limit, so
/// a window admits up to the looser limit and never more (the README's statement).
#[cfg(feature = "redis")]
#[test]
fn two_pods_on_old_and_new_limits_share_redis_and_admit_up_to_the_looser() {
    use ratelimit_tests::redis_server::{prefix, RedisServer};
    let server = RedisServer::start();
    let key_prefix = prefix("rolling");
    let pod = |n: u64| {
        let config = limit(n)()
            .key_prefix(key_prefix.clone())
            .store(ratelimit::StoreConfig::Redis(
                ratelimit::RedisOptions::new(server.url()).timeout(Duration::from_secs(2)),
            ))
            .build()
            .unwrap();
        RateLimitService::new(config).unwrap()
    };
    let (old, new) = (pod(3), pod(10));
    let rt = ratelimit_tests::two_workers();
    rt.block_on(async {
        let (a, b) = tokio::join!(admitted_by_64_tasks(&old, 2), admitted_by_64_tasks(&new, 2),);
        assert!(a <= 3, "the old pod admitted {a}");
        assert_eq!(a + b, 10, "old {a}, new {b}");
        // The old pod admits nothing more once the window holds 10.
        assert_eq!(admitted_by_64_tasks(&old, 1).await, 0);
    });
}

/// `reload_from_file`: a file that cannot be read, parse or validate leaves the running
/// limits and names the problem; a good one takes over (the module built from the same file).
#[test]
fn a_module_reloads_from_its_file_and_keeps_running_on_a_bad_one() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("ratelimit-reload-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    write("[tiers.gold]\nlimit = 1\nwindow = \"20d\"\n");
    let module = Module::init(Config::from_file(&path).unwrap()).unwrap();
    let rt = ratelimit_tests::two_workers();
    rt.block_on(async { gold_only("f").await.unwrap() });

    let field_of = |e: Error| match e {
        Error::InvalidConfig(e) => e.problems[0].0.clone(),
        other => panic!("{other:?}"),
    };
    write("[tiers.gold]\nlimit = \"many\"\n");
    assert_eq!(
        field_of(module.reload_from_file(&path).unwrap_err()),
        "tiers.gold.limit"
    );
    write("[tiers.gold]\nlimit = 1\nwindow = \"1 fortnight\"\n");
    assert_eq!(
        field_of(module.reload_from_file(&path).unwrap_err()),
        "tiers.gold.window"
    );
    let missing = dir.join("missing.toml");
    assert!(field_of(module.reload_from_file(&missing).unwrap_err()).starts_with("file "));
    let text = dir.join("limits.txt");
    std::fs::write(&text, "").unwrap();
    assert!(field_of(module.reload_from_file(&text).unwrap_err()).starts_with("file "));
    // Without the tier an annotated fn names: every fn named, nothing changed.
    write("[tiers.silver]\nlimit = 1\n");
    assert!(matches!(
        module.reload_from_file(&path),
        Err(Error::Declarations(_))
    ));
    assert_eq!(module.stats().generation, 0);
    rt.block_on(async { assert!(gold_only("f").await.is_err()) });

    write("[tiers.gold]\nlimit = 2\nwindow = \"20d\"\n");
    let json = dir.join("limits.json");
    std::fs::write(
        &json,
        r#"{"tiers": {"gold": {"limit": 3, "window": "20d"}}}"#,
    )
    .unwrap();
    assert_eq!(module.reload_from_file(&path).unwrap().generation, 1);
    assert_eq!(module.reload_from_file(&json).unwrap().generation, 2);
    assert_eq!(
        module
            .service()
            .config()
            .tier("gold")
            .unwrap()
            .quota
            .capacity(),
        3
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reload from 3 to 10 while 64 tasks call: inside the old window exactly 3 are admitted,
/// whichever configuration each call was decided under.
#[test]
fn a_reload_racing_64_calling_tasks_admits_exactly_the_tighter_limit() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let (services, _servers) = on_every_store("reload-race", limit(3), &clock);
    for (store, service) in services {
        let admitted = rt.block_on(async {
            let calling = {
                let service = service.clone();
                tokio::spawn(async move { admitted_by_64_tasks(&service, 20).await })
            };
            tokio::task::yield_now().await;
            service.reload(on_its_store(&service, limit(10)())).unwrap();
            calling.await.unwrap()
        });
        assert_eq!(admitted, 3, "{store}");
    }
}

/// Reloads on a clone of a module's service racing the module's shutdown: no panic, and the
/// module's fns are refused once it is gone, whatever the reloads installed.
#[test]
fn reloads_racing_module_shutdown_leave_nothing_running() {
    let _serial = serial();
    let gold = || Module::builder().tier(Tier::new("gold", 1_000).window("1m"));
    let module = gold().init().unwrap();
    let service = module.service().clone();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..200 {
                service.reload(gold().build().unwrap()).unwrap();
            }
        });
        scope.spawn(move || module.shutdown());
    });
    let rt = ratelimit_tests::two_workers();
    rt.block_on(async {
        assert!(matches!(
            gold_only("z").await,
            Err(Error::NotInitialized { .. })
        ));
    });
    assert_eq!(service.stats().generation, 200);
}

/// `watch_file` (feature `notify`): a change to the file reloads the module; a bad file
/// leaves the running limits; a write that changes nothing reloads nothing. Waits for the
/// file system's events (not for time to pass in a limit).
#[cfg(feature = "notify")]
#[test]
fn a_watched_file_reloads_the_module_when_it_changes() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("ratelimit-watch-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    write("[tiers.gold]\nlimit = 1\nwindow = \"20d\"\n");
    let module = Module::init(Config::from_file(&path).unwrap()).unwrap();
    let watch = module.watch_file(&path).unwrap();
    let capacity = || {
        module
            .service()
            .config()
            .tier("gold")
            .unwrap()
            .quota
            .capacity()
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "no reload: {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    write("[tiers.gold]\nlimit = 4\nwindow = \"20d\"\n");
    until("limit 4", &|| capacity() == 4);
    let generation = module.stats().generation;
    write("[tiers.gold]\nlimit = \"many\"\n");
    write("[tiers.gold]\nlimit = 4\nwindow = \"20d\"\n");
    write("[tiers.gold]\nlimit = 7\nwindow = \"20d\"\n");
    until("limit 7", &|| capacity() == 7);
    // The bad file and the unchanged one reloaded nothing.
    assert_eq!(module.stats().generation, generation + 1);
    drop(watch);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An empty file is not a configuration of defaults: refused, naming the file.
#[test]
fn an_empty_configuration_file_is_refused_not_read_as_defaults() {
    let path = std::env::temp_dir().join(format!("ratelimit-empty-{}.toml", std::process::id()));
    std::fs::write(&path, " \n").unwrap();
    match Config::from_file(&path) {
        Err(Error::InvalidConfig(e)) => {
            assert!(e.problems[0].0.starts_with("file "), "{e:?}");
            assert_eq!(e.problems[0].1, "the file is empty");
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(&path).unwrap();
}

/// Switched off, a configuration refused nothing: limiting switched on by a reload is not
/// held to its limits (the new limit holds at once).
#[test]
fn a_reload_switching_limiting_on_is_not_held_to_the_switched_off_limits() {
    let rt = ratelimit_tests::two_workers();
    let clock = ratelimit_tests::clock();
    let off = || limit(3)().enabled(false);
    let (services, _servers) = on_every_store("reload-on", off, &clock);
    for (store, service) in services {
        rt.block_on(async {
            assert_eq!(admitted_by_64_tasks(&service, 1).await, 64, "{store}");
            service.reload(on_its_store(&service, limit(10)())).unwrap();
            assert_eq!(admitted_by_64_tasks(&service, 1).await, 10, "{store}");
        });
    }
}
