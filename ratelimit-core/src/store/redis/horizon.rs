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
use crate::store::Horizon;

static HORIZON_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/horizon.lua")));

/// The record's key under `prefix`.
pub(crate) fn horizon_key(prefix: &str) -> String {
    format!("{prefix}:horizon")
}

impl RedisStore {
    /// Raises the record of `prefix` to at least `raise` and returns it as it was before.
    pub(super) async fn raise_horizon(
        &self,
        prefix: &str,
        raise: Horizon,
    ) -> Result<Horizon, Error> {
        let key = horizon_key(prefix);
        let keep = raise.keep_nanos.div_ceil(1_000_000);
        let args = [raise.outlasts, raise.window, raise.penalized_until, keep];
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

/// The record as the script returned it: three decimal numbers, each within `u64`.
fn parsed(after: &[String]) -> Result<Horizon, Error> {
    let number = |i: usize| {
        (after.get(i).and_then(|text| text.parse::<u64>().ok())).ok_or_else(|| {
            Error::UnexpectedState {
                message: format!("the reload horizon is not a record: {after:?}"),
            }
        })
    };
    if after.len() != 3 {
        return Err(Error::UnexpectedState {
            message: format!("the reload horizon is not a record: {after:?}"),
        });
    }
    Ok(Horizon {
        outlasts: number(0)?,
        window: number(1)?,
        penalized_until: number(2)?,
        keep_nanos: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::parsed;

    #[test]
    fn a_record_past_u64_or_short_is_unexpected_state() {
        let of = |v: &[&str]| parsed(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(of(&["1", "2", "3"]).unwrap().penalized_until, 3);
        for bad in [
            &["18446744073709551616", "0", "0"][..],
            &["1", "2"],
            &["x", "0", "0"],
        ] {
            assert!(
                matches!(of(bad), Err(crate::Error::UnexpectedState { .. })),
                "{bad:?}"
            );
        }
    }
}
