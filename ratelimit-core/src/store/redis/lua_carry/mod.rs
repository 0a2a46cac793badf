//! Carrying a moved limit's old state (`lua/carry.lua`, through `lua/stacked.lua`), run by Lua
//! 5.1 in the stand-in (`lua_standin.rs`) at a clock the test sets: the rule against
//! [`Carry::debt`], and stacked calls that carry, with the keys and arguments the store
//! sends ([`script_call`]), against the memory store's at the same clock: every decision the
//! same, to the nanosecond a [`Decision`] keeps. Costs are at least 1 (a look at the level is
//! the store's two looks, not the stacked script's: `carries/` looks at it on a server).

use std::sync::LazyLock;
use std::time::Duration;

use proptest::prelude::*;

use super::across_slots::{level_call, LEVEL_SCRIPT};
use super::given::{Given, Read, Ticket};
use super::lua_pair::{MAX_WINDOW_US, T0};
use super::lua_standin::{Redis, Reply};
use super::reply::full;
use super::scripts::carrying;
use super::stacked::{script_call, STACKED_SCRIPT};
use crate::decision::Decision;
use crate::quota::Quota;
use crate::store::{Adjustment, Carry, Check, MemoryStore, Mode, Stacked, Store, StoreKey};
use crate::syntax::Strategy as Kind;

/// `lua/carry.lua`'s rule alone: `carried_time(ARGV[1..2])`.
static RULE: LazyLock<String> =
    LazyLock::new(|| carrying("return carried_time(ARGV[1] + 0, ARGV[2] + 0)\n"));

/// The Lua rule's time for debts in microseconds.
fn lua_time(redis: &Redis, debt_o: u64, debt_n: u64) -> u64 {
    let rule: &'static str = LazyLock::force(&RULE).as_str();
    match redis.eval_source(rule, &[], &[debt_o, debt_n]) {
        Reply::Int(time) => u64::try_from(time).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// A token bucket of one token every `interval_us` microseconds.
fn bucket(interval_us: u64) -> Quota {
    let window = Duration::from_micros(interval_us);
    Quota::from_parts(1, window, 0, Kind::TokenBucket, None).unwrap()
}

/// [`Carry::debt`] on the same debts (in microseconds) and intervals, in nanoseconds.
fn rust_time(debt_o: u64, i_o: u64, debt_n: u64, i_n: u64) -> u64 {
    let (from, into) = (bucket(i_o), bucket(i_n));
    let now = T0 * 1_000;
    let carry = Carry {
        from: StoreKey::composed("rl:{u}:old"),
        quota: &from,
        into: 0,
        block_only: false,
    };
    carry.debt(now + debt_o * 1_000, &into, now + debt_n * 1_000, now)
}

/// The rule by hand: the debt carried as time, exactly (not in whole tokens of the moved
/// bucket: each chained move rounded it up a token again): 30 s owed is 30 s into a bucket
/// of 4 s a token or of 6 s (where whole tokens said 32 s, 8 tokens, and 30 s), 90 s less a
/// microsecond is that (not 90 s); the moved bucket's own debt counts, a moved bucket owing
/// as much or more takes nothing, nor one beside a full old one; neither interval plays a
/// part. Nothing between other algorithms, nor where the block alone is carried.
#[test]
fn the_rule_carries_the_debt_as_time_exactly() {
    let redis = Redis::new(T0).unwrap();
    let s = 1_000_000;
    for (debt_o, i_o, debt_n, i_n, time) in [
        (90 * s, 6 * s, 0, 6 * s, 90 * s),
        (90 * s - 1, 6 * s, 0, 6 * s, 90 * s - 1),
        (90 * s, 6 * s, 12 * s + 1, 6 * s, 78 * s - 1),
        (30 * s, 6 * s, 0, 4 * s, 30 * s),
        (30 * s, 4 * s, 0, 6 * s, 30 * s),
        (30 * s, 4 * s, 6 * s, 6 * s, 24 * s),
        (30 * s, 6 * s, 4 * s, 4 * s, 26 * s),
        (30 * s, 6 * s, 30 * s, 6 * s, 0),
        (30 * s, 6 * s, 31 * s, 4 * s, 0),
        (0, 6 * s, 0, 4 * s, 0),
    ] {
        assert_eq!(rust_time(debt_o, i_o, debt_n, i_n), time * 1_000);
        let lua = lua_time(&redis, debt_o, debt_n);
        assert_eq!(lua, time, "{debt_o} at {i_o} into {debt_n} at {i_n}");
    }
    let log = Quota::new(1, Duration::from_secs(6)).unwrap();
    let carry = Carry {
        from: StoreKey::composed("rl:{u}:old"),
        quota: &log,
        into: 0,
        block_only: false,
    };
    let now = T0 * 1_000;
    let into = bucket(6 * s);
    assert_eq!(carry.debt(now + 30 * s * 1_000, &into, now, now), 0);
    let from = bucket(6 * s);
    let block_only = Carry {
        quota: &from,
        block_only: true,
        ..carry
    };
    assert_eq!(block_only.debt(now + 30 * s * 1_000, &into, now, now), 0);
    assert!(!block_only.carries_debt(&into));
}

/// A bucket blocked 300 s on its old state and decided beside the moved one (its old
/// window), its block alone carried (`Carry::block_only`): a call of 2 a second later, which
/// the moved bucket (1 token left) refuses too, is told what is left of the old block, 299 s,
/// on both sides; a block begun by that refusal told 300 s, and refused the call when the
/// old block ends, where the moved bucket admits it.
#[test]
fn a_block_alone_carried_beside_the_old_state_begins_no_block_again() {
    let blocking = || {
        (tokens(3, 0, MINUTE))
            .with_block(Duration::from_secs(300))
            .unwrap()
    };
    let (old, new) = (blocking(), blocking());
    let mut both = Both::new();
    assert!(both.same(&[check(OLD, &old, 3)], &[], Mode::Spend)[0].allowed);
    assert!(both.same(&[check(NEW, &new, 2)], &[], Mode::Spend)[0].allowed);
    let refused = both.same(&[check(OLD, &old, 1)], &[], Mode::Spend);
    assert_eq!(refused[0].retry_after, Some(Duration::from_secs(300)));
    let carried = [Carry {
        block_only: true,
        ..carry(&old)
    }];
    both.advance(S);
    let checks = [check(NEW, &new, 2), check(OLD, &old, 2)];
    let decided = both.same(&checks, &carried, Mode::Spend);
    let waits: Vec<_> = decided.iter().map(|d| (d.allowed, d.retry_after)).collect();
    let left = Some(Duration::from_secs(299));
    assert_eq!(waits, [(false, left), (false, left)]);
    both.advance(299 * S);
    assert!(both.same(&[check(NEW, &new, 2)], &[], Mode::Spend)[0].allowed);
}

fn interval() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=1_000u64,
        1..=MAX_WINDOW_US,
        (1..=MAX_WINDOW_US / 1_000).prop_map(|i| i * 1_000)
    ]
}

/// A debt below 2^53, often a few intervals' worth: whole intervals and a remainder, so at
/// most one interval fewer than fit (a long interval's last one plus a remainder went past).
fn debt(interval: u64) -> impl Strategy<Value = u64> {
    let tokens = (9_007_199_254_740_991 / interval)
        .saturating_sub(1)
        .min(1_000);
    prop_oneof![
        0..=(1u64 << 53) - 1,
        (0..=tokens, 0..interval).prop_map(move |(q, r)| q * interval + r),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::lua_agrees::cases()))]

    /// The Lua rule is `Carry::debt` on the same whole microseconds.
    #[test]
    fn the_lua_rule_is_the_rust_rule(
        (i_o, i_n, debt_o, debt_n) in (interval(), interval(), any::<bool>())
            .prop_map(|(o, n, same)| (o, if same { o } else { n }))
            .prop_flat_map(|(o, n)| (Just(o), Just(n), debt(o), debt(n))),
    ) {
        let redis = Redis::new(T0).unwrap();
        let rust = rust_time(debt_o, i_o, debt_n, i_n);
        let lua = lua_time(&redis, debt_o, debt_n);
        prop_assert_eq!(lua * 1_000, rust);
    }
}

/// The stand-in and the memory store, at one clock.
struct Both {
    redis: Redis,
    memory: MemoryStore,
    now_us: u64,
    /// Whether carried states are read first as from another Cluster slot ([`given`]).
    ///
    /// [`given`]: Self::given
    across: bool,
}

impl Both {
    fn new() -> Self {
        Both {
            redis: Redis::new(T0).unwrap(),
            memory: MemoryStore::new(),
            now_us: T0,
            across: false,
        }
    }

    fn advance(&mut self, us: u64) {
        self.now_us += us;
        self.redis.set_time(self.now_us);
    }

    /// A stacked call on both sides (every check asked of Redis: no zero capacity here):
    /// their decisions, or their errors' texts.
    fn call(
        &self,
        checks: &[Check<'_>],
        carried: &[Carry<'_>],
        mode: Mode,
    ) -> (Result<Vec<Decision>, String>, Result<Vec<Decision>, String>) {
        let stacked = Stacked::carrying(checks, carried, self.now_us * 1_000, mode).unwrap();
        let rust = Store::decide_all_now(&self.memory, stacked).expect("at once");
        let asked: Vec<&Check<'_>> = checks.iter().collect();
        let given = match self.given(&stacked) {
            Ok(given) => given,
            Err(e) => return (Err(e), rust.map_err(|e| e.to_string())),
        };
        let (beside, args) =
            script_call(&stacked, &asked, mode.spends(), false, &given, || 0).unwrap();
        let keys: Vec<&str> = (checks.iter().map(|c| c.key.as_str()))
            .chain(beside.iter().map(String::as_str))
            .collect();
        let lua = match self.redis.eval_source(STACKED_SCRIPT.text(), &keys, &args) {
            Reply::Array(items) => {
                let ints: Vec<i64> = (items.iter())
                    .map(|r| match r {
                        Reply::Int(i) => *i,
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(ints.len(), 5 * checks.len(), "{ints:?}");
                Ok((ints.chunks(5).zip(checks))
                    .map(|(r, c)| {
                        let (verdict, at) = full(r).unwrap();
                        Decision::for_quota(verdict, at, c.quota)
                    })
                    .collect())
            }
            other => Err(format!("{other:?}")),
        };
        (lua, rust.map_err(|e| e.to_string()))
    }

    /// With `across`, what each carried state holds, read first as from another Cluster
    /// slot (`lua/level.lua`, at the same clock), for the stacked script to carry as given;
    /// else none (each carried from its key).
    fn given(&self, stacked: &Stacked<'_>) -> Result<Vec<Option<Given>>, String> {
        if !self.across {
            return Ok(Vec::new());
        }
        let read = |carry: &Carry<'_>| {
            let (keys, args) = level_call(carry, stacked.checks()[carry.into].quota, 0);
            let keys = keys.each_ref().map(String::as_str);
            match self.redis.eval_source(LEVEL_SCRIPT.text(), &keys, &args) {
                Reply::Array(items) => match items[..] {
                    [Reply::Int(debt), Reply::Int(left), Reply::Int(at), Reply::Int(0)]
                        if debt >= 0 && left >= 0 && at == self.now_us as i64 =>
                    {
                        let (debt, left) = (debt.unsigned_abs(), left.unsigned_abs());
                        let end = self.now_us + debt;
                        let (erased, pending, wait, began) = (0, 0, 0, 0);
                        Ok(Some(Given::Held {
                            debt,
                            left,
                            end,
                            erased,
                            pending,
                            wait,
                            began,
                        }))
                    }
                    _ => Err(format!("{items:?}")),
                },
                other => Err(format!("{other:?}")),
            }
        };
        stacked.carried().iter().map(read).collect()
    }

    /// A stacked call that must be decided the same on both sides: the decisions.
    fn same(&self, checks: &[Check<'_>], carried: &[Carry<'_>], mode: Mode) -> Vec<Decision> {
        let (lua, rust) = self.call(checks, carried, mode);
        let (lua, rust) = (lua.unwrap(), rust.unwrap());
        assert_eq!(
            lua, rust,
            "at {}: {checks:?} carrying {carried:?}",
            self.now_us
        );
        lua
    }

    /// A penalty of `units` on both sides.
    fn penalty(&self, key: &str, quota: &Quota, units: u64) {
        let lua = self.redis.adjust(quota, key, units, true);
        let at = self.now_us * 1_000;
        let adjustment = Adjustment::penalty(StoreKey::composed(key), quota, units, at);
        let rust = futures::executor::block_on(Store::adjust(&self.memory, adjustment)).unwrap();
        assert_eq!(lua, Reply::Int(rust as i64));
    }
}

const OLD: &str = "rl:{u}:old";
const NEW: &str = "rl:{u}:new";
const S: u64 = 1_000_000;

fn check<'a>(key: &'a str, quota: &'a Quota, cost: u64) -> Check<'a> {
    Check {
        key: StoreKey::composed(key),
        quota,
        cost,
    }
}

fn carry(quota: &Quota) -> Carry<'_> {
    Carry {
        from: StoreKey::composed(OLD),
        quota,
        into: 0,
        block_only: false,
    }
}

/// A token bucket of `limit` and `burst` a `window`, refilling its limit.
fn tokens(limit: u64, burst: u64, window: Duration) -> Quota {
    Quota::from_parts(limit, window, burst, Kind::TokenBucket, None).unwrap()
}

const MINUTE: Duration = Duration::from_secs(60);

/// A bucket of 15 spent, moved to two minutes at the same rate (and, apart, at 4 s a token),
/// and one given a penalty of 40 tokens (far past its tolerance): on both sides the moved
/// bucket owes what the old one does, at the switch, inside the old window and past it, with
/// the old state decided with it for the old window (as the service does) and after.
#[test]
fn debts_carried_agree_with_the_memory_store() {
    let old = tokens(10, 5, MINUTE);
    for new in [tokens(20, 10, 2 * MINUTE), tokens(30, 0, 2 * MINUTE)] {
        for penalty in [0, 40] {
            let mut both = Both::new();
            let spent = both.same(&[check(OLD, &old, 15)], &[], Mode::Spend);
            assert!(spent[0].allowed);
            if penalty > 0 {
                both.penalty(OLD, &old, penalty);
            }
            let carried = [carry(&old)];
            for (moved, cost, with_old) in [
                (S, 1, true),
                (0, 3, true),
                (30 * S, 1, true),
                (31 * S, 2, false),
                (100 * S, 1, false),
                (7 * S, 4, false),
                (300 * S, 1, false),
            ] {
                both.advance(moved);
                let checks = [check(NEW, &new, cost), check(OLD, &old, cost)];
                let checks = &checks[..if with_old { 2 } else { 1 }];
                both.same(checks, &carried, Mode::Spend);
                both.same(checks, &carried, Mode::Look);
            }
        }
    }
}

/// A sliding log blocked for an hour, moved to a two-minute window that blocks 10 minutes:
/// the hour holds on both sides, to the microsecond, and a block of the moved key's own
/// that ends later is kept.
#[test]
fn blocks_carried_agree_with_the_memory_store() {
    let blocking = |window: Duration, block: Duration| {
        (Quota::new(2, window).unwrap()).with_block(block).unwrap()
    };
    let old = blocking(MINUTE, Duration::from_secs(3_600));
    let new = blocking(2 * MINUTE, Duration::from_secs(600));
    let mut both = Both::new();
    for _ in 0..3 {
        both.same(&[check(OLD, &old, 1)], &[], Mode::Spend);
    }
    let carried = [carry(&old)];
    // To a microsecond before the hour's end, and at it.
    for moved in [S, 120 * S, 600 * S, 2_000 * S, 879 * S - 1, 1] {
        both.advance(moved);
        let decided = both.same(&[check(NEW, &new, 1)], &carried, Mode::Spend);
        let at = both.now_us - T0;
        assert_eq!(decided[0].allowed, at >= 3_600 * S, "at {at} us");
    }
    // A longer block of the moved key's own is kept: blocked for 10 minutes from here, past
    // the old key's hour.
    let mut both = Both::new();
    for _ in 0..3 {
        both.same(&[check(OLD, &old, 1)], &[], Mode::Spend);
    }
    both.advance(3_500 * S);
    for _ in 0..3 {
        both.same(&[check(NEW, &new, 1)], &[], Mode::Spend);
    }
    both.advance(50 * S);
    let decided = both.same(&[check(NEW, &new, 1)], &carried, Mode::Spend);
    assert!(!decided[0].allowed);
    assert_eq!(decided[0].retry_after, Some(Duration::from_secs(550)));
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

/// A quota of `limit` + `burst` a window of `window_us` (a multiple of 12 µs: a bucket's
/// interval is whole microseconds under every limit here), blocking `block_windows` of it.
fn quota(kind: Kind, (limit, burst): (u64, u64), window_us: u64, block_windows: u64) -> Quota {
    let window = Duration::from_micros(window_us);
    Quota::from_parts(limit, window, burst, kind, None)
        .unwrap()
        .with_block(window * block_windows as u32)
        .unwrap()
}

fn settings() -> impl Strategy<Value = (Kind, (u64, u64), u64, u64)> {
    (
        kind(),
        (1..=4u64, 0..=2u64),
        prop_oneof![
            (1..=2_000u64).prop_map(|ms| ms * 3_000),
            (1..=250_000u64).prop_map(|w| w * 12)
        ],
        prop_oneof![Just(0u64), 1..=3u64],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::lua_agrees::cases() / 4))]

    /// Any two quotas (a token bucket's debt carried between buckets, a block between
    /// quotas with one): calls on the old state, an optional penalty, then calls on the moved
    /// one carrying it, spent and looked at, with the old state decided with them or not
    /// (decided with them, carrying its block alone or not: `Carry::block_only`), the old
    /// state read in its own script first or not (`across`: as from another Cluster slot,
    /// `lua/level.lua`): every decision the memory store's.
    #[test]
    fn carried_states_agree_with_the_memory_store(
        across in any::<bool>(),
        (o_kind, o_size, o_window, o_block) in settings(),
        (n_kind, n_size, n_window, n_block) in settings(),
        before in prop::collection::vec((0..=2_000_000u64, 1..=4u64, any::<bool>()), 1..8),
        penalty in prop_oneof![Just(0u64), 1..=50u64],
        after in prop::collection::vec(
            (prop_oneof![0..=2_000u64, 0..=8_000_000u64, 0..=200_000_000u64], 1..=4u64, any::<bool>(), any::<bool>(), any::<bool>()),
            1..16,
        ),
    ) {
        let old = quota(o_kind, o_size, o_window, o_block);
        let new = quota(n_kind, n_size, n_window, n_block);
        let mut both = Both { across, ..Both::new() };
        for (moved, cost, spend) in before {
            both.advance(moved);
            let mode = if spend { Mode::Spend } else { Mode::Look };
            both.same(&[check(OLD, &old, cost.min(old.capacity()))], &[], mode);
        }
        // (The penalty of a token bucket, whose debt it is; the other strategies' adjust
        // modes are compared in lua_adjusts.rs.)
        if penalty > 0 && o_kind == Kind::TokenBucket {
            both.penalty(OLD, &old, penalty);
        }
        for (moved, cost, spend, with_old, block_only) in after {
            both.advance(moved);
            let cost = cost.min(old.capacity()).min(new.capacity());
            let checks = [check(NEW, &new, cost), check(OLD, &old, cost)];
            let checks = &checks[..if with_old { 2 } else { 1 }];
            let mode = if spend { Mode::Spend } else { Mode::Look };
            let carried = [Carry { block_only: with_old && block_only, ..carry(&old) }];
            both.same(checks, &carried, mode);
        }
    }
}

/// What an old state in another Cluster slot grew by between a carried spend's read and its
/// read after, added once ([`across::Across`]), and the runner of interleaved calls
/// ([`across::interleaved`]).
mod across;
/// Moves chained through three keys, carried exactly (a property over quotas and times).
mod chained;
/// The time resets erased and the records of four parts: helper-82's probes, each history
/// on a Cluster's steps against one server's.
mod erased;
/// Carried calls that overlap, some of whose reads after never come: the property over
/// interleaved calls.
mod overlapping;
/// helper-100's probes of a clock read before the read that is not the script's clock.
mod probe100;
/// helper-87's probes of the tickets and the give-backs counted in the erased total.
mod probe87;
/// helper-94's probes of the late refusal: what it leaves, and calls it refuses unstalled.
mod probe94;
/// A call stalled between its read and its script: refused past its wait, nothing written.
mod stalled;
/// The two sides of a history, a Cluster's steps and one server's (`Twins`).
mod twins;
