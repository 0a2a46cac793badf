//! A call site's resolution, kept by its caller: what a call of an annotated fn needs that
//! does not depend on the user key (the quota, the tier, the store key around the user key,
//! the budget's counters), resolved once per call site and service rather than per call.
//! The public API's spending calls use it too, on the memory store and on a store that may
//! answer at once ([`Store::decide_now`](crate::store::Store::decide_now): a Redis store's leases).
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
use crate::stats::{self, Counters, Outcome};
use crate::store::DynStore;

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

impl Site {
    /// Whether a call with user `key` is decided at a site: the checks and the encoding of
    /// `key::compose_around` (an invalid key's error, a braced key's digest) are the general
    /// path's.
    #[inline]
    fn decides(key: &[u8]) -> bool {
        key::check_user_key(key).is_ok() && !key::braced(key)
    }
}

/// How [`RateLimitService::enforce_site`] ended.
pub(crate) enum SiteOutcome {
    /// Admitted and counted: the memory store's verdict, at `now`.
    Admitted(Verdict, Nanos),
    /// Admitted and counted: the decision a store behind the [`Store`](crate::store::Store) trait
    /// made at once.
    Answered(Decision),
    /// Decided (refused, or an error), not counted yet: hand it to
    /// [`finish_site`](RateLimitService::finish_site).
    Decided(Result<Decision, Error>, Option<usize>),
    /// Not decided: the call takes the general path (a user key with braces, or one the
    /// general path refuses with its error).
    General,
    /// Not decided, nothing spent: the store was asked to answer at once and cannot; the
    /// call must be awaited (asking it again at once would get the same answer).
    Await,
}

impl RateLimitService {
    /// The resolution of calls with `options` (whatever their user key and cost), for
    /// [`enforce_site`](Self::enforce_site) and `answer_site`: `None` when such calls are not
    /// decided at once (limits switched off, the queue), or when the resolution fails; the
    /// general path decides those, and reports the error.
    pub(crate) fn site(&self, options: &Call<'_>) -> Option<Site> {
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

    /// One spending call at `site` (resolved by this service) on the memory store, with
    /// user `key` and `cost`, the store key composed in `buffer`. An admitted call is counted
    /// here and builds no [`Decision`]; anything else is returned to be finished by
    /// [`finish_site`](Self::finish_site), outside whatever the caller holds.
    ///
    /// The memory store only, never a store that answers only some calls at once: a sync
    /// annotated fn's call comes here too, and must not be admitted by a leased budget that
    /// lasts only so long (see `enforce_parts_now`).
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
            if !Site::decides(key) {
                return SiteOutcome::General;
            }
            buffer.extend_from_slice(key);
        }
        buffer.extend_from_slice(site.tail.as_bytes());
        let now = self.inner.clock.now();
        let latency = &self.inner.latency;
        let started = latency.start();
        let verdict = store.verdict_at(buffer, &site.quota, cost, now, true);
        latency.finish(started);
        match verdict {
            Ok(verdict) if verdict.allowed => {
                self.count_site(site);
                SiteOutcome::Admitted(verdict, now)
            }
            verdict => SiteOutcome::Decided(
                verdict.map(|v| Decision::for_quota(v, now, &site.quota)),
                site.tier,
            ),
        }
    }

    /// [`enforce_site`](Self::enforce_site) on a store behind the [`Store`](crate::store::Store)
    /// trait, which answers the spending call of user `key` at `site` if it can at once
    /// ([`Store::decide_now`](crate::store::Store::decide_now)); [`SiteOutcome::Await`] when it
    /// cannot. The store key is composed in `buffer`.
    fn answer_site(
        &self,
        store: &dyn DynStore,
        site: &Site,
        key: &str,
        cost: u64,
        buffer: &mut String,
    ) -> SiteOutcome {
        if !Site::decides(key.as_bytes()) {
            return SiteOutcome::General;
        }
        buffer.clear();
        buffer.push_str(&site.head);
        buffer.push_str(key);
        buffer.push_str(&site.tail);
        let now = self.inner.clock.now();
        match self.ask_now(store, buffer, &site.quota, cost, now, true) {
            None => SiteOutcome::Await,
            Some(Ok(decision)) if decision.allowed => {
                self.count_site(site);
                SiteOutcome::Answered(decision)
            }
            Some(decided) => SiteOutcome::Decided(decided, site.tier),
        }
    }

    /// Counts an admitted call at `site`: in the total, its tier's and its budget's counters.
    #[inline]
    fn count_site(&self, site: &Site) {
        let stripe = stats::stripe();
        self.inner.total.record_on(stripe, Outcome::Allowed);
        if let Some(i) = site.tier {
            self.inner.by_tier[i].record_on(stripe, Outcome::Allowed);
        }
        if let Some(counters) = &site.counters {
            counters.record_on(stripe, Outcome::Allowed);
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
/// buffers their store keys are composed in (bytes for the memory store, text for a store
/// behind the trait): one thread-local for what the general path looks up in three (the
/// resolved quota, the key's suffix, the budget's counters).
struct Entries {
    entries: [Option<Entry>; 4],
    next: usize,
    buffer: Vec<u8>,
    text: String,
}

thread_local! {
    static ENTRIES: RefCell<Entries> = const {
        RefCell::new(Entries {
            entries: [None, None, None, None],
            next: 0,
            buffer: Vec::new(),
            text: String::new(),
        })
    };
}

impl RateLimitService {
    /// A spending call of the public API (`consume`, `enforce`, `check`) decided at its call
    /// site, kept per thread (see [`Site`]). An admitted call names its tier, as the general
    /// path does.
    ///
    /// The caller has made sure the call may not wait ([`may_wait`](Self::may_wait)):
    /// [`decided_now`](Self::decided_now), the one caller, returns before asking otherwise.
    #[inline]
    pub(super) fn decide_at_site(&self, key: &str, options: &Call<'_>) -> AtSite {
        debug_assert!(!self.may_wait(options));
        if !self.inner.config.enabled() || !options.consume {
            return AtSite::General;
        }
        let Ok(tier) = self.inner.config.tier_index(options.tier) else {
            return AtSite::General;
        };
        /// What a site made of the call, with the thread's entries still held.
        enum Seen {
            /// Admitted and counted.
            Admitted(Decision),
            Decided(Result<Decision, Error>, Option<usize>),
            General,
            Await,
        }
        let outcome = ENTRIES.with(|entries| {
            // Borrowed already: a call from inside a decision (a clock or store of the user's
            // own) takes the general path.
            let Ok(mut entries) = entries.try_borrow_mut() else {
                return Seen::General;
            };
            let Entries {
                entries,
                next,
                buffer,
                text,
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
                    let Some(site) = self.site(options) else {
                        return Seen::General;
                    };
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
            let Some(Entry { site, .. }) = &entries[at] else {
                return Seen::General;
            };
            let cost = options.cost;
            let outcome = match &self.inner.backend {
                Backend::Memory(_) => self.enforce_site(site, Some(key.as_bytes()), cost, buffer),
                Backend::Dyn(store) => self.answer_site(&**store, site, key, cost, text),
            };
            match outcome {
                SiteOutcome::Admitted(verdict, now) => {
                    Seen::Admitted(Decision::for_quota(verdict, now, &site.quota))
                }
                SiteOutcome::Answered(decision) => Seen::Admitted(decision),
                SiteOutcome::Decided(result, tier) => Seen::Decided(result, tier),
                SiteOutcome::General => Seen::General,
                SiteOutcome::Await => Seen::Await,
            }
        });
        // Finished with the thread's entries released: counting a refusal logs it.
        match outcome {
            Seen::Admitted(admitted) => AtSite::Decided(self.name_tier(Ok(admitted), tier, true)),
            Seen::Decided(result, tier) => {
                let result = self.name_tier(result, tier, true);
                AtSite::Decided(self.counted((result, tier), Some(key), options))
            }
            Seen::General => AtSite::General,
            Seen::Await => AtSite::Await,
        }
    }
}

/// What [`decide_at_site`](RateLimitService::decide_at_site) made of a call.
pub(super) enum AtSite {
    /// Decided (and counted, when it spends).
    Decided(Result<Decision, Error>),
    /// Not decided at the site: the general path decides it, and reports its errors.
    General,
    /// Not decided, nothing spent: the store cannot answer at once, so the call is awaited.
    Await,
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
