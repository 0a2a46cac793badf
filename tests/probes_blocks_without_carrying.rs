//! helper-73: a store of one's own, written against the public `Store` trait, that keeps
//! blocks (`Store::blocks`) but does not carry a reload's moved limits (`Store::carries`, its
//! default): during the transition the service decides the old state beside the moved one as
//! one, all or nothing, for as long as the old one may hold a block. What that does to a
//! block, against a twin service that never reloads (the same limit throughout, so the two
//! should answer alike): never an admission the twin refuses; a refusal by the moved state
//! while the old one is blocked begins a block of its own there (the store cannot tell the
//! two states are one limit's), which outlasts the old block by the time between the two
//! refusals: pinned here, as `Store::carries` documents it. Memory store underneath (a store
//! of one's own that delegates), hand-driven clock.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::{
    Config, ConfigBuilder, Decision, Error, ManualClock, MemoryStore, Options, RateLimitService,
    Strategy, Tier,
};
use ratelimit_tests::{now, START};

const SEC: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
/// Where the histories begin: the first minute's boundary after `START` (a fixed window's).
const ZERO: Duration = Duration::from_secs(START.as_secs().div_ceil(60) * 60);

/// The memory store's decisions and blocks, carrying nothing (`carries` left at its default).
#[derive(Clone, Default)]
struct BlocksOnly(MemoryStore);

impl Store for BlocksOnly {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        self.0.decide(request).await
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        assert!(stacked.carried().is_empty(), "asked to carry");
        self.0.decide_all(stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.0.reset(key))
    }

    fn blocks(&self) -> bool {
        true
    }
}

/// Tier `name` (the default tier) of 3 on `window` under `strategy`, blocking a key an hour
/// once refused; a bucket refilled 3 a minute whatever the window.
fn limit(strategy: Strategy, name: &str, window: Duration) -> ConfigBuilder {
    let mut tier = Tier::new(name, 3)
        .burst(0)
        .window(window)
        .strategy(strategy)
        .block_for(HOUR);
    if strategy == Strategy::TokenBucket {
        tier = tier.refill(3 * window.as_secs() / 60);
    }
    Config::builder().tier(tier).default_tier(name)
}

fn serve(config: ConfigBuilder) -> (RateLimitService, ManualClock) {
    let clock = ManualClock::new(START);
    let config = config.build().unwrap();
    let service =
        RateLimitService::with_store(config, BlocksOnly::default(), Arc::new(clock.clone()))
            .unwrap();
    (service, clock)
}

/// One call of `cost` on `"k"`: admitted, and a refusal's wait.
fn call(service: &RateLimitService, cost: u64) -> (bool, Option<Duration>) {
    let d = now(service.consume("k", &Options::new().cost(cost))).unwrap();
    (d.allowed, d.retry_after)
}

/// What a history of calls answered on the twin and on the moved limit, side by side.
struct Both {
    twin: (RateLimitService, ManualClock),
    moved: (RateLimitService, ManualClock),
}

impl Both {
    /// At [`ZERO`].
    fn new(strategy: Strategy) -> Self {
        let both = Both {
            twin: serve(limit(strategy, "a", MINUTE)),
            moved: serve(limit(strategy, "a", MINUTE)),
        };
        both.at(Duration::ZERO);
        both
    }

    fn call(&self, cost: u64) -> [(bool, Option<Duration>); 2] {
        [call(&self.twin.0, cost), call(&self.moved.0, cost)]
    }

    fn at(&self, since: Duration) {
        self.twin.1.set(ZERO + since);
        self.moved.1.set(ZERO + since);
    }
}

/// 1 spent, the tier renamed (another state, the same limit), 2 more spent on both (the old
/// state's 3 and the moved one's 2), a refusal by the old state (an hour's block begins
/// there alone: the moved state admitted it), then 40 s later a call of 2, refused by the
/// moved state too, which begins a block there from then. Told: the twin the hour's rest
/// (3,560 s), the moved limit 3,600 s. At 3,600 s the twin admits; the moved limit refuses
/// until 3,640 s: a lockout as long as the time between the two refusals, which may be as
/// long as the moved state refuses by itself (its window, here a minute). Never an admission
/// the twin refuses.
#[test]
fn a_moved_limit_on_a_store_that_blocks_without_carrying_is_blocked_anew_beside_the_old_block() {
    for strategy in [Strategy::SlidingWindow, Strategy::FixedWindow] {
        let both = Both::new(strategy);
        let on = format!("{strategy}");
        assert_eq!(both.call(1), [(true, None); 2], "{on}");
        ratelimit_tests::reload_to(&both.moved.0, limit(strategy, "b", MINUTE));
        assert_eq!(both.call(2), [(true, None); 2], "{on}");
        assert_eq!(both.call(1), [(false, Some(HOUR)); 2], "{on}");
        both.at(40 * SEC);
        let [twin, moved] = both.call(2);
        assert_eq!(twin, (false, Some(HOUR - 40 * SEC)), "{on}");
        assert_eq!(moved, (false, Some(HOUR)), "{on}: blocked anew");
        both.at(HOUR);
        let [twin, moved] = both.call(1);
        assert_eq!(twin, (true, None), "{on}");
        assert_eq!(moved, (false, Some(40 * SEC)), "{on}");
        both.at(HOUR + 40 * SEC);
        assert_eq!(both.call(1), [(true, None); 2], "{on}");
    }
}

/// A block begun on the old state alone at the last second of its window (the moved state,
/// one call less spent, admitted the call) holds the moved limit to its end, as the twin's
/// block holds the twin: refused at 3,658 s with the twin, admitted with it at 3,659 s. The
/// old state is decided whole as long as a block begun in its window may last.
#[test]
fn a_block_begun_on_the_old_state_at_its_windows_end_holds_the_moved_limit_to_its_end() {
    for strategy in [Strategy::SlidingWindow, Strategy::FixedWindow] {
        let both = Both::new(strategy);
        let on = format!("{strategy}");
        assert_eq!(both.call(1), [(true, None); 2], "{on}");
        ratelimit_tests::reload_to(&both.moved.0, limit(strategy, "b", MINUTE));
        both.at(59 * SEC);
        assert_eq!(both.call(2), [(true, None); 2], "{on}");
        assert_eq!(both.call(1), [(false, Some(HOUR)); 2], "{on}");
        both.at(HOUR + 58 * SEC);
        let [twin, moved] = both.call(1);
        assert_eq!(
            (twin, moved),
            ((false, Some(SEC)), (false, Some(SEC))),
            "{on}"
        );
        both.at(HOUR + 59 * SEC);
        assert_eq!(both.call(1), [(true, None); 2], "{on}");
    }
}

/// Past the old window the old state is still decided whole, under its own quota, as long as
/// a block begun in its window may last (`Store::carries`): a limit of 3 a minute blocking an
/// hour, renamed and raised to 10, admits 3 of 10 calls two minutes after the reload on a
/// store that does not carry, and the old quota's refusal then blocks the key, refused until
/// the old state stops being decided, 61 minutes after the reload; the memory store (which
/// carries) admits the new 10 a minute from the old window's end. Over-refusal, measured;
/// never more than the new limit.
#[test]
fn past_the_old_window_a_store_that_does_not_carry_holds_a_moved_limit_to_the_old_quota() {
    let raised = |name: &str, limit: u64| {
        let tier = Tier::new(name, limit)
            .burst(0)
            .window(MINUTE)
            .strategy(Strategy::SlidingWindow)
            .block_for(HOUR);
        Config::builder().tier(tier).default_tier(name)
    };
    let (blocks_only, clock) = serve(raised("a", 3));
    let (carrying, carrying_clock) = ratelimit_tests::service(raised("a", 3).build().unwrap());
    for (service, clock) in [(&blocks_only, &clock), (&carrying, &carrying_clock)] {
        clock.set(ZERO);
        ratelimit_tests::reload_to(service, raised("b", 10));
    }
    let mut admitted = Vec::new();
    for minute in [2, 30, 60, 61, 62] {
        clock.set(ZERO + MINUTE * minute);
        carrying_clock.set(ZERO + MINUTE * minute);
        let count = |s: &RateLimitService| (0..10).filter(|_| call(s, 1).0).count();
        admitted.push((minute, count(&blocks_only), count(&carrying)));
    }
    assert_eq!(
        admitted,
        [
            (2, 3, 10),
            (30, 0, 10),
            (60, 0, 10),
            (61, 10, 10),
            (62, 10, 10)
        ]
    );
}
