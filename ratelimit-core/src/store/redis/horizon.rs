//! The reload horizon of a key prefix on Redis ([`Store::horizon`](crate::store::Store)):
//! one string key beside the prefix's states, `<prefix>:horizon`, raised and read by
//! `lua/horizon.lua`. No state key is it: every one under a prefix begins `<prefix>:{`. On
//! Redis Cluster it lives in a slot of its own, asked by a command of its own, never inside
//! a decision's script. It expires, as every key of the store does: kept twice as long as
//! the longest it was raised to, and raised again by a service that writes past half of that
//! (`Horizon::keep_nanos`).

use std::sync::LazyLock;
use std::time::Instant;

use super::scripts::Lua;
use super::RedisStore;
use crate::error::Error;
use crate::store::{Horizon, Penalty};

static HORIZON_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/horizon.lua")));

/// The record's key under `prefix`.
pub(crate) fn horizon_key(prefix: &str) -> String {
    format!("{prefix}:horizon")
}

/// The longest a penalty's debt may be recorded to last, in microseconds: 2^62 ns, a token
/// bucket's largest tolerance (`lua/horizon.lua`'s `MOST_LEFT`, which refuses a record past
/// it). A raise past it is asked as it (a penalty's debt past 146 years).
const MOST_LEFT_MICROS: u64 = (1 << 62) / 1_000;

/// The longest a valid quota outlasts a reload by (`Quota::outlasts_by`: a window, and a
/// bucket's tolerance or a block, each at most `MAX_TOLERANCE` or [`MAX_WINDOW`]), and the
/// longest window: a record past either holds what no quota can, and is
/// [`Error::UnexpectedState`] rather than a horizon (read as one, a planted `u64::MAX` kept
/// every move for ever, and refused every reload past the 64th: probes_horizon_record_redis).
/// The script is asked them with every raise and refuses such a record before it writes
/// anything (else a raise went on into it, and wrote beside it: probes_horizon_ids_redis);
/// the reply is checked against them again here.
///
/// [`MAX_WINDOW`]: crate::MAX_WINDOW
const MOST_WINDOW: u64 = crate::syntax::MAX_WINDOW.as_nanos() as u64;
const MOST_OUTLASTS: u64 = MOST_WINDOW + crate::quota::MAX_TOLERANCE as u64;

impl RedisStore {
    /// Raises the record of `prefix` to at least `raise` and returns it as it was before.
    pub(super) async fn raise_horizon(
        &self,
        prefix: &str,
        raise: Horizon,
    ) -> Result<Horizon, Error> {
        let key = horizon_key(prefix);
        let keep = raise.keep_nanos.div_ceil(1_000_000);
        let micros = |left: u64| left.div_ceil(1_000).min(MOST_LEFT_MICROS);
        let (bound, end) = (raise.penalty_bound, raise.penalty_end);
        let args = [
            raise.outlasts,
            raise.window,
            micros(bound.left),
            bound.by,
            micros(end.left),
            end.by,
            keep,
            MOST_OUTLASTS,
            MOST_WINDOW,
        ];
        let held: Vec<String> = self
            .run(
                &HORIZON_SCRIPT,
                &[key.as_str()],
                &args,
                false,
                Instant::now(),
            )
            .await?;
        parsed(&held)
    }
}

/// The record as the script returned it: eight decimal numbers, each within `u64`, the
/// durations within what a valid quota holds and the ends' time left within
/// [`MOST_LEFT_MICROS`].
fn parsed(after: &[String]) -> Result<Horizon, Error> {
    let unexpected = || Error::UnexpectedState {
        message: format!("the reload horizon is not a record: {after:?}"),
    };
    let number = |i: usize, most: u64| {
        (after.get(i).and_then(|text| text.parse::<u64>().ok()))
            .filter(|&n| n <= most)
            .ok_or_else(unexpected)
    };
    if after.len() != 8 {
        return Err(unexpected());
    }
    let penalty = |i: usize| -> Result<Penalty, Error> {
        Ok(Penalty {
            left: number(i, MOST_LEFT_MICROS)? * 1_000,
            by: number(i + 1, u64::MAX)?,
        })
    };
    let (bound, other) = (penalty(2)?, penalty(6)?);
    // The second bound is at most the first, and another service's.
    if other.left > bound.left || (other.left > 0 && other.by == bound.by) {
        return Err(unexpected());
    }
    Ok(Horizon {
        outlasts: number(0, MOST_OUTLASTS)?,
        window: number(1, MOST_WINDOW)?,
        penalty_bound: bound,
        penalty_end: penalty(4)?,
        penalty_other: other,
        keep_nanos: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::{parsed, MOST_OUTLASTS};

    #[test]
    fn a_record_past_u64_or_short_is_unexpected_state() {
        let of = |v: &[&str]| parsed(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let read = of(&["1", "2", "3", "4", "5", "6", "0", "0"]).unwrap();
        assert_eq!((read.penalty_bound.left, read.penalty_end.by), (3_000, 6));
        let read = of(&["1", "2", "9", "4", "5", "6", "7", "8"]).unwrap();
        assert_eq!((read.penalty_other.left, read.penalty_other.by), (7_000, 8));
        let most = MOST_OUTLASTS.to_string();
        assert!(of(&[&most, "0", "0", "0", "0", "0", "0", "0"]).is_ok());
        let past = (MOST_OUTLASTS + 1).to_string();
        for bad in [
            &["18446744073709551616", "0", "0", "0", "0", "0", "0", "0"][..],
            &[&past, "0", "0", "0", "0", "0", "0", "0"],
            &["0", "31622400000000001", "0", "0", "0", "0", "0", "0"],
            &["0", "0", "4611686018427388", "1", "0", "0", "0", "0"],
            &["0", "0", "0", "0", "0", "0", "4611686018427388", "1"],
            &["0", "0", "0", "0", "0", "0", "0", "18446744073709551616"],
            &["1", "2", "3", "4", "5", "6", "7"],
            &["1", "2", "3", "4", "5", "6"],
            &["x", "0", "0", "0", "0", "0", "0", "0"],
            &["0", "0", "3", "4", "0", "0", "7", "8"],
            &["0", "0", "7", "4", "0", "0", "3", "4"],
        ] {
            assert!(
                matches!(of(bad), Err(crate::Error::UnexpectedState { .. })),
                "{bad:?}"
            );
        }
    }
}
