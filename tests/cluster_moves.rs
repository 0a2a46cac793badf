//! A budget without a user key (an annotated fn with no `key`) moved by a reload, on a Redis
//! Cluster: its store keys have no hash tag (the empty tag `{}` is none, each key is hashed
//! whole), so the state a reload moved it away from lies in another slot than the moved one.
//! Once the old window had passed, its debt and its block were carried into the moved state by
//! one script over both keys, which Redis refuses whole (`CROSSSLOT`): every call of the fn
//! was refused, as an `InvalidKey` error under every failure policy, for as long as the old
//! state was carried (a window and its tolerance; a block's length). Now the old state is read
//! in its own slot first and carried from there (`lua/level.lua`), and a Cluster answers as
//! one server does.
//!
//! Time: Redis decides on its own clock, the service's transition on a hand-driven one (the
//! module's). Token buckets of 6 s a token and sliding logs: nothing the tests count refills
//! or unblocks in the milliseconds a test takes on Redis' clock.

use std::time::Duration;

use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, ConfigBuilder, Error, Module, ModuleBuilder, RedisOptions, StoreConfig, Strategy,
    Tier,
};
use ratelimit_tests::moves_bucket as bucket;
use ratelimit_tests::on_its_store;
use ratelimit_tests::redis_server::{prefix, RedisCluster, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

#[rate_limit(tier = "moves")]
async fn report() -> Result<(), Error> {
    Ok(())
}

/// How `n` calls of `report` ended: admitted, refused over the limit, or another error (its
/// text).
async fn calls(m: &TestModule, n: usize) -> (usize, usize, Vec<String>) {
    let (mut admitted, mut refused, mut errors) = (0, 0, Vec::new());
    for _ in 0..n {
        match m.scope(report()).await {
            Ok(()) => admitted += 1,
            Err(Error::Exceeded(_)) => refused += 1,
            Err(e) => errors.push(e.to_string()),
        }
    }
    (admitted, refused, errors)
}

/// Tier `"moves"`: a sliding log of 2 per `window`, blocking for an hour.
fn blocking(window: Duration) -> Tier {
    Tier::new("moves", 2)
        .window(window)
        .strategy(Strategy::SlidingWindow)
        .block_for(HOUR)
}

/// A module of `tier` on one server and on a Cluster, each under a fresh prefix.
fn on_both(
    server: &RedisServer,
    cluster: &RedisCluster,
    tier: fn(Duration) -> Tier,
) -> Vec<(&'static str, TestModule)> {
    let single = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
    let nodes = RedisOptions::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let on = |name: &'static str, options: RedisOptions| {
        let builder: ModuleBuilder = Module::builder()
            .key_prefix(prefix(&format!("moves-{name}")))
            .store(StoreConfig::Redis(options))
            .tier(tier(MINUTE));
        (name, TestModule::new(builder).expect("the module runs"))
    };
    vec![on("server", single), on("cluster", nodes)]
}

/// Reloads `m` with `tier` on two minutes: the fn's budget moved to another key.
fn moved(m: &TestModule, tier: fn(Duration) -> Tier) {
    let builder = ConfigBuilder::default().tier(tier(2 * MINUTE));
    let service = m.service();
    service
        .reload(on_its_store(service, builder))
        .expect("reloaded");
}

/// The bucket of 15, 5 spent (30 s owed), moved to two minutes at the same rate: past the old
/// window the moved state owes the old one's 30 s, so 10 are admitted, then refused; on the
/// Cluster every call was an `InvalidKey` error, none admitted.
#[test]
fn a_moved_budget_without_a_user_key_carries_its_debt_on_a_cluster() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    for (store, m) in on_both(&server, &cluster, bucket) {
        let runtime = ratelimit_tests::two_workers();
        runtime.block_on(async {
            assert_eq!(calls(&m, 5).await, (5, 0, vec![]), "{store}");
            moved(&m, bucket);
            m.clock().advance(MINUTE);
            assert_eq!(calls(&m, 12).await, (10, 2, vec![]), "{store}");
        });
    }
}

/// A log of 2 spent and blocked for the hour, moved to two minutes: past the old window the
/// block holds the moved state, refused over the limit (an error on the Cluster before).
#[test]
fn a_moved_budget_without_a_user_key_carries_its_block_on_a_cluster() {
    let (server, cluster) = (RedisServer::start(), RedisCluster::start());
    for (store, m) in on_both(&server, &cluster, blocking) {
        let runtime = ratelimit_tests::two_workers();
        runtime.block_on(async {
            assert_eq!(calls(&m, 3).await, (2, 1, vec![]), "{store}");
            moved(&m, blocking);
            m.clock().advance(Duration::from_secs(90));
            assert_eq!(calls(&m, 3).await, (0, 3, vec![]), "{store}");
        });
    }
}
