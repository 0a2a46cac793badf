//! [`StoredState`]: one key's state as bytes, for stores that keep state outside this crate.

use std::fmt;

use crate::algorithm::{self, FixedWindow, Gcra, SlidingCounter, SlidingLog, State};
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
/// use ratelimit_core::store::StoredState;
/// use ratelimit_core::{Error, Quota};
///
/// let quota = Quota::per_second(1)?;
/// let mut state = StoredState::new(&quota);
/// let now = 1_000_000_000;
/// assert!(state.decide(now, &quota, 1, true)?.allowed);
/// let saved = state.to_bytes();
/// let mut loaded = StoredState::from_bytes(&saved)?;
/// assert!(!loaded.decide(now, &quota, 1, true)?.allowed);
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

    /// Decides a call of weight `cost` at `now` and, with `commit`, records it if allowed.
    /// The rules of every store: a cost of 0 (without `commit`) is a look at the level, a
    /// cost above the capacity is [`Error::CostAboveCapacity`], a state of another strategy
    /// is [`Error::UnexpectedState`].
    pub fn decide(
        &mut self,
        now: Nanos,
        quota: &Quota,
        cost: u64,
        commit: bool,
    ) -> Result<Decision, Error> {
        let verdict = algorithm::decide(&mut self.0, now, quota, cost, commit)?;
        Ok(Decision::for_quota(verdict, now, quota))
    }

    /// When this state is indistinguishable from a fresh one: a store may drop it then (set
    /// it as the key's expiry).
    pub fn expires_at(&self, quota: &Quota) -> Nanos {
        self.0.expires_at(quota)
    }

    /// The state as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        let words: Vec<u64> = match &self.0 {
            State::Fixed(s) => {
                out.push(b'F');
                vec![s.start, s.count]
            }
            State::Counter(s) => {
                out.push(b'C');
                vec![s.start, s.previous, s.current]
            }
            State::Bucket(s) => {
                out.push(b'T');
                vec![s.tat]
            }
            State::Log(log) => {
                out.push(b'L');
                let mut words = vec![log.len() as u64];
                for (t, c) in log.entries() {
                    words.push(t);
                    words.push(u64::from(c));
                }
                words
            }
        };
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads bytes written by [`to_bytes`](Self::to_bytes); anything else is
    /// [`Error::UnexpectedState`].
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
        let state = match (tag, words.as_slice()) {
            (b'F', &[start, count]) => State::Fixed(FixedWindow { start, count }),
            (b'C', &[start, previous, current]) => State::Counter(SlidingCounter {
                start,
                previous,
                current,
            }),
            (b'T', &[tat]) => State::Bucket(Gcra { tat }),
            (b'L', [n, entries @ ..]) if entries.len() as u64 == 2 * n => {
                let mut log = SlidingLog::default();
                for pair in entries.chunks_exact(2) {
                    let cost = u32::try_from(pair[1]).map_err(|_| bad("a log entry's cost"))?;
                    if !log.restore(pair[0], cost) {
                        return Err(bad("a log out of time order"));
                    }
                }
                State::Log(Box::new(log))
            }
            _ => return Err(bad("not a limiter state")),
        };
        Ok(StoredState(state))
    }

    /// The strategy this state belongs to.
    pub fn strategy(&self) -> Strategy {
        self.0.strategy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_round_trips_and_garbage_is_refused() {
        for strategy in Strategy::ALL {
            let q = Quota::per_second(3).unwrap().with_strategy(strategy);
            let mut s = StoredState::new(&q);
            for now in [10, 20, 30] {
                s.decide(now, &q, 1, true).unwrap();
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
}
