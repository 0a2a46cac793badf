//! The Redis store against a real local Redis Cluster of three masters (feature `redis`): one
//! slot per decision, MOVED redirections followed, exact counts across processes.

use std::time::{Duration, Instant};

use ratelimit::{Error, Quota, RedisOptions, RedisStore, Strategy};
use ratelimit_tests::acquire;
use ratelimit_tests::redis_server::{four_processes, prefix, RedisCluster};

fn node_id(c: &mut redis::Connection) -> String {
    redis::cmd("CLUSTER").arg("MYID").query(c).unwrap()
}

#[test]
fn four_processes_on_a_cluster_admit_exactly_the_limit() {
    let cluster = RedisCluster::start();
    for strategy in Strategy::ALL {
        let total = four_processes(
            env!("CARGO_BIN_EXE_redis-worker"),
            &cluster.urls(),
            true,
            &prefix("cluster-procs"),
            strategy.as_str(),
        );
        assert_eq!(total, 1_000, "{strategy}");
    }
}

#[tokio::test]
async fn decisions_follow_a_slot_that_moved_to_another_node() {
    let cluster = RedisCluster::start();
    let store =
        RedisStore::new(RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(2)))
            .unwrap();
    store.connect().await.unwrap();
    let p = prefix("moved");
    for strategy in Strategy::ALL {
        // The shape of the service's keys: the user key is the hash tag.
        let key = format!("{p}:{{user-{strategy}}}T60000:-:-");
        let quota = Quota::new(5, Duration::from_secs(20 * 24 * 3600))
            .unwrap()
            .with_strategy(strategy);
        for _ in 0..3 {
            assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
        }

        // Move the key's slot to another master, the way `redis-cli --cluster reshard` does.
        let mut conns: Vec<redis::Connection> =
            cluster.nodes.iter().map(|n| n.connection()).collect();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut conns[0])
            .unwrap();
        let source = (0..3)
            .find(|&i| {
                let n: u64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(slot)
                    .query(&mut conns[i])
                    .unwrap();
                n == 1
            })
            .expect("one node holds the key");
        let target = (source + 1) % 3;
        let (source_id, target_id) = (node_id(&mut conns[source]), node_id(&mut conns[target]));
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&source_id)
            .exec(&mut conns[target])
            .unwrap();
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&target_id)
            .exec(&mut conns[source])
            .unwrap();
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(cluster.nodes[target].port())
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&key)
            .exec(&mut conns[source])
            .unwrap();
        for c in conns.iter_mut() {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&target_id)
                .exec(c)
                .unwrap();
        }

        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut conns[source])
            .unwrap();
        // The client still thinks the slot is on `source`: it gets MOVED and follows it,
        // and the state moved with the key.
        let d = acquire(&store, &key, &quota).await.unwrap();
        assert!(d.allowed, "{strategy}");
        assert_eq!(d.remaining, 1, "{strategy}");
        assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
        assert!(
            !acquire(&store, &key, &quota).await.unwrap().allowed,
            "{strategy}"
        );
        let errors: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut conns[source])
            .unwrap();
        assert!(
            errors.contains("errorstat_MOVED"),
            "{strategy}: the old owner answered MOVED: {errors}"
        );
        let held: u64 = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut cluster.nodes[target].connection())
            .unwrap();
        assert_eq!(held, 1, "{strategy}: the key lives on its new node");
    }
}

#[tokio::test]
async fn a_dead_master_never_hangs_a_caller_and_deny_refuses() {
    let mut cluster = RedisCluster::start();
    let store =
        RedisStore::new(RedisOptions::cluster(cluster.urls()).timeout(Duration::from_millis(300)))
            .unwrap();
    let key = format!("{}:-:{{dead}}", prefix("dead"));
    let quota = Quota::per_minute(5).unwrap();
    assert!(acquire(&store, &key, &quota).await.unwrap().allowed);
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query(&mut cluster.nodes[0].connection())
        .unwrap();
    let owner = (0..3)
        .find(|&i| {
            let n: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query(&mut cluster.nodes[i].connection())
                .unwrap();
            n == 1
        })
        .expect("one node holds the key");
    cluster.nodes[owner].stop();
    for _ in 0..3 {
        let started = Instant::now();
        let result = acquire(&store, &key, &quota).await;
        assert!(
            started.elapsed() < Duration::from_millis(800),
            "bounded by the timeout: {:?}",
            started.elapsed()
        );
        assert!(
            matches!(result, Err(Error::Store { .. } | Error::Timeout { .. })),
            "a call Redis cannot decide is refused: {result:?}"
        );
    }
}
