//! [`Told`]: a store's answer to the service, which may be a bare admission for a caller that
//! never shows one (an annotated fn).

use crate::decision::Decision;
use crate::error::Error;

/// What a store tells the service of a request decided at once
/// ([`Store::decide_now_told`](super::Store::decide_now_told)): the decision, or, for a request
/// whose caller never shows an admitted call's decision (an annotated fn), only that the call
/// was admitted. Not a seam: only the service reads it, and a store that does not know it
/// always answers with the decision.
#[doc(hidden)]
#[derive(Debug)]
pub enum Told {
    /// A plain admission under the request's quota, its decision not made: a spend admitted
    /// by the store's own algorithm, whose decision would have been of the right shape (see
    /// `Verdict::admits_plainly`). Only ever the answer to a request that asked for it
    /// (`Request::admission_unshown`).
    Admitted,
    /// The decision (or the error), as [`Store::decide_now`](super::Store::decide_now)
    /// answers it.
    Decided(Result<Decision, Error>),
}

impl Told {
    /// The decision, for a caller that shows it. A bare admission is an error here (fail
    /// closed): a store answered it to a request that did not ask for one.
    #[inline(always)]
    pub(crate) fn decision(self) -> Result<Decision, Error> {
        match self {
            Told::Decided(decided) => decided,
            Told::Admitted => Err(admitted_unasked()),
        }
    }
}

#[cold]
#[inline(never)]
fn admitted_unasked() -> Error {
    Error::UnexpectedState {
        message: "the store answered an admission without its decision".into(),
    }
}
#[cfg(test)]
mod tests {
    use super::Told;
    use crate::store::{Mode, Request, Store, StoreKey};
    use crate::{MemoryStore, Quota};

    const NOW: u64 = 1_000_000_000_000;

    fn told(store: &MemoryStore, request: Request<'_>) -> Told {
        store
            .decide_now_told(request, None)
            .expect("decided at once")
    }

    /// The memory store tells bare only a spend whose caller asked for it, and only while it
    /// is admitted: a refusal, a look and a kept spend (whose stamp a refund needs) are told
    /// with their decisions, as to every caller that shows them.
    #[test]
    fn only_an_unshown_admitted_spend_is_told_bare() {
        let store = MemoryStore::new();
        let quota = Quota::per_minute(2).unwrap();
        let key = StoreKey::composed("told:k");
        let asked = |mode| Request::checked(key, &quota, 1, NOW, mode);
        let shown = told(&store, asked(Mode::Spend));
        assert!(matches!(shown, Told::Decided(Ok(ref d)) if d.allowed && d.remaining == 1));
        let look = told(&store, asked(Mode::Look).unshown());
        assert!(
            matches!(look, Told::Decided(Ok(ref d)) if d.allowed),
            "{look:?}"
        );
        assert!(matches!(
            told(&store, asked(Mode::Spend).unshown()),
            Told::Admitted
        ));
        let refused = told(&store, asked(Mode::Spend).unshown());
        assert!(
            matches!(refused, Told::Decided(Ok(ref d)) if !d.allowed && d.retry_after.is_some()),
            "{refused:?}"
        );
        let kept = told(
            &store,
            Request::checked(StoreKey::composed("told:j"), &quota, 1, NOW, Mode::Keep).unshown(),
        );
        assert!(
            matches!(kept, Told::Decided(Ok(ref d)) if d.allowed && d.stamp() != 0),
            "{kept:?}"
        );
    }

    /// A bare admission read as a decision is an error (fail closed).
    #[test]
    fn a_bare_admission_read_as_a_decision_is_an_error() {
        let read = Told::Admitted.decision();
        assert!(
            matches!(read, Err(crate::Error::UnexpectedState { .. })),
            "{read:?}"
        );
    }
}
