//! [`Generation`]: one configuration as the service runs it, and [`Kept`], one a reload
//! replaced, held for the calls it may still hold to a tighter quota.

use std::sync::Arc;

use crate::config::Config;
use crate::stats::Counters;

/// One configuration as the service runs it, swapped whole by a reload: every call is
/// decided under one generation from its first step to its last.
pub(crate) struct Generation {
    pub(crate) config: Arc<Config>,
    /// The counters of `config`'s tiers, in their order; a tier's carry over a reload that
    /// keeps its name.
    pub(crate) by_tier: Vec<Arc<Counters>>,
    /// 0 for the configuration the service was built with, one more per reload.
    pub(crate) number: u64,
    /// The configurations reloads replaced, the latest first, each with when it was
    /// replaced: a limit a reload loosened or moved holds to its old quota for one old window
    /// (`Site::transition`), whatever reloads came after: each while it is in force, and the
    /// last [`KEPT_PREVIOUS`] (`reload.rs`, `kept_after`). Set with [`hold`](Self::hold) only,
    /// which works out `alike` from them.
    previous: Vec<Kept>,
    /// Which calls every configuration in `previous` resolves as this one does: each
    /// [`Kept::resolves_alike`], worked out once when they are kept. Such a call is held to
    /// nothing (no transition), so it does not ask each of them again ([`holds_none`]): a
    /// call resolved per call after 8 reloads that changed only what it sets itself asked
    /// all 8 on every call (BENCHMARKS.md, `hot_path`). By tier of `config`, by index, and then for no
    /// tier: for a call that names no tier (`[0]`) or one (`[1]`), with a limit of its own
    /// (`[..][1]`) or without.
    ///
    /// [`holds_none`]: Self::holds_none
    alike: Box<[[[bool; 2]; 2]]>,
}

/// A configuration a reload replaced, kept for transitions.
#[derive(Clone)]
pub(crate) struct Kept {
    pub(crate) config: Arc<Config>,
    /// When the reload replaced it.
    pub(crate) replaced_at: crate::clock::Nanos,
    /// The longest window of a limit it configures (the default's, a tier's): past
    /// `replaced_at` plus this, it holds no call without a window of its own.
    pub(crate) longest: crate::clock::Nanos,
    /// How long past `replaced_at` a state of a limit it configures that the running
    /// configuration moves to another (`against`) may hold what the moved limit's state
    /// carries ([`Quota::outlasts_by`](crate::quota::Quota)): it holds calls that long,
    /// which carry it (`transition.rs`).
    carrying: crate::clock::Nanos,
    /// Whether the running configuration moves any limit of it, a call's own quota among
    /// them, to another state: then a call's own quota first resolved after the reload may
    /// hold its old state longer than `carrying` says ([`in_force`](Self::in_force)).
    moves: bool,
    /// When the latest debt a penalty on a token bucket may have left, before it was
    /// replaced, ends (`Inner::penalized_until`): a moved bucket's old state is carried from
    /// until then too (a penalty's debt may outlast the tolerance).
    pub(crate) penalized_until: crate::clock::Nanos,
    /// Which calls it holds to nothing, by how the running configuration resolves them
    /// ([`resolves_alike`](Self::resolves_alike)), worked out when a reload installs the
    /// running one ([`against`](Self::against)).
    alike: Alike,
}

/// What holds a kept configuration longest ([`Kept::held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldBy {
    /// Its longest configured window.
    Window,
    /// The longest window of its own a call was worked out with, or an annotated fn
    /// declares (`Inner::own_windows`).
    OwnWindow,
    /// What the old state of a limit it moved may hold (`Kept::carrying_with`): a
    /// configured bucket's debt or block, a quota of its own's, a penalty's debt.
    Carrying,
}

/// Which calls a kept configuration resolves as the running one does ([`Kept::against`]).
#[derive(Clone, Default)]
struct Alike {
    /// For each tier of the running configuration, by index, and then for no tier: whether a
    /// call there with a limit of its own (`[true]`), or without (`[false]`), resolves alike.
    by_tier: Box<[[bool; 2]]>,
    /// Whether a call that names no tier falls under a tier of the same name in both (or
    /// under none in both).
    default_tier: bool,
}

impl Kept {
    /// Whether it may still hold a call at `now`: the call's own window (`own`, in
    /// nanoseconds, the same under every configuration) or else its longest configured one has
    /// not passed since it was replaced, or a moved state may still hold something
    /// ([`carrying_with`](Self::carrying_with) `outlasts`, `Inner::own_outlasts` now). With no
    /// window of the call's own: whether it may hold any such call.
    #[inline]
    pub(crate) fn in_force(
        &self,
        now: crate::clock::Nanos,
        own: Option<crate::clock::Nanos>,
        outlasts: crate::clock::Nanos,
        penalized: crate::clock::Nanos,
    ) -> bool {
        let holds = own
            .unwrap_or(self.longest)
            .max(self.carrying_with(outlasts, penalized));
        now < self.replaced_at.saturating_add(holds)
    }

    /// How long past `replaced_at` a state it moved may hold something, a call's own quota
    /// outlasting the reload by up to `outlasts` (`Inner::own_outlasts` when asked) among
    /// them: `carrying`, worked out with the own quotas seen before the reload, and
    /// `outlasts` where it moves anything. Without `outlasts`, a call with its own bucket
    /// of a token a minute first resolved after the reload read its new state alone once
    /// the configured bucket's carrying had passed, the old one still owing its hour: 13
    /// admitted where the one bucket gave 7 (probes_prepared_transitions; a site prepared
    /// at the reload kept carrying it).
    #[inline]
    ///
    /// `penalized`: when the latest debt a penalty made through any service of the fleet
    /// may leave ends, as read from the store's record (`horizon.rs`; 0 on a store that
    /// records none): a moved bucket's old state may owe it.
    fn carrying_with(
        &self,
        outlasts: crate::clock::Nanos,
        penalized: crate::clock::Nanos,
    ) -> crate::clock::Nanos {
        match self.moves {
            true => (self.carrying.max(outlasts)).max(penalized.saturating_sub(self.replaced_at)),
            false => self.carrying,
        }
    }

    /// Whether it may still hold any call at `now`: one without a window of its own (its
    /// longest configured window), or one with `own`, the longest window of its own a call of
    /// the service was worked out with (`Inner::own_windows`: such a call is held to every
    /// configuration replaced within it, whichever it was worked out under), since it was
    /// replaced. What a reload keeps it for (`reload.rs`).
    pub(crate) fn holds_any(
        &self,
        now: crate::clock::Nanos,
        own: crate::clock::Nanos,
        outlasts: crate::clock::Nanos,
        penalized: crate::clock::Nanos,
    ) -> bool {
        now < self.held(own, outlasts, penalized).0
    }

    /// Until when it may hold any call ([`holds_any`](Self::holds_any)), what holds it that
    /// long, and for how long past `replaced_at`: what a reload refused for holding too many
    /// names (`reload.rs`).
    pub(crate) fn held(
        &self,
        own: crate::clock::Nanos,
        outlasts: crate::clock::Nanos,
        penalized: crate::clock::Nanos,
    ) -> (crate::clock::Nanos, HeldBy, crate::clock::Nanos) {
        let spans = [
            (self.longest, HeldBy::Window),
            (own, HeldBy::OwnWindow),
            (self.carrying_with(outlasts, penalized), HeldBy::Carrying),
        ];
        let (span, by) = (spans.into_iter())
            .max_by_key(|&(span, _)| span)
            .unwrap_or((0, HeldBy::Window));
        (self.replaced_at.saturating_add(span), by, span)
    }

    /// Whether it holds a call with `options`, decided under `tier` (an index into the
    /// running configuration's tiers) by the running configuration, to nothing: limiting was
    /// off in it, or it lays the same settings under the call's at a tier of the same name
    /// (or at none) under the same key prefix, so it resolves the call to the same quota on
    /// the same state, which it never holds to anything (`transition_of`). Worked out once per
    /// reload for every tier: a call resolved per call does not resolve it again.
    #[inline]
    pub(crate) fn resolves_alike(
        &self,
        options: &crate::service::Call<'_>,
        tier: Option<usize>,
    ) -> bool {
        let at = tier.unwrap_or(self.alike.by_tier.len().wrapping_sub(1));
        let own_limit = options.overrides.limit.is_some();
        self.resolves_alike_at(at, options.tier.is_some(), own_limit)
    }

    /// [`resolves_alike`](Self::resolves_alike) for a call at `at` (an index into the
    /// running configuration's tiers, or their number for no tier), that names a tier
    /// (`names_tier`) or not, with a limit of its own (`own_limit`) or not.
    #[inline]
    fn resolves_alike_at(&self, at: usize, names_tier: bool, own_limit: bool) -> bool {
        if !names_tier && !self.alike.default_tier {
            return false;
        }
        self.alike
            .by_tier
            .get(at)
            .is_some_and(|alike| alike[usize::from(own_limit)])
    }

    /// This configuration kept under `running` (the configuration a reload installs): which
    /// calls it resolves as `running` does, worked out for every tier of `running`; and how
    /// long it is kept for what its moved limits' states may hold, a call's own quota's up
    /// to `own` (`Inner::own_outlasts`).
    pub(crate) fn against(mut self, running: &Config, own: crate::clock::Nanos) -> Self {
        let old = &*self.config;
        // Limiting off refused nothing; another prefix is another state.
        let (off, keyed_alike) = (!old.enabled(), old.key_prefix() == running.key_prefix());
        let at = |tier: Option<&crate::config::ResolvedTier>| -> [bool; 2] {
            let (under, old_under) = match tier {
                Some(t) => match old.tier(&t.name) {
                    Some(o) => (&t.under, &o.under),
                    None => return [off; 2],
                },
                None => (&running.plain_under, &old.plain_under),
            };
            [false, true].map(|own| off || (keyed_alike && old_under.alike(under, own)))
        };
        let by_tier = (running.tiers().iter().map(Some))
            .chain(std::iter::once(None))
            .map(at)
            .collect();
        let default_tier = old.default_tier() == running.default_tier();
        self.alike = Alike {
            by_tier,
            default_tier,
        };
        let moved = carrying(old, running, own);
        self.moves = moved.is_some();
        self.carrying = match moved.unwrap_or(0) {
            0 => 0,
            span => span.max(self.penalized_until.saturating_sub(self.replaced_at)),
        };
        self
    }

    /// The running `generation`, replaced by a reload at `replaced_at`, with penalties'
    /// debts ending by `penalized_until` at the latest.
    pub(crate) fn new(
        generation: &Generation,
        replaced_at: crate::clock::Nanos,
        penalized_until: crate::clock::Nanos,
    ) -> Self {
        let config = Arc::clone(&generation.config);
        let longest = (config.tiers().iter().map(|t| t.quota.window_nanos()))
            .chain(std::iter::once(config.default_window().as_nanos() as u64))
            .max()
            .unwrap_or(0);
        Kept {
            config,
            replaced_at,
            longest,
            carrying: 0,
            moves: false,
            penalized_until,
            alike: Alike::default(),
        }
    }
}

/// [`Kept::carrying`] of `old` under `running`: the longest any of its limits that `running`
/// moves to another state (another key prefix; a tier gone, renamed or on another window or
/// strategy; calls naming no tier under another default tier) may hold something there
/// after the reload, a call's own quota there (overrides: under a moved limit, or under
/// none moved by the prefix, the default tier or the module's settings) up to `own`.
/// `None` where it moves nothing; limiting off held nothing.
fn carrying(
    old: &Config,
    running: &Config,
    own: crate::clock::Nanos,
) -> Option<crate::clock::Nanos> {
    if !old.enabled() {
        return None;
    }
    let prefix_moved = old.key_prefix() != running.key_prefix();
    let default_moved = old.default_tier() != running.default_tier();
    let moved = |name: Option<&str>, quota: &crate::quota::Quota| {
        let now = match name {
            Some(name) => running.tier(name).map(|t| t.quota),
            None => running.plain_quota(),
        };
        prefix_moved || now.is_none_or(|q| !q.same_identity(quota))
    };
    let tiers = old.tiers().iter().map(|t| {
        let is_default = old.default_tier() == Some(&*t.name);
        (
            moved(Some(&t.name), &t.quota) || (is_default && default_moved),
            t.quota,
        )
    });
    let own_moved =
        prefix_moved || default_moved || !old.plain_under.alike(&running.plain_under, true);
    (tiers.chain(old.plain_quota().map(|q| (moved(None, &q), q))))
        .filter(|&(moved, _)| moved)
        .map(|(_, q)| q.outlasts_by().max(own))
        .chain(own_moved.then_some(own))
        .max()
}

/// How many replaced configurations a generation keeps for transitions whatever their age,
/// besides those that may still hold a call (`Kept::holds_any`): a margin, which a call
/// resolved per call skips with one comparison once it is past its windows.
pub(crate) const KEPT_PREVIOUS: usize = 8;

impl Generation {
    pub(super) fn new(config: Config, number: u64, before: Option<&Generation>) -> Self {
        let by_tier = config
            .tiers()
            .iter()
            .map(|t| {
                let kept = before.and_then(|b| {
                    let i = b.config.tiers().iter().position(|old| old.name == t.name)?;
                    Some(Arc::clone(&b.by_tier[i]))
                });
                kept.unwrap_or_else(|| Arc::new(Counters::tier(&t.name)))
            })
            .collect();
        let mut generation = Generation {
            config: Arc::new(config),
            by_tier,
            number,
            previous: Vec::new(),
            alike: Box::default(),
        };
        generation.hold(Vec::new());
        generation
    }

    /// The configurations reloads replaced that this generation holds calls to (see
    /// `previous`), the latest first.
    #[inline]
    pub(crate) fn previous(&self) -> &[Kept] {
        &self.previous
    }

    /// Holds calls to `previous` (each worked out against this configuration:
    /// [`Kept::against`]), and works out which calls every one of them resolves alike.
    pub(crate) fn hold(&mut self, previous: Vec<Kept>) {
        let tiers = self.config.tiers().len();
        self.alike = (0..=tiers)
            .map(|at| {
                [false, true].map(|names_tier| {
                    [false, true].map(|own_limit| {
                        (previous.iter()).all(|k| k.resolves_alike_at(at, names_tier, own_limit))
                    })
                })
            })
            .collect();
        self.previous = previous;
    }

    /// Whether a call begun under `begun` and decided at `tier` there (an index into its
    /// tiers, `None` for no tier) is decided alike under this generation, whatever it named
    /// and set itself: `begun` is still held here, with the same queue (on or off, its timeout
    /// and size) and limiting on or off, and every configuration held resolves every call at
    /// that tier (by name) as this one does, so none is held to anything. What
    /// a waiter in the queue asks after a reload, knowing its site but not its call
    /// (`wait.rs`): where it cannot tell, it is not alike (the wait ends, as before).
    pub(crate) fn decides_alike(&self, begun: &Generation, tier: Option<usize>) -> bool {
        let (now, then) = (&*self.config, &*begun.config);
        // The queue itself as it was: a wait under other bounds, or none, ends.
        let queued_alike = now.enabled() == then.enabled()
            && now.queue_enabled() == then.queue_enabled()
            && now.queue_timeout() == then.queue_timeout()
            && now.max_queue_size() == then.max_queue_size();
        let held = (self.previous.iter()).any(|k| Arc::ptr_eq(&k.config, &begun.config));
        if !queued_alike || !held {
            return false;
        }
        let at = match tier {
            None => self.config.tiers().len(),
            Some(i) => {
                let Some(name) = begun.config.tiers().get(i).map(|t| &t.name) else {
                    return false;
                };
                match self.config.tiers().iter().position(|t| t.name == *name) {
                    Some(at) => at,
                    None => return false,
                }
            }
        };
        // A call at no tier named none; one at a tier may have named it or had it by default.
        let named: &[bool] = if tier.is_some() {
            &[false, true]
        } else {
            &[false]
        };
        self.alike.get(at).is_some_and(|alike| {
            (named.iter()).all(|&n| alike[usize::from(n)].iter().all(|&alike| alike))
        })
    }

    /// Whether every configuration this generation holds calls to resolves a call with
    /// `options`, decided under `tier` (an index into the running configuration's tiers), as
    /// the running one does: it is held to none of them ([`Kept::resolves_alike`]), and has
    /// no transition. True when none is held; false for a tier this generation does not know.
    #[inline]
    pub(crate) fn holds_none(
        &self,
        options: &crate::service::Call<'_>,
        tier: Option<usize>,
    ) -> bool {
        let at = tier.unwrap_or(self.config.tiers().len());
        let (names_tier, own_limit) = (options.tier.is_some(), options.overrides.limit.is_some());
        // None held: the one compare a call pays before any reload.
        self.previous.is_empty()
            || (self.alike.get(at))
                .is_some_and(|alike| alike[usize::from(names_tier)][usize::from(own_limit)])
    }
}
