//! [`StoredState`]: one key's state as bytes, for stores that keep state outside this crate.

use std::fmt;

use crate::algorithm::{self, State, Written};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::Error;
use crate::quota::Quota;
use crate::syntax::{Strategy, MAX_WINDOW};

/// The first byte of every encoding, so a later layout can be told apart from this one:
/// version 2 keeps the window that last spent on the state (the first word after the
/// letter); version 1, without it, is still read (as a state no window is recorded for).
const VERSION: u8 = 2;

/// The layout before the window was kept beside the state.
const VERSION_1: u8 = 1;

/// One key's limiter state, with the algorithms that decide on it: what a custom
/// [`Store`](super::Store) loads, decides on and saves inside its own transaction.
///
/// The encoding is private but stable within a major version: a version byte, the strategy,
/// then fixed-width little-endian integers. Bytes that are not such an encoding — another
/// program's value, a truncated write — are [`Error::UnexpectedState`], never a fresh key.
///
/// The state keeps the window of the last quota that spent on it: a key asked under two
/// windows is refused under the other one while the state still counts by its own (and is
/// fresh there after), and [`expires_at`](Self::expires_at) keeps it that long, never read
/// as fresh while it counts.
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
pub struct StoredState {
    state: State,
    /// The window (nanoseconds) of the last quota that spent on the state; 0 for none (a
    /// fresh state, or one read from version 1 bytes).
    written: Nanos,
}

impl fmt::Debug for StoredState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoredState")
            .field(&self.state.strategy())
            .finish()
    }
}

impl StoredState {
    /// A fresh state for `quota`'s strategy.
    pub fn new(quota: &Quota) -> Self {
        StoredState {
            state: State::new(quota.strategy()),
            written: 0,
        }
    }

    /// Decides `request` on this state and, in [`Mode::Spend`](super::Mode::Spend), records
    /// the call if allowed. The rules of every store: a look of cost 0 is the level now; a
    /// state of another strategy (or a window starting off the quota's boundaries) is
    /// [`Error::UnexpectedState`]; a state another window spent on is refused while it counts
    /// by that window, and fresh after (see the type's docs).
    pub fn decide(&mut self, request: &super::Request<'_>) -> Result<Decision, Error> {
        let (now, quota) = (request.now(), request.quota());
        let (cost, spends) = (request.cost(), request.spends());
        let state = &self.state;
        let written = match state.strategy() == quota.strategy() {
            true => algorithm::written_elsewhere(self.written, now, quota, |q| state.expires_at(q)),
            false => Written::Here, // another strategy's: an error, below
        };
        let verdict = match written {
            Written::Here => algorithm::decide(&mut self.state, now, quota, cost, spends)?,
            Written::Elsewhere(refused) => refused,
            Written::Passed if spends => {
                self.state = State::new(quota.strategy());
                algorithm::decide(&mut self.state, now, quota, cost, spends)?
            }
            Written::Passed => {
                algorithm::decide(&mut State::new(quota.strategy()), now, quota, cost, false)?
            }
        };
        if spends && verdict.allowed {
            self.written = quota.window_nanos();
        }
        Ok(Decision::for_quota(verdict, now, quota).shifted(self.state.shift()))
    }

    /// Gives back the spend `refund` names, if this state (the one it was made on: the
    /// store checks the stamp it keeps beside the bytes) still holds it: nothing once it no
    /// longer counts, and never past the quota. Returns whether anything was given back; a
    /// state of another strategy gives nothing.
    pub fn refund(&mut self, refund: &super::Refund<'_>) -> bool {
        let quota = refund.quota();
        self.state.strategy() == quota.strategy()
            && self.state.written_for(quota)
            && algorithm::written_under(self.written, quota)
            && (self.state).refund(refund.spend(), refund.now(), quota, refund.cost())
    }

    /// When this state is indistinguishable from a fresh one: a store may drop it then (set
    /// it as the key's expiry). Never before it stops counting by the window that last spent
    /// on it, whatever `quota`'s: a key dropped by a shorter window's expiry gave a longer
    /// one a fresh budget inside its window.
    pub fn expires_at(&self, quota: &Quota) -> Nanos {
        let own = self.state.expires_at(quota);
        match self.written {
            0 => own,
            written => own.max(self.state.expires_at(&quota.with_window_nanos(written))),
        }
    }

    /// The state as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (letter, words) = self.state.to_words();
        let mut out = Vec::with_capacity(10 + 8 * words.len());
        out.extend_from_slice(&[VERSION, letter]);
        for w in std::iter::once(self.written).chain(words) {
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
        let [version @ (VERSION | VERSION_1), tag, rest @ ..] = bytes else {
            return Err(bad("not a limiter state of this version"));
        };
        if rest.len() % 8 != 0 {
            return Err(bad("a truncated limiter state"));
        }
        let mut words: Vec<u64> = rest
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let written = match *version {
            VERSION_1 => 0,
            _ if words.is_empty() => return Err(bad("a truncated limiter state")),
            _ => words.remove(0),
        };
        let state = State::from_words(*tag, &words).map_err(bad)?;
        if !state.written_by_a_store() || written > MAX_WINDOW.as_nanos() as Nanos {
            return Err(bad("a limiter state no store writes"));
        }
        if !Self::written_by(&state, written) {
            return Err(bad("a limiter state its recorded window did not write"));
        }
        Ok(StoredState { state, written })
    }

    /// Whether the window recorded beside `state` (nanoseconds, 0 for none) could have written
    /// it: a window's start on that window's boundaries, as every decision under it leaves
    /// it. A recorded window a flipped bit made shorter than the one that wrote the state
    /// reads it as another window's that has passed: a fresh budget inside its own window
    /// (probes_two_windows). What a shorter window dividing the start could have written is
    /// not told apart: it is read as that window's.
    fn written_by(state: &State, written: Nanos) -> bool {
        if written == 0 {
            return true;
        }
        let window = std::time::Duration::from_nanos(written);
        match Quota::new(1, window) {
            Ok(quota) => state.written_for(&quota.with_strategy(state.strategy())),
            Err(_) => false,
        }
    }

    /// The strategy this state belongs to.
    pub fn strategy(&self) -> Strategy {
        self.state.strategy()
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

    /// A state's bytes, no window recorded (the first word).
    fn encode(tag: u8, words: &[u64]) -> Vec<u8> {
        let mut bytes = vec![VERSION, tag];
        for w in std::iter::once(&0).chain(words) {
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
            // The start's lowest byte, after the window's word: off the boundaries of the
            // window recorded beside it, refused when read.
            bytes[10] ^= 1;
            assert!(StoredState::from_bytes(&bytes).is_err(), "{strategy}");
            // Without a window recorded (version 1), refused when decided.
            let mut v1 = vec![VERSION_1, bytes[1]];
            v1.extend_from_slice(&bytes[10..]);
            let mut shifted = StoredState::from_bytes(&v1).unwrap();
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

    /// Bytes of the layout before the window was kept are read, as a state no window is
    /// recorded for, and written back in this one.
    #[test]
    fn version_1_bytes_are_read_without_a_window() {
        let q = Quota::per_second(3)
            .unwrap()
            .with_strategy(Strategy::FixedWindow);
        let mut v1 = vec![VERSION_1, b'F'];
        for w in [5_000_000_000u64, 2] {
            v1.extend_from_slice(&w.to_le_bytes());
        }
        let mut state = StoredState::from_bytes(&v1).unwrap();
        assert_eq!(state.written, 0);
        assert_eq!(
            decide(&mut state, 5_000_000_000, &q, 1, true)
                .unwrap()
                .remaining,
            0
        );
        assert_eq!(state.to_bytes()[0], VERSION);
        assert_eq!(state.written, 1_000_000_000);
        // A recorded window past the longest is no store's.
        let mut far = encode(b'F', &[0, 0]);
        far[2..10].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(StoredState::from_bytes(&far).is_err());
    }

    /// A key asked under two windows: the state of the one that last spent is refused under
    /// the other while it still counts by its own, and is fresh there after; its expiry is
    /// never the shorter window's while it counts (every strategy but the token bucket, whose
    /// one time counts every spend under any quota).
    #[test]
    fn a_state_is_refused_under_another_window_while_it_counts_by_its_own() {
        let sec = 1_000_000_000;
        let minute_start = 60 * 1_000 * sec;
        for strategy in Strategy::ALL {
            let minute = Quota::new(3, std::time::Duration::from_secs(60))
                .unwrap()
                .with_strategy(strategy);
            let second = Quota::per_second(100).unwrap().with_strategy(strategy);
            let mut s = StoredState::new(&minute);
            for _ in 0..3 {
                assert!(
                    decide(&mut s, minute_start, &minute, 1, true)
                        .unwrap()
                        .allowed
                );
            }
            let at = minute_start + 5 * sec;
            let asked = decide(&mut s, at, &second, 1, true).unwrap();
            if strategy == Strategy::TokenBucket {
                continue;
            }
            assert!(!asked.allowed, "{strategy}: {asked:?}");
            assert!(!decide(&mut s, at, &second, 0, false).unwrap().allowed);
            assert!(
                s.expires_at(&second) >= minute_start + 60 * sec,
                "{strategy}"
            );
            // The minute's own calls are still refused: nothing was dropped.
            assert!(
                !decide(&mut s, at, &minute, 1, true).unwrap().allowed,
                "{strategy}"
            );
            // Once the minute no longer counts, the other window finds it fresh.
            let later = s.expires_at(&minute);
            assert_eq!(
                decide(&mut s, later, &second, 1, true).unwrap().remaining,
                99
            );
            assert_eq!(s.written, sec, "{strategy}");
        }
    }
}
