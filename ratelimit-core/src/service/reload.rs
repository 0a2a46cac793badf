//! Changing the configuration while the service runs: [`RateLimitService::reload`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Declared, Generation, RateLimitService};
use crate::config::Config;
use crate::error::{ConfigError, Error};
use crate::quota::Quota;
use crate::syntax::Strategy;

/// What a [`reload`](RateLimitService::reload) changed. Limits are named `"default"` (the
/// default limit) and by tier name. A limit is tightened when its capacity (`limit + burst`)
/// went down, loosened when it went up; a limit whose window or strategy changed is
/// `changed` (its budgets start afresh: their state is kept per window and strategy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// The generation now running (the service's first configuration is 0).
    pub generation: u64,
    /// Limits the new configuration has and the old did not.
    pub added: Vec<String>,
    /// Limits the old configuration had and the new does not.
    pub removed: Vec<String>,
    /// Limits with a lower capacity, or a token bucket's slower refill.
    pub tightened: Vec<String>,
    /// Limits with a higher capacity, or a token bucket's faster refill (a bucket with a
    /// higher capacity and a slower refill is in both).
    pub loosened: Vec<String>,
    /// Limits with another window or strategy.
    pub changed: Vec<String>,
}

impl RateLimitService {
    /// Replaces the running configuration with `config`, checked as a new service's is (every
    /// quota against the store); on any problem nothing changes, the running configuration
    /// goes on deciding, and the error names every problem at once.
    ///
    /// The swap is atomic: each call is decided wholly under the old or wholly under the new
    /// configuration (a call reads the configuration once, at its start). Budgets carry over
    /// where the state is the same (the same key prefix, tier, budget, strategy and window):
    /// a limit tightened counts what was spent against its new limit; a limit loosened holds
    /// to its old quota for one old window after the switch, so a reload never admits more in
    /// that window than the tighter of the two would have. A limit whose state changes (another
    /// window, strategy, tier name or prefix) reads a fresh state: for one old window each
    /// call is decided on the old state and the new one as one (`transition.rs`), so the
    /// switch hands out no new budget either. Statistics carry over (a tier's by name);
    /// [`Stats::generation`](crate::Stats::generation) says which configuration runs. Prepared
    /// sites ([`prepare`](Self::prepare)) decide under the new configuration at once.
    ///
    /// The store cannot change: a configuration with another `store` is refused (for a
    /// service built [`with_store`](Self::with_store), `config.store()` is not used, as there).
    /// Each reload is an `info` event (target `ratelimit`) naming what changed, and the
    /// metrics `ratelimit_reloads_total` and `ratelimit_generation` (feature `metrics`); every
    /// shadow tier of the new configuration is logged at `warn`.
    ///
    /// The service of a [`Module`](crate::Module) or a library's
    /// [`Limiter`](crate::Limiter) checks every annotated fn it decides against the new
    /// configuration as well, as `Module::reload` does: reloaded here or there, a
    /// configuration an fn cannot run under is refused naming the fn
    /// ([`Error::Declarations`]).
    ///
    /// ```
    /// use ratelimit_core::{Config, Options, RateLimitService};
    ///
    /// # futures::executor::block_on(async {
    /// let service = RateLimitService::new(Config::builder().default_limit(2).build()?)?;
    /// assert!(service.consume("k", &Options::new()).await?.allowed);
    /// let reloaded = service.reload(Config::builder().default_limit(1).build()?)?;
    /// assert_eq!(reloaded.tightened, ["default"]);
    /// // The call already spent counts under the new limit of 1.
    /// assert!(!service.consume("k", &Options::new()).await?.allowed);
    /// assert_eq!(service.stats().generation, 1);
    /// # Ok::<(), ratelimit_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn reload(&self, config: Config) -> Result<Reloaded, Error> {
        // One reload at a time, from its checks to its swap: two racing reloads each install
        // a whole configuration, one after the other.
        let _one = self.inner.reloading.lock();
        let running = self.generation();
        let mut errors = ConfigError::default();
        if self.inner.store_from_config && config.store() != running.config.store() {
            errors.push(
                "store",
                "a reload cannot change the store: build a new service for another store",
            );
        }
        for (field, e) in config.quota_problems(&|q| self.inner.store.supports(q)) {
            errors.push(field, e.to_string());
        }
        if !errors.problems.is_empty() {
            return Err(Error::InvalidConfig(errors));
        }
        // The annotated fns' checks, if the service has any, on the new configuration before
        // it is installed: their error leaves the old one running, and what they declare of
        // their own is noted only once it is installed (`note_declared`).
        let fns = self.inner.declarations.as_deref();
        let declared = match fns {
            Some(fns) => fns.check(self, &config)?,
            None => Declared::default(),
        };
        let mut reloaded = changes(&running.config, &config);
        reloaded.generation = running.number + 1;
        super::warn_shadow_tiers(&config);
        let mut next = Generation::new(config, reloaded.generation, Some(&running));
        let now = self.inner.clock.now();
        let own = self.inner.own_windows.load(Ordering::Relaxed);
        let penalized = self.inner.penalized_until.load(Ordering::Relaxed);
        let outlasts = self.inner.own_outlasts.load(Ordering::Relaxed);
        let fleet = &self.inner.fleet;
        let read = Read {
            penalized: fleet.penalized.load(Ordering::Relaxed),
            at: fleet.records.then(|| fleet.read_at()),
        };
        let kept = kept_after(
            &running,
            &next.config,
            now,
            own,
            (penalized, outlasts),
            read,
        )?;
        next.hold(kept);
        self.note_declared(declared);
        let next = Arc::new(next);
        self.inner.current.store(Arc::clone(&next));
        self.inner
            .generation
            .store(reloaded.generation, Ordering::Release);
        self.horizon_prefixes_moved(&running, &next);
        self.set_horizon_due(&next);
        crate::metrics::reloaded(reloaded.generation);
        tracing::info!(
            target: "ratelimit",
            generation = reloaded.generation,
            added = ?reloaded.added,
            removed = ?reloaded.removed,
            tightened = ?reloaded.tightened,
            loosened = ?reloaded.loosened,
            changed = ?reloaded.changed,
            "rate limit configuration reloaded",
        );
        if let Some(fns) = fns {
            fns.installed(&self.config());
        }
        Ok(reloaded)
    }
}

/// The configurations a generation running `config` keeps for transitions, after a reload
/// at `now` replaced `running`'s: the one replaced, then those `running` kept, the latest
/// first. A kept configuration with the new one's limits holds a call to the new quota alone,
/// which matters only beside another kept one (on a token bucket's state, a slower one's
/// interval stretches the new capacity: `Quota::held_to`): the latest of them is kept where
/// another is (dropped, a bucket of 10 a second reloaded to 10 a minute and back admitted 19
/// at once: probes_held_buckets), every other dropped, so that calls resolved per call (not
/// prepared) do not resolve them again. Every other is
/// kept while it may still hold a call (`Kept::holds_any`): one of its configured windows,
/// or the longest window of its own a call of the service was worked out with, has not passed
/// since it was replaced; and the last [`KEPT_PREVIOUS`](super::KEPT_PREVIOUS) whatever
/// their age. Kept only by count, a ninth reload inside one window dropped the first one's
/// transition while it held: 1 more admitted than the first quota allowed; kept only for its
/// configured windows, the same for a call with a longer window of its own
/// (probes_prepared_shortcuts). More than
/// [`MOST_IN_FORCE`] held at once is refused: the reload is an error and the running
/// configuration stays, rather than a transition dropped while it holds. `penalized` and
/// `outlasts`: `Inner::penalized_until` and `Inner::own_outlasts`.
///
/// On a store that records the fleet's horizon (`horizon.rs`), one that no longer holds by
/// what this service knows is kept all the same until a read of the record made after it
/// would have let go confirms it (`read.at`): another service may have written past it (a
/// quota or a window of a call's own, a penalty), and a reload cannot wait for the store.
/// Dropped at a ninth reload by what it saw itself, a service let a move go while another's
/// quota of its own, block or window held the old state: 15, 5 or 1 admitted where one
/// service admitted none (probes_fleet_horizon_redis).
fn kept_after(
    running: &Generation,
    config: &Config,
    now: crate::clock::Nanos,
    own: crate::clock::Nanos,
    (penalized, outlasts): (crate::clock::Nanos, crate::clock::Nanos),
    read: Read,
) -> Result<Vec<super::Kept>, Error> {
    let replaced = super::Kept::new(running, now, penalized.max(read.penalized));
    let penalized = read.penalized;
    let unconfirmed = |kept: &super::Kept| {
        read.at
            .is_some_and(|at| at < kept.held(own, outlasts, penalized).0)
    };
    let all = || std::iter::once(&replaced).chain(running.previous());
    let mut same = all().map(|kept| kept.config.same_limits(config));
    let mut latest_same = same.clone().any(|s| !s) && same.any(|s| s);
    let kept: Vec<super::Kept> = all()
        .filter(|kept| !kept.config.same_limits(config) || std::mem::take(&mut latest_same))
        .cloned()
        .enumerate()
        .filter(|(i, kept)| {
            *i < super::KEPT_PREVIOUS
                || kept.holds_any(now, own, outlasts, penalized)
                || unconfirmed(kept)
        })
        .map(|(_, kept)| kept.against(config, outlasts))
        .collect();
    if kept.len() > MOST_IN_FORCE {
        let mut errors = ConfigError::default();
        errors.push(
            "reload",
            too_many_held(&kept, now, own, (outlasts, penalized)),
        );
        return Err(Error::InvalidConfig(errors));
    }
    Ok(kept)
}

/// Why a reload at `now` is refused for holding more than [`MOST_IN_FORCE`] (`kept`, the
/// configurations it would keep): when another is taken at the soonest, once as many of those
/// held past the last [`KEPT_PREVIOUS`](super::KEPT_PREVIOUS) as are too many have let go,
/// and what holds the one that lets go last of them that long. Told only that the oldest's
/// windows must pass, an operator whose fns declare a window of their own of a day (called
/// or not) had no way to know a day, nor why (probes_horizon_attacks).
fn too_many_held(
    kept: &[super::Kept],
    now: crate::clock::Nanos,
    own: crate::clock::Nanos,
    (outlasts, penalized): (crate::clock::Nanos, crate::clock::Nanos),
) -> String {
    use super::generation::HeldBy;
    let mut ends: Vec<_> = (kept.iter().skip(super::KEPT_PREVIOUS))
        .map(|k| k.held(own, outlasts, penalized))
        .collect();
    ends.sort_by_key(|&(until, ..)| until);
    let at = kept.len().saturating_sub(MOST_IN_FORCE + 1);
    let (until, by, span) = ends.get(at).copied().unwrap_or((now, HeldBy::Window, 0));
    let span = crate::syntax::format_window(std::time::Duration::from_nanos(span));
    let what = match by {
        HeldBy::Window => format!("its longest configured window, {span}"),
        HeldBy::OwnWindow => format!(
            "a window of its own of {span} (a call's, or one an annotated fn declares, called \
             or not)"
        ),
        HeldBy::Carrying => format!(
            "a limit it moved to another state, whose old state may hold a debt or a block for \
             {span} (a quota of its own a call made or an annotated fn declares, or a \
             penalty, among them)"
        ),
    };
    if until <= now {
        // Kept only until a read of the fleet's record confirms they let go (`kept_after`).
        return format!(
            "{MOST_IN_FORCE} configurations replaced by reloads are still held to; another \
             reload would drop one that another service under this key prefix may still hold \
             calls to, for all this one knows: it has not read the fleet's reload horizon from \
             the store since they would have let go. Its next call reads it (any call but a \
             prepared site's; a penalty too): make one, then reload again"
        );
    }
    let wait = std::time::Duration::from_nanos(until.saturating_sub(now).max(1));
    format!(
        "{MOST_IN_FORCE} configurations replaced by reloads are still held to; another reload \
         would drop one while it may still hold a call: reload again in {} at the soonest, \
         when the oldest of them lets go. What holds it that long: {what}",
        crate::syntax::format_window(wait)
    )
}

/// What a service read of its fleet's horizon (`horizon.rs`), for `kept_after`.
#[derive(Clone, Copy)]
struct Read {
    /// When the latest penalty the record holds leaves its debt (0: none read).
    penalized: crate::clock::Nanos,
    /// When the record was last read; `None` on a store that records none.
    at: Option<crate::clock::Nanos>,
}

/// The most replaced configurations a generation holds calls to at once (`kept_after`): a
/// call resolved per call decides under each one still in force.
const MOST_IN_FORCE: usize = 64;

/// What changed from `old` to `new`, limit by limit (the default limit, then the tiers).
fn changes(old: &Config, new: &Config) -> Reloaded {
    let limits = |config: &Config| -> Vec<(String, Quota)> {
        let default = config.plain_quota().map(|q| ("default".to_owned(), q));
        default
            .into_iter()
            .chain(config.tiers().iter().map(|t| (t.name.to_string(), t.quota)))
            .collect()
    };
    let (before, after) = (limits(old), limits(new));
    let mut out = Reloaded::default();
    for (name, quota) in &after {
        match before.iter().find(|(n, _)| n == name) {
            None => out.added.push(name.clone()),
            Some((_, was))
                if (was.window(), was.strategy()) != (quota.window(), quota.strategy()) =>
            {
                out.changed.push(name.clone())
            }
            Some((_, was)) => {
                let interval = quota.interval_nanos().cmp(&was.interval_nanos());
                let capacity = quota.capacity().cmp(&was.capacity());
                let (slower, faster) = (interval.is_gt(), interval.is_lt());
                if capacity.is_lt() || (slower && quota.strategy() == Strategy::TokenBucket) {
                    out.tightened.push(name.clone());
                }
                if capacity.is_gt() || (faster && quota.strategy() == Strategy::TokenBucket) {
                    out.loosened.push(name.clone());
                }
            }
        }
    }
    for (name, _) in &before {
        if !after.iter().any(|(n, _)| n == name) {
            out.removed.push(name.clone());
        }
    }
    out
}
