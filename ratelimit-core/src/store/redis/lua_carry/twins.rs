//! The two sides of a history on the stand-in at a hand-driven clock: a Cluster's steps (a
//! read in the old state's slot, the script, the read after, its addition) and one server's
//! (the script reading the old state beside it), what the moved bucket owes after compared
//! (helper-82's and helper-87's probes: `erased.rs`, `probe87.rs`).

use super::across::*;
use super::*;

/// The two sides of a helper-82 history: the Cluster's and one server's (the twin), the old
/// bucket a token a second and the moved one too, both of 1000 (nothing capped).
pub(super) struct Twins<'q> {
    pub(super) cluster: Across<'q>,
    pub(super) server: Across<'q>,
    pub(super) old: &'q Quota,
    pub(super) now: u64,
}

impl<'q> Twins<'q> {
    pub(super) fn new(old: &'q Quota, new: &'q Quota) -> Self {
        let side = || Across {
            redis: Redis::new(T0).unwrap(),
            old,
            new,
            tickets: Default::default(),
        };
        Twins {
            cluster: side(),
            server: side(),
            old,
            now: T0,
        }
    }

    /// A spend of `cost` seconds on the old state, on both sides.
    pub(super) fn old_spend(&self, cost: u64) {
        for s in [&self.cluster, &self.server] {
            let reply = s.redis.decide_full(self.old, OLD, cost, true);
            assert!(matches!(reply, Reply::Array(_)), "{reply:?}");
        }
    }

    /// A reward of `units` on the old state, on both sides.
    pub(super) fn old_reward(&self, units: u64) {
        for s in [&self.cluster, &self.server] {
            s.reward(self.old, units);
        }
    }

    /// A spend of `cost` seconds on the old state kept for a refund, on both sides: its
    /// instant (the admitted reply's `reset_at`, microseconds), where its refund finds it.
    pub(super) fn old_kept_spend(&self, cost: u64) -> u64 {
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
    pub(super) fn old_refund(&self, cost: u64, spent_us: u64) {
        for s in [&self.cluster, &self.server] {
            let before = s.end(OLD, self.old);
            let reply = s.refund(self.old, cost, spent_us);
            assert_eq!(reply, Reply::Int(1));
            assert_eq!(s.end(OLD, self.old), before - cost * S, "given back");
        }
    }

    /// A lease of `slice` seconds (its id `id`) granted on the old state for a call of 1, on
    /// both sides (`lua/lease_grant.lua`, as `RedisStore`'s leases send it): the arrival time
    /// it wrote.
    pub(super) fn old_lease(&self, slice: u64, id: u64) -> u64 {
        use super::super::lease::GRANT_SCRIPT;
        let [first, second] = super::super::arguments::arguments(self.old);
        let ledger = super::super::ledger::ledger_key(OLD);
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
    pub(super) fn old_lease_return(&self, units: u64, tat: u64, id: u64) {
        use super::super::lease::RETURN_SCRIPT;
        let ledger = super::super::ledger::ledger_key(OLD);
        let erased = super::super::ledger::erased_key(OLD);
        let interval = self.old.interval_nanos() / 1_000;
        let args = [4, units, tat, interval, id];
        for s in [&self.cluster, &self.server] {
            let reply = s
                .redis
                .eval_source(RETURN_SCRIPT.text(), &[OLD, &ledger, &erased], &args);
            assert_eq!(reply, Reply::Int(units as i64));
        }
    }

    pub(super) fn old_reset(&self) {
        for s in [&self.cluster, &self.server] {
            s.reset(OLD);
        }
    }

    pub(super) fn later(&mut self, us: u64) {
        self.now += us;
        self.cluster.redis.set_time(self.now);
        self.server.redis.set_time(self.now);
    }

    /// A Cluster call's read (its id `id`), then its script with the twin's.
    pub(super) fn read_and_script(&self, id: u64) -> Read {
        let read = self.cluster.read();
        self.script(id, &read);
        read
    }

    /// The script of the call of id `id` that read `read`, on both sides.
    pub(super) fn script(&self, id: u64, read: &Read) {
        self.script_waiting(id, read, WAIT);
    }

    /// [`script`](Self::script) by a pod whose read after comes within `wait` or never.
    pub(super) fn script_waiting(&self, id: u64, read: &Read, wait: u64) {
        let held = read.held(id, wait);
        assert!(self.cluster.script(1, Some(held)), "refused on the Cluster");
        assert!(self.server.script(1, None), "refused on one server");
    }

    /// [`script`](Self::script) where the Cluster may refuse it with an error (nothing
    /// written): then one server's is not run either (the call refused, nothing spent); `Err`,
    /// the Cluster's error reply.
    pub(super) fn script_or_error(&self, id: u64, read: &Read) -> Result<(), String> {
        let held = read.held(id, WAIT);
        let admitted = self.cluster.try_script(1, Some(held))?;
        assert!(admitted, "refused on the Cluster");
        assert!(self.server.script(1, None), "refused on one server");
        Ok(())
    }

    /// The read after of the call of id `id` that read `read`, and its addition.
    pub(super) fn read_after(&self, id: u64, read: &Read) {
        self.cluster.added(read, &self.cluster.read(), id);
    }

    /// One more whole call on both sides, then what the moved bucket owes on each
    /// (microseconds from now).
    pub(super) fn owed(&self) -> (u64, u64) {
        let read = self.read_and_script(99);
        self.read_after(99, &read);
        let new = self.cluster.new;
        let owes = |s: &Across<'_>| s.end(NEW, new).saturating_sub(self.now);
        (owes(&self.cluster), owes(&self.server))
    }

    /// [`owed`](Self::owed), the Cluster owing no less than one server (asserted).
    pub(super) fn owes_no_less(&self) -> (u64, u64) {
        let (on_cluster, on_server) = self.owed();
        assert!(
            on_cluster >= on_server,
            "{on_cluster} owed on the Cluster, {on_server} on one server"
        );
        (on_cluster, on_server)
    }
}

pub(super) fn seconds_buckets() -> (Quota, Quota) {
    (
        tokens(1_000, 0, Duration::from_secs(1_000)),
        tokens(1_000, 0, Duration::from_secs(1_000)),
    )
}
