//! [`StoredState`]: one key's state as bytes, for stores that keep state outside this crate.

use std::fmt;

use crate::algorithm::{self, State};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::syntax::Strategy;

/// The first byte of every encoding, so a later layout can be told apart from this one.
const VERSION: u8 = 1;

/// One key's limiter state, with the algorithms that decide on it: what a custom
/// [`Store`](super::Store) loads, decides on and saves inside its own transaction.
///
/// The encoding is private but stable within a major version: a version byte, the strategy,
/// then fixed-width little-endian integers. Bytes that are not such an encoding — another
/// program's value, a truncated write — are [`Error::UnexpectedState`], never a fresh key.
///
/// ```
/// use ratelimit_core::store::{Request, StoreKey, StoredState};
/// use ratelimit_core::{Error, Quota};
///
/// let quota = Quota::per_second(1)?;
/// let mut state = StoredState::new(&quota);
/// let request = Request::spend(StoreKey::new("user:1")?, &quota, 1, 1_000_000_000)?;
/// assert!(state.decide(&request)?.allowed);
/// let saved = state.to_bytes();
/// let mut loaded = StoredState::from_bytes(&saved)?;
/// assert!(!loaded.decide(&request)?.allowed);
/// assert!(matches!(StoredState::from_bytes(b"garbage"), Err(Error::UnexpectedState { .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StoredState(State);

impl fmt::Debug for StoredState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoredState")
            .field(&self.0.strategy())
            .finish()
    }
}

impl StoredState {
    /// A fresh state for `quota`'s strategy.
    pub fn new(quota: &Quota) -> Self {
        StoredState(State::new(quota.strategy()))
    }

    /// Decides `request` on this state and, in [`Mode::Spend`](super::Mode::Spend), records
    /// the call if allowed. The rules of every store: a look of cost 0 is the level now; a
    /// state of another strategy (or a window starting off the quota's boundaries) is
    /// [`Error::UnexpectedState`].
    pub fn decide(&mut self, request: &super::Request<'_>) -> Result<Decision, Error> {
        let (now, quota) = (request.now(), request.quota());
        let verdict = algorithm::decide(&mut self.0, now, quota, request.cost(), request.spends())?;
        Ok(Decision::for_quota(verdict, now, quota).shifted(self.0.shift()))
    }

    /// Gives back the spend `refund` names, if this state (the one it was made on: the
    /// store checks the stamp it keeps beside the bytes) still holds it: nothing once it no
    /// longer counts, and never past the quota. Returns whether anything was given back; a
    /// state of another strategy gives nothing.
    pub fn refund(&mut self, refund: &super::Refund<'_>) -> bool {
        let quota = refund.quota();
        self.0.strategy() == quota.strategy()
            && self.0.written_for(quota)
            && (self.0).refund(refund.spend(), refund.now(), quota, refund.cost())
    }

    /// When this state is indistinguishable from a fresh one: a store may drop it then (set
    /// it as the key's expiry).
    pub fn expires_at(&self, quota: &Quota) -> Nanos {
        self.0.expires_at(quota)
    }

    /// The state as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (letter, words) = self.0.to_words();
        let mut out = Vec::with_capacity(2 + 8 * words.len());
        out.extend_from_slice(&[VERSION, letter]);
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads bytes written by [`to_bytes`](Self::to_bytes); anything else is
    /// [`Error::UnexpectedState`], a state no store writes among them (a time past the last
    /// one decided, a count past [`MAX_CAPACITY`](crate::MAX_CAPACITY), a window with no
    /// call recorded but a start): garbage is never read as a fresh budget, and a state read
    /// writes back the bytes it was read from.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let bad = |what: &str| Error::UnexpectedState {
            message: format!("{what} ({} bytes)", bytes.len()),
        };
        let [VERSION, tag, rest @ ..] = bytes else {
            return Err(bad("not a limiter state of this version"));
        };
        if rest.len() % 8 != 0 {
            return Err(bad("a truncated limiter state"));
        }
        let words: Vec<u64> = rest
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let state = State::from_words(*tag, &words).map_err(bad)?;
        if !state.written_by_a_store() {
            return Err(bad("a limiter state no store writes"));
        }
        Ok(StoredState(state))
    }

    /// The strategy this state belongs to.
    pub fn strategy(&self) -> Strategy {
        self.0.strategy()
    }
}

#[cfg(test)]
mod tests {
    /// One decision on `state`, as a store makes it.
    fn decide(
        state: &mut StoredState,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Result<Decision, Error> {
        let mode = if commit {
            super::super::Mode::Spend
        } else {
            super::super::Mode::Look
        };
        let key = super::super::StoreKey::new("k")?;
        state.decide(&super::super::Request::new(key, quota, cost, now, mode)?)
    }

    use super::*;

    #[test]
    fn every_strategy_round_trips_and_garbage_is_refused() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(3).unwrap().with_strategy(strategy);
            let mut s = StoredState::new(&q);
            for now in [10, 20, 30] {
                decide(&mut s, now, &q, 1, true).unwrap();
            }
            let bytes = s.to_bytes();
            let back = StoredState::from_bytes(&bytes).unwrap();
            assert_eq!(back, s, "{strategy}");
            for cut in 0..bytes.len() {
                assert!(
                    StoredState::from_bytes(&bytes[..cut]).is_err(),
                    "{strategy}: {cut}"
                );
            }
        }
        for garbage in [
            &b""[..],
            b"1",
            b"hello world",
            &[1, b'X', 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert!(matches!(
                StoredState::from_bytes(garbage),
                Err(Error::UnexpectedState { .. })
            ));
        }
    }

    fn encode(tag: u8, words: &[u64]) -> Vec<u8> {
        let mut bytes = vec![VERSION, tag];
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        bytes
    }

    /// Each encodes a state no store writes; each was read, and some decided as a fresh key.
    #[test]
    fn states_no_store_writes_are_refused_when_read() {
        let max_now = algorithm::MAX_NOW;
        let cap = crate::MAX_CAPACITY;
        let refused = [
            encode(b'L', &[1 << 63]),
            encode(b'L', &[(1 << 63) + 1, 5, 1]),
            encode(b'L', &[u64::MAX, 5, 1]),
            encode(b'L', &[1, 5, 1, 6, 1]),
            encode(b'L', &[2, 5, 1]),
            encode(b'L', &[1, max_now + 1, 1]),
            encode(b'L', &[2, 5, u64::from(u32::MAX), 6, u64::from(u32::MAX)]),
            encode(b'F', &[max_now + 1, 1]),
            encode(b'F', &[10, cap + 1]),
            encode(b'C', &[10, 0, 0]),
            encode(b'C', &[0, 3, 0]),
            encode(b'C', &[10, cap + 1, 1]),
            encode(b'T', &[u64::MAX]),
        ];
        for bytes in refused {
            assert!(
                matches!(
                    StoredState::from_bytes(&bytes),
                    Err(Error::UnexpectedState { .. })
                ),
                "{bytes:?}"
            );
        }
        let read = [
            encode(b'L', &[0]),
            encode(b'L', &[2, 5, 1, 5, cap - 1]),
            encode(b'F', &[0, 0]),
            encode(b'F', &[10, 0]),
            encode(b'F', &[max_now, cap]),
            encode(b'C', &[0, 0, 0]),
            encode(b'C', &[max_now, cap, cap]),
            encode(b'T', &[0]),
        ];
        for bytes in read {
            let state = StoredState::from_bytes(&bytes).unwrap();
            assert_eq!(state.to_bytes(), bytes);
        }
    }

    /// A window's start off the quota's boundaries (a flipped bit) was read as an old
    /// window's: a fresh budget for a key that had spent it.
    #[test]
    fn a_window_starting_off_the_quotas_boundaries_is_refused_not_fresh() {
        let sec = 1_000_000_000;
        for strategy in [Strategy::FixedWindow, Strategy::SlidingWindowCounter] {
            let q = Quota::per_second(1).unwrap().with_strategy(strategy);
            let mut s = StoredState::new(&q);
            let now = 1_000 * sec;
            assert!(decide(&mut s, now, &q, 1, true).unwrap().allowed);
            let mut bytes = s.to_bytes();
            bytes[2] ^= 1;
            let mut shifted = StoredState::from_bytes(&bytes).unwrap();
            for (cost, commit) in [(1, true), (1, false), (0, false)] {
                assert!(
                    matches!(
                        decide(&mut shifted, now, &q, cost, commit),
                        Err(Error::UnexpectedState { .. })
                    ),
                    "{strategy}"
                );
            }
            // At a coarser window the same start is off the boundaries; at 1 ns every
            // start is on one.
            let ns = Quota::new(1, std::time::Duration::from_nanos(1))
                .unwrap()
                .with_strategy(strategy);
            assert!(!decide(&mut shifted, now, &ns, 1, false).unwrap().allowed);
        }
    }
}
