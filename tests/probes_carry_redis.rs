//! helper-66's probes of carrying a moved limit's old state on Redis (a real server): tasks
//! and several services (a fleet's pods) racing on the first calls after a move, a penalty
//! and a shadow limit beside a moved bucket (the ways through `probes_carry_attacks` closed
//! on the memory store), the same histories through the service on Redis and on the memory
//! store, and a restart with the moved configuration (what it loses).
//!
//! Time: Redis decides on its own clock, the service's transition on a hand-driven one. The
//! memory store is run at one fixed instant (`AtStart`, over the public `Store` API) so that
//! both stores see no time pass while the service's clock crosses the old window: the
//! histories then agree call for call. Token buckets of seconds a token and sliding logs: no
//! boundary of Redis' clock falls inside a test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Adjustment, Request, Stacked, Store};
use ratelimit::{
    Config, ConfigBuilder, Decision, Error, ManualClock, MemoryStore, Options, RateLimitService,
    RedisOptions, StoreConfig, Strategy, Tier,
};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{bucket_a_minute, Rng, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// `config` on `server` (under `prefix`).
fn redis_config(server: &RedisServer, prefix: &str, config: ConfigBuilder) -> Config {
    let options = RedisOptions::new(server.url()).timeout(Duration::from_secs(5));
    config
        .key_prefix(prefix)
        .store(StoreConfig::Redis(options))
        .build()
        .unwrap()
}

/// A service on `server` under `prefix`, on a hand-driven clock.
fn on_redis(
    server: &RedisServer,
    prefix: &str,
    config: ConfigBuilder,
) -> (RateLimitService, ManualClock) {
    let clock = ManualClock::new(START);
    let config = redis_config(server, prefix, config);
    let service = RateLimitService::with_clock(config, Arc::new(clock.clone())).unwrap();
    (service, clock)
}

async fn admitted(service: &RateLimitService, options: &Options, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += usize::from(service.consume("k", options).await.is_ok_and(|d| d.allowed));
    }
    admitted
}

/// The bucket of 10 plus 5 at a token every 6 s on `minutes` (the same bucket on another
/// state for each window).
fn on(minutes: u32) -> ConfigBuilder {
    bucket_a_minute(10, 5, 10 * u64::from(minutes)).default_window(MINUTE * minutes)
}

/// 5 spent (30 s owed), moved; past the old window on the service's clock (on Redis' a few
/// milliseconds later, the 30 s still owed) 8 tasks of 5 calls race on a runtime of 4
/// threads: exactly the 10 the carried debt leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_racing_after_a_move_on_redis_get_exactly_what_the_carried_debt_leaves() {
    let server = RedisServer::start();
    let p = prefix("carry-race");
    let (service, clock) = on_redis(&server, &p, on(1));
    assert_eq!(admitted(&service, &Options::new(), 5).await, 5);
    service.reload(redis_config(&server, &p, on(2))).unwrap();
    clock.advance(MINUTE);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move { admitted(&service, &Options::new(), 5).await })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 10);
}

/// Three services on one Redis (a fleet's pods), all reloaded to the moved configuration,
/// their clocks past the old window: 3 tasks each race, exactly 10 admitted in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_racing_after_a_move_on_redis_get_exactly_what_the_carried_debt_leaves() {
    let server = RedisServer::start();
    let p = prefix("carry-pods");
    let pods: Vec<(RateLimitService, ManualClock)> =
        (0..3).map(|_| on_redis(&server, &p, on(1))).collect();
    assert_eq!(admitted(&pods[0].0, &Options::new(), 5).await, 5);
    for (service, clock) in &pods {
        service.reload(redis_config(&server, &p, on(2))).unwrap();
        clock.advance(MINUTE);
    }
    let mut tasks = Vec::new();
    for (service, _) in &pods {
        for _ in 0..3 {
            let service = service.clone();
            tasks.push(tokio::spawn(async move {
                admitted(&service, &Options::new(), 5).await
            }));
        }
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 10);
}

/// The bucket of 15 at 6 s a token, moved with nothing spent, and 5 calls in the old window
/// (decided on both states, 30 s owed on each): past it the old state is carried, nothing more
/// owed, 10 left. Each limit of the stacked script read Redis' TIME itself, so the old state
/// was written a few microseconds after the new one, and the carry rounded that up to a whole
/// token of the moved bucket: 9 left, 36 s owed (found comparing histories with the memory
/// store; a token of a bucket of 10 an hour is 6 minutes).
#[tokio::test]
async fn a_bucket_spent_in_its_old_window_on_redis_is_not_carried_a_token_more() {
    let server = RedisServer::start();
    let p = prefix("carry-one-instant");
    let (service, clock) = on_redis(&server, &p, on(1));
    service.reload(redis_config(&server, &p, on(2))).unwrap();
    assert_eq!(admitted(&service, &Options::new(), 5).await, 5);
    clock.advance(MINUTE);
    let level = service.status("k", &Options::new()).await.unwrap();
    assert_eq!(level.remaining, 10, "owed {:?}", level.reset_after);
    assert_eq!(admitted(&service, &Options::new(), 20).await, 10);
}

/// A penalty past the old window on Redis (5 spent, moved, +60 s on the service's clock):
/// carried first, then spent: 5 admitted. On the new state alone it lay under the carried
/// 30 s: 10.
#[tokio::test]
async fn a_penalty_past_the_old_window_on_redis_is_not_lost_under_the_debt_carried() {
    let server = RedisServer::start();
    let (service, clock) = on_redis(&server, &prefix("carry-penalty"), on(1));
    let plain = Options::new();
    assert_eq!(admitted(&service, &plain, 5).await, 5);
    let p = service.config().key_prefix().to_owned();
    service.reload(redis_config(&server, &p, on(2))).unwrap();
    clock.advance(MINUTE);
    service.penalize("k", &plain, 5).await.unwrap();
    assert_eq!(admitted(&service, &plain, 20).await, 5);
}

/// A moved bucket stacked beside a shadow limit on Redis: the carried 30 s hold it, 10.
#[tokio::test]
async fn a_moved_bucket_stacked_beside_a_shadow_limit_on_redis_keeps_its_debt() {
    let server = RedisServer::start();
    let tiers = |minutes: u32| {
        Config::builder()
            .tier(
                Tier::new("a", 10)
                    .burst(5)
                    .refill(10 * u64::from(minutes))
                    .window(MINUTE * minutes)
                    .strategy(Strategy::TokenBucket),
            )
            .tier(
                Tier::new("s", 1)
                    .window(MINUTE)
                    .strategy(Strategy::SlidingWindow)
                    .shadow(),
            )
    };
    let p = prefix("carry-shadow");
    let (service, clock) = on_redis(&server, &p, tiers(1));
    let (a, s) = (Options::new().tier("a"), Options::new().tier("s"));
    assert_eq!(admitted(&service, &a, 5).await, 5);
    service.reload(redis_config(&server, &p, tiers(2))).unwrap();
    clock.advance(MINUTE);
    let mut stacked = 0;
    for _ in 0..20 {
        let d = service.consume_all(&[("k", &a), ("k", &s)]).await.unwrap();
        stacked += usize::from(d.iter().all(|d| d.allowed));
    }
    assert_eq!(stacked, 10);
}

// ---------------------------------------------------------------------------------------
// The same histories on Redis and on the memory store.
// ---------------------------------------------------------------------------------------

/// The memory store deciding at its own clock near `START`, a microsecond on at each
/// question, whatever the service's clock says: as Redis does within a test, on its own
/// clock, a little later at each script (a reward right after a spend finds a token partly
/// back on both, and gives back the whole tokens only).
#[derive(Clone, Default)]
struct AtStart(MemoryStore, Arc<AtomicU64>);

impl AtStart {
    fn at(&self) -> u64 {
        START.as_nanos() as u64 + 1_000 * self.1.fetch_add(1, Ordering::Relaxed)
    }
}

impl Store for AtStart {
    async fn decide(&self, r: Request<'_>) -> Result<Decision, Error> {
        let r = Request::new(r.key(), r.quota(), r.cost(), self.at(), r.mode())?;
        self.0.decide(r).await
    }
    async fn decide_all(&self, s: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let s = Stacked::carrying(s.checks(), s.carried(), self.at(), s.mode())?;
        self.0.decide_all(s).await
    }
    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.0.reset(key))
    }
    fn blocks(&self) -> bool {
        true
    }
    fn carries(&self) -> bool {
        true
    }
    fn adjusts(&self) -> bool {
        true
    }
    async fn adjust(&self, a: Adjustment<'_>) -> Result<u64, Error> {
        let a = match a.is_penalty() {
            true => Adjustment::penalty(a.key(), a.quota(), a.units(), self.at()),
            false => Adjustment::reward(a.key(), a.quota(), a.units(), self.at()),
        };
        self.0.adjust(a).await
    }
}

/// A configuration of the family the histories draw from: the default limit a token bucket
/// (2 to 10, a burst of 0 or 3) and tier `"t"` a bucket (1 or 3) or a sliding log of 1 or 3
/// blocking an hour, each on a window of one or two minutes (another state). A bucket's
/// refill follows its window (the default's 6 s a token on a minute, 12 s on two; the
/// tier's 12 s and 24 s): a reload on the same state keeps the interval, where the stores
/// differ on a reward (the memory store gives none under another interval than the one that
/// spent, Redis gives it at the quota's).
fn drawn(rng: &mut Rng) -> ConfigBuilder {
    let pick = |rng: &mut Rng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
    let minutes = |rng: &mut Rng| 1 + rng.below(2) as u32;
    let w = minutes(rng);
    let default =
        bucket_a_minute(pick(rng, &[2, 5, 10]), pick(rng, &[0, 3]), 10).default_window(MINUTE * w);
    let wt = minutes(rng);
    let tier = match rng.below(2) {
        0 => Tier::new("t", pick(rng, &[1, 3]))
            .refill(5)
            .strategy(Strategy::TokenBucket),
        _ => Tier::new("t", pick(rng, &[1, 3]))
            .strategy(Strategy::SlidingWindow)
            .block_for(HOUR),
    };
    default.tier(tier.window(MINUTE * wt))
}

/// Whether a decision admits, and what remains when it does. A refusal's `remaining` is the
/// refusing state's with the longest wait (`transition::one`), which a few milliseconds of
/// Redis' clock may make another one's: not compared.
fn level(d: Decision) -> (bool, Option<u64>) {
    (d.allowed, d.allowed.then_some(d.remaining))
}

/// One random history from `seed` on `service` (whose reloads are made with `config`):
/// what every step answered, as text.
async fn history(
    service: &RateLimitService,
    clock: &ManualClock,
    config: impl Fn(ConfigBuilder) -> Config,
    seed: u64,
) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let _ = drawn(&mut rng); // the first configuration, the service's own
    let lanes = [Options::new(), Options::new().tier("t")];
    let mut out = Vec::new();
    for _ in 0..60 {
        let at = rng.below(2) as usize;
        let lane = &lanes[at];
        let said = match rng.below(10) {
            0 => {
                service.reload(config(drawn(&mut rng))).unwrap();
                "reload".to_owned()
            }
            1 => {
                clock.advance(Duration::from_secs(rng.below(90)));
                "advance".to_owned()
            }
            2 => {
                let units = 1 + rng.below(3);
                let d = service.penalize("k", lane, units).await;
                format!("penalty {units} {:?}", d.map(|d| d.remaining))
            }
            3 => {
                let units = 1 + rng.below(3);
                let d = service.reward("k", lane, units).await;
                format!("reward {units} {:?}", d.map(|d| d.remaining))
            }
            4 => format!(
                "look {:?}",
                service
                    .status("k", lane)
                    .await
                    .map(|d| (d.allowed, d.remaining))
            ),
            5 => {
                let all = service
                    .consume_all(&[("k", &lanes[0]), ("k", &lanes[1])])
                    .await;
                format!(
                    "{:?}",
                    all.map(|d| d.iter().map(|d| d.allowed).collect::<Vec<_>>())
                )
            }
            _ => {
                let cost = 1 + rng.below(2);
                let d = service.consume("k", &lane.clone().cost(cost)).await;
                format!("cost {cost} {:?}", d.map(level))
            }
        };
        out.push(format!("lane {at}: {said}"));
    }
    out
}

/// Random histories of moves, calls, stacks, looks, penalties and rewards: on Redis and on
/// the memory store, the same answers, step for step.
#[tokio::test]
async fn histories_of_moves_answer_alike_on_redis_and_in_memory() {
    let server = RedisServer::start();
    for seed in 0..64u64 {
        let seed = seed * 7_919 + 11;
        let first = drawn(&mut Rng(seed | 1));
        let p = prefix("carry-alike");
        let (redis, redis_clock) = on_redis(&server, &p, first.clone());
        let on_server = |b: ConfigBuilder| redis_config(&server, &p, b);
        let on_redis_store = history(&redis, &redis_clock, on_server, seed).await;
        let clock = ManualClock::new(START);
        let memory = RateLimitService::with_store(
            first.build().unwrap(),
            AtStart::default(),
            Arc::new(clock.clone()),
        )
        .unwrap();
        let built = |b: ConfigBuilder| b.build().unwrap();
        let in_memory = history(&memory, &clock, built, seed).await;
        for (i, (r, m)) in on_redis_store.iter().zip(&in_memory).enumerate() {
            assert_eq!(
                r, m,
                "seed {seed}, step {i}:\n{on_redis_store:#?}\n{in_memory:#?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A restart with the moved configuration.
// ---------------------------------------------------------------------------------------

/// What a restart loses (as a rolling deploy does): a new service started with the moved
/// configuration keeps no replaced one, so it knows no old state to decide with or carry
/// from: 15 spent and an hour's block on the old state, and the new service admits at once
/// the fresh state's 15 on the bucket and 2 on the blocked log. A service that reloads
/// instead (the first) holds both. And while an old pod still runs the old configuration
/// beside the new one, each counts on its own state: up to both limits together (here 2 +
/// 2 on the log in its window), not the looser of the two.
#[tokio::test]
async fn a_restart_with_the_moved_configuration_forgets_the_old_state() {
    let server = RedisServer::start();
    let p = prefix("carry-restart");
    let blocking = |minutes: u32| {
        on(minutes).tier(
            Tier::new("t", 2)
                .burst(0)
                .window(MINUTE * minutes)
                .strategy(Strategy::SlidingWindow)
                .block_for(HOUR),
        )
    };
    let t = Options::new().tier("t");
    let (old, _clock) = on_redis(&server, &p, blocking(1));
    assert_eq!(admitted(&old, &Options::new(), 16).await, 15);
    assert_eq!(admitted(&old, &t, 3).await, 2);
    // The restarted one asked first: the reloaded one's calls carry the old block into the
    // moved state, which the restarted one reads too (`Carry::block_only`).
    let (restarted, _clock) = on_redis(&server, &p, blocking(2));
    assert_eq!(admitted(&restarted, &Options::new(), 20).await, 15);
    assert_eq!(admitted(&restarted, &t, 3).await, 2);
    old.reload(redis_config(&server, &p, blocking(2))).unwrap();
    assert_eq!(
        admitted(&old, &Options::new(), 5).await,
        0,
        "the reloaded one"
    );
    assert_eq!(admitted(&old, &t, 3).await, 0, "the reloaded one");
    // A pod still on the old configuration beside a new one: each on its own state.
    let (old_pod, _clock) = on_redis(&server, &prefix("carry-rolling"), blocking(1));
    let q = old_pod.config().key_prefix().to_owned();
    let (new_pod, _clock) = on_redis(&server, &q, blocking(2));
    let both = admitted(&old_pod, &t, 3).await + admitted(&new_pod, &t, 3).await;
    assert_eq!(
        both, 4,
        "2 a minute and 2 per two minutes, both in one minute"
    );
}
