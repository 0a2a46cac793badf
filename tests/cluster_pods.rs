//! Pods of a fleet on a Redis Cluster whose fn-wide budget a reload moves (tier `"moves"`, a
//! minute's bucket, then two minutes'): its old and moved states in two slots, each key hashed
//! whole. Shared by `cluster_moves_attacks` and `cluster_recheck_attacks`.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{ConfigBuilder, Error, Module, ModuleBuilder, RedisOptions, StoreConfig};

use crate::redis_server::{prefix, RedisCluster};
use crate::{moves_bucket as bucket, on_its_store};

pub const MINUTE: Duration = Duration::from_secs(60);

/// The budget part of a test's `report` in its store keys (see `ratelimit_core::key`): its
/// name's length, then its name.
pub const REPORT: &str = "6:report";

/// A test's `report_for`'s.
pub const REPORT_FOR: &str = "10:report_for";

/// The user whose limit a test's `report_for` stacks beside the fn's budget: on the third
/// master, the old and moved states of the budget on the two others ([`two_masters`]).
pub static USER: OnceLock<String> = OnceLock::new();

/// A call of one of a test's fns, to spawn. The fns are each test's own (`report`, named
/// `"report"`, of tier `"moves"`; `report_for`, the same beside a user's limit, named
/// `"report_for"`): declared here, in the library every test links, every other test's module
/// would find an fn of a tier it does not have.
pub type Call = fn() -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// A pod: a module of the minute's bucket on `options`, under prefix `p`.
pub fn pod(options: &RedisOptions, p: &str) -> TestModule {
    let builder: ModuleBuilder = Module::builder()
        .key_prefix(p)
        .store(StoreConfig::Redis(options.clone()))
        .tier(bucket(MINUTE));
    TestModule::new(builder).expect("the module runs")
}

/// Reloads `m` to the bucket on two minutes: the fn's budget moved to another key.
pub fn reloaded(m: &TestModule) {
    let builder = ConfigBuilder::default().tier(bucket(2 * MINUTE));
    let service = m.service();
    service
        .reload(on_its_store(service, builder))
        .expect("reloaded");
}

/// Whether a call of `call` under `m` was admitted (a refusal over the limit: false; any
/// other error fails the test).
pub async fn admitted_by(m: &TestModule, call: Call) -> bool {
    match m.scope(call()).await {
        Ok(()) => true,
        Err(Error::Exceeded(_)) => false,
        Err(e) => panic!("{e}"),
    }
}

/// The master of `cluster` serving `key`.
pub fn node_of(cluster: &RedisCluster, key: &str) -> usize {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.nodes[0].connection())
        .unwrap();
    cluster.master_of(slot).expect("a master")
}

/// The store key of `budget` (its part, as [`REPORT`]) under prefix `p` and the window
/// `window` (the quota's identity, as `"T60000"`).
pub fn budget_key(p: &str, window: &str, budget: &str) -> String {
    format!("{p}:{{}}{window}:{budget}:5:moves")
}

/// A key prefix named `name` under which `budget`'s old and moved states lie on two masters of
/// `cluster`, and those two masters (old, moved); [`USER`] on the third. The user is one for
/// the whole process (a test's fns read it), so the prefix is chosen around it: a user chosen
/// around the first test's masters lay on the old or the moved master of a later test's
/// (each test its own Cluster and prefix) about two times in three.
pub fn two_masters(cluster: &RedisCluster, name: &str, budget: &str) -> (String, usize, usize) {
    let user = USER.get_or_init(|| "user-0".to_owned());
    let third = node_of(cluster, &format!("{{{user}}}"));
    (0..)
        .map(|i| prefix(&format!("{name}{i}")))
        .find_map(|p| {
            let old = node_of(cluster, &budget_key(&p, "T60000", budget));
            let moved = node_of(cluster, &budget_key(&p, "T120000", budget));
            (old != moved && ![old, moved].contains(&third)).then_some((p, old, moved))
        })
        .unwrap()
}

/// A fleet on `options` under prefix `p`: `movers` pods past their old window after the
/// reload and `others` still in it (their clocks a minute apart: a reload reaches pods at
/// different times), each connected, `before` calls of `call` spent by the first mover before
/// the move, then every pod reloaded ([`reloaded`]).
pub fn fleet(
    runtime: &tokio::runtime::Runtime,
    options: &RedisOptions,
    p: &str,
    (call, before): (Call, usize),
    (movers, others): (usize, usize),
) -> (Vec<TestModule>, Vec<TestModule>) {
    let (movers, others): (Vec<TestModule>, Vec<TestModule>) = (
        (0..movers).map(|_| pod(options, p)).collect(),
        (0..others).map(|_| pod(options, p)).collect(),
    );
    runtime.block_on(async {
        for m in movers.iter().chain(&others) {
            let store = m.service().redis_store().expect("on Redis");
            store.connect().await.expect("connected");
        }
        for _ in 0..before {
            assert!(admitted_by(&movers[0], call).await);
        }
    });
    for m in movers.iter().chain(&others) {
        reloaded(m);
    }
    for m in &movers {
        m.clock().advance(MINUTE);
    }
    // A pod's first call reads the fleet's reload horizon record where due (after its
    // reload), and its first spend of a quota of its own raises it (the fns declare one:
    // `report_for`'s per-user limit), each a round trip before its script
    // (`service/horizon.rs`). Made here, by a spend of a quota of its own on a key of its
    // own, so that the histories' calls send their scripts first, in the order they are
    // spawned (a read first put every mover's script behind the others' on one server).
    runtime.block_on(async {
        let own = ratelimit::Options::new().tier("moves").limit(1_000);
        for m in movers.iter().chain(&others) {
            let warmed = m.service().consume("horizon-warm", &own).await;
            assert!(warmed.is_ok_and(|d| d.allowed));
        }
    });
    (movers, others)
}

/// How many of `calls` (spawned calls of the fns) were admitted: a refusal over the limit is
/// not, any other error fails the test.
pub async fn admitted_of(calls: Vec<tokio::task::JoinHandle<Result<(), Error>>>) -> usize {
    let mut n = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(()) => n += 1,
            Err(Error::Exceeded(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    n
}

/// Calls of `call` under `m` until one is refused: how many were admitted.
pub async fn until_refused(m: &TestModule, call: Call) -> usize {
    let mut n = 0;
    while admitted_by(m, call).await {
        n += 1;
    }
    n
}

/// Declares a test's fns where it is called (each test binary its own: see [`Call`]):
/// `report`, an fn-wide budget of the tier a reload moves, named as [`REPORT`] writes it;
/// `report_for`, the same beside a user's roomy limit (a stacked call over two slots, or three
/// with the old state decided too, run slot by slot); and `plain` and `beside_a_user`, a call
/// of each (the latter for [`USER`]) as a [`Call`].
#[macro_export]
macro_rules! moved_budget_fns {
    () => {
        #[ratelimit::rate_limit(tier = "moves", name = "report")]
        async fn report() -> Result<(), ratelimit::Error> {
            Ok(())
        }

        #[ratelimit::rate_limit(tier = "moves", name = "report_for")]
        #[ratelimit::rate_limit(limit = 1000, window = "1h", key = user, name = "per-user")]
        async fn report_for(user: &str) -> Result<(), ratelimit::Error> {
            let _ = user;
            Ok(())
        }

        fn plain() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), ratelimit::Error>> + Send>,
        > {
            Box::pin(report())
        }

        fn beside_a_user() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), ratelimit::Error>> + Send>,
        > {
            let user = $crate::cluster_pods::USER.get();
            Box::pin(report_for(user.expect("a user on the third master")))
        }
    };
}
