//! A call site's resolution, kept by its caller: what a call of an annotated fn needs that
//! does not depend on the user key (the quota, the tier, the store key around the user key,
//! the budget's counters), resolved once per call site and service rather than per call.
//! The store key is the one [`with_key`](RateLimitService::with_key) composes for the same
//! call, so a call decided here and one decided through the general path (`status`, `reset`,
//! `consume` under the fn's budget) read one state.

use std::cell::RefCell;
use std::sync::Arc;

use super::{Backend, Call, RateLimitService};
use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::key;
use crate::quota::{Overrides, Quota};
use crate::resolve;
use crate::stats::{self, Counters, Outcome};

/// What [`RateLimitService::site`] resolved for one call site.
pub(crate) struct Site {
    quota: Quota,
    tier: Option<usize>,
    /// The budget's counters, when the call names a budget.
    counters: Option<Arc<Counters>>,
    /// The store key before the user key: `<prefix>:{`.
    head: String,
    /// The store key after a brace-free user key: `}<identity>:<budget>:<tier>`.
    tail: String,
}

/// How [`RateLimitService::enforce_site`] ended.
pub(crate) enum SiteOutcome {
    /// Admitted and counted: the store's verdict, at `now`.
    Admitted(Verdict, Nanos),
    /// Decided (refused, or an error), not counted yet: hand it to
    /// [`finish_site`](RateLimitService::finish_site).
    Decided(Result<Decision, Error>, Option<usize>),
    /// Not decided: the call takes the general path (a user key with braces, or one the
    /// general path refuses with its error).
    General,
}

impl RateLimitService {
    /// The resolution of calls with `options` (whatever their user key and cost), for
    /// [`enforce_site`](Self::enforce_site): `None` when such calls are not decided at once
    /// on the memory store (another store, limits switched off, the queue), or when the
    /// resolution fails; the general path decides those, and reports the error.
    pub(crate) fn site(&self, options: &Call<'_>) -> Option<Site> {
        let Backend::Memory(_) = &self.inner.backend else {
            return None;
        };
        if !self.inner.config.enabled() || !options.consume || self.may_wait(options) {
            return None;
        }
        let (quota, tier) = self.resolve(options).ok()?;
        let parts = self.parts(options, tier, None);
        let mut head = String::with_capacity(parts.prefix.len() + 2);
        head.push_str(parts.prefix);
        head.push_str(":{");
        let mut tail = String::from("}");
        key::write_suffix(&mut tail, &parts, &quota);
        Some(Site {
            quota,
            tier,
            counters: options.budget.map(|name| self.method_counters(name).1),
            head,
            tail,
        })
    }

    /// This service's id, unique in the process: what a caller keeps a [`Site`] under.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// One spending call at `site` (resolved by this service) with
    /// user `key` and `cost`, the store key composed in `buffer`. An admitted call is counted
    /// here and builds no [`Decision`]; anything else is returned to be finished by
    /// [`finish_site`](Self::finish_site), outside whatever the caller holds.
    #[inline]
    pub(crate) fn enforce_site(
        &self,
        site: &Site,
        key: Option<&[u8]>,
        cost: u64,
        buffer: &mut Vec<u8>,
    ) -> SiteOutcome {
        let Backend::Memory(store) = &self.inner.backend else {
            return SiteOutcome::General;
        };
        buffer.clear();
        buffer.extend_from_slice(site.head.as_bytes());
        if let Some(key) = key {
            // The checks and the encoding of `key::compose_around`: an invalid key's error,
            // and a braced key's digest, are the general path's.
            if key::check_user_key(key).is_err() || key::braced(key) {
                return SiteOutcome::General;
            }
            buffer.extend_from_slice(key);
        }
        buffer.extend_from_slice(site.tail.as_bytes());
        let now = self.inner.clock.now();
        let started = self.inner.latency.start();
        let verdict = store.verdict_at(buffer, &site.quota, cost, now, true);
        self.inner.latency.finish(started);
        match verdict {
            Ok(verdict) if verdict.allowed => {
                let stripe = stats::stripe();
                self.inner.total.record_on(stripe, Outcome::Allowed);
                if let Some(i) = site.tier {
                    self.inner.by_tier[i].record_on(stripe, Outcome::Allowed);
                }
                if let Some(counters) = &site.counters {
                    counters.record_on(stripe, Outcome::Allowed);
                }
                SiteOutcome::Admitted(verdict, now)
            }
            verdict => SiteOutcome::Decided(
                verdict.map(|v| Decision::for_quota(v, now, &site.quota)),
                site.tier,
            ),
        }
    }

    /// Finishes what [`enforce_site`](Self::enforce_site) decided and did not admit: the
    /// tier named, counted, a refusal as [`Error::Exceeded`].
    pub(crate) fn finish_site(
        &self,
        (result, tier): (Result<Decision, Error>, Option<usize>),
        key: Option<&str>,
        options: &Call<'_>,
    ) -> Result<(), Error> {
        let result = self.name_tier(result, tier, false);
        let result = self.counted((result, tier), key, options);
        result.and_then(|d| Self::admit(d, options)).map(drop)
    }
}

/// A call site of the public API as a thread keeps it: what it was resolved from (service,
/// tier, overrides, budget) and the resolution.
struct Entry {
    service: u64,
    tier: Option<usize>,
    overrides: Overrides,
    budget: Option<String>,
    site: Site,
}

/// The last four call sites of the public API a thread decided at (replaced in turn), and the
/// buffer their store keys are composed in: one thread-local for what the general path looks
/// up in three (the resolved quota, the key's suffix, the budget's counters).
struct Entries {
    entries: [Option<Entry>; 4],
    next: usize,
    buffer: Vec<u8>,
}

thread_local! {
    static ENTRIES: RefCell<Entries> = const {
        RefCell::new(Entries { entries: [None, None, None, None], next: 0, buffer: Vec::new() })
    };
}

impl RateLimitService {
    /// A spending call of the public API (`consume`, `enforce`, `check`) decided at its call
    /// site, kept per thread (see [`Site`]): `None` when the general path decides it (the
    /// site does not decide at once, or the call's key or resolution is one the general path
    /// encodes or reports). An admitted call names its tier, as the general path does.
    ///
    /// The caller has made sure the call may not wait ([`may_wait`](Self::may_wait)):
    /// [`decided_now`](Self::decided_now), the one caller, returns before asking otherwise.
    #[inline]
    pub(super) fn decide_at_site(
        &self,
        key: &str,
        options: &Call<'_>,
    ) -> Option<Result<Decision, Error>> {
        debug_assert!(!self.may_wait(options));
        if !matches!(self.inner.backend, Backend::Memory(_))
            || !self.inner.config.enabled()
            || !options.consume
        {
            return None;
        }
        let tier = resolve::tier_index(&self.inner.config, options.tier).ok()?;
        let outcome = ENTRIES.with(|entries| {
            // Borrowed already: a call from inside a decision (a clock of the user's own)
            // takes the general path.
            let mut entries = entries.try_borrow_mut().ok()?;
            let Entries {
                entries,
                next,
                buffer,
            } = &mut *entries;
            let id = self.inner.id;
            let found = entries.iter().position(|e| {
                e.as_ref().is_some_and(|e| {
                    e.service == id
                        && e.tier == tier
                        && e.overrides == *options.overrides
                        && e.budget.as_deref() == options.budget
                })
            });
            let at = match found {
                Some(at) => at,
                None => {
                    let site = self.site(options)?;
                    let at = *next;
                    entries[at] = Some(Entry {
                        service: id,
                        tier,
                        overrides: *options.overrides,
                        budget: options.budget.map(str::to_owned),
                        site,
                    });
                    *next = (at + 1) % entries.len();
                    at
                }
            };
            let site = &entries[at].as_ref()?.site;
            match self.enforce_site(site, Some(key.as_bytes()), options.cost, buffer) {
                SiteOutcome::Admitted(verdict, now) => {
                    Some(Ok(Decision::for_quota(verdict, now, &site.quota)))
                }
                SiteOutcome::Decided(result, tier) => Some(Err((result, tier))),
                SiteOutcome::General => None,
            }
        })?;
        // Finished with the thread's entries released: counting a refusal logs it.
        Some(match outcome {
            Ok(admitted) => self.name_tier(Ok(admitted), tier, true),
            Err((result, tier)) => {
                let result = self.name_tier(result, tier, true);
                self.counted((result, tier), Some(key), options)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;
    use crate::{Config, ManualClock, Options};

    fn service() -> RateLimitService {
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        RateLimitService::with_clock(Config::default(), Arc::new(clock)).unwrap()
    }

    fn allowed(service: &RateLimitService, key: &str, options: &Options) -> bool {
        let decided = service.consume(key, options).now_or_never().unwrap();
        decided.unwrap().allowed
    }

    /// Call sites kept per thread are told apart by everything they were resolved from:
    /// the budget, the overrides, the service. None answers for another.
    #[test]
    fn call_sites_are_told_apart_by_budget_overrides_and_service() {
        let one = Options::new().limit(1).window("1m");
        let (a, b) = (one.clone().budget("a"), one.clone().budget("b"));
        let two = Options::new().limit(2).window("1m").budget("a");
        let first = service();
        assert!(allowed(&first, "k", &a));
        assert!(!allowed(&first, "k", &a));
        assert!(allowed(&first, "k", &b));
        // The same state (a limit does not change how it reads), under limit 2: one more
        // call, which the limit-1 site would refuse.
        assert!(allowed(&first, "k", &two));
        assert!(!allowed(&first, "k", &two));
        // Another service: its own state, its own counters.
        let second = service();
        assert!(allowed(&second, "k", &a));
        let stats = first.stats();
        assert_eq!(stats.by_method["a"].allowed, 2);
        assert_eq!(stats.by_method["a"].denied, 2);
        assert_eq!(stats.by_method["b"].allowed, 1);
        assert_eq!(stats.total.checks, 5);
        assert_eq!(second.stats().total.allowed, 1);
    }

    /// A call decided at its site spends the state the general path reads and resets; keys
    /// the site leaves to the general path (braces, empty) are decided or refused there.
    #[test]
    fn a_site_spends_what_status_and_reset_see() {
        let service = service();
        let options = Options::new().limit(2).window("1m").budget("f");
        assert!(allowed(&service, "u", &options));
        let status = service.status("u", &options).now_or_never().unwrap();
        assert_eq!(status.unwrap().remaining, 1);
        assert!(service
            .reset_with("u", &options)
            .now_or_never()
            .unwrap()
            .unwrap());
        for _ in 0..2 {
            assert!(allowed(&service, "u", &options));
        }
        assert!(!allowed(&service, "u", &options));
        // A braced key: the general path's encoding, the same limit.
        assert!(allowed(&service, "a{b}", &options));
        assert!(allowed(&service, "a{b}", &options));
        assert!(!allowed(&service, "a{b}", &options));
        let empty = service.consume("", &options).now_or_never().unwrap();
        assert!(matches!(empty, Err(Error::InvalidKey { .. })), "{empty:?}");
        let counts = service.stats().by_method["f"];
        assert_eq!((counts.allowed, counts.denied, counts.errors), (5, 2, 1));
    }
}
