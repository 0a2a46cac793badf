//! The Lua scripts: one per strategy (`algorithm/<name>.lua`, named in the table of
//! algorithms, `algorithm/table.rs`), the store's own (`lua/*.lua`), and how a decision asks
//! them ([`call`]); what they can count and the numbers a quota is to them are
//! `arguments.rs`'.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock};

use super::arguments::arguments;
use crate::quota::Quota;
use crate::syntax::Strategy;

/// Each strategy's script behind the prelude they share (`lua/prelude.lua`: the key, cost,
/// commit flag, Redis time and integer division). Redis has no `require`, so one script is
/// the two files end to end. `$name`: the script's name in the table of algorithms.
macro_rules! lua {
    ($name:literal) => {
        concat!(
            include_str!("../../../lua/prelude.lua"),
            include_str!(concat!("../../algorithm/", $name, ".lua"))
        )
    };
}

/// A strategy's script as a function of `(KEYS, ARGV, fell, run_now)` named `$name`, for the
/// stacked and lease scripts and the fixed window's hot path (`fell`: see
/// `algorithm/fixed_window.lua`; `run_now`: see `lua/prelude.lua`'s `time`).
macro_rules! wrapped {
    ($name:literal) => {
        concat!(
            "local function ",
            $name,
            "(KEYS, ARGV, fell, run_now)\n",
            include_str!("../../../lua/prelude.lua"),
            include_str!(concat!("../../algorithm/", $name, ".lua")),
            "\nend\n"
        )
    };
}

// For the lease script (`lease.rs`), which runs two of the scripts as functions too.
pub(super) use wrapped;

/// The fixed window's hot path (`lua/fixed_window_hot.lua`, see its header) behind its two
/// first lines (see [`Hot::source`]), with the whole script behind it as a function, called only
/// on state of the wrong shape for its error reply (a look: `fell` answers before anything is
/// read or written).
const HOT_BODY: &str = concat!(
    include_str!("../../../lua/fixed_window_hot.lua"),
    wrapped!("fixed_window"),
    "return fixed_window(KEYS, {string.format('%d000', window), string.format('%d', capacity), \
     string.format('%d', cost), '0', '1'}, true)\n"
);

/// A script as the store sends it: by its digest (`EVALSHA`), or with its source (`EVAL`,
/// which runs it and loads it in one round trip) where Redis does not hold it yet.
pub(super) struct Lua {
    source: String,
    hash: String,
}

/// Spare commands of this thread's, cleared: a command's two buffers are taken from here and
/// given back when it has been sent, so that a decision allocates none of its own. An `EVAL`
/// with its source is not kept (its buffer is the script's size).
const SPARES: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<redis::Cmd>> = const { RefCell::new(Vec::new()) };
}

/// A script's command ([`Lua::command`]), given back to the spares of the thread it is
/// dropped on (an `EVALSHA`: `spare`).
pub(super) struct Command {
    cmd: Option<redis::Cmd>,
    spare: bool,
}

impl std::ops::Deref for Command {
    type Target = redis::Cmd;

    fn deref(&self) -> &redis::Cmd {
        self.cmd.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        let Some(mut cmd) = self.cmd.take().filter(|_| self.spare) else {
            return;
        };
        cmd.clear();
        // Not after the thread's spares are gone (a command dropped by another local's
        // destructor): the command is dropped instead.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARES {
                spare.push(cmd);
            }
        });
    }
}

impl Lua {
    pub(super) fn new(source: impl Into<String>) -> Self {
        let source = source.into();
        let hash = redis::Script::new(&source).get_hash().to_owned();
        Lua { source, hash }
    }

    /// The command that runs the script on `keys` with `args`: `EVALSHA`, or `EVAL` with the
    /// source. Written straight into one buffer of the size it needs (redis-rs'
    /// `ScriptInvocation` allocates each key and argument, then copies them into its command),
    /// a spare one of this thread's when it has one (see [`Command`]).
    pub(super) fn command(&self, keys: &[&str], args: &[u64], with_source: bool) -> Command {
        let (name, body) = match with_source {
            true => ("EVAL", &self.source),
            false => ("EVALSHA", &self.hash),
        };
        let spare = || SPARE.try_with(|spare| spare.borrow_mut().pop());
        let mut cmd = (!with_source)
            .then(spare)
            .and_then(|spare| spare.ok().flatten())
            .unwrap_or_else(|| {
                let keys_len: usize = keys.iter().map(|k| k.len()).sum();
                let size = name.len() + body.len() + 2 + keys_len + 20 * args.len();
                redis::Cmd::with_capacity(3 + keys.len() + args.len(), size)
            });
        cmd.arg(name).arg(body.as_str()).arg(keys.len());
        for &key in keys {
            cmd.arg(key);
        }
        for &arg in args {
            cmd.arg(arg);
        }
        Command {
            cmd: Some(cmd),
            spare: !with_source,
        }
    }

    /// The source (the in-process tests run it in the stand-in).
    #[cfg(test)]
    pub(super) fn text(&self) -> &str {
        &self.source
    }

    /// `SCRIPT LOAD` of the source.
    pub(super) fn load(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source.as_str());
        cmd
    }
}

macro_rules! single {
    ([] $($strategy:ident => $variant:ident($ty:ty), $lua:literal, $cell:ty;)*) => {
        /// The strategies, in the order of the table of algorithms.
        enum Order {
            $($strategy,)*
        }

        /// A strategy's place in the table of algorithms, from 0: its script's in
        /// [`SCRIPTS`] and [`SINGLE`].
        fn index(strategy: Strategy) -> usize {
            match strategy {
                $(Strategy::$strategy => Order::$strategy as usize,)*
            }
        }

        /// The strategies' single-key scripts, in the order of [`index`].
        const SINGLE: &[&str] = &[$(lua!($lua),)*];

        /// The strategies' scripts as functions, `scripts`, the table of them in the order
        /// of [`index`], and what is read beside a state (`lua/beside.lua`): what the scripts
        /// of several keys (`lua/stacked.lua`, `lua/refund.lua`, `lua/adjust.lua`) are loaded
        /// behind.
        pub(super) const FUNCTIONS: &str = concat!(
            $(wrapped!($lua),)*
            "-- The strategies' scripts, in the order of the table of algorithms.\n",
            "local scripts = {"
            $(, $lua, ", ")*,
            "}\n",
            include_str!("../../../lua/beside.lua"),
        );
    };
}

crate::algorithm::algorithms!(single);

/// A penalty or a reward, with the key's stamp kept no longer than its state
/// (`lua/adjust.lua`).
pub(super) static ADJUST_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new([FUNCTIONS, include_str!("../../../lua/adjust.lua")].concat()));

/// One call's spends given back as one (`lua/refund.lua`).
pub(super) static REFUND_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new([FUNCTIONS, include_str!("../../../lua/refund.lua")].concat()));

/// The number `lua/stacked.lua` knows a strategy by: its index in [`SCRIPTS`], from 1 (the
/// order of its `scripts` table and of [`FUNCTIONS`]).
pub(super) fn stacked_index(strategy: Strategy) -> usize {
    index(strategy) + 1
}

/// The single-key scripts: the strategies' (in the order of [`index`]), then the fixed
/// window's shared hot path for a cost of 1 ([`HOT_ONE`]) and for more ([`HOT_MORE`]), which
/// read their quota from ARGV (see [`Hot`]).
pub(super) static SCRIPTS: LazyLock<[Lua; HOT_MORE + 1]> =
    LazyLock::new(|| std::array::from_fn(|script| Lua::new(source(script))));
const HOT_ONE: usize = SINGLE.len();
const HOT_MORE: usize = HOT_ONE + 1;

/// The source of [`SCRIPTS`]`[script]`.
pub(super) fn source(script: usize) -> String {
    match SINGLE.get(script) {
        // The fixed window's script reads `fell`, set only where its hot path calls it; every
        // one reads `run_now`, set only where a script of several limits calls it.
        Some(source) if script == index(Strategy::FixedWindow) => {
            format!("local fell, run_now\n{source}")
        }
        Some(source) => format!("local run_now\n{source}"),
        None => Hot::source(None, script == HOT_MORE),
    }
}

/// A script as a [`Call`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    /// [`SCRIPTS`]`[i]`.
    Shared(usize),
    /// The fixed window's hot path with this quota written in (see [`OwnScripts`]).
    Own(Hot),
}

/// A fixed-window call on its hot path: record `cost` under a window of whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Hot {
    capacity: u64,
    window_ms: u64,
    /// A cost above 1 (the script then reads it from ARGV).
    more: bool,
}

impl Hot {
    /// The script of this quota's own, with its capacity and window written in.
    pub(super) fn own_source(&self) -> String {
        Hot::source(Some((self.capacity, self.window_ms)), self.more)
    }

    /// The hot path's source: with `quota` (capacity, window in milliseconds) written in, or
    /// reading it from ARGV; for a cost of 1, or (`more`) the cost in the last argument.
    fn source(quota: Option<(u64, u64)>, more: bool) -> String {
        let (capacity, window, cost) = match quota {
            Some((capacity, window_ms)) => (capacity.to_string(), window_ms.to_string(), "ARGV[1]"),
            None => ("ARGV[1] + 0".to_owned(), "ARGV[2]".to_owned(), "ARGV[3]"),
        };
        let (cost, increment) = if more {
            (
                format!("{cost} + 0"),
                format!("redis.pcall('INCRBY', KEYS[1], {cost})"),
            )
        } else {
            ("1".to_owned(), "redis.pcall('INCR', KEYS[1])".to_owned())
        };
        format!(
            "local capacity, window, cost = {capacity}, {window}, {cost}\n\
             local count = {increment}\n{HOT_BODY}"
        )
    }

    /// The same call through the shared script, which reads the quota from ARGV.
    pub(super) fn shared(&self, cost: u64) -> Call {
        let (script, len) = if self.more {
            (HOT_MORE, 3)
        } else {
            (HOT_ONE, 2)
        };
        Call {
            script: Which::Shared(script),
            args: [self.capacity, self.window_ms, cost, 0, 0],
            len,
        }
    }
}

/// How many quotas a store keeps a hot script of their own for: Redis keeps every script
/// loaded until `SCRIPT FLUSH`, so an application that builds quotas per call must not load
/// one per call. Past it, [`Hot::shared`].
const OWN_MAX: usize = 256;

/// The slots of [`OwnScripts`]' table: twice [`OWN_MAX`], so that it is never more than half
/// full and a lookup ends at an empty slot within a few.
const OWN_SLOTS: usize = 2 * OWN_MAX;

/// A store's own hot scripts, by quota (see [`OWN_MAX`]): a table of slots each filled once
/// and never emptied (open addressing, linear probing). A lookup reads slots, takes no lock
/// and counts no reference; the scripts live as long as the store, so a call borrows its
/// script from it.
pub(super) struct OwnScripts {
    slots: Box<[OnceLock<Box<OwnScript>>]>,
    /// Slots filled or being filled, at most [`OWN_MAX`].
    taken: AtomicUsize,
    hasher: foldhash::fast::RandomState,
}

impl Default for OwnScripts {
    fn default() -> Self {
        OwnScripts {
            slots: (0..OWN_SLOTS).map(|_| OnceLock::new()).collect(),
            taken: AtomicUsize::new(0),
            hasher: Default::default(),
        }
    }
}

/// A hot script of a quota's own, and whether this store has sent its source yet.
pub(super) struct OwnScript {
    hot: Hot,
    script: Lua,
    sent: AtomicBool,
}

/// A script to invoke: one of [`SCRIPTS`] or a store's own.
pub(super) enum Held<'a> {
    Shared(&'static Lua),
    Own(&'a OwnScript),
}

impl Held<'_> {
    /// Whether to send the source: the first time this store runs an own script (and then
    /// never again), with `EVAL`, which runs it and loads it in one round trip, where
    /// `EVALSHA` would be answered `NOSCRIPT` first (the shared scripts are loaded by
    /// `connect`).
    pub(super) fn first_send(&self) -> bool {
        match self {
            // A load first: once sent, every call reads a shared line and writes none.
            Held::Own(own) => {
                !own.sent.load(Ordering::Relaxed) && !own.sent.swap(true, Ordering::Relaxed)
            }
            Held::Shared(_) => false,
        }
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = Lua;
    fn deref(&self) -> &Lua {
        match self {
            Held::Shared(script) => script,
            Held::Own(own) => &own.script,
        }
    }
}

impl OwnScripts {
    /// The script `call` names: one of [`SCRIPTS`], or an own script, which falls back to the
    /// shared one (and `call` to its arguments) when the store keeps [`OWN_MAX`] already.
    pub(super) fn script(&self, call: &mut Call) -> Held<'_> {
        match call.script {
            Which::Shared(i) => Held::Shared(&SCRIPTS[i]),
            Which::Own(hot) => match self.get(&hot) {
                Some(own) => Held::Own(own),
                None => {
                    *call = hot.shared(call.args[0]);
                    self.script(call)
                }
            },
        }
    }

    /// `hot`'s own script, made on first use; `None` when the store keeps [`OWN_MAX`] already.
    /// Slots fill in probe order and are never emptied, so an empty slot on `hot`'s probe
    /// says that no earlier one holds it; two calls filling the same slot are serialized by
    /// its `OnceLock`, and the one that loses probes on.
    fn get(&self, hot: &Hot) -> Option<&OwnScript> {
        let start = self.hasher.hash_one(hot) as usize;
        for i in 0..OWN_SLOTS {
            let slot = &self.slots[(start.wrapping_add(i)) % OWN_SLOTS];
            let own = match slot.get() {
                Some(own) => own,
                None => {
                    if self.taken.fetch_add(1, Ordering::AcqRel) >= OWN_MAX {
                        self.taken.fetch_sub(1, Ordering::AcqRel);
                        return None;
                    }
                    let mut filled = false;
                    let own = slot.get_or_init(|| {
                        filled = true;
                        Box::new(OwnScript {
                            hot: *hot,
                            script: Lua::new(hot.own_source()),
                            sent: AtomicBool::new(false),
                        })
                    });
                    if !filled {
                        self.taken.fetch_sub(1, Ordering::AcqRel);
                    }
                    own
                }
            };
            if own.hot == *hot {
                return Some(own);
            }
        }
        None
    }
}

/// One single-key decision as Redis is asked it: which script, with which arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) script: Which,
    args: [u64; 5],
    len: usize,
}

impl Call {
    /// The script's `ARGV`, as numbers (sent as decimal text).
    pub(super) fn args(&self) -> &[u64] {
        &self.args[..self.len]
    }
}

/// How a decision on `quota` is asked: `cost` (0 to look at the level), `commit` to record an
/// admitted call, `full` for the full reply (see each script's header), `one_window` for a
/// key only ever asked under one window ([`StoreKey::names_its_window`]). A fixed window of
/// whole milliseconds that records without the full reply, on a key of one window, is its
/// hot path, through a script of the quota's own (see [`Hot`]), which reads the cost when
/// not 1 and trusts the count to be its window's. A key of one window also tells the
/// counter's and the log's scripts to skip reading whose window a state is (`ARGV[5]`'s
/// second bit, see prelude.lua: no argument more, which Redis would turn into a Lua string
/// on every call): a bare key may be asked under two.
/// `quota` is one [`supports`] accepts.
///
/// [`StoreKey::names_its_window`]: crate::store::StoreKey::names_its_window
pub(super) fn call(quota: &Quota, cost: u64, commit: bool, full: bool, one_window: bool) -> Call {
    let window_us = quota.window().as_micros() as u64;
    if quota.strategy() == Strategy::FixedWindow
        && one_window
        && commit
        && !full
        && cost > 0
        && window_us % 1_000 == 0
    {
        let hot = Hot {
            capacity: quota.capacity(),
            window_ms: window_us / 1_000,
            more: cost > 1,
        };
        return Call {
            script: Which::Own(hot),
            args: [cost, 0, 0, 0, 0],
            len: usize::from(hot.more),
        };
    }
    let [first, second] = arguments(quota);
    Call {
        script: Which::Shared(index(quota.strategy())),
        args: [
            first,
            second,
            cost,
            u64::from(commit),
            u64::from(full) | (u64::from(one_window) << 1),
        ],
        len: 5,
    }
}

/// `body` behind the strategies' functions and `lua/carry.lua` (the tests run the carry's
/// rule alone behind them: `lua_carry/`).
pub(super) fn carrying(body: &str) -> String {
    [FUNCTIONS, include_str!("../../../lua/carry.lua"), body].concat()
}

/// A quota's four numbers as the stacked script takes a limit's: its strategy, the two
/// numbers its script takes, its block in microseconds.
pub(super) fn numbers(quota: &Quota) -> [u64; 4] {
    let [first, second] = arguments(quota);
    let index = stacked_index(quota.strategy()) as u64;
    [index, first, second, quota.block_nanos() / 1_000]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spares() -> usize {
        SPARE.with(|spare| spare.borrow().len())
    }

    /// A command given back is used again, and carries nothing of its last use; an `EVAL`
    /// with the source is not kept.
    #[test]
    fn a_spare_command_is_used_again_and_carries_nothing_of_its_last_use() {
        let lua = Lua::new("return 1");
        let before = spares();
        drop(lua.command(&["a-longer-key", "another"], &[1, 22, 333], false));
        assert_eq!(spares(), before + 1);
        let short = lua.command(&["k"], &[7], false);
        assert_eq!(spares(), before);
        let mut fresh = redis::cmd("EVALSHA");
        fresh.arg(&lua.hash).arg(1).arg("k").arg(7);
        assert_eq!(short.get_packed_command(), fresh.get_packed_command());
        drop(short);
        drop(lua.command(&["k"], &[7], true));
        assert_eq!(spares(), before + 1, "an EVAL with its source is not kept");
    }

    fn hot(capacity: u64) -> Hot {
        Hot {
            capacity,
            window_ms: 1_000,
            more: false,
        }
    }

    #[test]
    fn own_scripts_filled_from_two_threads_are_one_per_quota_and_at_most_own_max() {
        let own = OwnScripts::default();
        let addresses = |from: u64| {
            (from..from + 200)
                .map(|c| own.get(&hot(c)).map(|s| s as *const OwnScript as usize))
                .collect::<Vec<_>>()
        };
        // Two threads asking for overlapping quotas at once: the same script for the same one.
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| addresses(1));
            let b = s.spawn(|| addresses(101));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(a[100..], b[..100], "capacities 101 to 200, asked by both");
        let held: Vec<_> = a.iter().chain(&b[100..]).flatten().collect();
        assert_eq!(
            held.len(),
            OWN_MAX,
            "300 quotas asked, 256 held, the rest shared"
        );
        assert_eq!(own.taken.load(Ordering::Relaxed), OWN_MAX);
        let mut distinct = held.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), held.len(), "one script per quota");
        // Each held quota finds its own script again, with its quota written in.
        for c in 1..=300 {
            if let Some(script) = own.get(&hot(c)) {
                assert_eq!(script.hot, hot(c));
                assert!(script
                    .script
                    .source
                    .starts_with(&format!("local capacity, window, cost = {c}, 1000,")));
            }
        }
    }
}
