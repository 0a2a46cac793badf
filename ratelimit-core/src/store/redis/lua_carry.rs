//! Carrying a moved limit's old state (`lua/carry.lua`, through `lua/stacked.lua`), run by Lua
//! 5.1 in the stand-in (`lua_standin.rs`) at a clock the test sets: the rule against
//! [`Carry::debt`], and stacked calls that carry, with the keys and arguments the store
//! sends ([`script_call`]), against the memory store's at the same clock: every decision the
//! same, to the nanosecond a [`Decision`] keeps. Costs are at least 1 (a look at the level is
//! the store's two looks, not the stacked script's: `carries.rs` looks at it on a server).

use std::sync::LazyLock;
use std::time::Duration;

use proptest::prelude::*;

use super::across_slots::{level_call, Given, Read, LEVEL_SCRIPT};
use super::lua_pair::{MAX_WINDOW_US, T0};
use super::lua_standin::{Redis, Reply};
use super::reply::full;
use super::stacked::{carrying, script_call, STACKED_SCRIPT};
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
                        let (erased, pending, wait) = (0, 0, 0);
                        Ok(Some(Given::Held {
                            debt,
                            left,
                            end,
                            erased,
                            pending,
                            wait,
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

const THIRD: &str = "rl:{u}:third";

/// Chained moves, as probes_carry_attacks makes them: a bucket of 10 at a token every 20 s,
/// all spent at the start, carried into a second key by a look at +79.999 s and that one into
/// a third by a look at +159.998 s. On both sides each moved bucket is full again at +200 s
/// exactly, when the first one is (a look at a call of 1 puts it 20 s later, after the
/// call), holding what it holds (3, then 7 tokens: 2 and 6 after the call); the third admits
/// its 10 at +200.5 s. In whole tokens the second was full at +219.999 s (7 tokens
/// from +79.999 s) and the third at +239.998 s (4 more from +159.998 s): 8 admitted.
#[test]
fn chained_moves_carry_the_debt_exactly() {
    let q = tokens(10, 0, Duration::from_secs(200));
    let mut both = Both::new();
    assert!(both.same(&[check(OLD, &q, 10)], &[], Mode::Spend)[0].allowed);
    let after_call = (T0 + 220 * S) * 1_000;
    let from = |key| Carry {
        from: StoreKey::composed(key),
        quota: &q,
        into: 0,
        block_only: false,
    };
    for (at, key, carried, remaining) in [
        (79_999_000, NEW, from(OLD), 2),
        (159_998_000, THIRD, from(NEW), 6),
    ] {
        both.advance(T0 + at - both.now_us);
        let look = both.same(&[check(key, &q, 1)], &[carried], Mode::Look);
        assert_eq!(look[0].remaining, remaining, "at {at} us");
        assert_eq!(look[0].full_at(), after_call, "at {at} us");
    }
    both.advance(T0 + 200_500_000 - both.now_us);
    for call in 0..11 {
        let decided = both.same(&[check(THIRD, &q, 1)], &[from(NEW)], Mode::Spend);
        assert_eq!(decided[0].allowed, call < 10, "call {call}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::lua_agrees::cases() / 4))]

    /// Carrying never gives more than the old state allows (fail closed), on both sides: a
    /// bucket's history (spends, penalties, looks), then its state carried into a moved one
    /// under any bucket quota, which is full again no sooner than the old one; under the same
    /// quota, the moved state then decides every call as the old state itself would have (a
    /// second key given the same history, decided on with no move): never admitting more,
    /// nor less, to the nanosecond, through chained moves (the moved state carried on again
    /// into a third key).
    #[test]
    fn a_carried_state_never_admits_more_than_the_old_one(
        (o_size, o_window) in ((1..=4u64, 0..=2u64), (1..=250_000u64).prop_map(|w| w * 12)),
        (n_size, n_window) in ((1..=4u64, 0..=2u64), (1..=250_000u64).prop_map(|w| w * 12)),
        same in any::<bool>(),
        before in prop::collection::vec((0..=2_000_000u64, 0..=4u64, any::<bool>()), 1..8),
        after in prop::collection::vec(
            (prop_oneof![0..=2_000u64, 0..=8_000_000u64, 0..=200_000_000u64], 1..=4u64, any::<bool>(), any::<bool>()),
            1..16,
        ),
    ) {
        let old = tokens(o_size.0, o_size.1, Duration::from_micros(o_window));
        let new = match same {
            true => old,
            false => tokens(n_size.0, n_size.1, Duration::from_micros(n_window)),
        };
        const CONTROL: &str = "rl:{u}:control";
        let mut both = Both::new();
        // (A cost of 0: a penalty of one token.)
        for (moved, cost, spend) in before {
            both.advance(moved);
            for key in [OLD, CONTROL] {
                match cost {
                    0 => both.penalty(key, &old, 1),
                    cost => {
                        let mode = if spend { Mode::Spend } else { Mode::Look };
                        both.same(&[check(key, &old, cost.min(old.capacity()))], &[], mode);
                    }
                }
            }
        }
        // When a bucket is full again, from a look at a call of 1 (which an admission puts
        // after the call).
        let full = |d: &Decision, q: &Quota| match d.allowed {
            true => d.full_at() - q.interval_nanos(),
            false => d.full_at(),
        };
        let old_full = full(&both.same(&[check(OLD, &old, 1)], &[], Mode::Look)[0], &old);
        let carried = [carry(&old)];
        let moved = full(&both.same(&[check(NEW, &new, 1)], &carried, Mode::Look)[0], &new);
        prop_assert!(moved >= old_full, "full at {moved}, the old state at {old_full}");
        if same {
            prop_assert_eq!(moved, old_full);
        }
        // The state calls are decided on and the one carried into it (under its quota).
        let mut chain = (NEW, OLD, &old);
        for (step, (moved, cost, spend, onwards)) in after.into_iter().enumerate() {
            both.advance(moved);
            if onwards && chain.0 == NEW {
                // Moved on again: into a third key, from the moved one.
                chain = (THIRD, NEW, &new);
            }
            let cost = cost.min(new.capacity());
            let mode = if spend { Mode::Spend } else { Mode::Look };
            let (key, from, quota) = chain;
            let carried = [Carry { from: StoreKey::composed(from), quota, into: 0, block_only: false }];
            let got = both.same(&[check(key, &new, cost)], &carried, mode);
            if same {
                let control = both.same(&[check(CONTROL, &old, cost)], &[], mode);
                prop_assert_eq!(&got, &control, "step {}", step);
            }
        }
    }
}

/// What an old state in another Cluster slot was found to owe more after a call carried it
/// (`Given::Grown`, `run_checked` in stacked.rs): added to the moved bucket whole, once for
/// the same growth whatever number of calls read before it (the mark beside the moved state),
/// only the part past what was added when it grew further, and never past a bucket spent
/// from now (no lockout: what admitted spends leave at most).
#[test]
fn what_an_old_state_grew_by_is_added_once_and_never_past_a_bucket() {
    let q = tokens(10, 5, 2 * MINUTE);
    let interval = q.interval_nanos() / 1_000;
    let redis = Redis::new(T0).unwrap();
    let owed = || match redis.decide_full(&q, NEW, 0, false) {
        Reply::Array(items) => match items[..] {
            [_, _, Reply::Int(reset_at), _, Reply::Int(now), ..] => (reset_at - now) as u64,
            _ => panic!("{items:?}"),
        },
        other => panic!("{other:?}"),
    };
    let grown = |from: u64, to: u64| {
        let checks = [check(NEW, &q, 1)];
        let carried = [carry(&q)];
        let stacked = Stacked::carrying(&checks, &carried, T0 * 1_000, Mode::Look).unwrap();
        let given = [Some(Given::Grown {
            from,
            to,
            lasts: to - from,
            pending: 0,
        })];
        let (keys, args) = script_call(&stacked, &[], false, false, &given, || 0).unwrap();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let reply = redis.eval_source(STACKED_SCRIPT.text(), &keys, &args);
        assert_eq!(reply, Reply::Array(vec![]));
    };
    for _ in 0..5 {
        assert!(matches!(
            redis.decide_full(&q, NEW, 1, true),
            Reply::Array(_)
        ));
    }
    assert_eq!(owed(), 5 * interval);
    let from = 7 * S;
    grown(from, from + 3 * interval);
    assert_eq!(owed(), 8 * interval);
    grown(from, from + 3 * interval);
    assert_eq!(owed(), 8 * interval, "the same growth again");
    grown(from + interval, from + 4 * interval);
    assert_eq!(owed(), 9 * interval, "only what it grew by since");
    grown(from, from + 100 * interval);
    assert_eq!(owed(), 15 * interval, "a bucket spent now, no more");
}

/// One side of [`a_call_whose_read_after_never_came_is_covered_by_the_next`]: a stand-in whose
/// moved bucket carries the old one from another Cluster slot, read there first, as
/// `run_checked` runs it (its read after, and its pending record, by hand).
struct Across<'q> {
    redis: Redis,
    old: &'q Quota,
    new: &'q Quota,
}

impl Across<'_> {
    fn carried(&self) -> [Carry<'_>; 1] {
        [carry(self.old)]
    }

    /// The old state read as in its own slot (`lua/level.lua`).
    fn read(&self) -> Read {
        let (keys, args) = level_call(&self.carried()[0], self.new, WAIT);
        let keys = keys.each_ref().map(String::as_str);
        match self.redis.eval_source(LEVEL_SCRIPT.text(), &keys, &args) {
            Reply::Array(items) => match items[..] {
                [Reply::Int(debt), Reply::Int(left), Reply::Int(at), Reply::Int(erased)] => Read {
                    debt: debt.unsigned_abs(),
                    left: left.unsigned_abs(),
                    at: at.unsigned_abs(),
                    erased: erased.unsigned_abs(),
                },
                _ => panic!("{items:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// A stacked script carrying `given` (or, without it, the old state read beside it, as on
    /// one server): whether it admitted a spend of `cost` (with `cost` 0, it only carries).
    fn script(&self, cost: u64, given: Option<Given>) -> bool {
        let checks = [check(NEW, self.new, cost.max(1))];
        let carried = self.carried();
        let mode = if cost > 0 { Mode::Spend } else { Mode::Look };
        let stacked = Stacked::carrying(&checks, &carried, T0 * 1_000, mode).unwrap();
        let asked: Vec<&Check<'_>> = if cost > 0 {
            checks.iter().collect()
        } else {
            vec![]
        };
        let given = [given];
        let given = if given[0].is_some() { &given[..] } else { &[] };
        let (keys, args) = script_call(&stacked, &asked, cost > 0, false, given, || 0).unwrap();
        let keys: Vec<&str> = (asked.iter().map(|c| c.key.as_str()))
            .chain(keys.iter().map(String::as_str))
            .collect();
        match self.redis.eval_source(STACKED_SCRIPT.text(), &keys, &args) {
            Reply::Array(items) => items.first().is_none_or(|r| *r == Reply::Int(1)),
            other => panic!("{other:?}"),
        }
    }

    /// `run_checked`'s addition after its read after (`after`), for the call of id `pending`
    /// that read `before`: what the old state grew by since, added (`Given::Grown`), its
    /// pending record ended.
    fn added(&self, before: &Read, after: &Read, pending: u64) {
        let (from, by) = (before.end(), after.grown_since(before));
        let lasts = after.debt;
        let to = from + by;
        let grown = Given::Grown {
            from,
            to,
            lasts,
            pending,
        };
        assert!(self.script(0, Some(grown)));
    }

    /// `key` reset (`lua/reset.lua`, as `RedisStore::reset` sends it).
    fn reset(&self, key: &str) {
        use super::ledger::{block_key, erased_key, ledger_key, stamp_key, RESET_SCRIPT};
        let beside = [
            ledger_key(key),
            stamp_key(key),
            block_key(key),
            erased_key(key),
        ];
        let keys: Vec<&str> = [key]
            .into_iter()
            .chain(beside.iter().map(String::as_str))
            .collect();
        let reply = self.redis.eval_source(RESET_SCRIPT.text(), &keys, &[0]);
        assert!(matches!(reply, Reply::Int(0 | 1)), "{reply:?}");
    }

    /// A reward of `units` on the old state (the strategy's adjust mode, as `lua/adjust.lua`
    /// runs it).
    fn reward(&self, old: &Quota, units: u64) {
        let reply = self.redis.adjust(old, OLD, units, false);
        assert!(matches!(reply, Reply::Int(_)), "{reply:?}");
    }

    /// When a bucket at `key` under `quota` is full again.
    fn end(&self, key: &str, quota: &Quota) -> u64 {
        match self.redis.decide_full(quota, key, 0, false) {
            Reply::Array(items) => match items[..] {
                [_, _, Reply::Int(reset_at), ..] => reset_at.unsigned_abs(),
                _ => panic!("{items:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

/// How long after a mover's script its read after has come or never will, in the stand-in's
/// pending records (`Given::Held`'s wait): a second, less than any step of the clock
/// [`interleaved`] takes.
const WAIT: u64 = S;

/// One step of a history [`interleaved`] runs, beside the movers' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Besides {
    /// A spend of so many seconds on the old state by a pod the reload has not reached.
    OldSpend(u64),
    /// The old state reset (`lua/reset.lua`) by such a pod.
    OldReset,
    /// The clock moved on by so many seconds (the old bucket refilling by time alone).
    Later(u64),
}

/// What a history of calls carrying a bucket read in another Cluster slot leaves: `movers`
/// (each its cost and whether its read after never comes) whose steps `steps` interleave
/// (`Err`: a step beside them, [`Besides`]; `Ok(i)`: the `i`-th mover's next step, from 1: its
/// read, its script, its read after, the addition after that), then each mover's steps left,
/// then one more call; the moved bucket a token every `new_interval` seconds, the old one
/// every second. The clock moves on only while no mover waits between its read and its script,
/// nor one that reads again between its script and its addition (the steps of a call, which
/// a bucket does not refill within: a read after of a full bucket adds nothing,
/// `Read::grown_since`); a step of it that would is left out.
/// When the moved bucket is full again on the Cluster and on one server (each script reading
/// the old state beside it, at its turn), how much the old state was spent and erased by
/// resets meanwhile and twice how far the clock moved on (microseconds), and whether a
/// pending record is left.
fn interleaved(
    movers: &[(u64, bool)],
    steps: &[Result<usize, Besides>],
    new_interval: u64,
) -> (u64, u64, u64, bool) {
    // Room enough that nothing is refused nor capped: what is compared is what is owed.
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(1_000, 0, Duration::from_secs(1_000 * new_interval));
    let side = || Across {
        redis: Redis::new(T0).unwrap(),
        old: &old,
        new: &new,
    };
    let (cluster, server) = (side(), side());
    let old_spend = |cost: u64| {
        for s in [&cluster, &server] {
            assert!(matches!(
                s.redis.decide_full(&old, OLD, cost, true),
                Reply::Array(_)
            ));
        }
    };
    old_spend(5);
    let mut now = T0;
    let mut moved = 0;
    // Each mover: its cost, whether its read after never comes, its id, its phase (0: to
    // read, 1: to run its script, 2: to read again, 3: to add what that found, 4: done)
    // and its reads.
    type Mover = (u64, bool, u64, u8, Option<Read>, Option<Read>);
    let mut state: Vec<Mover> = (movers.iter().enumerate())
        .map(|(i, &(cost, lost))| (cost, lost, i as u64 + 1, 0, None, None))
        .collect();
    let step = |m: &mut Mover| {
        let (cost, lost, id, phase, read, again) = m;
        match *phase {
            0 => *read = Some(cluster.read()),
            1 => {
                let r = read.unwrap();
                let (end, pending) = (r.end(), *id);
                let held = Given::Held {
                    debt: r.debt,
                    left: r.left,
                    end,
                    erased: r.erased,
                    pending,
                    wait: WAIT,
                };
                assert!(cluster.script(*cost, Some(held)), "refused on the Cluster");
                assert!(server.script(*cost, None), "refused on one server");
            }
            2 if !*lost => *again = Some(cluster.read()),
            3 if !*lost => cluster.added(&read.unwrap(), &again.unwrap(), *id),
            _ => {}
        }
        *phase = (*phase + 1).min(4);
    };
    for &which in steps {
        match which {
            Err(Besides::OldSpend(cost)) => {
                old_spend(cost);
                moved += cost * S;
            }
            Err(Besides::OldReset) => {
                // (A read before the reset carries what it erased.)
                moved += cluster.end(OLD, &old).saturating_sub(now);
                for s in [&cluster, &server] {
                    s.reset(OLD);
                }
            }
            Err(Besides::Later(seconds)) => {
                let waiting = |m: &Mover| m.3 == 1 || (!m.1 && (2..=3).contains(&m.3));
                if !state.iter().any(waiting) {
                    now += seconds * S;
                    // (Twice: see the property.)
                    moved += 2 * seconds * S;
                    cluster.redis.set_time(now);
                    server.redis.set_time(now);
                }
            }
            Ok(i) => {
                if let Some(m) = state.get_mut(i.wrapping_sub(1)) {
                    step(m);
                }
            }
        }
    }
    for m in &mut state {
        while m.3 < 4 {
            step(m);
        }
    }
    let mut last = (1, false, 99, 0, None, None);
    while last.3 < 4 {
        step(&mut last);
    }
    let (on_cluster, on_server) = (cluster.end(NEW, &new), server.end(NEW, &new));
    let pending = super::across_slots::pending_key(NEW, OLD);
    (
        on_cluster,
        on_server,
        moved,
        cluster.redis.expiry(&pending).is_some(),
    )
}

/// Calls that overlap (each one's script before the read after of the one before), carrying
/// a full old bucket nothing spends, the clock half a second on at each: nothing grew, and the
/// moved bucket owes what one server's does after 40 of them. Each script finds the record
/// of the call before it, whose read after is still to come (within its wait): adding from a
/// full read whatever the record, as was suggested, added the half second between two reads
/// at every call (19.5 s more after 40), and a moved bucket under steady calls never refilled.
#[test]
fn overlapping_calls_on_a_full_old_bucket_add_nothing() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let side = || Across {
        redis: Redis::new(T0).unwrap(),
        old: &old,
        new: &new,
    };
    let (cluster, server) = (side(), side());
    let mut now = T0;
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=40 {
        let read = cluster.read();
        let held = Given::Held {
            debt: read.debt,
            left: read.left,
            end: read.end(),
            erased: read.erased,
            pending: id,
            wait: WAIT,
        };
        assert!(cluster.script(1, Some(held)), "call {id} on the Cluster");
        assert!(server.script(1, None), "call {id} on one server");
        if let Some((read, id)) = before.take() {
            cluster.added(&read, &cluster.read(), id);
        }
        before = Some((read, id));
        now += S / 2;
        cluster.redis.set_time(now);
        server.redis.set_time(now);
    }
    let (read, id) = before.unwrap();
    cluster.added(&read, &cluster.read(), id);
    let (on_cluster, on_server) = (cluster.end(NEW, &new), server.end(NEW, &new));
    assert_eq!(on_cluster, on_server);
    // (40 calls of a second each, half a second apart: owing 20 s after the last.)
    assert_eq!(on_server - now, 20 * S);
}

/// A call whose script overwrote the pending record of one that had read again, and never
/// read again itself (its task dropped), 3 s spent on the old state between its read and its
/// script: the first call's addition leaves the record (not its own), and the next call
/// adds what the old state grew by since the second's read, 3 s (a second more than one
/// server's bucket owes: the whole growth added). Ended by any read after, the record was
/// gone, and the moved bucket owed a second less than on one server (9 s against 10).
#[test]
fn a_record_overwritten_after_a_read_after_stands_for_its_own_call() {
    let movers = [(1, false), (1, true)];
    let (first, second) = (Ok(1), Ok(2));
    let steps = [
        first,
        first,
        first,
        second,
        Err(Besides::OldSpend(3)),
        second,
        first,
    ];
    let (on_cluster, on_server, grew, left) = interleaved(&movers, &steps, 1);
    assert_eq!((on_cluster - T0, on_server - T0), (11 * S, 10 * S));
    assert_eq!(grew, 3 * S);
    assert!(!left);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::lua_agrees::cases() / 4))]

    /// Calls carrying a bucket read in another Cluster slot (up to three at once, their reads,
    /// scripts, reads after and additions interleaved with spends on the old state by a pod
    /// the reload has not reached, resets of it by such a pod, and the clock moving on, the
    /// old bucket refilling by time alone), some never reading again (their task dropped
    /// with a runtime shut down), then one more call ([`interleaved`]): the moved bucket owes
    /// no less than on one server, and no more than that and what the old state was spent
    /// and erased by resets (a read before a reset carries the debt it read) and twice how
    /// far the clock moved on meanwhile (each part of the old state's end added once,
    /// whichever call added it: the mark and the pending record, `grow` in `lua/carry.lua`;
    /// its end moves on with the clock where it is read full, or spent again after a refill,
    /// and an addition to a moved bucket that refilled counts from the time it is made);
    /// no pending record is left.
    #[test]
    fn a_call_whose_read_after_never_came_is_covered_by_the_next(
        movers in prop::collection::vec((1..=3u64, any::<bool>()), 1..=3),
        steps in prop::collection::vec(
            prop_oneof![
                4 => (1..=3usize).prop_map(Ok),
                2 => (1..=4u64).prop_map(|c| Err(Besides::OldSpend(c))),
                1 => Just(Err(Besides::OldReset)),
                1 => (2..=8u64).prop_map(|s| Err(Besides::Later(s))),
            ],
            0..40,
        ),
        new_interval in prop_oneof![Just(1u64), Just(2), Just(3)],
    ) {
        let (on_cluster, on_server, moved, left) = interleaved(&movers, &steps, new_interval);
        prop_assert!(on_cluster >= on_server, "{on_cluster} owed where one server owes {on_server}");
        prop_assert!(
            on_cluster - on_server <= moved,
            "{on_cluster} owed, one server {on_server}, the old state spent, erased and the clock moved (twice) by {moved}"
        );
        prop_assert!(!left, "a pending record left");
    }
}

// helper-82's probes of the erased total and the four-part pending records, on the stand-in
// at a hand-driven clock: each history run on a Cluster's steps (a read in the old state's
// slot, the script, the read after, its addition) and on one server (the script reading the
// old state beside it, at its turn), the twin; what the moved bucket owes after compared.

/// The two sides of a helper-82 history: the Cluster's and one server's (the twin), the old
/// bucket a token a second and the moved one too, both of 1000 (nothing capped).
struct Twins<'q> {
    cluster: Across<'q>,
    server: Across<'q>,
    old: &'q Quota,
    now: u64,
}

impl<'q> Twins<'q> {
    fn new(old: &'q Quota, new: &'q Quota) -> Self {
        let side = || Across {
            redis: Redis::new(T0).unwrap(),
            old,
            new,
        };
        Twins {
            cluster: side(),
            server: side(),
            old,
            now: T0,
        }
    }

    /// A spend of `cost` seconds on the old state, on both sides.
    fn old_spend(&self, cost: u64) {
        for s in [&self.cluster, &self.server] {
            let reply = s.redis.decide_full(self.old, OLD, cost, true);
            assert!(matches!(reply, Reply::Array(_)), "{reply:?}");
        }
    }

    /// A reward of `units` on the old state, on both sides.
    fn old_reward(&self, units: u64) {
        for s in [&self.cluster, &self.server] {
            s.reward(self.old, units);
        }
    }

    /// A spend of `cost` seconds on the old state kept for a refund, on both sides: its
    /// instant (the admitted reply's `reset_at`, microseconds), where its refund finds it.
    fn old_kept_spend(&self, cost: u64) -> u64 {
        let mut spent = None;
        for s in [&self.cluster, &self.server] {
            match s.redis.decide_full(self.old, OLD, cost, true) {
                Reply::Array(items) => match items[..] {
                    [Reply::Int(1), _, Reply::Int(reset_at), ..] => spent = Some(reset_at),
                    _ => panic!("{items:?}"),
                },
                other => panic!("{other:?}"),
            }
        }
        spent.unwrap().unsigned_abs()
    }

    /// The spend of `cost` at `spent_us` given back on both sides (the strategy's refund
    /// mode, as `lua/refund.lua` runs it once the stamp is checked).
    fn old_refund(&self, cost: u64, spent_us: u64) {
        for s in [&self.cluster, &self.server] {
            let before = s.end(OLD, self.old);
            let reply = s.redis.refund(self.old, OLD, cost, (spent_us, 0), true);
            assert!(matches!(reply, Reply::Int(_)), "{reply:?}");
            assert_eq!(s.end(OLD, self.old), before - cost * S, "given back");
        }
    }

    /// A lease of `slice` seconds (its id `id`) granted on the old state for a call of 1, on
    /// both sides (`lua/lease_grant.lua`, as `RedisStore`'s leases send it): the arrival time
    /// it wrote.
    fn old_lease(&self, slice: u64, id: u64) -> u64 {
        use super::lease::GRANT_SCRIPT;
        let [first, second] = super::scripts::arguments(self.old);
        let ledger = super::ledger::ledger_key(OLD);
        let args = [4, first, second, 1, slice, id, 0];
        let mut wrote = None;
        for s in [&self.cluster, &self.server] {
            match s
                .redis
                .eval_source(GRANT_SCRIPT.text(), &[OLD, &ledger], &args)
            {
                Reply::Array(items) => match items[..] {
                    [Reply::Int(granted), Reply::Int(1), _, Reply::Int(reset_at), ..] => {
                        assert_eq!(granted.unsigned_abs(), slice);
                        wrote = Some(reset_at.unsigned_abs());
                    }
                    _ => panic!("{items:?}"),
                },
                other => panic!("{other:?}"),
            }
        }
        wrote.unwrap()
    }

    /// `units` of the lease of id `id` (which wrote the arrival time `tat`) given back on both
    /// sides (`lua/lease_return.lua`, as `RedisStore`'s leases send it).
    fn old_lease_return(&self, units: u64, tat: u64, id: u64) {
        use super::lease::RETURN_SCRIPT;
        let ledger = super::ledger::ledger_key(OLD);
        let interval = self.old.interval_nanos() / 1_000;
        let args = [4, units, tat, interval, id];
        for s in [&self.cluster, &self.server] {
            let reply = s
                .redis
                .eval_source(RETURN_SCRIPT.text(), &[OLD, &ledger], &args);
            assert_eq!(reply, Reply::Int(units as i64));
        }
    }

    fn old_reset(&self) {
        for s in [&self.cluster, &self.server] {
            s.reset(OLD);
        }
    }

    fn later(&mut self, us: u64) {
        self.now += us;
        self.cluster.redis.set_time(self.now);
        self.server.redis.set_time(self.now);
    }

    /// A Cluster call's read (its id `id`), then its script with the twin's.
    fn read_and_script(&self, id: u64) -> Read {
        let read = self.cluster.read();
        self.script(id, &read);
        read
    }

    /// The script of the call of id `id` that read `read`, on both sides.
    fn script(&self, id: u64, read: &Read) {
        self.script_waiting(id, read, WAIT);
    }

    /// [`script`](Self::script) by a pod whose read after comes within `wait` or never.
    fn script_waiting(&self, id: u64, read: &Read, wait: u64) {
        let held = Given::Held {
            debt: read.debt,
            left: read.left,
            end: read.end(),
            erased: read.erased,
            pending: id,
            wait,
        };
        assert!(self.cluster.script(1, Some(held)), "refused on the Cluster");
        assert!(self.server.script(1, None), "refused on one server");
    }

    /// The read after of the call of id `id` that read `read`, and its addition.
    fn read_after(&self, id: u64, read: &Read) {
        self.cluster.added(read, &self.cluster.read(), id);
    }

    /// One more whole call on both sides, then what the moved bucket owes on each
    /// (microseconds from now).
    fn owed(&self) -> (u64, u64) {
        let read = self.read_and_script(99);
        self.read_after(99, &read);
        let new = self.cluster.new;
        let owes = |s: &Across<'_>| s.end(NEW, new).saturating_sub(self.now);
        (owes(&self.cluster), owes(&self.server))
    }
}

fn seconds_buckets() -> (Quota, Quota) {
    (
        tokens(1_000, 0, Duration::from_secs(1_000)),
        tokens(1_000, 0, Duration::from_secs(1_000)),
    )
}

/// A reward on the old state (by a pod the reload has not reached: `service.reward`) between
/// a carried spend's script and its read after, of the 4 s spent there between its read and
/// its script: one server's script carried those 4 s into the moved bucket before the reward
/// (a reward of the old state reaches no moved state), so it owes 11 s after one more call;
/// the read after found the old end moved back to what the call read (a reward moves an end
/// back as a reset does, and nothing keeps what it erased) and added nothing: 7 s.
/// Not fixed: counting what a reward, a refund or a lease's units given back move an end back
/// by in the erased total, as a reset's, closes it (tried: 11 s on both), but every spend and
/// its refund between two overlapping calls' reads then reads as growth the first call may
/// have missed, and the moved bucket under steady calls drifts towards a lockout
/// ([`probe82_steady_overlapping_calls_through_spends_refunded`]: 81 s owed where one server
/// owes 21 s, after 40 calls); what this loses is at most what the old state was spent
/// between one call's read and its script (a round trip) and given back before its read after.
#[test]
#[ignore = "FOUND: 7 s owed on the Cluster where one server owes 11 s (a reward of the 4 s spent between a carried spend's read and its script, before its read after)"]
fn probe82_a_reward_of_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reward(4);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// The same with a refund of those 4 s (a spend kept on the old state, given back after the
/// call's script, `lua/refund.lua`): 7 s owed where one server owes 11 s (not fixed, as the
/// reward: [`probe82_a_reward_of_the_old_state_before_the_read_after`]).
#[test]
#[ignore = "FOUND: 7 s owed on the Cluster where one server owes 11 s (a refund of the 4 s spent between a carried spend's read and its script, before its read after)"]
fn probe82_a_refund_on_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    let spent = twins.old_kept_spend(4);
    twins.script(1, &read);
    twins.old_refund(4, spent);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// The same reward left standing with the call's pending record (its read after never came):
/// the next call reads the old end moved back, and adds nothing from its record: 7 s against
/// 11 s (not fixed, as [`probe82_a_reward_of_the_old_state_before_the_read_after`]).
#[test]
#[ignore = "FOUND: 7 s owed on the Cluster where one server owes 11 s (a reward of the 4 s a call missed while its record stands)"]
fn probe82_a_reward_of_the_old_state_while_a_record_stands() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reward(4);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// Two resets between a carried spend's script and its read after, 3 s spent on the old
/// state between them: the erased total holds both (9 s, then 3 s), so the read after adds
/// the 4 s the call missed and the 3 s the twin's second reset erased (over by what the old
/// state was spent and erased since, never under).
#[test]
fn probe82_two_resets_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.old_reset();
    twins.old_spend(3);
    twins.old_reset();
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (14 * S, 11 * S));
}

/// A reset before any carrying read made the erased key writes none (nothing carries the old
/// state yet): the first read finds it full, as the twin's first script does; then a reset
/// after the read, before the script (the twin's script reads the old state reset): the
/// erased total holds it, and the Cluster owes no less.
#[test]
fn probe82_a_reset_before_the_first_read_and_before_the_script() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    twins.old_reset();
    let erased = super::ledger::erased_key(OLD);
    assert_eq!(twins.cluster.redis.expiry(&erased), None, "nothing written");
    let read = twins.cluster.read();
    assert_eq!((read.debt, read.erased), (0, 0));
    twins.old_spend(6);
    twins.script(1, &read);
    twins.read_after(1, &read);
    let read = twins.cluster.read();
    twins.old_spend(2);
    twins.old_reset();
    twins.script(2, &read);
    twins.read_after(2, &read);
    let (on_cluster, on_server) = twins.owed();
    // One server: 6 s carried, the three calls' 3 s; the Cluster the 2 s spent then erased
    // between the second call's read and its script too.
    assert_eq!((on_cluster, on_server), (11 * S, 9 * S));
}

/// A runtime stalled between a carried spend's script and its read after past its wait: the
/// next call, reading the old state still owing (its record past or not), adds the 4 s the
/// first missed once; the first call's read after, coming late, adds nothing on top (the
/// mark): the twin's 10 s after one more call, exactly.
#[test]
fn probe82_a_read_after_late_past_its_wait_adds_nothing_twice() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.later(WAIT + S);
    let second = twins.read_and_script(2);
    twins.read_after(1, &read);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (10 * S, 10 * S));
}

/// The same stall, the old bucket refilled by time alone before the next call reads it (12 s
/// later, full): the first call's record past its wait, the next call adds from it up to the
/// time read (7 s, where 4 were missed), and the late read after of the full bucket adds
/// nothing: an over-refusal of at most the time between the two reads, never an admission.
#[test]
fn probe82_a_read_after_late_past_a_refill_over_refuses_boundedly() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script(1, &read);
    twins.later(12 * S);
    let second = twins.read_and_script(2);
    assert_eq!(second.debt, 0);
    twins.read_after(1, &read);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (9 * S, 2 * S));
    assert!(on_cluster - on_server <= 12 * S);
}

/// Pods with different store timeouts: the first call's pod waits 16 s for its read after (a
/// 5 s timeout: three and a second), which never comes; the next call, by a pod of a 100 ms
/// timeout (1.3 s), reads the old bucket refilled 10 s later, full, within the first record's
/// wait: nothing is added from it, and it is overwritten. What the first call missed (4 s
/// spent between its read and its script) is lost: RELIABILITY.md item 12's leftover, bounded
/// by the writer's wait (a 5 s pod's is 16 s of the old bucket), never by the reader's.
#[test]
fn probe82_a_record_of_a_slow_pod_read_full_by_a_fast_one() {
    let (old, new) = seconds_buckets();
    let mut twins = Twins::new(&old, &new);
    let (slow, fast) = (16 * S, 1_300_000);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_spend(4);
    twins.script_waiting(1, &read, slow);
    twins.later(10 * S);
    let second = twins.cluster.read();
    assert_eq!(second.debt, 0);
    twins.script_waiting(2, &second, fast);
    twins.read_after(2, &second);
    let (on_cluster, on_server) = twins.owed();
    // One server: 2 s; the Cluster lost the 4 s: at the end of the first call's carry (6 s,
    // refilled by now) nothing more.
    assert_eq!(on_server, 2 * S);
    assert!(
        on_server - on_cluster.min(on_server) <= 4 * S,
        "{on_cluster} against {on_server}"
    );
}

/// A lease granted on the old state (4 s, by a pod the reload has not reached, its hot key)
/// between a carried spend's read and its script, and 3 s of it given back unspent (the pod
/// idle) before the read after: one server's script carried the lease whole (11 s owed after
/// one more call); the read after found the old end moved back and added 1 s: 8 s (not
/// fixed, as [`probe82_a_reward_of_the_old_state_before_the_read_after`]).
#[test]
#[ignore = "FOUND: 8 s owed on the Cluster where one server owes 11 s (3 s of a lease granted between a carried spend's read and its script given back before its read after)"]
fn probe82_a_lease_given_back_on_the_old_state_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    let tat = twins.old_lease(4, 9);
    assert_eq!(tat, T0 + 9 * S);
    twins.script(1, &read);
    twins.old_lease_return(3, tat, 9);
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (11 * S, 11 * S));
}

/// A reset of the old state with a lease out (4 s granted between a carried spend's read and
/// its script, kept counted by the reset: `lua/reset.lua`) before the read after: the reset
/// added the whole end it found to the erased key (9 s), the leased 4 s it kept too, which
/// the read after counts twice: 15 s owed where one server owes 11 s, an over-refusal of the
/// leased units' time, no more (which a return of them, not counted, would take back).
#[test]
fn probe82_a_reset_with_a_lease_out_before_the_read_after() {
    let (old, new) = seconds_buckets();
    let twins = Twins::new(&old, &new);
    twins.old_spend(5);
    let read = twins.cluster.read();
    twins.old_lease(4, 9);
    twins.script(1, &read);
    twins.old_reset();
    assert_eq!(twins.cluster.end(OLD, &old), T0 + 4 * S, "the lease kept");
    twins.read_after(1, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (15 * S, 11 * S));
}

/// A runtime stalled 10 s between a carried spend's read and its script (a script sent late
/// runs all the same: the call's timeout is checked when its future is polled again), the
/// old state spent 28 s meanwhile, after a reset had erased 100 s (the erased total then
/// 100 s), its read after lost (a runtime shut down): its record, written at the script,
/// outlives the erased key its read kept (from the read: twice its wait, a full moved bucket
/// and 3 s; the record from the script: its wait, a full moved bucket and a second), and the
/// next call, reading the key made again (0), reads ends 100 s below the record's: nothing is
/// added from it, and the carry's rule takes the old debt left (2 s). Lost: the stalled call's
/// own spend (1 s: 3 s owed where one server owes 4 s), as when its record expires
/// (`probe_a_standing_record_then_expired`, carries.rs: 5 against 4), only sooner. A script
/// refusing a read older than its wait (its time less the read's, `end - debt - erased`)
/// would close it, but turn the stalled call into an error, which `FailurePolicy::Allow`
/// admits uncounted: not done.
#[test]
#[ignore = "FOUND: 3 s owed on the Cluster where one server owes 4 s (the stalled call's own spend), after a 10 s stall between read and script and the read after lost"]
fn probe82_a_stall_between_read_and_script_outlives_the_erased_key() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(20, 0, Duration::from_secs(20));
    let mut twins = Twins::new(&old, &new);
    let first = twins.read_and_script(1);
    twins.read_after(1, &first);
    twins.old_spend(100);
    twins.old_reset();
    let read = twins.cluster.read();
    assert_eq!((read.debt, read.erased), (0, 100 * S));
    twins.old_spend(28);
    twins.later(10 * S);
    twins.script(2, &read);
    twins.later(16 * S);
    let erased = super::ledger::erased_key(OLD);
    let pending = super::across_slots::pending_key(NEW, OLD);
    assert_eq!(
        twins.cluster.redis.expiry(&erased),
        None,
        "the erased key expired"
    );
    assert!(
        twins.cluster.redis.expiry(&pending).is_some(),
        "the record stands"
    );
    let (on_cluster, on_server) = twins.owed();
    assert!(
        on_cluster >= on_server,
        "{on_cluster} owed on the Cluster, {on_server} on one server"
    );
}

/// Steady overlapping calls (each one's script before the read after of the one before, half
/// a second apart, 60 of them) carrying an old bucket a pod in the old window spends 5 s of
/// at the 20th and resets at the 22nd (the erased total grows once): the moved bucket owes
/// no less than one server's, more by what the reset erased and the half second between two
/// reads (added once, from the first full read after the reset: 36.5 s against 31 s), and
/// refills: no lockout.
#[test]
fn probe82_steady_overlapping_calls_through_a_reset_still_refill() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=60 {
        let read = twins.cluster.read();
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        match id {
            20 => twins.old_spend(5),
            22 => twins.old_reset(),
            _ => {}
        }
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let (on_cluster, on_server) = twins.owed();
    // (The reset erased 4 s, a second after the 5 s spent; the half second between the two
    // reads around it added with it.)
    assert_eq!((on_cluster, on_server), (36 * S + S / 2, 31 * S));
    twins.later(on_cluster + S);
    assert_eq!(twins.owed(), (S, S), "refilled");
}

/// Steady overlapping calls (half a second apart, 40 of them) while a pod in the old window
/// spends 1 s on the old state and has it refunded between each two (its own calls failing):
/// each spend and its refund fall after one call's script and before the next's, so one
/// server's moved bucket owes what the calls spent, 21 s, and the Cluster's the same: a refund
/// counted in the erased total (as a reset's) read each pair as growth a call may have missed,
/// 81 s after 40 calls, towards a lockout (why
/// [`probe82_a_reward_of_the_old_state_before_the_read_after`] is left).
#[test]
fn probe82_steady_overlapping_calls_through_spends_refunded() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=40 {
        let read = twins.cluster.read();
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        let spent = twins.old_kept_spend(1);
        twins.old_refund(1, spent);
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (21 * S, 21 * S));
}

/// The same steady calls with the old state spent 1 s and reset between each two (by a pod
/// the reload has not reached), where the refunds were: a reset is counted in the erased
/// total, so each reads as growth a call may have missed (the 1 s and the half second to the
/// next read): 81 s owed where one server owes 21 s after 40 calls, the drift a refund counted
/// so would have had; an over-refusal left for resets, which no call makes, never past a full
/// moved bucket, and refilled once the resets stop.
#[test]
fn probe82_steady_overlapping_calls_through_resets_drift_boundedly() {
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(100, 0, Duration::from_secs(100));
    let mut twins = Twins::new(&old, &new);
    let mut before: Option<(Read, u64)> = None;
    for id in 1..=40 {
        let read = twins.cluster.read();
        twins.script(id, &read);
        if let Some((read, id)) = before.take() {
            twins.read_after(id, &read);
        }
        before = Some((read, id));
        twins.old_spend(1);
        twins.old_reset();
        twins.later(S / 2);
    }
    let (read, id) = before.unwrap();
    twins.read_after(id, &read);
    let (on_cluster, on_server) = twins.owed();
    assert_eq!((on_cluster, on_server), (81 * S, 21 * S));
    twins.later(on_cluster + S);
    assert_eq!(twins.owed(), (S, S), "refilled");
}
