//! helper-100's probes of the moved node's clock read before a carried spend's read
//! (`RedisStore::moved_clock`, `late` in `lua/carry.lua`) on a real Cluster.

use super::moved::*;
use super::*;

/// Calls of `command` each master has answered since its stats were reset (`INFO
/// commandstats`), in `moved`'s Cluster's node order.
fn calls_of(moved: &Moved, command: &str) -> Vec<u64> {
    let field = format!("cmdstat_{command}:calls=");
    (moved._cluster.nodes.iter().take(3))
        .map(|node| {
            let info: String = (redis::cmd("INFO").arg("commandstats"))
                .query(&mut node.connection())
                .unwrap();
            (info.lines().find_map(|l| l.strip_prefix(field.as_str())))
                .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
        })
        .collect()
}

/// The slot of hash tag `tag` moved, keys and all, from its master to another one that
/// holds neither it nor `besides`' slot (as `redis-cli --cluster reshard` moves it), told to
/// every master but not to the store's client, whose slot map goes stale: the old master
/// and the new one.
fn migrate(moved: &Moved, tag: &str, besides: &str) -> (usize, usize) {
    let cluster = &moved._cluster;
    let mut conns: Vec<redis::Connection> = (cluster.nodes.iter().take(3))
        .map(|n| n.connection())
        .collect();
    let slot: u16 = (redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{tag}}}")))
    .query(&mut conns[0])
    .unwrap();
    let source = node_of(cluster, tag);
    let target = (0..3)
        .find(|&i| i != source && i != node_of(cluster, besides))
        .unwrap();
    let id = |c: &mut redis::Connection| -> String {
        redis::cmd("CLUSTER").arg("MYID").query(c).unwrap()
    };
    let (source_id, target_id) = (id(&mut conns[source]), id(&mut conns[target]));
    let setslot = |c: &mut redis::Connection, how: &str, node: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(how).arg(node);
        cmd.exec(c).unwrap();
    };
    setslot(&mut conns[target], "IMPORTING", &source_id);
    setslot(&mut conns[source], "MIGRATING", &target_id);
    let keys: Vec<String> = (redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1_000))
    .query(&mut conns[source])
    .unwrap();
    assert!(!keys.is_empty(), "the moved state's slot holds its keys");
    let mut migrate = redis::cmd("MIGRATE");
    (migrate.arg("127.0.0.1").arg(cluster.nodes[target].port()))
        .arg("")
        .arg(0)
        .arg(5_000)
        .arg("KEYS")
        .arg(&keys);
    migrate.exec(&mut conns[source]).unwrap();
    for c in conns.iter_mut() {
        setslot(c, "NODE", &target_id);
    }
    for c in conns.iter_mut() {
        redis::cmd("CONFIG").arg("RESETSTAT").exec(c).unwrap();
    }
    (source, target)
}

/// The moved state's slot migrated to another master after the store's client mapped it
/// (its map stale: nothing told it), then a carried spend: its clock read (`moved_clock`,
/// `TIME`, routed by that map, a command without a key follows no `MOVED`) was answered by
/// the old master, which no longer serves the slot, while its script ran on the new one
/// (following the script's `MOVED`): the lateness of its read reckoned on another primary's
/// clock than the script's (RELIABILITY.md item 12), a skew between them moving the
/// boundary by that much either way (a clock read 8 s ahead of the script's carried a 9 s
/// stall: 3 s owed where one server owes 4 s,
/// `probe100_a_clock_read_ahead_of_the_scripts_carries_a_stall`, lua_carry/). The clock is
/// now read behind a read of the moved key on the same link (`EXISTS`), which the old
/// master answers `MOVED`: the client sends both again to the new master, which answers the
/// `EXISTS` (0 before: no `EXISTS` anywhere), and the clock is taken from that reply; the
/// call carries (the moved bucket's 15, 30 s carried: 10 admitted in all, as on one
/// server). Would catch a clock read routed by the client's map alone (no `EXISTS` answered
/// by the new master), and a redirect that spent or carried twice (not 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe100_a_stale_slot_map_reads_the_clock_of_a_master_not_serving_the_slot() {
    let moved = Moved::new("stale-slot-map-clock", Duration::from_secs(2)).await;
    let old_tag = moved.from.split(['{', '}']).nth(1).unwrap().to_owned();
    let (source, target) = migrate(&moved, "u", &old_tag);
    let first = moved.spend().await.unwrap();
    assert!(first.as_ref().is_ok_and(|d| d.allowed), "{first:?}");
    let exists = calls_of(&moved, "exists");
    assert_eq!(
        (exists[source], exists[target]),
        (0, 1),
        "the clock read behind EXISTS answered by the new master {target}: {exists:?}"
    );
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted + 1, error.is_none()), (10, true));
}

/// The moved state's master refusing the clock read alone (an ACL taking `EXISTS` from the
/// store's user there: no script these calls run sends it), the old state owing 30 s and the
/// moved bucket with room: the carried spend is the store's error, the clock read's
/// (`refused_or`: its look without the carry admits), which `Deny` refuses and `Allow`
/// admits uncounted, as for an old state's read that fails; nothing written: with the ACL
/// lifted the moved bucket admits 10, as if the three calls never came. Would catch a read
/// carried on a guessed clock (a call admitted by the store itself, 9 after) or one whose
/// failure wrote anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe100_a_refused_clock_read_is_the_policys_and_writes_nothing() {
    use crate::store::{Failover, FailurePolicy};
    let mut moved = Moved::new("clock-read-refused", Duration::from_secs(2)).await;
    let acl = |c: &mut redis::Connection, rule: &str| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("default").arg(rule);
        cmd.exec(c).unwrap();
    };
    acl(&mut moved.masters[0], "-exists");
    let spent = moved.spend().await.unwrap();
    let message = match &spent {
        Err(Error::Store { message }) => message.clone(),
        other => panic!("{other:?}"),
    };
    assert!(message.contains("the moved state's clock"), "{message}");
    let carried = [carry(&moved.from, &moved.old)];
    let (into, new) = (moved.into.as_str(), &moved.new);
    let deny = Failover::new(moved.store.clone(), FailurePolicy::Deny);
    let denied = carrying(&deny, into, new, 1, &carried, Mode::Spend).await;
    assert!(matches!(denied, Err(Error::Store { .. })), "{denied:?}");
    let allow = Failover::new(moved.store.clone(), FailurePolicy::Allow);
    let allowed = (carrying(&allow, into, new, 1, &carried, Mode::Spend).await).unwrap();
    assert!(
        allowed.allowed && allowed.limit == u64::MAX,
        "uncounted: {allowed:?}"
    );
    acl(&mut moved.masters[0], "+exists");
    let (admitted, error) = moved.admitted_after().await;
    assert_eq!((admitted, error.is_none()), (10, true));
}
