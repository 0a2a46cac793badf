//! Redis' eviction policy. Under an `allkeys-*` policy a full Redis evicts limiter keys like
//! cache entries: their counts are lost and calls admitted above the limit. The store asks
//! once, on its first connection (`CONFIG GET maxmemory-policy`, where Redis allows it), warns,
//! and with [`RedisOptions::require_noeviction`](super::RedisOptions::require_noeviction)
//! refuses every call.

use std::sync::OnceLock;

use redis::aio::ConnectionLike;

use crate::Error;

/// What the store learnt of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Policy {
    /// `CONFIG GET maxmemory-policy` answered this.
    Known(String),
    /// Redis would not say (managed services often forbid `CONFIG`).
    Unknown,
}

impl Policy {
    /// Reads a `CONFIG GET maxmemory-policy` reply: `["maxmemory-policy", <policy>]`.
    pub(super) fn from_reply(reply: &[String]) -> Policy {
        match reply {
            [name, policy] if name == "maxmemory-policy" => Policy::Known(policy.clone()),
            _ => Policy::Unknown,
        }
    }

    /// The policy's name, when it lets Redis evict keys that have no expiry too, limiter keys
    /// among them, whatever else is stored.
    fn evicting(&self) -> Option<&str> {
        match self {
            Policy::Known(p) if p.starts_with("allkeys-") => Some(p),
            _ => None,
        }
    }

    /// Logs what the policy means for the limits, once, when the store first learns it.
    pub(super) fn report(&self, required: bool) {
        if let Some(policy) = self.evicting() {
            tracing::warn!(
                target: "ratelimit",
                policy,
                refused = required,
                "Redis evicts keys under maxmemory-policy {policy}: when it is full, rate limits \
                 can be lost and calls admitted above them; set maxmemory-policy to noeviction \
                 (or a volatile-* policy, if other keys with an expiry can go first: limiter \
                 keys have one)",
            );
        } else if required && *self == Policy::Unknown {
            tracing::warn!(
                target: "ratelimit",
                "require_noeviction is set but Redis does not answer CONFIG GET \
                 maxmemory-policy: the eviction policy cannot be checked",
            );
        }
    }

    /// The error every call gets when `noeviction` is required and Redis may evict.
    pub(super) fn refusal(&self, required: bool) -> Option<Error> {
        if !required {
            return None; // asked for every call: no look at the policy's name unless needed
        }
        let policy = self.evicting()?;
        Some(Error::Store {
            message: format!(
                "Redis evicts keys under maxmemory-policy {policy} (limits could be lost), and \
                 require_noeviction is set: set maxmemory-policy to noeviction"
            ),
        })
    }
}

/// Refuses, when `noeviction` is `required`, if Redis may evict limiter keys. Asks Redis
/// once, into `known`: until it has answered (or said it will not), at the cost of one round
/// trip (boxed: the first calls only, and every later call's future is the smaller for it).
pub(super) async fn check(
    known: &OnceLock<Policy>,
    required: bool,
    connection: &mut impl ConnectionLike,
) -> Result<(), Error> {
    match checked(known, required) {
        Some(checked) => checked,
        None => match Box::pin(ask(known, required, connection)).await {
            Some(_) => checked(known, required).unwrap_or(Ok(())),
            // Unreachable: ask again on the next call (which fails on its own).
            None => Ok(()),
        },
    }
}

/// [`check`] without a round trip: `None` until Redis has told its policy.
#[inline]
pub(super) fn checked(known: &OnceLock<Policy>, required: bool) -> Option<Result<(), Error>> {
    let policy = known.get()?;
    Some(match policy.refusal(required) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    })
}

/// `CONFIG GET maxmemory-policy`, kept in `known` (and reported) once; `None` when Redis could
/// not be reached.
async fn ask<'a>(
    known: &'a OnceLock<Policy>,
    required: bool,
    connection: &mut impl ConnectionLike,
) -> Option<&'a Policy> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let reply: Result<Vec<String>, _> = cmd.query_async(connection).await;
    let policy = match reply {
        Ok(reply) => Policy::from_reply(&reply),
        Err(e)
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal() =>
        {
            return None;
        }
        // CONFIG refused (managed Redis) or answered oddly: cannot tell.
        Err(_) => Policy::Unknown,
    };
    if known.set(policy.clone()).is_ok() {
        policy.report(required);
    }
    known.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allkeys_policies_are_refused() {
        let reply = |p: &str| Policy::from_reply(&["maxmemory-policy".into(), p.into()]);
        let refusal = reply("allkeys-lru").refusal(true).unwrap();
        assert!(refusal.to_string().contains("allkeys-lru"), "{refusal}");
        assert!(reply("allkeys-random").refusal(true).is_some());
        assert!(reply("allkeys-lru").refusal(false).is_none());
        for fine in ["noeviction", "volatile-lru", "volatile-ttl"] {
            assert!(reply(fine).refusal(true).is_none(), "{fine}");
        }
        assert_eq!(Policy::from_reply(&[]), Policy::Unknown);
        assert!(Policy::Unknown.refusal(true).is_none());
    }
}
