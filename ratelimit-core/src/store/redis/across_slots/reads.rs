//! The reads a carried spend across Cluster slots makes before its script: each old state in
//! another slot than the script's ([`RedisStore::read_across_slots`]) and, for a spend checked by
//! a read after, the clock of the node the script runs on ([`RedisStore::moved_clock`]).

use std::time::Instant;

use redis::cluster_routing::Slot;

use super::super::arguments::supported;
use super::super::given::Read;
use super::super::reply::unexpected;
use super::super::round_trip::Connection;
use super::super::RedisStore;
use super::{level_call, read_after_within, LEVEL_SCRIPT};
use crate::error::Error;
use crate::store::{Carry, Check, Stacked};

impl RedisStore {
    /// On a Cluster, each state `stacked` carries from another slot than the script's (its
    /// first key's): what it holds, read there first ([`LEVEL_SCRIPT`], a round trip each),
    /// `None` for the others; empty when every one lies in the script's slot. A budget
    /// without a user key has no hash tag (its empty tag `{}` Redis does not take for one), so
    /// the state a reload moved it away from lies in another slot: carried in one script, the
    /// call was refused whole (`CROSSSLOT`) for the whole time the old state is carried.
    ///
    /// Not one atomic step with the decision, as one script is: the times read are counted
    /// from the later script's clock, so carried no shorter (over by the round trip between,
    /// never under), as long as nothing writes the old state between. This call no longer
    /// decides on it (`OldState::carried_at`), but a pod whose old window has not ended
    /// (reloaded later, or on another clock) does, and a spend is checked for that by reading
    /// again after it ([`run_checked`](Self::run_checked)). So only one way: a block carried
    /// alone both ways (`Carry::block_only`, while the old state is decided too), each way
    /// over by a round trip, would be pushed later at every call for as long as calls come;
    /// those stay within a slot (`slots.rs`), and one from elsewhere is left to Redis to
    /// refuse (`CROSSSLOT`).
    ///
    /// `timed`: the reads are a carried spend's, checked by reading again
    /// ([`run_checked`](Self::run_checked)): the script's node's TIME is read first
    /// ([`moved_clock`](Self::moved_clock), one round trip more), each read's [`Read::began`], which the script
    /// reckons its age from on that node's own clock (`late` in `lua/carry.lua`); else 0.
    pub(in crate::store::redis) async fn read_across_slots(
        &self,
        stacked: &Stacked<'_>,
        asked: &[&Check<'_>],
        timed: bool,
        sent: Instant,
    ) -> Result<Vec<Option<Read>>, Error> {
        let carried = stacked.carried();
        let into = |carry: &Carry<'_>| &stacked.checks()[carry.into];
        let Some(first) = (asked.first().copied()).or_else(|| carried.first().map(into)) else {
            return Ok(Vec::new());
        };
        let slot = Slot::for_key(first.key.as_str());
        let elsewhere =
            |carry: &Carry<'_>| !carry.block_only && Slot::for_key(carry.from.as_str()) != slot;
        if !self.is_cluster() || !carried.iter().any(elsewhere) {
            return Ok(Vec::new());
        }
        supported(stacked)?;
        let began = match timed {
            true => (self.moved_clock(first.key.as_str(), sent)).await?,
            false => 0,
        };
        let mut given = Vec::with_capacity(carried.len());
        for carry in carried {
            if !elsewhere(carry) {
                given.push(None);
                continue;
            }
            let wait = read_after_within(self.inner.options.timeout);
            let (keys, args) = level_call(carry, into(carry).quota, wait);
            let keys = keys.each_ref().map(String::as_str);
            let read: Vec<i64> = self.run(&LEVEL_SCRIPT, &keys, &args, false, sent).await?;
            match read[..] {
                [debt, left, at, erased] if debt >= 0 && left >= 0 && at >= 0 && erased >= 0 => {
                    given.push(Some(Read {
                        debt: debt.unsigned_abs(),
                        left: left.unsigned_abs(),
                        at: at.unsigned_abs(),
                        erased: erased.unsigned_abs(),
                        began,
                    }))
                }
                _ => return Err(unexpected(&read)),
            }
        }
        Ok(given)
    }

    /// The clock of the node `key`'s slot is on, in microseconds since the epoch (`TIME`),
    /// within the timeout from `sent`: read before a carried spend's reads in other slots
    /// ([`read_across_slots`](Self::read_across_slots)), the one clock its script, on that
    /// node, reckons their age on (`late` in `lua/carry.lua`). Commands, not a script: a
    /// node pausing writes (`CLIENT PAUSE WRITE`, as a failover does) still answers them, as
    /// it answers the reads (a script, whatever it does, is held as a write). `TIME` has no
    /// key, so follows no `MOVED`: sent alone, routed by the client's slot map, a stale map
    /// read the clock of a master no longer serving the slot while the script ran on the one
    /// that does, their skew back in the reckoning
    /// (`probe100_a_stale_slot_map_reads_the_clock_of_a_master_not_serving_the_slot`,
    /// carries/). So it is sent behind a read of `key` (`EXISTS`) on the same link to the
    /// slot's primary (never a replica, whatever the client reads from), and
    /// taken only from a reply whose `EXISTS` was answered: a node not serving the slot
    /// answers that `MOVED`, and the client sends both again where it names (a reply with a
    /// redirect or any error left in it is the read's failure, `refused_or`). Not a
    /// transaction: one whose `EXEC` a node refused (an ACL) would leave the shared link
    /// queueing every command after it. Left: a slot's primary changing between this read
    /// and the script (a failover, a migration within the call), or this clock stepping,
    /// moves the reckoning by as much
    /// (`probe100_a_clock_read_ahead_of_the_scripts_carries_a_stall`, lua_carry/).
    async fn moved_clock(&self, key: &str, sent: Instant) -> Result<u64, Error> {
        use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
        let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
        let value = self
            .bounded(sent, |connection| async move {
                let mut clock = redis::pipe();
                clock.cmd("EXISTS").arg(key).cmd("TIME");
                let values = match connection {
                    Connection::Cluster(mut c) => c.route_pipeline(clock, 0, 2, route).await,
                    Connection::Single(mut c) => clock.query_async(&mut c).await,
                };
                // A reply refused (a redirect left in it, an ACL) is the read's failure.
                (values.and_then(|v| redis::Value::Array(v).extract_error()))
                    .map_err(|e| self.error("could not read the moved state's clock", &e))
            })
            .await?;
        match redis::from_redis_value_ref::<(u64, (u64, u64))>(&value) {
            Ok((_, (s, us))) if s < 1 << 32 && us < 1_000_000 => Ok(s * 1_000_000 + us),
            _ => Err(unexpected(&value)),
        }
    }
}
