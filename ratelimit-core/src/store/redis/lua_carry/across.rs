//! What an old state in another Cluster slot grew by between a carried spend's read and its
//! read after, added once, and the pending record of a read after that never comes.

use super::*;

/// What an old state in another Cluster slot was found to owe more after a call carried it
/// (`Given::Grown`, `run_checked` in stacked.rs): added to the moved bucket whole but for the
/// call's ticket (`Ticket`): the same call's growth again adds nothing (added since its
/// ticket's total), more growth only the part past what was added since, none of what its
/// slack held; and never past a bucket spent from now (no lockout: what admitted spends
/// leave at most).
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
    let grown = |from: u64, to: u64, slack: u64, since: u64| {
        let checks = [check(NEW, &q, 1)];
        let carried = [carry(&q)];
        let stacked = Stacked::carrying(&checks, &carried, T0 * 1_000, Mode::Look).unwrap();
        let given = [Some(Given::Grown {
            from,
            to,
            lasts: to - from,
            slack,
            since,
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
    grown(from, from + 3 * interval, 0, 0);
    assert_eq!(owed(), 8 * interval);
    grown(from, from + 3 * interval, 0, 0);
    assert_eq!(owed(), 8 * interval, "the same growth again");
    grown(from, from + 4 * interval, 0, 0);
    assert_eq!(
        owed(),
        9 * interval,
        "only what it grew by past what was added"
    );
    grown(from, from + 6 * interval, 2 * interval, 0);
    assert_eq!(owed(), 9 * interval, "its slack held the rest");
    grown(from, from + 3 * interval, 0, 4 * interval);
    assert_eq!(
        owed(),
        12 * interval,
        "a call whose script came after those additions"
    );
    grown(from, from + 100 * interval, 0, 0);
    assert_eq!(owed(), 15 * interval, "a bucket spent now, no more");
}

/// One side of [`a_call_whose_read_after_never_came_is_covered_by_the_next`]: a stand-in whose
/// moved bucket carries the old one from another Cluster slot, read there first, as
/// `run_checked` runs it (its read after, and its pending record, by hand).
pub(super) struct Across<'q> {
    pub(super) redis: Redis,
    pub(super) old: &'q Quota,
    pub(super) new: &'q Quota,
    /// The ticket each call's script gave (`Ticket`), by the call's id, for its addition.
    pub(super) tickets: std::cell::RefCell<std::collections::HashMap<u64, Ticket>>,
}

impl Across<'_> {
    pub(super) fn carried(&self) -> [Carry<'_>; 1] {
        [carry(self.old)]
    }

    /// The old state read as in its own slot (`lua/level.lua`), the moved state's node's
    /// clock read first (`TIME`: `moved_clock`), as `read_across_slots` reads them for a carried
    /// spend: one stand-in here, so one clock.
    pub(super) fn read(&self) -> Read {
        let began = self.time();
        Read {
            began,
            ..self.level(WAIT)
        }
    }

    /// The moved state's node's clock (`TIME`, as `moved_clock` reads it), microseconds.
    pub(super) fn time(&self) -> u64 {
        match self.redis.command(&["TIME"]) {
            Ok(Reply::Array(t)) => match t[..] {
                [Reply::Bulk(ref s), Reply::Bulk(ref us)] => {
                    s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap()
                }
                _ => panic!("{t:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// `lua/level.lua` alone, by a call whose read after comes within `wait` of its script:
    /// its `began` 0, for the caller to set from the moved state's node's clock.
    pub(super) fn level(&self, wait: u64) -> Read {
        let (keys, args) = level_call(&self.carried()[0], self.new, wait);
        let keys = keys.each_ref().map(String::as_str);
        match self.redis.eval_source(LEVEL_SCRIPT.text(), &keys, &args) {
            Reply::Array(items) => match items[..] {
                [Reply::Int(debt), Reply::Int(left), Reply::Int(at), Reply::Int(erased)] => Read {
                    debt: debt.unsigned_abs(),
                    left: left.unsigned_abs(),
                    at: at.unsigned_abs(),
                    erased: erased.unsigned_abs(),
                    began: 0,
                },
                _ => panic!("{items:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// A stacked script carrying `given` (or, without it, the old state read beside it, as on
    /// one server): whether it admitted a spend of `cost` (with `cost` 0, it only carries).
    pub(super) fn script(&self, cost: u64, given: Option<Given>) -> bool {
        (self.try_script(cost, given)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`script`](Self::script), its error reply's text as `Err` (written with nothing:
    /// `RATELIMIT_LATE` for a read past its call's wait, `late` in `lua/carry.lua`).
    pub(super) fn try_script(&self, cost: u64, given: Option<Given>) -> Result<bool, String> {
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
        let items = match self.redis.eval_source(STACKED_SCRIPT.text(), &keys, &args) {
            Reply::Array(items) => items,
            Reply::Error(e) => return Err(e),
            other => panic!("{other:?}"),
        };
        // After the limit's reply, the call's ticket when it will read again.
        let ticketed = matches!(given[..], [Some(Given::Held { pending, .. })] if pending > 0);
        assert_eq!(items.len(), 5 * asked.len() + if ticketed { 2 } else { 0 });
        if let [Some(Given::Held { pending, .. })] = given[..] {
            if let [.., Reply::Int(slack), Reply::Int(since)] = items[..] {
                let (slack, since) = (slack.unsigned_abs(), since.unsigned_abs());
                let ticket = Ticket { slack, since };
                self.tickets.borrow_mut().insert(pending, ticket);
            }
        }
        Ok(items.first().is_none_or(|r| *r == Reply::Int(1)))
    }

    /// `run_checked`'s addition after its read after (`after`), for the call of id `pending`
    /// that read `before`: what the old state grew by since, added (`Given::Grown`), its
    /// pending record ended.
    pub(super) fn added(&self, before: &Read, after: &Read, pending: u64) {
        let (from, by) = (before.end(), after.grown_since(before));
        let lasts = after.debt;
        let to = from + by;
        let Ticket { slack, since } = self.tickets.borrow()[&pending];
        let grown = Given::Grown {
            from,
            to,
            lasts,
            slack,
            since,
            pending,
        };
        assert!(self.script(0, Some(grown)));
    }

    /// `key` reset (`lua/reset.lua`, as `RedisStore::reset` sends it).
    pub(super) fn reset(&self, key: &str) {
        use super::super::ledger::{block_key, erased_key, ledger_key, stamp_key, RESET_SCRIPT};
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

    /// A reward of `units` on the old state (`lua/adjust.lua`, as `RedisStore::adjust_key`
    /// sends it).
    pub(super) fn reward(&self, old: &Quota, units: u64) {
        use super::super::arguments::arguments;
        use super::super::ledger::{erased_key, stamp_key};
        use super::super::scripts::{stacked_index, ADJUST_SCRIPT};
        let [first, second] = arguments(old);
        let index = stacked_index(old.strategy()) as u64;
        let args = [index, first, second, units, 5, 0];
        let (stamp, erased) = (stamp_key(OLD), erased_key(OLD));
        let keys = [OLD, stamp.as_str(), erased.as_str()];
        let reply = self.redis.eval_source(ADJUST_SCRIPT.text(), &keys, &args);
        assert!(matches!(reply, Reply::Int(_)), "{reply:?}");
    }

    /// The spend of `cost` at `spent_us` (its instant) on the old state given back
    /// (`lua/refund.lua`, as `RedisStore::give_back` sends it), its stamp written first (as
    /// the stacked script writes it for a spend that may be given back): whether it was.
    pub(super) fn refund(&self, old: &Quota, cost: u64, spent_us: u64) -> Reply {
        use super::super::arguments::arguments;
        use super::super::ledger::{erased_key, stamp_key};
        use super::super::scripts::{stacked_index, REFUND_SCRIPT};
        let [first, second] = arguments(old);
        let index = stacked_index(old.strategy()) as u64;
        let (stamp, erased) = (stamp_key(OLD), erased_key(OLD));
        let set = self.redis.command(&["SET", &stamp, "77"]);
        assert!(set.is_ok(), "{set:?}");
        let args = [index, first, second, cost, spent_us, 0, 77];
        let keys = [OLD, stamp.as_str(), erased.as_str()];
        self.redis.eval_source(REFUND_SCRIPT.text(), &keys, &args)
    }

    /// When a bucket at `key` under `quota` is full again.
    pub(super) fn end(&self, key: &str, quota: &Quota) -> u64 {
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
pub(super) const WAIT: u64 = S;

/// One step of a history [`interleaved`] runs, beside the movers' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Besides {
    /// A spend of so many seconds on the old state by a pod the reload has not reached.
    OldSpend(u64),
    /// The old state reset (`lua/reset.lua`) by such a pod.
    OldReset,
    /// A reward of so many seconds on the old state by such a pod (`lua/adjust.lua`).
    OldReward(u64),
    /// A spend of so many seconds on the old state by such a pod, kept for a refund.
    OldKept(u64),
    /// The last spend kept and not yet given back given back (`lua/refund.lua`), if any.
    OldRefund,
    /// The clock moved on by so many seconds (the old bucket refilling by time alone).
    Later(u64),
}

/// What a history of calls carrying a bucket read in another Cluster slot leaves: `movers`
/// (each its cost and whether its read after never comes) whose steps `steps` interleave
/// (`Err`: a step beside them, [`Besides`]; `Ok(i)`: the `i`-th mover's next step, from 1: its
/// read, its script, its read after, the addition after that), then each mover's steps left,
/// then one more call; the moved bucket a token every `new_interval` seconds, the old one
/// every second. The clock moves on only while no mover waits between its read and its script,
/// nor one that reads again between its script and its addition (the steps of a call; see
/// [`interleaved_stalling`] for a clock moving between the last ones); a step of it that
/// would is left out.
/// When the moved bucket is full again on the Cluster and on one server (each script reading
/// the old state beside it, at its turn), how much the old state was spent and erased by
/// resets and give-backs meanwhile and twice how far the clock moved on (microseconds), and
/// whether a pending record is left.
pub(super) fn interleaved(
    movers: &[(u64, bool)],
    steps: &[Result<usize, Besides>],
    new_interval: u64,
) -> (u64, u64, u64, bool) {
    interleaved_stalling(movers, steps, new_interval, false)
}

/// [`interleaved`], the clock moving on also while a mover waits between its script and its
/// read after, or that and its addition, when `stalls` (a read after come late: the old
/// bucket may refill between a call's read and its read after), and between its read and its
/// script: a script past its read's wait is refused on the Cluster, nothing written (`late`
/// in `lua/carry.lua`; admitted, it lost its own spend or another call's:
/// `probe82_a_stall_between_read_and_script_outlives_the_erased_key`,
/// `probe87_a_stall_between_read_and_script_past_another_calls_wait`), and so not made on
/// one server either; any other refusal or error fails the history.
pub(super) fn interleaved_stalling(
    movers: &[(u64, bool)],
    steps: &[Result<usize, Besides>],
    new_interval: u64,
    stalls: bool,
) -> (u64, u64, u64, bool) {
    // Room enough that nothing is refused nor capped: what is compared is what is owed.
    let old = tokens(1_000, 0, Duration::from_secs(1_000));
    let new = tokens(1_000, 0, Duration::from_secs(1_000 * new_interval));
    let side = || Across {
        redis: Redis::new(T0).unwrap(),
        old: &old,
        new: &new,
        tickets: Default::default(),
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
    // The spends kept for a refund: their cost and instant.
    let mut kept: Vec<(u64, u64)> = Vec::new();
    // What a give-back took from the old end (the Cluster's; the same on both).
    let given_back = |give: &dyn Fn(&Across<'_>)| {
        let before = cluster.end(OLD, &old);
        for s in [&cluster, &server] {
            give(s);
        }
        before - cluster.end(OLD, &old)
    };
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
                    began: r.began,
                };
                match cluster.try_script(*cost, Some(held)) {
                    Ok(admitted) => {
                        assert!(admitted, "refused on the Cluster");
                        assert!(server.script(*cost, None), "refused on one server");
                    }
                    // Refused, nothing written: the call is done, on both sides.
                    Err(e) if e.starts_with("RATELIMIT_LATE ") => {
                        let now = match cluster.redis.command(&["TIME"]) {
                            Ok(Reply::Array(t)) => match t[..] {
                                [Reply::Bulk(ref s), Reply::Bulk(ref us)] => {
                                    s.parse::<u64>().unwrap() * 1_000_000
                                        + us.parse::<u64>().unwrap()
                                }
                                _ => panic!("{t:?}"),
                            },
                            other => panic!("{other:?}"),
                        };
                        assert!(r.at + WAIT < now, "refused {} after its read", now - r.at);
                        *phase = 3;
                    }
                    Err(e) => panic!("{e}"),
                }
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
                kept.clear();
            }
            Err(Besides::OldReward(seconds)) => {
                moved += given_back(&|s| s.reward(&old, seconds));
            }
            Err(Besides::OldKept(cost)) => {
                let mut spent = Vec::new();
                for s in [&cluster, &server] {
                    match s.redis.decide_full(&old, OLD, cost, true) {
                        Reply::Array(items) => match items[..] {
                            [Reply::Int(1), _, Reply::Int(reset_at), ..] => spent.push(reset_at),
                            _ => panic!("{items:?}"),
                        },
                        other => panic!("{other:?}"),
                    }
                }
                assert_eq!(spent[0], spent[1]);
                kept.push((cost, spent[0].unsigned_abs()));
                moved += cost * S;
            }
            Err(Besides::OldRefund) => {
                if let Some((cost, at)) = kept.pop() {
                    moved += given_back(&|s| {
                        let reply = s.refund(&old, cost, at);
                        assert!(matches!(reply, Reply::Int(0 | 1)), "{reply:?}");
                    });
                }
            }
            Err(Besides::Later(seconds)) => {
                let scripting = |m: &Mover| m.3 == 1;
                let waiting = |m: &Mover| scripting(m) || (!m.1 && (2..=3).contains(&m.3));
                let held = !stalls && state.iter().any(waiting);
                if !held {
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
    let pending = super::super::given::pending_key(NEW, OLD);
    (
        on_cluster,
        on_server,
        moved,
        cluster.redis.expiry(&pending).is_some(),
    )
}
