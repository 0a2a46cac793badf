//! Stacked limits decided as one: a call is admitted and spent from every limit only if every
//! limit admits it, atomically, so under any concurrency the tightest limit admits exactly its
//! count and the others spend exactly that much. On the memory store and, with the `redis`
//! feature, on a real Redis server and a real Redis Cluster.

use std::time::Duration;

use ratelimit::{Config, Error, Options, RateLimitService, Strategy};

const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// The services each case runs on (memory, Redis, Cluster), and the servers behind them.
fn services() -> (
    Vec<(&'static str, RateLimitService)>,
    Box<dyn std::any::Any>,
) {
    ratelimit_tests::on_every_store("stack", Config::builder, &ratelimit_tests::clock())
}

#[test]
fn a_call_refused_by_one_limit_spends_nothing_from_the_others() {
    let rt = ratelimit_tests::two_workers();
    let (services, _servers) = services();
    for (store, service) in services {
        for strategy in Strategy::ALL {
            let burst = Options::new()
                .limit(2)
                .window(LONG)
                .strategy(strategy)
                .budget("burst");
            let daily = Options::new()
                .limit(5)
                .window(LONG)
                .strategy(Strategy::TokenBucket)
                .budget("daily");
            let user = format!("user-{strategy}");
            let limits = [(user.as_str(), &burst), (user.as_str(), &daily)];
            rt.block_on(async {
                for _ in 0..2 {
                    let d = service.consume_all(&limits).await.unwrap();
                    assert!(d.iter().all(|d| d.allowed), "{store} {strategy}");
                }
                for _ in 0..5 {
                    let err = service.enforce_all(&limits).await.unwrap_err();
                    let Error::Exceeded(e) = &err else {
                        panic!("{store} {strategy}: {err}")
                    };
                    assert_eq!(e.budget.as_deref(), Some("burst"), "{store} {strategy}");
                }
                // The refusals spent nothing from the daily budget: 5 - 2 left, and the
                // refused call reports that level for it, not what the call would have left.
                let daily_level = service.status(&user, &daily).await.unwrap();
                assert_eq!(daily_level.remaining, 3, "{store} {strategy}");
                let refused = service.consume_all(&limits).await.unwrap();
                assert!(
                    !refused[0].allowed && refused[1].allowed,
                    "{store} {strategy}"
                );
                assert_eq!(refused[1].remaining, 3, "{store} {strategy}");
            });
        }
    }
}

#[test]
fn under_concurrency_the_tightest_limit_admits_exactly_its_count() {
    let rt = ratelimit_tests::two_workers();
    let (services, _servers) = services();
    for (store, service) in services {
        for strategy in Strategy::ALL {
            let tight = Options::new()
                .limit(50)
                .window(LONG)
                .strategy(strategy)
                .budget("tight");
            let loose = Options::new()
                .limit(80)
                .window(LONG)
                .strategy(strategy)
                .budget("loose");
            let user = format!("crowd-{strategy}");
            let admitted: u32 = rt.block_on(async {
                let tasks: Vec<_> = (0..16)
                    .map(|_| {
                        let service = service.clone();
                        let user = user.clone();
                        let (tight, loose) = (tight.clone(), loose.clone());
                        tokio::spawn(async move {
                            let mut admitted = 0;
                            for _ in 0..10 {
                                let limits = [(user.as_str(), &tight), (user.as_str(), &loose)];
                                let d = service.consume_all(&limits).await.unwrap();
                                // The loose limit never refuses: only 50 are ever spent.
                                assert!(d[1].allowed);
                                admitted += u32::from(d.iter().all(|d| d.allowed));
                            }
                            admitted
                        })
                    })
                    .collect();
                let mut admitted = 0;
                for t in tasks {
                    admitted += t.await.unwrap();
                }
                admitted
            });
            assert_eq!(admitted, 50, "{store} {strategy}");
            let loose_level = rt.block_on(service.status(&user, &loose)).unwrap();
            assert_eq!(loose_level.remaining, 30, "{store} {strategy}");
        }
    }
}

#[test]
fn the_same_limit_twice_in_one_call_is_an_error_not_a_double_look() {
    let rt = ratelimit_tests::two_workers();
    let (services, _servers) = services();
    for (store, service) in services {
        let once = Options::new().limit(1).window(LONG);
        let result = rt.block_on(service.consume_all(&[("k", &once), ("k", &once)]));
        assert!(
            matches!(result, Err(Error::InvalidKey { .. })),
            "{store}: {result:?}"
        );
        assert!(
            rt.block_on(service.consume("k", &once)).unwrap().allowed,
            "{store}"
        );
    }
}
