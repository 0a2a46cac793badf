//! States planted in a script's encoding, at and past the bounds a store writes: the scripts
//! (run by Lua 5.1 against the stand-in, `lua_standin.rs`) refuse them with their state error
//! exactly when Rust's `decide` finds them `UnexpectedState`, and leave them as they were.
//! The calls of fresh and stored states are `lua_agrees.rs`'s.

use proptest::prelude::*;

use super::lua_agrees::cases;
use super::lua_pair::{Limits, BOUND, KEY, MAX_WINDOW_US, T0, T_MAX, T_MIN};
use super::lua_standin::{self, Redis};
use crate::algorithm::{self, State};
use crate::syntax::Strategy as Kind;

/// The last time decided and the largest count, in the scripts' units (prelude.lua).
const MAX_NOW_US: u64 = algorithm::MAX_NOW / 1_000;
const MAX_EXACT: u64 = (1 << 53) - 1;

/// A number near `bound`, or anywhere below it, or any.
fn around(bound: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => bound.saturating_sub(2)..=bound.saturating_add(2),
        2 => 0..=bound.saturating_add(2),
        1 => any::<u64>(),
    ]
}

/// A state planted in a script's encoding, and the same state as Rust holds it (times in
/// nanoseconds; `None` past every bound, where they do not fit).
#[derive(Debug, Clone)]
struct Planted {
    strategy: Kind,
    window_us: u64,
    command: Vec<String>,
    rust: Option<State>,
}

fn ns(us: u64) -> Option<u64> {
    us.checked_mul(1_000)
}

/// A fixed window's string (a window not of whole milliseconds), a counter's hash, a bucket's
/// tat, a log of one or two live entries: fields at and past the bounds `State::written_for`
/// keeps, starts on and off the window's boundaries.
fn planted() -> impl Strategy<Value = Planted> {
    let odd = prop::sample::select(vec![1u64, 7, 1_500, 1_000_001, MAX_WINDOW_US - 1]);
    let fixed = (odd, around(MAX_NOW_US), 0..3u8, around(u32::MAX as u64)).prop_map(
        |(w, k, off, count)| {
            let start = (k / w * w).saturating_add([0, 1, w - 1][off as usize]);
            let rust = ns(start).map(|start| State::Fixed(algorithm::FixedWindow { start, count }));
            let command = vec!["SET".into(), format!("F{start}:{w}:{count}")];
            (Kind::FixedWindow, w, command, rust)
        },
    );
    let counter_window = prop::sample::select(vec![1u64, 3, 1_000, 60_000_000, MAX_WINDOW_US]);
    let count = |w: u64| prop_oneof![0..=6u64, around(u32::MAX as u64), around(BOUND / w)];
    let counter = counter_window
        .prop_flat_map(move |w| (Just(w), 1..=MAX_NOW_US / w + 2, count(w), count(w)))
        .prop_map(|(w, n, previous, current)| {
            let start = ns(n * w);
            let rust = start.map(|start| {
                State::Counter(algorithm::SlidingCounter {
                    start,
                    previous,
                    current,
                })
            });
            let fields = [(n - 1).to_string(), previous.to_string(), n.to_string()];
            let command = ["HSET"].iter().map(|s| s.to_string()).chain(fields);
            let command = command.chain([current.to_string()]).collect();
            (Kind::SlidingWindowCounter, w, command, rust)
        });
    let bucket_bound = (algorithm::MAX_NOW as u128 + crate::quota::MAX_TOLERANCE) / 1_000;
    let tat = prop_oneof![
        around(MAX_EXACT),
        around(bucket_bound as u64),
        T_MIN..=T_MAX
    ];
    // What refunds keep: a shift, then runs of refunds, at and past the bounds (runs in
    // order and apart, or not).
    let word = || prop_oneof![Just(0), 1..=1_000_000u64, around(MAX_NOW_US)];
    let given = (
        word(),
        prop::collection::vec((word(), word(), word()), 0..10),
    );
    let bucket = (tat, prop::option::of(given)).prop_map(|(tat, given)| {
        let mut text = format!("T{tat}");
        let mut rust = ns(tat).map(|tat| (tat, 0, Vec::new()));
        if let Some((shift, runs)) = &given {
            text += &format!(":{shift}");
            for (from, to, time) in runs {
                text += &format!(":{from}:{to}:{time}");
            }
            // Rust reads a shift of 0 with runs after it as no state: neither do the scripts
            // (nothing writes it).
            let words: Option<Vec<_>> = (runs.iter())
                .map(|&(f, t, g)| Some((ns(f)?, ns(t)?, ns(g)?)))
                .collect();
            rust = rust
                .zip(ns(*shift))
                .zip(words)
                .filter(|((_, shift), _)| *shift > 0)
                .map(|((r, shift), words)| (r.0, shift, words));
        }
        let rust =
            rust.map(|(tat, shift, runs)| State::Bucket(algorithm::Gcra::new(tat, shift, runs)));
        (Kind::TokenBucket, 1_000_000, vec!["SET".into(), text], rust)
    });
    let t = prop_oneof![around(MAX_NOW_US), T_MIN..=T_MAX];
    let cost = || prop_oneof![0..=3u64, around(u32::MAX as u64)];
    let log = (t, 0..1_000u64, cost(), prop::option::of(cost())).prop_map(|(t, d, c, older)| {
        let w = 1_000;
        // The older entry (if any) d before the newer, live when it was pushed.
        let mut entries = vec![];
        let mut rust = Some(algorithm::SlidingLog::default());
        let mut restore = |t: u64, c: u64| {
            let ok = ns(t).zip(u32::try_from(c).ok());
            rust = rust.take().and_then(|mut log| {
                let (t, c) = ok?;
                log.restore(t, c).then_some(log)
            });
        };
        let newest = match older {
            Some(c0) => {
                let t0 = t.saturating_sub(d);
                entries.push(format!("{t0}:{c0}:0:{c0}"));
                restore(t0, c0);
                let total = c0.saturating_add(c);
                format!("{t}:{total}:{}:{total}", t - t0)
            }
            None => format!("{t}:{c}:0:{c}"),
        };
        restore(t, c);
        entries.push(newest);
        let command = ["LPUSH".to_owned()].into_iter().chain(entries).collect();
        let rust = rust.map(|log| State::Log(Box::new(log)));
        (Kind::SlidingWindow, w, command, rust)
    });
    prop_oneof![fixed, counter, bucket, log].prop_map(|(strategy, window_us, command, rust)| {
        Planted {
            strategy,
            window_us,
            command,
            rust,
        }
    })
}

/// The script refuses `planted` with its state error, and leaves it as it was, exactly when
/// Rust's `decide` finds it `UnexpectedState`; but for numbers Lua cannot hold exactly (a
/// tat of 2^53 or more), or counts no quota of the counter's window reaches (see
/// `supports`), which the scripts alone refuse; and for a log whose older entries Rust
/// refuses, which the script does not read while its newest entry is in bounds.
fn refused_alike(planted: &Planted) {
    let limits = Limits::new(planted.strategy, (5, 0), planted.window_us, None);
    let quota = limits.quota();
    let redis = Redis::new(T0).expect("the scripts compile");
    // One value or field a command, as the stand-in takes them.
    let (name, values) = planted.command.split_first().expect("a command");
    let each = match name.as_str() {
        "HSET" => 2,
        "LPUSH" => 1,
        _ => values.len(),
    };
    for value in values.chunks(each) {
        let command = [name.as_str(), KEY].into_iter();
        let command: Vec<&str> = command.chain(value.iter().map(String::as_str)).collect();
        redis.command(&command).expect("planted");
    }
    let far = (T_MAX / 1_000).to_string();
    redis.command(&["PEXPIREAT", KEY, &far]).expect("expiry");
    let lua_only = match &planted.rust {
        Some(State::Bucket(s)) => s.tat / 1_000 > MAX_EXACT,
        Some(State::Counter(s)) => s.previous.max(s.current) > BOUND / planted.window_us,
        _ => false,
    };
    for commit in [false, true] {
        let rust = planted.rust.clone().is_none_or(|mut state| {
            algorithm::decide(&mut state, T0 * 1_000, &quota, 1, commit)
                == Err(algorithm::Undecidable::UnexpectedState)
        });
        let reply = redis.decide(&quota, KEY, 1, commit);
        let lua = match &reply {
            lua_standin::Reply::Error(e) => {
                assert!(e.starts_with("RATELIMIT_STATE "), "{planted:?}: {e}");
                true
            }
            _ => false,
        };
        // The log's script reads its newest entry's summary alone (algorithm/sliding_log.lua: the
        // entries under it are read only once they leave the window), so a log Rust refuses
        // for its older entries may be read there; never the other way round.
        let head_read = planted.strategy == Kind::SlidingWindow && rust && !lua;
        assert!(
            lua == rust || lua && lua_only || head_read,
            "{planted:?}, commit {commit}: the script {}, Rust {}: {reply:?}",
            if lua { "refused it" } else { "read it" },
            if rust { "refuses it" } else { "reads it" },
        );
        if lua {
            let left = redis.command(&["TYPE", KEY]).expect("TYPE");
            assert_ne!(
                left,
                lua_standin::Reply::Status("none".into()),
                "{planted:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn state_out_of_bounds_is_refused_alike(planted in planted()) {
        refused_alike(&planted);
    }
}
