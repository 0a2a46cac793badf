//! One bare key of the sliding log asked under two windows, in the stand-in (`lua_standin.rs`,
//! a clock set by hand): the script must decide as the memory store decides such a key
//! (`algorithm::written_elsewhere`, the log's cell keeping the window that last spent on it),
//! never drop entries a longer window still counts.

use proptest::prelude::*;

use super::lua_agrees::cases;
use super::lua_pair::{script, Limits, KEY, MAX_WINDOW_US, T0};
use super::lua_standin::{Redis, Reply};
use crate::algorithm::{self, Spend, State, Verdict, Written};
use crate::clock::Nanos;
use crate::quota::Quota;
use crate::syntax::Strategy as Kind;

/// A sliding log of `limit` a window of `window_us` microseconds.
fn log(limit: u64, window_us: u64) -> Quota {
    Limits::new(Kind::SlidingWindow, (limit, 0), window_us, None).quota()
}

/// Spends of cost 1 on the bare key (the full script, as a bare key's call runs it) at
/// `now` until one is refused (at most 1,000).
fn drain(redis: &Redis, quota: &Quota, now: u64) -> u64 {
    redis.set_time(now);
    (0..1_000)
        .take_while(|_| script(redis, quota, now, 1, true, true).allowed)
        .count() as u64
}

/// (longer, shorter) windows in microseconds: an hour and a minute, 2 s and 200 ms.
const PAIRS: [(u64, u64); 2] = [(3_600_000_000, 60_000_000), (2_000_000, 200_000)];

/// The longer window spends its 3; late in its key's life (the key ends half the shorter
/// window after the call: within the shorter window and its eighth, where `kept_longer`
/// read the key as the shorter window's own) the shorter window spends 1, or is penalized 1.
/// That call found the longer window's entries out of its own window and dropped them, and
/// the longer window admitted 2 more inside its window (5 against 3).
#[test]
fn a_shorter_windows_late_call_does_not_drop_entries_a_longer_window_counts() {
    let mut failed = Vec::new();
    for (long_us, short_us) in PAIRS {
        for penalty in [false, true] {
            let (long, short) = (log(3, long_us), log(100, short_us));
            let redis = Redis::new(T0).expect("the scripts compile");
            assert_eq!(drain(&redis, &long, T0), 3);
            let late = T0 + long_us - short_us / 2;
            redis.set_time(late);
            match penalty {
                true => {
                    let _ = redis.adjust(&short, KEY, 1, true);
                }
                false => {
                    let _ = script(&redis, &short, late, 1, true, true);
                }
            }
            let more = drain(&redis, &long, late + 1_000);
            if more > 0 {
                failed.push(format!(
                    "{long_us} µs after {short_us} µs (penalty {penalty}): {more} more"
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

/// The reply of a refusal as another window's log: nothing left, until `ends`.
fn refused_until(reply: &Reply, ends: u64, now: u64) -> bool {
    let ints = |r: &Reply| match r {
        Reply::Int(i) => Some(*i),
        _ => None,
    };
    let Reply::Array(items) = reply else {
        return false;
    };
    let got: Option<Vec<i64>> = items.iter().map(ints).collect();
    got == Some(vec![0, 0, ends as i64, (ends - now) as i64, now as i64])
}

/// The memory store's rule on the first call under another window, either way round: the
/// log still counts by the window that wrote it, so it is refused until that window ends
/// (`algorithm::foreign`), whatever the call's own window would read in it.
#[test]
fn a_log_is_refused_under_another_window_until_its_own_ends() {
    for (long_us, short_us) in PAIRS {
        for (first, then) in [(long_us, short_us), (short_us, long_us)] {
            let redis = Redis::new(T0).expect("the scripts compile");
            assert_eq!(drain(&redis, &log(3, first), T0), 3);
            let at = T0 + first / 4;
            redis.set_time(at);
            let reply = redis.decide_full(&log(100, then), KEY, 1, true);
            assert!(
                refused_until(&reply, T0 + first, at),
                "{first} µs then {then} µs: {reply:?}"
            );
        }
    }
}

/// The memory store's log of one key (`LockedCell`, `StoredState`): the state and the window
/// of the last quota that spent on it, decided and adjusted by `algorithm::written_elsewhere`.
/// Times and windows in microseconds, read as nanoseconds (as `lua_pair.rs` does).
struct Memory {
    state: State,
    written: Nanos,
}

impl Memory {
    fn decide(&mut self, now: Nanos, q: &Quota, cost: u64, commit: bool) -> Verdict {
        let state = &self.state;
        let fresh = || State::new(Kind::SlidingWindow);
        let verdict =
            match algorithm::written_elsewhere(self.written, now, q, |q| state.expires_at(q)) {
                Written::Here => algorithm::decide(&mut self.state, now, q, cost, commit),
                Written::Elsewhere(refused) => Ok(refused),
                Written::Passed if commit => {
                    self.state = fresh();
                    algorithm::decide(&mut self.state, now, q, cost, commit)
                }
                Written::Passed => algorithm::decide(&mut fresh(), now, q, cost, false),
            };
        let verdict = verdict.expect("decided");
        if commit && verdict.allowed {
            self.written = q.window_nanos();
        }
        verdict
    }

    /// The memory store's `adjust_written`.
    fn adjust(&mut self, now: Nanos, q: &Quota, units: u64, penalty: bool) -> u64 {
        let state = &self.state;
        let written = self.written;
        let under = match algorithm::written_elsewhere(written, now, q, |q| state.expires_at(q)) {
            Written::Here => *q,
            Written::Elsewhere(_) if !penalty => return 0,
            Written::Elsewhere(_) => q.with_window_nanos(q.window_nanos().max(written)),
            Written::Passed if !penalty || units == 0 => return 0,
            Written::Passed => {
                self.state = State::new(Kind::SlidingWindow);
                *q
            }
        };
        let moved = self.state.adjust(now, &under, units, penalty);
        if penalty && moved > 0 {
            self.written = under.window_nanos();
        }
        moved
    }

    /// `StoredState::refund`: only to a log of the spend's window.
    fn refund(&mut self, now: Nanos, q: &Quota, spent: Nanos, cost: u64) -> bool {
        let spend = Spend {
            at: spent,
            shift: 0,
        };
        algorithm::written_under(self.written, q) && self.state.refund(spend, now, q, cost)
    }

    /// When the log stops counting by its own window (0: never written).
    fn ends(&self, q: &Quota) -> Nanos {
        match self.written {
            0 => 0,
            written => self.state.expires_at(&q.with_window_nanos(written)),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A call under quota `q` on the bare key.
    Call {
        q: usize,
        cost: u64,
        commit: bool,
    },
    Adjust {
        q: usize,
        units: u64,
        penalty: bool,
    },
    /// A refund of the `pick`-th spend admitted so far (of those not given back), under the
    /// quota it was spent under or (`other`) the next one.
    Refund {
        pick: usize,
        other: bool,
    },
}

#[derive(Debug, Clone)]
enum Move {
    /// A few microseconds on.
    Tick(u64),
    /// Per mille of the longest window on.
    Share(u64),
    /// To where the log stops counting by its own window, give or take one (when ahead).
    End(i64),
}

/// Windows in microseconds: whole milliseconds and not, shorter and longer than each other,
/// two within an eighth of each other (1 000 and 1 100 µs).
const WINDOWS: [u64; 6] = [700, 1_000, 1_100, 2_000, 7_000, 60_000];

fn quotas() -> impl Strategy<Value = Vec<Limits>> {
    let one = (prop::sample::select(WINDOWS.to_vec()), 2..=4u64)
        .prop_map(|(w, limit)| Limits::new(Kind::SlidingWindow, (limit, 0), w, None));
    prop::collection::vec(one, 2..=3)
}

fn steps() -> impl Strategy<Value = Vec<(Move, Op)>> {
    let moved = prop_oneof![
        3 => (0..1_500u64).prop_map(Move::Tick),
        3 => (0..400u64).prop_map(Move::Share),
        2 => (-1..=1i64).prop_map(Move::End),
    ];
    let q = 0..3usize;
    let op = prop_oneof![
        6 => (q.clone(), 1..=2u64, any::<bool>())
            .prop_map(|(q, cost, commit)| Op::Call { q, cost, commit }),
        2 => (q, 1..=3u64, any::<bool>())
            .prop_map(|(q, units, penalty)| Op::Adjust { q, units, penalty }),
        2 => (0..8usize, prop::bool::weighted(0.3))
            .prop_map(|(pick, other)| Op::Refund { pick, other }),
    ];
    prop::collection::vec((moved, op), 1..60)
}

/// Every call and adjustment of `limits`' quotas on one key, in the stand-in and on the
/// memory store's log alike: the same verdicts, the same units, and the key never gone while
/// the log still counts by its own window.
fn decide_alike(limits: &[Limits], steps: &[(Move, Op)]) -> Result<(), TestCaseError> {
    let redis = Redis::new(T0).expect("the scripts compile");
    let mut memory = Memory {
        state: State::new(Kind::SlidingWindow),
        written: 0,
    };
    let longest = limits.iter().map(|l| l.window_us).max().unwrap_or(1);
    // Spends admitted: the quota's index, the spend's `reset_at` (where a refund finds it)
    // and its cost.
    let mut spends: Vec<(usize, Nanos, u64)> = Vec::new();
    let mut now = T0;
    for (i, (moved, op)) in steps.iter().enumerate() {
        let ends = memory.ends(&limits[0].in_micros());
        now = match *moved {
            Move::Tick(d) => now + d,
            Move::Share(p) => now + longest * p / 1_000,
            Move::End(d) => now.max(ends.saturating_add_signed(d)),
        };
        redis.set_time(now);
        let what = format!("step {i}: {op:?} at {}", now - T0);
        match *op {
            Op::Call { q, cost, commit } => {
                let l = &limits[q % limits.len()];
                let got = script(&redis, &l.quota(), now, cost, commit, true);
                let expected = memory.decide(now, &l.in_micros(), cost, commit);
                prop_assert_eq!(got, expected, "{}: {:?}", what, l);
                if commit && got.allowed {
                    spends.push((q % limits.len(), got.reset_at, cost));
                }
            }
            Op::Refund { pick, other } => {
                if spends.is_empty() {
                    continue;
                }
                let (q, spent, cost) = spends.remove(pick % spends.len());
                let l = &limits[(q + usize::from(other)) % limits.len()];
                let got = redis.refund(&l.quota(), KEY, cost, (spent, 0), true);
                let expected = memory.refund(now, &l.in_micros(), spent, cost);
                prop_assert_eq!(got, Reply::Int(expected.into()), "{}: {:?}", what, l);
            }
            Op::Adjust { q, units, penalty } => {
                let l = &limits[q % limits.len()];
                let got = redis.adjust(&l.quota(), KEY, units, penalty);
                let expected = memory.adjust(now, &l.in_micros(), units, penalty);
                prop_assert_eq!(got, Reply::Int(expected as i64), "{}: {:?}", what, l);
            }
        }
        // The key lives at least until the log stops counting (gone from the millisecond
        // after its expiry).
        let ends = memory.ends(&limits[0].in_micros());
        match redis.expiry(KEY) {
            Some(Some(ms)) => prop_assert!((ms + 1) * 1_000 >= ends, "{}: ends {}", what, ms),
            Some(None) => prop_assert!(false, "{}: a log without an expiry", what),
            None => prop_assert!(now >= ends, "{}: gone before {}", what, ends - T0),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Two or three log quotas on one bare key, with penalties, rewards and refunds: the
    /// script decides as the memory store's log does (`written_elsewhere`).
    /// Before, the script read another window's log under the call's window: a shorter
    /// window's call dropped entries a longer one counted, and a longer window counted a
    /// shorter one's log as its own.
    #[test]
    fn two_windows_on_one_log_decide_as_the_memory_store(
        limits in quotas(),
        steps in steps(),
    ) {
        decide_alike(&limits, &steps)?;
    }
}

/// Plants a log as the previous version wrote it (entries of four fields, oldest first: (time,
/// cost)), expiring at `ends_us` (rounded up to the millisecond, as the script writes it).
fn plant_unnamed(redis: &Redis, entries: &[(u64, u64)], ends_us: u64) {
    let mut total = 0;
    for &(t, c) in entries {
        total += c;
        // Every entry at one time here: each its own oldest live one is not needed, the
        // first is (age 0 from it), and the units are the total.
        let first = entries[0].0;
        let entry = format!("{t}:{total}:{}:{total}", t - first);
        redis.command(&["LPUSH", KEY, &entry]).expect("planted");
    }
    let ms = ends_us.div_ceil(1_000).to_string();
    redis.command(&["PEXPIREAT", KEY, &ms]).expect("expiry");
}

/// The newest entry's text.
fn head(redis: &Redis) -> String {
    match redis.command(&["LINDEX", KEY, "0"]) {
        Ok(Reply::Bulk(entry)) => entry,
        other => panic!("no head: {other:?}"),
    }
}

const HOUR: u64 = 3_600_000_000;
const MINUTE: u64 = 60_000_000;

/// A log the previous version wrote names no window: read by its key's expiry as that version
/// read it (`kept_longer`: a shorter window whose entries left it is refused while the key is
/// kept longer; never a fresh log), until a call it lets write names its window in its entry,
/// from when the log is decided as the memory store decides it. Left unnamed, a minute's call
/// 30 s before the hour's newest entry stopped counting found the key ending within the
/// minute, was admitted, and dropped that entry (2 units the hour still counted).
#[test]
fn a_log_of_the_previous_version_is_read_by_its_expiry_until_a_call_names_its_window() {
    let redis = Redis::new(T0).expect("the scripts compile");
    let (hour, minute) = (log(5, HOUR), log(100, MINUTE));
    plant_unnamed(&redis, &[(T0, 1), (T0, 1), (T0, 1)], T0 + HOUR);
    // The minute, its entries gone from its window, the key kept an hour: refused until the
    // key ends, never read as fresh.
    let at = T0 + 10 * MINUTE;
    redis.set_time(at);
    let reply = redis.decide_full(&minute, KEY, 1, true);
    assert!(refused_until(&reply, T0 + HOUR, at), "{reply:?}");
    // The hour's own call, the key ending when its entries stop counting: admitted, and its
    // entry names the hour.
    assert!(script(&redis, &hour, at, 2, true, true).allowed);
    // Late in that entry's hour: the minute is refused (the log is the hour's), and the hour
    // still counts its 2 (the entries at T0 have left it).
    let late = the_hours_log_refuses_the_minute_late(&redis, &minute, at);
    assert_eq!(drain(&redis, &hour, late + 1_000), 3);
}

/// The head names the hour, its entry written at `at`; late in that hour (half a minute
/// before it ends) a call of `minute` is refused until it ends. That late time.
fn the_hours_log_refuses_the_minute_late(redis: &Redis, minute: &Quota, at: u64) -> u64 {
    assert!(
        head(redis).ends_with(&format!("/{HOUR}")),
        "{}",
        head(redis)
    );
    let late = at + HOUR - MINUTE / 2;
    redis.set_time(late);
    let reply = redis.decide_full(minute, KEY, 1, true);
    assert!(refused_until(&reply, at + HOUR, late), "{reply:?}");
    late
}

/// A log of the previous version that a call keeps live entries of while its key is kept
/// longer than the call's window keeps it (a longer window's, all in the shorter window): its
/// entry names no window, so the log stays read by its expiry (naming the shorter window
/// would give the longer one's entries its end).
#[test]
fn an_entry_names_no_window_on_a_previous_versions_log_kept_longer() {
    let redis = Redis::new(T0).expect("the scripts compile");
    plant_unnamed(&redis, &[(T0, 1), (T0, 1), (T0, 1)], T0 + HOUR);
    let at = T0 + 10_000_000;
    redis.set_time(at);
    assert!(script(&redis, &log(100, MINUTE), at, 1, true, true).allowed);
    let entry = head(&redis);
    assert!(!entry.contains('/'), "{entry}");
}

/// A key of one window (`StoreKey::one_window`, the service's keys: never asked under another
/// window) writes its entries as before, naming no window: its calls cost Redis nothing more.
/// On a log that names one (a bare key's, asked as one window's too) it names its own, so the
/// log stays decided by it: the shorter window's late call is still refused there.
#[test]
fn a_key_of_one_window_names_its_window_only_on_a_log_that_names_one() {
    let (hour, minute) = (log(5, HOUR), log(100, MINUTE));
    // Fresh, as one window's: no window named.
    let redis = Redis::new(T0).expect("the scripts compile");
    assert!(script(&redis, &hour, T0, 1, true, false).allowed);
    assert!(!head(&redis).contains('/'), "{}", head(&redis));
    // A bare key's log, then a call of one window's on it: its window named.
    let redis = Redis::new(T0).expect("the scripts compile");
    assert!(script(&redis, &hour, T0, 1, true, true).allowed);
    let at = T0 + 1_000;
    redis.set_time(at);
    assert!(script(&redis, &hour, at, 1, true, false).allowed);
    the_hours_log_refuses_the_minute_late(&redis, &minute, at);
}

/// The window an entry names is read up to `MAX_WINDOW` (the script's bound is the crate's)
/// and no further; 0 or a leading zero is no window a script writes: the state error, the
/// log left as it was.
#[test]
fn a_window_named_out_of_bounds_is_the_state_error() {
    let max = MAX_WINDOW_US.to_string();
    let cases = [
        (max.clone(), true),
        ((MAX_WINDOW_US + 1).to_string(), false),
        ("0".to_owned(), false),
        (format!("0{MINUTE}"), false),
    ];
    for (window, read) in cases {
        let redis = Redis::new(T0).expect("the scripts compile");
        let entry = format!("{T0}:1:0:1/{window}");
        redis.command(&["LPUSH", KEY, &entry]).expect("planted");
        let far = (T0 / 1_000 + HOUR).to_string();
        redis.command(&["PEXPIREAT", KEY, &far]).expect("expiry");
        let reply = redis.decide_full(&log(3, MINUTE), KEY, 1, true);
        match read {
            true => assert!(refused_until(&reply, T0 + MAX_WINDOW_US, T0), "{reply:?}"),
            false => assert!(
                matches!(&reply, Reply::Error(e) if e.starts_with("RATELIMIT_STATE ")),
                "{window}: {reply:?}"
            ),
        }
        assert_eq!(head(&redis), entry);
    }
}
