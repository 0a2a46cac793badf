//! Refunds through the scripts' refund mode against `Algorithm::refund`, run by Lua 5.1 in the
//! stand-in (`lua_standin.rs`) between calls decided on both sides as `lua_agrees.rs` decides
//! them (`lua_pair.rs`). A spend kept for a refund is asked with the full reply, as the stacked
//! script asks it: its `reset_at` is the refund's `spent`, exact on both sides (the quota read
//! in microseconds, one number). A refund is asked (ARGV[4] = 3, which writes nothing), then
//! given (2), and given on the algorithm's state at the same clock: the answers must agree
//! (1 for `true`), a refund that gives nothing writes nothing, and every call after it is
//! decided alike.
//!
//! Refunds are of earlier admitted spends, each given back at most once with its own `spent`
//! and cost; and besides, of any spend with a wrong `spent` (a few microseconds off, a share of
//! the window off, another spend's) or cost (one off), which must give back nothing or what
//! the algorithm gives for it. The clock moves as before a call, or lands on the spend's
//! `reset_at` give or take a few microseconds.
//!
//! One more difference than `lua_agrees.rs` documents: a refund does not move a sliding log's
//! expiry back (it may remove its newest entry), so its key may outlive its state.
//!
//! Each property runs as many cases as `lua_agrees.rs`' (1024, `PROPTEST_CASES` overrides) of up
//! to 60 operations: about 10 s for the three in a debug build on two cores.

use proptest::prelude::*;

use super::lua_agrees::{at_the_bound, cases, cost, large, moved, small, Cost};
use super::lua_pair::{Limits, Move, Pair, KEY, T_MAX, T_MIN};
use super::lua_standin::{Redis, Reply};
use crate::syntax::Strategy as Kind;

/// An admitted spend kept for a refund: its cost and `reset_at`, the algorithm's and the
/// script's (the same number, asserted when it was decided), and whether it is still to be
/// given back.
#[derive(Debug)]
struct Spend {
    cost: u64,
    rust: u64,
    lua: u64,
    /// The state's shift when it was made (in the units both sides count in here).
    shift: u64,
    open: bool,
}

/// The `spent` a refund gives.
#[derive(Debug, Clone)]
enum Spent {
    /// The spend's own.
    Right,
    /// A few microseconds off.
    Off(i64),
    /// Per mille of the window off.
    Shift(i64),
    /// Another spend's (any, by index).
    Other(usize),
}

/// Where the clock is for a refund.
#[derive(Debug, Clone)]
enum When {
    /// Moved as before a call.
    Moved(Move),
    /// At the spend's `reset_at`, give or take a few microseconds.
    AtSpent(i64),
}

#[derive(Debug, Clone)]
enum Op {
    /// A call; `keep`: a spend kept for a refund (the full reply).
    Call {
        moved: Move,
        cost: Cost,
        commit: bool,
        keep: bool,
    },
    /// A refund of the `pick`-th spend still open (modulo their number), with its cost
    /// `extra` off.
    Refund {
        when: When,
        pick: usize,
        spent: Spent,
        extra: i64,
    },
}

/// What the key holds: its type, its value and its expiry.
fn held(redis: &Redis) -> [Result<Reply, String>; 3] {
    let kind = redis.command(&["TYPE", KEY]);
    let value = match &kind {
        Ok(Reply::Status(k)) if k == "string" => redis.command(&["GET", KEY]),
        Ok(Reply::Status(k)) if k == "list" => redis.command(&["LRANGE", KEY, "0", "-1"]),
        Ok(Reply::Status(k)) if k == "hash" => redis.command(&["HGETALL", KEY]),
        _ => Ok(Reply::Nil),
    };
    [kind, value, redis.command(&["PEXPIRETIME", KEY])]
}

/// A refund on both sides at the clock, compared; whether it gave back.
fn refund(
    pair: &mut Pair,
    cost: u64,
    (rust_spent, lua_spent, shift): (u64, u64, u64),
    what: &str,
) -> bool {
    let before = held(&pair.redis);
    let lua = (lua_spent, shift);
    let asked = pair.redis.refund(&pair.quota, KEY, cost, lua, false);
    assert_eq!(held(&pair.redis), before, "{what}: asking wrote");
    let given = pair.redis.refund(&pair.quota, KEY, cost, lua, true);
    let prior = pair.state.clone();
    let spent = crate::algorithm::Spend {
        at: rust_spent,
        shift,
    };
    let mut after = pair.state.clone();
    let mut rust = after.refund(spent, pair.now, &pair.q, cost);
    // The scripts keep a token bucket's places and shift below `MAX_NOW` in microseconds,
    // Rust in nanoseconds, and both sides count in the same units here: past the scripts'
    // bound the script gives nothing (fail closed), where Rust's bound is a thousand times
    // further.
    let bound = crate::algorithm::MAX_NOW / 1_000;
    if given == Reply::Int(0) && (rust_spent.saturating_add(shift) > bound || after.shift() > bound)
    {
        rust = false;
    } else {
        pair.state = after;
    }
    assert_eq!(asked, given, "{what}: asked, then given");
    assert_eq!(
        given,
        Reply::Int(i64::from(rust)),
        "{what}: a refund of {cost} spent at {lua_spent}, at {} on {prior:?} (held {before:?})",
        pair.now
    );
    if !rust {
        assert_eq!(held(&pair.redis), before, "{what}: gave nothing, wrote");
    }
    rust
}

/// Runs `ops` on the script and the algorithm, comparing every verdict and every refund;
/// `shared`: the fixed window's hot path through the shared script. Returns how many refunds
/// gave back.
fn refunds_agree(limits: &Limits, ops: &[Op], shared: bool) -> usize {
    let mut pair = Pair::new(limits, shared);
    let mut spends: Vec<Spend> = Vec::new();
    let mut given = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Call {
                moved,
                cost,
                commit,
                keep,
            } => {
                pair.tick(moved);
                let what = format!("{limits:?}, op {i}: {op:?} at {}", pair.now);
                pair.expiry(&what);
                let cost = cost.of(pair.q.capacity());
                let commit = *commit && cost > 0;
                let full = *keep;
                let decided = pair.decide(cost, commit, full, &what);
                if let Some((lua, rust)) = decided.filter(|(v, _)| *keep && commit && v.allowed) {
                    let (rust, lua, open) = (rust.reset_at, lua.reset_at, true);
                    let shift = pair.state.shift();
                    spends.push(Spend {
                        cost,
                        rust,
                        lua,
                        shift,
                        open,
                    });
                }
            }
            Op::Refund {
                when,
                pick,
                spent,
                extra,
            } => {
                let open: Vec<usize> = (0..spends.len()).filter(|&k| spends[k].open).collect();
                let Some(&k) = open.get(pick % open.len().max(1)) else {
                    continue;
                };
                match *when {
                    When::Moved(ref moved) => pair.tick(moved),
                    When::AtSpent(d) => {
                        let at = spends[k].lua.saturating_add_signed(d);
                        pair.set_time(at.clamp(T_MIN, T_MAX));
                    }
                }
                let what = format!(
                    "{limits:?}, op {i}: {op:?} of {:?} at {}",
                    spends[k], pair.now
                );
                pair.expiry(&what);
                let window = pair.q.window_nanos() as i128;
                let off = |d: i64| {
                    let at = |t: u64| t.saturating_add_signed(d);
                    (at(spends[k].rust), at(spends[k].lua), spends[k].shift)
                };
                let at = match *spent {
                    Spent::Right => off(0),
                    Spent::Off(d) => off(d),
                    Spent::Shift(p) => off((window * p as i128 / 1_000) as i64),
                    Spent::Other(j) => {
                        let other = &spends[j % spends.len()];
                        (other.rust, other.lua, other.shift)
                    }
                };
                let cost = spends[k].cost.saturating_add_signed(*extra);
                if matches!(spent, Spent::Right) && *extra == 0 {
                    spends[k].open = false;
                }
                if refund(&mut pair, cost, at, &what) {
                    given += 1;
                    pair.refunded = true;
                    // What is left, looked at once.
                    pair.decide(0, false, false, &format!("{what}, the look after"));
                }
            }
        }
    }
    given
}

fn ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
    let call = (
        moved(),
        cost(),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.7),
    );
    let call = call.prop_map(|(moved, cost, commit, keep)| Op::Call {
        moved,
        cost,
        commit,
        keep,
    });
    let when = prop_oneof![
        3 => moved().prop_map(When::Moved),
        // Within the window (or the bucket's tolerance) after the last call.
        2 => (0..1_000i64).prop_map(|p| When::Moved(Move::Shift(p))),
        2 => (-2..=2i64).prop_map(When::AtSpent),
    ];
    let spent = prop_oneof![
        12 => Just(Spent::Right),
        1 => (-2..=2i64).prop_map(Spent::Off),
        1 => (-2_000..=2_000i64).prop_map(Spent::Shift),
        2 => any::<usize>().prop_map(Spent::Other),
    ];
    let extra = prop_oneof![12 => Just(0i64), 1 => -1..=1i64];
    let refund =
        (when, any::<usize>(), spent, extra).prop_map(|(when, pick, spent, extra)| Op::Refund {
            when,
            pick,
            spent,
            extra,
        });
    prop::collection::vec(prop_oneof![3 => call, 2 => refund], 1..=n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn small_quotas_refund_alike(limits in small(), ops in ops(60), shared: bool) {
        refunds_agree(&limits, &ops, shared);
    }

    #[test]
    fn large_quotas_refund_alike(limits in large(), ops in ops(40), shared: bool) {
        refunds_agree(&limits, &ops, shared);
    }

    #[test]
    fn quotas_at_the_2_51_bounds_refund_alike(limits in at_the_bound(), ops in ops(40)) {
        refunds_agree(&limits, &ops, false);
    }
}

fn call(moved: Move, cost: Cost, commit: bool, keep: bool) -> Op {
    Op::Call {
        moved,
        cost,
        commit,
        keep,
    }
}

fn right(when: When) -> Op {
    Op::Refund {
        when,
        pick: 0,
        spent: Spent::Right,
        extra: 0,
    }
}

/// The sliding log's refund of the oldest entry kept, when its own summary names older
/// entries since dropped: its units are its total less the total before the head's oldest
/// live entry (it gave nothing back).
#[test]
fn the_oldest_entry_kept_is_given_back() {
    let limits = Limits::new(Kind::SlidingWindow, (3, 1), 2, None);
    let ops = [
        call(Move::Tick(0), Cost::Share(1), true, false),
        call(Move::Tick(0), Cost::Capacity, false, false),
        call(Move::Retry(-1), Cost::One, true, true),
        call(Move::Retry(0), Cost::Share(1), true, false),
        call(Move::Shift(-500), Cost::One, false, false),
        right(When::Moved(Move::Boundary(0))),
    ];
    assert_eq!(refunds_agree(&limits, &ops, false), 1);
}

/// The sliding log's refund of its newest entry, when the entry under it names an oldest
/// live entry that the newest one's call dropped: the next call read the list as of the wrong
/// shape (an error reply).
#[test]
fn the_newest_entry_given_back_leaves_a_log_that_reads() {
    let limits = Limits::new(Kind::SlidingWindow, (2, 0), 3, None);
    let ops = [
        call(Move::Tick(0), Cost::One, true, false),
        call(Move::Tick(1), Cost::One, true, false),
        call(Move::Reset(-1), Cost::One, true, true),
        right(When::Moved(Move::Shift(0))),
    ];
    assert_eq!(refunds_agree(&limits, &ops, false), 1);
}

/// A log longer than the chunk the refund reads at a time (64 entries): the oldest spends are
/// found past the first chunk, and the newer entries' summaries rewritten across chunks.
#[test]
fn a_refund_reads_past_the_first_chunk_of_the_log() {
    let limits = Limits::new(Kind::SlidingWindow, (150, 50), 1_000_000, None);
    let mut ops: Vec<Op> = (0..140)
        .map(|i| call(Move::Tick(i % 3), Cost::One, true, true))
        .collect();
    for k in 0..12 {
        // The oldest open spend, the last entry kept, and another, in turn.
        let pick = if k % 2 == 0 { 0 } else { 97 * k };
        ops.push(Op::Refund {
            when: When::Moved(Move::Tick(1)),
            pick,
            spent: Spent::Right,
            extra: 0,
        });
        ops.push(call(Move::Tick(0), Cost::Capacity, false, false));
    }
    // Past the oldest spends' window: the log's remaining entries leave it one by one.
    ops.push(call(Move::Shift(1_000), Cost::One, true, false));
    ops.push(call(Move::Tick(0), Cost::Capacity, false, false));
    assert_eq!(refunds_agree(&limits, &ops, false), 12);
}

/// A window of whole milliseconds whose call was given back, recorded ahead of Redis' clock,
/// then a call through the hot path, which keeps the expiry of a key that held 0 (its window):
/// it used to move it back to the window of `TIME`, and the later window counted from 0 again.
#[test]
fn an_emptied_window_ahead_of_the_clock_is_kept() {
    let limits = Limits::new(Kind::FixedWindow, (0, 1), 1_000, None);
    let ops = [
        call(Move::Tick(0), Cost::One, true, true),
        call(Move::Shift(1_000), Cost::One, true, true),
        right(When::Moved(Move::Tick(0))),
        right(When::Moved(Move::Tick(-1))),
        call(Move::Tick(0), Cost::One, true, false),
        call(Move::Tick(0), Cost::One, false, false),
    ];
    refunds_agree(&limits, &ops, false);
}
