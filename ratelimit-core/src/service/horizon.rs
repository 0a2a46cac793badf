//! The reload horizon across a fleet: how long a limit a reload moved is kept, and its old
//! state carried, as long as what any service under the same key prefix wrote there may
//! hold, not only what this one saw (`Inner::own_outlasts`, `Inner::own_windows`,
//! `Inner::penalized_until`). On a store that records it ([`Store::records_horizon`]), the
//! service that writes past what is recorded raises the record first
//! ([`Store::horizon`]): a call whose quota or window of its own outlasts what is recorded,
//! a penalty whose debt ends later. Raised before the state is written: a failure refuses
//! the call (its error), or, unanswered on a store that answers failures by a policy
//! (`Allow`, `Local`), has it answered by that policy alone, never by the store
//! (`Site::failed`); either way it leaves the record raised or the state unwritten, never
//! the state past the record. A read that fails so has its call answered the same way.
//! Each service reads the record before it lets a move go: at the first call past any
//! instant where something it keeps could end (a carrying, a kept configuration's windows:
//! [`Fleet::due`]), folding it into what it saw itself; and a reload keeps every
//! configuration it would drop until such a read has confirmed it ended (`reload.rs`).
//! Plain calls make no round trip of it: one compare while nothing is due.
//!
//! A penalty's end goes into the record as time left (the store counts it on its own clock:
//! Redis' `TIME`), with the id of the service that raised it: the bound before the penalty
//! is written, and its exact end after (one round trip more where it ends later than the
//! exact end recorded). Each service reads another's ends on its own clock, and folds back
//! only ends another service raised: its own it notes exactly. The record keeps two bounds,
//! the largest and the largest of a service other than its raiser's, so that each service
//! reads the largest bound another raised (`Horizon::bound_of_others`), never one hidden
//! under a larger one of its own. A read that finds the record holding less than this
//! service knew was recorded raises it again (`read_horizon`).
//!
//! A record lost whole with its store (a Redis restarted without persistence: every key
//! gone, and this service still knowing it raised) is told by the store's count of such
//! losses ([`Store::records_lost`]): where it moved, this service forgets what it knows
//! recorded, so that its next write past nothing raises the record again before it is
//! written, and has a read due at its next call, which raises it again where it noted
//! anything of its own (`RateLimitService::notice_lost`).
//!
//! A prepared site's calls take the per-call path where a read is due, or a read raised
//! what this service knows since it was prepared (`horizon_stands`).
//!
//! A call that waits reads it too: a head of the queue about to ask the store reads it where
//! due (and raises it where a call begun now would), and a read that raised what this
//! service knows since the wait began ends the wait where a replaced configuration is kept
//! (`wait.rs`); `until_ready` reads it before each site it works out, and raises it before
//! each try. Each ask of a wait is the policy's only where its own read or raise failed.
//!
//! Not covered: a service started after the move keeps no replaced configuration to carry
//! from (a horizon says how long, not which state).
//!
//! [`Store::records_horizon`]: crate::store::Store::records_horizon
//! [`Store::horizon`]: crate::store::Store::horizon
//! [`Store::records_lost`]: crate::store::Store::records_lost

use std::sync::atomic::Ordering;

use super::{Generation, RateLimitService};
use crate::clock::Nanos;
use crate::error::Error;
use crate::store::Horizon;

mod fleet;
pub(super) use fleet::Fleet;

/// The failure a call whose read or raise of the record went unanswered hands its store's
/// policy (which logs it where failures start): see `ask.rs`.
pub(super) fn unanswered() -> Error {
    Error::Store {
        message: "the fleet's reload horizon record could not be read or raised".into(),
    }
}

/// The key prefixes `generation` runs and keeps, each once: the states it writes and carries.
fn prefixes(generation: &Generation) -> Vec<&str> {
    let mut out = vec![generation.config.key_prefix()];
    for kept in generation.previous() {
        let prefix = kept.config.key_prefix();
        if !out.contains(&prefix) {
            out.push(prefix);
        }
    }
    out
}

impl RateLimitService {
    /// Whether a call under `generation` reads the record before its site is worked out: the
    /// store records one, the generation keeps a replaced configuration, and something kept
    /// could have let go since the last read. One load and a compare otherwise.
    #[inline]
    pub(super) fn horizon_due(&self, generation: &Generation) -> bool {
        let fleet = &self.inner.fleet;
        if !fleet.records || generation.previous().is_empty() {
            return false;
        }
        let due = fleet.due.load(Ordering::Relaxed);
        due != u64::MAX && self.inner.clock.now() >= due
    }

    /// Whether a prepared site worked out under `generation` when `folds` reads had raised
    /// what this service knows still stands for it: no read has raised it since (its
    /// transition carries the old states as long as what was known then), and none is due
    /// (its calls read nothing). Else its calls take the per-call path, which reads where
    /// due. Prepared before a read, a pod's plain site carried a moved state for the
    /// configured bucket only while another's quota of its own owed 15 minutes on it: 15
    /// admitted against none on one service (probes_horizon_record_redis).
    #[inline]
    pub(super) fn horizon_stands(&self, folds: u64, generation: &Generation) -> bool {
        let fleet = &self.inner.fleet;
        !fleet.records || (folds == fleet.folds() && !self.horizon_due(generation))
    }

    /// Whether what this service noted itself (a quota or a window of a call's own) outlasts
    /// what it knows is recorded: the record is raised before the next state is written.
    /// Past the instant it asked the record be kept to by half ([`Fleet::refresh_at`]),
    /// too, where it noted anything: raised again, so that it does not expire under a
    /// state written with it; and where the store's next call connects first
    /// ([`Store::connects_first`]), so that the raise connects, and a server found to have
    /// lost the record ([`Store::records_lost`], moved within that call) has it raised
    /// before the spend (spent first, on a link made after its pod's link ended with its
    /// runtime, the state was written with no record: 15 admitted against none,
    /// `a_spend_that_connects_to_a_restarted_server_raises_the_record_first`).
    ///
    /// [`Store::connects_first`]: crate::store::Store::connects_first
    /// [`Store::records_lost`]: crate::store::Store::records_lost
    #[inline]
    pub(super) fn horizon_raise_due(&self) -> bool {
        let fleet = &self.inner.fleet;
        if !fleet.records {
            return false;
        }
        self.notice_lost();
        let (outlasts, window) = (
            self.inner.own_outlasts.load(Ordering::Relaxed),
            self.inner.own_windows.load(Ordering::Relaxed),
        );
        outlasts > fleet.recorded_outlasts.load(Ordering::Relaxed)
            || window > fleet.recorded_window.load(Ordering::Relaxed)
            || ((outlasts > 0 || window > 0)
                && (self.inner.clock.now() >= fleet.refresh_at.load(Ordering::Relaxed)
                    || self.inner.store.connects_first()))
    }

    /// Whether a call at `site` raises the record before it is decided: what this service
    /// noted outlasts it ([`horizon_raise_due`](Self::horizon_raise_due)) and the site's
    /// quota may be a call's own (resolved per call, or a prepared site's, which cannot
    /// tell), and the call spends: a plain call writes nothing past the configured quotas,
    /// which every service knows, and a look writes nothing, so neither waits for a raise
    /// nor is refused by one that fails (a look at a key whose Cluster node was up was
    /// refused while the node of the record's slot was down: cluster_stacks_attacks).
    #[inline]
    pub(super) fn horizon_raise_at(&self, site: &super::site::Site<'_>) -> bool {
        let plain = matches!(site.key, super::site::SiteKey::Parts { identity: Some(_) });
        site.spend && !plain && self.horizon_raise_due()
    }

    /// Whether `error`, met raising or reading the record for a call, has the call answered
    /// by the store's failure policy ([`Site::failed`](super::site::Site::failed)) rather
    /// than refused: where the store could not answer at all (`Error::Store`,
    /// `Error::Timeout`) and answers such failures by a policy
    /// ([`Store::answers_failures`](crate::store::Store::answers_failures): `Allow`,
    /// `Local`). The call is then never decided by the store: its read or raise unanswered,
    /// the store's answer on a link that answers again was made on what this service alone
    /// knew, or its state written before the record (1 and 15 admitted against none on one
    /// service: probes_horizon_surfaces_redis). Refused there instead, every call with a
    /// quota of its own was refused against the policy while a replica was read-only
    /// (redis_faults). A record of another shape refuses under every policy, as a store
    /// failure that is an answer.
    pub(super) fn horizon_failure_answered(&self, error: &Error) -> bool {
        matches!(error, Error::Store { .. } | Error::Timeout { .. })
            && self.inner.store.answers_failures()
    }

    /// [`read_horizon`](Self::read_horizon) where due, for a call: `Ok(true)` where it failed
    /// and the call is answered by the failure policy
    /// ([`horizon_failure_answered`](Self::horizon_failure_answered)), its error where it
    /// refuses.
    pub(super) async fn read_horizon_if_due(&self, generation: &Generation) -> Result<bool, Error> {
        if !self.horizon_due(generation) {
            return Ok(false);
        }
        self.answered_by_policy(self.read_horizon(generation).await)
    }

    /// [`raise_horizon`](Self::raise_horizon) before a call's decision, with nothing of a
    /// penalty: `Ok(true)` where it failed and the call is answered by the failure policy,
    /// its error where it refuses.
    pub(super) async fn raise_horizon_for_call(
        &self,
        generation: &Generation,
    ) -> Result<bool, Error> {
        self.answered_by_policy(self.raise_horizon(generation, (0, 0)).await)
    }

    /// A call's read or raise `done`: `Ok(true)` where it failed and the call is answered by
    /// the failure policy, the error where it refuses.
    fn answered_by_policy(&self, done: Result<(), Error>) -> Result<bool, Error> {
        match done {
            Ok(()) => Ok(false),
            Err(e) if self.horizon_failure_answered(&e) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Reads the record of every prefix `generation` writes or carries, folds it into what
    /// this service saw itself, and works out when it is due next. A record found holding
    /// less of a quota or a window of a call's own than this service knew was recorded (it
    /// was deleted or evicted: the coldest key of its prefix under an LRU policy) is raised
    /// again at once to what this service keeps, so that a service that had not read it
    /// before finds it again: one round trip more, at such a read only. (One that reads it
    /// before any service that knew it does reads nothing:
    /// `a_deleted_record_is_read_as_nothing_recorded`.)
    /// A penalty's bound and exact end known recorded and still running are raised again
    /// with it: raised again without them, a record lost after a penalty was read empty by a
    /// pod that never knew the penalty, which let the move go (15 admitted against none:
    /// `a_lost_record_holding_a_penalty_is_raised_again_by_the_pod_that_made_it`).
    pub(super) async fn read_horizon(&self, generation: &Generation) -> Result<(), Error> {
        if self.exchange(generation, Horizon::default()).await? {
            let fleet = &self.inner.fleet;
            let penalties = (
                fleet.recorded_penalized.load(Ordering::SeqCst),
                fleet.recorded_end.load(Ordering::SeqCst),
            );
            let raised = Box::pin(self.raise_horizon(generation, penalties)).await;
            if raised.is_err() {
                self.inner.fleet.unraised.store(true, Ordering::SeqCst);
                self.set_horizon_due(&self.generation());
            }
            raised?;
        }
        Ok(())
    }

    /// Raises the record to what this service noted itself, and to a penalty's `bound` (before
    /// it is written) or its exact `end` (after: instants on this service's clock, 0 for
    /// none), then folds the record back as a read.
    pub(super) async fn raise_horizon(
        &self,
        generation: &Generation,
        (bound, end): (Nanos, Nanos),
    ) -> Result<(), Error> {
        let (outlasts, window) = (
            self.inner.own_outlasts.load(Ordering::Relaxed),
            self.inner.own_windows.load(Ordering::Relaxed),
        );
        let now = self.inner.clock.now();
        let penalty = |until: Nanos| {
            let left = until.saturating_sub(now);
            let by = if left > 0 { self.inner.fleet.id } else { 0 };
            crate::store::Penalty { left, by }
        };
        let (penalty_bound, penalty_end) = (penalty(bound), penalty(end));
        let longest = (outlasts.max(window)).max(penalty_bound.left.max(penalty_end.left));
        let raise = Horizon {
            outlasts,
            window,
            penalty_bound,
            penalty_end,
            penalty_other: crate::store::Penalty::default(),
            keep_nanos: longest.saturating_mul(2),
        };
        self.exchange(generation, raise).await?;
        let refresh = now.saturating_add(outlasts.max(window));
        self.inner
            .fleet
            .refresh_at
            .fetch_max(refresh, Ordering::Relaxed);
        Ok(())
    }

    /// Raises every prefix's record to `raise` (zeros: a read), and folds what they hold.
    /// Whether one of them held less of a quota or a window of a call's own than this
    /// service knew was recorded, raise included, or no penalty at all where this service
    /// knew one recorded that has not ended (lost since: `read_horizon`; whole, as Redis
    /// loses a key: a penalty's time left, counted on the store's clock, is not compared
    /// with an instant on this service's, which may run slower).
    async fn exchange(&self, generation: &Generation, raise: Horizon) -> Result<bool, Error> {
        let at = self.inner.clock.now();
        let fleet = &self.inner.fleet;
        let known = (
            fleet.recorded_outlasts.load(Ordering::Relaxed),
            fleet.recorded_window.load(Ordering::Relaxed),
        );
        let penalty_known = (fleet.recorded_penalized.load(Ordering::Relaxed))
            .max(fleet.recorded_end.load(Ordering::Relaxed))
            > at;
        let moved = fleet.prefixes_moved.load(Ordering::SeqCst);
        self.notice_lost();
        // Lost with the store since this service noticed (`notice_lost`): raised again at
        // this read, where the raise failed or none was made since.
        let unraised = fleet.unraised.load(Ordering::SeqCst);
        let lost_count = self.inner.store.records_lost();
        let (mut held, mut lost) = (Vec::with_capacity(1), unraised);
        for prefix in prefixes(generation) {
            let record = self.inner.store.horizon(prefix, raise).await?;
            let after = record.raised(raise);
            let no_penalty = after.penalty_bound.left == 0 && after.penalty_end.left == 0;
            lost |= after.outlasts < known.0 || after.window < known.1;
            lost |= penalty_known && no_penalty;
            held.push(record);
        }
        if raise != Horizon::default() {
            // Raised under every prefix to what this service keeps: a lost record too.
            fleet.unraised.store(false, Ordering::SeqCst);
        }
        // Each record on its own: in their max, another's penalty could hide under one of
        // this service's own.
        let until = |penalty: crate::store::Penalty| at.saturating_add(penalty.left);
        let mut least = [u64::MAX; 4];
        for record in held {
            self.fold(record, raise, at);
            let after = record.raised(raise);
            // The least bound another service reads: this one's own where it is the
            // largest, else the second (what the largest's raiser reads), which this one's
            // next bound must reach, or lie hidden under that raiser's own.
            let bound = match after.penalty_bound.by == fleet.id {
                true => after.penalty_bound,
                false => after.penalty_other,
            };
            let figures = [
                after.outlasts,
                after.window,
                until(bound),
                until(after.penalty_end),
            ];
            for (least, figure) in least.iter_mut().zip(figures) {
                *least = (*least).min(figure);
            }
        }
        // Recorded under every prefix: the least of their records.
        let known = [
            &fleet.recorded_outlasts,
            &fleet.recorded_window,
            &fleet.recorded_penalized,
            &fleet.recorded_end,
        ];
        for (known, least) in known.into_iter().zip(least) {
            known.fetch_max(least, Ordering::SeqCst);
        }
        if fleet.prefixes_moved.load(Ordering::SeqCst) != moved {
            // A reload brought a prefix in meanwhile: what was read holds for the others.
            fleet.forget_recorded();
        }
        let lost_now = self.inner.store.records_lost();
        if lost_now != lost_count {
            // The store may have lost its records meanwhile: what was read or raised may
            // have been of the server before.
            self.forget_lost(lost_now);
        }
        self.inner.fleet.read_at.fetch_max(at, Ordering::Relaxed);
        self.set_horizon_due(&self.generation());
        Ok(lost)
    }

    /// What the record held before this service's `raise` at `at`, as if this service had
    /// seen it itself; a penalty's end only where another service raised it (its time left
    /// counted from `at`, on this service's clock).
    fn fold(&self, held: Horizon, raise: Horizon, at: Nanos) {
        let (inner, fleet) = (&self.inner, &self.inner.fleet);
        let mut grew = false;
        // The latest bound of another service: the largest, or the second where the largest
        // is this service's own (its own it never reads back).
        let bound = held.bound_of_others(fleet.id);
        for (penalty, exact) in [(bound, false), (held.penalty_end, true)] {
            if penalty.left > 0 && penalty.by != fleet.id {
                let until = at.saturating_add(penalty.left);
                let was = (fleet.penalized).fetch_max(until, Ordering::Relaxed);
                grew |= was < until;
                if exact {
                    fleet.ended.fetch_max(until, Ordering::Relaxed);
                }
            }
        }
        let record = held.raised(raise);
        let was = (inner.own_outlasts).fetch_max(record.outlasts, Ordering::Relaxed);
        grew |= was < record.outlasts;
        let was = (inner.own_windows).fetch_max(record.window, Ordering::Relaxed);
        grew |= was < record.window;
        if grew {
            fleet.folds.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Where the store's count of records lost ([`Store::records_lost`]) moved since this
    /// service last saw it, [`forget_lost`](Self::forget_lost). Before each check of what is
    /// known recorded: a Redis restarted without persistence loses the record with every
    /// key, and a pod that had raised it raised nothing more, wrote its quota of its own
    /// with no record, and another pod reading none let a move go (15 admitted against none:
    /// `a_restart_between_a_raise_and_the_spend_it_covers_loses_the_record`). One call and a
    /// load on a store that records the horizon; none on another.
    ///
    /// [`Store::records_lost`]: crate::store::Store::records_lost
    #[inline]
    fn notice_lost(&self) {
        let lost = self.inner.store.records_lost();
        if lost != self.inner.fleet.lost_seen.load(Ordering::Acquire) {
            self.forget_lost(lost);
        }
    }

    /// The store's records may have been lost (its count of losses now `lost`): what is
    /// known recorded is forgotten, so that the next write past nothing raises the record
    /// again; where this service noted anything of its own, a read is due at every call
    /// until a raise is made ([`Fleet::unraised`]), and raises it again (a pod that writes
    /// nothing more still keeps the record of what it wrote, on a server that kept the
    /// states and lost the record: a failover past the replication of the raise). Forgotten
    /// before the count is noted seen: a call that sees it seen sees it forgotten.
    #[cold]
    #[inline(never)]
    fn forget_lost(&self, lost: u64) {
        let fleet = &self.inner.fleet;
        fleet.forget_recorded();
        let own = self.inner.own_outlasts.load(Ordering::Relaxed) > 0
            || self.inner.own_windows.load(Ordering::Relaxed) > 0;
        if own {
            fleet.unraised.store(true, Ordering::SeqCst);
        }
        fleet.lost_seen.store(lost, Ordering::Release);
        if own {
            self.set_horizon_due(&self.generation());
        }
    }

    /// Whether a penalty's bound `until` is raised before the penalty is written: it
    /// outlasts what is recorded, as another service reads it (`Fleet::recorded_penalized`).
    pub(super) fn penalty_raise_due(&self, until: Nanos) -> bool {
        let fleet = &self.inner.fleet;
        fleet.records && {
            self.notice_lost();
            until > fleet.recorded_penalized.load(Ordering::Relaxed)
        }
    }

    /// Whether a penalty's exact end `end`, noted after it was written, is raised: it
    /// outlasts the exact end recorded (a bound may hide it: `Fleet::penalized`).
    pub(super) fn penalty_end_due(&self, end: Nanos) -> bool {
        let fleet = &self.inner.fleet;
        fleet.records && {
            self.notice_lost();
            end > fleet.recorded_end.load(Ordering::Relaxed)
        }
    }

    /// After a reload installed `next` over `running`: where `next` writes or carries under
    /// a key prefix `running` did not, what this service knows is recorded is forgotten (it
    /// was known of the other prefixes' records), so that its next write past nothing
    /// raises the record of every prefix it runs. One raise more per such reload, by a
    /// service that writes past the configured quotas.
    pub(super) fn horizon_prefixes_moved(&self, running: &Generation, next: &Generation) {
        let fleet = &self.inner.fleet;
        let before = prefixes(running);
        if !fleet.records || prefixes(next).iter().all(|p| before.contains(p)) {
            return;
        }
        fleet.prefixes_moved.fetch_add(1, Ordering::SeqCst);
        fleet.forget_recorded();
    }

    /// Works out when a call under `generation` reads the record next: the first instant
    /// past the last read where anything it keeps could let go (a configured window or
    /// carrying of each kept configuration, what own quotas, own windows and penalties hold
    /// it to). Worked out as a reload installs a generation and after every read.
    pub(super) fn set_horizon_due(&self, generation: &Generation) {
        let fleet = &self.inner.fleet;
        if !fleet.records {
            return;
        }
        let read_at = fleet.read_at();
        let own = self.inner.own_windows.load(Ordering::Relaxed);
        let outlasts = self.inner.own_outlasts.load(Ordering::Relaxed);
        let penalized = fleet.penalized.load(Ordering::Relaxed);
        let mut due = u64::MAX;
        for kept in generation.previous() {
            let at = |span: Nanos| kept.replaced_at.saturating_add(span);
            let config = &kept.config;
            let quotas = (config.tiers().iter().map(|t| t.quota)).chain(config.plain_quota());
            let spans = quotas.flat_map(|q| [q.window_nanos(), q.outlasts_by()]);
            let held = kept.held(own, outlasts, penalized).0;
            let ends = (spans.chain([own, outlasts]).map(at)).chain([
                held,
                kept.penalized_until,
                penalized,
            ]);
            for end in ends.filter(|&end| end > read_at) {
                due = due.min(end);
            }
        }
        if fleet.unraised.load(Ordering::SeqCst) {
            due = 0;
        }
        fleet.due.store(due, Ordering::Relaxed);
    }
}
