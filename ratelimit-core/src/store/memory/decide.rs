//! One call's decision: the key found under its shard's read lock and decided on its cell,
//! or stored under the write lock when it is new and must be remembered.

use std::num::NonZeroU64;

use super::blocks::{block_after, blocked_verdict};
use super::cells::{claimed, Cell, Hashed, Keyed, Side, Stamp, StampedKey};
use super::tables::{by_strategy, by_strategy_arms, InTables, Tables};
use super::{locked, MemoryStore};
use crate::algorithm::{self, Verdict, Written};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::store::{Mode, Request};

impl MemoryStore {
    /// What [`Store::decide`](super::Store::decide) answers, synchronously. A [`Request`] was
    /// checked when it was made (its key's length, its cost under the quota): not again here.
    /// An admitted spend kept for a refund ([`Mode::Keep`]) carries its key's stamp, for a
    /// [`Refund`].
    #[inline(always)]
    pub(crate) fn decide_request(&self, request: &Request<'_>) -> Result<Decision, Error> {
        self.answer(request, |decided| decided, || None)
    }

    /// [`decide_request`](Self::decide_request)'s decision, as `answer` makes it (a
    /// [`Store::decide_now`](super::Store::decide_now)'s `Some`): made where the decision is,
    /// so that it is written once, where the caller reads it (wrapped after the step, it was
    /// copied whole). `bare`: the answer of a plain admission told bare, its decision not
    /// made ([`Told::Admitted`](crate::store::Told)), when the caller takes one (`None`: made,
    /// as any other).
    #[inline(always)]
    pub(crate) fn answer<R>(
        &self,
        request: &Request<'_>,
        answer: impl Fn(Result<Decision, Error>) -> R,
        bare: impl Fn() -> Option<R>,
    ) -> R {
        let key = request.key().as_str().as_bytes();
        let (quota, now) = (request.quota(), request.now());
        let (cost, mode) = (request.cost(), request.mode());
        self.decision(key, quota, cost, now, mode, answer, bare)
    }

    /// [`answer`](Self::answer) of a request on a key whose hash the caller held, as this
    /// store worked it out ([`Store::hash_of`](crate::store::Store::hash_of)): not hashed again.
    #[inline(always)]
    pub(crate) fn answer_hashed<R>(
        &self,
        request: &Request<'_>,
        hash: NonZeroU64,
        answer: impl Fn(Result<Decision, Error>) -> R,
        bare: impl Fn() -> Option<R>,
    ) -> R {
        let key = Hashed(request.key().as_str().as_bytes(), hash);
        let (quota, now) = (request.quota(), request.now());
        let (cost, mode) = (request.cost(), request.mode());
        self.decision(key, quota, cost, now, mode, answer, bare)
    }

    /// The decision of a call whose key and cost are checked, in `mode`. A call that spends
    /// under a quota with no block (every call but a look, a block's and a capacity of zero's)
    /// is decided and made a [`Decision`] in its strategy's own step
    /// ([`decision_in`](Self::decision_in)): the verdict is not handed back through memory
    /// first. The others take [`decision_aside`](Self::decision_aside).
    ///
    /// `key`: its bytes and its hash ([`KeyHasher`](super::cells::KeyHasher)).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn decision<R>(
        &self,
        key: impl Keyed,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
        answer: impl Fn(Result<Decision, Error>) -> R,
        bare: impl Fn() -> Option<R>,
    ) -> R {
        // The time's range checked first, with the sweep's compare (`time_checked`).
        if let Err(error) = self.time_checked(now) {
            return answer(Err(error));
        }
        if quota.capacity() == 0 || quota.block_nanos() > 0 || cost == 0 {
            return answer(self.decision_aside(key.bytes(), quota, cost, now, mode));
        }
        by_strategy!(
            quota.strategy(),
            self.decision_in::<_>(key, quota, cost, now, mode, answer, bare)
        )
    }

    /// [`decide_in`](Self::decide_in)'s verdict as the [`Decision`] the caller answers, reached
    /// at the decision time (never before the last sweep: `fresh_at`) and told from the
    /// call's `now` ([`Decision::for_quota_at`]); a plain admission
    /// ([`Verdict::admits_plainly`](algorithm::Verdict)) told bare instead (`bare`), when the
    /// caller takes one. Only a kept spend carries its stamp: no other decision is given back.
    /// Not read otherwise, where a wide load of it would wait on the stores that wrote it.
    #[allow(clippy::too_many_arguments)]
    fn decision_in<A: InTables, R>(
        &self,
        key: impl Keyed,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
        answer: impl Fn(Result<Decision, Error>) -> R,
        bare: impl Fn() -> Option<R>,
    ) -> R {
        let at = self.fresh_at(now);
        self.decide_in::<A, _>(key, quota, cost, at, mode, |decided| {
            let (verdict, stamp) = match decided {
                Ok(decided) => decided,
                Err(error) => return answer(Err(error)),
            };
            if verdict.admits_plainly(quota) {
                if let Some(bare) = bare() {
                    return bare;
                }
            }
            let decision = Decision::for_quota_at(verdict, at, now, quota);
            answer(Ok(stamped(decision, stamp, mode)))
        })
    }

    /// [`decision`](Self::decision) of a look (cost 0), under a quota with a block or of a
    /// capacity of zero, out of the line of the other calls.
    #[cold]
    #[inline(never)]
    fn decision_aside(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
    ) -> Result<Decision, Error> {
        if let Some(verdict) = algorithm::zero_capacity(now, quota) {
            return Ok(Decision::for_quota(verdict, now, quota));
        }
        // A clock stepped back behind the last sweep decides at the sweep's time.
        let at = self.fresh_at(now);
        let (verdict, stamp) = self.stamped_verdict(key, quota, cost, at, mode)?;
        Ok(stamped(
            Decision::for_quota_at(verdict, at, now, quota),
            stamp,
            mode,
        ))
    }

    /// Keeps `cell` as `key`'s (room for it was reserved, and the key is in no table), spent
    /// on under `quota`, `stamped` (see [`stamp_of`](Self::stamp_of)) or not: its stamp. A
    /// word cell's key keeps its mark of `quota` ([`Cell::MARKED`]).
    pub(super) fn insert<A: InTables>(
        &self,
        tables: &mut Tables,
        hash: u64,
        key: &[u8],
        quota: &Quota,
        mut cell: A::Cell,
        stamped: bool,
    ) -> Stamp {
        let stamp = if stamped { self.new_stamp() } else { 0 };
        cell.keep(match A::Cell::MARKED {
            true => StampedKey::marked(key, stamp, A::Cell::mark(quota)),
            false => StampedKey::new(key, stamp),
        });
        let stamp = cell.stamp(&tables.side);
        let hasher = &self.inner.hasher;
        A::table_mut(tables).insert_unique(hash, cell, |c| hasher.hash(c.key()));
        stamp
    }

    /// The decision, synchronously.
    #[inline]
    pub(crate) fn decide_at(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        commit: bool,
    ) -> Result<Decision, Error> {
        let key = key.as_bytes();
        crate::key::check_store_key(key)?;
        algorithm::check_cost(quota, cost, commit)?;
        let mode = Mode::of(commit, false);
        self.decision(key, quota, cost, now, mode, |decided| decided, || None)
    }

    /// [`decision_aside`](Self::decision_aside)'s verdict at `at` (its decision time), before
    /// it becomes a [`Decision`], with the stamp of the key it was decided on (0 for none: see
    /// [`stamp_of`](Self::stamp_of)), for a call whose time was checked
    /// ([`time_checked`](Self::time_checked)) under a quota of a capacity above zero.
    fn stamped_verdict(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        at: Nanos,
        mode: Mode,
    ) -> Result<(Verdict, Stamp), Error> {
        if quota.block_nanos() > 0 {
            return self.decide_with_blocks(key, quota, cost, at, mode);
        }
        self.decide_plain(key, quota, cost, at, mode)
    }

    /// The decision of a call whose quota has no block.
    #[inline(always)]
    pub(super) fn decide_plain(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        at: Nanos,
        mode: Mode,
    ) -> Result<(Verdict, Stamp), Error> {
        if cost == 0 {
            return Ok((
                self.look_at(key, quota, at, mode.spends())?,
                Stamp::default(),
            ));
        }
        by_strategy!(
            quota.strategy(),
            self.decide_in::<_>(key, quota, cost, at, mode, |decided| decided)
        )
    }

    /// A look (cost 0) is two looks at most, each its own step: the rule is
    /// `algorithm::level`'s, applied around the whole step so that a call that spends goes
    /// straight to the cell (through a closure inside the lock it measured slower:
    /// BENCHMARKS.md, `memory`). Out of the path of calls that spend, which had the look's
    /// closure built on every call otherwise (instructions under cachegrind).
    #[cold]
    #[inline(never)]
    fn look_at(
        &self,
        key: &[u8],
        quota: &Quota,
        at: Nanos,
        commit: bool,
    ) -> Result<Verdict, Error> {
        algorithm::level_or(0, commit, |cost, commit| {
            let mode = Mode::of(commit, false);
            by_strategy!(
                quota.strategy(),
                self.decide_in::<_>(key, quota, cost, at, mode, |decided| decided)
            )
            .map(|(verdict, _)| verdict)
        })
    }

    /// The decision in the strategy's own table: a stored key under the shard's read lock; a
    /// new key that must be remembered, or a spend kept on a key not stamped yet, under its
    /// write lock. With the key's stamp when the spend is kept ([`Mode::Keep`]; none otherwise).
    /// `finish` makes the answer of the verdict or the error where it is returned: handed
    /// back as a `Result` first, a decision made of it was copied whole.
    ///
    /// A hash the caller held ([`Hashed`]) is checked against the key's text before it finds
    /// no state (a fresh key) and before it stores one (the write path): every key is stored
    /// under its text's hash, so a held hash that finds the key's cell by its bytes finds the
    /// one state the text names, and one that does not is decided by the text
    /// ([`decide_by_text`](Self::decide_by_text)), never on a fresh state beside it.
    #[inline(always)]
    fn decide_in<A: InTables, R>(
        &self,
        keyed: impl Keyed,
        quota: &Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
        finish: impl Fn(Result<(Verdict, Stamp), Error>) -> R,
    ) -> R {
        let hash = keyed.hash_in(&self.inner.hasher);
        let key = keyed.bytes();
        let (commit, keep) = (mode.spends(), mode == Mode::Keep);
        {
            let tables = self.shard(hash).read();
            match A::table(&tables).find(hash, |c| c.key() == key) {
                // A kept spend on a key without a stamp stamps it first, below; a state
                // another window wrote, whose window has passed, is made this one's there
                // by a spend (a look claims nothing: `Cell::decide_passed`).
                Some(cell) if !keep || cell.kept().is_stamped() => {
                    match cell.written_elsewhere(now, quota) {
                        Written::Here => {
                            return finish(Ok(decided(cell, &tables.side, now, quota, cost, mode)))
                        }
                        Written::Elsewhere(refused) => {
                            return finish(Ok((refused, Stamp::default())))
                        }
                        Written::Passed if !commit => {
                            let verdict = cell.decide_passed(now, quota, cost);
                            return finish(Ok((verdict, Stamp::default())));
                        }
                        Written::Passed => {}
                    }
                }
                Some(_) => {}
                // A held hash of another text (or store): found nothing, decided by the text.
                None if keyed.misheld(&self.inner.hasher) => {}
                None => {
                    if tables.held_by_other(quota.strategy(), hash, key) {
                        return finish(Err(algorithm::Undecidable::UnexpectedState.into()));
                    }
                    // Later than `now` if a sweep raised the floor meanwhile: a fresh key
                    // admits any cost a call may ask, so no `retry_after` counts from it.
                    let at = self.fresh_at(now);
                    let verdict = A::Cell::fresh().decide(at, quota, cost, commit);
                    if !commit || !verdict.allowed {
                        // Nothing to remember: a fresh key only looked at or refused outright.
                        return finish(Ok((verdict, Stamp::default())));
                    }
                }
            }
        }
        if keyed.misheld(&self.inner.hasher) {
            return self.decide_by_text::<A, R>(key, quota, cost, now, mode, finish);
        }
        finish(self.with_room(hash, now, |tables| {
            // Another call may have stored the key between the two locks.
            let (table, side) = A::table_and_side(tables);
            if let Some(cell) = table.find_mut(hash, |c| c.key() == key) {
                if let Err(refused) = claimed(cell, now, quota) {
                    return Ok(Some((refused, Stamp::default())));
                }
                if keep {
                    self.ensure_stamped(cell);
                }
                return Ok(Some(decided(cell, side, now, quota, cost, mode)));
            }
            if tables.held_by_other(quota.strategy(), hash, key) {
                return Err(algorithm::Undecidable::UnexpectedState.into());
            }
            if !self.reserve() {
                return Ok(None);
            }
            let cell = A::Cell::fresh();
            let verdict = cell.decide(self.fresh_at(now), quota, cost, commit);
            let stamp = self.insert::<A>(tables, hash, key, quota, cell, keep);
            Ok(Some((verdict, stamp)))
        }))
    }

    /// [`decide_in`](Self::decide_in) of a call whose held hash is not its key's: the key
    /// hashed by its text, as a call that held none.
    #[cold]
    #[inline(never)]
    fn decide_by_text<A: InTables, R>(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        now: Nanos,
        mode: Mode,
        finish: impl Fn(Result<(Verdict, Stamp), Error>) -> R,
    ) -> R {
        self.decide_in::<A, R>(key, quota, cost, now, mode, finish)
    }

    /// The decision of a call whose quota blocks a key once a call on it is refused
    /// ([`Quota::block`]), around the plain one: refused while a block is in force, and a
    /// spend the algorithm refuses begins one. Out of line: a quota without a block pays one
    /// test for it. A spend is decided under the shard's write lock, the look at the block,
    /// the decision and the block it begins as one: with the look under a lock of its own, a
    /// refund or a reward landing between it and the decision let a call in during a block
    /// that had begun meanwhile (helper 27's observation). A look takes the read lock.
    #[cold]
    #[inline(never)]
    pub(super) fn decide_with_blocks(
        &self,
        key: &[u8],
        quota: &Quota,
        cost: u64,
        at: Nanos,
        mode: Mode,
    ) -> Result<(Verdict, Stamp), Error> {
        let hash = self.inner.hasher.hash(key);
        let commit = mode.spends();
        if !commit {
            let blocked = {
                let tables = self.shard(hash).read();
                // Read again under the lock: a block a sweep dropped ended by the floor.
                let at = self.fresh_at(at);
                tables.blocks.blocked(quota, hash, key, at)
            };
            let (own, stamp) = self.decide_plain(key, quota, cost, at, mode)?;
            return Ok(match blocked {
                Some(until) => (blocked_verdict(until, at, &own), Stamp::default()),
                None => (own, stamp),
            });
        }
        let strategy = quota.strategy();
        self.with_room(hash, at, |tables| {
            // Read again under the lock: a key or block a sweep dropped ended by the floor.
            let at = self.fresh_at(at);
            let blocked = tables.blocks.blocked(quota, hash, key, at);
            if tables.held_by_other(strategy, hash, key) {
                return Err(algorithm::Undecidable::UnexpectedState.into());
            }
            let (verdict, stored) =
                by_strategy!(strategy, locked::look(tables, hash, key, quota, cost, at));
            if let Some(until) = blocked {
                return Ok(Some((
                    blocked_verdict(until, at, &verdict),
                    Stamp::default(),
                )));
            }
            if let Some(until) = block_after(&verdict, quota, at, commit) {
                tables.blocks.block(hash, key, until, &self.inner.hasher);
                return Ok(Some((
                    blocked_verdict(until, at, &verdict),
                    Stamp::default(),
                )));
            }
            if !verdict.allowed {
                return Ok(Some((verdict, Stamp::default())));
            }
            if !stored && !self.reserve() {
                return Ok(None);
            }
            let (verdict, stamp) = by_strategy!(
                strategy,
                locked::spend(tables, self, hash, key, quota, cost, at)
            );
            let stamp = match mode {
                Mode::Keep => by_strategy!(strategy, self.stamp_of(tables, hash, key)),
                _ => stamp,
            };
            Ok(Some((verdict, stamp)))
        })
    }
}

/// `decision`, carrying `stamp` for a refund when the spend is kept ([`Mode::Keep`]).
#[inline(always)]
fn stamped(decision: Decision, stamp: Stamp, mode: Mode) -> Decision {
    match mode {
        Mode::Keep => stamp.on(decision),
        Mode::Spend | Mode::Look => decision,
    }
}

/// `cell`'s decision, with its key's stamp for a kept spend ([`Mode::Keep`]): only a kept
/// spend's stamp is read (`decide_request`), so no other call reads the key's stamp or the
/// side table for it. Called, not a closure, in both of `decide_in`'s locks: a closure called
/// in both was left out of line (a fixed window's call cost a tenth more under cachegrind).
#[inline(always)]
fn decided<C: Cell>(
    cell: &C,
    side: &Side,
    now: Nanos,
    quota: &Quota,
    cost: u64,
    mode: Mode,
) -> (Verdict, Stamp) {
    let verdict = cell.decide(now, quota, cost, mode.spends());
    let stamp = match mode {
        Mode::Keep => cell.stamp(side),
        Mode::Spend | Mode::Look => Stamp::default(),
    };
    (verdict, stamp)
}
