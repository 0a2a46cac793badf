//! The reload horizon a fleet records in Redis (`Store::horizon`, `service/horizon.rs`): one
//! key per prefix, `<prefix>:horizon`, raised before a state is written past it and read
//! before a pod lets a move go. Its failures refuse (a record of another shape, a store that
//! cannot raise it), a pod reads what another raised after its own reload, and plain calls
//! make no round trip of it.
//!
//! Time: Redis decides on its own clock, the services' transitions on hand-driven clocks set
//! alike (as probes_fleet_horizon_redis).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::Horizon;
use ratelimit::{Error, ManualClock, Options, RateLimitService, RedisOptions, RedisStore};
use ratelimit_tests::moves::bucket;
use ratelimit_tests::redis_server::{
    horizon_key, horizon_record, prefix, script_calls, RedisCluster, RedisServer,
};
use ratelimit_tests::{horizon_hooked, on_its_store, on_redis, Before, START};

/// Calls of `options` on `"k"` admitted out of `n`.
async fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += usize::from(service.consume("k", options).await.unwrap().allowed);
    }
    admitted
}

/// A record of another shape under the prefix (a string not of eight numbers, among them
/// the six of before the second bound, one whose penalty end lies further than any debt
/// lasts, a second bound past the first or of the first's id, or a hash):
/// the call that must raise it (its own refill outlasts what is recorded) is refused with
/// [`Error::UnexpectedState`], its state unwritten, and the record left as it was; so is a
/// pod's read of it at a carry boundary. Read as zeros, it would let every move go.
#[tokio::test]
async fn a_record_of_another_shape_refuses_the_call_and_stays() {
    let server = RedisServer::start();
    let own = Options::new().refill(1);
    for garbage in [
        "not a record",
        "1 2",
        "1 2 3",
        "1 2 3 4 5 6",
        "01 2 3 4 5 6 0 0",
        "1 2 3 4 5 18446744073709551616 0 0",
        "1 2 3 4 5 6 0 18446744073709551616",
        "0 0 9007199254740991 1 0 0 0 0",
        "0 0 9 1 0 0 10 2",
        "0 0 9 1 0 0 8 1",
        "hash",
    ] {
        let p = prefix("horizon-garbage");
        let mut c = server.connection();
        let mut planted = match garbage {
            "hash" => redis::cmd("HSET"),
            _ => redis::cmd("SET"),
        };
        planted.arg(horizon_key(&p));
        match garbage {
            "hash" => planted.arg("f").arg("1"),
            text => planted.arg(text),
        };
        planted.exec(&mut c).unwrap();
        let (service, clock) = on_redis(&server, &p, bucket("a"));
        let refused = service.consume("k", &own).await;
        assert!(
            matches!(refused, Err(Error::UnexpectedState { .. })),
            "{garbage}: {refused:?}"
        );
        // Nothing spent: the plain limit of 15 is whole.
        assert_eq!(
            admitted(&service, &Options::new(), 16).await,
            15,
            "{garbage}"
        );
        // A read at a carry boundary: refused too.
        service.reload(on_its_store(&service, bucket("b"))).unwrap();
        clock.set(START + Duration::from_secs(300));
        let read = service.consume("k", &Options::new()).await;
        assert!(
            matches!(read, Err(Error::UnexpectedState { .. })),
            "{garbage}: {read:?}"
        );
        let kind: String = redis::cmd("TYPE")
            .arg(horizon_key(&p))
            .query(&mut c)
            .unwrap();
        match garbage {
            "hash" => assert_eq!(kind, "hash"),
            text => assert_eq!(horizon_record(&server, &p).as_deref(), Some(text)),
        }
    }
}

/// A store that cannot raise the record refuses the call that must (its own refill) and the
/// penalty that must, with the store's error, spending nothing; plain calls, which raise
/// nothing, are decided. Once it can again, the call raises it and is decided.
#[tokio::test]
async fn a_record_that_cannot_be_raised_refuses_the_call() {
    let server = RedisServer::start();
    let p = prefix("horizon-failing");
    let failing = Arc::new(AtomicBool::new(true));
    // The record cannot be raised or read while `failing`: the store's error.
    let hook = {
        let failing = Arc::clone(&failing);
        move |_: &Horizon| match failing.load(Ordering::Relaxed) {
            true => Before::Fail,
            false => Before::Forward,
        }
    };
    let inner = RedisStore::new(RedisOptions::new(server.url())).unwrap();
    let store = horizon_hooked(inner, hook);
    let clock = ManualClock::new(START);
    let config = bucket("a").key_prefix(&p).build().unwrap();
    let service = RateLimitService::with_store(config, store, Arc::new(clock.clone())).unwrap();
    let own = Options::new().refill(1);
    let refused = service.consume("k", &own).await;
    assert!(matches!(refused, Err(Error::Store { .. })), "{refused:?}");
    let penalty = service.penalize("k", &Options::new(), 40).await;
    assert!(matches!(penalty, Err(Error::Store { .. })), "{penalty:?}");
    assert_eq!(horizon_record(&server, &p), None);
    // Nothing spent by either: 15 plain calls.
    assert_eq!(admitted(&service, &Options::new(), 16).await, 15);
    failing.store(false, Ordering::Relaxed);
    // Decided (its slower bucket's tolerance admits it over the plain calls' 15).
    service.consume("k", &own).await.unwrap();
    let held = horizon_record(&server, &p).expect("raised");
    let outlasts: u64 = held.split(' ').next().unwrap().parse().unwrap();
    // The refill of a token a minute on a minute's window: its 15 tokens' wait and more.
    assert!(outlasts > 15 * 60 * 1_000_000_000, "{held}");
}

/// Pod B reloaded to the moved configuration first (a rolling reload); pod A, still on the
/// old one, spends its 15 with its own refill of a token a minute (raising the record), then
/// reloads. B's plain calls at +300 s, past the configured bucket's carrying (150 s): B read
/// the record there (its reload knew nothing of A's quota), so it carries the old state's 15
/// minutes owed: none admitted. Without the record it read the moved state alone: 15.
#[tokio::test]
async fn a_record_raised_by_one_pod_is_read_by_another_after_its_own_reload() {
    let server = RedisServer::start();
    let p = prefix("horizon-a-then-b");
    let (a, a_clock) = on_redis(&server, &p, bucket("a"));
    let (b, b_clock) = on_redis(&server, &p, bucket("a"));
    b.reload(on_its_store(&b, bucket("b"))).unwrap();
    assert_eq!(horizon_record(&server, &p), None, "a reload raises nothing");
    for clock in [&a_clock, &b_clock] {
        clock.set(START + Duration::from_secs(1));
    }
    assert_eq!(admitted(&a, &Options::new().refill(1), 16).await, 15);
    assert!(horizon_record(&server, &p).is_some(), "raised by A");
    a.reload(on_its_store(&a, bucket("b"))).unwrap();
    for clock in [&a_clock, &b_clock] {
        clock.set(START + Duration::from_secs(300));
    }
    assert_eq!(admitted(&b, &Options::new(), 16).await, 0);
}

/// Plain calls make no round trip of the record: none before any reload (and no record is
/// written), none after a reload that moves the limit until something kept could let go;
/// the first call past such an instant reads it once, the next none.
#[tokio::test]
async fn plain_calls_make_no_round_trip_of_the_record() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let p = prefix("horizon-plain");
    let (service, clock) = on_redis(&server, &p, bucket("a"));
    let plain = Options::new();
    // The scripts loaded.
    service.consume("warm", &plain).await.unwrap();
    let trips = |c: &mut redis::Connection| script_calls(c);
    let before = trips(&mut c);
    for _ in 0..10 {
        service.consume("k", &plain).await.unwrap();
    }
    assert_eq!(trips(&mut c) - before, 10);
    service.reload(on_its_store(&service, bucket("b"))).unwrap();
    service.consume("warm", &plain).await.unwrap();
    let before = trips(&mut c);
    for _ in 0..10 {
        service.consume("k2", &plain).await.unwrap();
    }
    assert_eq!(trips(&mut c) - before, 10, "inside the old window");
    clock.set(START + Duration::from_secs(3_600));
    let before = trips(&mut c);
    service.consume("k3", &plain).await.unwrap();
    let first = trips(&mut c) - before;
    let before = trips(&mut c);
    for _ in 0..10 {
        service.consume("k3", &plain).await.unwrap();
    }
    assert_eq!((first, trips(&mut c) - before), (2, 10), "past every end");
    assert_eq!(horizon_record(&server, &p), None, "read, never written");
}

/// A service that reloads, moving its limit each time, and makes no call between: what it
/// would drop by what it saw itself it keeps until it has read the record (another pod may
/// hold it longer), so past 64 held the reload is refused, saying a call reads it; after one
/// call, the next reload is taken (and drops what the read confirmed ended).
#[tokio::test]
async fn reloads_without_a_call_between_are_refused_until_one_reads_the_record() {
    let server = RedisServer::start();
    let p = prefix("horizon-unread");
    let (service, clock) = on_redis(&server, &p, bucket("t0"));
    let mut refused = None;
    for i in 1..100u64 {
        clock.set(START + Duration::from_secs(1_000 * i));
        match service.reload(on_its_store(&service, bucket(&format!("t{i}")))) {
            Ok(_) => {}
            Err(e) => {
                refused = Some((i, e.to_string()));
                break;
            }
        }
    }
    let (i, e) = refused.expect("refused past 64 held");
    assert_eq!(i, 65, "{e}");
    assert!(e.contains("has not read the fleet's reload horizon"), "{e}");
    assert!(service.consume("k", &Options::new()).await.unwrap().allowed);
    service
        .reload(on_its_store(&service, bucket(&format!("t{i}"))))
        .unwrap();
}

/// [`bucket`]`("a")` on a Redis Cluster under `prefix`, on a hand-driven clock.
fn on_cluster(cluster: &RedisCluster, prefix: &str) -> (RateLimitService, ManualClock) {
    let options = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    ratelimit_tests::on_redis_with(options, prefix, bucket("a"))
}

/// probes_fleet_horizon_redis' plain calls on another pod, on a Redis Cluster: the record
/// lives in a slot of its own, raised and read by commands of their own. A's 15 with its own
/// refill of a token a minute, both reloaded to the tier renamed; B's plain calls at +300 s
/// carry the 15 minutes owed: none admitted.
#[test]
fn a_record_on_a_cluster_is_raised_by_one_pod_and_read_by_another() {
    let cluster = RedisCluster::start();
    let runtime = ratelimit_tests::two_workers();
    runtime.block_on(async {
        let p = prefix("horizon-cluster");
        let (a, a_clock) = on_cluster(&cluster, &p);
        let (b, b_clock) = on_cluster(&cluster, &p);
        assert_eq!(admitted(&a, &Options::new().refill(1), 16).await, 15);
        for pod in [&a, &b] {
            pod.reload(on_its_store(pod, bucket("b"))).unwrap();
        }
        for clock in [&a_clock, &b_clock] {
            clock.set(START + Duration::from_secs(300));
        }
        assert_eq!(admitted(&b, &Options::new(), 16).await, 0);
    });
}
