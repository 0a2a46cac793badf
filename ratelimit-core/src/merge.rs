//! The rate-limit headers added to a response that may already hold other limits' (stacked
//! limits, a layer around an annotated handler), in no framework's types: the one place they
//! are merged. Each adapter gives its header map through [`ResponseHeaders`].

use std::ops::Range;

use crate::decision::{names, Decision};

/// A rate-limit header field [`Decision::merge_headers`] reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderField {
    /// `RateLimit` (a list, one item per policy).
    RateLimit,
    /// `RateLimit-Policy` (a list, one item per policy).
    Policy,
    /// `X-RateLimit-Limit`.
    Limit,
    /// `X-RateLimit-Remaining`.
    Remaining,
    /// `X-RateLimit-Reset`.
    Reset,
    /// `Retry-After`.
    RetryAfter,
}

impl HeaderField {
    /// The field's name, lowercase.
    pub const fn name(self) -> &'static str {
        match self {
            HeaderField::RateLimit => names::RATELIMIT,
            HeaderField::Policy => names::POLICY,
            HeaderField::Limit => names::LIMIT,
            HeaderField::Remaining => names::REMAINING,
            HeaderField::Reset => names::RESET,
            HeaderField::RetryAfter => names::RETRY_AFTER,
        }
    }
}

/// A framework's response header map, as [`Decision::merge_headers`] needs it: implement it
/// (on a wrapper of your framework's map) to add the rate-limit headers in a new adapter.
pub trait ResponseHeaders {
    /// The value of `field` already in the map (its first line), if any.
    fn value(&self, field: HeaderField) -> Option<&[u8]>;

    /// Sets each field to its value, `buf[range]`, replacing what the map held. Every value is
    /// written into the one `buf` (so a map whose values can share one buffer allocates once);
    /// each is printable ASCII.
    fn set(&mut self, buf: Vec<u8>, values: &[(HeaderField, Range<usize>)]);
}

impl Decision {
    /// Adds this decision's rate-limit headers to `headers`, without overwriting other limits'
    /// already there:
    ///
    /// - `RateLimit` and `RateLimit-Policy` are lists: this decision's item (named `policy`,
    ///   default: the tier, else `"default"`) is appended, so every policy is listed;
    /// - `X-RateLimit-Limit/Remaining/Reset` describe one limit, the most restrictive: this
    ///   decision's replace what is there only if it has fewer calls remaining (or as few, and
    ///   resets later);
    /// - `Retry-After`, on a refusal, is the longest wait asked for.
    ///
    /// Nothing is added for an [`unlimited`](Self::unlimited) decision.
    pub fn merge_headers<H: ResponseHeaders + ?Sized>(
        &self,
        headers: &mut H,
        policy: Option<&str>,
    ) {
        let Some(f) = self.header_fields(policy) else {
            return;
        };
        let mut buf = Vec::with_capacity(2 * f.name.len() + 128);
        let mut list = |field: HeaderField, item: &dyn Fn(&mut Vec<u8>)| {
            let start = buf.len();
            if let Some(existing) = headers.value(field) {
                buf.extend_from_slice(existing);
                buf.extend_from_slice(b", ");
            }
            item(&mut buf);
            (field, start..buf.len())
        };
        let ratelimit = list(HeaderField::RateLimit, &|out| f.ratelimit_item(out));
        let policy = list(HeaderField::Policy, &|out| f.policy_item(out));
        let number = |field| number(headers.value(field));
        let more_restrictive = match number(HeaderField::Remaining) {
            None => true,
            Some(theirs) => {
                f.remaining < theirs
                    || (f.remaining == theirs && Some(f.reset) > number(HeaderField::Reset))
            }
        };
        let retry = f
            .retry_after
            .filter(|&retry| number(HeaderField::RetryAfter) < Some(retry));
        let mut values = arrayvec::ArrayVec::<(HeaderField, Range<usize>), 6>::new();
        values.push(ratelimit);
        values.push(policy);
        let mut push_number = |field: HeaderField, n: u64| {
            let start = buf.len();
            buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            values.push((field, start..buf.len()));
        };
        if more_restrictive {
            push_number(HeaderField::Limit, f.limit);
            push_number(HeaderField::Remaining, f.remaining);
            push_number(HeaderField::Reset, f.reset);
        }
        if let Some(retry) = retry {
            push_number(HeaderField::RetryAfter, retry);
        }
        headers.set(buf, &values);
    }
}

/// A header's value as a number, if it is one.
fn number(value: Option<&[u8]>) -> Option<u64> {
    std::str::from_utf8(value?).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Clock, ManualClock, MemoryStore, Quota};

    /// A plain list of fields, as the simplest adapter would keep them.
    #[derive(Default)]
    struct Fields(Vec<(HeaderField, Vec<u8>)>);

    impl ResponseHeaders for Fields {
        fn value(&self, field: HeaderField) -> Option<&[u8]> {
            self.0
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, v)| &v[..])
        }
        fn set(&mut self, buf: Vec<u8>, values: &[(HeaderField, Range<usize>)]) {
            for (field, range) in values {
                self.0.retain(|(f, _)| f != field);
                self.0.push((*field, buf[range.clone()].to_vec()));
            }
        }
    }

    #[test]
    fn stacked_decisions_list_every_policy_and_describe_the_most_restrictive() {
        let clock = ManualClock::new(Duration::from_secs(60));
        let store = MemoryStore::new();
        // A key each: one key asked under two windows is refused under the other while the
        // first counts (`algorithm::written_elsewhere`).
        let burst = store
            .acquire("k:burst", &Quota::per_second(2).unwrap(), 1, clock.now())
            .unwrap();
        let hourly = store
            .acquire("k:hourly", &Quota::per_hour(100).unwrap(), 1, clock.now())
            .unwrap();
        let mut fields = Fields::default();
        hourly.merge_headers(&mut fields, Some("hourly"));
        burst.merge_headers(&mut fields, Some("burst"));
        let text = |field| String::from_utf8(fields.value(field).unwrap().to_vec()).unwrap();
        assert_eq!(
            text(HeaderField::Policy),
            "\"hourly\";q=100;w=3600, \"burst\";q=2;w=1"
        );
        assert_eq!(text(HeaderField::Remaining), "1");
        assert_eq!(text(HeaderField::Limit), "2");
        assert!(fields.value(HeaderField::RetryAfter).is_none());
    }
}
