//! helper-83's attacks on the carrying horizon of a moved limit (probes_horizon_attacks) on
//! one Redis server: quotas of a call's own on the configured limit's state, then reloads
//! that move it (the default tier renamed, the window changed at the same rate, the key
//! prefix changed, two in a row, and there and back), then calls with and without the quota
//! of their own. Each against the twin, the same service and calls that never reloaded,
//! under a prefix of its own.
//!
//! Time: Redis decides on its own clock, the service's transitions on a hand-driven clock,
//! so no bucket refills on Redis while the service's clock crosses the old window and the
//! carrying: what the old state owes is whole when the calls past the carrying ask for it,
//! moved or not. (How a moved bucket refills by time is the memory probes'.)

use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, ManualClock, Options, RateLimitService, Strategy, Tier};
use ratelimit_tests::moves::{Move, MOVES};
use ratelimit_tests::redis_server::{prefix, RedisServer};
use ratelimit_tests::{on_redis, START};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

/// Tier `name` (the default tier): a bucket of 10 plus 5 on a `minutes` window refilled
/// `refill` tokens a minute, blocking a key `block` once refused.
fn bucket(name: &str, minutes: u32, refill: u64, block: Option<Duration>) -> ConfigBuilder {
    let mut tier = Tier::new(name, 10)
        .burst(5)
        .window(MINUTE * minutes)
        .refill(refill * u64::from(minutes))
        .strategy(Strategy::TokenBucket);
    if let Some(block) = block {
        tier = tier.block_for(block);
    }
    Config::builder().tier(tier).default_tier(name)
}

/// A service on `server` under a prefix of its own with [`bucket`]`("a", 1, refill, block)`,
/// and what reloads it by `how`.
struct Run {
    service: RateLimitService,
    clock: ManualClock,
    refill: u64,
    block: Option<Duration>,
}

impl Run {
    fn new(server: &RedisServer, name: &str, refill: u64, block: Option<Duration>) -> Run {
        let (service, clock) = on_redis(server, &prefix(name), bucket("a", 1, refill, block));
        Run {
            service,
            clock,
            refill,
            block,
        }
    }

    fn reload(&self, name: &str, minutes: u32, other_prefix: bool) {
        let running = self.service.config();
        let at = match other_prefix {
            true => format!("{}-q", running.key_prefix()),
            false => running.key_prefix().to_owned(),
        };
        let config = bucket(name, minutes, self.refill, self.block)
            .store(running.store().clone())
            .key_prefix(at)
            .build()
            .unwrap();
        self.service.reload(config).unwrap();
    }

    /// `how`'s reloads, ten seconds apart where two.
    fn moving(&self, how: Move) {
        for (i, &(name, minutes, other_prefix)) in how.reloads().iter().enumerate() {
            if i > 0 {
                self.clock.advance(Duration::from_secs(10));
            }
            self.reload(name, minutes, other_prefix);
        }
    }

    /// The clock at `secs` past [`START`].
    fn at(&self, secs: u64) {
        self.clock.set(START + Duration::from_secs(secs));
    }

    /// Calls of `options` on `"k"` admitted of `n`.
    async fn admitted(&self, options: &Options, n: usize) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            let decided = self.service.consume("k", options).await.unwrap();
            admitted += usize::from(decided.allowed);
        }
        admitted
    }
}

/// `script` on the twin and on every move, each a service under a prefix of its own: the
/// twin's counts, and the moved counts that differ from them, each with its move.
async fn against_the_twin<F>(
    server: &RedisServer,
    name: &str,
    (refill, block): (u64, Option<Duration>),
    script: F,
) -> (Vec<usize>, Vec<(Move, Vec<usize>)>)
where
    F: AsyncFn(&Run, &dyn Fn()) -> Vec<usize>,
{
    let mut twin = None;
    let mut differ = Vec::new();
    for how in std::iter::once(Move::None).chain(MOVES) {
        let run = Run::new(server, name, refill, block);
        let counts = script(&run, &|| run.moving(how)).await;
        match &twin {
            None => twin = Some(counts),
            Some(twin) if *twin != counts => differ.push((how, counts)),
            Some(_) => {}
        }
    }
    (twin.unwrap(), differ)
}

/// 15 calls with their own refill of a token a minute (15 minutes owed on the configured
/// bucket's state), moved, then plain calls at +300 s (past the configured carrying, 150 s):
/// none, on every move as on the twin.
#[tokio::test]
async fn plain_calls_after_a_slow_bucket_of_its_own_on_every_move() {
    let server = RedisServer::start();
    let own = Options::new().refill(1);
    let (twin, differ) =
        against_the_twin(&server, "h83-own-plain", (10, None), async |run, moving| {
            let mut counts = vec![run.admitted(&own, 16).await];
            moving();
            run.at(300);
            counts.push(run.admitted(&Options::new(), 16).await);
            counts
        })
        .await;
    assert_eq!(twin, [15, 0], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// The mirror: the configured bucket refilled a token a minute (15 plain calls: 15 minutes
/// owed), moved, then calls with their own refill of 600 a minute (their quota outlasts a
/// reload by 61.5 s) at +100 s: none, on every move as on the twin. Carried for the own
/// quota alone, they read the moved state alone: 15.
#[tokio::test]
async fn calls_with_a_fast_bucket_of_their_own_after_plain_calls_left_a_slow_debt() {
    let server = RedisServer::start();
    let own = Options::new().refill(600);
    let (twin, differ) =
        against_the_twin(&server, "h83-own-mirror", (1, None), async |run, moving| {
            let mut counts = vec![run.admitted(&Options::new(), 16).await];
            moving();
            run.at(100);
            counts.push(run.admitted(&own, 16).await);
            counts
        })
        .await;
    assert_eq!(twin, [15, 0], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}

/// The bucket with a configured block of a minute, and 16 calls with their own block of an
/// hour (15 admitted, the 16th refused and blocking the key an hour), moved; at +300 s
/// plain calls (their quota has a block: they read the key's, refused inside the hour) and
/// own calls: none, on every move as on the twin.
#[tokio::test]
async fn a_longer_block_of_its_own_holds_the_plain_calls_on_every_move() {
    let server = RedisServer::start();
    let own = Options::new().block_for(HOUR);
    let (twin, differ) = against_the_twin(
        &server,
        "h83-own-block",
        (10, Some(MINUTE)),
        async |run, moving| {
            let mut counts = vec![run.admitted(&own, 16).await];
            moving();
            run.at(300);
            counts.push(run.admitted(&Options::new(), 5).await);
            counts.push(run.admitted(&own, 5).await);
            counts
        },
    )
    .await;
    assert_eq!(twin, [15, 0, 0], "twin");
    assert!(differ.is_empty(), "{differ:?}");
}
