//! Waiting instead of being refused: the queue's side of the service, and
//! [`until_ready`](RateLimitService::until_ready) for code that waits on its own.
//!
//! Time: the service decides on its [`Clock`](crate::Clock), and waits on Tokio's timers
//! ([`tokio::time::Instant`]), so under Tokio's paused time a test's clock must follow
//! Tokio's (see [`testing::TokioClock`](crate::testing::TokioClock)).

use std::future::{poll_fn, Future};
use std::hash::{BuildHasher, Hasher};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::queue::Left;
use super::site::{Held, Site};
use super::{Call, Options, RateLimitService};
use crate::decision::Decision;
use crate::drivers;
use crate::error::Error;

/// What a refused call is told when it could not learn a better figure.
const UNKNOWN_RETRY: Duration = Duration::from_millis(1);

impl RateLimitService {
    /// A spending call, waiting in the queue if it may and is over its limit.
    pub(super) async fn decide_waiting(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
    ) -> Result<Decision, Error> {
        // A call that may not wait, a problem with the call (the plain decision reports it),
        // and a call that can never pass (cost above capacity, a limit of 0): not queued.
        if !site.may_wait || site.check(key).is_err() || site.quota.capacity() < site.cost.max(1) {
            return self.decide(site, key).await;
        }
        // Given up while waiting, in the line or while the store decides: counted once, as
        // abandoned (without it such a call was counted nowhere: probes_custom_store).
        let abandoned = self.if_abandoned(site);
        let folds = self.inner.fleet.folds();
        let result = self.wait_for_turn(site, key, folds).await;
        abandoned.defuse();
        self.record_and_return(site, key, result)
    }

    /// [`decide_waiting`](Self::decide_waiting)'s wait, its answer not recorded yet. `folds`:
    /// the reads of the fleet's reload horizon that had raised what this service knows when
    /// the wait began (`horizon.rs`).
    async fn wait_for_turn(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        folds: u64,
    ) -> Result<Decision, Error> {
        let mut line = String::with_capacity(64);
        site.compose(&mut line, key);
        let queue = &self.inner.queue;
        if queue.is_closed() {
            return Err(not_initialized());
        }
        // With nobody waiting on this key, a call asks the store first; otherwise it queues
        // behind those who came earlier rather than overtaking them.
        let mut refused = None;
        if queue.is_idle(&line) {
            match self.ask(site, key, &line).await {
                Ok(d) if !d.allowed && d.retry_after.is_some() => refused = Some(d),
                other => return other,
            }
        }
        drivers::timer()?;
        // Boxed: the waiting state (timers, the place in the line) is only allocated by a
        // call that waits, and the future of every other call stays small.
        Box::pin(self.wait_in_line(site, key, line, refused, folds)).await
    }

    /// Whether a refusal of this call waits in the queue rather than being answered: a call
    /// that spends, on a service that limits, with `queue` (or the configuration's
    /// `queue_enabled`) on.
    #[inline]
    pub(super) fn may_wait(&self, config: &crate::config::Config, options: &Call<'_>) -> bool {
        options.consume && options.queue.unwrap_or(config.queue_enabled()) && config.enabled()
    }

    /// Takes a place in `line` and waits for this call's turn (`refused`: the store's
    /// refusal just now, when the call asked before queueing); the answer not recorded yet.
    async fn wait_in_line(
        &self,
        site: &Site<'_>,
        key: Option<&str>,
        line: String,
        mut refused: Option<Decision>,
        folds: u64,
    ) -> Result<Decision, Error> {
        let (config, queue) = (&*site.generation.config, &self.inner.queue);
        let deadline = Instant::now() + config.queue_timeout();
        let priority = site.tier.map_or(0, |i| config.tiers()[i].priority);
        let Some(mut turn) = queue.join(&line, priority, config.max_queue_size()) else {
            let full = Error::QueueFull {
                max_queue_size: config.max_queue_size(),
            };
            return Err(full);
        };
        let result = loop {
            let prior = refused.take();
            if queue.is_closed() {
                break Err(not_initialized());
            }
            if turn.is_displaced() {
                turn.leave(Left::Displaced);
                break Err(Error::QueueFull {
                    max_queue_size: config.max_queue_size(),
                });
            }
            if Instant::now() >= deadline {
                turn.leave(Left::TimedOut);
                break Err(timed_out(turn.ready_at(site.cost)));
            }
            // A reload replaced the configuration this call was begun under: its wait ends
            // (refused, as at its deadline; the caller calls again under the new one), so no
            // call decided under an old configuration outlives the switch; unless the new one
            // decides it alike (a reload that moved no limit of its tier: a tier added that no
            // call uses ended every wait, 0 of 3 waiters admitted where each passed in turn).
            if !self.runs(site.generation)
                && !(self.generation()).decides_alike(site.generation, site.tier)
            {
                turn.leave(Left::TimedOut); // counted as what the caller is told
                break Err(timed_out(None));
            }
            if turn.is_head() {
                // The line's budget was said to admit again only later: a head that came to
                // the front since waits for that time without asking the store, and leaves at
                // once when it is past this call's deadline (so waiters ending before the
                // line's turn leave one after the other, none asking the store).
                if prior.is_none() {
                    if let Some(at) = turn.ready_at(site.cost).filter(|&at| at > Instant::now()) {
                        if at > deadline {
                            turn.leave(Left::TimedOut);
                            break Err(timed_out(Some(at)));
                        }
                        turn.sleep(at).await;
                        continue;
                    }
                }
                // The fleet's reload horizon read where due, as a call begun now reads it; one
                // that raised what this service knows since the wait began ends it (refused, as
                // at a reload) where the call's configuration keeps a replaced one: the site's
                // transition carries the old states only as long as was known then. Asked on
                // it, a waiter queued on B before A's quota of its own was recorded read the
                // moved state alone: 1 admitted against none on one service
                // (probes_horizon_surfaces_redis). With nothing kept, no transition to hold.
                // A read that fails unanswered has this ask answered by the store's failure
                // policy (`Site::failed`), as a call begun now would be; and the record is
                // raised first where a call begun now raises it (`horizon_raise_at`), its
                // failure the same. Each ask's own: one after a read or raise that answers
                // again is asked of the store. Kept from the call's first read or raise (its
                // site marked by `raised_then`), a waiter was answered by `Local`'s share,
                // fresh, where Redis, answering, refused: 1 against 0
                // (probes_policy_answers_redis).
                let keeps = !site.generation.previous().is_empty();
                let mut asking = Site {
                    failed: false,
                    ..*site
                };
                if prior.is_none() && keeps && !self.horizon_stands(folds, site.generation) {
                    match Box::pin(self.read_horizon_if_due(site.generation)).await {
                        Ok(failed) => asking = asking.failed_if(failed),
                        Err(e) => break Err(e),
                    }
                    if self.inner.fleet.folds() != folds {
                        turn.leave(Left::TimedOut); // counted as what the caller is told
                        break Err(timed_out(None));
                    }
                }
                if prior.is_none() && self.horizon_raise_at(&asking) {
                    match Box::pin(self.raise_horizon_for_call(site.generation)).await {
                        Ok(failed) => asking = asking.failed_if(failed),
                        Err(e) => break Err(e),
                    }
                }
                let decision = match prior {
                    Some(d) => Ok(d),
                    None => {
                        match by_deadline(deadline, self.ask(&asking, key, &line)).await {
                            Ok(Some(decision)) => decision,
                            Ok(None) => continue, // the deadline passed: the check above ends it
                            Err(no_timer) => Err(no_timer),
                        }
                    }
                };
                // Nothing waiting is admitted once the module has shut down (even a call the
                // store has just admitted: refused, never let through).
                if queue.is_closed() {
                    break Err(not_initialized());
                }
                match decision {
                    Ok(d) if d.allowed => {
                        turn.leave(Left::Admitted);
                        break Ok(d);
                    }
                    // Displaced while the store answered: its place is gone already.
                    Ok(_) if turn.is_displaced() => continue,
                    Ok(d) => {
                        let Some(after) = d.retry_after else {
                            break Ok(d); // can never pass: the refusal itself
                        };
                        let at = Instant::now() + after;
                        turn.refused_until(at, site.cost);
                        // Its turn comes after its deadline: refused now, not at the deadline.
                        if at > deadline {
                            turn.leave(Left::TimedOut);
                            break Err(Error::QueueTimeout { retry_after: after });
                        }
                        turn.sleep(at).await;
                    }
                    Err(e) => break Err(e),
                }
            } else {
                turn.sleep(deadline).await;
            }
        };
        if result.is_err() {
            turn.leave(Left::Refused); // unless it ended otherwise already
        }
        // The place is given back (and the next waiter woken) before the caller runs.
        drop(turn);
        result
    }

    /// Wakes every call waiting in this service's queue with [`Error::NotInitialized`], and
    /// refuses every later wait the same way. What [`Module`](crate::Module) does when it
    /// shuts down.
    pub(crate) fn close_queue(&self) {
        self.inner.queue.close();
    }

    /// Spends one call (or `options.cost`) from `key`'s budget, waiting for capacity until
    /// `deadline` if need be, without taking a place in the queue: for a worker that paces
    /// itself (governor's `until_ready`). It sleeps until each refusal's `retry_after`, then
    /// asks again; when that would be past `deadline`, it returns
    /// [`Error::QueueTimeout`] at once rather than sleeping in vain. The deadline bounds the
    /// store's answers too: one not in by then is abandoned (with a store that must be waited
    /// for, Redis or your own, it may have spent) and the call ends with
    /// [`Error::QueueTimeout`] at the deadline. A call that can never pass (cost above
    /// capacity, a limit of 0) is refused at once. Needs a Tokio runtime with its timer to
    /// sleep or to wait for a store: without one, such a call is refused with
    /// [`Error::NoRuntime`].
    ///
    /// Many callers waiting on one key wake together at `retry_after`, and all but the few
    /// the budget admits sleep again: use [`until_ready_with_jitter`](Self::until_ready_with_jitter)
    /// to spread them, or the queue (which wakes only those who can pass).
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// # let clock = ratelimit_core::testing::TokioClock::new();
    /// # let service = RateLimitService::with_clock(Config::default(), std::sync::Arc::new(clock))?;
    /// let per_second = Options::new().limit(1).window(Duration::from_secs(1));
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// service.until_ready("worker", &per_second, deadline).await?; // at once
    /// service.until_ready("worker", &per_second, deadline).await?; // a second later
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn until_ready<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
        deadline: Instant,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.until_ready_with_jitter(key, options, deadline, Duration::ZERO)
    }

    /// [`until_ready`](Self::until_ready), sleeping a random extra of up to `jitter` after
    /// each refusal, so that callers refused together do not all ask again together. Like
    /// every per-call method, the future does not borrow `options`.
    pub fn until_ready_with_jitter<'a>(
        &'a self,
        key: &'a str,
        options: &Options,
        deadline: Instant,
        jitter: Duration,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        let options = options.clone().consume(true).queue(false);
        async move {
            let call = options.call();
            // When the last refusal said the budget admits again.
            let mut ready_at = None;
            // Once per configuration: a reload while this call waits decides its next try
            // under the new one.
            loop {
                let (generation, mut held) = (self.generation(), Held::default());
                // The fleet's reload horizon read where due, as every call reads it before
                // its site is worked out (`horizon.rs`): read nowhere, B's calls here after A's
                // quota of its own was recorded read the moved state alone, 15 admitted against
                // none on one service (probes_horizon_surfaces_redis).
                // Failing unanswered, the call's tries are answered by the store's failure
                // policy (`Site::failed`) until a read succeeds.
                let failed = self.horizon_due(&generation)
                    && Box::pin(self.read_horizon_if_due(&generation))
                        .await
                        .map_err(|e| self.unresolved(&call, e))?;
                let folds = self.inner.fleet.folds();
                let site = self
                    .site(&generation, &call, &mut held)
                    .map_err(|e| self.unresolved(&call, e))?
                    .failed_if(failed);
                let abandoned = self.if_abandoned(&site);
                let ready = self.ready_under(&site, key, deadline, jitter, &mut ready_at, folds);
                let Some(result) = ready.await else {
                    abandoned.defuse(); // not given up: asked again under the new configuration
                    continue;
                };
                abandoned.defuse();
                return self.record_and_return(&site, Some(key), result);
            }
        }
    }

    /// [`until_ready_with_jitter`](Self::until_ready_with_jitter) under `site`'s
    /// configuration, its answer not recorded yet; `None` once a reload replaced that
    /// configuration, or a read of the fleet's reload horizon is due or raised what this
    /// service knows since `folds` (the call is decided again under what is known now; not
    /// before its first ask, so that a read that fails and is let go under a failure policy
    /// does not spin). `ready_at`: when the last refusal said the budget admits again.
    async fn ready_under(
        &self,
        site: &Site<'_>,
        key: &str,
        deadline: Instant,
        jitter: Duration,
        ready_at: &mut Option<Instant>,
        folds: u64,
    ) -> Option<Result<Decision, Error>> {
        let store_key = match site
            .check(Some(key))
            .and_then(|()| site.store_key(Some(key)))
        {
            Ok(store_key) => store_key,
            Err(e) => return Some(Err(e)),
        };
        let mut asked = false;
        loop {
            // Nothing waiting is admitted once the module has shut down, as in the queue (a
            // call begun after it too).
            if self.inner.queue.is_closed() {
                return Some(Err(not_initialized()));
            }
            if !self.runs(site.generation)
                || (asked && !self.horizon_stands(folds, site.generation))
            {
                return None;
            }
            asked = true;
            // A quota or a window of its own past the fleet's record: raised before the state
            // is written, as every spending call's (`horizon.rs`); failing unanswered, the
            // call answered by the store's failure policy. Raised nowhere here, A's 15 through
            // `until_ready` with its own refill were written past the record: 15 admitted on
            // B against none on one service (probes_horizon_surfaces_redis). Each try's own:
            // a try after a raise that answers again is a call begun now, asked of the store
            // (kept from the first try, the share of `Local` admitted a try Redis, answering,
            // refused: 1 against 0, probes_policy_answers_redis).
            let mut asking = *site;
            if self.horizon_raise_at(&asking) {
                match Box::pin(self.raise_horizon_for_call(site.generation)).await {
                    Ok(failed) => asking = asking.failed_if(failed),
                    Err(e) => return Some(Err(e)),
                }
            }
            let answered = by_deadline(deadline, self.ask(&asking, Some(key), &store_key));
            let result = match answered.await {
                Ok(Some(answer)) => answer,
                // Not answered: past the deadline, or no timer to bound the wait with.
                unanswered => Err(unanswered.map_or_else(|e| e, |_| timed_out(*ready_at))),
            };
            let wake = match &result {
                Ok(d) if !d.allowed => d
                    .retry_after
                    .map(|after| (after, Instant::now() + after + random_up_to(jitter))),
                _ => None,
            };
            let Some((after, wake)) = wake else {
                return Some(result);
            };
            if wake > deadline {
                return Some(Err(Error::QueueTimeout { retry_after: after }));
            }
            if let Err(no_timer) = drivers::timer() {
                return Some(Err(no_timer));
            }
            *ready_at = Some(Instant::now() + after);
            self.inner.queue.sleep_unless_closed(wake).await;
        }
    }
}

/// `answer`'s output, or `Ok(None)` once `deadline` has passed: every wait is bounded by its
/// deadline, the store's answers within it included. An answer there at once (the memory
/// store) needs no timer; one that must be awaited needs Tokio's (`Err(NoRuntime)` without).
/// An answer abandoned at the deadline may have spent or not, as with any dropped future:
/// refused either way, never admitted.
async fn by_deadline<F: Future>(deadline: Instant, answer: F) -> Result<Option<F::Output>, Error> {
    let mut answer = pin!(answer);
    if let Poll::Ready(out) = poll_fn(|cx| Poll::Ready(answer.as_mut().poll(cx))).await {
        return Ok(Some(out));
    }
    drivers::timer()?;
    Ok(tokio::time::timeout_at(deadline, answer).await.ok())
}

/// A wait that reached its deadline, told when the budget was last said to admit again.
fn timed_out(ready_at: Option<Instant>) -> Error {
    let retry_after = ready_at
        .map_or(UNKNOWN_RETRY, |at| {
            at.saturating_duration_since(Instant::now())
        })
        .max(UNKNOWN_RETRY);
    Error::QueueTimeout { retry_after }
}

fn not_initialized() -> Error {
    Error::NotInitialized {
        function: "<a call waiting in the queue>",
    }
}

/// A uniformly random duration in `[0, max]` (std's per-instance random hash keys: no
/// dependency for a jitter).
fn random_up_to(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    let nanos = max.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(h.finish() % (nanos + 1))
}
