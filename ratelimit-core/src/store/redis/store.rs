//! [`RedisStore`]: the connection, one EVALSHA per decision, and the scripts' replies.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::OnceCell;

use super::across_slots::LEVEL_SCRIPT;
use super::arguments::supports;
use super::eviction::Policy;
use super::lease::Leases;
use super::ledger::RESET_SCRIPT;
use super::link::Links;
use super::options::RedisOptions;
use super::redaction::{secrets, store_error};
use super::refusals::Refusals;
use super::reply::{full, unexpected, RedisClock, Reply};
use super::round_trip::{runtime_ready, Client};
use super::scripts::{call, OwnScripts, ADJUST_SCRIPT, REFUND_SCRIPT, SCRIPTS};
use super::stacked::STACKED_SCRIPT;
use crate::algorithm::{self, Verdict};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::{Quota, QuotaError};
use crate::store::{Adjustment, Check, Mode, Refund, Request, Stacked, Store, StoreKey};

pub(super) struct Inner {
    pub(super) options: RedisOptions,
    pub(super) secrets: Vec<String>,
    /// The server or cluster, and the connections to it (`round_trip`).
    pub(super) client: Client,
    /// Redis' eviction policy, once the first connection has asked.
    pub(super) eviction: OnceLock<Policy>,
    /// Where the fixed window's short replies are placed in time.
    pub(super) clock: RedisClock,
    /// Refusals answered without a round trip until their retry time.
    pub(super) refusals: Refusals,
    /// Hot keys' leased budgets, when [`RedisOptions::leases`] asks for them.
    pub(super) leases: Option<Leases>,
    /// The fixed window's hot scripts with their quota written in.
    own: OwnScripts,
    /// How many of the one server's links were lost (`link`): leases' epoch, and with the
    /// links that found another server, [`Store::records_lost`].
    ended: Arc<AtomicU64>,
}

/// Limiter state in Redis, shared by every process that uses the same server (or cluster) and
/// key prefix.
///
/// - **One round trip per decision**: each strategy is one Lua script (`algorithm/*.lua` in this
///   crate), run with `EVALSHA`, and sent with its source (`EVAL`, one round trip) only when
///   Redis answers `NOSCRIPT`.
/// - **Redis' clock**: the scripts read `TIME`, so processes whose clocks disagree still make
///   the same decisions. Times are counted in microseconds, `TIME`'s resolution: a decision is
///   the in-memory algorithm (the same rules) evaluated in microseconds, and
///   `reset_at` / `retry_after` are Redis' times.
/// - **One key per decision**, written with its expiry in the same script: nothing outlives
///   its window. In a cluster the user key is the hash tag, so one decision is one slot.
/// - **Integer state where it can be**: a fixed window of whole milliseconds keeps a bare
///   count that expires at the window's last millisecond, so its TTL tells its window. An
///   admitted call that spends is one `INCR` (the expiry is set on the window's first hit, a
///   refusal reads the `PTTL` for its wait), in a script with the quota written in (no
///   argument to read, for up to 256 quotas a store), and replies with the count alone; the
///   store places it in the window of its estimate of Redis' clock, measured by a full reply
///   at most once a second. A call sent within a few milliseconds of a window's edge, where
///   the estimate cannot tell the window, asks for the full reply instead (Redis' time). What
///   is admitted is Redis' decision alone.
///   The string state of earlier versions under such a window is refused as the wrong shape
///   (until it expires, at the end of its window). The sliding log is a list, newest entry
///   first, whose head names the oldest live entry and the units in the window: an admitted call
///   reads one entry and pushes one, however long the log. The sliding window counter is a
///   hash of integer counts by window number: a call is `HMGET` and `HINCRBY`. Both answer an
///   admitted call with one integer, placed in time like the fixed window's; the sorted set
///   and the string of earlier versions are refused as the wrong shape until they expire.
/// - **Refusals without round trips**: a key Redis refused until its `retry_after` is
///   refused again in this process, for calls of at least that cost under the same limit,
///   until then (at most [`RedisOptions::local_refusals`] keys), so a flood on one refused key
///   costs Redis nothing. A [`reset`](Store::reset) through this store clears it; a reset
///   from another process is not seen here, and this process keeps refusing the key until the
///   refusal's retry time, as if the reset had come that much later. With leases, a refusal
///   is held no longer than [`LeaseOptions::idle`](super::LeaseOptions::idle): units another
///   process's lease gives back are admitted here from then. Stacked limits
///   ([`Store::decide_all`]) always ask Redis.
/// - **Leases for hot keys** (opt-in, [`RedisOptions::leases`]): a fixed window or token
///   bucket decision that spends takes a slice of the key's budget in one round trip and
///   spends the rest in the process, so one hot key costs one round trip per slice; see
///   [`LeaseOptions`](super::LeaseOptions) for what is exact and what can go unspent.
/// - **Refunds, blocks, penalties** (limits that follow outcomes): a spend kept for a refund
///   ([`Mode::Keep`]) and any call under a quota with a block are decided by the stacked
///   script (one round trip), which stamps each key spent from and reads and begins blocks,
///   each a key beside the state in its Cluster slot; a refund gives back only to keys still
///   holding their stamp (nothing after a reset, a restart or a flush); a penalty or a reward
///   is one run of the strategy's script. None of them is answered from a lease or a held
///   refusal.
/// - **Decided at once**: a call answered in the process (a leased unit, a refusal held) is
///   answered by [`Store::decide_now`], so the service decides it with no future and nothing
///   allocated (`RateLimitService::consume_now` returns it).
/// - **Fails closed on foreign state**: a key holding anything its script did not write
///   (another type, another strategy's encoding, corrupt data) is answered with
///   [`Error::UnexpectedState`] and left as it is, never read as a fresh key.
/// - **Eviction**: on its first connection (or [`connect`](Self::connect)) the store asks
///   Redis for its `maxmemory-policy` where `CONFIG` is allowed. Under an `allkeys-*` policy a
///   full Redis evicts limiter keys and their limits are lost: it logs a warning, and with
///   [`RedisOptions::require_noeviction`] refuses every call with [`Error::Store`].
/// - **Bounded**: every call gives up after [`RedisOptions::timeout`] (at most a 16th of it
///   later, and 1 ms), with [`Error::Timeout`]. Against one server, a request unanswered by
///   its deadline closes its connection, so the calls behind it on that connection fail at
///   once too, and the next call connects anew: a connection answers in order, so one
///   deadline per connection bounds every call on it, without a timer per call.
/// - **One multiplexed connection per Tokio runtime that calls** (against one server: one
///   for most applications), driven by that runtime's tasks, so that no runtime waits on
///   another's; made (in a task of its own, within [`RedisOptions::connect_timeout`]) on
///   the first call, and again after it ends.
/// - Needs Redis 6.2 or later (`SET ... PXAT`, `KEEPTTL`) and a Tokio runtime (called outside
///   one, every call fails with [`Error::Store`]); connects on first use (or on
///   [`connect`](Self::connect)).
/// - A quota with a capacity of zero refuses without asking Redis (its `reset_at` is then on
///   this process's clock).
#[derive(Clone)]
pub struct RedisStore {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.inner.options)
            .field("connected", &self.connected())
            .finish()
    }
}

impl RedisStore {
    /// A store for `options`; checks the URLs but does not connect yet.
    pub fn new(options: RedisOptions) -> Result<Self, Error> {
        if let Some((field, problem)) = options.problems().into_iter().next() {
            return Err(Error::Store {
                message: format!("{field}: {problem}"),
            });
        }
        let secrets = secrets(&options.urls);
        let scrub = |e: redis::RedisError| store_error(&secrets, "invalid Redis URL", &e);
        // How many connections have ended (one server's: a cluster's reconnect unseen).
        let ended = Arc::new(AtomicU64::new(0));
        let client = if options.cluster {
            let builder =
                redis::cluster::ClusterClientBuilder::new(options.urls.iter().map(String::as_str))
                    .connection_timeout(options.connect_timeout)
                    .response_timeout(options.timeout)
                    .min_retry_wait(5)
                    .max_retry_wait(options.timeout.as_millis().max(10) as u64);
            Client::Cluster(Box::new(builder.build().map_err(scrub)?), OnceCell::new())
        } else {
            let client = redis::Client::open(options.urls[0].as_str()).map_err(scrub)?;
            let info = client.get_connection_info().clone();
            Client::Single(Links::new(
                info,
                options.connect_timeout,
                options.timeout,
                ended.clone(),
            ))
        };
        let hold = options.leases.as_ref().map(|leases| leases.idle);
        let refusals = Refusals::new(options.local_refusals, hold);
        let leases = options
            .leases
            .clone()
            .map(|o| Leases::new(o, ended.clone()));
        Ok(RedisStore {
            inner: Arc::new(Inner {
                secrets,
                options,
                client,
                eviction: OnceLock::new(),
                clock: RedisClock::default(),
                refusals,
                leases,
                own: OwnScripts::default(),
                ended,
            }),
        })
    }

    /// The options.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.options
    }

    /// The leased keys, when [`RedisOptions::leases`] is set.
    pub(super) fn leases(&self) -> Option<&Leases> {
        self.inner.leases.as_ref()
    }

    /// How many handles on this store exist (1: only the caller's).
    pub(super) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Connects (if not yet connected) and loads the scripts, within the timeout: call it at
    /// start-up to find out at once that Redis is unreachable.
    pub async fn connect(&self) -> Result<(), Error> {
        self.bounded(Instant::now(), |mut connection| async move {
            for script in SCRIPTS.iter().chain([
                &*STACKED_SCRIPT,
                &*LEVEL_SCRIPT,
                &*REFUND_SCRIPT,
                &*ADJUST_SCRIPT,
                &*RESET_SCRIPT,
            ]) {
                let loaded: Result<String, _> = script.load().query_async(&mut connection).await;
                loaded.map_err(|e| self.error("could not load a script", &e))?;
            }
            Ok(())
        })
        .await
    }

    /// The algorithm's verdict (in nanoseconds) and the Redis time it was taken at, before
    /// rounding to a [`Decision`]. `now` is the service's clock, used only for what is
    /// decided without asking Redis (a capacity of zero). `full` asks every script for its
    /// full reply (Redis' own `now` rather than this process's estimate of it). `named`:
    /// the key names its window ([`StoreKey::names_its_window`]); a bare key, which may be
    /// asked under two windows, never takes the fixed window's hot script, which trusts a
    /// count to be its window's, and the scripts check whose window its state is (see
    /// `scripts::call`; a lease's grant runs the full script, which checks).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn verdict(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
        full: bool,
        named: bool,
    ) -> Result<(Verdict, Nanos), Error> {
        if let Some(verdict) = Self::checked(key, quota, cost, now, commit)? {
            return Ok((verdict, now));
        }
        let clock = &self.inner.clock;
        let refusals = &self.inner.refusals;
        let started = Instant::now();
        if !full {
            if let Some(answered) = self.answered_here(key, quota, cost, commit, started) {
                return Ok(answered);
            }
        }
        if let Some(leases) = self.inner.leases.as_ref().filter(|_| commit && !full) {
            // A grant waits on Tokio's timer and may start the lease sweeper's task.
            runtime_ready()?;
            // Boxed: a grant is a round trip of its own, and every other call's future is the
            // smaller for it.
            let leased = Box::pin(leases.decide(self, key, quota, cost, started));
            if let Some(decided) = leased.await {
                return decided;
            }
        }
        let sent = RedisClock::local_us(started);
        let full = full || clock.wants_full(sent, quota);
        let mut call = call(quota, cost, commit, full, named);
        let script = self.inner.own.script(&mut call);
        let with_source = script.first_send();
        let (keys, args) = (&[key], call.args());
        // The round trip, on the link when it is open (see `Request`), else through `run`.
        let value: redis::Value = match self.request(&script, keys, args, with_source, started) {
            Some(mut request) => {
                let sent = request
                    .connection
                    .send_packed_command(&request.command)
                    .await;
                match request.answered(sent, with_source) {
                    Ok(value) => value,
                    // Redis lost the script: sent again, with its source, by `run`.
                    Err(None) => Box::pin(self.run(&script, keys, args, true, started)).await?,
                    Err(Some(e)) => return Err(e),
                }
            }
            None => self.run(&script, keys, args, with_source, started).await?,
        };
        let reply = Reply::parse(&value, quota).ok_or_else(|| unexpected(&value))?;
        let received = RedisClock::local_us(Instant::now());
        if let Reply::Full(_, at) = reply {
            clock.measured(at / 1_000, sent, received);
        }
        let (verdict, at) = reply
            .verdict(cost, quota, clock.redis_us(received))
            .ok_or_else(|| unexpected(&value))?;
        refusals.record(key, cost, quota, &verdict, started);
        Ok((verdict, at))
    }

    /// A look at the level (cost 0): the scripts decide calls that spend, so it is two looks,
    /// as in every store (`algorithm::level`).
    async fn look(&self, key: &str, quota: &Quota, now: Nanos) -> Result<Decision, Error> {
        if quota.block().is_some() {
            // A block in force is the level (the stacked script reads it; a look at cost 0
            // is otherwise admitted), refused with a call of cost 1's wait, as every level
            // (`algorithm::level`): the later of the block's end and the state's own wait for
            // that call. The look at cost 0 alone was told the block's end where the state
            // owed past it, as the memory store's look is not.
            let blocked = |cost| {
                let check = [Check {
                    key: StoreKey::composed(key),
                    quota,
                    cost,
                }];
                async move {
                    let stacked = Stacked::new(&check, now, Mode::Look)?;
                    let decided = self.verdicts(&stacked).await?.pop();
                    decided.ok_or_else(|| unexpected(&"no reply"))
                }
            };
            let (level, at, _) = blocked(0).await?;
            if !level.allowed {
                let (one, _, _) = blocked(1).await?;
                let verdict = algorithm::with_retry(level, one);
                return Ok(Decision::for_quota(verdict, at, quota));
            }
        }
        let (level, at) = self.verdict(key, quota, 0, now, false, false, true).await?;
        if !algorithm::needs_retry(&level) {
            return Ok(Decision::for_quota(level, at, quota));
        }
        let (one, at) = self.verdict(key, quota, 1, now, false, false, true).await?;
        let verdict = algorithm::with_retry(level, one);
        Ok(Decision::for_quota(verdict, at, quota))
    }

    /// Several limits as one decision, in one round trip (`lua/stacked.lua`), each with the
    /// stamp of the state it spent from in [`Mode::Keep`] (else, and for a refusal, 0). `now`
    /// is the service's clock, for what is decided without asking Redis.
    pub(crate) async fn verdicts(
        &self,
        stacked: &Stacked<'_>,
    ) -> Result<Vec<(Verdict, Nanos, (u64, Nanos))>, Error> {
        let (checks, now, commit) = (stacked.checks(), stacked.now(), stacked.spends());
        let local = crate::store::precheck_all(stacked)?;
        for check in checks {
            supports(check.quota)?;
        }
        // A limit refused without asking Redis (a zero capacity): the others are only looked at.
        let commit = commit && local.iter().all(Option::is_none);
        let stamping = commit && stacked.mode() == Mode::Keep;
        let asked: Vec<&Check<'_>> = checks
            .iter()
            .zip(&local)
            .filter(|(_, l)| l.is_none())
            .map(|(c, _)| c)
            .collect();
        // Run when a limit is asked or a state carried (into any check, a zero capacity's
        // too, as every store carries).
        let reply = match self.slot_groups(stacked, &asked) {
            None => self.run_stacked(stacked, &asked, commit, stamping).await?,
            // Keys in several Cluster slots: decided slot by slot (`slots.rs`), boxed, as
            // only such a call pays for it.
            Some(groups) => {
                Box::pin(self.run_across_slots(stacked, &asked, &groups, commit, stamping)).await?
            }
        };
        // With a stamp, the state's shift and the stamp follow each reply.
        let each = if stamping { 7 } else { 5 };
        if reply.len() != each * asked.len() {
            return Err(unexpected(&reply));
        }
        let mut replies = reply
            .chunks_exact(each)
            .map(|r| {
                let kept = |i: usize| -> Option<u64> {
                    r.get(i).map_or(Some(0), |&n| u64::try_from(n).ok())
                };
                let shift = kept(5).and_then(|us| us.checked_mul(1_000));
                full(&r[..5])
                    .zip(shift.zip(kept(6)))
                    .map(|((verdict, at), (shift, stamp))| (verdict, at, (stamp, shift)))
                    .ok_or_else(|| unexpected(&r))
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        local
            .into_iter()
            .map(|l| match l {
                Some(verdict) => Ok((verdict, now, (0, 0))),
                None => replies.next().ok_or_else(|| unexpected(&"no reply")),
            })
            .collect()
    }
}

impl RedisStore {
    /// [`verdicts`](Self::verdicts) as decisions.
    async fn decisions(&self, stacked: &Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let verdicts = self.verdicts(stacked).await?;
        Ok(stacked
            .checks()
            .iter()
            .zip(verdicts)
            .map(|(c, (v, at, (stamp, shift)))| {
                Decision::for_quota(v, at, c.quota)
                    .stamped(stamp)
                    .shifted(shift)
            })
            .collect())
    }
}

impl Store for RedisStore {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let (key, quota, cost, now) = (
            request.key().as_str(),
            request.quota(),
            request.cost(),
            request.now(),
        );
        let by_stacked = request.mode() == Mode::Keep || quota.block().is_some();
        if by_stacked && cost > 0 {
            // A spend kept for a refund is stamped, and a block read and begun, by the
            // stacked script, as one limit (boxed, as a look).
            let check = [Check {
                key: request.key(),
                quota,
                cost,
            }];
            let stacked = Stacked::new(&check, now, request.mode())?;
            let mut decided = Box::pin(self.decisions(&stacked)).await?;
            return decided.pop().ok_or_else(|| unexpected(&"no reply"));
        }
        if request.mode() == Mode::Look && cost == 0 {
            // Boxed: a look's two round trips would make every call's future the larger.
            return Box::pin(self.look(key, quota, now)).await;
        }
        let named = request.key().names_its_window();
        let (verdict, at) = self
            .verdict(key, quota, cost, now, request.spends(), false, named)
            .await?;
        Ok(Decision::for_quota(verdict, at, quota))
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        if !stacked.spends() && stacked.checks().iter().any(|c| c.cost == 0) {
            // Looks at the level spend nothing, so they need no single step: each is the
            // two looks `decide` makes, after the states carried are (a run of their own,
            // which asks no limit: what a carry writes only ever holds a key to more).
            // (An error `decide` would answer, a clock out of range, carries nothing.)
            crate::store::precheck_all(&stacked)?;
            self.run_stacked(&stacked, &[], false, false).await?;
            let mut decisions = Vec::with_capacity(stacked.checks().len());
            for request in stacked.requests() {
                decisions.push(Store::decide(self, request).await?);
            }
            return Ok(decisions);
        }
        self.decisions(&stacked).await
    }

    /// Answered in the process, with no round trip: a call refused until a retry time that
    /// has not come (see [`RedisOptions::local_refusals`]), or one that spends a unit of its
    /// key's lease (see [`RedisOptions::leases`]). Looks at the level (cost 0) and everything
    /// else: `None`.
    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        self.decided_here(&request)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        self.reset_key(key).await
    }

    fn supports(&self, quota: &Quota) -> Result<(), QuotaError> {
        supports(quota)
    }

    /// Spends asked in [`Mode::Keep`] are stamped (see `refund.rs`).
    fn refunds(&self) -> bool {
        true
    }

    /// A quota's block is a key beside its state (see `lua/stacked.lua`).
    fn blocks(&self) -> bool {
        true
    }

    /// The stacked script carries the old states first (see `lua/carry.lua`).
    fn carries(&self) -> bool {
        true
    }

    /// Each strategy's script has an adjust mode (see `lua/prelude.lua`).
    fn adjusts(&self) -> bool {
        true
    }

    async fn adjust(&self, adjustment: Adjustment<'_>) -> Result<u64, Error> {
        self.adjust_key(&adjustment).await
    }

    /// Shared by a fleet: one key per prefix (`horizon.rs`).
    fn records_horizon(&self) -> bool {
        true
    }

    async fn horizon(
        &self,
        prefix: &str,
        raise: crate::store::Horizon,
    ) -> Result<crate::store::Horizon, Error> {
        self.raise_horizon(prefix, raise).await
    }

    /// One server's links lost or finding another server (`link`): a Redis restarted
    /// without persistence closes every connection and answers with a new `run_id`, every
    /// key gone. A cluster's connection reconnects unseen: 0 there.
    #[inline]
    fn records_lost(&self) -> u64 {
        match &self.inner.client {
            Client::Single(links) => {
                let lost = self.inner.ended.load(std::sync::atomic::Ordering::Acquire);
                lost.wrapping_add(links.servers_changed())
            }
            Client::Cluster(..) => 0,
        }
    }

    /// No open link on the calling runtime: the call connects first, and the server it
    /// finds is told (`records_lost`) only within it.
    fn connects_first(&self) -> bool {
        match (&self.inner.client, runtime_ready()) {
            (Client::Single(links), Ok(runtime)) => !links.open_on(runtime),
            _ => false,
        }
    }

    async fn refund(&self, refund: Refund<'_>) -> Result<bool, Error> {
        self.give_back(&[refund]).await
    }

    async fn refund_all(&self, refunds: &[Refund<'_>]) -> Result<bool, Error> {
        self.give_back_by_slot(refunds).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreKey;
    use std::time::Duration;

    /// The service boxes this future for every call that asks Redis, and moves it whole: it
    /// was past this bound while `bounded` took its future as an argument (an `async fn` holds
    /// its arguments apart from what it awaits, so the call was held twice) and the
    /// connection's first set-up and the lease grant were inline. It holds the connection's
    /// request inline (redis-rs' send future, which redis-rs' own callers box: a second
    /// allocation per call, from glibc's large bins, the slow ones, as is any from 1,024
    /// bytes), and little else (the sizes as measured: BENCHMARKS.md, `redis`).
    #[test]
    fn the_decision_future_stays_small() {
        let store = RedisStore::new(RedisOptions::new("redis://127.0.0.1:1")).unwrap();
        let quota = Quota::new(10, Duration::from_secs(60)).unwrap();
        let key = StoreKey::new("k").unwrap();
        let decide = Store::decide(&store, Request::spend(key, &quota, 1, 0).unwrap());
        let size = std::mem::size_of_val(&decide);
        assert!(size < 2_000, "{size} bytes");
    }

    /// `timeout` is added to the clock (`bounded`): a sum past what an `Instant` holds must
    /// not panic the call.
    #[tokio::test]
    async fn a_timeout_too_long_to_add_to_the_clock_is_no_panic() {
        let options = RedisOptions::new("redis://127.0.0.1:1").timeout(Duration::MAX);
        let store = RedisStore::new(options).unwrap();
        let quota = Quota::new(10, Duration::from_secs(60)).unwrap();
        let key = StoreKey::new("k").unwrap();
        let refused = Store::decide(&store, Request::spend(key, &quota, 1, 0).unwrap()).await;
        assert!(matches!(refused, Err(Error::Store { .. })), "{refused:?}");
    }
}
