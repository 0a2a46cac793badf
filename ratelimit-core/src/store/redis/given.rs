//! What a state in another Cluster slot than the limit it is carried into gives the
//! stacked script (`lua/carry.lua`'s `given` and `grown`): what a read of it held, what it
//! grew by, the moved bucket's ticket, and the keys beside the moved state that the carry
//! keeps. `across_slots.rs` reads and checks it; `stacked.rs` passes it to the script.

use super::ledger::beside;

/// What the stacked script carries of a state in another Cluster slot (`lua/carry.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Given {
    /// What was read there (`LEVEL_SCRIPT`, `lua/level.lua`): the time its bucket owes and
    /// what is left of its block, in microseconds, carried by the rule of `Carry::debt`
    /// (`given`); its end
    /// ([`Read::end`]), and the time resets and give-backs erased from it
    /// ([`Read::erased`]), which is carried by nothing but that end; the id
    /// of the call when it reads the state again after its script (0: it will not), written
    /// beside the moved state as the call's pending record (see `grow` in `lua/carry.lua`),
    /// and how long after its script that read has come or never will (`read_after_within`,
    /// microseconds), written with it; a script later than that after the moved state's
    /// node's TIME taken before this read ([`Read::began`]) refuses the call, nothing
    /// written (`late` in `lua/carry.lua`).
    Held {
        debt: u64,
        left: u64,
        end: u64,
        erased: u64,
        pending: u64,
        wait: u64,
        began: u64,
    },
    /// What its debt grew by between a read a call carried and one after the call's script
    /// (`RedisStore::run_checked`): its end at each, on its node's clock, how long the
    /// later one's debt lasts (microseconds), added to the moved state (`grown`) but for the
    /// call's [`Ticket`] (`slack`, `since`), and the id of the call, whose pending record is
    /// then done with.
    Grown {
        from: u64,
        to: u64,
        lasts: u64,
        slack: u64,
        since: u64,
        pending: u64,
    },
}

/// One read of a state carried from another Cluster slot (`LEVEL_SCRIPT`, `lua/level.lua`):
/// what it holds ([`Given::Held`]), the instant it was read at on its node's clock, and the time resets
/// (and give-backs) erased from its bucket while it was carried (`lua/level.lua`; 0: none), in
/// microseconds; and the moved state's node's TIME taken before it (`began`, microseconds:
/// `RedisStore::moved_clock`; 0 for a read that no script reckons lateness from, which
/// refuses any call that would), the one clock the stacked script, on that node, reckons
/// the read's age on (`late` in `lua/carry.lua`). Reckoned from `at`, on the old state's node's clock,
/// an unstalled call was refused with that node 1 s + 1 us behind (a wait of 1 s), and a
/// 9 s stall carried with it 8 s ahead, its spend lost once its record outlived the erased
/// key its read kept (3 s owed where one server owes 4 s: both `probe94_`, lua_carry/).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Read {
    pub(super) debt: u64,
    pub(super) left: u64,
    pub(super) at: u64,
    pub(super) erased: u64,
    pub(super) began: u64,
}

impl Read {
    /// What the stacked script carries of this read ([`Given::Held`]) for the call of id
    /// `pending` (0: one that does not read again after its script), whose read after comes
    /// within `wait` of its script or never.
    pub(super) fn held(&self, pending: u64, wait: u64) -> Given {
        Given::Held {
            debt: self.debt,
            left: self.left,
            end: self.end(),
            erased: self.erased,
            pending,
            wait,
            began: self.began,
        }
    }

    /// Its end, on its node's clock: when its bucket is full again, and the time resets and
    /// give-backs erased from it after it: what a reset, a reward, a refund or a lease's
    /// units given back (by a pod a reload has not reached) took from it, it has still been
    /// spent by, and the end never moves back (`lua/level.lua`).
    pub(super) fn end(&self) -> u64 {
        (self.at.saturating_add(self.debt)).saturating_add(self.erased)
    }

    /// What its debt grew by since `earlier` (a read of the same state): how much later its
    /// end ([`end`](Self::end)) is than then (spends and penalties written between, and
    /// what a reset erased; time alone moves neither end, and a reward moves it earlier:
    /// what `earlier` carried then held the moved state to more, never less). When it is
    /// full now, its end is the time read, not what was spent: the whole time since the
    /// earlier end all the same, no less than what was spent between. A bucket refills within a
    /// call's steps when its read after comes late (a runtime stalled, a 5 s pod waits 16 s
    /// for it): counted only as far as resets and give-backs erased since, the 5 s spent
    /// between a carried spend's read and its script were lost once the old bucket refilled
    /// (4 s owed where one server owes 9 s:
    /// `probe87_a_spend_between_read_and_script_refilled_by_a_late_read_after`, lua_carry/).
    /// The time alone so counted is within the moved bucket's slack but for a call whose
    /// moved bucket owed nothing past the debt carried (its [`Ticket`]): over by the time
    /// between its read and its read after, once.
    pub(super) fn grown_since(&self, earlier: &Read) -> u64 {
        self.end().saturating_sub(earlier.end())
    }
}

/// What each read of `read` holds, as the stacked script carries it, for the call of id
/// `pending` (0: one that does not read again after its script), whose read after comes
/// within `wait` of its script or never.
pub(super) fn givens(read: &[Option<Read>], pending: u64, wait: u64) -> Vec<Option<Given>> {
    (read.iter())
        .map(|r| r.map(|r| r.held(pending, wait)))
        .collect()
}

/// What a carried spend's script tells of the moved bucket at its carry of a state read in
/// another slot (`tickets` in `lua/carry.lua`), after the limits' replies: how much longer
/// the moved bucket owed than the debt carried (`slack`, microseconds), and the total added
/// to it for the old state's growth then (`since`). Of what the old state grew by between
/// the call's read and its read after, the moved bucket is owed only what exceeds both its
/// slack and what was added after the script: one script would have carried the old end at
/// the script, which the moved bucket then held, or later additions hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket {
    pub(super) slack: u64,
    pub(super) since: u64,
}

/// The key beside `moved` (a state in its slot) of the total added to it of what the state
/// `from` in another slot owed more than calls carried ([`Given::Grown`], `added` in
/// `lua/carry.lua`). (Not the key that held the end such additions reached, which a pod of
/// an earlier version still writes: read as a total, it would tell of more added than was.)
pub(super) fn grown_mark(moved: &str, from: &str) -> String {
    beside(moved, &format!("added:{from}"))
}

/// The pending record beside `moved` of the last call whose script carried the state `from`
/// in another slot and whose read after has not come ([`Given::Held`]'s `pending`).
pub(super) fn pending_key(moved: &str, from: &str) -> String {
    beside(moved, &format!("pending:{from}"))
}
