//! A Redis stand-in that runs the scripts in-process (tests only): Lua 5.1, the version Redis
//! embeds, with a `redis` table over an in-memory model of the few commands the scripts
//! call, at a time the test sets. Unlike a real server, its clock can go backwards, stop at
//! an edge, or stand years ahead.
//!
//! Models, as Redis 7 does for a script:
//! - `redis.call` (a command error raises a Lua error, the script's reply is that error),
//!   `redis.pcall` (the error as a table `{err = ...}`), `redis.error_reply`,
//!   `redis.status_reply`; `KEYS` and `ARGV` set per call, as strings;
//! - arguments: strings as they are, numbers as decimal text (what `%.17g` prints for the
//!   integers the scripts pass), anything else an error;
//! - replies to Lua (RESP2): integers as numbers, bulk strings as strings, a nil bulk as
//!   `false`, arrays as tables, status as `{ok = ...}`, errors as `{err = ...}`;
//! - the script's result to a reply: numbers truncated to integers, strings as bulk, `true`
//!   as 1, `false` and `nil` as nil, a table with `err` / `ok` as an error / status, any
//!   other table as an array up to its first nil;
//! - `TIME`, `TYPE`, `GET`, `SET` (with `PXAT` or `KEEPTTL`, or neither), `INCR`, `INCRBY`,
//!   `DECRBY` (a string that is not a 64-bit integer is an error, a missing key counts from 0,
//!   the expiry is kept, an overflow is an error), `EXISTS key...`, `DEL key...`, `PEXPIRE` and `PEXPIREAT` (a time at or
//!   before the clock's millisecond deletes the key at once), `PTTL` and `PEXPIRETIME` (-2
//!   without the key, -1 without an expiry); the list commands the sliding log uses:
//!   `LPUSH key value`, `LPOP key`, `LINDEX`, `LLEN`, `LRANGE`, `LTRIM` (indices from the tail when
//!   negative, clamped to the list), `LSET` (an error without the key or the index),
//!   `LREM key count value` (from the head when positive, the tail when negative, every one
//!   when 0), an emptied list deleted; the hash commands the sliding window counter uses:
//!   `HGET`, `HMGET`, `HGETALL` (fields in the order they were added), `HINCRBY` (as `INCRBY`, by a
//!   negative amount too; a field brought to 0 stays), `HDEL` (an emptied hash is deleted),
//!   `HSET key field value` (the window before the recorded one, and to plant state);
//!   `ZADD key score member` and `ZCARD`, to plant the sorted set of earlier versions;
//!   `WRONGTYPE`. Writes to an existing key keep its expiry, except `SET` without `KEEPTTL`;
//! - expiry at the set time, checked on every access, as Redis 7 does (`keyIsExpired`: the
//!   clock in milliseconds `> when`): a key whose expiry is `E` milliseconds lives through
//!   that millisecond and is gone from the microsecond `(E + 1) * 1000`.
//!
//! Does not model: other commands or options (an error names them), RESP3, numbers that are
//! not integers (formatted as Rust prints them, not as `%.17g`), the time frozen for a whole
//! script (here time never moves during one), replication, eviction, memory limits, script
//! timeouts and the sandbox that forbids globals.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::scripts::{call, source, Call, Hot, Which, SCRIPTS};
use crate::quota::Quota;

mod collections;
mod tests;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reply {
    Int(i64),
    Bulk(String),
    Nil,
    Array(Vec<Reply>),
    Status(String),
    Error(String),
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

enum Data {
    Str(String),
    /// Head first.
    List(VecDeque<String>),
    /// (field, value), in the order the fields were added.
    Hash(Vec<(String, String)>),
    /// (score, member), as added: only planted, never read by a script.
    ZSet(Vec<(f64, String)>),
}

struct Entry {
    data: Data,
    /// Unix time in milliseconds.
    expire_ms: Option<u64>,
}

/// The keyspace and the clock.
#[derive(Default)]
struct Db {
    now_us: u64,
    keys: HashMap<String, Entry>,
}

fn int(text: &str) -> Result<i64, String> {
    text.parse()
        .map_err(|_| "ERR value is not an integer or out of range".to_owned())
}

/// A number as text: integers in full, as `%.17g` prints those the scripts use.
fn number_text(n: f64) -> String {
    format!("{n}")
}

/// A list index (negative from the tail) as a position from the head, if within `len`.
fn position(index: i64, len: usize) -> Option<usize> {
    let at = if index < 0 { len as i64 + index } else { index };
    usize::try_from(at).ok().filter(|&at| at < len)
}

impl Db {
    /// The key, unless it has expired by now (then it is deleted, as Redis does on access).
    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now_us = self.now_us;
        let expired = |e: &Entry| e.expire_ms.is_some_and(|ms| now_us / 1_000 > ms);
        if self.keys.get(key).is_some_and(expired) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// The data at `key`, created as `empty` (without an expiry) when there is none.
    fn data_or(&mut self, key: &str, empty: Data) -> &mut Data {
        if self.live(key).is_none() {
            let entry = Entry {
                data: empty,
                expire_ms: None,
            };
            self.keys.insert(key.to_owned(), entry);
        }
        &mut self.keys.get_mut(key).expect("just made").data
    }

    /// The list at `key`: `None` when there is none, `WRONGTYPE` when it is not one.
    fn list(&mut self, key: &str) -> Result<Option<&mut VecDeque<String>>, String> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                data: Data::List(l),
                ..
            }) => Ok(Some(l)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn command(&mut self, args: &[String]) -> Result<Reply, String> {
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let words: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
        match (name.as_str(), words.as_slice()) {
            ("TIME", []) => Ok(Reply::Array(vec![
                Reply::Bulk((self.now_us / 1_000_000).to_string()),
                Reply::Bulk((self.now_us % 1_000_000).to_string()),
            ])),
            ("TYPE", [key]) => Ok(Reply::Status(
                match self.live(key).map(|e| &e.data) {
                    None => "none",
                    Some(Data::Str(_)) => "string",
                    Some(Data::List(_)) => "list",
                    Some(Data::Hash(_)) => "hash",
                    Some(Data::ZSet(_)) => "zset",
                }
                .to_owned(),
            )),
            ("GET", [key]) => match self.live(key).map(|e| &e.data) {
                None => Ok(Reply::Nil),
                Some(Data::Str(s)) => Ok(Reply::Bulk(s.clone())),
                Some(_) => Err(WRONGTYPE.to_owned()),
            },
            ("SET", [key, value, options @ ..]) => {
                let kept = self.live(key).and_then(|e| e.expire_ms);
                let expire_ms = match options {
                    [] => None,
                    [o] if o.eq_ignore_ascii_case("KEEPTTL") => kept,
                    [o, ms] if o.eq_ignore_ascii_case("PXAT") => match int(ms)? {
                        ms if ms > 0 => Some(ms as u64),
                        _ => return Err("ERR invalid expire time in 'set' command".to_owned()),
                    },
                    _ => return Err(format!("ERR SET options {options:?}: not in the stand-in")),
                };
                let data = Data::Str((*value).to_owned());
                self.keys
                    .insert((*key).to_owned(), Entry { data, expire_ms });
                Ok(Reply::Status("OK".to_owned()))
            }
            ("INCR", [key]) => self.command(&["INCRBY".to_owned(), (*key).to_owned(), "1".into()]),
            ("INCRBY" | "DECRBY", [key, by]) => {
                let by = int(by).map_err(|_| "ERR value is not an integer or out of range")?;
                let by = match name.as_str() {
                    "DECRBY" => by.checked_neg().ok_or("ERR decrement would overflow")?,
                    _ => by,
                };
                let entry = self.live(key);
                let expire_ms = entry.as_ref().and_then(|e| e.expire_ms);
                let count = match entry.map(|e| &e.data) {
                    None => 0,
                    Some(Data::Str(s)) => int(s)
                        .ok()
                        .filter(|_| !s.starts_with('+') && s.trim() == s)
                        .ok_or("ERR value is not an integer or out of range")?,
                    Some(_) => return Err(WRONGTYPE.to_owned()),
                };
                let count = count
                    .checked_add(by)
                    .ok_or("ERR increment or decrement would overflow")?;
                let data = Data::Str(count.to_string());
                self.keys
                    .insert((*key).to_owned(), Entry { data, expire_ms });
                Ok(Reply::Int(count))
            }
            ("PEXPIRETIME", [key]) => Ok(Reply::Int(match self.live(key) {
                None => -2,
                Some(entry) => entry.expire_ms.map_or(-1, |ms| ms as i64),
            })),
            ("PTTL", [key]) => {
                let now_ms = self.now_us / 1_000;
                Ok(Reply::Int(match self.live(key) {
                    None => -2,
                    Some(Entry {
                        expire_ms: None, ..
                    }) => -1,
                    Some(Entry {
                        expire_ms: Some(ms),
                        ..
                    }) => (*ms as i64 - now_ms as i64).max(0),
                }))
            }
            ("PEXPIRE" | "PEXPIREAT", [key, ms]) => {
                let ms = match name.as_str() {
                    "PEXPIRE" => int(ms)?.saturating_add((self.now_us / 1_000) as i64),
                    _ => int(ms)?,
                };
                let past = ms <= (self.now_us / 1_000) as i64;
                Ok(Reply::Int(match self.live(key) {
                    // Already past (`checkAlreadyExpired`: `when <= now`): deleted at once.
                    Some(_) if past => {
                        self.keys.remove(*key);
                        1
                    }
                    Some(entry) => {
                        entry.expire_ms = Some(ms.max(0) as u64);
                        1
                    }
                    None => 0,
                }))
            }
            ("EXISTS", keys) if !keys.is_empty() => {
                let held = keys.iter().filter(|key| self.live(key).is_some()).count();
                Ok(Reply::Int(held as i64))
            }
            ("DEL", keys) if !keys.is_empty() => {
                let mut gone = 0;
                for key in keys {
                    if self.live(key).is_some() {
                        self.keys.remove(*key);
                        gone += 1;
                    }
                }
                Ok(Reply::Int(gone))
            }
            (l, words) if l.starts_with('L') => self.list_command(l, words),
            (h, words) if h.starts_with('H') => self.hash_command(h, words),
            ("ZADD", [key, score, member]) => {
                let score = score
                    .parse()
                    .map_err(|_| "ERR value is not a valid float")?;
                let Data::ZSet(z) = self.data_or(key, Data::ZSet(Vec::new())) else {
                    return Err(WRONGTYPE.to_owned());
                };
                let added = !z.iter().any(|(_, m)| m == member);
                z.retain(|(_, m)| m != member);
                z.push((score, (*member).to_owned()));
                Ok(Reply::Int(i64::from(added)))
            }
            ("ZCARD", [key]) => match self.live(key).map(|e| &e.data) {
                None => Ok(Reply::Int(0)),
                Some(Data::ZSet(z)) => Ok(Reply::Int(z.len() as i64)),
                Some(_) => Err(WRONGTYPE.to_owned()),
            },
            _ => Err(format!(
                "ERR '{name}' with {} arguments: not in the stand-in",
                words.len()
            )),
        }
    }
}

/// A command's arguments from Lua, as Redis reads them.
fn arguments(args: MultiValue) -> Result<Vec<String>, String> {
    args.into_iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.to_string_lossy()),
            Value::Integer(i) => Ok(i.to_string()),
            Value::Number(n) => Ok(number_text(n)),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers".into()),
        })
        .collect()
}

/// A reply as Redis hands it to Lua.
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    let tagged = |tag: &str, text: String| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.set(tag, text)?;
        Ok(Value::Table(t))
    };
    Ok(match reply {
        Reply::Int(i) => Value::Integer(i),
        Reply::Bulk(s) => Value::String(lua.create_string(s)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Status(s) => tagged("ok", s)?,
        Reply::Error(s) => tagged("err", s)?,
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's result as Redis turns it into a reply.
fn from_lua(value: Value) -> Reply {
    match value {
        Value::Integer(i) => Reply::Int(i),
        Value::Number(n) => Reply::Int(n as i64),
        Value::String(s) => Reply::Bulk(s.to_string_lossy()),
        Value::Boolean(true) => Reply::Int(1),
        Value::Table(t) => tagged(&t).unwrap_or_else(|| {
            let items = (1..).map_while(|i| match t.raw_get::<Value>(i) {
                Ok(Value::Nil) | Err(_) => None,
                Ok(v) => Some(from_lua(v)),
            });
            Reply::Array(items.collect())
        }),
        _ => Reply::Nil,
    }
}

fn tagged(t: &Table) -> Option<Reply> {
    if let Ok(Value::String(e)) = t.raw_get("err") {
        return Some(Reply::Error(e.to_string_lossy()));
    }
    if let Ok(Value::String(s)) = t.raw_get("ok") {
        return Some(Reply::Status(s.to_string_lossy()));
    }
    None
}

/// The stand-in: a keyspace, a clock, and the store's single-key scripts compiled once.
pub(super) struct Redis {
    db: Rc<RefCell<Db>>,
    lua: Lua,
    /// In the order of `SCRIPTS`.
    scripts: Vec<Function>,
    /// The fixed window's own hot scripts, compiled on first use.
    own: RefCell<HashMap<Hot, Function>>,
    /// Whether the fixed window's hot path takes the shared script (see `share_hot`).
    shared_hot: Cell<bool>,
    /// The scripts of several keys run by `eval_source`, compiled once, by their text's address.
    sources: RefCell<HashMap<usize, Function>>,
}

impl Redis {
    pub(super) fn new(now_us: u64) -> mlua::Result<Redis> {
        let db = Rc::new(RefCell::new(Db {
            now_us,
            ..Db::default()
        }));
        let lua = Lua::new();
        let redis = lua.create_table()?;
        let run =
            |db: Rc<RefCell<Db>>, args| arguments(args).and_then(|a| db.borrow_mut().command(&a));
        let d = db.clone();
        let call =
            lua.create_function(move |lua, args: MultiValue| match run(d.clone(), args) {
                Ok(reply) => to_lua(lua, reply),
                Err(e) => Err(mlua::Error::runtime(e)),
            })?;
        let d = db.clone();
        let pcall = lua.create_function(move |lua, args: MultiValue| {
            to_lua(lua, run(d.clone(), args).unwrap_or_else(Reply::Error))
        })?;
        let error_reply = lua.create_function(|lua, e: String| to_lua(lua, Reply::Error(e)))?;
        let status_reply = lua.create_function(|lua, s: String| to_lua(lua, Reply::Status(s)))?;
        let library = [
            ("call", call),
            ("pcall", pcall),
            ("error_reply", error_reply),
        ];
        for (name, f) in library.into_iter().chain([("status_reply", status_reply)]) {
            redis.set(name, f)?;
        }
        lua.globals().set("redis", redis)?;
        let compile = |i: usize| {
            lua.load(source(i))
                .set_name(format!("script {i}"))
                .into_function()
        };
        let scripts = (0..SCRIPTS.len()).map(compile).collect::<Result<_, _>>()?;
        Ok(Redis {
            db,
            lua,
            scripts,
            own: RefCell::default(),
            shared_hot: Cell::new(false),
            sources: RefCell::default(),
        })
    }

    /// Sets the clock (`TIME` and expiry), forwards or backwards.
    pub(super) fn set_time(&self, now_us: u64) {
        self.db.borrow_mut().now_us = now_us;
    }

    /// The decision the store asks for `quota` (see `scripts::call`), and its reply: through
    /// the fixed window's own hot script, or (`shared`) the shared one a store falls back to.
    pub(super) fn decide(&self, quota: &Quota, key: &str, cost: u64, commit: bool) -> Reply {
        let call = call(quota, cost, commit, false, true);
        match call.script {
            Which::Shared(script) => self.eval(&self.scripts[script], key, call.args()),
            Which::Own(hot) if self.shared_hot.get() => {
                let call = hot.shared(cost);
                self.decide_call(&call, key)
            }
            Which::Own(hot) => {
                let compiled = self.own.borrow().get(&hot).cloned();
                let script = match compiled {
                    Some(script) => script,
                    None => match self.lua.load(hot.own_source()).into_function() {
                        Ok(script) => self.own.borrow_mut().entry(hot).or_insert(script).clone(),
                        Err(e) => return Reply::Error(e.to_string()),
                    },
                };
                self.eval(&script, key, call.args())
            }
        }
    }

    /// [`decide`](Self::decide) with a call through one of `SCRIPTS`.
    fn decide_call(&self, call: &Call, key: &str) -> Reply {
        match call.script {
            Which::Shared(script) => self.eval(&self.scripts[script], key, call.args()),
            Which::Own(_) => Reply::Error("a shared call names an own script".into()),
        }
    }

    /// The decision through the strategy's shared script with the full reply (ARGV[5] = 1),
    /// as the stacked script asks it of each strategy's.
    pub(super) fn decide_full(&self, quota: &Quota, key: &str, cost: u64, commit: bool) -> Reply {
        self.decide_call(&call(quota, cost, commit, true, false), key)
    }

    /// The strategy's refund mode: gives back (`give`, ARGV[4] = 2) or asks whether it would
    /// give back (ARGV[4] = 3) a spend of `cost` whose admitted reply's `reset_at` was
    /// `spent_us` (ARGV[6]) and the state's shift `shift_us` (ARGV[7]), as lua/refund.lua
    /// calls it once the key's stamp is checked.
    pub(super) fn refund(
        &self,
        quota: &Quota,
        key: &str,
        cost: u64,
        (spent_us, shift_us): (u64, u64),
        give: bool,
    ) -> Reply {
        let call = call(quota, cost, false, true, false);
        let Which::Shared(script) = call.script else {
            return Reply::Error("a full reply is asked of a shared script".into());
        };
        let mut args = call.args().to_vec();
        args[3] = if give { 2 } else { 3 };
        args.extend([spent_us, shift_us]);
        self.eval(&self.scripts[script], key, &args)
    }

    /// The strategy's adjust mode: a penalty (ARGV[4] = 4) or a reward (5) of `units`, as
    /// `RedisStore::adjust_key` calls it.
    pub(super) fn adjust(&self, quota: &Quota, key: &str, units: u64, penalty: bool) -> Reply {
        let call = call(quota, units, false, true, false);
        let Which::Shared(script) = call.script else {
            return Reply::Error("a full reply is asked of a shared script".into());
        };
        let mut args = call.args().to_vec();
        args[3] = if penalty { 4 } else { 5 };
        self.eval(&self.scripts[script], key, &args)
    }

    /// From now on, [`decide`](Self::decide) asks the fixed window's shared hot script, as a
    /// store that keeps its most own scripts does.
    pub(super) fn share_hot(&self) {
        self.shared_hot.set(true);
    }

    /// `EVALSHA` of `source` (a `'static` text: the scripts of several keys) on `keys`.
    pub(super) fn eval_source(&self, source: &'static str, keys: &[&str], args: &[u64]) -> Reply {
        let argv = args.iter().map(u64::to_string);
        let run = || -> mlua::Result<Value> {
            let mut sources = self.sources.borrow_mut();
            let function = match sources.entry(source.as_ptr() as usize) {
                std::collections::hash_map::Entry::Occupied(f) => f.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(self.lua.load(source).into_function()?)
                }
            };
            let g = self.lua.globals();
            g.set("KEYS", self.lua.create_sequence_from(keys.iter().copied())?)?;
            g.set("ARGV", self.lua.create_sequence_from(argv)?)?;
            function.call::<Value>(())
        };
        match run() {
            Ok(value) => from_lua(value),
            Err(e) => Reply::Error(e.to_string()),
        }
    }

    /// `EVALSHA` of `script`.
    fn eval(&self, script: &Function, key: &str, args: &[u64]) -> Reply {
        let argv = args.iter().map(u64::to_string);
        let set = || -> mlua::Result<()> {
            let g = self.lua.globals();
            g.set("KEYS", self.lua.create_sequence_from([key])?)?;
            g.set("ARGV", self.lua.create_sequence_from(argv)?)
        };
        match set().and_then(|()| script.call::<Value>(())) {
            Ok(value) => from_lua(value),
            Err(e) => Reply::Error(e.to_string()),
        }
    }

    /// A command, as a client would send it.
    pub(super) fn command(&self, args: &[&str]) -> Result<Reply, String> {
        let args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
        self.db.borrow_mut().command(&args)
    }

    /// `None` when `key` is gone (or expired) by now, else its expiry in milliseconds.
    pub(super) fn expiry(&self, key: &str) -> Option<Option<u64>> {
        self.db.borrow_mut().live(key).map(|e| e.expire_ms)
    }
}
