//! The store key's encoding: read back as documented, no two tuples on one key.

use super::*;
use crate::syntax::Strategy;
use std::time::Duration;

/// (prefix, identity, budget, tier, user key).
type Tuple = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The parts read back from a key, following the grammar in the module docs.
fn decode(key: &str) -> Option<Tuple> {
    let open = key.find('{')?;
    let prefix = key[..open].strip_suffix(':')?.to_owned();
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    let tag = &rest[..close];
    let mut rest = &rest[close + 1..];
    let colon = rest.find(':')?;
    let identity = rest[..colon].to_owned();
    rest = &rest[colon..];
    let mut parts = Vec::new();
    for _ in 0..2 {
        rest = rest.strip_prefix(':')?;
        if let Some(r) = rest.strip_prefix('-') {
            parts.push(None);
            rest = r;
        } else {
            let colon = rest.find(':')?;
            let len: usize = rest[..colon].parse().ok()?;
            let text = rest.get(colon + 1..colon + 1 + len)?;
            parts.push(Some(text.to_owned()));
            rest = &rest[colon + 1 + len..];
        }
    }
    let user = if tag.is_empty() && rest.is_empty() {
        None
    } else if let Some(digest) = tag.strip_prefix('#').filter(|_| !rest.is_empty()) {
        let user = rest.strip_prefix(':')?;
        let mut hex = String::new();
        push_hex(&mut hex, fnv1a(user.as_bytes()));
        (hex == digest && user.contains(['{', '}']))
            .then(|| user.to_owned())?
            .into()
    } else if rest.is_empty() && !tag.is_empty() {
        Some(tag.to_owned())
    } else {
        return None;
    };
    Some((prefix, identity, parts[0].clone(), parts[1].clone(), user))
}

fn key(
    prefix: &str,
    budget: Option<&str>,
    tier: Option<&str>,
    user: Option<&str>,
    q: &Quota,
) -> String {
    let mut out = String::new();
    let (head, tier) = (head(prefix), tier.map(|t| name_part(Some(t))));
    let parts = KeyParts {
        head: &head,
        budget,
        tier: tier.as_deref(),
        key: user,
        identity: None,
    };
    compose(&mut out, &parts, q).unwrap();
    out
}

#[test]
fn keys_read_as_documented() {
    let q = Quota::per_minute(5)
        .unwrap()
        .with_strategy(Strategy::TokenBucket);
    assert_eq!(
        key("ratelimit", Some("app::charge"), None, Some("user:42"), &q),
        "ratelimit:{user:42}T60000:11:app::charge:-"
    );
    assert_eq!(
        key("rl", None, Some("pro"), None, &q),
        "rl:{}T60000:-:3:pro"
    );
    let braced = key("rl", None, None, Some("a{b}"), &q);
    assert!(braced.starts_with("rl:{#"), "{braced}");
    assert!(braced.ends_with("}T60000:-:-:a{b}"), "{braced}");
}

/// No two different tuples give one key: every key decodes back to the tuple it was made
/// from, over the cases the issues found and a grid of awkward parts.
#[test]
fn no_two_tuples_share_a_key() {
    let quotas = [
        Quota::per_minute(5).unwrap(),
        Quota::per_minute(5)
            .unwrap()
            .with_strategy(Strategy::FixedWindow),
        Quota::per_second(5).unwrap(),
        Quota::new(5, Duration::from_nanos(1_500)).unwrap(),
    ];
    let prefixes = ["ratelimit", "a:b", "a"];
    let texts = [
        None,
        Some("-"),
        Some("b"),
        Some("a:b"),
        Some("1:x"),
        Some(":"),
        Some("x:-"),
        Some("{x}"),
        Some("}"),
        Some("#0000000000000000"),
    ];
    let users = [
        None,
        Some("-"),
        Some("k"),
        Some("a:b"),
        Some("{x}"),
        Some("x}"),
        Some("{"),
        Some("#00"),
        Some(":-"),
        Some("}T1m:-:-"),
    ];
    let mut seen = std::collections::HashMap::new();
    for q in &quotas {
        for prefix in prefixes {
            for budget in texts {
                for tier in texts {
                    for user in users {
                        let k = key(prefix, budget, tier, user, q);
                        let mut id = String::new();
                        q.identity(&mut id);
                        let tuple = (
                            prefix.to_owned(),
                            id,
                            budget.map(str::to_owned),
                            tier.map(str::to_owned),
                            user.map(str::to_owned),
                        );
                        assert_eq!(decode(&k).as_ref(), Some(&tuple), "{k}");
                        // A prepared site's key, written around the user key, and on
                        // the stack (moving to the heap when long): the same key.
                        let (head, tier) = (head(prefix), tier.map(|t| name_part(Some(t))));
                        let parts = KeyParts {
                            head: &head,
                            budget,
                            tier: tier.as_deref(),
                            key: None,
                            identity: None,
                        };
                        let mut around = KeyBuf::new();
                        let site = Around::new(&parts, q);
                        site.write(&mut around, user);
                        assert_eq!(&*around, k);
                        // A call without a user key takes the key written whole.
                        if user.is_none() {
                            assert_eq!(site.whole(), k);
                        }
                        if let Some(other) = seen.insert(k.clone(), tuple.clone()) {
                            assert_eq!(other, tuple, "{k}");
                        }
                    }
                }
            }
        }
    }
    assert!(seen.len() > 10_000);
    // Past the stack's room, the key moves to the heap whole.
    let long = "k".repeat(300);
    let mut out = KeyBuf::new();
    Around::new(
        &KeyParts {
            head: "p:{",
            budget: None,
            tier: None,
            key: None,
            identity: None,
        },
        &quotas[0],
    )
    .write(&mut out, Some(&long));
    assert!(out.is_heap());
    assert_eq!(&*out, key("p", None, None, Some(&long), &quotas[0]));
}

#[test]
fn user_keys_are_checked() {
    let q = Quota::per_minute(5).unwrap();
    let mut out = String::new();
    for bad in ["".to_owned(), "x".repeat(MAX_KEY_LEN + 1)] {
        let parts = KeyParts {
            head: "p:{",
            budget: None,
            tier: None,
            key: Some(&bad),
            identity: None,
        };
        assert!(matches!(
            compose(&mut out, &parts, &q),
            Err(Error::InvalidKey { .. })
        ));
    }
}
